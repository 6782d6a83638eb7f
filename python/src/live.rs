//! Live models: `CallbackModel`, a model pair behind two batched Python
//! functions (mdsd-verify's `LiveModel`, with its cache), `MarkovLaws`,
//! the command line's random Markov models as such functions, and
//! `block_efficiency`, blocks of draft tokens verified on either.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;

use mdsd::core::{
    ContextModel, Distribution, DraftShape, MarkovModel, SchemeKind, Side, Transform,
};
use mdsd::logits::Values;
use mdsd::verify::VerifyError;
use mdsd::verify::block::{
    BlockReport, CachedModel, LiveModel, LiveSettings, RoundBlock, RoundVerifier,
    exact_live_blocks, padded_output, sampled_live_blocks_with,
};
use numpy::ndarray::Array4;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{MdsdError, PANICKED, guarded};
use crate::interrupt::OnThisThread;

/// The two batched functions and what their rows hold.
struct Callbacks {
    target: Py<PyAny>,
    draft: Py<PyAny>,
    vocab_size: usize,
    logits: bool,
    /// Calls that reached each function, shared with the model's owner.
    calls: Arc<Calls>,
}

/// Calls that reached the target and draft functions, and what the last
/// failing one raised: readable while a run holds the model.
#[derive(Default)]
struct Calls {
    target: AtomicU64,
    draft: AtomicU64,
    raised: Mutex<Option<PyErr>>,
}

impl Calls {
    fn of(&self, side: Side) -> &AtomicU64 {
        match side {
            Side::Target => &self.target,
            Side::Draft => &self.draft,
        }
    }

    fn count(&self, side: Side) -> u64 {
        self.of(side).load(Ordering::Relaxed)
    }

    /// Keeps a function's exception to be the cause of the run's error,
    /// and gives its first line for the message.
    fn raised(&self, e: PyErr) -> String {
        let message = e.to_string().lines().next().unwrap_or_default().to_string();
        *self.raised.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        message
    }

    fn take_raised(&self) -> Option<PyErr> {
        self.raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl LiveModel for Callbacks {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Calls the side's function with the prefixes as a list of lists of
    /// ints; it returns `[len(prefixes), V]` float64 rows (the Python
    /// wrapper converts tensors and other dtypes). What it raises is kept
    /// to be raised again (`KeyboardInterrupt` as itself).
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
        self.calls.of(side).fetch_add(1, Ordering::Relaxed);
        let rows: Vec<Vec<f64>> = Python::attach(|py| {
            // One line here; the whole exception is the cause.
            let answer = function
                .call1(py, (prefixes.to_vec(),))
                .map_err(|e| failed(self.calls.raised(e)))?;
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

/// What a function that calls back into its own model is told: the run
/// that called it holds the model, so the call could only wait for itself.
const REENTERED: &str = "a function of this CallbackModel called back into the model (laws or \
                         block_efficiency) while the model was waiting for its answer: a model's \
                         functions must not use the model itself";

/// A target and draft model behind two batched functions, `fn(prefixes)
/// -> [len(prefixes), V]`, with the laws of repeated prefixes kept (up to
/// `cache_size` laws per model pair). One run at a time holds the model;
/// others wait with the GIL released, so the functions can run.
#[pyclass(name = "CallbackModel", module = "mdsd._mdsd", frozen)]
pub(crate) struct PyCallbackModel {
    model: Mutex<CachedModel<Callbacks>>,
    /// The thread whose run holds `model`.
    holder: Mutex<Option<ThreadId>>,
    calls: Arc<Calls>,
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
        let calls = Arc::new(Calls::default());
        let callbacks = Callbacks {
            target,
            draft,
            vocab_size,
            logits,
            calls: Arc::clone(&calls),
        };
        Ok(Self {
            model: Mutex::new(CachedModel::new(callbacks, cache_size)),
            holder: Mutex::new(None),
            calls,
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
        self.calls.count(Side::Target)
    }

    /// Calls that reached the draft function.
    #[getter]
    fn draft_calls(&self) -> u64 {
        self.calls.count(Side::Draft)
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
        for prefix in &prefixes {
            guarded(|| {
                mdsd::core::check_tokens(prefix, self.vocab_size).map_err(|e| e.to_string())
            })?;
        }
        let laws = self.run(py, |model| {
            model.laws(side, &prefixes).map_err(|e| e.to_string())
        })?;
        rows_array(py, laws.iter().map(|law| law.probs()), self.vocab_size)
    }
}

impl PyCallbackModel {
    /// `work` on the model once this thread holds it, the GIL released
    /// while it waits (the functions take it back to run). A refusal is an
    /// `MdsdError` whose cause is what a function raised, if one did; a
    /// `KeyboardInterrupt` (any exception that is not an `Exception`) a
    /// function raised is raised as itself.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        work: impl FnOnce(&mut CachedModel<Callbacks>) -> Result<T, String> + Send,
    ) -> PyResult<T> {
        let me = std::thread::current().id();
        let held = || self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        if *held() == Some(me) {
            return Err(MdsdError::new_err(REENTERED));
        }
        let (result, raised) = py.detach(|| {
            // A poisoned lock means a panic mid-call; the cache itself
            // only ever holds whole entries.
            let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
            *held() = Some(me);
            let result = catch_unwind(AssertUnwindSafe(|| work(&mut model)));
            *held() = None;
            (result, self.calls.take_raised())
        });
        match (result, raised) {
            (Err(_), _) => Err(MdsdError::new_err(PANICKED)),
            (Ok(Ok(value)), _) => Ok(value),
            (Ok(Err(_)), Some(raised)) if !raised.is_instance_of::<PyException>(py) => Err(raised),
            (Ok(Err(message)), raised) => {
                let error = MdsdError::new_err(message);
                error.set_cause(py, raised);
                Err(error)
            }
        }
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

/// A user's block sampler, called once a round: the arrays of vLLM's
/// layout (`[B, K, L+1, V]`, `[B, K, L, V]`, `[B, K, L]`) are built here
/// from the drafted trees, and the package's `function(target_probs,
/// draft_probs, draft_token_ids, round)` calls the user's and answers int64
/// `[B, L+1]`, -1 padded.
struct PyRoundVerifier {
    name: String,
    function: Py<PyAny>,
    depth: usize,
    calls: Arc<Calls>,
}

impl RoundVerifier for PyRoundVerifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn sample_round(
        &self,
        blocks: &[RoundBlock<'_>],
        round: u64,
    ) -> Result<Vec<Vec<usize>>, VerifyError> {
        let failed = |message: String| VerifyError::Sampler {
            name: self.name.clone(),
            message,
        };
        let (b, depth) = (blocks.len(), self.depth);
        let k = blocks.first().map_or(0, |block| block.paths.len());
        let v = blocks.first().map_or(0, |block| block.model.vocab_size());
        let mut target = Vec::with_capacity(b * k * (depth + 1) * v);
        let mut draft = Vec::with_capacity(b * k * depth * v);
        let mut ids = Vec::with_capacity(b * k * depth);
        for block in blocks {
            for path in block.paths {
                for j in 0..=depth {
                    let context = block.model.context(&path[..j]);
                    target.extend_from_slice(block.model.target(context).probs());
                    if j < depth {
                        draft.extend_from_slice(block.model.draft(context).probs());
                        ids.push(path[j] as i64);
                    }
                }
            }
        }
        let shape = |positions| (b, k, positions, v);
        let arrays = (
            Array4::from_shape_vec(shape(depth + 1), target),
            Array4::from_shape_vec(shape(depth), draft),
            numpy::ndarray::Array3::from_shape_vec((b, k, depth), ids),
        );
        let (Ok(target), Ok(draft), Ok(ids)) = arrays else {
            return Err(failed("the round's arrays do not have one shape".into()));
        };
        Python::attach(|py| {
            let answer = self
                .function
                .call1(
                    py,
                    (
                        target.into_pyarray(py),
                        draft.into_pyarray(py),
                        ids.into_pyarray(py),
                        round,
                    ),
                )
                .map_err(|e| failed(self.calls.raised(e)))?;
            let array: PyReadonlyArray2<i64> = answer
                .extract(py)
                .map_err(|e| failed(format!("its answer is not an int64 [B, L+1] array: {e}")))?;
            let array = array.as_array();
            if array.shape() != [b, depth + 1] {
                return Err(failed(format!(
                    "it answered shape {:?} for {b} blocks; expected [{b}, {}]",
                    array.shape(),
                    depth + 1
                )));
            }
            // The rows' tokens; the library checks them against the drafts.
            (array.rows().into_iter().enumerate())
                .map(|(row, tokens)| {
                    let tokens: Vec<i64> = tokens.iter().copied().collect();
                    padded_output(&self.name, &tokens).map_err(|e| e.at_row(row))
                })
                .collect()
        })
    }
}

/// Blocks of `paths` draft paths of `depth` tokens, or of a static `tree`
/// (children per depth, drawn by `children`: iid, wor, top), on a callback
/// model: sampled (`samples` blocks, `batch` drafted together, block b
/// after `prompts[b mod len]`) or, with `samples=None`, exact (every prefix
/// of up to `depth` tokens after the one prompt, every drawn tree).
/// Returns `{"methods": {name: figures}, "blocks", "rounds",
/// "target_calls", "draft_calls"}` (calls that reached the functions).
#[pyfunction]
#[pyo3(signature = (model, prompts, depth, paths, tree, children, methods, custom, samples, seed, batch))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_efficiency<'py>(
    py: Python<'py>,
    model: &PyCallbackModel,
    prompts: Vec<Vec<usize>>,
    depth: usize,
    paths: usize,
    tree: Option<Vec<usize>>,
    children: &str,
    methods: Vec<String>,
    custom: Vec<(String, Py<PyAny>)>,
    samples: Option<u64>,
    seed: u64,
    batch: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let names: Vec<&str> = methods.iter().map(String::as_str).collect();
    let shape = match tree {
        None => DraftShape::Paths(paths),
        Some(branching) => {
            let children: SchemeKind = children
                .parse()
                .map_err(|e| MdsdError::new_err(format!("children: {e}")))?;
            DraftShape::tree(branching, children)
                .map_err(|e| MdsdError::new_err(format!("tree: {e}")))?
        }
    };
    let custom: Vec<PyRoundVerifier> = custom
        .into_iter()
        .map(|(name, function)| PyRoundVerifier {
            name,
            function,
            depth,
            calls: Arc::clone(&model.calls),
        })
        .collect();
    let custom: Vec<&dyn RoundVerifier> = custom.iter().map(|c| c as &dyn RoundVerifier).collect();
    if samples.is_none() && prompts.len() != 1 {
        return Err(MdsdError::new_err(format!(
            "exact mode enumerates the blocks after one prompt; got {}",
            prompts.len()
        )));
    }
    // Ctrl-C is asked for between rounds; the functions run on this
    // thread, so one that is running raises it itself.
    let signals = OnThisThread::new();
    let counted = |side| model.calls.count(side);
    let outcome = model.run(py, |live| {
        let before = (counted(Side::Target), counted(Side::Draft));
        let done = match samples {
            Some(samples) => {
                let settings = LiveSettings {
                    depth,
                    shape: shape.clone(),
                    samples,
                    seed,
                    batch,
                };
                sampled_live_blocks_with(live, &prompts, (&names, &custom), settings, &signals)
                    .map(|report| (report.methods, Some((report.blocks, report.rounds))))
            }
            None => {
                let limit = mdsd::core::DEFAULT_ENUMERATION_LIMIT;
                exact_live_blocks(live, &prompts[0], &names, (depth, &shape), limit)
                    .map(|reports| (reports, None))
            }
        };
        let calls = (
            counted(Side::Target) - before.0,
            counted(Side::Draft) - before.1,
        );
        done.map(|done| (done, calls)).map_err(|e| e.to_string())
    });
    if let Some(signal) = signals.take() {
        return Err(signal);
    }
    let ((reports, rounds), (target_calls, draft_calls)) = outcome?;
    let result = PyDict::new(py);
    if let Some((blocks, rounds)) = rounds {
        result.set_item("blocks", blocks)?;
        result.set_item("rounds", rounds)?;
    }
    let figures = PyDict::new(py);
    for report in &reports {
        figures.set_item(&report.name, method_dict(py, report)?)?;
    }
    result.set_item("methods", figures)?;
    result.set_item("target_calls", target_calls)?;
    result.set_item("draft_calls", draft_calls)?;
    Ok(result)
}
