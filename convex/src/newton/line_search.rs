//! The line search of one Newton iteration: Armijo backtracking along the
//! projection arc (Bertsekas, SIAM J. Control Optim. 1982), with the
//! change from the rough rule to the exact one and the signals that make
//! the next iteration take the log-ratio direction.

use super::{Evaluation, Potential, Program};
use crate::workspace::Workspace;

/// Armijo's sufficient-decrease constant.
const ARMIJO_SUFFICIENT_DECREASE: f64 = 1e-4;
/// Rounding in the objective, relative to its size, that a trial point may
/// add without being refused: the search does not stall on noise near the
/// optimum.
const OBJECTIVE_ROUNDING: f64 = 1e-14;
/// Relative decrease of the objective below which its evaluation does not
/// resolve a step: past ~10^6 drafts the potential's value carries
/// rounding of about 1e-12 relative (its powers x^n), while a Newton step
/// near the optimum changes it by the square of the residual.
const UNRESOLVED_RELATIVE_DECREASE: f64 = 1e-10;
/// The share of the acceptance lost that a step on the rough rule must
/// leave at most to keep the rough phase going: a step that lowers the
/// loss by less than a tenth ends it (`Program::minimise_evaluated`).
const ROUGH_PHASE_LOSS_SHARE: f64 = 0.9;
/// A line search that halves its step below this length has found no step
/// the objective accepts: the next iteration takes the log-ratio
/// direction.
const STALL_STEP_LENGTH: f64 = 1e-10;
/// A step accepted below this length has not found one either, whatever
/// took it (a decrease within the objective's rounding, or a residual
/// lower by its noise): the next iteration takes the log-ratio direction
/// too, since Newton's direction is then set by the noise of the Hessian's
/// products (`convex/tests/schemes.rs`, `wor_crawl_on_noise`).
const CRAWL_STEP_LENGTH: f64 = 1e-6;

/// What a line search found.
pub(super) struct LineSearch {
    /// No step the objective accepts (`STALL_STEP_LENGTH`), or only one
    /// below `CRAWL_STEP_LENGTH`: the next direction is the log ratio's.
    pub no_step: bool,
}

impl<P: Potential> Program<'_, P> {
    /// Moves `theta` (of objective and evaluation `current`, `lost` the
    /// acceptance lost there) along `direction`, halving the step until
    /// Armijo's test accepts it. A step whose predicted decrease the
    /// objective cannot resolve is judged by the residual it leaves
    /// instead: Armijo's test would compare noise there and backtrack an
    /// exact Newton step until the iteration stalls. On the rough rule
    /// (`rough`), an accepted step that hardly lowers the loss ends the
    /// rough phase instead: the iteration goes on from theta on the exact
    /// rule. Returns the objective and evaluation at the new theta.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn line_search(
        &self,
        theta: &mut Vec<f64>,
        mut current: (f64, Evaluation<P::Hessian>),
        direction: &[f64],
        gradient: &[f64],
        lost: f64,
        rough: &mut bool,
        workspace: &mut Workspace,
    ) -> ((f64, Evaluation<P::Hessian>), LineSearch) {
        let test = self.acceptance_test(current.0, direction, gradient, lost);
        let mut step = 1.0;
        loop {
            let (mut trial, decrease) =
                self.trial_point(theta, direction, gradient, step, workspace);
            let evaluated = self.objective(&trial, *rough, workspace);
            let stalled = step < STALL_STEP_LENGTH;
            let accepted = stalled || test.accepts(&trial, &evaluated, decrease);
            let rough_ends = accepted
                && *rough
                && self.residual(&trial, &evaluated.1.marginal) > ROUGH_PHASE_LOSS_SHARE * lost;
            if rough_ends {
                workspace.give(evaluated.1.marginal);
                current = self.refined(theta, current.1, workspace);
                *rough = false;
            } else if accepted {
                std::mem::swap(theta, &mut trial);
                workspace.give(std::mem::replace(&mut current, evaluated).1.marginal);
            } else {
                workspace.give(evaluated.1.marginal);
            }
            // The point left behind.
            workspace.give(trial);
            if accepted {
                let crawled = !rough_ends && step < CRAWL_STEP_LENGTH;
                let found = LineSearch {
                    no_step: stalled || crawled,
                };
                return (current, found);
            }
            step *= 0.5;
        }
    }

    /// Moves `theta` by the whole of `direction` (projected on the box)
    /// where the objective accepts that step as the line search's first
    /// trial would, and returns the objective and evaluation at theta,
    /// moved or not: a step from elsewhere (a coarser program's) is tried
    /// once, where backtracking it would cost evaluations that Newton's own
    /// direction spends better.
    pub(super) fn whole_step(
        &self,
        theta: &mut Vec<f64>,
        current: (f64, Evaluation<P::Hessian>),
        direction: &[f64],
        gradient: &[f64],
        lost: f64,
        workspace: &mut Workspace,
    ) -> (f64, Evaluation<P::Hessian>) {
        let test = self.acceptance_test(current.0, direction, gradient, lost);
        let (mut trial, decrease) = self.trial_point(theta, direction, gradient, 1.0, workspace);
        let evaluated = self.objective(&trial, false, workspace);
        let kept = if test.accepts(&trial, &evaluated, decrease) {
            std::mem::swap(theta, &mut trial);
            workspace.give(current.1.marginal);
            evaluated
        } else {
            workspace.give(evaluated.1.marginal);
            current
        };
        workspace.give(trial);
        kept
    }

    /// The test a trial point passes from theta (of objective `value`,
    /// `lost` the acceptance lost there) along `direction`.
    fn acceptance_test(
        &self,
        value: f64,
        direction: &[f64],
        gradient: &[f64],
        lost: f64,
    ) -> AcceptanceTest<'_, P> {
        let predicted: f64 = direction.iter().zip(gradient).map(|(d, g)| d * g).sum();
        AcceptanceTest {
            program: self,
            value,
            slack: OBJECTIVE_ROUNDING * (1.0 + value.abs()),
            unresolved: -predicted <= UNRESOLVED_RELATIVE_DECREASE * (1.0 + value.abs()),
            lost,
        }
    }

    /// theta + step x direction, projected on the box, from the
    /// workspace, and the decrease the gradient predicts for that move.
    fn trial_point(
        &self,
        theta: &[f64],
        direction: &[f64],
        gradient: &[f64],
        step: f64,
        workspace: &mut Workspace,
    ) -> (Vec<f64>, f64) {
        let (lo, hi) = self.bounds;
        let mut trial = workspace.take(theta.len());
        trial.extend(
            theta
                .iter()
                .zip(direction)
                .map(|(t, d)| (t + step * d).clamp(lo, hi)),
        );
        let decrease: f64 = trial
            .iter()
            .zip(theta)
            .zip(gradient)
            .map(|((t1, t0), g)| (t1 - t0) * g)
            .sum();
        (trial, decrease)
    }
}

/// Armijo's test from one point, with its slack for the objective's
/// rounding; where the objective cannot resolve the predicted decrease,
/// a trial passes if it leaves a lower residual.
struct AcceptanceTest<'t, P: Potential> {
    program: &'t Program<'t, P>,
    value: f64,
    slack: f64,
    unresolved: bool,
    lost: f64,
}

impl<P: Potential> AcceptanceTest<'_, P> {
    fn accepts(
        &self,
        trial: &[f64],
        evaluated: &(f64, Evaluation<P::Hessian>),
        decrease: f64,
    ) -> bool {
        evaluated.0 <= self.value + ARMIJO_SUFFICIENT_DECREASE * decrease + self.slack
            || (self.unresolved && self.program.residual(trial, &evaluated.1.marginal) < self.lost)
    }
}
