//! Starting the subtasks once recovery decided StartTasks: P source subtasks (each seeking its
//! consumer to the restored positions of its partitions) and, for a job with a window, P keyed
//! subtasks per keyed stage, wired by bounded channels (one per source × keyed pair, and one
//! per pair of subtasks of consecutive keyed stages).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::alignment::Alignment;
use super::keyed::KeyedSubtask;
use super::message::{Control, Counters, Data, Report};
use super::output::{SinkTask, TaskSink};
use super::partitions::{resolve, start_offset, Discovery};
use super::source::{Downstream, FileReader, Input, PartitionWatermarks, SourceSubtask};
use super::stage_out::{NextStage, StageOut};
use crate::client::{
    Admin, ClientConfig, Cluster, Consumer, ConsumerConfig, Offset, TopicPartition,
};
use crate::engine::checkpoint::{Positions, TaskId};
use crate::engine::file_source::{FileSource, FileSourceConfig, Framing};
use crate::engine::formats::LineFormat;
use crate::engine::job::{FileSourceSpec, Job, LineFormatSpec};
use crate::engine::metrics::Metrics;
use crate::engine::runtime::routing::key_group_range;
use crate::engine::runtime::topology::Topology;
use crate::engine::runtime::RuntimeError;
use crate::engine::state::OperatorState;

/// Records (and watermarks, barriers) a channel from a source subtask to a keyed subtask
/// holds before the source waits: back-pressure with bounded memory.
const CHANNEL_CAPACITY: usize = 256;

/// What the subtasks are made of.
pub(crate) struct Plan {
    pub job: Job,
    /// What the job computes (the job file's operators, or a typed job's).
    pub topology: Arc<dyn Topology>,
    pub parallelism: usize,
    pub key_groups: u16,
    /// read_committed.
    pub consumer: ConsumerConfig,
    pub cluster: Arc<Cluster>,
    /// Source subtask i reads `assignment[i]`.
    pub assignment: Vec<Vec<TopicPartition>>,
    /// How long held outputs may wait for a free pool slot.
    pub patience: Duration,
    /// The sinks' `transaction.timeout.ms` (fencing a retired task's id uses it).
    pub transaction_timeout: Duration,
    /// What the subtasks count (shared: their counts add up).
    pub metrics: Arc<Metrics>,
    /// Whether the run restores a checkpoint (a partition it does not list is new then).
    pub from_checkpoint: bool,
    /// The broker connection settings: each source subtask connects on its own.
    pub client: ClientConfig,
    /// The file source's line format (resolved from the job's `source.format`).
    pub line_format: Option<Arc<dyn LineFormat>>,
}

impl Plan {
    /// Whether the job has a key exchange (then keyed subtasks run its keyed stages).
    pub(crate) fn has_window(&self) -> bool {
        self.topology.keyed().is_some()
    }

    /// The tasks that ack a checkpoint: sources 0..P, then the keyed subtasks of stage k at
    /// (k + 1)·P..(k + 2)·P. The sink of subtask i (of the last keyed stage, or the source
    /// without one) is sink task i.
    pub(crate) fn task_ids(&self) -> Vec<TaskId> {
        let p = u32::try_from(self.parallelism).unwrap_or(u32::MAX);
        let stages = u32::try_from(self.topology.stages().len()).unwrap_or(u32::MAX);
        (0..p.saturating_mul(stages.saturating_add(1)))
            .map(TaskId)
            .collect()
    }
}

/// The running subtasks; dropping this aborts them (a stopped or failed job leaves nothing
/// running behind).
pub(crate) struct Launched {
    pub controls: BTreeMap<TaskId, UnboundedSender<Control>>,
    pub sources: Vec<TaskId>,
    /// Every source partition's start position (restored, or resolved from the rule).
    pub positions: Positions,
    handles: Vec<JoinHandle<()>>,
}

impl Drop for Launched {
    fn drop(&mut self) {
        for h in &self.handles {
            h.abort();
        }
    }
}

fn spawn<F>(task: TaskId, reports: &UnboundedSender<Report>, run: F) -> JoinHandle<()>
where
    F: std::future::Future<Output = Result<(), RuntimeError>> + Send + 'static,
{
    let reports = reports.clone();
    let span = tracing::info_span!("subtask", task = task.0);
    tokio::spawn(
        async move {
            if let Err(error) = run.await {
                tracing::warn!(%error, "subtask failed");
                let _ = reports.send(Report::Failed { task, error });
            }
        }
        .instrument(span),
    )
}

/// The sink tasks of the started `sinks`.
fn sink_tasks<'a>(
    plan: &'a Plan,
    sinks: Vec<TaskSink>,
    counters: &'a Arc<Counters>,
) -> impl Iterator<Item = SinkTask> + 'a {
    sinks.into_iter().map(|s| {
        SinkTask::new(
            s,
            plan.job.sink.topic.clone(),
            counters.clone(),
            plan.metrics.clone(),
            plan.topology.sink_encoder(),
        )
    })
}

/// Starts every subtask from `positions`, with sink task i's started `sinks[i]` and keyed
/// stage k's subtask i's state `states[k][i]` (restricted to its key groups). `positioned`
/// is given every source partition's start once all are resolved, before any source reads.
pub(crate) async fn launch(
    plan: &Plan,
    states: Vec<Vec<OperatorState>>,
    sinks: Vec<TaskSink>,
    positions: &Positions,
    counters: &Arc<Counters>,
    reports: &UnboundedSender<Report>,
    positioned: impl FnOnce(&Positions) -> Result<(), RuntimeError>,
) -> Result<Launched, RuntimeError> {
    let p = plan.parallelism;
    let mut launched = Launched {
        controls: BTreeMap::new(),
        sources: Vec::new(),
        positions: Positions::new(),
        handles: Vec::new(),
    };
    let mut sinks = sink_tasks(plan, sinks, counters);
    let keyed = plan.has_window();
    let out_of_orderness = plan.topology.out_of_orderness();
    let (senders, receivers) = channels(p, keyed);
    let mut sources = Vec::new();
    for (i, channels) in senders.into_iter().enumerate() {
        let task = TaskId(u32::try_from(i).unwrap_or(u32::MAX));
        let (control_tx, control) = mpsc::unbounded_channel();
        let partitions = plan.assignment.get(i).cloned().unwrap_or_default();
        let (input_kind, own, cluster) = source_input(plan, i, &partitions, positions).await?;
        launched.positions.extend(own.clone());
        let downstream = match keyed {
            true => Downstream::Keyed {
                channels,
                key_groups: plan.key_groups,
            },
            false => Downstream::Sink(Box::new(sinks.next().ok_or_else(|| missing_sink(i))?)),
        };
        let source = SourceSubtask {
            task,
            input_kind,
            chain: plan.topology.source_chain(&plan.metrics),
            emitted: Vec::new(),
            errors: plan.job.settings.errors.clone(),
            metrics: plan.metrics.clone(),
            downstream,
            positions: own,
            watermarks: out_of_orderness.map(|o| PartitionWatermarks::new(&partitions, o)),
            control,
            reports: reports.clone(),
            counters: counters.clone(),
            patience: plan.patience,
            input: Default::default(),
            pending_barrier: None,
            reading_stopped: false,
            discovery: Discovery::new(plan.job.source.partition_discovery_ms),
            idle: Default::default(),
            admin: Admin::with_cluster(cluster.clone()),
            topics: plan.job.source.topics.clone(),
            index: i,
            parallelism: p,
        };
        sources.push((task, source, control_tx, partitions));
    }
    positioned(&launched.positions)?;
    for (task, source, control_tx, partitions) in sources {
        tracing::info!(task = task.0, partitions = ?partitions, "source subtask starting");
        launched.handles.push(spawn(task, reports, source.run()));
        launched.controls.insert(task, control_tx);
        launched.sources.push(task);
    }
    if !keyed {
        return Ok(launched);
    }
    launch_keyed(plan, receivers, states, &mut sinks, reports, &mut launched)?;
    Ok(launched)
}

/// Source subtask `i`'s input (the file reader for subtask 0 of a file source; a consumer of
/// `partitions` otherwise), the positions it starts from, and its cluster.
///
/// The source has connections of its own: a broker answers a connection's requests one at a
/// time, so a Fetch long-poll on a shared connection holds the sinks' Produce requests behind
/// it (docs/benchmarks.md, "The source has its own connection"). Its metadata is also the one
/// partition discovery refreshes, so the consumer sees a new partition.
async fn source_input(
    plan: &Plan,
    i: usize,
    partitions: &[TopicPartition],
    positions: &Positions,
) -> Result<(Input, Positions, Arc<Cluster>), RuntimeError> {
    match &plan.job.source.file {
        Some(spec) => {
            let reader = match i {
                0 => Some(file_reader(spec, plan.line_format.clone(), positions)?),
                _ => None,
            };
            let mut own = Positions::new();
            own.file = reader.as_ref().map(|r| r.source.position());
            Ok((Input::File(reader), own, plan.cluster.clone()))
        }
        None => {
            let cluster = Cluster::connect(plan.client.clone())
                .await
                .map_err(|e| RuntimeError::client("connecting the source to the brokers", e))?;
            let (consumer, own) = source_consumer(plan, &cluster, partitions, positions).await?;
            Ok((Input::Kafka(consumer), own, cluster))
        }
    }
}

/// The bounded channels of a job with a window: `senders[source][keyed]` and
/// `receivers[keyed][source]`; none without a window.
type Channels = (
    Vec<Vec<mpsc::Sender<Data>>>,
    Vec<Vec<Option<mpsc::Receiver<Data>>>>,
);

fn channels(p: usize, window: bool) -> Channels {
    let mut senders: Vec<Vec<mpsc::Sender<Data>>> = vec![Vec::new(); p];
    let mut receivers: Vec<Vec<Option<mpsc::Receiver<Data>>>> =
        (0..p).map(|_| Vec::new()).collect();
    if window {
        for row in senders.iter_mut() {
            for inputs in receivers.iter_mut() {
                let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                row.push(tx);
                inputs.push(Some(rx));
            }
        }
    }
    (senders, receivers)
}

/// Starts the keyed subtasks of every stage: stage 0's subtask i on `receivers[i]` (from the
/// sources), stage k's on channels from stage k - 1, each on its `states[k][i]`; the last
/// stage's subtask i writes to the next sink.
fn launch_keyed(
    plan: &Plan,
    receivers: Vec<Vec<Option<mpsc::Receiver<Data>>>>,
    states: Vec<Vec<OperatorState>>,
    sinks: &mut impl Iterator<Item = SinkTask>,
    reports: &UnboundedSender<Report>,
    launched: &mut Launched,
) -> Result<(), RuntimeError> {
    let p = plan.parallelism;
    let stages = states.len();
    // Only sources that read something send watermarks; the others must not hold them back.
    // Every subtask of a keyed stage sends its watermark on.
    let mut watermark_inputs: Vec<u32> = (0..p)
        .filter(|&s| plan.assignment.get(s).is_some_and(|a| !a.is_empty()))
        .map(|s| u32::try_from(s).unwrap_or(u32::MAX))
        .collect();
    let mut receivers = receivers;
    for (k, states) in states.into_iter().enumerate() {
        let last = k + 1 == stages;
        let (mut senders, next_receivers) = channels(p, !last);
        let mut states = states.into_iter();
        for (i, inputs) in std::mem::take(&mut receivers).into_iter().enumerate() {
            let index = (k + 1) * p + i;
            let task = TaskId(u32::try_from(index).unwrap_or(u32::MAX));
            let (control_tx, control) = mpsc::unbounded_channel();
            let groups = key_group_range(i, p, plan.key_groups);
            let state = states.next().ok_or_else(|| {
                RuntimeError::Internal(format!("no state for keyed subtask {i} of stage {k}"))
            })?;
            let out = match last {
                true => StageOut::Sink(Box::new(sinks.next().ok_or_else(|| missing_sink(i))?)),
                false => StageOut::Next(NextStage {
                    link: plan.topology.link(k, &plan.metrics).ok_or_else(|| {
                        RuntimeError::Internal(format!("no link after keyed stage {k}"))
                    })?,
                    channels: std::mem::take(&mut senders[i]),
                    key_groups: plan.key_groups,
                    index: i,
                    stage: k + 1,
                    errors: plan.job.settings.errors.clone(),
                    metrics: plan.metrics.clone(),
                    sequence: 0,
                }),
            };
            let keyed = KeyedSubtask {
                task,
                inputs,
                alignment: Alignment::default(),
                stage: plan.topology.keyed_stage_at(k, state, &plan.metrics)?,
                watermarks: super::source::watermarks_of(watermark_inputs.iter().copied()),
                out,
                unsent_watermark: None,
                control,
                reports: reports.clone(),
                patience: plan.patience,
                next: 0,
                unaligned: crate::engine::runtime::hook::skipped(
                    crate::engine::runtime::hook::Protection::Alignment,
                ),
                last_unaligned: None,
            };
            tracing::info!(task = index, stage = k, key_groups = ?groups, "keyed subtask starting");
            launched.handles.push(spawn(task, reports, keyed.run()));
            launched.controls.insert(task, control_tx);
        }
        receivers = next_receivers;
        watermark_inputs = (0..p)
            .map(|s| u32::try_from(s).unwrap_or(u32::MAX))
            .collect();
    }
    Ok(())
}

fn missing_sink(i: usize) -> RuntimeError {
    RuntimeError::Internal(format!("no sink was started for subtask {i}"))
}

/// Source subtask 0's reader of the job's files in `format`, at the restored position (or the
/// start).
fn file_reader(
    spec: &FileSourceSpec,
    format: Option<Arc<dyn LineFormat>>,
    positions: &Positions,
) -> Result<FileReader, RuntimeError> {
    let config = FileSourceConfig {
        path: spec.path.clone(),
        serving_speed_factor: spec.serving_speed_factor,
        max_delay: Duration::from_secs(spec.max_delay_s),
        // The engine's formats declare a header; a registered one may leave its first line
        // to be skipped when it rejects it (a header it does not know).
        skip_header: matches!(spec.format, LineFormatSpec::Registered(_)),
        framing: match spec.format {
            LineFormatSpec::Avro { .. } => Framing::AvroContainer,
            _ => Framing::Lines,
        },
    };
    let format = format.ok_or_else(|| {
        RuntimeError::Internal(format!(
            "the line format {:?} of the file source was not resolved before the start",
            spec.format
        ))
    })?;
    let source = FileSource::open(config, format, positions.file.clone())?;
    Ok(FileReader {
        source,
        ended: false,
    })
}

/// A read_committed consumer on `partitions`, each sought to its restored position (else
/// where `partitions::start_offset` says, resolved to a number); returns it with every one of
/// those partitions' positions, so each checkpoint lists every partition.
async fn source_consumer(
    plan: &Plan,
    cluster: &Arc<Cluster>,
    partitions: &[TopicPartition],
    positions: &Positions,
) -> Result<(Consumer, Positions), RuntimeError> {
    let mut consumer = Consumer::with_cluster(plan.consumer.clone(), cluster.clone());
    consumer
        .assign(partitions.iter().cloned())
        .await
        .map_err(|e| RuntimeError::client("assigning the source partitions", e))?;
    let starts = partitions
        .iter()
        .map(|tp| {
            let restored = positions.get(tp).copied();
            let at = start_offset(restored, plan.from_checkpoint, plan.job.source.start);
            (tp.clone(), at)
        })
        .collect();
    let admin = Admin::with_cluster(cluster.clone());
    let mut own = Positions::new();
    for (tp, o) in resolve(&admin, starts).await? {
        consumer
            .seek(&tp, Offset::At(o))
            .map_err(|e| RuntimeError::client(format!("seeking {tp}"), e))?;
        own.insert(tp, o);
    }
    Ok((consumer, own))
}
