//! The NYC taxi rides workload's commands, over the pure workload of the `onceflow-taxi` crate
//! (the ride event, the generator, the TaxiRide CSV, the verifier, the latency arithmetic):
//! this module does their Kafka reads and writes.
//!
//! - `onceflow taxi generate` ([`generate`]): deterministic ride events produced to a topic
//!   (keyed by driver id, with the idempotent producer of [`feed`]) or written as a TaxiRide CSV
//!   file.
//! - `onceflow taxi verify` ([`verify`]): a shipped job's expected output from its input topic
//!   (or CSV files) compared with a read_committed read of its output topic (or a file sink's
//!   finished files); a one-line verdict, exit 1 on FAILED.
//! - `onceflow taxi latency` ([`latency`]): a job's output tailed as it is committed
//!   ([`probe`]), its end-to-end latency in one line.
//! - `onceflow demo` ([`demo`]): the per-driver-hourly job SIGKILLed and restarted while rides
//!   stream in, then the verdict, the throughput and the latency.

pub mod demo;
mod feed;
mod generate;
mod latency;
mod probe;
mod verify;

use crate::error::Result;
use std::process::ExitCode;

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
    Generate(generate::GenerateArgs),
    /// Compute a job's expected output from its input topic (or CSV files) and compare it
    /// with a read_committed read of its output topic (or a file sink's finished files); print
    /// a one-line verdict (exit 1 on FAILED).
    Verify(verify::VerifyArgs),
    /// Tail a job's output (read_committed) from the beginning until N records or the
    /// timeout, then print its end-to-end latency in one line: `latency: N results, p50 X ms,
    /// p99 Y ms, max Z ms` (exit 1 when fewer than N records came).
    Latency(latency::LatencyArgs),
}

/// Runs `onceflow taxi …`.
pub async fn run(args: Args) -> Result<ExitCode> {
    match args.action {
        Action::Generate(a) => generate::run(a).await,
        Action::Verify(a) => verify::run(a).await,
        Action::Latency(a) => latency::run(a).await,
    }
}
