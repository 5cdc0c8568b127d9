//! [`Connection`] over an in-memory duplex, against a tiny fake broker that reads request frames
//! and writes response frames crafted with kafka-protocol types.

use super::*;
use bytes::BufMut;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, MetadataRequest, ProduceRequest, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::DuplexStream;

const BROKER: &str = "fake:9092";
/// Generous: no test waits for it unless something is broken.
const LONG: Duration = Duration::from_secs(60);

/// The broker side of the duplex.
struct FakeBroker {
    io: DuplexStream,
}

impl FakeBroker {
    /// Reads one request frame; returns its header.
    async fn read_request(&mut self) -> RequestHeader {
        let len = self.io.read_i32().await.expect("request length") as usize;
        let mut body = vec![0u8; len];
        self.io.read_exact(&mut body).await.expect("request body");
        let mut body = Bytes::from(body);
        let key = ApiKey::try_from(i16::from_be_bytes([body[0], body[1]])).expect("api key");
        let version = i16::from_be_bytes([body[2], body[3]]);
        RequestHeader::decode(&mut body, key.request_header_version(version)).expect("header")
    }

    /// Writes an ApiVersions response frame (header v0 at every version).
    async fn respond(&mut self, correlation_id: i32, version: i16, body: &ApiVersionsResponse) {
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(
                &mut buf,
                ApiKey::ApiVersions.response_header_version(version),
            )
            .expect("encode header");
        body.encode(&mut buf, version).expect("encode body");
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        self.io.write_all(&buf).await.expect("write response");
    }

    /// Answers `correlation_id` with a response whose throttle_time_ms marks whom it is for.
    async fn respond_marked(&mut self, correlation_id: i32, marker: i32) {
        let body = ApiVersionsResponse::default().with_throttle_time_ms(marker);
        self.respond(correlation_id, 3, &body).await;
    }

    /// Answers the ApiVersions v3 request every connection starts with.
    async fn handshake(&mut self, resp: &ApiVersionsResponse) {
        let header = self.read_request().await;
        assert_eq!(header.request_api_key, ApiKey::ApiVersions as i16);
        assert_eq!(header.request_api_version, 3);
        self.respond(header.correlation_id, 3, resp).await;
    }
}

fn range(key: ApiKey, min: i16, max: i16) -> ApiVersion {
    ApiVersion::default()
        .with_api_key(key as i16)
        .with_min_version(min)
        .with_max_version(max)
}

/// A connection over a duplex whose other end `FakeBroker` answered the handshake with `resp`.
async fn connect_with(
    resp: ApiVersionsResponse,
    request_timeout: Duration,
) -> (Connection, FakeBroker) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut broker = FakeBroker { io: server };
    let (conn, ()) = tokio::join!(
        Connection::over(client, BROKER, "test", request_timeout),
        broker.handshake(&resp)
    );
    (conn.expect("handshake"), broker)
}

async fn connect() -> (Connection, FakeBroker) {
    let resp = ApiVersionsResponse::default().with_api_keys(vec![range(ApiKey::ApiVersions, 0, 3)]);
    connect_with(resp, LONG).await
}

fn start(conn: &Connection) -> PendingResponse<ApiVersionsRequest> {
    conn.start_request(&ApiVersionsRequest::default(), 3)
        .expect("start request")
}

/// The ConnectionClosed reason of `result`, or a panic naming what came instead.
fn closed_reason<T: std::fmt::Debug>(result: Result<T>) -> String {
    match result {
        Err(Error::ConnectionClosed { broker, reason }) => {
            assert_eq!(broker, BROKER);
            reason
        }
        other => panic!("expected ConnectionClosed, got {other:?}"),
    }
}

#[tokio::test]
async fn pipelined_requests_each_get_their_own_response() {
    let (conn, mut broker) = connect().await;
    let pending: Vec<_> = (0..8).map(|_| start(&conn)).collect();
    let cids: Vec<i32> = pending.iter().map(|p| p.correlation_id).collect();
    // Every caller waits at once, in its own task, before the broker answers anything.
    let callers: Vec<_> = pending
        .into_iter()
        .rev()
        .map(|p| {
            let cid = p.correlation_id;
            tokio::spawn(async move { (cid, tokio::time::timeout(LONG, p.response()).await) })
        })
        .collect();
    for &cid in &cids {
        assert_eq!(broker.read_request().await.correlation_id, cid);
    }
    // The broker answers in order, as Kafka does on one connection.
    for &cid in &cids {
        broker.respond_marked(cid, 1000 + cid).await;
    }
    for caller in callers {
        let (cid, resp) = caller.await.expect("caller task");
        let resp = resp
            .expect("response within the deadline")
            .expect("response");
        assert_eq!(
            resp.throttle_time_ms,
            1000 + cid,
            "request {cid} got another's response"
        );
    }
    assert!(!conn.is_poisoned());
}

async fn hostile_length_poisons(prefix: i32) {
    let (conn, mut broker) = connect().await;
    let waiting = start(&conn);
    let cid = broker.read_request().await.correlation_id;
    assert_eq!(cid, waiting.correlation_id);
    // Only the prefix: a reader that believed it would wait (or allocate) for the body.
    broker
        .io
        .write_all(&prefix.to_be_bytes())
        .await
        .expect("write prefix");
    let reason = closed_reason(
        tokio::time::timeout(LONG, waiting.response())
            .await
            .expect("the waiter to fail once the hostile frame length arrived"),
    );
    assert!(
        reason.contains(&format!("frame of {prefix} bytes"))
            && reason.contains("outside the accepted range"),
        "unclear reason: {reason}"
    );
    assert!(conn.is_poisoned());
    // Every later request is refused with the same reason.
    let later = conn.start_request(&ApiVersionsRequest::default(), 3);
    assert_eq!(closed_reason(later.map(|_| ())), reason);
    drop(broker);
}

#[tokio::test]
async fn a_negative_frame_length_poisons_the_connection() {
    hostile_length_poisons(i32::MIN).await;
}

#[tokio::test]
async fn a_two_gib_frame_length_poisons_the_connection() {
    hostile_length_poisons(i32::MAX).await;
}

#[tokio::test]
async fn a_frame_cut_short_poisons_without_waiting_for_the_promised_bytes() {
    let (conn, mut broker) = connect().await;
    let waiting = start(&conn);
    broker.read_request().await;
    // 500 MiB promised (within MAX_FRAME_BYTES), 8 bytes sent, then the broker goes away: the
    // reader has grown its buffer by what arrived, not by what was promised.
    let mut frame = BytesMut::new();
    frame.put_i32(500 * 1024 * 1024);
    frame.put_i32(waiting.correlation_id);
    frame.put_i32(0);
    broker.io.write_all(&frame).await.expect("write");
    drop(broker);
    let reason = closed_reason(
        tokio::time::timeout(LONG, waiting.response())
            .await
            .expect("the waiter to fail once the broker closed mid-frame"),
    );
    assert!(reason.contains("mid-frame"), "unclear reason: {reason}");
    assert!(conn.is_poisoned());
}

#[tokio::test]
async fn a_late_response_to_a_cancelled_request_is_discarded() {
    let (conn, mut broker) = connect().await;
    let cancelled = start(&conn);
    let cancelled_cid = cancelled.correlation_id;
    drop(cancelled);
    let next = start(&conn);
    let next_cid = next.correlation_id;
    assert_eq!(broker.read_request().await.correlation_id, cancelled_cid);
    assert_eq!(broker.read_request().await.correlation_id, next_cid);
    // The broker answers the cancelled request first, as it would.
    broker.respond_marked(cancelled_cid, 1).await;
    broker.respond_marked(next_cid, 2).await;
    let resp = tokio::time::timeout(LONG, next.response())
        .await
        .expect("the next request's response")
        .expect("the next request to succeed");
    assert_eq!(resp.throttle_time_ms, 2);
    assert!(!conn.is_poisoned());
    // And the connection goes on serving.
    let after = start(&conn);
    let after_cid = broker.read_request().await.correlation_id;
    broker.respond_marked(after_cid, 3).await;
    let resp = tokio::time::timeout(LONG, after.response())
        .await
        .expect("a later response")
        .expect("a later request to succeed");
    assert_eq!(resp.throttle_time_ms, 3);
}

#[tokio::test]
async fn a_response_with_an_unknown_correlation_id_poisons_the_connection() {
    let (conn, mut broker) = connect().await;
    let waiting = start(&conn);
    broker.read_request().await;
    broker.respond_marked(999, 1).await;
    let reason = closed_reason(
        tokio::time::timeout(LONG, waiting.response())
            .await
            .expect("the waiter to fail once the stray response arrived"),
    );
    assert_eq!(reason, "response with unknown correlation id 999");
    assert!(conn.is_poisoned());
}

/// A damaged answer (here cut short inside its body, correlation id intact) fails its request
/// as a lost connection — retriable, as the Java client treats it — and every other request on
/// the connection with it, not as a protocol error that would fail one request for good.
#[tokio::test]
async fn an_undecodable_response_is_a_lost_connection_for_every_request_on_it() {
    let (conn, mut broker) = connect().await;
    let first = start(&conn);
    let second = start(&conn);
    let cid = broker.read_request().await.correlation_id;
    broker.read_request().await;
    let mut frame = BytesMut::new();
    frame.put_i32(6);
    frame.put_i32(cid);
    frame.put_i16(0); // error_code, then nothing where the api_keys array should be
    broker.io.write_all(&frame).await.expect("write");
    let a = tokio::time::timeout(LONG, first.response())
        .await
        .expect("the damaged answer settles its request");
    assert!(
        matches!(&a, Err(e) if e.class() == crate::client::ErrorClass::RefreshAndRetry),
        "{a:?}"
    );
    let a = closed_reason(a);
    assert!(
        a.starts_with("cannot decode ApiVersions v3 response"),
        "{a}"
    );
    let b = closed_reason(
        tokio::time::timeout(LONG, second.response())
            .await
            .expect("the other request fails with it"),
    );
    assert_eq!(a, b);
    assert!(conn.is_poisoned());
}

#[tokio::test]
async fn a_request_timeout_poisons_and_fails_every_waiter_with_one_reason() {
    let (conn, mut broker) = connect().await;
    let short = Duration::from_millis(200);
    let timed = start(&conn).with_timeout(short);
    let others = [start(&conn), start(&conn)];
    for _ in 0..3 {
        broker.read_request().await;
    }
    // The broker never answers; it stays connected.
    let [b, c] = others;
    let (a, b, c) = tokio::join!(
        timed.response(),
        tokio::time::timeout(LONG, b.response()),
        tokio::time::timeout(LONG, c.response()),
    );
    match a {
        Err(Error::Timeout { after, .. }) => assert_eq!(after, short),
        other => panic!("expected the short request to time out, got {other:?}"),
    }
    let b = closed_reason(b.expect("the other waiters to fail once one timed out"));
    let c = closed_reason(c.expect("the other waiters to fail once one timed out"));
    assert_eq!(b, "ApiVersions request to broker fake:9092 timed out");
    assert_eq!(b, c);
    assert!(conn.is_poisoned());
    let later = conn.start_request(&ApiVersionsRequest::default(), 3);
    assert_eq!(closed_reason(later.map(|_| ())), b);
    drop(broker);
}

#[tokio::test]
async fn negotiation_picks_the_highest_common_version() {
    let resp = ApiVersionsResponse::default()
        .with_api_keys(vec![
            range(ApiKey::ApiVersions, 0, 3),
            range(ApiKey::Produce, 3, 999),
            range(ApiKey::Metadata, 0, 5),
            // Below the crate's minimum Fetch version: nothing in common.
            range(ApiKey::Fetch, 0, 2),
        ])
        .with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(StrBytes::from_static_str("transaction.version"))
            .with_min_version_level(2)
            .with_max_version_level(2)]);
    let (conn, _broker) = connect_with(resp, LONG).await;
    assert_eq!(
        conn.version_for::<ProduceRequest>(None).expect("produce"),
        ApiKey::Produce.valid_versions().max
    );
    assert_eq!(conn.version_for::<MetadataRequest>(None).expect("meta"), 5);
    assert_eq!(
        conn.version_for::<MetadataRequest>(Some(4)).expect("cap"),
        4
    );
    match conn.version_for::<FetchRequest>(None) {
        Err(Error::UnsupportedVersion { broker, api }) => {
            assert_eq!(broker, BROKER);
            assert_eq!(api, "Fetch");
        }
        other => panic!("expected UnsupportedVersion for Fetch, got {other:?}"),
    }
    assert_eq!(conn.versions().finalized_feature("transaction.version"), 2);
}

#[tokio::test]
async fn negotiation_falls_back_to_v0_on_unsupported_version() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut broker = FakeBroker { io: server };
    let old_broker = async {
        let v3 = broker.read_request().await;
        assert_eq!(v3.request_api_version, 3);
        let refusal = ApiVersionsResponse::default().with_error_code(35);
        broker.respond(v3.correlation_id, 3, &refusal).await;
        let v0 = broker.read_request().await;
        assert_eq!(v0.request_api_version, 0);
        let ranges = ApiVersionsResponse::default().with_api_keys(vec![
            range(ApiKey::ApiVersions, 0, 2),
            range(ApiKey::Metadata, 0, 7),
        ]);
        broker.respond(v0.correlation_id, 0, &ranges).await;
    };
    let (conn, ()) = tokio::join!(Connection::over(client, BROKER, "test", LONG), old_broker);
    let conn = conn.expect("negotiation with an old broker");
    assert_eq!(conn.version_for::<MetadataRequest>(None).expect("meta"), 7);
    assert_eq!(conn.versions().finalized_feature("transaction.version"), 0);
}

/// A broker offering only classic-protocol versions (one just restarted, not caught up with
/// the cluster's transaction.version 2) gets no request of a KIP-890 transaction: the
/// connection is retired (retriable: the retry reconnects and negotiates again).
#[tokio::test]
async fn a_kip890_request_to_a_broker_offering_older_versions_retires_the_connection() {
    let resp = ApiVersionsResponse::default().with_api_keys(vec![
        range(ApiKey::ApiVersions, 0, 3),
        range(ApiKey::EndTxn, 0, 4),
        range(ApiKey::Produce, 3, 12),
    ]);
    let (conn, _broker) = connect_with(resp, LONG).await;
    assert_eq!(conn.tv2_version_for::<ProduceRequest>(12).expect("v12"), 12);
    assert!(!conn.is_poisoned());
    match conn.tv2_version_for::<kafka_protocol::messages::EndTxnRequest>(5) {
        Err(Error::ConnectionClosed { broker, reason }) => {
            assert_eq!(broker, BROKER);
            assert!(reason.contains("EndTxn v4"), "{reason}");
        }
        other => panic!("expected ConnectionClosed, got {other:?}"),
    }
    assert!(conn.is_poisoned());
}
