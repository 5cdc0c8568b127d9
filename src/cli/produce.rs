//! `onceflow produce`: stdin lines to records.

use super::props;
use bytes::Bytes;
use onceflow::client::{DeliveryFuture, Error, Producer, ProducerRecord};
use std::process::ExitCode;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

#[derive(clap::Args)]
pub struct Args {
    /// Bootstrap broker(s), host:port[,host:port...].
    #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
    broker: String,
    /// Topic to write to.
    #[arg(short = 't', long)]
    topic: String,
    /// Partition (default: the partitioner decides).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// Key separator: each line is KEY<SEP>VALUE.
    #[arg(short = 'K', long = "key-delimiter")]
    key_delimiter: Option<String>,
    /// A producer property, key=value (Kafka names, e.g. -X linger.ms=10). Repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    props: Vec<String>,
}

pub async fn run(args: Args) -> Result<ExitCode, Error> {
    let config = props::producer(&args.broker, &args.props)?;
    if args.key_delimiter.as_deref() == Some("") {
        return Err(Error::InvalidState("-K needs a non-empty separator".into()));
    }
    let producer = Producer::new(config).await?;
    // Fail fast on a missing topic, before reading stdin.
    producer.cluster().topic(&args.topic).await?;
    let (tx, mut rx) = mpsc::channel::<DeliveryFuture>(100_000);
    let checker = tokio::spawn(async move {
        let (mut ok, mut failed, mut first_error) = (0u64, 0u64, None);
        while let Some(f) = rx.recv().await {
            match f.await {
                Ok(_) => ok += 1,
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        (ok, failed, first_error)
    });
    let start = Instant::now();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut send_error = None;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                send_error = Some(format!("reading stdin: {e}"));
                break;
            }
        };
        let mut record = match &args.key_delimiter {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => ProducerRecord::new(args.topic.clone(), Bytes::from(v.to_owned()))
                    .with_key(Bytes::from(k.to_owned())),
                None => ProducerRecord::new(args.topic.clone(), Bytes::from(line)),
            },
            None => ProducerRecord::new(args.topic.clone(), Bytes::from(line)),
        };
        record.partition = args.partition;
        match producer.send(record).await {
            Ok(f) => {
                if tx.send(f).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                send_error = Some(e.to_string());
                break;
            }
        }
    }
    drop(tx);
    producer.flush().await?;
    let (ok, failed, first_error) = checker
        .await
        .map_err(|e| Error::InvalidState(format!("delivery checker failed: {e}")))?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "onceflow: produced {ok} record(s) to {} in {secs:.2}s ({:.0} records/s); {failed} failed",
        args.topic,
        ok as f64 / secs.max(1e-9)
    );
    if let Some(e) = send_error.or(first_error) {
        eprintln!("onceflow: error: {e}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
