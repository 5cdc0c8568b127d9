//! `onceflow taxi generate|verify`: the NYC taxi rides workload (src/engine/taxi).
//!
//! `generate` produces deterministic ride events keyed by driver id with the idempotent
//! producer; `verify` computes a shipped job's expected output from its input topic and
//! compares it with a read_committed read of the output topic, printing a one-line verdict
//! (exit 0 on OK, 1 on FAILED); `latency` tails a job's output as it is committed and prints
//! its end-to-end latency (`engine::taxi::latency`).

use super::error::{CliError, Result};
use super::feed;
use super::props::Conn;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, Consumer, ConsumerRecord, IsolationLevel, Offset, TopicPartition};
use onceflow::engine::taxi::generate::{self, Config};
use onceflow::engine::taxi::latency::{Appended, Causes, Probe, Summary};
use onceflow::engine::taxi::verify::{self, ExpectationBuilder, Job, TopicRecord};
use onceflow::engine::taxi::NYC;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Produce deterministic ride events (a START and an END per ride, keyed by driver id,
    /// out of order by less than 60 s of event time).
    Generate(GenerateArgs),
    /// Compute a job's expected output from its input topic and compare it with a
    /// read_committed read of its output topic; print a one-line verdict (exit 1 on FAILED).
    Verify(VerifyArgs),
    /// Tail a job's output (read_committed) from the beginning until N records or the
    /// timeout, then print its end-to-end latency in one line: `latency: N results, p50 X ms,
    /// p99 Y ms, max Z ms` (exit 1 when fewer than N records came).
    Latency(LatencyArgs),
}

#[derive(clap::Args)]
struct GenerateArgs {
    // -X properties apply to the producer only; the admin client gets the brokers.
    #[command(flatten)]
    conn: Conn,
    /// Topic to write (created with --partitions if missing).
    #[arg(short = 't', long)]
    topic: String,
    /// How many rides (each is two events).
    #[arg(long)]
    count: u64,
    /// Pick-ups per second of event time: how fast event time advances (it does not throttle
    /// producing; the data set is the same at any speed).
    #[arg(long, default_value_t = 10)]
    rate: u32,
    /// Seed: the same seed and settings give the same events.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Size of the driver pool.
    #[arg(long, default_value_t = 200)]
    drivers: u64,
    /// Percent of the rides that start or end outside the NYC box.
    #[arg(long, default_value_t = 10)]
    outside_percent: u32,
    /// Events per second of wall-clock time to produce at (0: as fast as possible), for
    /// latency measurements with a job reading while the events arrive.
    #[arg(long, default_value_t = 0)]
    produce_rate: u32,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum JobName {
    /// Rides that start and end in the NYC box, events unchanged.
    Cleansing,
    /// Rides ended and passengers per driver per event-time hour.
    PerDriverHourly,
}

impl From<JobName> for Job {
    fn from(j: JobName) -> Job {
        match j {
            JobName::Cleansing => Job::Cleansing,
            JobName::PerDriverHourly => Job::PerDriverHourly,
        }
    }
}

#[derive(clap::Args)]
struct VerifyArgs {
    // -X properties apply to the consumers; the admin client gets the brokers.
    #[command(flatten)]
    conn: Conn,
    /// The job whose output to check.
    #[arg(long, value_enum)]
    job: JobName,
    /// The job's input topic (ride events).
    #[arg(long)]
    input: String,
    /// The job's output topic, read with isolation.level=read_committed.
    #[arg(long)]
    output: String,
    /// The job's window.late_topic: its records were late and left out of the windows, so
    /// the expectation leaves them out too (each must be an END event of the input, once).
    #[arg(long)]
    late: Option<String>,
    /// The job's bounded out-of-orderness, ms: windows its watermark cannot have closed yet
    /// may be absent.
    #[arg(long, default_value_t = 60_000)]
    out_of_orderness_ms: i64,
    /// How long reading the two topics to their ends may take, ms.
    #[arg(long, default_value_t = 300_000)]
    read_timeout_ms: u64,
}

#[derive(clap::Args)]
struct LatencyArgs {
    // -X properties apply to the consumers; the admin client gets the brokers.
    #[command(flatten)]
    conn: Conn,
    /// The job whose output to time.
    #[arg(long, value_enum)]
    job: JobName,
    /// The job's input topic (ride events): where the causes' append times come from.
    #[arg(long)]
    input: String,
    /// The job's output topic, tailed with isolation.level=read_committed from the beginning.
    #[arg(long)]
    output: String,
    /// Output records to wait for (default: the verifier's expected count, from the input
    /// as it is when the command starts).
    #[arg(long, value_name = "N")]
    expect: Option<usize>,
    /// How long to tail the output, ms.
    #[arg(long, default_value_t = 120_000, value_name = "MS")]
    timeout_ms: u64,
    /// The job's bounded out-of-orderness, ms (when its watermark closes a window).
    #[arg(long, default_value_t = 60_000)]
    out_of_orderness_ms: i64,
}

pub async fn run(args: Args) -> Result<ExitCode> {
    match args.action {
        Action::Generate(a) => run_generate(a).await,
        Action::Verify(a) => run_verify(a).await,
        Action::Latency(a) => run_latency(a).await,
    }
}

/// The generator's settings from the flags, each checked with the flag's name.
fn generator_config(a: &GenerateArgs) -> Result<Config> {
    if a.rate == 0 {
        return Err(CliError::Usage(
            "--rate must be at least 1 ride per second".into(),
        ));
    }
    if a.drivers == 0 {
        return Err(CliError::Usage("--drivers must be at least 1".into()));
    }
    if a.outside_percent > 100 {
        return Err(CliError::Usage(format!(
            "--outside-percent is a percentage, at most 100, got {}",
            a.outside_percent
        )));
    }
    if a.partitions < 1 {
        return Err(CliError::Usage(format!(
            "--partitions must be at least 1, got {}",
            a.partitions
        )));
    }
    Ok(Config {
        seed: a.seed,
        rides: a.count,
        rides_per_second: a.rate,
        drivers: a.drivers,
        outside_per_mille: a.outside_percent * 10,
        ..Config::default()
    })
}

/// Creates `topic` with `partitions` unless it exists; returns its partition count.
async fn ensure_topic(admin: &Admin, topic: &str, partitions: i32) -> Result<usize> {
    if let Some(n) = admin.list_topics().await?.get(topic) {
        return Ok(*n);
    }
    admin
        .create_topics(&[NewTopic::new(topic.to_owned(), partitions)])
        .await?;
    Ok(usize::try_from(partitions).unwrap_or(0))
}

async fn run_generate(a: GenerateArgs) -> Result<ExitCode> {
    let config = generator_config(&a)?;
    let events = generate::rides(config).map_err(|e| CliError::Usage(e.to_string()))?;
    let admin = Admin::new(a.conn.brokers_only()?.client()?).await?;
    let partitions = ensure_topic(&admin, &a.topic, a.partitions).await?;
    let producer = feed::producer(&a.conn).await?;
    let (mut outside, mut first, mut last) = (0u64, i64::MAX, i64::MIN);
    let counted = events.inspect(|ride| {
        if ride.is_start && !ride.inside(&NYC) {
            outside += 1;
        }
        first = first.min(ride.event_time);
        last = last.max(ride.event_time);
    });
    let start = Instant::now();
    let fed = feed::feed(producer, a.topic.clone(), counted, a.produce_rate, start).await?;
    let sent = fed.events;
    let secs = fed.secs;
    let span = if sent == 0 {
        "no events".to_owned()
    } else {
        format!("event time {first}..{last} ms")
    };
    println!(
        "taxi generate: {sent} events ({} rides, {outside} leaving the NYC box) to {} ({partitions} partitions), seed {}, {span}; {secs:.2} s, {:.0} events/s",
        a.count,
        a.topic,
        a.seed,
        sent as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

async fn run_verify(a: VerifyArgs) -> Result<ExitCode> {
    let job = Job::from(a.job);
    let admin = Admin::new(a.conn.brokers_only()?.client()?).await?;
    let deadline = Instant::now() + Duration::from_millis(a.read_timeout_ms);
    let topics = JobTopics {
        job,
        input: &a.input,
        output: &a.output,
        out_of_orderness_ms: a.out_of_orderness_ms,
        late: a.late.as_deref(),
    };
    let cmp = topics.compare(&a.conn, &admin, deadline).await?;
    println!("{}", cmp.verdict());
    Ok(if cmp.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A shipped job's topics, as the verifier and the latency probe read them.
pub(crate) struct JobTopics<'a> {
    pub job: Job,
    pub input: &'a str,
    pub output: &'a str,
    pub out_of_orderness_ms: i64,
    /// The job's `window.late_topic`: its records are taken out of the expectation.
    pub late: Option<&'a str>,
}

impl JobTopics<'_> {
    /// The job's expected output, from a read_committed snapshot of its input.
    pub async fn expectation(
        &self,
        conn: &Conn,
        admin: &Admin,
        deadline: Instant,
    ) -> Result<verify::Expected> {
        let mut expectation = ExpectationBuilder::new(self.job, self.out_of_orderness_ms);
        let mut input_error = None;
        read_committed(conn, admin, self.input, "--input", deadline, |r| {
            if input_error.is_none() {
                input_error = expectation.push(&topic_record(r)).err();
            }
        })
        .await?;
        if let Some(e) = input_error {
            return Err(self.bad_input(e));
        }
        if let Some(late) = self.late {
            let mut late_error = None;
            read_committed(conn, admin, late, "--late", deadline, |r| {
                if late_error.is_none() {
                    late_error = expectation.exclude_late(&topic_record(r)).err();
                }
            })
            .await?;
            if let Some(e) = late_error {
                return Err(CliError::Failed(format!(
                    "{late}: {e}; --late is the job's window.late_topic"
                )));
            }
        }
        Ok(expectation.finish())
    }

    /// The verifier's comparison of the job's output (a read_committed snapshot) with the
    /// expectation.
    pub async fn compare(
        &self,
        conn: &Conn,
        admin: &Admin,
        deadline: Instant,
    ) -> Result<verify::Comparison> {
        let expected = self.expectation(conn, admin, deadline).await?;
        let mut actual = Vec::new();
        read_committed(conn, admin, self.output, "--output", deadline, |r| {
            actual.push(topic_record(r))
        })
        .await?;
        tracing::debug!(output = actual.len(), job = self.job.name(), "verified");
        Ok(verify::compare(&expected, &actual))
    }

    /// The causes of the job's output records, from a read_committed snapshot of its input.
    pub async fn causes(&self, conn: &Conn, admin: &Admin, deadline: Instant) -> Result<Causes> {
        let mut causes = Causes::new(self.job, self.out_of_orderness_ms);
        let mut input_error = None;
        read_committed(conn, admin, self.input, "--input", deadline, |r| {
            if input_error.is_none() {
                let appended = Appended {
                    timestamp: r.timestamp,
                    record: topic_record(r),
                };
                input_error = causes.push(&appended).err();
            }
        })
        .await?;
        match input_error {
            Some(e) => Err(self.bad_input(e)),
            None => Ok(causes),
        }
    }

    fn bad_input(&self, e: verify::VerifyError) -> CliError {
        CliError::Input(format!(
            "{}: {e}; the job's input must be the ride events of `onceflow taxi generate` (--input)",
            self.input
        ))
    }
}

async fn run_latency(a: LatencyArgs) -> Result<ExitCode> {
    let admin = Admin::new(a.conn.brokers_only()?.client()?).await?;
    let topics = JobTopics {
        job: Job::from(a.job),
        input: &a.input,
        output: &a.output,
        out_of_orderness_ms: a.out_of_orderness_ms,
        late: None,
    };
    let deadline = Instant::now() + Duration::from_millis(a.timeout_ms);
    if !admin.list_topics().await?.contains_key(&a.output) {
        return Err(CliError::Usage(format!(
            "topic {} (--output) does not exist: give the job's output topic",
            a.output
        )));
    }
    // The probe starts first: a record's visibility is when a poll first hands it over.
    let mut probe = Probe::start(a.conn.consumer(&[])?, &a.output)
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let expect = match a.expect {
        Some(n) => n,
        None => expected_count(&a, &admin, &mut probe, deadline).await?,
    };
    let complete = probe
        .until(expect, deadline)
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
    // The causes come from the input as it is now: every cause precedes its output.
    let read_deadline = Instant::now() + Duration::from_millis(a.timeout_ms);
    let causes = topics.causes(&a.conn, &admin, read_deadline).await?;
    println!("{}", Summary::of(&causes, probe.seen()));
    if complete {
        return Ok(ExitCode::SUCCESS);
    }
    Err(CliError::Failed(format!(
        "{} of {expect} output records of {} came within --timeout-ms {}; give it more time or a smaller --expect",
        probe.seen().len(),
        a.output,
        a.timeout_ms
    )))
}

/// The verifier's count of required output records, from the input read on a task of its
/// own while the probe keeps polling (a record's visibility time stays honest).
async fn expected_count(
    a: &LatencyArgs,
    admin: &Admin,
    probe: &mut Probe,
    deadline: Instant,
) -> Result<usize> {
    let (conn, admin, input, output) = (
        a.conn.clone(),
        admin.clone(),
        a.input.clone(),
        a.output.clone(),
    );
    let (job, ooo) = (Job::from(a.job), a.out_of_orderness_ms);
    let expectation = tokio::spawn(async move {
        let topics = JobTopics {
            job,
            input: &input,
            output: &output,
            out_of_orderness_ms: ooo,
            late: None,
        };
        topics.expectation(&conn, &admin, deadline).await
    });
    while !expectation.is_finished() {
        // The read has the same deadline and reports its own timeout.
        probe
            .poll(Duration::from_millis(100))
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
    }
    let expected = expectation
        .await
        .map_err(|e| CliError::Failed(format!("reading the input: {e}")))??;
    Ok(expected.records.iter().filter(|r| r.required).count())
}

/// The verifier's view of a consumed record.
pub(crate) fn topic_record(r: &ConsumerRecord) -> TopicRecord {
    TopicRecord {
        partition: r.partition,
        offset: r.offset,
        value: r.value.as_ref().map(|v| v.to_vec()),
    }
}

/// Reads every partition of `topic` from the beginning up to the read_committed end
/// (the last stable offset) taken before reading starts, handing each record to `each`
/// (each partition in offset order). Returns how many were read.
///
/// Records appended after that end are left out, so the read is one snapshot even while a
/// job still writes.
async fn read_committed(
    conn: &Conn,
    admin: &Admin,
    topic: &str,
    flag: &str,
    deadline: Instant,
    mut each: impl FnMut(&ConsumerRecord),
) -> Result<usize> {
    let partitions = match admin.list_topics().await?.get(topic) {
        Some(&n) => n,
        None => {
            return Err(CliError::Usage(format!(
                "topic {topic} ({flag}) does not exist: give an existing topic"
            )))
        }
    };
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p as i32))
        .collect();
    let ends = admin
        .list_offsets(&tps, Offset::End, IsolationLevel::ReadCommitted)
        .await?;
    let starts = admin
        .list_offsets(&tps, Offset::Beginning, IsolationLevel::ReadCommitted)
        .await?;
    let wanted: BTreeMap<&TopicPartition, i64> = tps
        .iter()
        .filter_map(|tp| {
            let end = ends.get(tp).copied().unwrap_or(0);
            (end > starts.get(tp).copied().unwrap_or(0)).then_some((tp, end))
        })
        .collect();
    let total: i64 = wanted
        .iter()
        .map(|(tp, end)| end - starts.get(*tp).copied().unwrap_or(0))
        .sum();
    let mut n = 0usize;
    if wanted.is_empty() {
        return Ok(n);
    }
    let mut consumer =
        Consumer::new(conn.consumer(&["isolation.level=read_committed".into()])?).await?;
    consumer
        .assign(wanted.keys().map(|tp| (*tp).clone()))
        .await?;
    for tp in wanted.keys() {
        consumer.seek(tp, Offset::Beginning)?;
    }
    let done = |c: &Consumer| {
        wanted
            .iter()
            .all(|(tp, end)| c.position(tp).is_some_and(|p| p >= *end))
    };
    while !done(&consumer) {
        if Instant::now() >= deadline {
            return Err(CliError::Failed(format!(
                "read {n} records of about {total} of {topic} ({flag}) before --read-timeout-ms ran out; give it more time"
            )));
        }
        for r in consumer.poll(Duration::from_millis(500)).await? {
            let end = wanted
                .get(&TopicPartition::new(topic, r.partition))
                .copied()
                .unwrap_or(0);
            if r.offset < end {
                n += 1;
                each(&r);
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(rate: u32, drivers: u64, outside_percent: u32, partitions: i32) -> GenerateArgs {
        GenerateArgs {
            conn: Conn {
                broker: "h:1".into(),
                props: Vec::new(),
                config_file: None,
            },
            topic: "rides".into(),
            count: 10,
            rate,
            seed: 7,
            partitions,
            drivers,
            outside_percent,
            produce_rate: 0,
        }
    }

    #[test]
    fn generator_flags_out_of_range_are_named() {
        for (a, flag) in [
            (args(0, 1, 10, 1), "--rate"),
            (args(1, 0, 10, 1), "--drivers"),
            (args(1, 1, 101, 1), "--outside-percent"),
            (args(1, 1, 10, 0), "--partitions"),
        ] {
            let e = generator_config(&a).unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
        let c = generator_config(&args(5, 9, 25, 3)).unwrap();
        assert_eq!(
            (
                c.seed,
                c.rides,
                c.rides_per_second,
                c.drivers,
                c.outside_per_mille
            ),
            (7, 10, 5, 9, 250)
        );
    }
}
