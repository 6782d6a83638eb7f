//! The extension module `mdsd._mdsd`: alpha* and its certificate H* for
//! rows of probabilities or logits given as numpy arrays `[..., V]`, one
//! value per row, computed on rayon's pool with the GIL released.
//! `mdsd/__init__.py` is the API users call; it turns tensors and other
//! array-likes into float32 or float64 arrays before they reach here.

use std::panic::{AssertUnwindSafe, catch_unwind};

use mdsd::core::ProbabilityRow;
use mdsd::core::{Solution, Solve};
use mdsd::logits::{FloatType, Values};
use mdsd::{
    ConvexSolver, Distribution, DraftScheme, FlowSolver, Formulation, LpSolver, Problem,
    SchemeKind, Transform, VerifierKind,
};
use numpy::{
    IntoPyArray, PyArray1, PyArrayDyn, PyReadonlyArray2, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
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

/// What every entry point takes besides the rows, as `mdsd/__init__.py`
/// passes it (a dict of these names).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Settings {
    n: usize,
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

fn request(settings: Settings) -> PyResult<Request> {
    let Settings {
        n,
        scheme,
        stored,
        logits,
        temperature,
        top_k,
        top_p,
        draft_temperature,
        draft_top_k,
        draft_top_p,
    } = settings;
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
        temperature: draft_temperature.or(temperature),
        top_k: draft_top_k.or(top_k),
        top_p: draft_top_p.or(top_p),
    };
    for (side, transform) in [("", &target), ("draft_", &draft)] {
        transform
            .check()
            .map_err(|e| MdsdError::new_err(format!("{side}transform: {e}")))?;
    }
    let stored = match stored.as_str() {
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
fn alpha_star<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let request = request(settings)?;
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
fn certificate<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
) -> PyResult<Bound<'py, PyArrayDyn<bool>>> {
    let request = request(settings)?;
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

/// One solve's summary (and for lp and flow its plan) as a dict.
fn solved<'py, S: Solve + Sync>(
    py: Python<'py>,
    solver: &S,
    problem: &Problem,
) -> PyResult<Bound<'py, PyDict>>
where
    S::Solution: Send,
{
    solver
        .check_settings()
        .map_err(|e| MdsdError::new_err(e.to_string()))?;
    let solution = py.detach(|| guarded(|| solver.solve(problem).map_err(|e| e.to_string())))?;
    let summary = solution.summary();
    let dict = PyDict::new(py);
    dict.set_item("alpha_star", summary.alpha_star)?;
    dict.set_item("acceptance", summary.acceptance)?;
    dict.set_item("certificate", summary.certificate.clone())?;
    dict.set_item("status", summary.status.name())?;
    dict.set_item("iterations", summary.iterations)?;
    dict.set_item("elapsed_ms", summary.elapsed.as_secs_f64() * 1e3)?;
    if let Some(plan) = solution.plan() {
        let law = plan.law();
        let outcomes: Vec<Vec<usize>> = law.outcomes.clone();
        let v = plan.vocab_size();
        let conditional: Vec<f64> = (0..law.len())
            .flat_map(|i| plan.conditional(i).to_vec())
            .collect();
        let conditional = numpy::ndarray::Array2::from_shape_vec((law.len(), v), conditional)
            .map_err(|e| MdsdError::new_err(e.to_string()))?;
        let plan_dict = PyDict::new(py);
        plan_dict.set_item("drafts", outcomes)?;
        plan_dict.set_item("probs", law.probs.clone().into_pyarray(py))?;
        plan_dict.set_item("conditional", conditional.into_pyarray(py))?;
        dict.set_item("plan", plan_dict)?;
    }
    Ok(dict)
}

/// The settings `solve` takes beyond the rows', by `mdsd solve`'s names
/// (unset ones take its defaults).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct SolveSettings {
    method: String,
    formulation: String,
    max_variables: Option<usize>,
    max_sets: Option<usize>,
    decomposed: bool,
    tolerance: Option<f64>,
}

/// One row solved by an exact method (lp, flow) or the convex programs.
#[pyfunction]
fn solve<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
    solver: SolveSettings,
) -> PyResult<Bound<'py, PyDict>> {
    let SolveSettings {
        method,
        formulation,
        max_variables,
        max_sets,
        decomposed,
        tolerance,
    } = solver;
    let request = request(settings)?;
    let (leading, _, mut problems) = per_row(py, p, &qs, |p, qs| request.problem(p, qs))?;
    if !leading.is_empty() {
        return Err(MdsdError::new_err(
            "solve takes one row: pick one with p[i]",
        ));
    }
    let problem = problems.remove(0);
    match method.as_str() {
        "lp" => {
            let formulation = match formulation.as_str() {
                "full" => Formulation::Full,
                "relaxed" => Formulation::Relaxed,
                other => {
                    return Err(MdsdError::new_err(format!(
                        "formulation {other:?}: expected \"full\" or \"relaxed\""
                    )));
                }
            };
            let lp = LpSolver::default()
                .with_formulation(formulation)
                .with_max_variables(max_variables.unwrap_or(mdsd::lp::DEFAULT_MAX_VARIABLES));
            solved(py, &lp, &problem)
        }
        "flow" => {
            let flow = FlowSolver::default()
                .with_max_sets(max_sets.unwrap_or(mdsd::flow::DEFAULT_MAX_SETS))
                .with_decomposition(decomposed);
            solved(py, &flow, &problem)
        }
        "convex" => {
            let tolerance = tolerance.unwrap_or(mdsd::convex::DEFAULT_TOLERANCE);
            solved(
                py,
                &ConvexSolver::default().with_tolerance(tolerance),
                &problem,
            )
        }
        other => Err(MdsdError::new_err(format!(
            "method {other:?}: expected \"lp\", \"flow\" or \"convex\""
        ))),
    }
}

/// A built-in verifier prepared for one target row and draft scheme: the
/// output law given drafts, draws from it, and its exact acceptance.
#[pyclass(name = "Verifier", frozen)]
struct PyVerifier {
    verifier: Box<dyn mdsd::Verifier>,
    problem: Problem,
    kind: VerifierKind,
}

/// A verifier's refusal, or a panic inside one, as `MdsdError`.
fn guarded<T>(work: impl FnOnce() -> Result<T, String>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(work))
        .map_err(|_| MdsdError::new_err("internal error (a panic in mdsd): please report it"))?
        .map_err(MdsdError::new_err)
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
    ) -> PyResult<Self> {
        let request = request(settings)?;
        let kind: VerifierKind = name
            .parse()
            .map_err(|e: mdsd::VerifyError| MdsdError::new_err(e.to_string()))?;
        let (leading, _, mut problems) = per_row(p.py(), p, &qs, |p, qs| request.problem(p, qs))?;
        if !leading.is_empty() {
            return Err(MdsdError::new_err(format!(
                "a Verifier takes one row: p has {} (pick one with p[i])",
                leading.iter().product::<usize>()
            )));
        }
        let problem = problems.remove(0);
        let verifier = guarded(|| kind.prepare(&problem).map_err(|e| e.to_string()))?;
        Ok(Self {
            verifier,
            problem,
            kind,
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

    /// One output token per row of `drafts` (`[B, n]` token ids), on
    /// rayon's pool with the GIL released; row b draws from stream b of
    /// the seed, so a seed gives the same tokens whatever the pool.
    #[pyo3(signature = (drafts, seed=None))]
    fn sample_batch<'py>(
        &self,
        py: Python<'py>,
        drafts: PyReadonlyArray2<'py, i64>,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let drafts = drafts.as_array().to_owned();
        let seed = seed.unwrap_or_else(rand::random);
        let tokens = py.detach(|| {
            guarded(|| {
                (drafts.rows().into_iter().collect::<Vec<_>>())
                    .into_par_iter()
                    .enumerate()
                    .map(|(b, row)| {
                        let ids = (row.iter())
                            .map(|&t| {
                                usize::try_from(t)
                                    .map_err(|_| format!("row {b}: draft token {t} is negative"))
                            })
                            .collect::<Result<Vec<usize>, String>>()?;
                        let mut rng = ChaCha8Rng::seed_from_u64(seed);
                        rng.set_stream(b as u64);
                        (self.verifier.sample(&ids, &mut rng))
                            .map(|t| t as i64)
                            .map_err(|e| format!("row {b}: {e}"))
                    })
                    .collect::<Result<Vec<i64>, String>>()
            })
        })?;
        Ok(tokens.into_pyarray(py))
    }

    /// P(output is one of the drafts): a closed form where one exists,
    /// else exact enumeration of the draft tuples; `None` past its limit.
    #[getter]
    fn acceptance(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        py.detach(|| {
            guarded(|| {
                match self
                    .kind
                    .exact_acceptance(&self.problem, &ConvexSolver::default())
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

#[pymodule]
fn _mdsd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyVerifier>()?;
    m.add_function(wrap_pyfunction!(alpha_star, m)?)?;
    m.add_function(wrap_pyfunction!(certificate, m)?)?;
    m.add_function(wrap_pyfunction!(solve, m)?)?;
    m.add("MdsdError", m.py().get_type::<MdsdError>())?;
    Ok(())
}
