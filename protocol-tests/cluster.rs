//! The client on a real 3-node cluster (support::cluster: three KRaft nodes, replication
//! factor 3, min.insync.replicas=2) while nodes die, stop and come back: what real clusters
//! live through and single-broker tests never show. One test at a time holds the cluster;
//! every node runs again after each. Run at TV2 (cluster on 19700) and TV1 (19710).

use crate::support::cluster::{cluster, leader_of};
use crate::support::java::java_consume_on;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::coordinator::CoordinatorKind;
use onceflow::client::{Admin, Consumer, Offset, Producer, ProducerRecord};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(180);

/// Record `seq` of partition `p`: value "p:seq", so a reader can check each partition's
/// records are 0, 1, 2, … exactly once and in order.
fn numbered(topic: &str, p: i32, seq: usize) -> ProducerRecord {
    ProducerRecord::new(topic.to_owned(), Bytes::from(format!("{p}:{seq}")))
        .with_key(Bytes::from(format!("k{p}")))
        .with_partition(p)
}

/// Reads `topic` from the beginning until `n` records came; the values per partition.
async fn read_values(bootstrap: &str, topic: &TestTopic, n: usize) -> BTreeMap<i32, Vec<String>> {
    read_values_at(bootstrap, topic, n, "read_uncommitted").await
}

/// [`read_values`] at an isolation level; then reads on to the end (read_committed: the LSO)
/// and fails on any record beyond `n`.
async fn read_values_at(
    bootstrap: &str,
    topic: &TestTopic,
    n: usize,
    isolation: &str,
) -> BTreeMap<i32, Vec<String>> {
    let config = consumer_config(bootstrap, &[("isolation.level", isolation)]);
    let mut c = Consumer::new(config).await.unwrap();
    for tp in c.assign_topics(&[&topic.name]).await.unwrap() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut got = 0;
    let start = Instant::now();
    while got < n {
        for r in c.poll(Duration::from_millis(500)).await.unwrap() {
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            out.entry(r.partition).or_default().push(v);
            got += 1;
        }
        assert!(
            start.elapsed() < WAIT,
            "read {got} of {n} records of {} within {WAIT:?}",
            topic.name
        );
    }
    while !c.at_end() {
        let more = c.poll(Duration::from_millis(500)).await.unwrap();
        assert!(
            more.is_empty(),
            "{} records beyond the {n} expected",
            more.len()
        );
        assert!(start.elapsed() < WAIT, "{} not read to its end", topic.name);
    }
    out
}

/// The node (1..=3) behind a client address of the cluster.
fn node_of(addr: &str) -> u8 {
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    u8::try_from((port - crate::support::cluster::cluster_port()) / 2 + 1).unwrap()
}

/// The node that is `kind` coordinator of `key` now (FindCoordinator).
async fn coordinator_node(bootstrap: &str, kind: CoordinatorKind, key: &str) -> u8 {
    let admin = Admin::new(client_config(bootstrap)).await.unwrap();
    let conn = admin.cluster().coordinator(kind, key).await.unwrap();
    node_of(conn.addr())
}

/// Every partition holds "p:0", "p:1", … up to its count, once each, in order.
fn assert_numbered(values: &BTreeMap<i32, Vec<String>>, counts: &BTreeMap<i32, usize>) {
    for (p, n) in counts {
        let got = values.get(p).map(Vec::as_slice).unwrap_or_default();
        let want: Vec<String> = (0..*n).map(|s| format!("{p}:{s}")).collect();
        if got != want.as_slice() {
            let first = got
                .iter()
                .zip(&want)
                .position(|(g, w)| g != w)
                .unwrap_or(got.len().min(want.len()));
            panic!(
                "partition {p}: {} records, {n} expected; first difference at {first}: got {:?}, expected {:?}",
                got.len(),
                got.get(first),
                want.get(first)
            );
        }
    }
}

/// An idempotent producer (acks=all) sends without pause while the leader of partition 0 is
/// SIGKILLed: the new leader takes over, the producer retries its in-flight batches with
/// their sequence numbers, and every record is in its partition exactly once and in order —
/// as our consumer and the Java consumer both read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_leader_killed_mid_produce_loses_and_duplicates_no_record() {
    let c = cluster().await;
    let topic = TestTopic::create_with(&c.bootstrap, "leader-kill", 3, &[]).await;
    let victim = leader_of(&c.bootstrap, &topic.name, 0).await;
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
        ],
    ))
    .await
    .unwrap();
    let acked = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    // Sends until 5,000 records after the kill, each partition numbered from 0; the
    // acknowledgements are awaited in order on another task.
    let sender = {
        let (acked, killed, name) = (acked.clone(), killed.clone(), topic.name.clone());
        tokio::spawn(async move {
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<onceflow::client::DeliveryFuture>();
            let waiter = tokio::spawn(async move {
                while let Some(ack) = rx.recv().await {
                    ack.await.expect("a record failed");
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            });
            let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
            let (mut i, mut after_kill) = (0usize, 0usize);
            while after_kill < 5_000 {
                let p = (i % 3) as i32;
                let seq = counts.entry(p).or_default();
                tx.send(producer.send(numbered(&name, p, *seq)).await.unwrap())
                    .unwrap();
                *seq += 1;
                i += 1;
                if killed.load(Ordering::Relaxed) {
                    after_kill += 1;
                }
                if i % 100 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            drop(tx);
            waiter.await.unwrap();
            producer.close().await.unwrap();
            counts
        })
    };
    let start = Instant::now();
    while acked.load(Ordering::Relaxed) < 3_000 {
        assert!(start.elapsed() < WAIT, "3,000 records not acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill(victim).await;
    killed.store(true, Ordering::Relaxed);
    let counts = sender.await.unwrap();
    let total: usize = counts.values().sum();
    let new_leader = leader_of(&c.bootstrap, &topic.name, 0).await;
    assert_ne!(
        new_leader, victim,
        "partition 0 still led by the killed node"
    );
    c.start_node(victim).await;

    assert_numbered(&read_values(&c.bootstrap, &topic, total).await, &counts);
    let dir = tempfile::tempdir().unwrap();
    let java = java_consume_on(&c.bootstrap, &dir, &topic.name, total, "read_uncommitted").await;
    let mut by_java: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for r in java {
        by_java
            .entry(r.partition.unwrap())
            .or_default()
            .push(String::from_utf8(r.value.unwrap()).unwrap());
    }
    assert_numbered(&by_java, &counts);
}

/// One node stopped (controlled shutdown): two in-sync replicas remain, min.insync.replicas=2
/// holds, and acks=all keeps acknowledging every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_with_one_node_stopped_still_acknowledges_every_record() {
    let c = cluster().await;
    let topic = TestTopic::create_with(&c.bootstrap, "one-down", 3, &[]).await;
    c.stop_node(3).await;
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[("enable.idempotence", "true"), ("acks", "all")],
    ))
    .await
    .unwrap();
    let mut acks = Vec::new();
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    for i in 0..3_000 {
        let p = i % 3;
        let seq = counts.entry(p).or_default();
        acks.push(producer.send(numbered(&topic.name, p, *seq)).await.unwrap());
        *seq += 1;
    }
    for a in acks {
        a.await
            .expect("acks=all with two of three replicas in sync");
    }
    producer.close().await.unwrap();
    assert_numbered(&read_values(&c.bootstrap, &topic, 3_000).await, &counts);
    c.start_node(3).await;
}

/// A topic that needs three in-sync replicas (min.insync.replicas=3) with one node stopped:
/// every attempt gets NOT_ENOUGH_REPLICAS, which is retried until delivery.timeout.ms and then
/// reported naming it. (Two nodes down would take the KRaft quorum with them: the three nodes
/// are the controllers too, so the in-sync set could no longer shrink.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_in_sync_replicas_is_retried_until_the_delivery_timeout_then_named() {
    let c = cluster().await;
    let topic =
        TestTopic::create_with(&c.bootstrap, "isr3", 1, &[("min.insync.replicas", "3")]).await;
    c.stop_node(3).await;
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("delivery.timeout.ms", "12000"),
            ("request.timeout.ms", "5000"),
            ("linger.ms", "0"),
        ],
    ))
    .await
    .unwrap();
    let start = Instant::now();
    let ack = producer.send(numbered(&topic.name, 0, 0)).await.unwrap();
    let err = ack
        .await
        .expect_err("acks=all with 2 of 3 required replicas");
    let took = start.elapsed();
    let text = err.to_string();
    assert!(text.contains("NOT_ENOUGH_REPLICAS"), "{text}");
    assert!(text.contains("delivery.timeout.ms"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    // Retried, not failed at the first answer.
    assert!(
        took >= Duration::from_secs(11),
        "failed after {took:?}: {text}"
    );
    producer.close().await.ok();
    c.start_node(3).await;
}

/// The same topic, node back while the record is being retried: it is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_enough_replicas_is_retried_until_the_node_is_back_and_the_record_written_once() {
    let c = cluster().await;
    let topic = TestTopic::create_with(
        &c.bootstrap,
        "isr3-back",
        1,
        &[("min.insync.replicas", "3")],
    )
    .await;
    c.stop_node(3).await;
    // A probe proves the partition refuses writes now (the in-sync set shrank to two).
    let probe = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("acks", "all"),
            ("delivery.timeout.ms", "4000"),
            ("request.timeout.ms", "3000"),
            ("linger.ms", "0"),
        ],
    ))
    .await
    .unwrap();
    let refused = probe
        .send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from("probe"),
        ))
        .await
        .unwrap()
        .await
        .expect_err("written with one of three replicas stopped");
    assert!(
        refused.to_string().contains("NOT_ENOUGH_REPLICAS"),
        "{refused}"
    );
    probe.close().await.ok();
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("delivery.timeout.ms", "180000"),
            ("linger.ms", "0"),
        ],
    ))
    .await
    .unwrap();
    let ack = producer.send(numbered(&topic.name, 0, 0)).await.unwrap();
    c.start_node(3).await;
    tokio::time::timeout(WAIT, ack)
        .await
        .expect("the record was not acknowledged after the node came back")
        .expect("the record failed although the node came back");
    producer.close().await.unwrap();
    let counts = BTreeMap::from([(0, 1)]);
    assert_numbered(&read_values(&c.bootstrap, &topic, 1).await, &counts);
}

/// A transactional producer's coordinator (the leader of its `__transaction_state` partition)
/// is SIGKILLed mid-transaction: the producer finds the new coordinator, the transaction's
/// records (also those sent after the kill, to partitions whose leader moved) commit, and a
/// read_committed reader sees each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_coordinators_node_killed_mid_transaction_the_commit_goes_to_the_new_one() {
    let c = cluster().await;
    let topic = TestTopic::create_with(&c.bootstrap, "txn-coord-kill", 3, &[]).await;
    let id = unique_topic("txn-coord-kill");
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[("transactional.id", &id), ("linger.ms", "5")],
    ))
    .await
    .unwrap();
    producer.init_transactions().await.unwrap();
    let victim = coordinator_node(&c.bootstrap, CoordinatorKind::Transaction, &id).await;
    producer.begin_transaction().unwrap();
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    let mut send = |n: usize| {
        let mut records = Vec::new();
        for i in 0..n {
            let p = (i % 3) as i32;
            let seq = counts.entry(p).or_default();
            records.push(numbered(&topic.name, p, *seq));
            *seq += 1;
        }
        records
    };
    for r in send(300) {
        producer.send(r).await.unwrap().await.unwrap();
    }
    c.kill(victim).await;
    for r in send(300) {
        producer.send(r).await.unwrap();
    }
    producer
        .commit_transaction()
        .await
        .expect("the commit after the coordinator's node was killed");
    let moved = coordinator_node(&c.bootstrap, CoordinatorKind::Transaction, &id).await;
    assert_ne!(moved, victim, "the coordinator did not move");
    producer.close().await.unwrap();
    c.start_node(victim).await;
    let values = read_values_at(&c.bootstrap, &topic, 600, "read_committed").await;
    assert_numbered(&values, &counts);
}

/// The consume-transform-produce example (three members, exactly once) on the cluster over
/// `n` input records "ride-i"; the output must hold "RIDE-i" once each.
struct Pipeline {
    bootstrap: String,
    input: TestTopic,
    output: TestTopic,
    group: String,
    members: Vec<Option<std::process::Child>>,
    admin: Admin,
    n: usize,
}

impl Pipeline {
    async fn new(c: &crate::support::cluster::Cluster, label: &str, n: usize) -> Pipeline {
        let input = TestTopic::create_with(&c.bootstrap, &format!("{label}-in"), 4, &[]).await;
        let output = TestTopic::create_with(&c.bootstrap, &format!("{label}-out"), 4, &[]).await;
        Pipeline {
            bootstrap: c.bootstrap.clone(),
            input,
            output,
            group: unique_topic(label),
            members: (0..3).map(|_| None).collect(),
            admin: Admin::new(client_config(&c.bootstrap)).await.unwrap(),
            n,
        }
    }

    fn start(&mut self, member: usize) {
        self.members[member] = Some(crate::pipeline::start_on(
            &self.bootstrap,
            &self.input.name,
            &self.output.name,
            &self.group,
            member,
            "exactly-once",
            self.log_for_append(member).into(),
        ));
    }

    /// Member `m`'s log, opened for a start to append to (a restarted member's log follows
    /// the one it replaces).
    fn log_for_append(&self, member: usize) -> std::fs::File {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(member))
            .unwrap();
        writeln!(f, "== started").unwrap();
        f
    }

    /// Where member `m`'s stderr goes.
    fn log(&self, member: usize) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("{}-member-{member}.log", self.group))
    }

    /// Produces input records `range` (keys spread over the partitions).
    async fn produce(&self, range: std::ops::Range<usize>) {
        let p = Producer::new(producer_config(
            &self.bootstrap,
            &[("enable.idempotence", "true"), ("acks", "all")],
        ))
        .await
        .unwrap();
        for i in range {
            p.send(
                ProducerRecord::new(self.input.name.clone(), Bytes::from(format!("ride-{i}")))
                    .with_key(Bytes::from(format!("k{}", i % 50))),
            )
            .await
            .unwrap();
        }
        p.flush().await.unwrap();
        p.close().await.unwrap();
    }

    /// Input offsets the group committed (in the members' transactions), summed.
    async fn committed(&self) -> i64 {
        self.admin
            .committed_offsets(&self.group, &self.input.tps())
            .await
            .unwrap()
            .values()
            .sum()
    }

    /// Waits until the group committed at least `at` input offsets.
    async fn wait_committed(&mut self, at: usize) {
        let start = Instant::now();
        while self.committed().await < at as i64 {
            for i in 0..self.members.len() {
                let Some(status) = self.members[i].as_mut().and_then(|m| m.try_wait().unwrap())
                else {
                    continue;
                };
                // A member whose transaction outlived transaction.timeout.ms while a node was
                // down is fenced by the coordinator's timeout abort (at transaction.version 1
                // the abort bumps the epoch) and stops with the fenced status, as a Java
                // client's application does on ProducerFencedException; its supervisor starts
                // it again. Any other exit is a failure.
                if status.code() == Some(crate::pipeline::FENCED_EXIT) {
                    self.start(i);
                    continue;
                }
                let log = std::fs::read_to_string(self.log(i)).unwrap_or_default();
                panic!("member {i} exited ({status}):\n{log}");
            }
            assert!(
                start.elapsed() < WAIT,
                "the group committed {} of {at} input offsets within {WAIT:?}",
                self.committed().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The group's coordinator now.
    async fn coordinator(&self) -> u8 {
        let g = self.admin.describe_group(&self.group).await.unwrap();
        u8::try_from(g.coordinator).unwrap_or_else(|_| panic!("coordinator {}", g.coordinator))
    }

    /// Every input committed, members stopped: the output, read_committed, holds every
    /// record once.
    async fn finish(mut self) {
        self.wait_committed(self.n).await;
        for m in self.members.iter_mut().flatten() {
            let _ = m.kill();
            let _ = m.wait();
        }
        let counts = crate::pipeline::output_counts(&self.bootstrap, &self.output, self.n).await;
        let duplicated: Vec<&String> = counts
            .iter()
            .filter(|(_, c)| **c > 1)
            .map(|(v, _)| v)
            .take(5)
            .collect();
        assert!(
            duplicated.is_empty(),
            "duplicated in the output: {duplicated:?}"
        );
        assert_eq!(counts.len(), self.n, "unexpected output values");
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        for m in self.members.iter_mut().flatten() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

/// A rolling restart: each node in turn shut down (controlled: its leaderships and the
/// coordinators on it move first), a third of the input produced and worked through while it
/// is down, then started again; three members of the consume-transform-produce example run
/// throughout. The output holds every input record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_all_three_nodes_under_three_members_leaves_every_record_once() {
    let c = cluster().await;
    let n = 6_000;
    let mut p = Pipeline::new(&c, "rolling", n).await;
    for m in 0..3 {
        p.start(m);
    }
    for node in 1..=3u8 {
        c.stop_node(node).await;
        let k = usize::from(node);
        p.produce((k - 1) * n / 3..k * n / 3).await;
        p.wait_committed(k * n / 3).await;
        c.start_node(node).await;
    }
    p.finish().await;
}

/// The group's coordinator SIGKILLed while a rebalance is under way (a third member joining
/// two that work): the members find the new coordinator, the group settles, and the output
/// holds every input record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_coordinators_node_killed_during_a_rebalance_leaves_every_record_once() {
    let c = cluster().await;
    let n = 6_000;
    let mut p = Pipeline::new(&c, "coord-rebalance", n).await;
    p.produce(0..n / 2).await;
    p.start(0);
    p.start(1);
    p.wait_committed(1).await;
    let victim = p.coordinator().await;
    p.start(2);
    let start = Instant::now();
    loop {
        let g = p.admin.describe_group(&p.group).await.unwrap();
        if g.state.rebalancing() {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "no rebalance seen after a third member started: {g:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill(victim).await;
    p.produce(n / 2..n).await;
    p.wait_committed(n).await;
    assert_ne!(
        p.coordinator().await,
        victim,
        "the coordinator did not move"
    );
    c.start_node(victim).await;
    p.finish().await;
}

/// The group's coordinator SIGKILLed while three members commit offsets in their
/// transactions (TxnOffsetCommit goes to it in every transaction): the transactions in
/// flight abort or find the new coordinator, and the output holds every input record
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_coordinators_node_killed_while_members_commit_offsets_leaves_every_record_once()
{
    let c = cluster().await;
    let n = 9_000;
    let mut p = Pipeline::new(&c, "coord-commit", n).await;
    p.produce(0..n).await;
    for m in 0..3 {
        p.start(m);
    }
    // Mid-work: some offsets committed, most not.
    p.wait_committed(1).await;
    let victim = p.coordinator().await;
    c.kill(victim).await;
    p.wait_committed(n).await;
    c.start_node(victim).await;
    p.finish().await;
}

/// A consumer read to the end of a partition is caught up; when that partition's leader is
/// SIGKILLed, its fetches fail and it is *not* caught up (the end it last heard of is stale:
/// records go on to the next leader) until the new leader answers — a stream processor must
/// not take a partition whose leader died for an idle one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_leader_died_is_not_caught_up_until_its_new_leader_answers() {
    let c = cluster().await;
    let topic = TestTopic::create_with(&c.bootstrap, "caught-up-kill", 1, &[]).await;
    let producer = Producer::new(producer_config(&c.bootstrap, &[("acks", "all")]))
        .await
        .unwrap();
    producer
        .send(numbered(&topic.name, 0, 0))
        .await
        .unwrap()
        .await
        .unwrap();
    producer.close().await.unwrap();
    let tp = onceflow::client::TopicPartition::new(topic.name.clone(), 0);
    let mut consumer = Consumer::new(consumer_config(&c.bootstrap, &[]))
        .await
        .unwrap();
    consumer.assign([tp.clone()]).await.unwrap();
    consumer.seek(&tp, Offset::Beginning).unwrap();
    let start = Instant::now();
    while !consumer.caught_up(&tp) {
        consumer.poll(Duration::from_millis(100)).await.unwrap();
        assert!(start.elapsed() < WAIT, "never caught up");
    }
    let victim = leader_of(&c.bootstrap, &topic.name, 0).await;
    c.kill(victim).await;
    let (start, mut stale_seen) = (Instant::now(), false);
    loop {
        consumer.poll(Duration::from_millis(100)).await.unwrap();
        if !consumer.caught_up(&tp) {
            stale_seen = true;
        }
        let moved = leader_of(&c.bootstrap, &topic.name, 0).await != victim;
        if moved && consumer.caught_up(&tp) {
            break;
        }
        assert!(start.elapsed() < WAIT, "the partition never came back");
    }
    assert!(
        stale_seen,
        "caught up all along although its leader was killed and a new one elected"
    );
    c.start_node(victim).await;
}
