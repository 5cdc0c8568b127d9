//! `onceflow taxi generate|verify`: the NYC taxi rides workload (src/engine/taxi).
//!
//! `generate` produces deterministic ride events keyed by driver id with the idempotent
//! producer, or writes the same rides as a TaxiRide CSV file (`--format csv`,
//! `engine::taxi::csv`); `verify` computes a shipped job's expected output from its input
//! topic (or CSV files) and compares it with a read_committed read of the output topic (or a
//! file sink's finished files, `engine::taxi::files`), printing a one-line verdict (exit 0 on
//! OK, 1 on FAILED); `latency` tails a job's output as it is committed and prints its
//! end-to-end latency (`engine::taxi::latency`).

use super::error::{CliError, Result};
use super::feed;
use super::props::Conn;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, Consumer, ConsumerRecord, IsolationLevel, Offset, TopicPartition};
use onceflow::engine::source::{LineFormat, LineFormats, ParsedLine};
use onceflow::engine::taxi::files::Files;
use onceflow::engine::taxi::generate::{self, Config};
use onceflow::engine::taxi::latency::{Appended, Causes, Probe, Summary};
use onceflow::engine::taxi::verify::{self, ExpectationBuilder, Job, TopicRecord};
use onceflow::engine::taxi::{csv, Ride, NYC};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The name a job file's `[source] format` gives [`TaxiCsv`].
pub const TAXI_CSV: &str = "taxi-csv";

/// The line formats `onceflow run` offers a job's file source: [`TAXI_CSV`].
pub fn line_formats() -> LineFormats {
    LineFormats::new().with(TAXI_CSV, Arc::new(TaxiCsv))
}

/// The TaxiRide CSV of Flink's training exercises: each line becomes the ride event `taxi
/// generate` writes (JSON, keyed by driver id, event time the line's `time1`), so the same
/// jobs run on a file and on a topic.
pub struct TaxiCsv;

impl LineFormat for TaxiCsv {
    fn parse(&self, line: &str) -> std::result::Result<ParsedLine, String> {
        let ride = csv::parse_line(line).map_err(|e| e.to_string())?;
        Ok(ParsedLine {
            key: Some(ride.key()),
            value: ride.to_json().into_bytes(),
            event_time: ride.event_time,
        })
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Produce deterministic ride events (a START and an END per ride, keyed by driver id,
    /// out of order by less than 60 s of event time), or write them as a TaxiRide CSV file
    /// (--format csv: in event-time order, times in whole seconds).
    Generate(GenerateArgs),
    /// Compute a job's expected output from its input topic (or CSV files) and compare it
    /// with a read_committed read of its output topic (or a file sink's finished files); print
    /// a one-line verdict (exit 1 on FAILED).
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
    /// Topic to write (created with --partitions if missing), with --format json.
    #[arg(short = 't', long)]
    topic: Option<String>,
    /// What to write: json, the ride events as JSON records produced to --topic (keyed by
    /// driver id, in arrival order); or csv, the TaxiRide CSV lines of the Flink training
    /// exercises written to --output, in event-time order (START before END at equal times)
    /// with event times rounded down to whole seconds.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// The file --format csv writes (replaced if it exists); a name ending .gz is written
    /// gzip-compressed.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// With --format csv: write a header line first (the original data set has none; `taxi
    /// verify --input-file` skips it).
    #[arg(long)]
    header: bool,
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

/// What `taxi generate` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// JSON ride events produced to a Kafka topic.
    #[value(alias = "kafka")]
    Json,
    /// TaxiRide CSV lines written to a file.
    Csv,
}

/// Where `taxi generate` writes, from the flags.
#[derive(Debug, PartialEq, Eq)]
enum Destination {
    /// JSON records to this topic.
    Topic(String),
    /// CSV lines to this file.
    Csv { path: PathBuf, header: bool },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum JobName {
    /// Rides that start and end in the NYC box, events unchanged.
    Cleansing,
    /// Rides ended and passengers per driver per event-time hour.
    PerDriverHourly,
    /// Every input event unchanged, exactly once, in any order (e.g. a file source to a file
    /// sink: the source reorders events by design, so the order is not checked).
    Copy,
}

impl From<JobName> for Job {
    fn from(j: JobName) -> Job {
        match j {
            JobName::Cleansing => Job::Cleansing,
            JobName::PerDriverHourly => Job::PerDriverHourly,
            JobName::Copy => Job::Copy,
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
    /// The job's input topic (ride events); or --input-file.
    #[arg(
        long,
        required_unless_present = "input_file",
        conflicts_with = "input_file"
    )]
    input: Option<String>,
    /// The job's input as TaxiRide CSV instead of a topic: a file, or a directory whose files
    /// (names starting with '.' skipped) are read in name order; a name ending .gz is gzip.
    /// Each file stands for one input partition.
    #[arg(long, value_name = "PATH")]
    input_file: Option<PathBuf>,
    /// The job's output topic, read with isolation.level=read_committed; or --output-dir.
    #[arg(
        long,
        required_unless_present = "output_dir",
        conflicts_with = "output_dir"
    )]
    output: Option<String>,
    /// The job's output as a file sink's directory instead of a topic: its finished files
    /// (names not starting with '.'; subdirectories not entered) in name order, one JSON
    /// record per line. Without a topic on either side no broker is contacted.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// The job's window.late_topic: its records were late and left out of the windows, so
    /// the expectation leaves them out too (each must be an END event of the input, once).
    #[arg(long)]
    late: Option<String>,
    /// The job's bounded out-of-orderness, ms: windows its watermark cannot have closed yet
    /// may be absent.
    #[arg(long, default_value_t = 60_000)]
    out_of_orderness_ms: i64,
    /// How long reading the topics to their ends may take, ms.
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

/// Where to write, from --format, --topic, --output and the flags that go with them.
fn destination(a: &GenerateArgs) -> Result<Destination> {
    let usage = |s: &str| Err(CliError::Usage(s.to_owned()));
    match (a.format, &a.topic, &a.output) {
        (Format::Json, Some(topic), None) if !a.header => Ok(Destination::Topic(topic.clone())),
        (Format::Json, _, Some(_)) => usage(
            "--output is the file of --format csv: give --topic to produce to a topic, or add \
             --format csv",
        ),
        (Format::Json, None, None) => usage(
            "--topic is needed with --format json (the default): give the topic to produce to, \
             or --format csv --output FILE",
        ),
        (Format::Json, Some(_), None) => usage("--header is for --format csv: leave it out"),
        (Format::Csv, Some(_), _) => {
            usage("--topic is for --format json: with --format csv give only --output FILE")
        }
        (Format::Csv, None, None) => {
            usage("--format csv writes a file: give --output FILE (a name ending .gz is gzip)")
        }
        (Format::Csv, None, Some(_)) if a.produce_rate > 0 => {
            usage("--produce-rate paces producing to a topic: leave it out with --format csv")
        }
        (Format::Csv, None, Some(path)) => Ok(Destination::Csv {
            path: path.clone(),
            header: a.header,
        }),
    }
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

/// What was generated, for the summary line.
#[derive(Debug, Clone, Copy)]
struct Generated {
    /// Rides leaving the NYC box (counted at their START).
    outside: u64,
    /// The smallest and largest event time.
    first: i64,
    last: i64,
}

impl Generated {
    fn new() -> Self {
        Generated {
            outside: 0,
            first: i64::MAX,
            last: i64::MIN,
        }
    }

    fn count(&mut self, ride: &Ride) {
        if ride.is_start && !ride.inside(&NYC) {
            self.outside += 1;
        }
        self.first = self.first.min(ride.event_time);
        self.last = self.last.max(ride.event_time);
    }

    /// `event time F..L ms`, or `no events`.
    fn span(&self, events: u64) -> String {
        if events == 0 {
            "no events".to_owned()
        } else {
            format!("event time {}..{} ms", self.first, self.last)
        }
    }
}

async fn run_generate(a: GenerateArgs) -> Result<ExitCode> {
    let config = generator_config(&a)?;
    let (path, header) = match destination(&a)? {
        Destination::Topic(topic) => return generate_to_topic(&a, config, &topic).await,
        Destination::Csv { path, header } => (path, header),
    };
    let start = Instant::now();
    let to = path.clone();
    // Writing a file blocks: off the runtime's threads.
    let (events, generated) = tokio::task::spawn_blocking(move || write_csv(config, &to, header))
        .await
        .map_err(|e| CliError::Failed(format!("writing {}: {e}", path.display())))??;
    let secs = start.elapsed().as_secs_f64();
    let gzip = if is_gzip(&path) { ", gzip" } else { "" };
    println!(
        "taxi generate: {events} events ({} rides, {} leaving the NYC box) to {} (TaxiRide CSV{gzip}, event-time order, whole seconds), seed {}, {}; {secs:.2} s, {:.0} events/s",
        a.count,
        generated.outside,
        path.display(),
        a.seed,
        generated.span(events),
        events as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

async fn generate_to_topic(a: &GenerateArgs, config: Config, topic: &str) -> Result<ExitCode> {
    let events = generate::rides(config).map_err(|e| CliError::Usage(e.to_string()))?;
    let admin = Admin::new(a.conn.brokers_only()?.client()?).await?;
    let partitions = ensure_topic(&admin, topic, a.partitions).await?;
    let producer = feed::producer(&a.conn).await?;
    let mut generated = Generated::new();
    let counted = events.inspect(|ride| generated.count(ride));
    let start = Instant::now();
    let fed = feed::feed(producer, topic.to_owned(), counted, a.produce_rate, start).await?;
    let sent = fed.events;
    let secs = fed.secs;
    println!(
        "taxi generate: {sent} events ({} rides, {} leaving the NYC box) to {topic} ({partitions} partitions), seed {}, {}; {secs:.2} s, {:.0} events/s",
        a.count,
        generated.outside,
        a.seed,
        generated.span(sent),
        sent as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

fn is_gzip(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Writes the rides of `config` to `path` as TaxiRide CSV lines in event-time order, times in
/// whole seconds (the format has no more; the rides are rounded before sorting, so the file's
/// order and its times agree), gzip-compressed when the name ends .gz; returns how many events.
fn write_csv(config: Config, path: &Path, header: bool) -> Result<(u64, Generated)> {
    let sorted =
        generate::rides_by_event_time(config, 1000).map_err(|e| CliError::Usage(e.to_string()))?;
    let file = std::fs::File::create(path).map_err(|e| {
        CliError::Failed(format!(
            "cannot create {} (--output): {e}; give a file in a writable directory",
            path.display()
        ))
    })?;
    let failed = |e: std::io::Error| {
        CliError::Failed(format!(
            "cannot write {} (--output): {e}; the file is incomplete",
            path.display()
        ))
    };
    let mut out = std::io::BufWriter::new(file);
    let mut generated = Generated::new();
    let lines = csv::lines(sorted.inspect(|ride| generated.count(ride)));
    let events = if is_gzip(path) {
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        let n = write_lines(&mut gz, header, lines).map_err(failed)?;
        gz.finish().map_err(failed)?;
        n
    } else {
        write_lines(&mut out, header, lines).map_err(failed)?
    };
    out.flush().map_err(failed)?;
    Ok((events, generated))
}

/// Writes `lines`, each ended by \n, after [`csv::HEADER`] when `header`; returns how many
/// lines (the header not counted).
fn write_lines(
    out: &mut impl Write,
    header: bool,
    lines: impl Iterator<Item = String>,
) -> std::io::Result<u64> {
    if header {
        writeln!(out, "{}", csv::HEADER)?;
    }
    let mut n = 0;
    for line in lines {
        writeln!(out, "{line}")?;
        n += 1;
    }
    Ok(n)
}

async fn run_verify(a: VerifyArgs) -> Result<ExitCode> {
    let job = Job::from(a.job);
    let deadline = Instant::now() + Duration::from_millis(a.read_timeout_ms);
    // A broker only for a topic: files alone are verified without one.
    let admin = if a.input.is_some() || a.output.is_some() || a.late.is_some() {
        Some(Admin::new(a.conn.brokers_only()?.client()?).await?)
    } else {
        None
    };
    let mut expectation = ExpectationBuilder::new(job, a.out_of_orderness_ms);
    match (&a.input, &a.input_file, &admin) {
        (Some(topic), _, Some(admin)) => {
            expect_from_topic(&a.conn, admin, topic, deadline, &mut expectation).await?
        }
        (None, Some(path), _) => expect_from_files(path, &mut expectation)?,
        _ => {
            return Err(CliError::Usage(
                "give the job's input: --input TOPIC or --input-file PATH".into(),
            ))
        }
    }
    if let (Some(late), Some(admin)) = (&a.late, &admin) {
        exclude_late(&a.conn, admin, late, deadline, &mut expectation).await?;
    }
    let expected = expectation.finish();
    let cmp = match (&a.output, &a.output_dir, &admin) {
        (Some(topic), _, Some(admin)) => verify::compare(
            &expected,
            &read_output(&a.conn, admin, topic, deadline).await?,
        ),
        (None, Some(dir), _) => {
            let bad = |e| CliError::Input(format!("--output-dir: {e}"));
            let files = Files::output(dir).map_err(bad)?;
            let actual = files.json_records().map_err(bad)?;
            verify::compare_located(&expected, &actual, |p, o| files.locate(p, o))
        }
        _ => {
            return Err(CliError::Usage(
                "give the job's output: --output TOPIC or --output-dir DIR".into(),
            ))
        }
    };
    tracing::debug!(output = cmp.read, job = job.name(), "verified");
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
        expect_from_topic(conn, admin, self.input, deadline, &mut expectation).await?;
        if let Some(late) = self.late {
            exclude_late(conn, admin, late, deadline, &mut expectation).await?;
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
        let actual = read_output(conn, admin, self.output, deadline).await?;
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
            Some(e) => Err(bad_input(self.input, e)),
            None => Ok(causes),
        }
    }
}

fn bad_input(input: &str, e: verify::VerifyError) -> CliError {
    CliError::Input(format!(
        "{input}: {e}; the job's input must be the ride events of `onceflow taxi generate` (--input)"
    ))
}

/// A read_committed snapshot of the job's output topic.
async fn read_output(
    conn: &Conn,
    admin: &Admin,
    output: &str,
    deadline: Instant,
) -> Result<Vec<TopicRecord>> {
    let mut actual = Vec::new();
    read_committed(conn, admin, output, "--output", deadline, |r| {
        actual.push(topic_record(r))
    })
    .await?;
    Ok(actual)
}

/// Pushes a read_committed snapshot of the input topic into `expectation`.
async fn expect_from_topic(
    conn: &Conn,
    admin: &Admin,
    input: &str,
    deadline: Instant,
    expectation: &mut ExpectationBuilder,
) -> Result<()> {
    let mut input_error = None;
    read_committed(conn, admin, input, "--input", deadline, |r| {
        if input_error.is_none() {
            input_error = expectation.push(&topic_record(r)).err();
        }
    })
    .await?;
    match input_error {
        Some(e) => Err(bad_input(input, e)),
        None => Ok(()),
    }
}

/// Pushes the ride events of the CSV file(s) at `path` into `expectation`: each file is one
/// input partition, its events the records a topic keyed by driver would hold.
fn expect_from_files(path: &Path, expectation: &mut ExpectationBuilder) -> Result<()> {
    let bad = |e| CliError::Input(format!("--input-file: {e}"));
    let files = Files::input(path).map_err(bad)?;
    let mut input_error = None;
    files
        .for_each_csv_record(|r| {
            if input_error.is_none() {
                input_error = expectation.push(r).err();
            }
        })
        .map_err(bad)?;
    match input_error {
        // The records are the JSON of rides just parsed: pushing them cannot fail, but a
        // failure is still reported, not ignored.
        Some(e) => Err(CliError::Failed(format!(
            "--input-file {}: {e}",
            path.display()
        ))),
        None => Ok(()),
    }
}

/// Takes the records of the job's `window.late_topic` out of `expectation`.
async fn exclude_late(
    conn: &Conn,
    admin: &Admin,
    late: &str,
    deadline: Instant,
    expectation: &mut ExpectationBuilder,
) -> Result<()> {
    let mut late_error = None;
    read_committed(conn, admin, late, "--late", deadline, |r| {
        if late_error.is_none() {
            late_error = expectation.exclude_late(&topic_record(r)).err();
        }
    })
    .await?;
    match late_error {
        Some(e) => Err(CliError::Failed(format!(
            "{late}: {e}; --late is the job's window.late_topic"
        ))),
        None => Ok(()),
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
            topic: Some("rides".into()),
            format: Format::Json,
            output: None,
            header: false,
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

    /// --format with --topic / --output / --header / --produce-rate: the destination, or the
    /// one-line error naming the flag.
    #[test]
    fn the_format_decides_between_topic_and_file_and_odd_combinations_are_named() {
        let with = |format, topic: Option<&str>, output: Option<&str>, header, produce_rate| {
            let mut a = args(10, 200, 10, 3);
            a.format = format;
            a.topic = topic.map(str::to_owned);
            a.output = output.map(PathBuf::from);
            a.header = header;
            a.produce_rate = produce_rate;
            destination(&a).map_err(|e| e.to_string())
        };
        let csv = |path: &str, header| {
            Ok(Destination::Csv {
                path: PathBuf::from(path),
                header,
            })
        };
        type Outcome<E> = std::result::Result<Destination, E>;
        let cases: Vec<(Outcome<String>, Outcome<&str>)> = vec![
            (
                with(Format::Json, Some("t"), None, false, 5),
                Ok(Destination::Topic("t".into())),
            ),
            (
                with(Format::Csv, None, Some("r.csv"), false, 0),
                csv("r.csv", false),
            ),
            (
                with(Format::Csv, None, Some("r.csv.gz"), true, 0),
                csv("r.csv.gz", true),
            ),
            (
                with(Format::Json, None, None, false, 0),
                Err("--topic is needed"),
            ),
            (
                with(Format::Json, Some("t"), Some("f"), false, 0),
                Err("--output is the file"),
            ),
            (
                with(Format::Json, Some("t"), None, true, 0),
                Err("--header is for --format csv"),
            ),
            (
                with(Format::Csv, Some("t"), Some("f"), false, 0),
                Err("--topic is for --format json"),
            ),
            (
                with(Format::Csv, None, None, false, 0),
                Err("--format csv writes a file"),
            ),
            (
                with(Format::Csv, None, Some("f"), false, 9),
                Err("--produce-rate"),
            ),
        ];
        for (got, want) in cases {
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w),
                (Err(g), Err(w)) => assert!(g.starts_with(w), "{g}"),
                (g, w) => panic!("{g:?} but expected {w:?}"),
            }
        }
    }

    /// The CSV file: every event once, in event-time order, times in whole seconds, the same
    /// rides as the topic mode's apart from the fractions of their seconds; gzip when the name
    /// ends .gz, with the optional header.
    #[test]
    fn csv_mode_writes_the_generated_rides_in_event_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            rides: 300,
            ..Config::default()
        };
        let plain = dir.path().join("r.csv");
        let (n, generated) = write_csv(config.clone(), &plain, false).unwrap();
        assert_eq!(n, 600);
        let text = std::fs::read_to_string(&plain).unwrap();
        let rides: Vec<Ride> = text.lines().map(|l| csv::parse_line(l).unwrap()).collect();
        assert_eq!(rides.len(), 600);
        assert!(rides.windows(2).all(|w| w[0].event_time <= w[1].event_time));
        assert!(rides.iter().all(|r| r.event_time % 1000 == 0));
        assert_eq!(
            (generated.first, generated.last),
            (rides[0].event_time, rides[599].event_time)
        );
        let mut from_topic_mode: Vec<Ride> = generate::rides(config.clone())
            .unwrap()
            .map(|mut r| {
                r.event_time -= r.event_time % 1000;
                r
            })
            .collect();
        from_topic_mode.sort_by_key(|r| (r.event_time, !r.is_start, r.ride_id));
        assert!(rides == from_topic_mode);
        let gz = dir.path().join("r.csv.gz");
        write_csv(config, &gz, true).unwrap();
        let mut unzipped = String::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap())
            .read_to_string(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, format!("{}\n{text}", csv::HEADER));
        let e = write_csv(
            Config::default(),
            &dir.path().join("no/such/dir.csv"),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("cannot create ") && e.contains("(--output)"),
            "{e}"
        );
    }
}
