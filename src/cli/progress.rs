//! `onceflow run`'s live progress line on stderr (only when stderr is a terminal): records in
//! and out, the input rate, the last checkpoint and its duration, the oldest open
//! transaction's age and the source lag, redrawn about once a second with `\r`.

use onceflow::engine::metrics::{Metrics, Snapshot};
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_secs(1);

/// The line for `now`; `rate` is records in per second since the last line.
pub fn line(now: &Snapshot, rate: f64, now_ms: u64) -> String {
    let checkpoint = match now.last_checkpoint_completed_ms {
        Some(at) => format!(
            "checkpoint {} {:.1}s ago ({} ms, {})",
            now.last_checkpoint,
            now_ms.saturating_sub(at) as f64 / 1e3,
            (now.last_checkpoint_duration_seconds * 1e3).round() as u64,
            bytes(now.last_checkpoint_size_bytes),
        ),
        None => "no checkpoint yet".to_owned(),
    };
    format!(
        "in {} ({:.0}/s) · out {} · {checkpoint} · oldest txn {:.1}s · lag {}",
        now.records_in,
        rate,
        now.records_out,
        now.oldest_open_transaction_age_seconds,
        now.total_lag(),
    )
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{} MiB", n >> 20),
        n if n >= 10 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// Redraws the line until dropped; nothing when stderr is not a terminal.
pub struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub fn start(metrics: Arc<Metrics>) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { task: None };
        }
        let task = tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64);
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tick.tick().await;
                let s = metrics.snapshot();
                let elapsed = last.0.elapsed().as_secs_f64().max(1e-3);
                let rate = s.records_in.saturating_sub(last.1) as f64 / elapsed;
                last = (Instant::now(), s.records_in);
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                // \x1b[K clears what a longer earlier line left.
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r{}\x1b[K", line(&s, rate, now_ms));
                let _ = err.flush();
            }
        });
        Progress { task: Some(task) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // End the line so what follows starts on its own.
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_counts_rate_checkpoint_age_and_lag() {
        let mut s = Snapshot {
            records_in: 1200,
            records_out: 900,
            ..Snapshot::default()
        };
        assert_eq!(
            line(&s, 0.0, 0),
            "in 1200 (0/s) · out 900 · no checkpoint yet · oldest txn 0.0s · lag 0"
        );
        s.last_checkpoint = 5;
        s.last_checkpoint_completed_ms = Some(10_000);
        s.last_checkpoint_duration_seconds = 0.0421;
        s.last_checkpoint_size_bytes = 20 << 10;
        s.oldest_open_transaction_age_seconds = 1.3;
        s.source_lag.push(onceflow::engine::metrics::PartitionLag {
            topic: "t".into(),
            partition: 0,
            lag: 7,
        });
        assert_eq!(
            line(&s, 412.4, 12_500),
            "in 1200 (412/s) · out 900 · checkpoint 5 2.5s ago (42 ms, 20 KiB) · oldest txn 1.3s · lag 7"
        );
    }
}
