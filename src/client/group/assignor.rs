//! Partition assignors for the classic group protocol: `range` (the Java client's first
//! default) and `cooperative-sticky` (incremental: a partition moving between members is first
//! revoked by its owner, and assigned in the next rebalance).
//!
//! Pure functions of the members' subscriptions and the partition counts, so they are tested
//! without a broker. The group leader runs them; the result must be the same as the Java
//! client's for `range`, since Java and onceflow members share groups.

use crate::client::metadata::TopicPartition;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One member's subscription, as it sent it in JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// Member id.
    pub member_id: String,
    /// group.instance.id for static members.
    pub instance_id: Option<String>,
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Partitions it owns now (cooperative protocol).
    pub owned: Vec<TopicPartition>,
    /// The generation its `owned` partitions come from (-1 when unknown).
    pub generation: i32,
}

/// Assignment: member id → partitions.
pub type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// The range assignor: per topic, partitions split into contiguous ranges over the subscribed
/// members sorted by id (by group.instance.id for static members, as Java does), the first
/// `partitions % members` members getting one more.
///
/// # Examples
/// ```
/// use onceflow::client::group::assignor::{range, MemberSubscription};
/// use onceflow::client::TopicPartition;
/// use std::collections::BTreeMap;
/// let member = |id: &str| MemberSubscription {
///     member_id: id.into(), instance_id: None, topics: vec!["rides".into()], owned: vec![], generation: -1,
/// };
/// let a = range(&[member("a"), member("b")], &BTreeMap::from([("rides".to_string(), 3)]));
/// // As the Java client's range assignor: the first member gets the extra partition.
/// assert_eq!(a["a"], [TopicPartition::new("rides", 0), TopicPartition::new("rides", 1)]);
/// assert_eq!(a["b"], [TopicPartition::new("rides", 2)]);
/// ```
pub fn range(members: &[MemberSubscription], partitions: &BTreeMap<String, usize>) -> Assignment {
    let mut out: Assignment = members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect();
    for (topic, count) in partitions {
        let mut subs: Vec<&MemberSubscription> = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .collect();
        if subs.is_empty() {
            continue;
        }
        subs.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
        let n = subs.len();
        let per = count / n;
        let extra = count % n;
        for (i, m) in subs.iter().enumerate() {
            let start = per * i + i.min(extra);
            let len = per + usize::from(i < extra);
            let list = out.entry(m.member_id.clone()).or_default();
            list.extend((start..start + len).map(|p| TopicPartition::new(topic.clone(), p as i32)));
        }
    }
    out
}

fn sort_key(m: &MemberSubscription) -> (&str, &str) {
    (m.instance_id.as_deref().unwrap_or(""), m.member_id.as_str())
}

/// The cooperative-sticky assignor: keeps every member's valid owned partitions as far as
/// balance allows, spreads the rest over the least loaded members, and withholds a partition
/// that changes owner until its previous owner has revoked it (the next rebalance hands it out).
///
/// # Examples
/// ```
/// use onceflow::client::group::assignor::{cooperative_sticky, MemberSubscription};
/// use onceflow::client::TopicPartition;
/// use std::collections::BTreeMap;
/// let tp = |p| TopicPartition::new("rides", p);
/// let member = |id: &str, owned: Vec<TopicPartition>| MemberSubscription {
///     member_id: id.into(), instance_id: None, topics: vec!["rides".into()], owned, generation: 1,
/// };
/// // "a" owned all four partitions; "b" just joined.
/// let members = [member("a", vec![tp(0), tp(1), tp(2), tp(3)]), member("b", vec![])];
/// let a = cooperative_sticky(&members, &BTreeMap::from([("rides".to_string(), 4)]));
/// // "a" keeps two; the two it gives up reach "b" only in the next rebalance.
/// assert_eq!(a["a"].len(), 2);
/// assert!(a["b"].is_empty());
/// ```
pub fn cooperative_sticky(
    members: &[MemberSubscription],
    partitions: &BTreeMap<String, usize>,
) -> Assignment {
    let all: BTreeSet<TopicPartition> = partitions
        .iter()
        .flat_map(|(t, n)| (0..*n as i32).map(move |p| TopicPartition::new(t.clone(), p)))
        .collect();
    let subscribed = |m: &MemberSubscription, tp: &TopicPartition| m.topics.contains(&tp.topic);
    // Total partitions each member could take; quota = ceil(total eligible / members).
    let eligible: usize = all
        .iter()
        .filter(|tp| members.iter().any(|m| subscribed(m, tp)))
        .count();
    let quota = if members.is_empty() {
        0
    } else {
        eligible.div_ceil(members.len())
    };
    // Previous owners: the claim from the highest generation wins when two members claim one.
    let mut owner: HashMap<TopicPartition, (i32, &str)> = HashMap::new();
    for m in members {
        for tp in &m.owned {
            if !all.contains(tp) || !subscribed(m, tp) {
                continue;
            }
            let e = owner
                .entry(tp.clone())
                .or_insert((m.generation, m.member_id.as_str()));
            if m.generation > e.0 {
                *e = (m.generation, m.member_id.as_str());
            }
        }
    }
    let mut out: Assignment = members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect();
    let mut taken: BTreeSet<TopicPartition> = BTreeSet::new();
    // 1. Stickiness: each member keeps what it owns, up to the quota.
    let mut sorted: Vec<&MemberSubscription> = members.iter().collect();
    sorted.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    for m in &sorted {
        let mut kept: Vec<TopicPartition> = m
            .owned
            .iter()
            .filter(|tp| owner.get(*tp).is_some_and(|(_, id)| *id == m.member_id))
            .cloned()
            .collect();
        kept.sort();
        kept.truncate(quota);
        for tp in kept {
            taken.insert(tp.clone());
            out.entry(m.member_id.clone()).or_default().push(tp);
        }
    }
    // 2. The rest to the least loaded subscribed member.
    for tp in &all {
        if taken.contains(tp) {
            continue;
        }
        let target = sorted
            .iter()
            .filter(|m| subscribed(m, tp))
            .min_by_key(|m| (out.get(&m.member_id).map_or(0, Vec::len), sort_key(m)));
        if let Some(m) = target {
            out.entry(m.member_id.clone()).or_default().push(tp.clone());
            taken.insert(tp.clone());
        }
    }
    // 3. Cooperative: a partition still owned by someone else is withheld this round.
    for (member, list) in out.iter_mut() {
        list.retain(|tp| match owner.get(tp) {
            Some((_, prev)) => prev == member,
            None => true,
        });
        list.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str], owned: &[(&str, i32)]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            instance_id: None,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            owned: owned
                .iter()
                .map(|(t, p)| TopicPartition::new(*t, *p))
                .collect(),
            generation: 1,
        }
    }

    fn parts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn ids(a: &Assignment, m: &str) -> Vec<(String, i32)> {
        a[m].iter()
            .map(|tp| (tp.topic.clone(), tp.partition))
            .collect()
    }

    /// The Java RangeAssignor's documented example: 2 consumers, 2 topics of 3 partitions.
    #[test]
    fn range_matches_the_java_assignor() {
        let ms = [
            member("c0", &["t0", "t1"], &[]),
            member("c1", &["t0", "t1"], &[]),
        ];
        let a = range(&ms, &parts(&[("t0", 3), ("t1", 3)]));
        let s = |t: &str, p| (t.to_string(), p);
        assert_eq!(
            ids(&a, "c0"),
            vec![s("t0", 0), s("t0", 1), s("t1", 0), s("t1", 1)]
        );
        assert_eq!(ids(&a, "c1"), vec![s("t0", 2), s("t1", 2)]);
    }

    #[test]
    fn range_skips_members_not_subscribed() {
        let ms = [member("a", &["t"], &[]), member("b", &["other"], &[])];
        let a = range(&ms, &parts(&[("t", 4), ("other", 1)]));
        assert_eq!(a["a"].len(), 4);
        assert_eq!(a["b"].len(), 1);
    }

    #[test]
    fn sticky_keeps_owned_partitions_and_balances() {
        let ms = [
            member("a", &["t"], &[("t", 0), ("t", 1), ("t", 2), ("t", 3)]),
            member("b", &["t"], &[]),
        ];
        let a = cooperative_sticky(&ms, &parts(&[("t", 4)]));
        // a keeps two (its quota); the two it must give up are withheld this round.
        assert_eq!(a["a"].len(), 2);
        assert!(
            a["b"].is_empty(),
            "b waits until a has revoked: {:?}",
            a["b"]
        );
        // Next round, a owns only what it kept: b gets the rest.
        let ms = [
            member("a", &["t"], &[("t", 0), ("t", 1)]),
            member("b", &["t"], &[]),
        ];
        let a2 = cooperative_sticky(&ms, &parts(&[("t", 4)]));
        assert_eq!(ids(&a2, "a"), ids(&a, "a"));
        assert_eq!(a2["b"].len(), 2);
    }

    #[test]
    fn every_partition_is_assigned_once() {
        let ms = [
            member("a", &["t", "u"], &[("t", 5)]),
            member("b", &["t"], &[("t", 5), ("t", 1)]),
            member("c", &["u"], &[]),
        ];
        let ps = parts(&[("t", 7), ("u", 3)]);
        for assignment in [range(&ms, &ps), cooperative_sticky(&ms, &ps)] {
            let mut seen = BTreeSet::new();
            for list in assignment.values() {
                for tp in list {
                    assert!(seen.insert(tp.clone()), "{tp} assigned twice");
                }
            }
        }
    }
}
