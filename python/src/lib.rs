//! The extension module `mdsd._mdsd`: alpha* and its certificate H* for
//! rows of probabilities or logits given as numpy arrays `[..., V]`, one
//! value per row, computed on rayon's pool with the GIL released.
//! `mdsd/__init__.py` is the API users call; it turns tensors and other
//! array-likes into float32 or float64 arrays before they reach here.

use std::panic::{AssertUnwindSafe, catch_unwind};

use mdsd::core::ProbabilityRow;
use mdsd::logits::{FloatType, Values};
use mdsd::{Distribution, DraftScheme, Problem, SchemeKind, Transform};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rayon::prelude::*;

create_exception!(
    _mdsd,
    MdsdError,
    PyValueError,
    "What mdsd refused, with the one-line message the command line gives."
);

/// Rows of one side, in the float type they came in (read in place).
enum Rows<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
}

impl<'py> Rows<'py> {
    fn extract(side: &str, array: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(a) = array.extract::<PyReadonlyArrayDyn<'py, f64>>() {
            return Ok(Rows::F64(a));
        }
        if let Ok(a) = array.extract::<PyReadonlyArrayDyn<'py, f32>>() {
            return Ok(Rows::F32(a));
        }
        Err(MdsdError::new_err(format!(
            "{side}: expected a float32 or float64 numpy array"
        )))
    }

    fn shape(&self) -> Vec<usize> {
        match self {
            Rows::F32(a) => a.shape().to_vec(),
            Rows::F64(a) => a.shape().to_vec(),
        }
    }

    /// The entries, row after row, borrowed where the array is contiguous
    /// (no copy) and copied once otherwise.
    fn values(&self) -> Slice<'_> {
        match self {
            Rows::F64(a) => a.as_slice().map_or_else(
                |_| Slice::Owned64(a.as_array().iter().copied().collect()),
                Slice::F64,
            ),
            Rows::F32(a) => a.as_slice().map_or_else(
                |_| Slice::Owned32(a.as_array().iter().copied().collect()),
                Slice::F32,
            ),
        }
    }
}

/// Contiguous entries of either type, so that rows are widened to f64 one
/// at a time as they are used.
enum Slice<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    Owned32(Vec<f32>),
    Owned64(Vec<f64>),
}

impl Slice<'_> {
    /// Row `r` of `cols` entries, widened to f64 into `out` (a buffer a
    /// task reuses from row to row).
    fn fill(&self, r: usize, cols: usize, out: &mut Vec<f64>) {
        let range = r * cols..(r + 1) * cols;
        out.clear();
        match self {
            Slice::F32(x) => out.extend(x[range].iter().map(|&v| f64::from(v))),
            Slice::Owned32(x) => out.extend(x[range].iter().map(|&v| f64::from(v))),
            Slice::F64(x) => out.extend_from_slice(&x[range]),
            Slice::Owned64(x) => out.extend_from_slice(&x[range]),
        }
    }
}

/// What both functions take besides the rows.
struct Request {
    n: usize,
    scheme: SchemeKind,
    values: Values,
    target: Transform,
    draft: Transform,
    /// The type the caller's rows were stored in, which sets how far from
    /// 1 a probability row may sum (`FloatType::sum_tolerance`), as the
    /// file readers do.
    stored: FloatType,
}

impl Request {
    /// A probability row checked within its stored type's tolerance: the
    /// entries as given with their sum, so that no renormalised copy is
    /// made.
    fn probabilities<'a>(&self, side: &str, row: &'a [f64]) -> Result<ProbabilityRow<'a>, String> {
        ProbabilityRow::within(row, self.stored.sum_tolerance(row.len()))
            .map_err(|e| format!("{side}: {e}"))
    }

    /// Plain i.i.d. probability rows, whose alpha* needs no distribution
    /// built: the closed form reads the rows where they lie.
    fn is_plain_iid(&self) -> bool {
        self.scheme == SchemeKind::Iid
            && self.values == Values::Probabilities
            && self.target.is_identity()
            && self.draft.is_identity()
    }

    fn problem(&self, p: &[f64], qs: &[Vec<f64>]) -> Result<Problem, String> {
        let law = |side: &str, row: &[f64], transform: &Transform| {
            let renormalised;
            let row = match self.values {
                Values::Probabilities => {
                    let sum = self.probabilities(side, row)?.sum();
                    renormalised = row.iter().map(|x| x / sum).collect::<Vec<f64>>();
                    &renormalised[..]
                }
                Values::Logits => row,
            };
            (self.values)
                .distribution(row, transform)
                .map_err(|e| format!("{side}: {e}"))
        };
        let p: Distribution = law("p", p, &self.target)?;
        let qs = (qs.iter().enumerate())
            .map(|(i, q)| {
                let side = if qs.len() > 1 {
                    format!("q[{i}]")
                } else {
                    "q".into()
                };
                law(&side, q, &self.draft)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let drafts = DraftScheme::new(self.scheme, qs, self.n).map_err(|e| e.to_string())?;
        Problem::new(p, drafts).map_err(|e| e.to_string())
    }
}

/// Every row's result of `each`, on rayon's pool with the GIL released;
/// an error names its row (by its index in the leading shape), and a
/// panic becomes an error rather than crossing into Python.
fn per_row<T: Send>(
    py: Python<'_>,
    p: &Bound<'_, PyAny>,
    qs: &[Bound<'_, PyAny>],
    each: impl Fn(&[f64], &[Vec<f64>]) -> Result<T, String> + Sync,
) -> PyResult<(Vec<usize>, usize, Vec<T>)> {
    let p = Rows::extract("p", p)?;
    let qs = (qs.iter().enumerate())
        .map(|(i, q)| Rows::extract(&format!("q[{i}]"), q))
        .collect::<PyResult<Vec<_>>>()?;
    let shape = p.shape();
    let Some((&cols, leading)) = shape.split_last() else {
        return Err(MdsdError::new_err("p: a 0-d array; expected [..., V]"));
    };
    if let Some((i, q)) = qs.iter().enumerate().find(|(_, q)| q.shape() != shape) {
        return Err(MdsdError::new_err(format!(
            "q[{i}] has shape {:?}, p has {shape:?}: they must match",
            q.shape()
        )));
    }
    let rows: usize = leading.iter().product();
    let (p_values, q_values): (Slice, Vec<Slice>) =
        (p.values(), qs.iter().map(Rows::values).collect());
    let leading = leading.to_vec();
    let buffers = || {
        (
            Vec::with_capacity(cols),
            vec![Vec::with_capacity(cols); q_values.len()],
        )
    };
    let work = || {
        (0..rows)
            .into_par_iter()
            .map_init(buffers, |(p_row, q_rows), r| {
                p_values.fill(r, cols, p_row);
                for (q, out) in q_values.iter().zip(q_rows.iter_mut()) {
                    q.fill(r, cols, out);
                }
                each(p_row, q_rows).map_err(|e| if rows > 1 { format!("row {r}: {e}") } else { e })
            })
            .collect::<Result<Vec<T>, String>>()
    };
    let results = py
        .detach(|| catch_unwind(AssertUnwindSafe(work)))
        .map_err(|_| MdsdError::new_err("internal error (a panic in mdsd): please report it"))?
        .map_err(MdsdError::new_err)?;
    Ok((leading, cols, results))
}

#[allow(clippy::too_many_arguments)]
fn request(
    n: usize,
    scheme: &str,
    stored: &str,
    logits: bool,
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    draft: (Option<f64>, Option<usize>, Option<f64>),
) -> PyResult<Request> {
    let scheme: SchemeKind = scheme
        .parse()
        .map_err(|e: mdsd::CoreError| MdsdError::new_err(e.to_string()))?;
    let target = Transform {
        temperature,
        top_k,
        top_p,
    };
    // A draft setting replaces the shared one on the draft's side.
    let draft = Transform {
        temperature: draft.0.or(temperature),
        top_k: draft.1.or(top_k),
        top_p: draft.2.or(top_p),
    };
    for (side, transform) in [("", &target), ("draft_", &draft)] {
        transform
            .check()
            .map_err(|e| MdsdError::new_err(format!("{side}transform: {e}")))?;
    }
    let stored = match stored {
        "float16" => FloatType::Float16,
        "bfloat16" => FloatType::BFloat16,
        "float32" => FloatType::Float32,
        _ => FloatType::Float64,
    };
    Ok(Request {
        stored,
        n,
        scheme,
        values: if logits {
            Values::Logits
        } else {
            Values::Probabilities
        },
        target,
        draft,
    })
}

/// alpha* of every row: a float array of the leading shape.
#[pyfunction]
#[pyo3(signature = (p, qs, n, scheme, stored, logits, temperature, top_k, top_p, draft_temperature, draft_top_k, draft_top_p))]
#[allow(clippy::too_many_arguments)]
fn alpha_star<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    n: usize,
    scheme: &str,
    stored: &str,
    logits: bool,
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    draft_temperature: Option<f64>,
    draft_top_k: Option<usize>,
    draft_top_p: Option<f64>,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let request = request(
        n,
        scheme,
        stored,
        logits,
        temperature,
        top_k,
        top_p,
        (draft_temperature, draft_top_k, draft_top_p),
    )?;
    let (leading, _, values) = per_row(py, p, &qs, |p, qs| {
        if request.is_plain_iid() {
            // alpha* alone, by bucket selection on the rows as they are:
            // no distribution, no certificate.
            let (p, q) = (
                request.probabilities("p", p)?,
                request.probabilities("q", &qs[0])?,
            );
            return mdsd::bounds::optimal_acceptance_iid_many(p, q, &[request.n])
                .map(|alphas| alphas[0])
                .map_err(|e| e.to_string());
        }
        let problem = request.problem(p, qs)?;
        (mdsd::optimal_acceptance(&problem).map(|bound| bound.alpha_star))
            .map_err(|e| e.to_string())
    })?;
    let array = numpy::ndarray::ArrayD::from_shape_vec(leading, values)
        .map_err(|e| MdsdError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

/// H* of every row as a mask: a bool array `[..., V]`.
#[pyfunction]
#[pyo3(signature = (p, qs, n, scheme, stored, logits, temperature, top_k, top_p, draft_temperature, draft_top_k, draft_top_p))]
#[allow(clippy::too_many_arguments)]
fn certificate<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    n: usize,
    scheme: &str,
    stored: &str,
    logits: bool,
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    draft_temperature: Option<f64>,
    draft_top_k: Option<usize>,
    draft_top_p: Option<f64>,
) -> PyResult<Bound<'py, PyArrayDyn<bool>>> {
    let request = request(
        n,
        scheme,
        stored,
        logits,
        temperature,
        top_k,
        top_p,
        (draft_temperature, draft_top_k, draft_top_p),
    )?;
    let (mut leading, cols, masks) = per_row(py, p, &qs, |p, qs| {
        let problem = request.problem(p, qs)?;
        let bound = mdsd::optimal_acceptance(&problem).map_err(|e| e.to_string())?;
        problem
            .indicator(&bound.certificate)
            .map_err(|e| e.to_string())
    })?;
    leading.push(cols);
    let array = numpy::ndarray::ArrayD::from_shape_vec(leading, masks.concat())
        .map_err(|e| MdsdError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

#[pymodule]
fn _mdsd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(alpha_star, m)?)?;
    m.add_function(wrap_pyfunction!(certificate, m)?)?;
    m.add("MdsdError", m.py().get_type::<MdsdError>())?;
    Ok(())
}
