//! Projected Newton for the box-constrained programs of both methods: minimise
//! `potential(theta) - <p, theta>` over `lo <= theta <= hi`, where the
//! potential's gradient is the selected-token marginal r.

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use crate::quadrature::GROUPED;
use crate::{ConvexError, scratch};

/// Armijo's sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;
/// Width of the ε-active set at the bounds, in theta.
const ACTIVE: f64 = 1e-3;
/// Longest move of one variable in one iteration.
const REACH: f64 = 4.0;
/// Tokens of largest draft probability whose Hessian block is kept dense
/// (`block_direction`).
pub(crate) const DENSE: usize = 48;

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
    fn evaluate(&self, theta: &[f64]) -> Evaluation<Self::Hessian>;
    /// A descent direction from `at`: Newton's (or close to it) in the free
    /// variables, zero on those `held` at a bound by their gradient.
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Self::Hessian>,
        gradient: &[f64],
        held: &[bool],
    ) -> Vec<f64>;
    /// Whether the potential's gradient is unchanged along theta + t·1
    /// (weights that enter only through their ratios): the objective is
    /// then linear along 1, and with no variable held its Newton system
    /// is singular there.
    fn flat_along_ones(&self) -> bool {
        false
    }
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
}

pub(crate) struct Solved {
    pub theta: Vec<f64>,
    pub marginal: Vec<f64>,
    pub iterations: usize,
}

impl<P: Potential> Program<'_, P> {
    fn gradient(&self, r: &[f64]) -> Vec<f64> {
        let mut gradient = scratch::take(r.len());
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
                .zip(self.gradient(r))
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
    /// the convex objective, and the direction vanishes only at KKT points.
    /// Own code: no maintained crate offers box-constrained Newton-type
    /// minimisation (argmin's L-BFGS has no bounds).
    pub fn minimise(
        &self,
        start: Vec<f64>,
        tolerance: f64,
        max_iterations: usize,
    ) -> Result<Solved, ConvexError> {
        let (lo, hi) = self.bounds;
        let mut theta = start;
        theta.iter_mut().for_each(|t| *t = t.clamp(lo, hi));
        let mut current = self.objective(&theta);
        let mut iterations = 0;
        loop {
            let lost = self.residual(&theta, &current.1.marginal);
            if lost <= tolerance || self.p.is_empty() {
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
            let gradient = self.gradient(&current.1.marginal);
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
            let mut direction = self
                .potential
                .direction(&theta, &current.1, &gradient, &active);
            if self.potential.flat_along_ones() && !active.contains(&true) {
                self.recentre(&theta, &mut direction);
            }
            for ((d, &t), &a) in direction.iter_mut().zip(&theta).zip(&active) {
                if a {
                    *d = if t - lo <= ACTIVE { lo - t } else { hi - t };
                }
                *d = d.clamp(-REACH, REACH);
            }
            // Rounding in the potential, so that the search does not stall
            // on noise near the optimum.
            let slack = 1e-14 * (1.0 + value.abs());
            let mut step = 1.0;
            loop {
                let mut trial = scratch::take(theta.len());
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
                let mut evaluated = self.objective(&trial);
                let accepted = evaluated.0 <= value + ARMIJO * decrease + slack || step < 1e-10;
                if accepted {
                    std::mem::swap(&mut theta, &mut trial);
                    std::mem::swap(&mut current, &mut evaluated);
                }
                // The point left behind.
                scratch::give(trial);
                scratch::give(evaluated.1.marginal);
                if accepted {
                    break;
                }
                step *= 0.5;
            }
            scratch::give(gradient);
            scratch::give(direction);
        }
    }

    /// Takes a multiple of 1 off a direction with no variable held, for a
    /// potential flat along 1. The Newton system is then singular along 1,
    /// and the direction's component there is the rounding of Σ (r - p)
    /// amplified by the ridge (it reached 50 in theta on a two-token
    /// instance): it moves no r, and clipped by REACH or the box it wiped
    /// out the step that did, so the iteration cycled short of its
    /// tolerance. Any multiple of 1 gives a Newton direction with the same
    /// r; the one taken off is the direction's mean, moved as little as
    /// needed to keep the full step inside the box.
    fn recentre(&self, theta: &[f64], direction: &mut [f64]) {
        let (lo, hi) = self.bounds;
        let moved = theta.iter().zip(direction.iter()).map(|(t, d)| t + d);
        let (low, high) = moved.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let mean = direction.iter().sum::<f64>() / direction.len() as f64;
        let (least, most) = (high - hi, low - lo);
        let shift = if least <= most {
            mean.clamp(least, most)
        } else {
            mean
        };
        direction.iter_mut().for_each(|d| *d -= shift);
    }

    /// The objective's value and the potential's evaluation.
    fn objective(&self, theta: &[f64]) -> (f64, Evaluation<P::Hessian>) {
        let evaluation = self.potential.evaluate(theta);
        let linear: f64 = self.p.iter().zip(theta).map(|(p, t)| p * t).sum();
        (evaluation.potential - linear, evaluation)
    }
}

/// The Hessian's diagonal, and its entries among the `dense` tokens (row
/// major, zero diagonal).
pub(crate) struct Block {
    pub curvature: Vec<f64>,
    pub coupling: Vec<f64>,
}

/// The `DENSE` tokens of largest q, where the coupling of set-grouped
/// potentials lives.
pub(crate) fn dense_tokens(q: &[f64]) -> Vec<usize> {
    let mut dense: Vec<usize> = (0..q.len()).collect();
    let by_q = |&a: &usize, &b: &usize| q[b].total_cmp(&q[a]);
    if dense.len() > DENSE {
        dense.select_nth_unstable_by(DENSE, by_q);
        dense.truncate(DENSE);
    }
    dense.sort_unstable_by(by_q);
    dense
}

/// The Newton direction of a block-diagonal model: the exact Hessian among
/// the `dense` tokens, its diagonal elsewhere. Pure diagonal scaling
/// crawled on real rows: the top tokens (q up to 0.6) couple strongly.
pub(crate) fn block_direction(
    r: &[f64],
    hessian: &Block,
    dense: &[usize],
    gradient: &[f64],
    held: &[bool],
) -> Vec<f64> {
    // A floor on the curvature keeps steps finite where r is flat in theta.
    let diagonal = |k: usize| hessian.curvature[k].max(1e-12 * r[k]).max(1e-300);
    let mut direction: Vec<f64> = (0..r.len())
        .map(|k| {
            if held[k] {
                0.0
            } else {
                -gradient[k] / diagonal(k)
            }
        })
        .collect();
    let m = dense.len();
    let free: Vec<usize> = (0..m).filter(|&i| !held[dense[i]]).collect();
    if free.len() > 1 {
        let f = free.len();
        let block = DMatrix::from_fn(f, f, |i, j| {
            let (a, b) = (free[i], free[j]);
            if a == b {
                diagonal(dense[a])
            } else {
                hessian.coupling[a * m + b]
            }
        });
        let rhs = DVector::from_fn(f, |i, _| -gradient[dense[free[i]]]);
        // The block is singular when every draft is selectable (theta +
        // t·1 changes nothing), and its diagonal, computed without the
        // rule's tail terms, can fall a hair short of positive
        // semidefinite: a ridge from 1e-8 of the largest curvature up.
        let largest = free.iter().map(|&a| diagonal(dense[a])).fold(0.0, f64::max);
        let solution = [1e-8, 1e-6, 1e-4].into_iter().find_map(|ridge| {
            let ridged = &block + DMatrix::identity(f, f) * (ridge * largest);
            ridged.cholesky().map(|c| c.solve(&rhs))
        });
        if let Some(solution) = solution {
            for (i, &a) in free.iter().enumerate() {
                direction[dense[a]] = solution[i];
            }
        }
    }
    direction
}

/// `x` on `tokens`, in their order.
pub(crate) fn gather(tokens: &[usize], x: &[f64]) -> Vec<f64> {
    let mut gathered = scratch::take(tokens.len());
    gathered.extend(tokens.iter().map(|&y| x[y]));
    gathered
}

/// The outer and inner solutions back on the vocabulary.
pub(crate) struct Assembled {
    /// e^theta of the outer program on its tokens, 0 elsewhere.
    pub outer_weights: Vec<f64>,
    /// e^theta of the inner program on its tokens, 0 elsewhere.
    pub inner_weights: Vec<f64>,
    /// r on both programs' tokens.
    pub selected: Vec<f64>,
    /// Σ min(p, r).
    pub alpha: f64,
    pub iterations: usize,
}

/// Scatters the two programs' solutions (over disjoint token lists) to the
/// vocabulary of `p`.
pub(crate) fn assemble(
    p: &[f64],
    outer: (&[usize], Solved),
    inner: (&[usize], Solved),
) -> Assembled {
    let v = p.len();
    let mut selected = vec![0.0; v];
    let mut outer_weights = vec![0.0; v];
    let mut inner_weights = vec![0.0; v];
    let iterations = outer.1.iterations + inner.1.iterations;
    for ((tokens, mut solved), weights) in
        [(outer, &mut outer_weights), (inner, &mut inner_weights)]
    {
        // In place (a vector of the vocabulary's size less to fault in), and
        // in parallel only for programs large enough to run in rayon's pool
        // (`ConvexSolver::solve`): below, the call would wait for a worker.
        let exponential = |t: &mut f64| *t = t.exp();
        if solved.theta.len() < GROUPED {
            solved.theta.iter_mut().for_each(exponential);
        } else {
            solved.theta.par_iter_mut().for_each(exponential);
        }
        for ((&y, &w), &r) in tokens.iter().zip(&solved.theta).zip(&solved.marginal) {
            weights[y] = w;
            selected[y] = r;
        }
        scratch::give(solved.theta);
        scratch::give(solved.marginal);
    }
    let alpha = p.iter().zip(&selected).map(|(p, r)| p.min(*r)).sum();
    Assembled {
        outer_weights,
        inner_weights,
        selected,
        alpha,
        iterations,
    }
}
