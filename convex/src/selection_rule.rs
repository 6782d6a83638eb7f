//! The solved selection rule of both methods: which draft is selected,
//! given the drafts, before single-draft speculative sampling of it.

use rayon::prelude::*;

use crate::newton::Solved;
use crate::thresholds::PARALLEL_FROM;
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

/// A selection rule from solved weights: among the drafts outside H* by
/// the outer weights e^theta (<= 1) when there is one, else among all
/// drafts by the inner weights (>= 1), with `inner_none` the weight of
/// selecting nothing. The weights and r live on `tokens`, the only tokens
/// the rule selects: the draft's support (or a truncation set), so that a
/// solution at top-k drafts costs O(k), not O(V).
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionRule {
    /// The vocabulary's size.
    pub vocabulary: usize,
    /// The selectable tokens, ascending: the three vectors below are on
    /// them, in this order; every other token has weight 0 and r = 0.
    pub tokens: Vec<usize>,
    /// Outer weights e^theta outside H*, 0 on H*.
    pub outer_weights: Vec<f64>,
    /// Inner weights e^theta on H*, 0 elsewhere.
    pub inner_weights: Vec<f64>,
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
        let slots: Option<Vec<usize>> = drafts
            .iter()
            .map(|x| self.tokens.binary_search(x).ok())
            .collect();
        let Some(mut slots) = slots else {
            return Vec::new();
        };
        if self.counting == Counting::PerSet {
            slots.sort_unstable();
            slots.dedup();
        }
        let outer = slots.iter().any(|&s| self.outer_weights[s] > 0.0);
        let (weights, none) = if outer {
            (&self.outer_weights, 0.0)
        } else {
            (&self.inner_weights, self.inner_none)
        };
        let total: f64 = none + slots.iter().map(|&s| weights[s]).sum::<f64>();
        let mut law: Vec<(usize, f64)> = Vec::with_capacity(slots.len());
        for &s in &slots {
            if weights[s] <= 0.0 {
                continue;
            }
            let (x, w) = (self.tokens[s], weights[s] / total);
            match law.iter_mut().find(|e| e.0 == x) {
                Some(entry) => entry.1 += w,
                None => law.push((x, w)),
            }
        }
        law
    }

    /// r on the whole vocabulary.
    pub fn selected_law(&self) -> Vec<f64> {
        let mut law = vec![0.0; self.vocabulary];
        for (&y, &r) in self.tokens.iter().zip(&self.selected) {
            law[y] = r;
        }
        law
    }

    /// The acceptance of the selected token against p (on `tokens`, in
    /// their order): Σ min(p, r).
    pub(crate) fn acceptance(&self, p: &[f64]) -> f64 {
        p.iter().zip(&self.selected).map(|(p, r)| p.min(*r)).sum()
    }
}

/// The outer and inner programs' solutions, over disjoint lists of slots
/// of `tokens`, as one rule; and the Newton iterations of both.
pub(crate) struct Assembly<'a> {
    pub vocabulary: usize,
    pub tokens: Vec<usize>,
    pub outer: (&'a [usize], Solved),
    pub inner: (&'a [usize], Solved),
    pub inner_none: f64,
    pub counting: Counting,
}

impl Assembly<'_> {
    pub(crate) fn rule(self, workspace: &mut Workspace) -> (SelectionRule, usize) {
        let v = self.tokens.len();
        let mut selected = vec![0.0; v];
        let mut outer_weights = vec![0.0; v];
        let mut inner_weights = vec![0.0; v];
        let iterations = self.outer.1.iterations + self.inner.1.iterations;
        for ((slots, mut solved), weights) in [
            (self.outer, &mut outer_weights),
            (self.inner, &mut inner_weights),
        ] {
            // In place (a vector of the support's size less to fault in),
            // and in parallel only for programs large enough to run on
            // rayon's pool: below, the call would wait for a worker.
            let exponential = |t: &mut f64| *t = t.exp();
            if solved.theta.len() < PARALLEL_FROM {
                solved.theta.iter_mut().for_each(exponential);
            } else {
                solved.theta.par_iter_mut().for_each(exponential);
            }
            for ((&s, &w), &r) in slots.iter().zip(&solved.theta).zip(&solved.marginal) {
                weights[s] = w;
                selected[s] = r;
            }
            workspace.give(solved.theta);
            workspace.give(solved.marginal);
        }
        let rule = SelectionRule {
            vocabulary: self.vocabulary,
            tokens: self.tokens,
            outer_weights,
            inner_weights,
            selected,
            inner_none: self.inner_none,
            counting: self.counting,
        };
        (rule, iterations)
    }
}
