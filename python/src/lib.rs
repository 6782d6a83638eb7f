//! The extension module `mdsd._mdsd`: alpha* and its certificate H* for
//! rows of probabilities or logits given as numpy arrays `[..., V]`, one
//! value per row, computed on rayon's pool with the GIL released; the
//! solvers, the built-in verifiers, what `check_verifier` and `evaluate`
//! need; live model pairs behind callbacks and their blocks of drafts.
//! `mdsd/__init__.py` is the API users call; it turns tensors and
//! other array-likes into float32 or float64 arrays before they reach here.

mod check;
mod errors;
mod evaluate;
mod interrupt;
mod live;
mod rows;
mod rules;
mod solvers;
mod tabled_laws;
mod verifier;

use pyo3::prelude::*;

#[pymodule]
fn _mdsd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<verifier::PyVerifier>()?;
    m.add_class::<rules::PyOptimalRules>()?;
    m.add_class::<evaluate::PyDataFile>()?;
    m.add_class::<live::PyCallbackModel>()?;
    m.add_class::<live::PyMarkovLaws>()?;
    m.add_class::<tabled_laws::PyTabledLaws>()?;
    m.add_class::<tabled_laws::PyDraftBlocks>()?;
    m.add_class::<tabled_laws::PyOutputsRead>()?;
    m.add("SEQUENCE_LIMIT", mdsd::verify::block::SEQUENCE_LIMIT)?;
    m.add_function(wrap_pyfunction!(solvers::alpha_star, m)?)?;
    m.add_function(wrap_pyfunction!(solvers::certificate, m)?)?;
    m.add_function(wrap_pyfunction!(solvers::solve, m)?)?;
    m.add_function(wrap_pyfunction!(check::sample_drafts, m)?)?;
    m.add_function(wrap_pyfunction!(check::goodness_of_fit, m)?)?;
    m.add_function(wrap_pyfunction!(check::detectable_tv, m)?)?;
    m.add_function(wrap_pyfunction!(check::wilson_interval, m)?)?;
    m.add_function(wrap_pyfunction!(check::samples_needed, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate::evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate::evaluate_file, m)?)?;
    m.add_function(wrap_pyfunction!(live::block_efficiency, m)?)?;
    m.add_function(wrap_pyfunction!(verifier::verifier_settings, m)?)?;
    m.add("MdsdError", m.py().get_type::<errors::MdsdError>())?;
    Ok(())
}
