//! The problem every solver takes and the plan (verifier) exact solvers return.

use crate::distribution::check_same_len;
use crate::{CoreError, Distribution, DraftLaw, DraftScheme};

/// One instance of the optimal-transport problem: a target p and a draft
/// scheme over the same vocabulary. Every solver crate takes a `Problem`.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    target: Distribution,
    drafts: DraftScheme,
}

impl Problem {
    /// Checks that target and drafts share one vocabulary.
    pub fn new(target: Distribution, drafts: DraftScheme) -> Result<Self, CoreError> {
        Self::check(&target, &drafts)?;
        Ok(Self { target, drafts })
    }

    /// What [`Problem::new`] checks, on borrowed laws: for functions that
    /// take a target and drafts apart and need no `Problem` of them.
    pub fn check(target: &Distribution, drafts: &DraftScheme) -> Result<(), CoreError> {
        check_same_len(target.len(), &drafts.drafts()[0], "the draft distribution")
    }

    /// The target distribution p.
    pub fn target(&self) -> &Distribution {
        &self.target
    }

    pub fn drafts(&self) -> &DraftScheme {
        &self.drafts
    }

    pub fn vocab_size(&self) -> usize {
        self.target.len()
    }

    /// The target and the drafts, for a caller that keeps them past the
    /// problem without copying them.
    pub fn into_parts(self) -> (Distribution, DraftScheme) {
        (self.target, self.drafts)
    }

    /// The indicator vector of a token set, rejecting out-of-range tokens.
    pub fn indicator(&self, tokens: &[usize]) -> Result<Vec<bool>, CoreError> {
        let vocab_size = self.vocab_size();
        let mut mask = vec![false; vocab_size];
        for &token in tokens {
            *mask
                .get_mut(token)
                .ok_or(CoreError::TokenOutOfRange { token, vocab_size })? = true;
        }
        Ok(mask)
    }
}

/// A verifier given as an explicit conditional law pi(y | outcome) for every
/// outcome of a draft law (ordered tuples or sets): the transport plan of the
/// optimal-transport problem, row-major `outcomes x vocab`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    law: DraftLaw,
    vocab_size: usize,
    conditional: Vec<f64>,
}

impl Plan {
    /// Wraps a plan; `conditional` holds `law.len() * vocab_size` entries,
    /// row `i` the output law for outcome `i`.
    pub fn new(law: DraftLaw, vocab_size: usize, conditional: Vec<f64>) -> Self {
        assert_eq!(
            conditional.len(),
            law.len() * vocab_size,
            "plan needs one row of vocab_size entries per outcome"
        );
        Self {
            law,
            vocab_size,
            conditional,
        }
    }

    /// The draft law the plan is defined on.
    pub fn law(&self) -> &DraftLaw {
        &self.law
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// pi(. | outcome `i`).
    pub fn conditional(&self, i: usize) -> &[f64] {
        &self.conditional[i * self.vocab_size..(i + 1) * self.vocab_size]
    }

    /// P(output is one of the drafts) = Σ_x Q(x) Σ_{y in x} pi(y | x).
    pub fn acceptance(&self) -> f64 {
        self.law
            .iter()
            .enumerate()
            .map(|(i, (outcome, prob))| {
                let row = self.conditional(i);
                prob * crate::token_set(outcome)
                    .iter()
                    .map(|&y| row[y])
                    .sum::<f64>()
            })
            .sum()
    }

    /// The law of the output token, Σ_x Q(x) pi(. | x).
    pub fn output_marginal(&self) -> Vec<f64> {
        let mut marginal = vec![0.0; self.vocab_size];
        for (i, prob) in self.law.probs.iter().enumerate() {
            for (m, c) in marginal.iter_mut().zip(self.conditional(i)) {
                *m += prob * c;
            }
        }
        marginal
    }

    /// The largest violation of the plan's two marginal constraints: each row
    /// sums to 1, and the output marginal equals `target`.
    pub fn max_marginal_error(&self, target: &Distribution) -> f64 {
        let rows = (0..self.law.len())
            .map(|i| (self.conditional(i).iter().sum::<f64>() - 1.0).abs())
            .fold(0.0, f64::max);
        let columns = self
            .output_marginal()
            .iter()
            .zip(target.probs())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        rows.max(columns)
    }
}
