//! The settings: parallelism and key groups, checkpoints, the transaction timeout budget,
//! the state directory and its memory.

use std::path::PathBuf;

use crate::engine::checkpoint::required_transaction_timeout;
use crate::engine::job::JobError;

use super::locator::Locator;
use super::model::*;
use super::raw::*;

pub(super) fn check_settings(
    loc: &Locator<'_>,
    name: &str,
    guarantee: DeliveryGuarantee,
    mut raw: RawSettings,
) -> Result<Settings, JobError> {
    let (parallelism, key_groups) = check_scale(loc, &raw)?;
    let ms = |m: Option<&RawMs>, default: u64| m.map_or(default, |m| *m.ms.get_ref());
    let ckpt = raw.checkpoint.as_ref();
    let interval = ms(ckpt.and_then(|c| c.interval.as_ref()), 1_000);
    let timeout = ms(ckpt.and_then(|c| c.timeout.as_ref()), 30_000);
    for (value, m, field) in [
        (
            interval,
            ckpt.and_then(|c| c.interval.as_ref()),
            "settings.checkpoint.interval.ms",
        ),
        (
            timeout,
            ckpt.and_then(|c| c.timeout.as_ref()),
            "settings.checkpoint.timeout.ms",
        ),
    ] {
        if let (0, Some(m)) = (value, m) {
            return Err(loc.at(&m.ms.span(), Some(field), "must be at least 1"));
        }
    }
    let tuning = check_tuning(loc, ckpt, raw.restart.as_ref())?;
    let (state_dir, state_cache_bytes, state_memtable_bytes) =
        check_state(loc, name, raw.state.take())?;
    let mode = check_mode(loc, &raw)?;
    let settings = Settings {
        mode,
        parallelism,
        key_groups,
        checkpoint_interval_ms: interval,
        checkpoint_timeout_ms: timeout,
        transaction_timeout_ms: ms(raw.transaction.as_ref().map(|t| &t.timeout), 300_000),
        checkpoint_min_pause_ms: tuning.min_pause_ms,
        checkpoint_tolerable_failures: tuning.tolerable_failures,
        checkpoint_commit_margin_ms: tuning.commit_margin_ms,
        checkpoint_retained: tuning.retained,
        restart_allowance_ms: tuning.restart_allowance_ms,
        state_dir,
        state_cache_bytes,
        state_memtable_bytes,
    };
    check_transaction_timeout(loc, &raw, &settings, guarantee)?;
    Ok(settings)
}

/// `settings.mode`: `local` (the default) or `cluster`.
pub(super) fn check_mode(loc: &Locator<'_>, raw: &RawSettings) -> Result<Mode, JobError> {
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

/// `transaction.timeout.ms` against what the job needs: in cluster mode (exactly-once only)
/// an interval and its commit; in local mode with exactly-once the one budget rule.
pub(super) fn check_transaction_timeout(
    loc: &Locator<'_>,
    raw: &RawSettings,
    settings: &Settings,
    guarantee: DeliveryGuarantee,
) -> Result<(), JobError> {
    let interval = settings.checkpoint_interval_ms;
    let ckpt = raw.checkpoint.as_ref();
    if settings.mode == Mode::Cluster {
        // A member's transaction spans one commit interval; a member that dies holds its
        // tasks' new owner back until the broker aborts its transaction, so this timeout is
        // short (Kafka Streams: 10 s) and only has to outlast an interval and its commit.
        let txn = settings.transaction_timeout_ms;
        if guarantee != DeliveryGuarantee::ExactlyOnce {
            return Err(loc.at(
                &raw.mode.as_ref().map_or(0..0, |m| m.span()),
                Some("settings.mode"),
                "mode = \"cluster\" runs exactly-once only: set sink.delivery.guarantee = \"exactly-once\" or mode = \"local\"",
            ));
        }
        if txn < interval.saturating_mul(2).max(1_000) {
            return Err(loc.at(
                &raw.transaction.as_ref().map_or(0..0, |t| t.timeout.ms.span()),
                Some("settings.transaction.timeout.ms"),
                format!("{txn} is too short for mode = \"cluster\": a member's transaction spans one checkpoint.interval.ms ({interval}) and its commit; set it to at least {} (10000 is a good value: a member that dies holds its tasks back that long)", interval.saturating_mul(2).max(1_000)),
            ));
        }
        return Ok(());
    }
    if guarantee == DeliveryGuarantee::ExactlyOnce {
        // The part of the one budget rule known from the file; `run` also checks the brokers'
        // transaction.max.timeout.ms at start.
        let txn = settings.transaction_timeout_ms;
        let needed = required_transaction_timeout(&settings.checkpoint());
        if txn < needed {
            let span = raw
                .transaction
                .as_ref()
                .map(|t| t.timeout.ms.span())
                .or_else(|| ckpt.and_then(|c| c.interval.as_ref()).map(|m| m.ms.span()))
                .unwrap_or(0..0);
            return Err(loc.at(
                &span,
                Some("settings.transaction.timeout.ms"),
                format!(
                    "{txn} is below the {needed} the checkpoint settings need ((checkpoint.tolerable.failures + 1) \
                     × (checkpoint.interval.ms + checkpoint.timeout.ms + checkpoint.min.pause.ms) \
                     + restart.allowance.ms + checkpoint.commit.margin.ms): a transaction could time out \
                     before its checkpoint commits it (data loss); raise transaction.timeout.ms to {needed} \
                     or lower the checkpoint settings"
                ),
            ));
        }
    }
    Ok(())
}

/// `parallelism` and `key.groups`: at least one key group per task.
pub(super) fn check_scale(loc: &Locator<'_>, raw: &RawSettings) -> Result<(u32, u32), JobError> {
    let parallelism = raw.parallelism.as_ref().map_or(1, |p| *p.get_ref());
    if let Some(p) = &raw.parallelism {
        if parallelism == 0 {
            return Err(loc.at(
                &p.span(),
                Some("settings.parallelism"),
                "must be at least 1",
            ));
        }
    }
    let key_groups = raw.key.as_ref().map_or(128, |k| *k.groups.get_ref());
    if let Some(k) = &raw.key {
        if key_groups == 0 || key_groups > MAX_KEY_GROUPS || key_groups < parallelism {
            return Err(loc.at(
                &k.groups.span(),
                Some("settings.key.groups"),
                format!(
                    "{key_groups} is out of range: give parallelism ({parallelism}) to \
                     {MAX_KEY_GROUPS}; it cannot change once the job has state"
                ),
            ));
        }
    } else if key_groups < parallelism {
        if let Some(p) = &raw.parallelism {
            return Err(loc.at(
                &p.span(),
                Some("settings.parallelism"),
                format!("{parallelism} exceeds the key groups (128); raise key.groups too"),
            ));
        }
    }
    Ok((parallelism, key_groups))
}

/// `state.dir` (default `state/<name>`), `state.cache.bytes`, `state.memtable.bytes`.
pub(super) fn check_state(
    loc: &Locator<'_>,
    name: &str,
    raw: Option<RawState>,
) -> Result<(PathBuf, Option<u64>, Option<u64>), JobError> {
    let state = raw.unwrap_or(RawState {
        dir: None,
        cache: None,
        memtable: None,
    });
    let dir = match state.dir {
        Some(d) if d.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &d.span(),
                Some("settings.state.dir"),
                "the directory is empty",
            ));
        }
        Some(d) => PathBuf::from(d.into_inner()),
        None => PathBuf::from("state").join(name),
    };
    let cache = state_bytes(loc, state.cache, "settings.state.cache.bytes")?;
    let memtable = state_bytes(loc, state.memtable, "settings.state.memtable.bytes")?;
    Ok((dir, cache, memtable))
}

/// The checkpoint settings beyond interval and timeout, with the coordinator's defaults
/// (`checkpoint::Settings::default`).
pub(super) struct Tuning {
    min_pause_ms: u64,
    tolerable_failures: u32,
    commit_margin_ms: u64,
    retained: u64,
    restart_allowance_ms: u64,
}

pub(super) fn check_tuning(
    loc: &Locator<'_>,
    ckpt: Option<&RawCheckpoint>,
    restart: Option<&RawRestart>,
) -> Result<Tuning, JobError> {
    let ms = |m: Option<&RawMs>, default: u64| m.map_or(default, |m| *m.ms.get_ref());
    let retained = ckpt.and_then(|c| c.retained.as_ref());
    if let Some(r) = retained.filter(|r| *r.get_ref() == 0) {
        return Err(loc.at(
            &r.span(),
            Some("settings.checkpoint.retained"),
            "must be at least 1 (the latest checkpoint is always kept)",
        ));
    }
    Ok(Tuning {
        min_pause_ms: ms(ckpt.and_then(|c| c.min.as_ref()).map(|m| &m.pause), 0),
        tolerable_failures: ckpt
            .and_then(|c| c.tolerable.as_ref())
            .map_or(3, |t| *t.failures.get_ref()),
        commit_margin_ms: ms(
            ckpt.and_then(|c| c.commit.as_ref()).map(|c| &c.margin),
            10_000,
        ),
        retained: retained.map_or(2, |r| *r.get_ref()),
        restart_allowance_ms: ms(restart.map(|r| &r.allowance), 60_000),
    })
}

/// A state store memory size, at least [`MIN_STATE_MEMORY_BYTES`].
pub(super) fn state_bytes(
    loc: &Locator<'_>,
    raw: Option<RawBytes>,
    field: &'static str,
) -> Result<Option<u64>, JobError> {
    let Some(raw) = raw else { return Ok(None) };
    let bytes = *raw.bytes.get_ref();
    if bytes < MIN_STATE_MEMORY_BYTES {
        return Err(loc.at(
            &raw.bytes.span(),
            Some(field),
            format!("{bytes} is too small: give at least {MIN_STATE_MEMORY_BYTES} (1 MiB)"),
        ));
    }
    Ok(Some(bytes))
}
