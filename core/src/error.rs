//! The one error type of mdsd-core: every way an input can be invalid, and
//! the methods a refusal points to.

use std::fmt;

use thiserror::Error;

use crate::{Count, Shown};

/// A method that a refusal points to when an instance is too large for the
/// one asked for. Errors name methods, not crates; the command line turns
/// each into the command that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// alpha* and H* in closed form (`mdsd_bounds::optimal_acceptance`).
    ClosedForm,
    /// Max flow over draft sets (`mdsd_flow::FlowSolver`).
    MaxFlow,
    /// The enumeration-free convex programs (`mdsd_convex::ConvexSolver`).
    Convex,
    /// Block verification and GBV of draft blocks (`mdsd_verify::block`).
    BlockVerification,
    /// Validation by sampling instead of enumeration.
    Sampling,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::ClosedForm => "the closed form",
            Method::MaxFlow => "max flow",
            Method::Convex => "the convex solver",
            Method::BlockVerification => "block verification (bv, gbv)",
            Method::Sampling => "sampling",
        })
    }
}

/// The methods a refusal points to, shown as "; use A, B or C" (nothing
/// when there are none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instead(pub &'static [Method]);

impl fmt::Display for Instead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(Method::to_string).collect();
        match names.split_last() {
            None => Ok(()),
            Some((last, [])) => write!(f, "; use {last}"),
            Some((last, rest)) => write!(f, "; use {} or {last}", rest.join(", ")),
        }
    }
}

/// What is wrong with an input to mdsd-core. Each variant names the offending
/// index, value or size so a user can find it in their data.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CoreError {
    #[error("the distribution is empty")]
    Empty,
    #[error("entry {index} is {}, which is not a finite number", Shown(*value))]
    NonFinite { index: usize, value: f64 },
    #[error("entry {index} is {}, which is negative", Shown(*value))]
    Negative { index: usize, value: f64 },
    #[error("the entries sum to {}, which is not within {tolerance:.1e} of 1", Shown(*sum))]
    BadSum { sum: f64, tolerance: f64 },
    #[error("logit {index} is {}: logits must be finite or -inf", Shown(*value))]
    BadLogit { index: usize, value: f64 },
    #[error("every logit is -inf, so no token has positive probability")]
    NoFiniteLogit,
    #[error(
        "temperature {} is invalid: it must be finite and >= 0 (0 means argmax)",
        Shown(*.0)
    )]
    InvalidTemperature(f64),
    #[error("top-k of 0 keeps no token: k must be at least 1")]
    InvalidTopK,
    #[error("top-p {} is invalid: it must be in (0, 1]", Shown(*.0))]
    InvalidTopP(f64),
    #[error("{what} has {found} tokens, but the vocabulary has {expected}")]
    LengthMismatch {
        what: String,
        expected: usize,
        found: usize,
    },
    #[error("the number of drafts n must be at least 1")]
    NoDrafts,
    #[error(
        "{scheme} drafting with {needed} drafts needs {expected} draft distribution(s), got {found}"
    )]
    DraftCountMismatch {
        scheme: &'static str,
        needed: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "{scheme} drafting of n = {needed} drafts needs at least {needed} tokens with positive draft probability, but only {available} have it"
    )]
    NotEnoughSupport {
        scheme: &'static str,
        needed: usize,
        available: usize,
    },
    #[error("{scheme} drafting draws exactly {required} drafts, got n = {found}")]
    FixedDraftCount {
        scheme: &'static str,
        required: usize,
        found: usize,
    },
    #[error(
        "unknown draft scheme {0:?}: expected one of iid, wor, independent, greedy, hub, argmax, top"
    )]
    UnknownScheme(String),
    #[error("token {token} is out of range for a vocabulary of {vocab_size} tokens")]
    TokenOutOfRange { token: usize, vocab_size: usize },
    #[error("a block needs a depth of at least 1 draft token")]
    ZeroDepth,
    #[error(
        "blocks of depth {depth} need laws after prefixes of up to {depth} tokens, but the context model has them up to {max}"
    )]
    DepthBeyondModel { depth: usize, max: usize },
    #[error(
        "{what} has {} elements, above the limit of {}{instead}",
        Count(*size),
        Count(*limit)
    )]
    TooLarge {
        what: &'static str,
        size: u128,
        limit: u128,
        instead: Instead,
    },
    #[error("stopped at the caller's request (an interrupt) before the run was done")]
    Stopped,
    #[error("setting {setting} = {value} is invalid: it must be {expected}")]
    InvalidSetting {
        setting: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl CoreError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            CoreError::TooLarge { instead, .. } => instead.0,
            _ => &[],
        }
    }

    /// An invalid setting, with its value shown as given.
    pub fn setting(
        setting: &'static str,
        value: impl fmt::Display,
        expected: &'static str,
    ) -> Self {
        CoreError::InvalidSetting {
            setting,
            value: value.to_string(),
            expected,
        }
    }
}
