//! The consumer protocol's bytes inside JoinGroup and SyncGroup: a member's subscription (the
//! metadata of each protocol it announces) and the assignment the leader hands each member.
//! Both are a big-endian i16 version followed by the message at that version, as the Java
//! client's `ConsumerProtocol` writes them; Java and onceflow members share groups, so each
//! must read what the other writes.

use super::assignor::MemberSubscription;
use crate::client::error::{Error, Result};
use crate::client::metadata::{by_topic, TopicPartition};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as WireAssignedTp;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as WireOwnedTp;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The subscription version onceflow writes: v2 carries the owned partitions (cooperative
/// protocol) and their generation; v3 adds only the rack, which onceflow does not send.
const SUBSCRIPTION_VERSION: i16 = 2;
/// The assignment version onceflow writes (v1+ add no fields).
const ASSIGNMENT_VERSION: i16 = 1;
/// The highest version of either message this code knows. A newer version only adds fields
/// (the consumer protocol's compatibility rule), so its bytes are read at this version.
const HIGHEST_KNOWN_VERSION: i16 = 3;

fn encode_versioned<T: Encodable>(msg: &T, version: i16) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version)
        .map_err(|e| Error::Internal(format!("encoding group metadata: {e}")))?;
    Ok(buf.freeze())
}

fn decode_versioned<T: Decodable>(mut bytes: Bytes, what: &str) -> Result<T> {
    if bytes.len() < 2 {
        return Err(Error::Protocol(format!("{what}: too short")));
    }
    // Newer versions only add fields; decode at the highest version we know.
    let version = bytes.get_i16().clamp(0, HIGHEST_KNOWN_VERSION);
    T::decode(&mut bytes, version).map_err(|e| Error::Protocol(format!("{what}: {e}")))
}

/// This member's subscription, as JoinGroup announces it for every strategy.
pub(crate) fn encode_subscription(
    topics: &[String],
    owned: &[TopicPartition],
    generation: i32,
) -> Result<Bytes> {
    let sub = ConsumerProtocolSubscription::default()
        .with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_owned_partitions(
            by_topic(owned)
                .into_iter()
                .map(|(t, ps)| {
                    WireOwnedTp::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        )
        .with_generation_id(generation);
    encode_versioned(&sub, SUBSCRIPTION_VERSION)
}

/// A member's subscription as the JoinGroup answer gives it to the leader.
pub(crate) fn decode_subscription(
    member_id: String,
    instance_id: Option<String>,
    bytes: Bytes,
) -> Result<MemberSubscription> {
    let s: ConsumerProtocolSubscription = decode_versioned(bytes, "member subscription")?;
    Ok(MemberSubscription {
        member_id,
        instance_id,
        topics: s.topics.iter().map(|t| t.to_string()).collect(),
        owned: s
            .owned_partitions
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| TopicPartition::new(t.topic.0.to_string(), *p))
            })
            .collect(),
        generation: s.generation_id,
    })
}

/// The partitions the leader assigns one member, as SyncGroup carries them.
pub(crate) fn encode_assignment(tps: &[TopicPartition]) -> Result<Bytes> {
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
        by_topic(tps)
            .into_iter()
            .map(|(t, ps)| {
                WireAssignedTp::default()
                    .with_topic(TopicName(StrBytes::from_string(t.to_owned())))
                    .with_partitions(ps)
            })
            .collect(),
    );
    encode_versioned(&a, ASSIGNMENT_VERSION)
}

/// This member's partitions from the SyncGroup answer; empty bytes (the leader assigned this
/// member nothing, or the group has no leader's assignment for it) mean none.
pub(crate) fn decode_assignment(bytes: Bytes) -> Result<Vec<TopicPartition>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let a: ConsumerProtocolAssignment = decode_versioned(bytes, "assignment")?;
    Ok(a.assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| TopicPartition::new(t.topic.0.to_string(), *p))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    /// Writers for the consumer protocol's documented layout (Kafka's
    /// ConsumerProtocolSubscription.json / ConsumerProtocolAssignment.json): big-endian, a
    /// string is an i16 length and UTF-8, an array an i32 count, nullable bytes an i32 length
    /// (-1: null), a nullable string an i16 length (-1: null).
    fn string(b: &mut BytesMut, s: &str) {
        b.put_i16(s.len() as i16);
        b.put_slice(s.as_bytes());
    }

    fn topic_partitions(b: &mut BytesMut, tps: &[(&str, &[i32])]) {
        b.put_i32(tps.len() as i32);
        for (t, ps) in tps {
            string(b, t);
            b.put_i32(ps.len() as i32);
            for p in *ps {
                b.put_i32(*p);
            }
        }
    }

    /// A subscription as the Java client writes it at `version`.
    fn java_subscription(
        version: i16,
        topics: &[&str],
        user_data: Option<&[u8]>,
        owned: &[(&str, &[i32])],
        generation: i32,
        rack: Option<&str>,
    ) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(version);
        b.put_i32(topics.len() as i32);
        for t in topics {
            string(&mut b, t);
        }
        match user_data {
            Some(d) => {
                b.put_i32(d.len() as i32);
                b.put_slice(d);
            }
            None => b.put_i32(-1),
        }
        if version >= 1 {
            topic_partitions(&mut b, owned);
        }
        if version >= 2 {
            b.put_i32(generation);
        }
        if version >= 3 {
            match rack {
                Some(r) => string(&mut b, r),
                None => b.put_i16(-1),
            }
        }
        b.freeze()
    }

    /// An assignment as the Java client writes it at `version` (the layout is the same at 0..3).
    fn java_assignment(
        version: i16,
        assigned: &[(&str, &[i32])],
        user_data: Option<&[u8]>,
    ) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(version);
        topic_partitions(&mut b, assigned);
        match user_data {
            Some(d) => {
                b.put_i32(d.len() as i32);
                b.put_slice(d);
            }
            None => b.put_i32(-1),
        }
        b.freeze()
    }

    fn decoded(bytes: Bytes) -> MemberSubscription {
        match decode_subscription("m-1".into(), Some("i-1".into()), bytes) {
            Ok(s) => s,
            Err(e) => panic!("decoding a subscription: {e}"),
        }
    }

    #[test]
    fn a_subscription_round_trips() {
        let topics = vec!["rides".to_string(), "fares".to_string()];
        let owned = vec![tp("rides", 2), tp("fares", 0), tp("rides", 0)];
        let bytes = match encode_subscription(&topics, &owned, 7) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        let s = decoded(bytes);
        assert_eq!(s.member_id, "m-1");
        assert_eq!(s.instance_id.as_deref(), Some("i-1"));
        assert_eq!(s.topics, topics);
        // Grouped by topic, topics sorted, partitions in the order owned.
        assert_eq!(
            s.owned,
            vec![tp("fares", 0), tp("rides", 2), tp("rides", 0)]
        );
        assert_eq!(s.generation, 7);
    }

    #[test]
    fn a_subscription_is_written_at_version_2() {
        let bytes = match encode_subscription(&["t".to_string()], &[tp("t", 1)], 4) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        let want = java_subscription(2, &["t"], None, &[("t", &[1])], 4, None);
        assert_eq!(bytes, want);
    }

    #[test]
    fn subscriptions_as_java_writes_them_decode_at_every_version() {
        let owned: &[(&str, &[i32])] = &[("a", &[0, 3]), ("b", &[1])];
        let owned_tps = vec![tp("a", 0), tp("a", 3), tp("b", 1)];
        // (version, owned partitions, generation) as each version carries them: v0 has neither
        // (the generation defaults to -1), v1 no generation, v2 both, v3 adds the rack.
        let table: &[(i16, Vec<TopicPartition>, i32)] = &[
            (0, vec![], -1),
            (1, owned_tps.clone(), -1),
            (2, owned_tps.clone(), 5),
            (3, owned_tps.clone(), 5),
        ];
        for (version, want_owned, want_generation) in table {
            let bytes = java_subscription(
                *version,
                &["a", "b"],
                Some(b"user"),
                owned,
                5,
                Some("rack-1"),
            );
            let s = decoded(bytes);
            assert_eq!(s.topics, vec!["a", "b"], "v{version}");
            assert_eq!(&s.owned, want_owned, "v{version}");
            assert_eq!(s.generation, *want_generation, "v{version}");
        }
        // A null rack at v3, and a version newer than this code knows (read as v3).
        for version in [3, 4] {
            let s = decoded(java_subscription(version, &["a"], None, owned, 9, None));
            assert_eq!(s.owned, owned_tps, "v{version}");
            assert_eq!(s.generation, 9, "v{version}");
        }
    }

    #[test]
    fn a_truncated_subscription_is_an_error() {
        let bytes = java_subscription(2, &["a"], None, &[("a", &[0])], 1, None);
        for len in [0, 1, bytes.len() - 1] {
            assert!(
                decode_subscription("m".into(), None, bytes.slice(..len)).is_err(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn an_assignment_round_trips() {
        let tps = vec![tp("b", 1), tp("a", 0), tp("b", 0)];
        let bytes = match encode_assignment(&tps) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            bytes,
            java_assignment(1, &[("a", &[0]), ("b", &[1, 0])], None)
        );
        match decode_assignment(bytes) {
            Ok(got) => assert_eq!(got, vec![tp("a", 0), tp("b", 1), tp("b", 0)]),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn assignments_as_java_writes_them_decode_at_every_version() {
        for version in 0..=4 {
            let bytes = java_assignment(version, &[("x", &[2, 0]), ("y", &[1])], Some(b"ud"));
            match decode_assignment(bytes) {
                Ok(got) => assert_eq!(got, vec![tp("x", 2), tp("x", 0), tp("y", 1)], "v{version}"),
                Err(e) => panic!("v{version}: {e}"),
            }
        }
    }

    #[test]
    fn an_empty_assignment_is_no_partitions() {
        match decode_assignment(Bytes::new()) {
            Ok(got) => assert!(got.is_empty()),
            Err(e) => panic!("{e}"),
        }
        assert!(decode_assignment(Bytes::from_static(&[0])).is_err());
    }
}
