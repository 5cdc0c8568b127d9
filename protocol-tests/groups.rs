//! Consumer groups (classic protocol): onceflow members, Java members, both assignors.

use crate::support::group::*;
use crate::support::java::{java, Rec};
use crate::support::*;
use onceflow::client::group::Strategy;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Generous: the machine running the tests may be heavily loaded.
const LONG: u64 = 120;

/// A cooperative-sticky member joining the group of `a` (4 partitions), once the two have
/// split the partitions between them.
async fn join_cooperative_beside(
    a: &Running,
    group: &str,
    topic: &TestTopic,
    props: &[(&str, &str)],
) -> Running {
    let mut b = member(group, props).await;
    b.set_strategies(&[Strategy::CooperativeSticky]);
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(LONG, "the two members split the 4 partitions", || {
        a.check();
        b.check();
        disjoint_cover(&a.assignment(), &b.assignment(), 4)
    })
    .await;
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_split_the_partitions_and_a_new_member_starts_at_the_committed_offsets() {
    let topic = TestTopic::create("group-split", 4).await;
    fill(&topic, 10).await;
    let group = unique_topic("group-split");
    let mut a = member(&group, &[]).await;
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(LONG, "the first member owns all 4 partitions", || {
        a.check();
        a.assignment().len() == 4
    })
    .await;
    let mut b = member(&group, &[]).await;
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(LONG, "the two members split the 4 partitions", || {
        a.check();
        b.check();
        disjoint_cover(&a.assignment(), &b.assignment(), 4)
    })
    .await;
    // Range: two partitions each.
    assert_eq!(a.assignment().len(), 2);
    // Read everything, then commit; the group's committed offsets cover every record.
    wait_for(LONG, "the members together read all 40 records", || {
        let ra: BTreeSet<(i32, i64)> = a.read().into_iter().collect();
        let rb: BTreeSet<(i32, i64)> = b.read().into_iter().collect();
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
    let stop_file = dir.path().join("stop");
    // The Java member runs until the stop file appears (JVM start-up under load can take long,
    // so nothing here assumes when it joins); the duration is only a backstop.
    let java_member = {
        let (topic, group, out, stop) = (
            topic.name.clone(),
            group.clone(),
            out.clone(),
            stop_file.clone(),
        );
        tokio::spawn(async move {
            java(
                "group-member",
                &topic,
                &[
                    "--group",
                    &group,
                    "--duration-ms",
                    "600000",
                    "--stop-file",
                    stop.to_str().unwrap(),
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
    // Both members in: the range assignor gives each two of the four partitions.
    let deadline = Instant::now() + Duration::from_secs(300);
    while ours.assignment().len() != 2 {
        assert!(
            Instant::now() < deadline,
            "waited 300s for the Java member to join (our member to own 2 of the 4 partitions); ours owns {:?}",
            ours.assignment()
        );
        assert!(
            !java_member.is_finished(),
            "the Java member exited before it shared the group"
        );
        for r in ours.poll(Duration::from_millis(200)).await.unwrap() {
            read.push((r.partition, r.offset));
        }
    }
    // Stop the Java member; ours goes on polling (so it rejoins when Java leaves) until Java
    // has exited.
    std::fs::write(&stop_file, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(LONG);
    while !java_member.is_finished() {
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for the Java member to exit after the stop file appeared"
        );
        for r in ours.poll(Duration::from_millis(200)).await.unwrap() {
            read.push((r.partition, r.offset));
        }
    }
    java_member.await.unwrap();
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
    // Java had not: together the members read every record at least once.
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
    ours.commit_positions().await.unwrap();
    ours.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_revokes_only_the_partitions_that_move() {
    let topic = TestTopic::create("group-coop", 4).await;
    let group = unique_topic("group-coop");
    let events = Recorder::new();
    let mut a = member(&group, &[]).await;
    a.set_strategies(&[Strategy::CooperativeSticky]);
    a.set_listener(events.clone());
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(LONG, "the first member owns all 4 partitions", || {
        a.check();
        a.assignment().len() == 4
    })
    .await;
    let first = a.assignment();
    let _b = join_cooperative_beside(&a, &group, &topic, &[]).await;
    let kept: BTreeSet<_> = a.assignment().into_iter().collect();
    assert!(
        kept.iter().all(|tp| first.contains(tp)),
        "a kept partitions it had"
    );
    let log = events.log();
    // a was never asked to give up everything: only the two partitions that moved.
    assert!(log.contains(&"revoked 2".to_owned()), "{log:?}");
    assert!(!log.contains(&"revoked 4".to_owned()), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_rebalance_commits_the_revoked_offsets_and_their_new_owner_does_not_reread_them(
) {
    let topic = TestTopic::create("group-coop-commit", 4).await;
    fill(&topic, 10).await;
    let group = unique_topic("group-coop-commit");
    // Auto commit, but with an interval that never comes round in this test: the only commit
    // is the one made when partitions are revoked.
    let props = [
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "3600000"),
    ];
    let mut a = member(&group, &props).await;
    a.set_strategies(&[Strategy::CooperativeSticky]);
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(LONG, "the first member read all 40 records", || {
        a.check();
        a.read().len() == 40
    })
    .await;
    let b = join_cooperative_beside(&a, &group, &topic, &props).await;
    let moved = b.assignment();
    // The revoked partitions' positions (10) were committed by the member that gave them up.
    handed_over_at_the_committed_positions(&group, &topic, a, b, &moved).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_that_restarts_gets_its_partitions_back_without_a_rebalance() {
    let topic = TestTopic::create("group-static", 4).await;
    let group = unique_topic("group-static");
    let static_member = |id: &'static str| {
        let group = group.clone();
        let topic = topic.name.clone();
        let events = Recorder::new();
        async move {
            let mut m = member(&group, &[("group.instance.id", id)]).await;
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
    let b_had = b.assignment();
    let generation = b.generations().into_iter().max();
    let a_log_before = a_events.log();
    // b goes away without LeaveGroup (static members do not send it) and comes back within
    // session.timeout.ms under the same group.instance.id.
    let (b, _) = b.stop().await;
    drop(b);
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
    let mut had = b_had.clone();
    had.sort();
    assert_eq!(got, had, "same partitions back");
    // No rebalance: the restarted member got the generation the group already had (a
    // rebalance would have made a new one before b2 got any partition), and a was not asked
    // to give anything up.
    assert_eq!(
        b2.generations().into_iter().collect::<Vec<_>>(),
        generation.into_iter().collect::<Vec<_>>(),
        "b2 joined the generation b had"
    );
    assert_eq!(a_events.log(), a_log_before, "a saw no rebalance");
    let (a, _) = a.stop().await;
    let (b2, _) = b2.stop().await;
    a.close().await.unwrap();
    b2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_polling_loses_its_partitions_and_is_told_so() {
    a_member_that_stops_polling_loses_its_partitions("group-slow", &[]).await;
}

/// The same, the other member joining while the slow one is still in the group: the slow
/// member's heartbeat has seen the rebalance (it waits to rejoin) when its poll interval runs
/// out, and it polls again after the coordinator removed it but before it has heard so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_polling_while_waiting_to_rejoin_loses_its_partitions() {
    a_member_that_stops_polling_loses_its_partitions_when(
        "group-slow-rejoin",
        &[],
        OtherJoins::WhileItWaitsToRejoin,
    )
    .await;
}
