//! Exact mode: the verifier's output law and acceptance by enumerating the
//! draft law (small vocabularies), against alpha*.

use mdsd_convex::ConvexSolver;
use mdsd_core::{Method, Problem, SchemeKind, Solve};
use mdsd_flow::FlowSolver;

use crate::{Verifier, VerifyError};

/// alpha*: the closed form where one exists, max flow otherwise
/// ([`FlowSolver::optimum`]).
pub fn alpha_star(problem: &Problem) -> Result<f64, VerifyError> {
    Ok(FlowSolver::default().optimum(problem)?.alpha_star)
}

/// alpha* as the reports give it: exact ([`alpha_star`]), or for
/// independent drafts past the closed form and max flow's budget the
/// convex solver's certified interval (`docs/DESIGN.md` §6b).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CertifiedAlpha {
    /// alpha*, or the interval's upper end: p(H) + 1 - q_1(H)...q_n(H)
    /// for the certificate H.
    pub alpha_star: f64,
    /// The interval's lower end, the acceptance `optimal-convex` reaches;
    /// `None` when `alpha_star` is exact.
    pub lower: Option<f64>,
}

/// [`CertifiedAlpha`] of a problem, `convex` solving where nothing exact
/// scales.
pub fn certified_alpha_star(
    problem: &Problem,
    convex: &ConvexSolver,
) -> Result<CertifiedAlpha, VerifyError> {
    match alpha_star(problem) {
        Ok(alpha_star) => Ok(CertifiedAlpha {
            alpha_star,
            lower: None,
        }),
        Err(e)
            if problem.drafts().kind() == SchemeKind::Independent
                && e.instead().contains(&Method::Convex) =>
        {
            let summary = convex.solve(problem)?.summary;
            Ok(CertifiedAlpha {
                alpha_star: summary.alpha_star,
                lower: Some(summary.acceptance),
            })
        }
        Err(e) => Err(e),
    }
}

/// What exact enumeration says about a verifier.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactReport {
    pub name: String,
    /// P(output is one of the drafts).
    pub acceptance: f64,
    /// max_y |P(output = y) - p(y)|: 0 for a lossless verifier.
    pub max_marginal_error: f64,
    /// max over drafts of |Σ conditional - 1|, and of any negative mass.
    pub max_law_error: f64,
    pub alpha_star: f64,
}

impl ExactReport {
    /// alpha* minus the acceptance.
    pub fn gap(&self) -> f64 {
        self.alpha_star - self.acceptance
    }
}

/// Exact mode: enumerates every draft tuple (at most `limit`), combines its
/// probability with the verifier's conditional law, and reports.
pub fn exact(
    problem: &Problem,
    verifier: &dyn Verifier,
    limit: usize,
) -> Result<ExactReport, VerifyError> {
    let law = problem.drafts().tuple_law(limit)?;
    let p = problem.target().probs();
    let mut marginal = vec![0.0; p.len()];
    let (mut acceptance, mut max_law_error) = (0.0, 0.0f64);
    for (tuple, prob) in law.iter() {
        let output = verifier.conditional(tuple)?;
        let mut total = 0.0;
        for &(y, w) in &output {
            if y >= p.len() {
                return Err(VerifyError::TokenOutOfRange {
                    token: y,
                    vocab_size: p.len(),
                });
            }
            max_law_error = max_law_error.max(-w);
            total += w;
            marginal[y] += prob * w;
            if tuple.contains(&y) {
                acceptance += prob * w;
            }
        }
        max_law_error = max_law_error.max((total - 1.0).abs());
    }
    let max_marginal_error = marginal
        .iter()
        .zip(p)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    Ok(ExactReport {
        name: verifier.name().to_string(),
        acceptance,
        max_marginal_error,
        max_law_error,
        alpha_star: alpha_star(problem)?,
    })
}
