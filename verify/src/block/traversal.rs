//! Traversal Verification (Weng et al., "Traversal Verification for
//! Speculative Tree Decoding", NeurIPS 2025, arXiv 2505.12398, Algorithm 1):
//! the draft tree is verified from its leaves up, each candidate judged by
//! the acceptance of its whole sequence rather than token by token.
//!
//! Every node α keeps the target law M_b and the draft law M_s of its
//! children, and a sequence-level acceptance p_α = min(1, p_parent M_b(α) /
//! M_s(α)), p_root = 1 (block verification's weights along a path). The
//! loop takes the first leaf in depth-first post-order (follow the first
//! remaining child down) and accepts the sequence up to it with probability
//! p_α, followed by a token from its M_b. Otherwise the leaf is deleted and
//! its parent u updated as a rejection without replacement of that child:
//! * M_b(u) <- (p_u M_b(u) - M_s(u))+ / S, S = Σ_x (p_u M_b(u)(x) - M_s(u)(x))+;
//! * p_u <- min(1, S / D), D = Σ_x (M_s(u)(x) - p_u M_b(u)(x))+, the
//!   stopping probability h = S / (S + 1 - w) of block verification (Sun et
//!   al., Algorithm 2) at u;
//! * M_s(u) <- M_s(u) without the deleted token, renormalised;
//! * p of u's remaining descendants recomputed from the new laws.
//!
//! When the root has no child left it outputs a token from its M_b. On one
//! path this is block verification exactly (the tests hold the laws equal);
//! on trees it needs the children drawn without replacement, which the
//! update of M_s assumes. A public transcription that divides S by
//! 1 - M_s(u)(deleted) instead of D is lossy past two tokens
//! (`docs/blocks.md`).

use std::borrow::Cow;

use mdsd_core::{DraftShape, SchemeKind, sample_index};
use rand::RngCore;

use super::path::{push_corrections, uniform};
use super::{Block, BlockLaw, BlockVerifier};
use crate::VerifyError;

/// Traversal Verification of a tree with children drawn without replacement,
/// or of one path.
pub struct TraversalVerification<'m> {
    block: Block<'m>,
}

impl<'m> TraversalVerification<'m> {
    pub fn new(block: Block<'m>) -> Result<Self, VerifyError> {
        let applies = match &block.shape {
            DraftShape::Paths(k) => *k == 1,
            DraftShape::Tree {
                branching,
                children,
            } => {
                *children == SchemeKind::WithoutReplacement
                    || (*children == SchemeKind::Iid && branching.iter().all(|&b| b == 1))
            }
        };
        if !applies {
            return Err(VerifyError::ShapeNotSupported {
                method: "traversal",
                shape: block.shape.describe(),
                reason: "it updates the siblings' draft law as a draw without replacement: \
                         it takes one path or a tree of children drawn without replacement",
            });
        }
        Ok(Self { block })
    }

    /// The tree's nodes with their initial laws and acceptances.
    fn start(&self, paths: &[Vec<usize>]) -> Result<Traversal<'m>, VerifyError> {
        self.block.check(paths)?;
        let paths = match self.block.shape {
            // One path: only the first of any given is verified.
            DraftShape::Paths(_) => &paths[..1],
            DraftShape::Tree { .. } => paths,
        };
        let model = self.block.model;
        let mut nodes = vec![Node::new(Vec::new(), None, model)];
        for path in paths {
            let mut at = 0;
            for d in 0..path.len() {
                let existing = nodes[at]
                    .children
                    .iter()
                    .copied()
                    .find(|&c| nodes[c].prefix[d] == path[d]);
                at = match existing {
                    Some(child) => child,
                    None => {
                        let child = nodes.len();
                        nodes.push(Node::new(path[..=d].to_vec(), Some(at), model));
                        nodes[at].children.push(child);
                        child
                    }
                };
            }
        }
        let mut traversal = Traversal { nodes };
        traversal.recompute(0);
        Ok(traversal)
    }
}

/// One node of the tree being traversed. Its laws are the model's until a
/// child of it is rejected: nothing of size V is copied for the others.
#[derive(Clone)]
struct Node<'m> {
    prefix: Vec<usize>,
    parent: Option<usize>,
    /// The remaining children, in draw order.
    children: Vec<usize>,
    /// M_b: the (residual) target law of the next token.
    target: Cow<'m, [f64]>,
    /// M_s: the draft law of the next token, without deleted children.
    draft: Cow<'m, [f64]>,
    /// p_α: the probability of accepting the sequence up to this node when
    /// it is the current leaf.
    accept: f64,
}

impl<'m> Node<'m> {
    fn new(
        prefix: Vec<usize>,
        parent: Option<usize>,
        model: &'m dyn mdsd_core::ContextModel,
    ) -> Self {
        let context = model.context(&prefix);
        Self {
            prefix,
            parent,
            children: Vec::new(),
            target: Cow::Borrowed(model.target(context).probs()),
            draft: Cow::Borrowed(model.draft(context).probs()),
            accept: 1.0,
        }
    }
}

/// The state of one traversal.
#[derive(Clone)]
struct Traversal<'m> {
    nodes: Vec<Node<'m>>,
}

impl Traversal<'_> {
    /// p_α of the remaining descendants of `node` from its laws.
    fn recompute(&mut self, node: usize) {
        let children = self.nodes[node].children.clone();
        for child in children {
            let token = *self.nodes[child]
                .prefix
                .last()
                .expect("a child has a token");
            let parent = &self.nodes[node];
            let ratio = if parent.draft[token] > 0.0 {
                parent.target[token] / parent.draft[token]
            } else {
                0.0
            };
            self.nodes[child].accept = (parent.accept * ratio).min(1.0);
            self.recompute(child);
        }
    }

    /// The first leaf in post-order: the first remaining child, down.
    fn current(&self) -> usize {
        let mut at = 0;
        while let Some(&child) = self.nodes[at].children.first() {
            at = child;
        }
        at
    }

    /// Deletes the leaf `leaf` (not the root) and updates its parent.
    fn reject(&mut self, leaf: usize) {
        let parent = self.nodes[leaf].parent.expect("the root is never rejected");
        let token = *self.nodes[leaf].prefix.last().expect("a child has a token");
        let u = &mut self.nodes[parent];
        u.children.retain(|&c| c != leaf);
        let w = u.accept;
        let (mut excess, mut deficit) = (0.0, 0.0);
        let residual: Vec<f64> = u
            .target
            .iter()
            .zip(u.draft.iter())
            .map(|(&p, &q)| {
                let r = w * p - q;
                if r > 0.0 {
                    excess += r;
                    r
                } else {
                    deficit -= r;
                    0.0
                }
            })
            .collect();
        // S = 0 leaves u unreachable from here on (p_u = 0); its law is
        // kept as it was, never drawn from.
        if excess > 0.0 {
            u.target = Cow::Owned(residual.iter().map(|r| r / excess).collect());
        }
        u.accept = if excess > 0.0 && deficit > 0.0 {
            (excess / deficit).min(1.0)
        } else {
            0.0
        };
        let draft = u.draft.to_mut();
        draft[token] = 0.0;
        let rest: f64 = draft.iter().sum();
        if rest > 0.0 {
            draft.iter_mut().for_each(|q| *q /= rest);
        }
        self.recompute(parent);
    }

    /// Adds the outputs from this state on, reached with `mass`.
    fn law(&self, mass: f64, out: &mut BlockLaw) {
        let leaf = self.current();
        let node = &self.nodes[leaf];
        let accept = if leaf == 0 { 1.0 } else { node.accept };
        if accept > 0.0 {
            push_corrections(out, &node.prefix, mass * accept, &node.target);
        }
        if accept < 1.0 {
            let mut next = self.clone();
            next.reject(leaf);
            next.law(mass * (1.0 - accept), out);
        }
    }

    fn sample(mut self, rng: &mut dyn RngCore) -> Vec<usize> {
        loop {
            let leaf = self.current();
            if leaf == 0 || uniform(rng) < self.nodes[leaf].accept {
                let node = &self.nodes[leaf];
                let mut out = node.prefix.clone();
                out.push(sample_index(&node.target, rng));
                return out;
            }
            self.reject(leaf);
        }
    }
}

impl BlockVerifier for TraversalVerification<'_> {
    fn name(&self) -> &str {
        "traversal"
    }
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        let mut out = Vec::new();
        self.start(paths)?.law(1.0, &mut out);
        Ok(out)
    }
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        Ok(self.start(paths)?.sample(rng))
    }
}
