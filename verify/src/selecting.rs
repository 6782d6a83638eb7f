//! The shape of verifiers in the two steps of Khisti et al.'s canonical
//! decomposition (their Theorem 1): select one of the drafts, then
//! single-draft speculative sampling of the selected token against p. If
//! the selected token has law r, the second step accepts it with
//! probability min(1, p / r) and otherwise draws from (p - r)+, so the
//! output is p for *any* selection rule. Khisti's pair-weight tournament
//! and the optimal convex rule have this shape.

use std::sync::OnceLock;

use mdsd_core::sample_index;
use rand::{Rng, RngCore};

use crate::laws::{Rest, accept_prob, mix, residual};
use crate::{OutputLaw, VerifyError};

/// A verifier that selects a draft, then verifies it alone.
pub(crate) trait Selecting {
    /// The law of the selected token given the drafts (checked): (token,
    /// probability).
    fn selection(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError>;

    /// Draws the selected token, `None` where the selection is empty; the
    /// default draws from [`Selecting::selection`].
    fn select(
        &self,
        drafts: &[usize],
        rng: &mut dyn RngCore,
    ) -> Result<Option<usize>, VerifyError> {
        let law = self.selection(drafts)?;
        let weights: Vec<f64> = law.iter().map(|l| l.1).collect();
        Ok((!law.is_empty()).then(|| law[sample_index(&weights, rng)].0))
    }

    /// r, the selected token's law on the vocabulary: the verifier's
    /// own, always the same (the optimal rule's r is the solution's, not
    /// a copy of it).
    fn selected_law(&self) -> &[f64];

    /// p and the residual the second step verifies against.
    fn verification(&self) -> &Verification;
}

/// What the second step needs besides r: the target p, and (p - r)+
/// renormalised with its sampler, made on first use: a verifier prepared
/// for one step of a decoding loop draws from the residual only when it
/// rejects, and the law and its sampler are two passes and three vectors
/// of the vocabulary's size.
pub(crate) struct Verification {
    pub(crate) p: Vec<f64>,
    rest: OnceLock<Rest>,
}

impl Verification {
    pub(crate) fn new(p: Vec<f64>) -> Self {
        Self {
            p,
            rest: OnceLock::new(),
        }
    }

    /// (p - r)+ renormalised, with its sampler, made from the first `r`
    /// asked with: a verifier asks with its one r
    /// ([`Selecting::selected_law`]).
    fn rest(&self, r: &[f64]) -> &Rest {
        self.rest.get_or_init(|| Rest::new(residual(&self.p, r)))
    }
}

pub(crate) fn law(verifier: &impl Selecting, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
    let verification = verifier.verification();
    let (p, r) = (&verification.p, verifier.selected_law());
    let mut points = Vec::with_capacity(drafts.len());
    let selection = verifier.selection(drafts)?;
    // An empty selection (drafts a rule holds no weight for: a draft whose
    // probability is below the smallest normal float) selects nothing, and
    // the residual answers.
    let mut rejected = if selection.is_empty() { 1.0 } else { 0.0 };
    for (x, prob) in selection {
        let a = accept_prob(p, r, x);
        points.push((x, prob * a));
        rejected += prob * (1.0 - a);
    }
    Ok(mix(&points, rejected, &verification.rest(r).law))
}

/// O(n + log V) per draw when `select` is O(n): one selection, one
/// acceptance test, and a residual draw by binary search.
pub(crate) fn sample(
    verifier: &impl Selecting,
    drafts: &[usize],
    rng: &mut dyn RngCore,
) -> Result<usize, VerifyError> {
    let selected = verifier.select(drafts, rng)?;
    let (verification, r) = (verifier.verification(), verifier.selected_law());
    if let Some(selected) = selected
        && rng.random::<f64>() < accept_prob(&verification.p, r, selected)
    {
        return Ok(selected);
    }
    Ok(verification.rest(r).sampler.sample(rng))
}
