//! `onceflow taxi latency`: tails a job's output topic as it is committed ([`Probe`]) and prints
//! its end-to-end latency ([`onceflow_taxi::latency`]): each output record's visibility time
//! minus the append time of the input record that caused it.

use super::probe::Probe;
use super::verify::{JobName, JobTopics};
use crate::error::{CliError, Result};
use crate::props::Conn;
use onceflow::client::Admin;
use onceflow_taxi::latency::Summary;
use onceflow_taxi::verify::Job;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct LatencyArgs {
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

/// Runs `onceflow taxi latency`.
pub async fn run(a: LatencyArgs) -> Result<ExitCode> {
    // The expected count comes from the input alone, and rides-and-fares needs its fares too.
    if Job::from(a.job) == Job::RidesAndFares && a.expect.is_none() {
        return Err(CliError::Usage(
            "taxi latency reads no fares, so it cannot count the rides-and-fares job's \
             expected output: give --expect N"
                .into(),
        ));
    }
    let admin = Admin::new(a.conn.brokers_only()?.client()?).await?;
    // The causes come from the rides alone (see `onceflow_taxi::latency`).
    let topics = JobTopics {
        decoders: None,
        job: Job::from(a.job),
        input: &a.input,
        output: &a.output,
        out_of_orderness_ms: a.out_of_orderness_ms,
        fares: None,
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
    let mut probe = Probe::start(a.conn.consumer(&[])?, &a.output).await?;
    let expect = match a.expect {
        Some(n) => n,
        None => expected_count(&a, &admin, &mut probe, deadline).await?,
    };
    let complete = probe.until(expect, deadline).await?;
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
            decoders: None,
            job,
            input: &input,
            output: &output,
            out_of_orderness_ms: ooo,
            fares: None,
            late: None,
        };
        topics.expectation(&conn, &admin, deadline).await
    });
    while !expectation.is_finished() {
        // The read has the same deadline and reports its own timeout.
        probe.poll(Duration::from_millis(100)).await?;
    }
    let expected = expectation
        .await
        .map_err(|e| CliError::Failed(format!("reading the input: {e}")))??;
    Ok(expected.records.iter().filter(|r| r.required).count())
}
