//! onceflow-perf: throughput of the onceflow producer and consumer, printed in the same
//! machine-readable form as benches/java-peer/*.sh so the two can be compared line by line.
//!
//! ```text
//! onceflow-perf produce --bootstrap 127.0.0.1:9092 --topic T --num-records N --record-size S
//!                       [--partitions P] [-X key=value]... [--payload random|fixed] [--delivery callback|future]
//!                       [--max-outstanding M] [--worker-threads W]
//!                       [--transaction-duration-ms D  (with -X transactional.id=ID)]
//! onceflow-perf consume --bootstrap 127.0.0.1:9092 --topic T --num-records N [-X key=value]...
//!                       [--timeout-ms MS] [--worker-threads W]
//! onceflow-perf create-topic --bootstrap H:P --topic T [--partitions P] [-X key=value]...
//! onceflow-perf delete-topic --bootstrap H:P --topic T [-X key=value]...
//! onceflow-perf log-stats --log-dir DIR --topic T
//! onceflow-perf serde --registry URL --format avro|protobuf [--count N] [--warmup W] [--topic T]
//! ```
//!
//! `produce` and `consume` end with
//!
//! ```text
//! onceflow records=N records_per_sec=X mb_per_sec=Y cpu_seconds=Z
//! ```
//!
//! where `mb_per_sec` counts 2^20 bytes of record values (as Kafka's ProducerPerformance does;
//! the consumer counts keys plus values, as ConsumerPerformance does) and `cpu_seconds` is the
//! user+sys CPU time of this whole process (all threads, start-up and topic admin included),
//! read from /proc/self/stat at exit. Rates are over the measured interval only: for `produce`
//! from the first `send` to the last acknowledgement, for `consume` from `assign` to the N-th
//! record.
//!
//! `consume` also prints `onceflow-fetch requests_full=… requests_incremental=…
//! request_bytes=… request_bytes_per_sec=… request_bytes_per_record=…`: the Fetch requests sent
//! (with and without KIP-227 sessions: `-X fetch.sessions.enable=false`) and their bytes.
//!
//! Payload: by default every record gets a freshly generated value of random upper-case
//! letters, as Kafka's ProducerPerformance does with --record-size (it refills its payload
//! array with SplittableRandom.nextInt(26) + 'A' before every send, on the sending thread), so
//! both tools spend the same kind of harness work per record. `--payload fixed` sends one
//! shared value (a reference-count increment per record) to measure the client alone; the
//! Java equivalent is ProducerPerformance --payload-file with a single line.
//!
//! `serde` times the schema-registry serdes (onceflow::schema) on one thread, without Kafka:
//! see [`serde_bench`] (benches/run-serde-comparison.sh runs it beside the Java serializers).
//!
//! `log-stats` reads the broker's log segments of a topic (the broker must run on this machine)
//! and reports how many record batches the producer formed and how big they were.

use bytes::Bytes;
use onceflow::client::admin::NewTopic;
use onceflow::client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, DeliveryFuture, Offset, Producer,
    ProducerConfig, ProducerRecord,
};
use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

mod serde_bench;

const USAGE: &str = "\
usage:
  onceflow-perf produce --topic T --num-records N --record-size S [--bootstrap H:P]
                        [--partitions P] [-X key=value]... [--payload random|fixed]
                        [--delivery callback|future]
                        [--max-outstanding M] [--worker-threads W] [--report-interval-ms MS]
                       [--transaction-duration-ms D]   (needs -X transactional.id=ID)
  onceflow-perf consume --topic T --num-records N [--bootstrap H:P] [-X key=value]...
                        [--timeout-ms MS] [--worker-threads W]
  onceflow-perf create-topic --topic T [--partitions P] [--bootstrap H:P] [-X key=value]...
  onceflow-perf delete-topic --topic T [--bootstrap H:P] [-X key=value]...
  onceflow-perf log-stats --topic T [--log-dir DIR]
  onceflow-perf serde --registry URL --format avro|protobuf [--count N] [--warmup W] [--topic T]
                      [--phases encode,decode,decode_plain_json,encode_json]

--partitions on produce creates the topic first and deletes it at the end.
--payload random (default) generates a new random value for every record, as Kafka's
ProducerPerformance does; fixed sends one shared value.
--delivery callback (default) sends with Producer::send_with_callback and one counting callback,
as the franz-go and librdkafka peers do; future awaits every send's future in a drain task and
reports latencies, as ProducerPerformance does.
-X passes a Kafka property (producer or consumer config) to onceflow; create-topic and
delete-topic take the admin client's (e.g. -X security.protocol=SSL -X ssl.ca.location=ca.pem),
and produce --partitions passes the security ones (security.protocol, ssl.*, sasl.*) to its
admin client too.
The final line of produce/consume is machine-readable:
  onceflow records=N records_per_sec=X mb_per_sec=Y cpu_seconds=Z
serde encodes and decodes N records (default 1000000) of a fixed schema with the schema-registry
serdes on one thread (registry URL: the Confluent-compatible API) and prints one JSON line per
phase (encode, decode, decode_plain_json, encode_json): records_per_sec, cpu_ns_per_record.";

fn main() -> ExitCode {
    // ONCEFLOW_LOG (e.g. onceflow=debug) turns on the library's tracing output, on stderr, as in
    // the onceflow CLI. Unset: no subscriber, nothing is formatted.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("ONCEFLOW_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let mut argv = std::env::args().skip(1);
    let Some(cmd) = argv.next() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if cmd == "-h" || cmd == "--help" || cmd == "help" {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match Args::parse(argv) {
        Ok(a) => a,
        Err(e) => return usage_error(e),
    };
    let result = match cmd.as_str() {
        "produce" => with_runtime(&args, produce(&args)),
        "consume" => with_runtime(&args, consume(&args)),
        "create-topic" => with_runtime(&args, create_topic(&args)),
        "delete-topic" => with_runtime(&args, delete_topic(&args)),
        "log-stats" => log_stats(&args),
        "serde" => serde_bench::serde(&args),
        other => return usage_error(format!("unknown command '{other}'")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => usage_error(e),
        Err(Failure::Run(e)) => {
            eprintln!("onceflow-perf {cmd}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(e: impl Display) -> ExitCode {
    eprintln!("onceflow-perf: {e}\n\n{USAGE}");
    ExitCode::from(2)
}

enum Failure {
    Usage(String),
    Run(String),
}

fn run_err(e: impl Display) -> Failure {
    Failure::Run(e.to_string())
}

type Res<T> = Result<T, Failure>;

fn with_runtime(args: &Args, fut: impl std::future::Future<Output = Res<()>>) -> Res<()> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(w) = args.opt_num::<usize>("worker-threads")? {
        b.worker_threads(w.max(1));
    }
    b.build().map_err(run_err)?.block_on(fut)
}

// ---------------------------------------------------------------------------------------------
// Arguments

struct Args {
    opts: BTreeMap<String, String>,
    props: Vec<(String, String)>,
    used: std::cell::RefCell<Vec<String>>,
}

impl Args {
    fn parse(argv: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut opts = BTreeMap::new();
        let mut props = Vec::new();
        let mut it = argv.peekable();
        while let Some(a) = it.next() {
            if a == "-X" || a.starts_with("-X") && a.len() > 2 {
                let kv = if a == "-X" {
                    it.next().ok_or("-X needs key=value")?
                } else {
                    a[2..].to_owned()
                };
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("-X {kv}: expected key=value"))?;
                props.push((k.trim().to_owned(), v.trim().to_owned()));
            } else if let Some(name) = a.strip_prefix("--") {
                let (k, v) = match name.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => {
                        let v = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
                        (name.to_owned(), v)
                    }
                };
                opts.insert(k, v);
            } else {
                return Err(format!("unexpected argument '{a}'"));
            }
        }
        Ok(Args {
            opts,
            props,
            used: Default::default(),
        })
    }

    fn opt(&self, name: &str) -> Option<&str> {
        self.used.borrow_mut().push(name.to_owned());
        self.opts.get(name).map(String::as_str)
    }

    fn req(&self, name: &str) -> Res<&str> {
        self.opt(name)
            .ok_or_else(|| Failure::Usage(format!("--{name} is required")))
    }

    fn opt_num<T: std::str::FromStr>(&self, name: &str) -> Res<Option<T>> {
        match self.opt(name) {
            None => Ok(None),
            Some(v) => v
                .replace('_', "")
                .parse()
                .map(Some)
                .map_err(|_| Failure::Usage(format!("--{name} {v}: not a valid number"))),
        }
    }

    fn req_num<T: std::str::FromStr>(&self, name: &str) -> Res<T> {
        self.opt_num(name)?
            .ok_or_else(|| Failure::Usage(format!("--{name} is required")))
    }

    /// Rejects options no command asked for (typos would otherwise be ignored silently).
    fn check_unused(&self) -> Res<()> {
        let used = self.used.borrow();
        let known = |k: &String| k == "bootstrap" || used.contains(k);
        if let Some(k) = self.opts.keys().find(|k| !known(k)) {
            return Err(Failure::Usage(format!("unknown option --{k}")));
        }
        Ok(())
    }

    fn bootstrap(&self) -> String {
        self.opt("bootstrap").unwrap_or("127.0.0.1:9092").to_owned()
    }

    /// bootstrap.servers from --bootstrap, then every -X in order.
    fn properties(&self) -> Vec<(String, String)> {
        let mut p = vec![("bootstrap.servers".to_owned(), self.bootstrap())];
        p.extend(self.props.iter().cloned());
        p
    }

    /// The admin client's config: bootstrap.servers from --bootstrap, then the -X properties.
    /// `all`: every -X must be a client property (create-topic, delete-topic: a typo or a
    /// producer property is an error); otherwise (produce --partitions) only those that reach
    /// the cluster (security.protocol, ssl.*, sasl.*) are taken, the rest being the producer's.
    fn client_config(&self, all: bool) -> Res<ClientConfig> {
        let usage = |e: onceflow::client::ConfigError| Failure::Usage(e.to_string());
        let mut c = ClientConfig::default();
        c.set("bootstrap.servers", &self.bootstrap())
            .map_err(usage)?;
        for (k, v) in &self.props {
            let reaches_the_cluster =
                k == "security.protocol" || k.starts_with("ssl.") || k.starts_with("sasl.");
            if !all && !reaches_the_cluster {
                continue;
            }
            if !c.set(k, v).map_err(usage)? {
                return Err(Failure::Usage(format!(
                    "-X {k}: not a property of the admin client"
                )));
            }
        }
        Ok(c)
    }
}

// ---------------------------------------------------------------------------------------------
// CPU time of this process

/// User+sys CPU seconds of this process, all threads (utime+stime from /proc/self/stat, the
/// same figure getrusage(RUSAGE_SELF) gives, at clock-tick resolution).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after "pid (comm) ": state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / clock_ticks_per_sec() as f64
}

/// AT_CLKTCK from the auxiliary vector (what sysconf(_SC_CLK_TCK) returns), else 100.
fn clock_ticks_per_sec() -> u64 {
    const AT_CLKTCK: u64 = 17;
    const W: usize = std::mem::size_of::<usize>();
    if let Ok(aux) = std::fs::read("/proc/self/auxv") {
        for pair in aux.chunks_exact(2 * W) {
            let word = |b: &[u8]| {
                let mut a = [0u8; 8];
                a[..W].copy_from_slice(b);
                u64::from_ne_bytes(a)
            };
            let (k, v) = (word(&pair[..W]), word(&pair[W..]));
            if k == AT_CLKTCK && v > 0 {
                return v;
            }
            if k == 0 {
                break;
            }
        }
    }
    100
}

// ---------------------------------------------------------------------------------------------
// Latency statistics (1 ms buckets, like ProducerPerformance)

struct Latencies {
    buckets: Vec<u64>,
    count: u64,
    sum_us: u64,
    max_us: u64,
}

impl Latencies {
    const MAX_MS: usize = 120_000;

    fn new() -> Self {
        Latencies {
            buckets: vec![0; Self::MAX_MS + 1],
            count: 0,
            sum_us: 0,
            max_us: 0,
        }
    }

    fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        self.buckets[((us / 1000) as usize).min(Self::MAX_MS)] += 1;
        self.count += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
    }

    fn avg_ms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.count as f64 / 1000.0
        }
    }

    fn percentile_ms(&self, p: f64) -> u64 {
        let want = ((self.count as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return ms as u64;
            }
        }
        Self::MAX_MS as u64
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn print_final(records: u64, secs: f64, bytes: u64, cpu: f64) {
    let rps = records as f64 / secs;
    let mbps = mib(bytes) / secs;
    println!(
        "onceflow-detail elapsed_sec={secs:.3} cpu_sec_per_million_records={:.3}",
        if records > 0 {
            cpu * 1e6 / records as f64
        } else {
            f64::NAN
        }
    );
    println!("onceflow records={records} records_per_sec={rps:.1} mb_per_sec={mbps:.2} cpu_seconds={cpu:.3}");
}

// ---------------------------------------------------------------------------------------------
// produce

async fn produce(args: &Args) -> Res<()> {
    let topic = args.req("topic")?.to_owned();
    let n: u64 = args.req_num("num-records")?;
    let size: usize = args.req_num("record-size")?;
    let partitions: Option<i32> = args.opt_num("partitions")?;
    let max_outstanding: usize = args.opt_num("max-outstanding")?.unwrap_or(1_000_000).max(1);
    let interval = Duration::from_millis(args.opt_num("report-interval-ms")?.unwrap_or(5000));
    let txn_duration: Option<u64> = args.opt_num("transaction-duration-ms")?;
    let fresh_payload = match args.opt("payload").unwrap_or("random") {
        "random" => true,
        "fixed" => false,
        other => {
            return Err(Failure::Usage(format!(
                "--payload {other}: expected random or fixed"
            )))
        }
    };
    let callback = match args.opt("delivery").unwrap_or("callback") {
        "callback" => true,
        "future" => false,
        other => {
            return Err(Failure::Usage(format!(
                "--delivery {other}: expected callback or future"
            )))
        }
    };
    args.opt("worker-threads");
    args.check_unused()?;
    let config = ProducerConfig::from_properties(args.properties())
        .map_err(|e| Failure::Usage(e.to_string()))?;
    println!(
        "onceflow-perf produce: delivery={}",
        if callback { "callback" } else { "future" }
    );
    println!(
        "onceflow-perf produce: topic={topic} records={n} record_size={size} payload={} acks={:?} linger_ms={} batch_size={} \
         buffer_memory={} compression={:?} idempotence={} max_in_flight={}",
        if fresh_payload { "random-per-record" } else { "fixed" },
        config.acks,
        config.linger.as_millis(),
        config.batch_size,
        config.buffer_memory,
        config.compression,
        config.enable_idempotence,
        config.max_in_flight
    );

    let admin = match partitions {
        Some(p) => {
            let admin = Admin::new(args.client_config(false)?)
                .await
                .map_err(run_err)?;
            admin
                .create_topics(&[NewTopic::new(topic.clone(), p)])
                .await
                .map_err(run_err)?;
            Some(admin)
        }
        None => None,
    };
    if txn_duration.is_some() && config.transactional_id.is_none() {
        return Err(Failure::Usage(
            "--transaction-duration-ms needs -X transactional.id=ID".into(),
        ));
    }
    let txn = txn_duration.map(Duration::from_millis);
    let result = if callback {
        produce_with_callbacks(config, &topic, n, size, fresh_payload, txn).await
    } else {
        produce_records(
            config,
            &topic,
            n,
            size,
            fresh_payload,
            max_outstanding,
            interval,
            txn,
        )
        .await
    };
    if let Some(admin) = admin {
        if let Err(e) = admin.delete_topics(&[topic.as_str()]).await {
            eprintln!("onceflow-perf produce: warning: could not delete topic {topic}: {e}");
        }
    }
    let (acked, failed, secs) = result?;
    let cpu = cpu_seconds();
    print_final(acked, secs, acked * size as u64, cpu);
    if failed > 0 || acked < n {
        return Err(Failure::Run(format!(
            "only {acked} of {n} records were acknowledged ({failed} failed)"
        )));
    }
    Ok(())
}

/// Sends `n` records and waits for every acknowledgement. Returns (acked, failed, seconds).
/// With `txn`, records go in transactions committed every `txn` (as ProducerPerformance's
/// --transaction-duration-ms).
#[allow(clippy::too_many_arguments)]
async fn produce_records(
    config: ProducerConfig,
    topic: &str,
    n: u64,
    size: usize,
    fresh_payload: bool,
    max_outstanding: usize,
    interval: Duration,
    txn: Option<Duration>,
) -> Res<(u64, u64, f64)> {
    let producer = Producer::new(config).await.map_err(run_err)?;
    let mut txns = Transactions::start(&producer, txn).await?;
    let mut rng = Rng::seeded();
    let payload = Bytes::from(rng.letters(size));

    // The delivery futures go to a drain task through a bounded channel: it awaits them in
    // order (acknowledgements of one partition come in order), records the latency, and
    // reports progress. The bound keeps memory finite; by default it is far above what
    // buffer.memory lets the producer hold, so buffer.memory is what limits the sender.
    let (tx, mut rx) = mpsc::channel::<(Instant, DeliveryFuture)>(max_outstanding);
    let start = Instant::now();
    let drain = tokio::spawn(async move {
        let mut lat = Latencies::new();
        let mut failed = 0u64;
        let mut first_error: Option<String> = None;
        let mut window = (Instant::now(), 0u64, 0u64, 0u64); // start, records, sum_us, max_us
        while let Some((sent, fut)) = rx.recv().await {
            match fut.await {
                Ok(_) => {
                    let d = sent.elapsed();
                    lat.record(d);
                    let us = d.as_micros() as u64;
                    window.1 += 1;
                    window.2 += us;
                    window.3 = window.3.max(us);
                }
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            if window.1 & 0x3ff == 0 && window.0.elapsed() >= interval {
                let secs = window.0.elapsed().as_secs_f64();
                println!(
                    "{} records acked, {:.1} records/sec ({:.2} MB/sec), {:.1} ms avg latency, {:.1} ms max latency.",
                    window.1,
                    window.1 as f64 / secs,
                    mib(window.1 * size as u64) / secs,
                    window.2 as f64 / window.1.max(1) as f64 / 1000.0,
                    window.3 as f64 / 1000.0
                );
                window = (Instant::now(), 0, 0, 0);
            }
        }
        (lat, failed, first_error, Instant::now())
    });

    let mut send_error = None;
    for _ in 0..n {
        if let Err(e) = txns.tick(&producer).await {
            send_error = Some(e);
            break;
        }
        let record = next_record(topic, &mut rng, fresh_payload, &payload);
        let t = Instant::now();
        match producer.send(record).await {
            Ok(f) => {
                if tx.send((t, f)).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                send_error = Some(e.to_string());
                break;
            }
        }
    }
    if send_error.is_none() {
        send_error = txns.finish(&producer).await.err();
    }
    txns.report();
    let sent_secs = start.elapsed().as_secs_f64();
    drop(tx);
    let (lat, failed, first_error, end) = drain.await.map_err(run_err)?;
    let secs = (end - start).as_secs_f64();
    if let Err(e) = producer.close().await {
        eprintln!("onceflow-perf produce: warning: close: {e}");
    }
    let acked = lat.count;
    println!(
        "{acked} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, \
         {} ms 50th, {} ms 95th, {} ms 99th, {} ms 99.9th.",
        acked as f64 / secs,
        mib(acked * size as u64) / secs,
        lat.avg_ms(),
        lat.max_us as f64 / 1000.0,
        lat.percentile_ms(0.50),
        lat.percentile_ms(0.95),
        lat.percentile_ms(0.99),
        lat.percentile_ms(0.999),
    );
    println!("onceflow-detail send_loop_sec={sent_secs:.3} acked_sec={secs:.3}");
    if let Some(e) = first_error {
        eprintln!("onceflow-perf produce: {failed} record(s) failed, first error: {e}");
    }
    if let Some(e) = send_error {
        eprintln!("onceflow-perf produce: send failed: {e}");
    }
    Ok((acked, failed, secs))
}

/// Transactions committed every `every` (ProducerPerformance's --transaction-duration-ms) by
/// both send loops, and the time each loop spent blocked in commit_transaction (flush + EndTxn).
struct Transactions {
    every: Option<Duration>,
    started: Instant,
    committed: u64,
    /// Microseconds in commit_transaction: sum, max.
    commit_us: (u64, u64),
}

impl Transactions {
    /// Initializes and begins the first transaction when `every` is set.
    async fn start(producer: &Producer, every: Option<Duration>) -> Res<Transactions> {
        if every.is_some() {
            producer.init_transactions().await.map_err(run_err)?;
            producer.begin_transaction().map_err(run_err)?;
        }
        Ok(Transactions {
            every,
            started: Instant::now(),
            committed: 0,
            commit_us: (0, 0),
        })
    }

    /// Before a send: commits and begins the next transaction once the current one is due.
    async fn tick(&mut self, producer: &Producer) -> Result<(), String> {
        match self.every {
            Some(d) if self.started.elapsed() >= d => {
                self.commit(producer).await?;
                producer.begin_transaction().map_err(|e| e.to_string())?;
                self.started = Instant::now();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// After the last send: commits the open transaction, if any.
    async fn finish(&mut self, producer: &Producer) -> Result<(), String> {
        if self.every.is_some() {
            self.commit(producer).await?;
        }
        Ok(())
    }

    async fn commit(&mut self, producer: &Producer) -> Result<(), String> {
        let t = Instant::now();
        producer
            .commit_transaction()
            .await
            .map_err(|e| e.to_string())?;
        let us = t.elapsed().as_micros() as u64;
        self.commit_us = (self.commit_us.0 + us, self.commit_us.1.max(us));
        self.committed += 1;
        Ok(())
    }

    /// The `onceflow-detail` line the comparison script reads, with transactions only.
    fn report(&self) {
        if self.every.is_some() {
            let (sum, max) = self.commit_us;
            println!(
                "onceflow-detail transactions={} commit_ms_total={:.1} commit_ms_avg={:.2} commit_ms_max={:.1}",
                self.committed,
                sum as f64 / 1000.0,
                sum as f64 / 1000.0 / self.committed.max(1) as f64,
                max as f64 / 1000.0
            );
        }
    }
}

/// Records acknowledged and failed, counted by `send_with_callback` callbacks. Statics, so the
/// callback captures nothing and boxing it allocates nothing: the harness costs what franz-go's
/// and librdkafka's peers cost (one shared counting callback), not a closure per record.
static CB_ACKED: AtomicU64 = AtomicU64::new(0);
static CB_FAILED: AtomicU64 = AtomicU64::new(0);
static CB_FIRST_ERROR: OnceLock<String> = OnceLock::new();

/// `produce` with `--delivery callback` (the default): every record through
/// `Producer::send_with_callback`, one counting callback, no latency per record (as the franz-go
/// and librdkafka peers); the clock stops when `flush` returns. Returns (acked, failed, seconds).
async fn produce_with_callbacks(
    config: ProducerConfig,
    topic: &str,
    n: u64,
    size: usize,
    fresh_payload: bool,
    txn: Option<Duration>,
) -> Res<(u64, u64, f64)> {
    let producer = Producer::new(config).await.map_err(run_err)?;
    let mut txns = Transactions::start(&producer, txn).await?;
    let mut rng = Rng::seeded();
    let payload = Bytes::from(rng.letters(size));
    let start = Instant::now();
    let mut send_error = None;
    for _ in 0..n {
        if let Err(e) = txns.tick(&producer).await {
            send_error = Some(e);
            break;
        }
        let record = next_record(topic, &mut rng, fresh_payload, &payload);
        let sent = producer
            .send_with_callback(record, |r| match r {
                Ok(_) => {
                    CB_ACKED.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    CB_FAILED.fetch_add(1, Ordering::Relaxed);
                    let _ = CB_FIRST_ERROR.set(e.to_string());
                }
            })
            .await;
        if let Err(e) = sent {
            send_error = Some(e.to_string());
            break;
        }
    }
    if send_error.is_none() {
        send_error = txns.finish(&producer).await.err();
    }
    if let Err(e) = producer.flush().await {
        send_error.get_or_insert(e.to_string());
    }
    let secs = start.elapsed().as_secs_f64();
    txns.report();
    if let Err(e) = producer.close().await {
        eprintln!("onceflow-perf produce: warning: close: {e}");
    }
    let (acked, failed) = (
        CB_ACKED.load(Ordering::Relaxed),
        CB_FAILED.load(Ordering::Relaxed),
    );
    println!(
        "{acked} records sent, {:.1} records/sec ({:.2} MB/sec) (callbacks; no latency measured)",
        acked as f64 / secs,
        mib(acked * size as u64) / secs
    );
    if let Some(e) = CB_FIRST_ERROR.get() {
        eprintln!("onceflow-perf produce: {failed} record(s) failed, first error: {e}");
    }
    if let Some(e) = send_error {
        eprintln!("onceflow-perf produce: send failed: {e}");
    }
    Ok((acked, failed, secs))
}

/// The next record of a send loop: the fixed payload, or a fresh random one of its size.
fn next_record(topic: &str, rng: &mut Rng, fresh_payload: bool, payload: &Bytes) -> ProducerRecord {
    let value = match fresh_payload {
        true => Bytes::from(rng.letters(payload.len())),
        false => payload.clone(),
    };
    ProducerRecord {
        topic: topic.to_owned(),
        value: Some(value),
        ..Default::default()
    }
}

/// SplitMix64, the generator behind Java's SplittableRandom: one 64-bit mix and one modulo per
/// byte, about the work ProducerPerformance's `nextInt(26) + 65` per byte does.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        Rng(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `size` random upper-case ASCII letters.
    fn letters(&mut self, size: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(size);
        for _ in 0..size {
            v.push(b'A' + ((self.next() >> 32) % 26) as u8);
        }
        v
    }
}

// ---------------------------------------------------------------------------------------------
// consume

async fn consume(args: &Args) -> Res<()> {
    let topic = args.req("topic")?.to_owned();
    let n: u64 = args.req_num("num-records")?;
    let idle_timeout = Duration::from_millis(args.opt_num("timeout-ms")?.unwrap_or(30_000));
    args.opt("worker-threads");
    args.check_unused()?;
    let config = ConsumerConfig::from_properties(args.properties())
        .map_err(|e| Failure::Usage(e.to_string()))?;
    println!(
        "onceflow-perf consume: topic={topic} records={n} isolation={:?} fetch_max_bytes={} \
         max_partition_fetch_bytes={} fetch_max_wait_ms={} max_poll_records={}",
        config.isolation_level,
        config.fetch_max_bytes,
        config.max_partition_fetch_bytes,
        config.fetch_max_wait.as_millis(),
        config.max_poll_records
    );
    let mut consumer = Consumer::new(config).await.map_err(run_err)?;
    let start = Instant::now();
    let tps = consumer
        .assign_topics(&[topic.as_str()])
        .await
        .map_err(run_err)?;
    for tp in &tps {
        consumer.seek(tp, Offset::Beginning).map_err(run_err)?;
    }
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut last_data = Instant::now();
    let mut first_record: Option<Duration> = None;
    while records < n {
        let batch = consumer
            .poll(Duration::from_millis(500))
            .await
            .map_err(run_err)?;
        if batch.is_empty() {
            if last_data.elapsed() >= idle_timeout {
                eprintln!(
                    "onceflow-perf consume: no records for {} ms, stopping",
                    idle_timeout.as_millis()
                );
                break;
            }
            continue;
        }
        first_record.get_or_insert_with(|| start.elapsed());
        last_data = Instant::now();
        for r in &batch {
            bytes += r.key.as_ref().map_or(0, |k| k.len() as u64)
                + r.value.as_ref().map_or(0, |v| v.len() as u64);
        }
        records += batch.len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let m = consumer.metrics();
    drop(consumer);
    // Fetch requests and their bytes (KIP-227 sessions: -X fetch.sessions.enable=false turns
    // them off).
    let requests = m.fetch_requests_full + m.fetch_requests_incremental;
    println!(
        "onceflow-fetch requests_full={} requests_incremental={} request_bytes={} \
         request_bytes_per_sec={:.0} request_bytes_per_record={:.3} bytes_per_request={:.0} session_restarts={}",
        m.fetch_requests_full,
        m.fetch_requests_incremental,
        m.fetch_request_bytes,
        m.fetch_request_bytes as f64 / secs,
        m.fetch_request_bytes as f64 / records.max(1) as f64,
        m.fetch_request_bytes as f64 / requests.max(1) as f64,
        m.fetch_session_restarts
    );
    println!(
        "onceflow-detail partitions={} first_record_ms={:.1} mb={:.4}",
        tps.len(),
        first_record.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        mib(bytes)
    );
    let cpu = cpu_seconds();
    print_final(records, secs, bytes, cpu);
    if records < n {
        return Err(Failure::Run(format!(
            "consumed {records} of {n} requested records"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Topic admin

async fn create_topic(args: &Args) -> Res<()> {
    let topic = args.req("topic")?;
    let partitions: i32 = args.opt_num("partitions")?.unwrap_or(1);
    args.opt("worker-threads");
    args.check_unused()?;
    let admin = Admin::new(args.client_config(true)?)
        .await
        .map_err(run_err)?;
    admin
        .create_topics(&[NewTopic::new(topic, partitions)])
        .await
        .map_err(run_err)
}

async fn delete_topic(args: &Args) -> Res<()> {
    let topic = args.req("topic")?;
    args.opt("worker-threads");
    args.check_unused()?;
    let admin = Admin::new(args.client_config(true)?)
        .await
        .map_err(run_err)?;
    admin.delete_topics(&[topic]).await.map_err(run_err)
}

// ---------------------------------------------------------------------------------------------
// log-stats: the batches a producer formed, read from the broker's log segments

fn log_stats(args: &Args) -> Res<()> {
    let topic = args.req("topic")?;
    let dir = PathBuf::from(args.opt("log-dir").unwrap_or("target/kafka-9092/data"));
    args.check_unused()?;
    let mut sizes: Vec<u64> = Vec::new();
    let mut counts: Vec<u64> = Vec::new();
    let mut partitions = 0;
    let mut control = 0u64; // transaction markers (commit/abort), one per partition per transaction
    let entries =
        std::fs::read_dir(&dir).map_err(|e| run_err(format!("{}: {e}", dir.display())))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_partition = name
            .strip_prefix(topic)
            .and_then(|r| r.strip_prefix('-'))
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !is_partition {
            continue;
        }
        partitions += 1;
        let mut logs: Vec<PathBuf> = std::fs::read_dir(e.path())
            .map_err(run_err)?
            .flatten()
            .map(|f| f.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for log in logs {
            scan_segment(&log, &mut sizes, &mut counts, &mut control)?;
        }
    }
    if partitions == 0 {
        return Err(run_err(format!(
            "no partition directories {topic}-N in {}",
            dir.display()
        )));
    }
    let batches = sizes.len() as u64;
    let records: u64 = counts.iter().sum();
    let bytes: u64 = sizes.iter().sum();
    sizes.sort_unstable();
    counts.sort_unstable();
    let pct = |v: &[u64], p: f64| -> u64 {
        if v.is_empty() {
            0
        } else {
            v[((v.len() as f64 - 1.0) * p).round() as usize]
        }
    };
    println!(
        "log-stats topic={topic} partitions={partitions} batches={batches} records={records} \
         avg_records_per_batch={:.1} avg_batch_bytes={:.0} p10_batch_bytes={} median_batch_bytes={} \
         p90_batch_bytes={} max_batch_bytes={} median_records_per_batch={} control_batches={control}",
        records as f64 / batches.max(1) as f64,
        bytes as f64 / batches.max(1) as f64,
        pct(&sizes, 0.1),
        pct(&sizes, 0.5),
        pct(&sizes, 0.9),
        sizes.last().copied().unwrap_or(0),
        pct(&counts, 0.5),
    );
    Ok(())
}

/// Walks the v2 record batches of one segment: baseOffset i64, batchLength i32 (bytes after
/// this field), partitionLeaderEpoch i32, magic i8, crc u32, attributes i16, lastOffsetDelta
/// i32, baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16, baseSequence
/// i32, recordsCount i32 (at byte 57). Control batches (attributes bit 5: transaction markers)
/// are only counted.
fn scan_segment(
    path: &Path,
    sizes: &mut Vec<u64>,
    counts: &mut Vec<u64>,
    control: &mut u64,
) -> Res<()> {
    let data = std::fs::read(path).map_err(|e| run_err(format!("{}: {e}", path.display())))?;
    let mut pos = 0usize;
    while pos + 61 <= data.len() {
        let len = i32::from_be_bytes(data[pos + 8..pos + 12].try_into().unwrap_or([0; 4]));
        if len <= 0 {
            break;
        }
        let total = 12 + len as usize;
        if pos + total > data.len() || data[pos + 16] != 2 {
            break;
        }
        let attributes = i16::from_be_bytes([data[pos + 21], data[pos + 22]]);
        let count = i32::from_be_bytes(data[pos + 57..pos + 61].try_into().unwrap_or([0; 4]));
        if attributes & 0x20 == 0 {
            sizes.push(total as u64);
            counts.push(count.max(0) as u64);
        } else {
            *control += 1;
        }
        pos += total;
    }
    Ok(())
}
