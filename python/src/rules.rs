//! `OptimalRules`: the optimal verifier of a batch of rows, as Python
//! sees it (mdsd-verify's `OptimalRules`).

use mdsd::OptimalRules;
use mdsd::core::Summary;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::errors::MdsdError;
use crate::interrupt::interruptible;
use crate::rows::{Settings, check_fits, per_row, request, row_ids};
use crate::verifier::VerifierParams;

/// The optimal verifier prepared for each row of `[B, V]` rows.
#[pyclass(name = "OptimalRules", frozen)]
pub(crate) struct PyOptimalRules {
    rules: OptimalRules,
    n: usize,
}

impl PyOptimalRules {
    fn summaries(&self) -> impl Iterator<Item = &Summary> {
        (self.rules.rules().iter()).map(|rule| &rule.solution().summary)
    }

    fn column<'py>(
        &self,
        py: Python<'py>,
        value: impl Fn(&Summary) -> f64,
    ) -> Bound<'py, PyArray1<f64>> {
        let values: Vec<f64> = self.summaries().map(value).collect();
        values.into_pyarray(py)
    }
}

#[pymethods]
impl PyOptimalRules {
    #[new]
    fn new(
        py: Python<'_>,
        p: &Bound<'_, PyAny>,
        qs: Vec<Bound<'_, PyAny>>,
        settings: Settings,
        params: VerifierParams,
    ) -> PyResult<Self> {
        let n = settings.n;
        let request = request(settings)?;
        let solver = params.convex(Default::default())?;
        let (leading, cols, problems) = per_row(py, p, &qs, |_, p, qs| request.problem(p, qs))?;
        if leading.len() != 1 {
            return Err(MdsdError::new_err(format!(
                "p has shape {:?}: optimal_rules takes rows [B, V], one per sequence \
                 (p[None] for one row)",
                [leading.as_slice(), &[cols]].concat()
            )));
        }
        let entries = problems.len().saturating_mul(cols);
        let rules = interruptible(py, entries, |progress| {
            OptimalRules::prepare(problems, &solver, progress).map_err(|e| e.to_string())
        })?;
        Ok(Self { rules, n })
    }

    fn __len__(&self) -> usize {
        self.rules.rules().len()
    }

    /// alpha* of each row.
    #[getter]
    fn alpha_star<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, |s| s.alpha_star)
    }

    /// The acceptance each row's rule reaches (its selected token's).
    #[getter]
    fn acceptance<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, |s| s.acceptance)
    }

    /// alpha* - acceptance of each row.
    #[getter]
    fn gap<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, Summary::gap)
    }

    /// Each row's solve time in milliseconds.
    #[getter]
    fn elapsed_ms<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.column(py, |s| s.elapsed.as_secs_f64() * 1e3)
    }

    /// Each row's Newton iterations.
    #[getter]
    fn iterations(&self) -> Vec<usize> {
        self.summaries().map(|s| s.iterations).collect()
    }

    /// Each row's status: "converged" or "time-limit".
    #[getter]
    fn status(&self) -> Vec<&'static str> {
        self.summaries().map(|s| s.status.name()).collect()
    }

    /// One output token per row of `drafts` (`[B, n]` token ids), on
    /// rayon's pool with the GIL released and Ctrl-C watched; row b draws
    /// from stream b of the seed.
    #[pyo3(signature = (drafts, seed=None))]
    fn sample<'py>(
        &self,
        py: Python<'py>,
        drafts: PyReadonlyArray2<'py, i64>,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let drafts = drafts.as_array();
        if drafts.ncols() != self.n {
            return Err(MdsdError::new_err(format!(
                "drafts has {} columns: expected n = {}, one draft token per column",
                drafts.ncols(),
                self.n
            )));
        }
        check_fits::<usize>(drafts.len(), "drafts")?;
        let seed = seed.unwrap_or_else(rand::random);
        let tokens = interruptible(py, drafts.len(), |progress| {
            let drafts_of = |b: usize, ids: &mut Vec<usize>| row_ids(drafts, b, ids);
            (self
                .rules
                .sample_with(drafts.nrows(), drafts_of, seed, progress))
            .map_err(|e| e.to_string())
        })?;
        let tokens: Vec<i64> = tokens.into_iter().map(|t| t as i64).collect();
        Ok(tokens.into_pyarray(py))
    }
}
