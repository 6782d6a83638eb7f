//! alpha*, its certificate and the solvers' solutions of rows.

use mdsd::solving::{SolveMethod, Solved};
use mdsd::{Formulation, Problem};
use numpy::{IntoPyArray, PyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{MdsdError, guarded, in_python};
use crate::rows::{Settings, one_problem, per_row, request};

/// alpha* of every row: a float array of the leading shape.
#[pyfunction]
pub(crate) fn alpha_star<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let request = request(settings)?;
    let (leading, _, values) = per_row(py, p, &qs, |_, p, qs| {
        if request.is_plain_iid() {
            // alpha* alone, by bucket selection on the rows as they are:
            // no distribution, no certificate.
            let (p, q) = (
                request.probabilities("p", p)?,
                request.probabilities("q", qs[0])?,
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
pub(crate) fn certificate<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
) -> PyResult<Bound<'py, PyArrayDyn<bool>>> {
    let request = request(settings)?;
    let (mut leading, cols, masks) = per_row(py, p, &qs, |_, p, qs| {
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

/// One solve's summary (and for lp and flow its plan) as a dict, H* as a
/// bool mask of the vocabulary (a list of its tokens would cost a Python
/// int each, and numpy a pass over them to make the mask); the plan by
/// the keys of `mdsd solve --plan`'s JSON.
fn solved<'py>(
    py: Python<'py>,
    problem: &Problem,
    method: &SolveMethod,
) -> PyResult<Bound<'py, PyDict>> {
    let Solved { summary, plan } = py.detach(|| {
        guarded(|| mdsd::solving::solve_problem(problem, method, 0).map_err(in_python))
    })?;
    let dict = PyDict::new(py);
    dict.set_item("alpha_star", summary.alpha_star)?;
    dict.set_item("acceptance", summary.acceptance)?;
    dict.set_item("gap", summary.gap())?;
    let mask =
        (problem.indicator(&summary.certificate)).map_err(|e| MdsdError::new_err(e.to_string()))?;
    dict.set_item("certificate", mask.into_pyarray(py))?;
    dict.set_item("status", summary.status.name())?;
    dict.set_item("iterations", summary.iterations)?;
    dict.set_item("elapsed_ms", summary.elapsed.as_secs_f64() * 1e3)?;
    if let Some(plan) = plan {
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
pub(crate) struct SolveSettings {
    method: String,
    formulation: String,
    max_variables: Option<usize>,
    max_sets: Option<usize>,
    decomposed: bool,
    max_gap: Option<f64>,
    budget_ms: Option<f64>,
}

/// One row solved by an exact method (lp, flow) or the convex programs.
#[pyfunction]
pub(crate) fn solve<'py>(
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
        max_gap,
        budget_ms,
    } = solver;
    let problem = one_problem(py, p, &qs, &request(settings)?, "solve")?;
    let method = match method.as_str() {
        "lp" => SolveMethod::Lp {
            formulation: match formulation.as_str() {
                "full" => Formulation::Full,
                "relaxed" => Formulation::Relaxed,
                other => {
                    return Err(MdsdError::new_err(format!(
                        "formulation {other:?}: expected \"full\" or \"relaxed\""
                    )));
                }
            },
            max_variables: max_variables.unwrap_or(mdsd::lp::DEFAULT_MAX_VARIABLES),
        },
        "flow" => SolveMethod::Flow {
            max_sets: max_sets.unwrap_or(mdsd::flow::DEFAULT_MAX_SETS),
            decomposed,
        },
        "convex" => SolveMethod::Convex {
            max_gap: max_gap.unwrap_or(mdsd::convex::DEFAULT_TOLERANCE),
            budget_ms,
        },
        other => {
            return Err(MdsdError::new_err(format!(
                "method {other:?}: expected \"lp\", \"flow\" or \"convex\""
            )));
        }
    };
    solved(py, &problem, &method)
}
