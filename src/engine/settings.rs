//! A job's settings and their rules, one model for both front ends: the job file's
//! `[settings]` table (`job::spec`, which adds the line of the offending value) and a typed
//! job's builder (`dataflow::JobBuilder`, which adds the setter). Each rule is a pure check
//! over the values, naming the job file field (`settings.checkpoint.interval.ms`) whichever
//! front end filled it.

use std::path::PathBuf;

use crate::engine::checkpoint::{self, required_transaction_timeout};

/// How a job's processes run it (`settings.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// One process runs the whole job at `parallelism`, with checkpoints in its own state
    /// directory (the default).
    #[default]
    Local,
    /// Every `onceflow run` of the job file is a member of the job's consumer group
    /// (`source.group.id`): the group deals the tasks (input partitions, and the partitions of
    /// the job's repartition topic) among the members; each member commits its tasks' output,
    /// state changes (changelog topic) and input offsets in one transaction per
    /// `checkpoint.interval.ms` (docs/design/cluster-mode.md).
    Cluster,
}

/// What happens to an input record the job cannot process: not in the source's format, a
/// tombstone, a `key_by` field or the window's time field missing
/// (`settings.errors.tolerance`, Kafka Connect's name and values where they exist).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorTolerance {
    /// `none` (the default): the job stops, naming the record (topic, partition, offset)
    /// and the reason. Nothing after it is committed; fix the input or the job, and restart.
    #[default]
    None,
    /// `skip`: the record is left out, counted (`records_skipped_total`) and logged with its
    /// coordinates.
    Skip,
    /// `dead-letter`: the record, as it came, goes to the topic
    /// `settings.errors.deadletterqueue.topic.name`, with headers naming its topic,
    /// partition, offset and the reason, in the same transaction as the checkpoint's output
    /// (exactly once, as that output is). Needs a Kafka sink.
    DeadLetter {
        /// The dead-letter topic.
        topic: String,
    },
}

/// A job's settings: how it runs, checkpoints and keeps its state. The job file's
/// `[settings]` table and a typed job's [`JobBuilder`](crate::engine::dataflow::JobBuilder)
/// setters fill one (from its defaults); its `check` holds the rules both
/// front ends apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `mode`: `local` (default) or `cluster`.
    pub mode: Mode,
    /// Tasks per operator (default 1).
    pub parallelism: u32,
    /// Key groups, fixed for the life of the job's state (default 128).
    pub key_groups: u32,
    /// `checkpoint.interval.ms` (default 1000).
    pub checkpoint_interval_ms: u64,
    /// `checkpoint.timeout.ms` (default 30000, as the coordinator's default: with the other defaults it fits the timeout budget).
    pub checkpoint_timeout_ms: u64,
    /// `transaction.timeout.ms` (default 300000).
    pub transaction_timeout_ms: u64,
    /// `checkpoint.min.pause.ms`: from the end of one checkpoint to the next trigger
    /// (default 0).
    pub checkpoint_min_pause_ms: u64,
    /// `checkpoint.tolerable.failures`: checkpoints in a row that may fail before the job does
    /// (default 3).
    pub checkpoint_tolerable_failures: u32,
    /// `checkpoint.commit.margin.ms`: commits stop this long before a transaction's deadline
    /// (default 10000).
    pub checkpoint_commit_margin_ms: u64,
    /// `checkpoint.retained`: durable checkpoints kept for `--from-checkpoint` (default 2,
    /// at least 1).
    pub checkpoint_retained: u64,
    /// `restart.allowance.ms`: how long a crashed job may take to come back (default 60000).
    pub restart_allowance_ms: u64,
    /// `state.dir` (default `state/<name>`).
    pub state_dir: PathBuf,
    /// `state.cache.bytes`: the state store's block cache, shared by its keyspaces (default
    /// fjall's, 32 MiB). With the memtables it bounds the memory of state larger than RAM.
    pub state_cache_bytes: Option<u64>,
    /// `state.memtable.bytes`: the most a keyspace of the state store buffers in memory
    /// before it writes a table to disk (default fjall's, 64 MiB). Fixed when the state
    /// directory is created: a restore keeps the size the keyspaces were created with.
    pub state_memtable_bytes: Option<u64>,
    /// `errors.tolerance` (default `none`) and `errors.deadletterqueue.topic.name`.
    pub errors: ErrorTolerance,
}

/// The least `state.cache.bytes` and `state.memtable.bytes` (1 MiB): below it fjall flushes
/// memtables constantly and caches nothing useful.
pub const MIN_STATE_MEMORY_BYTES: u64 = 1 << 20;

impl Settings {
    /// The checkpoint coordinator's settings for this job (the commit retry backoff at its
    /// default: the sink owns commit retries).
    pub(crate) fn checkpoint(&self) -> checkpoint::Settings {
        checkpoint::Settings {
            interval_ms: self.checkpoint_interval_ms,
            min_pause_ms: self.checkpoint_min_pause_ms,
            checkpoint_timeout_ms: self.checkpoint_timeout_ms,
            max_consecutive_failures: self.checkpoint_tolerable_failures,
            transaction_timeout_ms: self.transaction_timeout_ms,
            commit_margin_ms: self.checkpoint_commit_margin_ms,
            retention: self.checkpoint_retained,
            restart_allowance_ms: self.restart_allowance_ms,
            ..checkpoint::Settings::default()
        }
    }
}

/// The most key groups a job may have (a key group is a u16 in state keys; Flink's limit).
pub const MAX_KEY_GROUPS: u32 = 32_768;

impl Settings {
    /// The defaults, for the job `name` (its state directory is `state/<name>`).
    pub(crate) fn defaults(name: &str) -> Settings {
        let checkpoint = checkpoint::Settings::default();
        Settings {
            mode: Mode::Local,
            parallelism: 1,
            key_groups: 128,
            checkpoint_interval_ms: checkpoint.interval_ms,
            checkpoint_timeout_ms: checkpoint.checkpoint_timeout_ms,
            transaction_timeout_ms: checkpoint.transaction_timeout_ms,
            checkpoint_min_pause_ms: checkpoint.min_pause_ms,
            checkpoint_tolerable_failures: checkpoint.max_consecutive_failures,
            checkpoint_commit_margin_ms: checkpoint.commit_margin_ms,
            checkpoint_retained: checkpoint.retention,
            restart_allowance_ms: checkpoint.restart_allowance_ms,
            state_dir: PathBuf::from("state").join(name),
            state_cache_bytes: None,
            state_memtable_bytes: None,
            errors: ErrorTolerance::None,
        }
    }

    /// Every rule the settings must keep, in the order a user meets them; `sink` is what
    /// the rules need to know of the sink.
    ///
    /// # Errors
    /// The first rule broken: the job file field and what to change.
    pub(crate) fn check(&self, sink: SinkFacts) -> Result<(), Invalid> {
        let exactly_once = sink.exactly_once;
        self.check_scale()?;
        for (value, field) in [
            (self.checkpoint_interval_ms, "settings.checkpoint.interval.ms"),
            (self.checkpoint_timeout_ms, "settings.checkpoint.timeout.ms"),
        ] {
            if value == 0 {
                return Err(Invalid::new(field, "must be at least 1"));
            }
        }
        if self.checkpoint_retained == 0 {
            return Err(Invalid::new(
                "settings.checkpoint.retained",
                "must be at least 1 (the latest checkpoint is always kept)",
            ));
        }
        if self.state_dir.as_os_str().to_string_lossy().trim().is_empty() {
            return Err(Invalid::new("settings.state.dir", "the directory is empty"));
        }
        for (bytes, field) in [
            (self.state_cache_bytes, "settings.state.cache.bytes"),
            (self.state_memtable_bytes, "settings.state.memtable.bytes"),
        ] {
            if let Some(bytes) = bytes.filter(|b| *b < MIN_STATE_MEMORY_BYTES) {
                return Err(Invalid::new(
                    field,
                    format!("{bytes} is too small: give at least {MIN_STATE_MEMORY_BYTES} (1 MiB)"),
                ));
            }
        }
        self.check_errors(sink)?;
        self.check_transaction_timeout(exactly_once)
    }

    /// `errors.*`: a dead-letter topic is named, and written in the Kafka sink's
    /// transactions.
    fn check_errors(&self, sink: SinkFacts) -> Result<(), Invalid> {
        let ErrorTolerance::DeadLetter { topic } = &self.errors else {
            return Ok(());
        };
        if topic.trim().is_empty() {
            return Err(Invalid::new(
                "settings.errors.deadletterqueue.topic.name",
                "errors.tolerance = \"dead-letter\" needs the dead-letter topic: set errors.deadletterqueue.topic.name",
            ));
        }
        if !sink.kafka {
            return Err(Invalid::new(
                "settings.errors.tolerance",
                "\"dead-letter\" writes the records to a Kafka topic in the sink's transactions, and this job's sink is a file: use \"skip\" or \"none\", or a Kafka sink",
            ));
        }
        Ok(())
    }

    /// `parallelism` and `key.groups`: at least one key group per task.
    fn check_scale(&self) -> Result<(), Invalid> {
        let (parallelism, key_groups) = (self.parallelism, self.key_groups);
        if parallelism == 0 {
            return Err(Invalid::new("settings.parallelism", "must be at least 1"));
        }
        if key_groups == 0 || key_groups > MAX_KEY_GROUPS || key_groups < parallelism {
            return Err(Invalid::new(
                "settings.key.groups",
                format!(
                    "{key_groups} is out of range: give parallelism ({parallelism}) to \
                     {MAX_KEY_GROUPS}; it cannot change once the job has state"
                ),
            ));
        }
        Ok(())
    }

    /// `transaction.timeout.ms` against what the job needs: in cluster mode (exactly-once
    /// only) an interval and its commit; in local mode with exactly-once the one budget rule.
    fn check_transaction_timeout(&self, exactly_once: bool) -> Result<(), Invalid> {
        let interval = self.checkpoint_interval_ms;
        let txn = self.transaction_timeout_ms;
        if self.mode == Mode::Cluster {
            // A member's transaction spans one commit interval; a member that dies holds its
            // tasks' new owner back until the broker aborts its transaction, so this timeout
            // is short (Kafka Streams: 10 s) and only has to outlast an interval and its
            // commit.
            if !exactly_once {
                return Err(Invalid::new(
                    "settings.mode",
                    "mode = \"cluster\" runs exactly-once only: set sink.delivery.guarantee = \"exactly-once\" or mode = \"local\"",
                ));
            }
            let least = interval.saturating_mul(2).max(1_000);
            if txn < least {
                return Err(Invalid::new(
                    "settings.transaction.timeout.ms",
                    format!("{txn} is too short for mode = \"cluster\": a member's transaction spans one checkpoint.interval.ms ({interval}) and its commit; set it to at least {least} (10000 is a good value: a member that dies holds its tasks back that long)"),
                ));
            }
            return Ok(());
        }
        if exactly_once {
            // The part of the one budget rule known from the settings; `run` also checks the
            // brokers' transaction.max.timeout.ms at start.
            let needed = required_transaction_timeout(&self.checkpoint());
            if txn < needed {
                return Err(Invalid::new(
                    "settings.transaction.timeout.ms",
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
}

/// What the settings' rules need to know of the job's sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SinkFacts {
    /// `sink.delivery.guarantee` is exactly-once (the transaction timeout budget applies to it
    /// alone).
    pub exactly_once: bool,
    /// The sink is a Kafka topic (not files).
    pub kafka: bool,
}

/// A settings rule broken: the job file field (`settings.key.groups`) and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    /// The job file field.
    pub field: &'static str,
    /// One line: what is wrong and what to change.
    pub message: String,
}

impl Invalid {
    fn new(field: &'static str, message: impl Into<String>) -> Invalid {
        Invalid {
            field,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(change: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = Settings::defaults("j");
        change(&mut s);
        s
    }

    /// The defaults pass every rule, exactly once or not; each broken rule names its field.
    #[test]
    fn each_rule_names_its_field() {
        let kafka = |exactly_once| SinkFacts { exactly_once, kafka: true };
        let file = SinkFacts { exactly_once: true, kafka: false };
        assert_eq!(Settings::defaults("j").check(kafka(true)), Ok(()));
        assert_eq!(Settings::defaults("j").check(kafka(false)), Ok(()));
        assert_eq!(Settings::defaults("j").check(file), Ok(()));
        let dead_letter = |topic: &str| ErrorTolerance::DeadLetter { topic: topic.into() };
        let cases: Vec<(&str, Settings, SinkFacts, &str, &str)> = vec![
            ("no task", with(|s| s.parallelism = 0), kafka(true), "settings.parallelism", "at least 1"),
            ("fewer key groups than tasks", with(|s| s.parallelism = 200), kafka(true), "settings.key.groups", "128 is out of range: give parallelism (200) to 32768"),
            ("too many key groups", with(|s| s.key_groups = 40_000), kafka(true), "settings.key.groups", "out of range"),
            ("no interval", with(|s| s.checkpoint_interval_ms = 0), kafka(true), "settings.checkpoint.interval.ms", "at least 1"),
            ("no checkpoint timeout", with(|s| s.checkpoint_timeout_ms = 0), kafka(false), "settings.checkpoint.timeout.ms", "at least 1"),
            ("nothing retained", with(|s| s.checkpoint_retained = 0), kafka(true), "settings.checkpoint.retained", "at least 1"),
            ("no state directory", with(|s| s.state_dir = PathBuf::from(" ")), kafka(true), "settings.state.dir", "empty"),
            ("a tiny cache", with(|s| s.state_cache_bytes = Some(4096)), kafka(true), "settings.state.cache.bytes", "4096 is too small"),
            ("a tiny memtable", with(|s| s.state_memtable_bytes = Some(0)), kafka(true), "settings.state.memtable.bytes", "at least 1048576"),
            ("the budget, exactly once", with(|s| { s.checkpoint_interval_ms = 10_000; s.transaction_timeout_ms = 30_000 }), kafka(true), "settings.transaction.timeout.ms", "30000 is below the 230000"),
            ("cluster mode, at least once", with(|s| s.mode = Mode::Cluster), kafka(false), "settings.mode", "exactly-once only"),
            ("cluster mode, a short timeout", with(|s| { s.mode = Mode::Cluster; s.transaction_timeout_ms = 999 }), kafka(true), "settings.transaction.timeout.ms", "too short for mode = \"cluster\""),
            ("skip is fine with a file sink", with(|s| s.errors = ErrorTolerance::Skip), file, "", ""),
            ("a dead-letter topic unnamed", with(|s| s.errors = dead_letter(" ")), kafka(true), "settings.errors.deadletterqueue.topic.name", "needs the dead-letter topic"),
            ("a dead-letter topic beside a file sink", with(|s| s.errors = dead_letter("dlq")), file, "settings.errors.tolerance", "this job's sink is a file"),
        ];
        for (name, settings, sink, field, part) in cases {
            if field.is_empty() {
                assert_eq!(settings.check(sink), Ok(()), "{name}");
                continue;
            }
            let e = settings.check(sink).unwrap_err();
            assert_eq!(e.field, field, "{name}: {}", e.message);
            assert!(e.message.contains(part), "{name}: {}", e.message);
            assert!(!e.message.contains('\n'), "{name}: one line");
        }
        // The budget is the exactly-once sink's: at least once, a short timeout is fine.
        let short = with(|s| { s.checkpoint_interval_ms = 10_000; s.transaction_timeout_ms = 30_000 });
        assert_eq!(short.check(kafka(false)), Ok(()));
        assert_eq!(with(|s| s.errors = dead_letter("dlq")).check(kafka(true)), Ok(()));
    }
}
