//! `evaluate` and `evaluate_file`: what `mdsd eval` computes
//! (`mdsd::evaluation`), on arrays or on the rows of a data file, and
//! `DataFile`, a data file's rows a window at a time.

use mdsd::SchemeKind;
use mdsd::evaluation::{EvalRequest, Evaluation, verifier_scheme};
use mdsd::input::Input;
use mdsd::logits::{CpuBackend, Values};
use numpy::{IntoPyArray, PyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{MdsdError, in_python};
use crate::interrupt::interruptible;
use crate::rows::{Settings, stored_pairs};

/// The request of `evaluate`'s arguments: the library checks them.
fn eval_request(
    ns: Vec<usize>,
    schemes: &[String],
    verifiers: &[String],
    samples: u64,
    seed: u64,
) -> PyResult<EvalRequest> {
    let refused = |e: &dyn std::fmt::Display| MdsdError::new_err(e.to_string());
    let schemes = (schemes.iter())
        .map(|s| s.parse::<SchemeKind>().map_err(|e| refused(&e)))
        .collect::<PyResult<Vec<_>>>()?;
    let verifiers = (verifiers.iter())
        .map(|spec| verifier_scheme(spec).map_err(|e| refused(&e)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(EvalRequest {
        ns,
        schemes,
        verifiers,
        samples,
        seed,
        strict: false,
    })
}

/// What `mdsd eval` computes for every row of `p` and `qs` (`[..., V]`):
/// alpha* of each scheme and the acceptance of each verifier (on its
/// rated scheme, or the one named as `name@scheme`) at each n, as arrays
/// of the leading shape and `len(ns)`, and the rows that failed. A sampled
/// verifier draws `samples` per row and n, row r seeded with seed + r as
/// `mdsd eval` seeds it.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn evaluate<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
    ns: Vec<usize>,
    schemes: Vec<String>,
    verifiers: Vec<String>,
    samples: u64,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let request = eval_request(ns, &schemes, &verifiers, samples, seed)?;
    let (leading, pairs) = stored_pairs(p, &qs, &settings)?;
    let input = settings.input();
    // Always watched: a row's sampled draws may take long.
    let evaluation = interruptible(py, usize::MAX, |progress| {
        mdsd::evaluation::evaluate_pairs(&pairs, &input, &request, &CpuBackend, progress)
            .map_err(in_python)
    })?;
    to_dict(py, &evaluation, &leading, &verifiers)
}

/// `evaluate` over the rows of a data file (what `mdsd eval --data`
/// reads), `rows` rows from `first_row` (all the rest where `None`), a
/// window at a time as `mdsd eval` reads it: arrays `[rows, len(ns)]`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn evaluate_file<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    settings: Settings,
    ns: Vec<usize>,
    schemes: Vec<String>,
    verifiers: Vec<String>,
    samples: u64,
    seed: u64,
    first_row: usize,
    rows: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let request = eval_request(ns, &schemes, &verifiers, samples, seed)?;
    let row = match rows {
        Some(_) => first_row.to_string(),
        None => format!("{first_row}.."),
    };
    let input = Input {
        data: Some(path),
        row: Some(row.parse().map_err(MdsdError::new_err)?),
        rows,
        // What the rows hold is the file's to say.
        logits: false,
        probabilities: false,
        ..settings.input()
    };
    let evaluation = interruptible(py, usize::MAX, |progress| {
        mdsd::evaluation::evaluate(&input, &request, &CpuBackend, progress).map_err(in_python)
    })?;
    let leading = vec![evaluation.input.rows];
    to_dict(py, &evaluation, &leading, &verifiers)
}

/// An evaluation as `mdsd.Evaluation` takes it: `alpha_star/<scheme>`,
/// `acceptance/<verifier>` (by the name the caller gave), its 99% interval
/// `acceptance_low/` and `acceptance_high/` (NaN where exact),
/// `scheme/<verifier>`, each array of the `leading` shape and `len(ns)`;
/// and `failures`, `(row, stage, error)` per row that failed.
fn to_dict<'py>(
    py: Python<'py>,
    evaluation: &Evaluation,
    leading: &[usize],
    specs: &[String],
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let array = |m: &mdsd::logits::Matrix| -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let mut shape = leading.to_vec();
        shape.push(m.cols());
        let array = numpy::ndarray::ArrayD::from_shape_vec(shape, m.as_slice().to_vec())
            .map_err(|e| MdsdError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py))
    };
    for result in &evaluation.schemes {
        dict.set_item(
            format!("alpha_star/{}", result.scheme.name()),
            array(&result.alpha)?,
        )?;
    }
    for (result, spec) in evaluation.verifiers.iter().zip(specs) {
        dict.set_item(format!("acceptance/{spec}"), array(&result.acceptance)?)?;
        dict.set_item(
            format!("acceptance_low/{spec}"),
            array(&result.interval_low)?,
        )?;
        dict.set_item(
            format!("acceptance_high/{spec}"),
            array(&result.interval_high)?,
        )?;
        dict.set_item(format!("scheme/{spec}"), result.scheme.name())?;
    }
    let failures: Vec<(usize, String, String)> = (evaluation.failures.iter())
        .map(|f| (f.row, f.stage.clone(), f.error.clone()))
        .collect();
    dict.set_item("failures", failures)?;
    Ok(dict)
}

/// A data file of target and draft rows (what `mdsd --data` reads: a
/// `.npz`, `.safetensors`, a directory of `.npy` files or of shards),
/// read a window of rows at a time.
#[pyclass(name = "DataFile", frozen)]
pub(crate) struct PyDataFile {
    reader: mdsd::logits::RowReader,
}

#[pymethods]
impl PyDataFile {
    #[new]
    fn new(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        let options = mdsd::logits::ReadOptions::default();
        let reader = py
            .detach(|| mdsd::logits::RowReader::open(&path, &options))
            .map_err(|e| MdsdError::new_err(e.to_string()))?;
        Ok(Self { reader })
    }

    #[getter]
    fn rows(&self) -> usize {
        self.reader.rows()
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.reader.shape().to_vec()
    }

    /// "logits" or "probabilities": what the rows hold (as the names of the
    /// arrays and their values say).
    #[getter]
    fn values(&self) -> &'static str {
        match self.reader.values() {
            Some(Values::Logits) => "logits",
            _ => "probabilities",
        }
    }

    /// Rows `start..end` as float64 arrays `(p, q)`, each `[end - start, V]`.
    #[allow(clippy::type_complexity)]
    fn read<'py>(
        &self,
        py: Python<'py>,
        start: usize,
        end: usize,
    ) -> PyResult<(
        Bound<'py, numpy::PyArray2<f64>>,
        Bound<'py, numpy::PyArray2<f64>>,
    )> {
        let pairs = py
            .detach(|| self.reader.read(start..end.max(start)))
            .map_err(|e| MdsdError::new_err(e.to_string()))?;
        if pairs.layout != mdsd::logits::Layout::Dense || !pairs.more_drafts.is_empty() {
            return Err(MdsdError::new_err(format!(
                "{}: top-k or several draft models' rows; mdsd.evaluate_file reads dense rows of \
                 one draft model (mdsd eval reads the others)",
                self.reader.source()
            )));
        }
        let array = |m: &mdsd::logits::Matrix| {
            numpy::ndarray::Array2::from_shape_vec((m.rows(), m.cols()), m.as_slice().to_vec())
                .map(|a| a.into_pyarray(py))
                .map_err(|e| MdsdError::new_err(e.to_string()))
        };
        Ok((array(&pairs.target)?, array(&pairs.draft)?))
    }
}
