//! Projected Newton for the box-constrained programs of both methods: minimise
//! `potential(theta) - <p, theta>` over `lo <= theta <= hi`, where the
//! potential's gradient is the selected-token marginal r.

use nalgebra::{DMatrix, DVector};

use crate::ConvexError;

/// Armijo's sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;
/// Tokens of largest draft probability whose Hessian block is kept dense.
const DENSE: usize = 48;

/// A potential at one point: its value, gradient and curvature.
pub(crate) struct Evaluation {
    pub potential: f64,
    /// r_y, the gradient in theta_y.
    pub marginal: Vec<f64>,
    /// The diagonal of the Hessian, dr_y / dtheta_y (to scale steps; no
    /// accuracy needed).
    pub curvature: Vec<f64>,
    /// The Hessian's off-diagonal entries among the tokens `dense` (row
    /// major, zero diagonal).
    pub coupling: Vec<f64>,
}

/// A convex function of theta whose gradient is a selected-token marginal.
pub(crate) trait Potential: Sync {
    fn evaluate(&self, theta: &[f64], dense: &[usize]) -> Evaluation;
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
pub(crate) struct Program<'a> {
    pub name: &'static str,
    pub potential: &'a dyn Potential,
    /// Draft probabilities, to choose the dense block.
    pub q: &'a [f64],
    pub p: &'a [f64],
    pub bounds: (f64, f64),
    pub stop: Stop,
    /// Whether every pair of tokens couples (through phi, in the
    /// enumeration-free potential) rather than only tokens drafted together
    /// (set-grouped potentials): then steps are corrected for the coupling
    /// outside the dense block (`subspace_direction`).
    pub collective: bool,
}

pub(crate) struct Solved {
    pub theta: Vec<f64>,
    pub marginal: Vec<f64>,
    pub iterations: usize,
}

impl Program<'_> {
    fn gradient(&self, r: &[f64]) -> Vec<f64> {
        r.iter().zip(self.p).map(|(r, p)| r - p).collect()
    }

    /// Whether theta_k sits at a bound that its gradient pushes against.
    fn held(&self, theta: f64, gradient: f64) -> bool {
        let (lo, hi) = self.bounds;
        (theta <= lo && gradient > 0.0) || (theta >= hi && gradient < 0.0)
    }

    fn residual(&self, theta: &[f64], r: &[f64]) -> f64 {
        match self.stop {
            Stop::Excess => r.iter().zip(self.p).map(|(r, p)| (r - p).max(0.0)).sum(),
            Stop::Shortfall => r.iter().zip(self.p).map(|(r, p)| (p - r).max(0.0)).sum(),
            Stop::ProjectedGradient => theta
                .iter()
                .zip(self.gradient(r))
                .filter(|&(&t, g)| !self.held(t, g))
                .map(|(_, g)| g.abs())
                .sum(),
        }
    }

    /// Projected Newton with a block-diagonal Hessian and Armijo
    /// backtracking along the projection arc (Bertsekas, SIAM J. Control
    /// Optim. 1982, "two-metric" projection): the exact Hessian among the
    /// `DENSE` tokens of largest q, where the coupling lives, its diagonal
    /// elsewhere; variables held at a bound by their gradient do not move.
    /// Each accepted step decreases the convex objective, and the direction
    /// vanishes only at KKT points. Pure diagonal scaling (with or without
    /// Barzilai-Borwein steps) crawled on real rows: the inner Hessian is
    /// singular along theta + t·1, and the top tokens (q up to 0.6) couple
    /// strongly. Own code: no maintained crate offers box-constrained
    /// Newton-type minimisation (argmin's L-BFGS has no bounds).
    pub fn minimise(
        &self,
        start: f64,
        tolerance: f64,
        max_iterations: usize,
    ) -> Result<Solved, ConvexError> {
        let (lo, hi) = self.bounds;
        let mut dense: Vec<usize> = (0..self.q.len()).collect();
        let by_q = |&a: &usize, &b: &usize| self.q[b].total_cmp(&self.q[a]);
        if dense.len() > DENSE {
            dense.select_nth_unstable_by(DENSE, by_q);
            dense.truncate(DENSE);
        }
        dense.sort_unstable_by(by_q);
        let mut theta = vec![start.clamp(lo, hi); self.q.len()];
        let mut current = self.objective(&theta, &dense);
        let mut iterations = 0;
        loop {
            let lost = self.residual(&theta, &current.1.marginal);
            if lost <= tolerance || self.q.is_empty() {
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
            let block = self.newton_direction(&theta, &current.1, &dense);
            let direction = if self.collective && self.q.len() > dense.len() {
                self.subspace_direction(&theta, &current.1.marginal, &gradient, block)
            } else {
                block
            };
            // Rounding in the potential, so that the search does not stall
            // on noise near the optimum.
            let slack = 1e-14 * (1.0 + value.abs());
            let mut step = 1.0;
            loop {
                let trial: Vec<f64> = theta
                    .iter()
                    .zip(&direction)
                    .map(|(t, d)| (t + step * d).clamp(lo, hi))
                    .collect();
                let decrease: f64 = trial
                    .iter()
                    .zip(&theta)
                    .zip(&gradient)
                    .map(|((t1, t0), g)| (t1 - t0) * g)
                    .sum();
                let evaluated = self.objective(&trial, &dense);
                if evaluated.0 <= value + ARMIJO * decrease + slack || step < 1e-10 {
                    theta = trial;
                    current = evaluated;
                    break;
                }
                step *= 0.5;
            }
        }
    }

    /// The block-diagonal model misses the coupling of many small tokens
    /// with each other (rank-structured, through phi): on real rows with
    /// tens of thousands of free tokens its steps along the collective
    /// modes are far too short. Corrects it by an exact Newton step in the
    /// plane of the block direction d and the uniform shift s of the free
    /// variables (the inner potential is flat along theta + t·1), with
    /// Hessian-vector products by finite differences of r.
    fn subspace_direction(
        &self,
        theta: &[f64],
        r: &[f64],
        gradient: &[f64],
        d: Vec<f64>,
    ) -> Vec<f64> {
        let s: Vec<f64> = theta
            .iter()
            .zip(gradient)
            .map(|(&t, &g)| if self.held(t, g) { 0.0 } else { 1.0 })
            .collect();
        let product = |v: &[f64]| -> Option<Vec<f64>> {
            let largest = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if largest == 0.0 {
                return None;
            }
            let epsilon = 1e-6 / largest;
            let moved: Vec<f64> = theta.iter().zip(v).map(|(t, v)| t + epsilon * v).collect();
            let shifted = self.potential.evaluate(&moved, &[]).marginal;
            Some(
                shifted
                    .iter()
                    .zip(r)
                    .map(|(a, b)| (a - b) / epsilon)
                    .collect(),
            )
        };
        let dot = |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
        let (Some(hd), Some(hs)) = (product(&d), product(&s)) else {
            return d;
        };
        let (dd, ds, ss) = (
            dot(&d, &hd),
            0.5 * (dot(&d, &hs) + dot(&s, &hd)),
            dot(&s, &hs),
        );
        let (gd, gs) = (dot(gradient, &d), dot(gradient, &s));
        let det = dd * ss - ds * ds;
        // Nearly parallel d and s (or noise in the products): keep d.
        if !(dd > 0.0 && ss > 0.0 && det > 1e-6 * dd * ss) {
            return d;
        }
        let alpha = (-gd * ss + gs * ds) / det;
        let beta = (-gs * dd + gd * ds) / det;
        d.iter()
            .zip(&s)
            .map(|(d, s)| alpha * d + beta * s)
            .collect()
    }

    /// The objective's value and the potential's evaluation.
    fn objective(&self, theta: &[f64], dense: &[usize]) -> (f64, Evaluation) {
        let evaluation = self.potential.evaluate(theta, dense);
        let linear: f64 = self.p.iter().zip(theta).map(|(p, t)| p * t).sum();
        (evaluation.potential - linear, evaluation)
    }

    /// The Newton direction of the block-diagonal model at theta.
    fn newton_direction(&self, theta: &[f64], current: &Evaluation, dense: &[usize]) -> Vec<f64> {
        let (r, curvature, coupling) = (&current.marginal, &current.curvature, &current.coupling);
        let gradient = self.gradient(r);
        // A floor on the curvature keeps steps finite where r is flat in theta.
        let diagonal = |k: usize| curvature[k].max(1e-12 * r[k]).max(1e-300);
        let held = |k: usize| self.held(theta[k], gradient[k]);
        let mut direction: Vec<f64> = (0..theta.len())
            .map(|k| {
                if held(k) {
                    0.0
                } else {
                    -gradient[k] / diagonal(k)
                }
            })
            .collect();
        let m = dense.len();
        let free: Vec<usize> = (0..m).filter(|&i| !held(dense[i])).collect();
        if free.len() > 1 {
            let f = free.len();
            let block = DMatrix::from_fn(f, f, |i, j| {
                let (a, b) = (free[i], free[j]);
                if a == b {
                    diagonal(dense[a])
                } else {
                    coupling[a * m + b]
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
}

/// `x` on `tokens`, in their order.
pub(crate) fn gather(tokens: &[usize], x: &[f64]) -> Vec<f64> {
    tokens.iter().map(|&y| x[y]).collect()
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
    for ((tokens, solved), weights) in [(outer, &mut outer_weights), (inner, &mut inner_weights)] {
        for (k, &y) in tokens.iter().enumerate() {
            weights[y] = solved.theta[k].exp();
            selected[y] = solved.marginal[k];
        }
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
