//! # mdsd-convex
//!
//! The optimal verifier at full vocabulary by convex programs in the
//! weights of a selection rule (`docs/DESIGN.md` §5), without enumerating
//! draft sets: for n i.i.d. drafts, for drafts without replacement (§6b,
//! the exponential clocks' double integral), and for drafts from different
//! draft models (§6b), where H* has no closed form and the solution is an
//! interval [acceptance, alpha_star] that holds alpha*, certified by H.
//! Entry point: [`ConvexSolver`], a [`Solve`](mdsd_core::Solve)r, with its
//! [`Budget`]; [`ConvexSolver::solve_with`] takes a [`Workspace`] the
//! caller holds.
//!
//! The verifier selects one draft index with probability proportional to
//! e^(theta of its token), counting duplicates: among the drafts outside
//! H* with the outer weights when there is one, among all drafts with the
//! inner weights otherwise ([`SelectionRule`]). The selected token's law r
//! is a one-dimensional integral per token, and single-draft speculative
//! sampling of the selected token against p (accept with min(1, p / r),
//! else draw from (p - r)+) outputs exactly p for *any* weights. The
//! weights minimise two box-constrained convex potentials whose gradients
//! are r - p: the outer one over theta <= 0 (optimum r <= p outside H*) and
//! the inner one over theta >= 0 (r >= p on H*), where the acceptance
//! Σ min(p, r) is alpha* = p(H*) + 1 - q(H*)^n. The solver's tolerance only
//! costs acceptance, never exactness.
//!
//! [`GlobalResolution`] is the published baseline (Thomas & Pal): the same
//! two programs over enumerated draft sets of a truncation set, refused
//! with [`ConvexError::EnumerationBudget`] when those are too many.
//!
//! ## Map, from the top down
//!
//! * `solver`: [`ConvexSolver`]; one module per scheme (`iid`,
//!   `without_replacement`, `independent`) builds its two potentials, and
//!   `programs` runs the outer and inner programs, splits the tolerance
//!   and assembles the rule; `support` restricts a problem to the draft's
//!   support.
//! * `global_resolution`: the baseline, with its dense Hessian block.
//! * `ratio_groups`: starting points (programs over groups of tokens by
//!   ratio p / q, the clipped log-ratio model); `cut`: H for independent
//!   drafts.
//! * `potential`: one folder per scheme's potential, side by side: `iid`
//!   (integrals per token, buckets of theta, the Woodbury Hessian),
//!   `independent`, `without_replacement` (clocks, tail, grids), over the
//!   shared quadrature in c (`nodes`).
//! * `newton`: projected Newton over any `Potential` (iteration, direction,
//!   line search, conjugate gradients).
//! * `selection_rule` ([`SelectionRule`]), `budget` ([`Budget`]), `error`
//!   ([`ConvexError`]), `workspace` ([`Workspace`]), `thresholds` (sizes,
//!   one name per meaning), `numeric` (short polynomials and sums).
//!
//! No module imports one above it in this list. The programs live on the
//! draft's support (found from q alone, so a top-k draft costs O(k) after
//! one pass over q). Supports below `PARALLEL_FROM` tokens are solved on
//! the calling thread, larger ones on rayon's pool.
//!
//! ```
//! use mdsd_convex::ConvexSolver;
//! use mdsd_core::{Distribution, DraftScheme, Problem, Solve};
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p, DraftScheme::iid(q, 2)?)?;
//! let solution = ConvexSolver::default().solve(&problem)?;
//! assert!((solution.summary.acceptance - 0.86).abs() < 1e-7);
//! // The selection law of the drafts (2, 0): by the outer weights, token 0.
//! let law = solution.rule.selection(&[2, 0]);
//! assert_eq!(law, vec![(0, 1.0)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod budget;
mod cut;
mod error;
mod global_resolution;
mod group_rule;
mod newton;
mod numeric;
mod potential;
mod ratio_groups;
mod selection_rule;
mod solver;
mod thresholds;
mod workspace;

pub use budget::{Budget, DEFAULT_MAX_ITERATIONS, DEFAULT_TOLERANCE, resolvable_drafts};
pub use error::ConvexError;
pub use global_resolution::{
    DEFAULT_ENUMERATION_BUDGET, DEFAULT_TRUNCATION, GlobalResolution, GlobalResolutionSolution,
};
pub use selection_rule::{Counting, SelectionRule, Support};
pub use solver::{ConvexSolution, ConvexSolver};
pub use workspace::Workspace;
