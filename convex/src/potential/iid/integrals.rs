//! The selection integrals of `docs/DESIGN.md` §5, by the trapezoidal rule
//! in u = ln c (module `nodes`).
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
//! Below `BUCKETED_FROM` tokens the sums over tokens run token by token on
//! the calling thread; above, through buckets of theta (module `buckets`)
//! on rayon's pool. Either way the tokens at theta = 0 are one token.

use super::buckets::{Buckets, Decays};
use crate::newton::Evaluation;
use crate::potential::nodes::{NEGLIGIBLE, Nodes, STEP, left_tail, nodes};
use crate::workspace::Workspace;
use mdsd_core::powi_count;

use crate::numeric::{SQUARING_FROM, small_expm1, sum_where};
use crate::thresholds::BUCKETED_FROM;

/// Terms of the Taylor series of e^(-x) below x = a c = SQUARING_FROM
/// (remainder below x^TERMS / TERMS! < 1e-23), summed over nodes once as
/// moments; above it, e^(-x) comes from three exponentials and repeated
/// squaring.
const TERMS: usize = 9;
/// Past this, e^(-x) underflows.
const UNDERFLOW: f64 = 745.0;
/// Up to this many drafts, `x^n - base^n` is summed as a geometric series;
/// past it, computed in O(1) from `expm1` and `ln1p`.
const GEOMETRIC_DRAFTS: usize = 16;

/// The selectable tokens of one side (outer or inner) of the problem: the
/// potential of selecting one draft index by softmax over its token's
/// weight. Its Newton direction comes from module `hessian`.
pub(crate) struct Selectable<'a> {
    pub q: &'a [f64],
    /// Draft mass of tokens drafted but never selected.
    pub base: f64,
    pub n: usize,
}

/// `ln(x / c_0)` for the values x of a c where a token's nodes change
/// hands: from its series to its body (`SQUARING_FROM`), and past the last term
/// each pass needs (`UNDERFLOW`, `NEGLIGIBLE`), so that each token finds
/// its nodes from theta alone, without a logarithm or a test per node.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeLogs {
    series: f64,
    underflow: f64,
    negligible: f64,
}

impl NodeLogs {
    pub(super) fn new(c: &[f64]) -> Self {
        let from = |x: f64| (x / c[0]).ln();
        Self {
            series: from(SQUARING_FROM),
            underflow: from(UNDERFLOW),
            negligible: from(NEGLIGIBLE),
        }
    }
}

/// A token of a token-by-token evaluation: its weight a = e^theta, its
/// body (the nodes from the first with a c >= SQUARING_FROM, before which it is
/// in the series, up to a c = UNDERFLOW for phi and a c = NEGLIGIBLE for
/// r), and e^(-a c) at the body's first three nodes, which start its
/// squaring chains (c_(k+3) = 2 c_k, so e^(-a c_(k+3)) = (e^(-a c_k))²):
/// computed once, not once per pass.
#[derive(Debug, Clone, Copy)]
pub(super) struct WeightedToken {
    pub(super) a: f64,
    end: usize,
    underflow: usize,
    negligible: usize,
    head: [f64; 3],
}

impl WeightedToken {
    pub(super) fn new(theta: f64, c: &[f64], logs: NodeLogs) -> Self {
        let a = theta.exp();
        // Node k sits at ln(c_k / c_0) = k STEP up to rounding, which only
        // moves a boundary term at the limits (e^-60 of the integral, or
        // an underflow), and at SQUARING_FROM where both sides are exact.
        // Node counts, ceil'd or floor'd by truncation (`f64::ceil` and
        // `f64::floor` are libm calls on baseline x86-64, three a token on
        // the hot path of the `convex_grid` benchmark): the same on counts
        // >= 0, and below, `as usize` saturates to 0 as a clamp at 0 would.
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
    /// the previous node. Whole triples of nodes, then the rest, so that
    /// the loop over triples needs no test of a chunk's length.
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

    /// `Σ_k kernel_k e^(-a c_k)` over the nodes up to NEGLIGIBLE, the
    /// series part from the kernel's `moments`.
    pub(super) fn smooth(&self, kernel: &[f64], moments: &[[f64; TERMS]]) -> f64 {
        series(self.a, &moments[self.end]) + self.body_dot(kernel)
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
/// extension, where w grows like c^`growth`), so that `Σ_(k<K) w_k e^(-a
/// c_k) = Σ_j (-a)^j M[K][j]` for tokens whose first K nodes are in the
/// series.
pub(super) fn moments(w: &[f64], c: &[f64], growth: i32) -> Vec<[f64; TERMS]> {
    let mut table = vec![[0.0; TERMS]; c.len() + 1];
    let mut factorial = 1.0;
    for (j, entry) in table[0].iter_mut().enumerate() {
        if j > 0 {
            factorial *= j as f64;
        }
        let shrink = (-((j as i32 + growth) as f64) * STEP).exp();
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

/// `Σ_y w_y e^(-a_y c_k)` at every node, or `Σ_y w_y (e^(-a_y c_k) - 1)`
/// when `minus_one`, token by token: nodes past a token's series end
/// directly, those before it through the token's moments w a^j, bucketed
/// by series end (node k gets every bucket above k: Σ_j (-c_k)^j / j! Σ w
/// a^j, from j = 1 when `minus_one`, free of cancellation there). On the
/// calling thread, as all of the token-by-token evaluation: it serves
/// programs below `BUCKETED_FROM` tokens, which run outside rayon's pool
/// (`PARALLEL_FROM`).
pub(super) fn transform_by_token(
    tokens: &[WeightedToken],
    w: impl Fn(usize) -> f64,
    c: &[f64],
    minus_one: bool,
) -> Vec<f64> {
    let k_count = c.len();
    let mut sums = vec![0.0; k_count];
    let mut buckets = vec![[0.0; TERMS]; k_count + 1];
    // With `minus_one`, -w on every node of a token's body, from its end.
    let mut body_from = vec![0.0; k_count + 1];
    for (y, token) in tokens.iter().enumerate() {
        let wy = w(y);
        let mut power = wy;
        for entry in buckets[token.end].iter_mut() {
            *entry += power;
            power *= token.a;
        }
        token.body_add(wy, &mut sums);
        body_from[token.end] += wy;
    }
    let first_term = usize::from(minus_one);
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
            if j >= first_term {
                sums[k] += term * moment;
            }
        }
    }
    if minus_one {
        let mut in_body = 0.0;
        for (sum, w) in sums.iter_mut().zip(&body_from) {
            in_body += w;
            *sum -= in_body;
        }
    }
    sums
}

/// r token by token: `smooth` of the kernel, which grows like c at the
/// rule's left end.
fn marginal_by_token(
    side: &Selectable,
    tokens: &[WeightedToken],
    c: &[f64],
    kernel: &[f64],
) -> Vec<f64> {
    let scale = side.n as f64;
    let kernel_moments = moments(kernel, c, 1);
    side.q
        .iter()
        .zip(tokens)
        .map(|(&qy, token)| scale * qy * token.a * token.smooth(kernel, &kernel_moments))
        .collect()
}

/// How an evaluation sums over tokens.
enum Grouping {
    /// By buckets of theta, with their decays at the evaluation's nodes.
    Buckets(Buckets, Decays),
    /// One by one.
    Tokens(Vec<WeightedToken>),
}

/// `evaluate` with the tokens at theta = 0 as one token: by buckets of
/// theta from `BUCKETED_FROM` tokens, token by token below. Tokens of one
/// weight enter phi only through their total q, and each gets r_y = q_y
/// g(0) from the same integral, so this is exact. Zero is a bound of both
/// programs, where most of a solved program's tokens sit on real rows
/// (most of a solved inner program's, and of the starts of both programs
/// at full vocabulary), and where the coarsest grouped program starts:
/// the evaluation then costs per token away from 0.
pub(crate) fn evaluate_lumping_zero(
    side: &Selectable,
    theta: &[f64],
    workspace: &mut Workspace,
) -> Evaluation<Nodes> {
    let grouped = theta.len() >= BUCKETED_FROM;
    let at_zero = theta.iter().filter(|&&t| t == 0.0).count();
    if at_zero < 2 {
        return evaluate(side, theta, grouped, workspace);
    }
    let kept = theta.len() - at_zero;
    // Without a branch per token (whether theta is 0 follows no pattern
    // along the vocabulary): every token is written at `next`, which moves
    // on only past the kept ones, so that the last slot, kept, ends up
    // free for the lumped token.
    let (mut q, mut kept_theta) = (
        workspace.filled(kept + 1, 0.0),
        workspace.filled(kept + 1, 0.0),
    );
    let mut next = 0;
    for (&qy, &t) in side.q.iter().zip(theta) {
        q[next] = qy;
        kept_theta[next] = t;
        next += usize::from(t != 0.0);
    }
    // Summed by chunks (`sum_where`): real rows hold q of 1e-17 and below
    // by the ten thousand, which one running sum near 1 would drop.
    let q_zero = sum_where(side.q, theta, |t| t == 0.0);
    q[kept] = q_zero;
    kept_theta[kept] = 0.0;
    let lumped_side = Selectable { q: &q, ..*side };
    let Evaluation {
        potential,
        marginal: lumped,
        hessian,
    } = evaluate(&lumped_side, &kept_theta, grouped, workspace);
    let per_q = if q_zero > 0.0 {
        lumped[kept] / q_zero
    } else {
        0.0
    };
    next = 0;
    let mut marginal = workspace.take(theta.len());
    marginal.extend(side.q.iter().zip(theta).map(|(&qy, &t)| {
        let (zero, other) = (t == 0.0, lumped[next]);
        next += usize::from(!zero);
        if zero { qy * per_q } else { other }
    }));
    for vector in [q, kept_theta, lumped] {
        workspace.give(vector);
    }
    Evaluation {
        potential,
        marginal,
        hessian,
    }
}

/// The potential and r at the weights a = e^theta, with node sums by
/// bucket (`grouped`) or token by token.
fn evaluate(
    side: &Selectable,
    theta: &[f64],
    grouped: bool,
    workspace: &mut Workspace,
) -> Evaluation<Nodes> {
    let c = nodes(theta, side.n);
    let grouping = if grouped {
        let buckets = Buckets::new(side.q, theta, workspace);
        let decays = buckets.decays(&c);
        Grouping::Buckets(buckets, decays)
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
        Grouping::Buckets(buckets, decays) => buckets.drafted(&c, decays),
        Grouping::Tokens(tokens) => transform_by_token(tokens, |y| side.q[y], &c, false),
    };
    let n = side.n;
    let base = side.base;
    let phi: Vec<f64> = drafted.iter().map(|d| base + d).collect();
    // phi^(n-1) at each node, times c_k (the Jacobian of c = e^u) and h.
    let kernel: Vec<f64> = phi
        .iter()
        .zip(&c)
        .map(|(f, ck)| STEP * ck * powi_count(*f, n - 1))
        .collect();
    let marginal = match &grouping {
        Grouping::Buckets(buckets, decays) => {
            buckets.marginal(side.q, side.n, &c, &kernel, decays, workspace)
        }
        Grouping::Tokens(tokens) => marginal_by_token(side, tokens, &c, &kernel),
    };

    // P(S > 0) = (base + Σ q)^n - base^n; phi^n - base^n as a difference of
    // powers from phi - base, summed directly (no cancellation).
    let total = base + side.q.iter().sum::<f64>();
    // x^n - base^n = d Σ_j x^j base^(n-1-j), d = x - base >= 0, a sum of
    // positive terms, for up to GEOMETRIC_DRAFTS drafts: the powers of base
    // once per evaluation, those of x by one multiplication each (`powi`
    // is a libgcc call on baseline x86-64: n of them a node show in the
    // `convex_grid` benchmark at top-1000 drafts). For more drafts, in O(1)
    // whatever n: x^n (1 - (base / x)^n) = -x^n expm1(n ln1p(-d / x)), as
    // free of cancellation.
    let base_powers: Vec<f64> = if n <= GEOMETRIC_DRAFTS {
        (0..n).rev().map(|j| powi_count(base, j)).collect()
    } else {
        Vec::new()
    };
    let powers_diff = |x: f64, d: f64| -> f64 {
        if n > GEOMETRIC_DRAFTS {
            return if x > 0.0 {
                -powi_count(x, n) * (n as f64 * (-d / x).ln_1p()).exp_m1()
            } else {
                0.0
            };
        }
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
    let potential = STEP * (integrand.iter().sum::<f64>() + integrand[0] * left_tail(STEP));
    if let Grouping::Buckets(buckets, _) = grouping {
        workspace.give(buckets.tokens.delta);
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
                let side = Selectable { q: &q, base, n };
                let eval = evaluate(&side, &theta, grouped, &mut Workspace::new());
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
                let tokens = evaluate(&side, &theta, false, &mut Workspace::new());
                let lumped = evaluate_lumping_zero(&side, &theta, &mut Workspace::new());
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
            let tokens = evaluate(&side, &theta, false, &mut Workspace::new());
            let grouped = evaluate(&side, &theta, true, &mut Workspace::new());
            assert!((tokens.potential - grouped.potential).abs() <= 1e-13);
            for (x, y) in tokens.marginal.iter().zip(&grouped.marginal) {
                assert!((x - y).abs() <= 1e-13 * x, "n = {n}: {x} vs {y}");
            }
        }
    }
}
