//! The pipeline's stages: filters, projection, key_by and the window with its aggregates.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use crate::engine::job::aggregate::{AggFn, AggregateSpec, WindowAggregate};
use crate::engine::job::path::FieldPath;
use crate::engine::job::project::{KeyBy, Projection};
use crate::engine::job::JobError;
use crate::engine::time::WindowKind;

use super::join::check_join;
use super::locator::Locator;
use super::model::*;
use super::predicate::check_pred;
use super::raw::*;

/// Order rules: at most one `key_by`, `window` and `aggregate`; `window` needs a `key_by`
/// before it and an `aggregate` right after it; `aggregate` needs the `window` right before it.
/// `filter` and `project` may go anywhere (after the aggregate they see its output records).
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
    for stage in stages {
        let stage = stage.into_inner();
        if joined {
            refuse_after_join(loc, &stage)?;
        }
        if let (Some((span, _)), false) = (&pending_window, matches!(stage, RawStage::Aggregate(_)))
        {
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
                if key.is_some() {
                    return Err(loc.at(
                        &field.span(),
                        Some("key_by"),
                        "a job has at most one key_by",
                    ));
                }
                let field = field.into_inner();
                key = Some(field.clone());
                out.push(Operator::KeyBy(KeyBy { field }));
            }
            RawStage::Window(w) => {
                let span = w.span();
                if key.is_none() {
                    return Err(loc.at(
                        &span,
                        Some("window"),
                        "a window needs a key_by before it; add [[pipeline]] key_by = \"<field>\"",
                    ));
                }
                if aggregated {
                    return Err(loc.at(&span, Some("window"), "a job has at most one window"));
                }
                pending_window = Some((span, w.into_inner()));
            }
            RawStage::Aggregate(a) => {
                let Some((wspan, window)) = pending_window.take() else {
                    return Err(loc.at(
                        &a.span(),
                        Some("aggregate"),
                        "an aggregate needs a window right before it (and a key_by before that)",
                    ));
                };
                let key_name = key.as_ref().map_or("key", FieldPath::last).to_owned();
                out.push(Operator::WindowAggregate(check_window(
                    loc, wspan, window, a, key_name,
                )?));
                aggregated = true;
            }
        }
    }
    if let Some((span, _)) = pending_window {
        return Err(unfinished_window(loc, &span));
    }
    Ok(out)
}

/// A window not followed directly by its aggregate.
fn unfinished_window(loc: &Locator<'_>, span: &Range<usize>) -> JobError {
    loc.at(
        span,
        Some("window"),
        "a window must be followed directly by an aggregate; add [[pipeline]] \
         aggregate.count = \"count\" (or the functions you want) after it",
    )
}

/// After a join, the stages that would need a second keyed stage.
fn refuse_after_join(loc: &Locator<'_>, stage: &RawStage) -> Result<(), JobError> {
    let (name, span) = match stage {
        RawStage::KeyBy(s) => ("key_by", s.span()),
        RawStage::Window(s) => ("window", s.span()),
        RawStage::Aggregate(s) => ("aggregate", s.span()),
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
    agg: Spanned<BTreeMap<String, Spanned<RawAgg>>>,
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
    let outputs = check_aggregate(loc, agg, &key_name)?;
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

/// `window.tumbling`, `window.sliding` or `window.session`: exactly one, with sizes above 0
/// and a slide of at most the size.
pub(super) fn check_window_kind(
    loc: &Locator<'_>,
    wspan: Range<usize>,
    tumbling: Option<Spanned<Duration>>,
    sliding: Option<Spanned<RawSliding>>,
    session: Option<Spanned<Duration>>,
) -> Result<WindowKind, JobError> {
    Ok(match (tumbling, sliding, session) {
        (None, None, Some(gap)) => {
            if gap.get_ref().0 <= 0 {
                return Err(loc.at(
                    &gap.span(),
                    Some("window.session"),
                    "the gap must be more than 0",
                ));
            }
            WindowKind::Session {
                gap: gap.get_ref().0,
            }
        }
        (Some(size), None, None) => {
            if size.get_ref().0 <= 0 {
                return Err(loc.at(
                    &size.span(),
                    Some("window.tumbling"),
                    "the size must be more than 0",
                ));
            }
            WindowKind::Tumbling {
                size: size.get_ref().0,
            }
        }
        (None, Some(s), None) => {
            let s = s.into_inner();
            let (size, slide) = (s.size.get_ref().0, s.slide.get_ref().0);
            if size <= 0 {
                return Err(loc.at(
                    &s.size.span(),
                    Some("window.sliding.size"),
                    "the size must be more than 0",
                ));
            }
            if slide <= 0 || slide > size {
                return Err(loc.at(
                    &s.slide.span(),
                    Some("window.sliding.slide"),
                    "the slide must be more than 0 and at most the size",
                ));
            }
            WindowKind::Sliding { size, slide }
        }
        _ => {
            return Err(loc.at(
                &wspan,
                Some("window"),
                "give exactly one of tumbling = \"1h\", sliding = { size = \"1h\", slide = \"5m\" } \
                 or session = \"30m\" (the gap)",
            ));
        }
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
        };
        outputs.push((name, f));
    }
    Ok(outputs)
}
