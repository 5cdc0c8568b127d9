//! TLS and SASL against the real secured broker (support/secured.rs): every way in carries a
//! transaction and a consumer group end to end; a wrong password, an untrusted CA and a host
//! name the certificate does not list each fail once, clearly, without retrying; a SASL session
//! the broker limits is renewed in place (KIP-368), and without that the broker closes the
//! connection. At transaction.version 2 (TV2 run) and 1 (TV1 run), each on its own broker.

use crate::support::secured::{secured, Props, REAUTH_MS};
use crate::support::unique_topic;
use onceflow::client::admin::NewTopic;
use onceflow::client::group::GroupConsumer;
use onceflow::client::{
    Admin, ClientConfig, Cluster, ConsumerConfig, Error, ErrorClass, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(120);

fn client(props: &Props) -> ClientConfig {
    let mut c = ClientConfig::default();
    for (k, v) in props {
        assert!(c.set(k, v).unwrap(), "{k} is not a client property");
    }
    c.api_timeout = Duration::from_secs(30);
    c
}

fn with(props: &Props, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut p = props.clone();
    p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    p
}

/// Over `props`: creates a topic, commits a transaction of 10 records and aborts one of 5, then
/// a read_committed group member reads exactly the 10 and commits its offsets, which an admin
/// client reads back. Everything (admin, transaction coordinator, group coordinator, produce,
/// fetch) goes through the secured listener.
async fn transaction_and_group_over(props: Props, name: &str) {
    let admin = Admin::new(client(&props))
        .await
        .expect("admin over the listener");
    let topic = unique_topic(name);
    admin
        .create_topics(&[NewTopic::new(topic.clone(), 2)])
        .await
        .expect("create the topic over the listener");

    let txn_id = unique_topic(&format!("{name}-txn"));
    let producer = Producer::new(
        ProducerConfig::from_properties(with(&props, &[("transactional.id", &txn_id)])).unwrap(),
    )
    .await
    .expect("producer over the listener");
    producer
        .init_transactions()
        .await
        .expect("init_transactions");
    producer.begin_transaction().unwrap();
    for i in 0..10 {
        let r = ProducerRecord::new(&topic, format!("committed-{i}"));
        producer.send(r).await.unwrap();
    }
    producer.commit_transaction().await.expect("commit");
    producer.begin_transaction().unwrap();
    for i in 0..5 {
        producer
            .send(ProducerRecord::new(&topic, format!("aborted-{i}")))
            .await
            .unwrap();
    }
    producer.abort_transaction().await.expect("abort");

    let group = unique_topic(&format!("{name}-group"));
    let mut member = GroupConsumer::new(
        ConsumerConfig::from_properties(with(
            &props,
            &[
                ("group.id", &group),
                ("isolation.level", "read_committed"),
                ("auto.offset.reset", "earliest"),
            ],
        ))
        .unwrap(),
    )
    .await
    .expect("group member over the listener");
    member.subscribe(&[topic.as_str()]);
    let mut values = Vec::new();
    let start = Instant::now();
    while values.len() < 10 {
        assert!(
            start.elapsed() < DEADLINE,
            "read {values:?} of 10 within {DEADLINE:?}"
        );
        for r in member.poll(Duration::from_millis(200)).await.unwrap() {
            values
                .push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    // Nothing else: the aborted records never come (the member is at the end of both
    // partitions once the LSO passed the abort marker).
    while !member.consumer().at_end() {
        assert!(start.elapsed() < DEADLINE, "never reached the end");
        for r in member.poll(Duration::from_millis(200)).await.unwrap() {
            values
                .push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    values.sort();
    let want: Vec<String> = {
        let mut w: Vec<String> = (0..10).map(|i| format!("committed-{i}")).collect();
        w.sort();
        w
    };
    assert_eq!(values, want);
    member.commit_positions().await.expect("commit offsets");
    let committed = admin
        .committed_offsets(
            &group,
            &[
                TopicPartition::new(topic.clone(), 0),
                TopicPartition::new(topic.clone(), 1),
            ],
        )
        .await
        .expect("committed offsets over the listener");
    let total: i64 = committed.values().sum();
    // 10 records and 2 transaction markers (a partition without records has no marker of the
    // committed transaction, so the sum is at least 10 + the markers of the partitions used).
    assert!(total >= 11, "committed offsets {committed:?}");
    member.close().await.unwrap();
    producer.close().await.unwrap();
    admin.delete_topics(&[topic.as_str()]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(s.ssl_props(), "sec-ssl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(s.mtls_props(), "sec-mtls").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_plain_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(
        s.sasl_ssl_props("PLAIN", "alice", "alice-secret"),
        "sec-plain",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_scram_sha_256_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(
        s.sasl_ssl_props("SCRAM-SHA-256", "alice", "alice-secret"),
        "sec-s256",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_scram_sha_512_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(
        s.sasl_ssl_props("SCRAM-SHA-512", "alice", "alice-secret"),
        "sec-s512",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_oauthbearer_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(s.oauth_props("alice"), "sec-oauth").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plaintext_scram_from_a_jaas_config_carries_a_transaction_and_a_group() {
    let s = secured().await;
    transaction_and_group_over(
        s.sasl_plaintext_props("SCRAM-SHA-512", "alice", "alice-secret"),
        "sec-saslpt",
    )
    .await;
}

/// A wrong password: one attempt (the broker logs one failed authentication), an error naming
/// the mechanism and the user and classed fatal, long before default.api.timeout.ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_once_naming_the_mechanism_and_the_user() {
    let s = secured().await;
    let before = s.failed_authentications();
    let start = Instant::now();
    let e = Admin::new(client(&s.sasl_ssl_props("SCRAM-SHA-256", "alice", "wrong")))
        .await
        .map(|_| ())
        .unwrap_err();
    let took = start.elapsed();
    let text = e.to_string();
    assert!(matches!(e, Error::Authentication { .. }), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Fatal);
    assert!(
        text.contains("SCRAM-SHA-256") && text.contains("user 'alice'"),
        "{text}"
    );
    assert!(text.contains("check the user name and password"), "{text}");
    assert!(
        !text.contains("wrong"),
        "the password shows in the error: {text}"
    );
    assert!(took < Duration::from_secs(25), "took {took:?}: retried?");
    // The broker writes its log line as it fails the exchange: wait for it, then check no
    // second attempt followed.
    let start = Instant::now();
    while s.failed_authentications() == before {
        assert!(
            start.elapsed() < DEADLINE,
            "the broker logged no failed authentication"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        s.failed_authentications() - before,
        1,
        "more than one attempt"
    );
}

/// An untrusted CA and a host name the certificate does not list: clear TLS errors, fatal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_ca_and_a_wrong_host_name_are_clear_tls_errors() {
    let s = secured().await;
    let mut other_ca = s.ssl_props();
    other_ca[2].1 = s.other_ca.display().to_string();
    let e = Admin::new(client(&other_ca)).await.map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e:?}");
    assert!(e.to_string().contains("not signed by a trusted CA"), "{e}");
    assert_eq!(e.class(), ErrorClass::Fatal);

    // 127.0.0.2 reaches the same listener, but the certificate is for 127.0.0.1 and localhost.
    let mut wrong_host = s.ssl_props();
    wrong_host[0].1 = s.ssl.replace("127.0.0.1", "127.0.0.2");
    let e = Admin::new(client(&wrong_host))
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, Error::Tls { .. }), "{e:?}");
    assert!(e.to_string().contains("not valid for '127.0.0.2'"), "{e}");
}

/// The inverse of the host-name check: with ssl.endpoint.identification.algorithm empty the
/// same connection to 127.0.0.2 is accepted (the chain is still checked: the other CA fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hostname_verification_a_wrong_host_name_connects_but_the_ca_still_counts() {
    let s = secured().await;
    let mut wrong_host = s.ssl_props();
    wrong_host[0].1 = s.ssl.replace("127.0.0.1", "127.0.0.2");
    wrong_host.push((
        "ssl.endpoint.identification.algorithm".into(),
        String::new(),
    ));
    let admin = Admin::new(client(&wrong_host))
        .await
        .expect("connects without the check");
    admin.list_topics().await.expect("list topics");
    let mut other_ca = wrong_host.clone();
    other_ca[2].1 = s.other_ca.display().to_string();
    let e = Admin::new(client(&other_ca)).await.map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("not signed by a trusted CA"), "{e}");
}

/// One small request on `conn` (Metadata for no topics): what keeps a session in use.
async fn ping(conn: &onceflow::client::connection::Connection) -> onceflow::client::Result<()> {
    let req = kafka_protocol::messages::MetadataRequest::default().with_topics(Some(vec![]));
    conn.request(&req).await.map(|_| ())
}

/// The broker limits SASL sessions to REAUTH_MS: one connection that keeps sending requests
/// for several lifetimes re-authenticates in place and is never closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_re_authenticates_before_its_session_ends_and_stays_open() {
    let s = secured().await;
    let cluster = Cluster::connect(client(&s.sasl_ssl_props(
        "SCRAM-SHA-512",
        "alice",
        "alice-secret",
    )))
    .await
    .unwrap();
    let node = *cluster.metadata().brokers.keys().next().unwrap();
    let conn = cluster.broker(node).await.unwrap();
    let start = Instant::now();
    while conn.reauthentications() < 2 {
        assert!(
            start.elapsed() < DEADLINE,
            "no two re-authentications within {DEADLINE:?}"
        );
        ping(&conn)
            .await
            .expect("a request between re-authentications");
        assert!(!conn.is_poisoned());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Two full sessions passed on one connection.
    assert!(start.elapsed() >= Duration::from_millis(REAUTH_MS));
}

/// The inverse: without re-authentication the broker closes the connection once the session
/// has ended and a request comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_re_authentication_the_broker_closes_the_connection_when_the_session_ends() {
    let s = secured().await;
    let mut config = client(&s.sasl_ssl_props("SCRAM-SHA-512", "alice", "alice-secret"));
    config.security.skip_reauthentication = true;
    let cluster = Cluster::connect(config).await.unwrap();
    let node = *cluster.metadata().brokers.keys().next().unwrap();
    let conn = cluster.broker(node).await.unwrap();
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the broker never closed the connection"
        );
        if ping(&conn).await.is_err() || conn.is_poisoned() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        start.elapsed() >= Duration::from_millis(REAUTH_MS / 2),
        "closed before the session could have ended"
    );
    assert_eq!(conn.reauthentications(), 0);
}

/// The Java peer (kafka-clients 4.1.1) as `props` says, on the same listener: its exit status
/// and standard error.
async fn java_as(props: &Props, subcommand: &str, topic: &str, args: &[&str]) -> (bool, String) {
    let dir = tempfile::TempDir::new().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"value\":\"eA==\"}\n").unwrap();
    let out_file = dir.path().join("out.jsonl");
    let mut argv: Vec<String> = vec![
        crate::support::repo()
            .join("protocol-tests/java/interop.sh")
            .display()
            .to_string(),
        subcommand.into(),
        "--topic".into(),
        topic.into(),
    ];
    for (k, v) in props {
        match k.as_str() {
            "bootstrap.servers" => argv.extend(["--bootstrap".to_owned(), v.clone()]),
            // librdkafka's names are ours; the Java client wants its own.
            "ssl.ca.location" => {
                argv.extend(["--prop".to_owned(), format!("ssl.truststore.location={v}")]);
                argv.extend(["--prop".to_owned(), "ssl.truststore.type=PEM".to_owned()]);
            }
            "sasl.username" | "sasl.password" => {}
            _ => argv.extend(["--prop".to_owned(), format!("{k}={v}")]),
        }
    }
    let user = props.iter().find(|(k, _)| k == "sasl.username");
    let password = props.iter().find(|(k, _)| k == "sasl.password");
    if let (Some((_, u)), Some((_, p))) = (user, password) {
        argv.extend([
            "--prop".to_owned(),
            format!("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{u}\" password=\"{p}\";"),
        ]);
    }
    match subcommand {
        "produce" => argv.extend(["--input".to_owned(), input.display().to_string()]),
        _ => argv.extend([
            "--output".to_owned(),
            out_file.display().to_string(),
            "--expect".to_owned(),
            "1".to_owned(),
            "--timeout-ms".to_owned(),
            "30000".to_owned(),
        ]),
    }
    argv.extend(args.iter().map(|s| s.to_string()));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash").args(&argv).output()
    })
    .await
    .unwrap()
    .expect("run interop.sh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A topic bob may not use, created over the PLAINTEXT listener (a super user).
async fn topic_bob_cannot_use(name: &str) -> String {
    let s = secured().await;
    let admin = Admin::new(client(&s.plaintext_props())).await.unwrap();
    let topic = unique_topic(name);
    admin
        .create_topics(&[NewTopic::new(topic.clone(), 1)])
        .await
        .unwrap();
    topic
}

async fn bob() -> Props {
    secured()
        .await
        .sasl_ssl_props("SCRAM-SHA-512", "bob", "bob-secret")
}

/// Fails within a bound far below the client's timeouts (the error is not retried).
fn quick(start: Instant) {
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "took {:?}: retried?",
        start.elapsed()
    );
}

/// bob has no ACL on the topic: a (non-idempotent) send fails once with
/// TOPIC_AUTHORIZATION_FAILED naming the topic and the operation; the Java producer fails too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_topic_acl_gets_topic_authorization_failed_naming_the_topic() {
    let topic = topic_bob_cannot_use("authz-topic").await;
    let props = bob().await;
    let producer = Producer::new(
        ProducerConfig::from_properties(with(&props, &[("enable.idempotence", "false")])).unwrap(),
    )
    .await
    .expect("a producer connects; the topic is refused at send");
    let start = Instant::now();
    let e = producer
        .send(ProducerRecord::new(&topic, "x"))
        .await
        .map(|_| ())
        .unwrap_err();
    quick(start);
    let text = e.to_string();
    assert!(text.contains("TOPIC_AUTHORIZATION_FAILED"), "{text}");
    assert!(
        text.contains(&topic) && text.contains("needs Describe on the topic"),
        "{text}"
    );
    // The refusal came in a Metadata answer: it names the broker that sent it.
    assert!(text.contains("(broker 127.0.0.1:"), "{text}");
    assert_eq!(e.class(), ErrorClass::Fatal);
    let (ok, stderr) = java_as(&props, "produce", &topic, &["--idempotent", "false"]).await;
    assert!(
        !ok && stderr.contains("TopicAuthorizationException"),
        "Java: {stderr}"
    );
}

/// bob in a consumer group: GROUP_AUTHORIZATION_FAILED naming the group, reported again by
/// the next poll rather than retried; Java refuses bob as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_group_acl_gets_group_authorization_failed_naming_the_group() {
    let topic = topic_bob_cannot_use("authz-group").await;
    let props = bob().await;
    let group = unique_topic("authz-group");
    let mut member = GroupConsumer::new(
        ConsumerConfig::from_properties(with(&props, &[("group.id", &group)])).unwrap(),
    )
    .await
    .unwrap();
    member.subscribe(&[topic.as_str()]);
    let start = Instant::now();
    let e = loop {
        match member.poll(Duration::from_millis(200)).await {
            Err(e) => break e,
            Ok(r) => assert!(r.is_empty(), "bob read records"),
        }
        quick(start);
    };
    quick(start);
    let text = e.to_string();
    assert!(text.contains("GROUP_AUTHORIZATION_FAILED"), "{text}");
    assert!(
        text.contains(&group) && text.contains("on the group"),
        "{text}"
    );
    // Reported, not retried: the next poll says the same at once.
    let again = member.poll(Duration::from_millis(200)).await.unwrap_err();
    assert!(
        again.to_string().contains("GROUP_AUTHORIZATION_FAILED"),
        "{again}"
    );
    // Java refuses bob too (it asks for the topic's metadata before the group's coordinator,
    // so it names the topic first).
    let (ok, stderr) = java_as(&props, "consume", &topic, &["--group", &group]).await;
    assert!(
        !ok && (stderr.contains("GroupAuthorizationException")
            || stderr.contains("TopicAuthorizationException")),
        "Java: {stderr}"
    );
}

/// bob's transactional producer: TRANSACTIONAL_ID_AUTHORIZATION_FAILED at init_transactions,
/// naming the id; Java agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_transactional_id_acl_gets_transactional_id_authorization_failed() {
    let topic = topic_bob_cannot_use("authz-txn").await;
    let props = bob().await;
    let id = unique_topic("authz-txn-id");
    let producer = Producer::new(
        ProducerConfig::from_properties(with(&props, &[("transactional.id", &id)])).unwrap(),
    )
    .await
    .unwrap();
    let start = Instant::now();
    let e = producer.init_transactions().await.unwrap_err();
    quick(start);
    let text = e.to_string();
    assert!(
        text.contains("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        "{text}"
    );
    assert!(
        text.contains(&id) && text.contains("on the transactional id"),
        "{text}"
    );
    assert_eq!(e.class(), ErrorClass::Fatal);
    let (ok, stderr) = java_as(
        &props,
        "produce",
        &topic,
        &["--transactional-id", &id, "--txn-size", "1"],
    )
    .await;
    assert!(
        !ok && stderr.contains("TransactionalIdAuthorizationException"),
        "Java: {stderr}"
    );
}

/// bob's idempotent producer (no IdempotentWrite, no Write on any topic):
/// CLUSTER_AUTHORIZATION_FAILED when it starts, saying what to grant; Java agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_without_idempotent_write_gets_cluster_authorization_failed() {
    let topic = topic_bob_cannot_use("authz-idem").await;
    let props = bob().await;
    let start = Instant::now();
    let e = Producer::new(
        ProducerConfig::from_properties(with(&props, &[("enable.idempotence", "true")])).unwrap(),
    )
    .await
    .map(|_| ())
    .unwrap_err();
    quick(start);
    let text = e.to_string();
    assert!(text.contains("CLUSTER_AUTHORIZATION_FAILED"), "{text}");
    assert!(text.contains("IdempotentWrite on the cluster"), "{text}");
    assert_eq!(e.class(), ErrorClass::Fatal);
    let (ok, stderr) = java_as(&props, "produce", &topic, &["--idempotent", "true"]).await;
    assert!(
        !ok && (stderr.contains("ClusterAuthorizationException")
            || stderr.contains("TopicAuthorizationException")),
        "Java: {stderr}"
    );
}

/// A TCP proxy to `upstream` that closes both sides once it has passed `cut` bytes from the
/// broker to the client (for every connection): a broker that goes away mid-handshake.
async fn cutting_proxy(upstream: String, cut: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                });
                let mut passed = 0;
                let mut buf = vec![0u8; 4096];
                while passed < cut {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n.min(cut - passed),
                    };
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    passed += n;
                }
                up.abort();
                let _ = cw.shutdown().await;
            });
        }
    });
    addr
}

/// A broker that closes the connection at any point of the TLS handshake, the ApiVersions
/// exchange or the SASL exchange: every attempt ends in a clear error (or, cut late enough,
/// success) within default.api.timeout.ms — never a panic or a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_closing_mid_handshake_gives_an_error_within_the_timeout() {
    let s = secured().await;
    let ways: [(&str, Props); 2] = [
        ("SSL", s.ssl_props()),
        (
            "SASL_PLAINTEXT",
            s.sasl_plaintext_props("SCRAM-SHA-256", "alice", "alice-secret"),
        ),
    ];
    for (name, props) in ways {
        for cut in [0, 7, 300, 700, 1500, 3000] {
            let mut props = props.clone();
            props[0].1 = cutting_proxy(props[0].1.clone(), cut).await;
            let mut config = client(&props);
            config.api_timeout = Duration::from_secs(5);
            config.request_timeout = Duration::from_secs(5);
            config.connect_timeout = Duration::from_secs(5);
            let start = Instant::now();
            let outcome = tokio::time::timeout(Duration::from_secs(60), Admin::new(config))
                .await
                .unwrap_or_else(|_| panic!("{name} cut after {cut} bytes: hung for 60 s"));
            let took = start.elapsed();
            assert!(
                took < Duration::from_secs(20),
                "{name} cut after {cut} bytes: took {took:?}"
            );
            if let Err(e) = outcome {
                let text = e.to_string();
                assert!(
                    !text.is_empty() && !text.contains('\n'),
                    "{name}/{cut}: {text}"
                );
                eprintln!("{name} cut after {cut} bytes: {text}");
            }
        }
    }
}

/// The password never shows: not in the CLI's error for a refused login, nor in its trace
/// logs (ONCEFLOW_LOG=trace, every span and event of the client), with the password on the
/// command line and in a config file; the good password works through the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_show_in_the_clis_errors_or_trace_logs() {
    let s = secured().await;
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("client.properties");
    let secret = "Zq7-very-secret-Zq7";
    std::fs::write(
        &file,
        format!(
            "security.protocol=SASL_SSL\nssl.ca.location={}\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"{secret}\";\n",
            s.ca.display()
        ),
    )
    .unwrap();
    let run = |args: Vec<String>| {
        let mut c = crate::support::cli::command();
        c.args(&args).env("ONCEFLOW_LOG", "trace");
        c.output().expect("run onceflow")
    };
    let base = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["topics", "list", "-b", s.sasl_ssl.as_str()]
            .iter()
            .map(|x| x.to_string())
            .collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let file_arg = file.display().to_string();
    let cases = [
        base(&["-F", &file_arg]),
        base(&[
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            &format!("ssl.ca.location={}", s.ca.display()),
            "-X",
            "sasl.mechanism=SCRAM-SHA-512",
            "-X",
            "sasl.username=alice",
            "-X",
            &format!("sasl.password={secret}"),
        ]),
    ];
    for args in cases {
        let out = tokio::task::spawn_blocking(move || run(args))
            .await
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "a wrong password was accepted");
        assert!(all.contains("authentication to broker"), "{all}");
        assert!(!all.contains(secret), "the password shows:\n{all}");
        assert!(all.contains("DEBUG"), "no logs to check:\n{all}");
    }
    // The right password through a file works (the file is read, not just refused).
    std::fs::write(
        &file,
        format!(
            "security.protocol=SASL_SSL\nssl.ca.location={}\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"alice-secret\";\n",
            s.ca.display()
        ),
    )
    .unwrap();
    let args = base(&["-F", &file_arg]);
    let out = tokio::task::spawn_blocking(move || run(args))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("alice-secret"));
}

/// Produce traffic across re-authentications: an idempotent producer sends without pause
/// until its connection has re-authenticated twice (requests in flight while the writer
/// re-authenticates); every record is acknowledged and is in the log once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_sends_through_re_authentications_every_record_once_in_order() {
    let s = secured().await;
    let props = s.sasl_ssl_props("SCRAM-SHA-256", "alice", "alice-secret");
    let admin = Admin::new(client(&props)).await.unwrap();
    let topic = unique_topic("sec-reauth-produce");
    admin
        .create_topics(&[NewTopic::new(topic.clone(), 1)])
        .await
        .unwrap();
    let cluster = Cluster::connect(client(&props)).await.unwrap();
    let producer = Producer::with_cluster(
        ProducerConfig::from_properties(with(
            &props,
            &[("enable.idempotence", "true"), ("linger.ms", "2")],
        ))
        .unwrap(),
        cluster.clone(),
    )
    .await
    .unwrap();
    let node = *cluster.metadata().brokers.keys().next().unwrap();
    let mut acks = Vec::new();
    let mut sent = 0u64;
    let start = Instant::now();
    while cluster.broker(node).await.unwrap().reauthentications() < 2 {
        assert!(
            start.elapsed() < DEADLINE,
            "no two re-authentications within {DEADLINE:?}"
        );
        for _ in 0..200 {
            let r = ProducerRecord::new(&topic, sent.to_string());
            acks.push(producer.send(r).await.unwrap());
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    producer.flush().await.unwrap();
    for a in acks {
        a.await.expect("every record acknowledged");
    }
    let conn = cluster.broker(node).await.unwrap();
    assert!(!conn.is_poisoned(), "the connection was replaced");
    let mut consumer = onceflow::client::Consumer::new(
        ConsumerConfig::from_properties(with(&props, &[])).unwrap(),
    )
    .await
    .unwrap();
    let tp = TopicPartition::new(topic.clone(), 0);
    consumer.assign([tp.clone()]).await.unwrap();
    consumer
        .seek(&tp, onceflow::client::Offset::Beginning)
        .unwrap();
    let mut next = 0u64;
    while next < sent {
        assert!(start.elapsed() < DEADLINE * 2, "read {next} of {sent}");
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            let v: u64 = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
                .parse()
                .unwrap();
            assert_eq!(v, next, "out of order or duplicated at offset {}", r.offset);
            next += 1;
        }
    }
    admin.delete_topics(&[topic.as_str()]).await.unwrap();
}

/// An unsigned JWT for `subject` valid for `secs` from now (base64url of header and claims),
/// as a token file or command would hand out.
fn jwt(subject: &str, secs: u64) -> String {
    let url = |b: &[u8]| {
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = format!(r#"{{"sub":"{subject}","iat":{now},"exp":{}}}"#, now + secs);
    format!("{}.{}.", url(br#"{"alg":"none"}"#), url(claims.as_bytes()))
}

/// OAUTHBEARER tokens from a file (and from a command reading it) are read again at every
/// re-authentication: tokens that live 4 s, rewritten every second, keep one connection open
/// through three re-authentications. The broker ends a session when its token expires, so a
/// client that kept its first token is refused by the third: the inverse, a fixed
/// `sasl.oauthbearer.token` of 4 s, shows it (the connection fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_tokens_from_a_file_or_a_command_are_refreshed_at_re_authentication() {
    let s = secured().await;
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, jwt("alice", 4)).unwrap();
    let base = [
        ("bootstrap.servers", s.sasl_ssl.clone()),
        ("security.protocol", "SASL_SSL".to_owned()),
        ("ssl.ca.location", s.ca.display().to_string()),
        ("sasl.mechanism", "OAUTHBEARER".to_owned()),
    ];
    let sources = [
        (
            "sasl.oauthbearer.token.file",
            file.display().to_string(),
            true,
        ),
        (
            "sasl.oauthbearer.token.command",
            format!("cat '{}'", file.display()),
            true,
        ),
        // Made when its turn comes (below), so that it is fresh at the first authentication.
        ("sasl.oauthbearer.token", String::new(), false),
    ];
    for (key, value, refreshed) in sources {
        let mut props: Props = base
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let value = match refreshed {
            true => value,
            false => jwt("alice", 4),
        };
        props.push((key.to_owned(), value));
        let cluster = Cluster::connect(client(&props)).await.expect(key);
        let node = *cluster.metadata().brokers.keys().next().unwrap();
        let conn = cluster.broker(node).await.unwrap();
        let start = Instant::now();
        let mut last_write = Instant::now();
        let failed = loop {
            if conn.reauthentications() >= 3 {
                break false;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{key}: no three re-authentications"
            );
            if last_write.elapsed() > Duration::from_secs(1) {
                std::fs::write(&file, jwt("alice", 4)).unwrap();
                last_write = Instant::now();
            }
            if ping(&conn).await.is_err() || conn.is_poisoned() {
                break true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            failed,
            !refreshed,
            "{key}: after {} re-authentications in {:?}",
            conn.reauthentications(),
            start.elapsed()
        );
    }
}
