//! The `onceflow` binary under test: one runner for every test that runs it.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary, with its standard streams piped, for a test that drives a long-running child
/// itself (reads its stdout while it runs, kills it). Everything else uses [`onceflow`].
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_onceflow"));
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `onceflow ARGS` to completion with `stdin` as its whole input (then EOF); returns its
/// output and how long it ran. Blocking: async tests use [`onceflow_async`].
pub fn onceflow(args: &[&str], stdin: &str) -> (Output, Duration) {
    let _wait = super::watchdog::waiting(format!("onceflow {}", args.join(" "))).entered();
    let start = Instant::now();
    let mut child = command().args(args).spawn().expect("run onceflow");
    let mut input = child.stdin.take().expect("piped stdin");
    // A child that exits before reading its input closes the pipe; its output says why.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let out = child.wait_with_output().expect("wait for onceflow");
    (out, start.elapsed())
}

/// [`onceflow`] on a blocking thread, so the runtime keeps serving the test's own clients.
pub async fn onceflow_async(args: Vec<String>, stdin: &str) -> Output {
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        onceflow(&args, &stdin).0
    })
    .await
    .expect("the onceflow runner panicked")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Status, stdout and stderr, for a failure message.
pub fn shown(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// The run failed with exactly one line on stderr, `onceflow: error: ...`, containing `needle`.
pub fn assert_one_line_error(o: &Output, needle: &str) {
    assert!(!o.status.success(), "expected failure, got success");
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {err}");
    assert!(lines[0].starts_with("onceflow: error: "), "{err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A child process (`onceflow run`, a feeder), SIGKILLed and reaped when dropped: a failing
/// test leaves nothing running behind.
pub struct Guarded(pub std::process::Child);

impl std::ops::Deref for Guarded {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
