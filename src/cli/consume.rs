//! `onceflow consume`: records to stdout.

use super::props;
use bytes::Bytes;
use onceflow::client::group::GroupConsumer;
use onceflow::client::{Consumer, ConsumerRecord, Error, Offset, TopicPartition};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// One JSON object per line (topic, partition, offset, timestamp, key, value, headers).
    Json,
    /// The value only, one per line.
    Value,
}

#[derive(clap::Args)]
pub struct Args {
    /// Bootstrap broker(s), host:port[,host:port...].
    #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
    broker: String,
    /// Topic to read.
    #[arg(short = 't', long)]
    topic: String,
    /// Partitions, comma-separated (default: all).
    #[arg(short = 'p', long, value_delimiter = ',')]
    partitions: Vec<i32>,
    /// Start: beginning, end, an offset, or @TIMESTAMP_MS.
    #[arg(short = 'o', long, default_value = "beginning")]
    offset: String,
    /// Exit once the end of every partition is reached.
    #[arg(short = 'e', long = "exit")]
    exit_at_end: bool,
    /// Exit after this many records.
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
    /// A consumer property, key=value (Kafka names, e.g. -X isolation.level=read_committed).
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    props: Vec<String>,
    /// Consume as a member of this consumer group: partitions come from the group, reading
    /// starts at the group's committed offsets (-o applies where there is none), and positions
    /// are committed on exit.
    #[arg(short = 'G', long = "group")]
    group: Option<String>,
}

fn parse_offset(s: &str) -> Result<Offset, Error> {
    match s {
        "beginning" | "earliest" => Ok(Offset::Beginning),
        "end" | "latest" => Ok(Offset::End),
        _ => {
            if let Some(ts) = s.strip_prefix('@') {
                return ts
                    .parse::<i64>()
                    .map(Offset::Timestamp)
                    .map_err(|_| bad_offset(s));
            }
            match s.parse::<i64>() {
                Ok(o) if o >= 0 => Ok(Offset::At(o)),
                _ => Err(bad_offset(s)),
            }
        }
    }
}

fn bad_offset(s: &str) -> Error {
    Error::Usage(format!(
        "invalid offset '{s}' for -o: use beginning, end, a non-negative offset, or @TIMESTAMP_MS"
    ))
}

/// Where records come from: manual assignment, or a consumer group.
enum Source {
    Assigned(Consumer),
    Group(Box<GroupConsumer>),
}

impl Source {
    async fn poll(&mut self) -> Result<Vec<ConsumerRecord>, Error> {
        match self {
            Source::Assigned(c) => c.poll(Duration::from_millis(500)).await,
            Source::Group(g) => g.poll(Duration::from_millis(500)).await,
        }
    }

    fn at_end(&self) -> bool {
        match self {
            Source::Assigned(c) => c.at_end(),
            Source::Group(g) => !g.assignment().is_empty() && g.consumer().at_end(),
        }
    }
}

pub async fn run(args: Args) -> Result<ExitCode, Error> {
    let start = parse_offset(&args.offset)?;
    let mut source = match &args.group {
        Some(group) => {
            if !args.partitions.is_empty() {
                return Err(Error::Usage(
                    "-p cannot be combined with -G: the group assigns the partitions".into(),
                ));
            }
            let reset = match start {
                Offset::Beginning => "earliest",
                Offset::End => "latest",
                _ => {
                    return Err(Error::Usage(
                        "with -G, -o must be beginning or end (where to start without a committed offset)".into(),
                    ))
                }
            };
            let mut props = vec![
                format!("group.id={group}"),
                format!("auto.offset.reset={reset}"),
            ];
            props.extend(args.props.iter().cloned());
            let config = props::consumer(&args.broker, &props)?;
            let lookup = config.topic_lookup();
            let mut g = GroupConsumer::new(config).await?;
            // Fail fast on a missing topic rather than waiting in the group (looked up as the
            // consumer does: the broker may create it, per allow.auto.create.topics).
            onceflow::client::Admin::new(props::client(&args.broker, &[])?)
                .await?
                .cluster()
                .topic_with(&args.topic, lookup)
                .await?;
            g.subscribe(&[args.topic.as_str()]);
            Source::Group(Box::new(g))
        }
        None => {
            let config = props::consumer(&args.broker, &args.props)?;
            let mut consumer = Consumer::new(config).await?;
            let tps: Vec<TopicPartition> = if args.partitions.is_empty() {
                consumer.assign_topics(&[args.topic.as_str()]).await?
            } else {
                let tps: Vec<_> = args
                    .partitions
                    .iter()
                    .map(|p| TopicPartition::new(args.topic.clone(), *p))
                    .collect();
                consumer.assign(tps.clone()).await?;
                tps
            };
            for tp in &tps {
                consumer.seek(tp, start)?;
            }
            Source::Assigned(consumer)
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut n = 0u64;
    'outer: loop {
        if args.count.is_some_and(|c| n >= c) {
            break;
        }
        let records = source.poll().await?;
        for r in &records {
            let line = match args.format {
                Format::Json => json_line(r),
                Format::Value => {
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
                }
            };
            if writeln!(out, "{line}").is_err() {
                break 'outer; // stdout closed (e.g. piped into head)
            }
            n += 1;
            if args.count.is_some_and(|c| n >= c) {
                break 'outer;
            }
        }
        if records.is_empty() && args.exit_at_end && source.at_end() {
            break;
        }
    }
    let _ = out.flush();
    if let Source::Group(mut g) = source {
        // What was printed is consumed: commit it, then leave the group.
        g.commit_positions().await?;
        g.close().await?;
    }
    Ok(ExitCode::SUCCESS)
}

fn bytes_json(b: &Option<Bytes>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => serde_json::Value::String(s.to_owned()),
            Err(_) => serde_json::json!({ "base64": onceflow::base64::encode(b) }),
        },
    }
}

/// One record as a JSON object. Keys and values are strings when they are UTF-8, otherwise
/// `{"base64": "..."}`; null stays null.
pub fn json_line(r: &ConsumerRecord) -> String {
    let headers: Vec<serde_json::Value> = r
        .headers
        .iter()
        .map(|h| serde_json::json!({"key": String::from_utf8_lossy(&h.key), "value": bytes_json(&h.value)}))
        .collect();
    serde_json::json!({
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": bytes_json(&r.key),
        "value": bytes_json(&r.value),
        "headers": headers,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_or_name_the_problem() {
        assert_eq!(parse_offset("beginning").unwrap(), Offset::Beginning);
        assert_eq!(parse_offset("42").unwrap(), Offset::At(42));
        assert_eq!(parse_offset("@1000").unwrap(), Offset::Timestamp(1000));
        let e = parse_offset("-5").unwrap_err().to_string();
        assert!(e.contains("'-5'"), "{e}");
        assert!(parse_offset("soon").is_err());
    }
}
