//! Where a KIP-848 member is in its life, as one enum with checked transitions.
//!
//! ```text
//! Unsubscribed ──join──▶ Joining ──answer──▶ Stable ◀──answer (acknowledged)── Acknowledging
//!                          ▲                   │ ▲                                  ▲
//!                          │         new target│ └──answer (same target)            │
//!                          │                   ▼                                    │
//!                          │               Reconciling ───reconciled (complete)──────┘
//!                          │                   (a new target from any in-group phase)
//!                          └──loss reported── Lost ◀── membership gone (fenced, unknown
//!                                                      member, poll too late) from Joining,
//!                                                      Stable, Reconciling, Acknowledging
//! Left: close() sent the leave heartbeat; Failed: for good (fenced instance id, not authorized).
//! ```
//!
//! The heartbeat task sends in `Joining` (epoch 0, every field), `Stable`, `Reconciling` and
//! `Acknowledging` (the owned partitions). `poll` reconciles in `Reconciling` (revoke, then
//! assign, in the application's task) and reports the partitions lost in `Lost`.

use crate::client::error::Error;

/// A KIP-848 member's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Phase {
    /// Not in the group: never joined (no poll with a subscription yet).
    #[default]
    Unsubscribed,
    /// The heartbeat with member epoch 0 is being sent until the coordinator answers.
    Joining,
    /// In the group; owns what the coordinator last assigned.
    Stable,
    /// The coordinator assigned something else: the next poll revokes and assigns.
    Reconciling,
    /// Reconciled: the next heartbeat tells the coordinator what the member owns now.
    Acknowledging,
    /// The membership is gone: the next poll reports the partitions lost, then joins again.
    Lost,
    /// The member left the group (close).
    Left,
    /// Fenced by another member with the same group.instance.id, or not authorized.
    Failed,
}

impl Phase {
    /// The heartbeat task sends in this phase.
    pub(crate) fn heartbeats(self) -> bool {
        matches!(
            self,
            Phase::Joining | Phase::Stable | Phase::Reconciling | Phase::Acknowledging
        )
    }

    /// The member is in the group (has, or is getting, a member epoch).
    pub(crate) fn in_group(self) -> bool {
        matches!(
            self,
            Phase::Stable | Phase::Reconciling | Phase::Acknowledging
        )
    }
}

/// What happens to the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// `poll` with a subscription, not in the group.
    Join,
    /// A heartbeat answer without error. `new_target`: it assigned something other than the
    /// target the member has; `acknowledged`: the request carried the owned partitions of the
    /// last reconciliation.
    Answer {
        new_target: bool,
        acknowledged: bool,
    },
    /// `poll` revoked and assigned to match the target; not `complete`: a newer target came
    /// meanwhile, or some of its topic ids are not in the metadata yet.
    Reconciled { complete: bool },
    /// FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, or the application did not poll within
    /// max.poll.interval.ms.
    MembershipGone,
    /// `poll` reported the lost partitions.
    LossReported,
    /// `close` sent the leave heartbeat.
    Leave,
    /// Fenced or not authorized.
    Fatal,
}

/// The phase after `event`, or the error for a transition that cannot happen.
pub(crate) fn next(phase: Phase, event: Event) -> Result<Phase, Error> {
    use Event as E;
    use Phase as P;
    let to = match (phase, event) {
        (P::Failed, E::Join) => {
            return Err(Error::Usage(
                "this group member cannot go on (fenced or not authorized); create a new one"
                    .into(),
            ))
        }
        (P::Failed, _) => P::Failed,
        (_, E::Fatal) => P::Failed,
        (_, E::Leave) => P::Left,
        (P::Unsubscribed | P::Left, E::Join) => P::Joining,
        (P::Joining | P::Stable, E::Answer { new_target, .. }) => {
            if new_target {
                P::Reconciling
            } else {
                P::Stable
            }
        }
        (P::Reconciling, E::Answer { .. }) => P::Reconciling,
        (
            P::Acknowledging,
            E::Answer {
                new_target,
                acknowledged,
            },
        ) => match (new_target, acknowledged) {
            (true, _) => P::Reconciling,
            (false, true) => P::Stable,
            (false, false) => P::Acknowledging,
        },
        (P::Reconciling, E::Reconciled { complete: true }) => P::Acknowledging,
        (P::Reconciling, E::Reconciled { complete: false }) => P::Reconciling,
        (P::Joining | P::Stable | P::Reconciling | P::Acknowledging, E::MembershipGone) => P::Lost,
        (P::Lost, E::LossReported) => P::Joining,
        (from, event) => {
            return Err(Error::Usage(format!(
                "group member: no transition from {from:?} on {event:?}"
            )))
        }
    };
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event as E;
    use Phase as P;

    const QUIET: E = E::Answer {
        new_target: false,
        acknowledged: false,
    };
    const NEW: E = E::Answer {
        new_target: true,
        acknowledged: false,
    };
    const DONE: E = E::Reconciled { complete: true };
    const PARTLY: E = E::Reconciled { complete: false };
    const ACKED: E = E::Answer {
        new_target: false,
        acknowledged: true,
    };

    #[test]
    fn transitions() {
        let table: &[(P, E, Option<P>)] = &[
            (P::Unsubscribed, E::Join, Some(P::Joining)),
            (P::Left, E::Join, Some(P::Joining)),
            (P::Stable, E::Join, None),
            (P::Joining, QUIET, Some(P::Stable)),
            (P::Joining, NEW, Some(P::Reconciling)),
            (P::Stable, QUIET, Some(P::Stable)),
            (P::Stable, NEW, Some(P::Reconciling)),
            (P::Reconciling, QUIET, Some(P::Reconciling)),
            (P::Reconciling, NEW, Some(P::Reconciling)),
            (P::Reconciling, DONE, Some(P::Acknowledging)),
            (P::Reconciling, PARTLY, Some(P::Reconciling)),
            (P::Stable, DONE, None),
            (P::Acknowledging, QUIET, Some(P::Acknowledging)),
            (P::Acknowledging, ACKED, Some(P::Stable)),
            (P::Acknowledging, NEW, Some(P::Reconciling)),
            (P::Unsubscribed, QUIET, None),
            (P::Lost, QUIET, None),
            (P::Joining, E::MembershipGone, Some(P::Lost)),
            (P::Stable, E::MembershipGone, Some(P::Lost)),
            (P::Reconciling, E::MembershipGone, Some(P::Lost)),
            (P::Acknowledging, E::MembershipGone, Some(P::Lost)),
            (P::Unsubscribed, E::MembershipGone, None),
            (P::Lost, E::MembershipGone, None),
            (P::Lost, E::LossReported, Some(P::Joining)),
            (P::Stable, E::LossReported, None),
            (P::Stable, E::Leave, Some(P::Left)),
            (P::Lost, E::Leave, Some(P::Left)),
            (P::Stable, E::Fatal, Some(P::Failed)),
            (P::Failed, E::Join, None),
            (P::Failed, QUIET, Some(P::Failed)),
            (P::Failed, E::Leave, Some(P::Failed)),
        ];
        for (from, event, to) in table {
            assert_eq!(next(*from, *event).ok(), *to, "{from:?} on {event:?}");
        }
    }

    #[test]
    fn heartbeating_phases() {
        let all = [
            P::Unsubscribed,
            P::Joining,
            P::Stable,
            P::Reconciling,
            P::Acknowledging,
            P::Lost,
            P::Left,
            P::Failed,
        ];
        let beating: Vec<P> = all.into_iter().filter(|p| p.heartbeats()).collect();
        assert_eq!(
            beating,
            [P::Joining, P::Stable, P::Reconciling, P::Acknowledging]
        );
        let in_group: Vec<P> = all.into_iter().filter(|p| p.in_group()).collect();
        assert_eq!(in_group, [P::Stable, P::Reconciling, P::Acknowledging]);
    }
}
