//! What `check_verifier`'s sampling mode takes from Rust: the scheme's
//! draft tuples, the chi-square test with its power, the Wilson interval.

use numpy::{IntoPyArray, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::errors::MdsdError;
use crate::rows::{Settings, one_problem, request};

/// `count` draft tuples drawn by the scheme from one row's draft model:
/// an int64 array `[count, n]`. Tuple i draws from stream i of the seed.
#[pyfunction]
pub(crate) fn sample_drafts<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
    count: usize,
    seed: u64,
) -> PyResult<Bound<'py, numpy::PyArray2<i64>>> {
    let request = request(settings)?;
    let problem = one_problem(py, p, &qs, &request, "drawing drafts")?;
    let sampler = mdsd::core::DraftSampler::new(problem.drafts());
    let tuples: Vec<Vec<usize>> = py.detach(|| {
        (0..count)
            .into_par_iter()
            .map(|i| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(i as u64);
                sampler.sample(&mut rng)
            })
            .collect()
    });
    let n = tuples.first().map_or(request.n, Vec::len);
    let flat: Vec<i64> = tuples.concat().into_iter().map(|t| t as i64).collect();
    let array = numpy::ndarray::Array2::from_shape_vec((count, n), flat)
        .map_err(|e| MdsdError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

/// Pearson's chi-square test of output tokens against p (as `mdsd
/// compare --draws` makes it), with the smallest total variation it
/// detects with 99% power at `level`.
#[pyfunction]
pub(crate) fn goodness_of_fit<'py>(
    py: Python<'py>,
    outputs: PyReadonlyArray1<'py, i64>,
    p: PyReadonlyArray1<'py, f64>,
    level: f64,
) -> PyResult<Bound<'py, PyDict>> {
    if !(level > 0.0 && level < 1.0) {
        return Err(MdsdError::new_err(format!(
            "level {level}: expected a probability in (0, 1)"
        )));
    }
    let p = p.as_array();
    let p = p.as_slice().map_or_else(|| p.to_vec(), <[f64]>::to_vec);
    let mut counts = std::collections::HashMap::<usize, u64>::new();
    for (i, &token) in outputs.as_array().iter().enumerate() {
        match usize::try_from(token).ok().filter(|&t| t < p.len()) {
            Some(t) => *counts.entry(t).or_default() += 1,
            None => {
                return Err(MdsdError::new_err(format!(
                    "output {i} is token {token}, outside the vocabulary [0, {})",
                    p.len()
                )));
            }
        }
    }
    let draws = outputs.len() as u64;
    if draws == 0 {
        return Err(MdsdError::new_err("no outputs to test"));
    }
    let fit = mdsd::verify::goodness_of_fit(&counts, &p, draws);
    let dict = PyDict::new(py);
    dict.set_item("statistic", fit.statistic)?;
    dict.set_item("degrees_of_freedom", fit.degrees_of_freedom)?;
    dict.set_item("p_value", fit.p_value)?;
    dict.set_item(
        "detectable_tv",
        mdsd::verify::detectable_tv(fit.degrees_of_freedom, draws, level, mdsd::verify::POWER),
    )?;
    Ok(dict)
}

/// The Wilson 99% interval of `successes` in `trials`, as mdsd's reports
/// give every sampled acceptance.
#[pyfunction]
pub(crate) fn wilson_interval(successes: u64, trials: u64) -> PyResult<(f64, f64)> {
    if trials == 0 || successes > trials {
        return Err(MdsdError::new_err(format!(
            "{successes} successes in {trials} trials: expected 0 <= successes <= trials, trials > 0"
        )));
    }
    Ok(mdsd::verify::wilson_interval(
        successes as f64 / trials as f64,
        trials as f64,
        mdsd::verify::Z_99,
    ))
}
