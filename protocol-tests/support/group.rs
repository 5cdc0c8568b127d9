//! Consumer-group members for tests: a member's properties, a member polling in its own task
//! as an application would, a listener that records the callbacks, and waiting for a condition.

use super::proxy::Proxy;
use super::{broker, consumer_config, producer, TestTopic};
use bytes::Bytes;
use futures::future::BoxFuture;
use kafka_protocol::messages::ApiKey;
use onceflow::client::group::{GroupConsumer, GroupState, RebalanceListener};
use onceflow::client::{ProducerRecord, TopicPartition};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

pub async fn fill(topic: &TestTopic, per_partition: usize) {
    let p = producer(&[]).await;
    for part in 0..topic.partitions {
        for i in 0..per_partition {
            p.send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(format!("p{part}-{i}")))
                    .with_partition(part),
            )
            .await
            .unwrap();
        }
    }
    p.flush().await.unwrap();
}

pub fn member_props<'a>(group: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut props = vec![
        ("group.id", group),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
        ("heartbeat.interval.ms", "500"),
        ("session.timeout.ms", "10000"),
        ("max.poll.interval.ms", "20000"),
    ];
    props.extend_from_slice(extra);
    props
}

pub async fn member(group: &str, extra: &[(&str, &str)]) -> GroupConsumer {
    member_at(&broker(), group, extra).await
}

/// A member that talks to `addr` (the broker, or a proxy in front of it).
pub async fn member_at(addr: &str, group: &str, extra: &[(&str, &str)]) -> GroupConsumer {
    GroupConsumer::new(consumer_config(addr, &member_props(group, extra)))
        .await
        .unwrap()
}

/// A member polling in its own task, as an application would: a member blocked in JoinGroup
/// must not keep another member of the same process from rejoining. The loop ends at the first
/// error from `poll`, which it keeps for the test.
pub struct Running {
    assignment: Arc<Mutex<Vec<TopicPartition>>>,
    pub read: Arc<Mutex<Vec<(i32, i64)>>>,
    /// Every generation this member polled in while it owned partitions.
    pub generations: Arc<Mutex<BTreeSet<i32>>>,
    pub error: Arc<Mutex<Option<onceflow::client::Error>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<GroupConsumer>,
}

pub fn run(mut m: GroupConsumer) -> Running {
    let assignment = Arc::new(Mutex::new(Vec::new()));
    let read = Arc::new(Mutex::new(Vec::new()));
    let generations = Arc::new(Mutex::new(BTreeSet::new()));
    let error = Arc::new(Mutex::new(None));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a, r, g, e, s) = (
        assignment.clone(),
        read.clone(),
        generations.clone(),
        error.clone(),
        stop.clone(),
    );
    let task = tokio::spawn(async move {
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            match m.poll(Duration::from_millis(100)).await {
                Ok(records) => r
                    .lock()
                    .unwrap()
                    .extend(records.iter().map(|x| (x.partition, x.offset))),
                Err(err) => {
                    *e.lock().unwrap() = Some(err);
                    break;
                }
            }
            let owned = m.assignment();
            if !owned.is_empty() {
                g.lock().unwrap().insert(m.group_metadata().generation_id);
            }
            *a.lock().unwrap() = owned;
        }
        m
    });
    Running {
        assignment,
        read,
        generations,
        error,
        stop,
        task,
    }
}

impl Running {
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.lock().unwrap().clone()
    }
    pub fn read(&self) -> Vec<(i32, i64)> {
        self.read.lock().unwrap().clone()
    }
    pub fn generations(&self) -> BTreeSet<i32> {
        self.generations.lock().unwrap().clone()
    }
    /// Fails the test when the member's poll failed.
    pub fn check(&self) {
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("the member's poll failed: {e}");
        }
    }
    pub async fn stop(self) -> (GroupConsumer, Vec<(i32, i64)>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let m = self.task.await.unwrap();
        let read = self.read.lock().unwrap().clone();
        (m, read)
    }
}

/// Waits until `done` holds; fails after `secs` seconds saying what it waited for.
pub async fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    async {
        while !done() {
            assert!(Instant::now() < deadline, "waited {secs}s for: {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    .instrument(super::watchdog::waiting(what))
    .await
}

pub fn disjoint_cover(a: &[TopicPartition], b: &[TopicPartition], n: usize) -> bool {
    let sa: BTreeSet<_> = a.iter().collect();
    let sb: BTreeSet<_> = b.iter().collect();
    sa.is_disjoint(&sb) && sa.len() + sb.len() == n && !sa.is_empty() && !sb.is_empty()
}

pub struct Recorder(pub Mutex<Vec<String>>);

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder(Mutex::new(Vec::new())))
    }
    pub fn log(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl RebalanceListener for Recorder {
    fn on_assigned<'a>(&'a self, p: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.0.lock().unwrap().push(format!("assigned {}", p.len())) })
    }
    fn on_revoked<'a>(&'a self, p: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.0.lock().unwrap().push(format!("revoked {}", p.len())) })
    }
    fn on_lost<'a>(&'a self, p: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.0.lock().unwrap().push(format!("lost {}", p.len())) })
    }
}

/// A member that stops polling for longer than max.poll.interval.ms leaves the group; the
/// other member takes both partitions, and the slow one's next poll reports them lost (not
/// revoked: it could not commit for them). `protocol`: the group.protocol property, if any,
/// so that the same scenario runs under the classic and the consumer protocol. The other
/// member joins at once ([`OtherJoins::AtOnce`]).
pub async fn a_member_that_stops_polling_loses_its_partitions(
    prefix: &str,
    protocol: &[(&str, &str)],
) {
    a_member_that_stops_polling_loses_its_partitions_when(prefix, protocol, OtherJoins::AtOnce)
        .await;
}

/// When and how the other member joins the group of the member that stopped polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherJoins {
    /// At once, both members talking to the broker directly. Whether the slow member's
    /// heartbeat sees the rebalance before its poll interval runs out, and whether its next
    /// poll comes before or after it has heard its LeaveGroup answered, is left to timing.
    AtOnce,
    /// Classic protocol only: while the slow member is still in the group and waits to rejoin,
    /// each step waited for through the fault proxy in front of the slow member. Its heartbeat
    /// is held at the proxy until the other member's JoinGroup has begun a rebalance that
    /// still counts the slow member in, so that heartbeat is answered REBALANCE_IN_PROGRESS;
    /// then its poll interval runs out and it sends LeaveGroup, whose answer the proxy holds:
    /// the slow member polls again after the coordinator removed it and handed its partitions
    /// on, but before it has heard so.
    WhileItWaitsToRejoin,
}

/// [`a_member_that_stops_polling_loses_its_partitions`], the other member joining as `joins`
/// says.
pub async fn a_member_that_stops_polling_loses_its_partitions_when(
    prefix: &str,
    protocol: &[(&str, &str)],
    joins: OtherJoins,
) {
    const LONG: u64 = 120;
    let topic = TestTopic::create(prefix, 2).await;
    let group = super::unique_topic(prefix);
    let events = Recorder::new();
    let mut props = protocol.to_vec();
    props.push(("max.poll.interval.ms", "2000"));
    let proxy = match joins {
        OtherJoins::AtOnce => None,
        OtherJoins::WhileItWaitsToRejoin => {
            // The held LeaveGroup answer leaves the slow member's connection silent until the
            // request times out; the last poll then goes on over a new connection. Not shorter
            // than the session: the held heartbeat must not time out before it is answered.
            props.push(("request.timeout.ms", "10000"));
            Some(Proxy::start(&broker()).await)
        }
    };
    let addr = proxy.as_ref().map_or_else(broker, |p| p.addr.clone());
    let mut slow = member_at(&addr, &group, &props).await;
    slow.set_listener(events.clone());
    slow.subscribe(&[topic.name.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while slow.assignment().len() != 2 {
        slow.poll(Duration::from_millis(100)).await.unwrap();
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the slow member to own both partitions"
        );
    }
    // The slow member has polled for the last time before the test's final poll.
    let held = match &proxy {
        Some(proxy) => Some(hold_the_next_heartbeat(proxy, &group).await),
        None => None,
    };
    let mut other = member(&group, protocol).await;
    other.subscribe(&[topic.name.as_str()]);
    let other = run(other);
    if let (Some(proxy), Some(held)) = (&proxy, held) {
        answer_the_heartbeat_once_rebalancing(proxy, &group, &slow, held).await;
    }
    wait_for(LONG, "the other member owns both partitions", || {
        other.check();
        other.assignment().len() == 2
    })
    .await;
    if let Some(proxy) = &proxy {
        wait_for(
            LONG,
            "the coordinator answered the slow member's LeaveGroup",
            || proxy.faults.held_responses.load(Ordering::SeqCst) >= 1,
        )
        .await;
        *proxy.faults.hold_responses.lock().unwrap() = None;
    }
    slow.poll(Duration::from_millis(100)).await.unwrap();
    let log = events.log();
    assert!(log.contains(&"lost 2".to_owned()), "{log:?}");
    assert!(
        !log.iter().any(|e| e.starts_with("revoked")),
        "partitions the member no longer owned were reported revoked: {log:?}"
    );
    let (o, _) = other.stop().await;
    o.close().await.unwrap();
}

/// [`OtherJoins::WhileItWaitsToRejoin`], before the other member joins: the slow member's next
/// heartbeat waits at the proxy (it went out before the poll interval ran out: past it the
/// member sends LeaveGroup instead), and the answer to the LeaveGroup it sends later will be
/// held. Returns about when the heartbeat was held (a little after).
async fn hold_the_next_heartbeat(proxy: &Proxy, group: &str) -> Instant {
    *proxy.faults.hold_responses.lock().unwrap() = Some(ApiKey::LeaveGroup);
    *proxy.faults.gate_next_request.lock().unwrap() = Some(ApiKey::Heartbeat);
    wait_for(
        120,
        &format!("a heartbeat of the slow member of '{group}' held at the proxy"),
        || proxy.faults.gated_requests.load(Ordering::SeqCst) >= 1,
    )
    .await;
    Instant::now()
}

/// [`OtherJoins::WhileItWaitsToRejoin`], once the other member's JoinGroup is in: the group is
/// rebalancing with the slow member still in it, and the heartbeat held since `held` goes on
/// to the coordinator, which answers REBALANCE_IN_PROGRESS.
async fn answer_the_heartbeat_once_rebalancing(
    proxy: &Proxy,
    group: &str,
    slow: &GroupConsumer,
    held: Instant,
) {
    let admin = onceflow::client::Admin::new(super::client_config(&broker()))
        .await
        .unwrap();
    let me = slow.group_metadata().member_id;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let g = admin.describe_group(group).await.unwrap();
        if g.state == GroupState::PreparingRebalance {
            assert!(
                g.members.iter().any(|m| m.member_id == me),
                "the slow member {me} left before the rebalance began: {g:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "waited 120s for the other member to begin a rebalance: {g:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.faults.open_gate();
    // Held close to the session timeout (10 s, also the slow member's request timeout), the
    // heartbeat may have timed out, or the session expired, instead of being answered
    // REBALANCE_IN_PROGRESS: the case this run was to exercise did not happen.
    assert!(
        held.elapsed() < Duration::from_secs(8),
        "the slow member's heartbeat was held {:?}, too close to its session timeout",
        held.elapsed()
    );
}

/// After `a` gave `moved` up to `b`, each with 10 records read: `a` committed their positions
/// (10) before letting go, and `b` starts from them — it reads the one new record of each
/// partition and nothing `a` had read. Stops and closes both members.
pub async fn handed_over_at_the_committed_positions(
    group: &str,
    topic: &TestTopic,
    a: Running,
    b: Running,
    moved: &[TopicPartition],
) {
    const LONG: u64 = 120;
    let admin = onceflow::client::Admin::new(super::client_config(&broker()))
        .await
        .unwrap();
    let committed = admin.committed_offsets(group, moved).await.unwrap();
    for tp in moved {
        assert_eq!(
            committed.get(tp),
            Some(&10),
            "committed offset of the revoked partition {tp} (all committed: {committed:?})"
        );
    }
    // One more record in every partition: once b has read the new records of its partitions,
    // it would have read the old ones before them if it had started from the beginning.
    fill(topic, 1).await;
    wait_for(
        LONG,
        "b read the new record of each partition it took over",
        || {
            b.check();
            let read = b.read();
            moved.iter().all(|tp| read.contains(&(tp.partition, 10)))
        },
    )
    .await;
    let reread: Vec<(i32, i64)> = b.read().into_iter().filter(|(_, o)| *o < 10).collect();
    assert!(
        reread.is_empty(),
        "the new owner read again records the first member had read: {reread:?}"
    );
    let (a, _) = a.stop().await;
    let (b, _) = b.stop().await;
    a.close().await.unwrap();
    b.close().await.unwrap();
}
