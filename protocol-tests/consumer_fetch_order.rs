//! Fetch fairness: a partition whose next batch does not fit what is left of fetch.max.bytes
//! must still progress while another partition of the same leader always has data.

use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Consumer, Offset, ProducerRecord};
use std::time::{Duration, Instant};

/// The broker fills partitions in the order of the request, up to fetch.max.bytes, and only the
/// first partition that has data is given a batch larger than what is left. With partition 0
/// listed first in every request and always holding data, partition 1's batch (larger than
/// fetch.max.bytes) was only ever served once partition 0 ran dry. The consumer now moves a
/// partition to the end of the order once its data is handed over, so partition 1 is first in
/// the very next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_with_a_large_batch_is_served_while_another_always_has_data() {
    let topic = TestTopic::create("fetch-order", 2).await;
    let p = producer(&[("linger.ms", "5")]).await;
    // Partition 1: one record larger than fetch.max.bytes below.
    let big = p
        .send(
            ProducerRecord::new(topic.name.clone(), Bytes::from(vec![b'b'; 4_000]))
                .with_partition(1),
        )
        .await
        .unwrap();
    big.await.expect("partition 1's record delivered");
    // Partition 0: a backlog far longer than the bound asserted below, so before the fix partition
    // 1 could not be served within it.
    let backlog = 2_000usize;
    let mut fs = Vec::with_capacity(backlog);
    for i in 0..backlog {
        let r = ProducerRecord::new(topic.name.clone(), Bytes::from(vec![b'a'; 800]))
            .with_key(Bytes::from(i.to_string()))
            .with_partition(0);
        fs.push(p.send(r).await.unwrap());
    }
    for f in fs {
        f.await.expect("partition 0's record delivered");
    }

    let mut c = Consumer::new(consumer_config(
        &broker(),
        &[
            ("fetch.max.bytes", "1024"),
            ("max.partition.fetch.bytes", "1024"),
        ],
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.unwrap();
    for tp in topic.tps() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    // Bound: partition 1's record arrives before 10% of partition 0's backlog has been read.
    let bound = backlog / 10;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut p0_before = 0usize;
    let mut polls = 0usize;
    'outer: loop {
        assert!(
            Instant::now() < deadline,
            "partition 1's record did not arrive within 60 s ({p0_before} records of partition 0 and {polls} polls)"
        );
        polls += 1;
        for r in c.poll(Duration::from_secs(1)).await.expect("poll") {
            if r.partition == 1 {
                assert_eq!(r.offset, 0);
                assert_eq!(r.value.as_deref().map(<[u8]>::len), Some(4_000));
                break 'outer;
            }
            p0_before += 1;
            assert!(
                p0_before <= bound,
                "partition 1 starved: {p0_before} records of partition 0 (of a {backlog} backlog) \
                 arrived in {polls} polls before partition 1's only record"
            );
        }
    }
    eprintln!("partition 1 served after {p0_before} records of partition 0, {polls} polls");
}
