//! The two baselines: NSS ignores the drafts, naive verifies the first
//! draft alone (`docs/DESIGN.md` §6).

use mdsd_core::{CumulativeDistribution, Problem};
use rand::RngCore;

use crate::laws::{Rest, accept_prob, check_drafts, first_draft_law, mix, residual};
use crate::sequential::Sequential;
use crate::{OutputLaw, Verifier, VerifierKind, VerifyError};

/// Ignores the drafts: the output is drawn from p.
pub struct Nss {
    p: Vec<f64>,
    p_sampler: CumulativeDistribution,
    n: usize,
}

impl Nss {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        Self {
            p_sampler: CumulativeDistribution::new(&p),
            p,
            n: problem.drafts().n(),
        }
    }
}

impl Verifier for Nss {
    fn name(&self) -> &str {
        VerifierKind::Nss.name()
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        Ok(mix(&[], 1.0, &self.p))
    }

    fn sample(&self, drafts: &[usize], rng: &mut dyn RngCore) -> Result<usize, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        Ok(self.p_sampler.sample(rng))
    }
}

/// Single-draft speculative sampling on the first draft: accept x1 with
/// probability min(1, p/q1), else draw from (p - q1)+, q1 the first draft's
/// own law.
pub struct Naive {
    p: Vec<f64>,
    first: Vec<f64>,
    rest: Rest,
    n: usize,
}

impl Naive {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let first = first_draft_law(problem.drafts());
        let rest = Rest::new(residual(&p, &first));
        Self {
            p,
            first,
            rest,
            n: problem.drafts().n(),
        }
    }
}

impl Sequential for Naive {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        let x = drafts[0];
        if self.first[x] <= 0.0 {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(vec![(x, accept_prob(&self.p, &self.first, x))])
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

verifier_of_shape!(Naive, VerifierKind::Naive, sequential);
