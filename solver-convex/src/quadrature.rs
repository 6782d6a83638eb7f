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

/// Step of the rule in u = ln c: a third of ln 2, so that c doubles every
/// three nodes and e^(-a c) squares (error e^(-π²/h), about 3e-19).
const STEP: f64 = std::f64::consts::LN_2 / 3.0;
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

/// The selectable tokens of one side (outer or inner) of the problem: the
/// potential of selecting one draft index by softmax over its token's
/// weight. Its curvature is
/// dr_y / dtheta_y = `n q_y a_y ∫ [(1 - a_y c) e^(-a_y c) phi^(n-1) - (n-1) q_y a_y c e^(-2 a_y c) phi^(n-2)] dc`
/// (without tail terms: it only scales steps) and its coupling
/// dr_y / dtheta_z = `-n (n-1) q_y a_y q_z a_z ∫ c e^(-(a_y + a_z) c) phi^(n-2) dc`.
pub(crate) struct Selectable<'a> {
    pub q: &'a [f64],
    /// Draft mass of tokens drafted but never selected.
    pub base: f64,
    pub n: usize,
}

impl Potential for Selectable<'_> {
    fn evaluate(&self, theta: &[f64], dense: &[usize]) -> Evaluation {
        let a: Vec<f64> = theta.iter().map(|t| t.exp()).collect();
        evaluate(self, &a, dense)
    }
}

/// Nodes c_k = c_lo e^(k h) covering [c_lo, c_hi], with c_(k+3) = 2 c_k
/// exactly.
fn nodes(a: &[f64]) -> Vec<f64> {
    let (lo, hi) = a.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
        (lo.min(x), hi.max(x))
    });
    let (lo, hi) = (lo.min(1.0), hi.max(1.0));
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

/// The first node where a c >= SERIES (nodes before it are in the series).
fn series_end(a: f64, c: &[f64]) -> usize {
    let k = ((SERIES / (a * c[0])).ln() / STEP).ceil().max(0.0) as usize;
    k.min(c.len())
}

/// Calls `term(k, x, e^(-x))` for the nodes k >= start with x = a c_k <=
/// limit: three exponentials, then e^(-2x) = (e^(-x))^2 along each third.
fn body(a: f64, c: &[f64], start: usize, limit: f64, mut term: impl FnMut(usize, f64, f64)) {
    let mut chain = [0.0; 3];
    for (k, &ck) in c.iter().enumerate().skip(start) {
        let x = a * ck;
        if x > limit {
            break;
        }
        let e = if k < start + 3 {
            (-x).exp()
        } else {
            chain[k % 3] * chain[k % 3]
        };
        chain[k % 3] = e;
        term(k, x, e);
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

/// `Σ_j coefficient_j (-a)^j moment_j`.
fn series(a: f64, moment: &[f64; TERMS], coefficient: impl Fn(usize) -> f64) -> f64 {
    let mut power = 1.0;
    let mut sum = 0.0;
    for (j, m) in moment.iter().enumerate() {
        sum += coefficient(j) * power * m;
        power *= -a;
    }
    sum
}

/// `Σ_{k>=1} f(u_lo - k h)` for f ∝ e^u left of the first node, in units of
/// f(u_lo): the infinite left end of the bi-infinite rule.
fn left_tail() -> f64 {
    let e = (-STEP).exp();
    e / (1.0 - e)
}

/// The potential, r, curvature and coupling at the weights a = e^theta.
fn evaluate(side: &Selectable, a: &[f64], dense: &[usize]) -> Evaluation {
    let c = nodes(a);
    let k_count = c.len();
    // phi(c_k) - base, summed over tokens in parallel chunks: nodes past a
    // token's series end directly, those before it through the token's
    // moments q a^j, bucketed by series end (node k gets every bucket
    // above k: Σ_j (-c_k)^j / j! Σ q a^j).
    let (mut drafted, buckets) = side
        .q
        .par_chunks(CHUNK)
        .zip(a.par_chunks(CHUNK))
        .map(|(q, a)| {
            let mut sums = vec![0.0; k_count];
            let mut buckets = vec![[0.0; TERMS]; k_count + 1];
            for (&qy, &ay) in q.iter().zip(a) {
                let end = series_end(ay, &c);
                let mut power = qy;
                for entry in buckets[end].iter_mut() {
                    *entry += power;
                    power *= ay;
                }
                body(ay, &c, end, UNDERFLOW, |k, _, e| sums[k] += qy * e);
            }
            (sums, buckets)
        })
        .reduce(
            || (vec![0.0; k_count], vec![[0.0; TERMS]; k_count + 1]),
            |(mut sums, mut buckets), (s, b)| {
                sums.iter_mut().zip(&s).for_each(|(x, y)| *x += y);
                for (x, y) in buckets.iter_mut().zip(&b) {
                    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
                }
                (sums, buckets)
            },
        );
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
    let n = side.n as i32;
    let base = side.base;
    let phi: Vec<f64> = drafted.iter().map(|d| base + d).collect();
    // phi^(n-1) at each node, times c_k (the Jacobian of c = e^u) and h;
    // and (n-1) phi^(n-2) c_k h for the curvature.
    let kernel: Vec<f64> = phi
        .iter()
        .zip(&c)
        .map(|(f, ck)| STEP * ck * f.powi(n - 1))
        .collect();
    let cross: Vec<f64> = phi
        .iter()
        .zip(&c)
        .map(|(f, ck)| {
            if n > 1 {
                STEP * ck * f64::from(n - 1) * f.powi(n - 2)
            } else {
                0.0
            }
        })
        .collect();
    let tail = left_tail();
    let scale = side.n as f64;

    // Moments for the series part of r and of the curvature:
    // (1 - x) e^(-x) = Σ_j (1 + j) (-x)^j / j!, x e^(-2x) = Σ_j j 2^(j-1) (-1)^(j-1) x^j / j!.
    let kernel_moments = moments(&kernel, &c);
    let cross_moments = moments(&cross, &c);
    let (marginal, curvature): (Vec<f64>, Vec<f64>) = side
        .q
        .par_iter()
        .zip(a.par_iter())
        .with_min_len(CHUNK)
        .map(|(&qy, &ay)| {
            let end = series_end(ay, &c);
            let mut sum = series(ay, &kernel_moments[end], |_| 1.0);
            let mut slope = series(ay, &kernel_moments[end], |j| (1 + j) as f64)
                + qy * series(ay, &cross_moments[end], |j| {
                    j as f64 * 2f64.powi(j as i32 - 1)
                });
            body(ay, &c, end, NEGLIGIBLE, |k, x, e| {
                sum += kernel[k] * e;
                slope += kernel[k] * (1.0 - x) * e - cross[k] * qy * x * e * e;
            });
            (scale * qy * ay * sum, scale * qy * ay * slope)
        })
        .unzip();

    let m = dense.len();
    let mut coupling = vec![0.0; m * m];
    if n > 1 && m > 1 {
        // e^(-a_y c_k) for the dense tokens, then Σ_k w_k c_k e_y e_z.
        let weights: Vec<Vec<f64>> = dense
            .iter()
            .map(|&y| {
                c.iter()
                    .zip(&cross)
                    .map(|(&ck, &w)| (w * ck).sqrt() * (-a[y] * ck).exp())
                    .collect()
            })
            .collect();
        for i in 0..m {
            for j in i + 1..m {
                let (y, z) = (dense[i], dense[j]);
                let integral: f64 = weights[i].iter().zip(&weights[j]).map(|(u, v)| u * v).sum();
                let entry = -scale * side.q[y] * a[y] * side.q[z] * a[z] * integral;
                coupling[i * m + j] = entry;
                coupling[j * m + i] = entry;
            }
        }
    }

    // P(S > 0) = (base + Σ q)^n - base^n; phi^n - base^n as a difference of
    // powers from phi - base, summed directly (no cancellation).
    let total = base + side.q.iter().sum::<f64>();
    let powers_diff = |x: f64, d: f64| -> f64 {
        // x^n - base^n = d Σ_j x^j base^(n-1-j), d = x - base.
        (0..n)
            .map(|j| x.powi(j) * base.powi(n - 1 - j))
            .sum::<f64>()
            * d
    };
    let m = powers_diff(total, total - base);
    let integrand: Vec<f64> = c
        .iter()
        .zip(&phi)
        .zip(&drafted)
        .map(|((&ck, &f), &d)| m * (-ck).exp() - powers_diff(f, d))
        .collect();
    let potential = STEP * (integrand.iter().sum::<f64>() + integrand[0] * tail);
    Evaluation {
        potential,
        marginal,
        curvature,
        coupling,
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
        let q = [0.3, 0.1, 0.05, 0.25];
        let a = [1.0, 0.2, 3e-4, 0.7];
        for (base, n) in [(0.3, 1), (0.3, 3), (0.0, 2), (0.0, 4), (0.3, 4)] {
            let total: f64 = q.iter().sum::<f64>() + base;
            let q: Vec<f64> = q.iter().map(|x| x / total).collect();
            let base = base / total;
            let (potential, marginal) = enumerate(&q, &a, base, n);
            let eval = evaluate(&Selectable { q: &q, base, n }, &a, &[]);
            assert!(
                (eval.potential - potential).abs() <= 1e-14,
                "n = {n}: {} vs {potential}",
                eval.potential
            );
            for (r, e) in eval.marginal.iter().zip(&marginal) {
                assert!((r - e).abs() <= 1e-14 * e, "n = {n}: {r} vs {e}");
            }
        }
    }
}
