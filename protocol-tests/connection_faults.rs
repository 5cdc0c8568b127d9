//! Connections under cancellation and slow requests: a cancelled request must not fail the
//! others sharing its connection, and a request the broker holds on purpose (Fetch max_wait,
//! JoinGroup) must not be cut by request.timeout.ms.

use crate::support::proxy::{Blackhole, FakeLeader, Proxy};
use crate::support::*;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiVersionsRequest, BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use onceflow::client::connection::Connection;
use onceflow::client::{Consumer, Error, Offset, Producer, ProducerRecord};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A Fetch of an empty partition that the broker holds for `max_wait` (no data arrives).
fn slow_fetch(topic: &str, max_wait: Duration) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait.as_millis() as i32)
        .with_min_bytes(1)
        .with_max_bytes(1024 * 1024)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1024 * 1024)])])
}

/// Waits until the partition of a just-created topic has its leader (a Fetch is then held
/// rather than answered at once with NOT_LEADER_OR_FOLLOWER).
async fn wait_fetchable(conn: &Connection, topic: &str) {
    let v = conn.version_for::<FetchRequest>(Some(12)).expect("fetch");
    let quick = slow_fetch(topic, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = conn.request_at(&quick, v).await.expect("fetch");
        let code = resp.responses[0].partitions[0].error_code;
        if code == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}-0 was not fetchable within 60 s (error {code})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// ApiVersions v3+ needs a client software name and version, or the broker says INVALID_REQUEST.
fn api_versions() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("connection-faults"))
        .with_client_software_version(StrBytes::from_static_str("1"))
}

async fn connect(request_timeout: Duration) -> Connection {
    Connection::connect(
        &broker(),
        "connection-faults",
        Duration::from_secs(30),
        request_timeout,
    )
    .await
    .expect("connect")
}

#[tokio::test]
async fn a_cancelled_request_does_not_fail_the_next_one_on_its_connection() {
    let topic = TestTopic::create("cancelled", 1).await;
    let conn = connect(Duration::from_secs(60)).await;
    wait_fetchable(&conn, &topic.name).await;
    let v = conn.version_for::<FetchRequest>(Some(12)).expect("fetch");
    // The broker holds this Fetch for 2 s; the caller gives up after 100 ms (a select!, a
    // timeout around poll, a dropped future) and its response arrives later, unwanted.
    let slow = slow_fetch(&topic.name, Duration::from_secs(2));
    let cancelled =
        tokio::time::timeout(Duration::from_millis(100), conn.request_at(&slow, v)).await;
    assert!(cancelled.is_err(), "the fetch was cancelled, not answered");
    // The broker answers in order: this one's response comes after the cancelled Fetch's.
    let started = Instant::now();
    let resp = conn
        .request(&api_versions())
        .await
        .expect("a request after a cancelled one succeeds on the same connection");
    assert_eq!(resp.error_code, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the answer came after the cancelled Fetch's (took {:?}), so the late response was read",
        started.elapsed()
    );
    assert!(!conn.is_poisoned(), "the connection is still in use");
    // And it goes on working.
    conn.request(&api_versions())
        .await
        .expect("a third request");
}

/// A dropped PendingResponse (the sender's own handle) is the same event as a cancelled call.
#[tokio::test]
async fn a_dropped_pending_response_does_not_fail_the_connection() {
    let topic = TestTopic::create("dropped", 1).await;
    let conn = connect(Duration::from_secs(60)).await;
    wait_fetchable(&conn, &topic.name).await;
    let v = conn.version_for::<FetchRequest>(Some(12)).expect("fetch");
    let pending = conn
        .start_request(&slow_fetch(&topic.name, Duration::from_secs(1)), v)
        .expect("on the wire");
    drop(pending);
    conn.request(&api_versions())
        .await
        .expect("the next request succeeds");
    assert!(!conn.is_poisoned());
}

/// The Java client closes a connection whose request timed out: the order of answers is no
/// longer known to be matched. Kept.
#[tokio::test]
async fn a_request_timeout_still_closes_the_connection() {
    let topic = TestTopic::create("timed-out", 1).await;
    let conn = connect(Duration::from_millis(500)).await;
    wait_fetchable(&conn, &topic.name).await;
    let v = conn.version_for::<FetchRequest>(Some(12)).expect("fetch");
    let e = conn
        .request_at(&slow_fetch(&topic.name, Duration::from_secs(3)), v)
        .await
        .expect_err("held longer than request.timeout.ms");
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    assert!(
        conn.is_poisoned(),
        "a timed-out request closes the connection"
    );
}

#[tokio::test]
async fn a_request_with_its_own_longer_timeout_is_not_cut_by_the_default() {
    let topic = TestTopic::create("own-timeout", 1).await;
    let conn = connect(Duration::from_millis(500)).await;
    wait_fetchable(&conn, &topic.name).await;
    let v = conn.version_for::<FetchRequest>(Some(12)).expect("fetch");
    let max_wait = Duration::from_secs(2);
    let resp = conn
        .start_request(&slow_fetch(&topic.name, max_wait), v)
        .expect("on the wire")
        .with_timeout(conn.request_timeout() + max_wait)
        .response()
        .await
        .expect("a Fetch held for max_wait is answered within its own timeout");
    assert_eq!(resp.error_code, 0);
    assert!(!conn.is_poisoned());
}

/// fetch.max.wait.ms above request.timeout.ms: each Fetch is held longer than the default
/// timeout. The consumer must keep its connection rather than replace it after every fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_fetch_held_longer_than_request_timeout_keeps_its_connection() {
    let topic = TestTopic::create("long-poll", 1).await;
    let proxy = Proxy::start(&broker()).await;
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &[
            ("request.timeout.ms", "1000"),
            ("fetch.max.wait.ms", "1500"),
        ],
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    c.seek(&topic.tps()[0], Offset::Beginning).expect("seek");
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxy.faults.fetch_requests.load(Ordering::Relaxed) < 4 {
        assert!(
            Instant::now() < deadline,
            "4 fetches did not go out within 60 s"
        );
        assert!(c
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
            .is_empty());
    }
    // One connection for the bootstrap address, one for the broker's node id.
    let connections = proxy.faults.connections.load(Ordering::Relaxed);
    assert!(
        connections <= 2,
        "{connections} connections for {} fetches: each held fetch replaced the connection",
        proxy.faults.fetch_requests.load(Ordering::Relaxed)
    );
}

/// Bug 13: one unreachable leader stalled the whole producer. The proxy presents partition 1
/// as led by a second broker whose connection hangs (it accepts and never answers ApiVersions);
/// partition 0's leader is the real broker. Records for partition 0 must be acknowledged while
/// the connect to the hanging one is still pending, long before its timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_for_a_healthy_leader_are_not_held_up_by_an_unreachable_one() {
    let topic = TestTopic::create("one-leader-hangs", 2).await;
    let hole = Blackhole::start().await;
    let proxy = Proxy::start(&broker()).await;
    *proxy.faults.fake_leader.lock().unwrap() = Some(FakeLeader {
        node_id: 4242,
        addr: hole.addr.clone(),
        topic: topic.name.clone(),
        partitions: vec![1],
    });
    // Timeouts far beyond the test's deadline: acknowledgements within it cannot be explained
    // by the hanging connect giving up.
    let p = Producer::new(producer_config(
        &proxy.addr,
        &[
            ("linger.ms", "0"),
            ("request.timeout.ms", "300000"),
            ("socket.connection.setup.timeout.ms", "300000"),
            ("delivery.timeout.ms", "600000"),
        ],
    ))
    .await
    .expect("producer");
    let mut stuck = p
        .send(ProducerRecord::new(topic.name.clone(), "to the hanging leader").with_partition(1))
        .await
        .expect("send to partition 1");
    let deadline = Instant::now() + Duration::from_secs(60);
    while hole.accepted.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "the producer did not connect to partition 1's leader within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The connect to the hanging leader is under way. Partition 0 goes on, record by record.
    for i in 0..10 {
        let f = p
            .send(ProducerRecord::new(topic.name.clone(), format!("healthy {i}")).with_partition(0))
            .await
            .expect("send to partition 0");
        let meta = tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("a record for the healthy leader was not acknowledged within 60 s while the connect to the unreachable leader was pending")
            .expect("delivered");
        assert_eq!(meta.offset, i);
    }
    assert!(
        futures::FutureExt::now_or_never(&mut stuck).is_none(),
        "the record for the hanging leader is still pending"
    );
}

/// Fills partition 0 of `topic` with `n` records, directly (not through a proxy).
async fn fill_directly(topic: &str, n: usize) {
    let p = producer(&[("linger.ms", "5")]).await;
    let mut fs = Vec::new();
    for i in 0..n {
        let r =
            ProducerRecord::new(topic.to_owned(), format!("v{i}").into_bytes()).with_partition(0);
        fs.push(p.send(r).await.expect("send"));
    }
    for f in fs {
        f.await.expect("delivered");
    }
}

/// One ApiVersions answer damaged on the way (Fetch offered only at versions the client does
/// not speak): the pool does not hand out that connection; it connects and negotiates again at
/// once, and the caller gets a connection that speaks Fetch, without seeing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_api_versions_answer_is_negotiated_again_on_a_new_connection() {
    let proxy = Proxy::start(&broker()).await;
    let cluster = onceflow::client::Cluster::connect(client_config(&proxy.addr))
        .await
        .expect("bootstrap");
    let node = *cluster
        .metadata()
        .brokers
        .keys()
        .next()
        .expect("a broker in metadata");
    // The broker's own connection (the bootstrap one is separate) gets the damaged answer.
    proxy.faults.damage_api_versions.store(1, Ordering::Relaxed);
    let conn = cluster.broker(node).await.expect("a connection");
    assert_eq!(proxy.faults.damaged_api_versions.load(Ordering::Relaxed), 1);
    conn.version_for::<FetchRequest>(None)
        .expect("the connection handed out speaks Fetch");
}

/// A broker that offers no Fetch version this client speaks, on every connection (a broker
/// far too old, or every answer damaged): `onceflow consume -e` ends within
/// default.api.timeout.ms with a one-line error naming the broker and Fetch — it used to retry
/// every 100 ms for ever, printing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_a_common_fetch_version_is_an_error_not_a_silent_loop() {
    let topic = TestTopic::create("no-fetch-version", 1).await;
    fill_directly(&topic.name, 3).await;
    let proxy = Proxy::start(&broker()).await;
    proxy
        .faults
        .damage_api_versions
        .store(u32::MAX, Ordering::Relaxed);
    let args: Vec<String> = [
        "consume",
        "-b",
        &proxy.addr,
        "-t",
        &topic.name,
        "-e",
        "-X",
        "default.api.timeout.ms=10000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let started = Instant::now();
    let o = tokio::time::timeout(
        Duration::from_secs(90),
        crate::support::cli::onceflow_async(args, ""),
    )
    .await
    .expect("consume -e ends instead of retrying for ever");
    crate::support::cli::assert_one_line_error(&o, "supports no version of Fetch");
    assert!(
        crate::support::cli::stderr(&o).contains(&proxy.addr),
        "names the broker: {}",
        crate::support::cli::stderr(&o)
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// `close_timeout` on a producer whose record waits for a leader that never answers: it
/// returns within its timeout (an error saying so) instead of waiting for delivery.timeout.ms,
/// and the record's future fails as closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_timeout_gives_up_on_an_unreachable_leader_within_its_timeout() {
    let topic = TestTopic::create("close-timeout", 2).await;
    let hole = Blackhole::start().await;
    let proxy = Proxy::start(&broker()).await;
    *proxy.faults.fake_leader.lock().unwrap() = Some(FakeLeader {
        node_id: 4243,
        addr: hole.addr.clone(),
        topic: topic.name.clone(),
        partitions: vec![1],
    });
    let p = Producer::new(producer_config(
        &proxy.addr,
        &[("linger.ms", "0"), ("delivery.timeout.ms", "600000")],
    ))
    .await
    .expect("producer");
    let stuck = p
        .send(ProducerRecord::new(topic.name.clone(), "to the hanging leader").with_partition(1))
        .await
        .expect("send");
    let started = Instant::now();
    let closed = tokio::time::timeout(
        Duration::from_secs(60),
        p.close_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("close_timeout returns within 60 s");
    assert!(matches!(closed, Err(Error::Timeout { .. })), "{closed:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let outcome = tokio::time::timeout(Duration::from_secs(60), stuck)
        .await
        .expect("the queued record is told");
    assert!(matches!(outcome, Err(Error::Closed(_))), "{outcome:?}");
}
