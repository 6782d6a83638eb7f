//! Projected Newton for the box-constrained programs of every potential:
//! minimise `potential(theta) - <p, theta>` over `lo <= theta <= hi`,
//! where the potential's gradient is the selected-token marginal r.
//!
//! * this module: what a potential supplies (`Potential`, `Evaluation`), a
//!   program (`Program`, `Stop`) and its entry points;
//! * `iteration`: the loop, its stop rule and its budget;
//! * `direction`: one iteration's direction and its safeguards;
//! * `line_search`: Armijo backtracking along the projection arc;
//! * `conjugate_gradients`: inexact Newton directions from Hessian
//!   products, for the potentials that have no factorisation.

mod conjugate_gradients;
mod direction;
mod iteration;
mod line_search;

pub(crate) use conjugate_gradients::newton_by_conjugate_gradients;

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::thresholds::THETA_LIMIT;
use crate::workspace::Workspace;

/// Width of the ε-active set at the bounds, in theta.
const ACTIVE_SET_WIDTH: f64 = 1e-3;
/// Longest move of one variable in one iteration, in theta, for programs
/// whose variables start near their optimum (`Program::reach`).
pub(crate) const MAX_STEP_THETA: f64 = 4.0;

/// A potential at one point: its value, its gradient r, and what its
/// Newton direction needs (`H`, per potential).
pub(crate) struct Evaluation<H> {
    pub potential: f64,
    /// r_y, the gradient in theta_y.
    pub marginal: Vec<f64>,
    pub hessian: H,
}

/// A convex function of theta whose gradient is a selected-token marginal.
pub(crate) trait Potential: Sync {
    type Hessian;
    /// The potential at theta; large vectors come from `workspace`.
    fn evaluate(&self, theta: &[f64], workspace: &mut Workspace) -> Evaluation<Self::Hessian>;
    /// A descent direction from `at`: Newton's (or close to it) in the free
    /// variables, zero on those `held` at a bound by their gradient. An
    /// iterative solve may stop once the gradient its model predicts after
    /// the step is within `enough` in l1 norm.
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Self::Hessian>,
        gradient: &[f64],
        held: &[bool],
        enough: f64,
        workspace: &mut Workspace,
    ) -> Vec<f64>;
    /// The acceptance lost above which the iteration may take
    /// `evaluate_rough` for `evaluate`, where the potential has a cheaper
    /// evaluation: about its r's distance from the exact one in l1 norm
    /// where that is known to be smaller (`Program::minimise_evaluated`).
    fn rough_until(&self) -> Option<f64> {
        None
    }
    /// The potential at theta on its cheaper rule (`rough_until`).
    fn evaluate_rough(
        &self,
        theta: &[f64],
        workspace: &mut Workspace,
    ) -> Evaluation<Self::Hessian> {
        self.evaluate(theta, workspace)
    }
    /// The potential at theta on its exact rule, where `rough` is its
    /// evaluation there on the cheaper one (the iteration's change of
    /// rule): a potential whose Newton direction takes something from a
    /// rough evaluation may keep it.
    fn refine(
        &self,
        theta: &[f64],
        rough: Evaluation<Self::Hessian>,
        workspace: &mut Workspace,
    ) -> Evaluation<Self::Hessian> {
        workspace.give(rough.marginal);
        self.evaluate(theta, workspace)
    }
    /// Whether the potential's gradient is unchanged along theta + t·1
    /// (weights that enter only through their ratios): the objective is
    /// then linear along 1, and with no variable held its Newton system
    /// is singular there.
    fn flat_along_ones(&self) -> bool {
        false
    }
    /// y -> the limit of r_y as theta_y grows with the other variables
    /// fixed, P(y ∈ S; world), where the potential knows it
    /// (`Program::saturation_steps`).
    fn saturation(&self) -> Option<impl Fn(usize) -> f64 + '_> {
        None::<fn(usize) -> f64>
    }
}

/// When a program is solved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Stop {
    /// The acceptance lost outside H*, Σ (r - p)+, is within the tolerance.
    Excess,
    /// The acceptance lost on H*, Σ (p - r)+, is within the tolerance.
    Shortfall,
    /// The projected gradient's l1 norm is within the tolerance (for
    /// programs whose optimum need not reach p, such as truncated ones).
    ProjectedGradient,
}

/// One program: minimise `potential(theta) - <p, theta>` over a box.
pub(crate) struct Program<'a, P: Potential> {
    pub name: &'static str,
    pub potential: &'a P,
    pub p: &'a [f64],
    pub bounds: (f64, f64),
    pub stop: Stop,
    /// Longest move of one variable in one iteration: MAX_STEP_THETA keeps a
    /// Newton step from throwing a variable of small curvature across the
    /// box; a program whose variables must cross it to find a set (the
    /// separating one) takes the box's width.
    pub reach: f64,
}

pub(crate) struct Solved {
    pub theta: Vec<f64>,
    pub marginal: Vec<f64>,
    pub iterations: usize,
    /// Whether the budget's time limit stopped the program before its
    /// target gap.
    pub out_of_time: bool,
}

impl<'a, P: Potential> Program<'a, P> {
    /// The outer program over `potential` with target `p` (`docs/DESIGN.md`
    /// §5): theta <= 0 on the tokens outside H, stopped on the excess
    /// Σ (r - p)+.
    pub(crate) fn outer(potential: &'a P, p: &'a [f64]) -> Self {
        Self::of_side("outer", potential, p, (-THETA_LIMIT, 0.0), Stop::Excess)
    }

    /// The inner program: theta >= 0 on H, stopped on the shortfall
    /// Σ (p - r)+.
    pub(crate) fn inner(potential: &'a P, p: &'a [f64]) -> Self {
        Self::of_side("inner", potential, p, (0.0, THETA_LIMIT), Stop::Shortfall)
    }

    fn of_side(
        name: &'static str,
        potential: &'a P,
        p: &'a [f64],
        bounds: (f64, f64),
        stop: Stop,
    ) -> Self {
        Self {
            name,
            potential,
            p,
            bounds,
            stop,
            reach: MAX_STEP_THETA,
        }
    }
}

impl<P: Potential> Program<'_, P> {
    fn gradient(&self, r: &[f64], workspace: &mut Workspace) -> Vec<f64> {
        let mut gradient = workspace.take(r.len());
        gradient.extend(r.iter().zip(self.p).map(|(r, p)| r - p));
        gradient
    }

    /// Whether theta_k is within `margin` of a bound that its gradient
    /// pushes against.
    #[inline]
    fn held(&self, theta: f64, gradient: f64, margin: f64) -> bool {
        let (lo, hi) = self.bounds;
        (theta <= lo + margin && gradient > 0.0) || (theta >= hi - margin && gradient < 0.0)
    }

    fn residual(&self, theta: &[f64], r: &[f64]) -> f64 {
        match self.stop {
            Stop::Excess => r.iter().zip(self.p).map(|(r, p)| (r - p).max(0.0)).sum(),
            Stop::Shortfall => r.iter().zip(self.p).map(|(r, p)| (p - r).max(0.0)).sum(),
            Stop::ProjectedGradient => theta
                .iter()
                .zip(r.iter().zip(self.p).map(|(r, p)| r - p))
                .filter(|&(&t, g)| !self.held(t, g, 0.0))
                .map(|(_, g)| g.abs())
                .sum(),
        }
    }

    /// Projected Newton from `start` (one theta per token, clamped to the
    /// box), within `budget`, with Armijo backtracking along the projection arc
    /// (Bertsekas, SIAM J. Control Optim. 1982, "two-metric" projection):
    /// variables held at a bound by their gradient do not move, the others
    /// take the potential's Newton direction. Each accepted step decreases
    /// the convex objective (far from the optimum, that of the potential's
    /// rough rule where it has one: `minimise_evaluated`), and the
    /// direction vanishes only at KKT points.
    /// Own code: no maintained crate offers box-constrained Newton-type
    /// minimisation (argmin's L-BFGS has no bounds).
    pub fn minimise(
        &self,
        start: Vec<f64>,
        budget: &Budget,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        let rough = self.potential.rough_until().is_some();
        self.minimise_on(start, rough, budget, workspace)
    }

    /// `minimise` from a start near the optimum (a grouped program's
    /// solution, interpolated), on the exact rule from the first
    /// evaluation (the rough rule's phase would end there at once, after an
    /// evaluation of its own). Where the start misses the tolerance, the
    /// first iteration tries the step of the coarser program first
    /// (`Program::coarse_direction`): `coarse` maps this program's gradient
    /// to a direction of its tokens. The step is taken if the objective
    /// accepts it whole; else Newton goes on from the start, one
    /// evaluation later. The attempt counts as an iteration.
    pub(crate) fn minimise_near_coarse(
        &self,
        start: Vec<f64>,
        coarse: impl FnOnce(&[f64], &mut Workspace) -> Vec<f64>,
        budget: &Budget,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        if self.p.is_empty() {
            return Ok(Self::without_variables());
        }
        let (mut theta, mut current) = self.evaluated_start(start, false, workspace);
        let lost = self.residual(&theta, &current.1.marginal);
        let tries = lost > budget.max_gap && budget.max_iterations > 0 && !budget.out_of_time();
        if !tries {
            return self.minimise_evaluated(theta, current, false, budget, workspace);
        }
        let gradient = self.gradient(&current.1.marginal, workspace);
        let mut direction = coarse(&gradient, workspace);
        let active = self.active_set(&theta, &gradient);
        self.bound_and_reach(&theta, &active, &mut direction);
        current = self.whole_step(&mut theta, current, &direction, &gradient, lost, workspace);
        workspace.give(gradient);
        workspace.give(direction);
        let mut solved = self.minimise_evaluated(theta, current, false, budget, workspace)?;
        solved.iterations += 1;
        Ok(solved)
    }

    /// Newton's direction of this program at theta (its solution, as a
    /// coarser program over groups of a finer program's tokens) for
    /// `gradient`, the finer program's gradient summed over each group:
    /// the coarse step of a two-grid correction (Galerkin's: a potential
    /// whose tokens of one weight enter it through their total q has, over
    /// groups, the finer Hessian summed over each pair of groups, so this
    /// program's Newton system is the finer one restricted to steps
    /// constant on the groups). The finer program's start from this one's
    /// solution misses it by a part shared through the world's mass (what
    /// a diagonal step misses), which this system holds, at the groups'
    /// cost and not the tokens'. `tolerance` is the finer program's.
    pub(crate) fn coarse_direction(
        &self,
        theta: &[f64],
        gradient: &[f64],
        tolerance: f64,
        workspace: &mut Workspace,
    ) -> Vec<f64> {
        let at = self.potential.evaluate_rough(theta, workspace);
        let active = self.active_set(theta, gradient);
        let direction = self.direction(theta, &at, gradient, &active, tolerance, false, workspace);
        workspace.give(at.marginal);
        direction
    }

    /// `minimise`, on the rough rule first where `rough`.
    fn minimise_on(
        &self,
        start: Vec<f64>,
        rough: bool,
        budget: &Budget,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        if self.p.is_empty() {
            return Ok(Self::without_variables());
        }
        let (theta, current) = self.evaluated_start(start, rough, workspace);
        self.minimise_evaluated(theta, current, rough, budget, workspace)
    }

    /// `start` clamped to the box, with its objective and evaluation (on
    /// the rough rule where `rough`).
    fn evaluated_start(
        &self,
        mut start: Vec<f64>,
        rough: bool,
        workspace: &mut Workspace,
    ) -> (Vec<f64>, (f64, Evaluation<P::Hessian>)) {
        let (lo, hi) = self.bounds;
        start.iter_mut().for_each(|t| *t = t.clamp(lo, hi));
        let current = self.objective(&start, rough, workspace);
        (start, current)
    }

    /// The solution of a program without variables (a side of a problem
    /// that holds no token): nothing to evaluate, where an evaluation
    /// would still make the potential's grids from the other side's
    /// tokens.
    fn without_variables() -> Solved {
        Solved {
            theta: Vec::new(),
            marginal: Vec::new(),
            iterations: 0,
            out_of_time: false,
        }
    }

    /// `minimise` from the better of a guessed start and theta = 0 (each
    /// clipped to the box): a guess from a model of r can be far off where
    /// the model fails (drafts without replacement of every token, where r
    /// is a softmax and not proportional to q), and Newton from a point of
    /// saturated weights can stall where it converges from 0. The
    /// iteration starts from the evaluation that chose its start.
    pub(crate) fn minimise_from_better(
        &self,
        guess: Vec<f64>,
        budget: &Budget,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        if self.p.is_empty() {
            return Ok(Self::without_variables());
        }
        let (lo, hi) = self.bounds;
        let guess: Vec<f64> = guess.into_iter().map(|t| t.clamp(lo, hi)).collect();
        let zero = vec![0.0f64.clamp(lo, hi); guess.len()];
        let rough = self.potential.rough_until().is_some();
        let (at_guess, at_zero) = (
            self.objective(&guess, rough, workspace),
            self.objective(&zero, rough, workspace),
        );
        let (theta, current, other) = if at_guess.0 <= at_zero.0 {
            (guess, at_guess, at_zero)
        } else {
            (zero, at_zero, at_guess)
        };
        workspace.give(other.1.marginal);
        self.minimise_evaluated(theta, current, rough, budget, workspace)
    }

    /// The objective and the potential's evaluation at theta on its exact
    /// rule, from `rough`, its evaluation there on the rough one
    /// (`Potential::refine`).
    fn refined(
        &self,
        theta: &[f64],
        rough: Evaluation<P::Hessian>,
        workspace: &mut Workspace,
    ) -> (f64, Evaluation<P::Hessian>) {
        let evaluation = self.potential.refine(theta, rough, workspace);
        (self.value(theta, &evaluation), evaluation)
    }

    /// The objective's value from the potential's evaluation at theta.
    fn value(&self, theta: &[f64], evaluation: &Evaluation<P::Hessian>) -> f64 {
        let linear: f64 = self.p.iter().zip(theta).map(|(p, t)| p * t).sum();
        evaluation.potential - linear
    }

    /// The objective's value and the potential's evaluation, on its rough
    /// rule where `rough`.
    fn objective(
        &self,
        theta: &[f64],
        rough: bool,
        workspace: &mut Workspace,
    ) -> (f64, Evaluation<P::Hessian>) {
        let evaluation = if rough {
            self.potential.evaluate_rough(theta, workspace)
        } else {
            self.potential.evaluate(theta, workspace)
        };
        (self.value(theta, &evaluation), evaluation)
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_STEP_THETA, Potential, Program, Stop};
    use crate::budget::Budget;
    use crate::potential::iid::Selectable;
    use crate::thresholds::THETA_LIMIT;
    use crate::workspace::Workspace;

    /// Where each group's tokens are copies of one token (each of its p and
    /// q over the copies), a weight constant on the groups makes the finer
    /// program the coarser one, and for a gradient constant on the groups
    /// the finer Newton step is constant on them too: the coarser
    /// program's step for the summed gradient, spread back to the copies,
    /// is that step (Galerkin's coarse system is then exact), in either
    /// box, away from the optimum and at it.
    #[test]
    fn a_coarse_step_over_copies_is_the_finer_newton_step() {
        let (groups, copies, n) = (200, 3, 4);
        // Quasi-random laws (golden-ratio sequences) over a few nats.
        let law = |spin: f64| -> Vec<f64> {
            let x: Vec<f64> = (0..groups)
                .map(|g| (-6.0 * (g as f64 * spin).fract()).exp())
                .collect();
            let total: f64 = x.iter().sum();
            x.iter().map(|x| x / total).collect()
        };
        // p within a nat of q: the optimum is inside either box, where
        // every weight has curvature (a weight at a bound, free for a
        // gradient that pulls it inside, has none, and its step is the
        // ridge's, clipped by the reach).
        let q_coarse = law(0.754_877_666_2);
        let tilted: Vec<f64> = (q_coarse.iter().enumerate())
            .map(|(g, q)| q * (g as f64 * 0.618_033_988_7).fract().exp())
            .collect();
        let total: f64 = tilted.iter().sum();
        let p_coarse: Vec<f64> = tilted.iter().map(|x| x / total).collect();
        let spread = |x: &[f64]| -> Vec<f64> {
            (x.iter())
                .flat_map(|&x| std::iter::repeat_n(x / copies as f64, copies))
                .collect()
        };
        let (p_fine, q_fine) = (spread(&p_coarse), spread(&q_coarse));
        let base = 0.0;
        let coarse_potential = Selectable {
            q: &q_coarse,
            base,
            n,
        };
        let fine_potential = Selectable {
            q: &q_fine,
            base,
            n,
        };
        let mut workspace = Workspace::new();
        let budget = (Budget::default().with_max_gap(1e-8))
            .with_max_iterations(50)
            .keeping_at_cap();
        let program = |potential, p, bounds| Program {
            name: "test",
            potential,
            p,
            bounds,
            stop: Stop::ProjectedGradient,
            reach: MAX_STEP_THETA,
        };
        for bounds in [(-THETA_LIMIT, 0.0), (0.0, THETA_LIMIT)] {
            let coarse = program(&coarse_potential, &p_coarse, bounds);
            let fine = program(&fine_potential, &p_fine, bounds);
            let (lo, hi) = coarse.bounds;
            let solved = coarse
                .minimise(vec![0.0; groups], &budget, &mut workspace)
                .unwrap();
            let away: Vec<f64> = (0..groups)
                .map(|g| {
                    (0.5 * (g as f64 * 0.569_840_290_9).fract() - 0.25 + solved.theta[g])
                        .clamp(lo + 0.01, hi - 0.01)
                })
                .collect();
            for theta_coarse in [away, solved.theta] {
                let theta_fine: Vec<f64> = (theta_coarse.iter())
                    .flat_map(|&t| std::iter::repeat_n(t, copies))
                    .collect();
                // A gradient of a few 1e-9 per group, each copy its share.
                let summed: Vec<f64> = (0..groups)
                    .map(|g| 4e-9 * ((g as f64 * 0.324_717_957_2).fract() - 0.5))
                    .collect();
                let gradient = spread(&summed);
                let tolerance = 1e-9;
                let step =
                    coarse.coarse_direction(&theta_coarse, &summed, tolerance, &mut workspace);
                let at = fine.potential.evaluate(&theta_fine, &mut workspace);
                let active = fine.active_set(&theta_fine, &gradient);
                let newton = fine.direction(
                    &theta_fine,
                    &at,
                    &gradient,
                    &active,
                    tolerance,
                    false,
                    &mut workspace,
                );
                let size = newton.iter().fold(0.0f64, |m, d| m.max(d.abs()));
                assert!(size > 0.0, "{}: no step", fine.name);
                for (y, &d) in newton.iter().enumerate() {
                    let spread_step = step[y / copies];
                    assert!(
                        (spread_step - d).abs() <= 1e-6 * size,
                        "{}: token {y}: coarse {spread_step:e}, fine {d:e}",
                        fine.name
                    );
                }
            }
        }
    }
}
