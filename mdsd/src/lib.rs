//! # mdsd
//!
//! Optimal multi-draft speculative sampling: the best acceptance any lossless
//! verifier can reach with n draft tokens, the verifiers that reach it, and
//! how far others fall short. This crate re-exports the library crates under
//! one name and ships the `mdsd` command-line tool.
//!
//! * [`core`] (mdsd-core): distributions, draft schemes, exact draft laws.
//! * [`bounds`] (mdsd-bounds): closed-form optimal acceptance with certificate.
//! * [`lp`] (mdsd-lp): the exact optimal-transport LP for small vocabularies.
//! * [`flow`] (mdsd-flow): max flow / min cut, the optimal plan and verifier.
//! * [`convex`] (mdsd-convex): the optimal verifier at full vocabulary.
//! * [`verify`] (mdsd-verify): published verifiers and the exact harness.
//! * [`logits`] (mdsd-logits): logit files and batched backends.
//!
//! Every solver has one shape ([`Solve`]: settings in a value, `solve` on a
//! [`Problem`], a solution with a [`Summary`]): [`ClosedForm`],
//! [`LpSolver`], [`FlowSolver`], [`ConvexSolver`].
//!
//! ```
//! use mdsd::{Distribution, DraftScheme, FlowSolver, Problem, Solve, Verifier, VerifierKind};
//!
//! let p = Distribution::from_probs(vec![0.4, 0.3, 0.2, 0.1])?;
//! let q = Distribution::from_probs(vec![0.1, 0.2, 0.3, 0.4])?;
//! let problem = Problem::new(p, DraftScheme::iid(q, 3)?)?;
//! let bound = mdsd::optimal_acceptance(&problem)?;
//! assert!((bound.alpha_star - 0.871).abs() < 1e-12);
//! let flow = FlowSolver::default().solve(&problem)?;
//! assert!((flow.summary.alpha_star - 0.871).abs() < 1e-9);
//!
//! // The optimal verifier: sample the output token for drafts (0, 3, 3).
//! let verifier = VerifierKind::OptimalFlow.prepare(&problem)?;
//! let token = verifier.sample(&[0, 3, 3], &mut rand::rng())?;
//! assert!(token < 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod error;
pub mod evaluation;
pub mod input;
pub mod solving;

pub use error::{Error, SolveError};

pub use mdsd_bounds as bounds;
pub use mdsd_convex as convex;
pub use mdsd_core as core;
pub use mdsd_flow as flow;
pub use mdsd_logits as logits;
pub use mdsd_lp as lp;
pub use mdsd_verify as verify;

pub use mdsd_bounds::{
    Bound, BoundError, ClosedForm, IidAlgorithm, acceptance_upper_bound, optimal_acceptance,
    optimal_acceptance_batch,
};
pub use mdsd_convex::{ConvexError, ConvexSolution, ConvexSolver, SelectionRule, Workspace};
pub use mdsd_core::{
    CoreError, Distribution, DraftScheme, Method, Plan, Problem, SchemeKind, Solution, Solve,
    Status, Summary, Transform,
};
pub use mdsd_flow::{FlowError, FlowSolution, FlowSolver};
pub use mdsd_lp::{Formulation, LpError, LpSolution, LpSolver};
pub use mdsd_verify::{
    OptimalFlow, OptimalRules, Verifier, VerifierKind, VerifierSettings, VerifyError,
};
