//! `evaluate` (what `mdsd eval` computes) and `DataFile` (a data file's
//! rows a window at a time).

use mdsd::logits::Values;
use mdsd::{ConvexSolver, SchemeKind, VerifierKind};
use numpy::{IntoPyArray, PyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::MdsdError;
use crate::rows::{Settings, assembled, per_row, request};

/// What `mdsd eval` computes for every row: alpha* of each scheme and
/// the acceptance of each verifier (on its rated scheme, or the one
/// named as `name@scheme`) at each n, as
/// arrays of the leading shape and `len(ns)`. A sampled verifier draws
/// `samples` per row and n, row r (numbered from `first_row`) seeded with
/// seed + r as `mdsd eval` seeds it, so that the two agree.
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
    first_row: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let refused = |e: &dyn std::fmt::Display| MdsdError::new_err(e.to_string());
    if ns.is_empty() || ns.contains(&0) {
        return Err(MdsdError::new_err(
            "n takes numbers of drafts of at least 1",
        ));
    }
    if samples == 0 {
        return Err(MdsdError::new_err("samples=0: expected at least 1"));
    }
    let request = request(settings)?;
    let schemes = (schemes.iter())
        .map(|s| s.parse::<SchemeKind>().map_err(|e| refused(&e)))
        .collect::<PyResult<Vec<_>>>()?;
    let specs = verifiers;
    let verifiers = (specs.iter())
        .map(|spec| VerifierKind::parse_rated(spec).map_err(|e| refused(&e)))
        .collect::<PyResult<Vec<_>>>()?;
    if !verifiers.is_empty() {
        for &n in &ns {
            mdsd::verify::check_verifier_drafts(n).map_err(|e| refused(&e))?;
        }
    }
    let convex = ConvexSolver::default();
    let (leading, _, rows) = per_row(py, p, &qs, |r, p, qs| {
        let (p, qs) = request.laws(p, qs)?;
        // Independent drafts take every law in turn, the other schemes the
        // first.
        let laws = |scheme| match scheme {
            SchemeKind::Independent => qs.clone(),
            _ => qs[..1].to_vec(),
        };
        let mut values = Vec::with_capacity((schemes.len() + 3 * verifiers.len()) * ns.len());
        for &scheme in &schemes {
            for &n in &ns {
                let problem = assembled(
                    p.clone(),
                    laws(scheme),
                    scheme,
                    scheme.fixed_n().unwrap_or(n),
                )?;
                // Independent drafts: exact where it scales, else the
                // certified interval's upper end, as mdsd eval reports it.
                let alpha = match scheme {
                    SchemeKind::Independent => {
                        mdsd::verify::certified_alpha_star(&problem, &convex)
                            .map(|alpha| alpha.alpha_star)
                            .map_err(|e| e.to_string())?
                    }
                    _ => (mdsd::optimal_acceptance(&problem).map(|bound| bound.alpha_star))
                        .map_err(|e| e.to_string())?,
                };
                values.push(alpha);
            }
        }
        for &(kind, scheme) in &verifiers {
            for &n in &ns {
                let problem = assembled(p.clone(), laws(scheme), scheme, n)?;
                let row_seed = seed.wrapping_add(first_row + r as u64);
                let rating = (kind.rate(&problem, &convex, samples, row_seed, &|_| {}))
                    .map_err(|e| e.to_string())?;
                let (low, high) = rating.interval.unwrap_or((f64::NAN, f64::NAN));
                values.extend([rating.acceptance, low, high]);
            }
        }
        Ok(values)
    })?;
    let dict = PyDict::new(py);
    let width = ns.len();
    let column = |offset: usize, stride: usize| -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let values: Vec<f64> = (rows.iter())
            .flat_map(|row| (0..width).map(move |j| row[offset + j * stride]))
            .collect();
        let mut shape = leading.clone();
        shape.push(width);
        let array = numpy::ndarray::ArrayD::from_shape_vec(shape, values)
            .map_err(|e| MdsdError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py))
    };
    for (i, scheme) in schemes.iter().enumerate() {
        dict.set_item(
            format!("alpha_star/{}", scheme.name()),
            column(i * width, 1)?,
        )?;
    }
    let start = schemes.len() * width;
    for (i, ((_, scheme), spec)) in verifiers.iter().zip(&specs).enumerate() {
        let offset = start + 3 * width * i;
        dict.set_item(format!("acceptance/{spec}"), column(offset, 3)?)?;
        dict.set_item(format!("acceptance_low/{spec}"), column(offset + 1, 3)?)?;
        dict.set_item(format!("acceptance_high/{spec}"), column(offset + 2, 3)?)?;
        dict.set_item(format!("scheme/{spec}"), scheme.name())?;
    }
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
