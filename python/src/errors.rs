//! `MdsdError`, the one exception the module raises, and `guarded`,
//! which turns a refusal or a panic inside mdsd into it.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    _mdsd,
    MdsdError,
    PyValueError,
    "What mdsd refused, with the one-line message the command line gives."
);

/// What a panic inside mdsd becomes.
pub(crate) const PANICKED: &str = "internal error (a panic in mdsd): please report it";

/// A refusal, or a panic inside mdsd, as `MdsdError`: a panic never
/// crosses into Python.
pub(crate) fn guarded<T>(work: impl FnOnce() -> Result<T, String>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(work))
        .map_err(|_| MdsdError::new_err(PANICKED))?
        .map_err(MdsdError::new_err)
}

/// A library error in Python's words: a setting by its keyword (`max_gap=`,
/// not the command line's `--max-gap`), anything else as it reads.
pub(crate) fn in_python(error: mdsd::Error) -> String {
    match error {
        mdsd::Error::Setting {
            flag,
            value,
            expected,
        } => {
            let keyword = flag.trim_start_matches('-').replace('-', "_");
            format!("{keyword}={value} is invalid: it must be {expected}")
        }
        other => other.to_string(),
    }
}
