//! Typed jobs (`onceflow::engine::dataflow`) end to end against a real broker, in process:
//! the examples' own dataflows (the example files are included as modules), run, stopped
//! with the `stop` watch after a checkpoint, and restarted from it. Transactional: run on TV2
//! (9192) and TV1 (9196).

#[allow(dead_code)]
#[path = "../examples/long_rides.rs"]
mod long_rides;
#[allow(dead_code)]
#[path = "../examples/rides_per_driver_hourly.rs"]
mod rides_per_driver_hourly;

use crate::engine_run::{committed_count, taxi};
use crate::support::cli::{shown, stdout};
use crate::support::*;
use onceflow::client::ProducerRecord;
use onceflow::engine::dataflow::{
    Collector, Context, Dataflow, FunctionError, JobBuilder, Json, KafkaSink, KeyedProcessFunction,
    RunOptions, TimeDomain,
};
use onceflow::engine::metrics::Metrics;
use onceflow::engine::runtime::{RunSummary, RuntimeError};
use onceflow::engine::state::RestoreFrom;
use onceflow_taxi::Ride;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const DEADLINE: Duration = Duration::from_secs(240);

/// A typed job running in this process, and how to stop it.
pub(crate) struct Running {
    stop: watch::Sender<bool>,
    pub(crate) metrics: Arc<Metrics>,
    task: JoinHandle<Result<RunSummary, RuntimeError>>,
}

/// Options for the test broker (patient API calls: the machine may be loaded).
fn options(flow: &Dataflow) -> RunOptions {
    let mut o = flow.options();
    o.client = client_config(&broker());
    o.producer = producer_config(&broker(), &[("default.api.timeout.ms", "60000")]);
    o.consumer = consumer_config(&broker(), &[("default.api.timeout.ms", "60000")]);
    o
}

/// Runs `flow` from `restore` in the background.
pub(crate) fn start(flow: Dataflow, restore: RestoreFrom) -> Running {
    let (stop, rx) = watch::channel(false);
    let metrics = Arc::new(Metrics::new());
    let mut opts = options(&flow);
    opts.restore = restore;
    let task = tokio::spawn(flow.run_with_metrics(opts, rx, metrics.clone()));
    Running {
        stop,
        metrics,
        task,
    }
}

impl Running {
    /// Waits until `done` holds of the metrics; fails if the job ends first.
    pub(crate) async fn wait_for(
        &mut self,
        what: &str,
        done: impl Fn(&onceflow::engine::metrics::Snapshot) -> bool,
    ) {
        let start = Instant::now();
        while !done(&self.metrics.snapshot()) {
            self.assert_running(what).await;
            assert!(
                start.elapsed() < DEADLINE,
                "waited {DEADLINE:?} for {what} in vain"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fails the test with the job's result when it ended.
    async fn assert_running(&mut self, what: &str) {
        if self.task.is_finished() {
            let result = (&mut self.task).await;
            panic!("the job ended while waiting for {what}: {result:?}");
        }
    }

    /// Stops the job through the `stop` watch; its summary (a clean stop).
    pub(crate) async fn stop(self) -> RunSummary {
        let _ = self.stop.send(true);
        let ended = tokio::time::timeout(DEADLINE, self.task).await;
        ended
            .expect("the job did not stop")
            .expect("the job's task")
            .expect("a clean stop")
    }
}

fn hourly_args(dir: &Path, input: &str, output: &str) -> rides_per_driver_hourly::Args {
    rides_per_driver_hourly::Args {
        brokers: Some(broker()),
        input: input.into(),
        output: output.into(),
        prefix: Some(unique_topic("df-hourly")),
        state_dir: Some(dir.join("state")),
        parallelism: 2,
        checkpoint_interval_ms: 200,
        fresh: false,
    }
}

/// Rides for job (b) and its first run, stopped after a checkpoint.
struct Stopped {
    input: TestTopic,
    output: TestTopic,
    dir: std::path::PathBuf,
    args: rides_per_driver_hourly::Args,
    first: RunSummary,
    /// Outputs committed at the stop.
    at_stop: usize,
}

/// Input events: 20000 rides, a START and an END each.
const EVENTS: u64 = 40_000;

/// 20000 rides at two per second span 2.8 hours of event time: the first hour's windows close
/// (the first output) with about two thirds of the input still to read; the typed job (b) at
/// parallelism 2 is stopped there, after a checkpoint.
async fn hourly_stopped_after_a_checkpoint(name: &str) -> Stopped {
    let input = TestTopic::create(&format!("{name}-in"), 3).await;
    let output = TestTopic::create(&format!("{name}-out"), 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-df"));
    std::fs::create_dir_all(&dir).unwrap();
    let generate = [
        "generate",
        "-t",
        &input.name,
        "--count",
        "20000",
        "--rate",
        "2",
    ];
    let o = taxi(&generate).await;
    assert!(o.status.success(), "{}", shown(&o));
    let args = hourly_args(&dir, &input.name, &output.name);
    let flow = rides_per_driver_hourly::dataflow(&args).unwrap();
    let mut first = start(flow, RestoreFrom::Fresh);
    first
        .wait_for("committed output", |s| s.commits > 0 && s.records_out > 0)
        .await;
    let summary = first.stop().await;
    assert!(summary.last_checkpoint >= 1, "{summary:?}");
    assert!(
        summary.records_in < EVENTS,
        "the stop came after all {EVENTS} input records were read: nothing left to restore into"
    );
    let at_stop = committed_count(&output).await;
    Stopped {
        input,
        output,
        dir,
        args,
        first: summary,
        at_stop,
    }
}

/// `taxi verify --job per-driver-hourly` of the job's topics, until `done` holds of its
/// output (the job still running); that output.
async fn verify_until(
    job: &mut Running,
    s: &Stopped,
    done: impl Fn(&std::process::Output) -> bool,
) -> std::process::Output {
    let start_time = Instant::now();
    loop {
        job.assert_running("the output").await;
        let o = taxi(&[
            "verify",
            "--job",
            "per-driver-hourly",
            "--input",
            &s.input.name,
            "--output",
            &s.output.name,
            "--read-timeout-ms",
            "60000",
        ])
        .await;
        if done(&o) {
            return o;
        }
        assert!(
            start_time.elapsed() < DEADLINE,
            "taxi verify did not come to the expected verdict within {DEADLINE:?}; last: {}",
            shown(&o)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Restarted from its checkpoint, the typed job (b) goes on where it stopped and its output
/// is exact: every window once.
#[tokio::test]
async fn typed_per_driver_hourly_at_parallelism_2_stopped_and_restarted_counts_every_ride_once() {
    let s = hourly_stopped_after_a_checkpoint("df-hourly").await;
    let flow = rides_per_driver_hourly::dataflow(&s.args).unwrap();
    let mut second = start(flow, RestoreFrom::Latest);
    let o = verify_until(&mut second, &s, |o| o.status.success()).await;
    assert!(stdout(&o).starts_with("verify: OK"), "{}", shown(&o));
    let s2 = second.stop().await;
    assert!(
        s2.records_in < EVENTS,
        "the restart read all {EVENTS} records again instead of going on from checkpoint {}",
        s.first.last_checkpoint
    );
    let total = committed_count(&s.output).await;
    assert!(
        s.at_stop < total,
        "no output after the restart ({} at the stop)",
        s.at_stop
    );
    eprintln!(
        "typed hourly: {} of {total} outputs at the stop, {} + {} records read",
        s.at_stop, s.first.records_in, s2.records_in
    );
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The inverse: restarted without its checkpoint (fresh), the job reads the input again from
/// the beginning and writes the windows the first run committed a second time; the verifier
/// sees the duplicates.
#[tokio::test]
async fn typed_per_driver_hourly_restarted_without_its_checkpoint_writes_duplicates() {
    let s = hourly_stopped_after_a_checkpoint("df-hourly-inv").await;
    let flow = rides_per_driver_hourly::dataflow(&s.args).unwrap();
    let mut second = start(flow, RestoreFrom::Fresh);
    let o = verify_until(&mut second, &s, |o| stdout(o).contains("duplicated")).await;
    assert!(!o.status.success(), "{}", shown(&o));
    second.stop().await;
    let _ = std::fs::remove_dir_all(&s.dir);
}

const T0: i64 = 1_700_000_000_000;
const MINUTE: i64 = 60_000;

fn ride(ride_id: u64, is_start: bool, event_time: i64) -> Ride {
    Ride {
        ride_id,
        driver_id: 100 + ride_id,
        taxi_id: 200 + ride_id,
        is_start,
        start_lon: -73.9,
        start_lat: 40.7,
        end_lon: -73.95,
        end_lat: 40.75,
        passengers: 1,
        event_time,
    }
}

async fn send(topic: &str, rides: &[Ride]) {
    let p = producer(&[]).await;
    for r in rides {
        p.send(ProducerRecord::new(topic.to_owned(), r.to_json()).with_key(r.key()))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
}

/// Ride 2 starts and never ends; ride 1 ends after 30 minutes, its END read only after the
/// restart; ride 3 ends before the stop. The first run is stopped after a checkpoint that
/// holds the rides' state and timers (no watermark has reached a timer yet); the restart's
/// input moves the watermark past every timer. Exactly one alert: ride 2's, fired by a timer
/// the restart restored.
#[tokio::test]
async fn long_ride_timers_fire_after_a_restart_for_the_ride_that_never_ended_only() {
    let input = TestTopic::create("df-long-in", 1).await;
    let output = TestTopic::create("df-long-out", 1).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-df-long"));
    std::fs::create_dir_all(&dir).unwrap();
    let args = long_rides::Args {
        brokers: Some(broker()),
        input: input.name.clone(),
        output: output.name.clone(),
        prefix: Some(unique_topic("df-long")),
        state_dir: Some(dir.join("state")),
        parallelism: 1,
        checkpoint_interval_ms: 200,
        fresh: false,
    };

    send(
        &input.name,
        &[
            ride(1, true, T0),
            ride(2, true, T0 + MINUTE),
            ride(3, true, T0 + 2 * MINUTE),
            ride(3, false, T0 + 5 * MINUTE),
        ],
    )
    .await;
    let mut first = start(long_rides::dataflow(&args).unwrap(), RestoreFrom::Fresh);
    first
        .wait_for("the first four records", |s| s.records_in >= 4)
        .await;
    let read_at = first.metrics.snapshot().last_checkpoint;
    first
        .wait_for("a checkpoint after the records", |s| {
            s.last_checkpoint > read_at
        })
        .await;
    let s1 = first.stop().await;
    assert_eq!(s1.records_out, 0, "an alert before any timer was due");

    // Ride 1's END, then a ride three hours on: the watermark passes T0 + 2 h + 1 min.
    let later = T0 + 3 * 60 * MINUTE;
    send(
        &input.name,
        &[
            ride(1, false, T0 + 30 * MINUTE),
            ride(4, true, later),
            ride(4, false, later + MINUTE),
        ],
    )
    .await;
    let mut second = start(long_rides::dataflow(&args).unwrap(), RestoreFrom::Latest);
    second.wait_for("an alert", |s| s.records_out >= 1).await;
    let start_time = Instant::now();
    while committed_count(&output).await == 0 {
        second.assert_running("the output").await;
        assert!(
            start_time.elapsed() < DEADLINE,
            "the alert was not committed within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s2 = second.stop().await;
    assert_eq!(
        s2.records_in, 3,
        "the restart did not go on from the checkpoint"
    );

    let records = consume_all(
        &broker(),
        &output,
        1,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let alerts: Vec<long_rides::LongRideAlert> = records
        .iter()
        .map(|r| serde_json::from_slice(r.value.as_ref().unwrap()).unwrap())
        .collect();
    assert_eq!(
        alerts,
        [long_rides::LongRideAlert {
            ride_id: 2,
            driver_id: 102,
            start_time: T0 + MINUTE,
        }]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Emits a ride's id 300 ms of wall-clock time after its first event: a processing-time
/// timer (the job has no watermark strategy, so no event-time timer could ever fire).
#[derive(Clone)]
struct Later;

impl KeyedProcessFunction<u64, Ride, u64> for Later {
    fn process_element(
        &mut self,
        _ride_id: &u64,
        _ride: Ride,
        ctx: &mut Context<'_>,
        _out: &mut Collector<u64>,
    ) -> Result<(), FunctionError> {
        let at = ctx.current_processing_time() + 300;
        ctx.register_processing_time_timer(at);
        Ok(())
    }

    fn on_timer(
        &mut self,
        ride_id: &u64,
        _timestamp: i64,
        ctx: &mut Context<'_>,
        out: &mut Collector<u64>,
    ) -> Result<(), FunctionError> {
        assert_eq!(ctx.time_domain(), TimeDomain::ProcessingTime);
        out.collect(*ride_id);
        Ok(())
    }
}

/// A running job's keyed subtask fires processing-time timers by the wall clock while no
/// input arrives: each ride's id is written once, read_committed.
#[tokio::test]
async fn processing_time_timers_fire_in_a_running_job_with_no_input_arriving() {
    let input = TestTopic::create("df-later-in", 1).await;
    let output = TestTopic::create("df-later-out", 1).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-df-later"));
    let rides: Vec<Ride> = (1..=5).map(|id| ride(id, true, T0)).collect();
    send(&input.name, &rides).await;
    let flow = JobBuilder::new("later")
        .brokers(broker())
        .transactional_id_prefix(unique_topic("df-later"))
        .state_dir(dir.join("state"))
        .checkpoint_interval(Duration::from_millis(200))
        .source([input.name.as_str()], Json::<Ride>::new())
        .key_by(|r| r.ride_id)
        .process(Later)
        .uid("later")
        .sink(KafkaSink::json(output.name.clone()))
        .build()
        .unwrap();
    let mut job = start(flow, RestoreFrom::Fresh);
    job.wait_for("five timers fired", |s| s.records_out >= 5)
        .await;
    let start_time = Instant::now();
    while committed_count(&output).await < 5 {
        job.assert_running("the output").await;
        assert!(
            start_time.elapsed() < DEADLINE,
            "the timers' output was not committed within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    job.stop().await;
    let records = consume_all(
        &broker(),
        &output,
        1,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let mut ids: Vec<u64> = records
        .iter()
        .map(|r| serde_json::from_slice(r.value.as_ref().unwrap()).unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Fails on ride 13: an error of the user's function.
#[derive(Clone)]
struct Cursed;

impl KeyedProcessFunction<u64, Ride, u64> for Cursed {
    fn process_element(
        &mut self,
        ride_id: &u64,
        _ride: Ride,
        _ctx: &mut Context<'_>,
        out: &mut Collector<u64>,
    ) -> Result<(), FunctionError> {
        if *ride_id == 13 {
            return Err(format!("ride {ride_id} is cursed").into());
        }
        out.collect(*ride_id);
        Ok(())
    }
}

/// A process function's error stops the running job (no hang, no panic) with one line naming
/// the operator and the function's message.
#[tokio::test]
async fn a_failing_process_function_stops_the_job_naming_the_operator() {
    let input = TestTopic::create("df-cursed-in", 1).await;
    let output = TestTopic::create("df-cursed-out", 1).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-df-cursed"));
    let rides: Vec<Ride> = (1..=20).map(|id| ride(id, true, T0)).collect();
    send(&input.name, &rides).await;
    let flow = JobBuilder::new("cursed")
        .brokers(broker())
        .transactional_id_prefix(unique_topic("df-cursed"))
        .state_dir(dir.join("state"))
        .source([input.name.as_str()], Json::<Ride>::new())
        .key_by(|r| r.ride_id)
        .process(Cursed)
        .uid("cursed")
        .sink(KafkaSink::json(output.name.clone()))
        .build()
        .unwrap();
    let job = start(flow, RestoreFrom::Fresh);
    let ended = tokio::time::timeout(DEADLINE, job.task).await;
    let result = ended
        .expect("the job did not stop")
        .expect("the job's task");
    let e = result.expect_err("the job ran on past its function's error");
    assert!(matches!(e, RuntimeError::Function { .. }), "{e:?}");
    let line = e.to_string();
    assert!(
        line.starts_with("operator cursed (process): ride 13 is cursed"),
        "{line}"
    );
    assert!(!line.contains('\n'), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
