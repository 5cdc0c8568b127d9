//! Who does what at parallelism P, as pure functions: which source subtask reads which input
//! partition, which keyed subtask owns which key group (kg·P/G, as Flink). Both depend on
//! nothing but their arguments, so every process (and every restart) decides alike.

use std::ops::Range;

use crate::client::TopicPartition;

/// The keyed subtask (0..P) that owns key group `kg` of `key_groups` (G): ⌊kg·P/G⌋. Contiguous
/// ranges, so a rescale moves whole ranges of key groups (and their state) between subtasks.
pub(crate) fn subtask_of(kg: u16, parallelism: usize, key_groups: u16) -> usize {
    let g = usize::from(key_groups.max(1));
    (usize::from(kg) * parallelism.max(1) / g).min(parallelism.max(1) - 1)
}

/// The keyed subtask (0..P) that owns the key with canonical bytes `key`: [`subtask_of`] of its
/// key group. What a source subtask and a keyed stage sending to the next one both decide.
pub(crate) fn subtask_of_key(key: &[u8], parallelism: usize, key_groups: u16) -> usize {
    subtask_of(
        crate::engine::state::key_group(key, key_groups),
        parallelism,
        key_groups,
    )
}

/// The key groups keyed subtask `subtask` owns: exactly those `kg` with
/// [`subtask_of`]`(kg) == subtask`, i.e. ⌈i·G/P⌉..⌈(i+1)·G/P⌉ (empty when P > G leaves the
/// subtask none).
pub(crate) fn key_group_range(subtask: usize, parallelism: usize, key_groups: u16) -> Range<u16> {
    let p = parallelism.max(1);
    let g = usize::from(key_groups);
    let ceil = |i: usize| (i * g).div_ceil(p);
    let clamp = |x: usize| u16::try_from(x.min(g)).unwrap_or(key_groups);
    clamp(ceil(subtask))..clamp(ceil(subtask + 1))
}

/// The source subtask that reads `tp`: partition mod P. It depends on the partition alone, so
/// a partition discovered later goes where the same rule puts it without moving any other
/// (a rule over the sorted list would shift partitions of later topics), and a restart at
/// the same P reads each partition in the same subtask.
pub(crate) fn owner_of(tp: &TopicPartition, parallelism: usize) -> usize {
    let p = i64::try_from(parallelism.max(1)).unwrap_or(1);
    usize::try_from(i64::from(tp.partition).rem_euclid(p)).unwrap_or(0)
}

/// The input partitions of each of `parallelism` source subtasks ([`owner_of`]), sorted;
/// every partition is read by exactly one subtask.
pub(crate) fn assign_partitions(
    partitions: &[TopicPartition],
    parallelism: usize,
) -> Vec<Vec<TopicPartition>> {
    let p = parallelism.max(1);
    let mut sorted = partitions.to_vec();
    sorted.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    sorted.dedup();
    let mut out = vec![Vec::new(); p];
    for tp in sorted {
        out[owner_of(&tp, p)].push(tp);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a list of one range, on purpose
    fn key_groups_go_to_contiguous_ranges_kg_times_p_over_g() {
        // (G, P, ranges of subtask 0..P)
        let cases: &[(u16, usize, &[Range<u16>])] = &[
            (128, 1, &[0..128]),
            (128, 2, &[0..64, 64..128]),
            (128, 3, &[0..43, 43..86, 86..128]),
            (10, 4, &[0..3, 3..5, 5..8, 8..10]),
            (2, 3, &[0..1, 1..2, 2..2]), // P > G: a subtask without key groups
            (1, 1, &[0..1]),
        ];
        for (g, p, ranges) in cases {
            let got: Vec<Range<u16>> = (0..*p).map(|i| key_group_range(i, *p, *g)).collect();
            assert_eq!(&got, ranges, "G={g} P={p}");
        }
    }

    #[test]
    fn every_key_group_lies_in_the_range_of_the_subtask_that_owns_it() {
        for g in [1u16, 2, 7, 128, 200] {
            for p in 1..=9 {
                for kg in 0..g {
                    let owner = subtask_of(kg, p, g);
                    assert!(owner < p, "G={g} P={p} kg={kg} → {owner}");
                    for i in 0..p {
                        assert_eq!(
                            key_group_range(i, p, g).contains(&kg),
                            i == owner,
                            "G={g} P={p} kg={kg} subtask {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_partition_goes_to_subtask_partition_mod_p() {
        let tp = |t: &str, p: i32| TopicPartition::new(t, p);
        let input = [tp("b", 0), tp("a", 2), tp("a", 0), tp("a", 1)];
        let cases: Vec<(usize, Vec<Vec<TopicPartition>>)> = vec![
            (
                1,
                vec![vec![tp("a", 0), tp("a", 1), tp("a", 2), tp("b", 0)]],
            ),
            (
                2,
                vec![vec![tp("a", 0), tp("a", 2), tp("b", 0)], vec![tp("a", 1)]],
            ),
            (
                3,
                vec![
                    vec![tp("a", 0), tp("b", 0)],
                    vec![tp("a", 1)],
                    vec![tp("a", 2)],
                ],
            ),
            (
                5,
                vec![
                    vec![tp("a", 0), tp("b", 0)],
                    vec![tp("a", 1)],
                    vec![tp("a", 2)],
                    vec![],
                    vec![],
                ],
            ),
        ];
        for (p, want) in &cases {
            assert_eq!(&assign_partitions(&input, *p), want, "P={p}");
        }
        // A partition added later goes where the rule puts it; the others stay.
        assert_eq!(owner_of(&tp("a", 3), 2), 1);
        assert_eq!(owner_of(&tp("a", 3), 3), 0);
    }
}
