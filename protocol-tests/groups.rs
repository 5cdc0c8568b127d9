//! Consumer groups (classic protocol): onceflow members, Java members, both assignors.

use crate::interop::{java, Rec};
use crate::support::*;
use bytes::Bytes;
use futures::future::BoxFuture;
use onceflow::client::group::{GroupConsumer, RebalanceListener, Strategy};
use onceflow::client::{ProducerRecord, TopicPartition};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

async fn fill(topic: &TestTopic, per_partition: usize) {
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

async fn member(group: &str, extra: &[(&str, &str)]) -> GroupConsumer {
    let mut props = vec![
        ("group.id", group),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
        ("heartbeat.interval.ms", "500"),
        ("session.timeout.ms", "10000"),
        ("max.poll.interval.ms", "20000"),
    ];
    props.extend_from_slice(extra);
    GroupConsumer::new(consumer_config(&broker(), &props))
        .await
        .unwrap()
}

/// A member polling in its own task, as an application would: a member blocked in JoinGroup
/// must not keep another member of the same process from rejoining.
struct Running {
    assignment: Arc<Mutex<Vec<TopicPartition>>>,
    read: Arc<Mutex<Vec<(i32, i64)>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<GroupConsumer>,
}

fn run(mut m: GroupConsumer) -> Running {
    let assignment = Arc::new(Mutex::new(Vec::new()));
    let read = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a, r, s) = (assignment.clone(), read.clone(), stop.clone());
    let task = tokio::spawn(async move {
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let records = m.poll(Duration::from_millis(100)).await.unwrap();
            r.lock()
                .unwrap()
                .extend(records.iter().map(|x| (x.partition, x.offset)));
            *a.lock().unwrap() = m.assignment();
        }
        m
    });
    Running {
        assignment,
        read,
        stop,
        task,
    }
}

impl Running {
    fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.lock().unwrap().clone()
    }
    async fn stop(self) -> (GroupConsumer, Vec<(i32, i64)>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let m = self.task.await.unwrap();
        let read = self.read.lock().unwrap().clone();
        (m, read)
    }
}

async fn wait_for(secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "condition not reached in {secs}s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn disjoint_cover(a: &[TopicPartition], b: &[TopicPartition], n: usize) -> bool {
    let sa: BTreeSet<_> = a.iter().collect();
    let sb: BTreeSet<_> = b.iter().collect();
    sa.is_disjoint(&sb) && sa.len() + sb.len() == n && !sa.is_empty() && !sb.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_split_the_partitions_and_a_new_member_starts_at_the_committed_offsets() {
    let topic = TestTopic::create("group-split", 4).await;
    fill(&topic, 10).await;
    let group = unique_topic("group-split");
    let mut a = member(&group, &[]).await;
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(30, || a.assignment().len() == 4).await;
    let mut b = member(&group, &[]).await;
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(60, || disjoint_cover(&a.assignment(), &b.assignment(), 4)).await;
    // Range: two partitions each.
    assert_eq!(a.assignment().len(), 2);
    // Read everything, then commit; the group's committed offsets cover every record.
    wait_for(30, || {
        let ra: BTreeSet<(i32, i64)> = a.read.lock().unwrap().iter().copied().collect();
        let rb: BTreeSet<(i32, i64)> = b.read.lock().unwrap().iter().copied().collect();
        ra.union(&rb).count() == 40
    })
    .await;
    let (mut a, _) = a.stop().await;
    let (mut b, _) = b.stop().await;
    a.commit_positions().await.unwrap();
    b.commit_positions().await.unwrap();
    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    let committed = admin.committed_offsets(&group, &topic.tps()).await.unwrap();
    assert_eq!(committed.values().sum::<i64>(), 40);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_onceflow_members_share_a_group() {
    let topic = TestTopic::create("group-java", 4).await;
    fill(&topic, 25).await;
    let group = unique_topic("group-java");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("java.jsonl");
    let java_member = {
        let (topic, group, out) = (topic.name.clone(), group.clone(), out.clone());
        tokio::spawn(async move {
            java(
                "group-member",
                &topic,
                &[
                    "--group",
                    &group,
                    "--duration-ms",
                    "15000",
                    "--output",
                    out.to_str().unwrap(),
                ],
            )
            .await
        })
    };
    let mut ours = member(&group, &[]).await;
    ours.subscribe(&[topic.name.as_str()]);
    let mut read: Vec<(i32, i64)> = Vec::new();
    let mut shared_seen = false;
    let deadline = Instant::now() + Duration::from_secs(14);
    while Instant::now() < deadline {
        for r in ours.poll(Duration::from_millis(200)).await.unwrap() {
            read.push((r.partition, r.offset));
        }
        // Both members in: each has some partitions, none twice.
        if ours.assignment().len() == 2 {
            shared_seen = true;
        }
    }
    ours.commit_positions().await.unwrap();
    ours.close().await.unwrap();
    java_member.await.unwrap();
    assert!(
        shared_seen,
        "the group split the 4 partitions between the two members"
    );
    let java_read: Vec<Rec> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(Rec::from_java)
        .collect();
    // While both were members nobody read a partition the other owned at the end; together
    // they read every record at least once.
    let mut all: BTreeSet<(i32, i64)> = read.iter().copied().collect();
    all.extend(
        java_read
            .iter()
            .map(|r| (r.partition.unwrap(), r.offset.unwrap())),
    );
    assert_eq!(all.len(), 100, "together the members read every record");
}

struct Recorder(Mutex<Vec<String>>);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_revokes_only_the_partitions_that_move() {
    let topic = TestTopic::create("group-coop", 4).await;
    let group = unique_topic("group-coop");
    let events = Arc::new(Recorder(Mutex::new(Vec::new())));
    let mut a = member(&group, &[]).await;
    a.set_strategies(&[Strategy::CooperativeSticky]);
    a.set_listener(events.clone());
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(30, || a.assignment().len() == 4).await;
    let first = a.assignment();
    let mut b = member(&group, &[]).await;
    b.set_strategies(&[Strategy::CooperativeSticky]);
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(60, || disjoint_cover(&a.assignment(), &b.assignment(), 4)).await;
    let kept: BTreeSet<_> = a.assignment().into_iter().collect();
    assert!(
        kept.iter().all(|tp| first.contains(tp)),
        "a kept partitions it had"
    );
    let log = events.0.lock().unwrap().clone();
    // a was never asked to give up everything: only the two partitions that moved.
    assert!(log.contains(&"revoked 2".to_owned()), "{log:?}");
    assert!(!log.contains(&"revoked 4".to_owned()), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_that_restarts_gets_its_partitions_back_without_a_rebalance() {
    let topic = TestTopic::create("group-static", 4).await;
    let group = unique_topic("group-static");
    let static_member = |id: &'static str| {
        let group = group.clone();
        let topic = topic.name.clone();
        let events = Arc::new(Recorder(Mutex::new(Vec::new())));
        async move {
            let mut m = member(&group, &[("group.instance.id", id)]).await;
            m.set_listener(events.clone());
            m.subscribe(&[topic.as_str()]);
            (run(m), events)
        }
    };
    let (a, a_events) = static_member("a").await;
    let (b, _) = static_member("b").await;
    wait_for(60, || disjoint_cover(&a.assignment(), &b.assignment(), 4)).await;
    let b_had = b.assignment();
    let a_log_before = a_events.0.lock().unwrap().len();
    // b goes away without LeaveGroup (static members do not send it) and comes back within
    // session.timeout.ms under the same group.instance.id.
    let (b, _) = b.stop().await;
    drop(b);
    let (b2, _) = static_member("b").await;
    wait_for(30, || !b2.assignment().is_empty()).await;
    let mut got = b2.assignment();
    got.sort();
    let mut had = b_had.clone();
    had.sort();
    assert_eq!(got, had, "same partitions back");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        a_events.0.lock().unwrap().len(),
        a_log_before,
        "a saw no rebalance: {:?}",
        a_events.0.lock().unwrap()
    );
    let (a, _) = a.stop().await;
    let (b2, _) = b2.stop().await;
    a.close().await.unwrap();
    b2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_polling_loses_its_partitions_and_is_told_so() {
    let topic = TestTopic::create("group-slow", 2).await;
    let group = unique_topic("group-slow");
    let events = Arc::new(Recorder(Mutex::new(Vec::new())));
    let mut slow = member(&group, &[("max.poll.interval.ms", "2000")]).await;
    slow.set_listener(events.clone());
    slow.subscribe(&[topic.name.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while slow.assignment().len() != 2 {
        slow.poll(Duration::from_millis(100)).await.unwrap();
        assert!(Instant::now() < deadline);
    }
    let mut other = member(&group, &[]).await;
    other.subscribe(&[topic.name.as_str()]);
    let other = run(other);
    // The slow member does not poll for longer than max.poll.interval.ms: it leaves, and the
    // other member takes everything.
    wait_for(40, || other.assignment().len() == 2).await;
    // Its next poll reports the partitions lost (not revoked: it could not commit for them).
    slow.poll(Duration::from_millis(100)).await.unwrap();
    let log = events.0.lock().unwrap().clone();
    assert!(log.contains(&"lost 2".to_owned()), "{log:?}");
    let (o, _) = other.stop().await;
    o.close().await.unwrap();
}
