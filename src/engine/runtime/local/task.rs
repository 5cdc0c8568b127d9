//! Start-up of [`run`]: the state, the budget, the sinks' resume, the partitions' assignment;
//! then the coordinator's loop (`coordinate`) recovers and starts the subtasks (`launch`).

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use tokio::sync::watch;

use super::coordinate::{Master, RecoveredSinks};
use super::launch::Plan;
use super::positions::{file_input, replayed_records, start_recorded};
use crate::client::{Admin, Cluster, Consumer, ConsumerConfig, IsolationLevel, TopicPartition};
use crate::engine::checkpoint;
use crate::engine::job::{DeliveryGuarantee, Job, OutputFormat};
use crate::engine::metrics::Metrics;
use crate::engine::runtime::connect::connect;
use crate::engine::runtime::routing::assign_partitions;
use crate::engine::runtime::topology::{state_layout, Topology, POOL_SIZE};
use crate::engine::runtime::{RunConfig, RunSummary, RuntimeError};
use crate::engine::sink::file::{FileFormat, FileWriter, FileWriterConfig, PendingFiles};
use crate::engine::sink::{
    check_timeout_budget, Delivery, KafkaWriter, PreparedFiles, PreparedOutput, SinkCommittable,
    SinkConfig,
};
use crate::engine::state::{
    CheckpointRecord, Layout, RestoreFrom, Rollback, StateStore, StoreOptions,
};

/// Runs `config.job` at its `settings.parallelism` until `stop` turns true or a fatal error.
/// A stop is graceful: a final checkpoint (the sources read nothing after its barrier), its
/// transactions committed and recorded as resolved, then the return: nothing is left open.
///
/// A checkpoint restores at any parallelism: state moves with its key groups, positions with
/// their partitions, and the open transactions of sink tasks that no longer exist are aborted
/// once the restored committables are resolved.
///
/// # Errors
/// Every [`RuntimeError`]: an unsupported job, a state store that cannot restore, a timeout
/// budget the brokers refuse, data loss or a prefix clash found by a sink, a checkpoint
/// failure, a source that cannot read.
pub(crate) async fn run(
    config: RunConfig,
    topology: Arc<dyn Topology>,
    mut stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<RunSummary, RuntimeError> {
    let job = &config.job;
    check_supported(job)?;
    // Before anything is opened: a format name the program does not know is a mistake in the
    // job file.
    let line_format = match &job.source.file {
        Some(file) => Some(
            file.format
                .line_format(&config.formats)
                .map_err(RuntimeError::LineFormat)?,
        ),
        None => None,
    };
    let parallelism = usize::try_from(job.settings.parallelism)
        .unwrap_or(1)
        .max(1);
    let settings = job.settings.checkpoint();
    let layout = state_layout(job, topology.as_ref());
    let key_groups = layout.key_groups;
    let options = StoreOptions {
        retain: u32::try_from(settings.retention).unwrap_or(u32::MAX),
        cache_bytes: job.settings.state_cache_bytes,
        memtable_bytes: job.settings.state_memtable_bytes,
    };
    let (store, record) =
        open_store(config.state_dir.clone(), layout, options, config.restore).await?;
    if let Some(rollback) = store.rollback() {
        report_replay(&record, rollback, &metrics);
    }
    let allowance = Duration::from_millis(settings.restart_allowance_ms);
    let Some(cluster) = connect(&config.client, allowance, &mut stop).await? else {
        return Ok(RunSummary {
            records_in: 0,
            records_out: 0,
            last_checkpoint: record.id,
        });
    };
    let delivery = delivery(job.sink.guarantee);
    if delivery == Delivery::ExactlyOnce && job.sink.file.is_none() {
        check_timeout_budget(&Admin::with_cluster(cluster.clone()), &settings).await?;
    }
    let recovered = match &job.sink.file {
        Some(file) => recover_files(&config, file, &record, parallelism, store.generation())?,
        None => RecoveredSinks::Kafka(
            resume_kafka(&config, &cluster, &record, delivery, &settings, parallelism).await?,
        ),
    };
    let mut consumer = config.consumer.clone();
    consumer.isolation_level = IsolationLevel::ReadCommitted;
    let assignment = source_assignment(job, &consumer, &cluster, parallelism).await?;
    let plan = Plan {
        job: job.clone(),
        topology,
        parallelism,
        key_groups,
        consumer,
        cluster,
        assignment,
        patience: Duration::from_millis(settings.checkpoint_timeout_ms),
        transaction_timeout: Duration::from_millis(settings.transaction_timeout_ms),
        metrics,
        from_checkpoint: record.id > 0 || start_recorded(&record),
        client: config.client.clone(),
        line_format,
    };
    let mut master = Master::new(settings, plan, store, recovered, record.id);
    master.recover(&record).await?;
    master.run(stop).await
}

/// A restore of a checkpoint older than the latest reads input again and writes output
/// again: counted in the metrics and said in the log.
fn report_replay(record: &CheckpointRecord, rollback: &Rollback, metrics: &Metrics) {
    let replayed = replayed_records(&record.positions, rollback);
    metrics.replaying(replayed);
    tracing::warn!(
        restored = rollback.to,
        latest = rollback.from,
        replayed,
        committed_since = rollback.committed_since,
        "restoring a checkpoint older than the latest: the input read after it is read again and the output the later checkpoints committed is written again (read_committed readers see it twice)"
    );
}

/// Which source subtask reads what: the source topics' partitions spread over the
/// subtasks, or, for a file source, the one ordered stream of files to subtask 0 (the others
/// only forward barriers).
async fn source_assignment(
    job: &Job,
    consumer: &ConsumerConfig,
    cluster: &Arc<Cluster>,
    parallelism: usize,
) -> Result<Vec<Vec<TopicPartition>>, RuntimeError> {
    if job.source.file.is_some() {
        let mut a = vec![Vec::new(); parallelism];
        if let Some(first) = a.first_mut() {
            first.push(file_input());
        }
        return Ok(a);
    }
    let probe = Consumer::with_cluster(consumer.clone(), cluster.clone());
    let mut partitions = Vec::new();
    for t in &job.source.topics {
        let found = probe
            .partitions_for(t)
            .await
            .map_err(|e| RuntimeError::client(format!("looking up source topic {t}"), e))?;
        partitions.extend(found);
    }
    Ok(assign_partitions(&partitions, parallelism))
}

/// Step 1 only of the Kafka sinks' recovery: the pools' init waits until the resolutions are
/// durable (AbortPool). Sink task 0 resolves every restored committable, whichever task
/// prepared it; the others have none to resolve.
async fn resume_kafka(
    config: &RunConfig,
    cluster: &Arc<Cluster>,
    record: &CheckpointRecord,
    delivery: Delivery,
    settings: &checkpoint::Settings,
    parallelism: usize,
) -> Result<Vec<crate::engine::sink::Resumed>, RuntimeError> {
    let restored: Vec<SinkCommittable> = record
        .committables
        .iter()
        .filter_map(|c| match c {
            PreparedOutput::Transaction(t) => Some(SinkCommittable {
                checkpoint: record.id,
                transaction: t.clone(),
            }),
            PreparedOutput::Files(_) => None,
        })
        .collect();
    let mut resumed = Vec::with_capacity(parallelism);
    for i in 0..parallelism {
        let mine: &[SinkCommittable] = if i == 0 { &restored } else { &[] };
        let config = sink_config(config, delivery, settings, i);
        resumed.push(KafkaWriter::resume(config, cluster.clone(), mine).await?);
    }
    tracing::info!(
        checkpoint = record.id,
        resumed = restored.len(),
        parallelism,
        "restored committables resumed"
    );
    Ok(resumed)
}

/// The file sink's recovery, before any task writes: the restored checkpoint's part files
/// are made final (whichever task wrote them), then every other in-progress part file of the
/// job's prefix is removed (written after that checkpoint: the replay writes their records
/// again). Each task's sink opens later, at AbortPool, with this process's generation in its
/// file names, so no name of an earlier run is ever reused.
fn recover_files(
    config: &RunConfig,
    file: &crate::engine::job::FileSinkSpec,
    record: &CheckpointRecord,
    parallelism: usize,
    generation: u64,
) -> Result<RecoveredSinks, RuntimeError> {
    let exactly_once = config.job.sink.guarantee == DeliveryGuarantee::ExactlyOnce;
    let format = file_format(&file.format)?;
    let restored: Vec<&PreparedFiles> = record
        .committables
        .iter()
        .filter_map(|c| match c {
            PreparedOutput::Files(f) => Some(f),
            PreparedOutput::Transaction(_) => None,
        })
        .collect();
    let pending: Vec<PendingFiles> = restored.iter().map(|f| f.pending.clone()).collect();
    let report = FileWriter::recover(&file.path, &file.prefix, exactly_once, &pending)?;
    tracing::info!(checkpoint = record.id, ?report, "file sink recovered");
    let committed = restored
        .iter()
        .map(|f| (f.name.clone(), checkpoint::CommitOutcome::Completed))
        .collect();
    let configs = (0..parallelism)
        .map(|task| FileWriterConfig {
            dir: file.path.clone(),
            prefix: file.prefix.clone(),
            task: u32::try_from(task).unwrap_or(u32::MAX),
            generation,
            format: format.clone(),
            roll_size_bytes: file.roll_size_bytes,
            roll_interval: Duration::from_millis(file.roll_interval_ms),
            exactly_once,
        })
        .collect();
    Ok(RecoveredSinks::Files { configs, committed })
}

/// The part files' layout of a job's file sink; an Avro schema file is read (and checked)
/// now, before anything is recovered.
///
/// # Errors
/// [`RuntimeError::Unsupported`] naming the schema file and what is wrong with it.
fn file_format(format: &OutputFormat) -> Result<FileFormat, RuntimeError> {
    Ok(match format {
        OutputFormat::JsonLines => FileFormat::JsonLines,
        OutputFormat::Csv { columns } => FileFormat::Csv {
            columns: columns.clone(),
        },
        OutputFormat::Avro { schema, codec } => {
            let shown = schema.display();
            let text = std::fs::read_to_string(schema).map_err(|e| {
                RuntimeError::Unsupported(format!("sink.schema: cannot read {shown}: {e}"))
            })?;
            crate::schema::ContainerWriter::new(&text, codec, [0; 16])
                .map_err(|m| RuntimeError::Unsupported(format!("sink.schema {shown}: {m}")))?;
            FileFormat::Avro {
                schema: text,
                codec: codec.clone(),
            }
        }
    })
}

/// Refuses what this version does not run, in one line naming the setting.
fn check_supported(job: &Job) -> Result<(), RuntimeError> {
    if job.settings.parallelism == 0 {
        return Err(RuntimeError::Unsupported(
            "settings.parallelism = 0: a job needs at least one task; set settings.parallelism = 1 or more".into(),
        ));
    }
    Ok(())
}

pub(crate) fn delivery(g: DeliveryGuarantee) -> Delivery {
    match g {
        DeliveryGuarantee::ExactlyOnce => Delivery::ExactlyOnce,
        DeliveryGuarantee::AtLeastOnce => Delivery::AtLeastOnce,
        DeliveryGuarantee::None => Delivery::None,
    }
}

/// The sink of sink task `task` (transactional ids `<prefix>-<task>-<slot>`).
fn sink_config(
    config: &RunConfig,
    delivery: Delivery,
    s: &checkpoint::Settings,
    task: usize,
) -> SinkConfig {
    let mut producer = config.producer.clone();
    producer.transaction_timeout = Duration::from_millis(s.transaction_timeout_ms);
    let prefix = config
        .job
        .sink
        .transactional_id_prefix
        .clone()
        .unwrap_or_default();
    let task = u32::try_from(task).unwrap_or(u32::MAX);
    let mut c = SinkConfig::new(delivery, prefix, task, producer);
    c.pool_size = POOL_SIZE;
    c.checkpoint_interval = Duration::from_millis(s.interval_ms);
    c.checkpoint_timeout = Duration::from_millis(s.checkpoint_timeout_ms);
    c.restart_allowance = Duration::from_millis(s.restart_allowance_ms);
    c.commit_margin = Duration::from_millis(s.commit_margin_ms);
    c
}

async fn open_store(
    dir: PathBuf,
    layout: Layout,
    options: StoreOptions,
    restore: RestoreFrom,
) -> Result<(StateStore, CheckpointRecord), RuntimeError> {
    tokio::task::spawn_blocking(move || StateStore::open(dir, layout, options, restore))
        .await
        .map_err(|e| RuntimeError::Internal(format!("the state store's thread: {e}")))?
        .map_err(RuntimeError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientConfig, ConsumerConfig, ProducerConfig};
    use crate::engine::formats::{LineFormats, ParsedLine};

    /// A file source whose `format` the registry does not hold stops the run before anything
    /// is opened (no state directory, no connection), naming the format and the registered
    /// ones.
    #[tokio::test]
    async fn a_format_not_registered_stops_the_job_at_start_naming_the_registered_ones() {
        let text = "name = \"j\"\n[source]\ntype = \"file\"\npath = \"in.csv\"\nformat = \"x\"\n\
                    [sink]\nbrokers = \"127.0.0.1:1\"\ntopic = \"o\"\n\
                    delivery.guarantee = \"at-least-once\"\n";
        let job = Job::parse("j.toml", text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("state");
        let line = |l: &str| -> Result<ParsedLine, String> {
            Ok(ParsedLine {
                key: None,
                value: l.as_bytes().to_vec(),
                event_time: 0,
            })
        };
        let config = RunConfig {
            job,
            client: ClientConfig::default(),
            producer: ProducerConfig::default(),
            consumer: ConsumerConfig::default(),
            restore: RestoreFrom::Latest,
            state_dir: state_dir.clone(),
            formats: LineFormats::new()
                .with("lines", Arc::new(line))
                .with("tsv", Arc::new(line)),
        };
        let (_stop_tx, stop) = watch::channel(false);
        let e = crate::engine::runtime::run(config, stop).await.unwrap_err();
        assert!(matches!(e, RuntimeError::LineFormat(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "source.format = \"x\": no such line format: use \"csv\", \"json\" or \"avro\", or a registered one: lines, tsv"
        );
        assert!(!state_dir.exists());
    }
}
