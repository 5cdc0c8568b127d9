//! Barrier alignment at a task with several inputs (a keyed subtask reads one channel per
//! source subtask), as a pure state machine with checked transitions.
//!
//! After barrier N arrives on one input, that input is *blocked*: what follows it there
//! belongs after checkpoint N, so it must not touch the state before the snapshot. The task
//! keeps reading the other inputs (their records still belong before N) until N has come on
//! every input: then it is *aligned*, snapshots, forwards N, and unblocks every input.
//!
//! Barriers on one channel come in id order and the coordinator injects N + 1 only after N
//! completed or was cancelled, and every source forwards every barrier; so while aligning N
//! the only barrier an unblocked input can deliver is N. Anything else is a bug upstream and
//! a checked error here, never a silent mis-alignment.

use std::collections::BTreeSet;

use crate::engine::checkpoint::CheckpointId;

/// Where the alignment of a task with `inputs` inputs stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Alignment {
    /// No barrier pending; every input is read.
    Idle {
        /// The last checkpoint aligned (barriers must come above it).
        last: Option<CheckpointId>,
    },
    /// Barrier `id` came on the inputs in `arrived` (blocked) and not yet on the others.
    Aligning {
        /// The checkpoint.
        id: CheckpointId,
        /// The inputs it came on.
        arrived: BTreeSet<usize>,
    },
}

/// What a barrier means for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Block this input and keep reading the others.
    Block,
    /// Barrier `N` has come on every input: snapshot, forward, and read everything again.
    Aligned(CheckpointId),
}

/// A barrier that cannot come in a correct run (a bug upstream): the runtime stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AlignmentError {
    /// Input out of range.
    #[error("barrier {id} on input {input}, but the task has {inputs} inputs")]
    NoSuchInput {
        /// The checkpoint.
        id: CheckpointId,
        /// The input.
        input: usize,
        /// How many inputs the task has.
        inputs: usize,
    },
    /// A second barrier on an input blocked for the checkpoint being aligned.
    #[error("barrier {got} on input {input}, which is blocked for checkpoint {aligning}")]
    FromBlockedInput {
        /// What came.
        got: CheckpointId,
        /// The input.
        input: usize,
        /// The checkpoint being aligned.
        aligning: CheckpointId,
    },
    /// Another checkpoint's barrier while aligning.
    #[error("barrier {got} on input {input} while aligning checkpoint {aligning}")]
    Mixed {
        /// What came.
        got: CheckpointId,
        /// The input.
        input: usize,
        /// The checkpoint being aligned.
        aligning: CheckpointId,
    },
    /// A barrier at or below the last aligned checkpoint.
    #[error("barrier {got} on input {input}, but checkpoint {last} was aligned already")]
    Stale {
        /// What came.
        got: CheckpointId,
        /// The input.
        input: usize,
        /// The last aligned checkpoint.
        last: CheckpointId,
    },
}

impl Default for Alignment {
    fn default() -> Self {
        Alignment::Idle { last: None }
    }
}

impl Alignment {
    /// Barrier `id` came on `input` of `inputs`.
    ///
    /// # Errors
    /// [`AlignmentError`] for a barrier a correct run cannot deliver; the state is unchanged.
    pub(crate) fn on_barrier(
        &mut self,
        input: usize,
        id: CheckpointId,
        inputs: usize,
    ) -> Result<Step, AlignmentError> {
        if input >= inputs {
            return Err(AlignmentError::NoSuchInput { id, input, inputs });
        }
        match self {
            Alignment::Idle { last } => {
                if let Some(last) = *last {
                    if id <= last {
                        return Err(AlignmentError::Stale {
                            got: id,
                            input,
                            last,
                        });
                    }
                }
                if inputs == 1 {
                    *self = Alignment::Idle { last: Some(id) };
                    return Ok(Step::Aligned(id));
                }
                *self = Alignment::Aligning {
                    id,
                    arrived: BTreeSet::from([input]),
                };
                Ok(Step::Block)
            }
            Alignment::Aligning {
                id: aligning,
                arrived,
            } => {
                let aligning = *aligning;
                if arrived.contains(&input) {
                    return Err(AlignmentError::FromBlockedInput {
                        got: id,
                        input,
                        aligning,
                    });
                }
                if id != aligning {
                    return Err(AlignmentError::Mixed {
                        got: id,
                        input,
                        aligning,
                    });
                }
                arrived.insert(input);
                if arrived.len() < inputs {
                    return Ok(Step::Block);
                }
                *self = Alignment::Idle { last: Some(id) };
                Ok(Step::Aligned(id))
            }
        }
    }

    /// Whether `input` is blocked (its barrier came, others' have not).
    pub(crate) fn is_blocked(&self, input: usize) -> bool {
        match self {
            Alignment::Idle { .. } => false,
            Alignment::Aligning { arrived, .. } => arrived.contains(&input),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: CheckpointId = CheckpointId(1);
    const C2: CheckpointId = CheckpointId(2);
    const C3: CheckpointId = CheckpointId(3);

    fn err(e: AlignmentError) -> Result<Step, AlignmentError> {
        Err(e)
    }

    /// Each case: the inputs, then (input, barrier, expected answer) in order, and the inputs
    /// blocked at the end.
    #[test]
    fn alignment_table() {
        type Case = (
            usize,
            Vec<(usize, CheckpointId, Result<Step, AlignmentError>)>,
            Vec<usize>,
        );
        let cases: Vec<Case> = vec![
            // One input: every barrier aligns at once.
            (
                1,
                vec![
                    (0, C1, Ok(Step::Aligned(C1))),
                    (0, C2, Ok(Step::Aligned(C2))),
                ],
                vec![],
            ),
            // Two inputs: the first barrier blocks its input, the second aligns.
            (2, vec![(1, C1, Ok(Step::Block))], vec![1]),
            (
                2,
                vec![(1, C1, Ok(Step::Block)), (0, C1, Ok(Step::Aligned(C1)))],
                vec![],
            ),
            // Three inputs, in any order, then the next checkpoint.
            (
                3,
                vec![
                    (2, C1, Ok(Step::Block)),
                    (0, C1, Ok(Step::Block)),
                    (1, C1, Ok(Step::Aligned(C1))),
                    (0, C2, Ok(Step::Block)),
                ],
                vec![0],
            ),
            // A cancelled id is skipped: ids only have to increase.
            (
                2,
                vec![
                    (0, C1, Ok(Step::Block)),
                    (1, C1, Ok(Step::Aligned(C1))),
                    (1, C3, Ok(Step::Block)),
                ],
                vec![1],
            ),
            // A blocked input delivering again is a bug (it is not read while blocked).
            (
                2,
                vec![
                    (0, C1, Ok(Step::Block)),
                    (
                        0,
                        C2,
                        err(AlignmentError::FromBlockedInput {
                            got: C2,
                            input: 0,
                            aligning: C1,
                        }),
                    ),
                ],
                vec![0],
            ),
            // Another checkpoint's barrier while aligning.
            (
                3,
                vec![
                    (0, C2, Ok(Step::Block)),
                    (
                        1,
                        C1,
                        err(AlignmentError::Mixed {
                            got: C1,
                            input: 1,
                            aligning: C2,
                        }),
                    ),
                ],
                vec![0],
            ),
            // A barrier at or below the last aligned one.
            (
                2,
                vec![
                    (0, C2, Ok(Step::Block)),
                    (1, C2, Ok(Step::Aligned(C2))),
                    (
                        1,
                        C2,
                        err(AlignmentError::Stale {
                            got: C2,
                            input: 1,
                            last: C2,
                        }),
                    ),
                    (
                        0,
                        C1,
                        err(AlignmentError::Stale {
                            got: C1,
                            input: 0,
                            last: C2,
                        }),
                    ),
                ],
                vec![],
            ),
            (
                2,
                vec![(
                    2,
                    C1,
                    err(AlignmentError::NoSuchInput {
                        id: C1,
                        input: 2,
                        inputs: 2,
                    }),
                )],
                vec![],
            ),
        ];
        for (n, (inputs, steps, blocked)) in cases.into_iter().enumerate() {
            let mut a = Alignment::default();
            for (i, (input, id, want)) in steps.into_iter().enumerate() {
                assert_eq!(a.on_barrier(input, id, inputs), want, "case {n} step {i}");
            }
            let got: Vec<usize> = (0..inputs + 1).filter(|&i| a.is_blocked(i)).collect();
            assert_eq!(got, blocked, "case {n}: blocked inputs");
        }
    }
}
