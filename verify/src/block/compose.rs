//! Tree composition of a token-level verifier: walk down the draft tree,
//! and at each node apply the verifier to the drafts at it (m draws from
//! q(. | node) by the tree's child scheme: i.i.d., without replacement or
//! top-k). An output among them moves to that child with the paths that
//! continue with it; any other output is the correction. At depth L the
//! correction is drawn from p. Lossless whenever the token-level verifier
//! is, since given the node and m the drafts at it have the scheme's law
//! from q(. | node), whatever happened above.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mdsd_core::{DraftScheme, Problem, sample_index};
use rand::RngCore;

use super::path::push_corrections;
use super::{Block, BlockLaw, BlockVerifier, PerContext};
use crate::{Verifier, VerifierKind, VerifyError};

/// A token-level verifier composed over the tree.
pub struct Composed<'m> {
    verifier: VerifierKind,
    block: Block<'m>,
    /// Prepared token-level verifiers per context, by number of drafts.
    prepared: PerContext<Mutex<HashMap<usize, Arc<dyn Verifier>>>>,
}

impl<'m> Composed<'m> {
    /// `verifier` must support the scheme of the drafts at a node: iid for
    /// i.i.d. paths and children, wor or top for those children.
    pub fn new(verifier: VerifierKind, block: Block<'m>) -> Result<Self, VerifyError> {
        verifier.check_scheme(block.shape.node_scheme())?;
        let prepared = PerContext::new(block.model);
        Ok(Self {
            verifier,
            block,
            prepared,
        })
    }

    /// The token-level verifier at `prefix` for `m` drafts, prepared once
    /// per context and m.
    fn at(&self, prefix: &[usize], m: usize) -> Result<Arc<dyn Verifier>, VerifyError> {
        let model = self.block.model;
        let context = model.context(prefix);
        let cache = self.prepared.get(context, Default::default);
        // A poisoned lock only means another thread panicked mid-insert;
        // the map itself is still consistent.
        let cached = cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&m)
            .cloned();
        if let Some(verifier) = cached {
            return Ok(verifier);
        }
        let scheme = DraftScheme::new(
            self.block.shape.node_scheme(),
            vec![model.draft(context).clone()],
            m,
        )?;
        let problem = Problem::new(model.target(context).clone(), scheme)?;
        let verifier: Arc<dyn Verifier> = Arc::from(self.verifier.prepare(&problem)?);
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(m, Arc::clone(&verifier));
        Ok(verifier)
    }

    /// Adds the outputs below the node `prefix`, reached with `mass` by the
    /// paths `alive`.
    fn walk(
        &self,
        paths: &[Vec<usize>],
        alive: &[usize],
        prefix: &mut Vec<usize>,
        mass: f64,
        out: &mut BlockLaw,
    ) -> Result<(), VerifyError> {
        let d = prefix.len();
        if d == self.block.depth {
            let p = self
                .block
                .model
                .target(self.block.model.context(prefix))
                .probs();
            push_corrections(out, prefix, mass, p);
            return Ok(());
        }
        let drafts = self.block.shape.node_drafts(paths, alive, d);
        for (y, w) in self.at(prefix, drafts.len())?.conditional(&drafts)? {
            if drafts.contains(&y) {
                let next: Vec<usize> = alive
                    .iter()
                    .copied()
                    .filter(|&i| paths[i][d] == y)
                    .collect();
                prefix.push(y);
                self.walk(paths, &next, prefix, mass * w, out)?;
                prefix.pop();
            } else {
                let mut seq = prefix.clone();
                seq.push(y);
                out.push((seq, mass * w));
            }
        }
        Ok(())
    }
}

impl BlockVerifier for Composed<'_> {
    fn name(&self) -> &str {
        self.verifier.name()
    }
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.block.check(paths)?;
        let mut out = Vec::new();
        let alive: Vec<usize> = (0..paths.len()).collect();
        self.walk(paths, &alive, &mut Vec::new(), 1.0, &mut out)?;
        Ok(out)
    }
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        self.block.check(paths)?;
        let mut alive: Vec<usize> = (0..paths.len()).collect();
        let mut out = Vec::with_capacity(self.block.depth + 1);
        while out.len() < self.block.depth {
            let d = out.len();
            let drafts = self.block.shape.node_drafts(paths, &alive, d);
            let y = self.at(&out, drafts.len())?.sample(&drafts, rng)?;
            out.push(y);
            if !drafts.contains(&y) {
                return Ok(out);
            }
            alive.retain(|&i| paths[i][d] == y);
        }
        out.push(sample_index(
            self.block
                .model
                .target(self.block.model.context(&out))
                .probs(),
            rng,
        ));
        Ok(out)
    }
}
