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
//!   the draft tree, applied at each node to the drafts at it.
//! * [`TraversalVerification`] (Weng et al.): leaf-to-root verification of
//!   a tree with children drawn without replacement (or of one path), with
//!   sequence-level acceptance; block verification on one path.
//! * [`HierarchicalVerification`] (HSD, Zhou et al.): as its authors'
//!   reference code verifies one path; not lossless (`docs/blocks.md`).
//!
//! A drawn tree is given as its root-to-leaf paths ([`DraftShape`]): K
//! i.i.d. paths, or a static tree of children drawn i.i.d., without
//! replacement or as the draft's top-k.
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

mod black_box;
mod compose;
mod gbv;
mod harness;
mod hsd;
mod live;
mod path;
mod traversal;

use std::sync::OnceLock;

use mdsd_core::{ContextModel, DraftShape, sample_index};
use rand::RngCore;

use crate::VerifyError;

pub use black_box::{
    DraftBlocks, OutputsRead, SEQUENCE_LIMIT, TabledLaws, block_output, check_block_output,
    padded_output,
};
pub use compose::Composed;
pub use gbv::GreedyBlockVerification;
pub use harness::{
    BLOCK_REFERENCES, BlockReport, SAMPLED_TREE_LIMIT, TreeSampler, block_reference, exact_block,
    exact_tree, sampled_block, sampled_block_with_progress,
};
pub use hsd::HierarchicalVerification;
pub use live::{
    CachedModel, LiveModel, LiveReport, LiveSettings, RoundBlock, RoundVerifier, exact_live_blocks,
    sampled_live_blocks, sampled_live_blocks_with,
};
pub use path::{BlockVerification, TokenByToken};
pub use traversal::TraversalVerification;

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
pub const BLOCK_METHODS: [&str; 5] = ["token", "bv", "gbv", "traversal", "hsd"];

/// Prepares a block verifier of K i.i.d. draft paths (any K) by name:
/// `token`, `bv`, `gbv`, `traversal` (one path), `hsd`, or the name of a
/// token-level verifier for iid drafts, composed over the tree.
pub fn prepare_block<'m>(
    name: &str,
    model: &'m dyn ContextModel,
    depth: usize,
) -> Result<Box<dyn BlockVerifier + 'm>, VerifyError> {
    prepare_tree_block(name, model, depth, &DraftShape::Paths(1))
}

/// [`prepare_block`] for draft trees of `shape`; refuses a method that
/// does not apply to it (GBV reads i.i.d. paths, traversal children drawn
/// without replacement, single-path methods a drawn first path).
pub fn prepare_tree_block<'m>(
    name: &str,
    model: &'m dyn ContextModel,
    depth: usize,
    shape: &DraftShape,
) -> Result<Box<dyn BlockVerifier + 'm>, VerifyError> {
    let block = Block::new(model, depth, shape)?;
    Ok(match name {
        "token" => Box::new(TokenByToken::new(block)?),
        "bv" => Box::new(BlockVerification::new(block)?),
        "gbv" => Box::new(GreedyBlockVerification::new(block)?),
        "traversal" => Box::new(TraversalVerification::new(block)?),
        "hsd" => Box::new(HierarchicalVerification::new(block)?),
        _ => Box::new(Composed::new(name.parse()?, block)?),
    })
}

/// What every block verifier is prepared for: a context model, a depth it
/// has laws for, and the shape of the draft trees.
#[derive(Clone)]
pub struct Block<'m> {
    model: &'m dyn ContextModel,
    depth: usize,
    shape: DraftShape,
}

impl<'m> Block<'m> {
    /// Checks the depth against the model and the shape. For i.i.d. paths
    /// the verifiers take any number of paths.
    pub fn new(
        model: &'m dyn ContextModel,
        depth: usize,
        shape: &DraftShape,
    ) -> Result<Self, VerifyError> {
        mdsd_core::check_depth(model, depth)?;
        shape.check_depth(depth)?;
        Ok(Self {
            model,
            depth,
            shape: shape.clone(),
        })
    }

    /// Checks draft paths: at least one (a tree's count of leaves), each
    /// `depth` tokens below V, each with positive draft probability.
    fn check(&self, paths: &[Vec<usize>]) -> Result<(), VerifyError> {
        if !paths.is_empty() && !self.shape.holds_paths(paths.len()) {
            return Err(VerifyError::DraftCount {
                expected: self.shape.leaves() as usize,
                found: paths.len(),
            });
        }
        check_paths(self.model, self.depth, paths)
    }

    /// Refuses `method` unless the first path of a drawn tree is a draw
    /// from the draft (it is not under top-k children).
    fn first_path_drawn(&self, method: &'static str) -> Result<(), VerifyError> {
        if self.shape.first_path_is_drawn() {
            return Ok(());
        }
        Err(VerifyError::ShapeNotSupported {
            method,
            shape: self.shape.describe(),
            reason: "it verifies one path drawn from the draft, and top-k children are not drawn",
        })
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
