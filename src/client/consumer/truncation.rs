//! KIP-320: what to do when a Fetch response says the log diverged from what we fetched.
//!
//! From Fetch v12 the consumer sends, per partition, the leader epoch of the last batch it
//! fetched (`last_fetched_epoch`). If the leader's log ended that epoch before the fetch offset
//! (after an unclean leader election the new leader may never have had those records) it
//! answers with no records and `diverging_epoch` = (the largest epoch it has at or below ours,
//! the offset where that epoch ends). Records at and after that end offset that we fetched are
//! not in the log any more.
//!
//! The Java client compares the end offset with its position: below it, with a reset policy it
//! seeks to the end offset ("the first offset known to diverge"), without one it raises
//! LogTruncationException; an undefined end offset resets by auto.offset.reset or raises. Our
//! fetcher runs ahead of the application, so the position (next record handed to the
//! application) and the fetch offset differ while data is buffered: only records below the
//! position were delivered, so only those make it a truncation the application must hear of;
//! buffered records are dropped and fetched again either way.

use crate::client::config::AutoOffsetReset;

use super::Offset;

/// The consumer's reaction to a diverging epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Divergence {
    /// Drop what is buffered and fetch again from `offset`, sending `last_epoch` as the last
    /// fetched epoch.
    Refetch {
        /// Where fetching (and the position) continues.
        offset: i64,
        /// The diverging epoch, now the epoch of the record before `offset`.
        last_epoch: i32,
    },
    /// The log end is unknown: reset by auto.offset.reset.
    Reset(Offset),
    /// Records already delivered are gone from the log and there is no reset policy: the
    /// application must be told (and seek).
    Fail {
        /// Where the log diverges, when known.
        divergent_offset: Option<i64>,
    },
}

/// Decides what to do about `diverging_epoch` = (`epoch`, `end_offset`) in the response to a
/// fetch of a partition whose application position is `position`.
pub(crate) fn on_diverging_epoch(
    position: i64,
    epoch: i32,
    end_offset: i64,
    policy: AutoOffsetReset,
) -> Divergence {
    let reset = match policy {
        AutoOffsetReset::Earliest => Some(Offset::Beginning),
        AutoOffsetReset::Latest => Some(Offset::End),
        AutoOffsetReset::None => None,
    };
    if epoch < 0 || end_offset < 0 {
        return match reset {
            Some(r) => Divergence::Reset(r),
            None => Divergence::Fail {
                divergent_offset: None,
            },
        };
    }
    if end_offset < position {
        return match reset {
            Some(_) => Divergence::Refetch {
                offset: end_offset,
                last_epoch: epoch,
            },
            None => Divergence::Fail {
                divergent_offset: Some(end_offset),
            },
        };
    }
    // Nothing delivered was lost; what is buffered may have been.
    Divergence::Refetch {
        offset: position,
        last_epoch: epoch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AutoOffsetReset::{Earliest, Latest, None as NoReset};

    #[test]
    fn on_diverging_epoch_table() {
        // (position, diverging epoch, end offset, policy, expected)
        let rows = [
            // Delivered records 80..100 are gone: seek to the divergence (Java does the same
            // for either reset policy), or fail without one.
            (
                100,
                3,
                80,
                Earliest,
                Divergence::Refetch {
                    offset: 80,
                    last_epoch: 3,
                },
            ),
            (
                100,
                3,
                80,
                Latest,
                Divergence::Refetch {
                    offset: 80,
                    last_epoch: 3,
                },
            ),
            (
                100,
                3,
                80,
                NoReset,
                Divergence::Fail {
                    divergent_offset: Some(80),
                },
            ),
            // Only buffered, undelivered records were lost: fetch again from the position,
            // whatever the policy.
            (
                100,
                3,
                150,
                NoReset,
                Divergence::Refetch {
                    offset: 100,
                    last_epoch: 3,
                },
            ),
            (
                100,
                3,
                100,
                NoReset,
                Divergence::Refetch {
                    offset: 100,
                    last_epoch: 3,
                },
            ),
            (
                100,
                0,
                150,
                Latest,
                Divergence::Refetch {
                    offset: 100,
                    last_epoch: 0,
                },
            ),
            // The leader cannot say where the epoch ended.
            (100, -1, -1, Earliest, Divergence::Reset(Offset::Beginning)),
            (100, -1, -1, Latest, Divergence::Reset(Offset::End)),
            (100, 4, -1, Latest, Divergence::Reset(Offset::End)),
            (
                100,
                -1,
                -1,
                NoReset,
                Divergence::Fail {
                    divergent_offset: None,
                },
            ),
            // Truncated to empty.
            (
                5,
                0,
                0,
                NoReset,
                Divergence::Fail {
                    divergent_offset: Some(0),
                },
            ),
        ];
        for (position, epoch, end, policy, want) in rows {
            assert_eq!(
                on_diverging_epoch(position, epoch, end, policy),
                want,
                "position {position}, diverging ({epoch}, {end}), {policy:?}"
            );
        }
    }
}
