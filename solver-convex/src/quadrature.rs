//! The selection integrals of DESIGN §5, by the trapezoidal rule in u = ln c.
//!
//! For n i.i.d. drafts, a set of selectable tokens with draft probabilities
//! q_y and weights a_y = e^(theta_y), and `base` = the draft mass of tokens
//! that may be drafted but are never selected, with
//! `phi(c) = base + Σ_y q_y e^(-a_y c)`:
//!
//! * the marginal of the selected token (softmax of theta over the
//!   selectable drafts) is
//!   `r_y = n q_y a_y ∫_0^∞ e^(-a_y c) phi(c)^(n-1) dc`;
//! * the potential `E[1{S > 0} log S]`, `S` the sum of the weights of the
//!   selectable drafts, is (Frullani)
//!   `∫_0^∞ (m e^(-c) - (phi(c)^n - base^n)) / c dc`, `m = P(S > 0)`;
//!   its gradient in theta is r.
//!
//! With c = e^u both integrands are analytic in the strip |Im u| < π/2 and
//! decay like e^u as u -> -∞ and double-exponentially as u -> +∞, so the
//! bi-infinite trapezoidal rule of step h has error about e^(-π²/h) (5e-15
//! relative at h = 0.3; Trefethen & Weideman, SIAM Review 2014, §5). The
//! rule runs from c_lo = 1e-9 / max a, where each integrand is its leading
//! term C e^u to a relative 1e-9 · (a c) <= 1e-18, whose infinite left sum
//! is added in closed form, to c_hi = 60 / min a, past which every term is
//! below e^-60 of its integral.

use rayon::prelude::*;

use crate::newton::{Evaluation, Potential};
use crate::{laplacian, scratch};

/// Step of the rule in u = ln c: a third of ln 2, so that c doubles every
/// three nodes and e^(-a c) squares (error e^(-π²/h), about 3e-19).
pub(crate) const STEP: f64 = std::f64::consts::LN_2 / 3.0;
/// Below x = a c = SERIES, e^(-x) comes from its Taylor series in x
/// (remainder below x^TERMS / TERMS! < 1e-23), summed over nodes once as
/// moments; above it, from three exponentials and repeated squaring.
/// Squaring doubles the error of the exponent, so starting at x >= 1/64
/// the relative error at x is at most 64 x · 1e-16 (6e-15 at x = 1, where
/// the terms matter most).
const SERIES: f64 = 1.0 / 64.0;
const TERMS: usize = 9;
/// Past this, e^(-x) underflows.
const UNDERFLOW: f64 = 745.0;
/// c_lo * max a.
const HEAD: f64 = 1e-9;
/// c_hi * min a.
const HORIZON: f64 = 60.0;
/// Terms with a c above this are below e^-60 of the token's own integral.
const NEGLIGIBLE: f64 = 60.0;
/// Tokens per parallel task.
const CHUNK: usize = 4096;
/// Programs with at least this many tokens are evaluated through buckets
/// of theta (`Buckets`), in parallel: their node sums then cost per
/// bucket, not per token. Below it tokens rarely share buckets and go one
/// by one, on the calling thread.
pub(crate) const GROUPED: usize = 8192;
/// Width of a bucket in theta: tokens sit within 1/64 of the centre, so
/// |δ| = |a / a_b - 1| <= e^(1/64) - 1 < 0.0158.
const BUCKET: f64 = 1.0 / 32.0;
/// Taylor terms in δ of e^(-a c) = e^(-x) e^(-x δ), x = a_b c: the
/// remainder is below q (x |δ|)^ORDER / ORDER! e^(-x (1 - |δ|)), at most
/// q |δ|^ORDER (ORDER / e)^ORDER / ORDER! < 1e-17 q over all x, and a
/// relative 1e-17 of r_y (the kernel weighs nodes by e^(-x)).
const ORDER: usize = 9;

/// The selectable tokens of one side (outer or inner) of the problem: the
/// potential of selecting one draft index by softmax over its token's
/// weight. Its Newton direction comes from module `laplacian`.
pub(crate) struct Selectable<'a> {
    pub q: &'a [f64],
    /// Draft mass of tokens drafted but never selected.
    pub base: f64,
    pub n: usize,
}

impl Potential for Selectable<'_> {
    type Hessian = Nodes;

    fn evaluate(&self, theta: &[f64]) -> Evaluation<Nodes> {
        evaluate_lumping_zero(self, theta)
    }

    /// Token by token below `GROUPED` tokens, through buckets of theta
    /// above (module `laplacian`).
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Nodes>,
        gradient: &[f64],
        held: &[bool],
    ) -> Vec<f64> {
        let grouped = self.q.len() >= GROUPED;
        let (nodes, marginal) = (&at.hessian, &at.marginal);
        laplacian::direction(self, theta, nodes, marginal, gradient, held, grouped)
    }

    /// r is a softmax of the weights among the drafts: shifting every
    /// theta of the program by t selects the same draft.
    fn flat_along_ones(&self) -> bool {
        true
    }
}

/// The quadrature nodes c_k of an evaluation and phi(c_k), from which the
/// Hessian is built.
pub(crate) struct Nodes {
    pub c: Vec<f64>,
    pub phi: Vec<f64>,
}

/// Nodes c_k = c_lo e^(k h) covering [c_lo, c_hi], with c_(k+3) = 2 c_k
/// exactly.
fn nodes(theta: &[f64]) -> Vec<f64> {
    let (lo, hi) = theta
        .iter()
        .fold((0.0f64, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let (lo, hi) = (lo.exp(), hi.exp());
    let c_lo = HEAD / hi;
    let count = ((HORIZON / lo / c_lo).ln() / STEP).ceil() as usize + 1;
    let mut c: Vec<f64> = (0..3.min(count))
        .map(|k| c_lo * (k as f64 * STEP).exp())
        .collect();
    for k in 3..count {
        c.push(2.0 * c[k - 3]);
    }
    c
}

/// `ln(x / c_0)` for the values x of a c where a token's nodes change
/// hands: from its series to its body (`SERIES`), and past the last term
/// each pass needs (`UNDERFLOW`, `NEGLIGIBLE`), so that each token finds
/// its nodes from theta alone, without a logarithm or a test per node.
#[derive(Debug, Clone, Copy)]
struct NodeLogs {
    series: f64,
    underflow: f64,
    negligible: f64,
}

impl NodeLogs {
    fn new(c: &[f64]) -> Self {
        let from = |x: f64| (x / c[0]).ln();
        Self {
            series: from(SERIES),
            underflow: from(UNDERFLOW),
            negligible: from(NEGLIGIBLE),
        }
    }
}

/// A token of a token-by-token evaluation: its weight a = e^theta, its
/// body (the nodes from the first with a c >= SERIES, before which it is
/// in the series, up to a c = UNDERFLOW for phi and a c = NEGLIGIBLE for
/// r), and e^(-a c) at the body's first three nodes, which start its
/// squaring chains (c_(k+3) = 2 c_k, so e^(-a c_(k+3)) = (e^(-a c_k))²):
/// computed once, not once per pass.
#[derive(Debug, Clone, Copy)]
struct WeightedToken {
    a: f64,
    end: usize,
    underflow: usize,
    negligible: usize,
    head: [f64; 3],
}

impl WeightedToken {
    fn new(theta: f64, c: &[f64], logs: NodeLogs) -> Self {
        let a = theta.exp();
        // Node k sits at ln(c_k / c_0) = k STEP up to rounding, which only
        // moves a boundary term at the limits (e^-60 of the integral, or
        // an underflow), and at SERIES where both sides are exact.
        // Node counts, ceil'd or floor'd by truncation (`f64::ceil` and
        // `f64::floor` are libm calls on baseline x86-64, three a token):
        // the same on counts >= 0, and below, `as usize` saturates to 0 as
        // the clamps at 0 did.
        let count = |log: f64| (log - theta) / STEP;
        let to_series = count(logs.series);
        let below = to_series as usize;
        let end = below
            .saturating_add(usize::from((below as f64) < to_series))
            .min(c.len());
        let past = |log: f64| (count(log) as usize).saturating_add(1).clamp(end, c.len());
        // The body's first nodes sit at a c in [1/64, 1/32), up to the
        // rounding of `end`: a Taylor polynomial there, not a libm `exp`.
        let head = std::array::from_fn(|i| {
            c.get(end + i).map_or(0.0, |&ck| match a * ck {
                x if x <= 1.0 / 32.0 => 1.0 + small_expm1(-x),
                x => (-x).exp(),
            })
        });
        Self {
            a,
            end,
            underflow: past(logs.underflow),
            negligible: past(logs.negligible),
            head,
        }
    }

    /// `Σ_k v_k e^(-a c_k)` over the body up to NEGLIGIBLE: one sum per
    /// squaring chain, so that neither the squares nor the sums wait on
    /// the previous node. Whole triples of nodes, then the rest: with
    /// chunks that may be short, a test per node took a third of the loop.
    fn body_dot(&self, v: &[f64]) -> f64 {
        let (mut e, mut sums) = (self.head, [0.0; 3]);
        let mut body = v[self.end..self.negligible].chunks_exact(3);
        for values in &mut body {
            for i in 0..3 {
                sums[i] += values[i] * e[i];
                e[i] *= e[i];
            }
        }
        for ((sum, &v), e) in sums.iter_mut().zip(body.remainder()).zip(e) {
            *sum += v * e;
        }
        sums.iter().sum()
    }

    /// `sums_k += weight e^(-a c_k)` over the body up to UNDERFLOW.
    fn body_add(&self, weight: f64, sums: &mut [f64]) {
        let mut e = self.head;
        let mut body = sums[self.end..self.underflow].chunks_exact_mut(3);
        for sums in &mut body {
            for i in 0..3 {
                sums[i] += weight * e[i];
                e[i] *= e[i];
            }
        }
        for (sum, e) in body.into_remainder().iter_mut().zip(e) {
            *sum += weight * e;
        }
    }
}

/// `M[K][j] = Σ_(k<K) w_k c_k^j / j!` (plus the rule's infinite left
/// extension, where w ∝ c), so that `Σ_(k<K) w_k e^(-a c_k) = Σ_j (-a)^j M[K][j]`
/// for tokens whose first K nodes are in the series.
fn moments(w: &[f64], c: &[f64]) -> Vec<[f64; TERMS]> {
    let mut table = vec![[0.0; TERMS]; c.len() + 1];
    let mut factorial = 1.0;
    for (j, entry) in table[0].iter_mut().enumerate() {
        if j > 0 {
            factorial *= j as f64;
        }
        let shrink = (-((j + 1) as f64) * STEP).exp();
        *entry = w[0] * c[0].powi(j as i32) / factorial * shrink / (1.0 - shrink);
    }
    for k in 0..c.len() {
        let mut power = w[k];
        let mut row = table[k];
        for (j, entry) in row.iter_mut().enumerate() {
            if j > 0 {
                power *= c[k] / j as f64;
            }
            *entry += power;
        }
        table[k + 1] = row;
    }
    table
}

/// `Σ_j (-a)^j moment_j`.
fn series(a: f64, moment: &[f64; TERMS]) -> f64 {
    moment.iter().rev().fold(0.0, |acc, m| acc * -a + m)
}

/// `Σ_{k>=1} f(u_lo - k h)` for f ∝ e^u left of the first node, in units of
/// f(u_lo): the infinite left end of the bi-infinite rule.
fn left_tail() -> f64 {
    let e = (-STEP).exp();
    e / (1.0 - e)
}

/// phi(c_k) - base, summed over tokens: nodes past a token's series end
/// directly, those before it through the token's moments q a^j, bucketed
/// by series end (node k gets every bucket above k: Σ_j (-c_k)^j / j!
/// Σ q a^j). On the calling thread, as all of the token-by-token
/// evaluation: it serves programs below `GROUPED` tokens, where a
/// parallel call from outside rayon's pool would hand the work to a worker
/// and wait for it (measured at top 1000: 0.1-0.25 ms a solve, a fifth of
/// it).
fn drafted_by_token(side: &Selectable, tokens: &[WeightedToken], c: &[f64]) -> Vec<f64> {
    let k_count = c.len();
    let mut drafted = vec![0.0; k_count];
    let mut buckets = vec![[0.0; TERMS]; k_count + 1];
    for (&qy, token) in side.q.iter().zip(tokens) {
        let mut power = qy;
        for entry in buckets[token.end].iter_mut() {
            *entry += power;
            power *= token.a;
        }
        token.body_add(qy, &mut drafted);
    }
    let mut above = [0.0; TERMS];
    for k in (0..k_count).rev() {
        above
            .iter_mut()
            .zip(&buckets[k + 1])
            .for_each(|(x, y)| *x += y);
        let mut term = 1.0;
        for (j, moment) in above.iter().enumerate() {
            if j > 0 {
                term *= -c[k] / j as f64;
            }
            drafted[k] += term * moment;
        }
    }
    drafted
}

/// r token by token: the series part through node moments of the
/// kernel, the rest directly.
fn marginal_by_token(
    side: &Selectable,
    tokens: &[WeightedToken],
    c: &[f64],
    kernel: &[f64],
) -> Vec<f64> {
    let scale = side.n as f64;
    let kernel_moments = moments(kernel, c);
    side.q
        .iter()
        .zip(tokens)
        .map(|(&qy, token)| {
            let sum = series(token.a, &kernel_moments[token.end]) + token.body_dot(kernel);
            scale * qy * token.a * sum
        })
        .collect()
}

/// How an evaluation sums over tokens.
enum Grouping {
    Buckets(Buckets),
    /// One by one.
    Tokens(Vec<WeightedToken>),
}

/// e^t - 1 for |t| <= 1/32 by its Taylor polynomial to t^8 (remainder
/// below |t|^8 / 9! < 3e-18 of it; `exp_m1` is a libm call per token).
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

/// Tokens grouped by theta into buckets of width `BUCKET` around centres
/// a_b, each token with its offset δ = a / a_b - 1: the node sums of both
/// the evaluation and the Newton direction cost per bucket, not per token,
/// through Taylor series in δ.
pub(crate) struct Assignment {
    /// Per token: its slot and δ.
    pub slot: Vec<u32>,
    pub delta: Vec<f64>,
    /// Per slot: a_b.
    pub centre: Vec<f64>,
}

impl Assignment {
    pub fn new(theta: &[f64]) -> Self {
        // floor(t / BUCKET) by truncation of a positive number (|theta| <=
        // 40 < OFFSET BUCKET): `f64::floor` is a libm call on baseline x86-64.
        const OFFSET: f64 = 4096.0;
        let number = |t: f64| (t / BUCKET + OFFSET) as i64 - OFFSET as i64;
        let (first, last) = theta.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| {
            (lo.min(number(t)), hi.max(number(t)))
        });
        let slots = (last - first + 1).max(0) as usize;
        let centre_theta = |slot: usize| (first + slot as i64) as f64 * BUCKET + 0.5 * BUCKET;
        let v = theta.len();
        let (mut slot, mut delta) = (vec![0u32; v], scratch::filled(v, 0.0));
        slot.par_chunks_mut(CHUNK)
            .zip(delta.par_chunks_mut(CHUNK))
            .zip(theta.par_chunks(CHUNK))
            .for_each(|((slot, delta), theta)| {
                for ((s, d), &t) in slot.iter_mut().zip(delta.iter_mut()).zip(theta) {
                    let k = (number(t) - first) as usize;
                    *s = k as u32;
                    *d = small_expm1(t - centre_theta(k));
                }
            });
        let centre = (0..slots).map(|s| centre_theta(s).exp()).collect();
        Self {
            slot,
            delta,
            centre,
        }
    }

    /// `Σ_(y in slot) w_y δ_y^j` for j < J, per slot.
    pub fn moments<const J: usize>(&self, w: impl Fn(usize) -> f64 + Sync) -> Vec<[f64; J]> {
        let slots = self.centre.len();
        (0..self.slot.len())
            .into_par_iter()
            .with_min_len(CHUNK)
            .fold(
                || vec![[0.0; J]; slots],
                |mut sums, y| {
                    let mut power = w(y);
                    for entry in sums[self.slot[y] as usize].iter_mut() {
                        *entry += power;
                        power *= self.delta[y];
                    }
                    sums
                },
            )
            .reduce(
                || vec![[0.0; J]; slots],
                |mut sums, other| {
                    for (x, y) in sums.iter_mut().zip(&other) {
                        x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
                    }
                    sums
                },
            )
    }
}

/// The evaluation's buckets: e^(-a c) = e^(-x) Σ_j (-x δ)^j / j! (x =
/// a_b c), so phi needs per bucket only the moments Σ q δ^j, and r_y is a
/// polynomial in δ_y whose coefficients are node sums per bucket. At full
/// vocabulary (10^5 tokens in a few hundred buckets) an evaluation then
/// costs a few multiplications per token instead of a few exponentials
/// and a pass over the nodes.
struct Buckets {
    tokens: Assignment,
    /// Per slot: Σ q δ^j (-1)^j / j! (all zero for empty slots).
    moments: Vec<[f64; ORDER]>,
}

impl Buckets {
    fn new(q: &[f64], theta: &[f64]) -> Self {
        let tokens = Assignment::new(theta);
        let mut moments = tokens.moments::<ORDER>(|y| q[y]);
        for row in &mut moments {
            let mut factor = 1.0;
            for (j, entry) in row.iter_mut().enumerate() {
                if j > 0 {
                    factor *= -1.0 / j as f64;
                }
                *entry *= factor;
            }
        }
        Self { tokens, moments }
    }

    /// The occupied slots, for the per-bucket node sums.
    fn occupied(&self) -> Vec<usize> {
        (0..self.moments.len())
            .filter(|&s| self.moments[s][0] > 0.0)
            .collect()
    }

    /// phi(c_k) - base = Σ_b e^(-x) Σ_j x^j moments_(b,j), x = a_b c_k,
    /// over nodes with x <= NEGLIGIBLE (the rest is below e^-60 q).
    fn drafted(&self, c: &[f64]) -> Vec<f64> {
        self.occupied()
            .par_iter()
            .fold(
                || vec![0.0; c.len()],
                |mut sums, &s| {
                    let coefficients = &self.moments[s];
                    for (sum, &ck) in sums.iter_mut().zip(c) {
                        let x = self.tokens.centre[s] * ck;
                        if x > NEGLIGIBLE {
                            break;
                        }
                        let polynomial = coefficients.iter().rev().fold(0.0, |acc, m| acc * x + m);
                        *sum += (-x).exp() * polynomial;
                    }
                    sums
                },
            )
            .reduce(
                || vec![0.0; c.len()],
                |mut sums, other| {
                    sums.iter_mut().zip(&other).for_each(|(x, y)| *x += y);
                    sums
                },
            )
    }

    /// r_y = n q_y a_y Σ_j δ_y^j T_(b,j) with T_(b,j) = (-1)^j / j! Σ_k
    /// kernel_k x^j e^(-x) (plus the rule's infinite left end, where the
    /// kernel is ∝ c and e^(-x) = 1).
    fn marginal(&self, side: &Selectable, c: &[f64], kernel: &[f64]) -> Vec<f64> {
        let occupied = self.occupied();
        let tables: Vec<[f64; ORDER]> = occupied
            .par_iter()
            .map(|&s| {
                let centre = self.tokens.centre[s];
                let mut table = [0.0; ORDER];
                let x0 = centre * c[0];
                let mut power = kernel[0];
                for (j, entry) in table.iter_mut().enumerate() {
                    let shrink = (-((j + 1) as f64) * STEP).exp();
                    *entry = power * shrink / (1.0 - shrink);
                    power *= x0;
                }
                for (k, &ck) in c.iter().enumerate() {
                    let x = centre * ck;
                    if x > NEGLIGIBLE {
                        break;
                    }
                    let mut power = kernel[k] * (-x).exp();
                    for entry in table.iter_mut() {
                        *entry += power;
                        power *= x;
                    }
                }
                let mut factor = 1.0;
                for (j, entry) in table.iter_mut().enumerate() {
                    if j > 0 {
                        factor *= -1.0 / j as f64;
                    }
                    *entry *= factor;
                }
                table
            })
            .collect();
        let mut index = vec![usize::MAX; self.moments.len()];
        occupied.iter().enumerate().for_each(|(i, &s)| index[s] = i);
        let scale = side.n as f64;
        let tokens = &self.tokens;
        let mut marginal = scratch::take(side.q.len());
        side.q
            .par_iter()
            .zip(tokens.slot.par_iter().zip(tokens.delta.par_iter()))
            .with_min_len(CHUNK)
            .map(|(&qy, (&s, &d))| {
                let table = &tables[index[s as usize]];
                let weight = scale * qy * tokens.centre[s as usize] * (1.0 + d);
                weight * table.iter().rev().fold(0.0, |acc, t| acc * d + t)
            })
            .collect_into_vec(&mut marginal);
        marginal
    }
}

/// `evaluate` with the tokens at theta = 0 as one token: by buckets of
/// theta from `GROUPED` tokens off 0, token by token below. Tokens of one
/// weight enter phi only through their total q, and each gets r_y = q_y
/// g(0) from the same integral, so this is exact. Zero is a bound of both
/// programs, where most of a solved program's tokens sit (at top 1000
/// drafts and n = 8, nine in ten of the inner program's; at full
/// vocabulary, on real rows, every token of the outer program's start and
/// half of the inner's), and where the coarsest grouped program starts:
/// the evaluation then costs per token away from 0.
fn evaluate_lumping_zero(side: &Selectable, theta: &[f64]) -> Evaluation<Nodes> {
    let at_zero = theta.iter().filter(|&&t| t == 0.0).count();
    if at_zero < 2 {
        return evaluate(side, theta, theta.len() >= GROUPED);
    }
    let kept = theta.len() - at_zero;
    // Without a branch per token (whether theta is 0 follows no pattern
    // along the vocabulary): every token is written at `next`, which moves
    // on only past the kept ones, so that the last slot, kept, ends up
    // free for the lumped token.
    let (mut q, mut kept_theta) = (
        scratch::filled(kept + 1, 0.0),
        scratch::filled(kept + 1, 0.0),
    );
    let mut next = 0;
    for (&qy, &t) in side.q.iter().zip(theta) {
        q[next] = qy;
        kept_theta[next] = t;
        next += usize::from(t != 0.0);
    }
    let q_zero = mass_at_zero(side.q, theta);
    q[kept] = q_zero;
    kept_theta[kept] = 0.0;
    let grouped = theta.len() >= GROUPED;
    let Evaluation {
        potential,
        marginal: lumped,
        hessian,
    } = evaluate(&Selectable { q: &q, ..*side }, &kept_theta, grouped);
    let per_q = if q_zero > 0.0 {
        lumped[kept] / q_zero
    } else {
        0.0
    };
    next = 0;
    let mut marginal = scratch::take(theta.len());
    marginal.extend(side.q.iter().zip(theta).map(|(&qy, &t)| {
        let (zero, other) = (t == 0.0, lumped[next]);
        next += usize::from(!zero);
        if zero { qy * per_q } else { other }
    }));
    [q, kept_theta, lumped].into_iter().for_each(scratch::give);
    Evaluation {
        potential,
        marginal,
        hessian,
    }
}

/// `Σ q_y` over the tokens at theta = 0, by blocks: summed one by one
/// into a total near 1, the q of 1e-17 and below that real rows hold by
/// the ten thousand would be lost (at full vocabulary, 1e-12 of r's total).
fn mass_at_zero(q: &[f64], theta: &[f64]) -> f64 {
    const BLOCK: usize = 256;
    q.chunks(BLOCK)
        .zip(theta.chunks(BLOCK))
        .map(|(q, theta)| {
            let mut lanes = [0.0; 4];
            for (i, (&qy, &t)) in q.iter().zip(theta).enumerate() {
                lanes[i % 4] += if t == 0.0 { qy } else { 0.0 };
            }
            lanes.iter().sum::<f64>()
        })
        .sum()
}

/// The potential and r at the weights a = e^theta, with node sums by
/// bucket (`grouped`) or token by token.
fn evaluate(side: &Selectable, theta: &[f64], grouped: bool) -> Evaluation<Nodes> {
    let c = nodes(theta);
    let grouping = if grouped {
        Grouping::Buckets(Buckets::new(side.q, theta))
    } else {
        let logs = NodeLogs::new(&c);
        Grouping::Tokens(
            theta
                .iter()
                .map(|&t| WeightedToken::new(t, &c, logs))
                .collect(),
        )
    };
    let drafted = match &grouping {
        Grouping::Buckets(buckets) => buckets.drafted(&c),
        Grouping::Tokens(tokens) => drafted_by_token(side, tokens, &c),
    };
    let n = side.n as i32;
    let base = side.base;
    let phi: Vec<f64> = drafted.iter().map(|d| base + d).collect();
    // phi^(n-1) at each node, times c_k (the Jacobian of c = e^u) and h.
    let kernel: Vec<f64> = phi
        .iter()
        .zip(&c)
        .map(|(f, ck)| STEP * ck * f.powi(n - 1))
        .collect();
    let marginal = match &grouping {
        Grouping::Buckets(buckets) => buckets.marginal(side, &c, &kernel),
        Grouping::Tokens(tokens) => marginal_by_token(side, tokens, &c, &kernel),
    };

    // P(S > 0) = (base + Σ q)^n - base^n; phi^n - base^n as a difference of
    // powers from phi - base, summed directly (no cancellation).
    let total = base + side.q.iter().sum::<f64>();
    // x^n - base^n = d Σ_j x^j base^(n-1-j), d = x - base; the powers of
    // base once per evaluation, those of x by one multiplication each
    // (`powi` is a libgcc call: n of them a node were a sixth of an
    // evaluation at top-1000 drafts).
    let base_powers: Vec<f64> = (0..n).rev().map(|j| base.powi(j)).collect();
    let powers_diff = |x: f64, d: f64| -> f64 {
        let mut power = 1.0;
        let terms = base_powers.iter().map(|b| {
            let term = power * b;
            power *= x;
            term
        });
        terms.sum::<f64>() * d
    };
    let m = powers_diff(total, total - base);
    let integrand: Vec<f64> = c
        .iter()
        .zip(&phi)
        .zip(&drafted)
        .map(|((&ck, &f), &d)| m * (-ck).exp() - powers_diff(f, d))
        .collect();
    let potential = STEP * (integrand.iter().sum::<f64>() + integrand[0] * left_tail());
    if let Grouping::Buckets(buckets) = grouping {
        scratch::give(buckets.tokens.delta);
    }
    Evaluation {
        potential,
        marginal,
        hessian: Nodes { c, phi },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact selection marginals and potential by enumerating ordered tuples.
    fn enumerate(q_sel: &[f64], a: &[f64], base: f64, n: usize) -> (f64, Vec<f64>) {
        // Outcomes: each selectable token, or one "unselectable" lump.
        let k = q_sel.len();
        let mut marginal = vec![0.0; k];
        let mut potential = 0.0;
        let mut index = vec![0usize; n];
        loop {
            let mut prob = 1.0;
            let mut s = 0.0;
            for &i in &index {
                if i < k {
                    prob *= q_sel[i];
                    s += a[i];
                } else {
                    prob *= base;
                }
            }
            if s > 0.0 {
                potential += prob * s.ln();
                for &i in &index {
                    if i < k {
                        marginal[i] += prob * a[i] / s;
                    }
                }
            }
            let mut pos = 0;
            loop {
                if pos == n {
                    return (potential, marginal);
                }
                index[pos] += 1;
                if index[pos] <= k {
                    break;
                }
                index[pos] = 0;
                pos += 1;
            }
        }
    }

    #[test]
    fn quadrature_matches_enumeration() {
        // Tokens 3-5 share a bucket of theta, token 2 sits far below.
        let q = [0.3, 0.1, 0.05, 0.25, 0.12, 0.08];
        let a: [f64; 6] = [1.0, 0.2, 3e-4, 0.7, 0.71, 0.69];
        let theta: Vec<f64> = a.iter().map(|a| a.ln()).collect();
        for (base, n) in [(0.3, 1), (0.3, 3), (0.0, 2), (0.0, 4), (0.3, 4)] {
            let total: f64 = q.iter().sum::<f64>() + base;
            let q: Vec<f64> = q.iter().map(|x| x / total).collect();
            let base = base / total;
            let (potential, marginal) = enumerate(&q, &a, base, n);
            for grouped in [false, true] {
                let eval = evaluate(&Selectable { q: &q, base, n }, &theta, grouped);
                assert!(
                    (eval.potential - potential).abs() <= 1e-14,
                    "n = {n}, grouped {grouped}: {} vs {potential}",
                    eval.potential
                );
                for (r, e) in eval.marginal.iter().zip(&marginal) {
                    assert!(
                        (r - e).abs() <= 1e-14 * e,
                        "n = {n}, grouped {grouped}: {r} vs {e}"
                    );
                }
            }
        }
    }

    /// Tokens at theta = 0 evaluated as one token give what they give one
    /// by one (r to 1e-14 relative), with and without undrafted mass, when
    /// some, most or all tokens are at 0.
    #[test]
    fn lumping_zero_matches_tokens() {
        let q: Vec<f64> = (1..=40).map(|i| (i % 7 + 1) as f64 / 170.0).collect();
        let total: f64 = q.iter().sum();
        for (share, n) in [(3, 2), (1, 4), (0, 8)] {
            let base = 1.0 - total;
            let theta: Vec<f64> = (0..q.len())
                .map(|i| {
                    if i % 4 < share {
                        0.0
                    } else {
                        0.3 * i as f64 - 6.0
                    }
                })
                .collect();
            for theta in [theta, vec![0.0; q.len()]] {
                let side = Selectable { q: &q, base, n };
                let tokens = evaluate(&side, &theta, false);
                let lumped = evaluate_lumping_zero(&side, &theta);
                assert!((tokens.potential - lumped.potential).abs() <= 1e-14);
                for (x, y) in tokens.marginal.iter().zip(&lumped.marginal) {
                    assert!((x - y).abs() <= 1e-14 * x, "n = {n}: {x} vs {y}");
                }
            }
        }
    }

    /// Many tokens per bucket, weights spanning e^-12 to e^12: the grouped
    /// evaluation reproduces the token-by-token one (r to 1e-13 relative).
    #[test]
    fn buckets_match_tokens() {
        let v = 20_000;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let weights: Vec<f64> = (0..v).map(|_| (-12.0 * uniform()).exp()).collect();
        let total: f64 = weights.iter().sum::<f64>() / 0.8;
        let q: Vec<f64> = weights.iter().map(|w| w / total).collect();
        let theta: Vec<f64> = (0..v).map(|_| 24.0 * uniform() - 12.0).collect();
        for (base, n) in [(0.2, 4), (0.0, 8)] {
            let side = Selectable { q: &q, base, n };
            let tokens = evaluate(&side, &theta, false);
            let grouped = evaluate(&side, &theta, true);
            assert!((tokens.potential - grouped.potential).abs() <= 1e-13);
            for (x, y) in tokens.marginal.iter().zip(&grouped.marginal) {
                assert!((x - y).abs() <= 1e-13 * x, "n = {n}: {x} vs {y}");
            }
        }
    }
}
