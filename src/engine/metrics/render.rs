//! A [`Snapshot`] in the Prometheus text exposition format (version 0.0.4): per metric family
//! a `# HELP` and a `# TYPE` line, then its samples; names carry the `onceflow_` prefix and
//! their unit (`_seconds`, `_bytes`, `_total` for counters).

use std::fmt::Write as _;

use super::{HistogramSnapshot, Snapshot};

const PREFIX: &str = "onceflow_";

/// The snapshot as a scrape answer's body.
pub fn render(s: &Snapshot) -> String {
    let mut w = Writer::default();
    for (name, kind, help, value) in records(s) {
        w.one(name, kind, help, value);
    }
    operators(&mut w, s);
    w.histogram(
        "checkpoint_duration_seconds",
        "Checkpoint duration: from barrier injection to completion.",
        &s.checkpoint_duration,
    );
    w.histogram(
        "checkpoint_alignment_seconds",
        "Barrier alignment: from barrier injection until every task acknowledged it.",
        &s.checkpoint_alignment,
    );
    for (name, kind, help, value) in checkpoints(s).into_iter().chain(transactions(s)) {
        w.one(name, kind, help, value);
    }
    lag(&mut w, s);
    w.out
}

/// A family of one sample: name (without the prefix), type, help, value.
type One = (&'static str, &'static str, &'static str, Num);

fn records(s: &Snapshot) -> [One; 5] {
    [
        (
            "source_records_total",
            "counter",
            "Records taken from the source topics.",
            Num::U(s.records_in),
        ),
        (
            "sink_records_total",
            "counter",
            "Records handed to the sink (written into its open transaction).",
            Num::U(s.records_out),
        ),
        (
            "late_records_total",
            "counter",
            "Records a window took after their windows fired and their allowed lateness passed: left out of the aggregate (and written to the late topic, if any).",
            Num::U(s.late_records),
        ),
        (
            "skipped_records_total",
            "counter",
            "Input records the job could not process (not in the source's format, a tombstone, a key or event time missing), left out by errors.tolerance = \"skip\"; each is logged with its topic, partition and offset.",
            Num::U(s.skipped_records),
        ),
        (
            "dead_lettered_records_total",
            "counter",
            "Input records the job could not process, written to the dead-letter topic (errors.tolerance = \"dead-letter\") in the checkpoint's transaction.",
            Num::U(s.dead_lettered_records),
        ),
    ]
}

fn checkpoints(s: &Snapshot) -> [One; 7] {
    let completed = "Checkpoints completed (durable in the state store).";
    let failed = "Checkpoints cancelled (declined, timed out) or whose write failed.";
    let last_id = "The id of the latest checkpoint completed by this run (0: none yet).";
    let last_duration = "The duration of the latest completed checkpoint.";
    let last_size = "Bytes the latest checkpoint wrote to the state store.";
    let persisted = "Bytes written to the state store by checkpoints.";
    let replayed = "Input records this run reads again because it restored a checkpoint older than the latest (--from-checkpoint): the output the later checkpoints committed is written again.";
    [
        (
            "checkpoints_completed_total",
            "counter",
            completed,
            Num::U(s.checkpoints_completed),
        ),
        (
            "checkpoints_failed_total",
            "counter",
            failed,
            Num::U(s.checkpoints_failed),
        ),
        (
            "checkpoint_last_id",
            "gauge",
            last_id,
            Num::U(s.last_checkpoint),
        ),
        (
            "checkpoint_last_duration_seconds",
            "gauge",
            last_duration,
            Num::F(s.last_checkpoint_duration_seconds),
        ),
        (
            "checkpoint_last_size_bytes",
            "gauge",
            last_size,
            Num::U(s.last_checkpoint_size_bytes),
        ),
        (
            "checkpoint_persisted_bytes_total",
            "counter",
            persisted,
            Num::U(s.persisted_bytes),
        ),
        (
            "checkpoint_restore_replayed_records",
            "gauge",
            replayed,
            Num::U(s.replayed_records),
        ),
    ]
}

fn transactions(s: &Snapshot) -> [One; 4] {
    let commits = "Sink transactions committed (restored ones included).";
    let aborts = "Sink transactions aborted: lingering ones at recovery, and a lost one that stopped the run.";
    let fencings = "Times another producer fenced one of this job's transactional ids.";
    let age = "Age of the oldest open or prepared sink transaction (0: none); alert well before transaction.timeout.ms.";
    [
        ("sink_commits_total", "counter", commits, Num::U(s.commits)),
        ("sink_aborts_total", "counter", aborts, Num::U(s.aborts)),
        (
            "sink_fencings_total",
            "counter",
            fencings,
            Num::U(s.fencings),
        ),
        (
            "sink_oldest_open_transaction_age_seconds",
            "gauge",
            age,
            Num::F(s.oldest_open_transaction_age_seconds),
        ),
    ]
}

fn operators(w: &mut Writer, s: &Snapshot) {
    for (name, help, out) in [
        (
            "operator_records_in_total",
            "Records that reached each operator of the pipeline.",
            false,
        ),
        (
            "operator_records_out_total",
            "Records each operator of the pipeline emitted.",
            true,
        ),
    ] {
        w.family(name, "counter", help);
        for op in &s.operators {
            let index = op.index.to_string();
            let labels = [("operator", op.kind.as_str()), ("index", index.as_str())];
            let value = if out { op.records_out } else { op.records_in };
            w.sample(name, &labels, value);
        }
    }
}

fn lag(w: &mut Writer, s: &Snapshot) {
    let name = "source_lag_records";
    w.family(
        name,
        "gauge",
        "Per source partition: its end (the LSO, read_committed) minus the job's position.",
    );
    for p in &s.source_lag {
        let partition = p.partition.to_string();
        let labels = [
            ("topic", p.topic.as_str()),
            ("partition", partition.as_str()),
        ];
        w.sample(name, &labels, Num::I(p.lag));
    }
}

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    U(u64),
    I(i64),
    F(f64),
}

impl From<u64> for Num {
    fn from(v: u64) -> Num {
        Num::U(v)
    }
}

/// A value as the format spells it (Go's float syntax: `+Inf`, `-Inf`, `NaN`).
fn number(v: Num) -> String {
    match v {
        Num::U(v) => v.to_string(),
        Num::I(v) => v.to_string(),
        Num::F(v) if v.is_nan() => "NaN".into(),
        Num::F(v) if v == f64::INFINITY => "+Inf".into(),
        Num::F(v) if v == f64::NEG_INFINITY => "-Inf".into(),
        Num::F(v) => v.to_string(),
    }
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[derive(Default)]
struct Writer {
    out: String,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {PREFIX}{name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {PREFIX}{name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<Num>) {
        let _ = write!(self.out, "{PREFIX}{name}");
        if !labels.is_empty() {
            let pairs: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            let _ = write!(self.out, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.out, " {}", number(value.into()));
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: impl Into<Num>) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &HistogramSnapshot) {
        self.family(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        for (le, count) in &h.buckets {
            self.sample(&bucket, &[("le", &number(Num::F(*le)))], *count);
        }
        self.sample(&bucket, &[("le", "+Inf")], h.count);
        self.sample(&format!("{name}_sum"), &[], Num::F(h.sum_seconds));
        self.sample(&format!("{name}_count"), &[], h.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::metrics::{OperatorSnapshot, PartitionLag};

    #[test]
    fn values_are_spelled_as_the_format_wants() {
        let cases = [
            (Num::U(0), "0"),
            (Num::U(u64::MAX), "18446744073709551615"),
            (Num::I(-3), "-3"),
            (Num::F(0.25), "0.25"),
            (Num::F(1.0), "1"),
            (Num::F(f64::INFINITY), "+Inf"),
            (Num::F(f64::NEG_INFINITY), "-Inf"),
            (Num::F(f64::NAN), "NaN"),
        ];
        for (v, want) in cases {
            assert_eq!(number(v), want, "{v:?}");
        }
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let cases = [
            ("rides", "rides"),
            ("a\"b", "a\\\"b"),
            ("back\\slash", "back\\\\slash"),
            ("two\nlines", "two\\nlines"),
            ("ünïcode", "ünïcode"),
        ];
        for (raw, want) in cases {
            assert_eq!(escape_label(raw), want, "{raw:?}");
        }
        assert_eq!(escape_help("a\\b\nc\"d"), "a\\\\b\\nc\"d");
    }

    fn snapshot() -> Snapshot {
        let mut s = Snapshot {
            records_in: 2000,
            records_out: 1500,
            checkpoints_completed: 3,
            last_checkpoint: 7,
            last_checkpoint_duration_seconds: 0.125,
            oldest_open_transaction_age_seconds: 1.5,
            ..Snapshot::default()
        };
        s.operators.push(OperatorSnapshot {
            index: 0,
            kind: "filter".into(),
            records_in: 2000,
            records_out: 1500,
        });
        s.source_lag.push(PartitionLag {
            topic: "ri\"des".into(),
            partition: 2,
            lag: 40,
        });
        s.checkpoint_duration.buckets = vec![(0.5, 1), (1.0, 3)];
        s.checkpoint_duration.count = 3;
        s.checkpoint_duration.sum_seconds = 1.75;
        s
    }

    #[test]
    fn a_snapshot_renders_the_samples_a_prometheus_user_relies_on() {
        let text = render(&snapshot());
        // (a line that must be in the output)
        let cases = [
            "# TYPE onceflow_source_records_total counter",
            "onceflow_source_records_total 2000",
            "onceflow_sink_records_total 1500",
            "onceflow_operator_records_in_total{operator=\"filter\",index=\"0\"} 2000",
            "onceflow_operator_records_out_total{operator=\"filter\",index=\"0\"} 1500",
            "onceflow_checkpoints_completed_total 3",
            "onceflow_checkpoints_failed_total 0",
            "# TYPE onceflow_checkpoint_duration_seconds histogram",
            "onceflow_checkpoint_duration_seconds_bucket{le=\"0.5\"} 1",
            "onceflow_checkpoint_duration_seconds_bucket{le=\"1\"} 3",
            "onceflow_checkpoint_duration_seconds_bucket{le=\"+Inf\"} 3",
            "onceflow_checkpoint_duration_seconds_sum 1.75",
            "onceflow_checkpoint_duration_seconds_count 3",
            "onceflow_checkpoint_alignment_seconds_count 0",
            "onceflow_checkpoint_last_id 7",
            "onceflow_checkpoint_last_duration_seconds 0.125",
            "onceflow_sink_oldest_open_transaction_age_seconds 1.5",
            "# TYPE onceflow_source_lag_records gauge",
            "onceflow_source_lag_records{topic=\"ri\\\"des\",partition=\"2\"} 40",
        ];
        let lines: Vec<&str> = text.lines().collect();
        for want in cases {
            assert!(lines.contains(&want), "missing {want:?} in:\n{text}");
        }
    }

    #[test]
    fn every_sample_follows_its_familys_help_and_type_and_carries_the_prefix() {
        let text = render(&snapshot());
        let mut family: Option<(String, String)> = None;
        let mut helped = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                helped = rest.split(' ').next().map(str::to_owned);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let name = parts.next().unwrap_or_default().to_owned();
                assert_eq!(
                    helped.as_deref(),
                    Some(name.as_str()),
                    "TYPE without HELP: {line}"
                );
                family = Some((name, parts.next().unwrap_or_default().to_owned()));
            } else {
                let (name, kind) = family.clone().expect("a sample before any TYPE");
                let sample = line.split(['{', ' ']).next().unwrap_or_default();
                assert!(sample.starts_with(PREFIX), "{line}");
                let ok = match kind.as_str() {
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| sample == format!("{name}{s}")),
                    "counter" => sample == name && name.ends_with("_total"),
                    _ => sample == name,
                };
                assert!(ok, "{line} under {name} ({kind})");
            }
        }
    }
}
