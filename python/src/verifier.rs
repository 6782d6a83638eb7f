//! `Verifier`: a built-in verifier prepared for one row, as Python
//! sees it.

use mdsd::core::Solve;
use mdsd::verify::sample_rows;
use mdsd::{ConvexSolver, FlowSolver, Problem, VerifierKind};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::errors::{MdsdError, guarded};
use crate::interrupt::interruptible;
use crate::rows::{Settings, check_fits, one_problem, request, row_ids};

/// What a verifier may be prepared with, by the names `solve` uses (unset
/// ones take the defaults).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct VerifierParams {
    truncation: Option<usize>,
    max_gap: Option<f64>,
    budget_ms: Option<f64>,
    max_sets: Option<usize>,
}

impl VerifierParams {
    /// The convex solver of `max_gap` and `budget_ms`, where given, on the
    /// process's workspaces: a call's solver goes with the call, and its
    /// memory would be faulted in afresh at each.
    pub(crate) fn convex(&self, default: ConvexSolver) -> PyResult<ConvexSolver> {
        let mut budget = *default.budget();
        if let Some(max_gap) = self.max_gap {
            budget = budget.with_max_gap(max_gap);
        }
        if let Some(ms) = self.budget_ms {
            budget = (budget.with_budget_ms(ms)).map_err(|e| MdsdError::new_err(e.to_string()))?;
        }
        Ok(default.with_budget(budget).with_shared_workspaces())
    }

    fn settings(self) -> PyResult<mdsd::VerifierSettings> {
        let defaults = mdsd::VerifierSettings::default();
        let settings = mdsd::VerifierSettings {
            khisti_truncation: self.truncation.unwrap_or(defaults.khisti_truncation),
            convex: self.convex(defaults.convex)?,
            flow: self
                .max_sets
                .map_or(defaults.flow, |m| FlowSolver::default().with_max_sets(m)),
        };
        let refused = |e: &dyn std::fmt::Display| MdsdError::new_err(e.to_string());
        settings.convex.check_settings().map_err(|e| refused(&e))?;
        settings.flow.check_settings().map_err(|e| refused(&e))?;
        Ok(settings)
    }
}

/// A built-in verifier prepared for one target row and draft scheme: the
/// output law given drafts, draws from it, and its exact acceptance.
#[pyclass(name = "Verifier", frozen)]
pub(crate) struct PyVerifier {
    verifier: Box<dyn mdsd::Verifier>,
    problem: Problem,
    kind: VerifierKind,
    settings: mdsd::VerifierSettings,
}

impl PyVerifier {
    fn rng(seed: Option<u64>) -> ChaCha8Rng {
        seed.map_or_else(
            || ChaCha8Rng::from_rng(&mut rand::rng()),
            ChaCha8Rng::seed_from_u64,
        )
    }
}

#[pymethods]
impl PyVerifier {
    #[new]
    fn new(
        name: &str,
        p: &Bound<'_, PyAny>,
        qs: Vec<Bound<'_, PyAny>>,
        settings: Settings,
        params: VerifierParams,
    ) -> PyResult<Self> {
        let request = request(settings)?;
        let kind: VerifierKind = name
            .parse()
            .map_err(|e: mdsd::VerifyError| MdsdError::new_err(e.to_string()))?;
        let problem = one_problem(p.py(), p, &qs, &request, "a Verifier")?;
        let settings = params.settings()?;
        let verifier = guarded(|| {
            kind.prepare_with(&problem, &settings)
                .map_err(|e| e.to_string())
        })?;
        Ok(Self {
            verifier,
            problem,
            kind,
            settings,
        })
    }

    #[getter]
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// The output law given the drafts, as an array over the vocabulary.
    fn conditional<'py>(
        &self,
        py: Python<'py>,
        drafts: Vec<usize>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let law = guarded(|| {
            self.verifier
                .conditional(&drafts)
                .map_err(|e| e.to_string())
        })?;
        let mut dense = vec![0.0; self.problem.vocab_size()];
        for (token, mass) in law {
            dense[token] += mass;
        }
        Ok(dense.into_pyarray(py))
    }

    /// One output token for the drafts.
    #[pyo3(signature = (drafts, seed=None))]
    fn sample(&self, drafts: Vec<usize>, seed: Option<u64>) -> PyResult<usize> {
        let mut rng = Self::rng(seed);
        guarded(|| {
            self.verifier
                .sample(&drafts, &mut rng)
                .map_err(|e| e.to_string())
        })
    }

    /// One output token per row of `drafts` (`[B, n]` token ids, read in
    /// place: a broadcast view is not copied), on rayon's pool with the
    /// GIL released and Ctrl-C watched; row b draws from stream b of the
    /// seed, so a seed gives the same tokens whatever the pool.
    #[pyo3(signature = (drafts, seed=None))]
    fn sample_batch<'py>(
        &self,
        py: Python<'py>,
        drafts: PyReadonlyArray2<'py, i64>,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let drafts = drafts.as_array();
        check_fits::<i64>(drafts.nrows(), "the rows of drafts")?;
        let seed = seed.unwrap_or_else(rand::random);
        let tokens = interruptible(py, drafts.len(), |progress| {
            sample_rows(
                drafts.nrows(),
                |_| self.verifier.as_ref(),
                |b, ids| row_ids(drafts, b, ids),
                seed,
                progress,
            )
            .map_err(|e| e.to_string())
        })?;
        let tokens: Vec<i64> = tokens.into_iter().map(|t| t as i64).collect();
        Ok(tokens.into_pyarray(py))
    }

    /// P(output is one of the drafts): what the preparation computed where
    /// it did, else a closed form where one exists, else exact enumeration
    /// of the draft tuples; `None` past its limit.
    #[getter]
    fn acceptance(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        if let Some(acceptance) = self.verifier.known_acceptance() {
            return Ok(Some(acceptance));
        }
        py.detach(|| {
            guarded(|| {
                match self
                    .kind
                    .exact_acceptance(&self.problem, &self.settings.convex)
                {
                    Some(acceptance) => acceptance.map(Some).map_err(|e| e.to_string()),
                    None => Ok(mdsd::verify::exact(
                        &self.problem,
                        self.verifier.as_ref(),
                        mdsd::core::DEFAULT_ENUMERATION_LIMIT,
                    )
                    .ok()
                    .map(|report| report.acceptance)),
                }
            })
        })
    }
}

/// The settings a built-in verifier's preparation reads (`truncation`,
/// `max_gap`, `budget_ms`, `max_sets`), as mdsd-verify's registry lists them.
#[pyfunction]
pub(crate) fn verifier_settings(name: &str) -> PyResult<Vec<&'static str>> {
    let kind: VerifierKind = name
        .parse()
        .map_err(|e: mdsd::VerifyError| MdsdError::new_err(e.to_string()))?;
    Ok(kind.settings_read().to_vec())
}
