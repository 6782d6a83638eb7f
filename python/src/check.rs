//! What `check_verifier`'s sampling mode takes from Rust: the scheme's
//! draft tuples, the chi-square test with its power, the Wilson interval.

use mdsd::verify::seeded_stream;
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rayon::prelude::*;

use crate::errors::MdsdError;
use crate::interrupt::interruptible;
use crate::rows::{Settings, one_problem, request};

/// Draft tuples one call of `sample_drafts` may draw: `check_verifier`
/// asks for them a batch at a time, so this only refuses a count that
/// could not be held (8 bytes per token).
const DRAFT_TOKENS_LIMIT: u128 = 1 << 28;

/// Draft tuples `first..first + count` drawn by the scheme from one row's
/// draft model: an int64 array `[count, n]`. Tuple i draws from stream i
/// of the seed, so a run drawn in batches draws what one call would.
#[pyfunction]
pub(crate) fn sample_drafts<'py>(
    py: Python<'py>,
    p: &Bound<'py, PyAny>,
    qs: Vec<Bound<'py, PyAny>>,
    settings: Settings,
    count: u64,
    seed: u64,
    first: u64,
) -> PyResult<Bound<'py, numpy::PyArray2<i64>>> {
    let request = request(settings)?;
    let tokens = u128::from(count) * request.n as u128;
    if tokens > DRAFT_TOKENS_LIMIT || first.checked_add(count).is_none() {
        return Err(MdsdError::new_err(format!(
            "count={count}: {tokens} draft tokens in one call, above the limit of \
             {DRAFT_TOKENS_LIMIT}: draw them in batches (first= counts the tuples before)"
        )));
    }
    let problem = one_problem(py, p, &qs, &request, "drawing drafts")?;
    let sampler = mdsd::core::DraftSampler::new(problem.drafts());
    let n = problem.drafts().n();
    let flat = interruptible(py, tokens as usize, |progress| {
        (first..first + count)
            .into_par_iter()
            .map(|i| {
                progress.check_stop().map_err(|e| e.to_string())?;
                let mut rng = seeded_stream(seed, i);
                Ok(sampler.sample(&mut rng))
            })
            .collect::<Result<Vec<Vec<usize>>, String>>()
            .map(|tuples| tuples.concat().into_iter().map(|t| t as i64).collect())
    })?;
    let array = numpy::ndarray::Array2::from_shape_vec((count as usize, n), flat)
        .map_err(|e| MdsdError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

/// A level of the chi-square test, in (0, 1).
fn checked_level(level: f64) -> PyResult<f64> {
    match level > 0.0 && level < 1.0 {
        true => Ok(level),
        false => Err(MdsdError::new_err(format!(
            "level={level}: expected a probability in (0, 1)"
        ))),
    }
}

/// Pearson's chi-square test of output tokens, counted per token of the
/// vocabulary (`counts[y]` outputs were y), against p as `mdsd compare
/// --draws` makes it, with the smallest total variation it detects with
/// 99% power at `level`.
#[pyfunction]
pub(crate) fn goodness_of_fit<'py>(
    py: Python<'py>,
    counts: PyReadonlyArray1<'py, i64>,
    p: PyReadonlyArray1<'py, f64>,
    level: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let level = checked_level(level)?;
    let p = p.as_array().to_vec();
    let counts = counts.as_array();
    if counts.len() != p.len() {
        return Err(MdsdError::new_err(format!(
            "counts has {} entries, p has {}: one count per token",
            counts.len(),
            p.len()
        )));
    }
    let mut observed = std::collections::HashMap::<usize, u64>::new();
    for (token, &count) in counts.iter().enumerate() {
        let count = u64::try_from(count).map_err(|_| {
            MdsdError::new_err(format!(
                "counts[{token}] = {count}: a count is not negative"
            ))
        })?;
        if count > 0 {
            observed.insert(token, count);
        }
    }
    let draws: u64 = observed.values().sum();
    if draws == 0 {
        return Err(MdsdError::new_err("no outputs to test"));
    }
    let fit = mdsd::verify::goodness_of_fit(&observed, &p, draws);
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

/// The smallest total variation from p that the chi-square test of
/// `draws` outputs detects with 99% power at `level`: what it would report
/// of outputs that never fall on a token p gives no mass, known before
/// any is drawn.
#[pyfunction]
pub(crate) fn detectable_tv(p: PyReadonlyArray1<'_, f64>, draws: u64, level: f64) -> PyResult<f64> {
    let level = checked_level(level)?;
    if draws == 0 {
        return Err(MdsdError::new_err("draws=0: expected at least 1"));
    }
    let p = p.as_array().to_vec();
    // The bins depend on the expected counts only.
    let fit = mdsd::verify::goodness_of_fit(&Default::default(), &p, draws);
    Ok(mdsd::verify::detectable_tv(
        fit.degrees_of_freedom,
        draws,
        level,
        mdsd::verify::POWER,
    ))
}

/// The fewest draws at which the chi-square test over `cells` outcomes
/// detects a total variation of `tv` with `power` at `level` (every
/// expected count assumed at least 5).
#[pyfunction]
pub(crate) fn samples_needed(tv: f64, cells: usize, level: f64, power: f64) -> PyResult<u64> {
    let probability = |name: &str, x: f64| {
        if x > 0.0 && x < 1.0 {
            Ok(x)
        } else {
            Err(MdsdError::new_err(format!(
                "{name}={x}: expected a probability in (0, 1)"
            )))
        }
    };
    let (tv, level, power) = (
        probability("tv", tv)?,
        probability("level", level)?,
        probability("power", power)?,
    );
    if cells < 2 {
        return Err(MdsdError::new_err(format!(
            "{cells} possible outcomes: a test needs at least 2"
        )));
    }
    mdsd::verify::samples_needed(tv, cells, level, power).ok_or_else(|| {
        MdsdError::new_err(format!(
            "tv={tv}: no number of samples up to 2^62 detects it"
        ))
    })
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
