//! The Java client's default partitioner, so a key lands on the same partition whichever
//! client wrote it.
//!
//! Keyed records: `(murmur2(key) & 0x7fffffff) % partitions`, bit for bit as
//! `org.apache.kafka.common.utils.Utils.murmur2`. Keyless records stick to one partition until
//! its batch closes, then move on (KIP-480), which gives full batches instead of one tiny batch
//! per partition.

/// Kafka's murmur2 (seed 0x9747b28c), as the Java client computes it.
///
/// # Examples
/// ```
/// use onceflow::client::producer::partitioner::murmur2;
/// // The value of Java's `Utils.murmur2("abc".getBytes())`.
/// assert_eq!(murmur2(b"abc"), 479470107);
/// ```
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client picks for `key` among `partitions`.
///
/// # Examples
/// ```
/// use onceflow::client::partition_for_key;
/// // A Java producer writing key "abc" to a topic of 6 partitions picks partition 3, too.
/// assert_eq!(partition_for_key(b"abc", 6), 3);
/// ```
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    (positive % partitions.max(1) as u32) as i32
}

/// A random partition other than `current` (when there is more than one), for sticky
/// keyless partitioning.
///
/// # Examples
/// ```
/// use onceflow::client::producer::partitioner::next_sticky;
/// let p = next_sticky(Some(2), 4);
/// assert!(p != 2 && (0..4).contains(&p));
/// assert_eq!(next_sticky(Some(0), 1), 0); // one partition: nowhere else to go
/// ```
pub fn next_sticky(current: Option<i32>, partitions: usize) -> i32 {
    use rand::Rng;
    let n = partitions.max(1) as i32;
    if n == 1 {
        return 0;
    }
    let mut rng = rand::rng();
    loop {
        let p = rng.random_range(0..n);
        if Some(p) != current {
            return p;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed by the Java client's Utils.murmur2.
    #[test]
    fn murmur2_matches_java() {
        let cases: &[(&str, i32)] = &[
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            ("abc", 479470107),
        ];
        for (s, want) in cases {
            assert_eq!(murmur2(s.as_bytes()), *want, "murmur2({s:?})");
        }
    }

    #[test]
    fn sticky_moves_away_from_current() {
        for _ in 0..100 {
            assert_ne!(next_sticky(Some(2), 4), 2);
        }
        assert_eq!(next_sticky(Some(0), 1), 0);
    }
}
