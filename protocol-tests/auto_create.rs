//! Topic auto-creation as the Java client does it: the producer asks the broker to create a
//! topic on first use, the consumer per `allow.auto.create.topics` (default true), admin never;
//! the broker's `auto.create.topics.enable` decides.
//!
//! The shared brokers may run with auto-creation on or off, so these tests use private brokers:
//! one with Kafka's defaults (auto-creation on) and one with it off. Each is shared by the tests
//! of this module that need it while they run, and wiped when the last one is done.

use crate::support::broker::PrivateBroker;
use crate::support::cli::{assert_one_line_error, onceflow};
use crate::support::proxy::Proxy;
use crate::support::*;
use onceflow::client::admin::NewTopic;
use onceflow::client::group::GroupConsumer;
use onceflow::client::{Admin, Consumer, Error, Producer, ProducerRecord};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Private broker ports (the controller takes port + 1).
const DEFAULT_PORT: u16 = 19400;
const NO_AUTO_CREATE_PORT: u16 = 19402;

/// Per port: how many tests use the broker, and the broker.
type Registry = BTreeMap<u16, (usize, Option<PrivateBroker>)>;
static BROKERS: Mutex<Registry> = Mutex::new(BTreeMap::new());

/// A lease on a private broker shared by the tests running at the same time. Starting and
/// wiping both happen under the registry lock, so a test never gets a broker being wiped.
struct Lease {
    port: u16,
    addr: String,
}

impl Lease {
    fn get(port: u16, extra_props: &str) -> Lease {
        init_logging();
        let mut reg = BROKERS.lock().unwrap_or_else(|p| p.into_inner());
        let entry = reg.entry(port).or_default();
        if entry.1.is_none() {
            entry.1 = Some(PrivateBroker::start_with(port, extra_props));
        }
        entry.0 += 1;
        let addr = entry.1.as_ref().map(|b| b.addr.clone()).unwrap_or_default();
        Lease { port, addr }
    }

    /// A broker with Kafka's defaults: auto.create.topics.enable=true.
    fn default_settings() -> Lease {
        Self::get(DEFAULT_PORT, "")
    }

    /// A broker that refuses to create topics on first use.
    fn no_auto_create() -> Lease {
        Self::get(NO_AUTO_CREATE_PORT, "auto.create.topics.enable=false")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut reg = BROKERS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = reg.get_mut(&self.port) {
            entry.0 -= 1;
            if entry.0 == 0 {
                drop(entry.1.take());
            }
        }
    }
}

async fn topic_exists(broker: &str, topic: &str) -> bool {
    let admin = Admin::new(client_config(broker)).await.expect("admin");
    admin
        .list_topics()
        .await
        .expect("list topics")
        .contains_key(topic)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_creates_a_missing_topic_on_a_broker_with_default_settings() {
    let broker = Lease::default_settings();
    let topic = unique_topic("auto-created");
    let p = Producer::new(producer_config(&broker.addr, &[]))
        .await
        .expect("producer");
    let meta = p
        .send(ProducerRecord::new(topic.clone(), "first"))
        .await
        .expect("send to a topic the broker creates on first use")
        .await
        .expect("record acknowledged");
    assert_eq!((meta.partition, meta.offset), (0, 0));
    assert!(topic_exists(&broker.addr, &topic).await, "{topic} created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_assign_creates_a_missing_topic_by_default() {
    let broker = Lease::default_settings();
    let topic = unique_topic("consumer-created");
    let mut c = Consumer::new(consumer_config(&broker.addr, &[]))
        .await
        .expect("consumer");
    let tps = c
        .assign_topics(&[topic.as_str()])
        .await
        .expect("allow.auto.create.topics=true (the default): the broker creates it");
    assert_eq!(tps.len(), 1, "num.partitions=1 on the broker");
    assert!(topic_exists(&broker.addr, &topic).await, "{topic} created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_assign_with_auto_create_off_does_not_create_the_topic() {
    let broker = Lease::default_settings();
    let topic = unique_topic("not-created-assign");
    let mut c = Consumer::new(consumer_config(
        &broker.addr,
        &[("allow.auto.create.topics", "false")],
    ))
    .await
    .expect("consumer");
    let e = c
        .assign_topics(&[topic.as_str()])
        .await
        .expect_err("a missing topic is an error");
    assert!(
        matches!(e, Error::UnknownTopic(ref t) if *t == topic),
        "{e:?}"
    );
    assert!(!topic_exists(&broker.addr, &topic).await, "{topic} created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_subscription_creates_a_missing_topic_by_default() {
    let broker = Lease::default_settings();
    let topic = unique_topic("subscribe-created");
    let group = unique_topic("g-create");
    let mut g = GroupConsumer::new(consumer_config(
        &broker.addr,
        &[("group.id", group.as_str())],
    ))
    .await
    .expect("group consumer");
    g.subscribe(&[topic.as_str()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while g.assignment().is_empty() {
        assert!(
            Instant::now() < deadline,
            "{topic} was not created and assigned within 60 s"
        );
        g.poll(Duration::from_millis(200)).await.expect("poll");
    }
    assert!(topic_exists(&broker.addr, &topic).await, "{topic} created");
    let _ = g.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_subscription_with_auto_create_off_does_not_create_the_topic() {
    let broker = Lease::default_settings();
    let topic = unique_topic("not-created-subscribe");
    let group = unique_topic("g-no-create");
    let mut g = GroupConsumer::new(consumer_config(
        &broker.addr,
        &[
            ("group.id", group.as_str()),
            ("allow.auto.create.topics", "false"),
        ],
    ))
    .await
    .expect("group consumer");
    g.subscribe(&[topic.as_str()]);
    // The leader (this member) computes the assignment after looking the topic up.
    let deadline = Instant::now() + Duration::from_secs(60);
    while g.group_metadata().generation_id < 1 {
        assert!(
            Instant::now() < deadline,
            "the member did not join the group within 60 s"
        );
        g.poll(Duration::from_millis(200)).await.expect("poll");
    }
    assert!(g.assignment().is_empty(), "{:?}", g.assignment());
    assert!(!topic_exists(&broker.addr, &topic).await, "{topic} created");
    let _ = g.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_error_names_the_topic_when_the_broker_does_not_auto_create() {
    let broker = Lease::no_auto_create();
    let topic = unique_topic("refused");
    let p = Producer::new(producer_config(&broker.addr, &[("max.block.ms", "2000")]))
        .await
        .expect("producer");
    let e = p
        .send(ProducerRecord::new(topic.clone(), "x"))
        .await
        .err()
        .expect("the broker does not create the topic");
    let msg = e.to_string();
    for needle in [
        format!("topic '{topic}' does not exist"),
        "max.block.ms".into(),
        "auto.create.topics.enable=false".into(),
        "onceflow topics create".into(),
    ] {
        assert!(msg.contains(&needle), "expected '{needle}' in: {msg}");
    }
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_waits_up_to_max_block_for_a_topic_created_while_it_waits() {
    let broker = Lease::no_auto_create();
    // The producer talks through a proxy that counts Metadata answers, so the test knows when
    // the broker has told it the topic does not exist (yet).
    let proxy = Proxy::start(&broker.addr).await;
    let topic = unique_topic("created-late");
    let p = Producer::new(producer_config(&proxy.addr, &[("max.block.ms", "60000")]))
        .await
        .expect("producer");
    let before = proxy.faults.metadata_responses.load(Ordering::Relaxed);
    let send = {
        let (p, topic) = (p.clone(), topic.clone());
        tokio::spawn(async move { p.send(ProducerRecord::new(topic, "late")).await?.await })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxy.faults.metadata_responses.load(Ordering::Relaxed) == before {
        assert!(
            Instant::now() < deadline,
            "the producer did not look {topic} up within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The broker has answered UNKNOWN_TOPIC_OR_PARTITION at least once; create it now.
    let admin = Admin::new(client_config(&broker.addr))
        .await
        .expect("admin");
    admin
        .create_topics(&[NewTopic::new(topic.clone(), 1)])
        .await
        .expect("create topic");
    let meta = tokio::time::timeout(Duration::from_secs(90), send)
        .await
        .expect("the send resolves within max.block.ms and the delivery")
        .expect("send task")
        .expect("the record lands in the topic created while the producer waited");
    assert_eq!(meta.offset, 0);
}

#[test]
fn cli_produce_to_a_topic_the_broker_does_not_create_is_a_one_line_error() {
    let broker = Lease::no_auto_create();
    let topic = unique_topic("cli-refused");
    let (out, _) = onceflow(
        &[
            "produce",
            "-b",
            &broker.addr,
            "-t",
            &topic,
            "-X",
            "max.block.ms=2000",
        ],
        "",
    );
    for needle in [
        format!("topic '{topic}' does not exist"),
        "auto.create.topics.enable=false".into(),
        "onceflow topics create".into(),
    ] {
        assert_one_line_error(&out, &needle);
    }
}
