//! The `onceflow` binary: a kcat-style command line over the onceflow client.
//!
//! Every failure is reported as one line on stderr with a non-zero exit code; nothing here
//! panics on bad input or waits past the configured timeouts.
//!
//! The CLI is a thin layer over the library: each subcommand parses its flags (the connection
//! options `-b`/`-X` are one shared `props::Conn`), calls the public client API, and prints;
//! what it cannot do through that API belongs in the library. Its errors are
//! `error::CliError`: usage errors it finds itself, client errors passed through.

mod consume;
mod error;
mod groups;
mod produce;
mod progress;
mod props;
mod run;
mod schema;
mod taxi;
mod topics;
mod txn;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "onceflow",
    version,
    about = "A pure-Rust Kafka client with exactly-once delivery"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read lines from stdin and produce them as records.
    Produce(produce::Args),
    /// Consume records and print them on stdout.
    Consume(consume::Args),
    /// Create, delete or list topics.
    Topics(topics::Args),
    /// List, describe, abort (fence) or commit transactions.
    Txn(txn::Args),
    /// List consumer groups, or describe them: members, committed offsets and lag.
    Groups(groups::Args),
    /// Run the demo against a local broker: the per-driver-hourly job, SIGKILLed and restarted
    /// while rides stream in, writes every result exactly once (verdict, throughput, latency).
    Demo(taxi::demo::Args),
    /// Run a job file (source → operators → sink, exactly once) until SIGINT/SIGTERM.
    Run(run::Args),
    /// The NYC taxi rides workload: generate ride events, verify a job's output.
    Taxi(taxi::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ONCEFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("onceflow: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Produce(a) => produce::run(a).await,
            Command::Consume(a) => consume::run(a).await,
            Command::Topics(a) => topics::run(a).await,
            Command::Txn(a) => txn::run(a).await,
            Command::Groups(a) => groups::run(a).await,
            Command::Demo(a) => taxi::demo::run(a).await,
            Command::Taxi(a) => taxi::run(a).await,
            Command::Run(a) => run::run(a).await,
        }
    });
    // Background tasks (sender, fetcher) must not keep the process alive after the command.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("onceflow: error: {e}");
            ExitCode::FAILURE
        }
    }
}
