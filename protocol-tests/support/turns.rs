//! Turns that both protocol runs take, across processes: scripts/test runs the suite at
//! transaction.version 2 and at 1 at the same time, each with several tests at once, so an
//! in-process lock (like the 3-node cluster's) keeps apart only the tests of one run.
//!
//! The CPU-heavy scenarios (the engine under chaos, many processes or producers at full speed)
//! take [`heavy`]: one at a time on the machine, so that two of them never share its two cores
//! and each keeps the timing its kills and pauses were sized for. Every other test runs beside
//! them. The turn is an exclusive `flock` on a file in target/, held until the guard is dropped
//! (or the process ends, passed, failed or killed by the watchdog); the wait does not count
//! against the test's deadline ([`watchdog::turn`]).

use super::{init_logging, repo, watchdog};
use std::fs::{File, OpenOptions};
use tracing::Instrument;

/// The `heavy` turn, held by this test until dropped.
pub struct Turn {
    _lock: File,
}

/// Waits for the machine's one heavy turn (module docs) and holds it until the guard is dropped.
/// Call it on the test's own thread, first thing.
pub async fn heavy() -> Turn {
    init_logging();
    let path = repo().join("target/protocol-heavy.lock");
    let waited = tokio::task::spawn_blocking(move || {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        file.lock()
            .unwrap_or_else(|e| panic!("flock {}: {e}", path.display()));
        file
    });
    let file = watchdog::turn(waited)
        .instrument(watchdog::waiting(
            "the heavy turn (one CPU-heavy scenario at a time)",
        ))
        .await
        .expect("the heavy turn's lock");
    Turn { _lock: file }
}
