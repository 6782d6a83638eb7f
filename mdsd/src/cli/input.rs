//! Reading the `-p` / `-q` arguments: an inline list, a `.npy` file or a
//! `.json` file, each one row or several.

use std::fs::File;
use std::path::Path;

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;

use super::CliError;

/// The rows an argument holds: one for an inline list or a 1-D file, one per
/// row of a 2-D file.
pub fn read_rows(arg: &str, spec: &str) -> Result<Vec<Vec<f64>>, CliError> {
    let bad = |message: String| CliError::Input {
        arg: arg.to_string(),
        message,
    };
    let lower = spec.to_ascii_lowercase();
    if lower.ends_with(".npy") {
        read_npy(spec).map_err(bad)
    } else if lower.ends_with(".json") {
        read_json(spec).map_err(bad)
    } else {
        parse_inline(spec).map(|row| vec![row]).map_err(bad)
    }
}

fn parse_inline(spec: &str) -> Result<Vec<f64>, String> {
    spec.split(',')
        .enumerate()
        .map(|(i, item)| {
            item.trim().parse::<f64>().map_err(|_| {
                format!(
                    "item {i} ({:?}) is not a number; expected a comma-separated list, a .npy or a .json file",
                    item.trim()
                )
            })
        })
        .collect()
}

fn rows_of(array: ArrayD<f64>, path: &str) -> Result<Vec<Vec<f64>>, String> {
    match array.ndim() {
        1 => Ok(vec![array.iter().copied().collect()]),
        2 => Ok(array
            .outer_iter()
            .map(|row| row.iter().copied().collect())
            .collect()),
        d => Err(format!(
            "{path} has {d} dimensions; expected 1 (one problem) or 2 (one problem per row)"
        )),
    }
}

fn read_npy(path: &str) -> Result<Vec<Vec<f64>>, String> {
    let open = || File::open(Path::new(path)).map_err(|e| format!("cannot open {path}: {e}"));
    let array = match ArrayD::<f64>::read_npy(open()?) {
        Ok(a) => a,
        Err(f64_error) => match ArrayD::<f32>::read_npy(open()?) {
            Ok(a) => a.mapv(f64::from),
            Err(_) => {
                return Err(format!(
                    "cannot read {path} as a float64 or float32 .npy array: {f64_error}"
                ));
            }
        },
    };
    rows_of(array, path)
}

fn read_json(path: &str) -> Result<Vec<Vec<f64>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path} is not valid JSON: {e}"))?;
    let number_row = |row: &serde_json::Value, r: usize| -> Result<Vec<f64>, String> {
        row.as_array()
            .ok_or_else(|| format!("{path}: row {r} is not an array"))?
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_f64()
                    .ok_or_else(|| format!("{path}: row {r} item {i} ({x}) is not a number"))
            })
            .collect()
    };
    let items = value
        .as_array()
        .ok_or_else(|| format!("{path} must hold an array of numbers or an array of arrays"))?;
    if items.first().is_some_and(serde_json::Value::is_array) {
        items
            .iter()
            .enumerate()
            .map(|(r, row)| number_row(row, r))
            .collect()
    } else {
        number_row(&value, 0).map(|row| vec![row])
    }
}
