//! Key groups and the byte layout of keys and values in fjall (docs/design/state.md).
//! All pure.

use crate::client::partition_for_key;

/// The format-version byte every stored state value starts with.
pub(crate) const VALUE_FORMAT: u8 = 1;
/// Undo image tag: the key did not exist before the checkpoint.
pub(crate) const UNDO_ABSENT: u8 = 0;
/// Undo image tag: the key held the bytes that follow.
pub(crate) const UNDO_PRESENT: u8 = 1;

/// Meta key prefix of checkpoint records: `c/` then the id as u64 big-endian, so the last
/// key is the latest checkpoint.
pub(crate) const CHECKPOINT_PREFIX: &[u8] = b"c/";
/// Meta key of the layout the store was last opened with.
pub(crate) const LAYOUT_KEY: &[u8] = b"layout";
/// Meta key of the generation, bumped on every open.
pub(crate) const GENERATION_KEY: &[u8] = b"gen";
/// Meta key of the undo floor: undo images of every checkpoint >= it are kept.
pub(crate) const UNDO_FLOOR_KEY: &[u8] = b"undo-floor";

/// The key group of a serialized key: Kafka's default partitioner with G partitions,
/// `(murmur2(key) & 0x7fffffff) % G`, so kg can later double as the partition of a
/// repartition or changelog topic with G partitions.
pub fn key_group(key: &[u8], key_groups: u16) -> u16 {
    // partition_for_key returns a value in 0..G, and G fits in u16.
    partition_for_key(key, usize::from(key_groups.max(1))) as u16
}

/// `kg (u16 BE) | state id (u8) | key length (u32 BE) | key`: the key of a value or list
/// state, and the prefix of a map state's entries (the length keeps one key's entries from
/// mixing with a longer key that starts with the same bytes).
pub(crate) fn state_key(kg: u16, state: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(7 + key.len());
    out.extend_from_slice(&kg.to_be_bytes());
    out.push(state);
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// A map entry: [`state_key`] followed by the map key's bytes (ordered as bytes).
pub(crate) fn map_entry_key(kg: u16, state: u8, key: &[u8], map_key: &[u8]) -> Vec<u8> {
    let mut out = state_key(kg, state, key);
    out.extend_from_slice(map_key);
    out
}

/// The first key after every key that starts with `prefix` (`None`: no such key, the prefix
/// is empty or all 0xFF): the exclusive end of a prefix's range, so that a range read stops
/// at the prefix's end instead of stepping over the deleted keys after it.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// `kg | timer state id` : the prefix of one key group's timers.
pub(crate) fn timer_prefix(kg: u16, state: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(3);
    out.extend_from_slice(&kg.to_be_bytes());
    out.push(state);
    out
}

/// `kg | timer state id | time | key`, the time as u64 BE with the sign bit flipped, so
/// negative times sort before positive ones.
pub(crate) fn timer_key(kg: u16, state: u8, time: i64, key: &[u8]) -> Vec<u8> {
    let mut out = timer_prefix(kg, state);
    out.extend_from_slice(&((time as u64) ^ (1 << 63)).to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The (time, key) of a [`timer_key`]; `None` when too short.
pub(crate) fn decode_timer_key(stored: &[u8]) -> Option<(i64, &[u8])> {
    let time = stored.get(3..11)?;
    let time = u64::from_be_bytes(time.try_into().ok()?) ^ (1 << 63);
    Some((time as i64, &stored[11..]))
}

/// `c/` + id (u64 BE).
pub(crate) fn checkpoint_key(id: u64) -> Vec<u8> {
    let mut out = CHECKPOINT_PREFIX.to_vec();
    out.extend_from_slice(&id.to_be_bytes());
    out
}

/// The id of a `c/` key, `None` when it is not one.
pub(crate) fn parse_checkpoint_key(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(CHECKPOINT_PREFIX)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// `ckpt (u64 BE) | operator index (u32 BE) | state key`.
pub(crate) fn undo_key(checkpoint: u64, operator: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + key.len());
    out.extend_from_slice(&checkpoint.to_be_bytes());
    out.extend_from_slice(&operator.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// Splits an undo key into (checkpoint, operator index, state key).
pub(crate) fn parse_undo_key(key: &[u8]) -> Option<(u64, u32, &[u8])> {
    if key.len() < 12 {
        return None;
    }
    let ckpt = u64::from_be_bytes(key[..8].try_into().ok()?);
    let op = u32::from_be_bytes(key[8..12].try_into().ok()?);
    Some((ckpt, op, &key[12..]))
}

/// The stored form of a user value: the format byte, then the bytes.
pub(crate) fn encode_value(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + value.len());
    out.push(VALUE_FORMAT);
    out.extend_from_slice(value);
    out
}

/// The user bytes of a stored value; `None` for an unknown format byte.
pub(crate) fn decode_value(stored: &[u8]) -> Option<&[u8]> {
    match stored.split_first() {
        Some((&VALUE_FORMAT, rest)) => Some(rest),
        _ => None,
    }
}

/// An undo image: the stored value before the checkpoint, or its absence.
pub(crate) fn encode_undo(before: Option<&[u8]>) -> Vec<u8> {
    match before {
        None => vec![UNDO_ABSENT],
        Some(b) => {
            let mut out = Vec::with_capacity(1 + b.len());
            out.push(UNDO_PRESENT);
            out.extend_from_slice(b);
            out
        }
    }
}

/// Decodes an undo image: `Some(None)` absent, `Some(Some(stored))` present, `None` corrupt.
pub(crate) fn decode_undo(image: &[u8]) -> Option<Option<&[u8]>> {
    match image.split_first() {
        Some((&UNDO_ABSENT, [])) => Some(None),
        Some((&UNDO_PRESENT, rest)) => Some(Some(rest)),
        _ => None,
    }
}

/// A list as one value: count (u32 BE), then each element as length (u32 BE) and bytes.
pub(crate) fn encode_list(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + items.iter().map(|i| 4 + i.len()).sum::<usize>());
    out.extend_from_slice(&(items.len() as u32).to_be_bytes());
    for item in items {
        out.extend_from_slice(&(item.len() as u32).to_be_bytes());
        out.extend_from_slice(item);
    }
    out
}

/// Decodes [`encode_list`]; `None` when truncated or with trailing bytes.
pub(crate) fn decode_list(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let take = |n: usize, bytes: &mut &[u8]| -> Option<Vec<u8>> {
        if bytes.len() < n {
            return None;
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Some(head.to_vec())
    };
    let count = u32::from_be_bytes(take(4, &mut bytes)?.try_into().ok()?) as usize;
    let mut items = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let len = u32::from_be_bytes(take(4, &mut bytes)?.try_into().ok()?) as usize;
        items.push(take(len, &mut bytes)?);
    }
    bytes.is_empty().then_some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from Java's `Utils.toPositive(Utils.murmur2(key)) % G`: a key's group must
    /// never change between processes or releases (no RandomState, no DefaultHasher).
    #[test]
    fn key_group_is_stable() {
        let cases: &[(&str, u16, u16)] = &[
            ("21", 128, 108),
            ("foobar", 128, 62),
            ("abc", 128, 27),
            ("21", 256, 236),
            ("foobar", 256, 190),
            ("abc", 256, 27),
            ("foobar", 1, 0),
        ];
        for (key, g, want) in cases {
            assert_eq!(key_group(key.as_bytes(), *g), *want, "kg({key:?}, {g})");
        }
    }

    #[test]
    fn state_keys_group_by_key_group_and_do_not_mix_keys() {
        let a = state_key(7, 1, b"ab");
        assert_eq!(a, [0, 7, 1, 0, 0, 0, 2, b'a', b'b']);
        // The entries of key "a" are not under the prefix of key "ab" and vice versa.
        let entry_of_a = map_entry_key(7, 1, b"a", b"bz");
        assert!(!entry_of_a.starts_with(&a));
        assert!(map_entry_key(7, 1, b"ab", b"x").starts_with(&a));
        assert!(state_key(7, 1, b"zz") < state_key(8, 0, b"a"));
    }

    #[test]
    fn a_prefix_ends_at_the_first_key_past_all_of_its_keys() {
        #[rustfmt::skip]
        type Case = (&'static str, &'static [u8], Option<&'static [u8]>);
        let cases: Vec<Case> = vec![
            ("the last byte goes up one", &[0, 1, 2], Some(&[0, 1, 3])),
            ("trailing 0xFF bytes carry into the byte before", &[0, 1, 0xFF, 0xFF], Some(&[0, 2])),
            ("all 0xFF: every key after it starts with it", &[0xFF, 0xFF], None),
            ("the empty prefix has no end", &[], None),
        ];
        for (name, prefix, end) in cases {
            assert_eq!(prefix_end(prefix).as_deref(), end, "{name}");
            if let Some(end) = end {
                let longest_inside = [prefix, &[0xFF; 8]].concat();
                assert!(longest_inside.as_slice() < end && prefix < end, "{name}");
            }
        }
    }

    #[test]
    fn timer_keys_sort_by_time_and_round_trip() {
        let times = [i64::MIN, -5, -1, 0, 1, 1_700_000_000_000, i64::MAX];
        let keys: Vec<Vec<u8>> = times.iter().map(|&t| timer_key(3, 4, t, b"k")).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        for (&t, k) in times.iter().zip(&keys) {
            assert!(k.starts_with(&timer_prefix(3, 4)));
            assert_eq!(decode_timer_key(k), Some((t, &b"k"[..])));
        }
        assert_eq!(decode_timer_key(&[0, 3, 4, 1]), None);
    }

    #[test]
    fn checkpoint_keys_sort_by_id_and_round_trip() {
        assert!(checkpoint_key(255) < checkpoint_key(256));
        assert_eq!(parse_checkpoint_key(&checkpoint_key(42)), Some(42));
        assert_eq!(parse_checkpoint_key(b"layout"), None);
        assert_eq!(parse_checkpoint_key(b"c/short"), None);
    }

    #[test]
    fn undo_keys_and_images_round_trip() {
        let k = undo_key(9, 2, b"state");
        assert_eq!(parse_undo_key(&k), Some((9, 2, &b"state"[..])));
        assert_eq!(decode_undo(&encode_undo(None)), Some(None));
        assert_eq!(decode_undo(&encode_undo(Some(b"v"))), Some(Some(&b"v"[..])));
        assert_eq!(decode_undo(&[7]), None);
        assert_eq!(decode_undo(&[UNDO_ABSENT, 1]), None);
    }

    #[test]
    fn values_and_lists_round_trip() {
        assert_eq!(decode_value(&encode_value(b"x")), Some(&b"x"[..]));
        assert_eq!(decode_value(&[9, 1]), None);
        assert_eq!(decode_value(&[]), None);
        let list = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
        assert_eq!(decode_list(&encode_list(&list)), Some(list.clone()));
        let enc = encode_list(&list);
        assert_eq!(decode_list(&enc[..enc.len() - 1]), None);
        assert_eq!(decode_list(&[enc.as_slice(), &[0]].concat()), None);
    }
}
