//! The selection potential for drafts without replacement (`docs/DESIGN.md`
//! §6b): n distinct tokens drawn from q, one selected with probability
//! proportional to e^(theta of its token).
//!
//! Drafting without replacement is the order of arrival of independent
//! exponential clocks of rates q_x, the drafted set S the first n arrivals
//! (mdsd-bounds' `ExponentialClocks`). Condition on the n-th arrival, of
//! token w at time t: with s_x = e^(-q_x t) (not arrived), u_x = 1 - s_x
//! (arrived) and, for any weights z_x,
//!
//!   E[Π_{x∈S} z_x] = ∫_0^∞ dt Σ_w q_w s_w z_w [Π_{x≠w} (s_x + λ u_x z_x)]_(n-1),
//!
//! [·]_k the coefficient of λ^k: w rings at t, n - 1 others before. With
//! 1/S = ∫ e^(-cS) dc and z_x = e^(-a_x c), a_x = e^(theta_x) (z = 1 for a
//! token drafted but never selected, z = 0 for one whose drafting leaves
//! the program's world), the selected token's law is a double integral,
//!
//!   r_y = a_y ∫ dc e^(-a_y c) ∫ dt ( q_y s_y [U^{∖y}]_(n-1) + u_y [M^{∖y}]_(n-2) ),
//!
//! U = Π_x (s_x + λ u_x z_x) and M = Σ_w q_w s_w z_w Π_{x≠w} (s_x + λ u_x
//! z_x), ∖y leaving token y out (y is the n-th arrival, or an earlier
//! one), and the potential E[1{S > 0} log S] is Frullani's integral of the
//! all-token term [M]_(n-1).
//!
//! The tokens split in two (§6b, "The clock's tail"). The few whose clocks
//! may ring by the last node in t (n q t > 1 there; more arrivals than
//! about 60 make a node negligible, so they are few) are exact factors,
//! each left out by products of prefix and suffix polynomials. For the
//! others ρ_x = (e^(q_x t) - 1) z_x <= e^(1/n) - 1, and with ε = e^(q t) - 1
//! expanded in powers of q t everything is a sum over tokens of q^m z^k
//! times a function of t alone. Their factor Π (s + λ u z) is e^(-t
//! q(tail)) exp(Σ_k (-1)^(k+1) λ^k P_k / k), P_k = Σ ρ^k (Newton's
//! identities), and their part of M that times Σ_j (-λ)^j Σ q z ρ^j.
//! Leaving a tail token y out divides by its factor, a series in ρ_y:
//!
//!   q_y s_y [U^{∖y}]_(n-1) + u_y [M^{∖y}]_(n-2)
//!     = Σ_j (-1)^j z_y^j ((j + 1) q_y ε_y^j U_(n-1-j) + ε_y^(j+1) M_(n-2-j)),
//!
//! so r_y is Σ_(j,e) q_y^(j+1+e) ∫ κ_(j,e)(c) e^(-(j+1) a_y c) dc with
//! kernels κ_(j,e)(c) = ∫ dt (...)(c, t) shared by every token. At each
//! node in t a head token whose n q t is still at most 1 joins the tail's
//! series and leaves it by the same division (its ε exact): only the head
//! tokens whose clocks may ring by that node are exact factors there.
//!
//! The tail's sums Σ q^m e^(-k a c) and the per-token integrals of the
//! kernels go through buckets of theta (the other schemes' from
//! `BUCKETED_FROM` tokens, wider below, `WIDE_BUCKET`; at the nodes where
//! a bucket's k a c is small, power series that all such buckets share,
//! `LEFT_REACH`); a head token in the series takes its terms from the
//! kernels summed over the nodes in t where it is in it. An evaluation
//! costs O(V n d) series terms (d the terms a token's series needs) plus
//! O(exact n² + n d) per pair of nodes, not O(V n²) per pair (the nodes in
//! c in parallel; the nodes in t whose share of P(world) is negligible
//! left out, `CLOCK_NEGLIGIBLE_OF_ERROR`). The Newton direction comes from
//! conjugate gradients on differences of r on a coarser grid
//! (`Grid::Coarse`), on the free tokens alone, preconditioned by the
//! Hessian's exact diagonal.

mod clocks;
mod grids;
mod integrals;
mod polynomials;
mod tail;
#[cfg(test)]
mod tests;

pub(crate) use clocks::{QOrder, WithoutReplacement};
pub(crate) use integrals::Curvature;

use grids::{Grid, ROUGH_UNTIL};

use crate::newton::{Evaluation, Potential, newton_by_conjugate_gradients};
use crate::workspace::Workspace;

/// Step of the one-sided differences of r that stand for Hessian-vector
/// products, for a direction of unit largest entry: their error is about
/// the step (1e-7 of the Hessian, from the third derivative) plus the
/// rounding of r over the step (1e-9), which costs Newton's rate only
/// near the tolerance, for one evaluation a product where central
/// differences take two.
const DIFFERENCE: f64 = 1e-7;

impl Potential for WithoutReplacement<'_> {
    type Hessian = Curvature;

    fn evaluate(&self, theta: &[f64], _workspace: &mut Workspace) -> Evaluation<Self::Hessian> {
        self.evaluate_on(theta, Grid::Fine)
    }

    /// The coarse grid (`ROUGH_UNTIL`): far from the optimum it guides
    /// Newton as well as the fine one, and each of its evaluations is also
    /// the base of the next direction's differences.
    fn rough_until(&self) -> Option<f64> {
        Some(ROUGH_UNTIL)
    }

    fn evaluate_rough(
        &self,
        theta: &[f64],
        _workspace: &mut Workspace,
    ) -> Evaluation<Self::Hessian> {
        self.evaluate_on(theta, Grid::Coarse)
    }

    /// The fine evaluation keeps the coarse one's r: the next direction's
    /// differences start from it.
    fn refine(
        &self,
        theta: &[f64],
        rough: Evaluation<Self::Hessian>,
        _workspace: &mut Workspace,
    ) -> Evaluation<Self::Hessian> {
        let mut exact = self.evaluate_on(theta, Grid::Fine);
        if rough.hessian.grid == Grid::Coarse {
            exact.hessian.coarse_marginal = Some(rough.marginal);
        }
        exact
    }

    /// Newton's direction by conjugate gradients on one-sided differences
    /// of r along each search direction (on the coarse grid from theta's
    /// nodes, so that both ends of a difference share them, from `at`'s r
    /// where `at` is on that grid), preconditioned by the Hessian's
    /// diagonal at theta.
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Self::Hessian>,
        gradient: &[f64],
        held: &[bool],
        enough: f64,
        _workspace: &mut Workspace,
    ) -> Vec<f64> {
        // r on the free tokens alone: conjugate gradients read the
        // products there.
        let free: Vec<bool> = held.iter().map(|&held| !held).collect();
        let r = |point: &[f64]| {
            (self.integrals(point, theta, Grid::Coarse, false, Some(&free))).marginal
        };
        let computed;
        let base = match (at.hessian.grid, &at.hessian.coarse_marginal) {
            (Grid::Coarse, _) => &at.marginal,
            (Grid::Fine, Some(kept)) => kept,
            (Grid::Fine, None) => {
                computed = r(theta);
                &computed
            }
        };
        let product = |v: &[f64]| {
            let size = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if size == 0.0 {
                return vec![0.0; v.len()];
            }
            let h = DIFFERENCE / size;
            let point: Vec<f64> = theta.iter().zip(v).map(|(t, v)| t + h * v).collect();
            let moved = r(&point);
            moved.iter().zip(base).map(|(a, b)| (a - b) / h).collect()
        };
        newton_by_conjugate_gradients(
            product,
            &at.hessian.diagonal,
            &at.marginal,
            gradient,
            held,
            enough,
        )
    }

    fn flat_along_ones(&self) -> bool {
        true
    }

    fn saturation(&self) -> Option<impl Fn(usize) -> f64 + '_> {
        let inclusion = self.inclusion();
        Some(move |y: usize| inclusion[y])
    }
}
