//! # mdsd-core
//!
//! The vocabulary of multi-draft speculative sampling: validated probability
//! vectors ([`Distribution`], with temperature / top-k / top-p in
//! [`Transform`]; [`ProbabilityRow`] and [`CheckedChunks`] for rows checked
//! where they lie), the five draft schemes ([`DraftScheme`]: iid, without
//! replacement, independent, greedy, SpecHub's hub) with their exact laws over ordered tuples
//! and sets and seeded sampling, the [`Problem`] every solver takes, and the
//! [`Plan`] (a verifier as an explicit conditional law) exact solvers return,
//! and for blocks of draft tokens the [`ContextModel`]s (laws as functions of
//! the prefix: [`ContextIndependent`], [`PositionalRows`], random
//! [`MarkovModel`]s). The mathematics is in `DESIGN.md` §3 and §6.
//!
//! ```
//! use mdsd_core::{Distribution, DraftScheme, DEFAULT_ENUMERATION_LIMIT};
//!
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let drafts = DraftScheme::iid(q, 2)?;
//! let sets = drafts.set_law(DEFAULT_ENUMERATION_LIMIT)?;
//! // {0}, {0,1}, {0,2}, {1}, {1,2}, {2}
//! assert_eq!(sets.len(), 6);
//! let total: f64 = sets.probs.iter().sum();
//! assert!((total - 1.0).abs() < 1e-15);
//! # Ok::<(), mdsd_core::CoreError>(())
//! ```

mod context;
mod coupling;
mod distribution;
mod error;
mod problem;
mod progress;
mod scheme;
mod size;
mod solve;
mod tree;

pub use context::{
    ContextIndependent, ContextModel, MarkovModel, PositionalRows, Side, check_depth, check_tokens,
    draft_paths,
};
pub use coupling::{
    Accepted, PLAN_ENTRY_LIMIT, check_plan_size, complete_plan, min_cut_certificate,
};
pub use distribution::{CheckedChunks, Distribution, ProbabilityRow, SUM_TOLERANCE, Transform};
pub use error::{CoreError, Instead, Method};
pub use problem::{Plan, Problem};
pub use progress::Progress;
pub use scheme::{
    CumulativeDistribution, DEFAULT_ENUMERATION_LIMIT, DraftLaw, DraftSampler, DraftScheme,
    SchemeKind, sample_index, sample_index_of_total, token_set,
};
pub use size::{Count, Shown, powi_count, saturating_pow};
pub use solve::{Solution, Solve, Status, Summary};
pub use tree::{DraftShape, TREE_CHILD_SCHEMES};
