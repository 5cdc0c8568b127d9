//! [`JobBuilder`]: a typed job's name, source, sink and settings. The settings are the job's
//! one settings model, filled here directly and checked by the rules a job file's
//! `[settings]` meets too; the source's and the sink's fields are kept as the job file's and
//! checked by its own parser ([`Job::parse`]). Either way a typed job and a job file take the
//! same defaults and refuse the same values with the same message.

use std::path::Path;
use std::time::Duration;

use toml::{Table, Value};

use super::BuildError;
use crate::engine::job::{
    DeliveryGuarantee, ErrorTolerance, Job, JobError, Settings, StartPosition,
};
use crate::engine::settings::SinkFacts;

/// A typed job's settings, before its dataflow: every setter mirrors a job file field (its
/// docs name it) and takes the job file's default when not called. Start the dataflow with
/// [`JobBuilder::source`].
#[derive(Debug, Clone)]
pub struct JobBuilder {
    name: String,
    /// The source's and the sink's fields, as the job file's tables by dotted field
    /// (`source.group.id`).
    fields: Vec<(&'static str, Value)>,
    /// The settings, from their defaults.
    settings: Settings,
}

/// Which setter sets a job file field (for [`BuildError::Setting`]).
const SETTERS: &[(&str, &str)] = &[
    ("name", "JobBuilder::new"),
    ("source.brokers", "brokers"),
    ("source.topics", "source"),
    ("source.group.id", "group_id"),
    ("source.start", "start"),
    ("source.partition.discovery.ms", "partition_discovery"),
    ("source.type", "file_source"),
    ("source.path", "file_source"),
    ("source.format", "file_source"),
    ("source.serving_speed_factor", "serving_speed_factor"),
    ("source.max_delay_s", "max_delay"),
    ("sink.topic", "KafkaSink"),
    ("sink.type", "FileSink"),
    ("sink.path", "FileSink"),
    ("sink.columns", "FileSink::csv"),
    ("sink.rolling.size.bytes", "FileSink::rolling"),
    ("sink.rolling.interval.ms", "FileSink::rolling"),
    ("sink.part.prefix", "FileSink::part_prefix"),
    ("sink.delivery.guarantee", "delivery_guarantee"),
    ("sink.transactional.id.prefix", "transactional_id_prefix"),
    ("settings.parallelism", "parallelism"),
    ("settings.key.groups", "key_groups"),
    ("settings.checkpoint.interval.ms", "checkpoint_interval"),
    ("settings.checkpoint.timeout.ms", "checkpoint_timeout"),
    ("settings.checkpoint.min.pause.ms", "checkpoint_min_pause"),
    (
        "settings.checkpoint.tolerable.failures",
        "tolerable_checkpoint_failures",
    ),
    ("settings.checkpoint.commit.margin.ms", "commit_margin"),
    ("settings.checkpoint.retained", "retained_checkpoints"),
    ("settings.transaction.timeout.ms", "transaction_timeout"),
    ("settings.restart.allowance.ms", "restart_allowance"),
    ("settings.state.dir", "state_dir"),
    ("settings.state.cache.bytes", "state_cache_bytes"),
    ("settings.state.memtable.bytes", "state_memtable_bytes"),
    ("settings.errors.tolerance", "errors_tolerance"),
    (
        "settings.errors.deadletterqueue.topic.name",
        "errors_tolerance",
    ),
];

fn ms(d: Duration) -> Value {
    Value::Integer(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

impl JobBuilder {
    /// A job named `name` (letters, digits, `.`, `_`, `-`): the default consumer group,
    /// state directory (`state/<name>`) and log name.
    pub fn new(name: impl Into<String>) -> JobBuilder {
        let name = name.into();
        JobBuilder {
            settings: Settings::defaults(&name),
            name,
            fields: Vec::new(),
        }
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn set(mut self, field: &'static str, value: Value) -> JobBuilder {
        self.fields.retain(|(f, _)| *f != field);
        self.fields.push((field, value));
        self
    }

    /// `source.brokers`: bootstrap brokers, `host:port[,host:port]` (default
    /// `localhost:9092`; [`Dataflow::options`](super::Dataflow::options) points the clients
    /// at them).
    pub fn brokers(self, brokers: impl Into<String>) -> JobBuilder {
        self.set("source.brokers", Value::String(brokers.into()))
    }

    /// `source.group.id` (default: the job's name): offsets are committed there after each
    /// checkpoint, for monitoring tools only.
    pub fn group_id(self, group: impl Into<String>) -> JobBuilder {
        self.set("source.group.id", Value::String(group.into()))
    }

    /// `source.start` (default earliest): where a job without a checkpoint starts reading.
    pub fn start(self, start: StartPosition) -> JobBuilder {
        let text = match start {
            StartPosition::Earliest => "earliest",
            StartPosition::Latest => "latest",
        };
        self.set("source.start", Value::String(text.into()))
    }

    /// `source.partition.discovery.ms` (default 10 s; zero turns discovery off).
    pub fn partition_discovery(self, every: Duration) -> JobBuilder {
        self.set("source.partition.discovery.ms", ms(every))
    }

    /// `sink.delivery.guarantee` (default exactly-once, which needs
    /// [`Self::transactional_id_prefix`]).
    pub fn delivery_guarantee(self, guarantee: DeliveryGuarantee) -> JobBuilder {
        let text = match guarantee {
            DeliveryGuarantee::ExactlyOnce => "exactly-once",
            DeliveryGuarantee::AtLeastOnce => "at-least-once",
            DeliveryGuarantee::None => "none",
        };
        self.set("sink.delivery.guarantee", Value::String(text.into()))
    }

    /// `sink.transactional.id.prefix`: names the sink's transactional ids; unique to this job
    /// on the cluster.
    pub fn transactional_id_prefix(self, prefix: impl Into<String>) -> JobBuilder {
        self.set("sink.transactional.id.prefix", Value::String(prefix.into()))
    }

    /// `settings.parallelism` (default 1): subtasks per operator.
    pub fn parallelism(mut self, n: u32) -> JobBuilder {
        self.settings.parallelism = n;
        self
    }

    /// `settings.key.groups` (default 128): fixed for the life of the job's state.
    pub fn key_groups(mut self, n: u32) -> JobBuilder {
        self.settings.key_groups = n;
        self
    }

    /// `settings.checkpoint.interval.ms` (default 1 s).
    pub fn checkpoint_interval(mut self, every: Duration) -> JobBuilder {
        self.settings.checkpoint_interval_ms = millis(every);
        self
    }

    /// `settings.checkpoint.timeout.ms` (default 30 s).
    pub fn checkpoint_timeout(mut self, timeout: Duration) -> JobBuilder {
        self.settings.checkpoint_timeout_ms = millis(timeout);
        self
    }

    /// `settings.checkpoint.min.pause.ms` (default 0).
    pub fn checkpoint_min_pause(mut self, pause: Duration) -> JobBuilder {
        self.settings.checkpoint_min_pause_ms = millis(pause);
        self
    }

    /// `settings.checkpoint.tolerable.failures` (default 3).
    pub fn tolerable_checkpoint_failures(mut self, n: u32) -> JobBuilder {
        self.settings.checkpoint_tolerable_failures = n;
        self
    }

    /// `settings.checkpoint.commit.margin.ms` (default 10 s).
    pub fn commit_margin(mut self, margin: Duration) -> JobBuilder {
        self.settings.checkpoint_commit_margin_ms = millis(margin);
        self
    }

    /// `settings.checkpoint.retained` (default 2, at least 1).
    pub fn retained_checkpoints(mut self, n: u64) -> JobBuilder {
        self.settings.checkpoint_retained = n;
        self
    }

    /// `settings.transaction.timeout.ms` (default 300 s); must cover the checkpoint settings.
    pub fn transaction_timeout(mut self, timeout: Duration) -> JobBuilder {
        self.settings.transaction_timeout_ms = millis(timeout);
        self
    }

    /// `settings.restart.allowance.ms` (default 60 s).
    pub fn restart_allowance(mut self, allowance: Duration) -> JobBuilder {
        self.settings.restart_allowance_ms = millis(allowance);
        self
    }

    /// `settings.state.dir` (default `state/<name>`).
    pub fn state_dir(mut self, dir: impl AsRef<Path>) -> JobBuilder {
        self.settings.state_dir = dir.as_ref().to_path_buf();
        self
    }

    /// `source.serving_speed_factor` of a [`file_source`](Self::file_source): event time
    /// runs this many times faster than wall time (600 = ten minutes per second; default 0 =
    /// as fast as possible).
    pub fn serving_speed_factor(self, factor: f64) -> JobBuilder {
        self.set("source.serving_speed_factor", Value::Float(factor))
    }

    /// `source.max_delay_s` of a [`file_source`](Self::file_source): each event is emitted up
    /// to this late (whole seconds; default 0: in file order).
    pub fn max_delay(self, delay: Duration) -> JobBuilder {
        self.set("source.max_delay_s", int(delay.as_secs()))
    }

    /// `settings.state.cache.bytes` (default fjall's).
    pub fn state_cache_bytes(mut self, bytes: u64) -> JobBuilder {
        self.settings.state_cache_bytes = Some(bytes);
        self
    }

    /// `settings.state.memtable.bytes` (default fjall's).
    pub fn state_memtable_bytes(mut self, bytes: u64) -> JobBuilder {
        self.settings.state_memtable_bytes = Some(bytes);
        self
    }

    /// `settings.errors.tolerance` (and `errors.deadletterqueue.topic.name`): what happens to
    /// a record the job cannot process, e.g. one [`Json`](super::Json) cannot read (default
    /// [`ErrorTolerance::None`]: the job stops naming it).
    pub fn errors_tolerance(mut self, tolerance: ErrorTolerance) -> JobBuilder {
        self.settings.errors = tolerance;
        self
    }

    /// The checked job for `topics` and the sink topic `sink_topic`, by the job file's rules
    /// (an empty pipeline: the typed operators run instead).
    pub(crate) fn check(
        &self,
        topics: &[String],
        sink: &[(&'static str, Value)],
    ) -> Result<Job, BuildError> {
        let mut root = Table::new();
        root.insert("name".into(), Value::String(self.name.clone()));
        if !topics.is_empty() {
            let topics = topics.iter().cloned().map(Value::String).collect();
            insert(&mut root, "source.topics", Value::Array(topics));
        }
        for (field, value) in sink {
            insert(&mut root, field, value.clone());
        }
        for (field, value) in &self.fields {
            insert(&mut root, field, value.clone());
        }
        if !self.fields.iter().any(|(f, _)| *f == "source.brokers") {
            // Job files need one; a typed job may get its brokers from the run options only.
            insert(
                &mut root,
                "source.brokers",
                Value::String("localhost:9092".into()),
            );
        }
        let text = toml::to_string(&root).map_err(|e| self.dataflow_error(e.to_string()))?;
        let mut job = Job::parse(&self.name, &text).map_err(|e| self.setting_error(e))?;
        let sink = SinkFacts {
            exactly_once: job.sink.guarantee == DeliveryGuarantee::ExactlyOnce,
            kafka: job.sink.file.is_none(),
        };
        self.settings.check(sink).map_err(|e| BuildError::Setting {
            job: self.name.clone(),
            setter: setter_of(e.field),
            field: e.field.to_owned(),
            message: e.message,
        })?;
        job.settings = self.settings.clone();
        Ok(job)
    }

    fn setting_error(&self, e: JobError) -> BuildError {
        match e {
            JobError::Invalid { field, message, .. } => BuildError::Setting {
                job: self.name.clone(),
                setter: setter_of(&field),
                field,
                message,
            },
            other => self.dataflow_error(other.to_string()),
        }
    }

    pub(crate) fn dataflow_error(&self, message: impl Into<String>) -> BuildError {
        BuildError::Dataflow {
            job: self.name.clone(),
            message: message.into(),
        }
    }
}

/// The setter that sets a job file field.
fn setter_of(field: &str) -> &'static str {
    SETTERS
        .iter()
        .find(|(f, _)| *f == field)
        .map_or("JobBuilder", |(_, s)| s)
}

/// Puts `value` at the dotted `field`, making the tables on the way.
fn insert(root: &mut Table, field: &str, value: Value) {
    let mut parts: Vec<&str> = field.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut table = root;
    for p in parts {
        let entry = table
            .entry(p.to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(t) = entry else { return };
        table = t;
    }
    table.insert(last.to_owned(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics() -> Vec<String> {
        vec!["in".to_owned()]
    }

    fn out() -> Vec<(&'static str, Value)> {
        vec![("sink.topic", Value::String("out".into()))]
    }

    #[test]
    fn the_job_files_defaults_apply() {
        let job = JobBuilder::new("j")
            .transactional_id_prefix("p")
            .check(&topics(), &out())
            .unwrap();
        assert_eq!(job.settings.parallelism, 1);
        assert_eq!(job.settings.key_groups, 128);
        assert_eq!(job.settings.checkpoint_interval_ms, 1_000);
        assert_eq!(job.settings.state_dir, Path::new("state").join("j"));
        assert_eq!(job.source.group, "j");
        assert_eq!(job.sink.topic, "out");
        assert_eq!(job.sink.guarantee, DeliveryGuarantee::ExactlyOnce);
    }

    #[test]
    fn the_setters_reach_the_job() {
        let job = JobBuilder::new("j")
            .brokers("a:1,b:2")
            .group_id("g")
            .start(StartPosition::Latest)
            .delivery_guarantee(DeliveryGuarantee::AtLeastOnce)
            .parallelism(2)
            .key_groups(16)
            .checkpoint_interval(Duration::from_millis(200))
            .state_dir("/tmp/x")
            .check(&topics(), &out())
            .unwrap();
        assert_eq!(job.source.brokers, ["a:1", "b:2"]);
        assert_eq!(job.source.group, "g");
        assert_eq!(job.source.start, StartPosition::Latest);
        assert_eq!(job.sink.guarantee, DeliveryGuarantee::AtLeastOnce);
        assert_eq!((job.settings.parallelism, job.settings.key_groups), (2, 16));
        assert_eq!(job.settings.checkpoint_interval_ms, 200);
        assert_eq!(job.settings.state_dir, Path::new("/tmp/x"));
    }

    /// What a job file refuses, the builder refuses, naming the field and the setter.
    #[test]
    fn refusals_name_the_field_and_the_setter() {
        let cases: Vec<(JobBuilder, &str, &str)> = vec![
            (
                JobBuilder::new("j"),
                "sink.transactional.id.prefix",
                "transactional_id_prefix",
            ),
            (
                JobBuilder::new("j")
                    .transactional_id_prefix("p")
                    .parallelism(0),
                "settings.parallelism",
                "parallelism",
            ),
            (
                JobBuilder::new("j")
                    .transactional_id_prefix("p")
                    .key_groups(2)
                    .parallelism(4),
                "settings.key.groups",
                "key_groups",
            ),
            (
                JobBuilder::new("j")
                    .transactional_id_prefix("p")
                    .transaction_timeout(Duration::from_secs(10)),
                "settings.transaction.timeout.ms",
                "transaction_timeout",
            ),
            (
                JobBuilder::new("j")
                    .transactional_id_prefix("p")
                    .errors_tolerance(ErrorTolerance::DeadLetter { topic: " ".into() }),
                "settings.errors.deadletterqueue.topic.name",
                "errors_tolerance",
            ),
            (JobBuilder::new("no spaces"), "name", "JobBuilder::new"),
        ];
        for (builder, want_field, want_setter) in cases {
            match builder.check(&topics(), &out()) {
                Err(BuildError::Setting { field, setter, .. }) => {
                    assert_eq!((field.as_str(), setter), (want_field, want_setter));
                }
                other => panic!("{want_field}: {other:?}"),
            }
        }
        let e = JobBuilder::new("j").check(&topics(), &out()).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
