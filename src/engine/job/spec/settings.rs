//! `[settings]`: the values the file gives over [`Settings::defaults`], then the rules of
//! [`Settings::check`] (shared with a typed job's builder), their errors placed at the line of
//! the offending value.

use std::path::PathBuf;

use crate::engine::job::JobError;

use super::locator::Locator;
use super::model::*;
use super::raw::*;

pub(super) fn check_settings(
    loc: &Locator<'_>,
    name: &str,
    sink: SinkFacts,
    raw: RawSettings,
) -> Result<Settings, JobError> {
    let mut s = Settings::defaults(name);
    s.mode = check_mode(loc, &raw)?;
    if let Some(p) = &raw.parallelism {
        s.parallelism = *p.get_ref();
    }
    if let Some(k) = &raw.key {
        s.key_groups = *k.groups.get_ref();
    }
    let ms = |m: Option<&RawMs>, default: u64| m.map_or(default, |m| *m.ms.get_ref());
    if let Some(c) = &raw.checkpoint {
        s.checkpoint_interval_ms = ms(c.interval.as_ref(), s.checkpoint_interval_ms);
        s.checkpoint_timeout_ms = ms(c.timeout.as_ref(), s.checkpoint_timeout_ms);
        s.checkpoint_min_pause_ms = ms(c.min.as_ref().map(|m| &m.pause), s.checkpoint_min_pause_ms);
        if let Some(t) = &c.tolerable {
            s.checkpoint_tolerable_failures = *t.failures.get_ref();
        }
        s.checkpoint_commit_margin_ms = ms(
            c.commit.as_ref().map(|c| &c.margin),
            s.checkpoint_commit_margin_ms,
        );
        if let Some(r) = &c.retained {
            s.checkpoint_retained = *r.get_ref();
        }
    }
    s.transaction_timeout_ms = ms(
        raw.transaction.as_ref().map(|t| &t.timeout),
        s.transaction_timeout_ms,
    );
    s.restart_allowance_ms = ms(
        raw.restart.as_ref().map(|r| &r.allowance),
        s.restart_allowance_ms,
    );
    if let Some(state) = raw.state {
        if let Some(dir) = state.dir {
            s.state_dir = PathBuf::from(dir.into_inner());
        }
        s.state_cache_bytes = state.cache.map(|c| *c.bytes.get_ref());
        s.state_memtable_bytes = state.memtable.map(|m| *m.bytes.get_ref());
    }
    s.errors = check_errors(loc, raw.errors.as_ref())?;
    s.check(sink).map_err(|e| {
        // A rule on a value the file leaves at its default is shown at the value that
        // made it fail: the parallelism beyond the default key groups, the interval a
        // default transaction timeout cannot hold.
        let near: &[&str] = match e.field {
            "settings.key.groups" => &["settings.parallelism"],
            "settings.transaction.timeout.ms" => &["settings.checkpoint.interval.ms"],
            _ => &[],
        };
        loc.at_field(e.field, near, e.message)
    })?;
    Ok(s)
}

/// `settings.mode`: `local` (the default) or `cluster`.
fn check_mode(loc: &Locator<'_>, raw: &RawSettings) -> Result<Mode, JobError> {
    match raw.mode.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
        None | Some(("local", _)) => Ok(Mode::Local),
        Some(("cluster", _)) => Ok(Mode::Cluster),
        Some((other, span)) => Err(loc.at(
            &span,
            Some("settings.mode"),
            format!("unknown mode {other:?}: use \"local\" (one process) or \"cluster\" (several processes in one consumer group)"),
        )),
    }
}

/// `settings.errors.tolerance` (`none`, `skip`, `dead-letter`) and
/// `settings.errors.deadletterqueue.topic.name`.
fn check_errors(loc: &Locator<'_>, raw: Option<&RawErrors>) -> Result<ErrorTolerance, JobError> {
    let Some(raw) = raw else {
        return Ok(ErrorTolerance::None);
    };
    let topic = raw
        .deadletterqueue
        .as_ref()
        .map(|d| (d.topic.name.get_ref().clone(), d.topic.name.span()));
    let tolerance = raw
        .tolerance
        .as_ref()
        .map(|t| (t.get_ref().as_str(), t.span()));
    let tolerance = match tolerance {
        None | Some(("none", _)) => ErrorTolerance::None,
        Some(("skip", _)) => ErrorTolerance::Skip,
        Some(("dead-letter", _)) => ErrorTolerance::DeadLetter {
            topic: topic.as_ref().map(|t| t.0.clone()).unwrap_or_default(),
        },
        Some((other, span)) => {
            return Err(loc.at(
                &span,
                Some("settings.errors.tolerance"),
                format!("unknown tolerance {other:?}: use \"none\" (the job stops at a record it cannot process), \"skip\" (counted and logged) or \"dead-letter\" (written to errors.deadletterqueue.topic.name)"),
            ))
        }
    };
    if let (Some((_, span)), false) = (
        &topic,
        matches!(tolerance, ErrorTolerance::DeadLetter { .. }),
    ) {
        return Err(loc.at(
            span,
            Some("settings.errors.deadletterqueue.topic.name"),
            "a dead-letter topic is set, but errors.tolerance is not \"dead-letter\": set errors.tolerance = \"dead-letter\", or drop the topic".to_owned(),
        ));
    }
    Ok(tolerance)
}
