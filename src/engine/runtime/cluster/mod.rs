//! A job run by several processes (`settings.mode = "cluster"`): every `onceflow run` of the
//! job file is a member of the job's consumer group, and Kafka is the coordination and the
//! durability (docs/design/cluster-mode.md).
//!
//! - **Tasks are partitions.** A source task per input partition runs the stateless chain; a
//!   job with a key_by has a keyed task per partition of its repartition topic
//!   (`<group>-repartition`, as many partitions as the largest source topic, or
//!   `settings.parallelism` when more), owning the key groups ⌊kg·T/G⌋ = task. The group deals
//!   both topics' partitions out with the cooperative-sticky assignor, so a member that joins
//!   or leaves moves only the tasks that change hands; the others keep running.
//! - **One transaction per member per interval** (Kafka Streams' exactly_once_v2): the output,
//!   the repartition records, the keyed tasks' state changes (changelog topic
//!   `<group>-window-changelog`, compacted, partition = task) and the input offsets
//!   (TxnOffsetCommit with the member's generation) commit together (`member`).
//! - **State moves through the changelog**; the local fjall store is a cache of it, current to
//!   an offset per task, read forward on assignment (`changelog`).
//! - **Watermarks cross the repartition topic as markers** (`exchange::Marker`): each source
//!   task sends its partition's watermark to every keyed task, in order behind its records, and
//!   a keyed task fires on the minimum over the source partitions (`InputWatermarks`, idleness
//!   included), as the local runtime does over its channels.
//! - **Zombies are fenced by the generation** (KIP-447) and by the producer epoch: the
//!   transactional id is `<prefix>-<member id>`, the member id kept in the state directory, so
//!   a restarted process fences its previous incarnation at once.
//!
//! A membership that fails (fenced, its tasks lost, a transaction aborted) is given up and
//! joined again with fresh tasks; after [`MAX_REJOINS`] in a row with no commit between them
//! the job stops with the last reason.

mod changelog;
mod exchange;
mod member;
mod plan;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::client::admin::NewTopic;
use crate::client::ErrorCode;
use crate::client::{Admin, Consumer};
use crate::engine::metrics::Metrics;
use crate::engine::state::{RestoreFrom, StateError, StateStore, StoreOptions};

use super::hook;
use super::topology::Topology;
use super::{RunConfig, RunSummary, RuntimeError};
use exchange::Topics;
use member::{Counts, Exit};
use plan::Plan;

/// Memberships in a row that may fail without a commit between them before the job stops.
pub(crate) const MAX_REJOINS: u32 = 10;

/// Runs this process's share of `config.job` until `stop`, joining the job's group.
///
/// # Errors
/// A state directory that cannot be opened, internal topics of the wrong shape, a source topic
/// that does not exist, an error the client classes fatal (e.g. authorization), or
/// [`MAX_REJOINS`] failed memberships in a row.
pub(crate) async fn run(
    config: RunConfig,
    topology: Arc<dyn Topology>,
    mut stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<RunSummary, RuntimeError> {
    let job = config.job.clone();
    let prefix = job.sink.transactional_id_prefix.clone().ok_or_else(|| {
        RuntimeError::Unsupported(
            "mode = \"cluster\" needs sink.transactional.id.prefix (unique to this job on the cluster)".into(),
        )
    })?;
    if topology.stages().len() > 1 {
        return Err(RuntimeError::Unsupported(format!(
            "this job has {} keyed stages (a window after a window); mode = \"cluster\" runs one: run it with mode = \"local\"",
            topology.stages().len()
        )));
    }
    let layout = super::topology::state_layout(&job, topology.as_ref());
    let key_groups = layout.key_groups;
    let store = open_store(&config, layout).await?;
    let member_id = member_id(&config.state_dir)?;
    let allowance = Duration::from_millis(job.settings.restart_allowance_ms);
    let Some(cluster) = super::connect::connect(&config.client, allowance, &mut stop).await? else {
        return Ok(RunSummary::default());
    };
    let probe = Consumer::with_cluster(config.consumer.clone(), cluster.clone());
    let (inputs, widest) = source_inputs(&probe, &job.source.topics).await?;
    let tasks = u16::try_from(widest.max(job.settings.parallelism as usize))
        .unwrap_or(u16::MAX)
        .clamp(1, key_groups.max(1));
    let group = job.source.group.clone();
    let topics = Topics::of(&group);
    let keyed = topology.keyed();
    let (mut changelog_id, mut delete_retention) = (String::new(), DEFAULT_DELETE_RETENTION);
    if keyed.is_some() {
        let admin = Admin::with_cluster(cluster.clone());
        ensure_topics(&admin, &topics, tasks).await?;
        (changelog_id, delete_retention) = changelog_identity(&admin, &topics.changelog).await?;
    }
    let plan = Plan {
        topology,
        cluster,
        producer: config.producer.clone(),
        consumer: config.consumer.clone(),
        metrics,
        transactional_id: format!("{prefix}-{member_id}"),
        topics,
        keyed: keyed.is_some(),
        keyed_uid: keyed.map(|k| k.uid).unwrap_or_default(),
        key_groups,
        tasks,
        inputs,
        interval: Duration::from_millis(job.settings.checkpoint_interval_ms.max(1)),
        transaction_timeout: Duration::from_millis(job.settings.transaction_timeout_ms),
        changelog_id,
        delete_retention,
        group,
        job,
    };
    info!(group = %plan.group, member = %member_id, keyed_tasks = tasks, "cluster member starting");
    memberships(&plan, Arc::new(Mutex::new(store)), stop).await
}

/// Every source partition as a keyed task's watermark input, and the most partitions a source
/// topic has.
async fn source_inputs(
    probe: &Consumer,
    topics: &[String],
) -> Result<(Vec<u32>, usize), RuntimeError> {
    let mut inputs = Vec::new();
    let mut widest = 0usize;
    for (i, t) in topics.iter().enumerate() {
        let parts = probe
            .partitions_for(t)
            .await
            .map_err(|e| RuntimeError::client(format!("looking up source topic {t}"), e))?;
        widest = widest.max(parts.len());
        inputs.extend(parts.iter().map(|tp| exchange::input_id(i, tp.partition)));
    }
    Ok((inputs, widest))
}

/// One membership after another until `stop`, a fatal error, or [`MAX_REJOINS`] memberships
/// in a row without a commit.
async fn memberships(
    plan: &Plan,
    store: Arc<Mutex<StateStore>>,
    stop: watch::Receiver<bool>,
) -> Result<RunSummary, RuntimeError> {
    let mut summary = RunSummary::default();
    let mut failures = 0u32;
    loop {
        let mut counts = Counts::default();
        let result = member::run(plan, &store, &mut counts, stop.clone()).await;
        summary.records_in += counts.records_in;
        summary.records_out += counts.records_out;
        summary.last_checkpoint += counts.commits;
        if counts.commits > 0 {
            failures = 0;
        }
        match result {
            Ok(()) => return Ok(summary),
            Err(Exit::Fatal(e)) => return Err(*e),
            Err(Exit::Rejoin(why)) => {
                failures += 1;
                if failures >= MAX_REJOINS {
                    return Err(RuntimeError::Unsupported(format!(
                        "{failures} memberships in a row ended without a commit; the last: {why}"
                    )));
                }
                warn!(reason = %why, "membership ended; joining the group again");
                plan.metrics.fenced();
                let mut stop = stop.clone();
                let backoff = Duration::from_millis(200 * u64::from(failures.min(10)));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.wait_for(|s| *s) => return Ok(summary),
                }
            }
        }
    }
}

/// The local store: the latest local checkpoint, or a fresh one when the directory has none
/// (Kafka holds the truth; the store is a cache of the changelog).
async fn open_store(
    config: &RunConfig,
    layout: crate::engine::state::Layout,
) -> Result<StateStore, RuntimeError> {
    let options = StoreOptions {
        retain: 1,
        cache_bytes: config.job.settings.state_cache_bytes,
        memtable_bytes: config.job.settings.state_memtable_bytes,
    };
    let dir = config.state_dir.clone();
    let restore = config.restore;
    tokio::task::spawn_blocking(move || {
        let from = match restore {
            RestoreFrom::Fresh => RestoreFrom::Fresh,
            _ => RestoreFrom::Latest,
        };
        match StateStore::open(&dir, layout.clone(), options, from) {
            Err(StateError::MissingDirectory { .. } | StateError::NoCheckpoint { .. }) => {
                StateStore::open(&dir, layout, options, RestoreFrom::Fresh)
            }
            other => other,
        }
        .map(|(s, _)| s)
    })
    .await
    .map_err(|e| RuntimeError::Internal(format!("the state store's thread: {e}")))?
    .map_err(RuntimeError::from)
}

/// This process's member id: made once and kept in the state directory, so a restarted
/// process has the same transactional id and fences its previous incarnation.
fn member_id(dir: &Path) -> Result<String, RuntimeError> {
    let path = dir.join("member.id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(id.to_owned());
        }
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    let id = format!("{:016x}", h.finish());
    let fail = |e: std::io::Error| {
        RuntimeError::Unsupported(format!(
            "cannot write {}: {e}; the state directory must be writable",
            path.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let tmp = dir.join("member.id.tmp");
    std::fs::write(&tmp, &id).map_err(fail)?;
    std::fs::rename(&tmp, &path).map_err(fail)?;
    Ok(id)
}

/// Kafka's default `delete.retention.ms` (a day), when the topic does not say.
const DEFAULT_DELETE_RETENTION: Duration = Duration::from_secs(86_400);

/// The changelog topic's id (hex) and its `delete.retention.ms`.
async fn changelog_identity(
    admin: &Admin,
    changelog: &str,
) -> Result<(String, Duration), RuntimeError> {
    let fail = |e| RuntimeError::client(format!("describing {changelog}"), e);
    let id = admin.cluster().topic(changelog).await.map_err(fail)?.id;
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let configs = admin
        .describe_topic_configs(changelog)
        .await
        .map_err(fail)?;
    let retention = configs
        .iter()
        .find(|e| e.name == "delete.retention.ms")
        .and_then(|e| e.value.as_deref())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(DEFAULT_DELETE_RETENTION, Duration::from_millis);
    Ok((hex, retention))
}

/// Creates the repartition and changelog topics with `tasks` partitions, or checks the ones
/// there. The repartition topic keeps its records for ever (`retention.ms=-1`, as Kafka
/// Streams' repartition topics): they carry their event time as their timestamp, and a broker
/// deletes by timestamp — records of an input older than `retention.ms` (a replay, a backfill,
/// yesterday's file) went at its next retention check, and those a keyed task had not read yet
/// were lost (its position fell below the new log start and was reset past them).
async fn ensure_topics(admin: &Admin, topics: &Topics, tasks: u16) -> Result<(), RuntimeError> {
    let n = i32::from(tasks);
    let keep = !hook::skipped(hook::Protection::RepartitionRetention);
    let repartition = NewTopic::new(topics.repartition.clone(), n);
    let wanted = [
        if keep {
            repartition.with_config("retention.ms", "-1")
        } else {
            repartition
        },
        NewTopic::new(topics.changelog.clone(), n).with_config("cleanup.policy", "compact"),
    ];
    for t in wanted {
        if let Err(e) = admin.create_topics(std::slice::from_ref(&t)).await {
            if e.code() != Some(ErrorCode::TOPIC_ALREADY_EXISTS) {
                return Err(RuntimeError::client(format!("creating {}", t.name), e));
            }
        }
    }
    // Members started together: one creates the topics, the others may get
    // TOPIC_ALREADY_EXISTS from a broker whose metadata does not show them yet.
    admin
        .wait_for_topics(&[&topics.repartition, &topics.changelog])
        .await
        .map_err(|e| RuntimeError::client("waiting for the job's internal topics", e))?;
    let listed = admin
        .list_topics()
        .await
        .map_err(|e| RuntimeError::client("listing topics", e))?;
    let names: BTreeSet<&String> = [&topics.repartition, &topics.changelog]
        .into_iter()
        .collect();
    for name in names {
        let have = listed.get(name).copied().unwrap_or(0);
        if have != usize::from(tasks) {
            return Err(RuntimeError::Unsupported(format!(
                "{name} has {have} partitions but this job needs {tasks} (its keyed tasks): delete the job's internal topics and its group's offsets to start over, or set settings.parallelism to {have}"
            )));
        }
    }
    let name = &topics.repartition;
    let configs = admin
        .describe_topic_configs(name)
        .await
        .map_err(|e| RuntimeError::client(format!("describing {name}"), e))?;
    let retention = configs
        .iter()
        .find(|e| e.name == "retention.ms")
        .and_then(|e| e.value.clone());
    if keep && retention.as_deref().is_some_and(|v| v != "-1") {
        return Err(RuntimeError::Unsupported(format!(
            "{name} has retention.ms={}: the broker would delete repartition records by their timestamps (event times) before the keyed tasks read them; set retention.ms=-1 on it (kafka-configs.sh --alter --entity-type topics --entity-name {name} --add-config retention.ms=-1) or delete the job's internal topics and its group's offsets to start over",
            retention.unwrap_or_default()
        )));
    }
    Ok(())
}
