//! The solved selection rule of both methods: which draft is selected,
//! given the drafts, before single-draft speculative sampling of it.

use std::borrow::Cow;

use crate::newton::Solved;
use crate::numeric::sum_of_pairs;
use crate::workspace::Workspace;

/// How drafts of one token count in the softmax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Once per draft index: the enumeration-free rule selects a draft
    /// index, so a token drafted twice has twice the weight.
    PerDraft,
    /// Once per token of the draft set: Global Resolution's set-grouped rule.
    PerSet,
}

/// The tokens a rule selects, ascending: its vectors are on them, in this
/// order. The whole vocabulary is not listed: at a full support a list
/// would be as large as the rule's weights, made at every solve and read
/// by none of its selections.
#[derive(Debug, Clone, PartialEq)]
pub enum Support {
    /// Every token of a vocabulary of this size: slot y holds token y.
    Vocabulary(usize),
    /// These tokens, ascending: a draft's support short of the vocabulary,
    /// or a truncation set.
    Tokens(Vec<usize>),
}

impl Support {
    /// The number of tokens.
    pub fn len(&self) -> usize {
        match self {
            Support::Vocabulary(size) => *size,
            Support::Tokens(tokens) => tokens.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The token at `slot`.
    pub fn token(&self, slot: usize) -> usize {
        match self {
            Support::Vocabulary(_) => slot,
            Support::Tokens(tokens) => tokens[slot],
        }
    }

    /// The slot of `token`, if the rule selects it.
    pub fn slot(&self, token: usize) -> Option<usize> {
        match self {
            Support::Vocabulary(size) => (token < *size).then_some(token),
            Support::Tokens(tokens) => tokens.binary_search(&token).ok(),
        }
    }
}

/// A selection rule from solved weights: among the drafts outside H* by
/// the outer weights e^theta (<= 1) when there is one, else among all
/// drafts by the inner weights (>= 1), with `inner_none` the weight of
/// selecting nothing. The weights and r live on `tokens`, the only tokens
/// the rule selects: the draft's support (or a truncation set), so that a
/// solution at top-k drafts costs O(k), not O(V). The weights are kept as
/// their logarithms, theta, and exponentiated for the n drafts of a
/// selection: a pass of exponentials over the support would cost a solve
/// more than the selections of a decoding step.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionRule {
    /// The vocabulary's size.
    pub vocabulary: usize,
    /// The selectable tokens: the vectors below are on them, in their
    /// order; every other token has weight 0 and r = 0.
    pub tokens: Support,
    /// theta: the outer program's (<= 0) outside H*, the inner one's on
    /// H*.
    pub theta: Vec<f64>,
    /// Whether the token is in H*, where only the inner weights select it.
    pub in_certificate: Vec<bool>,
    /// r: the law of the selected token (of total below 1 where the rule
    /// may select nothing).
    pub selected: Vec<f64>,
    /// The weight of selecting nothing among drafts all inside H* (0 for
    /// the enumeration-free rule, 1 for Global Resolution's).
    pub inner_none: f64,
    pub counting: Counting,
}

impl SelectionRule {
    /// The law of the selected draft token given the drafts: (token,
    /// prob). It is empty when a draft is none of the rule's tokens (a
    /// draft of probability 0, or one outside a truncation set), and sums
    /// to less than 1 where the rule may select nothing.
    pub fn selection(&self, drafts: &[usize]) -> Vec<(usize, f64)> {
        let slots: Option<Vec<usize>> = drafts.iter().map(|&x| self.tokens.slot(x)).collect();
        let Some(mut slots) = slots else {
            return Vec::new();
        };
        if self.counting == Counting::PerSet {
            slots.sort_unstable();
            slots.dedup();
        }
        // Among the drafts outside H* when there is one (the drafts in H*
        // have outer weight 0), else among all by the inner weights.
        let outer = slots.iter().any(|&s| !self.in_certificate[s]);
        let none = if outer { 0.0 } else { self.inner_none };
        let weights: Vec<f64> = (slots.iter())
            .map(|&s| match outer && self.in_certificate[s] {
                true => 0.0,
                false => self.theta[s].exp(),
            })
            .collect();
        let total: f64 = none + weights.iter().sum::<f64>();
        let mut law: Vec<(usize, f64)> = Vec::with_capacity(slots.len());
        for (&s, &w) in slots.iter().zip(&weights) {
            if w <= 0.0 {
                continue;
            }
            let (x, w) = (self.tokens.token(s), w / total);
            match law.iter_mut().find(|e| e.0 == x) {
                Some(entry) => entry.1 += w,
                None => law.push((x, w)),
            }
        }
        law
    }

    /// r on the whole vocabulary: the rule's own where it holds every
    /// token, else made from it (zero off its tokens).
    pub fn selected_law(&self) -> Cow<'_, [f64]> {
        match &self.tokens {
            Support::Vocabulary(_) => Cow::Borrowed(&self.selected),
            Support::Tokens(tokens) => {
                let mut law = vec![0.0; self.vocabulary];
                for (&y, &r) in tokens.iter().zip(&self.selected) {
                    law[y] = r;
                }
                Cow::Owned(law)
            }
        }
    }

    /// The acceptance of the selected token against p (on `tokens`, in
    /// their order): Σ min(p, r).
    pub(crate) fn acceptance(&self, p: &[f64]) -> f64 {
        sum_of_pairs(p, &self.selected, accepted)
    }
}

/// A token's share of the acceptance, min(p, r): by a select, not
/// `f64::min`, whose NaN rule keeps a sum of them from vectorising
/// (neither p nor r holds a NaN).
#[inline]
pub(crate) fn accepted(p: f64, r: f64) -> f64 {
    if p < r { p } else { r }
}

/// The outer and inner programs' solutions, over lists of slots of
/// `tokens` that partition them, each ascending, as one rule; and the
/// Newton iterations of both.
pub(crate) struct Assembly<'a> {
    pub vocabulary: usize,
    pub tokens: Support,
    pub outer: (&'a [usize], Solved),
    pub inner: (&'a [usize], Solved),
    pub inner_none: f64,
    pub counting: Counting,
}

impl Assembly<'_> {
    pub(crate) fn rule(self, workspace: &mut Workspace) -> (SelectionRule, usize) {
        let v = self.tokens.len();
        let iterations = self.outer.1.iterations + self.inner.1.iterations;
        let ((outer_slots, outer), (inner_slots, inner)) = (self.outer, self.inner);
        debug_assert_eq!(outer_slots.len() + inner_slots.len(), v);
        // Each side scattered to its slots, ascending: outputs zeroed by
        // the allocator (fresh pages, zero already) and written once each,
        // with no test per slot of which side it is on (which follows no
        // pattern along the vocabulary).
        let mut theta = vec![0.0; v];
        let mut selected = vec![0.0; v];
        let mut in_certificate = vec![false; v];
        for (slots, side) in [(outer_slots, &outer), (inner_slots, &inner)] {
            for ((&slot, &t), &r) in slots.iter().zip(&side.theta).zip(&side.marginal) {
                theta[slot] = t;
                selected[slot] = r;
            }
        }
        inner_slots
            .iter()
            .for_each(|&slot| in_certificate[slot] = true);
        for solved in [outer, inner] {
            workspace.give(solved.theta);
            workspace.give(solved.marginal);
        }
        let rule = SelectionRule {
            vocabulary: self.vocabulary,
            tokens: self.tokens,
            theta,
            in_certificate,
            selected,
            inner_none: self.inner_none,
            counting: self.counting,
        };
        (rule, iterations)
    }
}
