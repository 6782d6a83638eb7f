//! # mdsd-verify
//!
//! Token-level verifiers for multi-draft speculative sampling behind one
//! trait, [`Verifier`], and the harness that tells, exactly, whether a
//! verifier is lossless and how far it is from optimal (DESIGN §6). Every
//! verifier gives the exact law of its output for given drafts; the
//! [`exact`] harness enumerates the draft law, mixes those laws, and reports
//! the acceptance, the largest deviation of the output law from p, and
//! alpha*; the [`sampled`] harness draws instead, at any vocabulary size,
//! and tests the output against p by chi-square.
//!
//! Verifiers by name ([`prepare`]): `nss`, `naive`, `specinfer`, `rrs-wor`,
//! `kseq`, `spechub` (on its own hub drafts, [`SchemeKind::Hub`]), `khisti`,
//! `greedy`, `optimal-flow`, `optimal-convex` (mdsd-convex, iid drafts). Closed-form acceptances:
//! [`nss_acceptance`], [`naive_acceptance`], [`specinfer_acceptance`],
//! [`kseq_acceptance`].
//!
//! Your own verifier: implement [`Verifier::conditional`] and run the harness.
//!
//! Blocks of L draft tokens from K paths ([`block`]): token by token, block
//! verification, GBV and any verifier above composed over the draft tree,
//! with their own exact and sampled harnesses.
//!
//! ```
//! use mdsd_core::{Distribution, DraftScheme, Problem};
//! use mdsd_verify::{OutputLaw, Verifier, VerifyError, exact};
//!
//! /// Accepts the first draft whenever p > q there, else draws from p: lossy.
//! struct Eager { p: Vec<f64>, q: Vec<f64> }
//!
//! impl Verifier for Eager {
//!     fn name(&self) -> &str { "eager" }
//!     fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
//!         let x = drafts[0];
//!         if self.p[x] > self.q[x] {
//!             Ok(vec![(x, 1.0)])
//!         } else {
//!             Ok(self.p.iter().copied().enumerate().filter(|&(_, w)| w > 0.0).collect())
//!         }
//!     }
//! }
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p.clone(), DraftScheme::iid(q.clone(), 2)?)?;
//! let eager = Eager { p: p.probs().to_vec(), q: q.probs().to_vec() };
//! let report = exact(&problem, &eager, 1_000_000)?;
//! assert!(report.max_marginal_error > 0.1, "the harness finds it lossy");
//!
//! let specinfer = mdsd_verify::prepare("specinfer", &problem)?;
//! let report = exact(&problem, specinfer.as_ref(), 1_000_000)?;
//! assert!(report.max_marginal_error < 1e-12 && (report.acceptance - 0.76).abs() < 1e-12);
//! assert!((report.alpha_star - 0.86).abs() < 1e-12);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod block;
mod khisti;
mod methods;
mod residual;
mod sampling;

use mdsd_bounds::{BoundError, optimal_acceptance};
use mdsd_convex::{ConvexError, ConvexSolver};
use mdsd_core::{CoreError, Problem, SchemeKind, sample_index};
use mdsd_flow::{FlowError, FlowSolver};
use mdsd_lp::LpError;
use rand::RngCore;
use thiserror::Error;

pub use khisti::{KHISTI_MAX_TRUNCATION, KHISTI_TRUNCATION, Khisti};
pub use methods::{
    Greedy, KSeq, Naive, Nss, OptimalConvex, OptimalFlow, RrsWithoutReplacement, SpecHub, SpecInfer,
};
pub use sampling::{SampledReport, sampled};

/// A law over output tokens: `(token, probability)` pairs, tokens distinct,
/// probabilities positive and summing to 1.
pub type OutputLaw = Vec<(usize, f64)>;

/// Why a verifier could not be prepared or evaluated.
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error(transparent)]
    Flow(#[from] FlowError),
    #[error(transparent)]
    Lp(#[from] LpError),
    #[error(transparent)]
    Convex(#[from] ConvexError),
    #[error("khisti truncation s = {truncation} is out of range: it must be in 1..={max}")]
    Truncation { truncation: usize, max: usize },
    #[error("unknown verifier {name:?}: expected one of {}", VERIFIERS.map(|v| v.0).join(", "))]
    UnknownVerifier { name: String },
    #[error("verifier {verifier} does not support {scheme} drafts (it supports: {supported})")]
    Unsupported {
        verifier: &'static str,
        scheme: SchemeKind,
        supported: String,
    },
    #[error("expected {expected} drafts, got {found}")]
    DraftCount { expected: usize, found: usize },
    #[error("a draft path has {found} tokens; the block depth is {expected}")]
    PathLength { expected: usize, found: usize },
    #[error("draft token {token} is out of range for a vocabulary of {vocab_size}")]
    TokenOutOfRange { token: usize, vocab_size: usize },
    #[error("drafts {0:?} have probability 0 under this draft scheme")]
    ImpossibleDrafts(Vec<usize>),
}

/// A verifier prepared for one target p and draft scheme. `Send + Sync`, so
/// that the sampling harness can draw in parallel and prepared verifiers
/// can be cached across threads (block composition).
pub trait Verifier: Send + Sync {
    /// The name used in reports.
    fn name(&self) -> &str;

    /// The exact law of the output token given the drafts, in the order
    /// they were drawn.
    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError>;

    /// Draws the output token for the drafts with the caller's RNG. The
    /// default draws from [`Verifier::conditional`], O(V); verifiers meant for
    /// sampling at large V override it.
    fn sample(&self, drafts: &[usize], rng: &mut dyn RngCore) -> Result<usize, VerifyError> {
        let law = self.conditional(drafts)?;
        let weights: Vec<f64> = law.iter().map(|l| l.1).collect();
        Ok(law[sample_index(&weights, rng)].0)
    }
}

/// Every verifier by name, with the schemes it supports.
const VERIFIERS: [(&str, &[SchemeKind]); 10] = [
    ("nss", &SchemeKind::ALL),
    ("naive", &SchemeKind::ALL),
    ("specinfer", &[SchemeKind::Iid, SchemeKind::Independent]),
    ("rrs-wor", &[SchemeKind::WithoutReplacement]),
    ("kseq", &[SchemeKind::Iid]),
    ("spechub", &[SchemeKind::Hub]),
    ("khisti", &[SchemeKind::Iid, SchemeKind::Independent]),
    ("greedy", &[SchemeKind::Greedy]),
    ("optimal-flow", &SchemeKind::ALL),
    ("optimal-convex", &[SchemeKind::Iid]),
];

/// The names of all verifiers, in report order.
pub fn verifier_names() -> impl Iterator<Item = &'static str> {
    VERIFIERS.iter().map(|v| v.0)
}

/// Whether the named verifier supports a scheme.
pub fn supports(name: &str, scheme: SchemeKind) -> Result<bool, VerifyError> {
    VERIFIERS
        .iter()
        .find(|v| v.0 == name)
        .map(|v| v.1.contains(&scheme))
        .ok_or_else(|| VerifyError::UnknownVerifier { name: name.into() })
}

/// The registered name, if the named verifier supports the scheme.
fn require(name: &str, scheme: SchemeKind) -> Result<&'static str, VerifyError> {
    let &(name, schemes) = VERIFIERS
        .iter()
        .find(|v| v.0 == name)
        .ok_or_else(|| VerifyError::UnknownVerifier { name: name.into() })?;
    if schemes.contains(&scheme) {
        Ok(name)
    } else {
        Err(VerifyError::Unsupported {
            verifier: name,
            scheme,
            supported: schemes
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Prepares the named verifier for a problem.
pub fn prepare(name: &str, problem: &Problem) -> Result<Box<dyn Verifier>, VerifyError> {
    Ok(match require(name, problem.drafts().kind())? {
        "nss" => Box::new(Nss::new(problem)),
        "naive" => Box::new(Naive::new(problem)),
        "specinfer" => Box::new(SpecInfer::new(problem)),
        "rrs-wor" => Box::new(RrsWithoutReplacement::new(problem)),
        "kseq" => Box::new(KSeq::new(problem)),
        "spechub" => Box::new(SpecHub::new(problem)),
        "khisti" => Box::new(Khisti::new(problem, KHISTI_TRUNCATION)?),
        "greedy" => Box::new(Greedy::new(problem)),
        "optimal-convex" => Box::new(OptimalConvex::new(problem, ConvexSolver::default())?),
        _ => Box::new(OptimalFlow::new(problem)?),
    })
}

/// alpha*: the closed form where one exists, max flow otherwise.
pub fn alpha_star(problem: &Problem) -> Result<f64, VerifyError> {
    match optimal_acceptance(problem) {
        Ok(bound) => Ok(bound.alpha),
        Err(BoundError::TooManyTokens { .. }) => Ok(FlowSolver::default().solve(problem)?.alpha),
        Err(e) => Err(e.into()),
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

/// NSS acceptance, Σ_y p(y) P(y is a draft), where the inclusion
/// probability has a closed form: iid 1 - (1 - q)^n, independent
/// 1 - Π (1 - q_t), greedy 1 on the top tokens and q' elsewhere.
pub fn nss_acceptance(problem: &Problem) -> Result<f64, VerifyError> {
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
    let p = problem.target().probs();
    let first = methods::first_draft_law(problem.drafts());
    let beta = residual::overlap(p, &first);
    let others = inclusion_probs(problem, 1)?;
    let rest = residual::residual(p, &first);
    Ok(beta + (1.0 - beta) * rest.iter().zip(&others).map(|(r, i)| r * i).sum::<f64>())
}

/// SpecInfer acceptance, 1 - Π (1 - β_i) with β_i = Σ min(p_i, q_i): a
/// residual draw never lands on a rejected draft (it only has mass where
/// p_i > q_i, where drafts are always accepted).
pub fn specinfer_acceptance(problem: &Problem) -> Result<f64, VerifyError> {
    require("specinfer", problem.drafts().kind())?;
    Ok(1.0
        - SpecInfer::new(problem)
            .step_overlaps()
            .map(|b| 1.0 - b)
            .product::<f64>())
}

/// K-SEQ acceptance rho* β(rho*) = 1 - (1 - β(rho*))^n, and rho*.
pub fn kseq_acceptance(problem: &Problem) -> Result<(f64, f64), VerifyError> {
    require("kseq", problem.drafts().kind())?;
    let kseq = KSeq::new(problem);
    let p = problem.target().probs();
    let q = problem.drafts().drafts()[0].probs();
    let rho = kseq.rho();
    Ok((rho * methods::kseq_beta(p, q, rho), rho))
}
