//! Context models: target and draft next-token laws as functions of the
//! prefix, for block-level (multi-token) speculative sampling (`docs/DESIGN.md` §6).
//!
//! A model maps every prefix to a *context*, an index in
//! `0..context_count()`, and gives the two laws of that context. Verifiers
//! that precompute per law (sort orders, cumulative sums) do it once per
//! context instead of once per prefix.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{CoreError, Distribution, Instead, saturating_pow};

/// Which model of a target/draft pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Target,
    Draft,
}

impl Side {
    /// "target" or "draft", as messages name the model.
    pub fn name(self) -> &'static str {
        match self {
            Side::Target => "target",
            Side::Draft => "draft",
        }
    }
}

/// Target and draft next-token laws as functions of the prefix.
pub trait ContextModel: Sync {
    /// The vocabulary size V: every law has V entries.
    fn vocab_size(&self) -> usize;

    /// The number of distinct contexts.
    fn context_count(&self) -> usize;

    /// The context of the next token after `prefix`. The caller keeps the
    /// tokens below V and the prefix within [`ContextModel::max_prefix_len`]
    /// ([`check_depth`]).
    fn context(&self, prefix: &[usize]) -> usize;

    /// The target law p(. | context).
    fn target(&self, context: usize) -> &Distribution;

    /// The draft law q(. | context).
    fn draft(&self, context: usize) -> &Distribution;

    /// The longest prefix the model has laws for; `None` when unbounded.
    fn max_prefix_len(&self) -> Option<usize> {
        None
    }

    /// p(seq): the product of the target's next-token probabilities.
    fn target_prob(&self, seq: &[usize]) -> f64 {
        (0..seq.len())
            .map(|i| self.target(self.context(&seq[..i])).prob(seq[i]))
            .product()
    }

    /// q(seq): the product of the draft's next-token probabilities.
    fn draft_prob(&self, seq: &[usize]) -> f64 {
        (0..seq.len())
            .map(|i| self.draft(self.context(&seq[..i])).prob(seq[i]))
            .product()
    }

    /// Whether the draft model can draw `seq`: every token has positive
    /// probability after the tokens before it (its product may still
    /// underflow to 0, and the path be drawn all the same).
    fn draft_can_draw(&self, seq: &[usize]) -> bool {
        (0..seq.len()).all(|i| self.draft(self.context(&seq[..i])).prob(seq[i]) > 0.0)
    }
}

/// Checks that blocks of `depth` draft tokens fit the model: depth >= 1, and
/// laws for prefixes of up to `depth` tokens (the last for the target's
/// bonus token).
pub fn check_depth(model: &dyn ContextModel, depth: usize) -> Result<(), CoreError> {
    if depth == 0 {
        return Err(CoreError::ZeroDepth);
    }
    match model.max_prefix_len() {
        Some(max) if max < depth => Err(CoreError::DepthBeyondModel { depth, max }),
        _ => Ok(()),
    }
}

/// Every path of `depth` tokens with positive draft probability, with that
/// probability, in lexicographic order.
pub fn draft_paths(model: &dyn ContextModel, depth: usize) -> Vec<(Vec<usize>, f64)> {
    let mut paths = vec![(Vec::new(), 1.0)];
    for _ in 0..depth {
        paths = paths
            .into_iter()
            .flat_map(|(path, prob)| {
                let q = model.draft(model.context(&path)).probs();
                q.iter()
                    .enumerate()
                    .filter(|&(_, &w)| w > 0.0)
                    .map(|(x, &w)| {
                        let mut next = path.clone();
                        next.push(x);
                        (next, prob * w)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    paths
}

/// Checks that `tokens` are below the vocabulary size.
pub fn check_tokens(tokens: &[usize], vocab_size: usize) -> Result<(), CoreError> {
    match tokens.iter().find(|&&t| t >= vocab_size) {
        Some(&token) => Err(CoreError::TokenOutOfRange { token, vocab_size }),
        None => Ok(()),
    }
}

/// The same p and q after every prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextIndependent {
    target: Distribution,
    draft: Distribution,
}

impl ContextIndependent {
    pub fn new(target: Distribution, draft: Distribution) -> Result<Self, CoreError> {
        check_same_vocab(&target, &[&draft])?;
        Ok(Self { target, draft })
    }
}

impl ContextModel for ContextIndependent {
    fn vocab_size(&self) -> usize {
        self.target.len()
    }
    fn context_count(&self) -> usize {
        1
    }
    fn context(&self, _prefix: &[usize]) -> usize {
        0
    }
    fn target(&self, _context: usize) -> &Distribution {
        &self.target
    }
    fn draft(&self, _context: usize) -> &Distribution {
        &self.draft
    }
}

/// Laws that depend on the position only: row `d` after any prefix of `d`
/// tokens (for instance consecutive rows of a logit file, used as
/// context-independent laws per position).
#[derive(Debug, Clone, PartialEq)]
pub struct PositionalRows {
    targets: Vec<Distribution>,
    drafts: Vec<Distribution>,
}

impl PositionalRows {
    /// One target and one draft law per position; both lists equally long
    /// and non-empty, all laws of one vocabulary size.
    pub fn new(targets: Vec<Distribution>, drafts: Vec<Distribution>) -> Result<Self, CoreError> {
        if targets.is_empty() {
            return Err(CoreError::Empty);
        }
        if drafts.len() != targets.len() {
            return Err(CoreError::LengthMismatch {
                what: "the draft rows".into(),
                expected: targets.len(),
                found: drafts.len(),
            });
        }
        check_same_vocab(
            &targets[0],
            &targets.iter().chain(&drafts).collect::<Vec<_>>(),
        )?;
        Ok(Self { targets, drafts })
    }
}

impl ContextModel for PositionalRows {
    fn vocab_size(&self) -> usize {
        self.targets[0].len()
    }
    fn context_count(&self) -> usize {
        self.targets.len()
    }
    fn context(&self, prefix: &[usize]) -> usize {
        prefix.len()
    }
    fn target(&self, context: usize) -> &Distribution {
        &self.targets[context]
    }
    fn draft(&self, context: usize) -> &Distribution {
        &self.drafts[context]
    }
    fn max_prefix_len(&self) -> Option<usize> {
        Some(self.targets.len() - 1)
    }
}

/// Random n-gram tables: the laws after a prefix depend on its last `order`
/// tokens (fewer at the start). Each law is drawn from a seed: entries are
/// 0 with probability 1/8 (so supports differ), else Exp(1), normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkovModel {
    vocab_size: usize,
    order: usize,
    targets: Vec<Distribution>,
    drafts: Vec<Distribution>,
}

/// The most table entries (contexts x V x 2) a random model may have.
const MARKOV_MAX_ENTRIES: u128 = 10_000_000;

impl MarkovModel {
    pub fn random(vocab_size: usize, order: usize, seed: u64) -> Result<Self, CoreError> {
        if vocab_size == 0 {
            return Err(CoreError::Empty);
        }
        // Σ_(l <= order) V^l: order + 1 for V = 1, else saturated by
        // l = 128, so the sum stops there.
        let contexts: u128 = if vocab_size == 1 {
            (order as u128).saturating_add(1)
        } else {
            (0..=order.min(128))
                .map(|l| saturating_pow(vocab_size as u128, l))
                .fold(0, u128::saturating_add)
        };
        let entries = contexts.saturating_mul(2 * vocab_size as u128);
        if entries > MARKOV_MAX_ENTRIES {
            return Err(CoreError::TooLarge {
                what: "the random Markov model's tables (a smaller vocabulary or order fits)",
                size: entries,
                limit: MARKOV_MAX_ENTRIES,
                instead: Instead(&[]),
            });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut law = || random_law(vocab_size, &mut rng);
        let (targets, drafts) = (0..contexts).map(|_| (law(), law())).unzip();
        Ok(Self {
            vocab_size,
            order,
            targets,
            drafts,
        })
    }

    /// How many previous tokens the laws depend on.
    pub fn order(&self) -> usize {
        self.order
    }
}

/// A law with entries 0 (probability 1/8) or Exp(1), at least one positive.
fn random_law(vocab_size: usize, rng: &mut ChaCha8Rng) -> Distribution {
    loop {
        let weights: Vec<f64> = (0..vocab_size)
            .map(|_| {
                if rng.random::<f64>() < 0.125 {
                    0.0
                } else {
                    -(1.0 - rng.random::<f64>()).ln()
                }
            })
            .collect();
        let total: f64 = weights.iter().sum();
        if total > 0.0 {
            let probs: Vec<f64> = weights.iter().map(|w| w / total).collect();
            return Distribution::from_probs(probs).expect("normalised Exp(1) weights");
        }
    }
}

impl ContextModel for MarkovModel {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn context_count(&self) -> usize {
        self.targets.len()
    }
    /// Contexts of length l start at V^0 + ... + V^(l-1); within them, the
    /// suffix read as a base-V number.
    fn context(&self, prefix: &[usize]) -> usize {
        let suffix = &prefix[prefix.len().saturating_sub(self.order)..];
        let offset: usize = (0..suffix.len() as u32)
            .map(|l| self.vocab_size.pow(l))
            .sum();
        offset + suffix.iter().fold(0, |acc, &t| acc * self.vocab_size + t)
    }
    fn target(&self, context: usize) -> &Distribution {
        &self.targets[context]
    }
    fn draft(&self, context: usize) -> &Distribution {
        &self.drafts[context]
    }
}

/// Checks that every law in `laws` has the vocabulary size of `first`.
fn check_same_vocab(first: &Distribution, laws: &[&Distribution]) -> Result<(), CoreError> {
    for (i, law) in laws.iter().enumerate() {
        if law.len() != first.len() {
            return Err(CoreError::LengthMismatch {
                what: format!("law {i} of the context model"),
                expected: first.len(),
                found: law.len(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markov_contexts_are_distinct_and_in_range() {
        let model = MarkovModel::random(3, 2, 7).unwrap();
        assert_eq!(model.context_count(), 1 + 3 + 9);
        let mut seen = std::collections::HashSet::new();
        seen.insert(model.context(&[]));
        for a in 0..3 {
            seen.insert(model.context(&[a]));
            for b in 0..3 {
                let c = model.context(&[a, b]);
                seen.insert(c);
                assert_eq!(
                    model.context(&[2, 1, a, b]),
                    c,
                    "only the last 2 tokens count"
                );
            }
        }
        assert_eq!(seen.len(), 13);
        assert!(seen.iter().all(|&c| c < 13));
    }

    #[test]
    fn sequence_probabilities_sum_to_one() {
        let model = MarkovModel::random(3, 1, 11).unwrap();
        let (mut p, mut q) = (0.0, 0.0);
        for a in 0..3 {
            for b in 0..3 {
                p += model.target_prob(&[a, b]);
                q += model.draft_prob(&[a, b]);
            }
        }
        assert!((p - 1.0).abs() < 1e-14 && (q - 1.0).abs() < 1e-14);
    }

    #[test]
    fn depth_and_shape_errors_name_the_problem() {
        let law = |v: Vec<f64>| Distribution::from_probs(v).unwrap();
        let rows =
            PositionalRows::new(vec![law(vec![0.5, 0.5]); 3], vec![law(vec![0.25, 0.75]); 3])
                .unwrap();
        assert!(check_depth(&rows, 2).is_ok());
        assert_eq!(
            check_depth(&rows, 3),
            Err(CoreError::DepthBeyondModel { depth: 3, max: 2 })
        );
        assert_eq!(check_depth(&rows, 0), Err(CoreError::ZeroDepth));
        let mismatch = PositionalRows::new(vec![law(vec![0.5, 0.5])], vec![law(vec![1.0])]);
        assert!(matches!(
            mismatch,
            Err(CoreError::LengthMismatch { found: 1, .. })
        ));
        assert!(matches!(
            MarkovModel::random(1000, 3, 0),
            Err(CoreError::TooLarge { .. })
        ));
    }
}
