//! Live models: `CallbackModel`, a model pair behind two batched Python
//! functions (mdsd-verify's `LiveModel`, with its cache), `MarkovLaws`,
//! the command line's random Markov models as such functions, and
//! `block_efficiency`, blocks of draft tokens verified on either.

use std::sync::{Arc, Mutex, PoisonError};

use mdsd::core::{ContextModel, Distribution, MarkovModel, Side, Transform};
use mdsd::logits::Values;
use mdsd::verify::VerifyError;
use mdsd::verify::block::{
    BlockReport, CachedModel, LiveModel, LiveSettings, exact_live_blocks, sampled_live_blocks,
};
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{MdsdError, guarded};

/// The two batched functions and what their rows hold.
struct Callbacks {
    target: Py<PyAny>,
    draft: Py<PyAny>,
    vocab_size: usize,
    logits: bool,
}

impl LiveModel for Callbacks {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Calls the side's function with the prefixes as a list of lists of
    /// ints; it returns `[len(prefixes), V]` float64 rows (the Python
    /// wrapper converts tensors and other dtypes).
    fn laws(
        &mut self,
        side: Side,
        prefixes: &[Vec<usize>],
    ) -> Result<Vec<Arc<Distribution>>, VerifyError> {
        let failed = |message: String| VerifyError::Model {
            side: side.name(),
            message,
        };
        let function = match side {
            Side::Target => &self.target,
            Side::Draft => &self.draft,
        };
        let rows: Vec<Vec<f64>> = Python::attach(|py| {
            let answer = function
                .call1(py, (prefixes.to_vec(),))
                .map_err(|e| failed(e.to_string()))?;
            let array: PyReadonlyArray2<f64> = answer
                .extract(py)
                .map_err(|e| failed(format!("its answer is not a [batch, V] float array: {e}")))?;
            let array = array.as_array();
            let shape = array.shape();
            if shape != [prefixes.len(), self.vocab_size] {
                return Err(failed(format!(
                    "it answered {} prefixes with shape {shape:?}, not [{}, {}]",
                    prefixes.len(),
                    prefixes.len(),
                    self.vocab_size
                )));
            }
            Ok(array.rows().into_iter().map(|row| row.to_vec()).collect())
        })?;
        let values = if self.logits {
            Values::Logits
        } else {
            Values::Probabilities
        };
        rows.iter()
            .enumerate()
            .map(|(i, row)| {
                values
                    .distribution(row, &Transform::default())
                    .map(Arc::new)
                    .map_err(|e| failed(format!("row {i} (prefix {:?}): {e}", prefixes[i])))
            })
            .collect()
    }
}

/// A target and draft model behind two batched functions, `fn(prefixes)
/// -> [len(prefixes), V]`, with the laws of repeated prefixes kept (up to
/// `cache_size` laws per model pair).
#[pyclass(name = "CallbackModel", module = "mdsd._mdsd", frozen)]
pub(crate) struct PyCallbackModel {
    model: Mutex<CachedModel<Callbacks>>,
    vocab_size: usize,
}

#[pymethods]
impl PyCallbackModel {
    #[new]
    fn new(
        target: Py<PyAny>,
        draft: Py<PyAny>,
        vocab_size: usize,
        logits: bool,
        cache_size: usize,
    ) -> PyResult<Self> {
        if vocab_size == 0 {
            return Err(MdsdError::new_err("vocab_size must be at least 1"));
        }
        let callbacks = Callbacks {
            target,
            draft,
            vocab_size,
            logits,
        };
        Ok(Self {
            model: Mutex::new(CachedModel::new(callbacks, cache_size)),
            vocab_size,
        })
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Calls that reached the target function (the cache answers the rest).
    #[getter]
    fn target_calls(&self) -> u64 {
        self.lock().calls(Side::Target)
    }

    /// Calls that reached the draft function.
    #[getter]
    fn draft_calls(&self) -> u64 {
        self.lock().calls(Side::Draft)
    }

    /// The laws of `side` ("target" or "draft") after each prefix, through
    /// the cache (one call for the prefixes it does not hold):
    /// `[len(prefixes), V]` probabilities.
    fn laws<'py>(
        &self,
        py: Python<'py>,
        side: &str,
        prefixes: Vec<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let side = match side {
            "target" => Side::Target,
            "draft" => Side::Draft,
            other => {
                return Err(MdsdError::new_err(format!(
                    "side {other:?}: expected \"target\" or \"draft\""
                )));
            }
        };
        let laws = guarded(|| {
            for prefix in &prefixes {
                mdsd::core::check_tokens(prefix, self.vocab_size).map_err(|e| e.to_string())?;
            }
            self.lock().laws(side, &prefixes).map_err(|e| e.to_string())
        })?;
        rows_array(py, laws.iter().map(|law| law.probs()), self.vocab_size)
    }
}

/// Rows of V probabilities as a `[rows, V]` array.
fn rows_array<'py, 'a>(
    py: Python<'py>,
    rows: impl ExactSizeIterator<Item = &'a [f64]>,
    vocab_size: usize,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let count = rows.len();
    let values: Vec<f64> = rows.flatten().copied().collect();
    let array = numpy::ndarray::Array2::from_shape_vec((count, vocab_size), values)
        .map_err(|e| MdsdError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

impl PyCallbackModel {
    fn lock(&self) -> std::sync::MutexGuard<'_, CachedModel<Callbacks>> {
        // A poisoned lock means a callback panicked mid-call; the cache
        // itself only ever holds whole entries.
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The random Markov models of `mdsd block --markov SEED` as batched
/// functions: `target(prefixes)` and `draft(prefixes)` give `[batch, V]`
/// probabilities.
#[pyclass(name = "MarkovLaws", module = "mdsd._mdsd", frozen)]
pub(crate) struct PyMarkovLaws {
    model: MarkovModel,
}

#[pymethods]
impl PyMarkovLaws {
    #[new]
    fn new(vocab_size: usize, order: usize, seed: u64) -> PyResult<Self> {
        let model =
            guarded(|| MarkovModel::random(vocab_size, order, seed).map_err(|e| e.to_string()))?;
        Ok(Self { model })
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn target<'py>(
        &self,
        py: Python<'py>,
        prefixes: Vec<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        self.laws(py, &prefixes, Side::Target)
    }

    fn draft<'py>(
        &self,
        py: Python<'py>,
        prefixes: Vec<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        self.laws(py, &prefixes, Side::Draft)
    }
}

impl PyMarkovLaws {
    fn laws<'py>(
        &self,
        py: Python<'py>,
        prefixes: &[Vec<usize>],
        side: Side,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let v = self.model.vocab_size();
        for prefix in prefixes {
            guarded(|| mdsd::core::check_tokens(prefix, v).map_err(|e| e.to_string()))?;
        }
        let laws = prefixes.iter().map(|prefix| {
            let context = self.model.context(prefix);
            match side {
                Side::Target => self.model.target(context).probs(),
                Side::Draft => self.model.draft(context).probs(),
            }
        });
        rows_array(py, laws, v)
    }
}

/// One method's figures as a dict: E(tau) and its standard error (sampled),
/// the law of tau, the acceptance per depth, the block efficiency, the
/// first token's chi-square p-value (sampled) or the law error (exact).
fn method_dict<'py>(py: Python<'py>, report: &BlockReport) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("expected_accepted", report.expected_accepted)?;
    dict.set_item("standard_error", report.standard_error)?;
    dict.set_item("block_efficiency", report.block_efficiency)?;
    dict.set_item("tau_law", report.tau_law.clone())?;
    dict.set_item("depth_acceptance", report.depth_acceptance())?;
    dict.set_item("first_token_p_value", report.first_token_p_value)?;
    dict.set_item("max_law_error", report.max_law_error)?;
    Ok(dict)
}

/// Blocks of `paths` draft paths of `depth` tokens on a callback model:
/// sampled (`samples` blocks, `batch` drafted together, block b after
/// `prompts[b mod len]`) or, with `samples=None`, exact (every prefix of
/// up to `depth` tokens after the one prompt, every tuple of paths).
/// Returns `{"methods": {name: figures}, "blocks", "rounds",
/// "target_calls", "draft_calls"}` (calls that reached the functions).
#[pyfunction]
#[pyo3(signature = (model, prompts, depth, paths, methods, samples, seed, batch))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_efficiency<'py>(
    py: Python<'py>,
    model: &PyCallbackModel,
    prompts: Vec<Vec<usize>>,
    depth: usize,
    paths: usize,
    methods: Vec<String>,
    samples: Option<u64>,
    seed: u64,
    batch: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let names: Vec<&str> = methods.iter().map(String::as_str).collect();
    let mut live = model.lock();
    let (target_before, draft_before) = (live.calls(Side::Target), live.calls(Side::Draft));
    let result = PyDict::new(py);
    let reports = match samples {
        Some(samples) => {
            let settings = LiveSettings {
                depth,
                paths,
                samples,
                seed,
                batch,
            };
            let report = guarded(|| {
                sampled_live_blocks(&mut *live, &prompts, &names, settings, &|_| {})
                    .map_err(|e| e.to_string())
            })?;
            result.set_item("blocks", report.blocks)?;
            result.set_item("rounds", report.rounds)?;
            report.methods
        }
        None => {
            let [prompt] = prompts.as_slice() else {
                return Err(MdsdError::new_err(format!(
                    "exact mode enumerates the blocks after one prompt; got {}",
                    prompts.len()
                )));
            };
            let limit = mdsd::core::DEFAULT_ENUMERATION_LIMIT;
            guarded(|| {
                exact_live_blocks(&mut *live, prompt, &names, depth, paths, limit)
                    .map_err(|e| e.to_string())
            })?
        }
    };
    let figures = PyDict::new(py);
    for report in &reports {
        figures.set_item(&report.name, method_dict(py, report)?)?;
    }
    result.set_item("methods", figures)?;
    result.set_item("target_calls", live.calls(Side::Target) - target_before)?;
    result.set_item("draft_calls", live.calls(Side::Draft) - draft_before)?;
    Ok(result)
}
