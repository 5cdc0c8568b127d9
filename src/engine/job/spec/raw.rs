//! The job file's serde shape (`Raw*`, `deny_unknown_fields` everywhere), and the
//! deserializers of its brokers list and durations.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use toml::Spanned;

use crate::engine::job::filter::CmpOp;
use crate::engine::job::path::FieldPath;

use super::model::{DeliveryGuarantee, StartPosition};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) name: Spanned<String>,
    pub(super) source: Spanned<RawSource>,
    #[serde(default)]
    pub(super) pipeline: Vec<Spanned<RawStage>>,
    pub(super) sink: Spanned<RawSink>,
    #[serde(default)]
    pub(super) settings: RawSettings,
    pub(super) registry: Option<Spanned<toml::Table>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    #[serde(rename = "type", default)]
    pub(super) kind: EndKind,
    pub(super) brokers: Option<Spanned<Brokers>>,
    pub(super) topics: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) path: Option<Spanned<String>>,
    pub(super) format: Option<Spanned<String>>,
    pub(super) serving_speed_factor: Option<Spanned<f64>>,
    pub(super) max_delay_s: Option<Spanned<u64>>,
    pub(super) group: Option<RawGroup>,
    pub(super) partition: Option<RawPartition>,
    #[serde(default)]
    pub(super) start: StartPosition,
    pub(super) columns: Option<Spanned<Vec<Spanned<RawColumn>>>>,
    pub(super) header: Option<Spanned<bool>>,
    pub(super) delimiter: Option<Spanned<String>>,
    pub(super) time: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
}

/// One of `source.columns` (a CSV file's).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawColumn {
    pub(super) name: String,
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) format: Option<String>,
    #[serde(rename = "true")]
    pub(super) true_text: Option<String>,
    #[serde(rename = "false")]
    pub(super) false_text: Option<String>,
    pub(super) default: Option<toml::Value>,
    #[serde(default)]
    pub(super) skip: bool,
}

/// `group.id`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    pub(super) id: Spanned<String>,
}

/// `partition.discovery.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPartition {
    pub(super) discovery: RawMs,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawStage {
    Filter(Spanned<RawPred>),
    Project(Spanned<RawProject>),
    KeyBy(Spanned<FieldPath>),
    Window(Spanned<RawWindow>),
    Aggregate(Spanned<BTreeMap<String, Spanned<RawAgg>>>),
    Join(Box<Spanned<RawJoin>>),
    Top(Spanned<RawTopStage>),
}

/// `top = { n = 3, by = "tips", rank = "rank" }` after a window: its N best records, a row each.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopStage {
    pub(super) n: Spanned<i64>,
    pub(super) by: FieldPath,
    pub(super) rank: Option<Spanned<String>>,
}

/// `join.window`: a window join's windows.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJoinWindow {
    pub(super) tumbling: Option<Spanned<Duration>>,
    pub(super) sliding: Option<Spanned<RawSliding>>,
    pub(super) session: Option<Spanned<Duration>>,
}

/// `join`: an interval join (or a window join) of two topics.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJoin {
    pub(super) left: Spanned<RawJoinSide>,
    pub(super) right: Spanned<RawJoinSide>,
    pub(super) between: Option<Spanned<Vec<Spanned<SignedDuration>>>>,
    pub(super) window: Option<Spanned<RawJoinWindow>>,
    pub(super) out_of_orderness: Option<Duration>,
    pub(super) allowed_lateness: Option<Duration>,
    pub(super) late_topic: Option<Spanned<String>>,
}

/// `join.left` / `join.right`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJoinSide {
    pub(super) topic: Spanned<String>,
    #[serde(rename = "as")]
    pub(super) name: Option<Spanned<String>>,
    pub(super) key: FieldPath,
    pub(super) time: FieldPath,
    pub(super) filter: Option<Spanned<RawPred>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPred {
    pub(super) field: Option<FieldPath>,
    pub(super) op: Option<CmpOp>,
    pub(super) value: Option<Spanned<toml::Value>>,
    pub(super) and: Option<Spanned<Vec<Spanned<RawPred>>>>,
    pub(super) or: Option<Spanned<Vec<Spanned<RawPred>>>>,
    pub(super) not: Option<Box<Spanned<RawPred>>>,
    pub(super) within: Option<Spanned<RawWithin>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWithin {
    pub(super) lon: FieldPath,
    pub(super) lat: FieldPath,
    #[serde(rename = "box")]
    pub(super) bbox: Spanned<Vec<f64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProject {
    pub(super) keep: Option<Vec<FieldPath>>,
    #[serde(default)]
    pub(super) rename: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindow {
    pub(super) tumbling: Option<Spanned<Duration>>,
    pub(super) sliding: Option<Spanned<RawSliding>>,
    pub(super) session: Option<Spanned<Duration>>,
    pub(super) time: FieldPath,
    pub(super) out_of_orderness: Option<Duration>,
    pub(super) allowed_lateness: Option<Duration>,
    pub(super) late_topic: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSliding {
    pub(super) size: Spanned<Duration>,
    pub(super) slide: Spanned<Duration>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawAgg {
    Count,
    Sum(FieldPath),
    Min(FieldPath),
    Max(FieldPath),
    Avg(FieldPath),
    #[serde(rename = "count_distinct")]
    CountDistinct(FieldPath),
    Top(Spanned<RawTop>),
}

/// `aggregate.<name>.top = { n = 3, by = "tips", keep = ["driver_id", "tips"] }`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTop {
    pub(super) n: Spanned<i64>,
    pub(super) by: FieldPath,
    pub(super) keep: Spanned<Vec<FieldPath>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSink {
    #[serde(rename = "type", default)]
    pub(super) kind: EndKind,
    pub(super) topic: Option<Spanned<String>>,
    pub(super) brokers: Option<Spanned<Brokers>>,
    pub(super) path: Option<Spanned<String>>,
    pub(super) format: Option<Spanned<String>>,
    pub(super) schema: Option<Spanned<String>>,
    pub(super) codec: Option<Spanned<String>>,
    pub(super) columns: Option<Spanned<Vec<String>>>,
    pub(super) part: Option<RawPart>,
    pub(super) rolling: Option<RawRolling>,
    pub(super) delivery: Option<RawDelivery>,
    pub(super) transactional: Option<RawTransactional>,
}

/// `source.type` / `sink.type`.
#[derive(serde::Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum EndKind {
    #[default]
    Kafka,
    File,
}

/// `part.prefix`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPart {
    pub(super) prefix: Spanned<String>,
}

/// `rolling.size.bytes`, `rolling.interval.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRolling {
    pub(super) size: Option<RawSizeBytes>,
    pub(super) interval: Option<RawMs>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSizeBytes {
    pub(super) bytes: Spanned<u64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDelivery {
    pub(super) guarantee: DeliveryGuarantee,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTransactional {
    pub(super) id: RawTransactionalId,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTransactionalId {
    pub(super) prefix: Spanned<String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub(super) mode: Option<Spanned<String>>,
    pub(super) parallelism: Option<Spanned<u32>>,
    pub(super) key: Option<RawKeySettings>,
    pub(super) checkpoint: Option<RawCheckpoint>,
    pub(super) transaction: Option<RawTransaction>,
    pub(super) restart: Option<RawRestart>,
    pub(super) state: Option<RawState>,
    pub(super) errors: Option<RawErrors>,
}

/// `errors.tolerance`, `errors.deadletterqueue.topic.name`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawErrors {
    pub(super) tolerance: Option<Spanned<String>>,
    pub(super) deadletterqueue: Option<RawDeadLetterQueue>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeadLetterQueue {
    pub(super) topic: RawTopicName,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopicName {
    pub(super) name: Spanned<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeySettings {
    pub(super) groups: Spanned<u32>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheckpoint {
    pub(super) interval: Option<RawMs>,
    pub(super) timeout: Option<RawMs>,
    pub(super) min: Option<RawMinPause>,
    pub(super) tolerable: Option<RawTolerable>,
    pub(super) commit: Option<RawCommit>,
    pub(super) retained: Option<Spanned<u64>>,
}

/// `checkpoint.min.pause.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMinPause {
    pub(super) pause: RawMs,
}

/// `checkpoint.tolerable.failures`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTolerable {
    pub(super) failures: Spanned<u32>,
}

/// `checkpoint.commit.margin.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCommit {
    pub(super) margin: RawMs,
}

/// `restart.allowance.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRestart {
    pub(super) allowance: RawMs,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTransaction {
    pub(super) timeout: RawMs,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMs {
    pub(super) ms: Spanned<u64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawState {
    pub(super) dir: Option<Spanned<String>>,
    pub(super) cache: Option<RawBytes>,
    pub(super) memtable: Option<RawBytes>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBytes {
    pub(super) bytes: Spanned<u64>,
}

/// `"127.0.0.1:9092"`, `"a:9092,b:9092"` or `["a:9092", "b:9092"]`.
pub(super) struct Brokers(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for Brokers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Brokers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string like \"host:9092\" or \"a:9092,b:9092\", or an array of them")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Brokers, E> {
                Ok(Brokers(
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect(),
                ))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Brokers, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.extend(
                        s.split(',')
                            .map(|s| s.trim().to_owned())
                            .filter(|s| !s.is_empty()),
                    );
                }
                Ok(Brokers(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A duration written `"250ms"`, `"30s"`, `"15m"`, `"1h"` or `"1d"`; held in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Duration(pub(super) i64);

pub(super) const DURATION_HINT: &str = "a duration like \"1h\", \"15m\", \"30s\" or \"250ms\"";

pub(crate) fn parse_duration(text: &str) -> Option<i64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: i64 = n.parse().ok()?;
    let scale: i64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// A duration that may be negative (`"-1m"`), as a join's bounds are; in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SignedDuration(pub(super) i64);

impl<'de> Deserialize<'de> for SignedDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SignedDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{DURATION_HINT}, or one with a leading '-'")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SignedDuration, E> {
                let t = v.trim();
                let parsed = match t.strip_prefix('-') {
                    Some(rest) => parse_duration(rest).map(|ms| -ms),
                    None => parse_duration(t),
                };
                parsed.map(SignedDuration).ok_or_else(|| {
                    E::custom(format!(
                        "expected {DURATION_HINT}, or one with a leading '-' (\"-1m\"), got {v:?}"
                    ))
                })
            }
        }
        deserializer.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(DURATION_HINT)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse_duration(v)
                    .map(Duration)
                    .ok_or_else(|| E::custom(format!("expected {DURATION_HINT}, got {v:?}")))
            }
        }
        deserializer.deserialize_str(V)
    }
}
