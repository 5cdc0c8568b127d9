//! Rescaling the sinks: a restart with fewer tasks than the checkpoint was taken with leaves
//! the transactional ids of the tasks that no longer exist (`<prefix>-<task>-<slot>`, task ≥
//! P) to nobody: no pool's init fences them, so a transaction the crashed incarnation left
//! open there would hold every read_committed reader at the LSO until
//! `transaction.timeout.ms`. After the resolutions are durable and the pools started, the
//! runtime lists the Ongoing transactions and fences those ids (the broker aborts them). The
//! restored committables of those tasks were resolved before (sink task 0 resumes every
//! restored committable, whichever task prepared it), so nothing of a durable checkpoint is
//! aborted.

use std::time::Duration;

use crate::client::Cluster;
use crate::engine::runtime::RuntimeError;
use crate::engine::sink::fence::fence_ongoing;

/// The task of `id` when it is a sink id `<prefix>-<task>-<slot>` of a task ≥ `parallelism`
/// (a task retired by a rescale); `None` for this job's live tasks and for other ids.
pub(crate) fn retired_task(id: &str, prefix: &str, parallelism: usize) -> Option<u64> {
    let rest = id.strip_prefix(prefix)?.strip_prefix('-')?;
    let (task, slot) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(task) || !digits(slot) {
        return None;
    }
    let task: u64 = task.parse().ok()?;
    (task >= parallelism as u64).then_some(task)
}

/// Fences every Ongoing transaction of a retired task's id; returns the ids.
pub(crate) async fn abort_retired(
    cluster: &std::sync::Arc<Cluster>,
    prefix: &str,
    parallelism: usize,
    transaction_timeout: Duration,
) -> Result<Vec<String>, RuntimeError> {
    let whose = |id: &str| {
        retired_task(id, prefix, parallelism)
            .map(|task| format!("transaction of retired sink task {task}"))
    };
    Ok(fence_ongoing(cluster, transaction_timeout, whose).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_tasks_at_or_above_the_parallelism_are_retired() {
        // (id, parallelism, expected)
        let cases = [
            ("job-0-0", 1, None),
            ("job-1-2", 1, Some(1)),
            ("job-1-2", 2, None),
            ("job-7-0", 2, Some(7)),
            ("job-2-10", 2, Some(2)),
            ("other-3-0", 1, None),  // another prefix
            ("job-x-0", 1, None),    // not a task number
            ("job-3", 1, None),      // no slot
            ("job-3-", 1, None),     // empty slot
            ("job-3-0-1", 1, None),  // more parts: not one of ours
            ("job3-0", 1, None),     // no separator
            ("job-1-0", 0, Some(1)), // parallelism 0 never runs; every id counts as retired
        ];
        for (id, p, want) in cases {
            assert_eq!(retired_task(id, "job", p), want, "{id} at P={p}");
        }
    }
}
