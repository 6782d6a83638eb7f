//! SpecTr's K-SEQ (`docs/DESIGN.md` §6).

use mdsd_core::{Problem, powi_count};

use crate::VerifierKind;
use crate::VerifyError;
use crate::laws::{Rest, check_drafts, residual};
use crate::sequential::Sequential;

/// SpecTr's K-SEQ for i.i.d. drafts: each draft is accepted with
/// probability min(1, p / (rho* q)), with rho* in [1, n] solving
/// 1 - (1 - β(rho))^n = rho β(rho), β(rho) = Σ min(q, p / rho); if none is,
/// the output is drawn from (p - rho* min(q, p / rho*))+.
pub struct KSeq {
    p: Vec<f64>,
    q: Vec<f64>,
    rho: f64,
    rest: Rest,
    n: usize,
}

impl KSeq {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let q = problem.drafts().drafts()[0].probs().to_vec();
        let n = problem.drafts().n();
        let rho = kseq_rho(&p, &q, n);
        // Mass handed out by accepting drafts, [1 - (1 - β)^n] / β · min(q, p/rho),
        // is at most p where f(rho) <= 0; the residual is what is left of p.
        let beta = kseq_beta(&p, &q, rho);
        let scale = if beta > 0.0 {
            (1.0 - powi_count(1.0 - beta, n)) / beta
        } else {
            0.0
        };
        let accepted: Vec<f64> = q
            .iter()
            .zip(&p)
            .map(|(qy, py)| scale * qy.min(py / rho))
            .collect();
        let rest = Rest::new(residual(&p, &accepted));
        Self { p, q, rho, rest, n }
    }

    /// rho*.
    pub fn rho(&self) -> f64 {
        self.rho
    }
}

/// β(rho) = Σ min(q, p / rho).
pub(crate) fn kseq_beta(p: &[f64], q: &[f64], rho: f64) -> f64 {
    p.iter().zip(q).map(|(py, qy)| qy.min(py / rho)).sum()
}

/// The root in [1, n] of f(rho) = 1 - (1 - β(rho))^n - rho β(rho), which
/// decreases in rho (β falls, rho β = Σ min(rho q, p) rises), with
/// f(1) >= 0 >= f(n): bisection to the last bit, returning the end with
/// f <= 0. K-SEQ is lossless for every such rho (the accepted mass stays
/// below p); rho* is the least of them.
pub(crate) fn kseq_rho(p: &[f64], q: &[f64], n: usize) -> f64 {
    let f = |rho: f64| {
        let beta = kseq_beta(p, q, rho);
        1.0 - powi_count(1.0 - beta, n) - rho * beta
    };
    let (mut lo, mut hi) = (1.0, n as f64);
    if f(lo) <= 0.0 {
        return lo;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if f(mid) > 0.0 { lo = mid } else { hi = mid }
    }
    hi
}

impl Sequential for KSeq {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        drafts
            .iter()
            .map(|&x| {
                if self.q[x] <= 0.0 {
                    return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
                }
                Ok((x, (self.p[x] / (self.rho * self.q[x])).min(1.0)))
            })
            .collect()
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

verifier_of_shape!(KSeq, VerifierKind::KSeq, sequential);
