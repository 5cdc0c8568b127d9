//! Entry points for fuzzing the decoding of broker responses (broken and hostile brokers:
//! responses are untrusted bytes).
//!
//! Public but hidden from the docs: the fuzz crate (`fuzz/`, a separate Cargo workspace) can
//! only call public items, and the unit tests that replay its findings call the very same
//! function, so a finding is reproduced by `cargo test`, not only by a corpus file. Keeping the
//! API list and the version choice here, rather than in the fuzz target, also keeps them next to
//! the code that must stay in step with them; nothing in it is part of the client's API.

use crate::protocol::frame::decode_response;
use crate::protocol::records::{decode_batches, decode_entries};
use crate::protocol::{ApiVersions, ErrorCode};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, Request};

/// Every API whose response the client decodes, in the order the fuzz input's first byte picks
/// them (the index is part of the seed corpus' format: append, never reorder).
pub const RESPONSE_APIS: &[ApiKey] = &[
    ApiKey::Metadata,
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::FindCoordinator,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::OffsetFetch,
    ApiKey::DescribeTransactions,
    ApiKey::ApiVersions,
    ApiKey::AddOffsetsToTxn,
    ApiKey::LeaveGroup,
    ApiKey::OffsetCommit,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::ListTransactions,
    ApiKey::DescribeProducers,
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::DescribeConfigs,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
];

/// The fuzz target's entry (fuzz/fuzz_targets/decode_responses.rs) and the unit tests': byte 0
/// picks the API ([`RESPONSE_APIS`], modulo its length), byte 1 the version (modulo the size of
/// the range kafka-protocol supports, which holds every version the client can negotiate: it
/// takes the highest version both sides support, capped per request), and the rest is the
/// response frame after its length prefix (header and body), decoded exactly as a connection
/// does ([`decode_response`]). What the client then reads with pure functions follows:
/// a Fetch response's records through the record codecs (every entry, batch and record), an
/// ApiVersions response through version negotiation, error codes through [`ErrorCode`].
/// Nothing may panic, abort or allocate beyond what the input's size explains.
#[doc(hidden)]
pub fn fuzz_response(data: &[u8]) {
    let [api, version, rest @ ..] = data else {
        return;
    };
    let api = RESPONSE_APIS[usize::from(*api) % RESPONSE_APIS.len()];
    let range = api.valid_versions();
    let span = i32::from(range.max) - i32::from(range.min) + 1;
    // The span is at most i16's range, so the sum fits in an i16.
    let version = (i32::from(range.min) + i32::from(*version) % span) as i16;
    decode_and_inspect(api, version, Bytes::copy_from_slice(rest));
}

/// The fuzz input for `frame` (header and body) of `api` at `version`: the inverse of
/// [`fuzz_response`]'s input format, used for seeds and replayed findings. `None` when `api` is
/// not in [`RESPONSE_APIS`] or `version` outside the crate's range.
#[doc(hidden)]
pub fn fuzz_input(api: ApiKey, version: i16, frame: &[u8]) -> Option<Vec<u8>> {
    let index = RESPONSE_APIS.iter().position(|a| *a == api)?;
    let range = api.valid_versions();
    if version < range.min || version > range.max {
        return None;
    }
    let mut out = vec![
        u8::try_from(index).ok()?,
        u8::try_from(version - range.min).ok()?,
    ];
    out.extend_from_slice(frame);
    Some(out)
}

/// Long: one arm per API the client decodes; a table.
fn decode_and_inspect(api: ApiKey, version: i16, frame: Bytes) {
    fn check<R: Request>(frame: Bytes, version: i16) -> Option<R::Response> {
        decode_response::<R>(frame, version)
            .ok()
            .map(|(_, body)| body)
    }
    match api {
        ApiKey::Metadata => {
            if let Some(r) = check::<MetadataRequest>(frame, version) {
                for t in &r.topics {
                    let _ = ErrorCode::check(t.error_code);
                    for p in &t.partitions {
                        let _ = ErrorCode::check(p.error_code).map_err(ErrorCode::response_error);
                    }
                }
            }
        }
        ApiKey::Produce => {
            if let Some(r) = check::<ProduceRequest>(frame, version) {
                for t in &r.responses {
                    for p in &t.partition_responses {
                        let _ = ErrorCode::check(p.error_code).map_err(ErrorCode::response_error);
                    }
                }
            }
        }
        ApiKey::Fetch => {
            if let Some(r) = check::<FetchRequest>(frame, version) {
                for t in &r.responses {
                    for p in &t.partitions {
                        let _ = ErrorCode::check(p.error_code).map_err(ErrorCode::response_error);
                        if let Some(records) = &p.records {
                            read_records(records.clone());
                        }
                    }
                }
            }
        }
        ApiKey::ApiVersions => {
            if let Some(r) = check::<ApiVersionsRequest>(frame, version) {
                let table = ApiVersions::from_response(&r);
                for key in &r.api_keys {
                    let _ = table.version_for_key(key.api_key, None);
                    let _ = table.version_for_key(key.api_key, Some(key.min_version));
                    let _ = table.broker_range(key.api_key);
                }
                let _ = table.finalized_feature("transaction.version");
                let _ = table.finalized_epoch();
            }
        }
        ApiKey::ListOffsets => drop(check::<ListOffsetsRequest>(frame, version)),
        ApiKey::FindCoordinator => drop(check::<FindCoordinatorRequest>(frame, version)),
        ApiKey::InitProducerId => drop(check::<InitProducerIdRequest>(frame, version)),
        ApiKey::AddPartitionsToTxn => drop(check::<AddPartitionsToTxnRequest>(frame, version)),
        ApiKey::EndTxn => drop(check::<EndTxnRequest>(frame, version)),
        ApiKey::TxnOffsetCommit => drop(check::<TxnOffsetCommitRequest>(frame, version)),
        ApiKey::JoinGroup => drop(check::<JoinGroupRequest>(frame, version)),
        ApiKey::SyncGroup => drop(check::<SyncGroupRequest>(frame, version)),
        ApiKey::Heartbeat => drop(check::<HeartbeatRequest>(frame, version)),
        ApiKey::OffsetFetch => drop(check::<OffsetFetchRequest>(frame, version)),
        ApiKey::DescribeTransactions => drop(check::<DescribeTransactionsRequest>(frame, version)),
        ApiKey::AddOffsetsToTxn => drop(check::<AddOffsetsToTxnRequest>(frame, version)),
        ApiKey::LeaveGroup => drop(check::<LeaveGroupRequest>(frame, version)),
        ApiKey::OffsetCommit => drop(check::<OffsetCommitRequest>(frame, version)),
        ApiKey::ConsumerGroupHeartbeat => {
            drop(check::<ConsumerGroupHeartbeatRequest>(frame, version))
        }
        ApiKey::ConsumerGroupDescribe => {
            drop(check::<ConsumerGroupDescribeRequest>(frame, version))
        }
        ApiKey::ListTransactions => drop(check::<ListTransactionsRequest>(frame, version)),
        ApiKey::DescribeProducers => drop(check::<DescribeProducersRequest>(frame, version)),
        ApiKey::DescribeGroups => drop(check::<DescribeGroupsRequest>(frame, version)),
        ApiKey::ListGroups => drop(check::<ListGroupsRequest>(frame, version)),
        ApiKey::CreateTopics => drop(check::<CreateTopicsRequest>(frame, version)),
        ApiKey::DeleteTopics => drop(check::<DeleteTopicsRequest>(frame, version)),
        ApiKey::CreatePartitions => drop(check::<CreatePartitionsRequest>(frame, version)),
        ApiKey::DescribeConfigs => drop(check::<DescribeConfigsRequest>(frame, version)),
        ApiKey::SaslHandshake => drop(check::<SaslHandshakeRequest>(frame, version)),
        ApiKey::SaslAuthenticate => drop(check::<SaslAuthenticateRequest>(frame, version)),
        _ => {}
    }
}

/// A Fetch partition's records, read the ways the consumer reads them: any format (v0/v1
/// messages included), then v2 batches, every record and control record.
fn read_records(records: Bytes) {
    for entry in decode_entries(records.clone()) {
        let Ok(entry) = entry else { continue };
        let _ = entry.next_offset();
        if let Ok(iter) = entry.record_iter() {
            iter.for_each(drop);
        }
    }
    for batch in decode_batches(records) {
        let Ok(batch) = batch else { continue };
        let _ = batch.next_offset();
        let _ = batch.control_record();
        if let Ok(iter) = batch.record_iter() {
            iter.for_each(drop);
        }
    }
}

/// Small valid responses, one per API and version of [`RESPONSE_APIS`], as fuzz inputs: the
/// seed corpus (`fuzz/seeds/decode_responses/`, written by the ignored unit test
/// `write_fuzz_seeds`) and the unit tests' starting points for mutation.
#[doc(hidden)]
pub fn seed_inputs() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for &api in RESPONSE_APIS {
        let range = api.valid_versions();
        for version in range.min..=range.max {
            if let Some(frame) = sample_frame(api, version) {
                if let Some(input) = fuzz_input(api, version, &frame) {
                    out.push(input);
                }
            }
        }
    }
    out
}

/// A response frame (header with correlation id 1, body) for `api` at `version`: a few
/// elements in the responses that carry lists, defaults elsewhere.
///
/// Long: one arm per API the client decodes, each a sample response body; a table.
fn sample_frame(api: ApiKey, version: i16) -> Option<Vec<u8>> {
    fn encode<B: Encodable>(api: ApiKey, version: i16, body: &B) -> Option<Vec<u8>> {
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(1)
            .encode(&mut out, api.response_header_version(version))
            .ok()?;
        body.encode(&mut out, version).ok()?;
        Some(out.to_vec())
    }
    use kafka_protocol::protocol::StrBytes;
    let name = || TopicName(StrBytes::from_static_str("t"));
    match api {
        ApiKey::Metadata => encode(
            api,
            version,
            &MetadataResponse::default()
                .with_brokers(vec![metadata_response::MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("h"))
                    .with_port(9092)])
                .with_topics(vec![metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(name()))
                    .with_partitions(vec![
                        metadata_response::MetadataResponsePartition::default()
                            .with_leader_id(BrokerId(1))
                            .with_replica_nodes(vec![BrokerId(1)])
                            .with_isr_nodes(vec![BrokerId(1)]),
                    ])]),
        ),
        ApiKey::Fetch => {
            let mut batch = crate::protocol::records::BatchBuilder::new(
                crate::protocol::records::Compression::None,
            );
            let header = crate::protocol::records::Header {
                key: Bytes::from_static(b"h"),
                value: Some(Bytes::from_static(b"v")),
            };
            batch.try_append(1, Some(b"k"), Some(b"value"), &[header], 1 << 20);
            let records = batch
                .finish(crate::protocol::records::ProducerFields::NONE)
                .ok()?;
            encode(
                api,
                version,
                &FetchResponse::default().with_responses(vec![
                    fetch_response::FetchableTopicResponse::default()
                        .with_topic(name())
                        .with_partitions(vec![fetch_response::PartitionData::default()
                            .with_high_watermark(1)
                            .with_records(Some(records))]),
                ]),
            )
        }
        ApiKey::ApiVersions => encode(
            api,
            version,
            &ApiVersionsResponse::default().with_api_keys(vec![
                api_versions_response::ApiVersion::default()
                    .with_api_key(0)
                    .with_min_version(3)
                    .with_max_version(12),
                api_versions_response::ApiVersion::default()
                    .with_api_key(1)
                    .with_min_version(4)
                    .with_max_version(17),
            ]),
        ),
        ApiKey::Produce => encode(
            api,
            version,
            &ProduceResponse::default().with_responses(vec![
                produce_response::TopicProduceResponse::default()
                    .with_name(name())
                    .with_partition_responses(vec![
                        produce_response::PartitionProduceResponse::default().with_base_offset(5),
                    ]),
            ]),
        ),
        ApiKey::ListOffsets => encode(api, version, &ListOffsetsResponse::default()),
        ApiKey::FindCoordinator => encode(api, version, &FindCoordinatorResponse::default()),
        ApiKey::InitProducerId => encode(api, version, &InitProducerIdResponse::default()),
        ApiKey::AddPartitionsToTxn => encode(api, version, &AddPartitionsToTxnResponse::default()),
        ApiKey::EndTxn => encode(api, version, &EndTxnResponse::default()),
        ApiKey::TxnOffsetCommit => encode(api, version, &TxnOffsetCommitResponse::default()),
        ApiKey::JoinGroup => encode(api, version, &JoinGroupResponse::default()),
        ApiKey::SyncGroup => encode(api, version, &SyncGroupResponse::default()),
        ApiKey::Heartbeat => encode(api, version, &HeartbeatResponse::default()),
        ApiKey::OffsetFetch => encode(api, version, &OffsetFetchResponse::default()),
        ApiKey::DescribeTransactions => {
            encode(api, version, &DescribeTransactionsResponse::default())
        }
        ApiKey::AddOffsetsToTxn => encode(api, version, &AddOffsetsToTxnResponse::default()),
        ApiKey::LeaveGroup => encode(api, version, &LeaveGroupResponse::default()),
        ApiKey::OffsetCommit => encode(api, version, &OffsetCommitResponse::default()),
        ApiKey::ConsumerGroupHeartbeat => {
            encode(api, version, &ConsumerGroupHeartbeatResponse::default())
        }
        ApiKey::ConsumerGroupDescribe => {
            encode(api, version, &ConsumerGroupDescribeResponse::default())
        }
        ApiKey::ListTransactions => encode(api, version, &ListTransactionsResponse::default()),
        ApiKey::DescribeProducers => encode(api, version, &DescribeProducersResponse::default()),
        ApiKey::DescribeGroups => encode(api, version, &DescribeGroupsResponse::default()),
        ApiKey::ListGroups => encode(api, version, &ListGroupsResponse::default()),
        ApiKey::CreateTopics => encode(api, version, &CreateTopicsResponse::default()),
        ApiKey::DeleteTopics => encode(api, version, &DeleteTopicsResponse::default()),
        ApiKey::CreatePartitions => encode(api, version, &CreatePartitionsResponse::default()),
        ApiKey::DescribeConfigs => encode(api, version, &DescribeConfigsResponse::default()),
        ApiKey::SaslHandshake => encode(api, version, &SaslHandshakeResponse::default()),
        ApiKey::SaslAuthenticate => encode(api, version, &SaslAuthenticateResponse::default()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed decodes at its own API and version (the seeds are valid, so the fuzzer starts
    /// from inputs that reach deep into each decoder) and every API has at least one.
    #[test]
    fn seeds_are_valid_responses() {
        let seeds = seed_inputs();
        for (index, &api) in RESPONSE_APIS.iter().enumerate() {
            let range = api.valid_versions();
            let n = seeds.iter().filter(|s| usize::from(s[0]) == index).count();
            assert_eq!(n, (range.max - range.min + 1) as usize, "{api:?}");
        }
        for s in &seeds {
            fuzz_response(s);
        }
        let fetch = seeds
            .iter()
            .find(|s| RESPONSE_APIS[usize::from(s[0])] == ApiKey::Fetch)
            .expect("a Fetch seed");
        let version = ApiKey::Fetch.valid_versions().min + i16::from(fetch[1]);
        let (_, r) = decode_response::<FetchRequest>(Bytes::copy_from_slice(&fetch[2..]), version)
            .expect("the Fetch seed decodes");
        let records = r.responses[0].partitions[0]
            .records
            .clone()
            .expect("records");
        let batch = decode_batches(records)
            .next()
            .expect("a batch")
            .expect("valid");
        assert_eq!(batch.records().expect("records").len(), 1);
    }

    /// The fuzz target's input at random (a fixed seed: the same inputs every run): random
    /// bytes, and the seeds with random bytes overwritten, truncated or extended. Nothing
    /// panics or aborts. `scripts/fuzz` goes further.
    #[test]
    fn random_and_mutated_responses_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x16);
        for _ in 0..5_000 {
            let len = rng.random_range(0..120);
            let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            fuzz_response(&data);
        }
        let seeds = seed_inputs();
        for _ in 0..20 {
            for seed in &seeds {
                let mut data = seed.clone();
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(2..data.len().max(3));
                    if i < data.len() {
                        data[i] = rng.random();
                    }
                }
                match rng.random_range(0..4) {
                    0 => data.truncate(rng.random_range(2..data.len().max(3))),
                    1 => data.extend((0..rng.random_range(1..8)).map(|_| rng.random::<u8>())),
                    _ => {}
                }
                fuzz_response(&data);
            }
        }
    }

    /// What `decode_responses` found within seconds when built against the unguarded
    /// kafka-protocol 0.18.0: ListGroups v0, a 10-byte frame (correlation id, error code) whose
    /// groups array declares 65536 elements; the decoder asked for 2.5 GB before reading one.
    /// With the vendored guard it is a decode error.
    #[test]
    fn fuzz_finding_list_groups_declaring_65536_groups_is_an_error() {
        let input = [0x17, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0];
        assert_eq!(RESPONSE_APIS[0x17], ApiKey::ListGroups);
        fuzz_response(&input);
        let frame = Bytes::copy_from_slice(&input[2..]);
        assert!(decode_response::<ListGroupsRequest>(frame, 0).is_err());
    }

    /// Writes the seed corpus: `ONCEFLOW_FUZZ_SEEDS=fuzz/seeds/decode_responses cargo test
    /// --lib write_fuzz_seeds -- --ignored` (run again after adding an API).
    #[test]
    #[ignore = "writes files; run by hand to refresh fuzz/seeds/decode_responses"]
    fn write_fuzz_seeds() {
        let dir = std::env::var("ONCEFLOW_FUZZ_SEEDS").expect("ONCEFLOW_FUZZ_SEEDS=<dir>");
        std::fs::create_dir_all(&dir).expect("create the seed directory");
        for seed in seed_inputs() {
            let api = RESPONSE_APIS[usize::from(seed[0])];
            let version = api.valid_versions().min + i16::from(seed[1]);
            let path = format!("{dir}/{api:?}-v{version}");
            std::fs::write(&path, &seed).expect("write a seed");
        }
    }
}
