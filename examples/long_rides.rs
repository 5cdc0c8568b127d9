//! Long ride alerts (Flink's classic exercise) with a `KeyedProcessFunction`: rides keyed by
//! ride id; a START registers an event-time timer two hours later, the END cancels it; a
//! timer that fires with the START still in state means the ride has lasted over two hours,
//! and an alert goes out. The state (the ride's events so far, in a `ListState`, and the
//! timer's time, in a `ValueState`) and the timers are checkpointed: an alert due while the
//! job was down comes after the restart, once.
//!
//! ```sh
//! onceflow taxi generate -t rides --count 100000
//! cargo run --example long_rides -- --brokers localhost:9092 --input rides --output long-rides --fresh
//! ```
//!
//! `protocol-tests/engine_dataflow.rs` includes this file and runs [`dataflow`] against a real
//! broker, stopped and restarted. It runs until Ctrl-C; start it again without `--fresh` to go on from its latest
//! checkpoint. `ONCEFLOW_LOG=onceflow=info` shows the runtime's log.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use onceflow::engine::dataflow::RestoreFrom;
use onceflow::engine::dataflow::{
    BuildError, Collector, Context, Dataflow, FunctionError, JobBuilder, Json, KafkaSink,
    KeyedProcessFunction, ListStateDescriptor, ValueStateDescriptor,
};
use onceflow_taxi::Ride;
use serde::{Deserialize, Serialize};

/// Two hours, ms: a ride longer than that is alerted.
pub const LONG_RIDE_MS: i64 = 2 * 3_600_000;

/// The command line.
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// Bootstrap brokers (default: $ONCEFLOW_BROKERS, else localhost:9092).
    #[arg(long, short = 'b')]
    pub brokers: Option<String>,
    /// The rides topic.
    #[arg(long, default_value = "rides")]
    pub input: String,
    /// The alerts topic.
    #[arg(long, default_value = "long-rides")]
    pub output: String,
    /// The transactional id prefix (default: the output topic).
    #[arg(long)]
    pub prefix: Option<String>,
    /// The state directory (default: state/long-rides).
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

/// An alert: the ride started at `start_time` and had not ended two hours later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LongRideAlert {
    /// The ride.
    pub ride_id: u64,
    /// Its driver.
    pub driver_id: u64,
    /// When it started (ms since the epoch).
    pub start_time: i64,
}

/// The ride's events seen so far (a START, an END that came first, or both briefly).
const EVENTS: ListStateDescriptor<Ride> = ListStateDescriptor::new(0, "events");
/// The time of the ride's timer, so that the other event can delete it.
const TIMER: ValueStateDescriptor<i64> = ValueStateDescriptor::new(1, "timer");

/// The process function (module docs). An END that comes before its START (out of order) is
/// kept until the START, or until two hours after it (then its START is taken as lost).
#[derive(Debug, Clone, Default)]
pub struct LongRides;

impl KeyedProcessFunction<u64, Ride, LongRideAlert> for LongRides {
    fn process_element(
        &mut self,
        _ride_id: &u64,
        ride: Ride,
        ctx: &mut Context<'_>,
        _out: &mut Collector<LongRideAlert>,
    ) -> Result<(), FunctionError> {
        let seen = ctx.list_state(&EVENTS).get()?;
        if seen.iter().any(|e| e.is_start != ride.is_start) {
            // Both ends are in: the ride is over (in time, or already alerted). Forget it.
            if let Some(t) = ctx.value_state(&TIMER).value()? {
                ctx.delete_event_time_timer(t);
            }
            ctx.value_state(&TIMER).clear()?;
            ctx.list_state(&EVENTS).clear()?;
            return Ok(());
        }
        let at = ride.event_time.saturating_add(LONG_RIDE_MS);
        ctx.list_state(&EVENTS).add(&ride)?;
        ctx.register_event_time_timer(at);
        ctx.value_state(&TIMER).update(&at)?;
        Ok(())
    }

    fn on_timer(
        &mut self,
        _ride_id: &u64,
        _timestamp: i64,
        ctx: &mut Context<'_>,
        out: &mut Collector<LongRideAlert>,
    ) -> Result<(), FunctionError> {
        let seen = ctx.list_state(&EVENTS).get()?;
        if let Some(start) = seen.iter().find(|e| e.is_start) {
            out.collect(LongRideAlert {
                ride_id: start.ride_id,
                driver_id: start.driver_id,
                start_time: start.event_time,
            });
        }
        ctx.list_state(&EVENTS).clear()?;
        ctx.value_state(&TIMER).clear()?;
        Ok(())
    }
}

/// The job: rides (watermark: newest event time − 60 s) keyed by ride id through
/// [`LongRides`], alerts as JSON keyed by driver.
///
/// # Errors
/// A setting the job file would refuse too.
pub fn dataflow(a: &Args) -> Result<Dataflow, BuildError> {
    let brokers = a
        .brokers
        .clone()
        .or_else(|| std::env::var("ONCEFLOW_BROKERS").ok())
        .unwrap_or_else(|| "localhost:9092".into());
    let mut job = JobBuilder::new("long-rides")
        .brokers(brokers)
        .transactional_id_prefix(a.prefix.clone().unwrap_or_else(|| a.output.clone()))
        .parallelism(a.parallelism)
        .checkpoint_interval(Duration::from_millis(a.checkpoint_interval_ms));
    if let Some(dir) = &a.state_dir {
        job = job.state_dir(dir);
    }
    job.source([a.input.as_str()], Json::<Ride>::new())
        .event_time(|r: &Ride| r.event_time, Duration::from_secs(60))
        .key_by(|r| r.ride_id)
        .process(LongRides)
        .uid("long-rides")
        .sink(
            KafkaSink::json(a.output.clone())
                .key(|a: &LongRideAlert| a.driver_id.to_string().into_bytes()),
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
            eprintln!("long_rides: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "long_rides: {} → {} (Ctrl-C stops)",
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
            eprintln!("long_rides: {e}");
            ExitCode::FAILURE
        }
    }
}
