//! The laws every verifier builds from (`docs/DESIGN.md` §6): the residual
//! of a speculative-sampling step, acceptance probabilities, point masses
//! mixed with a residual, and the checks of drafts.

use mdsd_core::{CumulativeDistribution, DraftScheme, SchemeKind};

use crate::{OutputLaw, VerifyError};

/// `(p - a)+` renormalised: the law to draw from once the mass `a` has been
/// given out by accepting drafts (a = q for one speculative-sampling step).
///
/// When every `p - a` rounds to <= 0, the true residual is below f64's
/// resolution and carries no more than rounding mass, so any law keeps the
/// output exact to rounding; p on its highest-p/a tokens is used, where the
/// residual concentrates as it vanishes.
pub(crate) fn residual(p: &[f64], a: &[f64]) -> Vec<f64> {
    let mut r: Vec<f64> = p.iter().zip(a).map(|(x, y)| (x - y).max(0.0)).collect();
    let total: f64 = r.iter().sum();
    if total > 0.0 {
        r.iter_mut().for_each(|x| *x /= total);
        return r;
    }
    let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::INFINITY };
    let best = p
        .iter()
        .zip(a)
        .filter(|(x, _)| **x > 0.0)
        .map(|(&x, &y)| ratio(x, y))
        .fold(0.0, f64::max);
    let mut r: Vec<f64> = p
        .iter()
        .zip(a)
        .map(|(&x, &y)| {
            if x > 0.0 && ratio(x, y) == best {
                x
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = r.iter().sum();
    r.iter_mut().for_each(|x| *x /= total);
    r
}

/// The probability of accepting a draft of token `x` drawn from q under
/// target p: min(1, p(x) / q(x)).
pub(crate) fn accept_prob(p: &[f64], q: &[f64], x: usize) -> f64 {
    if q[x] > 0.0 {
        (p[x] / q[x]).min(1.0)
    } else {
        0.0
    }
}

/// Σ min(p, q): the acceptance of one speculative-sampling step.
pub(crate) fn overlap(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(a, b)| a.min(*b)).sum()
}

/// Point masses on drafts plus a weighted residual law, as one output law.
pub(crate) fn mix(points: &[(usize, f64)], rest_weight: f64, rest: &[f64]) -> OutputLaw {
    let mut dense: Vec<f64> = rest.iter().map(|r| rest_weight * r).collect();
    for &(y, w) in points {
        dense[y] += w;
    }
    dense
        .into_iter()
        .enumerate()
        .filter(|&(_, w)| w > 0.0)
        .collect()
}

/// A residual law, with its sampler.
pub(crate) struct Rest {
    pub(crate) law: Vec<f64>,
    pub(crate) sampler: CumulativeDistribution,
}

impl Rest {
    pub(crate) fn new(law: Vec<f64>) -> Self {
        Self {
            sampler: CumulativeDistribution::new(&law),
            law,
        }
    }
}

/// Checks that there are `n` drafts, each below the vocabulary size.
pub(crate) fn check_drafts(drafts: &[usize], n: usize, vocab: usize) -> Result<(), VerifyError> {
    if drafts.len() != n {
        return Err(VerifyError::DraftCount {
            expected: n,
            found: drafts.len(),
        });
    }
    match drafts.iter().find(|&&t| t >= vocab) {
        Some(&token) => Err(VerifyError::TokenOutOfRange {
            token,
            vocab_size: vocab,
        }),
        None => Ok(()),
    }
}

/// Draft `i`'s own law: q_i for independent drafts, q otherwise.
pub(crate) fn draft_law(drafts: &DraftScheme, i: usize) -> &[f64] {
    let all = drafts.drafts();
    all[i.min(all.len() - 1)].probs()
}

/// The law of the first draft: q (also for hub drafts), or q_1, or for
/// greedy, argmax and top drafts the most likely token with certainty
/// (greedy's q' when n = 1).
pub(crate) fn first_draft_law(drafts: &DraftScheme) -> Vec<f64> {
    let fixed_first = matches!(
        drafts.kind(),
        SchemeKind::Greedy | SchemeKind::Argmax | SchemeKind::Top
    );
    if !fixed_first {
        return draft_law(drafts, 0).to_vec();
    }
    match drafts.fixed_tokens().first() {
        Some(&top) => {
            let mut law = vec![0.0; drafts.vocab_size()];
            law[top] = 1.0;
            law
        }
        None => drafts.free_token_law(),
    }
}
