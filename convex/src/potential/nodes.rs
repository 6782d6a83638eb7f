//! The quadrature nodes of the selection integrals (`docs/DESIGN.md` §5):
//! the trapezoidal rule in u = ln c that both the evaluation (module
//! `integrals`) and the Newton direction (module `hessian`) sum over.
//!
//! With c = e^u both integrands are analytic in the strip |Im u| < π/2 and
//! decay like e^u as u -> -∞ and double-exponentially as u -> +∞, so the
//! bi-infinite trapezoidal rule of step h has error about e^(-π²/h) (5e-15
//! relative at h = 0.3; Trefethen & Weideman, SIAM Review 2014, §5). The
//! rule runs from c_lo = 1e-9 / (max a · max(1, n / 16)), where each
//! integrand is its leading term C e^u to a relative n · 1e-9 · (a c) <=
//! 1.6e-17 (phi^(n-1) departs from its value at 0 like n a c), whose
//! infinite left sum is added in closed form, to c_hi = 60 / min a, past
//! which every term is below e^-60 of its integral.

use nalgebra::{DMatrix, DVector};

/// Step of the rule in u = ln c: a third of ln 2, so that c doubles every
/// three nodes and e^(-a c) squares (error e^(-π²/h), about 3e-19).
pub(crate) const STEP: f64 = std::f64::consts::LN_2 / 3.0;
/// c_lo * max a.
const HEAD: f64 = 1e-9;
/// c_hi * min a.
const HORIZON: f64 = 60.0;
/// Terms with a c above this are below e^-60 of the token's own integral.
pub(crate) const NEGLIGIBLE: f64 = 60.0;

/// The quadrature nodes c_k of an evaluation and phi(c_k), from which the
/// Hessian is built.
pub(crate) struct Nodes {
    pub c: Vec<f64>,
    pub phi: Vec<f64>,
}

/// Nodes c_k = c_lo e^(k h) covering [c_lo, c_hi] for n drafts, with
/// c_(k+3) = 2 c_k exactly. Past 16 drafts the rule starts lower, by the
/// factor n / 16 (3 log2(n / 16) nodes more), so that the left end stays
/// in the integrands' linear regime.
pub(crate) fn nodes(theta: &[f64], n: usize) -> Vec<f64> {
    let (c_lo, count) = span(theta, n, HEAD, STEP);
    let mut c: Vec<f64> = (0..3.min(count))
        .map(|k| c_lo * (k as f64 * STEP).exp())
        .collect();
    for k in 3..count {
        c.push(2.0 * c[k - 3]);
    }
    c
}

/// `nodes`' span for n drafts from c_lo = `head` / max a: (c_lo, the
/// number of nodes of step `step` that reach c_hi).
fn span(theta: &[f64], n: usize, head: f64, step: f64) -> (f64, usize) {
    let (lo, hi) = theta
        .iter()
        .fold((0.0f64, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let (lo, hi) = (lo.exp(), hi.exp());
    let c_lo = head / hi / (n as f64 / 16.0).max(1.0);
    let count = ((HORIZON / lo / c_lo).ln() / step).ceil() as usize + 1;
    (c_lo, count)
}

/// `nodes` from c_lo = `head` / max a (and the same factor past 16
/// drafts), of step `step` in ln c, each node its own exponential (no
/// doubling): a rule whose first nodes take a left end of higher order
/// (`left_end`) may start higher, and one whose integrands need no
/// squaring chains may take the step its accuracy allows.
pub(crate) fn nodes_from(theta: &[f64], n: usize, head: f64, step: f64) -> Vec<f64> {
    let (c_lo, count) = span(theta, n, head, step);
    (0..count).map(|k| c_lo * (k as f64 * step).exp()).collect()
}

/// `Σ_{k>=1} f(u_lo - k h)` for f ∝ e^u left of the first node, in units of
/// f(u_lo): the infinite left end of the bi-infinite rule of step h =
/// `step` (`STEP`, or a multiple of it on a coarser rule).
pub(crate) fn left_tail(step: f64) -> f64 {
    let e = (-step).exp();
    e / (1.0 - e)
}

/// The infinite left end of the rule of step h = `step` from the values at
/// its first `count` nodes: weights γ_j with `Σ_{k>=1} f(u_lo - k h) =
/// Σ_(j<count) γ_j f(u_lo + j h)` for every f = c g(c), g a polynomial of
/// degree below `count` (c = e^u, nodes c_j = c_lo e^(j h)). With f = c^s,
/// the left sum is c_lo^s L(s h) (L = `left_tail`), so γ solves Σ_j γ_j
/// e^(j s h) = L(s h) for s = 1..count, a Vandermonde system in e^(j h).
/// For an analytic g the error is g's Taylor remainder past degree count -
/// 1 at the first nodes, about (n a c)^count there: the rule may start at
/// c_lo (n a)^(count - 1) times higher than `nodes` for the same error.
/// With one node, γ_0 = L(h).
pub(crate) fn left_end(step: f64, count: usize) -> Vec<f64> {
    left_end_from_power(step, count, 1)
}

/// `left_end` for f = c^power g(c): the Vandermonde system of the powers
/// s = power..power + count (the integrands in t of drafts without
/// replacement grow like t^n at the left end, in u = ln t).
pub(crate) fn left_end_from_power(step: f64, count: usize, power: usize) -> Vec<f64> {
    let powers = DMatrix::from_fn(count, count, |s, j| {
        ((s + power) as f64 * j as f64 * step).exp()
    });
    let sums = DVector::from_fn(count, |s, _| left_tail((s + power) as f64 * step));
    let weights = powers
        .lu()
        .solve(&sums)
        .expect("a Vandermonde matrix on distinct nodes is invertible");
    weights.iter().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The left end's weights sum the rule's infinite left part of c
    /// g(c) exactly for polynomials g of degree below their count, and
    /// one node's weight is `left_tail`.
    #[test]
    fn left_end_sums_polynomial_integrands() {
        assert_eq!(left_end(STEP, 1), vec![left_tail(STEP)]);
        // t^power g(t) at the left end of a rule in ln t of step 1/4.
        for power in 1..=4 {
            let (step, count) = (0.25, 6);
            let weights = left_end_from_power(step, count, power);
            let t_lo = 1e-3;
            for degree in 0..count {
                let f = |t: f64| t.powi(power as i32) * (1.0 + t).powi(degree as i32);
                let want: f64 = (1..4000)
                    .map(|k| f(t_lo * (-(k as f64) * step).exp()))
                    .sum();
                let got: f64 = (weights.iter().enumerate())
                    .map(|(j, w)| w * f(t_lo * (j as f64 * step).exp()))
                    .sum();
                assert!(
                    (got - want).abs() <= 1e-12 * want,
                    "power {power}, degree {degree}: {got} vs {want}"
                );
            }
        }
        for step in [STEP, 2.0 * STEP] {
            for count in 1..=4 {
                let weights = left_end(step, count);
                let c_lo = 1e-3;
                for degree in 0..count {
                    let f = |c: f64| c * (1.0 + c).powi(degree as i32);
                    let want: f64 = (1..4000)
                        .map(|k| f(c_lo * (-(k as f64) * step).exp()))
                        .sum();
                    let got: f64 = (weights.iter().enumerate())
                        .map(|(j, w)| w * f(c_lo * (j as f64 * step).exp()))
                        .sum();
                    assert!(
                        (got - want).abs() <= 1e-14 * want,
                        "step {step}, {count} nodes, degree {degree}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
