//! Float sums that do not depend on the order of their terms: the exact sum kept as a few
//! non-overlapping partials (Shewchuk's algorithm, as Python's `math.fsum`), rounded once at
//! the end. A window's `sum` or `avg` over floats then gives the same bits however its
//! records arrived (across partitions, after a restore, in the batch reference), which plain
//! `+=` does not: (0.1 + 0.2) + 0.3 ≠ 0.1 + (0.2 + 0.3). A ranking by such a sum (`top`) and
//! the verifier's exact comparison rely on it.

use serde::{Deserialize, Serialize};

/// The exact sum of the floats added so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ExactSum {
    /// Non-overlapping, increasing in magnitude; their exact sum is the sum.
    partials: Vec<f64>,
}

impl ExactSum {
    /// Adds `x` (a non-finite term or overflow makes the total non-finite).
    pub(crate) fn add(&mut self, x: f64) {
        if !x.is_finite() || self.partials.iter().any(|p| !p.is_finite()) {
            self.partials = vec![self.partials.iter().sum::<f64>() + x];
            return;
        }
        let mut x = x;
        let mut kept = 0;
        for j in 0..self.partials.len() {
            let mut y = self.partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                self.partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        self.partials.truncate(kept);
        self.partials.push(x);
    }

    /// Adds every term of `other`.
    pub(crate) fn merge(&mut self, other: &ExactSum) {
        for p in &other.partials {
            self.add(*p);
        }
    }

    /// The exact sum, correctly rounded to an f64 (non-finite after an overflow).
    pub(crate) fn total(&self) -> f64 {
        let p = &self.partials;
        let Some(&top) = p.last() else {
            return 0.0;
        };
        if !top.is_finite() {
            return top;
        }
        let (mut hi, mut lo) = (top, 0.0);
        let mut i = p.len() - 1;
        while i > 0 {
            i -= 1;
            let x = hi;
            let y = p[i];
            hi = x + y;
            lo = y - (hi - x);
            if lo != 0.0 {
                break;
            }
        }
        // Half-way between two floats: the partials below decide the rounding direction.
        if i > 0 && ((lo < 0.0 && p[i - 1] < 0.0) || (lo > 0.0 && p[i - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            if y == x - hi {
                hi = x;
            }
        }
        hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(xs: &[f64]) -> f64 {
        let mut s = ExactSum::default();
        xs.iter().for_each(|x| s.add(*x));
        s.total()
    }

    #[test]
    fn exact_sums_table() {
        let cases: Vec<(Vec<f64>, f64)> = vec![
            (vec![], 0.0),
            (vec![0.1; 10], 1.0),
            (vec![0.1, 0.2, 0.3], 0.6),
            (vec![1e100, 1.0, -1e100, 1e-100], 1.0),
            (vec![1e16, 1.0, 1e-16], 10_000_000_000_000_002.0),
            (vec![2.5, -2.5], 0.0),
            (vec![f64::MAX, f64::MAX], f64::INFINITY),
        ];
        for (xs, want) in cases {
            assert_eq!(sum(&xs), want, "{xs:?}");
        }
    }

    #[test]
    fn the_total_does_not_depend_on_the_order_or_the_split() {
        // Tips-like values (cents) and values of very different magnitudes, in many orders:
        // plain += gives several different results; the exact sum one.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let xs: Vec<f64> = (0..200)
            .map(|i| match i % 3 {
                0 => (next() % 2_000) as f64 / 100.0,
                1 => (next() % 1_000_000) as f64 * 1e-7,
                _ => (next() % 1_000) as f64 * 1e9,
            })
            .collect();
        let want = sum(&xs);
        let mut plain = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let mut ys = xs.clone();
            for i in (1..ys.len()).rev() {
                let j = usize::try_from(next() % (i as u64 + 1)).unwrap();
                ys.swap(i, j);
            }
            plain.insert(ys.iter().sum::<f64>().to_bits());
            assert_eq!(sum(&ys).to_bits(), want.to_bits());
            let (a, b) = ys.split_at(ys.len() / 3);
            let (mut x, mut y) = (ExactSum::default(), ExactSum::default());
            a.iter().for_each(|v| x.add(*v));
            b.iter().for_each(|v| y.add(*v));
            x.merge(&y);
            assert_eq!(x.total().to_bits(), want.to_bits());
        }
        assert!(plain.len() > 1, "plain sums should differ by order here");
    }
}
