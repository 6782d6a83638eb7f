//! Numeric helpers shared by the evaluation, the Newton directions and the
//! solver: short Taylor polynomials, sums that keep their precision and
//! vectorise, sums of parallel work that do not depend on the pool, and
//! the curvature floor.

use rayon::prelude::*;

use crate::thresholds::PARALLEL_FROM;

/// Below x = SQUARING_FROM, e^(-x) is a Taylor polynomial; from there on a
/// square of the value at x / 2. Squaring doubles the exponent's relative
/// error, so starting at x >= 1/64 the error at x is at most 64 x · 1e-16
/// (6e-15 at x = 1), and below it the polynomial avoids squaring the
/// rounding of 1 - x.
pub(crate) const SQUARING_FROM: f64 = 1.0 / 64.0;

// The helpers here are `#[inline]`: they run per
// token or per node in the other modules' hot loops, which sit in other
// codegen units.

/// e^t - 1 for |t| <= 1/32 by its Taylor polynomial to t^8 (remainder
/// below |t|^8 / 9! < 3e-18 of it). `exp_m1` is a libm call on baseline
/// x86-64, one per token on the hot path of the `convex_grid` benchmark.
#[inline]
pub(crate) fn small_expm1(t: f64) -> f64 {
    const INVERSE_FACTORIALS: [f64; 8] = [
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
    ];
    t * INVERSE_FACTORIALS
        .iter()
        .rev()
        .fold(0.0, |acc, f| acc * t + f)
}

/// Σ x, in the running sums of [`sum_where`].
#[inline]
pub(crate) fn lane_sum(x: &[f64]) -> f64 {
    sum_where(x, x, |_| true)
}

/// `Σ x_i` over the i with `keep(mask_i)`, branch-free (whether an entry
/// is kept follows no pattern along a vocabulary), in four running sums
/// (one would be a chain of dependent additions) per chunk of 256 entries,
/// the chunks' sums added at the end: summed one by one into a total near
/// 1, the entries of 1e-17 and below that real rows hold by the ten
/// thousand would be lost.
#[inline]
pub(crate) fn sum_where(x: &[f64], mask: &[f64], keep: impl Fn(f64) -> bool) -> f64 {
    sum_of_pairs(x, mask, |x, m| if keep(m) { x } else { 0.0 })
}

/// `Σ term(x_i, y_i)`, in the running sums of [`sum_where`].
#[inline]
pub(crate) fn sum_of_pairs(x: &[f64], y: &[f64], term: impl Fn(f64, f64) -> f64) -> f64 {
    (x.chunks(SUM_CHUNK).zip(y.chunks(SUM_CHUNK)))
        .map(|(x, y)| chunk_sum(x.iter().zip(y).map(|(&x, &y)| term(x, y))))
        .sum()
}

/// Entries per chunk of [`sum_of_pairs`]: work split at multiples of it
/// whose chunks' sums ([`chunk_sum`]) are added in order has the bits of
/// one call over the whole.
pub(crate) const SUM_CHUNK: usize = 256;

/// The sum of one chunk's `terms` (at most [`SUM_CHUNK`], in order), in
/// the four running sums of [`sum_of_pairs`]: a pass that makes its terms
/// as it goes sums them as that function would.
#[inline]
pub(crate) fn chunk_sum(terms: impl Iterator<Item = f64>) -> f64 {
    let mut lanes = [0.0; 4];
    for (i, term) in terms.enumerate() {
        lanes[i % 4] += term;
    }
    lanes.iter().sum::<f64>()
}

/// The least of x (+inf for none), in eight running minima by a select:
/// one would be a chain of dependent comparisons, and `f64::min`'s NaN
/// rule keeps the loop from vectorising.
#[inline]
pub(crate) fn least(x: &[f64]) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [f64::INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v < *lane { v } else { *lane };
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(rest) {
        *lane = if v < *lane { v } else { *lane };
    }
    lanes
        .iter()
        .fold(f64::INFINITY, |m, &v| if v < m { v } else { m })
}

/// A curvature (a diagonal of the Hessian, or of its model) floored so
/// that a variable whose r is flat in theta still takes a finite step.
#[inline]
pub(crate) fn curvature_floor(curvature: f64, r: f64) -> f64 {
    curvature.max(1e-12 * r).max(1e-300)
}

/// The partial results of parallel work, combined by `merge` in their
/// order; `None` for no work. Rayon's `reduce` (and `fold`) combine in a
/// tree shaped by how the pool split the work, which follows its number of
/// threads, so floating-point sums would differ in their last bits from
/// one machine to another: here the work is split into the caller's fixed
/// pieces and added up in one order, the same bits on any pool.
pub(crate) fn merged_in_order<T: Send>(
    partials: impl IndexedParallelIterator<Item = T>,
    mut merge: impl FnMut(&mut T, T),
) -> Option<T> {
    let mut partials = partials.collect::<Vec<T>>().into_iter();
    let mut total = partials.next()?;
    partials.for_each(|partial| merge(&mut total, partial));
    Some(total)
}

/// `a` and `b`, side by side on rayon's pool for work over at least
/// `PARALLEL_FROM` tokens (where the solve runs on the pool), one after
/// the other below it (where it runs on the calling thread, and a hand-off
/// to the pool and the wait for it would cost more than the work).
pub(crate) fn join_from<A: Send, B: Send>(
    tokens: usize,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if tokens >= PARALLEL_FROM {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The lanes' least and sums are the entries' own, at every length
        /// about the lanes' and chunks' sizes (none, a remainder, several
        /// chunks); the sums, which differ only in their order, within
        /// twice the bound of recursive summation's error, (N - 1) u Σ
        /// |term| (Higham, Accuracy and Stability, §4.2).
        #[test]
        fn lane_passes_match_one_by_one(
            pairs in prop::collection::vec((0.0f64..1.0, 0.0f64..1.0), 0..700),
        ) {
            let (x, y): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
            let one_by_one = x.iter().fold(f64::INFINITY, |m, &v| m.min(v));
            prop_assert_eq!(least(&x), one_by_one);
            let term = |x: f64, y: f64| if x < y { x } else { y };
            let naive: f64 = x.iter().zip(&y).map(|(&x, &y)| x.min(y)).sum();
            let bound = |total: f64| 2.0 * x.len() as f64 * f64::EPSILON / 2.0 * total;
            prop_assert!((sum_of_pairs(&x, &y, term) - naive).abs() <= bound(naive));
            let sum = x.iter().sum::<f64>();
            prop_assert!((lane_sum(&x) - sum).abs() <= bound(sum));
        }
    }
}
