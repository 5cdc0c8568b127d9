//! `onceflow demo`: exactly-once, shown to a newcomer in a couple of minutes against a local
//! broker.
//!
//! 1. Fresh input and output topics; rides from `onceflow-taxi`'s generator are produced at a
//!    steady rate (`feed`) while the job runs, so latency means something.
//! 2. The shipped per-driver-hourly job (`job`: embedded, its names and state dir rewritten
//!    into a temp dir, a short checkpoint interval) runs exactly-once as a child process
//!    (`onceflow run`), SIGKILLed `--kills` times and restarted on the same state. The kills
//!    aim at the dangerous moments: kill k comes at a random moment (seeded) shortly after the
//!    feed sends the record that closes the k-th hour, when that hour's results may sit in
//!    the job's open transaction; a read_uncommitted tail beside the committed one lets each
//!    kill line say how many results it caught there.
//! 3. Once every window the input closes is committed, `onceflow-taxi`'s verifier (the code of
//!    `onceflow taxi verify`) gives the verdict; throughput, end-to-end latency
//!    (`onceflow_taxi::latency`) and the kill count follow. Exit 0 only on a verdict OK.
//!
//! The hidden `--guarantee at-least-once` is the inverse: the same run without transactions
//! must show duplicates (and exit 1). There a kill also waits until the incarnation's output
//! is visible (at-least-once output is visible at once), so there is something to duplicate.

mod job;

use super::feed;
use super::probe::Probe;
use super::verify::JobTopics;
use crate::error::{CliError, Result};
use crate::props::Conn;
use job::ChildJob;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, IsolationLevel};
use onceflow_taxi::generate::{self, Config};
use onceflow_taxi::latency::{now_ms, Summary};
use onceflow_taxi::verify::{Comparison, Job, HOUR_MS};
use onceflow_taxi::Ride;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The job's bounded out-of-orderness (`window.out_of_orderness` in the shipped file).
const OUT_OF_ORDERNESS_MS: i64 = 60_000;
/// One ride per second of event time: 3600 rides close an hour, the slowest the generator
/// goes, so a short demo closes several hours.
const RIDES_PER_SECOND: u32 = 1;
/// A restarted job runs at least this long before the next kill, so each incarnation
/// recovers and makes progress.
const MIN_UP: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Guarantee {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(clap::Args)]
pub struct Args {
    // -X properties go to the demo's producer and readers and to the job (`run -X`).
    #[command(flatten)]
    conn: Conn,
    /// Rides to generate (two events each, one pick-up per second of event time: every 3600
    /// rides close an hour's windows).
    #[arg(long, default_value_t = 18_000)]
    rides: u64,
    /// Events produced per second while the job runs.
    #[arg(long, default_value_t = 1_000)]
    rate: u32,
    /// How many times the job is SIGKILLed and restarted (needs --rides ≥ (kills + 1) × 3600).
    #[arg(long, default_value_t = 3)]
    kills: u32,
    /// Seed of the rides and the kill moments (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Partitions of the two topics.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Drivers in the generated rides (one output record per driver and hour).
    #[arg(long, default_value_t = 50)]
    drivers: u64,
    /// The job's checkpoint interval, ms.
    #[arg(long, default_value_t = 250)]
    checkpoint_interval_ms: u64,
    /// The whole demo's time limit, s.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Keep the topics (deleted by default).
    #[arg(long)]
    keep_topics: bool,
    /// Test only: at-least-once shows what exactly-once prevents.
    #[arg(long, value_enum, default_value = "exactly-once", hide = true)]
    guarantee: Guarantee,
}

/// What the demo set up, for the run and the cleanup.
struct Setup {
    admin: Admin,
    input: String,
    output: String,
    dir: PathBuf,
    seed: u64,
    deadline: Instant,
}

pub async fn run(args: Args) -> Result<ExitCode> {
    if args.rate == 0 || args.partitions < 1 || args.drivers == 0 {
        return Err(CliError::Usage(
            "--rate, --partitions and --drivers must be at least 1".into(),
        ));
    }
    let seed = args.seed.unwrap_or_else(|| now_ms() as u64);
    // Checked before anything is created.
    let plan = plan(&args, seed)?;
    let setup = set_up(&args, seed).await?;
    let outcome = demo(&args, &setup, plan).await;
    if !args.keep_topics {
        let topics = [setup.input.as_str(), setup.output.as_str()];
        if let Err(e) = setup.admin.delete_topics(&topics).await {
            eprintln!("demo: could not delete the topics {topics:?}: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&setup.dir);
    outcome
}

/// Checks the broker, creates the topics and the temp dir.
async fn set_up(args: &Args, seed: u64) -> Result<Setup> {
    let no_broker = |e: onceflow::client::Error| {
        CliError::Failed(format!(
            "no Kafka broker answers at {} ({e}): start one with `protocol-tests/kafka-broker.sh start`, or give its address with -b HOST:PORT",
            args.conn.broker
        ))
    };
    let admin = Admin::new(args.conn.brokers_only()?.client()?)
        .await
        .map_err(no_broker)?;
    admin.list_topics().await.map_err(no_broker)?;
    let millis = now_ms();
    let name = format!("onceflow-demo-{millis}");
    let (input, output) = (format!("{name}-rides"), format!("{name}-per-driver-hourly"));
    admin
        .create_topics(&[
            NewTopic::new(input.clone(), args.partitions),
            NewTopic::new(output.clone(), args.partitions),
        ])
        .await?;
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Failed(format!("creating {}: {e}", dir.display())))?;
    Ok(Setup {
        admin,
        input,
        output,
        dir,
        seed,
        deadline: Instant::now() + Duration::from_secs(args.timeout_s),
    })
}

/// Written results neither committed nor aborted before: what a kill now catches in the open
/// transaction (zero when the committed view is ahead of the written one).
pub fn uncommitted(written: usize, committed: usize, aborted: usize) -> usize {
    written.saturating_sub(committed).saturating_sub(aborted)
}

/// The index (in feed order) of the event that first pushes the watermark (newest event time
/// − out-of-orderness) to each hour's end, for the hours the events close.
pub fn closing_events(events: &[Ride], out_of_orderness_ms: i64) -> Vec<usize> {
    let mut out = Vec::new();
    let mut next_end: Option<i64> = None;
    for (i, r) in events.iter().enumerate() {
        let end =
            *next_end.get_or_insert(r.event_time - r.event_time.rem_euclid(HOUR_MS) + HOUR_MS);
        if r.event_time - out_of_orderness_ms >= end {
            out.push(i);
            let w = r.event_time - out_of_orderness_ms;
            next_end = Some(w - w.rem_euclid(HOUR_MS) + HOUR_MS);
        }
    }
    out
}

/// When each kill is due after the feed's start: kill k a random moment within `aim` after
/// the k-th closing event is due to be sent.
pub fn kill_times(
    closing: &[usize],
    kills: u32,
    rate: u32,
    aim: Duration,
    seed: u64,
) -> Vec<Duration> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    closing
        .iter()
        .take(kills as usize)
        .map(|&i| feed::due(i as u64, rate) + aim.mul_f64(rng.random::<f64>()))
        .collect()
}

/// The rides to feed and when each kill is due after the feed's start.
type Plan = (Vec<Ride>, Vec<Duration>);

/// The demo's [`Plan`] from its flags and seed.
fn plan(args: &Args, seed: u64) -> Result<Plan> {
    let events: Vec<Ride> = generate::rides(Config {
        seed,
        rides: args.rides,
        rides_per_second: RIDES_PER_SECOND,
        drivers: args.drivers,
        ..Config::default()
    })
    .map_err(|e| CliError::Usage(e.to_string()))?
    .collect();
    let closing = closing_events(&events, OUT_OF_ORDERNESS_MS);
    if closing.len() < args.kills as usize {
        return Err(CliError::Usage(format!(
            "--kills {} needs at least {} hours of rides: give --rides {} or more",
            args.kills,
            args.kills + 1,
            (u64::from(args.kills) + 1) * 3600 + 600
        )));
    }
    let aim = Duration::from_millis(args.checkpoint_interval_ms.saturating_add(250).min(2_000));
    let kills = kill_times(&closing, args.kills, args.rate, aim, seed);
    Ok((events, kills))
}

/// The run: feed, job, kills, completion, verdict.
async fn demo(args: &Args, setup: &Setup, (events, kills): Plan) -> Result<ExitCode> {
    let exactly_once = args.guarantee == Guarantee::ExactlyOnce;
    println!(
        "demo: job rides-per-driver-hourly ({}), {} ride events at {}/s into {} partitions, {} kills (seed {})",
        if exactly_once { "exactly-once" } else { "AT-LEAST-ONCE" },
        events.len(),
        args.rate,
        args.partitions,
        args.kills,
        setup.seed
    );
    let mut probe = Probe::start(args.conn.consumer(&[])?, &setup.output).await?;
    // Beside the committed view, everything written: the difference at a kill is what the
    // kill caught in the job's open transaction.
    let mut written = Probe::start_with(
        args.conn.consumer(&[])?,
        &setup.output,
        IsolationLevel::ReadUncommitted,
    )
    .await?;
    let mut job = start_job(args, setup)?;
    let producer = feed::producer(&args.conn).await?;
    let start = Instant::now();
    // Aborted when dropped: a demo that fails must not keep producing (the broker would
    // create the deleted input topic again).
    let topic = setup.input.clone();
    let records = events
        .into_iter()
        .map(move |ride| feed::ride_record(&topic, &ride));
    let mut feed = feed::Task(tokio::spawn(feed::feed(
        producer, records, args.rate, start,
    )));
    let mut watch = Watch {
        probe: &mut probe,
        written: &mut written,
        aborted: 0,
        job: &mut job,
        deadline: setup.deadline,
    };
    for (k, at) in kills.iter().enumerate() {
        let (killed, caught) = watch.kill_at(start + *at, exactly_once).await?;
        let caught = match (exactly_once, caught) {
            (false, _) => String::new(),
            (true, 0) => " (no results in its open transaction)".to_owned(),
            (true, 1) => " with 1 result in its open transaction".to_owned(),
            (true, n) => format!(" with {n} results in its open transaction"),
        };
        println!(
            "demo: kill {}/{} at {:.1} s: SIGKILLed the job{caught}, restarted it on its state",
            k + 1,
            kills.len(),
            killed.duration_since(start).as_secs_f64(),
        );
    }
    watch.until_fed(&feed).await?;
    let fed = (&mut feed.0)
        .await
        .map_err(|e| CliError::Failed(format!("the feed task: {e}")))??;
    let topics = Topics {
        conn: args.conn.clone(),
        admin: setup.admin.clone(),
        input: setup.input.clone(),
        output: setup.output.clone(),
    };
    let cmp = watch.until_complete(&topics).await?;
    let done = start.elapsed().as_secs_f64();
    let stopped = job.stop(Duration::from_secs(30)).await;
    tracing::info!(stopped, "demo job stopped");
    // Its own limit: the run may have used most of --timeout-s, the verdict is in already.
    let read_limit = Instant::now() + Duration::from_secs(60);
    let causes = topics
        .job_topics()
        .causes(&args.conn, &setup.admin, read_limit)
        .await?;
    let latency = Summary::of(&causes, probe.seen());
    report(&cmp, fed.events, done, fed.secs, &latency, kills.len())
}

/// The last lines: verdict, throughput and latency, the result.
fn report(
    cmp: &Comparison,
    events: u64,
    secs: f64,
    fed_secs: f64,
    latency: &Summary,
    kills: usize,
) -> Result<ExitCode> {
    println!("{}", cmp.verdict());
    println!(
        "demo: the job took in {events} records in {secs:.1} s ({:.0} records/s; produced in {fed_secs:.1} s); {latency}",
        events as f64 / secs.max(1e-9)
    );
    if cmp.is_ok() {
        println!("demo OK: every hour's result written exactly once despite {kills} kills");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("demo FAILED: the output is not exactly once (see the verdict above)");
        Ok(ExitCode::FAILURE)
    }
}

fn start_job(args: &Args, setup: &Setup) -> Result<ChildJob> {
    let prefix = setup
        .output
        .trim_end_matches("-per-driver-hourly")
        .to_owned();
    let text = job::rewrite(
        job::SHIPPED,
        &job::Rewrite {
            input: &setup.input,
            output: &setup.output,
            prefix: &prefix,
            state_dir: &setup.dir.join("state"),
            checkpoint_interval_ms: args.checkpoint_interval_ms,
            guarantee: match args.guarantee {
                Guarantee::ExactlyOnce => "exactly-once",
                Guarantee::AtLeastOnce => "at-least-once",
            },
        },
    )?;
    let mut run_args = vec!["-b".to_owned(), args.conn.broker.clone()];
    for p in &args.conn.props {
        run_args.extend(["-X".to_owned(), p.clone()]);
    }
    ChildJob::start(&setup.dir, &text, run_args)
}

/// The demo's topics and clients, owned, for the verifier's reads on tasks of their own.
#[derive(Clone)]
struct Topics {
    conn: Conn,
    admin: Admin,
    input: String,
    output: String,
}

impl Topics {
    fn job_topics(&self) -> JobTopics<'_> {
        JobTopics {
            decoders: None,
            job: Job::PerDriverHourly,
            input: &self.input,
            output: &self.output,
            out_of_orderness_ms: OUT_OF_ORDERNESS_MS,
            fares: None,
            late: None,
        }
    }
}

/// The demo's waits: each polls the probe (so visibility times stay honest), watches the job
/// and ends at the demo's deadline with a message saying what it waited for.
struct Watch<'a> {
    probe: &'a mut Probe,
    /// The output read_uncommitted: committed, open and aborted records.
    written: &'a mut Probe,
    /// Records `written` holds that were aborted (caught by earlier kills).
    aborted: usize,
    job: &'a mut ChildJob,
    deadline: Instant,
}

impl Watch<'_> {
    /// One slice of waiting: a poll of the probe, then the job and the deadline checked.
    async fn step(&mut self, waiting_for: &str) -> Result<()> {
        for p in [&mut *self.probe, &mut *self.written] {
            p.poll(Duration::from_millis(50)).await?;
        }
        self.job.check_running()?;
        if Instant::now() >= self.deadline {
            return Err(self.job.failed(&format!(
                "the demo's --timeout-s ran out waiting for {waiting_for}"
            )));
        }
        Ok(())
    }

    /// Waits until `at` (and [`MIN_UP`] since the last restart; at-least-once: until output
    /// of this incarnation is visible), then SIGKILLs and restarts the job; returns when the
    /// kill was sent and how many written results it caught uncommitted (as far as the last
    /// polls saw: written, neither committed nor aborted before).
    async fn kill_at(&mut self, at: Instant, exactly_once: bool) -> Result<(Instant, usize)> {
        let up = Instant::now();
        let seen = self.probe.seen().len();
        while Instant::now() < at.max(up + MIN_UP)
            || (!exactly_once && self.probe.seen().len() == seen)
        {
            self.step("the moment of the next kill").await?;
        }
        let killed = Instant::now();
        self.job.kill_and_restart()?;
        let caught = uncommitted(
            self.written.seen().len(),
            self.probe.seen().len(),
            self.aborted,
        );
        self.aborted += caught;
        Ok((killed, caught))
    }

    async fn until_fed(&mut self, feed: &feed::Task) -> Result<()> {
        while !feed.0.is_finished() {
            self.step("the rides to be produced").await?;
        }
        Ok(())
    }

    /// Waits until every window the input closes is visible, then returns the verifier's
    /// comparison (a full read of both topics, so it runs only when the count allows and at
    /// most every 2 s). The verifier reads on tasks of their own while the probe keeps polling:
    /// a record's visibility time must not wait for them.
    async fn until_complete(&mut self, topics: &Topics) -> Result<Comparison> {
        let t = topics.clone();
        let deadline = self.deadline;
        let expected = tokio::spawn(async move {
            t.job_topics()
                .expectation(&t.conn, &t.admin, deadline)
                .await
        });
        let expected = self
            .polling(expected, "the verifier's read of the input")
            .await?;
        let required = expected.records.iter().filter(|r| r.required).count();
        let mut last: Option<Instant> = None;
        loop {
            let due = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
            if self.probe.seen().len() >= required && due {
                last = Some(Instant::now());
                let t = topics.clone();
                let cmp = tokio::spawn(async move {
                    t.job_topics().compare(&t.conn, &t.admin, deadline).await
                });
                let cmp = self
                    .polling(cmp, "the verifier's read of both topics")
                    .await?;
                if cmp.missing.count == 0 {
                    return Ok(cmp);
                }
            }
            self.step(&format!(
                "the job's {required} results ({} seen)",
                self.probe.seen().len()
            ))
            .await?;
        }
    }

    /// Polls the probe while `task` runs; its result.
    async fn polling<T>(
        &mut self,
        task: tokio::task::JoinHandle<Result<T>>,
        waiting_for: &str,
    ) -> Result<T> {
        while !task.is_finished() {
            self.step(waiting_for).await?;
        }
        task.await
            .map_err(|e| CliError::Failed(format!("{waiting_for}: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(event_time: i64) -> Ride {
        Ride {
            ride_id: 1,
            driver_id: 1,
            taxi_id: 1,
            is_start: true,
            start_lon: -73.9,
            start_lat: 40.7,
            end_lon: -73.9,
            end_lat: 40.7,
            passengers: 1,
            event_time,
        }
    }

    #[test]
    fn the_closing_event_of_each_hour_is_the_first_past_its_end_plus_the_bound() {
        let h = HOUR_MS;
        let m = 60_000;
        // (event times in feed order, expected indices)
        let cases: Vec<(Vec<i64>, Vec<usize>)> = vec![
            (vec![], vec![]),
            (vec![0, h, h + m - 1], vec![]),
            (vec![0, h, h + m, h + 2 * m], vec![2]),
            (vec![0, h + m, 5, 2 * h + m], vec![1, 3]),
            // A jump over two hour ends closes both at once; the next is 4 h.
            (vec![10, 3 * h + m, 4 * h + m], vec![1, 2]),
        ];
        for (times, want) in cases {
            let events: Vec<Ride> = times.iter().map(|&t| at(t)).collect();
            assert_eq!(closing_events(&events, m), want, "{times:?}");
        }
    }

    #[test]
    fn a_kill_catches_what_was_written_and_neither_committed_nor_aborted_before() {
        // (written, committed, aborted before, caught)
        for (w, c, a, caught) in [
            (0, 0, 0, 0),
            (50, 0, 0, 50),
            (50, 50, 0, 0),
            (150, 100, 50, 0),
            (200, 100, 50, 50),
            (90, 100, 0, 0),
        ] {
            assert_eq!(uncommitted(w, c, a), caught, "{w} {c} {a}");
        }
    }

    #[test]
    fn kills_follow_their_closing_events_within_the_aim_and_the_seed() {
        let aim = Duration::from_millis(500);
        let a = kill_times(&[1000, 5000, 9000], 2, 1000, aim, 7);
        assert_eq!(a.len(), 2);
        for (t, closing) in a.iter().zip([1u64, 5]) {
            let from = Duration::from_secs(closing);
            assert!(*t >= from && *t < from + aim, "{t:?}");
        }
        assert_eq!(a, kill_times(&[1000, 5000, 9000], 2, 1000, aim, 7));
        assert_ne!(a, kill_times(&[1000, 5000, 9000], 2, 1000, aim, 8));
    }
}
