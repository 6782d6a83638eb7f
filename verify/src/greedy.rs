//! Verifiers of drafts with fixed tokens: Hu et al.'s greedy drafts and
//! SpecHub's hub drafts, whose sets have the same shape
//! (`docs/DESIGN.md` §6).

use mdsd_core::Problem;

use crate::laws::{Rest, accept_prob, check_drafts, residual};
use crate::sequential::Sequential;
use crate::{VerifierKind, VerifyError};

/// Hu et al.'s verifier for their greedy drafts (the n-1 most likely tokens
/// plus one drawn from q' outside them): accept the drawn token with
/// probability min(1, p / q'), else draw from p on the top tokens plus
/// (p - q')+ outside them. It reaches alpha* for greedy drafts (and for hub
/// drafts, whose sets have the same shape: see [`SpecHub`]).
pub struct Greedy {
    p: Vec<f64>,
    rest_law: Vec<f64>,
    top: Vec<usize>,
    rest: Rest,
}

impl Greedy {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let drafts = problem.drafts();
        let top = drafts.fixed_tokens().to_vec();
        let rest_law = drafts.free_token_law();
        // (p - q')+ is p itself on the top tokens, where q' is zero.
        let rest = Rest::new(residual(&p, &rest_law));
        Self {
            p,
            rest_law,
            top,
            rest,
        }
    }
}

impl Sequential for Greedy {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.top.len() + 1, self.p.len())?;
        let mut outside = drafts.iter().filter(|t| !self.top.contains(t));
        let (Some(&x), None) = (outside.next(), outside.next()) else {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        };
        if self.rest_law[x] <= 0.0 || !self.top.iter().all(|t| drafts.contains(t)) {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(vec![(x, accept_prob(&self.p, &self.rest_law, x))])
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

verifier_of_shape!(Greedy, VerifierKind::Greedy, sequential);

/// SpecHub (Sun et al. 2024) for its own hub drafts (`SchemeKind::Hub`):
/// every draft set is {a, x}, a = argmax q the hub and x ~ q' = q without a,
/// renormalised. The non-hub draft x is accepted with probability
/// min(1, p(x) / q'(x)); otherwise the output is drawn from p on the hub
/// plus (p - q')+ elsewhere. That is the optimal transport plan of the
/// sparse hub draft law (the "compact LP" of the paper solved in closed
/// form), and it is Hu et al.'s greedy verifier for n = 2 applied to the
/// hub's sets: one piece of code serves both.
pub struct SpecHub(Greedy);

impl SpecHub {
    pub fn new(problem: &Problem) -> Self {
        Self(Greedy::new(problem))
    }
}

impl Sequential for SpecHub {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        self.0.steps(drafts)
    }

    fn rest(&self) -> &Rest {
        self.0.rest()
    }
}

verifier_of_shape!(SpecHub, VerifierKind::SpecHub, sequential);

/// The verifier of deterministic drafts (argmax, top: the n most likely
/// draft tokens, as vLLM's, TensorRT-LLM's and EAGLE's trees propose them):
/// try each draft x_i in order and accept it with probability p(x_i) / (1 -
/// p(x_1) - ... - p(x_{i-1})), else draw from p outside the drafts. The
/// output law is p, and a draft is accepted with probability p(S), which is
/// alpha* for a deterministic set S (`docs/DESIGN.md` §3).
pub struct Deterministic {
    drafts: Vec<usize>,
    /// Each draft with its acceptance probability given the ones before it
    /// were rejected.
    steps: Vec<(usize, f64)>,
    vocab_size: usize,
    rest: Rest,
}

impl Deterministic {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs();
        let drafts = problem.drafts().fixed_tokens().to_vec();
        let mut untried = p.to_vec();
        let mut given = vec![0.0; p.len()];
        let mut steps = Vec::with_capacity(drafts.len());
        for &x in &drafts {
            // The mass not tried yet, summed directly rather than as 1 minus
            // the mass tried: no cancellation when the drafts hold most of p.
            let remaining: f64 = untried.iter().sum();
            let accept = if remaining > 0.0 {
                p[x] / remaining
            } else {
                1.0
            };
            steps.push((x, accept.min(1.0)));
            untried[x] = 0.0;
            given[x] = 1.0;
        }
        Self {
            drafts,
            steps,
            vocab_size: p.len(),
            // p outside the drafts: (p - 1)+ on them.
            rest: Rest::new(residual(p, &given)),
        }
    }
}

impl Sequential for Deterministic {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.drafts.len(), self.vocab_size)?;
        if drafts != self.drafts {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(self.steps.clone())
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

verifier_of_shape!(Deterministic, VerifierKind::Deterministic, sequential);
