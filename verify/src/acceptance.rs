//! Closed-form acceptances (`docs/DESIGN.md` §6 and `docs/TEST_VECTORS.md`):
//! what enumeration of the draft law gives, without enumerating.

use mdsd_core::{Problem, SchemeKind};

use crate::kseq::kseq_beta;
use crate::laws::{first_draft_law, overlap, residual};
use crate::{KSeq, SpecInfer, VerifierKind, VerifyError};

/// NSS acceptance, Σ_y p(y) P(y is a draft), where the inclusion
/// probability has a closed form: iid 1 - (1 - q)^n, independent
/// 1 - Π (1 - q_t), greedy 1 on the top tokens and q' elsewhere.
pub fn nss_acceptance(problem: &Problem) -> Result<f64, VerifyError> {
    crate::check_draft_count(problem)?;
    let inclusion = inclusion_probs(problem, 0)?;
    Ok(problem
        .target()
        .probs()
        .iter()
        .zip(&inclusion)
        .map(|(p, i)| p * i)
        .sum())
}

/// P(y is among drafts `from..n`) for every token, where it has a closed form.
fn inclusion_probs(problem: &Problem, from: usize) -> Result<Vec<f64>, VerifyError> {
    let drafts = problem.drafts();
    let v = drafts.vocab_size();
    let miss_all = |laws: &[&[f64]]| -> Vec<f64> {
        (0..v)
            .map(|y| 1.0 - laws.iter().map(|q| 1.0 - q[y]).product::<f64>())
            .collect()
    };
    match drafts.kind() {
        SchemeKind::Iid => Ok(miss_all(&vec![
            drafts.drafts()[0].probs();
            drafts.n() - from
        ])),
        SchemeKind::Independent => Ok(miss_all(
            &drafts.drafts()[from..]
                .iter()
                .map(|q| q.probs())
                .collect::<Vec<_>>(),
        )),
        // The hub's second draft depends on the first: no product form.
        SchemeKind::Hub if from > 0 => Err(VerifyError::Unsupported {
            verifier: "closed-form acceptance",
            scheme: SchemeKind::Hub,
            supported: "iid, independent, greedy".into(),
        }),
        // Every hub draft set is the hub plus one token drawn from q'.
        SchemeKind::Greedy | SchemeKind::Hub => {
            // Drafts 0..n-1 are the top tokens; the drawn one is draft n - 1.
            let mut inclusion = if drafts.n() > from {
                drafts.free_token_law()
            } else {
                vec![0.0; v]
            };
            for &t in drafts.fixed_tokens().iter().skip(from) {
                inclusion[t] = 1.0;
            }
            Ok(inclusion)
        }
        // Every draft is fixed: drafts `from..n` are included surely.
        SchemeKind::Argmax | SchemeKind::Top => {
            let mut inclusion = vec![0.0; v];
            for &t in drafts.fixed_tokens().iter().skip(from) {
                inclusion[t] = 1.0;
            }
            Ok(inclusion)
        }
        // Inclusion probabilities without replacement have no closed form.
        SchemeKind::WithoutReplacement => Err(VerifyError::Unsupported {
            verifier: "closed-form acceptance",
            scheme: SchemeKind::WithoutReplacement,
            supported: "iid, independent, greedy".into(),
        }),
    }
}

/// Naive (first-draft) acceptance: β = Σ min(p, q1) from accepting x1, plus
/// a residual draw that lands on one of the other drafts, which are
/// independent of x1 (iid, independent) or fixed (greedy).
pub fn naive_acceptance(problem: &Problem) -> Result<f64, VerifyError> {
    crate::check_draft_count(problem)?;
    let p = problem.target().probs();
    let first = first_draft_law(problem.drafts());
    let beta = overlap(p, &first);
    let others = inclusion_probs(problem, 1)?;
    let rest = residual(p, &first);
    Ok(beta + (1.0 - beta) * rest.iter().zip(&others).map(|(r, i)| r * i).sum::<f64>())
}

/// SpecInfer acceptance, 1 - Π (1 - β_i) with β_i = Σ min(p_i, q_i): a
/// residual draw never lands on a rejected draft (it only has mass where
/// p_i > q_i, where drafts are always accepted).
pub fn specinfer_acceptance(problem: &Problem) -> Result<f64, VerifyError> {
    crate::check_draft_count(problem)?;
    VerifierKind::SpecInfer.check_scheme(problem.drafts().kind())?;
    Ok(1.0
        - SpecInfer::new(problem)
            .step_overlaps()
            .map(|b| 1.0 - b)
            .product::<f64>())
}

/// K-SEQ acceptance rho* β(rho*) = 1 - (1 - β(rho*))^n, and rho*.
pub fn kseq_acceptance(problem: &Problem) -> Result<(f64, f64), VerifyError> {
    crate::check_draft_count(problem)?;
    VerifierKind::KSeq.check_scheme(problem.drafts().kind())?;
    let kseq = KSeq::new(problem);
    let p = problem.target().probs();
    let q = problem.drafts().drafts()[0].probs();
    let rho = kseq.rho();
    Ok((rho * kseq_beta(p, q, rho), rho))
}
