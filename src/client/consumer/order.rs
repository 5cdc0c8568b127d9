//! The order in which partitions are listed in Fetch requests.
//!
//! A broker fills a Fetch response in the order of the request: each partition gets up to
//! max.partition.fetch.bytes until fetch.max.bytes is used up, and only the first partition
//! with data is given a batch larger than what is left. Listing partitions in a fixed order
//! therefore starves a partition behind one that always has data, for good when its next batch
//! is large. The Java client moves a partition to the end of its order once its data has been
//! handed out; our fetcher fetches ahead of the application, so it moves a partition to the end
//! as soon as a response brings records for it (the data is then on its way to the
//! application), and the next request leads with the partitions that got nothing.

use std::collections::HashSet;
use std::hash::Hash;

/// The order for the next requests: `current` restricted to `assigned`, partitions newly
/// assigned appended in the order given, then every partition in `served` (those a response
/// just brought records for) moved to the end, in the order served.
pub(crate) fn next_order<'a, T>(
    current: &[T],
    assigned: impl IntoIterator<Item = &'a T>,
    served: &[T],
) -> Vec<T>
where
    T: Clone + Eq + Hash + 'a,
{
    let assigned: Vec<&T> = assigned.into_iter().collect();
    let in_assignment: HashSet<&T> = assigned.iter().copied().collect();
    let moved: HashSet<&T> = served
        .iter()
        .filter(|t| in_assignment.contains(t))
        .collect();
    let mut out: Vec<T> = Vec::with_capacity(assigned.len());
    let mut listed: HashSet<&T> = HashSet::with_capacity(assigned.len());
    let keep = current
        .iter()
        .chain(assigned.iter().copied())
        .filter(|t| in_assignment.contains(t) && !moved.contains(t));
    for t in keep {
        if listed.insert(t) {
            out.push(t.clone());
        }
    }
    for t in served {
        if moved.contains(t) && listed.insert(t) {
            out.push(t.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::next_order;

    #[test]
    fn next_order_table() {
        // (current order, assignment, served, expected)
        type Row = (
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
        );
        let rows: &[Row] = &[
            // First round: the assignment's order.
            (&[], &["a", "b", "c"], &[], &["a", "b", "c"]),
            // Nothing served: unchanged.
            (&["a", "b", "c"], &["a", "b", "c"], &[], &["a", "b", "c"]),
            // The first partition got data: it goes last, the others move up.
            (&["a", "b", "c"], &["a", "b", "c"], &["a"], &["b", "c", "a"]),
            // Two served: both go last, in the order served.
            (
                &["a", "b", "c"],
                &["a", "b", "c"],
                &["c", "a"],
                &["b", "c", "a"],
            ),
            // Served twice in one round counts once.
            (
                &["a", "b", "c"],
                &["a", "b", "c"],
                &["a", "a"],
                &["b", "c", "a"],
            ),
            // Everyone served: the order served.
            (&["a", "b"], &["a", "b"], &["b", "a"], &["b", "a"]),
            // A revoked partition leaves the order, even if it was just served.
            (&["a", "b", "c"], &["a", "c"], &["b"], &["a", "c"]),
            // A new partition joins at the end, before partitions moved there this round.
            (&["a", "b"], &["a", "b", "c"], &["a"], &["b", "c", "a"]),
            // Assignment order matters only for newcomers.
            (
                &["b", "a"],
                &["a", "b", "d", "c"],
                &[],
                &["b", "a", "d", "c"],
            ),
            // A duplicate in the assignment is listed once.
            (&[], &["a", "a", "b"], &[], &["a", "b"]),
        ];
        for (current, assigned, served, want) in rows {
            let current: Vec<&str> = current.to_vec();
            let served: Vec<&str> = served.to_vec();
            let got = next_order(&current, assigned.iter(), &served);
            assert_eq!(
                got, *want,
                "current {current:?}, assigned {assigned:?}, served {served:?}"
            );
        }
    }

    /// Two partitions where only the first ever gets data before rotation: with rotation the
    /// second leads every other request.
    #[test]
    fn a_partition_always_served_alternates_with_one_never_served() {
        let assigned = ["p0", "p1"];
        let mut order: Vec<&str> = Vec::new();
        let mut firsts = Vec::new();
        for _ in 0..4 {
            order = next_order(&order, assigned.iter(), &[]);
            firsts.push(order[0]);
            // The broker serves the first partition (the other's batch does not fit).
            let served = [order[0]];
            order = next_order(&order, assigned.iter(), &served);
        }
        assert_eq!(firsts, ["p0", "p1", "p0", "p1"]);
    }
}
