//! `onceflow demo`: produce a taxi-ride data set to a fresh topic, read it back, check every
//! record arrived exactly once, print throughput.

use super::props;
use bytes::Bytes;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, Consumer, Error, Producer, ProducerRecord};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The data set: 1,000 synthetic rides in the shape of NYC TLC yellow-cab trip records, with a
/// few dirty rows (zero passengers, negative fares, zero coordinates) for cleaning pipelines.
const RIDES: &str = include_str!("../../fixtures/nyc-taxi-rides.csv");

#[derive(clap::Args)]
pub struct Args {
    /// Bootstrap broker(s).
    #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
    broker: String,
    /// How many records to produce (the data set is repeated to reach it).
    #[arg(short = 'n', long, default_value_t = 200_000)]
    records: usize,
    /// Partitions of the demo topic.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Keep the demo topic instead of deleting it afterwards.
    #[arg(long)]
    keep_topic: bool,
    /// A producer or consumer property, key=value (applied to both where it is known).
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    props: Vec<String>,
}

pub async fn run(args: Args) -> Result<ExitCode, Error> {
    let rides: Vec<&str> = RIDES.lines().skip(1).filter(|l| !l.is_empty()).collect();
    let admin = Admin::new(props::client(&args.broker, &[])?).await?;
    let topic = format!(
        "onceflow-demo-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    admin
        .create_topics(&[NewTopic::new(topic.clone(), args.partitions)])
        .await?;
    eprintln!(
        "demo: topic {topic} ({} partitions); producing {} taxi rides (acks=all)",
        args.partitions, args.records
    );

    let producer = Producer::new(props::producer(&args.broker, &args.props)?).await?;
    let start = Instant::now();
    let mut bytes = 0usize;
    let mut pending = Vec::with_capacity(args.records);
    for i in 0..args.records {
        let ride = rides[i % rides.len()];
        let value = format!("{i},{ride}");
        bytes += value.len();
        let record = ProducerRecord::new(topic.clone(), Bytes::from(value))
            .with_key(Bytes::from(format!("ride-{i}")));
        pending.push(producer.send(record).await?);
    }
    producer.flush().await?;
    for f in pending {
        f.await?;
    }
    let produce_secs = start.elapsed().as_secs_f64();
    eprintln!(
        "demo: produced {} records, {:.1} MB in {produce_secs:.2}s: {:.0} records/s, {:.1} MB/s",
        args.records,
        bytes as f64 / 1e6,
        args.records as f64 / produce_secs,
        bytes as f64 / 1e6 / produce_secs
    );

    let mut consumer = Consumer::new(props::consumer(&args.broker, &[])?).await?;
    consumer.assign_topics(&[topic.as_str()]).await?;
    for tp in consumer.assignment() {
        consumer.seek(&tp, onceflow::client::Offset::Beginning)?;
    }
    let mut seen = vec![false; args.records];
    let mut count = 0usize;
    let mut duplicates = 0usize;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(120);
    while count < args.records && Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(500)).await? {
            let id = r
                .value
                .as_deref()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.split(',').next())
                .and_then(|v| v.parse::<usize>().ok());
            match id.and_then(|i| seen.get_mut(i)) {
                Some(s) if *s => duplicates += 1,
                Some(s) => {
                    *s = true;
                    count += 1;
                }
                None => {}
            }
        }
    }
    let consume_secs = start.elapsed().as_secs_f64();
    eprintln!(
        "demo: consumed {count} records in {consume_secs:.2}s: {:.0} records/s; duplicates: {duplicates}, missing: {}",
        count as f64 / consume_secs,
        args.records - count
    );
    if !args.keep_topic {
        admin.delete_topics(&[topic.as_str()]).await?;
    }
    if count == args.records && duplicates == 0 {
        println!(
            "demo ok: {} records produced and read back exactly once (produce {:.0}/s, consume {:.0}/s)",
            args.records,
            args.records as f64 / produce_secs,
            count as f64 / consume_secs
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "demo FAILED: {count} of {} records read back, {duplicates} duplicates",
            args.records
        );
        Ok(ExitCode::FAILURE)
    }
}
