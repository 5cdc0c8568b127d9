//! `onceflow taxi verify`: a shipped job's expected output ([`onceflow_taxi::verify`]) from a
//! read_committed snapshot of its input topic (or its CSV input files,
//! [`onceflow_taxi::files`]) and, for rides-and-fares, of its fares topic, compared with a
//! read_committed snapshot of its output topic (or a file sink's finished files); a one-line
//! verdict (exit 0 on OK, 1 on FAILED). The input is the ride events, but for
//! hourly-top-drivers-by-tips, which reads the fares topic alone. [`JobTopics`] is the same
//! reading for the latency command and the demo.

use crate::error::{CliError, Result};
use crate::props::Conn;
use crate::schema::{Decoders, RegistryArgs, Serdes};
use clap::builder::PossibleValue;
use onceflow::client::{Admin, Consumer, ConsumerRecord, IsolationLevel, Offset, TopicPartition};
use onceflow_taxi::files::Files;
use onceflow_taxi::latency::{Appended, Causes};
use onceflow_taxi::verify::{self, ExpectationBuilder, Job, TopicRecord};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `--job` of `taxi latency`: a shipped job whose output is timed (or checked: see
/// [`VerifyJobName`] for the jobs `taxi verify` checks).
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum JobName {
    /// Rides that start and end in the NYC box, events unchanged.
    Cleansing,
    /// Rides ended and passengers per driver per event-time hour.
    PerDriverHourly,
    /// Every input event unchanged, exactly once, in any order (e.g. a file source to a file
    /// sink: the source reorders events by design, so the order is not checked).
    Copy,
    /// Rides and passengers per driver per shift: session windows of drop-offs 30 minutes
    /// apart at most.
    DriverShifts,
    /// Each ride's START event joined with its fare (within a minute of it), keyed by ride id:
    /// the fares topic is its second input (--fares).
    RidesAndFares,
}

impl From<JobName> for Job {
    fn from(j: JobName) -> Job {
        match j {
            JobName::Cleansing => Job::Cleansing,
            JobName::PerDriverHourly => Job::PerDriverHourly,
            JobName::Copy => Job::Copy,
            JobName::DriverShifts => Job::DriverShifts,
            JobName::RidesAndFares => Job::RidesAndFares,
        }
    }
}

/// `--job` of `taxi verify`: every [`JobName`], and the jobs whose output is checked but not
/// timed (`taxi latency` reads ride events, and their input is not).
#[derive(Clone, Copy)]
enum VerifyJobName {
    /// A job `taxi latency` times too.
    Timed(JobName),
    /// The three drivers with the most tips per event-time hour.
    HourlyTopDriversByTips,
}

impl clap::ValueEnum for VerifyJobName {
    fn value_variants<'a>() -> &'a [Self] {
        // Every `JobName` (a test checks none is left out), then the jobs of verify alone.
        &[
            VerifyJobName::Timed(JobName::Cleansing),
            VerifyJobName::Timed(JobName::PerDriverHourly),
            VerifyJobName::Timed(JobName::Copy),
            VerifyJobName::Timed(JobName::DriverShifts),
            VerifyJobName::Timed(JobName::RidesAndFares),
            VerifyJobName::HourlyTopDriversByTips,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            VerifyJobName::Timed(job) => job.to_possible_value(),
            VerifyJobName::HourlyTopDriversByTips => {
                Some(PossibleValue::new(Job::HourlyTopTips.name()).help(
                    "The three drivers with the most tips per event-time hour, a record per \
                     rank, keyed by the hour: its only input is the fares topic (--input)",
                ))
            }
        }
    }
}

impl From<VerifyJobName> for Job {
    fn from(j: VerifyJobName) -> Job {
        match j {
            VerifyJobName::Timed(job) => Job::from(job),
            VerifyJobName::HourlyTopDriversByTips => Job::HourlyTopTips,
        }
    }
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    // -X properties apply to the consumers; the admin client gets the brokers.
    #[command(flatten)]
    conn: Conn,
    /// The job whose output to check.
    #[arg(long, value_enum)]
    job: VerifyJobName,
    /// The job's input topic: the ride events, or for hourly-top-drivers-by-tips the fares
    /// (`taxi generate --fares`); or --input-file.
    #[arg(
        long,
        required_unless_present = "input_file",
        conflicts_with = "input_file"
    )]
    input: Option<String>,
    /// The job's input as TaxiRide CSV instead of a topic: a file, or a directory whose files
    /// (names starting with '.' skipped) are read in name order; a name ending .gz is gzip.
    /// Each file stands for one input partition. Not for hourly-top-drivers-by-tips, which
    /// reads fares.
    #[arg(long, value_name = "PATH")]
    input_file: Option<PathBuf>,
    /// The rides-and-fares job's second input: the fares topic (`taxi generate --fares`),
    /// read with isolation.level=read_committed. Not for hourly-top-drivers-by-tips, whose
    /// fares are its --input.
    #[arg(long, value_name = "TOPIC")]
    fares: Option<String>,
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
    /// The topics' values are in the schema registry's wire format: value=avro,
    /// value=protobuf or value=json-schema (read as the engine's pipelines read them). Needs
    /// -r.
    #[arg(short = 's', long = "serde", value_name = "value=FORMAT")]
    serdes: Vec<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `onceflow taxi verify`.
pub async fn run(a: VerifyArgs) -> Result<ExitCode> {
    let serdes = Serdes::parse(&a.serdes)?;
    let registry = a.registry.registry(&a.conn, serdes.needs_registry())?;
    let decoders = registry.as_ref().map(|r| Decoders::new(&serdes, Some(r)));
    let decoders = decoders.as_ref();
    let a = VerifyArgs {
        conn: a.conn.without_registry_properties()?,
        ..a
    };
    let job = Job::from(a.job);
    check_fares(job, a.fares.as_deref())?;
    check_input_file(job, a.input_file.as_deref())?;
    let deadline = Instant::now() + Duration::from_millis(a.read_timeout_ms);
    // A broker only for a topic: files alone are verified without one.
    let admin = if a.input.is_some() || a.output.is_some() || a.late.is_some() || a.fares.is_some()
    {
        Some(Admin::new(a.conn.brokers_only()?.client()?).await?)
    } else {
        None
    };
    let mut expectation = ExpectationBuilder::new(job, a.out_of_orderness_ms);
    match (&a.input, &a.input_file, &admin) {
        (Some(topic), _, Some(admin)) => {
            expect_from_topic(
                &a.conn,
                admin,
                topic,
                (deadline, decoders),
                &mut expectation,
            )
            .await?
        }
        (None, Some(path), _) => expect_from_files(path, &mut expectation)?,
        _ => {
            return Err(CliError::Usage(
                "give the job's input: --input TOPIC or --input-file PATH".into(),
            ))
        }
    }
    if let (Some(fares), Some(admin)) = (&a.fares, &admin) {
        expect_fares(
            &a.conn,
            admin,
            fares,
            (deadline, decoders),
            &mut expectation,
        )
        .await?;
    }
    if let (Some(late), Some(admin)) = (&a.late, &admin) {
        exclude_late(&a.conn, admin, late, (deadline, decoders), &mut expectation).await?;
    }
    let expected = expectation.finish();
    let cmp = match (&a.output, &a.output_dir, &admin) {
        (Some(topic), _, Some(admin)) => verify::compare(
            &expected,
            &read_output(&a.conn, admin, topic, deadline, decoders).await?,
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
pub struct JobTopics<'a> {
    pub job: Job,
    pub input: &'a str,
    pub output: &'a str,
    pub out_of_orderness_ms: i64,
    /// The rides-and-fares job's fares topic, its second input (required for that job, and
    /// only for it).
    pub fares: Option<&'a str>,
    /// The job's `window.late_topic`: its records are taken out of the expectation.
    pub late: Option<&'a str>,
    /// How the topics' values are read when they are not JSON (`-s`).
    pub decoders: Option<&'a Decoders>,
}

impl JobTopics<'_> {
    /// The job's expected output, from a read_committed snapshot of its input (and of its
    /// fares, for rides-and-fares).
    pub async fn expectation(
        &self,
        conn: &Conn,
        admin: &Admin,
        deadline: Instant,
    ) -> Result<verify::Expected> {
        check_fares(self.job, self.fares)?;
        let mut expectation = ExpectationBuilder::new(self.job, self.out_of_orderness_ms);
        let reading = (deadline, self.decoders);
        expect_from_topic(conn, admin, self.input, reading, &mut expectation).await?;
        if let Some(fares) = self.fares {
            expect_fares(conn, admin, fares, reading, &mut expectation).await?;
        }
        if let Some(late) = self.late {
            exclude_late(conn, admin, late, reading, &mut expectation).await?;
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
        let actual = read_output(conn, admin, self.output, deadline, self.decoders).await?;
        tracing::debug!(output = actual.len(), job = self.job.name(), "verified");
        Ok(verify::compare(&expected, &actual))
    }

    /// The causes of the job's output records, from a read_committed snapshot of its input.
    pub async fn causes(&self, conn: &Conn, admin: &Admin, deadline: Instant) -> Result<Causes> {
        let mut causes = Causes::new(self.job, self.out_of_orderness_ms);
        let mut input_error = None;
        read_committed(
            conn,
            admin,
            (self.input, "--input"),
            deadline,
            self.decoders,
            |r| {
                if input_error.is_none() {
                    let appended = Appended {
                        timestamp: r.timestamp,
                        record: topic_record(r),
                    };
                    input_error = causes.push(&appended).err();
                }
            },
        )
        .await?;
        match input_error {
            Some(e) => Err(bad_input(self.job, self.input, e)),
            None => Ok(causes),
        }
    }
}

fn bad_input(job: Job, input: &str, e: verify::VerifyError) -> CliError {
    let what = if job == Job::HourlyTopTips {
        "the fares of `onceflow taxi generate --fares`"
    } else {
        "the ride events of `onceflow taxi generate`"
    };
    CliError::Input(format!(
        "{input}: {e}; the job's input must be {what} (--input)"
    ))
}

/// A read_committed snapshot of the job's output topic.
async fn read_output(
    conn: &Conn,
    admin: &Admin,
    output: &str,
    deadline: Instant,
    decoders: Option<&Decoders>,
) -> Result<Vec<TopicRecord>> {
    let mut actual = Vec::new();
    read_committed(conn, admin, (output, "--output"), deadline, decoders, |r| {
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
    (deadline, decoders): (Instant, Option<&Decoders>),
    expectation: &mut ExpectationBuilder,
) -> Result<()> {
    let mut input_error = None;
    read_committed(conn, admin, (input, "--input"), deadline, decoders, |r| {
        if input_error.is_none() {
            input_error = expectation.push(&topic_record(r)).err();
        }
    })
    .await?;
    match input_error {
        Some(e) => Err(bad_input(expectation.job(), input, e)),
        None => Ok(()),
    }
}

/// The fares topic is given for the rides-and-fares job, which joins it, and for no other
/// (hourly-top-drivers-by-tips reads the fares as its only input, --input).
fn check_fares(job: Job, fares: Option<&str>) -> Result<()> {
    match (job, fares) {
        (Job::HourlyTopTips, Some(_)) => Err(CliError::Usage(
            "--job hourly-top-drivers-by-tips reads the fares as its only input: give the \
             fares topic as --input TOPIC, without --fares"
                .into(),
        )),
        (Job::RidesAndFares, None) => Err(CliError::Usage(
            "--job rides-and-fares joins the rides with their fares: add --fares TOPIC (the \
             fares topic of `taxi generate --fares`)"
                .into(),
        )),
        (Job::RidesAndFares, Some(_)) | (_, None) => Ok(()),
        (other, Some(_)) => Err(CliError::Usage(format!(
            "--fares is the rides-and-fares job's second input: only --job rides-and-fares \
             reads fares, not --job {}",
            other.name()
        ))),
    }
}

/// Input files are ride events (TaxiRide CSV): not the input of hourly-top-drivers-by-tips,
/// which reads fares.
fn check_input_file(job: Job, input_file: Option<&Path>) -> Result<()> {
    match (job, input_file) {
        (Job::HourlyTopTips, Some(_)) => Err(CliError::Usage(
            "--input-file holds ride events, but --job hourly-top-drivers-by-tips reads the \
             fares: give the fares topic as --input TOPIC"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// Pushes a read_committed snapshot of the fares topic into `expectation`.
async fn expect_fares(
    conn: &Conn,
    admin: &Admin,
    fares: &str,
    (deadline, decoders): (Instant, Option<&Decoders>),
    expectation: &mut ExpectationBuilder,
) -> Result<()> {
    let mut fare_error = None;
    read_committed(conn, admin, (fares, "--fares"), deadline, decoders, |r| {
        if fare_error.is_none() {
            fare_error = expectation.push_fare(&topic_record(r)).err();
        }
    })
    .await?;
    match fare_error {
        Some(e) => Err(CliError::Input(format!(
            "{fares}: {e}; --fares must be the fares of `onceflow taxi generate --fares`"
        ))),
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
    (deadline, decoders): (Instant, Option<&Decoders>),
    expectation: &mut ExpectationBuilder,
) -> Result<()> {
    let mut late_error = None;
    read_committed(conn, admin, (late, "--late"), deadline, decoders, |r| {
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

/// The verifier's view of a consumed record.
fn topic_record(r: &ConsumerRecord) -> TopicRecord {
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
    (topic, flag): (&str, &str),
    deadline: Instant,
    decoders: Option<&Decoders>,
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
        for mut r in consumer.poll(Duration::from_millis(500)).await? {
            let end = wanted
                .get(&TopicPartition::new(topic, r.partition))
                .copied()
                .unwrap_or(0);
            if r.offset < end {
                n += 1;
                if let Some(d) = decoders {
                    r.value = d.plain_value(&r).await?;
                }
                each(&r);
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every job with and without --fares: only rides-and-fares takes them, and needs them;
    /// hourly-top-drivers-by-tips is told to give them as --input.
    #[test]
    fn fares_are_required_by_rides_and_fares_and_refused_by_the_others() {
        assert!(check_fares(Job::RidesAndFares, Some("fares")).is_ok());
        let e = check_fares(Job::RidesAndFares, None).unwrap_err();
        assert!(matches!(e, CliError::Usage(_)), "{e}");
        assert!(e.to_string().contains("add --fares TOPIC"), "{e}");
        for job in [
            JobName::Cleansing,
            JobName::PerDriverHourly,
            JobName::Copy,
            JobName::DriverShifts,
        ] {
            let job = Job::from(job);
            assert!(check_fares(job, None).is_ok(), "{}", job.name());
            let e = check_fares(job, Some("fares")).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "--fares is the rides-and-fares job's second input: only --job \
                     rides-and-fares reads fares, not --job {}",
                    job.name()
                )
            );
        }
        assert_eq!(Job::from(JobName::RidesAndFares).name(), "rides-and-fares");
        assert!(check_fares(Job::HourlyTopTips, None).is_ok());
        assert_eq!(
            check_fares(Job::HourlyTopTips, Some("fares"))
                .unwrap_err()
                .to_string(),
            "--job hourly-top-drivers-by-tips reads the fares as its only input: give the \
             fares topic as --input TOPIC, without --fares"
        );
        let e = check_input_file(Job::HourlyTopTips, Some(Path::new("rides.csv"))).unwrap_err();
        assert!(matches!(e, CliError::Usage(_)), "{e}");
        assert!(check_input_file(Job::HourlyTopTips, None).is_ok());
        assert!(check_input_file(Job::Cleansing, Some(Path::new("rides.csv"))).is_ok());
    }

    /// `taxi verify --job` takes every job `taxi latency` does, by the same name, and
    /// hourly-top-drivers-by-tips; `taxi latency` does not take the latter.
    #[test]
    fn verify_names_every_job() {
        use clap::ValueEnum;
        let names = |values: Vec<Option<PossibleValue>>| -> Vec<String> {
            values
                .into_iter()
                .flatten()
                .map(|v| v.get_name().to_owned())
                .collect()
        };
        let timed = names(
            JobName::value_variants()
                .iter()
                .map(ValueEnum::to_possible_value)
                .collect(),
        );
        let verified = names(
            VerifyJobName::value_variants()
                .iter()
                .map(ValueEnum::to_possible_value)
                .collect(),
        );
        assert_eq!(
            verified,
            [timed.clone(), vec!["hourly-top-drivers-by-tips".to_owned()]].concat()
        );
        for j in VerifyJobName::value_variants() {
            let job = Job::from(*j);
            let name = j.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(job.name()));
        }
        let hourly = VerifyJobName::from_str("hourly-top-drivers-by-tips", false).unwrap();
        assert_eq!(Job::from(hourly), Job::HourlyTopTips);
        assert!(JobName::from_str("hourly-top-drivers-by-tips", false).is_err());
    }
}
