//! Job (b), rides and passengers per driver per event-time hour, written with the typed
//! builder (`onceflow::engine::dataflow`) instead of a job file. Its output is the same JSON
//! as `jobs/rides-per-driver-hourly.toml`'s, so `onceflow taxi verify --job per-driver-hourly`
//! checks it:
//!
//! ```sh
//! onceflow taxi generate -t rides --count 100000
//! cargo run --example rides_per_driver_hourly -- --brokers localhost:9092 \
//!     --input rides --output rides-per-driver-hourly --fresh
//! onceflow taxi verify --job per-driver-hourly --input rides --output rides-per-driver-hourly
//! ```
//!
//! `protocol-tests/engine_dataflow.rs` includes this file and runs [`dataflow`] against a real
//! broker, stopped and restarted. It runs until Ctrl-C, exactly once: stop it (or kill it) and start it again without
//! `--fresh`, and it goes on from its latest checkpoint (in `--state-dir`). `ONCEFLOW_LOG=onceflow=info` shows the
//! runtime's log.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use onceflow::engine::dataflow::RestoreFrom;
use onceflow::engine::dataflow::{
    AggregateFunction, BuildError, Dataflow, JobBuilder, Json, KafkaSink, TumblingEventTimeWindows,
    Window,
};
use onceflow_taxi::verify::WindowCount;
use onceflow_taxi::Ride;

/// The command line.
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// Bootstrap brokers (default: $ONCEFLOW_BROKERS, else localhost:9092).
    #[arg(long, short = 'b')]
    pub brokers: Option<String>,
    /// The rides topic (from `onceflow taxi generate`).
    #[arg(long, default_value = "rides")]
    pub input: String,
    /// The output topic.
    #[arg(long, default_value = "rides-per-driver-hourly")]
    pub output: String,
    /// The transactional id prefix (default: the output topic).
    #[arg(long)]
    pub prefix: Option<String>,
    /// The state directory (default: state/rides-per-driver-hourly-typed).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Subtasks per operator.
    #[arg(long, default_value_t = 1)]
    pub parallelism: u32,
    /// Checkpoint interval, ms.
    #[arg(long, default_value_t = 1000)]
    pub checkpoint_interval_ms: u64,
    /// Start without state (the first run); otherwise from the latest checkpoint.
    #[arg(long)]
    pub fresh: bool,
}

/// Rides and passengers of a driver's hour.
pub struct RidesAndPassengers;

impl AggregateFunction<Ride, (u64, u64), (u64, u64)> for RidesAndPassengers {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }

    fn add(&self, ride: &Ride, acc: &mut (u64, u64)) {
        acc.0 += 1;
        acc.1 += u64::from(ride.passengers);
    }

    fn merge(&self, a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }

    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
}

/// The job: completed rides (END events), keyed by driver, counted per event-time hour
/// (watermark: newest event time − 60 s, as the job file), one record per driver and hour.
///
/// # Errors
/// A setting the job file would refuse too.
pub fn dataflow(a: &Args) -> Result<Dataflow, BuildError> {
    let brokers = a
        .brokers
        .clone()
        .or_else(|| std::env::var("ONCEFLOW_BROKERS").ok())
        .unwrap_or_else(|| "localhost:9092".into());
    let mut job = JobBuilder::new("rides-per-driver-hourly-typed")
        .brokers(brokers)
        .transactional_id_prefix(a.prefix.clone().unwrap_or_else(|| a.output.clone()))
        .parallelism(a.parallelism)
        .checkpoint_interval(Duration::from_millis(a.checkpoint_interval_ms));
    if let Some(dir) = &a.state_dir {
        job = job.state_dir(dir);
    }
    job.source([a.input.as_str()], Json::<Ride>::new())
        .event_time(|r: &Ride| r.event_time, Duration::from_secs(60))
        .filter(|r| !r.is_start)
        .key_by(|r| r.driver_id)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(3600)))
        .aggregate_with(
            RidesAndPassengers,
            |driver: &u64, w: Window, (rides, passengers)| WindowCount {
                driver_id: *driver,
                window_start: w.start,
                window_end: w.end,
                rides,
                passengers,
            },
        )
        .uid("per-driver-hourly")
        .sink(
            KafkaSink::json(a.output.clone())
                .key(|w: &WindowCount| w.driver_id.to_string().into_bytes()),
        )
        .build()
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ONCEFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let flow = match dataflow(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rides_per_driver_hourly: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "rides_per_driver_hourly: {} → {} (Ctrl-C stops)",
        args.input, args.output
    );
    let (tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = tx.send(true);
    });
    let mut options = flow.options();
    if args.fresh {
        options.restore = RestoreFrom::Fresh;
    }
    match flow.run(options, stop).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rides_per_driver_hourly: {e}");
            ExitCode::FAILURE
        }
    }
}
