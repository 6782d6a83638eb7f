//! The shape of verifiers that try the drafts in order, accepting each
//! with some probability, and otherwise draw from a residual law fixed in
//! advance: naive, SpecInfer, K-SEQ, greedy, SpecHub. Both the exact law
//! and the O(n log V) sampler come from [`Sequential::steps`].

use rand::{Rng, RngCore};

use crate::laws::{Rest, mix};
use crate::{OutputLaw, VerifyError};

/// A verifier that tries the drafts in order against a fixed residual.
pub(crate) trait Sequential {
    /// Each draft in the order tried, with its acceptance probability given
    /// that the ones before it were rejected.
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError>;
    fn rest(&self) -> &Rest;
}

pub(crate) fn law(verifier: &impl Sequential, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
    let mut points = Vec::with_capacity(drafts.len());
    let mut remaining = 1.0;
    for (x, a) in verifier.steps(drafts)? {
        points.push((x, remaining * a));
        remaining *= 1.0 - a;
    }
    Ok(mix(&points, remaining, &verifier.rest().law))
}

pub(crate) fn sample(
    verifier: &impl Sequential,
    drafts: &[usize],
    rng: &mut dyn RngCore,
) -> Result<usize, VerifyError> {
    for (x, a) in verifier.steps(drafts)? {
        if rng.random::<f64>() < a {
            return Ok(x);
        }
    }
    Ok(verifier.rest().sampler.sample(rng))
}
