//! Consumer groups when things go wrong: long joins, offsets held by an open transaction, a
//! fenced static member, a member removed by the coordinator in the middle of a rebalance.
//!
//! Members that need a fault talk to the broker through the fault proxy
//! (`support::proxy`), which also counts the requests it forwards per API.

use crate::support::group::{disjoint_cover, fill, member, member_at, run, wait_for, Recorder};
use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use onceflow::client::producer::GroupMetadata;
use onceflow::client::{Producer, ProducerRecord, TopicPartition};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Generous: the machine running the tests may be heavily loaded.
const LONG: u64 = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_group_that_waits_longer_than_request_timeout_is_not_cut_off() {
    let topic = TestTopic::create("gf-join-wait", 2).await;
    let group = unique_topic("gf-join-wait");
    let mut a = member(&group, &[("max.poll.interval.ms", "60000")]).await;
    a.subscribe(&[topic.name.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while a.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the first member to own both partitions"
        );
        a.poll(Duration::from_millis(100)).await.unwrap();
    }
    // b's JoinGroup waits until a rejoins, which a does only when it polls again.
    let proxy = Proxy::start(&broker()).await;
    let mut b = member_at(
        &proxy.addr,
        &group,
        &[
            ("request.timeout.ms", "3000"),
            ("max.poll.interval.ms", "60000"),
        ],
    )
    .await;
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    // The first JoinGroup is answered MEMBER_ID_REQUIRED at once (KIP-394); the second, with
    // the member id, is the one that waits for a.
    wait_for(LONG, "b sent its JoinGroup with a member id", || {
        b.check();
        proxy.faults.requests(ApiKey::JoinGroup) >= 2
    })
    .await;
    // The scenario itself: a does not poll for three times b's request.timeout.ms, so b's
    // JoinGroup has to wait that long (the rebalance timeout allows 60 s).
    tokio::time::sleep(Duration::from_secs(9)).await;
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while !disjoint_cover(&a.assignment(), &b.assignment(), 2) {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the two members to split the partitions"
        );
        b.check();
        a.poll(Duration::from_millis(100)).await.unwrap();
    }
    assert_eq!(
        proxy.faults.requests(ApiKey::JoinGroup),
        2,
        "b's JoinGroup waited for the rebalance without being cut off at request.timeout.ms and sent again"
    );
    let (b, _) = b.stop().await;
    b.close().await.unwrap();
    a.close().await.unwrap();
}

/// Run at transaction.version 2 (9092) and 1 (9094).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_keeps_heartbeating_while_an_open_transaction_holds_its_offsets() {
    let topic = TestTopic::create("gf-unstable", 2).await;
    fill(&topic, 10).await;
    let out = TestTopic::create("gf-unstable-out", 1).await;
    let group = unique_topic("gf-unstable");
    let txn_id = unique_topic("gf-unstable-txn");
    let p = Producer::new(producer_config(
        &broker(),
        &[
            ("transactional.id", txn_id.as_str()),
            ("transaction.timeout.ms", "120000"),
        ],
    ))
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    p.send(ProducerRecord::new(out.name.clone(), Bytes::from_static(b"x")).with_partition(0))
        .await
        .unwrap();
    let start_at = BTreeMap::from([
        (TopicPartition::new(topic.name.clone(), 0), 5),
        (TopicPartition::new(topic.name.clone(), 1), 7),
    ]);
    let offsets: Vec<(TopicPartition, i64)> =
        start_at.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
    p.send_offsets_to_transaction(&offsets, &GroupMetadata::new(group.clone()))
        .await
        .unwrap();
    // While the transaction is open, OffsetFetch with RequireStable answers
    // UNSTABLE_OFFSET_COMMIT for these partitions.
    let events = Recorder::new();
    let mut m = member(
        &group,
        &[
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
            ("max.poll.interval.ms", "120000"),
        ],
    )
    .await;
    m.set_listener(events.clone());
    m.subscribe(&[topic.name.as_str()]);
    let m = run(m);
    // The scenario: the transaction stays open three times session.timeout.ms while the member
    // waits for the offsets it holds.
    tokio::time::sleep(Duration::from_secs(18)).await;
    m.check();
    p.commit_transaction().await.unwrap();
    wait_for(
        LONG,
        "the member read to the end of both partitions",
        || {
            m.check();
            let read = m.read();
            read.contains(&(0, 9)) && read.contains(&(1, 9))
        },
    )
    .await;
    // It started at the offsets the transaction committed.
    for (tp, first) in &start_at {
        let got = m
            .read()
            .iter()
            .filter(|(p, _)| *p == tp.partition)
            .map(|(_, o)| *o)
            .min();
        assert_eq!(got, Some(*first), "first offset read from {tp}");
    }
    // The member stayed in the group all along: one generation, no partitions lost or revoked,
    // and it can still commit with its generation.
    let generations = m.generations();
    let (mut m, _) = m.stop().await;
    assert_eq!(
        events.log(),
        vec!["assigned 2".to_owned()],
        "rebalance callbacks"
    );
    assert_eq!(
        generations.len(),
        1,
        "generations polled in: {generations:?}"
    );
    m.commit_positions()
        .await
        .expect("the member is still in the group with its generation");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_static_member_stops_with_an_error_naming_its_group_instance_id() {
    let topic = TestTopic::create("gf-fenced", 2).await;
    fill(&topic, 5).await;
    let group = unique_topic("gf-fenced");
    let instance = unique_topic("instance");
    let props = [("group.instance.id", instance.as_str())];
    let events = Recorder::new();
    let mut first = member(&group, &props).await;
    first.set_listener(events.clone());
    first.subscribe(&[topic.name.as_str()]);
    let first = run(first);
    wait_for(LONG, "the first member owns both partitions", || {
        first.check();
        first.assignment().len() == 2
    })
    .await;
    // Another process starts with the same group.instance.id: the coordinator gives it the
    // membership, and the first member's next heartbeat is answered FENCED_INSTANCE_ID.
    let mut second = member(&group, &props).await;
    second.subscribe(&[topic.name.as_str()]);
    let second = run(second);
    wait_for(LONG, "the first member's poll to fail", || {
        first.error.lock().unwrap().is_some()
    })
    .await;
    let message = first.error.lock().unwrap().as_ref().unwrap().to_string();
    assert!(
        message.contains("group.instance.id") && message.contains(&instance),
        "the error names group.instance.id and its value: {message}"
    );
    assert!(
        message.contains("another member"),
        "the error says another member took over: {message}"
    );
    assert!(
        events.log().contains(&"lost 2".to_owned()),
        "the fenced member was told its partitions are lost: {:?}",
        events.log()
    );
    // Fatal for this member: every later poll fails the same way, and it owns nothing.
    let (mut zombie, _) = first.stop().await;
    assert!(
        zombie.assignment().is_empty(),
        "the fenced member owns nothing"
    );
    let again = zombie.poll(Duration::from_millis(100)).await;
    assert!(
        matches!(&again, Err(e) if e.to_string() == message),
        "the next poll fails the same way: {again:?}"
    );
    wait_for(LONG, "the new member owns both partitions", || {
        second.check();
        second.assignment().len() == 2
    })
    .await;
    let (second, _) = second.stop().await;
    second.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_whose_poll_is_late_does_not_send_leave_group() {
    let topic = TestTopic::create("gf-static-late", 2).await;
    let group = unique_topic("gf-static-late");
    let instance = unique_topic("instance");
    let proxy = Proxy::start(&broker()).await;
    let events = Recorder::new();
    let mut late = member_at(
        &proxy.addr,
        &group,
        &[
            ("group.instance.id", instance.as_str()),
            ("max.poll.interval.ms", "2000"),
            ("session.timeout.ms", "6000"),
        ],
    )
    .await;
    late.set_listener(events.clone());
    late.subscribe(&[topic.name.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while late.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the static member to own both partitions"
        );
        late.poll(Duration::from_millis(100)).await.unwrap();
    }
    // It stops polling. Past max.poll.interval.ms it stops heartbeating; a static member's
    // partitions then wait for it for session.timeout.ms, after which the coordinator hands
    // them to the other member.
    let mut other = member(&group, &[]).await;
    other.subscribe(&[topic.name.as_str()]);
    let other = run(other);
    wait_for(LONG, "the other member owns both partitions", || {
        other.check();
        other.assignment().len() == 2
    })
    .await;
    assert_eq!(
        proxy.faults.requests(ApiKey::LeaveGroup),
        0,
        "a static member never sends LeaveGroup on a late poll"
    );
    // Its next poll reports the partitions lost and rejoins.
    late.poll(Duration::from_millis(100)).await.unwrap();
    let log = events.log();
    assert!(log.contains(&"lost 2".to_owned()), "{log:?}");
    let (o, _) = other.stop().await;
    o.close().await.unwrap();
    late.close().await.unwrap();
}

/// SyncGroup answered UNKNOWN_MEMBER_ID: the member resets its id and generation and joins
/// again. The proxy holds the SyncGroup past session.timeout.ms, so the coordinator has removed
/// the member (its session expired while it completed the rebalance) when the SyncGroup
/// arrives. ILLEGAL_GENERATION cannot be forced this way (the member's requests are answered
/// in order, so it never sends a SyncGroup for an older generation while a member of a newer
/// one); the unit table `group::tests::reactions` covers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_sync_group_comes_too_late_rejoins() {
    let topic = TestTopic::create("gf-sync-late", 2).await;
    let group = unique_topic("gf-sync-late");
    let proxy = Proxy::start(&broker()).await;
    *proxy.faults.hold_next_request.lock().unwrap() =
        Some((ApiKey::SyncGroup, Duration::from_secs(10)));
    let mut m = member_at(
        &proxy.addr,
        &group,
        &[
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ],
    )
    .await;
    m.subscribe(&[topic.name.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while m.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the member to own both partitions"
        );
        if let Err(e) = m.poll(Duration::from_millis(100)).await {
            panic!("poll failed instead of rejoining: {e}");
        }
    }
    assert!(
        proxy.faults.hold_next_request.lock().unwrap().is_none(),
        "the SyncGroup was held"
    );
    assert!(
        proxy.faults.requests(ApiKey::SyncGroup) >= 2,
        "the member synced again after the late SyncGroup"
    );
    // Committing with its generation proves it is a member again.
    m.commit(&[
        (TopicPartition::new(topic.name.clone(), 0), 0),
        (TopicPartition::new(topic.name.clone(), 1), 0),
    ])
    .await
    .expect("the member is in the group with its new generation");
    m.close().await.unwrap();
}
