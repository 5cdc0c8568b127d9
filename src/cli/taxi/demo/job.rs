//! The demo's job: the shipped per-driver-hourly job file with its names rewritten, run as a
//! child process (`onceflow run`) that the demo SIGKILLs and restarts on the same state.

use crate::error::{CliError, Result};
use onceflow::engine::job::Job;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Job (b), as shipped.
pub const SHIPPED: &str = include_str!("../../../../jobs/rides-per-driver-hourly.toml");

/// What the demo changes in the shipped job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite<'a> {
    pub input: &'a str,
    pub output: &'a str,
    pub prefix: &'a str,
    pub state_dir: &'a Path,
    pub checkpoint_interval_ms: u64,
    /// `exactly-once`, or `at-least-once` for the demo's inverse.
    pub guarantee: &'a str,
}

/// The shipped job file with the lines `topics`, `topic`, `transactional.id.prefix`,
/// `state.dir`, `checkpoint.interval.ms` and `delivery.guarantee` replaced.
///
/// # Errors
/// [`CliError::Failed`] naming a line the shipped file no longer has (the demo and the file
/// went out of step), or what the job loader says about the result.
pub fn rewrite(shipped: &str, r: &Rewrite<'_>) -> Result<String> {
    let replacements = [
        ("topics = ", format!("topics = [\"{}\"]", r.input)),
        ("topic = ", format!("topic = \"{}\"", r.output)),
        (
            "transactional.id.prefix = ",
            format!("transactional.id.prefix = \"{}\"", r.prefix),
        ),
        (
            "state.dir = ",
            format!("state.dir = {:?}", r.state_dir.display().to_string()),
        ),
        (
            "checkpoint.interval.ms = ",
            format!("checkpoint.interval.ms = {}", r.checkpoint_interval_ms),
        ),
        (
            "delivery.guarantee = ",
            format!("delivery.guarantee = \"{}\"", r.guarantee),
        ),
    ];
    let mut found = [false; 6];
    let mut out = String::with_capacity(shipped.len());
    for line in shipped.lines() {
        match replacements.iter().position(|(p, _)| line.starts_with(p)) {
            Some(i) => {
                found[i] = true;
                out.push_str(&replacements[i].1);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    if let Some(i) = found.iter().position(|f| !f) {
        return Err(CliError::Failed(format!(
            "the shipped job file has no `{}...` line for the demo to rewrite",
            replacements[i].0
        )));
    }
    Job::parse("the demo's job file", &out).map_err(|e| CliError::Failed(e.to_string()))?;
    Ok(out)
}

/// The job as a child process: `onceflow run FILE -b BROKERS [-X ..]`, its stderr in
/// `run-N.log` next to the file, one log per incarnation.
pub struct ChildJob {
    file: PathBuf,
    args: Vec<String>,
    child: Child,
    log: PathBuf,
    incarnation: u32,
}

impl ChildJob {
    /// Writes `text` to `dir/job.toml` and starts the first incarnation (`--fresh`).
    ///
    /// # Errors
    /// [`CliError::Failed`] when the file cannot be written or the process not started.
    pub fn start(dir: &Path, text: &str, args: Vec<String>) -> Result<ChildJob> {
        let file = dir.join("job.toml");
        std::fs::write(&file, text).map_err(|e| {
            CliError::Failed(format!("writing the job file {}: {e}", file.display()))
        })?;
        let (child, log) = spawn(&file, &args, 1, true)?;
        Ok(ChildJob {
            file,
            args,
            child,
            log,
            incarnation: 1,
        })
    }

    /// An error carrying the last lines of the job's log when it has exited.
    ///
    /// # Errors
    /// [`CliError::Failed`] when the child exited (or cannot be asked).
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.failed(&format!("the job exited ({status})"))),
            Err(e) => Err(self.failed(&format!("cannot watch the job: {e}"))),
        }
    }

    /// SIGKILL, reaped, then the next incarnation on the same state.
    ///
    /// # Errors
    /// [`CliError::Failed`] when the kill or the restart fails.
    pub fn kill_and_restart(&mut self) -> Result<()> {
        self.check_running()?;
        self.child
            .kill()
            .map_err(|e| self.failed(&format!("SIGKILL failed: {e}")))?;
        // A SIGKILLed process is gone at once; wait() only reaps it.
        self.child
            .wait()
            .map_err(|e| self.failed(&format!("reaping the killed job: {e}")))?;
        self.incarnation += 1;
        let (child, log) = spawn(&self.file, &self.args, self.incarnation, false)?;
        self.child = child;
        self.log = log;
        Ok(())
    }

    /// SIGTERM (a graceful stop: a final checkpoint, committed), waited for up to `limit`, then
    /// SIGKILL. Returns whether it stopped cleanly.
    pub async fn stop(&mut self, limit: Duration) -> bool {
        // std's Child::kill sends SIGKILL only; `kill -TERM` asks for the clean stop.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }

    /// `what`, with the last lines of the running incarnation's log (the temp dir holding it
    /// goes with the demo, so the lines are in the message).
    pub fn failed(&self, what: &str) -> CliError {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let name = self.log.file_name().unwrap_or_default().to_string_lossy();
        if lines.is_empty() {
            return CliError::Failed(format!("{what}; the job's log ({name}) is empty"));
        }
        let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
        CliError::Failed(format!(
            "{what}; the job's last log lines ({name}):\n  {tail}"
        ))
    }
}

impl Drop for ChildJob {
    /// Never leaves a job running behind the demo (an error path included).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn(file: &Path, args: &[String], incarnation: u32, fresh: bool) -> Result<(Child, PathBuf)> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let log = dir.join(format!("run-{incarnation}.log"));
    let err = File::create(&log)
        .map_err(|e| CliError::Failed(format!("creating {}: {e}", log.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("finding the onceflow binary: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("run").arg(file).args(args);
    if fresh {
        cmd.arg("--fresh");
    }
    let child = cmd
        .env("ONCEFLOW_LOG", "onceflow=info")
        // A log file, printed on failure: no colour codes in it.
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|e| CliError::Failed(format!("starting `onceflow run`: {e}")))?;
    tracing::info!(pid = child.id(), incarnation, "demo job started");
    Ok((child, log))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(guarantee: &str) -> Rewrite<'_> {
        Rewrite {
            input: "in-1",
            output: "out-1",
            prefix: "demo-1",
            state_dir: Path::new("/tmp/d/state"),
            checkpoint_interval_ms: 250,
            guarantee,
        }
    }

    #[test]
    fn the_shipped_job_is_rewritten_to_the_demos_names_and_still_loads() {
        let text = rewrite(SHIPPED, &names("exactly-once")).unwrap();
        let job = Job::parse("t", &text).unwrap();
        assert_eq!(job.source.topics, ["in-1"]);
        assert_eq!(job.sink.topic, "out-1");
        assert_eq!(job.sink.transactional_id_prefix.as_deref(), Some("demo-1"));
        assert_eq!(job.settings.state_dir, Path::new("/tmp/d/state"));
        assert_eq!(job.settings.checkpoint_interval_ms, 250);
        let text = rewrite(SHIPPED, &names("at-least-once")).unwrap();
        let job = Job::parse("t", &text).unwrap();
        assert_eq!(
            job.sink.guarantee,
            onceflow::engine::job::DeliveryGuarantee::AtLeastOnce
        );
    }

    #[test]
    fn a_line_the_shipped_file_lost_is_named() {
        let without = SHIPPED.replace("state.dir = ", "# state.dir = ");
        let e = rewrite(&without, &names("exactly-once"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`state.dir = ...`"), "{e}");
    }
}
