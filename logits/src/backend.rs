//! Batched work over rows: transforms and softmax, and alpha* for a list
//! of n, behind one trait with a CPU and a GPU implementation.

use mdsd_bounds::{BoundError, optimal_acceptance_iid_rows, optimal_acceptance_wor};
use mdsd_core::{CoreError, Distribution, DraftScheme, Transform};
use rayon::prelude::*;

use crate::{LogitsError, Matrix, Values};

/// Batched row work. Every method returns one output row per input row.
pub trait Backend {
    /// `cpu` or `gpu`.
    fn name(&self) -> &'static str;

    /// Each row as a probability vector after `transform` (temperature,
    /// top-k, top-p): probabilities renormalised in f64, logits through a
    /// stable softmax (max subtracted, sums in f64).
    fn distributions(
        &self,
        rows: &Matrix,
        values: Values,
        transform: &Transform,
    ) -> Result<Matrix, LogitsError>;

    /// alpha* for n i.i.d. drafts, row r of target against row r of draft:
    /// `rows x ns.len()`.
    fn optimal_acceptance_iid(
        &self,
        target: &Matrix,
        draft: &Matrix,
        ns: &[usize],
    ) -> Result<Matrix, LogitsError>;

    /// alpha* for n drafts without replacement: `rows x ns.len()`.
    fn optimal_acceptance_wor(
        &self,
        target: &Matrix,
        draft: &Matrix,
        ns: &[usize],
    ) -> Result<Matrix, LogitsError>;
}

/// Rows on rayon's pool, through mdsd-core's transforms and mdsd-bounds'
/// closed forms (one sort or bucket pass per row for all n).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn distributions(
        &self,
        rows: &Matrix,
        values: Values,
        transform: &Transform,
    ) -> Result<Matrix, LogitsError> {
        distribution_rows(rows.rows(), rows.cols(), |r| {
            values.distribution(rows.row(r), transform)
        })
    }

    fn optimal_acceptance_iid(
        &self,
        target: &Matrix,
        draft: &Matrix,
        ns: &[usize],
    ) -> Result<Matrix, LogitsError> {
        // Rows are read where they lie, once: copying and renormalising
        // them, or checking them in a pass of their own, would each read
        // two vocabulary-sized rows again (the `logits` benchmark measures
        // the pass).
        per_row(target, draft, ns, |r, p, q| {
            optimal_acceptance_iid_rows(p, q, ns).map_err(|error| match error {
                BoundError::InvalidRow { what, source } => invalid_row(what, r, source),
                source => LogitsError::Bound { row: r, source },
            })
        })
    }

    fn optimal_acceptance_wor(
        &self,
        target: &Matrix,
        draft: &Matrix,
        ns: &[usize],
    ) -> Result<Matrix, LogitsError> {
        per_row(target, draft, ns, |r, p, q| {
            let (p, q) = (
                row_distribution("target", r, p)?,
                row_distribution("draft", r, q)?,
            );
            ns.iter()
                .map(|&n| {
                    DraftScheme::without_replacement(q.clone(), n)
                        .map_err(Into::into)
                        .and_then(|scheme| optimal_acceptance_wor(&p, &scheme))
                        .map(|bound| bound.alpha_star)
                        .map_err(|source| LogitsError::Bound { row: r, source })
                })
                .collect()
        })
    }
}

/// Checks that target and draft are rows of one shape.
pub(crate) fn check_batch(target: &Matrix, draft: &Matrix) -> Result<(), LogitsError> {
    if (target.rows(), target.cols()) != (draft.rows(), draft.cols()) {
        return Err(LogitsError::BatchShape {
            what: "the draft",
            expected: format!("{} x {} as the target", target.rows(), target.cols()),
            found: format!("{} x {}", draft.rows(), draft.cols()),
        });
    }
    Ok(())
}

/// Row `r` of `what` (target or draft) as a validated, renormalised
/// distribution.
pub(crate) fn row_distribution(
    what: &'static str,
    r: usize,
    row: &[f64],
) -> Result<Distribution, LogitsError> {
    Distribution::from_probs(row).map_err(|source| invalid_row(what, r, source))
}

fn invalid_row(what: &'static str, row: usize, source: CoreError) -> LogitsError {
    LogitsError::InvalidRow { what, row, source }
}

/// Row `r` of `rows` rows of `cols` entries as `law(r)`, on rayon's pool:
/// the one way both backends turn rows into distributions, a failure
/// naming its row.
pub(crate) fn distribution_rows(
    rows: usize,
    cols: usize,
    law: impl Fn(usize) -> Result<Distribution, CoreError> + Sync,
) -> Result<Matrix, LogitsError> {
    let out = (0..rows)
        .into_par_iter()
        .map(|r| {
            law(r)
                .map(Distribution::into_probs)
                .map_err(|source| invalid_row("input", r, source))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Matrix::new(rows, cols, out.concat())
}

/// `solve(row, p, q)` on rayon's pool for each pair of rows, as a
/// `rows x ns.len()` matrix.
fn per_row(
    target: &Matrix,
    draft: &Matrix,
    ns: &[usize],
    solve: impl Fn(usize, &[f64], &[f64]) -> Result<Vec<f64>, LogitsError> + Sync,
) -> Result<Matrix, LogitsError> {
    check_batch(target, draft)?;
    let out = (0..target.rows())
        .into_par_iter()
        .map(|r| solve(r, target.row(r), draft.row(r)))
        .collect::<Result<Vec<_>, _>>()?;
    Matrix::new(target.rows(), ns.len(), out.concat())
}
