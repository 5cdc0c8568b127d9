//! `onceflow consume`: records to stdout.

use super::error::{CliError, Result};
use super::props::Conn;
use super::schema::{Decoders, RegistryArgs, Serdes};
use bytes::Bytes;
use onceflow::client::group::GroupConsumer;
use onceflow::client::{Consumer, ConsumerRecord, Offset, TopicPartition};
use serde_json::value::RawValue;
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
    #[command(flatten)]
    conn: Conn,
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
    /// Consume as a member of this consumer group: partitions come from the group, reading
    /// starts at the group's committed offsets (-o applies where there is none), and positions
    /// are committed on exit.
    #[arg(short = 'G', long = "group")]
    group: Option<String>,
    /// Decode keys and/or values from the schema registry's wire format: value=FORMAT,
    /// key=FORMAT, or FORMAT for both; FORMAT is avro (printed in the Avro JSON encoding),
    /// protobuf (the proto3 JSON mapping) or json-schema. Needs -r. Repeatable.
    #[arg(short = 's', long = "serde", value_name = "[key=|value=]FORMAT")]
    serdes: Vec<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

fn parse_offset(s: &str) -> Result<Offset> {
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

fn bad_offset(s: &str) -> CliError {
    CliError::Usage(format!(
        "invalid offset '{s}' for -o: use beginning, end, a non-negative offset, or @TIMESTAMP_MS"
    ))
}

/// The group's auto.offset.reset for `-o`: a member starts where the group committed, and
/// only where nothing is committed at the beginning or the end.
fn group_reset(start: Offset) -> Result<&'static str> {
    match start {
        Offset::Beginning => Ok("earliest"),
        Offset::End => Ok("latest"),
        Offset::At(_) | Offset::Timestamp(_) => Err(CliError::Usage(
            "with -G, -o must be beginning or end (where to start without a committed offset)"
                .into(),
        )),
    }
}

/// Where records come from: manual assignment, or a consumer group.
enum Source {
    Assigned(Consumer),
    Group(Box<GroupConsumer>),
}

impl Source {
    async fn poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        Ok(match self {
            Source::Assigned(c) => c.poll(Duration::from_millis(500)).await?,
            Source::Group(g) => g.poll(Duration::from_millis(500)).await?,
        })
    }

    fn at_end(&self) -> bool {
        match self {
            Source::Assigned(c) => c.at_end(),
            Source::Group(g) => !g.assignment().is_empty() && g.consumer().at_end(),
        }
    }

    /// A group member commits what was printed (it is consumed), then leaves the group.
    async fn finish(self) -> Result<()> {
        if let Source::Group(mut g) = self {
            g.commit_positions().await?;
            g.close().await?;
        }
        Ok(())
    }
}

pub async fn run(args: Args) -> Result<ExitCode> {
    let start = parse_offset(&args.offset)?;
    let serdes = Serdes::parse(&args.serdes)?;
    let registry = args
        .registry
        .registry(&args.conn, serdes.needs_registry())?;
    let decoders = Decoders::new(&serdes, registry.as_ref());
    let args = Args {
        conn: args.conn.without_registry_properties()?,
        ..args
    };
    let mut source = match &args.group {
        Some(group) => Source::Group(Box::new(join_group(&args, group, start).await?)),
        None => Source::Assigned(assign(&args, start).await?),
    };
    print_records(&mut source, &args, &decoders).await?;
    source.finish().await?;
    Ok(ExitCode::SUCCESS)
}

/// A group member subscribed to the topic; the group assigns the partitions at the first poll.
async fn join_group(args: &Args, group: &str, start: Offset) -> Result<GroupConsumer> {
    if !args.partitions.is_empty() {
        return Err(CliError::Usage(
            "-p cannot be combined with -G: the group assigns the partitions".into(),
        ));
    }
    let reset = group_reset(start)?;
    let config = args.conn.consumer(&[
        format!("group.id={group}"),
        format!("auto.offset.reset={reset}"),
    ])?;
    let mut g = GroupConsumer::new(config).await?;
    // Fail fast on a missing topic rather than wait in the group for partitions that never
    // come. The member's own consumer looks it up, as it will when assigned: the broker may
    // create it, per allow.auto.create.topics.
    g.consumer().partitions_for(&args.topic).await?;
    g.subscribe(&[args.topic.as_str()]);
    Ok(g)
}

/// A consumer assigned -p (or every partition of the topic), each sought to `start`.
async fn assign(args: &Args, start: Offset) -> Result<Consumer> {
    let mut consumer = Consumer::new(args.conn.consumer(&[])?).await?;
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
    Ok(consumer)
}

/// One line per record on stdout until -c records, the end with -e, or stdout closes. A
/// record `-s` cannot decode stops the command, naming it (after the records before it).
async fn print_records(source: &mut Source, args: &Args, decoders: &Decoders) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut n = 0u64;
    'outer: loop {
        if args.count.is_some_and(|c| n >= c) {
            break;
        }
        let records = source.poll().await?;
        for r in &records {
            let kv = match decoders.decode(r, bytes_json).await {
                Ok(kv) => kv,
                Err(e) => {
                    let _ = out.flush();
                    return Err(e);
                }
            };
            let text = line(r, args.format, kv, decoders.decodes_values());
            if writeln!(out, "{text}").is_err() {
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
    Ok(())
}

/// The line for a record whose key and value are already rendered as JSON (decoded, or the
/// raw bytes as [`bytes_json`] renders them). `--format value` prints a decoded value as
/// JSON and a raw one as its text.
fn line(
    r: &ConsumerRecord,
    format: Format,
    (key, value): (Box<RawValue>, Box<RawValue>),
    decoded_value: bool,
) -> String {
    match format {
        Format::Json => json_line(r, &key, &value),
        Format::Value if decoded_value => value.get().to_owned(),
        Format::Value => {
            String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
        }
    }
}

fn bytes_json(b: &Option<Bytes>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => serde_json::Value::String(s.to_owned()),
            Err(_) => {
                serde_json::json!({ "base64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b) })
            }
        },
    }
}

/// One record as a JSON object, with its key and value as given: decoded values, or strings
/// when they are UTF-8, otherwise `{"base64": "..."}`; null stays null.
fn json_line(r: &ConsumerRecord, key: &RawValue, value: &RawValue) -> String {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        topic: &'a str,
        partition: i32,
        offset: i64,
        timestamp: i64,
        key: &'a RawValue,
        value: &'a RawValue,
        headers: Vec<serde_json::Value>,
    }
    let headers: Vec<serde_json::Value> = r
        .headers
        .iter()
        .map(|h| serde_json::json!({"key": String::from_utf8_lossy(&h.key), "value": bytes_json(&h.value)}))
        .collect();
    let line = Line {
        topic: &r.topic,
        partition: r.partition,
        offset: r.offset,
        timestamp: r.timestamp,
        key,
        value,
        headers,
    };
    serde_json::to_string(&line).unwrap_or_default()
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

    #[test]
    fn a_group_starts_without_a_committed_offset_only_at_an_end() {
        assert_eq!(group_reset(Offset::Beginning).unwrap(), "earliest");
        assert_eq!(group_reset(Offset::End).unwrap(), "latest");
        for o in [Offset::At(3), Offset::Timestamp(1)] {
            let e = group_reset(o).unwrap_err().to_string();
            assert!(e.contains("-o must be beginning or end"), "{e}");
        }
    }
}
