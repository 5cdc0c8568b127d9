//! A fault-injecting TCP proxy between the client and the broker.
//!
//! It understands Kafka framing: it reads whole request frames, remembers each request's API
//! key and version by correlation id, and rewrites broker addresses in Metadata and
//! FindCoordinator responses so the client keeps talking through the proxy. Faults:
//! - `drop_produce_responses_per_mille`: forward a Produce request, wait for the broker's
//!   response (so the write happened), then drop the response and close the client connection
//!   — the classic cause of duplicates;
//! - `delay_ms`: hold every response this long;
//! - `reset_per_mille`: close the connection at random after forwarding a request;
//! - `hold_next_request`: hold the next request of one API this long before forwarding it
//!   (e.g. a SyncGroup held past session.timeout.ms reaches a coordinator that has already
//!   removed the member);
//! - `gate_next_request`: hold the next request of one API until the test opens the gate
//!   (`Faults::open_gate`), e.g. a Produce request that reaches the broker only after the test
//!   deleted and recreated its topic; with `gate_after_dropped_produce`, the gate closes for the
//!   next Produce request when a Produce response is dropped (the retry of a written batch);
//! - `hold_responses`: while set to an API, forward its requests but never pass their responses
//!   back (the connection stays open and silent): the broker did the work, the client never
//!   hears so. For EndTxn only commits are held (an abort's answer passes);
//! - `spoil_fetch_session_ids` / `skew_fetch_session_epochs`: the next this-many Fetch
//!   requests that continue a fetch session (KIP-227) reach the broker with a session id it
//!   does not know (FETCH_SESSION_ID_NOT_FOUND, as after an eviction) or an epoch out of step
//!   (INVALID_FETCH_SESSION_EPOCH);
//! - `damage_api_versions`: the next this-many ApiVersions answers (`u32::MAX`: all) offer Fetch
//!   only up to v1, below any version the client speaks — what one flipped bit in Fetch's max
//!   version does, or a broker far too old;
//! - `hide_topic_ids`: Metadata responses carry no topic ids (KIP-516), as an old broker's:
//!   the client then fetches by name and cannot tell a recreated topic from the old one;
//! - `fake_leader`: a second broker id, at another address, that Metadata names as the leader
//!   of chosen partitions. With one real broker this is how a test gets a cluster where one
//!   leader is healthy and another unreachable (point it at a [`Blackhole`]).
//!
//! - `hostile`: damage to responses and connections (bit flips, truncation, wrong correlation
//!   ids, huge lengths, a byte a second, silence, ...): see `support::hostile`.
//!
//! It also counts the requests it forwards per API (`Faults::requests`).

use super::hostile::{Action, Hostile};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, EndTxnRequest, FetchRequest, FindCoordinatorResponse,
    MetadataResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rand::Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Fault settings, changeable while the proxy runs.
#[derive(Default)]
pub struct Faults {
    /// Drop the next this-many Produce responses (deterministic), then go on at the rate below.
    pub drop_next_produce_responses: AtomicU32,
    pub drop_produce_responses_per_mille: AtomicU32,
    pub reset_per_mille: AtomicU32,
    pub delay_ms: AtomicU64,
    /// Counts of injected faults, for the test to assert that faults really happened.
    pub dropped_responses: AtomicU64,
    /// Fetch requests forwarded.
    pub fetch_requests: AtomicU64,
    /// Metadata responses passed back to the client.
    pub metadata_responses: AtomicU64,
    /// Client connections accepted.
    pub connections: AtomicU64,
    pub resets: AtomicU64,
    pub stopped: AtomicBool,
    /// Requests forwarded, per API key.
    pub forwarded: Mutex<HashMap<i16, u64>>,
    /// Hold the next request of this API this long before forwarding it (one-shot).
    pub hold_next_request: Mutex<Option<(ApiKey, std::time::Duration)>>,
    /// Requests `hold_next_request` has started holding (counted before the hold).
    pub held_requests: AtomicU64,
    /// When a Produce response is dropped, gate the next Produce request (the client's
    /// retry of the batch the broker wrote).
    pub gate_after_dropped_produce: AtomicBool,
    /// Hold the next request of this API until `open_gate` (one-shot).
    pub gate_next_request: Mutex<Option<ApiKey>>,
    /// Requests the gate has held (counted when the hold starts).
    pub gated_requests: AtomicU64,
    gate_open: AtomicBool,
    gate_opened: tokio::sync::Notify,
    /// While set: the responses of this API are held forever (EndTxn: commits only).
    pub hold_responses: Mutex<Option<ApiKey>>,
    /// Responses `hold_responses` has held.
    pub held_responses: AtomicU64,
    pub fake_leader: Mutex<Option<FakeLeader>>,
    /// The next this-many incremental Fetch requests go with an unknown session id.
    pub spoil_fetch_session_ids: AtomicU32,
    /// The next this-many incremental Fetch requests go with an epoch out of step.
    pub skew_fetch_session_epochs: AtomicU32,
    /// Fetch requests spoiled or skewed so far.
    pub spoiled_fetches: AtomicU64,
    /// The next this-many ApiVersions answers offer no usable Fetch version (`u32::MAX`: all).
    pub damage_api_versions: AtomicU32,
    /// ApiVersions answers damaged so far.
    pub damaged_api_versions: AtomicU64,
    /// Metadata responses lose their topic ids.
    pub hide_topic_ids: AtomicBool,
    /// Fetch requests that closed a fetch session (its id, epoch -1).
    pub closed_fetch_sessions: AtomicU64,
    /// Damage to responses and connections (`support::hostile`).
    pub hostile: Hostile,
}

impl Faults {
    /// Lets the request `gate_next_request` holds (and any later one) through.
    pub fn open_gate(&self) {
        self.gate_open.store(true, Ordering::SeqCst);
        self.gate_opened.notify_waiters();
    }

    /// Waits until the gate is open.
    async fn gate_passed(&self) {
        loop {
            // Created before the check: a notification between the two is not lost.
            let opened = self.gate_opened.notified();
            if self.gate_open.load(Ordering::SeqCst) {
                return;
            }
            opened.await;
        }
    }

    /// How many requests of `api` the proxy has forwarded.
    pub fn requests(&self, api: ApiKey) -> u64 {
        self.forwarded
            .lock()
            .unwrap()
            .get(&(api as i16))
            .copied()
            .unwrap_or(0)
    }
}

/// Partitions that Metadata responses say another broker leads.
#[derive(Clone, Debug)]
pub struct FakeLeader {
    /// Its node id (must not be a real broker's).
    pub node_id: i32,
    /// Its host:port.
    pub addr: String,
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// A listener that accepts connections and never answers (nor closes them): a broker whose
/// connection setup hangs, e.g. a process stopped with SIGSTOP.
pub struct Blackhole {
    pub addr: String,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    pub async fn start() -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                held.push(socket);
            }
        });
        Blackhole {
            addr,
            accepted,
            task,
        }
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct Proxy {
    pub addr: String,
    pub faults: Arc<Faults>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.faults.stopped.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let faults = Arc::new(Faults::default());
        let (f, up, me) = (faults.clone(), upstream.to_owned(), addr.clone());
        let task = tokio::spawn(async move {
            let mut silent = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                f.connections.fetch_add(1, Ordering::Relaxed);
                if f.hostile.silent_accept.load(Ordering::SeqCst) {
                    // Accepted, never answered, never closed (until the proxy goes).
                    silent.push(client);
                    continue;
                }
                let (f, up, me) = (f.clone(), up.clone(), me.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&up).await {
                        relay(client, server, f, me).await;
                    }
                });
            }
        });
        Proxy { addr, faults, task }
    }
}

/// Correlation id -> (api key, version, drop the response?, hold it?).
type InFlight = HashMap<i32, (i16, i16, bool, bool)>;

/// The Fetch request frame with its session spoiled, if a fault asks for it and the request
/// continues a session.
fn spoil_fetch_session(faults: &Faults, version: i16, frame: &Bytes) -> Option<Bytes> {
    let take = |n: &AtomicU32| {
        n.load(Ordering::Relaxed) > 0
            && n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    };
    let pending = faults.spoil_fetch_session_ids.load(Ordering::Relaxed) > 0
        || faults.skew_fetch_session_epochs.load(Ordering::Relaxed) > 0;
    if !pending {
        return None;
    }
    let hv = ApiKey::Fetch.request_header_version(version);
    let mut buf = frame.clone();
    let header = RequestHeader::decode(&mut buf, hv).ok()?;
    let mut req = FetchRequest::decode(&mut buf, version).ok()?;
    if req.session_epoch <= 0 {
        return None;
    }
    if take(&faults.spoil_fetch_session_ids) {
        req.session_id ^= 0x5a5a_5a5a;
    } else if take(&faults.skew_fetch_session_epochs) {
        req.session_epoch = req.session_epoch.wrapping_add(1000).max(1);
    } else {
        return None;
    }
    faults.spoiled_fetches.fetch_add(1, Ordering::Relaxed);
    let mut out = BytesMut::new();
    header.encode(&mut out, hv).ok()?;
    req.encode(&mut out, version).ok()?;
    Some(out.freeze())
}

/// Whether the Fetch request frame closes a fetch session (KIP-227: its id, epoch -1).
fn closes_fetch_session(version: i16, frame: &Bytes) -> bool {
    let mut buf = frame.clone();
    RequestHeader::decode(&mut buf, ApiKey::Fetch.request_header_version(version))
        .ok()
        .and_then(|_| FetchRequest::decode(&mut buf, version).ok())
        .is_some_and(|r| r.session_id != 0 && r.session_epoch == -1)
}

/// Whether `hold_responses` holds the response to this request frame.
fn hold_response(faults: &Faults, api: i16, version: i16, frame: &Bytes) -> bool {
    let held = *faults.hold_responses.lock().unwrap();
    match held {
        Some(ApiKey::EndTxn) if api == ApiKey::EndTxn as i16 => {
            let mut buf = frame.clone();
            RequestHeader::decode(&mut buf, ApiKey::EndTxn.request_header_version(version))
                .ok()
                .and_then(|_| EndTxnRequest::decode(&mut buf, version).ok())
                .is_some_and(|r| r.committed)
        }
        Some(key) => key as i16 == api,
        None => false,
    }
}

async fn read_frame<R: AsyncReadExt + Unpin>(r: &mut R) -> Option<Bytes> {
    let len = r.read_i32().await.ok()?;
    if !(0..=512 * 1024 * 1024).contains(&len) {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await.ok()?;
    Some(Bytes::from(buf))
}

async fn relay(client: TcpStream, server: TcpStream, faults: Arc<Faults>, me: String) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let inflight: Arc<Mutex<InFlight>> = Arc::default();
    let kill = Arc::new(tokio::sync::Notify::new());
    let up = {
        let (inflight, faults, kill) = (inflight.clone(), faults.clone(), kill.clone());
        async move {
            while let Some(frame) = read_frame(&mut cr).await {
                if frame.len() < 8 {
                    break;
                }
                let mut h = &frame[..8];
                let (api, version, cid) = (h.get_i16(), h.get_i16(), h.get_i32());
                let drop_it = api == ApiKey::Produce as i16
                    && (faults
                        .drop_next_produce_responses
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok()
                        || rand::rng().random_range(0..1000)
                            < faults
                                .drop_produce_responses_per_mille
                                .load(Ordering::Relaxed));
                let mut frame = frame;
                if api == ApiKey::Fetch as i16 {
                    faults.fetch_requests.fetch_add(1, Ordering::Relaxed);
                    if let Some(f) = spoil_fetch_session(&faults, version, &frame) {
                        frame = f;
                    }
                    if closes_fetch_session(version, &frame) {
                        faults.closed_fetch_sessions.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let hold = {
                    let mut h = faults.hold_next_request.lock().unwrap();
                    match *h {
                        Some((key, d)) if key as i16 == api => {
                            *h = None;
                            Some(d)
                        }
                        _ => None,
                    }
                };
                if let Some(d) = hold {
                    faults.held_requests.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(d).await;
                }
                let gated = {
                    let mut g = faults.gate_next_request.lock().unwrap();
                    let hit = g.is_some_and(|key| key as i16 == api);
                    if hit {
                        *g = None;
                    }
                    hit
                };
                if gated {
                    faults.gated_requests.fetch_add(1, Ordering::Relaxed);
                    faults.gate_passed().await;
                }
                *faults.forwarded.lock().unwrap().entry(api).or_insert(0) += 1;
                let hold_it = hold_response(&faults, api, version, &frame);
                inflight
                    .lock()
                    .unwrap()
                    .insert(cid, (api, version, drop_it, hold_it));
                let mut out = BytesMut::with_capacity(frame.len() + 4);
                out.put_i32(frame.len() as i32);
                out.put_slice(&frame);
                if sw.write_all(&out).await.is_err() {
                    break;
                }
                if rand::rng().random_range(0..1000)
                    < faults.reset_per_mille.load(Ordering::Relaxed)
                {
                    faults.resets.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            kill.notify_waiters();
        }
    };
    let down = {
        let (inflight, faults, kill) = (inflight.clone(), faults.clone(), kill.clone());
        async move {
            while let Some(frame) = read_frame(&mut sr).await {
                if frame.len() < 4 {
                    break;
                }
                let cid = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                let entry = inflight.lock().unwrap().remove(&cid);
                let delay = faults.delay_ms.load(Ordering::Relaxed);
                if delay > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                }
                if entry.is_some_and(|(_, _, _, hold)| hold) {
                    // The broker answered; the client waits for ever (until it goes away).
                    faults.held_responses.fetch_add(1, Ordering::Relaxed);
                    std::future::pending::<()>().await;
                }
                if entry.is_some_and(|(api, _, _, _)| api == ApiKey::Metadata as i16) {
                    faults.metadata_responses.fetch_add(1, Ordering::Relaxed);
                }
                let body = match entry {
                    Some((_, _, true, _)) => {
                        // The broker wrote it; the client will never hear so.
                        if faults.gate_after_dropped_produce.load(Ordering::Relaxed) {
                            *faults.gate_next_request.lock().unwrap() = Some(ApiKey::Produce);
                        }
                        faults.dropped_responses.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Some((api, version, false, _))
                        if api == ApiKey::ApiVersions as i16
                            && faults
                                .damage_api_versions
                                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                                    0 => None,
                                    u32::MAX => Some(n),
                                    n => Some(n - 1),
                                })
                                .is_ok() =>
                    {
                        faults.damaged_api_versions.fetch_add(1, Ordering::Relaxed);
                        without_fetch(frame, version)
                    }
                    Some((api, version, false, _)) => {
                        let fake = faults.fake_leader.lock().unwrap().clone();
                        let hide_ids = faults.hide_topic_ids.load(Ordering::Relaxed);
                        rewrite(frame, api, version, &me, fake.as_ref(), hide_ids)
                    }
                    None => frame,
                };
                let action = match entry {
                    Some((api, version, _, _)) => faults.hostile.on_response(api, version, body),
                    None => Action::Forward(body),
                };
                let framed = |body: Bytes| {
                    let mut out = BytesMut::with_capacity(body.len() + 4);
                    out.put_i32(body.len() as i32);
                    out.put_slice(&body);
                    out.freeze()
                };
                let (out, close) = match action {
                    Action::Forward(body) => (framed(body), false),
                    Action::ForwardThenClose(body) => (framed(body), true),
                    Action::Raw(raw) => (raw, false),
                    Action::RawThenClose(raw) => (raw, true),
                    Action::Trickle(raw) => {
                        // A byte a second; everything after it on this connection waits.
                        let mut ok = true;
                        for b in raw.iter() {
                            if cw.write_all(&[*b]).await.is_err() {
                                ok = false;
                                break;
                            }
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                        if !ok {
                            break;
                        }
                        continue;
                    }
                    Action::Silence => continue,
                };
                if cw.write_all(&out).await.is_err() || close {
                    break;
                }
            }
            kill.notify_waiters();
        }
    };
    // Whichever side ends first closes both (dropping the halves closes the sockets).
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = kill.notified() => {}
    }
}

/// The ApiVersions answer with Fetch offered up to v1 only.
fn without_fetch(frame: Bytes, version: i16) -> Bytes {
    let hv = ApiKey::ApiVersions.response_header_version(version);
    let mut buf = frame.clone();
    let Ok(header) = ResponseHeader::decode(&mut buf, hv) else {
        return frame;
    };
    let Ok(mut resp) = ApiVersionsResponse::decode(&mut buf, version) else {
        return frame;
    };
    for k in &mut resp.api_keys {
        if k.api_key == ApiKey::Fetch as i16 {
            k.min_version = 0;
            k.max_version = 1;
        }
    }
    let mut out = BytesMut::new();
    header.encode(&mut out, hv).unwrap();
    resp.encode(&mut out, version).unwrap();
    out.freeze()
}

/// Points broker addresses in Metadata / FindCoordinator responses at the proxy, and adds the
/// fake leader, if any.
fn rewrite(
    frame: Bytes,
    api: i16,
    version: i16,
    me: &str,
    fake: Option<&FakeLeader>,
    hide_ids: bool,
) -> Bytes {
    let Ok(key) = ApiKey::try_from(api) else {
        return frame;
    };
    if key != ApiKey::Metadata && key != ApiKey::FindCoordinator {
        return frame;
    }
    let (host, port) = me.rsplit_once(':').unwrap();
    let port: i32 = port.parse().unwrap();
    let hv = key.response_header_version(version);
    let mut buf = frame.clone();
    let Ok(header) = ResponseHeader::decode(&mut buf, hv) else {
        return frame;
    };
    let mut out = BytesMut::new();
    header.encode(&mut out, hv).unwrap();
    match key {
        ApiKey::Metadata => {
            let Ok(mut m) = MetadataResponse::decode(&mut buf, version) else {
                return frame;
            };
            for b in &mut m.brokers {
                b.host = StrBytes::from_string(host.to_owned());
                b.port = port;
            }
            if let Some(fake) = fake {
                let (fhost, fport) = fake.addr.rsplit_once(':').unwrap();
                m.brokers.push(
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(fake.node_id))
                        .with_host(StrBytes::from_string(fhost.to_owned()))
                        .with_port(fport.parse().unwrap()),
                );
                for t in &mut m.topics {
                    if t.name.as_ref().map(|n| n.0.as_str()) != Some(fake.topic.as_str()) {
                        continue;
                    }
                    for p in &mut t.partitions {
                        if fake.partitions.contains(&p.partition_index) {
                            p.leader_id = BrokerId(fake.node_id);
                            p.replica_nodes = vec![BrokerId(fake.node_id)];
                            p.isr_nodes = vec![BrokerId(fake.node_id)];
                        }
                    }
                }
            }
            if hide_ids {
                for t in &mut m.topics {
                    t.topic_id = Default::default();
                }
            }
            m.encode(&mut out, version).unwrap();
        }
        _ => {
            let Ok(mut c) = FindCoordinatorResponse::decode(&mut buf, version) else {
                return frame;
            };
            if version < 4 {
                c.host = StrBytes::from_string(host.to_owned());
                c.port = port;
            }
            for k in &mut c.coordinators {
                k.host = StrBytes::from_string(host.to_owned());
                k.port = port;
            }
            c.encode(&mut out, version).unwrap();
        }
    }
    out.freeze()
}
