//! Engine observability (docs/design/metrics.md): one [`Metrics`] registry per job run, updated
//! by the runtime at its events and read by a scrape.
//!
//! - [`Metrics`]: the registry. The runtime's per-record and per-checkpoint updates are relaxed
//!   atomic adds and stores (no lock on the record path); only what is keyed at run time (the
//!   source partitions' lag and the sink tasks' reports, replaced once per poll or commit, and
//!   the operator list, registered once) sits behind a mutex held for a copy.
//! - [`Snapshot`]: what one scrape read, plain data; the oldest open transaction's age is
//!   computed here, at the scrape, from the transaction's start time.
//! - [`render`]: a snapshot in the Prometheus text exposition format (pure).
//! - [`http`]: a small HTTP/1.1 listener serving `GET /metrics`.
//!
//! Names and meanings are listed in docs/guide/metrics.md.

mod histogram;
pub mod http;
mod render;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::engine::clock::now_ms;

use crate::engine::job::Operator;

pub use histogram::{HistogramSnapshot, BUCKETS};
pub use render::render;

use histogram::Histogram;

/// The engine's metrics of one job run. Share it as `Arc<Metrics>`: the runtime updates it,
/// a scrape or a progress line reads it with [`Metrics::snapshot`].
#[derive(Debug)]
pub struct Metrics {
    /// Monotonic base of the barrier timestamps (µs since it).
    base: Instant,
    records_in: AtomicU64,
    records_out: AtomicU64,
    late: AtomicU64,
    skipped: AtomicU64,
    dead_lettered: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    duration: Histogram,
    alignment: Histogram,
    /// The checkpoint whose barrier was injected last, and when (µs since `base`).
    injected_id: AtomicU64,
    injected_at_us: AtomicU64,
    last_id: AtomicU64,
    last_duration_us: AtomicU64,
    last_completed_ms: AtomicU64,
    last_size: AtomicU64,
    persisted_bytes: AtomicU64,
    /// Per sink task: its own counters, replaced at each report (summed at the scrape).
    sinks: Mutex<BTreeMap<u32, SinkReport>>,
    /// Aborts and fencings that stopped the run (counted once, at the end).
    fatal_aborts: AtomicU64,
    fencings: AtomicU64,
    replayed: AtomicU64,
    operators: Mutex<Vec<Arc<OperatorCounter>>>,
    lag: Mutex<BTreeMap<(String, i32), i64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Records in and out of one operator of the job's pipeline.
#[derive(Debug)]
pub struct OperatorCounter {
    index: usize,
    kind: &'static str,
    records_in: AtomicU64,
    records_out: AtomicU64,
}

impl OperatorCounter {
    /// A record reached the operator.
    pub fn record_in(&self) {
        self.records_in.fetch_add(1, Ordering::Relaxed);
    }

    /// The operator emitted `n` records.
    pub fn records_out(&self, n: u64) {
        self.records_out.fetch_add(n, Ordering::Relaxed);
    }
}

/// One sink task's numbers, as [`Metrics::sink`] takes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// Transactions committed (restored ones included).
    pub commits: u64,
    /// Transactions aborted: lingering ones at recovery.
    pub aborts: u64,
    /// When its oldest open or prepared transaction began (wall-clock ms), if any.
    pub oldest_open_ms: Option<i64>,
}

/// What a completed checkpoint took, for the runtime's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointTimes {
    /// From its barrier's injection to its completion (zero when the barrier was not seen).
    pub duration: Duration,
    /// The bytes its batch wrote to the state store.
    pub size_bytes: u64,
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Metrics {
        Metrics {
            base: Instant::now(),
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            late: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            duration: Histogram::default(),
            alignment: Histogram::default(),
            injected_id: AtomicU64::new(0),
            injected_at_us: AtomicU64::new(0),
            last_id: AtomicU64::new(0),
            last_duration_us: AtomicU64::new(0),
            last_completed_ms: AtomicU64::new(0),
            last_size: AtomicU64::new(0),
            persisted_bytes: AtomicU64::new(0),
            sinks: Mutex::new(BTreeMap::new()),
            fatal_aborts: AtomicU64::new(0),
            fencings: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            operators: Mutex::new(Vec::new()),
            lag: Mutex::new(BTreeMap::new()),
        }
    }

    fn micros(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A record was taken from the source.
    pub fn record_in(&self) {
        self.records_in.fetch_add(1, Ordering::Relaxed);
    }

    /// A record was handed to the sink.
    pub fn record_out(&self) {
        self.records_out.fetch_add(1, Ordering::Relaxed);
    }

    /// A window took a record after its windows had fired and their allowed lateness had
    /// passed: left out of the aggregate (and written to the late topic, if the job has one).
    pub fn late_record(&self) {
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    /// An input record the job cannot process was left out (`errors.tolerance = "skip"`).
    pub fn record_skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// An input record the job cannot process went to the dead-letter topic
    /// (`errors.tolerance = "dead-letter"`).
    pub fn record_dead_lettered(&self) {
        self.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }

    /// The coordinator injected checkpoint `id`'s barrier (the checkpoint's start).
    pub fn barrier_injected(&self, id: u64) {
        self.injected_at_us.store(self.micros(), Ordering::Relaxed);
        self.injected_id.store(id, Ordering::Relaxed);
    }

    /// Every task acknowledged checkpoint `id`: its barriers are aligned across the job.
    pub fn barriers_aligned(&self, id: u64) {
        if let Some(us) = self.since_injection(id) {
            self.alignment.observe_micros(us);
        }
    }

    /// Checkpoint `id`'s batch is in the state store: `bytes` written.
    pub fn checkpoint_persisted(&self, bytes: u64) {
        self.last_size.store(bytes, Ordering::Relaxed);
        self.persisted_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Checkpoint `id` completed (durable); returns its duration and size for the log.
    pub fn checkpoint_completed(&self, id: u64) -> CheckpointTimes {
        let us = self.since_injection(id).unwrap_or(0);
        self.duration.observe_micros(us);
        self.last_duration_us.store(us, Ordering::Relaxed);
        self.last_completed_ms.store(now_ms(), Ordering::Relaxed);
        self.last_id.store(id, Ordering::Relaxed);
        self.completed.fetch_add(1, Ordering::Relaxed);
        CheckpointTimes {
            duration: Duration::from_micros(us),
            size_bytes: self.last_size.load(Ordering::Relaxed),
        }
    }

    /// A checkpoint was cancelled or its write failed.
    pub fn checkpoint_failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    fn since_injection(&self, id: u64) -> Option<u64> {
        (self.injected_id.load(Ordering::Relaxed) == id).then(|| {
            self.micros()
                .saturating_sub(self.injected_at_us.load(Ordering::Relaxed))
        })
    }

    /// Sink task `task`'s report: its counters (they count from the sink's start) and the
    /// start of its oldest open or prepared transaction. Called after polls and commits, not
    /// per record; the scrape sums the tasks' reports.
    pub fn sink(&self, task: u32, report: SinkReport) {
        lock(&self.sinks).insert(task, report);
    }

    /// The run stopped because another producer fenced one of its transactional ids.
    pub fn fenced(&self) {
        self.fencings.fetch_add(1, Ordering::Relaxed);
    }

    /// The run restored a checkpoint older than the latest: `records` input records the later
    /// checkpoints had read are read again (their output is written again).
    pub fn replaying(&self, records: u64) {
        self.replayed.store(records, Ordering::Relaxed);
    }

    /// The run stopped because a transaction of a durable checkpoint was aborted (lost).
    pub fn aborted(&self) {
        self.fatal_aborts.fetch_add(1, Ordering::Relaxed);
    }

    /// Replaces the source lag: per (topic, partition), the records between the position and
    /// the end of the partition (the LSO under read_committed).
    pub fn set_source_lag(&self, lags: impl IntoIterator<Item = ((String, i32), i64)>) {
        let mut map = lock(&self.lag);
        for (tp, lag) in lags {
            map.insert(tp, lag);
        }
    }

    /// The counters of `pipeline`'s operators, by index; the same counters for the same
    /// pipeline (several tasks of one job share them: their counts add up).
    pub fn operators(&self, pipeline: &[Operator]) -> Vec<Arc<OperatorCounter>> {
        let kinds: Vec<&'static str> = pipeline.iter().map(operator_kind).collect();
        self.operators_of_kinds(&kinds)
    }

    /// The counters of operators of these kinds, by index, as [`Metrics::operators`] (a
    /// typed job names its operators' kinds itself).
    pub fn operators_of_kinds(&self, kinds: &[&'static str]) -> Vec<Arc<OperatorCounter>> {
        let kinds = kinds.to_vec();
        let mut registered = lock(&self.operators);
        let same = registered.len() == kinds.len()
            && registered.iter().zip(&kinds).all(|(c, k)| c.kind == *k);
        if !same {
            *registered = kinds
                .into_iter()
                .enumerate()
                .map(|(index, kind)| {
                    Arc::new(OperatorCounter {
                        index,
                        kind,
                        records_in: AtomicU64::new(0),
                        records_out: AtomicU64::new(0),
                    })
                })
                .collect();
        }
        registered.clone()
    }

    /// Reads every metric now.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_at(now_ms())
    }

    /// Reads every metric, computing ages against `now_ms` (wall-clock ms).
    pub fn snapshot_at(&self, now_ms: u64) -> Snapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let sinks = lock(&self.sinks).values().copied().collect::<Vec<_>>();
        let oldest = sinks.iter().filter_map(|r| r.oldest_open_ms).min();
        let age_ms = oldest.map_or(0, |start| {
            now_ms.saturating_sub(u64::try_from(start).unwrap_or(0))
        });
        let operators = lock(&self.operators)
            .iter()
            .map(|c| OperatorSnapshot {
                index: c.index,
                kind: c.kind.to_owned(),
                records_in: load(&c.records_in),
                records_out: load(&c.records_out),
            })
            .collect();
        let source_lag = lock(&self.lag)
            .iter()
            .map(|((topic, partition), lag)| PartitionLag {
                topic: topic.clone(),
                partition: *partition,
                lag: *lag,
            })
            .collect();
        let last_completed = load(&self.last_completed_ms);
        Snapshot {
            records_in: load(&self.records_in),
            records_out: load(&self.records_out),
            late_records: load(&self.late),
            skipped_records: load(&self.skipped),
            dead_lettered_records: load(&self.dead_lettered),
            operators,
            checkpoints_completed: load(&self.completed),
            checkpoints_failed: load(&self.failed),
            checkpoint_duration: self.duration.snapshot(),
            checkpoint_alignment: self.alignment.snapshot(),
            last_checkpoint: load(&self.last_id),
            last_checkpoint_duration_seconds: load(&self.last_duration_us) as f64 / 1e6,
            last_checkpoint_size_bytes: load(&self.last_size),
            last_checkpoint_completed_ms: (last_completed > 0).then_some(last_completed),
            persisted_bytes: load(&self.persisted_bytes),
            commits: sinks.iter().map(|r| r.commits).sum(),
            aborts: sinks.iter().map(|r| r.aborts).sum::<u64>() + load(&self.fatal_aborts),
            fencings: load(&self.fencings),
            replayed_records: load(&self.replayed),
            oldest_open_transaction_age_seconds: age_ms as f64 / 1e3,
            source_lag,
        }
    }
}

/// The operator's kind as its label shows it (the job file's names).
pub(crate) fn operator_kind(op: &Operator) -> &'static str {
    match op {
        Operator::Filter(_) => "filter",
        Operator::Project(_) => "project",
        Operator::KeyBy(_) => "key_by",
        Operator::WindowAggregate(_) => "window_aggregate",
        Operator::Join(_) => "join",
        Operator::Where(_) => "where",
        Operator::Select(_) => "select",
    }
}

/// A poisoned lock only means a panic elsewhere while it was held; the data (counters) is
/// still meaningful.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every metric as one scrape read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Records taken from the source.
    pub records_in: u64,
    /// Records handed to the sink.
    pub records_out: u64,
    /// Late records left out of a window's aggregate.
    pub late_records: u64,
    /// Input records the job could not process, left out (`errors.tolerance = "skip"`).
    pub skipped_records: u64,
    /// Input records the job could not process, written to the dead-letter topic.
    pub dead_lettered_records: u64,
    /// Per operator of the pipeline, in order.
    pub operators: Vec<OperatorSnapshot>,
    /// Checkpoints completed (durable).
    pub checkpoints_completed: u64,
    /// Checkpoints cancelled or failed.
    pub checkpoints_failed: u64,
    /// From barrier injection to completion.
    pub checkpoint_duration: HistogramSnapshot,
    /// From barrier injection to the last task's acknowledgement.
    pub checkpoint_alignment: HistogramSnapshot,
    /// The latest completed checkpoint's id (0: none yet in this run).
    pub last_checkpoint: u64,
    /// Its duration.
    pub last_checkpoint_duration_seconds: f64,
    /// The bytes its batch wrote.
    pub last_checkpoint_size_bytes: u64,
    /// When it completed (wall-clock ms).
    pub last_checkpoint_completed_ms: Option<u64>,
    /// Bytes written to the state store by checkpoints, in total.
    pub persisted_bytes: u64,
    /// Transactions the sink committed.
    pub commits: u64,
    /// Transactions aborted: lingering ones at recovery, and a lost one that stopped the run.
    pub aborts: u64,
    /// Fencings by another producer of this job's transactional ids.
    pub fencings: u64,
    /// Input records read again because the run restored a checkpoint older than the latest
    /// (`--from-checkpoint`): the output of the later checkpoints is written again.
    pub replayed_records: u64,
    /// How long the oldest open or prepared transaction has been running (0: none).
    pub oldest_open_transaction_age_seconds: f64,
    /// Per source partition: records not read yet.
    pub source_lag: Vec<PartitionLag>,
}

impl Snapshot {
    /// The total source lag over the partitions.
    pub fn total_lag(&self) -> i64 {
        self.source_lag.iter().map(|p| p.lag).sum()
    }
}

/// One operator's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorSnapshot {
    /// Its position in the job file's pipeline.
    pub index: usize,
    /// Its kind (`filter`, `project`, `key_by`, `window_aggregate`).
    pub kind: String,
    /// Records that reached it.
    pub records_in: u64,
    /// Records it emitted.
    pub records_out: u64,
}

/// One source partition's lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The end offset (LSO under read_committed) minus the position.
    pub lag: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_counts_from_its_own_barrier_only() {
        let m = Metrics::new();
        m.barrier_injected(4);
        m.barriers_aligned(3); // another checkpoint's: not an alignment of 4
        m.checkpoint_persisted(120);
        let t = m.checkpoint_completed(4);
        assert_eq!(t.size_bytes, 120);
        let s = m.snapshot_at(0);
        assert_eq!(s.checkpoints_completed, 1);
        assert_eq!(s.last_checkpoint, 4);
        assert_eq!(s.checkpoint_duration.count, 1);
        assert_eq!(s.checkpoint_alignment.count, 0);
        assert_eq!(s.persisted_bytes, 120);
    }

    #[test]
    fn the_oldest_open_transactions_age_is_computed_at_the_scrape() {
        let m = Metrics::new();
        assert_eq!(
            m.snapshot_at(5_000).oldest_open_transaction_age_seconds,
            0.0
        );
        let report = |commits, aborts, oldest_open_ms| SinkReport {
            commits,
            aborts,
            oldest_open_ms,
        };
        m.sink(0, report(2, 1, Some(1_000)));
        m.sink(1, report(4, 0, Some(2_000)));
        let s = m.snapshot_at(3_500);
        assert_eq!(
            s.oldest_open_transaction_age_seconds, 2.5,
            "task 0's is older"
        );
        assert_eq!((s.commits, s.aborts), (6, 1), "the tasks' counts add up");
        m.aborted();
        m.sink(0, report(3, 1, None));
        let s = m.snapshot_at(9_000);
        assert_eq!(
            s.oldest_open_transaction_age_seconds, 7.0,
            "task 1's is left"
        );
        assert_eq!((s.commits, s.aborts), (7, 2));
        m.sink(1, report(5, 0, None));
        assert_eq!(
            m.snapshot_at(9_000).oldest_open_transaction_age_seconds,
            0.0
        );
    }

    #[test]
    fn tasks_of_one_pipeline_share_its_operator_counters() {
        let m = Metrics::new();
        let ops: Vec<Operator> = Vec::new();
        assert!(m.operators(&ops).is_empty());
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("jobs")
            .join("rides-per-driver-hourly.toml");
        let job = crate::engine::job::Job::load(&file).expect("the shipped job (b)");
        let a = m.operators(&job.pipeline);
        let b = m.operators(&job.pipeline);
        a[0].record_in();
        b[0].record_in();
        b[0].records_out(1);
        let s = m.snapshot_at(0);
        let kinds: Vec<&str> = s.operators.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["filter", "key_by", "window_aggregate"]);
        assert_eq!(
            (s.operators[0].records_in, s.operators[0].records_out),
            (2, 1)
        );
    }
}
