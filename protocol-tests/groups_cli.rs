//! `onceflow groups list|describe` against the real broker: a classic group of two onceflow
//! members, a KIP-848 consumer-protocol group of a Java consumer, and a group that does not
//! exist.

use crate::support::cli::{assert_one_line_error, onceflow_async, shown, stdout, Guarded};
use crate::support::group::*;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{ProducerRecord, TopicPartition};
use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Generous: the machine running the tests may be heavily loaded.
const LONG: u64 = 120;
/// Bound on the CLI's own calls.
const API_TIMEOUT: &str = "default.api.timeout.ms=60000";

/// Runs `onceflow groups ARGS -b BROKER`, off the runtime.
async fn groups(args: &[&str]) -> Output {
    let mut argv: Vec<String> = vec!["groups".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    argv.extend(["-b".into(), broker(), "-X".into(), API_TIMEOUT.into()]);
    onceflow_async(argv, "").await
}

/// One row of the partition table of `groups describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    committed: String,
    log_end: String,
    lag: String,
    member: String,
    client: String,
}

/// The partition rows of `topic` in a `groups describe` output, by partition.
fn rows(out: &str, topic: &str) -> BTreeMap<i32, Row> {
    out.lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            if c.len() != 8 || c[0] != topic {
                return None;
            }
            Some((
                c[1].parse().ok()?,
                Row {
                    committed: c[2].into(),
                    log_end: c[3].into(),
                    lag: c[4].into(),
                    member: c[5].into(),
                    client: c[7].into(),
                },
            ))
        })
        .collect()
}

/// The `groups list` line of `group`, split into its columns.
fn listed(out: &str, group: &str) -> Option<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|c| c.first().map(String::as_str) == Some(group))
}

/// `groups describe -G group --members` until its output satisfies `done`; returns it.
async fn describe_until(group: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(LONG);
    loop {
        let o = groups(&["describe", "-G", group, "--members"]).await;
        assert!(o.status.success(), "{}", shown(&o));
        let out = stdout(&o);
        if done(&out) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "waited {LONG}s for `groups describe` to show {what}; last output:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Appends `n` records to every partition of `topic`.
async fn append(topic: &TestTopic, n: usize) {
    let p = producer(&[]).await;
    for part in 0..topic.partitions {
        for i in 0..n {
            p.send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(format!("more-{i}")))
                    .with_partition(part),
            )
            .await
            .unwrap();
        }
    }
    p.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_each_classic_members_partitions_and_the_exact_lag() {
    let topic = TestTopic::create("groups-cli-classic", 4).await;
    fill(&topic, 10).await;
    let group = unique_topic("groups-cli-classic");
    let mut a = member(&group, &[("client.id", "member-a")]).await;
    a.subscribe(&[topic.name.as_str()]);
    let a = run(a);
    wait_for(LONG, "the first member owns all 4 partitions", || {
        a.check();
        a.assignment().len() == 4
    })
    .await;
    let mut b = member(&group, &[("client.id", "member-b")]).await;
    b.subscribe(&[topic.name.as_str()]);
    let b = run(b);
    wait_for(LONG, "the two members split the 4 partitions", || {
        a.check();
        b.check();
        disjoint_cover(&a.assignment(), &b.assignment(), 4)
    })
    .await;
    // Each member commits its own partitions at offset partition+2 (of 10 records).
    let (mut ma, _) = a.stop().await;
    let (mut mb, _) = b.stop().await;
    let mut owner: BTreeMap<i32, (String, &str)> = BTreeMap::new();
    for (m, client) in [(&mut ma, "member-a"), (&mut mb, "member-b")] {
        let mine = m.assignment();
        let offsets: Vec<(TopicPartition, i64)> = mine
            .iter()
            .map(|tp| (tp.clone(), i64::from(tp.partition) + 2))
            .collect();
        m.commit(&offsets).await.expect("commit");
        for tp in &mine {
            owner.insert(tp.partition, (m.group_metadata().member_id, client));
        }
    }
    // Keep both members polling (and so in the group) while the CLI looks; they commit nothing
    // more.
    let (a, b) = (run(ma), run(mb));
    append(&topic, 5).await; // log end 15 everywhere
    let want: BTreeMap<i32, Row> = (0..4)
        .map(|p| {
            let (member, client) = owner[&p].clone();
            let committed = i64::from(p) + 2;
            (
                p,
                Row {
                    committed: committed.to_string(),
                    log_end: "15".into(),
                    lag: (15 - committed).to_string(),
                    member,
                    client: client.into(),
                },
            )
        })
        .collect();
    let out = describe_until(&group, "both members and lag 13..10", |out| {
        rows(out, &topic.name) == want
    })
    .await;
    a.check();
    b.check();
    let head = out.lines().next().unwrap_or_default();
    assert!(
        head.contains("type classic") && head.contains("state Stable"),
        "{out}"
    );
    assert!(head.contains("protocol consumer/range"), "{out}");
    // --members: each member with its two partitions.
    for (member, client) in owner.values() {
        let line = out
            .lines()
            .find(|l| l.starts_with(member.as_str()) && l.contains(client))
            .unwrap_or_else(|| panic!("no members line for {member}:\n{out}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.get(4), Some(&"2"), "{line}");
    }

    let o = groups(&["list"]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let line = listed(&stdout(&o), &group)
        .unwrap_or_else(|| panic!("{group} not listed:\n{}", stdout(&o)));
    assert_eq!(line[1..4], ["classic", "consumer", "Stable"], "{line:?}");

    let (ma, _) = a.stop().await;
    let (mb, _) = b.stop().await;
    let _ = ma.close().await;
    let _ = mb.close().await;
}

/// Runs protocol-tests/java/interop.sh ARGS as a child, killed on drop.
fn java_child(args: &[&str]) -> Guarded {
    let script = repo().join("protocol-tests/java/interop.sh");
    Guarded(
        Command::new("bash")
            .arg(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run interop.sh"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_list_show_a_java_consumer_protocol_group_with_its_member_and_lag() {
    let topic = TestTopic::create("groups-cli-848", 2).await;
    fill(&topic, 10).await;
    let group = unique_topic("groups-cli-848");
    let dir = tempfile::tempdir().unwrap();
    let read = dir.path().join("read.jsonl");
    let bootstrap = broker();
    // A Java consumer on the KIP-848 protocol reads the 20 records and commits 10 per
    // partition, then leaves.
    crate::support::java::java(
        "consume",
        &topic.name,
        &[
            "--output",
            read.to_str().unwrap(),
            "--expect",
            "20",
            "--group",
            &group,
            "--prop",
            "group.protocol=consumer",
        ],
    )
    .await;
    append(&topic, 3).await; // log end 13: lag 3 per partition
    let stop = dir.path().join("stop");
    let output = dir.path().join("member.jsonl");
    // A live member of the group (it commits only when stopped).
    let mut member = java_child(&[
        "group-member",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic.name,
        "--group",
        &group,
        "--duration-ms",
        "300000",
        "--stop-file",
        stop.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--prop",
        "group.protocol=consumer",
    ]);
    let out = describe_until(&group, "the Java member owning both partitions", |out| {
        let r = rows(out, &topic.name);
        r.len() == 2
            && r.values().all(|row| {
                row.committed == "10"
                    && row.log_end == "13"
                    && row.lag == "3"
                    && row.client == "onceflow-interop-member"
            })
            && r[&0].member == r[&1].member
    })
    .await;
    let head = out.lines().next().unwrap_or_default();
    assert!(
        head.contains("type consumer") && head.contains("state Stable"),
        "{out}"
    );
    let member_id = rows(&out, &topic.name)[&0].member.clone();
    let line = out
        .lines()
        .find(|l| l.starts_with(member_id.as_str()) && l.contains("onceflow-interop-member"))
        .unwrap_or_else(|| panic!("no members line for {member_id}:\n{out}"));
    assert!(
        line.contains(&format!("{}-0,{}-1", topic.name, topic.name)),
        "{line}"
    );

    let o = groups(&["list"]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let line = listed(&stdout(&o), &group)
        .unwrap_or_else(|| panic!("{group} not listed:\n{}", stdout(&o)));
    assert_eq!(line[1..4], ["consumer", "consumer", "Stable"], "{line:?}");
    // The type filter keeps it under its own type only.
    for (ty, shown_there) in [("consumer", true), ("classic", false)] {
        let o = groups(&["list", "--type", ty]).await;
        assert!(o.status.success(), "{}", shown(&o));
        assert_eq!(
            listed(&stdout(&o), &group).is_some(),
            shown_there,
            "--type {ty}:\n{}",
            stdout(&o)
        );
    }

    std::fs::write(&stop, b"").unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = member.0.wait();
        (status, member)
    })
    .await
    .unwrap()
    .0
    .expect("wait for the Java member");
    assert!(status.success(), "the Java member failed: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describing_a_group_that_does_not_exist_fails_with_one_line_naming_it() {
    let group = unique_topic("groups-cli-missing");
    let o = groups(&["describe", "-G", &group]).await;
    assert_one_line_error(
        &o,
        &format!("no group '{group}' on the cluster; `onceflow groups list` shows the groups"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    let o = groups(&["describe"]).await;
    assert_one_line_error(&o, "-G GROUP");
}
