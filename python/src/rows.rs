//! Rows as they come from Python: numpy arrays `[..., V]` read in place,
//! the settings every entry point takes, `per_row`, which runs a function
//! on every row on rayon's pool with the GIL released, and `check_fits`,
//! which refuses a result that cannot be allocated before the run.

use mdsd::core::{ProbabilityRow, Progress};
use mdsd::logits::{FloatType, Values};
use mdsd::verify::VerifyError;
use mdsd::{Distribution, DraftScheme, Problem, SchemeKind, Transform};
use numpy::ndarray::{ArrayView2, ArrayViewD, Axis};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use rayon::prelude::*;

use crate::errors::MdsdError;
use crate::interrupt::interruptible;

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

    /// The entries, row after row in the array's logical (C) order:
    /// borrowed where the array is C-contiguous, else read a row at a time
    /// through the array's strides. A Fortran-ordered or transposed array
    /// is contiguous too, but its memory runs down the columns: read as it
    /// lies it would give other rows; a broadcast view holds far fewer
    /// entries than its shape, so it is never copied whole.
    fn values(&self) -> Slice<'_> {
        match self {
            Rows::F64(a) => match a.as_slice() {
                Ok(values) if a.is_c_contiguous() => Slice::F64(values),
                _ => Slice::View64(a.as_array()),
            },
            Rows::F32(a) => match a.as_slice() {
                Ok(values) if a.is_c_contiguous() => Slice::F32(values),
                _ => Slice::View32(a.as_array()),
            },
        }
    }
}

/// The entries of either type, contiguous or behind strides, so that rows
/// are widened to f64 one at a time as they are used.
enum Slice<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    View32(ArrayViewD<'a, f32>),
    View64(ArrayViewD<'a, f64>),
}

impl Slice<'_> {
    /// Row `r` of `cols` entries as f64: borrowed where the entries are
    /// contiguous f64 already, else gathered into `out` (a buffer a task
    /// reuses from row to row).
    fn row<'s>(&'s self, r: usize, cols: usize, out: &'s mut Vec<f64>) -> &'s [f64] {
        let range = r * cols..(r + 1) * cols;
        out.clear();
        match self {
            Slice::F64(x) => return &x[range],
            Slice::F32(x) => out.extend(x[range].iter().map(|&v| f64::from(v))),
            Slice::View64(a) => out.extend(lane(a, r)),
            Slice::View32(a) => out.extend(lane(a, r).map(f64::from)),
        }
        out
    }
}

/// Row `r` of an array `[..., V]` (its leading axes flattened in C order):
/// the last axis at the leading index `r` unravels to.
fn lane<'a, T: Copy>(a: &ArrayViewD<'a, T>, r: usize) -> impl Iterator<Item = T> + use<'a, T> {
    let leading = &a.shape()[..a.ndim() - 1];
    let mut index = vec![0; leading.len()];
    let mut rest = r;
    for (axis, &extent) in leading.iter().enumerate().rev() {
        index[axis] = rest % extent;
        rest /= extent;
    }
    let mut view = a.clone();
    for &i in &index {
        view = view.index_axis_move(Axis(0), i);
    }
    view.into_iter().copied()
}

/// What both functions take besides the rows.
pub(crate) struct Request {
    pub(crate) n: usize,
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
    pub(crate) fn probabilities<'a>(
        &self,
        side: &str,
        row: &'a [f64],
    ) -> Result<ProbabilityRow<'a>, String> {
        ProbabilityRow::within(row, self.stored.sum_tolerance(row.len()))
            .map_err(|e| format!("{side}: {e}"))
    }

    /// Plain i.i.d. probability rows, whose alpha* needs no distribution
    /// built: the closed form reads the rows where they lie.
    pub(crate) fn is_plain_iid(&self) -> bool {
        self.scheme == SchemeKind::Iid
            && self.values == Values::Probabilities
            && self.target.is_identity()
            && self.draft.is_identity()
    }

    /// The target's and draft models' laws of one row, transformed.
    pub(crate) fn laws(
        &self,
        p: &[f64],
        qs: &[&[f64]],
    ) -> Result<(Distribution, Vec<Distribution>), String> {
        let law = |side: &str, row: &[f64], transform: &Transform| {
            let transformed = match self.values {
                // Checked within the stored type's tolerance, then
                // renormalised in the one copy the law needs.
                Values::Probabilities => {
                    let law = self.probabilities(side, row)?.to_distribution();
                    if transform.is_identity() {
                        Ok(law)
                    } else {
                        transform.apply(&law)
                    }
                }
                Values::Logits => Values::Logits.distribution(row, transform),
            };
            transformed.map_err(|e| format!("{side}: {e}"))
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
        Ok((p, qs))
    }

    pub(crate) fn problem(&self, p: &[f64], qs: &[&[f64]]) -> Result<Problem, String> {
        let (p, qs) = self.laws(p, qs)?;
        assembled(p, qs, self.scheme, self.n)
    }
}

/// The problem of laws already built, for a scheme and number of drafts
/// (independent drafts take the laws in turn, draft i the (i mod m)-th).
pub(crate) fn assembled(
    p: Distribution,
    qs: Vec<Distribution>,
    scheme: SchemeKind,
    n: usize,
) -> Result<Problem, String> {
    let drafts = match scheme {
        SchemeKind::Independent => DraftScheme::independent_cycled(&qs, n),
        _ => DraftScheme::new(scheme, qs, n),
    }
    .map_err(|e| e.to_string())?;
    Problem::new(p, drafts).map_err(|e| e.to_string())
}

/// The rows of `p` and of each of `qs`, and their one shape `[..., V]`.
fn sides<'py>(
    p: &Bound<'py, PyAny>,
    qs: &[Bound<'py, PyAny>],
) -> PyResult<(Rows<'py>, Vec<Rows<'py>>, Vec<usize>)> {
    let p = Rows::extract("p", p)?;
    let qs = (qs.iter().enumerate())
        .map(|(i, q)| Rows::extract(&format!("q[{i}]"), q))
        .collect::<PyResult<Vec<_>>>()?;
    let shape = p.shape();
    if let Some((i, q)) = qs.iter().enumerate().find(|(_, q)| q.shape() != shape) {
        return Err(MdsdError::new_err(format!(
            "q[{i}] has shape {:?}, p has {shape:?}: they must match",
            q.shape()
        )));
    }
    Ok((p, qs, shape))
}

/// Every row's result of `each` (given the row's index in the flattened
/// leading shape), on rayon's pool with the GIL released and Ctrl-C
/// watched ([`interruptible`]);
/// an error names its row (by its index in the leading shape), and a
/// panic becomes an error rather than crossing into Python.
pub(crate) fn per_row<T: Send>(
    py: Python<'_>,
    p: &Bound<'_, PyAny>,
    qs: &[Bound<'_, PyAny>],
    each: impl Fn(usize, &[f64], &[&[f64]]) -> Result<T, String> + Sync,
) -> PyResult<(Vec<usize>, usize, Vec<T>)> {
    let (p, qs, shape) = sides(p, qs)?;
    let Some((&cols, leading)) = shape.split_last() else {
        return Err(MdsdError::new_err("p: a 0-d array; expected [..., V]"));
    };
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
    let entries = rows.saturating_mul(cols).saturating_mul(1 + q_values.len());
    let work = |progress: &dyn Progress| {
        (0..rows)
            .into_par_iter()
            .map_init(buffers, |(p_buffer, q_buffers), r| {
                progress.check_stop().map_err(|e| e.to_string())?;
                let p_row = p_values.row(r, cols, p_buffer);
                let q_rows: Vec<&[f64]> = (q_values.iter().zip(q_buffers.iter_mut()))
                    .map(|(q, buffer)| q.row(r, cols, buffer))
                    .collect();
                each(r, p_row, &q_rows)
                    .map_err(|e| if rows > 1 { format!("row {r}: {e}") } else { e })
            })
            .collect::<Result<Vec<T>, String>>()
    };
    check_fits::<T>(rows, "the rows of p")?;
    let results = interruptible(py, entries, work)?;
    Ok((leading, cols, results))
}

/// The problem of the one row `p` and `qs` hold; `what` (a Verifier,
/// solve, ...) names the caller when they hold several rows.
pub(crate) fn one_problem(
    py: Python<'_>,
    p: &Bound<'_, PyAny>,
    qs: &[Bound<'_, PyAny>],
    request: &Request,
    what: &str,
) -> PyResult<Problem> {
    let (leading, _, mut problems) = per_row(py, p, qs, |_, p, qs| request.problem(p, qs))?;
    if !leading.is_empty() {
        return Err(MdsdError::new_err(format!(
            "{what} takes one row: p has {} (pick one with p[i])",
            leading.iter().product::<usize>()
        )));
    }
    Ok(problems.remove(0))
}

/// The rows of `p` and of each of `qs` (`[..., V]`, the same shape) as the
/// library's pairs, widened to f64 in their logical order (any layout
/// numpy can express), probability rows checked within the tolerance of
/// the type they were `stored` in and renormalised, as a data file's are;
/// with the rows' leading shape.
pub(crate) fn stored_pairs(
    p: &Bound<'_, PyAny>,
    qs: &[Bound<'_, PyAny>],
    settings: &Settings,
) -> PyResult<(Vec<usize>, mdsd::logits::Pairs)> {
    let (p, qs, shape) = sides(p, qs)?;
    let Some((&cols, leading)) = shape.split_last() else {
        return Err(MdsdError::new_err("p: a 0-d array; expected [..., V]"));
    };
    let rows: usize = leading.iter().product();
    let entries = (rows as u128) * (cols as u128) * (1 + qs.len() as u128);
    if entries > EVALUATED_ENTRIES {
        return Err(MdsdError::new_err(format!(
            "p and q hold {entries} entries, above the {EVALUATED_ENTRIES} evaluate holds in \
             memory as float64: evaluate slices of the rows, or save them for evaluate_file, \
             which reads a window at a time"
        )));
    }
    let float = settings.stored_type();
    let stored = |side: &Rows| -> PyResult<mdsd::logits::StoredRows> {
        let values: Vec<f64> = match side {
            Rows::F64(a) => a.as_array().iter().copied().collect(),
            Rows::F32(a) => a.as_array().iter().map(|&x| f64::from(x)).collect(),
        };
        let rows = mdsd::logits::Matrix::new(rows, cols, values)
            .map_err(|e| MdsdError::new_err(e.to_string()))?;
        Ok(mdsd::logits::StoredRows {
            rows,
            float,
            shape: vec![rows_of(&shape), cols],
        })
    };
    let options = mdsd::logits::ReadOptions {
        values: Some(settings.values()),
        ..Default::default()
    };
    let drafts = qs.iter().map(stored).collect::<PyResult<Vec<_>>>()?;
    let pairs = mdsd::logits::stored_pairs(stored(&p)?, drafts, "the arrays".into(), &options)
        .map_err(|e| MdsdError::new_err(in_python(e)))?;
    Ok((leading.to_vec(), pairs))
}

/// The entries (of every side) `evaluate` copies into memory as f64 at
/// most: 8 GiB.
const EVALUATED_ENTRIES: u128 = 1 << 30;

/// The rows of an array of `shape` (its leading axes' product).
fn rows_of(shape: &[usize]) -> usize {
    shape[..shape.len().saturating_sub(1)].iter().product()
}

/// A reading error as Python names the arrays: `p` and `q`, not the
/// command line's target and draft.
fn in_python(error: mdsd::logits::LogitsError) -> String {
    match error {
        mdsd::logits::LogitsError::InArgument { role, source } => {
            format!("{}: {source}", if role == "target" { "p" } else { "q" })
        }
        other => other.to_string(),
    }
}

/// What every entry point takes besides the rows, as `mdsd/__init__.py`
/// passes it (a dict of these names).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct Settings {
    pub(crate) n: usize,
    scheme: String,
    /// The float type the caller's rows were stored in.
    stored: String,
    logits: bool,
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    draft_temperature: Option<f64>,
    draft_top_k: Option<usize>,
    draft_top_p: Option<f64>,
}

impl Settings {
    /// The float type the caller's rows were stored in.
    fn stored_type(&self) -> FloatType {
        match self.stored.as_str() {
            "float16" => FloatType::Float16,
            "bfloat16" => FloatType::BFloat16,
            "float32" => FloatType::Float32,
            _ => FloatType::Float64,
        }
    }

    fn values(&self) -> Values {
        if self.logits {
            Values::Logits
        } else {
            Values::Probabilities
        }
    }

    /// The library's input of these settings: what the rows hold and the
    /// transforms of each side (the rows themselves come apart).
    pub(crate) fn input(&self) -> mdsd::input::Input {
        mdsd::input::Input {
            logits: self.logits,
            probabilities: !self.logits,
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            draft_temperature: self.draft_temperature,
            draft_top_k: self.draft_top_k,
            draft_top_p: self.draft_top_p,
            ..Default::default()
        }
    }
}

pub(crate) fn request(settings: Settings) -> PyResult<Request> {
    // The library's input of these settings gives each side's transform
    // (a draft setting replaces the shared one) and checks them by name.
    let input = settings.input();
    (input.check_transforms()).map_err(|e| MdsdError::new_err(crate::errors::in_python(e)))?;
    let scheme: SchemeKind = (settings.scheme.parse())
        .map_err(|e: mdsd::CoreError| MdsdError::new_err(e.to_string()))?;
    Ok(Request {
        stored: settings.stored_type(),
        n: settings.n,
        scheme,
        values: settings.values(),
        target: input.transform(mdsd::core::Side::Target),
        draft: input.transform(mdsd::core::Side::Draft),
    })
}

/// Refuses, before a run starts, a result of `count` values of `T` that
/// cannot be allocated now (`what` names it): a huge broadcast view can
/// ask for more than memory holds, which would abort the interpreter.
pub(crate) fn check_fits<T>(count: usize, what: &str) -> PyResult<()> {
    let mut probe: Vec<T> = Vec::new();
    probe.try_reserve_exact(count).map_err(|_| {
        MdsdError::new_err(format!(
            "{what}: {count} results of {} bytes each do not fit in memory; give fewer rows",
            std::mem::size_of::<T>()
        ))
    })
}

/// Row `b` of a `[B, n]` array of draft token ids, read in place into
/// `ids`; a negative id is refused (by its row, in the caller's loop, so
/// that a long batch is checked where a stop is heard).
pub(crate) fn row_ids(
    drafts: ArrayView2<'_, i64>,
    b: usize,
    ids: &mut Vec<usize>,
) -> Result<(), VerifyError> {
    for &t in drafts.row(b) {
        ids.push(usize::try_from(t).map_err(|_| VerifyError::NegativeToken(t))?);
    }
    Ok(())
}
