//! The potential of the enumeration-free selection rule (`docs/DESIGN.md`
//! §5): select one draft index with probability proportional to
//! e^(theta of its token). Its value and gradient r are one-dimensional
//! integrals per token (module `integrals`, on the nodes of
//! `potential::nodes`); its Newton direction comes from the Hessian's structure, a
//! weighted graph Laplacian of node rank (module `hessian`); large programs
//! sum over buckets of theta instead of tokens (module `buckets`), and
//! module `sums` takes a program's node sums either way for the potential
//! of drafts from several laws.

mod buckets;
mod hessian;
mod integrals;
mod sums;

pub(crate) use buckets::{Assignment, ORDER};
pub(crate) use integrals::Selectable;
pub(crate) use sums::Sums;

use mdsd_core::powi_count;

use crate::newton::{Evaluation, Potential};
use crate::potential::nodes::Nodes;
use crate::thresholds::BUCKETED_FROM;
use crate::workspace::Workspace;

impl Potential for Selectable<'_> {
    type Hessian = Nodes;

    fn evaluate(&self, theta: &[f64], workspace: &mut Workspace) -> Evaluation<Nodes> {
        integrals::evaluate_lumping_zero(self, theta, workspace)
    }

    /// Token by token below `BUCKETED_FROM` tokens, through buckets of
    /// theta above; a direct solve (Woodbury's identity), whatever
    /// `enough`.
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Nodes>,
        gradient: &[f64],
        held: &[bool],
        _enough: f64,
        workspace: &mut Workspace,
    ) -> Vec<f64> {
        let grouped = self.q.len() >= BUCKETED_FROM;
        let (nodes, marginal) = (&at.hessian, &at.marginal);
        hessian::direction(
            self, theta, nodes, marginal, gradient, held, grouped, workspace,
        )
    }

    /// r is a softmax of the weights among the drafts: shifting every
    /// theta of the program by t selects the same draft.
    fn flat_along_ones(&self) -> bool {
        true
    }

    /// P(y ∈ S; world) = s^n - (s - q_y)^n, s = base + Σ q the world's
    /// mass, as s^n (1 - (1 - q_y / s)^n) from logarithms: no cancellation
    /// for a token of small q, and no overflow of the count n.
    fn saturation(&self) -> Option<impl Fn(usize) -> f64 + '_> {
        let world = self.base + self.q.iter().sum::<f64>();
        let every_draft = powi_count(world, self.n);
        let n = self.n as f64;
        Some(move |y: usize| {
            if world > 0.0 {
                -every_draft * (n * (-self.q[y] / world).ln_1p()).exp_m1()
            } else {
                0.0
            }
        })
    }
}
