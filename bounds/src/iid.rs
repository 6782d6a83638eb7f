//! i.i.d. drafts: alpha* = 1 + min_k (P_k - S_k^n) over prefixes of the
//! ascending-p/q order (`docs/DESIGN.md` §3), by a full sort or by bucket selection.

use mdsd_core::{CheckedChunks, CoreError, Distribution, ProbabilityRow};

use crate::BoundError;
use crate::objective;
use crate::order::{ascending_ratio_order, masses_after, ratio, ratio_key};

/// How [`crate::optimal_acceptance_iid`] finds the optimal prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IidAlgorithm {
    /// Sort all tokens by p/q: O(V log V). The reference.
    Sort,
    /// Bucket the ratios by their binary exponent and sort only the buckets
    /// that can hold the optimum: expected O(V).
    Selection,
    /// Sort below [`SELECTION_MIN_VOCAB`] tokens, where the buckets' fixed
    /// cost dominates; selection above.
    #[default]
    Auto,
}

/// The vocabulary size from which [`IidAlgorithm::Auto`] uses selection
/// (about the number of buckets, whose set-up then stops dominating).
pub const SELECTION_MIN_VOCAB: usize = BUCKETS;

/// `alpha - 1 = p(H) - q(H)^n` for a set with masses `p_in`, `q_in` inside and
/// `p_out`, `q_out` outside, all four summed directly. `1 - q(H)^n` is only
/// needed when `q(H)^n > 1/2`, and then it comes from `q_out` without
/// cancelling two numbers near 1 (`docs/DESIGN.md` §3, "near 1"): `not_all_in`.
pub(crate) fn iid_objective(p_in: f64, p_out: f64, q_in: f64, q_out: f64, n: i32) -> f64 {
    let all_in = power(q_in, n);
    let not_all_in = if all_in > 0.5 {
        not_all_in(q_in, q_out, n)
    } else {
        1.0 - all_in
    };
    objective(p_in, p_out, all_in, not_all_in)
}

/// `x^n` for n >= 0 by repeated squaring (the products `powi` forms),
/// inline: `powi` with a run-time exponent is a call into compiler-rt, and
/// this runs for every bucket end and every candidate token, per n.
fn power(x: f64, n: i32) -> f64 {
    let (mut base, mut exponent, mut result) = (x, n.unsigned_abs(), 1.0);
    while exponent > 0 {
        if exponent & 1 == 1 {
            result *= base;
        }
        base *= base;
        exponent >>= 1;
    }
    result
}

/// Up to this many drafts, `1 - q_in^n` is summed as a geometric series.
const GEOMETRIC_DRAFTS: i32 = 16;

/// `1 - q_in^n` with `q_out = 1 - q_in` summed directly:
/// `q_out (1 + q_in + ... + q_in^(n-1))`, a sum of positive terms (a few
/// ulps, no cancellation, and no libm call, which at full vocabulary would
/// run for thousands of buckets per n); for more drafts
/// `-expm1(n log1p(-q_out))`, as accurate.
fn not_all_in(q_in: f64, q_out: f64, n: i32) -> f64 {
    if n <= GEOMETRIC_DRAFTS {
        let (mut power, mut series) = (1.0, 0.0);
        for _ in 0..n {
            series += power;
            power *= q_in;
        }
        q_out * series
    } else {
        -(f64::from(n) * (-q_out).ln_1p()).exp_m1()
    }
}

/// A probability vector as the bucket selection reads it: `values[t] *
/// scale`, so that a [`ProbabilityRow`] is renormalised as it is read, not
/// copied first. A distribution's scale is 1, which reads it exactly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Masses<'a> {
    values: &'a [f64],
    scale: f64,
}

impl<'a> Masses<'a> {
    pub(crate) fn of(row: ProbabilityRow<'a>) -> Self {
        Self {
            values: row.unnormalised(),
            scale: 1.0 / row.sum(),
        }
    }

    fn exact(values: &'a [f64]) -> Self {
        Self { values, scale: 1.0 }
    }

    fn at(self, t: usize) -> f64 {
        self.values[t] * self.scale
    }

    /// The blocks pass 1 reads.
    fn blocks(self) -> std::slice::Chunks<'a, f64> {
        self.values.chunks(CheckedChunks::CHUNK)
    }

    /// The probabilities themselves, borrowed when the scale is 1.
    fn normalised(self) -> std::borrow::Cow<'a, [f64]> {
        if self.scale == 1.0 {
            self.values.into()
        } else {
            self.values.iter().map(|v| v * self.scale).collect()
        }
    }
}

/// The optimal prefix value (alpha - 1) and the tokens of the prefix.
pub(crate) fn iid_by_sort(p: &[f64], q: &[f64], n: i32) -> (f64, Vec<usize>) {
    let sorted = SortedTokens::new(p, q);
    let (best, best_len) = sorted.best_prefix(p, q, n);
    let mut certificate = sorted.order[..best_len].to_vec();
    certificate.sort_unstable();
    (best, certificate)
}

/// The tokens in ascending p/q order with the masses after each prefix:
/// everything about the sort that does not depend on n.
struct SortedTokens {
    order: Vec<usize>,
    p_out: Vec<f64>,
    q_out: Vec<f64>,
}

impl SortedTokens {
    fn new(p: &[f64], q: &[f64]) -> Self {
        let order = ascending_ratio_order(p, q);
        let (p_out, q_out) = masses_after(p, q, &order, 0.0);
        Self {
            order,
            p_out,
            q_out,
        }
    }

    /// The least prefix value (alpha - 1) and the prefix's length.
    fn best_prefix(&self, p: &[f64], q: &[f64], n: i32) -> (f64, usize) {
        let (mut p_in, mut q_in) = (0.0, 0.0);
        let (mut best, mut best_len) = (0.0, 0);
        for k in 1..=self.order.len() {
            p_in += p[self.order[k - 1]];
            q_in += q[self.order[k - 1]];
            let value = iid_objective(p_in, self.p_out[k], q_in, self.q_out[k], n);
            if value < best {
                best = value;
                best_len = k;
            }
        }
        (best, best_len)
    }
}

// Bucket layout: bucket 0 holds ratios below 2^MIN_EXP (p = 0 among them),
// then 2^SUB_BITS buckets per binary exponent in [MIN_EXP, MAX_EXP], and the
// last bucket ratios of 2^(MAX_EXP+1) and more (q = 0 among them). The
// bucket index is non-decreasing in the ratio, so every bucket boundary is a
// prefix boundary of the sorted order.
const SUB_BITS: u32 = 5;
const MIN_EXP: i64 = -64;
const MAX_EXP: i64 = 63;
const FINITE_BUCKETS: i64 = (MAX_EXP - MIN_EXP + 1) << SUB_BITS;
const BUCKETS: usize = FINITE_BUCKETS as usize + 2;
/// The exponent and top mantissa bits of 2^MIN_EXP, as read by [`bucket_of`].
const FIRST_FINITE: i64 = (1023 + MIN_EXP) << SUB_BITS;

/// The bucket of p/q, branch-free so the pass over V vectorises (also on
/// the SSE2 baseline, which has float min/max but no 64-bit integer ones).
/// For non-negative floats the bit pattern is increasing in the value, so
/// its exponent and top mantissa bits index buckets in order once the ratio
/// is clamped to [just below 2^MIN_EXP, 2^(MAX_EXP+1)]; q = 0 gives +inf, or
/// NaN when p = 0 too, and both clamp to the top.
fn bucket_of(p: f64, q: f64) -> u16 {
    bucket_of_key(p / q)
}

/// `bucket_of` a ratio already divided out (any f64: below 2^MIN_EXP,
/// negative values and -inf included, bucket 0; NaN the top).
// Not `clamp`: it keeps NaN, while `min` sends NaN (the 0/0 of p = q =
// 0) to the top.
#[allow(clippy::manual_clamp)]
#[inline]
fn bucket_of_key(ratio: f64) -> u16 {
    let clamped = ratio.min(TOP_RATIO).max(BELOW_MIN_RATIO);
    ((clamped.to_bits() >> (52 - SUB_BITS)) - (FIRST_FINITE as u64 - 1)) as u16
}

/// 2^(MAX_EXP+1): the least ratio of the last bucket.
const TOP_RATIO: f64 = f64::from_bits(((1023 + MAX_EXP + 1) as u64) << 52);
/// The largest float below 2^MIN_EXP: bucket 0.
const BELOW_MIN_RATIO: f64 = f64::from_bits((((1023 + MIN_EXP) as u64) << 52) - 1);

/// The least ratio a bucket can hold: a lower bound for all its tokens.
fn bucket_floor(b: usize) -> f64 {
    match b {
        0 => 0.0,
        _ => f64::from_bits(((b as i64 - 1 + FIRST_FINITE) as u64) << (52 - SUB_BITS)),
    }
}

/// The least ratio of the next bucket: an upper bound for all of this
/// one's tokens (none for the last, which holds +inf).
fn bucket_ceiling(b: usize) -> f64 {
    if b + 1 < BUCKETS {
        bucket_floor(b + 1)
    } else {
        f64::INFINITY
    }
}

/// Where the best prefix ends.
#[derive(Clone, Copy)]
enum Boundary {
    Empty,
    /// After every token of buckets `0..=b`.
    BucketEnd(usize),
    /// After buckets `0..b` and the first `len` tokens of bucket `b` in sorted order.
    Inside(usize, usize),
}

/// Bucket selection. Pass 1 sums p and q per bucket; the objective at every
/// bucket end is then exact. Inside a bucket whose ratios lie in [a, b),
/// p(prefix) >= P0 + max(a x, Y - b (X - x)) for x = q added, so the
/// objective is at least that minus (S0 + x)^n, concave on each side of the
/// kink: its minimum over the bucket is at an end or at the kink. Only
/// buckets whose bound beats the best bucket end are sorted (usually one
/// or two), which makes the whole expected O(V).
pub(crate) fn iid_by_selection(p: &[f64], q: &[f64], n: i32) -> (f64, Vec<usize>) {
    let (p, q) = (Masses::exact(p), Masses::exact(q));
    let (keys, buckets) =
        TokenBuckets::of_tokens(p.blocks(), q.blocks(), p.values.len()).sums(p, q);
    let mut ends = buckets.bucket_ends(n);
    let inside = gather_candidates(&keys, p, q, &ends.candidate);
    buckets.refine(p, q, n, &mut ends, &inside);
    let certificate = match ends.boundary {
        Boundary::Empty => Vec::new(),
        Boundary::BucketEnd(b) => certificate_with(&keys, p, q, b + 1, None),
        Boundary::Inside(b, len) => {
            // The first `len` tokens of bucket b in (ratio, id) order: those
            // below the first one left out.
            let start = inside.partition_point(|x| x.0 < b);
            let (_, ratio_cut, token_cut) = inside[start + len];
            certificate_with(&keys, p, q, b, Some((ratio_cut, token_cut)))
        }
    };
    (ends.best, certificate)
}

/// alpha* - 1 for each n, sharing what does not depend on n: the sort
/// below [`SELECTION_MIN_VOCAB`] tokens, pass 1 of the bucket selection
/// above (most of its cost). No certificates.
pub(crate) fn iid_values(p: Masses, q: Masses, ns: &[i32]) -> Vec<f64> {
    if p.values.len() < SELECTION_MIN_VOCAB {
        let (p, q) = (p.normalised(), q.normalised());
        let sorted = SortedTokens::new(&p, &q);
        ns.iter()
            .map(|&n| sorted.best_prefix(&p, &q, n).0)
            .collect()
    } else {
        TokenBuckets::of_tokens(p.blocks(), q.blocks(), p.values.len()).values(p, q, ns)
    }
}

/// [`iid_values`] for rows not yet checked: each is checked as
/// [`ProbabilityRow::new`] checks it, in pass 1's read of it.
pub(crate) fn iid_values_checking(
    p: &[f64],
    q: &[f64],
    ns: &[i32],
) -> Result<Vec<f64>, BoundError> {
    let target = |source| BoundError::InvalidRow {
        what: "target",
        source,
    };
    let draft = |source| BoundError::InvalidRow {
        what: "draft",
        source,
    };
    if p.len() < SELECTION_MIN_VOCAB {
        let p = ProbabilityRow::new(p).map_err(target)?;
        let q = ProbabilityRow::new(q).map_err(draft)?;
        return Ok(iid_values(Masses::of(p), Masses::of(q), ns));
    }
    let (mut p_blocks, mut q_blocks) = (CheckedChunks::new(p), CheckedChunks::new(q));
    let buckets = TokenBuckets::of_tokens(p_blocks.by_ref(), q_blocks.by_ref(), p.len());
    let p = Masses::of(p_blocks.finish().map_err(target)?);
    let q = Masses::of(q_blocks.finish().map_err(draft)?);
    Ok(buckets.values(p, q, ns))
}

/// Pass 1 of the bucket selection, over the values as given: each token's
/// bucket by the ratio of its values, and the values' sums per bucket. For
/// rows that stand for `values * scale`, the normalised ratios are these
/// times `p_scale / q_scale`: the buckets keep their tokens and order, and
/// only their bounds move ([`BucketSums::ratio_scale`]).
struct TokenBuckets {
    keys: Vec<u16>,
    p: Vec<f64>,
    q: Vec<f64>,
}

impl TokenBuckets {
    /// Reads p and q once, in blocks of equal lengths: the keys of a
    /// block in one vectorisable pass, then its sums while it is in L1.
    /// One (p, q) accumulator per bucket: on real rows neighbouring tokens
    /// rarely share a bucket (no chain of dependent stores to break), and
    /// the buckets in use then fit in L1, where more accumulators per
    /// bucket would not (the `bounds` benchmark decides).
    fn of_tokens<'a>(
        p: impl Iterator<Item = &'a [f64]>,
        q: impl Iterator<Item = &'a [f64]>,
        len: usize,
    ) -> Self {
        let mut keys: Vec<u16> = Vec::with_capacity(len);
        let mut sums = vec![[0.0f64; 2]; BUCKETS];
        for (p, q) in p.zip(q) {
            let start = keys.len();
            keys.extend(p.iter().zip(q).map(|(&a, &b)| bucket_of(a, b)));
            for (&k, (&a, &b)) in keys[start..].iter().zip(p.iter().zip(q)) {
                let sum = &mut sums[usize::from(k)];
                sum[0] += a;
                sum[1] += b;
            }
        }
        Self {
            keys,
            p: sums.iter().map(|s| s[0]).collect(),
            q: sums.iter().map(|s| s[1]).collect(),
        }
    }

    /// The keys, and the bucket sums of the rows these values stand for.
    fn sums(self, p: Masses, q: Masses) -> (Vec<u16>, BucketSums) {
        let scaled = |sums: Vec<f64>, scale: f64| sums.into_iter().map(|m| m * scale).collect();
        let sums = BucketSums::from_masses(
            scaled(self.p, p.scale),
            scaled(self.q, q.scale),
            p.scale / q.scale,
        );
        (self.keys, sums)
    }

    /// alpha* - 1 for each n: the bucket ends, then the tokens of the
    /// buckets that some n's optimum could lie inside.
    fn values(self, p: Masses, q: Masses, ns: &[i32]) -> Vec<f64> {
        let (keys, buckets) = self.sums(p, q);
        let (ends, union) = buckets.candidate_union(ns);
        let inside = gather_candidates(&keys, p, q, &union);
        buckets.best_values(p, q, ns, ends, &inside)
    }
}

/// A token of a candidate bucket: (bucket, ratio, token).
type Candidate = (usize, f64, usize);

/// Pass 1 of the bucket selection: the masses per bucket and after it.
#[derive(Debug, Clone, PartialEq)]
struct BucketSums {
    bucket_p: Vec<f64>,
    bucket_q: Vec<f64>,
    /// Mass strictly after each bucket, summed directly.
    p_after: Vec<f64>,
    q_after: Vec<f64>,
    /// Mass strictly before each bucket, summed directly.
    p_before: Vec<f64>,
    q_before: Vec<f64>,
    /// The buckets holding a token, ascending: the only prefix ends (an
    /// empty bucket ends the same set as the one before it).
    occupied: Vec<usize>,
    /// What the buckets' ratio bounds are multiplied by: the tokens were
    /// bucketed by the ratio of values that stand for `p_scale * p` and
    /// `q_scale * q` ([`TokenBuckets`]).
    ratio_scale: f64,
}

impl BucketSums {
    /// The sums before and after each bucket from the sums per bucket.
    fn from_masses(bucket_p: Vec<f64>, bucket_q: Vec<f64>, ratio_scale: f64) -> Self {
        let mut p_after = vec![0.0; BUCKETS];
        let mut q_after = vec![0.0; BUCKETS];
        for b in (0..BUCKETS - 1).rev() {
            p_after[b] = p_after[b + 1] + bucket_p[b + 1];
            q_after[b] = q_after[b + 1] + bucket_q[b + 1];
        }
        let mut p_before = vec![0.0; BUCKETS];
        let mut q_before = vec![0.0; BUCKETS];
        for b in 1..BUCKETS {
            p_before[b] = p_before[b - 1] + bucket_p[b - 1];
            q_before[b] = q_before[b - 1] + bucket_q[b - 1];
        }
        let occupied = (0..BUCKETS)
            .filter(|&b| bucket_p[b] > 0.0 || bucket_q[b] > 0.0)
            .collect();
        Self {
            bucket_p,
            bucket_q,
            p_after,
            q_after,
            p_before,
            q_before,
            occupied,
            ratio_scale,
        }
    }

    /// The bucket ends of each n and the union of their candidate buckets.
    fn candidate_union(&self, ns: &[i32]) -> (Vec<BucketEnds>, Vec<bool>) {
        let ends: Vec<BucketEnds> = ns.iter().map(|&n| self.bucket_ends(n)).collect();
        let mut union = vec![false; BUCKETS];
        for e in &ends {
            union
                .iter_mut()
                .zip(&e.candidate)
                .for_each(|(u, &c)| *u |= c);
        }
        (ends, union)
    }

    /// alpha* - 1 for each n from its bucket ends and the sorted tokens of
    /// (at least) its candidate buckets.
    fn best_values(
        &self,
        p: Masses,
        q: Masses,
        ns: &[i32],
        mut ends: Vec<BucketEnds>,
        inside: &[Candidate],
    ) -> Vec<f64> {
        ns.iter()
            .zip(&mut ends)
            .map(|(&n, e)| {
                self.refine(p, q, n, e, inside);
                e.best
            })
            .collect()
    }

    /// The objective at every bucket end, the best of them, and the buckets
    /// whose inside could beat it.
    fn bucket_ends(&self, n: i32) -> BucketEnds {
        let Self {
            bucket_p,
            bucket_q,
            p_after,
            q_after,
            p_before,
            q_before,
            occupied,
            ratio_scale,
        } = self;
        // The bounds of the normalised ratios, a few ulps wider for the
        // rounding of the ratios and of the scale.
        let (least_scale, most_scale) = (
            ratio_scale * (1.0 - 4.0 * f64::EPSILON),
            ratio_scale * (1.0 + 4.0 * f64::EPSILON),
        );
        let end_value: Vec<f64> = occupied
            .iter()
            .map(|&b| {
                let p_in = p_before[b] + bucket_p[b];
                let q_in = q_before[b] + bucket_q[b];
                iid_objective(p_in, p_after[b], q_in, q_after[b], n)
            })
            .collect();
        let (mut best, mut boundary) = (0.0, Boundary::Empty);
        for (&b, &value) in occupied.iter().zip(&end_value) {
            if value < best {
                best = value;
                boundary = Boundary::BucketEnd(b);
            }
        }

        let mut candidate = vec![false; BUCKETS];
        let mut start_value: f64 = 0.0;
        for (&b, &value) in occupied.iter().zip(&end_value) {
            if bucket_q[b] > 0.0 {
                let (x_all, y_all) = (bucket_q[b], bucket_p[b]);
                let (least, most) = (
                    bucket_floor(b) * least_scale,
                    bucket_ceiling(b) * most_scale,
                );
                // Cuts inside the bucket add q mass x and p mass y(x), convex
                // (ratios ascending) with slopes in [least, most]: y(x) >=
                // max(least x, Y - most (X - x)). The objective is then at
                // least P0 + that - (S0 + x)^n, concave on each side of the
                // kink: its minimum is at 0 (start), at X (end) or at the kink.
                // The kink's bound needs an objective evaluation: only where
                // the ends do not decide (it is at least the bound through
                // `least` alone at X, `value - slack`).
                let ends_bound = start_value.min(value);
                let slack = (y_all - least * x_all).max(0.0);
                candidate[b] = if ends_bound < best {
                    true
                } else if value - slack >= best {
                    false
                } else {
                    let kink = if most.is_finite() {
                        ((most * x_all - y_all) / (most - least)).clamp(0.0, x_all)
                    } else {
                        x_all
                    };
                    let added = least * kink;
                    let at_kink = iid_objective(
                        p_before[b] + added,
                        p_after[b] + (y_all - added).max(0.0),
                        q_before[b] + kink,
                        q_after[b] + (x_all - kink),
                        n,
                    );
                    at_kink < best
                };
            }
            start_value = value;
        }

        BucketEnds {
            best,
            boundary,
            candidate,
        }
    }

    /// Improves `ends` by the cuts inside its candidate buckets.
    fn refine(&self, p: Masses, q: Masses, n: i32, ends: &mut BucketEnds, inside: &[Candidate]) {
        let (p_after, q_after) = (&self.p_after, &self.q_after);
        let (p_before, q_before) = (&self.p_before, &self.q_before);
        let BucketEnds {
            best,
            boundary,
            candidate,
        } = ends;
        // Buckets gathered for another n are skipped: their cuts are valid
        // prefixes too, but cannot beat this n's best.
        for group in inside.chunk_by(|x, y| x.0 == y.0) {
            let b = group[0].0;
            if !candidate[b] {
                continue;
            }
            // Suffix sums inside the bucket, plus everything after it.
            let mut p_out = vec![p_after[b]; group.len() + 1];
            let mut q_out = vec![q_after[b]; group.len() + 1];
            for j in (0..group.len()).rev() {
                p_out[j] = p_out[j + 1] + p.at(group[j].2);
                q_out[j] = q_out[j + 1] + q.at(group[j].2);
            }
            let (mut p_in, mut q_in) = (p_before[b], q_before[b]);
            for j in 1..group.len() {
                p_in += p.at(group[j - 1].2);
                q_in += q.at(group[j - 1].2);
                let value = iid_objective(p_in, p_out[j], q_in, q_out[j], n);
                if value < *best {
                    *best = value;
                    *boundary = Boundary::Inside(b, j);
                }
            }
        }
    }
}

/// The tokens of the `candidate` buckets, sorted by (bucket, ratio, id).
fn gather_candidates(keys: &[u16], p: Masses, q: Masses, candidate: &[bool]) -> Vec<Candidate> {
    // Their masses in a loop of their own: the reads miss the cache, and
    // here many are in flight at once.
    let mut inside: Vec<Candidate> = tokens_in_buckets(keys, candidate)
        .into_iter()
        .map(|t| (usize::from(keys[t]), bucketed_ratio(p, q, t), t))
        .collect();
    sort_candidates(&mut inside);
    inside
}

/// The tokens (ascending) whose bucket `buckets[t]` is marked in `wanted`.
///
/// The wanted buckets of a prefix search hold a few thousand tokens of V,
/// spread along the vocabulary: a branch per token would mispredict on
/// each of them. The tests of a run of tokens are packed into a mask
/// without a branch, and only runs holding a wanted token (a few in ten)
/// are looked at again.
pub fn tokens_in_buckets(buckets: &[u16], wanted: &[bool]) -> Vec<usize> {
    const RUN: usize = 16;
    let is_wanted = |k: u16| u32::from(wanted[usize::from(k)]);
    let mut tokens = Vec::new();
    let mut add_run = |start: usize, mut mask: u32| {
        while mask != 0 {
            tokens.push(start + mask.trailing_zeros() as usize);
            mask &= mask - 1;
        }
    };
    let runs = buckets.chunks_exact(RUN);
    let rest = runs.remainder();
    for (run, chunk) in runs.enumerate() {
        let mask = (0..RUN).fold(0, |mask, i| mask | is_wanted(chunk[i]) << i);
        add_run(run * RUN, mask);
    }
    let mask = (0..rest.len()).fold(0, |mask, i| mask | is_wanted(rest[i]) << i);
    add_run(buckets.len() - rest.len(), mask);
    tokens
}

/// The ratio token `t` was bucketed by: of its values as given.
fn bucketed_ratio(p: Masses, q: Masses, t: usize) -> f64 {
    ratio(p.values[t], q.values[t])
}

/// Sorts candidates by (bucket, ratio, id): the order the cuts inside a
/// bucket are taken in.
fn sort_candidates(inside: &mut [Candidate]) {
    // A bucket is non-decreasing in the ratio (`bucket_of`), so (ratio, id)
    // alone gives that order.
    inside.sort_unstable_by_key(|&(_, ratio, token)| ratio_key(ratio, token));
}

/// The bucket-end pass of one n.
struct BucketEnds {
    best: f64,
    boundary: Boundary,
    candidate: Vec<bool>,
}

/// Tokens of buckets `0..end`, plus the tokens of bucket `end` that come
/// before `cut` in (ratio, id) order, ascending by id.
fn certificate_with(
    keys: &[u16],
    p: Masses,
    q: Masses,
    end: usize,
    cut: Option<(f64, usize)>,
) -> Vec<usize> {
    let before_cut = |t: usize| {
        cut.is_some_and(|(ratio_cut, token_cut)| {
            bucketed_ratio(p, q, t)
                .total_cmp(&ratio_cut)
                .then(t.cmp(&token_cut))
                .is_lt()
        })
    };
    // Branch-free compaction: whether a token is in H* is close to a coin
    // flip along the vocabulary, which a branch would mispredict half the
    // time; tokens of bucket `end` are rare, so that test may branch.
    let mut out = vec![0; keys.len()];
    let mut kept = 0;
    for (t, &k) in keys.iter().enumerate() {
        let k = usize::from(k);
        out[kept] = t;
        kept += usize::from((k < end) | (k == end && before_cut(t)));
    }
    out.truncate(kept);
    out
}

/// How many ratio buckets the bucket selection uses: the layout an
/// accelerator reproduces to hand its first pass to
/// [`optimal_acceptance_iid_from_buckets`].
pub const RATIO_BUCKETS: usize = BUCKETS;

/// The ratio bucket of a token with target mass `p` and draft mass `q`:
/// non-decreasing in p/q, with p/q read from the exponent and top
/// mantissa bits of its f64 (2^5 buckets per binary exponent between 2^-64
/// and 2^64, one below, one above with q = 0).
pub fn ratio_bucket(p: f64, q: f64) -> usize {
    usize::from(bucket_of(p, q))
}

/// The ratio bucket of a key already divided out, any f64: non-decreasing
/// in it (every key below 2^-64, negative ones and -inf included, in
/// bucket 0; +inf and NaN in the last), so that sorting by (bucket, key)
/// sorts by key. Other searches over prefixes of a ratio order (the cut
/// of drafts from different models in mdsd-convex) bucket their keys by
/// it.
#[inline]
pub fn ratio_key_bucket(ratio: f64) -> usize {
    usize::from(bucket_of_key(ratio))
}

/// Pass 1 of the bucket selection done elsewhere (on a GPU): the p and q
/// mass of each of the [`RATIO_BUCKETS`] ratio buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioBucketMasses {
    sums: BucketSums,
}

impl RatioBucketMasses {
    /// The masses per bucket, [`RATIO_BUCKETS`] of each.
    pub fn new(p: Vec<f64>, q: Vec<f64>) -> Result<Self, BoundError> {
        for (what, masses) in [("p", &p), ("q", &q)] {
            if masses.len() != BUCKETS {
                return Err(BoundError::BucketMasses {
                    what,
                    detail: format!("{} buckets, expected {BUCKETS}", masses.len()),
                });
            }
            if let Some((b, &m)) = masses
                .iter()
                .enumerate()
                .find(|(_, m)| !(m.is_finite() && **m >= 0.0))
            {
                return Err(BoundError::BucketMasses {
                    what,
                    detail: format!("bucket {b} holds {m}"),
                });
            }
        }
        Ok(Self {
            sums: BucketSums::from_masses(p, q, 1.0),
        })
    }

    /// Which buckets' tokens [`optimal_acceptance_iid_from_buckets`] needs
    /// for these n: the buckets whose inside could hold a better cut than
    /// every bucket end (usually one or two).
    pub fn candidate_buckets(&self, ns: &[usize]) -> Result<Vec<bool>, BoundError> {
        Ok(self.sums.candidate_union(&draft_counts(ns)?).1)
    }
}

/// alpha* for n i.i.d. drafts at each n of `ns` from the bucket masses and
/// the tokens of the candidate buckets, given as `(token, bucket)`: the
/// bucket selection of [`crate::optimal_acceptance_iid_many`] with its
/// pass over the vocabulary done elsewhere. Every token of every bucket
/// that [`RatioBucketMasses::candidate_buckets`] marks must be given (others
/// are ignored); a bucket whose given tokens do not add up to its p mass
/// (to 1e-9) is an error, not a silent wrong answer.
pub fn optimal_acceptance_iid_from_buckets(
    p: &Distribution,
    q: &Distribution,
    masses: &RatioBucketMasses,
    ns: &[usize],
    candidates: &[(usize, usize)],
) -> Result<Vec<f64>, BoundError> {
    crate::check_iid(p, q, ns)?;
    let counts = draft_counts(ns)?;
    let (p, q) = (p.probs(), q.probs());
    let sums = &masses.sums;
    let (ends, union) = sums.candidate_union(&counts);
    let mut inside = Vec::with_capacity(candidates.len());
    let mut found = vec![0.0; BUCKETS];
    for &(t, b) in candidates {
        if t >= p.len() || b >= BUCKETS {
            return Err(BoundError::BucketMasses {
                what: "candidates",
                detail: format!(
                    "token {t} in bucket {b}: {} tokens, {BUCKETS} buckets",
                    p.len()
                ),
            });
        }
        if union[b] {
            found[b] += p[t];
            inside.push((b, ratio(p[t], q[t]), t));
        }
    }
    if let Some(b) = (0..BUCKETS)
        .find(|&b| union[b] && (found[b] - sums.bucket_p[b]).abs() > BUCKET_MASS_TOLERANCE)
    {
        return Err(BoundError::BucketMasses {
            what: "candidates",
            detail: format!(
                "the tokens given for bucket {b} hold p mass {}, the bucket {}",
                found[b], sums.bucket_p[b]
            ),
        });
    }
    sort_candidates(&mut inside);
    Ok(sums
        .best_values(Masses::exact(p), Masses::exact(q), &counts, ends, &inside)
        .into_iter()
        .map(|value| 1.0 + value)
        .collect())
}

/// How far a candidate bucket's tokens may miss its p mass: sums of the
/// same numbers in another order, or in fixed point on an accelerator.
const BUCKET_MASS_TOLERANCE: f64 = 1e-9;

/// The draft counts as the objective's exponents (at least one draft).
pub(crate) fn draft_counts(ns: &[usize]) -> Result<Vec<i32>, BoundError> {
    if ns.contains(&0) {
        return Err(CoreError::NoDrafts.into());
    }
    Ok(ns
        .iter()
        .map(|&n| i32::try_from(n).unwrap_or(i32::MAX))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The geometric series against `-expm1(n log1p(-q_out))` where both
    /// are accurate, from q_out near 1 down to q_out = 1e-15 (where
    /// `1 - q_in^n` in floating point would have no correct digit).
    #[test]
    fn not_all_in_matches_the_log_form() {
        for q_out in [0.5, 0.1, 1e-3, 1e-7, 1e-12, 1e-15] {
            let q_in = 1.0 - q_out;
            for n in 1..=GEOMETRIC_DRAFTS {
                let series = not_all_in(q_in, q_out, n);
                let log_form = -(f64::from(n) * (-q_out).ln_1p()).exp_m1();
                assert!(
                    (series - log_form).abs() <= 1e-14 * log_form,
                    "q_out {q_out}, n {n}: {series} vs {log_form}"
                );
            }
        }
    }
}
