//! A hostile broker: the fault proxy (`support::proxy`) damaging the broker's responses on their
//! way back to the client, as a bad network or a broken broker would.
//!
//! The proxy keeps its framing and its per-correlation-id bookkeeping (API key and version of
//! every request in flight); this module decides, response by response, what to do to it:
//! - `FlipBit`: flip one random bit after the correlation id (length and correlation id intact,
//!   as in the hostile-broker report), so the frame is still matched to its request but its content
//!   may decode to nonsense, fail to decode, or (in a record batch) fail its CRC;
//! - `Mangle`: keep the correlation id, replace the body by a few bytes no response decodes
//!   from (an undecodable response, deterministic where a bit flip is not);
//! - `Truncate`: send the length and half the frame, then close (the broker did the work);
//! - `WrongCorrelationId`: the response comes back under a correlation id nobody sent;
//! - `HugeLength`: announce a frame of 400 MB (below the client's limit), send the real bytes,
//!   then nothing more: the client waits for bytes that never come;
//! - `Trickle`: answer a byte a second;
//! - `Silence`: never answer (the connection stays open);
//! - `OmitPartition` (Produce only): the answer leaves out one partition of the request, as a
//!   bit flipped in a partition index or a topic name does; it still decodes;
//! - `OutOfRange` (Fetch only): every partition of the answer says OFFSET_OUT_OF_RANGE (error
//!   code 1: one flipped bit away from 0), without records;
//! - `NegativeProducerId` (InitProducerId only): the sign bit of the producer id flipped (a
//!   broker treats batches with a negative producer id as not idempotent: no deduplication).
//!
//! Besides, per connection or per proxy:
//! - `close_after_api_versions`: answer ApiVersions, then close the connection;
//! - `strip_from_api_versions`: ApiVersions answers lose one API (as from a damaged answer, or
//!   a broker too old to speak any version of it this client knows);
//! - `silent_accept`: accept connections and never answer (nor reach the broker);
//! - `shift_base_offsets`: the next this-many Fetch responses that carry records get their
//!   first batch's base offset moved 2^40 up (outside the CRC: only the offsets tell);
//! - `damage_leader_ids`: the leader's next JoinGroup answers name another member the leader;
//!   `damage_assigned_topic`: the next SyncGroup answer names a topic altered by one character;
//!   `shift_list_offsets`: the next ListOffsets answers give every offset 16 (or
//!   `list_offsets_shift`) too high;
//!   `damage_topic_ids`: the next Metadata answers name every topic under an altered id;
//! - `flip_record_batches`: the next this-many Fetch responses that carry records get one bit
//!   flipped inside their first record batch, where its CRC covers it (a certain CRC failure,
//!   where a random flip may land in a header);
//! - a broker address that refuses connections: [`refusing_addr`], advertised through the
//!   proxy's `fake_leader`; `BadBrokerHost`: a Metadata answer whose brokers' host name no
//!   resolver knows.
//!
//! Random choices come from one seeded generator, printed by the test, and overridable with
//! ONCEFLOW_HOSTILE_SEED, so that the sequence of faults of a failed run can be replayed.
//! Thread scheduling still varies between runs: the seed fixes which response of each kind is
//! damaged and how, not the interleaving. With ONCEFLOW_HOSTILE_LOG set, every flipped bit is
//! printed (API key, version, byte and bit), to tell which field a failing run's flip hit.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchResponse, InitProducerIdResponse, JoinGroupResponse,
    ListOffsetsResponse, MetadataResponse, ProduceResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use uuid::Uuid;

/// What to do to one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    FlipBit,
    Mangle,
    Truncate,
    WrongCorrelationId,
    HugeLength,
    Trickle,
    Silence,
    OmitPartition,
    NegativeProducerId,
    OutOfRange,
    /// A Metadata answer whose brokers' host names cannot be resolved ("127.0.0.!", a flipped
    /// bit in "127.0.0.1").
    BadBrokerHost,
    /// An InitProducerId answer refusing: CLUSTER_AUTHORIZATION_FAILED.
    Unauthorized,
}

/// Which responses a damage applies to: an API (or any), how often, how many times at most.
#[derive(Clone, Debug)]
pub struct Rule {
    pub api: Option<ApiKey>,
    pub damage: Damage,
    /// Chance per matching response, in thousandths.
    pub per_mille: u32,
    /// At most this many times (None: no limit).
    pub times: Option<u32>,
}

impl Rule {
    /// The next `n` responses of `api`.
    pub fn next(n: u32, api: ApiKey, damage: Damage) -> Rule {
        Rule {
            api: Some(api),
            damage,
            per_mille: 1000,
            times: Some(n),
        }
    }

    /// About `per_mille` thousandths of the responses of `api` (None: of every API).
    pub fn random(api: Option<ApiKey>, damage: Damage, per_mille: u32) -> Rule {
        Rule {
            api,
            damage,
            per_mille,
            times: None,
        }
    }
}

/// What the proxy writes back to the client for one response.
pub enum Action {
    /// This frame body (the proxy adds the length).
    Forward(Bytes),
    /// These raw bytes (length included), then carry on.
    Raw(Bytes),
    /// These raw bytes, then close the connection.
    RawThenClose(Bytes),
    /// The frame (length included), a byte a second.
    Trickle(Bytes),
    /// The frame, then close the connection.
    ForwardThenClose(Bytes),
    /// Nothing, ever.
    Silence,
}

/// The hostile settings of one proxy; lives in its `Faults`.
pub struct Hostile {
    rng: Mutex<StdRng>,
    rules: Mutex<Vec<Rule>>,
    /// Answer ApiVersions, then close the connection.
    pub close_after_api_versions: AtomicBool,
    /// ApiVersions answers lose this API, the next `strip_times` times (u32::MAX: always).
    strip: Mutex<Option<ApiKey>>,
    pub strip_times: AtomicU32,
    /// Accept connections and never answer.
    pub silent_accept: AtomicBool,
    /// The next this-many Fetch responses with records get a bit flipped in a batch.
    pub flip_record_batches: AtomicU32,
    /// Record batches flipped so far.
    pub record_flips: AtomicU64,
    /// The next this-many Fetch responses with records get their first batch's base offset
    /// (outside the CRC) moved 2^40 up, as a bit flipped high there moves it.
    pub shift_base_offsets: AtomicU32,
    /// The bit of the base offset `shift_base_offsets` flips (40 unless set).
    pub base_offset_bit: AtomicU32,
    /// With `shift_base_offsets`: only a data batch (not a marker) whose base offset has the
    /// bit clear (the flip moves it up), in an answer holding that one batch. Off (the
    /// default): the first batch of any answer with records.
    pub shift_up_only: AtomicBool,
    /// The next this-many Fetch answers that list an aborted transaction get bit 0 of every
    /// listed producer id flipped.
    pub damage_aborted_lists: AtomicU32,
    /// With `damage_aborted_lists`: only answers whose listed transactions all began before
    /// the answer's data (a transaction spanning answers, met again), which the answer's own
    /// batches cannot bear out.
    pub aborted_lists_begun_before: AtomicBool,
    pub aborted_lists_damaged: AtomicU64,
    /// The next this-many Fetch answers that carry records name, for their first partition
    /// with records, a diverging epoch (17462833, ending at 3834587484168126476) instead.
    pub damage_diverging_epochs: AtomicU32,
    pub diverging_epochs_damaged: AtomicU64,
    /// The next this-many Fetch answers naming a fetch session get its id's sign bit flipped.
    pub damage_session_ids: AtomicU32,
    pub session_ids_damaged: AtomicU64,
    /// Base offsets moved so far.
    pub base_offset_shifts: AtomicU64,
    /// The next this-many JoinGroup answers that list members (the leader's) name another
    /// member the leader (a "!" appended to the leader id).
    pub damage_leader_ids: AtomicU32,
    pub leader_ids_damaged: AtomicU64,
    /// The next this-many JoinGroup answers that list members have every listed member id
    /// altered (a "!" appended).
    pub damage_listed_ids: AtomicU32,
    pub listed_ids_damaged: AtomicU64,
    /// The next SyncGroup answer whose assignment names this topic gets its last character
    /// replaced by '?' there.
    pub damage_assigned_topic: Mutex<Option<String>>,
    pub assigned_topics_damaged: AtomicU64,
    /// The next SyncGroup answer whose assignment names this topic gets the first partition
    /// listed for it moved 2048 up (bit 11 flipped).
    pub damage_assigned_partition: Mutex<Option<String>>,
    pub assigned_partitions_damaged: AtomicU64,
    /// The next this-many ListOffsets answers have `list_offsets_shift` added to every offset
    /// (16 unless set: bit 4 flipped in a 0).
    pub shift_list_offsets: AtomicU32,
    pub list_offsets_shift: AtomicI64,
    pub list_offsets_shifted: AtomicU64,
    /// The next this-many Metadata answers that name a topic id get every topic id altered
    /// (its last byte flipped).
    pub damage_topic_ids: AtomicU32,
    pub topic_ids_damaged: AtomicU64,
    /// The next this-many Metadata answers listing a topic with two partitions or more list
    /// its last one under another index (bit 1 set: 1 → 3).
    pub damage_partition_indexes: AtomicU32,
    pub partition_indexes_damaged: AtomicU64,
    /// Responses damaged so far, per damage (FlipBit, Mangle, ... in declaration order), and
    /// ApiVersions answers stripped.
    damaged: [AtomicU64; 12],
    pub stripped: AtomicU64,
    pub closed_after_api_versions: AtomicU64,
}

impl Default for Hostile {
    fn default() -> Self {
        Hostile::with_seed(0)
    }
}

/// The seed for this test: ONCEFLOW_HOSTILE_SEED if set, else a fresh one. Printed, so a
/// failed run can be repeated with the same faults.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("ONCEFLOW_HOSTILE_SEED") {
        Ok(s) => s.parse().expect("ONCEFLOW_HOSTILE_SEED is a u64"),
        Err(_) => rand::rng().random(),
    };
    eprintln!("{test}: hostile seed {seed} (ONCEFLOW_HOSTILE_SEED={seed} to repeat)");
    seed
}

/// An address nothing listens on: connecting to it is refused at once.
pub async fn refusing_addr() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    addr
}

impl Hostile {
    pub fn with_seed(seed: u64) -> Hostile {
        Hostile {
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            rules: Mutex::default(),
            close_after_api_versions: AtomicBool::new(false),
            strip: Mutex::default(),
            strip_times: AtomicU32::new(0),
            silent_accept: AtomicBool::new(false),
            flip_record_batches: AtomicU32::new(0),
            record_flips: AtomicU64::new(0),
            shift_base_offsets: AtomicU32::new(0),
            base_offset_bit: AtomicU32::new(40),
            shift_up_only: AtomicBool::new(false),
            damage_aborted_lists: AtomicU32::new(0),
            aborted_lists_begun_before: AtomicBool::new(false),
            aborted_lists_damaged: AtomicU64::new(0),
            damage_diverging_epochs: AtomicU32::new(0),
            diverging_epochs_damaged: AtomicU64::new(0),
            damage_session_ids: AtomicU32::new(0),
            session_ids_damaged: AtomicU64::new(0),
            base_offset_shifts: AtomicU64::new(0),
            damage_leader_ids: AtomicU32::new(0),
            leader_ids_damaged: AtomicU64::new(0),
            damage_listed_ids: AtomicU32::new(0),
            listed_ids_damaged: AtomicU64::new(0),
            damage_assigned_topic: Mutex::new(None),
            assigned_topics_damaged: AtomicU64::new(0),
            damage_assigned_partition: Mutex::new(None),
            assigned_partitions_damaged: AtomicU64::new(0),
            shift_list_offsets: AtomicU32::new(0),
            list_offsets_shift: AtomicI64::new(16),
            list_offsets_shifted: AtomicU64::new(0),
            damage_topic_ids: AtomicU32::new(0),
            topic_ids_damaged: AtomicU64::new(0),
            damage_partition_indexes: AtomicU32::new(0),
            partition_indexes_damaged: AtomicU64::new(0),
            damaged: Default::default(),
            stripped: AtomicU64::new(0),
            closed_after_api_versions: AtomicU64::new(0),
        }
    }

    /// Restarts the random sequence from `seed`.
    pub fn reseed(&self, seed: u64) {
        *self.rng.lock().unwrap() = StdRng::seed_from_u64(seed);
    }

    pub fn add(&self, rule: Rule) {
        self.rules.lock().unwrap().push(rule);
    }

    /// ApiVersions answers lose `api`, the next `times` times (u32::MAX: always).
    pub fn strip_from_api_versions(&self, api: ApiKey, times: u32) {
        *self.strip.lock().unwrap() = Some(api);
        self.strip_times.store(times, Ordering::SeqCst);
    }

    /// Responses damaged so far with `d`.
    pub fn damaged(&self, d: Damage) -> u64 {
        self.damaged[d as usize].load(Ordering::Relaxed)
    }

    /// The damage the rules choose for a response of `api`, if any (and counts it).
    fn choose(&self, api: i16) -> Option<(Damage, u64)> {
        let mut rules = self.rules.lock().unwrap();
        let mut rng = self.rng.lock().unwrap();
        let mut chosen = None;
        for r in rules.iter_mut() {
            if r.api.is_some_and(|a| a as i16 != api) || r.times == Some(0) {
                continue;
            }
            if r.per_mille < 1000 && rng.random_range(0..1000) >= r.per_mille {
                continue;
            }
            if let Some(t) = &mut r.times {
                *t -= 1;
            }
            chosen = Some((r.damage, rng.random()));
            break;
        }
        if let Some((d, _)) = chosen {
            self.damaged[d as usize].fetch_add(1, Ordering::Relaxed);
        }
        chosen
    }

    /// What to write back for `body`, the response (correlation id first, no length) to a
    /// request of `api` at `version`.
    pub fn on_response(&self, api: i16, version: i16, body: Bytes) -> Action {
        let body = if api == ApiKey::ApiVersions as i16 {
            self.strip_api_versions(version, body)
        } else if api == ApiKey::Fetch as i16 && self.flip_record_batches.load(Ordering::SeqCst) > 0
        {
            self.flip_record_batch(version, body)
        } else if api == ApiKey::Fetch as i16 && self.shift_base_offsets.load(Ordering::SeqCst) > 0
        {
            self.shift_base_offset(version, body)
        } else if api == ApiKey::Fetch as i16
            && self.damage_aborted_lists.load(Ordering::SeqCst) > 0
        {
            self.damage_aborted_list(version, body)
        } else if api == ApiKey::Fetch as i16
            && self.damage_diverging_epochs.load(Ordering::SeqCst) > 0
        {
            self.damage_diverging_epoch(version, body)
        } else if api == ApiKey::Fetch as i16 && self.damage_session_ids.load(Ordering::SeqCst) > 0
        {
            self.damage_session_id(version, body)
        } else if api == ApiKey::JoinGroup as i16
            && (self.damage_leader_ids.load(Ordering::SeqCst) > 0
                || self.damage_listed_ids.load(Ordering::SeqCst) > 0)
        {
            self.damage_leader_id(version, body)
        } else if api == ApiKey::SyncGroup as i16 {
            self.damage_assigned_topic(body)
        } else if api == ApiKey::Metadata as i16 && self.damage_topic_ids.load(Ordering::SeqCst) > 0
        {
            self.damage_topic_id(version, body)
        } else if api == ApiKey::Metadata as i16
            && self.damage_partition_indexes.load(Ordering::SeqCst) > 0
        {
            self.damage_partition_index(version, body)
        } else if api == ApiKey::ListOffsets as i16 && take(&self.shift_list_offsets) {
            self.list_offsets_shifted.fetch_add(1, Ordering::Relaxed);
            shift_list_offsets(
                version,
                body,
                self.list_offsets_shift.load(Ordering::SeqCst),
            )
        } else {
            body
        };
        let Some((damage, r)) = self.choose(api) else {
            if api == ApiKey::ApiVersions as i16
                && self.close_after_api_versions.load(Ordering::SeqCst)
            {
                self.closed_after_api_versions
                    .fetch_add(1, Ordering::Relaxed);
                return Action::ForwardThenClose(body);
            }
            return Action::Forward(body);
        };
        let framed = |b: &[u8]| {
            let mut out = BytesMut::with_capacity(b.len() + 4);
            out.put_i32(b.len() as i32);
            out.put_slice(b);
            out.freeze()
        };
        match damage {
            Damage::FlipBit => {
                let mut b = body.to_vec();
                if b.len() > 4 {
                    let bits = (b.len() - 4) as u64 * 8;
                    let bit = 32 + (r % bits) as usize;
                    b[bit / 8] ^= 0x80 >> (bit % 8);
                    if std::env::var_os("ONCEFLOW_HOSTILE_LOG").is_some() {
                        eprintln!(
                            "hostile: api {api} v{version}: bit {} of byte {} of {} flipped",
                            bit % 8,
                            bit / 8,
                            b.len()
                        );
                    }
                }
                Action::Forward(Bytes::from(b))
            }
            Damage::Mangle => {
                // The correlation id, then bytes that are not any response: a tag buffer
                // claiming 127 tagged fields, an error code, an array of length 2^31-1.
                let mut b = body[..4.min(body.len())].to_vec();
                b.extend_from_slice(&[0x7f, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff]);
                Action::Forward(Bytes::from(b))
            }
            Damage::Truncate => {
                let all = framed(&body);
                let keep = 4 + body.len() / 2;
                Action::RawThenClose(all.slice(..keep))
            }
            Damage::WrongCorrelationId => {
                let mut b = body.to_vec();
                if b.len() >= 4 {
                    let cid = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    b[..4].copy_from_slice(&cid.wrapping_add(1_000_000).to_be_bytes());
                }
                Action::Forward(Bytes::from(b))
            }
            Damage::HugeLength => {
                let mut out = BytesMut::with_capacity(body.len() + 4);
                out.put_i32(400 * 1024 * 1024);
                out.put_slice(&body);
                Action::Raw(out.freeze())
            }
            Damage::Trickle => Action::Trickle(framed(&body)),
            Damage::Silence => Action::Silence,
            Damage::OmitPartition => Action::Forward(omit_partition(version, body)),
            Damage::NegativeProducerId => Action::Forward(negative_producer_id(version, body)),
            Damage::OutOfRange => Action::Forward(out_of_range(version, body)),
            Damage::BadBrokerHost => Action::Forward(bad_broker_host(version, body)),
            Damage::Unauthorized => Action::Forward(unauthorized(version, body)),
        }
    }

    /// The Fetch answer with one bit flipped in the middle of its first record batch's
    /// CRC-covered bytes, if it has records and a flip is due.
    fn flip_record_batch(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(ApiKey::Fetch, version, body, |resp: &mut FetchResponse| {
            // A v2 batch: base offset (8), length (4), leader epoch (4), magic (1), CRC (4),
            // then the CRC-covered rest from byte 21.
            let Some(records) = first_records(resp) else {
                return false;
            };
            let first_len = i32::from_be_bytes([records[8], records[9], records[10], records[11]]);
            let end = (12 + first_len.max(0) as usize).min(records.len());
            if end <= 61 || !take(&self.flip_record_batches) {
                return false;
            }
            let mut r = records.to_vec();
            r[61 + (end - 61) / 2] ^= 0x10;
            *records = Bytes::from(r);
            self.record_flips.fetch_add(1, Ordering::Relaxed);
            true
        })
    }

    /// The Fetch answer with its first record batch's base offset moved 2^40 up (bit 40
    /// flipped), if it has records and a shift is due.
    fn shift_base_offset(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(ApiKey::Fetch, version, body, |resp: &mut FetchResponse| {
            let Some(records) = first_records(resp) else {
                return false;
            };
            let bit = self.base_offset_bit.load(Ordering::SeqCst).min(63);
            if self.shift_up_only.load(Ordering::SeqCst) {
                // v2 header: base offset (8), length (4), leader epoch (4), magic (1), CRC (4),
                // attributes (2; bit 5: control).
                let Some(head) = records.get(..23) else {
                    return false;
                };
                let base = i64::from_be_bytes(head[..8].try_into().unwrap());
                let length = i32::from_be_bytes(head[8..12].try_into().unwrap());
                let control = head[22] & 0x20 != 0;
                let set = base & (1 << bit) != 0;
                let alone = records.len() == 12 + length as usize;
                if control || !alone || set {
                    return false;
                }
            }
            if !take(&self.shift_base_offsets) {
                return false;
            }
            let mut r = records.to_vec();
            // Bytes 0..8: the base offset, big-endian (bit 40 is in byte 2).
            r[7 - bit as usize / 8] ^= 1 << (bit % 8);
            *records = Bytes::from(r);
            self.base_offset_shifts.fetch_add(1, Ordering::Relaxed);
            true
        })
    }

    /// The Fetch answer with its session id's sign bit flipped, if it names one and a damage
    /// is due.
    fn damage_session_id(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(ApiKey::Fetch, version, body, |resp: &mut FetchResponse| {
            if resp.session_id <= 0 || !take(&self.damage_session_ids) {
                return false;
            }
            resp.session_id |= i32::MIN;
            self.session_ids_damaged.fetch_add(1, Ordering::Relaxed);
            true
        })
    }

    /// The Fetch answer with a diverging epoch for its first partition with records, if it
    /// has one and a damage is due.
    fn damage_diverging_epoch(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(ApiKey::Fetch, version, body, |resp: &mut FetchResponse| {
            let Some(p) = resp
                .responses
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .find(|p| p.records.as_ref().is_some_and(|r| r.len() > 61))
            else {
                return false;
            };
            if !take(&self.damage_diverging_epochs) {
                return false;
            }
            p.diverging_epoch.epoch = 17_462_833;
            p.diverging_epoch.end_offset = 3_834_587_484_168_126_476;
            self.diverging_epochs_damaged
                .fetch_add(1, Ordering::Relaxed);
            true
        })
    }

    /// The Fetch answer with every listed aborted transaction's producer id altered, if it
    /// lists one and a damage is due.
    fn damage_aborted_list(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(ApiKey::Fetch, version, body, |resp: &mut FetchResponse| {
            let lists = || {
                resp.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .any(|p| {
                        p.aborted_transactions
                            .as_ref()
                            .is_some_and(|a| !a.is_empty())
                    })
            };
            // Every listed transaction began before its partition's data (the data's first
            // batch: its base offset is the first 8 bytes).
            let begun_before = || {
                resp.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .filter_map(|p| Some((p.aborted_transactions.as_ref()?, p.records.as_ref()?)))
                    .all(|(list, records)| {
                        let base = records
                            .get(..8)
                            .and_then(|b| <[u8; 8]>::try_from(b).ok())
                            .map_or(i64::MIN, i64::from_be_bytes);
                        list.iter().all(|a| a.first_offset < base)
                    })
            };
            if !lists()
                || (self.aborted_lists_begun_before.load(Ordering::SeqCst) && !begun_before())
                || !take(&self.damage_aborted_lists)
            {
                return false;
            }
            for a in resp
                .responses
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .filter_map(|p| p.aborted_transactions.as_mut())
                .flatten()
            {
                a.producer_id.0 ^= 1;
            }
            self.aborted_lists_damaged.fetch_add(1, Ordering::Relaxed);
            true
        })
    }

    /// The Metadata answer with every topic id altered, if it names one and a damage is due.
    fn damage_topic_id(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(
            ApiKey::Metadata,
            version,
            body,
            |resp: &mut MetadataResponse| {
                let named = resp.topics.iter().any(|t| t.topic_id != Uuid::nil());
                if !named || !take(&self.damage_topic_ids) {
                    return false;
                }
                for t in resp.topics.iter_mut() {
                    let mut id = *t.topic_id.as_bytes();
                    id[15] ^= 0x01;
                    t.topic_id = Uuid::from_bytes(id);
                }
                self.topic_ids_damaged.fetch_add(1, Ordering::Relaxed);
                true
            },
        )
    }

    /// The Metadata answer with the last partition of a topic of two or more listed under
    /// another index, if one is due.
    fn damage_partition_index(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(
            ApiKey::Metadata,
            version,
            body,
            |resp: &mut MetadataResponse| {
                let Some(t) = resp.topics.iter_mut().find(|t| t.partitions.len() >= 2) else {
                    return false;
                };
                if !take(&self.damage_partition_indexes) {
                    return false;
                }
                if let Some(p) = t.partitions.iter_mut().max_by_key(|p| p.partition_index) {
                    p.partition_index |= 2;
                }
                self.partition_indexes_damaged
                    .fetch_add(1, Ordering::Relaxed);
                true
            },
        )
    }

    /// The JoinGroup answer of the leader naming someone else the leader, or with its member
    /// list's ids altered, if one is due.
    fn damage_leader_id(&self, version: i16, body: Bytes) -> Bytes {
        edit_response(
            ApiKey::JoinGroup,
            version,
            body,
            |resp: &mut JoinGroupResponse| {
                if resp.members.is_empty() {
                    false
                } else if take(&self.damage_leader_ids) {
                    resp.leader = StrBytes::from_string(format!("{}!", resp.leader));
                    self.leader_ids_damaged.fetch_add(1, Ordering::Relaxed);
                    true
                } else if take(&self.damage_listed_ids) {
                    for m in resp.members.iter_mut() {
                        m.member_id = StrBytes::from_string(format!("{}!", m.member_id));
                    }
                    self.listed_ids_damaged.fetch_add(1, Ordering::Relaxed);
                    true
                } else {
                    false
                }
            },
        )
    }

    /// The SyncGroup answer with the topic `damage_assigned_topic` names altered in its
    /// assignment (the bytes of the name, wherever they are: the assignment is opaque bytes
    /// to the coordinator), if it is due.
    fn damage_assigned_topic(&self, body: Bytes) -> Bytes {
        let body = self.damage_assigned_partition(body);
        let mut due = self.damage_assigned_topic.lock().unwrap();
        let Some(topic) = due.as_deref() else {
            return body;
        };
        let name = topic.as_bytes();
        let Some(at) = body.windows(name.len()).position(|w| w == name) else {
            return body;
        };
        let mut b = body.to_vec();
        b[at + name.len() - 1] = b'?';
        *due = None;
        self.assigned_topics_damaged.fetch_add(1, Ordering::Relaxed);
        Bytes::from(b)
    }

    /// The SyncGroup answer with the first partition assigned of the topic
    /// `damage_assigned_partition` names moved 2048 up, if it is due. In the consumer
    /// protocol's assignment (not a flexible version) the topic name is followed by the
    /// partition count (4 bytes) and the partitions (4 bytes each).
    fn damage_assigned_partition(&self, body: Bytes) -> Bytes {
        let mut due = self.damage_assigned_partition.lock().unwrap();
        let Some(topic) = due.as_deref() else {
            return body;
        };
        let name = topic.as_bytes();
        let Some(at) = body.windows(name.len()).position(|w| w == name) else {
            return body;
        };
        let first = at + name.len() + 4;
        if body.len() < first + 4 {
            return body;
        }
        let mut b = body.to_vec();
        b[first + 2] ^= 0x08;
        *due = None;
        self.assigned_partitions_damaged
            .fetch_add(1, Ordering::Relaxed);
        Bytes::from(b)
    }

    /// An ApiVersions answer without the API `strip_from_api_versions` names, if it is due.
    fn strip_api_versions(&self, version: i16, body: Bytes) -> Bytes {
        let Some(api) = *self.strip.lock().unwrap() else {
            return body;
        };
        let due = self
            .strip_times
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                0 => None,
                u32::MAX => Some(n),
                n => Some(n - 1),
            })
            .is_ok();
        if !due {
            return body;
        }
        // ApiVersions answers always have header v0, whatever their version (KIP-511).
        let mut buf = body.clone();
        let Ok(header) = ResponseHeader::decode(&mut buf, 0) else {
            return body;
        };
        let Ok(mut resp) = ApiVersionsResponse::decode(&mut buf, version) else {
            return body;
        };
        resp.api_keys.retain(|k| k.api_key != api as i16);
        self.stripped.fetch_add(1, Ordering::Relaxed);
        let mut out = BytesMut::new();
        header.encode(&mut out, 0).unwrap();
        resp.encode(&mut out, version).unwrap();
        out.freeze()
    }
}

/// `body`, the response to `api` at `version`, decoded, changed by `edit`, and encoded again;
/// unchanged when it does not decode or `edit` changed nothing (returned false).
fn edit_response<R: Decodable + Encodable>(
    api: ApiKey,
    version: i16,
    body: Bytes,
    edit: impl FnOnce(&mut R) -> bool,
) -> Bytes {
    let hv = api.response_header_version(version);
    let mut buf = body.clone();
    let Ok(header) = ResponseHeader::decode(&mut buf, hv) else {
        return body;
    };
    let Ok(mut resp) = R::decode(&mut buf, version) else {
        return body;
    };
    if !edit(&mut resp) {
        return body;
    }
    let mut out = BytesMut::new();
    header.encode(&mut out, hv).unwrap();
    resp.encode(&mut out, version).unwrap();
    out.freeze()
}

/// Takes one of the `n` damages still due; false when none is.
fn take(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// The records of the first partition of a Fetch answer with more than a batch header's worth.
fn first_records(resp: &mut FetchResponse) -> Option<&mut Bytes> {
    resp.responses
        .iter_mut()
        .flat_map(|t| t.partitions.iter_mut())
        .filter_map(|p| p.records.as_mut())
        .find(|r| r.len() > 61)
}

/// A Produce answer without its last partition.
fn omit_partition(version: i16, body: Bytes) -> Bytes {
    edit_response(
        ApiKey::Produce,
        version,
        body,
        |resp: &mut ProduceResponse| {
            if let Some(t) = resp.responses.last_mut() {
                t.partition_responses.pop();
            }
            true
        },
    )
}

/// A ListOffsets answer with 16 added to every offset it gives.
fn shift_list_offsets(version: i16, body: Bytes, by: i64) -> Bytes {
    edit_response(
        ApiKey::ListOffsets,
        version,
        body,
        |resp: &mut ListOffsetsResponse| {
            for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                if p.offset >= 0 {
                    p.offset += by;
                }
            }
            true
        },
    )
}

/// A Metadata answer whose brokers all have a host name that cannot be resolved.
fn bad_broker_host(version: i16, body: Bytes) -> Bytes {
    edit_response(
        ApiKey::Metadata,
        version,
        body,
        |resp: &mut MetadataResponse| {
            for b in resp.brokers.iter_mut() {
                b.host = StrBytes::from_static_str("127.0.0.!");
            }
            true
        },
    )
}

/// An InitProducerId answer whose producer id has its sign bit flipped.
fn negative_producer_id(version: i16, body: Bytes) -> Bytes {
    edit_response(
        ApiKey::InitProducerId,
        version,
        body,
        |resp: &mut InitProducerIdResponse| {
            resp.producer_id.0 |= i64::MIN;
            true
        },
    )
}

/// An InitProducerId answer saying CLUSTER_AUTHORIZATION_FAILED (31), as a broker does to a
/// principal without IdempotentWrite on the cluster.
fn unauthorized(version: i16, body: Bytes) -> Bytes {
    edit_response(
        ApiKey::InitProducerId,
        version,
        body,
        |resp: &mut InitProducerIdResponse| {
            resp.error_code = 31;
            resp.producer_id.0 = -1;
            resp.producer_epoch = -1;
            true
        },
    )
}

/// A Fetch answer whose partitions all say OFFSET_OUT_OF_RANGE, records dropped.
fn out_of_range(version: i16, body: Bytes) -> Bytes {
    edit_response(ApiKey::Fetch, version, body, |resp: &mut FetchResponse| {
        for p in resp
            .responses
            .iter_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            p.error_code = 1;
            p.records = None;
        }
        true
    })
}
