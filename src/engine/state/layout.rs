//! The job's layout as the state sees it, and the pure check that a checkpoint fits the job.

use serde::{Deserialize, Serialize};

/// What a checkpoint depends on: restoring it into a job with another layout would put state
/// under the wrong keys or operators, or resume the wrong transactional ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Number of key groups G (fixed for the life of the job).
    pub key_groups: u16,
    /// The stateful operators, in a fixed order (the index names the operator in undo keys).
    pub operators: Vec<OperatorLayout>,
    /// The sink's transactional id prefix, if the job has an exactly-once sink.
    pub sink_prefix: Option<String>,
    /// How many transactional ids the sink pool has (tasks × slots); 0 without a sink.
    /// Recorded, not compared: a restore at another parallelism is a rescale, which the
    /// runtime carries out (it aborts what the ids of retired tasks left open).
    pub sink_ids: u32,
}

/// One stateful operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorLayout {
    /// Stable operator id (also names its keyspace `op-<uid>`).
    pub uid: String,
    /// What the operator is ("count", "window-sum", ...); its state format depends on it.
    pub kind: String,
}

impl OperatorLayout {
    /// Builds one.
    pub fn new(uid: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            kind: kind.into(),
        }
    }
}

impl Layout {
    /// The first difference between this job's layout and the `stored` one of a checkpoint,
    /// phrased for the user; `None` when a restore may proceed.
    pub fn difference(&self, stored: &Layout) -> Option<String> {
        if self.key_groups != stored.key_groups {
            return Some(format!(
                "the job's key groups changed from {} to {}",
                stored.key_groups, self.key_groups
            ));
        }
        for op in &self.operators {
            match stored.operators.iter().find(|s| s.uid == op.uid) {
                None => {
                    return Some(format!(
                        "the job adds stateful operator {:?} that the checkpoint does not have",
                        op.uid
                    ))
                }
                Some(s) if s.kind != op.kind => {
                    return Some(format!(
                        "stateful operator {:?} changed from {} to {}",
                        op.uid, s.kind, op.kind
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some(s) = stored
            .operators
            .iter()
            .find(|s| !self.operators.iter().any(|op| op.uid == s.uid))
        {
            return Some(format!(
                "the job no longer has stateful operator {:?} that the checkpoint holds state for",
                s.uid
            ));
        }
        if self.operators != stored.operators {
            let names = |ops: &[OperatorLayout]| {
                ops.iter()
                    .map(|o| o.uid.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Some(format!(
                "the job's stateful operators changed order from [{}] to [{}]",
                names(&stored.operators),
                names(&self.operators)
            ));
        }
        if self.sink_prefix != stored.sink_prefix {
            let show = |p: &Option<String>| match p {
                Some(p) => format!("{p:?}"),
                None => "none".to_string(),
            };
            return Some(format!(
                "the job's sink transactional id prefix changed from {} to {}",
                show(&stored.sink_prefix),
                show(&self.sink_prefix)
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(g: u16, ops: &[(&str, &str)], prefix: Option<&str>, ids: u32) -> Layout {
        Layout {
            key_groups: g,
            operators: ops
                .iter()
                .map(|(u, k)| OperatorLayout::new(*u, *k))
                .collect(),
            sink_prefix: prefix.map(str::to_string),
            sink_ids: ids,
        }
    }

    #[test]
    fn layout_difference_table() {
        let base = layout(128, &[("a", "count"), ("b", "sum")], Some("job"), 3);
        let cases: &[(Layout, Option<&str>)] = &[
            (base.clone(), None),
            (
                layout(256, &[("a", "count"), ("b", "sum")], Some("job"), 3),
                Some("the job's key groups changed from 128 to 256"),
            ),
            (
                layout(128, &[("a", "count"), ("b", "sum"), ("c", "max")], Some("job"), 3),
                Some("the job adds stateful operator \"c\" that the checkpoint does not have"),
            ),
            (
                layout(128, &[("a", "count")], Some("job"), 3),
                Some("the job no longer has stateful operator \"b\" that the checkpoint holds state for"),
            ),
            (
                layout(128, &[("a", "count"), ("b", "avg")], Some("job"), 3),
                Some("stateful operator \"b\" changed from sum to avg"),
            ),
            (
                layout(128, &[("b", "sum"), ("a", "count")], Some("job"), 3),
                Some("the job's stateful operators changed order from [a, b] to [b, a]"),
            ),
            (
                layout(128, &[("a", "count"), ("b", "sum")], Some("other"), 3),
                Some("the job's sink transactional id prefix changed from \"job\" to \"other\""),
            ),
            (
                layout(128, &[("a", "count"), ("b", "sum")], None, 3),
                Some("the job's sink transactional id prefix changed from \"job\" to none"),
            ),
            (
                layout(128, &[("a", "count"), ("b", "sum")], Some("job"), 6),
                None, // a rescale: the runtime handles the pool's ids
            ),
        ];
        for (job, want) in cases {
            assert_eq!(job.difference(&base).as_deref(), *want, "job {job:?}");
        }
    }
}
