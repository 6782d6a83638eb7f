//! Projected Newton for the box-constrained programs of both methods: minimise
//! `potential(theta) - <p, theta>` over `lo <= theta <= hi`, where the
//! potential's gradient is the selected-token marginal r.

use crate::{ConvexError, Workspace};

/// Armijo's sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;
/// Width of the ε-active set at the bounds, in theta.
const ACTIVE: f64 = 1e-3;
/// Longest move of one variable in one iteration, for programs whose
/// variables start near their optimum (`Program::reach`).
pub(crate) const REACH: f64 = 4.0;
/// Multiples of the tolerance that decide how the selected mass of the
/// variables held at the lower bound is moved (`Program::along_ones`).
const UNSEEN: f64 = 1e-3;
const MODELLED: f64 = 10.0;

/// How Newton's iteration takes a direction's component along 1 on the
/// free variables (`Program::along_ones`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum AlongOnes {
    /// From the Newton system.
    Newton,
    /// Not at all: the held variables' selected mass is below the
    /// tolerance's reach.
    Unseen,
    /// From a model of the held variables' selected mass (the value).
    Modelled(f64),
}
/// The logarithm of the fall of a variable's gap to its limit beyond
/// which its step is lengthened (`Program::saturation_steps`): one e-fold,
/// where Newton's step, under one unit for a gap falling near e-fold a
/// unit, starts to crawl.
const SATURATED: f64 = 1.0;
/// Relative change of the objective below which its evaluation does not
/// resolve it: past ~10^6 drafts the potential's value carries rounding of
/// about 1e-12 relative (its powers x^n), while a Newton step near the
/// optimum changes it by the square of the residual.
const RESOLVED: f64 = 1e-10;
/// The share of the loss above which a step on the rough rule ends the
/// rough phase (`Program::minimise_evaluated`).
const ROUGH_PROGRESS: f64 = 0.9;
/// A line search that halves its step below this has found no step the
/// objective accepts: the next iteration takes `log_ratio_direction`.
const STALLED: f64 = 1e-10;
/// A step accepted below this has not found one either, whatever took it
/// (a decrease within the objective's rounding, or a residual lower by
/// its noise): the next iteration takes `log_ratio_direction` too. Drafts
/// without replacement, n = V = 3, p = (2.8e-4, 1.1e-7, 0.9997), q =
/// (0.59, 0.40, 0.0027): from the log-ratio start two tokens' r lie far
/// below p and below the noise of the Hessian's products, Newton's
/// direction is of size 300 along that noise, and the line search accepts
/// steps near 1e-8 of it, each lowering the residual by rounding, without
/// end (kept in the proptest regressions).
const CRAWLED: f64 = 1e-6;

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

/// The share of a program's tolerance that the quadratic model may leave
/// of the gradient after a Newton step (`Potential::direction`): the rest
/// is for the model's error and the held variables.
const MODEL_SHARE: f64 = 0.25;
/// Conjugate-gradient iterations per Newton direction.
const CG_ITERATIONS: usize = 50;
/// The least relative residual at which conjugate gradients stop.
const CG_TOLERANCE: f64 = 1e-10;
/// The largest: far from the optimum the Newton system is solved this
/// roughly.
const FORCING_MAX: f64 = 0.3;
/// The power of the gradient's norm that sets the relative residual at
/// which conjugate gradients stop (the forcing term). Each product costs
/// an evaluation of r, as the line search's trial point does, and Newton's
/// steps far from the optimum are limited by the potential's curvature
/// changing along them more than by the solve: on the shared rows (drafts
/// without replacement, top 1000, n = 4) a quarter power takes fewer
/// products than the square root for the same iterations.
const FORCING_POWER: f64 = 0.25;
/// The share of r that the held variables must carry for the
/// preconditioner's term along 1 on the free ones (`free_mode`): about the
/// relative error of Hessian products by differences.
const HELD_MODE_FLOOR: f64 = 1e-6;
/// Ridge added to the Hessian's diagonal, relative to its scale: the
/// potentials are flat along theta + t·1, where the Hessian is singular.
const RIDGE: f64 = 1e-12;

/// Newton's direction on the free variables (not `held`) of a potential
/// whose Hessian is known through products `hessian_times(v)` (v zero on
/// the held variables) and an estimate of its `diagonal`: preconditioned
/// conjugate gradients from zero, the preconditioner Jacobi's plus, where
/// the held variables carry selected mass, the inverse of the curvature
/// along 1 on the free ones (`free_mode`). Each step lowers the quadratic
/// model, so an early stop still gives a descent direction. The scale of
/// the ridge is that of r, which bounds the Hessian's entries: where the
/// Hessian vanishes (one draft: r = q whatever theta) the direction is the
/// gradient over the ridge, which the iteration clips. The iteration
/// stops at the forcing term's relative residual, or where the residual,
/// the gradient that the quadratic model predicts after the step, is
/// within `enough` in l1 norm: the program's stop rule needs no more.
pub(crate) fn newton_by_conjugate_gradients(
    hessian_times: impl Fn(&[f64]) -> Vec<f64>,
    diagonal: &[f64],
    marginal: &[f64],
    gradient: &[f64],
    held: &[bool],
    enough: f64,
) -> Vec<f64> {
    let size = gradient.len();
    let free = |y: usize| !held[y];
    let scale = (diagonal.iter().fold(0.0f64, |m, &d| m.max(d.abs())))
        .max(marginal.iter().sum::<f64>())
        .max(f64::MIN_POSITIVE);
    let ridge = RIDGE * scale;
    let preconditioner: Vec<f64> = (0..size)
        .map(|y| {
            if free(y) {
                1.0 / (diagonal[y].max(0.0) + ridge)
            } else {
                0.0
            }
        })
        .collect();
    let product = |v: &[f64]| -> Vec<f64> {
        let mut out = hessian_times(v);
        for (y, o) in out.iter_mut().enumerate() {
            *o = if free(y) { *o + ridge * v[y] } else { 0.0 };
        }
        out
    };
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(x, y)| x * y).sum::<f64>();
    let mut d = vec![0.0; size];
    let mut residual: Vec<f64> = (0..size)
        .map(|y| if free(y) { -gradient[y] } else { 0.0 })
        .collect();
    let start = dot(&residual, &residual).sqrt();
    // Inexact Newton (Eisenstat & Walker, SIAM J. Sci. Comput. 1996): far
    // from the optimum a rough solve of the Newton system does as well, and
    // the forcing term |g|^FORCING_POWER tightens as the gradient falls,
    // which keeps the convergence superlinear (of order 1 + FORCING_POWER).
    let forcing = start.powf(FORCING_POWER).clamp(CG_TOLERANCE, FORCING_MAX);
    let free_mode = free_mode(marginal, held);
    let precondition = |residual: &[f64]| -> Vec<f64> {
        let along = free_mode
            * (0..size)
                .filter(|&y| free(y))
                .map(|y| residual[y])
                .sum::<f64>();
        (0..size)
            .map(|y| {
                if free(y) {
                    residual[y] * preconditioner[y] + along
                } else {
                    0.0
                }
            })
            .collect()
    };
    let mut z = precondition(&residual);
    let mut search = z.clone();
    let mut rz = dot(&residual, &z);
    for _ in 0..CG_ITERATIONS {
        let hs = product(&search);
        let curvature = dot(&search, &hs);
        if curvature <= 0.0 {
            break;
        }
        let step = rz / curvature;
        d.iter_mut().zip(&search).for_each(|(d, s)| *d += step * s);
        residual
            .iter_mut()
            .zip(&hs)
            .for_each(|(r, h)| *r -= step * h);
        if dot(&residual, &residual).sqrt() <= forcing * start
            || residual.iter().map(|r| r.abs()).sum::<f64>() <= enough
        {
            break;
        }
        z = precondition(&residual);
        let rz_next = dot(&residual, &z);
        search = z
            .iter()
            .zip(&search)
            .map(|(z, s)| z + rz_next / rz * s)
            .collect();
        rz = rz_next;
    }
    if d.iter().all(|&x| x == 0.0) {
        // No curvature found: the preconditioned gradient.
        return (0..size)
            .map(|y| -gradient[y] * preconditioner[y])
            .collect();
    }
    d
}

/// The preconditioner's weight of 1 on the free variables: raising them
/// together only trades selected mass with the held ones, a curvature
/// about the held variables' r (for one draft set the Hessian is diag(π) -
/// ππ^T, and 1_F^T H 1_F = π(F) π(held)), which the diagonal misses, as
/// Jacobi's preconditioner then does: its inverse, 1 / r(held), adds
/// (Σ_F z) / r(held) to every free entry, a positive rank-one term. None where the
/// held mass is below `HELD_MODE_FLOOR` of r's: the products by
/// differences do not resolve the mode's curvature there, and the program
/// takes that step from its own model (`Program::along_ones`).
fn free_mode(marginal: &[f64], held: &[bool]) -> f64 {
    let total: f64 = marginal.iter().sum();
    let held_mass: f64 = (marginal.iter().zip(held))
        .filter(|(_, held)| **held)
        .map(|(r, _)| r)
        .sum();
    if held_mass > HELD_MODE_FLOOR * total {
        held_mass.recip()
    } else {
        0.0
    }
}

/// `gradient` less its mean over the free (not `held`) variables there.
fn without_free_mean(gradient: &[f64], held: &[bool]) -> Vec<f64> {
    let free = held.iter().filter(|&&h| !h).count().max(1) as f64;
    let mean = (gradient.iter().zip(held))
        .filter(|(_, h)| !**h)
        .map(|(g, _)| g)
        .sum::<f64>()
        / free;
    (gradient.iter().zip(held))
        .map(|(&g, &h)| if h { g } else { g - mean })
        .collect()
}

/// When a program is solved.
#[derive(Debug, Clone, Copy)]
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
    /// Longest move of one variable in one iteration: REACH keeps a
    /// Newton step from throwing a variable of small curvature across the
    /// box; a program whose variables must cross it to find a set (the
    /// separating one) takes the box's width.
    pub reach: f64,
}

pub(crate) struct Solved {
    pub theta: Vec<f64>,
    pub marginal: Vec<f64>,
    pub iterations: usize,
}

impl<P: Potential> Program<'_, P> {
    fn gradient(&self, r: &[f64], workspace: &mut Workspace) -> Vec<f64> {
        let mut gradient = workspace.take(r.len());
        gradient.extend(r.iter().zip(self.p).map(|(r, p)| r - p));
        gradient
    }

    /// Whether theta_k is within `margin` of a bound that its gradient
    /// pushes against.
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
    /// box) with Armijo backtracking along the projection arc
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
        tolerance: f64,
        max_iterations: usize,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        if self.p.is_empty() {
            return Ok(Self::without_variables());
        }
        let (lo, hi) = self.bounds;
        let mut theta = start;
        theta.iter_mut().for_each(|t| *t = t.clamp(lo, hi));
        let rough = self.potential.rough_until().is_some();
        let current = self.objective(&theta, rough, workspace);
        self.minimise_evaluated(theta, current, tolerance, max_iterations, workspace)
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
        tolerance: f64,
        max_iterations: usize,
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
        self.minimise_evaluated(theta, current, tolerance, max_iterations, workspace)
    }

    /// `minimise` from `theta` (inside the box), whose objective and
    /// evaluation are `current`, on the rough rule where the potential
    /// has one (`Potential::rough_until`). The iteration goes on the rough rule
    /// while the acceptance lost is above its reach, and on the exact rule
    /// from there: the rough one's values are not compared with the exact
    /// one's, so the change comes between iterations, with a new
    /// evaluation. It changes early, before the step, where the step the
    /// rough line search takes lowers the loss by less than a tenth
    /// (`ROUGH_PROGRESS`): the rough rule's own
    /// optimum may lose more than its reach (drafts without replacement at
    /// the full vocabulary, n = 4: 1.6e-6 on a shared row; 2e-4 on four
    /// tokens with a q of 6e-4, where the rough iteration cycled between
    /// two points), and a step that the rough objective accepts but the
    /// exact one would not can lead where Newton's direction degenerates
    /// (three tokens, one of p = 1e-8 and q = 6e-7, kept in the proptest
    /// regressions). Far from the optimum Newton's steps lower the loss by
    /// more than that, so the rough phase still covers most iterations.
    fn minimise_evaluated(
        &self,
        mut theta: Vec<f64>,
        mut current: (f64, Evaluation<P::Hessian>),
        tolerance: f64,
        max_iterations: usize,
        workspace: &mut Workspace,
    ) -> Result<Solved, ConvexError> {
        let (lo, hi) = self.bounds;
        let mut rough = self.potential.rough_until().is_some();
        let rough_until = self.potential.rough_until().unwrap_or(0.0).max(tolerance);
        let mut iterations = 0;
        // Whether the last line search found no step the objective
        // accepts (`STALLED`), or took one below `CRAWLED`.
        let mut stalled = false;
        let mut crawled = false;
        loop {
            let lost = self.residual(&theta, &current.1.marginal);
            if rough && lost <= rough_until {
                current = self.refined(&theta, current.1, workspace);
                rough = false;
                continue;
            }
            if lost <= tolerance {
                return Ok(Solved {
                    theta,
                    marginal: current.1.marginal,
                    iterations,
                });
            }
            if iterations == max_iterations {
                return Err(ConvexError::IterationCap {
                    side: self.name,
                    iterations,
                    lost,
                    tolerance,
                });
            }
            iterations += 1;
            let value = current.0;
            let gradient = self.gradient(&current.1.marginal, workspace);
            // Variables within ACTIVE of a bound that their gradient pushes
            // against go to it and leave the Newton system (Bertsekas' ε-active
            // set): a Newton step for a variable a hair above its bound is
            // cut by the projection for every step length, which stalls the
            // line search.
            let active: Vec<bool> = theta
                .iter()
                .zip(&gradient)
                .map(|(&t, &g)| self.held(t, g, ACTIVE))
                .collect();
            let along = self.along_ones(&theta, &current.1.marginal, &active, tolerance);
            let flat = along != AlongOnes::Newton;
            // Where the Hessian is singular along 1 on the free variables,
            // the Newton system holds only without the gradient's mean
            // there: its part along 1 is the objective's slope along 1,
            // which `recentre` takes instead. Left in, it would ask the
            // solver for a step of size (mean) / (noise of the products
            // along 1), and conjugate gradients then stop on a curvature
            // of the wrong sign (drafts without replacement, one clock of
            // rate near 1 beside three near 1e-6).
            let system_gradient = if flat {
                without_free_mean(&gradient, &active)
            } else {
                gradient.clone()
            };
            let mut direction = if stalled || crawled {
                log_ratio_direction(&current.1.marginal, self.p, &active)
            } else {
                self.potential.direction(
                    &theta,
                    &current.1,
                    &system_gradient,
                    &active,
                    MODEL_SHARE * tolerance,
                    workspace,
                )
            };
            if flat {
                self.recentre(&theta, &mut direction, &active);
            }
            if let AlongOnes::Modelled(held_mass) = along {
                let shift = self.held_mass_model_shift(held_mass, &gradient, &active);
                (direction.iter_mut().zip(&active))
                    .filter(|(_, held)| !**held)
                    .for_each(|(d, _)| *d += shift);
            }
            self.saturation_steps(&current.1.marginal, &active, &mut direction);
            for ((d, &t), &a) in direction.iter_mut().zip(&theta).zip(&active) {
                if a {
                    *d = if t - lo <= ACTIVE { lo - t } else { hi - t };
                }
                *d = d.clamp(-self.reach, self.reach);
            }
            // Rounding in the potential, so that the search does not stall
            // on noise near the optimum.
            let slack = 1e-14 * (1.0 + value.abs());
            // A step whose predicted decrease the objective cannot resolve
            // is judged by the residual it leaves instead: Armijo's test
            // would compare noise there and backtrack an exact Newton step
            // (as at n = 10^6 drafts) until the iteration stalls.
            let predicted: f64 = direction.iter().zip(&gradient).map(|(d, g)| d * g).sum();
            let unresolved = -predicted <= RESOLVED * (1.0 + value.abs());
            let mut step = 1.0;
            loop {
                let mut trial = workspace.take(theta.len());
                trial.extend(
                    theta
                        .iter()
                        .zip(&direction)
                        .map(|(t, d)| (t + step * d).clamp(lo, hi)),
                );
                let decrease: f64 = trial
                    .iter()
                    .zip(&theta)
                    .zip(&gradient)
                    .map(|((t1, t0), g)| (t1 - t0) * g)
                    .sum();
                let evaluated = self.objective(&trial, rough, workspace);
                stalled = step < STALLED;
                let accepted = evaluated.0 <= value + ARMIJO * decrease + slack
                    || stalled
                    || (unresolved && self.residual(&trial, &evaluated.1.marginal) < lost);
                // The rough phase ends at a step that hardly lowers the
                // loss: the iteration goes on from theta on the exact rule.
                let rough_ends = accepted
                    && rough
                    && self.residual(&trial, &evaluated.1.marginal) > ROUGH_PROGRESS * lost;
                if rough_ends {
                    workspace.give(evaluated.1.marginal);
                    current = self.refined(&theta, current.1, workspace);
                    rough = false;
                } else if accepted {
                    std::mem::swap(&mut theta, &mut trial);
                    workspace.give(std::mem::replace(&mut current, evaluated).1.marginal);
                } else {
                    workspace.give(evaluated.1.marginal);
                }
                // The point left behind.
                workspace.give(trial);
                if accepted {
                    crawled = !rough_ends && step < CRAWLED;
                    break;
                }
                step *= 0.5;
            }
            workspace.give(gradient);
            workspace.give(direction);
        }
    }

    /// Takes a multiple of 1 off the free variables of a direction, for a
    /// potential flat along 1 whose held variables (if any) are unseen or
    /// modelled (`along_ones`). The Newton system is then singular, or nearly, along
    /// 1 on the free variables, and the direction's
    /// component there is the rounding of Σ (r - p) amplified by the ridge
    /// (50 in theta on a two-token instance, hundreds with one token held
    /// at the lower bound at n = 5000): it moves no r, and clipped by the reach
    /// or the box it wipes out the step that does, so the iteration would
    /// cycle short of its tolerance. Any multiple of 1 gives a
    /// Newton direction with the same r; the one taken off is the free
    /// components' mean, moved as little as needed to keep the full step
    /// inside the box.
    fn recentre(&self, theta: &[f64], direction: &mut [f64], held: &[bool]) {
        let (lo, hi) = self.bounds;
        let free = || {
            (theta.iter().zip(direction.iter()).zip(held))
                .filter(|(_, held)| !**held)
                .map(|(pair, _)| pair)
        };
        let (low, high) = free().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (t, d)| {
            (a.min(t + d), b.max(t + d))
        });
        let count = free().count() as f64;
        let mean = free().map(|(_, d)| d).sum::<f64>() / count;
        let (least, most) = (high - hi, low - lo);
        let shift = if least <= most {
            mean.clamp(least, most)
        } else {
            mean
        };
        (direction.iter_mut().zip(held))
            .filter(|(_, held)| !**held)
            .for_each(|(d, _)| *d -= shift);
    }

    /// How a direction's component along 1 on the free variables is taken,
    /// for a potential flat along 1 (on all variables). Moving the free
    /// variables along 1 moves selected mass only between them and the
    /// held ones. Where some variable is free and the held ones carry
    /// little selected mass:
    /// * at most UNSEEN x `tolerance` (none held included), with every
    ///   held variable at the lower bound (held there because its r
    ///   exceeds its p): the most such a move can do is take that mass
    ///   back, below the tolerance, and the potential is flat along 1 but
    ///   for it;
    /// * at most MODELLED x `tolerance`, or less held at the upper bound
    ///   (held there because its r falls short of its p, which such a move
    ///   can make up): the Hessian's curvature along 1 is about that
    ///   mass, within the noise of Hessian products by differences (drafts
    ///   without replacement: with a token of p = 3e-9 held at 1e-7 of
    ///   selected mass, Newton's step along 1 flips sign from one
    ///   iteration to the next; with a token of p = 2.5e-7 held at the
    ///   upper bound at 1.7e-7, Newton's steps moved one free variable
    ///   and then the other by noise, without end; the proptest
    ///   regressions keep both), so the step along 1 comes from a model
    ///   of the held mass instead (`held_mass_model_shift`);
    /// * else Newton's.
    fn along_ones(&self, theta: &[f64], r: &[f64], held: &[bool], tolerance: f64) -> AlongOnes {
        if !self.potential.flat_along_ones() || !held.contains(&false) {
            return AlongOnes::Newton;
        }
        let lo = self.bounds.0;
        let mut held_mass = 0.0;
        let mut short = false;
        for ((&t, &r), &held) in theta.iter().zip(r).zip(held) {
            if held {
                short |= t > lo + ACTIVE;
                held_mass += r;
            }
        }
        if held_mass <= UNSEEN * tolerance && !short {
            AlongOnes::Unseen
        } else if held_mass <= MODELLED * tolerance {
            AlongOnes::Modelled(held_mass)
        } else {
            AlongOnes::Newton
        }
    }

    /// The shift t of the free variables that moves the selected mass the
    /// free tokens lack, S = Σ_free (p - r), from the held ones, whose
    /// weights are small beside the free ones': their mass then falls
    /// like e^(-t), so e^(-t) = 1 - S / held mass (at most the reach, in
    /// either direction; the reach where S takes all of it).
    fn held_mass_model_shift(&self, held_mass: f64, gradient: &[f64], held: &[bool]) -> f64 {
        let lacking: f64 = (gradient.iter().zip(held))
            .filter(|(_, held)| !**held)
            .map(|(g, _)| -g)
            .sum();
        let left = 1.0 - lacking / held_mass;
        if left > 0.0 {
            (-left.ln()).clamp(-self.reach, self.reach)
        } else {
            self.reach
        }
    }

    /// Lengthens the direction of each free variable whose r must rise
    /// far toward its limit P (`Potential::saturation`) to the least step
    /// that can get it there. Its gap P - r_y = E[1{y ∈ S} A / (a_y + A)],
    /// A the other weights of the draft set, falls with theta_y at the
    /// log-rate κ = E[1{y ∈ S} a_y A / (a_y + A)²] / E[1{y ∈ S} A / (a_y +
    /// A)], a mean of a_y / (a_y + A) in (0, 1): at most e-fold a unit, so
    /// with the others fixed the gap P - p_y is reached no sooner than
    /// ln((P - r_y) / (P - p_y)), a step that cannot pass the optimum.
    /// Newton's step, (p_y - r_y) / (κ (P - r_y)), stays under 1 / κ: a
    /// variable whose p is near its limit crawls to it about one unit an
    /// iteration (drafts without replacement: Newton alone takes the
    /// inner program's likeliest token from theta 3 to 12 in ten
    /// iterations).
    /// The step is lengthened only where the gap must fall more than
    /// `SATURATED`-fold in logarithm: nearer, Newton converges on its
    /// own, and the other variables' moves, which the bound leaves out,
    /// make the longer step overshoot (on a shared row at top 100 it
    /// makes the iteration cycle at step 1/8 short of its tolerance). Where
    /// p_y is at or past the limit the variable heads for its upper bound.
    fn saturation_steps(&self, r: &[f64], held: &[bool], direction: &mut [f64]) {
        let Some(limit) = self.potential.saturation() else {
            return;
        };
        for (y, d) in direction.iter_mut().enumerate() {
            if held[y] || r[y] >= self.p[y] {
                continue;
            }
            let limit = limit(y);
            let (gap, wanted) = (limit - r[y], limit - self.p[y]);
            let least = if wanted > 0.0 {
                (gap / wanted).ln()
            } else {
                f64::INFINITY
            };
            if least > SATURATED {
                *d = d.max(least);
            }
        }
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

/// The direction theta_y += ln(p_y / r_y) on the free tokens (0 on the
/// held ones; a token of r or p zero toward the side it must move,
/// clamped by the reach as every direction is): the fixed-point update of
/// a softmax, r_y ∝ e^(theta_y), taken after a line search that found no
/// step. Newton's direction comes from Hessian products that cannot
/// resolve a token whose r is far below the rounding of the others'
/// (drafts without replacement, every token drafted, r of 2.5e-7 for a
/// token whose p is 1.2e-3 beside one of r near 1: its curvature is below
/// the noise of the products by differences, conjugate gradients return
/// a direction of size 10^4 along that noise, and no step of it lowers
/// the objective, for 100 iterations); the log ratio moves such a token
/// by what its r lacks, at most the reach an iteration.
fn log_ratio_direction(r: &[f64], p: &[f64], held: &[bool]) -> Vec<f64> {
    (r.iter().zip(p).zip(held))
        .map(|((&r, &p), &held)| match (held, r > 0.0, p > 0.0) {
            (true, _, _) => 0.0,
            (false, true, true) => (p / r).ln(),
            (false, _, false) => -REACH,
            (false, false, true) => REACH,
        })
        .collect()
}
