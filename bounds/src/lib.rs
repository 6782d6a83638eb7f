//! # mdsd-bounds
//!
//! The optimal acceptance alpha* of multi-draft speculative sampling in closed
//! form, with its certificate: by linear-programming duality (the network is
//! totally unimodular),
//!
//! ```text
//! alpha* = 1 + min over H ⊆ [V] of ( p(H) - Q(all drafts in H) )
//! ```
//!
//! and the minimising set H* is the certificate (`docs/DESIGN.md` §3). The
//! entry point is [`optimal_acceptance`] on a [`Problem`], or [`ClosedForm`]
//! through the solver contract ([`Solve`]); per scheme:
//! [`optimal_acceptance_iid`] (sort or expected-O(V) selection),
//! [`optimal_acceptance_wor`] (exact or exponential-clock quadrature),
//! [`optimal_acceptance_greedy`] (greedy and hub drafts),
//! [`optimal_acceptance_independent`] (exact
//! by subsets). [`acceptance_upper_bound`] bounds any verifier by any H, and
//! [`optimal_acceptance_batch`] runs many rows in parallel;
//! [`optimal_acceptance_iid_interval`] bounds alpha* where only each side's
//! top k entries are known; [`block_upper_bound`] bounds blocks of K
//! i.i.d. draft paths past the block LP's reach. For many n at
//! once without certificates: [`optimal_acceptance_iid_many`], and
//! [`optimal_acceptance_iid_rows`] for rows in a caller's buffer, checked
//! in the same read of memory that buckets them.
//!
//! ```
//! use mdsd_bounds::{optimal_acceptance_iid, IidAlgorithm};
//! use mdsd_core::Distribution;
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let bound = optimal_acceptance_iid(&p, &q, 2, IidAlgorithm::Selection)?;
//! assert!((bound.alpha_star - 0.86).abs() < 1e-12);
//! assert_eq!(bound.certificate, vec![1, 2]);
//! # Ok::<(), mdsd_bounds::BoundError>(())
//! ```

mod block;
mod iid;
mod independent;
mod order;
mod top_k;
mod wor;

use order::split_mass;

use std::time::Instant;

use mdsd_core::{
    CoreError, Distribution, DraftScheme, Instead, Method, ProbabilityRow, Problem, SchemeKind,
    Solve, Summary,
};
use rayon::prelude::*;
use thiserror::Error;

pub use block::{BlockBound, block_upper_bound};
pub use iid::{
    IidAlgorithm, RATIO_BUCKETS, RatioBucketMasses, SELECTION_MIN_VOCAB,
    optimal_acceptance_iid_from_buckets, ratio_bucket, ratio_key_bucket, tokens_in_buckets,
};
pub use independent::INDEPENDENT_SUBSET_LIMIT;
pub use order::{ascending_ratio_order, ratio_prefix_end};
pub use top_k::{
    AlphaInterval, KnownEntries, PARTIAL_SUM_TOLERANCE, optimal_acceptance_iid_interval,
};
pub use wor::WOR_EXACT_TUPLE_LIMIT;

/// The optimal acceptance and the set H* that certifies it:
/// `alpha_star = p(H*) + 1 - Q(all drafts in H*)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub alpha_star: f64,
    /// H*, ascending token ids.
    pub certificate: Vec<usize>,
}

/// The closed forms as a solver of the one contract ([`Solve`]): its
/// solution is the [`Summary`] of [`optimal_acceptance`].
///
/// ```
/// use mdsd_bounds::ClosedForm;
/// use mdsd_core::{Distribution, DraftScheme, Problem, Solve, Status};
///
/// let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
/// let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
/// let problem = Problem::new(p, DraftScheme::iid(q, 2)?)?;
/// let summary = ClosedForm.solve(&problem)?;
/// assert!((summary.alpha_star - 0.86).abs() < 1e-12);
/// assert_eq!((summary.certificate.as_slice(), summary.status), (&[1, 2][..], Status::Optimal));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClosedForm;

impl Solve for ClosedForm {
    type Solution = Summary;
    type Error = BoundError;

    fn name(&self) -> &'static str {
        "bound"
    }

    fn solve(&self, problem: &Problem) -> Result<Summary, BoundError> {
        let start = Instant::now();
        let bound = optimal_acceptance(problem)?;
        Ok(Summary::exact(
            bound.alpha_star,
            Some(bound.certificate),
            start.elapsed(),
        ))
    }
}

/// Why a bound could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BoundError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(
        "exact subset search for independent drafts handles at most {limit} undecided tokens, \
         this instance has {size}{}",
        Instead(INDEPENDENT_INSTEAD)
    )]
    TooManyTokens { size: usize, limit: usize },
    #[error("ratio-bucket {what}: {detail}")]
    BucketMasses { what: &'static str, detail: String },
    /// A side's known entries of a partial (top-k) row are not a part of
    /// a distribution.
    #[error("the {side}'s known entries: {detail}")]
    PartialRow { side: &'static str, detail: String },
    /// A row given to [`optimal_acceptance_iid_rows`] failed its check.
    #[error("the {what} row: {source}")]
    InvalidRow {
        /// "target" or "draft".
        what: &'static str,
        source: CoreError,
    },
}

/// What scales where the subset search for independent drafts refuses.
const INDEPENDENT_INSTEAD: &[Method] = &[Method::Convex, Method::MaxFlow];

impl BoundError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            BoundError::Invalid(e) | BoundError::InvalidRow { source: e, .. } => e.instead(),
            BoundError::TooManyTokens { .. } => INDEPENDENT_INSTEAD,
            BoundError::BucketMasses { .. } | BoundError::PartialRow { .. } => &[],
        }
    }
}

/// `alpha - 1 = p(H) - Q(all in H)` from the masses inside and outside H,
/// each summed directly. When most of Q is inside H the complement form
/// `(1 - Q) - p(outside)` avoids cancelling two numbers near 1.
pub(crate) fn objective(p_in: f64, p_out: f64, all_in: f64, not_all_in: f64) -> f64 {
    if all_in <= 0.5 {
        p_in - all_in
    } else {
        not_all_in - p_out
    }
}

fn bound_from((value, certificate): (f64, Vec<usize>)) -> Bound {
    Bound {
        alpha_star: 1.0 + value,
        certificate,
    }
}

/// An i.i.d. instance needs at least one draft and equal vocabularies.
fn check_iid(p: &Distribution, q: &Distribution, ns: &[usize]) -> Result<(), BoundError> {
    check_iid_lengths(p.len(), q.len(), ns)
}

fn check_iid_lengths(p: usize, q: usize, ns: &[usize]) -> Result<(), BoundError> {
    if ns.contains(&0) {
        return Err(CoreError::NoDrafts.into());
    }
    if p != q {
        return Err(CoreError::LengthMismatch {
            what: "the draft distribution".into(),
            expected: p,
            found: q,
        }
        .into());
    }
    Ok(())
}

fn check_target(p: &Distribution, drafts: &DraftScheme) -> Result<(), BoundError> {
    Problem::check(p, drafts).map_err(Into::into)
}

/// The optimal acceptance of a problem, by the method of its scheme.
pub fn optimal_acceptance(problem: &Problem) -> Result<Bound, BoundError> {
    let p = problem.target();
    let drafts = problem.drafts();
    let q = &drafts.drafts()[0];
    match drafts.kind() {
        SchemeKind::Iid => optimal_acceptance_iid(p, q, drafts.n(), IidAlgorithm::default()),
        SchemeKind::WithoutReplacement => optimal_acceptance_wor(p, drafts),
        SchemeKind::Greedy | SchemeKind::Hub => optimal_acceptance_greedy(p, drafts),
        SchemeKind::Independent => optimal_acceptance_independent(p, drafts.drafts()),
        SchemeKind::Argmax | SchemeKind::Top => optimal_acceptance_deterministic(p, drafts),
    }
}

/// alpha* for a deterministic draft set S (argmax, top): p(S), certified
/// by H* = S. No lossless verifier accepts more, since it outputs a draft
/// only as a token of S, which it outputs with probability p(S) in all;
/// accepting x in S with probability p(x) reaches it (`docs/DESIGN.md` §3).
pub fn optimal_acceptance_deterministic(
    p: &Distribution,
    drafts: &DraftScheme,
) -> Result<Bound, BoundError> {
    check_target(p, drafts)?;
    let mut certificate = drafts.fixed_tokens().to_vec();
    certificate.sort_unstable();
    Ok(Bound {
        alpha_star: certificate.iter().map(|&t| p.prob(t)).sum(),
        certificate,
    })
}

/// alpha* for n i.i.d. drafts: `1 + min_k (P_k - S_k^n)` over prefixes of the
/// ascending-p/q order.
pub fn optimal_acceptance_iid(
    p: &Distribution,
    q: &Distribution,
    n: usize,
    algorithm: IidAlgorithm,
) -> Result<Bound, BoundError> {
    check_iid(p, q, &[n])?;
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    Ok(bound_from(match algorithm {
        IidAlgorithm::Sort => iid::iid_by_sort(p.probs(), q.probs(), n),
        IidAlgorithm::Selection => iid::iid_by_selection(p.probs(), q.probs(), n),
        IidAlgorithm::Auto if p.len() < SELECTION_MIN_VOCAB => {
            iid::iid_by_sort(p.probs(), q.probs(), n)
        }
        IidAlgorithm::Auto => iid::iid_by_selection(p.probs(), q.probs(), n),
    }))
}

/// alpha* for n i.i.d. drafts at each n of `ns`, without certificates:
/// the sort or the bucket pass of [`optimal_acceptance_iid`] (its
/// [`IidAlgorithm::Auto`]) is done once for all of them, which is most of
/// the cost at full vocabulary. Takes distributions or rows left in a
/// caller's buffer ([`ProbabilityRow`]: checked, renormalised as they are
/// read, never copied).
///
/// ```
/// use mdsd_bounds::optimal_acceptance_iid_many;
/// use mdsd_core::{Distribution, ProbabilityRow};
///
/// let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
/// let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
/// let alphas = optimal_acceptance_iid_many(&p, &q, &[1, 2])?;
/// assert!((alphas[0] - 0.7).abs() < 1e-12 && (alphas[1] - 0.86).abs() < 1e-12);
/// // The same rows in a buffer, summing to 1 within the tolerance.
/// let buffer = [0.5, 0.3, 0.2 + 1e-9, 0.2, 0.3, 0.5];
/// let p = ProbabilityRow::new(&buffer[..3])?;
/// let q = ProbabilityRow::new(&buffer[3..])?;
/// let rows = optimal_acceptance_iid_many(p, q, &[1, 2])?;
/// assert!((rows[1] - 0.86).abs() < 1e-8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn optimal_acceptance_iid_many<'a>(
    p: impl Into<ProbabilityRow<'a>>,
    q: impl Into<ProbabilityRow<'a>>,
    ns: &[usize],
) -> Result<Vec<f64>, BoundError> {
    let (p, q) = (p.into(), q.into());
    check_iid_lengths(p.len(), q.len(), ns)?;
    Ok(iid::iid_values(
        iid::Masses::of(p),
        iid::Masses::of(q),
        &iid::draft_counts(ns)?,
    )
    .into_iter()
    .map(|value| 1.0 + value)
    .collect())
}

/// [`optimal_acceptance_iid_many`] for two rows in a caller's buffer,
/// not yet checked: each is checked as [`ProbabilityRow::new`] checks it
/// (same errors, as [`BoundError::InvalidRow`] naming the row), but in the
/// same read that buckets it: a separate check would be a second read of
/// both rows from memory (the `logits` benchmark's CPU rows per second
/// measure the pass).
///
/// ```
/// use mdsd_bounds::{BoundError, optimal_acceptance_iid_rows};
///
/// let buffer = [0.5, 0.3, 0.2, 0.2, 0.3, 0.5];
/// let alphas = optimal_acceptance_iid_rows(&buffer[..3], &buffer[3..], &[1, 2])?;
/// assert!((alphas[1] - 0.86).abs() < 1e-12);
/// let wrong = optimal_acceptance_iid_rows(&buffer[..3], &[0.5, 0.6, -0.1], &[1]);
/// assert!(matches!(wrong, Err(BoundError::InvalidRow { what: "draft", .. })));
/// # Ok::<(), BoundError>(())
/// ```
pub fn optimal_acceptance_iid_rows(
    p: &[f64],
    q: &[f64],
    ns: &[usize],
) -> Result<Vec<f64>, BoundError> {
    check_iid_lengths(p.len(), q.len(), ns)?;
    Ok(iid::iid_values_checking(p, q, &iid::draft_counts(ns)?)?
        .into_iter()
        .map(|value| 1.0 + value)
        .collect())
}

/// alpha* for drafts without replacement, over prefixes of the ascending-p/q
/// order (optimal on every instance tested against the LP; not proven).
pub fn optimal_acceptance_wor(p: &Distribution, drafts: &DraftScheme) -> Result<Bound, BoundError> {
    check_target(p, drafts)?;
    Ok(bound_from(wor::wor_by_prefix(p.probs(), drafts)?))
}

/// alpha* for Hu et al.'s greedy drafts, and for SpecHub's hub drafts,
/// whose draft sets are the fixed tokens F (greedy's top n-1, or the hub)
/// plus one token drawn from q':
/// `p(F) + Σ_{y outside F} min(p(y), q'(y))`, with
/// `H* = F ∪ {y outside F : p(y) < q'(y)}`.
pub fn optimal_acceptance_greedy(
    p: &Distribution,
    drafts: &DraftScheme,
) -> Result<Bound, BoundError> {
    check_target(p, drafts)?;
    let top = drafts.fixed_tokens();
    let rest = drafts.free_token_law();
    let p = p.probs();
    let mut alpha: f64 = top.iter().map(|&t| p[t]).sum();
    let mut certificate = top.to_vec();
    for (y, (&py, &qy)) in p.iter().zip(&rest).enumerate() {
        if top.contains(&y) {
            continue;
        }
        alpha += py.min(qy);
        if py < qy {
            certificate.push(y);
        }
    }
    certificate.sort_unstable();
    Ok(Bound {
        alpha_star: alpha,
        certificate,
    })
}

/// alpha* for one draft from each of `qs` (exact search over subsets).
pub fn optimal_acceptance_independent(
    p: &Distribution,
    qs: &[Distribution],
) -> Result<Bound, BoundError> {
    let drafts = DraftScheme::independent(qs.to_vec())?;
    check_target(p, &drafts)?;
    let qs: Vec<&[f64]> = qs.iter().map(Distribution::probs).collect();
    independent::independent_by_subsets(p.probs(), &qs)
        .map(bound_from)
        .map_err(|size| BoundError::TooManyTokens {
            size,
            limit: INDEPENDENT_SUBSET_LIMIT,
        })
}

/// `Q(all drafts in H)` for a set given by its indicator vector.
pub fn prob_all_drafts_in(drafts: &DraftScheme, in_set: &[bool]) -> f64 {
    masses_all_in(drafts, in_set).0
}

/// `(Q(all drafts in H), Q(not all in H))`, both computed directly.
fn masses_all_in(drafts: &DraftScheme, in_set: &[bool]) -> (f64, f64) {
    let q = drafts.drafts()[0].probs();
    match drafts.kind() {
        SchemeKind::Iid => {
            let n = drafts.n() as f64;
            let (inside, outside) = split_mass(q, in_set);
            (inside.powf(n), -(n * (-outside).ln_1p()).exp_m1())
        }
        SchemeKind::Independent => {
            let all_in: f64 = drafts
                .drafts()
                .iter()
                .map(|q| split_mass(q.probs(), in_set).0)
                .product();
            (all_in, 1.0 - all_in)
        }
        SchemeKind::Greedy | SchemeKind::Hub
            if drafts.fixed_tokens().iter().all(|&t| in_set[t]) =>
        {
            split_mass(&drafts.free_token_law(), in_set)
        }
        SchemeKind::Greedy | SchemeKind::Hub => (0.0, 1.0),
        SchemeKind::Argmax | SchemeKind::Top => {
            if drafts.fixed_tokens().iter().all(|&t| in_set[t]) {
                (1.0, 0.0)
            } else {
                (0.0, 1.0)
            }
        }
        SchemeKind::WithoutReplacement => wor::wor_masses(drafts, in_set),
    }
}

/// The upper bound `p(H) + 1 - Q(all drafts in H)` on the acceptance of
/// every lossless verifier, for any token set H (ids may repeat). At H = H*
/// it equals alpha*; users bound their own verifier with their own H.
pub fn acceptance_upper_bound(problem: &Problem, tokens: &[usize]) -> Result<f64, BoundError> {
    let in_set = problem.indicator(tokens)?;
    let (p_in, p_out) = split_mass(problem.target().probs(), &in_set);
    let (all_in, not_all_in) = masses_all_in(problem.drafts(), &in_set);
    Ok(1.0 + objective(p_in, p_out, all_in, not_all_in))
}

/// [`optimal_acceptance`] over many problems in parallel (rayon), results in
/// input order.
pub fn optimal_acceptance_batch(problems: &[Problem]) -> Vec<Result<Bound, BoundError>> {
    problems.par_iter().map(optimal_acceptance).collect()
}
