//! A KIP-848 member's decisions as pure functions: what a heartbeat error means, which topic a
//! target's topic id names, and what reconciling one assignment into another revokes and assigns.

use crate::client::metadata::TopicPartition;
use crate::protocol::ErrorCode;
use std::collections::BTreeSet;

/// A topic id (KIP-516), as Metadata and ConsumerGroupHeartbeat carry it.
pub(crate) type TopicId = [u8; 16];

/// What the coordinator assigned: partitions by topic id (sorted, so two answers compare).
pub(crate) type Target = Vec<(TopicId, Vec<i32>)>;

/// What the member does about a ConsumerGroupHeartbeat error code (KIP-848).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaction {
    /// No error.
    Proceed,
    /// FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: the coordinator dropped this membership (its
    /// session expired, or it fell behind): the partitions are lost; join again with epoch 0.
    Rejoin,
    /// The coordinator moved or is not up: look it up again, send again soon (every field).
    FindCoordinatorAndRetry,
    /// Transient: send again soon (every field: the last request may not have arrived).
    RetryAfterBackoff,
    /// UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID: another member holds this member's
    /// group.instance.id. Fatal for this member.
    Fenced,
    /// UNSUPPORTED_VERSION: the broker has no KIP-848 groups (before Kafka 4.0, or the
    /// `consumer` protocol is off): fatal, and the error says to use group.protocol=classic.
    Unsupported,
    /// Retrying cannot help (not authorized, assignor unknown, group full, a classic group
    /// that cannot be converted, invalid request).
    Fatal,
}

/// The one place that decides what a ConsumerGroupHeartbeat error code means, as the Java
/// client's consumer-protocol heartbeat manager handles it.
pub(crate) fn reaction(code: ErrorCode) -> Reaction {
    match code {
        ErrorCode(0) => Reaction::Proceed,
        ErrorCode::FENCED_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID => Reaction::Rejoin,
        // The group was deleted while the member was away: its only member dropped, an empty
        // group without committed offsets is removed (a held heartbeat came back with it in CI,
        // and poll failed). A heartbeat with epoch 0 creates it again.
        ErrorCode::GROUP_ID_NOT_FOUND => Reaction::Rejoin,
        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => {
            Reaction::FindCoordinatorAndRetry
        }
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        | ErrorCode::REQUEST_TIMED_OUT
        | ErrorCode::NETWORK_EXCEPTION => Reaction::RetryAfterBackoff,
        ErrorCode::UNRELEASED_INSTANCE_ID | ErrorCode::FENCED_INSTANCE_ID => Reaction::Fenced,
        ErrorCode::UNSUPPORTED_VERSION => Reaction::Unsupported,
        _ => Reaction::Fatal,
    }
}

/// A target's partitions by name, with `name_of` (the metadata's id → name). Ids the metadata
/// does not know yet come back in the second list: the caller refreshes metadata and tries
/// again; meanwhile the member neither owns nor acknowledges them.
pub(crate) fn resolve(
    target: &Target,
    name_of: impl Fn(&TopicId) -> Option<String>,
) -> (BTreeSet<TopicPartition>, Vec<TopicId>) {
    let mut tps = BTreeSet::new();
    let mut unknown = Vec::new();
    for (id, partitions) in target {
        match name_of(id) {
            Some(name) => {
                tps.extend(
                    partitions
                        .iter()
                        .map(|p| TopicPartition::new(name.clone(), *p)),
                );
            }
            None => unknown.push(*id),
        }
    }
    (tps, unknown)
}

/// What reconciling `owned` into `target` does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Owned, not in the target: commit, `on_revoked`, stop fetching — before the coordinator
    /// hears of it, so their next owner starts at what was committed.
    pub revoke: Vec<TopicPartition>,
    /// In the target, not owned: fetch their committed offsets, start, `on_assigned`.
    pub assign: Vec<TopicPartition>,
}

/// Revoke before assign (KIP-848: the coordinator hands a member only partitions no other
/// member owns, so the two never wait for each other within one member).
pub(crate) fn plan(owned: &BTreeSet<TopicPartition>, target: &BTreeSet<TopicPartition>) -> Plan {
    Plan {
        revoke: owned.difference(target).cloned().collect(),
        assign: target.difference(owned).cloned().collect(),
    }
}

/// A heartbeat answer's assignment in comparable form: topics sorted by id, partitions sorted.
pub(crate) fn normalize(mut target: Target) -> Target {
    for (_, ps) in &mut target {
        ps.sort_unstable();
        ps.dedup();
    }
    target.retain(|(_, ps)| !ps.is_empty());
    target.sort();
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reactions() {
        let table: &[(ErrorCode, Reaction)] = &[
            (ErrorCode(0), Reaction::Proceed),
            (ErrorCode::FENCED_MEMBER_EPOCH, Reaction::Rejoin),
            (ErrorCode::UNKNOWN_MEMBER_ID, Reaction::Rejoin),
            (ErrorCode::GROUP_ID_NOT_FOUND, Reaction::Rejoin),
            (
                ErrorCode::NOT_COORDINATOR,
                Reaction::FindCoordinatorAndRetry,
            ),
            (
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                Reaction::FindCoordinatorAndRetry,
            ),
            (
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                Reaction::RetryAfterBackoff,
            ),
            (ErrorCode::REQUEST_TIMED_OUT, Reaction::RetryAfterBackoff),
            (ErrorCode::UNRELEASED_INSTANCE_ID, Reaction::Fenced),
            (ErrorCode::FENCED_INSTANCE_ID, Reaction::Fenced),
            (ErrorCode::UNSUPPORTED_VERSION, Reaction::Unsupported),
            (ErrorCode::GROUP_AUTHORIZATION_FAILED, Reaction::Fatal),
            (ErrorCode::UNSUPPORTED_ASSIGNOR, Reaction::Fatal),
            (ErrorCode::GROUP_MAX_SIZE_REACHED, Reaction::Fatal),
            (ErrorCode::INVALID_REQUEST, Reaction::Fatal),
        ];
        for (code, r) in table {
            assert_eq!(reaction(*code), *r, "{code}");
        }
    }

    fn tps(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
        list.iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect()
    }

    type Tps = &'static [(&'static str, i32)];

    #[test]
    fn plans() {
        let table: &[(Tps, Tps, Tps, Tps)] = &[
            // owned, target → revoke, assign
            (&[], &[("a", 0), ("a", 1)], &[], &[("a", 0), ("a", 1)]),
            (&[("a", 0), ("a", 1)], &[("a", 0), ("a", 1)], &[], &[]),
            (&[("a", 0), ("a", 1)], &[("a", 1)], &[("a", 0)], &[]),
            (
                &[("a", 0)],
                &[("a", 1), ("b", 0)],
                &[("a", 0)],
                &[("a", 1), ("b", 0)],
            ),
            (&[("a", 0), ("b", 0)], &[], &[("a", 0), ("b", 0)], &[]),
        ];
        for (owned, target, revoke, assign) in table {
            let p = plan(&tps(owned), &tps(target));
            assert_eq!(
                p,
                Plan {
                    revoke: tps(revoke).into_iter().collect(),
                    assign: tps(assign).into_iter().collect(),
                },
                "{owned:?} → {target:?}"
            );
        }
    }

    #[test]
    fn a_target_resolves_what_the_metadata_knows_and_names_the_rest() {
        let (a, b, c) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let name_of = |id: &TopicId| match id[0] {
            1 => Some("rides".to_owned()),
            2 => Some("fares".to_owned()),
            _ => None,
        };
        let (got, unknown) = resolve(&vec![(a, vec![0, 2]), (b, vec![1]), (c, vec![0])], name_of);
        assert_eq!(got, tps(&[("rides", 0), ("rides", 2), ("fares", 1)]));
        assert_eq!(unknown, vec![c]);
    }

    #[test]
    fn answers_compare_whatever_their_order() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_eq!(
            normalize(vec![
                (b, vec![3, 1]),
                (a, vec![2, 0, 2]),
                ([9u8; 16], vec![])
            ]),
            vec![(a, vec![0, 2]), (b, vec![1, 3])]
        );
    }
}
