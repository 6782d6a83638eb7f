//! The optimal verifier as an object: for given drafts, its exact output law
//! and a sample from it.

use std::collections::HashMap;

use mdsd_core::{Plan, sample_index, token_set};
use rand::Rng;

use crate::FlowError;

/// A verifier holding an optimal plan pi(y | draft set) for one target and
/// draft scheme. It depends on the drafts only through their set.
#[derive(Debug, Clone)]
pub struct FlowVerifier {
    plan: Plan,
    row_of_set: HashMap<Vec<usize>, usize>,
}

impl FlowVerifier {
    /// Wraps a plan over draft sets (as [`crate::FlowSolution::plan`]).
    pub fn new(plan: Plan) -> Self {
        let row_of_set = plan
            .law()
            .outcomes
            .iter()
            .enumerate()
            .map(|(row, set)| (set.clone(), row))
            .collect();
        Self { plan, row_of_set }
    }

    /// The plan the verifier follows.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The exact law of the output token given the drafts (any order,
    /// repeats allowed): pi(. | set(drafts)).
    pub fn conditional(&self, drafts: &[usize]) -> Result<&[f64], FlowError> {
        let set = token_set(drafts);
        self.row_of_set
            .get(&set)
            .map(|&row| self.plan.conditional(row))
            .ok_or(FlowError::ImpossibleDrafts(drafts.to_vec()))
    }

    /// Draws the output token for the drafts.
    pub fn sample<R: Rng + ?Sized>(
        &self,
        drafts: &[usize],
        rng: &mut R,
    ) -> Result<usize, FlowError> {
        Ok(sample_index(self.conditional(drafts)?, rng))
    }
}
