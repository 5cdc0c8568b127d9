//! Where a group member is in its life, as one enum with checked transitions (it replaces the
//! `stable`/`rejoin`/`lost` booleans; the fatal error itself is kept beside the phase).
//!
//! ```text
//! Unjoined ──join started──▶ Joining ──joined──▶ Stable ◀──joined (nothing left to hand out)
//!    ▲                        │   ▲                │  ▲
//!    │                        │   └─join started── │ ─┴─ RejoinNeeded ◀─rejoin requested─┘
//!    │                        │  (also after a failed attempt)
//!    └──loss reported── Lost ◀┴── membership gone (from any phase but Failed)
//!
//! Failed (fenced, not authorized): from any phase, for good.
//! ```
//!
//! Heartbeats run only in `Stable` and `RejoinNeeded`; `poll` rebalances in every phase but
//! `Stable` (and `Failed`, which it reports instead). In those two phases a poll that comes more
//! than max.poll.interval.ms after the last one ([`poll_too_late`]) finds the membership gone,
//! whether the heartbeat task gave it up first or the late poll does.

use crate::client::error::Error;
use std::time::Duration;

/// A group member's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum MemberPhase {
    /// Never joined, or the loss of the last membership was reported: the next poll joins.
    #[default]
    Unjoined,
    /// A JoinGroup/SyncGroup round is under way (or the last one failed: the next poll tries
    /// again). No heartbeats: one with the old generation would come back ILLEGAL_GENERATION
    /// and make the new assignment look lost.
    Joining,
    /// In a generation with an assignment; heartbeating.
    Stable,
    /// In a generation, heartbeating, but the next poll must rejoin (subscription changed,
    /// REBALANCE_IN_PROGRESS, a commit refused for a rebalance, a cooperative revocation).
    RejoinNeeded,
    /// The membership is gone (session expired, generation reset, poll too late): the next
    /// poll reports the partitions lost, then joins.
    Lost,
    /// Fenced by another member with the same group.instance.id, or not authorized: every
    /// poll returns the error.
    Failed,
}

impl MemberPhase {
    /// The heartbeat task heartbeats in this phase.
    pub(crate) fn heartbeats(self) -> bool {
        matches!(self, MemberPhase::Stable | MemberPhase::RejoinNeeded)
    }

    /// `poll` must (re)join in this phase.
    pub(crate) fn needs_join(self) -> bool {
        matches!(
            self,
            MemberPhase::Unjoined
                | MemberPhase::Joining
                | MemberPhase::RejoinNeeded
                | MemberPhase::Lost
        )
    }
}

/// Whether the application came back too late for its membership: the member is in a
/// generation (the phases that heartbeat) and the last poll began more than
/// max.poll.interval.ms ago (`None`: it never polled). The membership is then given up —
/// `MembershipGone` — by whichever notices first, the heartbeat task or the late poll itself;
/// the other then finds it gone. Pure.
pub(crate) fn poll_too_late(
    phase: MemberPhase,
    since_last_poll: Option<Duration>,
    max_poll_interval: Duration,
) -> bool {
    phase.heartbeats() && since_last_poll.is_some_and(|d| d > max_poll_interval)
}

/// What happens to the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberEvent {
    /// `subscribe`, a heartbeat answered REBALANCE_IN_PROGRESS, a commit was refused because
    /// the group rebalanced.
    RejoinRequested,
    /// `poll` starts a JoinGroup/SyncGroup round.
    JoinStarted,
    /// The round ended in a generation with an assignment; `rejoin`: a cooperative member gave
    /// partitions up, which another round hands to their new owner.
    Joined { rejoin: bool },
    /// The coordinator no longer has this membership (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION),
    /// or the member gave it up (poll too late: [`poll_too_late`]).
    MembershipGone,
    /// `poll` reported the lost partitions.
    LossReported,
    /// Fenced or not authorized.
    Fatal,
}

/// The phase after `event`, or the error for a transition that cannot happen.
pub(crate) fn next(phase: MemberPhase, event: MemberEvent) -> Result<MemberPhase, Error> {
    use MemberEvent as E;
    use MemberPhase as P;
    match (phase, event) {
        // Nothing brings a failed member back; events still under way when it failed (a
        // round finishing, a heartbeat answer) change nothing.
        (P::Failed, E::JoinStarted) => Err(Error::Usage(
            "this group member cannot go on (fenced or not authorized); create a new one".into(),
        )),
        (P::Failed, _) => Ok(P::Failed),
        (_, E::Fatal) => Ok(P::Failed),

        (P::Stable, E::RejoinRequested) => Ok(P::RejoinNeeded),
        // Not in a generation (or already rejoining): the next poll joins anyway.
        (p, E::RejoinRequested) => Ok(p),

        (P::Unjoined | P::Joining | P::Stable | P::RejoinNeeded, E::JoinStarted) => Ok(P::Joining),
        // The heartbeat task gave the membership up between `poll` reporting the last loss
        // and the round starting: the loss stays to be reported after this round.
        (P::Lost, E::JoinStarted) => Ok(P::Lost),

        (P::Joining, E::Joined { rejoin: false }) => Ok(P::Stable),
        (P::Joining, E::Joined { rejoin: true }) => Ok(P::RejoinNeeded),
        // Race: the heartbeat task gave the membership up while the round ran (poll too late,
        // LeaveGroup sent); the new assignment is reported lost and the member joins again.
        (P::Lost, E::Joined { .. }) => Ok(P::Lost),
        (p @ (P::Unjoined | P::Stable | P::RejoinNeeded), E::Joined { .. }) => Err(
            Error::Internal(format!("group member: a join round ended while {p:?}")),
        ),

        (_, E::MembershipGone) => Ok(P::Lost),

        (P::Lost, E::LossReported) => Ok(P::Unjoined),
        (p, E::LossReported) => Err(Error::Internal(format!(
            "group member: a loss reported while {p:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemberEvent::*;
    use MemberPhase::*;

    #[test]
    fn transitions() {
        // (phase, event, Some(next phase) or None for refused)
        let table: &[(MemberPhase, MemberEvent, Option<MemberPhase>)] = &[
            (Unjoined, JoinStarted, Some(Joining)),
            (Joining, JoinStarted, Some(Joining)),
            (RejoinNeeded, JoinStarted, Some(Joining)),
            (Stable, JoinStarted, Some(Joining)),
            (Lost, JoinStarted, Some(Lost)),
            (Failed, JoinStarted, None),
            (Joining, Joined { rejoin: false }, Some(Stable)),
            (Joining, Joined { rejoin: true }, Some(RejoinNeeded)),
            (Lost, Joined { rejoin: false }, Some(Lost)),
            (Failed, Joined { rejoin: false }, Some(Failed)),
            (Unjoined, Joined { rejoin: false }, None),
            (Stable, Joined { rejoin: true }, None),
            (RejoinNeeded, Joined { rejoin: false }, None),
            (Stable, RejoinRequested, Some(RejoinNeeded)),
            (RejoinNeeded, RejoinRequested, Some(RejoinNeeded)),
            (Unjoined, RejoinRequested, Some(Unjoined)),
            (Joining, RejoinRequested, Some(Joining)),
            (Lost, RejoinRequested, Some(Lost)),
            (Failed, RejoinRequested, Some(Failed)),
            (Stable, MembershipGone, Some(Lost)),
            (RejoinNeeded, MembershipGone, Some(Lost)),
            (Joining, MembershipGone, Some(Lost)),
            (Unjoined, MembershipGone, Some(Lost)),
            (Lost, MembershipGone, Some(Lost)),
            (Failed, MembershipGone, Some(Failed)),
            (Lost, LossReported, Some(Unjoined)),
            (Stable, LossReported, None),
            (Joining, LossReported, None),
            (Unjoined, Fatal, Some(Failed)),
            (Joining, Fatal, Some(Failed)),
            (Stable, Fatal, Some(Failed)),
            (Lost, Fatal, Some(Failed)),
            (Failed, Fatal, Some(Failed)),
        ];
        for (phase, event, want) in table {
            let got = next(*phase, *event).ok();
            assert_eq!(got, *want, "{phase:?} + {event:?}");
        }
    }

    #[test]
    fn a_poll_is_too_late_only_past_the_interval_and_only_in_a_generation() {
        const MAX: Duration = Duration::from_millis(2000);
        let ms = |n| Some(Duration::from_millis(n));
        // (phase, time since the last poll began, too late)
        let table = [
            (Stable, ms(2001), true),
            // The heartbeat saw a rebalance: still a member until the interval runs out.
            (RejoinNeeded, ms(2001), true),
            (Stable, ms(2000), false),
            (RejoinNeeded, ms(1999), false),
            (Stable, None, false),
            // Not in a generation: nothing to give up (a round under way or failed, a loss
            // still to be reported, never joined, fenced).
            (Joining, ms(60_000), false),
            (Lost, ms(60_000), false),
            (Unjoined, ms(60_000), false),
            (Failed, ms(60_000), false),
        ];
        for (phase, since, late) in table {
            assert_eq!(
                poll_too_late(phase, since, MAX),
                late,
                "{phase:?}, last poll {since:?} ago"
            );
        }
    }

    #[test]
    fn heartbeats_only_in_a_generation_and_joins_unless_stable_or_failed() {
        let table = [
            (Unjoined, false, true),
            (Joining, false, true),
            (Stable, true, false),
            (RejoinNeeded, true, true),
            (Lost, false, true),
            (Failed, false, false),
        ];
        for (phase, heartbeats, needs_join) in table {
            assert_eq!(phase.heartbeats(), heartbeats, "{phase:?} heartbeats");
            assert_eq!(phase.needs_join(), needs_join, "{phase:?} needs a join");
        }
    }
}
