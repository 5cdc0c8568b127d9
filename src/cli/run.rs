//! `onceflow run JOB.toml|JOB.sql`: runs a job file (or a SQL job) until SIGINT/SIGTERM (a
//! graceful stop: exit 0 once a final checkpoint is committed) or a fatal error (one line on
//! stderr, exit 1). See `engine::runtime`. `--explain` (or a SQL job's `EXPLAIN INSERT …`)
//! prints the plan instead.

use super::error::{CliError, Result};
use super::progress::Progress;
use super::props::Conn;
use onceflow::client::config::split_property;
use onceflow::client::{ConfigError, ConsumerConfig, ProducerConfig};
use onceflow::engine::formats::LineFormats;
use onceflow::engine::job::Job;
use onceflow::engine::metrics::http::MetricsServer;
use onceflow::engine::metrics::Metrics;
use onceflow::engine::runtime::RestoreFrom;
use onceflow::engine::runtime::{self, RunConfig};
use onceflow::engine::sql::SqlJob;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The job file: TOML, or SQL when it ends in .sql or is a TOML file holding only
    /// sql = '''...''' (see jobs/).
    job: PathBuf,
    /// Print the job's plan (its operators, where each runs) and exit without running it.
    #[arg(long)]
    explain: bool,
    /// Bootstrap broker(s), host:port[,host:port...]; overrides the job file's source.brokers.
    #[arg(short = 'b', long = "brokers")]
    broker: Option<String>,
    /// A client property, key=value, with the Java client's names. Repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    props: Vec<String>,
    /// Start without state: wipe the state directory's checkpoints.
    #[arg(long, conflicts_with = "from_checkpoint")]
    fresh: bool,
    /// Start from this retained checkpoint (later ones are rolled back: the input they read is
    /// read again and their output written again).
    #[arg(long, value_name = "N")]
    from_checkpoint: Option<u64>,
    /// The state directory (default: the job file's state.dir).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
}

/// The job of a job file, or of a SQL file; and whether its plan is all that is asked for.
fn load(path: &std::path::Path) -> Result<(Job, bool)> {
    let loaded = match SqlJob::load_if_sql(path) {
        Ok(Some(sql)) => Ok((sql.job, sql.explain)),
        Ok(None) => Job::load(path).map(|j| (j, false)),
        Err(e) => Err(e),
    };
    loaded.map_err(|e| CliError::Input(e.to_string()))
}

pub async fn run(a: Args) -> Result<ExitCode> {
    let (job, explain) = load(&a.job)?;
    if explain || a.explain {
        print!("{}", job.explain());
        return Ok(ExitCode::SUCCESS);
    }
    let conn = Conn {
        broker: a
            .broker
            .clone()
            .unwrap_or_else(|| job.source.brokers.join(",")),
        props: Vec::new(),
        config_file: None,
    };
    // The security properties (security.protocol, ssl.*, sasl.*) also go to the admin client.
    let for_admin = Conn {
        props: a.props.clone(),
        ..conn.clone()
    }
    .brokers_only()?;
    let (for_producer, for_consumer) = route_props(&a.props)?;
    let restore = match (a.fresh, a.from_checkpoint) {
        (true, _) => RestoreFrom::Fresh,
        (false, Some(n)) => RestoreFrom::Checkpoint(n),
        (false, None) => RestoreFrom::Latest,
    };
    // The shared settings of -X (client.id, default.api.timeout.ms, ...) reach the run's own
    // connection too, not only its producer and consumer.
    let mut client = for_admin.client()?;
    for p in &a.props {
        let (k, v) = split_property(p)?;
        client.set(&k, &v)?;
    }
    let config = RunConfig {
        state_dir: a
            .state_dir
            .clone()
            .unwrap_or_else(|| job.settings.state_dir.clone()),
        client,
        producer: conn.producer(&for_producer)?,
        consumer: conn.consumer(&for_consumer)?,
        restore,
        job,
        // The engine's csv and json formats are all a job file needs.
        formats: LineFormats::new(),
    };
    let rx = stop_on_signals();
    let metrics = Arc::new(Metrics::new());
    let _server = match a.metrics_addr {
        Some(addr) => Some(
            MetricsServer::start(addr, metrics.clone())
                .await
                .map_err(|e| CliError::Input(format!("--metrics-addr: {e}")))?,
        ),
        None => None,
    };
    let replay_notice = a.from_checkpoint.map(|n| replay_notice(n, metrics.clone()));
    let progress = Progress::start(metrics.clone());
    let result = runtime::run_with_metrics(config, rx, metrics.clone()).await;
    drop(progress);
    if let Some(task) = replay_notice {
        task.abort();
    }
    let summary = result.map_err(|e| CliError::Failed(e.to_string()))?;
    let replayed = metrics.snapshot().replayed_records;
    let replay = match replayed {
        0 => String::new(),
        n => format!(" ({n} input records read again after the rollback)"),
    };
    eprintln!(
        "run: stopped after checkpoint {}: {} records in, {} out{replay}",
        summary.last_checkpoint, summary.records_in, summary.records_out
    );
    Ok(ExitCode::SUCCESS)
}

/// The run's stop switch: the first SIGINT/SIGTERM asks for a graceful stop (a final
/// checkpoint, then its commit); a second one exits at once (130).
fn stop_on_signals() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        eprintln!(
            "run: stopping: a final checkpoint, then its commit (SIGINT/SIGTERM again stops at once; the next start aborts what is open)"
        );
        let _ = tx.send(true);
        wait_for_signal().await;
        eprintln!("run: stopped at once, before the final checkpoint was committed");
        std::process::exit(130);
    });
    rx
}

/// The runtime counts what a restore of an older checkpoint (`n`) reads again as soon as the
/// state is open, before it connects: say so then, once.
fn replay_notice(n: u64, metrics: Arc<Metrics>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let replayed = metrics.snapshot().replayed_records;
            if replayed > 0 {
                eprintln!(
                    "run: checkpoint {n} is older than the latest: the later ones are rolled back, {replayed} input records they read are read again and the output they committed is written again (read_committed readers see it twice)"
                );
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
}

/// Deals the `-X` properties to the sink's producer and the source's consumer: each goes to
/// every client that knows its name (client-wide ones such as `client.id` to both), so
/// `-X fetch.max.wait.ms=100` and `-X linger.ms=5` both work; a name neither knows, or a bad
/// value, is one line naming it.
fn route_props(props: &[String]) -> Result<(Vec<String>, Vec<String>)> {
    let (mut producer, mut consumer) = (Vec::new(), Vec::new());
    for p in props {
        let (k, v) = split_property(p)?;
        let known = |r: std::result::Result<(), ConfigError>| match r {
            Ok(()) => Ok(true),
            Err(ConfigError::Unknown { .. }) => Ok(false),
            Err(e) => Err(CliError::from(e)),
        };
        let by_producer = known(ProducerConfig::default().set(&k, &v))?;
        let by_consumer = known(ConsumerConfig::default().set(&k, &v))?;
        if !by_producer && !by_consumer {
            return Err(CliError::Usage(format!(
                "-X {k}: unknown property for the job's producer (sink) and consumer (source); see the configuration table in docs/guide/configuration.md"
            )));
        }
        if by_producer {
            producer.push(p.clone());
        }
        if by_consumer {
            consumer.push(p.clone());
        }
    }
    Ok((producer, consumer))
}

/// SIGINT or SIGTERM (Ctrl-C only where there is no SIGTERM).
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_property_goes_to_the_clients_that_know_it() {
        let props = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (p, c) = route_props(&props(&[
            "linger.ms=5",
            "fetch.max.wait.ms=100",
            "client.id=x",
        ]))
        .unwrap();
        assert_eq!(p, props(&["linger.ms=5", "client.id=x"]));
        assert_eq!(c, props(&["fetch.max.wait.ms=100", "client.id=x"]));
        let e = route_props(&props(&["lingr.ms=5"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("-X lingr.ms") && !e.contains('\n'), "{e}");
        let e = route_props(&props(&["linger.ms=soon"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("linger.ms"), "{e}");
    }
}
