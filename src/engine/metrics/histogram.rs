//! A fixed-bucket histogram of durations on atomics.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the duration buckets: a checkpoint of this engine takes from
/// milliseconds (a small fsync) to its timeout (30 s by default).
pub const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Per bucket (and one past the last for +Inf) the observations that fell in it, not
/// cumulative: one atomic add per observation; the snapshot sums them up.
#[derive(Debug, Default)]
pub(super) struct Histogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    pub(super) fn observe_micros(&self, us: u64) {
        let seconds = us as f64 / 1e6;
        let i = BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(us, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut cumulative = Vec::with_capacity(BUCKETS.len());
        for (le, count) in BUCKETS.iter().zip(&self.counts) {
            total += count.load(Ordering::Relaxed);
            cumulative.push((*le, total));
        }
        total += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets: cumulative,
            count: total,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// A histogram as Prometheus shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound in seconds, observations ≤ it), cumulative, without +Inf.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation (the +Inf bucket).
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_into_the_first_bucket_that_holds_them_and_add_up() {
        let h = Histogram::default();
        // (µs observed, bucket index it must land in)
        let cases = [
            (0, 0),
            (5_000, 0),
            (5_001, 1),
            (1_000_000, 7),
            (31_000_000, 12),
        ];
        for (us, _) in cases {
            h.observe_micros(us);
        }
        for (us, i) in cases {
            assert!(
                h.counts[i].load(Ordering::Relaxed) >= 1,
                "{us} µs not in bucket {i}"
            );
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.buckets[0], (0.005, 2));
        assert_eq!(s.buckets[7], (1.0, 4));
        assert_eq!(s.buckets[11], (30.0, 4));
        assert!(
            (s.sum_seconds - 32.010001).abs() < 1e-9,
            "{}",
            s.sum_seconds
        );
    }
}
