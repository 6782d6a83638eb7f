//! # mdsd-verify
//!
//! Token-level verifiers for multi-draft speculative sampling behind one
//! trait, [`Verifier`], and the harnesses that tell, exactly, whether a
//! verifier is lossless and how far it is from optimal (`docs/DESIGN.md`
//! §6). Every verifier gives the exact law of its output for given drafts;
//! the [`exact`] harness enumerates the draft law, mixes those laws, and
//! reports the acceptance, the largest deviation of the output law from p,
//! and alpha*; the [`sampled`] harness draws instead, at any vocabulary
//! size, and tests the output against p by chi-square.
//!
//! The built-in verifiers are the variants of [`VerifierKind`] (`nss`,
//! `naive`, `specinfer`, `rrs-wor`, `kseq`, `spechub`, `khisti`, `greedy`,
//! `optimal-flow`, `optimal-convex`): their names, schemes, constructors
//! ([`VerifierKind::prepare`]) and closed-form acceptances
//! ([`VerifierKind::exact_acceptance`]) in one place. Your own verifier:
//! implement [`Verifier::conditional`] and run the harness.
//!
//! Files by family: `baselines.rs` (nss, naive), `rejection.rs`
//! (specinfer, rrs-wor), `kseq.rs`, `greedy.rs` (greedy, spechub),
//! `khisti.rs`, `optimal.rs` (optimal-convex, optimal-flow); two shapes
//! share their code: `sequential.rs` (try drafts in order against a fixed
//! residual) and `selecting.rs` (select a draft, then verify it alone).
//!
//! Blocks of L draft tokens from K paths ([`block`]): token by token, block
//! verification, GBV and any verifier above composed over the draft tree,
//! with their own exact and sampled harnesses.
//!
//! ```
//! use mdsd_core::{Distribution, DraftScheme, Problem};
//! use mdsd_verify::{OutputLaw, Verifier, VerifierKind, VerifyError, exact};
//!
//! /// Accepts the first draft whenever p > q there, else draws from p: lossy.
//! struct Eager { p: Vec<f64>, q: Vec<f64> }
//!
//! impl Verifier for Eager {
//!     fn name(&self) -> &str { "eager" }
//!     fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
//!         let x = drafts[0];
//!         if self.p[x] > self.q[x] {
//!             Ok(vec![(x, 1.0)])
//!         } else {
//!             Ok(self.p.iter().copied().enumerate().filter(|&(_, w)| w > 0.0).collect())
//!         }
//!     }
//! }
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p.clone(), DraftScheme::iid(q.clone(), 2)?)?;
//! let eager = Eager { p: p.probs().to_vec(), q: q.probs().to_vec() };
//! let report = exact(&problem, &eager, 1_000_000)?;
//! assert!(report.max_marginal_error > 0.1, "the harness finds it lossy");
//!
//! let specinfer = VerifierKind::SpecInfer.prepare(&problem)?;
//! let report = exact(&problem, specinfer.as_ref(), 1_000_000)?;
//! assert!(report.max_marginal_error < 1e-12 && (report.acceptance - 0.76).abs() < 1e-12);
//! assert!((report.alpha_star - 0.86).abs() < 1e-12);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// Implements [`Verifier`] for a verifier of one of the two shapes
/// (`sequential` or `selecting`), from its kind's name and the shape's
/// exact law and sampler.
macro_rules! verifier_of_shape {
    ($type:ty, $kind:expr, $shape:ident) => {
        verifier_of_shape!($type, $kind, $shape, |_: &$type| None);
    };
    // `$known`: the verifier's `Verifier::known_acceptance`.
    ($type:ty, $kind:expr, $shape:ident, $known:expr) => {
        impl $crate::Verifier for $type {
            fn name(&self) -> &str {
                $kind.name()
            }

            fn known_acceptance(&self) -> Option<f64> {
                ($known)(self)
            }

            fn conditional(
                &self,
                drafts: &[usize],
            ) -> Result<$crate::OutputLaw, $crate::VerifyError> {
                $crate::$shape::law(self, drafts)
            }

            fn sample(
                &self,
                drafts: &[usize],
                rng: &mut dyn rand::RngCore,
            ) -> Result<usize, $crate::VerifyError> {
                $crate::$shape::sample(self, drafts, rng)
            }
        }
    };
}

mod acceptance;
mod baselines;
pub mod block;
mod exact;
mod greedy;
mod khisti;
mod kseq;
mod laws;
mod optimal;
mod registry;
mod rejection;
mod sampling;
mod selecting;
mod sequential;

use mdsd_bounds::BoundError;
use mdsd_convex::ConvexError;
use mdsd_core::{CoreError, Method, SchemeKind, sample_index_of_total};
use mdsd_flow::FlowError;
use mdsd_lp::LpError;
use rand::RngCore;
use thiserror::Error;

pub use acceptance::{kseq_acceptance, naive_acceptance, nss_acceptance, specinfer_acceptance};
pub use baselines::{Naive, Nss};
pub use exact::{CertifiedAlpha, ExactReport, alpha_star, certified_alpha_star, exact};
pub use greedy::{Deterministic, Greedy, SpecHub};
pub use khisti::{KHISTI_MAX_TRUNCATION, KHISTI_TRUNCATION, Khisti};
pub use kseq::KSeq;
pub use optimal::{OptimalConvex, OptimalFlow, OptimalRules};
pub use registry::{Rating, VerifierKind, VerifierSettings};
pub use rejection::{RrsWithoutReplacement, SpecInfer};
pub use sampling::{
    GoodnessOfFit, LEVEL, POWER, SampledReport, Z_99, detectable_tv, goodness_of_fit, sample_rows,
    sampled, sampled_with_progress, samples_needed, seeded_stream, wilson_interval,
};

/// A law over output tokens: `(token, probability)` pairs, tokens distinct,
/// probabilities positive and summing to 1.
pub type OutputLaw = Vec<(usize, f64)>;

/// Most drafts a verifier is prepared for, rated or sampled with: verifiers
/// hold per-draft laws and the harnesses draw n tokens a tuple, so n is
/// memory. alpha* itself (mdsd-bounds) takes any n.
pub const MAX_DRAFTS: usize = 1 << 20;

/// [`CoreError::TooLarge`] past [`MAX_DRAFTS`] drafts.
pub(crate) fn check_draft_count(problem: &mdsd_core::Problem) -> Result<(), VerifyError> {
    check_verifier_drafts(problem.drafts().n())
}

/// [`CoreError::TooLarge`] when `n` drafts are more than a verifier takes
/// ([`MAX_DRAFTS`]): a check of the setting before any row is read.
pub fn check_verifier_drafts(n: usize) -> Result<(), VerifyError> {
    if n > MAX_DRAFTS {
        return Err(CoreError::TooLarge {
            what: "a verifier's draft tuple",
            size: n as u128,
            limit: MAX_DRAFTS as u128,
            instead: mdsd_core::Instead(&[Method::ClosedForm]),
        }
        .into());
    }
    Ok(())
}

/// Why a verifier could not be prepared or evaluated.
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error(transparent)]
    Flow(#[from] FlowError),
    #[error(transparent)]
    Lp(#[from] LpError),
    #[error(transparent)]
    Convex(#[from] ConvexError),
    #[error("khisti truncation s = {truncation} is out of range: it must be in 1..={max}")]
    Truncation { truncation: usize, max: usize },
    #[error(
        "unknown verifier {name:?}: expected one of {}",
        VerifierKind::ALL.map(VerifierKind::name).join(", ")
    )]
    UnknownVerifier { name: String },
    #[error("verifier {verifier} does not support {scheme} drafts (it supports: {supported})")]
    Unsupported {
        verifier: &'static str,
        scheme: SchemeKind,
        supported: String,
    },
    #[error("expected {expected} drafts, got {found}")]
    DraftCount { expected: usize, found: usize },
    #[error("{method} does not apply to draft trees of shape {shape}: {reason}")]
    ShapeNotSupported {
        method: &'static str,
        shape: String,
        reason: &'static str,
    },
    #[error("a draft path has {found} tokens; the block depth is {expected}")]
    PathLength { expected: usize, found: usize },
    #[error(
        "a block verifier output {found} tokens; a block of depth L outputs 1 to L + 1 = {most}"
    )]
    BlockOutputLength { most: usize, found: usize },
    #[error("draft token {token} is out of range for a vocabulary of {vocab_size}")]
    TokenOutOfRange { token: usize, vocab_size: usize },
    #[error("draft token {0} is negative")]
    NegativeToken(i64),
    #[error("drafts {0:?} have probability 0 under this draft scheme")]
    ImpossibleDrafts(Vec<usize>),
    #[error("the {side} model: {message}")]
    Model { side: &'static str, message: String },
    /// A caller's own block sampler failed or broke the layout.
    #[error("the sampler {name}: {message}")]
    Sampler { name: String, message: String },
    #[error("the verifier's law given drafts {0:?} has no mass to draw from")]
    EmptyLaw(Vec<usize>),
    #[error("row {row}: {source}")]
    Row {
        row: usize,
        source: Box<VerifyError>,
    },
    #[error(
        "drafts has {drafts} rows for a batch of {rules} rules: give one row of drafts per row"
    )]
    BatchRows { rules: usize, drafts: usize },
}

impl VerifyError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            VerifyError::Invalid(e) => e.instead(),
            VerifyError::Bound(e) => e.instead(),
            VerifyError::Flow(e) => e.instead(),
            VerifyError::Lp(e) => e.instead(),
            VerifyError::Convex(e) => e.instead(),
            VerifyError::Row { source, .. } => source.instead(),
            _ => &[],
        }
    }

    /// The error as that of row `row` of a batch.
    pub fn at_row(self, row: usize) -> Self {
        VerifyError::Row {
            row,
            source: Box::new(self),
        }
    }
}

/// A verifier prepared for one target p and draft scheme. `Send + Sync`, so
/// that the sampling harness can draw in parallel and prepared verifiers
/// can be cached across threads (block composition).
pub trait Verifier: Send + Sync {
    /// The name used in reports.
    fn name(&self) -> &str;

    /// The exact law of the output token given the drafts, in the order
    /// they were drawn.
    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError>;

    /// P(output is one of the drafts) where preparing the verifier already
    /// computed it (a solver's figure for its rule), so that reading it
    /// costs nothing; `None` for the others, which
    /// [`VerifierKind::exact_acceptance`] or the harnesses rate.
    fn known_acceptance(&self) -> Option<f64> {
        None
    }

    /// Draws the output token for the drafts with the caller's RNG. The
    /// default draws from [`Verifier::conditional`], O(V); verifiers meant for
    /// sampling at large V override it.
    fn sample(&self, drafts: &[usize], rng: &mut dyn RngCore) -> Result<usize, VerifyError> {
        let law = self.conditional(drafts)?;
        let weights: Vec<f64> = law.iter().map(|l| l.1).collect();
        let total: f64 = weights.iter().sum();
        if total.is_nan() || total <= 0.0 {
            return Err(VerifyError::EmptyLaw(drafts.to_vec()));
        }
        Ok(law[sample_index_of_total(weights, total, rng)].0)
    }
}
