//! Job (b), per driver and hour, in cluster mode under the chaos a user brings, checked against
//! an expectation this file computes from its own input (not the engine's code, not `taxi
//! verify`):
//!
//! - **Input the suite's generator never makes**: ride events of this file's own generator
//!   (drivers, passengers and event times of its seeded RNG; every event up to 50 s older than
//!   the newest before it, under the job's 60 s out-of-orderness, so no record may be late),
//!   over 3 partitions in turn, produced while the members run (ONCEFLOW_CHAOS_QUIET=1: now
//!   and then one partition goes quiet for 1.5–3 s while the others go on, so its source
//!   calls it idle, then resumes with current events).
//! - **Three members started together on fresh state**: the first rebalance, with input already
//!   arriving and nothing committed yet, is where the chaos starts: a member is SIGKILLed 50–800
//!   ms after it joins, before anything is committed.
//! - **Kills, kills during recovery, pauses**: at random (seeded) moments a member is
//!   SIGKILLed and restarted on its state directory, half the time killed again 50–800 ms into
//!   its recovery; or SIGSTOPped for 7–10 s, past its 6 s session (a zombie with an open
//!   transaction when it resumes).
//! - **The broker SIGKILLed and restarted** once, half way (a private broker: the shared one
//!   serves the other tests). A member that gives up meanwhile (its rejoins without a commit
//!   ran out) is started again, as its supervisor would; none may panic.
//!
//! Then one event per partition two hours later closes every real window, the members are
//! stopped with SIGTERM, and the output read `read_committed` must hold each expected window
//! (driver, hour) exactly once with its exact ride and passenger counts, and nothing else. The
//! job writes late records to a late topic: none may be there (a loss shows up as a window short
//! of rides, and the late topic tells whether the records were dropped as late).
//!
//! ONCEFLOW_CHAOS_SEED replays a run; ONCEFLOW_CHAOS_KILLS (default 8 actions),
//! ONCEFLOW_CHAOS_EVENTS (default 8,000) and ONCEFLOW_CHAOS_RATE (events/s, default 250) size
//! it; ONCEFLOW_CHAOS_STEP_MS (1,080) and ONCEFLOW_CHAOS_DISORDER_MS (50,000) shape the event
//! times; ONCEFLOW_CHAOS_INTERVAL_MS (200) and ONCEFLOW_CHAOS_HEARTBEAT_MS (500) are the
//! members' checkpoint interval and heartbeat. ONCEFLOW_CHAOS_KEEP_BROKER=1 leaves the broker
//! running on its data when the output is wrong (with ONCEFLOW_CHAOS_LOG=onceflow=debug the
//! members log every commit's offsets). `scripts/long-scenarios` runs the long form (the 40,000 events and 25 actions).
//! Transactional: run at TV2 and TV1, on a private broker (19562, or 20562 at TV1;
//! ONCEFLOW_CHAOS_PORT moves it, for runs side by side).

use crate::engine_members::{cluster_job_with, Members, SESSION_MS};
use crate::engine_run::{chaos_seed, log_of, DEADLINE};
use crate::support::broker::PrivateBroker;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Consumer, Producer, ProducerRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const PORT: u16 = 19562;
const HOUR_MS: i64 = 3_600_000;
/// The generator's drivers; the sentinel events that close the last windows use another.
const DRIVERS: u64 = 150;
const SENTINEL_DRIVER: u64 = 1_000_000;
/// 2026-01-01T00:00:00Z: the first event's time.
const EPOCH_MS: i64 = 1_767_225_600_000;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One ride event of this file's generator.
#[derive(Debug, Clone)]
struct Event {
    ride_id: u64,
    is_start: bool,
    driver_id: u64,
    event_time: i64,
    passengers: u64,
}

impl Event {
    fn json(&self) -> String {
        format!(
            "{{\"ride_id\":{},\"is_start\":{},\"driver_id\":{},\"event_time\":{},\"passengers\":{}}}",
            self.ride_id, self.is_start, self.driver_id, self.event_time, self.passengers
        )
    }
}

/// `n` events: a clock that moves 0–2·`step_ms` per event (`step_ms` on average: 1,080 ms
/// makes 40,000 events span 12 hours), each event stamped up to `disorder_ms` (under the
/// job's 60 s out-of-orderness) before the clock.
fn events(seed: u64, n: u64, step_ms: i64, disorder_ms: i64) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_cafe);
    let mut clock = EPOCH_MS;
    (0..n)
        .map(|i| {
            clock += rng.random_range(0..=2 * step_ms);
            Event {
                ride_id: i,
                is_start: rng.random_bool(0.5),
                driver_id: rng.random_range(0..DRIVERS),
                event_time: clock - rng.random_range(0..=disorder_ms),
                passengers: rng.random_range(1..=6),
            }
        })
        .collect()
}

/// (driver, window start) → (rides, passengers): the END events per driver and hour.
type Windows = BTreeMap<(u64, i64), (u64, u64)>;

/// One output record: (driver, window start) and (rides, passengers).
pub(crate) type Written = ((u64, i64), (u64, u64));

fn expected(events: &[Event]) -> Windows {
    let mut w = Windows::new();
    for e in events.iter().filter(|e| !e.is_start) {
        let start = e.event_time - e.event_time.rem_euclid(HOUR_MS);
        let c = w.entry((e.driver_id, start)).or_default();
        c.0 += 1;
        c.1 += e.passengers;
    }
    w
}

/// Produces `events` to `topic` at `rate` per second (keyed by ride), spread over the 3
/// partitions in turn; with `quiet_periods`, now and then one partition goes quiet for
/// 1.5–3 s (the others take its share): long enough for its source to call it idle while the
/// others go on.
/// Then one END event of the sentinel driver per partition, two hours past the last event:
/// every partition's watermark then passes every real window's end.
fn feed(
    broker: String,
    topic: String,
    events: Vec<Event>,
    rate: u64,
    seed: u64,
    quiet_periods: bool,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xfeed);
        let props = [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
            ("delivery.timeout.ms", "300000"),
        ];
        let producer = Producer::new(producer_config(&broker, &props))
            .await
            .unwrap();
        let start = Instant::now();
        let mut pending = Vec::new();
        let last = events
            .iter()
            .map(|e| e.event_time)
            .max()
            .unwrap_or(EPOCH_MS);
        let sentinels = (0..3).map(|p| {
            let e = Event {
                ride_id: u64::MAX - p,
                is_start: false,
                driver_id: SENTINEL_DRIVER,
                event_time: last + 2 * HOUR_MS,
                passengers: 1,
            };
            ProducerRecord::new(topic.clone(), Bytes::from(e.json())).with_partition(p as i32)
        });
        let records: Vec<ProducerRecord> = events
            .iter()
            .map(|e| {
                ProducerRecord::new(topic.clone(), Bytes::from(e.json()))
                    .with_key(Bytes::from(e.ride_id.to_string()))
            })
            .chain(sentinels)
            .collect();
        let total = records.len();
        let mut quiet: Option<(i32, Instant)> = None;
        let mut next_quiet = start + Duration::from_millis(rng.random_range(1_000..4_000));
        let mut turn = 0i32;
        for (i, mut record) in records.into_iter().enumerate() {
            let due = start + Duration::from_millis(i as u64 * 1000 / rate.max(1));
            tokio::time::sleep_until(due.into()).await;
            let now = Instant::now();
            if quiet.is_some_and(|(_, until)| now >= until) {
                quiet = None;
                next_quiet = now + Duration::from_millis(rng.random_range(1_000..4_000));
            }
            if quiet_periods && quiet.is_none() && now >= next_quiet {
                let quiet_for = Duration::from_millis(rng.random_range(1_500..3_000));
                quiet = Some((rng.random_range(0..3), now + quiet_for));
            }
            if record.partition.is_none() && i + 3 < total {
                turn = (turn + 1) % 3;
                if quiet.is_some_and(|(p, _)| p == turn) {
                    turn = (turn + 1) % 3;
                }
                record = record.with_partition(turn);
            }
            // A send refused while the broker is away (the buffer full) is sent again: it was
            // never queued.
            let refused = Instant::now();
            loop {
                match producer.send(record.clone()).await {
                    Ok(f) => break pending.push(f),
                    Err(e) if refused.elapsed() < DEADLINE => {
                        eprintln!("cluster chaos feeder: {e}; sending again");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("cluster chaos feeder: sends refused for {DEADLINE:?}: {e}"),
                }
            }
        }
        producer.flush().await.unwrap();
        for f in pending {
            f.await.unwrap();
        }
        producer.close().await.unwrap();
    })
}

/// The output's windows as read `read_committed` so far: every record, in read order.
pub(crate) struct OutputReader {
    consumer: Consumer,
    pub(crate) read: Vec<Written>,
}

impl OutputReader {
    /// How many times each driver's window starting at `window_start` was read.
    pub(crate) fn per_driver(&self, window_start: i64) -> std::collections::BTreeMap<u64, usize> {
        let mut n = std::collections::BTreeMap::new();
        for ((d, s), _) in &self.read {
            if *s == window_start {
                *n.entry(*d).or_default() += 1;
            }
        }
        n
    }

    pub(crate) async fn new(broker: &str, topic: &TestTopic) -> OutputReader {
        let consumer = committed_reader(broker, &topic.tps()).await;
        OutputReader {
            consumer,
            read: Vec::new(),
        }
    }

    /// Reads what is there now (errors while the broker is away are tried again later).
    pub(crate) async fn poll(&mut self) {
        let Ok(records) = self.consumer.poll(Duration::from_millis(300)).await else {
            return;
        };
        for r in records {
            let v: serde_json::Value = serde_json::from_slice(
                r.value.as_deref().unwrap_or_default(),
            )
            .unwrap_or_else(|e| panic!("output record at {}-{}: {e}", r.partition, r.offset));
            let n = |f: &str| {
                v.get(f)
                    .and_then(serde_json::Value::as_i64)
                    .unwrap_or_else(|| panic!("output record without {f}: {v}"))
            };
            self.read.push((
                (n("driver_id") as u64, n("window_start")),
                (n("rides") as u64, n("passengers") as u64),
            ));
        }
    }

    /// Whether every window of `want` was read.
    fn holds(&self, want: &Windows) -> bool {
        let got: std::collections::BTreeSet<&(u64, i64)> =
            self.read.iter().map(|(k, _)| k).collect();
        want.keys().all(|k| got.contains(k))
    }

    /// Reads to the end of every partition.
    pub(crate) async fn read_to_end(&mut self) {
        let start = Instant::now();
        while !self.consumer.at_end() {
            assert!(start.elapsed() < DEADLINE, "the output's end not reached");
            self.poll().await;
        }
    }
}

/// What the output holds against the expectation; empty when exact.
fn differences(want: &Windows, read: &[Written]) -> Vec<String> {
    let mut got: BTreeMap<(u64, i64), Vec<(u64, u64)>> = BTreeMap::new();
    for (k, v) in read {
        got.entry(*k).or_default().push(*v);
    }
    let hour = |start: i64| (start - EPOCH_MS) / HOUR_MS;
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    let mut duplicated = Vec::new();
    for (k, w) in want {
        match got.get(k).map(Vec::as_slice) {
            None => missing.push(format!("driver {} hour {}", k.0, hour(k.1))),
            Some([v]) if v == w => {}
            Some([v]) => wrong.push(format!(
                "driver {} hour {}: {} rides / {} passengers, the input has {} / {}",
                k.0,
                hour(k.1),
                v.0,
                v.1,
                w.0,
                w.1
            )),
            Some(vs) => duplicated.push(format!("driver {} hour {}: {vs:?}", k.0, hour(k.1))),
        }
    }
    let unexpected: Vec<String> = got
        .iter()
        .filter(|(k, _)| !want.contains_key(k))
        .map(|(k, v)| format!("driver {} hour {}: {v:?}", k.0, hour(k.1)))
        .collect();
    let mut out = Vec::new();
    for (what, list) in [
        ("missing", missing),
        ("wrong", wrong),
        ("duplicated", duplicated),
        ("unexpected", unexpected),
    ] {
        if !list.is_empty() {
            let first: Vec<&String> = list.iter().take(8).collect();
            out.push(format!("{} {what} (first: {first:?})", list.len()));
        }
    }
    out
}

/// How many records the late topic holds (read_committed).
async fn late_count(broker: &str, topic: &TestTopic) -> usize {
    let mut c = committed_reader(broker, &topic.tps()).await;
    let start = Instant::now();
    let mut n = 0;
    while !c.at_end() && start.elapsed() < DEADLINE {
        n += c
            .poll(Duration::from_millis(300))
            .await
            .map_or(0, |r| r.len());
    }
    n
}

/// Starts every member that exited again (its supervisor's job), noting it. Only the broker's
/// absence may stop a member (its rejoins without a commit run out): an exit before the broker
/// was killed fails the test (members started together once lost the race to create the
/// internal topics and stopped so, hidden by the restart).
fn restart_exited(ms: &mut Members) {
    for i in 0..ms.members.len() {
        let exited = ms.members[i]
            .child
            .as_mut()
            .and_then(|c| c.try_wait().unwrap());
        if let Some(status) = exited {
            assert!(
                ms.events.iter().any(|e| e == "broker SIGKILLed"),
                "{} exited ({status}) before the broker was killed: {}",
                ms.members[i].name,
                ms.context()
            );
            ms.members[i].child = None;
            let what = format!("{} exited ({status}), started again", ms.members[i].name);
            ms.note(what);
            ms.start(i);
        }
    }
}

/// SIGKILLs member `i` `after` the current run logged `needle` (a moment of its recovery),
/// then starts it again after `down`.
async fn kill_after(ms: &mut Members, i: usize, needle: &str, after: Duration, down: Duration) {
    // A member may get no task for a long while (three members, six partitions, rebalances
    // one after another): after a minute without the line it is killed where it is.
    let start = Instant::now();
    while !log_of(&ms.members[i].log).contains(needle) {
        restart_exited(ms);
        if start.elapsed() > Duration::from_secs(60) {
            let what = format!("{} never logged {needle:?}", ms.members[i].name);
            ms.note(what);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(after).await;
    let what = format!("{} ms after {needle:?}:", after.as_millis());
    ms.note(what);
    ms.kill_and_restart(i, down).await;
}

/// SIGSTOP for `pause` (past the session timeout), then SIGCONT.
async fn pause(ms: &mut Members, i: usize, pause: Duration) {
    ms.signal(i, "-STOP");
    let what = format!("pause {} for {} ms", ms.members[i].name, pause.as_millis());
    ms.note(what);
    tokio::time::sleep(pause).await;
    ms.signal(i, "-CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_started_together_under_kills_pauses_and_a_broker_kill_count_every_ride_once()
{
    // Not the heavy turn: three members at a few hundred events a second are light, and no
    // step depends on timing the load could stretch (the pauses outlast the session by a
    // second or more; every wait is for a condition).
    let seed = chaos_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let actions = env_or("ONCEFLOW_CHAOS_KILLS", 8).max(3);
    let n = env_or("ONCEFLOW_CHAOS_EVENTS", 8_000);
    let rate = env_or("ONCEFLOW_CHAOS_RATE", 250);
    let port = u16::try_from(env_or("ONCEFLOW_CHAOS_PORT", u64::from(PORT))).unwrap_or(PORT);
    let broker = tokio::task::block_in_place(|| PrivateBroker::start(port));
    let addr = broker.addr.clone();
    let label = "cluster-chaos";
    let dir = std::env::temp_dir().join(unique_topic(&format!("onceflow-{label}")));
    std::fs::create_dir_all(&dir).unwrap();
    let input = TestTopic::create_with(&addr, "cluster-chaos-in", 3, &[]).await;
    let output = TestTopic::create_with(&addr, "cluster-chaos-out", 3, &[]).await;
    let late = TestTopic::create_with(&addr, "cluster-chaos-late", 1, &[]).await;
    let name = unique_topic(label);
    let job = cluster_job_with(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &name,
        &[
            (
                "# window.late_topic",
                format!("window.late_topic = \"{}\"", late.name),
            ),
            (
                "checkpoint.interval.ms = ",
                format!(
                    "checkpoint.interval.ms = {}",
                    env_or("ONCEFLOW_CHAOS_INTERVAL_MS", 200)
                ),
            ),
        ],
    );
    let step = env_or("ONCEFLOW_CHAOS_STEP_MS", 1_080) as i64;
    let disorder = (env_or("ONCEFLOW_CHAOS_DISORDER_MS", 50_000) as i64).min(59_000);
    let input_events = events(seed, n, step, disorder);
    let want = expected(&input_events);
    let mut ms = Members::on(label, (job, dir.clone()), &addr, seed, &[]);
    ms.heartbeat_ms = env_or("ONCEFLOW_CHAOS_HEARTBEAT_MS", 500);
    let started = Instant::now();
    // Input arrives while the three members first join.
    let quiet = env_or("ONCEFLOW_CHAOS_QUIET", 0) == 1;
    let feeder = feed(
        addr.clone(),
        input.name.clone(),
        input_events,
        rate,
        seed,
        quiet,
    );
    for i in 0..3 {
        ms.start(i);
    }
    // The first rebalance: a member killed before the group committed anything.
    let first = rng.random_range(0..3);
    let after = Duration::from_millis(rng.random_range(50..800));
    let down = Duration::from_millis(rng.random_range(0..1_000));
    kill_after(&mut ms, first, "member joining", after, down).await;
    let session = Duration::from_millis(SESSION_MS);
    for step in 0..actions {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..2_500))).await;
        restart_exited(&mut ms);
        let i = rng.random_range(0..3);
        if step == actions / 2 {
            ms.note("broker SIGKILLed".into());
            tokio::task::block_in_place(|| broker.run("kill"));
            let start = Instant::now();
            while tokio::net::TcpStream::connect(&addr).await.is_ok() {
                assert!(
                    start.elapsed() < DEADLINE,
                    "{addr} still answers after its kill"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..2_000))).await;
            tokio::task::block_in_place(|| broker.run("start"));
            ms.note("broker started again".into());
        } else if rng.random_bool(0.35) {
            let p = session + Duration::from_millis(rng.random_range(1_000..4_000));
            pause(&mut ms, i, p).await;
        } else {
            let down = Duration::from_millis(rng.random_range(0..1_500));
            ms.kill_and_restart(i, down).await;
            if rng.random_bool(0.5) {
                // Killed again during its recovery.
                let after = Duration::from_millis(rng.random_range(50..800));
                let down = Duration::from_millis(rng.random_range(0..1_000));
                let needle = [
                    "cluster member starting",
                    "member joining",
                    "tasks assigned",
                ][rng.random_range(0..3)];
                kill_after(&mut ms, i, needle, after, down).await;
            }
        }
    }
    let feeding = Instant::now();
    while !feeder.is_finished() {
        restart_exited(&mut ms);
        assert!(
            feeding.elapsed() < DEADLINE,
            "the feed did not end within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    feeder.await.unwrap();
    // Every expected window written, then the members stopped, then the whole output read.
    let mut out = OutputReader::new(&addr, &output).await;
    let waiting = Instant::now();
    while !out.holds(&want) {
        restart_exited(&mut ms);
        if waiting.elapsed() > DEADLINE {
            break; // the comparison below names what is missing
        }
        out.poll().await;
    }
    for i in 0..ms.members.len() {
        if ms.members[i].child.is_some() {
            ms.leave(i).await;
        }
    }
    out.read_to_end().await;
    let late_records = late_count(&addr, &late).await;
    let panicked: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log") && log_of(p).contains("panicked"))
        .map(|p| p.display().to_string())
        .collect();
    let diff = differences(&want, &out.read);
    let summary = format!(
        "{label} (seed {seed}): {} windows expected, {} output records, {late_records} late; {} events in {} s; events {:?}",
        want.len(),
        out.read.len(),
        n,
        started.elapsed().as_secs(),
        ms.events
    );
    eprintln!("{summary}");
    if (!diff.is_empty() || late_records > 0) && env_or("ONCEFLOW_CHAOS_KEEP_BROKER", 0) == 1 {
        // For the post-mortem: the broker keeps running on its data (repartition topic,
        // changelog, the group's offsets) and the members' logs stay.
        eprintln!(
            "{label}: broker left running at {addr}, logs in {}",
            dir.display()
        );
        std::mem::forget(broker);
        std::mem::forget((input, output, late));
    }
    assert!(
        panicked.is_empty(),
        "members panicked: {panicked:?}\n{}",
        ms.context()
    );
    assert!(
        diff.is_empty() && late_records == 0,
        "{summary}\nthe output is not exactly the input's windows: {diff:?}\n{}",
        ms.context()
    );
    drop(ms);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_out_of_order_by_less_than_the_jobs_sixty_seconds() {
        let e = events(7, 5_000, 1_080, 50_000);
        let mut newest = e[0].event_time;
        for x in &e {
            assert!(x.event_time > newest - 60_000, "{x:?} after {newest}");
            newest = newest.max(x.event_time);
        }
        let span = e.last().unwrap().event_time - e[0].event_time;
        assert!(span > HOUR_MS, "{span}");
    }

    #[test]
    fn the_comparison_names_missing_short_duplicated_and_unexpected_windows() {
        let want: Windows = [((1, 0), (2, 5)), ((2, 0), (1, 1)), ((3, 0), (1, 2))].into();
        let read = vec![
            ((1, 0), (1, 3)),
            ((3, 0), (1, 2)),
            ((3, 0), (1, 2)),
            ((9, 0), (1, 1)),
        ];
        let d = differences(&want, &read).join("; ");
        for part in ["1 missing", "1 wrong", "1 duplicated", "1 unexpected"] {
            assert!(d.contains(part), "{part}: {d}");
        }
        assert!(differences(
            &want,
            &[((1, 0), (2, 5)), ((2, 0), (1, 1)), ((3, 0), (1, 2))]
        )
        .is_empty());
    }
}
