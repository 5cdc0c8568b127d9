//! `onceflow demo`: produce a taxi-ride data set to a fresh topic, read it back, check every
//! record arrived exactly once, print throughput.

use super::error::Result;
use super::props::Conn;
use bytes::Bytes;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, Consumer, Offset, Producer, ProducerRecord};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The data set: 1,000 synthetic rides in the shape of NYC TLC yellow-cab trip records, with a
/// few dirty rows (zero passengers, negative fares, zero coordinates) for cleaning pipelines.
const RIDES: &str = include_str!("../../fixtures/nyc-taxi-rides.csv");

/// How long reading back may take before the demo reports what is missing.
const READ_BACK_LIMIT: Duration = Duration::from_secs(120);

#[derive(clap::Args)]
pub struct Args {
    // -X properties apply to the producer only (see `run`).
    #[command(flatten)]
    conn: Conn,
    /// How many records to produce (the data set is repeated to reach it).
    #[arg(short = 'n', long, default_value_t = 200_000)]
    records: usize,
    /// Partitions of the demo topic.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Keep the demo topic instead of deleting it afterwards.
    #[arg(long)]
    keep_topic: bool,
}

pub async fn run(args: Args) -> Result<ExitCode> {
    // The admin and the consumer get the brokers only: -X is for the producer, and a producer
    // property would be unknown to them.
    let admin = Admin::new(args.conn.brokers_only().client()?).await?;
    let topic = create_topic(&admin, args.partitions).await?;
    eprintln!(
        "demo: topic {topic} ({} partitions); producing {} taxi rides (acks=all)",
        args.partitions, args.records
    );
    let produced = produce(&args.conn, &topic, args.records).await?;
    eprintln!(
        "demo: produced {} records, {:.1} MB in {:.2}s: {:.0} records/s, {:.1} MB/s",
        args.records,
        produced.bytes as f64 / 1e6,
        produced.secs,
        args.records as f64 / produced.secs,
        produced.bytes as f64 / 1e6 / produced.secs
    );
    let read = read_back(&args.conn.brokers_only(), &topic, args.records).await?;
    eprintln!(
        "demo: consumed {} records in {:.2}s: {:.0} records/s; duplicates: {}, missing: {}",
        read.count,
        read.secs,
        read.count as f64 / read.secs,
        read.duplicates,
        read.missing()
    );
    if !args.keep_topic {
        admin.delete_topics(&[topic.as_str()]).await?;
    }
    Ok(verdict(args.records, &produced, &read))
}

/// A fresh topic named after the current time.
async fn create_topic(admin: &Admin, partitions: i32) -> Result<String> {
    let topic = format!(
        "onceflow-demo-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    admin
        .create_topics(&[NewTopic::new(topic.clone(), partitions)])
        .await?;
    Ok(topic)
}

/// What producing took.
struct Produced {
    bytes: usize,
    secs: f64,
}

/// Sends `records` rides (value `ID,ride`, key `ride-ID`) and waits until every one is
/// acknowledged.
async fn produce(conn: &Conn, topic: &str, records: usize) -> Result<Produced> {
    let rides: Vec<&str> = RIDES.lines().skip(1).filter(|l| !l.is_empty()).collect();
    let producer = Producer::new(conn.producer(&[])?).await?;
    let start = Instant::now();
    let mut bytes = 0usize;
    let mut pending = Vec::with_capacity(records);
    for i in 0..records {
        let ride = rides[i % rides.len()];
        let value = format!("{i},{ride}");
        bytes += value.len();
        let record = ProducerRecord::new(topic.to_owned(), Bytes::from(value))
            .with_key(Bytes::from(format!("ride-{i}")));
        pending.push(producer.send(record).await?);
    }
    producer.flush().await?;
    for f in pending {
        f.await?;
    }
    Ok(Produced {
        bytes,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// Which of the produced records were read, and how often.
struct ReadBack {
    seen: Vec<bool>,
    count: usize,
    duplicates: usize,
    secs: f64,
}

impl ReadBack {
    fn new(records: usize) -> ReadBack {
        ReadBack {
            seen: vec![false; records],
            count: 0,
            duplicates: 0,
            secs: 0.0,
        }
    }

    /// Counts a record by the ride id its value starts with; a value that carries none, or
    /// one out of range, is not ours and is ignored.
    fn record(&mut self, value: Option<&[u8]>) {
        let id = value
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse::<usize>().ok());
        match id.and_then(|i| self.seen.get_mut(i)) {
            Some(s) if *s => self.duplicates += 1,
            Some(s) => {
                *s = true;
                self.count += 1;
            }
            None => {}
        }
    }

    fn missing(&self) -> usize {
        self.seen.len() - self.count
    }
}

/// Reads the topic from the beginning until every record was seen or [`READ_BACK_LIMIT`].
async fn read_back(conn: &Conn, topic: &str, records: usize) -> Result<ReadBack> {
    let mut consumer = Consumer::new(conn.consumer(&[])?).await?;
    consumer.assign_topics(&[topic]).await?;
    for tp in consumer.assignment() {
        consumer.seek(&tp, Offset::Beginning)?;
    }
    let mut read = ReadBack::new(records);
    let start = Instant::now();
    let deadline = start + READ_BACK_LIMIT;
    while read.count < records && Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(500)).await? {
            read.record(r.value.as_deref());
        }
    }
    read.secs = start.elapsed().as_secs_f64();
    Ok(read)
}

/// Prints the result line; success only when every record was read exactly once.
fn verdict(records: usize, produced: &Produced, read: &ReadBack) -> ExitCode {
    if read.count == records && read.duplicates == 0 {
        println!(
            "demo ok: {records} records produced and read back exactly once (produce {:.0}/s, consume {:.0}/s)",
            records as f64 / produced.secs,
            read.count as f64 / read.secs
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "demo FAILED: {} of {records} records read back, {} duplicates",
            read.count, read.duplicates
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_back_counts_each_ride_once_and_duplicates_apart() {
        let mut r = ReadBack::new(3);
        for v in [
            &b"0,a"[..],
            b"2,b",
            b"0,a",
            b"7,out of range",
            b"x,not ours",
            b"\xff",
        ] {
            r.record(Some(v));
        }
        r.record(None);
        assert_eq!((r.count, r.duplicates, r.missing()), (2, 1, 1));
        r.record(Some(b"1,c"));
        assert_eq!((r.count, r.duplicates, r.missing()), (3, 1, 0));
    }
}
