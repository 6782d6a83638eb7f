//! Why the convex solvers give no solution.

use mdsd_bounds::BoundError;
use mdsd_core::{CoreError, Count, Instead, Method, SchemeKind};
use thiserror::Error;

/// Why no solution.
#[derive(Debug, Error)]
pub enum ConvexError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error(
        "the convex solver handles i.i.d., wor and independent drafts, not {scheme} drafts{instead}",
        instead = Instead(UNSUPPORTED_INSTEAD)
    )]
    Unsupported { scheme: SchemeKind },
    #[error(
        "drafts without replacement where token {token} holds all of q but {rest:.1e}, below \
         the float's resolution at 1: the programs' inclusion laws divide by 1 - q({token}), \
         which rounds to 0{}",
        Instead(DOMINANT_INSTEAD)
    )]
    DominantDraft { token: usize, rest: f64 },
    #[error(
        "Global Resolution would enumerate {sets:.3e} draft sets (budget {budget}){}",
        Instead(ENUMERATION_INSTEAD)
    )]
    EnumerationBudget { sets: f64, budget: usize },
    #[error(
        "the {side} program did not reach the tolerance {tolerance:.1e} in {iterations} \
         iterations (acceptance lost: {lost:.2e})"
    )]
    IterationCap {
        side: &'static str,
        iterations: usize,
        lost: f64,
        tolerance: f64,
    },
    #[error(
        "n = {} drafts is past what the convex programs resolve at the tolerance {tolerance:.1e}: \
         their kernel phi^(n-1) carries a relative rounding of about n x 1.1e-16, so they take \
         up to {} drafts{}",
        Count(*n as u128),
        Count(*limit as u128),
        Instead(PRECISION_INSTEAD)
    )]
    Precision {
        n: usize,
        limit: usize,
        tolerance: f64,
    },
}

/// Gives alpha* where the convex programs cannot resolve their tolerance.
const PRECISION_INSTEAD: &[Method] = &[Method::ClosedForm];
/// What covers the schemes the convex solver does not.
const UNSUPPORTED_INSTEAD: &[Method] = &[Method::ClosedForm, Method::MaxFlow];
/// What scales where Global Resolution's enumeration refuses.
const ENUMERATION_INSTEAD: &[Method] = &[Method::Convex];
/// Where one draft token holds q to the float's resolution: the exact
/// solvers, which take the tuples' probabilities as they are.
const DOMINANT_INSTEAD: &[Method] = &[Method::MaxFlow];

impl ConvexError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            ConvexError::Invalid(e) => e.instead(),
            ConvexError::Bound(e) => e.instead(),
            ConvexError::Unsupported { .. } => UNSUPPORTED_INSTEAD,
            ConvexError::EnumerationBudget { .. } => ENUMERATION_INSTEAD,
            ConvexError::IterationCap { .. } => &[],
            ConvexError::Precision { .. } => PRECISION_INSTEAD,
            ConvexError::DominantDraft { .. } => DOMINANT_INSTEAD,
        }
    }
}
