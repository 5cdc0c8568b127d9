//! The engine's chaos test: job (b), rides-per-driver-hourly (windowed, stateful), runs as a
//! child `onceflow run` over taxi rides fed while it runs, and is SIGKILLed again and again on
//! the same state; then a last run catches up and `onceflow taxi verify` must say OK (no loss,
//! no duplicate, order kept per key).
//!
//! The kills, in turn (the seeded RNG picks the moments; the seed is in every failure message
//! and in the summary line; ONCEFLOW_CHAOS_SEED replays one):
//! - `random`: a random moment 0–3 s after the run's first log line (recovery, processing, a
//!   checkpoint);
//! - `persisted`: between "checkpoint persisted" and "transactions committed", proven by the
//!   runtime's test hook (ONCEFLOW_TEST_PAUSE=checkpoint-persisted, see runtime::hook):
//!   the test waits for its marker line in the child's log, then kills;
//! - `unanswered`: between "commit sent" and "commit answered": the job talks through the
//!   test proxy, which holds EndTxn commit responses; the test kills once one is held (the
//!   broker applied the commit, the job never heard so);
//! - `after-output`: as soon as new output is committed (read_committed end offsets grew):
//!   after the commit, before its resolution is durable.
//!
//! ONCEFLOW_CHAOS_KILLS=N overrides the kill count: 8 by default, per transaction version (two
//! of each kind; the test requires that a restart resumed a restored committable, which the
//! persisted and unanswered kills leave); `scripts/long-scenarios` runs the long form (25, or
//! what it is given).
//! Each run prints one summary line to stderr: kills by kind, rides, seed, elapsed.
//!
//! The rides: the `onceflow taxi generate` generator (`onceflow_taxi`'s iterator, same data as
//! `taxi generate --rate 1 --seed S`), produced by the test while the kills go on: each run is
//! granted a little over an hour of event time, so it sees about one window firing (job (b)
//! writes, and so commits, only then) and the backlog stays bounded however slow the machine
//! (the CLI produces its whole data set at once, which the job would finish long before the
//! kills, or lag far behind on a loaded machine).
//!
//! The inverse: the same chaos with delivery.guarantee = "at-least-once" must make the
//! verifier report duplicates. Both again, with fewer kills, over Avro in and out
//! (jobs/rides-per-driver-hourly-avro.toml through the test registry: the feeder writes Avro
//! rides, `taxi verify -s value=avro` reads both ends). And once with the broker (a private one) killed and restarted
//! mid-run. And the driver-shifts job (session windows) under the same kills, with its
//! inverse, and the rides-and-fares join (its fares fed to a second topic beside the rides)
//! with its inverse, and the hourly top drivers by tips (two keyed stages, over the fares
//! alone) with its inverse. Transactional: run at TV2 (9192) and TV1 (9196).

use crate::engine_run::{chaos_seed, job_file, log_of, spawn_run, taxi_at};
use crate::support::broker::PrivateBroker;
use crate::support::cli::{shown, stdout, Guarded};
use crate::support::proxy::Proxy;
use crate::support::registry::registry_url;
use crate::support::*;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use onceflow::client::{Admin, DeliveryFuture, IsolationLevel, Offset, Producer, ProducerRecord};
use onceflow::schema::{AvroSerializer, Part, RegistryConfig, SchemaRegistry};
use onceflow_taxi::fare::fare_of;
use onceflow_taxi::generate::{self, Config};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Input events per second the feeder produces at most.
const FEED_EVENTS_PER_SECOND: u64 = 4000;
/// Input events granted per run: a little over an hour of event time (7200 events at one
/// ride per second), so each run sees about one window firing (a commit) while the backlog
/// stays bounded however slow a loaded machine makes the job.
const EVENTS_PER_RUN: u64 = 9000;
/// The exactly-once runs' checkpoint interval: many checkpoints per run.
const INTERVAL_MS: u64 = 150;
/// How long one wait (a marker, a held commit, a verdict) may take.
const WAIT: Duration = Duration::from_secs(180);
const DEFAULT_KILLS: usize = 8;
/// The Avro runs' kills: four, one of each kind (the JSON runs cover the kinds' races at
/// length; these show the formats do not change the outcome).
const AVRO_KILLS: usize = 4;
/// The driver-shifts runs' kills: four, one of each kind (its last run's catch-up costs
/// about 1.5 times job (b)'s: in CI's first minutes, with every other test running, eight
/// kills took 276 s at TV1).
const SHIFTS_KILLS: usize = 4;
/// The rides-and-fares runs' kills: four, one of each kind.
const JOIN_KILLS: usize = 4;
/// The hourly top tips runs' kills: eight, two of each kind (a run takes seconds).
const TOP_TIPS_KILLS: usize = 8;

/// Where a kill lands (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kill {
    Random,
    Persisted,
    Unanswered,
    AfterOutput,
    /// The broker, not the job (the broker-kill test).
    Broker,
    /// One node of the 3-node cluster, not the job.
    Node,
}

impl Kill {
    fn name(self) -> &'static str {
        match self {
            Kill::Random => "random",
            Kill::Persisted => "persisted",
            Kill::Unanswered => "unanswered",
            Kill::AfterOutput => "after-output",
            Kill::Broker => "broker",
            Kill::Node => "node",
        }
    }
}

fn kill_count() -> usize {
    std::env::var("ONCEFLOW_CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KILLS)
}

/// The log without its ANSI colours.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// "…; 1600 records read, 2000 expected": 1600 (0 when the verdict does not say).
fn records_read(verdict: &str) -> u64 {
    verdict
        .split(" records read")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Produces the generator's ride events to `topic`, at most FEED_EVENTS_PER_SECOND and at most
/// as many as `granted` says so far, until it says `None`; returns the number of rides started
/// (START events).
fn feed(
    broker: String,
    (topic, fares): (String, Option<String>),
    seed: u64,
    avro: Option<AvroSerializer>,
    mut granted: watch::Receiver<Option<u64>>,
) -> JoinHandle<u64> {
    tokio::spawn(async move {
        let config = Config {
            seed,
            rides: 100_000_000,
            rides_per_second: 1,
            ..Config::default()
        };
        let mut events = generate::rides(config).unwrap();
        let props = [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
        ];
        let producer = Producer::new(producer_config(&broker, &props))
            .await
            .unwrap();
        let start = Instant::now();
        let (mut sent, mut rides) = (0u64, 0u64);
        let mut pending: Vec<DeliveryFuture> = Vec::new();
        loop {
            let allowed = *granted.borrow_and_update();
            let Some(allowed) = allowed else { break };
            let paced = start.elapsed().as_millis() as u64 * FEED_EVENTS_PER_SECOND / 1000;
            let due = paced.min(allowed);
            while sent < due {
                let ride = events.next().unwrap();
                rides += u64::from(ride.is_start);
                let value = match &avro {
                    None => Bytes::from(ride.to_json()),
                    Some(avro) => {
                        let json: serde_json::Value =
                            serde_json::from_str(&ride.to_json()).unwrap();
                        Bytes::from(avro.serialize_json(&topic, &json).await.unwrap())
                    }
                };
                let mut records = vec![
                    ProducerRecord::new(topic.clone(), value).with_key(Bytes::from(ride.key()))
                ];
                // The fare goes out beside its ride's START event, as `taxi generate --fares`.
                if let (Some(fares), true) = (&fares, ride.is_start) {
                    let fare = fare_of(&ride, seed);
                    let value = Bytes::from(serde_json::to_vec(&fare).unwrap());
                    records.push(
                        ProducerRecord::new(fares.clone(), value).with_key(Bytes::from(fare.key())),
                    );
                }
                for record in records {
                    // A send refused while the broker is away (the buffer full) is sent again:
                    // it was never queued.
                    let refused = Instant::now();
                    loop {
                        match producer.send(record.clone()).await {
                            Ok(f) => break pending.push(f),
                            Err(e) if refused.elapsed() < WAIT => {
                                eprintln!("chaos feeder: {e}; sending again")
                            }
                            Err(e) => panic!("chaos feeder: sends refused for {WAIT:?}: {e}"),
                        }
                    }
                }
                sent += 1;
            }
            let _ = tokio::time::timeout(Duration::from_millis(20), granted.changed()).await;
        }
        producer.flush().await.unwrap();
        for f in pending {
            f.await.unwrap();
        }
        producer.close().await.unwrap();
        rides
    })
}

/// Waits until nothing listens on `addr` any more (a killed broker's port is closed).
async fn wait_until_closed(addr: &str) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            start.elapsed() < WAIT,
            "{addr} still accepts connections after its broker was killed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One chaos scenario: its topics, job file, proxy, feeder and tallies.
struct Chaos {
    label: &'static str,
    seed: u64,
    rng: StdRng,
    /// The real broker (feeder, verifier); the job talks through the proxy.
    broker: String,
    proxy: Proxy,
    /// What the job is given as `-b`: the proxy, or the cluster's three addresses.
    job_bootstrap: String,
    input: TestTopic,
    /// The fares topic, for the jobs that read fares.
    fares: Option<TestTopic>,
    /// Whether the job reads the rides (else the fares are its input).
    reads_rides: bool,
    output: TestTopic,
    dir: PathBuf,
    job: PathBuf,
    runs: usize,
    kills: BTreeMap<Kill, usize>,
    /// Runs whose recovery resumed (committed) at least one restored committable.
    resumed: usize,
    /// Runs that exited by themselves and were started again (broker-kill test only).
    restarts: usize,
    /// Events the feeder may have produced so far; `None` stops it.
    granted: watch::Sender<Option<u64>>,
    feeder: Option<JoinHandle<u64>>,
    start: Instant,
    /// The registry's URL when the job reads and writes Avro (the shipped Avro job).
    registry: Option<String>,
    /// `taxi verify --job`: the shipped job that runs.
    verified: &'static str,
}

/// A shipped job the chaos runs: its file in jobs/ and its `taxi verify --job` name.
#[derive(Debug, Clone, Copy)]
struct Shipped {
    file: &'static str,
    verified: &'static str,
    /// Whether it reads a fares topic (fed beside the rides).
    fares: bool,
    /// Whether it reads the rides (a job of the fares alone does not).
    rides: bool,
    /// The parallelism it runs at (the job file's when 1).
    parallelism: u32,
}

/// Job (b), hourly tumbling windows.
const HOURLY: Shipped = Shipped {
    file: "rides-per-driver-hourly.toml",
    verified: "per-driver-hourly",
    fares: false,
    rides: true,
    parallelism: 1,
};
/// Job (b) over Avro.
const HOURLY_AVRO: Shipped = Shipped {
    file: "rides-per-driver-hourly-avro.toml",
    verified: "per-driver-hourly",
    fares: false,
    rides: true,
    parallelism: 1,
};
/// Each driver's shifts: session windows (merging, their timers anywhere in time), the SQL
/// form (its job file runs under the cluster chaos of engine_members).
const SHIFTS: Shipped = Shipped {
    file: "driver-shifts.sql",
    verified: "driver-shifts",
    fares: false,
    rides: true,
    parallelism: 1,
};
/// Each ride enriched with its fare: an interval join of two topics.
const RIDES_AND_FARES: Shipped = Shipped {
    file: "rides-and-fares.toml",
    verified: "rides-and-fares",
    fares: true,
    rides: true,
    parallelism: 1,
};
/// The three drivers with the most tips each hour: two keyed stages (each driver's hourly sum,
/// then the hour's ranking) over the fares alone.
const TOP_TIPS: Shipped = Shipped {
    file: "hourly-top-drivers-by-tips.toml",
    verified: "hourly-top-drivers-by-tips",
    fares: true,
    rides: false,
    // Two subtasks per stage: barriers and watermarks cross between the stages' subtasks.
    parallelism: 2,
};

impl Chaos {
    /// Topics, the job file (checkpoint interval and guarantee set), the proxy; feeding.
    async fn new(label: &'static str, broker: &str, guarantee: &str, interval_ms: u64) -> Chaos {
        Chaos::of(label, broker, HOURLY, (guarantee, interval_ms), None).await
    }

    /// [`Self::new`] of the driver-shifts job (jobs/driver-shifts.toml).
    async fn shifts(label: &'static str, guarantee: &str, interval_ms: u64) -> Chaos {
        Chaos::of(label, &broker(), SHIFTS, (guarantee, interval_ms), None).await
    }

    /// [`Self::new`] of the rides-and-fares join (jobs/rides-and-fares.toml), its fares fed
    /// to a second topic beside the rides.
    async fn rides_and_fares(label: &'static str, guarantee: &str, interval_ms: u64) -> Chaos {
        let shipped = RIDES_AND_FARES;
        Chaos::of(label, &broker(), shipped, (guarantee, interval_ms), None).await
    }

    /// [`Self::new`] of the hourly top drivers by tips (jobs/hourly-top-drivers-by-tips.toml),
    /// which reads the fares alone.
    async fn top_tips(label: &'static str, guarantee: &str, interval_ms: u64) -> Chaos {
        Chaos::of(label, &broker(), TOP_TIPS, (guarantee, interval_ms), None).await
    }

    /// [`Self::new`] of job (b) over Avro (`jobs/rides-per-driver-hourly-avro.toml`): the
    /// feeder writes Avro rides through the test registry, the verifier reads both ends so.
    async fn avro(label: &'static str, guarantee: &str, interval_ms: u64) -> Chaos {
        let url = registry_url().await.to_owned();
        Chaos::of(
            label,
            &broker(),
            HOURLY_AVRO,
            (guarantee, interval_ms),
            Some(url),
        )
        .await
    }

    async fn of(
        label: &'static str,
        broker: &str,
        shipped: Shipped,
        (guarantee, interval_ms): (&str, u64),
        registry: Option<String>,
    ) -> Chaos {
        let seed = chaos_seed();
        eprintln!("chaos {label}: seed {seed} (ONCEFLOW_CHAOS_SEED={seed} replays it)");
        let input = TestTopic::create_with(broker, "chaos-in", 3, &[]).await;
        let fares = match shipped.fares {
            true => Some(TestTopic::create_with(broker, "chaos-fares", 3, &[]).await),
            false => None,
        };
        let output = TestTopic::create_with(broker, "chaos-out", 3, &[]).await;
        let dir = std::env::temp_dir().join(unique_topic("onceflow-chaos"));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = unique_topic("chaos");
        if let Some(sink) = shipped.file.strip_suffix(".sql") {
            // A SQL job: its sink topic is its file's name.
            let mut topics = vec![("rides", input.name.as_str()), (sink, output.name.as_str())];
            if let Some(f) = &fares {
                topics.push(("fares", f.name.as_str()));
            }
            let sets = [("checkpoint.interval.ms", interval_ms.to_string())];
            let rewrite = crate::engine_run::SqlRewrite {
                topics: &topics,
                guarantee,
                prefix: &prefix,
                source_options: "",
                sets: &sets,
            };
            crate::engine_run::sql_job_file(&dir, shipped.file, &rewrite);
        }
        let job = match shipped.file.ends_with(".sql") {
            true => dir.join(shipped.file),
            false => job_file(&dir, shipped.file, &input.name, &output.name, &prefix),
        };
        let text = std::fs::read_to_string(&job).unwrap();
        let schemas = repo().join("fixtures/schemas");
        let text: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("checkpoint.interval.ms = ") {
                    format!("checkpoint.interval.ms = {interval_ms}")
                } else if l.starts_with("parallelism = ") && shipped.parallelism > 1 {
                    format!("parallelism = {}", shipped.parallelism)
                } else if l.starts_with("delivery.guarantee = ") {
                    format!("delivery.guarantee = \"{guarantee}\"")
                } else if let (true, Some(url)) = (l.starts_with("url = "), &registry) {
                    format!("url = \"{url}\"")
                } else if let Some(fares) = &fares {
                    // The join's two topics: the rides (the input) and the fares; or the
                    // fares alone.
                    let (rides, fares) = (&input.name, &fares.name);
                    if l.starts_with("topics = ") && !shipped.rides {
                        format!("topics = [\"{fares}\"]")
                    } else if l.starts_with("topics = ") {
                        format!("topics = [\"{rides}\", \"{fares}\"]")
                    } else {
                        l.replace("topic = \"rides\"", &format!("topic = \"{rides}\""))
                            .replace("topic = \"fares\"", &format!("topic = \"{fares}\""))
                    }
                } else {
                    l.replace("\"fixtures/schemas/", &format!("\"{}/", schemas.display()))
                }
            })
            .collect();
        std::fs::write(&job, text.join("\n")).unwrap();
        let (granted, grants) = watch::channel(Some(0));
        let avro = match &registry {
            None => None,
            Some(url) => {
                let config = RegistryConfig::from_properties([("schema.registry.url", url)]);
                let schema = std::fs::read_to_string(schemas.join("taxi-ride.avsc")).unwrap();
                let client = SchemaRegistry::new(config.unwrap()).unwrap();
                Some(AvroSerializer::new(client, &schema, Part::Value).unwrap())
            }
        };
        let topics = (input.name.clone(), fares.as_ref().map(|f| f.name.clone()));
        let feeder = feed(broker.to_owned(), topics, seed, avro, grants);
        let first = broker.split(',').next().unwrap_or(broker);
        let mut chaos = Chaos {
            label,
            seed,
            rng: StdRng::seed_from_u64(seed),
            broker: broker.to_owned(),
            proxy: Proxy::start(first).await,
            job_bootstrap: String::new(),
            input,
            fares,
            reads_rides: shipped.rides,
            output,
            dir,
            job,
            runs: 0,
            kills: BTreeMap::new(),
            resumed: 0,
            restarts: 0,
            granted,
            feeder: Some(feeder),
            start: Instant::now(),
            registry,
            verified: shipped.verified,
        };
        chaos.job_bootstrap = chaos.proxy.addr.clone();
        chaos
    }

    /// Starts run N+1 through the proxy (the first one `--fresh`), armed with `pause`.
    fn spawn(&mut self, pause: Option<String>) -> (Guarded, PathBuf) {
        self.runs += 1;
        let log = self.dir.join(format!("run{}.log", self.runs));
        let pause = pause.as_deref();
        let child = spawn_run(&self.job, &self.job_bootstrap, &log, self.runs == 1, pause);
        (child, log)
    }

    /// The failure context: seed, run, the log.
    fn context(&self, log: &Path) -> String {
        format!(
            "chaos {} seed {} (ONCEFLOW_CHAOS_SEED={} replays it), run {}; its log:\n{}",
            self.label,
            self.seed,
            self.seed,
            self.runs,
            log_of(log)
        )
    }

    /// Fails when the run exited by itself (the chaos only kills).
    fn assert_running(&self, child: &mut Child, log: &Path) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("onceflow run exited ({status}); {}", self.context(log));
        }
    }

    /// Polls `done` every 20 ms until true, failing if the run exits or WAIT passes.
    async fn wait_for(
        &self,
        what: &str,
        child: &mut Child,
        log: &Path,
        mut done: impl FnMut() -> bool,
    ) {
        let start = Instant::now();
        while !done() {
            self.assert_running(child, log);
            assert!(
                start.elapsed() < WAIT,
                "{what} did not happen within {WAIT:?}; {}",
                self.context(log)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The output's read_committed end offsets, summed.
    async fn committed_end(&self, admin: &Admin) -> i64 {
        let tps = self.output.tps();
        match admin
            .list_offsets(&tps, Offset::End, IsolationLevel::ReadCommitted)
            .await
        {
            Ok(ends) => ends.values().sum(),
            Err(_) => -1,
        }
    }

    /// One run, killed where `kind` says.
    async fn kill_once(&mut self, kind: Kill) {
        self.grant();
        // The first arrival: a run is granted about one window firing's worth of input.
        let pause = (kind == Kill::Persisted).then(|| "checkpoint-persisted".to_owned());
        let held_before = self.proxy.faults.held_responses.load(Ordering::Relaxed);
        if kind == Kill::Unanswered {
            *self.proxy.faults.hold_responses.lock().unwrap() = Some(ApiKey::EndTxn);
        }
        let admin = Admin::new(client_config(&self.broker)).await.unwrap();
        let output_before = self.committed_end(&admin).await;
        let (mut child, log) = self.spawn(pause);
        match kind {
            Kill::Random => {
                // From the run's first line (its state opened): a loaded machine may take
                // seconds to start the process, and a kill before it did anything proves little.
                self.wait_for("the run's first log line", &mut child, &log, || {
                    !log_of(&log).is_empty()
                })
                .await;
                let ms = self.rng.random_range(0..3000);
                let until = Instant::now() + Duration::from_millis(ms);
                self.wait_for("a random moment", &mut child, &log, || {
                    Instant::now() >= until
                })
                .await;
            }
            Kill::Persisted => {
                self.wait_for("the checkpoint-persisted pause", &mut child, &log, || {
                    log_of(&log).contains("test pause at checkpoint-persisted")
                })
                .await;
            }
            Kill::Unanswered => {
                let faults = self.proxy.faults.clone();
                self.wait_for("a held EndTxn commit response", &mut child, &log, || {
                    faults.held_responses.load(Ordering::Relaxed) > held_before
                })
                .await;
            }
            Kill::Broker | Kill::Node => {
                panic!("the broker- and node-kill tests kill the broker or node themselves")
            }
            Kill::AfterOutput => {
                let start = Instant::now();
                while self.committed_end(&admin).await <= output_before {
                    self.assert_running(&mut child, &log);
                    assert!(
                        start.elapsed() < WAIT,
                        "no new output within {WAIT:?}; {}",
                        self.context(&log)
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        *self.proxy.faults.hold_responses.lock().unwrap() = None;
        *self.kills.entry(kind).or_insert(0) += 1;
        self.tally_resumed(&log);
    }

    fn tally_resumed(&mut self, log: &Path) {
        let text = plain(&log_of(log));
        let resumed = text
            .lines()
            .filter(|l| l.contains("restored committables resumed"))
            .any(|l| !l.contains("resumed=0"));
        self.resumed += usize::from(resumed);
    }

    /// `kills` kills, the kinds in turn.
    async fn kill(&mut self, kinds: &[Kill], kills: usize) {
        for i in 0..kills {
            self.kill_once(kinds[i % kinds.len()]).await;
        }
    }

    /// Lets the feeder produce EVENTS_PER_RUN more events.
    fn grant(&self) {
        self.granted
            .send_modify(|g| *g = g.map(|n| n + EVENTS_PER_RUN));
    }

    /// Stops the feeder; returns the rides fed.
    async fn stop_feeding(&mut self) -> u64 {
        let _ = self.granted.send(None);
        self.feeder.take().unwrap().await.unwrap()
    }

    /// `taxi verify` of the job's output; `None` when it gave no verdict (a broker restarting).
    async fn verify(&self) -> Option<String> {
        // A job of the fares alone has them as its input.
        let input = match (&self.fares, self.reads_rides) {
            (Some(fares), false) => &fares.name,
            _ => &self.input.name,
        };
        let mut args = vec![
            "verify",
            "--job",
            self.verified,
            "--input",
            input,
            "--output",
            &self.output.name,
            "--read-timeout-ms",
            "60000",
        ];
        if let Some(url) = &self.registry {
            args.extend(["-s", "value=avro", "-r", url]);
        }
        if let (Some(fares), true) = (&self.fares, self.reads_rides) {
            args.extend(["--fares", &fares.name]);
        }
        let o = taxi_at(&self.broker, &args).await;
        let verdict = stdout(&o);
        if !verdict.starts_with("verify: ") {
            eprintln!(
                "chaos {}: taxi verify gave no verdict: {}",
                self.label,
                shown(&o)
            );
            return None;
        }
        Some(verdict.trim().to_owned())
    }

    /// A last run catches up; polls the verifier until nothing is missing any more (only
    /// missing records heal as the run catches up); returns the verdict.
    async fn last_run_verdict(&mut self) -> String {
        let run = self.spawn(None);
        self.catch_up(run, false).await
    }

    /// Polls the verifier while `run` catches up (see [`Self::last_run_verdict`]); with
    /// `restart`, a run that exits is logged and started again (the broker-kill test: a job
    /// may fail clearly while its broker is away).
    async fn catch_up(&mut self, run: (Guarded, PathBuf), restart: bool) -> String {
        let (mut child, mut log) = run;
        let (mut progress, mut start) = (0, Instant::now());
        eprintln!(
            "chaos {}: kills done after {:.1} s; the last run catches up",
            self.label,
            self.start.elapsed().as_secs_f64()
        );
        let verdict = loop {
            if restart {
                if let Some(status) = child.try_wait().unwrap() {
                    let text = plain(&log_of(&log));
                    let last = text.lines().last().unwrap_or_default().to_owned();
                    eprintln!(
                        "chaos {}: run {} exited ({status}): {last}; restarting",
                        self.label, self.runs
                    );
                    self.restarts += 1;
                    (child, log) = self.spawn(None);
                }
            }
            self.assert_running(&mut child, &log);
            let verdict = self
                .verify()
                .await
                .unwrap_or_else(|| "verify: no verdict yet (missing)".into());
            let healing = verdict.contains("missing")
                && !["duplicated", "wrong", "unexpected", "order"]
                    .iter()
                    .any(|w| verdict.contains(w));
            if !healing {
                break verdict;
            }
            // Waits while the run makes progress (a loaded machine is slow, not stuck).
            let read = records_read(&verdict);
            if read > progress {
                (progress, start) = (read, Instant::now());
            }
            assert!(
                start.elapsed() < WAIT,
                "the last run made no progress for {WAIT:?}: {verdict}; {}",
                self.context(&log)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        child.kill().unwrap();
        child.wait().unwrap();
        self.tally_resumed(&log);
        verdict
    }

    /// The summary line, to stderr.
    fn summary(&self, rides: u64, verdict: &str) {
        let kills: usize = self.kills.values().sum();
        let by_kind: Vec<String> = self
            .kills
            .iter()
            .map(|(k, n)| format!("{n} {}", k.name()))
            .collect();
        eprintln!(
            "chaos {}: {kills} kills ({}), {} runs ({} restarted after exiting), {} resumed a restored commit, {rides} rides, seed {}, {:.1} s: {verdict}",
            self.label,
            by_kind.join(", "),
            self.runs,
            self.restarts,
            self.resumed,
            self.seed,
            self.start.elapsed().as_secs_f64()
        );
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        // Kept when the test fails: the runs' logs and the state.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Kills the job `kills` times, the four kinds in turn; then the last run catches up and the
/// verifier must say OK. Returns the chaos for what the caller checks besides.
async fn kills_keep_exactly_once(mut chaos: Chaos, kills: usize) -> Chaos {
    let kinds = [
        Kill::Random,
        Kill::Persisted,
        Kill::Unanswered,
        Kill::AfterOutput,
    ];
    chaos.kill(&kinds, kills).await;
    let rides = chaos.stop_feeding().await;
    let verdict = chaos.last_run_verdict().await;
    chaos.summary(rides, &verdict);
    assert!(
        verdict.starts_with("verify: OK"),
        "chaos seed {}: {verdict}",
        chaos.seed
    );
    chaos
}

/// The inverse: `kills` kills (at random and after new output: without transactions the two
/// commit points do not exist) of an at-least-once job replay the output of the records since
/// the last checkpoint, which the verifier must report as duplicates.
async fn kills_write_duplicates(mut chaos: Chaos, kills: usize) {
    chaos.kill(&[Kill::Random, Kill::AfterOutput], kills).await;
    let rides = chaos.stop_feeding().await;
    let verdict = chaos.last_run_verdict().await;
    chaos.summary(rides, &verdict);
    assert!(
        verdict.contains("duplicated"),
        "chaos seed {}: at-least-once under kills should duplicate output, got: {verdict}",
        chaos.seed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_driver_hourly_killed_at_random_and_at_both_commit_points_verifies_exactly_once() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::new("exactly-once", &broker(), "exactly-once", INTERVAL_MS).await;
    let chaos = kills_keep_exactly_once(chaos, kill_count()).await;
    assert!(
        chaos.resumed > 0,
        "chaos seed {}: no restart resumed a restored committable: the kills never left one",
        chaos.seed
    );
}

/// The inverse: at-least-once under the same chaos writes duplicates. (The shipped 1 s
/// interval: kills after new output then land before the next checkpoint.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_driver_hourly_at_least_once_under_the_same_chaos_writes_duplicates() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::new("at-least-once", &broker(), "at-least-once", 1000).await;
    kills_write_duplicates(chaos, kill_count().min(10)).await;
}

/// Job (b) over Avro in and out (jobs/rides-per-driver-hourly-avro.toml) under the same kinds
/// of kill, fewer of them: the formats' decoding and encoding keep exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_driver_hourly_over_avro_killed_at_both_commit_points_verifies_exactly_once() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::avro("avro-exactly-once", "exactly-once", INTERVAL_MS).await;
    kills_keep_exactly_once(chaos, kill_count().min(AVRO_KILLS)).await;
}

/// The inverse over Avro: at-least-once under kills duplicates output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_driver_hourly_over_avro_at_least_once_under_kills_writes_duplicates() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::avro("avro-at-least-once", "at-least-once", 1000).await;
    kills_write_duplicates(chaos, kill_count().min(AVRO_KILLS)).await;
}

/// The driver-shifts job (jobs/driver-shifts.toml: session windows, which merge, and whose
/// fire and cleanup timers fall anywhere in time) under the four kinds of kill, one of each:
/// every shift once, none lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_shifts_killed_at_random_and_at_both_commit_points_verifies_exactly_once() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::shifts("shifts-exactly-once", "exactly-once", INTERVAL_MS).await;
    kills_keep_exactly_once(chaos, kill_count().min(SHIFTS_KILLS)).await;
}

/// The inverse for the shifts: at-least-once under kills duplicates shifts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_shifts_at_least_once_under_kills_writes_duplicates() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::shifts("shifts-at-least-once", "at-least-once", 1000).await;
    // Twice the kills: four after new output make duplicates certain, and the run ends at
    // the first verdict that has them (it runs at TV2 only).
    kills_write_duplicates(chaos, kill_count().min(2 * SHIFTS_KILLS)).await;
}

/// The rides-and-fares join (two input topics, state on both sides) under the four kinds of
/// kill, one each: the output verifies exactly once, one enriched record per ride.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rides_and_fares_killed_at_random_and_at_both_commit_points_verifies_exactly_once() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::rides_and_fares("join-exactly-once", "exactly-once", INTERVAL_MS).await;
    kills_keep_exactly_once(chaos, kill_count().min(JOIN_KILLS)).await;
}

/// The inverse for the join: at-least-once under kills duplicates enriched rides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rides_and_fares_at_least_once_under_kills_writes_duplicates() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::rides_and_fares("join-at-least-once", "at-least-once", 1000).await;
    // A join writes as records arrive, so every kill after the first checkpoint replays
    // output: the four kills make duplicates certain.
    kills_write_duplicates(chaos, kill_count().min(JOIN_KILLS)).await;
}

/// The hourly top drivers by tips (two keyed stages: the drivers' hourly sums, then each
/// hour's ranking, their state and the barriers between them) under the four kinds of kill,
/// one each: every hour's ranking once, none lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_top_tips_killed_at_random_and_at_both_commit_points_verifies_exactly_once() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::top_tips("top-tips-exactly-once", "exactly-once", INTERVAL_MS).await;
    kills_keep_exactly_once(chaos, kill_count().min(TOP_TIPS_KILLS)).await;
}

/// The inverse for the two stages: at-least-once under kills duplicates rankings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_top_tips_at_least_once_under_kills_writes_duplicates() {
    let _heavy = crate::support::turns::heavy().await;
    let chaos = Chaos::top_tips("top-tips-at-least-once", "at-least-once", 1000).await;
    kills_write_duplicates(chaos, kill_count().min(TOP_TIPS_KILLS)).await;
}

/// The broker (a private one, wiped after) is SIGKILLed while the job runs and started again
/// on its data: the job rides it out, or fails clearly and is started again, and the output
/// verifies exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_driver_hourly_survives_its_broker_killed_and_restarted_and_verifies_exactly_once() {
    let _heavy = crate::support::turns::heavy().await;
    let broker = tokio::task::block_in_place(|| PrivateBroker::start(19522));
    let mut chaos = Chaos::new("broker-kill", &broker.addr, "exactly-once", INTERVAL_MS).await;
    let admin = Admin::new(client_config(&broker.addr)).await.unwrap();
    let broker = &broker;
    ride_out(&mut chaos, &admin, Kill::Broker, || async move {
        tokio::task::block_in_place(|| broker.run("kill"));
        // kafka-broker.sh start takes a port that still answers for a broker already running.
        wait_until_closed(&broker.addr).await;
        tokio::task::block_in_place(|| broker.run("start"));
    })
    .await;
}

/// On the 3-node cluster, the node leading the output's partition 0 is SIGKILLed while the
/// job runs (its sink's transactions, the source's fetches and the coordinators on that node
/// move), and started again later: the output verifies exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_driver_hourly_on_three_nodes_survives_one_killed_and_verifies_exactly_once() {
    // The cluster's turn first, then the heavy one: every test that takes both takes them in
    // this order, so none holds the heavy turn while it waits for the cluster.
    let c = crate::support::cluster::cluster().await;
    let _heavy = crate::support::turns::heavy().await;
    let mut chaos = Chaos::new("node-kill", &c.bootstrap, "exactly-once", INTERVAL_MS).await;
    chaos.job_bootstrap = c.bootstrap.clone();
    let admin = Admin::new(client_config(&c.bootstrap)).await.unwrap();
    let victim = crate::support::cluster::leader_of(&c.bootstrap, &chaos.output.name, 0).await;
    let c = &c;
    ride_out(&mut chaos, &admin, Kill::Node, || async move {
        c.kill(victim).await;
    })
    .await;
    c.start_node(victim).await;
}

/// Runs the job until output is committed, then `fault` (the broker or a node killed); waits
/// for output committed after it (starting the job again whenever it exited), stops the input
/// and checks the verifier finds every window exactly once.
async fn ride_out<F, Fut>(chaos: &mut Chaos, admin: &Admin, kind: Kill, fault: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    chaos.grant();
    let (mut child, log) = chaos.spawn(None);
    let start = Instant::now();
    while chaos.committed_end(admin).await <= 0 {
        chaos.assert_running(&mut child, &log);
        assert!(
            start.elapsed() < WAIT,
            "no output within {WAIT:?}; {}",
            chaos.context(&log)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = chaos.committed_end(admin).await;
    fault().await;
    chaos.kills.insert(kind, 1);
    // Output committed after the fault, then the input stops.
    let start = Instant::now();
    let mut run = (child, log);
    chaos.grant();
    while chaos.committed_end(admin).await <= before {
        if run.0.try_wait().unwrap().is_some() {
            chaos.restarts += 1;
            run = chaos.spawn(None);
        }
        assert!(
            start.elapsed() < WAIT,
            "no output after the {} within {WAIT:?}; {}",
            kind.name(),
            chaos.context(&run.1)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rides = chaos.stop_feeding().await;
    let verdict = chaos.catch_up(run, true).await;
    chaos.summary(rides, &verdict);
    assert!(
        verdict.starts_with("verify: OK"),
        "chaos seed {}: {verdict}",
        chaos.seed
    );
}
