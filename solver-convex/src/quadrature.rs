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

/// Step of the rule in u = ln c.
const STEP: f64 = 0.25;
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

/// Nodes c_k = e^(u_lo + k h) covering [c_lo, c_hi].
fn nodes(a: &[f64]) -> Vec<f64> {
    let (lo, hi) = a.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
        (lo.min(x), hi.max(x))
    });
    let (lo, hi) = (lo.min(1.0), hi.max(1.0));
    let u_lo = (HEAD / hi).ln();
    let u_hi = (HORIZON / lo).ln();
    let count = ((u_hi - u_lo) / STEP).ceil() as usize + 1;
    (0..count).map(|k| (u_lo + k as f64 * STEP).exp()).collect()
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
    // phi(c_k) - base, summed over tokens in parallel chunks.
    let drafted: Vec<f64> = side
        .q
        .par_chunks(CHUNK)
        .zip(a.par_chunks(CHUNK))
        .map(|(q, a)| {
            let mut sums = vec![0.0; k_count];
            for (&qy, &ay) in q.iter().zip(a) {
                for (sum, &ck) in sums.iter_mut().zip(&c) {
                    let x = ay * ck;
                    if x > 700.0 {
                        break;
                    }
                    *sum += qy * (-x).exp();
                }
            }
            sums
        })
        .reduce(
            || vec![0.0; k_count],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
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

    let (marginal, curvature): (Vec<f64>, Vec<f64>) = side
        .q
        .par_iter()
        .zip(a.par_iter())
        .with_min_len(CHUNK)
        .map(|(&qy, &ay)| {
            let (mut sum, mut slope) = (0.0, 0.0);
            for ((&w, &w2), &ck) in kernel.iter().zip(&cross).zip(&c) {
                let x = ay * ck;
                if x > NEGLIGIBLE {
                    break;
                }
                let e = (-x).exp();
                sum += w * e;
                slope += w * (1.0 - x) * e - w2 * qy * x * e * e;
            }
            // The first term's infinite left extension.
            sum += kernel[0] * (-ay * c[0]).exp() * tail;
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
