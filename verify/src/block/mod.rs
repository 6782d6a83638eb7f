//! Block-level verifiers (`docs/DESIGN.md` §6): the drafter proposes K paths of L
//! tokens from a [`ContextModel`]'s draft laws; a block verifier accepts a
//! prefix of one path and appends one token, and is lossless when that
//! output, extended by target samples, has the target's law of length-(L+1)
//! sequences.
//!
//! * [`TokenByToken`]: speculative sampling token by token along the first
//!   path.
//! * [`BlockVerification`]: Sun et al.'s block verification of the first
//!   path.
//! * [`GreedyBlockVerification`] (GBV, Thomas & Pal): the greedy path of the
//!   K-path tree (at each node the child of largest clamped ratio
//!   min(1, p/q), ties to the earliest path), verified by block
//!   verification against that path's own (skewed) draft law.
//! * [`Composed`]: any token-level [`Verifier`](crate::Verifier) walked down
//!   the draft tree, applied at each node to the next tokens of the paths
//!   through it.
//!
//! Every block verifier gives the exact law of its output ([`BlockVerifier::law`]);
//! [`exact_block`] enumerates all draft trees and reports E(tau) and the
//! largest error of the output law, [`sampled_block`] draws instead;
//! [`sampled_live_blocks`] and [`exact_live_blocks`] do the same on a live
//! model pair ([`LiveModel`]), whose laws are fetched in batches for the
//! prefixes the drafted trees visit.
//!
//! ```
//! use mdsd_core::{ContextIndependent, Distribution};
//! use mdsd_verify::block::{exact_block, prepare_block};
//!
//! // docs/TEST_VECTORS.md's toy: the same p and q at every position.
//! let p = Distribution::from_probs(vec![1.0 / 3.0, 2.0 / 3.0])?;
//! let q = Distribution::from_probs(vec![2.0 / 3.0, 1.0 / 3.0])?;
//! let model = ContextIndependent::new(p, q)?;
//! let gbv = prepare_block("gbv", &model, 2)?;
//! // Two draft paths of two tokens, every draft tree enumerated.
//! let report = exact_block(&model, gbv.as_ref(), 2, 2, 1_000_000)?;
//! assert!((report.expected_accepted - 131.0 / 81.0).abs() < 1e-12);
//! assert!(report.max_law_error.unwrap() < 1e-12);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod compose;
mod gbv;
mod harness;
mod live;
mod path;

use std::sync::OnceLock;

use mdsd_core::{ContextModel, sample_index};
use rand::RngCore;

use crate::VerifyError;

pub use compose::Composed;
pub use gbv::GreedyBlockVerification;
pub use harness::{
    BlockReport, PathSampler, SAMPLED_TREE_LIMIT, exact_block, sampled_block,
    sampled_block_with_progress,
};
pub use live::{
    CachedModel, LiveModel, LiveReport, LiveSettings, exact_live_blocks, sampled_live_blocks,
};
pub use path::{BlockVerification, TokenByToken};

/// The law of a block's output: `(sequence, probability)` pairs, each
/// sequence the accepted draft tokens followed by one target token.
pub type BlockLaw = Vec<(Vec<usize>, f64)>;

/// A verifier of K draft paths of one depth, prepared for a context model.
pub trait BlockVerifier: Sync {
    /// The name used in reports.
    fn name(&self) -> &str;

    /// The exact law of the output given the draft paths (each of the
    /// verifier's depth, in the order drawn).
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError>;

    /// Draws the output. The default draws from [`BlockVerifier::law`];
    /// verifiers meant for large vocabularies override it.
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        let law = self.law(paths)?;
        let weights: Vec<f64> = law.iter().map(|l| l.1).collect();
        Ok(law[sample_index(&weights, rng)].0.clone())
    }
}

/// The block methods by name, besides the token-level verifiers that
/// [`Composed`] walks down the tree.
pub const BLOCK_METHODS: [&str; 3] = ["token", "bv", "gbv"];

/// Prepares a block verifier by name: `token`, `bv`, `gbv`, or the name of
/// a token-level verifier for iid drafts, composed over the tree.
pub fn prepare_block<'m>(
    name: &str,
    model: &'m dyn ContextModel,
    depth: usize,
) -> Result<Box<dyn BlockVerifier + 'm>, VerifyError> {
    mdsd_core::check_depth(model, depth)?;
    Ok(match name {
        "token" => Box::new(TokenByToken::new(model, depth)?),
        "bv" => Box::new(BlockVerification::new(model, depth)?),
        "gbv" => Box::new(GreedyBlockVerification::new(model, depth)?),
        _ => Box::new(Composed::new(name.parse()?, model, depth)?),
    })
}

/// What every block verifier is prepared for: a context model and a depth
/// it has laws for.
#[derive(Clone, Copy)]
pub(crate) struct Block<'m> {
    model: &'m dyn ContextModel,
    depth: usize,
}

impl<'m> Block<'m> {
    pub(crate) fn new(model: &'m dyn ContextModel, depth: usize) -> Result<Self, VerifyError> {
        mdsd_core::check_depth(model, depth)?;
        Ok(Self { model, depth })
    }

    /// Checks draft paths: at least one, each `depth` tokens below V, each
    /// with positive draft probability.
    fn check(&self, paths: &[Vec<usize>]) -> Result<(), VerifyError> {
        check_paths(self.model, self.depth, paths)
    }
}

/// A value per context of a model, computed on first use (sort orders,
/// cumulative sums).
pub(crate) struct PerContext<T>(Vec<OnceLock<T>>);

impl<T> PerContext<T> {
    pub(crate) fn new(model: &dyn ContextModel) -> Self {
        Self(
            (0..model.context_count())
                .map(|_| OnceLock::new())
                .collect(),
        )
    }

    pub(crate) fn get(&self, context: usize, init: impl FnOnce() -> T) -> &T {
        self.0[context].get_or_init(init)
    }
}

fn check_paths(
    model: &dyn ContextModel,
    depth: usize,
    paths: &[Vec<usize>],
) -> Result<(), VerifyError> {
    if paths.is_empty() {
        return Err(VerifyError::DraftCount {
            expected: 1,
            found: 0,
        });
    }
    for path in paths {
        if path.len() != depth {
            return Err(VerifyError::PathLength {
                expected: depth,
                found: path.len(),
            });
        }
        mdsd_core::check_tokens(path, model.vocab_size())?;
        if !model.draft_can_draw(path) {
            return Err(VerifyError::ImpossibleDrafts(path.clone()));
        }
    }
    Ok(())
}
