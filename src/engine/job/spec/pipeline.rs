//! The pipeline's stages: filters, projection, key_by and the window with its aggregates.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use crate::engine::job::aggregate::{AggFn, AggregateSpec, WindowAggregate};
use crate::engine::job::path::FieldPath;
use crate::engine::job::project::{KeyBy, Projection};
use crate::engine::job::JobError;

use super::join::check_join;
use super::locator::Locator;
use super::model::*;
use super::predicate::check_pred;
use super::raw::*;
use super::window_kind::check_window_kind;

/// Order rules: `window` needs a `key_by` before it (since the previous aggregate, if any) and
/// an `aggregate` right after it; `aggregate` needs the `window` right before it; at most one
/// `key_by` before each window and one after the last. A window after another is a keyed
/// stage of its own: it sees the previous window's result records, re-keyed by its own
/// `key_by`, and its watermark is the previous stage's (so it has no `out_of_orderness`).
/// `filter` and `project` may go anywhere (after an aggregate they see its output records).
/// A `join` is the first stage, and only `filter` and `project` follow it (they see the joined
/// records).
pub(super) fn check_pipeline(
    loc: &Locator<'_>,
    stages: Vec<Spanned<RawStage>>,
) -> Result<Vec<Operator>, JobError> {
    let mut out = Vec::new();
    let mut key: Option<FieldPath> = None;
    let mut pending_window: Option<(Range<usize>, RawWindow)> = None;
    let mut aggregated = false;
    let mut joined = false;
    // The key_by since the last aggregate (a window's), if any.
    let mut stage_key: Option<FieldPath> = None;
    for stage in stages {
        let stage = stage.into_inner();
        if joined {
            refuse_after_join(loc, &stage)?;
        }
        let closes = matches!(stage, RawStage::Aggregate(_) | RawStage::Top(_));
        if let (Some((span, _)), false) = (&pending_window, closes) {
            return Err(unfinished_window(loc, span));
        }
        match stage {
            RawStage::Join(j) => {
                let join = check_join(loc, *j, out.is_empty())?;
                out.push(Operator::Join(Box::new(join)));
                joined = true;
            }
            RawStage::Filter(p) => out.push(Operator::Filter(check_pred(loc, p)?)),
            RawStage::Project(p) => {
                let span = p.span();
                let p = p.into_inner();
                let proj = Projection::new(p.keep, p.rename);
                let proj = proj.map_err(|e| loc.at(&span, Some("project"), e.to_string()))?;
                out.push(Operator::Project(proj));
            }
            RawStage::KeyBy(field) => {
                let field = admit_key_by(loc, field, stage_key.is_some())?;
                (key, stage_key) = (Some(field.clone()), Some(field.clone()));
                out.push(Operator::KeyBy(KeyBy { field }));
            }
            RawStage::Window(w) => {
                let span = w.span();
                let keyed = (key.is_some(), stage_key.is_some());
                let w = admit_window(loc, &span, w.into_inner(), keyed, aggregated)?;
                pending_window = Some((span, w));
            }
            RawStage::Aggregate(a) => {
                let (wspan, window, key_name) = closing(
                    loc,
                    &mut pending_window,
                    &a.span(),
                    "aggregate",
                    key.as_ref(),
                )?;
                let outputs = check_aggregate(loc, a, &key_name)?;
                let w = check_window(loc, wspan, window, outputs, key_name)?;
                out.push(Operator::WindowAggregate(w));
                (aggregated, stage_key) = (true, None);
            }
            RawStage::Top(t) => {
                let (wspan, window, key_name) =
                    closing(loc, &mut pending_window, &t.span(), "top", key.as_ref())?;
                let outputs = check_top_stage(loc, t)?;
                let w = check_window(loc, wspan, window, outputs, key_name)?;
                out.push(Operator::WindowAggregate(w));
                (aggregated, stage_key) = (true, None);
            }
        }
    }
    if let Some((span, _)) = pending_window {
        return Err(unfinished_window(loc, &span));
    }
    Ok(out)
}

/// A key_by, unless one came since the last aggregate (`keyed`): it would replace it.
fn admit_key_by(
    loc: &Locator<'_>,
    field: Spanned<FieldPath>,
    keyed: bool,
) -> Result<FieldPath, JobError> {
    if keyed {
        return Err(loc.at(
            &field.span(),
            Some("key_by"),
            "a second key_by before the window (or after the last aggregate) replaces the \
             first; keep one",
        ));
    }
    Ok(field.into_inner())
}

/// A window where it stands: `(keyed, stage_keyed)` say whether a key_by came before it, and
/// since the last aggregate; after an aggregate it is a later stage's window.
fn admit_window(
    loc: &Locator<'_>,
    span: &Range<usize>,
    w: RawWindow,
    (keyed, stage_keyed): (bool, bool),
    aggregated: bool,
) -> Result<RawWindow, JobError> {
    if !stage_keyed && aggregated {
        return Err(loc.at(
            span,
            Some("window"),
            "a window after an aggregate needs a key_by of its own between them \
             (it re-keys the results, e.g. key_by = \"window_start\")",
        ));
    }
    if !keyed {
        return Err(loc.at(
            span,
            Some("window"),
            "a window needs a key_by before it; add [[pipeline]] key_by = \"<field>\"",
        ));
    }
    if let (true, Some(_)) = (aggregated, &w.out_of_orderness) {
        return Err(loc.at(
            span,
            Some("window.out_of_orderness"),
            "a window after another takes its watermark from the one before it; \
             remove out_of_orderness here (the first window's bounds the input)",
        ));
    }
    Ok(w)
}

/// The window an `aggregate` (or `top`) at `span` closes, and the name of its key in the
/// result records.
fn closing(
    loc: &Locator<'_>,
    pending: &mut Option<(Range<usize>, RawWindow)>,
    span: &Range<usize>,
    what: &str,
    key: Option<&FieldPath>,
) -> Result<(Range<usize>, RawWindow, String), JobError> {
    let Some((wspan, window)) = pending.take() else {
        return Err(loc.at(
            span,
            Some(what),
            format!("{what} needs a window right before it (and a key_by before that)"),
        ));
    };
    let key_name = key.map_or("key", FieldPath::last).to_owned();
    Ok((wspan, window, key_name))
}

/// A window not followed directly by its aggregate.
fn unfinished_window(loc: &Locator<'_>, span: &Range<usize>) -> JobError {
    loc.at(
        span,
        Some("window"),
        "a window must be followed directly by an aggregate (or a top); add [[pipeline]] \
         aggregate.count = \"count\" (or the functions you want) after it",
    )
}

/// After a join, the stages that would need a second keyed stage.
fn refuse_after_join(loc: &Locator<'_>, stage: &RawStage) -> Result<(), JobError> {
    let (name, span) = match stage {
        RawStage::KeyBy(s) => ("key_by", s.span()),
        RawStage::Window(s) => ("window", s.span()),
        RawStage::Aggregate(s) => ("aggregate", s.span()),
        RawStage::Top(s) => ("top", s.span()),
        RawStage::Join(s) => ("join", s.as_ref().span()),
        RawStage::Filter(_) | RawStage::Project(_) => return Ok(()),
    };
    Err(loc.at(
        &span,
        Some(name),
        "after a join only filter and project may follow (they see the joined records)",
    ))
}

pub(super) fn check_window(
    loc: &Locator<'_>,
    wspan: Range<usize>,
    w: RawWindow,
    outputs: Vec<(String, AggFn)>,
    key_name: String,
) -> Result<WindowAggregate, JobError> {
    let kind = check_window_kind(loc, wspan, w.tumbling, w.sliding, w.session)?;
    let late_topic = match w.late_topic {
        Some(t) if t.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &t.span(),
                Some("window.late_topic"),
                "the topic name is empty",
            ));
        }
        t => t.map(Spanned::into_inner),
    };
    Ok(WindowAggregate {
        kind,
        time: w.time,
        out_of_orderness: w.out_of_orderness.map_or(0, |d| d.0),
        allowed_lateness: w.allowed_lateness.map_or(0, |d| d.0),
        late_topic,
        key_name,
        aggregate: AggregateSpec { outputs },
    })
}

/// `aggregate.<name> = <function>`: at least one, none named as the key or the window's
/// bounds in the output record.
pub(super) fn check_aggregate(
    loc: &Locator<'_>,
    agg: Spanned<BTreeMap<String, Spanned<RawAgg>>>,
    key_name: &str,
) -> Result<Vec<(String, AggFn)>, JobError> {
    let aspan = agg.span();
    let agg = agg.into_inner();
    if agg.is_empty() {
        return Err(loc.at(
            &aspan,
            Some("aggregate"),
            "no function; write e.g. aggregate.rides = \"count\"",
        ));
    }
    let mut outputs = Vec::new();
    for (name, f) in agg {
        if name == key_name || name == "window_start" || name == "window_end" {
            return Err(loc.at(
                &f.span(),
                Some(&format!("aggregate.{name}")),
                format!(
                    "`{name}` is taken in the output record (the key `{key_name}`, window_start, \
                     window_end); choose another name"
                ),
            ));
        }
        let f = match f.into_inner() {
            RawAgg::Count => AggFn::Count,
            RawAgg::Sum(p) => AggFn::Sum(p),
            RawAgg::Min(p) => AggFn::Min(p),
            RawAgg::Max(p) => AggFn::Max(p),
            RawAgg::Avg(p) => AggFn::Avg(p),
            RawAgg::CountDistinct(p) => AggFn::CountDistinct(p),
            RawAgg::Top(t) => AggFn::Top(check_top(loc, &name, t)?),
        };
        outputs.push((name, f));
    }
    Ok(outputs)
}

/// `aggregate.<name>.top`: at least one record kept, and at least one field of each.
fn check_top(
    loc: &Locator<'_>,
    name: &str,
    t: Spanned<RawTop>,
) -> Result<crate::engine::job::top::TopN, JobError> {
    let t = t.into_inner();
    let n = check_top_n(loc, &t.n, &format!("aggregate.{name}.top.n"))?;
    if t.keep.get_ref().is_empty() {
        return Err(loc.at(
            &t.keep.span(),
            Some(&format!("aggregate.{name}.top.keep")),
            "name the fields each kept record has, e.g. keep = [\"driver_id\", \"tips\"]",
        ));
    }
    Ok(crate::engine::job::top::TopN {
        n,
        by: t.by,
        keep: t.keep.into_inner(),
        rank: None,
    })
}

/// The `top` stage: its one output, the ranked records a row each with their rank.
fn check_top_stage(
    loc: &Locator<'_>,
    t: Spanned<RawTopStage>,
) -> Result<Vec<(String, AggFn)>, JobError> {
    let t = t.into_inner();
    let n = check_top_n(loc, &t.n, "top.n")?;
    let rank = match t.rank {
        Some(r) if r.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &r.span(),
                Some("top.rank"),
                "the rank's field name is empty",
            ));
        }
        Some(r) => r.into_inner(),
        None => "rank".to_owned(),
    };
    let top = crate::engine::job::top::TopN {
        n,
        by: t.by,
        keep: Vec::new(),
        rank: Some(rank.clone()),
    };
    Ok(vec![(rank, AggFn::Top(top))])
}

/// A Top-N's `n` (at `field`): how many records it keeps, at least 1.
fn check_top_n(loc: &Locator<'_>, n: &Spanned<i64>, field: &str) -> Result<usize, JobError> {
    usize::try_from(*n.get_ref())
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            loc.at(
                &n.span(),
                Some(field),
                "how many records to keep: a whole number of at least 1",
            )
        })
}
