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
//! costs acceptance, never exactness. Both programs live on the draft's
//! support, and start from a clipped log-ratio model of the weights, or,
//! from 4096 tokens, from programs over groups of tokens by ratio p/q
//! (module `ratio_groups`). Supports below 8192 tokens are solved on the
//! calling thread; larger ones on rayon's pool. Each thread that ran a
//! large solve keeps up to 16 of its vocabulary-sized scratch vectors for
//! the next one (module `scratch`; about 20 MB a thread at V = 151936),
//! so that repeated solves do not fault their memory in afresh.
//!
//! [`GlobalResolution::solve`] is the published baseline (Thomas & Pal):
//! the same two programs over enumerated draft sets of a truncation set,
//! refused with [`ConvexError::EnumerationBudget`] when those are too many.
//! Both minimise through one projected-Newton solver (module `newton`).
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

mod global_resolution;
mod laplacian;
mod newton;
mod quadrature;
mod ratio_groups;
mod scratch;

use mdsd_bounds::{BoundError, IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{CoreError, Distribution, Problem, SchemeKind};
use thiserror::Error;

pub use global_resolution::{
    DEFAULT_ENUMERATION_BUDGET, DEFAULT_TRUNCATION, GlobalResolution, GlobalResolutionSolution,
};
use laplacian::lane_sum;
use newton::{Program, Stop, assemble, gather};
use quadrature::{GROUPED, Selectable};

/// Default bound on the acceptance lost to the solver, alpha* - alpha.
pub const DEFAULT_TOLERANCE: f64 = 1e-7;
/// Default cap on iterations of each of the two programs.
pub const DEFAULT_MAX_ITERATIONS: usize = 100;
/// theta stays within ±THETA_LIMIT: weights of e^-40 change r by less than
/// 1e-17 of q.
const THETA_LIMIT: f64 = 40.0;

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
        "Global Resolution would enumerate {sets:.3e} draft sets (budget {budget}); \
         the enumeration-free ConvexSolver scales to any vocabulary"
    )]
    EnumerationBudget { sets: f64, budget: usize },
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
///
/// Weights and r live on the draft's support, the only tokens a draft can
/// be: with the draft truncated to its top k that is k of the V tokens,
/// and the solution costs O(k), not O(V).
#[derive(Debug, Clone, PartialEq)]
pub struct ConvexSolution {
    /// The acceptance of the selected token, Σ min(p, r).
    pub alpha: f64,
    /// alpha* from the closed form, and its certificate H* (ascending).
    pub alpha_star: f64,
    pub certificate: Vec<usize>,
    /// The vocabulary's size.
    pub vocabulary: usize,
    /// The tokens of positive draft probability, ascending: the three
    /// vectors below are on them, in this order; every other token has
    /// weight 0 and r = 0.
    pub support: Vec<usize>,
    /// Outer weights e^theta (<= 1) outside H*, 0 on H*.
    pub outer_weights: Vec<f64>,
    /// Inner weights e^theta (>= 1) on H*, 0 elsewhere.
    pub inner_weights: Vec<f64>,
    /// r: the law of the selected token.
    pub selected: Vec<f64>,
    /// Newton iterations of the outer and inner programs together,
    /// counting those of the grouped programs that start large ones.
    pub iterations: usize,
}

impl ConvexSolution {
    /// The law of the selected draft token given the drafts: (token, prob).
    /// Drafts of draft probability 0 are never selected (the law is empty
    /// when every draft is one).
    pub fn selection(&self, drafts: &[usize]) -> Vec<(usize, f64)> {
        let weight = |weights: &[f64], x: usize| {
            self.support
                .binary_search(&x)
                .map_or(0.0, |slot| weights[slot])
        };
        let outer = drafts.iter().any(|&x| weight(&self.outer_weights, x) > 0.0);
        let weights = if outer {
            &self.outer_weights
        } else {
            &self.inner_weights
        };
        let total: f64 = drafts.iter().map(|&x| weight(weights, x)).sum();
        let mut law: Vec<(usize, f64)> = Vec::with_capacity(drafts.len());
        for &x in drafts {
            let w = weight(weights, x);
            if w <= 0.0 {
                continue;
            }
            let w = w / total;
            match law.iter_mut().find(|e| e.0 == x) {
                Some(entry) => entry.1 += w,
                None => law.push((x, w)),
            }
        }
        law
    }

    /// r on the whole vocabulary.
    pub fn selected_law(&self) -> Vec<f64> {
        let mut law = vec![0.0; self.vocabulary];
        for (&y, &r) in self.support.iter().zip(&self.selected) {
            law[y] = r;
        }
        law
    }
}

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
        let (target, draft) = (problem.target(), &drafts.drafts()[0]);
        let support = draft_support(draft.probs());
        let restricted = (support.len() < target.len())
            .then(|| restrict(target, draft, &support))
            .transpose()?;
        let (target, draft) = restricted.as_ref().map_or((target, draft), |(p, q)| (p, q));
        let small = support.len() < GROUPED;
        let solve =
            || self.solve_on_support(target, draft, drafts.n(), support, problem.vocab_size());
        // Below GROUPED tokens the programs make no parallel call and run on
        // the calling thread (handing them to a worker of rayon's pool and
        // waiting cost 0.1-0.25 ms a solve at top 1000, a fifth of it).
        // Larger ones do, and each call from outside the pool would wake a
        // worker and wait for it: there the whole solve goes to the pool
        // once. The pass over the vocabulary above stays on the calling
        // thread, whose cache holds the rows.
        let solution = if small {
            solve()
        } else {
            rayon::scope(|_| solve())
        };
        if let Some((target, draft)) = restricted {
            scratch::give(target.into_probs());
            scratch::give(draft.into_probs());
        }
        solution
    }

    /// Solves the programs of the problem restricted to the draft's
    /// support (`restrict`), whose first tokens are `support`'s.
    fn solve_on_support(
        &self,
        target: &Distribution,
        draft: &Distribution,
        n: usize,
        support: Vec<usize>,
        vocabulary: usize,
    ) -> Result<ConvexSolution, ConvexError> {
        let bound = optimal_acceptance_iid(target, draft, n, IidAlgorithm::default())?;
        // Programs, solution and acceptance on the support (the extra token
        // of `restrict`, if any, is never selected and never in H*).
        let (p, q) = (
            &target.probs()[..support.len()],
            &draft.probs()[..support.len()],
        );
        let mut in_h = vec![false; support.len()];
        bound
            .certificate
            .iter()
            .filter(|&&y| y < support.len())
            .for_each(|&y| in_h[y] = true);
        // Sized up front, not grown by doubling: at full vocabulary each
        // growth step was a fresh mapping of up to 2 MB to fault in.
        let mut inner = Vec::with_capacity(bound.certificate.len());
        inner.extend(bound.certificate.iter().take_while(|&&y| y < support.len()));
        let mut outer = Vec::with_capacity(support.len() - inner.len());
        outer.extend((0..support.len()).filter(|&y| !in_h[y]));
        let q_h: f64 = inner.iter().map(|&y| q[y]).sum();

        let side_tolerance = 0.5 * self.tolerance;
        let (outer_q, outer_p) = (gather(&outer, q), gather(&outer, p));
        let outer_program = Program {
            name: "outer",
            potential: &Selectable {
                q: &outer_q,
                base: q_h,
                n,
            },
            p: &outer_p,
            bounds: (-THETA_LIMIT, 0.0),
            stop: Stop::Excess,
        };
        let outer_solved =
            ratio_groups::minimise(&outer_program, side_tolerance, self.max_iterations)?;
        let (inner_q, inner_p) = (gather(&inner, q), gather(&inner, p));
        let inner_program = Program {
            name: "inner",
            potential: &Selectable {
                q: &inner_q,
                base: 0.0,
                n,
            },
            p: &inner_p,
            bounds: (0.0, THETA_LIMIT),
            stop: Stop::Shortfall,
        };
        let inner_solved =
            ratio_groups::minimise(&inner_program, side_tolerance, self.max_iterations)?;

        let assembled = assemble(p, (&outer, outer_solved), (&inner, inner_solved));
        [outer_q, outer_p, inner_q, inner_p]
            .into_iter()
            .for_each(scratch::give);
        Ok(ConvexSolution {
            alpha: assembled.alpha,
            alpha_star: bound.alpha,
            certificate: inner.iter().map(|&y| support[y]).collect(),
            vocabulary,
            support,
            outer_weights: assembled.outer_weights,
            inner_weights: assembled.inner_weights,
            selected: assembled.selected,
            iterations: assembled.iterations,
        })
    }
}

/// The tokens of positive draft probability, ascending, in one pass over
/// the draft alone (p is read only on them, by `restrict`). Blocks with
/// no set bit are skipped after one OR over them (a truncated draft's
/// are mostly empty: at top 1000 the pass took 0.8 of the time); the
/// tests of the others become a bit mask: drafted tokens are spread along
/// the vocabulary, and a branch per token mispredicted on each of them.
fn draft_support(q: &[f64]) -> Vec<usize> {
    const BLOCK: usize = 32;
    let mut support = Vec::new();
    let blocks = q.chunks_exact(BLOCK);
    let left = blocks.remainder();
    for (block, q) in blocks.enumerate() {
        // Only +0.0 has no bit set (a draft's entries are never negative).
        if q.iter().fold(0, |any, q| any | q.to_bits()) == 0 {
            continue;
        }
        let mut drafted = 0u32;
        for (lane, &q) in q.iter().enumerate() {
            drafted |= u32::from(q > 0.0) << lane;
        }
        while drafted != 0 {
            support.push(block * BLOCK + drafted.trailing_zeros() as usize);
            drafted &= drafted - 1;
        }
    }
    let first = q.len() - left.len();
    support.extend(
        (first..)
            .zip(left)
            .filter(|&(_, &q)| q > 0.0)
            .map(|(y, _)| y),
    );
    support
}

/// The target mass of the tokens of draft probability 0, in LANES running
/// sums (one would be a chain of dependent additions), p masked by q's test
/// rather than branched on.
fn mass_off_support(p: &[f64], q: &[f64]) -> f64 {
    const LANES: usize = 8;
    let mut rest = [0.0; LANES];
    for (p, q) in p.chunks(LANES).zip(q.chunks(LANES)) {
        for (lane, (&p, &q)) in p.iter().zip(q).enumerate() {
            // All ones where q = 0 (keep p), zero where q > 0 (add +0.0).
            let keep = u64::from(q > 0.0).wrapping_sub(1);
            rest[lane] += f64::from_bits(p.to_bits() & keep);
        }
    }
    rest.iter().sum()
}

/// The problem on the draft's support, whose tokens come first in the
/// order of `support`, plus one token of draft probability 0 holding the
/// target mass of the rest when it has any. A token that is never drafted
/// gets no weight, and is never in H*: adding it to H raises p(H) and not
/// q(H). So alpha* and H* are those of the whole problem, found in O(k)
/// after one pass over the draft.
///
/// The rest is 1 - p(support), not a sum over the other tokens, which
/// would read all of p (at top-1000 drafts, a tenth of the solve): its
/// error, the rounding of p's normalisation, at most about V ε, is
/// absolute, as is every error of an acceptance. Below V ε the rest is
/// summed directly (`mass_off_support`): a draft that covers all of the
/// target's mass gets no token of rounding-sized mass, which shifted ties
/// of H* in degenerate problems (alpha* = 1) to where the inner program
/// could not reach its tolerance.
fn restrict(
    target: &Distribution,
    draft: &Distribution,
    support: &[usize],
) -> Result<(Distribution, Distribution), CoreError> {
    let (p, q) = (target.probs(), draft.probs());
    // With room for the token of the rest.
    let (mut p_support, mut q_support) = (
        scratch::take(support.len() + 1),
        scratch::take(support.len() + 1),
    );
    p_support.extend(support.iter().map(|&y| p[y]));
    q_support.extend(support.iter().map(|&y| q[y]));
    let mut rest = 1.0 - lane_sum(&p_support);
    if rest <= p.len() as f64 * f64::EPSILON {
        rest = mass_off_support(p, q);
    }
    if rest > 0.0 {
        p_support.push(rest);
        q_support.push(0.0);
    }
    Ok((
        Distribution::from_probs(p_support)?,
        Distribution::from_probs(q_support)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::draft_support;

    /// The support is the tokens with q > 0, ascending, whatever blocks
    /// they fall in: empty blocks, full ones, -0.0 entries (bits set, not
    /// drafted), and a remainder after the last whole block.
    #[test]
    fn draft_support_is_the_positive_entries() {
        for v in [0, 5, 31, 32, 33, 64, 100, 1000] {
            for stride in [1, 3, 32, 37, 200] {
                let q: Vec<f64> = (0..v)
                    .map(|y| match y % stride {
                        0 => 1.0 / v as f64,
                        1 => -0.0,
                        _ => 0.0,
                    })
                    .collect();
                let expected: Vec<usize> = (0..v).filter(|&y| q[y] > 0.0).collect();
                assert_eq!(draft_support(&q), expected, "v = {v}, stride {stride}");
            }
        }
    }
}
