//! `onceflow run JOB.toml`: runs a job file until SIGINT/SIGTERM (exit 0 after the checkpoint
//! under way) or a fatal error (one line on stderr, exit 1). See `engine::runtime`.

use super::error::{CliError, Result};
use super::progress::Progress;
use super::props::Conn;
use onceflow::engine::job::Job;
use onceflow::engine::metrics::http::MetricsServer;
use onceflow::engine::metrics::Metrics;
use onceflow::engine::runtime::{self, RunConfig};
use onceflow::engine::state::RestoreFrom;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The job file (TOML; see jobs/).
    job: PathBuf,
    /// Bootstrap broker(s), host:port[,host:port...]; overrides the job file's source.brokers.
    #[arg(short = 'b', long = "brokers")]
    broker: Option<String>,
    /// A client property, key=value, with the Java client's names. Repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    props: Vec<String>,
    /// Start without state: wipe the state directory's checkpoints.
    #[arg(long, conflicts_with = "from_checkpoint")]
    fresh: bool,
    /// Start from this retained checkpoint (later ones are rolled back).
    #[arg(long, value_name = "N")]
    from_checkpoint: Option<u64>,
    /// The state directory (default: the job file's state.dir).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
}

pub async fn run(a: Args) -> Result<ExitCode> {
    let job = Job::load(&a.job).map_err(|e| CliError::Input(e.to_string()))?;
    let conn = Conn {
        broker: a
            .broker
            .clone()
            .unwrap_or_else(|| job.source.brokers.join(",")),
        props: a.props.clone(),
    };
    let restore = match (a.fresh, a.from_checkpoint) {
        (true, _) => RestoreFrom::Fresh,
        (false, Some(n)) => RestoreFrom::Checkpoint(n),
        (false, None) => RestoreFrom::Latest,
    };
    let config = RunConfig {
        state_dir: a
            .state_dir
            .clone()
            .unwrap_or_else(|| job.settings.state_dir.clone()),
        client: conn.brokers_only().client()?,
        producer: conn.producer(&[])?,
        consumer: conn.consumer(&[])?,
        restore,
        job,
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ = tx.send(true);
    });
    let metrics = Arc::new(Metrics::new());
    let _server = match a.metrics_addr {
        Some(addr) => Some(
            MetricsServer::start(addr, metrics.clone())
                .await
                .map_err(|e| CliError::Input(format!("--metrics-addr: {e}")))?,
        ),
        None => None,
    };
    let progress = Progress::start(metrics.clone());
    let result = runtime::run_with_metrics(config, rx, metrics).await;
    drop(progress);
    let summary = result.map_err(|e| CliError::Failed(e.to_string()))?;
    eprintln!(
        "run: stopped after checkpoint {}: {} records in, {} out",
        summary.last_checkpoint, summary.records_in, summary.records_out
    );
    Ok(ExitCode::SUCCESS)
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
