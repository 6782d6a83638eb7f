//! The loop of projected Newton: one owner of the iteration count, the
//! stop rule, the change of rule and the budget (iterations and time).

use super::{Evaluation, Potential, Program, Solved};
use crate::budget::Budget;
use crate::error::ConvexError;
use crate::workspace::Workspace;

impl<P: Potential> Program<'_, P> {
    /// `minimise` from `theta` (inside the box), whose objective and
    /// evaluation are `current`, on the rough rule where `rough` (the
    /// potential has one, `Potential::rough_until`, and the start is not
    /// near the optimum: `Program::minimise_near_coarse`). The iteration goes on the rough
    /// rule while the acceptance lost is above its reach, and on the exact
    /// rule from there: the rough one's values are not compared with the
    /// exact one's, so the change comes between iterations, with a new
    /// evaluation. It changes early, before the step, where the step the
    /// rough line search takes lowers the loss by less than a tenth: the
    /// rough rule's own optimum may lose more than its reach, and a step
    /// that the rough objective accepts but the exact one would not can
    /// lead where Newton's direction degenerates (`convex/tests/schemes.rs`,
    /// `wor_rough_rule_regressions`). Far from the optimum Newton's steps
    /// lower the loss by more than that, so the rough phase still covers
    /// most iterations.
    pub(super) fn minimise_evaluated(
        &self,
        mut theta: Vec<f64>,
        mut current: (f64, Evaluation<P::Hessian>),
        mut rough: bool,
        budget: &Budget,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        let tolerance = budget.max_gap;
        let rough_until = self.potential.rough_until().unwrap_or(0.0).max(tolerance);
        let mut iterations = 0;
        // Whether the last line search found no step worth taking: the
        // next direction is then the log ratio's.
        let mut no_step = false;
        loop {
            let lost = self.residual(&theta, &current.1.marginal);
            // Out of time on the rough rule, the rule's r comes from one
            // exact evaluation: selection with r from the rough one would
            // not be lossless.
            let out_of_time = budget.out_of_time();
            if rough && (lost <= rough_until || out_of_time) {
                current = self.refined(&theta, current.1, workspace);
                rough = false;
                continue;
            }
            let at_cap = iterations == budget.max_iterations && budget.keeps_at_cap();
            if lost <= tolerance || out_of_time || at_cap {
                return Ok(Solved {
                    theta,
                    marginal: current.1.marginal,
                    iterations,
                    out_of_time: lost > tolerance,
                });
            }
            if iterations == budget.max_iterations {
                return Err(ConvexError::IterationCap {
                    side: self.name,
                    iterations,
                    lost,
                    tolerance,
                });
            }
            iterations += 1;
            let gradient = self.gradient(&current.1.marginal, workspace);
            let active = self.active_set(&theta, &gradient);
            let direction = self.direction(
                &theta, &current.1, &gradient, &active, tolerance, no_step, workspace,
            );
            let (next, search) = self.line_search(
                &mut theta, current, &direction, &gradient, lost, &mut rough, workspace,
            );
            current = next;
            no_step = search.no_step;
            workspace.give(gradient);
            workspace.give(direction);
        }
    }
}
