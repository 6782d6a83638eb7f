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
    let (lo, hi) = theta
        .iter()
        .fold((0.0f64, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let (lo, hi) = (lo.exp(), hi.exp());
    let c_lo = HEAD / hi / (n as f64 / 16.0).max(1.0);
    let count = ((HORIZON / lo / c_lo).ln() / STEP).ceil() as usize + 1;
    let mut c: Vec<f64> = (0..3.min(count))
        .map(|k| c_lo * (k as f64 * STEP).exp())
        .collect();
    for k in 3..count {
        c.push(2.0 * c[k - 3]);
    }
    c
}

/// `Σ_{k>=1} f(u_lo - k h)` for f ∝ e^u left of the first node, in units of
/// f(u_lo): the infinite left end of the bi-infinite rule of step h =
/// `step` (`STEP`, or a multiple of it on a coarser rule).
pub(crate) fn left_tail(step: f64) -> f64 {
    let e = (-step).exp();
    e / (1.0 - e)
}
