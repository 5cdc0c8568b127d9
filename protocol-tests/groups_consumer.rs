//! Consumer groups under the KIP-848 consumer protocol (`group.protocol=consumer`): onceflow
//! members, Java members of either protocol in the same group, static membership, fencing.
//! (The classic protocol's: groups.rs; the exactly-once pipeline under both: pipeline.rs.)

use crate::support::group::*;
use crate::support::java::{java, Rec};
use crate::support::proxy::Proxy;
use crate::support::*;
use kafka_protocol::messages::ApiKey;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Generous: the machine running the tests may be heavily loaded.
const LONG: u64 = 120;

const CONSUMER: (&str, &str) = ("group.protocol", "consumer");

/// A member under the consumer protocol, with `extra` properties.
async fn cmember(group: &str, extra: &[(&str, &str)]) -> onceflow::client::group::GroupConsumer {
    let mut props = vec![CONSUMER];
    props.extend_from_slice(extra);
    member(group, &props).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_members_split_the_partitions_and_commit_with_their_member_epoch() {
    let topic = TestTopic::create("cg-split", 4).await;
    fill(&topic, 10).await;
    let group = unique_topic("cg-split");
    let mut a = cmember(&group, &[]).await;
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(LONG, "the first member owns all 4 partitions", || {
        a.check();
        a.assignment().len() == 4
    })
    .await;
    let mut b = cmember(&group, &[]).await;
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(LONG, "the two members split the 4 partitions", || {
        a.check();
        b.check();
        disjoint_cover(&a.assignment(), &b.assignment(), 4)
    })
    .await;
    // The coordinator's uniform assignor: two partitions each.
    assert_eq!(a.assignment().len(), 2);
    wait_for(LONG, "the members together read all 40 records", || {
        let ra: BTreeSet<(i32, i64)> = a.read().into_iter().collect();
        let rb: BTreeSet<(i32, i64)> = b.read().into_iter().collect();
        ra.union(&rb).count() == 40
    })
    .await;
    let (mut a, _) = a.stop().await;
    let (mut b, _) = b.stop().await;
    // OffsetCommit v9 with the member epoch (a KIP-848 member's epoch is its generation).
    assert!(
        a.group_metadata().generation_id > 0,
        "{:?}",
        a.group_metadata()
    );
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
async fn consumer_protocol_revokes_only_what_moves_commits_it_first_and_the_new_owner_does_not_reread(
) {
    let topic = TestTopic::create("cg-move", 4).await;
    fill(&topic, 10).await;
    let group = unique_topic("cg-move");
    // Auto commit, with an interval that never comes round: the only commit is the one made
    // when partitions are revoked.
    let props = [
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "3600000"),
    ];
    let events = Recorder::new();
    let mut a = cmember(&group, &props).await;
    a.set_listener(events.clone());
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(LONG, "the first member read all 40 records", || {
        a.check();
        a.read().len() == 40
    })
    .await;
    let first = a.assignment();
    let mut b = cmember(&group, &props).await;
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(LONG, "the two members split the 4 partitions", || {
        a.check();
        b.check();
        disjoint_cover(&a.assignment(), &b.assignment(), 4)
    })
    .await;
    assert!(
        a.assignment().iter().all(|tp| first.contains(tp)),
        "a kept partitions it had"
    );
    let log = events.log();
    assert!(log.contains(&"revoked 2".to_owned()), "{log:?}");
    assert!(!log.contains(&"revoked 4".to_owned()), "{log:?}");
    let moved = b.assignment();
    handed_over_at_the_committed_positions(&group, &topic, a, b, &moved).await;
}

/// Runs the Java interop tool's group member (until `stop` appears) with `props`.
fn java_member(
    topic: &TestTopic,
    group: &str,
    out: &std::path::Path,
    stop: &std::path::Path,
    props: &[&str],
) -> tokio::task::JoinHandle<String> {
    let (topic, group, out, stop) = (
        topic.name.clone(),
        group.to_owned(),
        out.to_owned(),
        stop.to_owned(),
    );
    let props: Vec<String> = props.iter().map(|p| p.to_string()).collect();
    tokio::spawn(async move {
        let mut args: Vec<&str> = vec![
            "--group",
            &group,
            "--duration-ms",
            "600000",
            "--stop-file",
            stop.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ];
        for p in &props {
            args.push("--prop");
            args.push(p);
        }
        java("group-member", &topic, &args).await
    })
}

/// A Java member (with `java_props`) and ours (consumer protocol) share a group of 4
/// partitions, then Java leaves; together they read every record.
async fn share_with_java(name: &str, java_props: &[&str]) {
    let topic = TestTopic::create(name, 4).await;
    fill(&topic, 25).await;
    let group = unique_topic(name);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("java.jsonl");
    let stop_file = dir.path().join("stop");
    let java_task = java_member(&topic, &group, &out, &stop_file, java_props);
    let mut ours = cmember(&group, &[]).await;
    ours.subscribe(&[topic.name.as_str()]);
    let mut read: Vec<(i32, i64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while ours.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited 300s for the Java member to join (ours to own 2 of the 4 partitions); ours owns {:?}",
            ours.assignment()
        );
        assert!(
            !java_task.is_finished(),
            "the Java member exited before it shared the group"
        );
        for r in ours.poll(Duration::from_millis(200)).await.unwrap() {
            read.push((r.partition, r.offset));
        }
    }
    std::fs::write(&stop_file, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while !java_task.is_finished() {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the Java member to exit after the stop file appeared"
        );
        for r in ours.poll(Duration::from_millis(200)).await.unwrap() {
            read.push((r.partition, r.offset));
        }
    }
    let _ = java_task.await.unwrap();
    let java_read: Vec<Rec> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(Rec::from_java)
        .collect();
    let mut all: BTreeSet<(i32, i64)> = java_read
        .iter()
        .map(|r| (r.partition.unwrap(), r.offset.unwrap()))
        .collect();
    // Java committed what it read when it left; ours then owns every partition and reads what
    // Java had not.
    let deadline = Instant::now() + Duration::from_secs(LONG);
    loop {
        all.extend(read.drain(..));
        if all.len() == 100 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the two members together to read all 100 records; read {}",
            all.len()
        );
        for r in ours.poll(Duration::from_millis(200)).await.unwrap() {
            read.push((r.partition, r.offset));
        }
    }
    // Java left: the coordinator gives its partitions to ours.
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while ours.assignment().len() != 4 {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for ours to take the partitions Java left; ours owns {:?}",
            ours.assignment()
        );
        ours.poll(Duration::from_millis(200)).await.unwrap();
    }
    ours.commit_positions().await.unwrap();
    ours.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_onceflow_members_share_a_group_under_the_consumer_protocol() {
    share_with_java("cg-java", &["group.protocol=consumer"]).await;
}

/// Mixed group: the broker runs a group with a classic member (JoinGroup/SyncGroup) and a
/// consumer-protocol member, converting the classic group when ours joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_java_member_and_a_consumer_protocol_member_share_a_group() {
    share_with_java("cg-mixed", &["group.protocol=classic"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_consumer_protocol_member_that_restarts_gets_its_partitions_back() {
    let topic = TestTopic::create("cg-static", 4).await;
    let group = unique_topic("cg-static");
    let static_member = |id: &'static str| {
        let group = group.clone();
        let topic = topic.name.clone();
        let events = Recorder::new();
        async move {
            let mut m = cmember(&group, &[("group.instance.id", id)]).await;
            m.set_listener(events.clone());
            m.subscribe(&[topic.as_str()]);
            (run(m), events)
        }
    };
    let (a, a_events) = static_member("a").await;
    let (b, _) = static_member("b").await;
    wait_for(
        LONG,
        "the two static members split the 4 partitions",
        || {
            a.check();
            b.check();
            disjoint_cover(&a.assignment(), &b.assignment(), 4)
        },
    )
    .await;
    let mut b_had = b.assignment();
    b_had.sort();
    let a_log_before = a_events.log();
    // b leaves as a static member (epoch -2: the coordinator keeps its partitions for it) and
    // a new process with the same group.instance.id takes its place.
    let (b, _) = b.stop().await;
    b.close().await.unwrap();
    let (b2, _) = static_member("b").await;
    wait_for(
        LONG,
        "the restarted static member owns partitions again",
        || {
            b2.check();
            !b2.assignment().is_empty()
        },
    )
    .await;
    let mut got = b2.assignment();
    got.sort();
    assert_eq!(got, b_had, "same partitions back");
    assert_eq!(
        a_events.log(),
        a_log_before,
        "a gave nothing up and got nothing new"
    );
    let (a, _) = a.stop().await;
    let (b2, _) = b2.stop().await;
    a.close().await.unwrap();
    b2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_protocol_member_that_stops_polling_loses_its_partitions_and_is_told_so() {
    a_member_that_stops_polling_loses_its_partitions("cg-slow", &[CONSUMER]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_subscription_is_resolved_by_the_coordinator_to_the_matching_topics() {
    let prefix = unique_topic("cgre");
    let a = TestTopic::create(&format!("{prefix}-in"), 2).await;
    let b = TestTopic::create(&format!("{prefix}-in"), 3).await;
    let other = TestTopic::create(&format!("{prefix}-out"), 2).await;
    let group = unique_topic("cg-regex");
    let mut m = cmember(&group, &[]).await;
    m.subscribe_pattern(&format!("{prefix}-in-.*")).unwrap();
    let m = run(m);
    let wanted: BTreeSet<(String, i32)> = [(&a, 2), (&b, 3)]
        .iter()
        .flat_map(|(t, n)| (0..*n).map(|p| (t.name.clone(), p)))
        .collect();
    wait_for(
        LONG,
        "the member owns the 5 partitions of the matching topics",
        || {
            m.check();
            let got: BTreeSet<(String, i32)> = m
                .assignment()
                .into_iter()
                .map(|tp| (tp.topic, tp.partition))
                .collect();
            assert!(
                got.iter().all(|(t, _)| *t != other.name),
                "a topic the pattern does not match was assigned: {got:?}"
            );
            got == wanted
        },
    )
    .await;
    let (m, _) = m.stop().await;
    m.close().await.unwrap();
}

/// The coordinator drops a member whose heartbeats stop past the session (10 s on the test
/// brokers): the proxy holds one heartbeat 14 s. When it arrives it is answered
/// UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH: the member reports its partitions lost, joins
/// again with epoch 0 under the same member id, and owns them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_protocol_member_dropped_by_the_coordinator_reports_its_partitions_lost_and_rejoins(
) {
    let topic = TestTopic::create("cg-dropped", 2).await;
    let group = unique_topic("cg-dropped");
    let proxy = Proxy::start(&broker()).await;
    let events = Recorder::new();
    let mut m = member_at(&proxy.addr, &group, &[CONSUMER]).await;
    m.set_listener(events.clone());
    m.subscribe(&[topic.name.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while m.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for both partitions"
        );
        m.poll(Duration::from_millis(100)).await.unwrap();
    }
    let first_epoch = m.group_metadata().generation_id;
    let member_id = m.group_metadata().member_id;
    *proxy.faults.hold_next_request.lock().unwrap() =
        Some((ApiKey::ConsumerGroupHeartbeat, Duration::from_secs(14)));
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while !events.log().contains(&"lost 2".to_owned()) {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the member to report its partitions lost: {:?}",
            events.log()
        );
        m.poll(Duration::from_millis(100)).await.unwrap();
    }
    assert!(
        proxy
            .faults
            .held_requests
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1
    );
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while m.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the member to own both partitions again"
        );
        m.poll(Duration::from_millis(100)).await.unwrap();
    }
    let again = m.group_metadata();
    assert_eq!(
        again.member_id, member_id,
        "the same member id across the rejoin"
    );
    assert!(
        again.generation_id > 0 && again.generation_id != first_epoch,
        "a new member epoch after the rejoin: {first_epoch} then {}",
        again.generation_id
    );
    m.commit(&[
        (
            onceflow::client::TopicPartition::new(topic.name.clone(), 0),
            0,
        ),
        (
            onceflow::client::TopicPartition::new(topic.name.clone(), 1),
            0,
        ),
    ])
    .await
    .expect("the member commits with its new epoch");
    m.close().await.unwrap();
}

/// KIP-848 refuses a second static member with a group.instance.id another member still holds
/// (the classic protocol fenced the first instead): the newcomer stops with an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_static_member_with_a_held_instance_id_stops_with_an_error_naming_it() {
    let topic = TestTopic::create("cg-unreleased", 2).await;
    let group = unique_topic("cg-unreleased");
    let instance = unique_topic("instance");
    let props = [("group.instance.id", instance.as_str())];
    let mut first = cmember(&group, &props).await;
    first.subscribe(&[topic.name.as_str()]);
    let first = run(first);
    wait_for(LONG, "the first member owns both partitions", || {
        first.check();
        first.assignment().len() == 2
    })
    .await;
    let mut second = cmember(&group, &props).await;
    second.subscribe(&[topic.name.as_str()]);
    let second = run(second);
    wait_for(LONG, "the second member's poll to fail", || {
        second.error.lock().unwrap().is_some()
    })
    .await;
    let message = second.error.lock().unwrap().as_ref().unwrap().to_string();
    assert!(
        message.contains("group.instance.id") && message.contains(&instance),
        "the error names group.instance.id and its value: {message}"
    );
    assert!(
        second.assignment().is_empty(),
        "the refused member owns nothing"
    );
    first.check();
    assert_eq!(
        first.assignment().len(),
        2,
        "the first member keeps its partitions"
    );
    let (first, _) = first.stop().await;
    first.close().await.unwrap();
}
