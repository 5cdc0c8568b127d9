//! The local mode: one process runs every subtask of the job (`mode = "local"`, the default).
//!
//! - `task`: the entry point: opens the state, checks the budget, recovers the sinks, starts
//!   the coordinator's loop.
//! - `coordinate`: the loop around the pure checkpoint coordinator (`Master`), carrying out its
//!   decisions; `persist` writes each checkpoint on a blocking thread; `positions` converts the
//!   coordinator's positions to the store's and back.
//! - `launch`: starts the subtasks at a parallelism; `source` (a source subtask: its consumer,
//!   partitions from `partitions`, per-partition watermarks), `keyed` (a keyed subtask and its
//!   barrier `alignment`; `stage_out`: its sink or the next keyed stage), `output` (a sink
//!   task), exchanging `message`s.
//! - `offsets` (group offsets for monitoring), `retire` (after a rescale down, the open
//!   transactions of sink tasks that no longer exist).

mod alignment;
mod coordinate;
mod keyed;
mod launch;
mod message;
mod offsets;
mod output;
mod partitions;
mod persist;
mod positions;
mod retire;
mod source;
mod stage_out;
mod task;

pub(crate) use task::run;
