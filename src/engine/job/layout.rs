//! What a checkpoint's state depends on in a job, as named values, so that a restart with a
//! changed job file can refuse the old checkpoint with a clear error naming exactly what
//! differs.
//!
//! In it: the source topics (positions), key groups (state keys), the sink's transactional id
//! prefix (the saved committables), the key_by field (state keys) and the window + aggregate
//! (timers and accumulator slots). Not in it: filters,
//! projections, checkpoint intervals and timeouts, brokers and the group, and the parallelism
//! (the runtime rescales: state moves with its key groups): changing those keeps the state
//! valid (as Flink lets stateless operators change).

use std::collections::BTreeMap;

use super::aggregate::AggFn;
use super::spec::{Job, Operator};
use crate::engine::time::WindowKind;

/// The state layout: name → canonical value.
pub type Layout = BTreeMap<String, String>;

impl Job {
    /// The values a checkpoint of this job depends on (module docs).
    pub fn state_layout(&self) -> Layout {
        let mut out = Layout::new();
        out.insert("source.topics".into(), self.source.topics.join(","));
        out.insert(
            "settings.key.groups".into(),
            self.settings.key_groups.to_string(),
        );
        out.insert(
            "sink.transactional.id.prefix".into(),
            self.sink
                .transactional_id_prefix
                .clone()
                .unwrap_or_default(),
        );
        // A job with several windows: the second stage's entries are `key_by.2`, `window.2`...
        let mut stage = 1;
        let name = |base: &str, stage: usize| match stage {
            1 => base.to_owned(),
            n => format!("{base}.{n}"),
        };
        for op in &self.pipeline {
            match op {
                Operator::KeyBy(k) => {
                    out.insert(name("key_by", stage), k.field.to_string());
                }
                Operator::WindowAggregate(w) => {
                    let kind = match w.kind {
                        WindowKind::Tumbling { size } => format!("tumbling {size}ms"),
                        WindowKind::Sliding { size, slide } => {
                            format!("sliding {size}ms every {slide}ms")
                        }
                        WindowKind::Session { gap } => format!("session gap {gap}ms"),
                    };
                    out.insert(name("window", stage), format!("{kind} on {}", w.time));
                    let fns: Vec<String> = w
                        .aggregate
                        .outputs
                        .iter()
                        .map(|(name, f)| match f {
                            AggFn::Count => format!("{name}=count"),
                            AggFn::Sum(p) => format!("{name}=sum({p})"),
                            AggFn::Min(p) => format!("{name}=min({p})"),
                            AggFn::Max(p) => format!("{name}=max({p})"),
                            AggFn::CountOf(p) => format!("{name}=count({p})"),
                            AggFn::CountDistinct(p) => format!("{name}=count_distinct({p})"),
                            AggFn::Avg(p) => format!("{name}=avg({p})"),
                            AggFn::Top(t) => format!("{name}={t}"),
                        })
                        .collect();
                    out.insert(name("aggregate", stage), fns.join(","));
                    stage += 1;
                }
                Operator::Join(j) => {
                    let side = |s: &crate::engine::job::join::JoinSide| {
                        format!("{} {} on {} at {}", s.topic, s.name, s.key, s.time)
                    };
                    let how = match j.window {
                        Some(kind) => format!("in {kind:?}"),
                        None => format!("between {}ms and {}ms", j.lower, j.upper),
                    };
                    out.insert(
                        "join".into(),
                        format!("{} with {} {how}", side(&j.left), side(&j.right)),
                    );
                }
                Operator::Filter(_)
                | Operator::Project(_)
                | Operator::Where(_)
                | Operator::Select(_) => {}
            }
        }
        out
    }
}

/// What differs between the layout a checkpoint was written with and the job's, one phrase per
/// difference (`window: was "tumbling 3600000ms on event_time", now "tumbling 60000ms on
/// event_time"`); empty when compatible.
pub fn layout_diff(checkpoint: &Layout, job: &Layout) -> Vec<String> {
    let show = |v: Option<&String>| v.map_or_else(|| "absent".to_owned(), |v| format!("{v:?}"));
    let mut names: Vec<&String> = checkpoint.keys().chain(job.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| checkpoint.get(*n) != job.get(*n))
        .map(|n| {
            format!(
                "{n}: was {}, now {}",
                show(checkpoint.get(n)),
                show(job.get(n))
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOURLY: &str = include_str!("../../../jobs/rides-per-driver-hourly.toml");

    #[test]
    fn the_hourly_layout_and_what_changes_it() {
        let job = Job::parse("h.toml", HOURLY).unwrap();
        let layout = job.state_layout();
        assert_eq!(layout["window"], "tumbling 3600000ms on event_time");
        assert_eq!(
            layout["aggregate"],
            "passengers=sum(passengers),rides=count"
        );
        assert_eq!(layout["key_by"], "driver_id");
        assert_eq!(layout["settings.key.groups"], "128");
        assert_eq!(
            layout["sink.transactional.id.prefix"],
            "rides-per-driver-hourly"
        );

        // (edit of the file, expected differences)
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            // Stateless edits and timings keep the checkpoint usable.
            ("value = false", "value = true", vec![]),
            ("checkpoint.interval.ms = 1000", "checkpoint.interval.ms = 500", vec![]),
            ("window.tumbling = \"1h\"", "window.tumbling = \"1m\"", vec![
                "window: was \"tumbling 3600000ms on event_time\", now \"tumbling 60000ms on event_time\"",
            ]),
            ("aggregate.rides = \"count\"", "aggregate.trips = \"count\"", vec![
                "aggregate: was \"passengers=sum(passengers),rides=count\", now \"passengers=sum(passengers),trips=count\"",
            ]),
            ("key.groups = 128", "key.groups = 256", vec![
                "settings.key.groups: was \"128\", now \"256\"",
            ]),
        ];
        for (from, to, want) in cases {
            assert!(HOURLY.contains(from), "{from}");
            let changed = Job::parse("h.toml", &HOURLY.replace(from, to)).unwrap();
            assert_eq!(
                layout_diff(&layout, &changed.state_layout()),
                want,
                "{from} -> {to}"
            );
        }
        let mut older = layout.clone();
        older.remove("key_by");
        assert_eq!(
            layout_diff(&older, &layout),
            vec!["key_by: was absent, now \"driver_id\"".to_owned()]
        );
    }
}
