//! A job's plan as text (`EXPLAIN` of a SQL job; any job's topology): the source, each
//! operator in order with where it runs (chained in the source subtasks, or in the keyed
//! subtasks after the key exchange), and the sink.

use std::fmt::Write as _;

use super::aggregate::{AggFn, WindowAggregate};
use super::filter::{CmpOp, Literal, Predicate};
use super::join::JoinSide;
use super::spec::{DeliveryGuarantee, Job, Operator};
use crate::engine::time::WindowKind;

fn agg(name: &str, f: &AggFn) -> String {
    match f {
        AggFn::Count => format!("{name} = count(*)"),
        AggFn::Sum(p) => format!("{name} = sum({p})"),
        AggFn::Min(p) => format!("{name} = min({p})"),
        AggFn::Max(p) => format!("{name} = max({p})"),
        AggFn::Avg(p) => format!("{name} = avg({p})"),
        AggFn::CountOf(p) => format!("{name} = count({p})"),
        AggFn::CountDistinct(p) => format!("{name} = count(distinct {p})"),
        AggFn::Top(t) => format!("{name} = {t}"),
    }
}

/// A job file's filter as it reads.
fn predicate(p: &Predicate) -> String {
    match p {
        Predicate::Compare { field, op, value } => {
            let op = match op {
                CmpOp::Eq => "=",
                CmpOp::Ne => "!=",
                CmpOp::Lt => "<",
                CmpOp::Le => "<=",
                CmpOp::Gt => ">",
                _ => ">=",
            };
            let value = match value {
                Literal::Number(n) => n.to_json().to_string(),
                Literal::String(s) => format!("{s:?}"),
                Literal::Bool(b) => b.to_string(),
            };
            format!("{field} {op} {value}")
        }
        Predicate::And(all) => all.iter().map(predicate).collect::<Vec<_>>().join(" and "),
        Predicate::Or(any) => {
            let parts: Vec<String> = any.iter().map(|p| format!("({})", predicate(p))).collect();
            parts.join(" or ")
        }
        Predicate::Not(inner) => format!("not ({})", predicate(inner)),
        Predicate::Within(b) => format!(
            "({}, {}) within [{}, {}, {}, {}]",
            b.lon, b.lat, b.west, b.south, b.east, b.north
        ),
    }
}

fn side(s: &JoinSide) -> String {
    let mut out = format!("{} as {}: key {}, time {}", s.topic, s.name, s.key, s.time);
    if let Some(f) = &s.filter {
        let _ = write!(out, ", filter {}", predicate(f));
    }
    if let Some(c) = &s.condition {
        let _ = write!(out, ", where {c}");
    }
    out
}

/// A window's kind as the plan shows it.
fn window_kind(kind: WindowKind) -> String {
    match kind {
        WindowKind::Tumbling { size } => format!("tumbling {size} ms"),
        WindowKind::Sliding { size, slide } => format!("sliding {size} ms every {slide} ms"),
        WindowKind::Session { gap } => format!("session gap {gap} ms"),
    }
}

/// A window and its aggregate, the job's window number `earlier` (0-based): the first takes
/// its watermark from the sources, a later one from the stage before it.
fn window_line(w: &WindowAggregate, earlier: usize) -> String {
    let kind = window_kind(w.kind);
    let fns: Vec<String> = w.aggregate.outputs.iter().map(|(n, f)| agg(n, f)).collect();
    let watermark = match earlier {
        0 => format!("watermark: newest - {} ms", w.out_of_orderness),
        k => format!("keyed stage {}, watermark: stage {k}'s", k + 1),
    };
    format!(
        "window {kind} on {} ({watermark}, lateness {} ms): {}",
        w.time,
        w.allowed_lateness,
        fns.join(", ")
    )
}

/// One operator, in a line (or two for a join's sides).
fn operator(op: &Operator) -> String {
    match op {
        Operator::Filter(p) => format!("filter {}", predicate(p)),
        Operator::Project(p) => format!("project {p}"),
        Operator::KeyBy(k) => format!(
            "key_by {}  -- key exchange: by key group to the keyed subtasks",
            k.field
        ),
        Operator::WindowAggregate(w) => window_line(w, 0),
        Operator::Join(j) => {
            let how = match j.window {
                Some(kind) => format!(
                    "window join, {} (pairs written as each window closes)",
                    window_kind(kind)
                ),
                None => format!(
                    "interval join, {} - {} within [{} ms, {} ms]",
                    j.right.name, j.left.name, j.lower, j.upper
                ),
            };
            format!(
                "{how} (watermark: newest - {} ms)  -- key exchange on the join key\n      left  {}\n      right {}",
                j.out_of_orderness,
                side(&j.left),
                side(&j.right)
            )
        }
        Operator::Where(e) => format!("where {e}"),
        Operator::Select(s) => {
            let cols: Vec<String> = s
                .columns
                .iter()
                .map(|(n, e)| format!("{e} AS {n}"))
                .collect();
            format!("select {}", cols.join(", "))
        }
    }
}

impl Job {
    /// The job's plan, one operator a line (module docs).
    ///
    /// ```
    /// let job = onceflow::engine::job::Job::parse("j.toml", r#"
    /// name = "j"
    /// [source]
    /// brokers = "localhost:9092"
    /// topics = ["in"]
    /// [[pipeline]]
    /// filter = { field = "x", op = ">", value = 1 }
    /// [sink]
    /// topic = "out"
    /// delivery.guarantee = "at-least-once"
    /// "#)?;
    /// let plan = job.explain();
    /// assert!(plan.starts_with("source  kafka [in]"), "{plan}");
    /// assert!(plan.ends_with("sink    kafka out, at-least-once\n"), "{plan}");
    /// # Ok::<(), onceflow::engine::job::JobError>(())
    /// ```
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let format = self.source.value_format.name();
        match &self.source.file {
            Some(f) => {
                let _ = writeln!(
                    out,
                    "source  files {} ({})",
                    f.path.display(),
                    f.format.name()
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "source  kafka [{}] ({format}), read_committed",
                    self.source.topics.join(", ")
                );
            }
        }
        let mut keyed = false;
        // Windows so far: a window after another is a keyed stage of its own.
        let mut windows = 0;
        for op in &self.pipeline {
            // A join's sides are read in the source subtasks; the join itself runs keyed.
            keyed |= matches!(op, Operator::Join(_));
            let at = if keyed { "keyed " } else { "source" };
            let line = match op {
                Operator::WindowAggregate(w) => window_line(w, windows),
                Operator::KeyBy(k) if windows > 0 => format!(
                    "key_by {}  -- key exchange: by key group to keyed stage {}",
                    k.field,
                    windows + 1
                ),
                _ => operator(op),
            };
            let _ = writeln!(out, "  {at}  {line}");
            keyed |= matches!(op, Operator::KeyBy(_));
            windows += usize::from(matches!(op, Operator::WindowAggregate(_)));
        }
        let guarantee = match self.sink.guarantee {
            DeliveryGuarantee::ExactlyOnce => "exactly-once",
            DeliveryGuarantee::AtLeastOnce => "at-least-once",
            DeliveryGuarantee::None => "none",
        };
        match &self.sink.file {
            Some(f) => {
                let _ = writeln!(out, "sink    files {}, {guarantee}", f.path.display());
            }
            None => {
                let _ = writeln!(out, "sink    kafka {}, {guarantee}", self.sink.topic);
            }
        }
        out
    }
}
