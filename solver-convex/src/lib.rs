//! # mdsd-convex
//!
//! The optimal verifier for n i.i.d. drafts at full vocabulary by convex
//! programs in the weights of a selection rule (DESIGN §5), without
//! enumerating draft sets. Entry point: [`ConvexSolver::solve`].
//!
//! The verifier selects one draft index with probability proportional to
//! e^(theta of its token), counting duplicates: among the drafts outside
//! H* with the outer weights when there is one, among all drafts with the
//! inner weights otherwise. The selected token's law r is a one-dimensional
//! integral per token (module `quadrature`), and single-draft speculative
//! sampling of the selected token against p (accept with min(1, p / r),
//! else draw from (p - r)+) outputs exactly p for *any* weights. The
//! weights minimise two box-constrained convex potentials whose gradients
//! are r - p: the outer one over theta <= 0 (optimum r <= p outside H*) and
//! the inner one over theta >= 0 (r >= p on H*), where the acceptance
//! Σ min(p, r) is alpha* = p(H*) + 1 - q(H*)^n. The solver's tolerance only
//! costs acceptance, never exactness.
//!
//! ```
//! use mdsd_convex::ConvexSolver;
//! use mdsd_core::{Distribution, DraftScheme, Problem};
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p, DraftScheme::iid(q, 2)?)?;
//! let solution = ConvexSolver::default().solve(&problem)?;
//! assert!((solution.alpha - 0.86).abs() < 1e-7);
//! // The selection law of the drafts (2, 0): by the outer weights, token 0.
//! let law = solution.selection(&[2, 0]);
//! assert_eq!(law, vec![(0, 1.0)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod quadrature;

use mdsd_bounds::{BoundError, IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{CoreError, Problem, SchemeKind};
use nalgebra::{DMatrix, DVector};
use thiserror::Error;

use quadrature::{Selectable, evaluate};

/// Default bound on the acceptance lost to the solver, alpha* - alpha.
pub const DEFAULT_TOLERANCE: f64 = 1e-7;
/// Default cap on iterations of each of the two programs.
pub const DEFAULT_MAX_ITERATIONS: usize = 100;
/// theta stays within ±THETA_LIMIT: weights of e^-40 change r by less than
/// 1e-17 of q.
const THETA_LIMIT: f64 = 40.0;
/// Armijo's sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;

/// Why no solution.
#[derive(Debug, Error)]
pub enum ConvexError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error("the convex solver handles i.i.d. drafts only, not {0} drafts; use mdsd-flow")]
    Unsupported(SchemeKind),
    #[error(
        "the {side} program did not reach the tolerance {tolerance:e} in {iterations} iterations \
         (acceptance lost: {lost:e})"
    )]
    IterationCap {
        side: &'static str,
        iterations: usize,
        lost: f64,
        tolerance: f64,
    },
}

/// The enumeration-free convex solver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvexSolver {
    /// Bound on alpha* - alpha, split evenly between the two programs.
    pub tolerance: f64,
    pub max_iterations: usize,
}

impl Default for ConvexSolver {
    fn default() -> Self {
        Self {
            tolerance: DEFAULT_TOLERANCE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
        }
    }
}

/// The solved selection rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvexSolution {
    /// The acceptance of the selected token, Σ min(p, r).
    pub alpha: f64,
    /// alpha* from the closed form, and its certificate H*.
    pub alpha_star: f64,
    pub certificate: Vec<usize>,
    /// Outer weights e^theta (<= 1) on tokens outside H*, 0 on H*.
    pub outer_weights: Vec<f64>,
    /// Inner weights e^theta (>= 1) on H*, 0 elsewhere.
    pub inner_weights: Vec<f64>,
    /// r: the law of the selected token.
    pub selected: Vec<f64>,
    /// Iterations of the outer and inner programs together.
    pub iterations: usize,
}

impl ConvexSolution {
    /// The law of the selected draft token given the drafts: (token, prob).
    pub fn selection(&self, drafts: &[usize]) -> Vec<(usize, f64)> {
        let outer = drafts.iter().any(|&x| self.outer_weights[x] > 0.0);
        let weights = if outer {
            &self.outer_weights
        } else {
            &self.inner_weights
        };
        let total: f64 = drafts.iter().map(|&x| weights[x]).sum();
        let mut law: Vec<(usize, f64)> = Vec::with_capacity(drafts.len());
        for &x in drafts {
            let w = weights[x] / total;
            if w <= 0.0 {
                continue;
            }
            match law.iter_mut().find(|e| e.0 == x) {
                Some(entry) => entry.1 += w,
                None => law.push((x, w)),
            }
        }
        law
    }
}

/// One of the two programs: minimise potential(theta) - <p, theta> over a box.
struct Program<'a> {
    name: &'static str,
    q: Vec<f64>,
    p: Vec<f64>,
    base: f64,
    n: usize,
    bounds: (f64, f64),
    /// Acceptance lost at r: outer Σ (r - p)+, inner Σ (p - r)+.
    lost: &'a dyn Fn(&[f64], &[f64]) -> f64,
}

struct Solved {
    weights: Vec<f64>,
    marginal: Vec<f64>,
    iterations: usize,
}

impl Program<'_> {
    /// The objective, its gradient's r part, and the Hessian's diagonal and
    /// block among `dense`.
    fn objective(&self, theta: &[f64], dense: &[usize]) -> Objective {
        let a: Vec<f64> = theta.iter().map(|t| t.exp()).collect();
        let eval = evaluate(
            &Selectable {
                q: &self.q,
                a: &a,
                base: self.base,
                n: self.n,
            },
            dense,
        );
        let linear: f64 = self.p.iter().zip(theta).map(|(p, t)| p * t).sum();
        (
            eval.potential - linear,
            eval.marginal,
            eval.curvature,
            eval.coupling,
        )
    }

    /// Projected Newton with a block-diagonal Hessian and Armijo
    /// backtracking along the projection arc (Bertsekas, SIAM J. Control
    /// Optim. 1982, "two-metric" projection): the exact Hessian among the
    /// `DENSE` tokens of largest q, where the coupling through phi lives,
    /// its diagonal elsewhere; variables held at a bound by their gradient
    /// do not move. Each accepted step decreases the convex objective, and
    /// the direction vanishes only at KKT points. Pure diagonal scaling
    /// (with or without Barzilai-Borwein steps) crawled on real rows: the
    /// inner Hessian is singular along theta + t·1, and the top tokens
    /// (q up to 0.6) couple strongly. Own code: no maintained crate offers
    /// box-constrained Newton-type minimisation (argmin's L-BFGS has no
    /// bounds).
    fn minimise(&self, tolerance: f64, max_iterations: usize) -> Result<Solved, ConvexError> {
        const DENSE: usize = 48;
        let (lo, hi) = self.bounds;
        let mut dense: Vec<usize> = (0..self.q.len()).collect();
        dense.sort_unstable_by(|&a, &b| self.q[b].total_cmp(&self.q[a]));
        dense.truncate(DENSE);
        let mut theta = vec![0.0f64.clamp(lo, hi); self.q.len()];
        let mut current = self.objective(&theta, &dense);
        let mut iterations = 0;
        loop {
            let (value, r) = (current.0, &current.1);
            let lost = (self.lost)(r, &self.p);
            if lost <= tolerance || self.q.is_empty() {
                return Ok(Solved {
                    weights: theta.iter().map(|t| t.exp()).collect(),
                    marginal: current.1,
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
            let direction = self.newton_direction(&theta, &current, &dense);
            let gradient: Vec<f64> = r.iter().zip(&self.p).map(|(r, p)| r - p).collect();
            // Quadrature rounding in the potential, so that the search does
            // not stall on noise near the optimum.
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

    /// The Newton direction of the block-diagonal model at theta.
    fn newton_direction(&self, theta: &[f64], current: &Objective, dense: &[usize]) -> Vec<f64> {
        let (lo, hi) = self.bounds;
        let (_, r, curvature, coupling) = current;
        let gradient: Vec<f64> = r.iter().zip(&self.p).map(|(r, p)| r - p).collect();
        // A floor on the curvature keeps steps finite where r is flat in theta.
        let diagonal = |k: usize| curvature[k].max(1e-12 * r[k]).max(1e-300);
        let held = |k: usize| {
            (theta[k] <= lo && gradient[k] > 0.0) || (theta[k] >= hi && gradient[k] < 0.0)
        };
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

/// Objective value, r, the Hessian's diagonal, and its dense block.
type Objective = (f64, Vec<f64>, Vec<f64>, Vec<f64>);

impl ConvexSolver {
    pub fn with_tolerance(self, tolerance: f64) -> Self {
        Self { tolerance, ..self }
    }

    /// Solves the outer and inner programs of an i.i.d. problem.
    pub fn solve(&self, problem: &Problem) -> Result<ConvexSolution, ConvexError> {
        let drafts = problem.drafts();
        if drafts.kind() != SchemeKind::Iid {
            return Err(ConvexError::Unsupported(drafts.kind()));
        }
        let n = drafts.n();
        let target = problem.target();
        let draft = &drafts.drafts()[0];
        let bound = optimal_acceptance_iid(target, draft, n, IidAlgorithm::default())?;
        let (p, q) = (target.probs(), draft.probs());
        let v = p.len();
        let mut in_h = vec![false; v];
        bound.certificate.iter().for_each(|&y| in_h[y] = true);
        let inner: Vec<usize> = (0..v).filter(|&y| in_h[y] && q[y] > 0.0).collect();
        let outer: Vec<usize> = (0..v).filter(|&y| !in_h[y] && q[y] > 0.0).collect();
        let q_h: f64 = inner.iter().map(|&y| q[y]).sum();

        let gather = |tokens: &[usize], x: &[f64]| tokens.iter().map(|&y| x[y]).collect();
        let excess =
            |r: &[f64], p: &[f64]| -> f64 { r.iter().zip(p).map(|(r, p)| (r - p).max(0.0)).sum() };
        let shortfall =
            |r: &[f64], p: &[f64]| -> f64 { r.iter().zip(p).map(|(r, p)| (p - r).max(0.0)).sum() };
        let side_tolerance = 0.5 * self.tolerance;
        let outer_solved = Program {
            name: "outer",
            q: gather(&outer, q),
            p: gather(&outer, p),
            base: q_h,
            n,
            bounds: (-THETA_LIMIT, 0.0),
            lost: &excess,
        }
        .minimise(side_tolerance, self.max_iterations)?;
        let inner_solved = Program {
            name: "inner",
            q: gather(&inner, q),
            p: gather(&inner, p),
            base: 0.0,
            n,
            bounds: (0.0, THETA_LIMIT),
            lost: &shortfall,
        }
        .minimise(side_tolerance, self.max_iterations)?;

        let mut selected = vec![0.0; v];
        let mut outer_weights = vec![0.0; v];
        let mut inner_weights = vec![0.0; v];
        for (tokens, solved, weights) in [
            (&outer, &outer_solved, &mut outer_weights),
            (&inner, &inner_solved, &mut inner_weights),
        ] {
            for (k, &y) in tokens.iter().enumerate() {
                weights[y] = solved.weights[k];
                selected[y] = solved.marginal[k];
            }
        }
        let alpha = p.iter().zip(&selected).map(|(p, r)| p.min(*r)).sum();
        Ok(ConvexSolution {
            alpha,
            alpha_star: bound.alpha,
            certificate: bound.certificate,
            outer_weights,
            inner_weights,
            selected,
            iterations: outer_solved.iterations + inner_solved.iterations,
        })
    }
}
