//! The tail's sums per bucket of theta: its moments Σ q^m e^(-k a c) at
//! each node in c, and the per-token integrals of the kernels
//! (`docs/DESIGN.md` §6b).

use super::clocks::Clocks;
use super::polynomials::{EXTRA_TERMS, Series};
use crate::potential::iid::{Assignment, ORDER};
use crate::potential::nodes::NEGLIGIBLE;
use crate::thresholds::BUCKETED_FROM;
use crate::workspace::Workspace;
use rayon::prelude::*;

/// Width in theta of the buckets of a tail of fewer than `BUCKETED_FROM`
/// tokens, and the Taylor terms in each token's offset δ = a / a_b - 1
/// that its sums take: |δ| <= e^(1/8) - 1 < 0.134, and e^(-x (1 + δ)) =
/// e^(-x) Σ_i (-x δ)^i / i! cut after WIDE_ORDER terms leaves at most
/// max_x (x |δ|)^O e^(-x (1 - |δ|)) / O! = (|δ| / (1 - |δ|))^O (O / e)^O
/// / O! < 1e-18 of the token's term over all x (O = WIDE_ORDER). A sum
/// over buckets costs about the same per bucket and node for any order
/// up to this, and a small tail spreads thin over the other schemes'
/// buckets (`Assignment::new`, 9 terms), so buckets eight times as wide
/// take fewer sums (with the offset its tokens at one theta share,
/// `TailBuckets::shared_offset`, fewer than buckets half as wide with 14
/// terms: `git show 57461f7:benches/README.md`, the schemes grid); a large tail
/// fills its buckets, and its per-token terms, which grow with the order,
/// keep the narrow ones.
pub(super) const WIDE_BUCKET: f64 = 1.0 / 4.0;
pub(super) const WIDE_ORDER: usize = 21;
/// A bucket whose x = k a_b c is at most LEFT_REACH at a node in c joins
/// the tail's moments there through power series in x shared by every
/// such bucket (`left_sums`): Σ_y q^m e^(-k a_y c) = Σ_p (-k c a)^p / p!
/// Σ_y q^m (a_y / a)^p for any a with every k a_y c <= LEFT_REACH (1 +
/// |δ|) < 0.57 (|δ| below e^(1/8) - 1), cut after LEFT_TERMS terms with a
/// remainder below 0.57^16 / 16! < 6e-18 of Σ q^m, against a value of at
/// least e^(-0.57) of it, in sums whose terms exceed the value by at most
/// e^1.14. Most of a bucket's nodes in c lie there (from 1e-5 / a_max to
/// LEFT_REACH / a_b), so its nodes past them (to NEGLIGIBLE / a_b, ln(120)
/// / h of them) are the only ones it costs on its own.
pub(super) const LEFT_REACH: f64 = 0.5;
pub(super) const LEFT_TERMS: usize = 16;
/// The power series of the left part: index p for x^p.
pub(super) type LeftSeries = [f64; LEFT_TERMS];

/// The selectable tail in buckets of theta: the other schemes' narrow
/// ones from `BUCKETED_FROM` tokens, else wide ones (`WIDE_BUCKET`).
pub(super) enum Tail {
    Narrow(TailBuckets<ORDER>),
    Wide(TailBuckets<WIDE_ORDER>),
}

impl Tail {
    pub(super) fn new(theta: &[f64], clocks: &Clocks, q: &[f64], n: usize) -> Self {
        if theta.len() >= BUCKETED_FROM {
            let tokens = Assignment::new(theta, &mut Workspace::new());
            Tail::Narrow(TailBuckets::new(tokens, clocks, q, n))
        } else {
            let tokens = Assignment::with_width(theta, WIDE_BUCKET, &mut Workspace::new());
            Tail::Wide(TailBuckets::new(tokens, clocks, q, n))
        }
    }

    pub(super) fn moments_at(&self, c: f64, silent: &[f64], n: usize) -> Vec<Series> {
        match self {
            Tail::Narrow(tail) => tail.moments_at(c, silent, n),
            Tail::Wide(tail) => tail.moments_at(c, silent, n),
        }
    }

    pub(super) fn marginal(
        &self,
        c: &[f64],
        kernels: &[&[f64]],
        clocks: &Clocks,
        q: &[f64],
        curvature: bool,
        only: Option<&[bool]>,
    ) -> Vec<(f64, f64)> {
        match self {
            Tail::Narrow(tail) => tail.marginal(c, kernels, clocks, q, curvature, only),
            Tail::Wide(tail) => tail.marginal(c, kernels, clocks, q, curvature, only),
        }
    }
}

/// The selectable tail by buckets of theta: per occupied bucket, its
/// centre a_b, the most extra series terms of its tokens and the moments
/// Σ q^m (-δ)^i / i! (m <= n + extra, i < O) of e^(-k a c) = e^(-x)
/// Σ_i x^i (-δ)^i / i!, x = k a_b c.
pub(super) struct TailBuckets<const O: usize> {
    pub(super) tokens: Assignment,
    /// Per row m <= n + EXTRA_TERMS and occupied bucket b (ascending
    /// a_b), the left part's sums over the buckets up to b (`left_sums`).
    pub(super) left: Vec<Vec<LeftSeries>>,
    pub(super) centre: Vec<f64>,
    pub(super) extra: Vec<usize>,
    pub(super) moments: Vec<Vec<[f64; O]>>,
    /// Per occupied bucket, the offset δ that its tokens at one theta
    /// share (its first token's).
    pub(super) shared_offset: Vec<f64>,
    /// Per slot of the assignment, its position among the occupied.
    pub(super) index: Vec<usize>,
}

impl<const O: usize> TailBuckets<O> {
    pub(super) fn new(tokens: Assignment, clocks: &Clocks, q: &[f64], n: usize) -> Self {
        let buckets = &tokens;
        let occupied = buckets.occupied();
        let mut index = vec![usize::MAX; buckets.centre.len()];
        occupied.iter().enumerate().for_each(|(i, &s)| index[s] = i);
        let mut extra = vec![0; occupied.len()];
        for (x, &d) in clocks.extra.iter().enumerate() {
            let b = index[buckets.slot[x] as usize];
            extra[b] = extra[b].max(d);
        }
        // The tail tokens by bucket (a counting sort), so that each bucket's
        // moments are one task's: a pass over the tokens on one thread
        // would leave the pool's other worker idle long enough to fall
        // asleep, and the node sums that follow would wait for it to wake.
        let mut start = vec![0; occupied.len() + 1];
        for &slot in &buckets.slot {
            start[index[slot as usize] + 1] += 1;
        }
        for b in 0..occupied.len() {
            start[b + 1] += start[b];
        }
        let mut by_bucket = vec![0; clocks.tail.len()];
        let mut next = start.clone();
        for (x, &slot) in buckets.slot.iter().enumerate() {
            let b = index[slot as usize];
            by_bucket[next[b]] = x;
            next[b] += 1;
        }
        let reciprocals = reciprocals::<O>();
        let (moments, shared_offset): (Vec<Vec<[f64; O]>>, Vec<f64>) = (0..occupied.len())
            .into_par_iter()
            .map(|b| {
                let tokens = &by_bucket[start[b]..start[b + 1]];
                // The tokens at the first one's theta (in a program, those
                // held at a bound: most of a large tail) share its offset:
                // their powers of q are summed first, and multiply its
                // series once.
                let shared = buckets.delta[tokens[0]];
                let mut shared_sums = vec![0.0; n + extra[b] + 1];
                let mut moments = vec![[0.0; O]; n + extra[b] + 1];
                for &x in tokens {
                    let rows = n + clocks.extra[x] + 1;
                    let mut power = 1.0;
                    if buckets.delta[x] == shared {
                        for sum in &mut shared_sums[..rows] {
                            *sum += power;
                            power *= q[clocks.tail[x]];
                        }
                        continue;
                    }
                    let offsets = series_in_offset(buckets.delta[x], &reciprocals);
                    for row in &mut moments[..rows] {
                        row.iter_mut()
                            .zip(&offsets)
                            .for_each(|(m, o)| *m += power * o);
                        power *= q[clocks.tail[x]];
                    }
                }
                let offsets = series_in_offset(shared, &reciprocals);
                for (row, sum) in moments.iter_mut().zip(&shared_sums) {
                    row.iter_mut()
                        .zip(&offsets)
                        .for_each(|(m, o)| *m += sum * o);
                }
                (moments, shared)
            })
            .unzip();
        let centre: Vec<f64> = occupied.iter().map(|&s| buckets.centre[s]).collect();
        let left = left_sums(&centre, &moments, n);
        Self {
            tokens,
            left,
            centre,
            extra,
            moments,
            shared_offset,
            index,
        }
    }

    /// The tail's moments at node c: `[k][e]` = Σ q^(k+e) z^k (k <= n),
    /// the silent tail's (z = 1) included.
    pub(super) fn moments_at(&self, c: f64, silent: &[f64], n: usize) -> Vec<Series> {
        let mut table: Vec<Series> = (0..=n)
            .map(|k| std::array::from_fn(|e| silent[k + e]))
            .collect();
        // Per row k, the buckets before `first[k]` (k a_b c <= LEFT_REACH)
        // join through the left part's sums at the last of them.
        let mut first = vec![0; n + 1];
        for (k, row) in table.iter_mut().enumerate().skip(1) {
            let reach = LEFT_REACH / (k as f64 * c);
            first[k] = self.centre.partition_point(|&a| a <= reach);
            let Some(last) = first[k].checked_sub(1) else {
                continue;
            };
            let x = k as f64 * c * self.centre[last];
            let mut powers = [0.0; LEFT_TERMS];
            let mut power = 1.0;
            for (p, entry) in powers.iter_mut().enumerate() {
                *entry = power;
                power *= -x / (p + 1) as f64;
            }
            for (e, entry) in row.iter_mut().enumerate() {
                *entry += (self.left[k + e][last].iter().zip(&powers))
                    .map(|(m, p)| m * p)
                    .sum::<f64>();
            }
        }
        for (b, moments) in self.moments.iter().enumerate() {
            // e^(-k a_b c) as the k-th power of e^(-a_b c): one exponential
            // a bucket, not one a row.
            let decay = (-self.centre[b] * c).exp();
            let mut decay_k = 1.0;
            for (k, row) in table.iter_mut().enumerate().skip(1) {
                let x = k as f64 * self.centre[b] * c;
                if x > NEGLIGIBLE {
                    break;
                }
                decay_k *= decay;
                if b < first[k] {
                    continue;
                }
                // e^(-x) x^i once, for the row's polynomials in x: as
                // dot products they are independent of each other, where
                // Horner's rule would chain each one's multiplications.
                let mut powers = [0.0; O];
                let mut power = decay_k;
                for entry in &mut powers {
                    *entry = power;
                    power *= x;
                }
                for (e, entry) in row.iter_mut().enumerate() {
                    let Some(m) = moments.get(k + e) else { break };
                    *entry += m.iter().zip(&powers).map(|(m, p)| m * p).sum::<f64>();
                }
            }
        }
        table
    }

    /// r of the tail tokens, a_y Σ_j (-1)^j Σ_e q_y^(j+1+e) Σ_k
    /// κ_(j,e)(c_k) e^(-(j+1) a_y c_k) (the node sums per bucket, a
    /// polynomial in δ per token; in a bucket of few offsets, the node
    /// sums at each offset), and when `curvature` the Hessian's
    /// diagonal: r_y - a_y² ∫ c e^(-a_y c) (...) dc, the same sums with
    /// the kernels times c (the integrand's factor without y does not
    /// depend on theta_y).
    pub(super) fn marginal(
        &self,
        c: &[f64],
        kernels: &[&[f64]],
        clocks: &Clocks,
        q: &[f64],
        curvature: bool,
        only: Option<&[bool]>,
    ) -> Vec<(f64, f64)> {
        let width = EXTRA_TERMS + 1;
        let n = kernels.first().map_or(0, |k| k.len() / width);
        let sets = 1 + curvature as usize;
        let wanted = |y: usize| only.is_none_or(|only| only[y]);
        // Per bucket, how many of its wanted tokens have an offset of
        // their own, and whether one has its shared offset.
        let mut own = vec![0usize; self.centre.len()];
        let mut shares = vec![false; self.centre.len()];
        for (x, &y) in clocks.tail.iter().enumerate() {
            if wanted(y) {
                let b = self.index[self.tokens.slot[x] as usize];
                if self.tokens.delta[x] == self.shared_offset[b] {
                    shares[b] = true;
                } else {
                    own[b] += 1;
                }
            }
        }
        let occupied: Vec<bool> = (own.iter().zip(&shares))
            .map(|(&own, &shares)| own > 0 || shares)
            .collect();
        // A bucket's table costs O times the sums at one offset over the
        // nodes (`sums_at_weight`), and each offset's sums from it O per
        // row more: a bucket of at most O / 2 offsets takes the sums at
        // each of them instead (the schemes grid's figures:
        // `git show 57461f7:benches/README.md`).
        let direct: Vec<bool> = (own.iter().zip(&shares))
            .map(|(&own, &shares)| own + shares as usize <= O / 2)
            .collect();
        // Per bucket, [set][j][e][i]: Σ_k κ_(j,e)(c_k) c_k^set e^(-x) x^i
        // (-1)^i / i!, x = (j + 1) a_b c_k.
        let tables: Vec<Vec<[f64; O]>> = (0..self.centre.len())
            .into_par_iter()
            .map(|b| {
                if !occupied[b] || direct[b] {
                    return Vec::new();
                }
                self.bucket_table(b, c, kernels, n, sets)
            })
            .collect();
        // Per bucket, the rows' polynomials at its shared offset
        // (`shared_offset`), [set][j][e]: a token there takes them as they
        // are, a product per row, where its own offset costs the bucket's
        // order per row.
        let at_shared: Vec<Vec<f64>> = (0..self.centre.len())
            .into_par_iter()
            .map(|b| {
                if !shares[b] {
                    return Vec::new();
                }
                if direct[b] {
                    let a = self.centre[b] * (1.0 + self.shared_offset[b]);
                    return sums_at_weight(a, c, kernels, n, self.extra[b], sets);
                }
                let powers = powers_of_offset::<O>(self.shared_offset[b]);
                (tables[b].iter())
                    .map(|row| row.iter().zip(&powers).map(|(r, d)| r * d).sum())
                    .collect()
            })
            .collect();
        (clocks.tail.par_iter().enumerate())
            .map(|(x, &y)| {
                if !wanted(y) {
                    return (0.0, 0.0);
                }
                let b = self.index[self.tokens.slot[x] as usize];
                let delta = self.tokens.delta[x];
                let shared = delta == self.shared_offset[b];
                let delta_powers = powers_of_offset::<O>(delta);
                let own_sums = (direct[b] && !shared).then(|| {
                    sums_at_weight(self.tokens.weight(x), c, kernels, n, clocks.extra[x], sets)
                });
                let at_offset = if shared {
                    Some(&at_shared[b])
                } else {
                    own_sums.as_ref()
                };
                // Per (set, j), the rows' polynomials in δ summed with
                // their powers of q first (O sums side by side), then one
                // polynomial: a row's own by Horner's rule would chain
                // each multiplication on the last.
                let sum = |set: usize| {
                    let mut sum = 0.0;
                    for j in 0..n {
                        let mut power = q[y].powi(j as i32 + 1);
                        let first = (set * n + j) * width;
                        let part = if let Some(at_offset) = at_offset {
                            let mut part = 0.0;
                            for value in &at_offset[first..=first + clocks.extra[x]] {
                                part += power * value;
                                power *= q[y];
                            }
                            part
                        } else {
                            let mut combined = [0.0; O];
                            for row in &tables[b][first..=first + clocks.extra[x]] {
                                (combined.iter_mut().zip(row)).for_each(|(c, r)| *c += power * r);
                                power *= q[y];
                            }
                            (combined.iter().zip(&delta_powers))
                                .map(|(c, d)| c * d)
                                .sum()
                        };
                        sum += if j % 2 == 0 { part } else { -part };
                    }
                    sum
                };
                let a = self.tokens.weight(x);
                let r = a * sum(0);
                (r, if curvature { r - a * a * sum(1) } else { 0.0 })
            })
            .collect()
    }
    /// Bucket b's table, [set][j][e][i]: Σ_k κ_(j,e)(c_k) c_k^set e^(-x)
    /// x^i (-1)^i / i!, x = (j + 1) a_b c_k, over the nodes in c where x
    /// is not negligible.
    fn bucket_table(
        &self,
        b: usize,
        c: &[f64],
        kernels: &[&[f64]],
        n: usize,
        sets: usize,
    ) -> Vec<[f64; O]> {
        let width = EXTRA_TERMS + 1;
        let mut table = vec![[0.0; O]; sets * n * width];
        // e^(-a_b c_k) per node, whose (j + 1)-th powers every row
        // takes: one exponential a node, not one a row.
        let decays: Vec<f64> = (c.iter())
            .map(|&ck| self.centre[b] * ck)
            .take_while(|&x| x <= NEGLIGIBLE)
            .map(|x| (-x).exp())
            .collect();
        for (set, j) in (0..sets).flat_map(|set| (0..n).map(move |j| (set, j))) {
            let rows = (set * n + j) * width..(set * n + j + 1) * width;
            let scale = (j + 1) as f64 * self.centre[b];
            for ((kernel, &ck), &decay) in kernels.iter().zip(c).zip(&decays) {
                let x = scale * ck;
                if x > NEGLIGIBLE {
                    break;
                }
                let mut powers = [0.0; O];
                let mut p = (0..=j).fold(1.0, |e, _| e * decay);
                for entry in powers.iter_mut() {
                    *entry = p;
                    p *= x;
                }
                let moment = if set == 1 { ck } else { 1.0 };
                for e in 0..=self.extra[b] {
                    let weight = moment * kernel[j * width + e];
                    let row = &mut table[rows.start + e];
                    row.iter_mut()
                        .zip(&powers)
                        .for_each(|(r, p)| *r += weight * p);
                }
            }
            for row in &mut table[rows] {
                let mut factor = 1.0;
                for (i, entry) in row.iter_mut().enumerate() {
                    if i > 0 {
                        factor *= -1.0 / i as f64;
                    }
                    *entry *= factor;
                }
            }
        }
        table
    }
}

/// The left part's sums (`LEFT_REACH`) per row m <= n + EXTRA_TERMS and
/// bucket b, ascending in a_b: Σ_(b' <= b) (a_b' / a_b)^p S_b'(m, p),
/// S_b(m, p) = Σ_(y in b) q^m (1 + δ_y)^p = Σ_i (-1)^i p! / (p - i)!
/// moments_b(m, i) from the bucket's moments Σ q^m (-δ)^i / i!; the terms
/// i >= O that those leave out are below (p |δ|)^O / O! of S_b, times at
/// most 0.54^p / p! in the series. The rows are independent (each a
/// running sum over the buckets), so they go in parallel: run on the
/// calling thread, this pass would leave the pool's other worker idle
/// long enough to fall asleep, and the node sums that follow would wait
/// for it to wake.
pub(super) fn left_sums<const O: usize>(
    centre: &[f64],
    moments: &[Vec<[f64; O]>],
    n: usize,
) -> Vec<Vec<LeftSeries>> {
    // Column i: (-1)^i p! / (p - i)! for each p (zero below i).
    let coefficients: Vec<LeftSeries> = (0..O)
        .map(|i| {
            std::array::from_fn(|p| {
                let falling: f64 = (p + 1 - i.min(p + 1)..=p).map(|f| f as f64).product();
                if i > p {
                    0.0
                } else if i % 2 == 0 {
                    falling
                } else {
                    -falling
                }
            })
        })
        .collect();
    // (a_(b-1) / a_b)^p, which carries the sums from one bucket to the next.
    let scales: Vec<LeftSeries> = (centre.windows(2))
        .map(|pair| {
            let ratio = pair[0] / pair[1];
            let mut scale = [1.0; LEFT_TERMS];
            for p in 1..LEFT_TERMS {
                scale[p] = scale[p - 1] * ratio;
            }
            scale
        })
        .collect();
    (0..n + EXTRA_TERMS + 1)
        .into_par_iter()
        .map(|m| {
            let mut sums: Vec<LeftSeries> = Vec::with_capacity(centre.len());
            for (b, bucket) in moments.iter().enumerate() {
                let mut sum = match b.checked_sub(1) {
                    Some(before) => std::array::from_fn(|p| scales[before][p] * sums[before][p]),
                    None => [0.0; LEFT_TERMS],
                };
                if let Some(row) = bucket.get(m) {
                    for (moment, column) in row.iter().zip(&coefficients) {
                        (sum.iter_mut().zip(column)).for_each(|(s, c)| *s += c * moment);
                    }
                }
                sums.push(sum);
            }
            sums
        })
        .collect()
}

/// (-δ)^i / i! for i < O, from `reciprocals` (`reciprocals::<O>`): a
/// product per term, where a division per term would cost a token's
/// moments as much as all their products.
pub(super) fn series_in_offset<const O: usize>(delta: f64, reciprocals: &[f64; O]) -> [f64; O] {
    let mut terms = [1.0; O];
    for i in 1..O {
        terms[i] = terms[i - 1] * -delta * reciprocals[i];
    }
    terms
}

/// Σ_k κ_(j,e)(c_k) c_k^set e^(-(j + 1) a c_k) for one weight a, as
/// [set][j][e] (e up to `extra`): the sums that a bucket's table gives
/// at one offset, from the nodes themselves, for a bucket of few offsets.
pub(super) fn sums_at_weight(
    a: f64,
    c: &[f64],
    kernels: &[&[f64]],
    n: usize,
    extra: usize,
    sets: usize,
) -> Vec<f64> {
    let width = EXTRA_TERMS + 1;
    let mut sums = vec![0.0; sets * n * width];
    for (kernel, &ck) in kernels.iter().zip(c) {
        let x = a * ck;
        if x > NEGLIGIBLE {
            break;
        }
        let decay = (-x).exp();
        let mut weight = 1.0;
        for j in 0..n {
            weight *= decay;
            for set in 0..sets {
                let w = if set == 1 { weight * ck } else { weight };
                let row = &mut sums[(set * n + j) * width..][..=extra];
                (row.iter_mut().zip(&kernel[j * width..])).for_each(|(s, k)| *s += w * k);
            }
        }
    }
    sums
}

/// δ^i for i < O.
pub(super) fn powers_of_offset<const O: usize>(delta: f64) -> [f64; O] {
    let mut powers = [1.0; O];
    for i in 1..O {
        powers[i] = powers[i - 1] * delta;
    }
    powers
}

/// 1 / i for 0 < i < O (entry 0 unused).
pub(super) fn reciprocals<const O: usize>() -> [f64; O] {
    std::array::from_fn(|i| if i == 0 { 1.0 } else { 1.0 / i as f64 })
}
