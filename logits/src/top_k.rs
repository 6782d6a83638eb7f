//! Rows that hold only each side's top k entries, with their token ids, as
//! serving engines return them (vLLM's logprobs, 20 by default): alpha* of
//! such rows is an interval (`mdsd_bounds::optimal_acceptance_iid_interval`).
//!
//! Arrays, `[rows, k]` each (k may differ between the sides): per side,
//! `p_ids` with `p` (probabilities) or `p_logprobs`, and `q_ids` with `q`
//! or `q_logprobs`; or the sparse format's `ids` with `p` and `q` and no
//! tail arrays (both sides known on the same ids).

use std::path::Path;

use crate::LogitsError;
use crate::read::{Arrays, is_top_k, with_arrays};

/// One row: each side's known (token id, probability) entries.
#[derive(Debug, Clone, PartialEq)]
pub struct TopKRow {
    pub target: Vec<(usize, f64)>,
    pub draft: Vec<(usize, f64)>,
}

/// The rows of a top-k file.
#[derive(Debug, Clone, PartialEq)]
pub struct TopKRows {
    pub rows: Vec<TopKRow>,
    /// k of the target and of the draft.
    pub kept: (usize, usize),
    pub source: String,
}

/// Reads the top-k rows of `path` (a `.npz`, `.safetensors` or directory
/// of `.npy` files).
pub fn read_top_k(path: impl AsRef<Path>) -> Result<TopKRows, LogitsError> {
    with_arrays(path.as_ref(), top_k_rows)
}

fn top_k_rows(arrays: &mut dyn Arrays) -> Result<TopKRows, LogitsError> {
    let names = arrays.names();
    let path = arrays.path().to_string();
    if !is_top_k(&names) {
        return Err(LogitsError::MissingArray {
            path,
            role: "top-k ids",
            expected: "p_ids and q_ids (or ids without p_tail/q_tail)".into(),
            found: names.join(", "),
        });
    }
    let has = |name: &str| names.iter().any(|n| n == name);
    let mut side = |side: &'static str,
                    ids_name: &str|
     -> Result<Vec<Vec<(usize, f64)>>, LogitsError> {
        let (values_name, logprobs) = if has(&format!("{side}_logprobs")) {
            (format!("{side}_logprobs"), true)
        } else if has(side) {
            (side.to_string(), false)
        } else {
            return Err(LogitsError::MissingArray {
                path: path.clone(),
                role: if side == "p" {
                    "target top-k values"
                } else {
                    "draft top-k values"
                },
                expected: format!("{side} (probabilities) or {side}_logprobs"),
                found: names.join(", "),
            });
        };
        let (shape, ids) = arrays.integers(ids_name)?;
        let values = arrays.floats(&values_name)?;
        let shape_error = |array: &str, shape: Vec<usize>, expected: String| LogitsError::Shape {
            path: path.clone(),
            array: array.to_string(),
            shape,
            expected,
        };
        let [rows, kept] = shape[..] else {
            return Err(shape_error(ids_name, shape, "[rows, k]".into()));
        };
        if values.shape != shape {
            return Err(shape_error(
                &values_name,
                values.shape,
                format!("[{rows}, {kept}] as `{ids_name}`"),
            ));
        }
        let mut out = Vec::with_capacity(rows);
        for (row, (ids, values)) in ids
            .chunks_exact(kept.max(1))
            .zip(values.data.chunks_exact(kept.max(1)))
            .enumerate()
        {
            let mut entries = Vec::with_capacity(kept);
            for (&id, &value) in ids.iter().zip(values) {
                let bad = |message: String| LogitsError::TopKEntry {
                    path: path.clone(),
                    array: values_name.clone(),
                    row,
                    message,
                };
                let id =
                    usize::try_from(id).map_err(|_| bad(format!("token id {id} is negative")))?;
                let probability = if logprobs { value.exp() } else { value };
                if !(0.0..=1.0).contains(&probability) {
                    return Err(bad(format!(
                        "token {id} has {} {value}, not a probability",
                        if logprobs { "logprob" } else { "value" }
                    )));
                }
                entries.push((id, probability));
            }
            out.push(entries);
        }
        Ok(out)
    };
    let (target_ids, draft_ids) = if has("p_ids") {
        ("p_ids", "q_ids")
    } else {
        ("ids", "ids")
    };
    let target = side("p", target_ids)?;
    let draft = side("q", draft_ids)?;
    if target.len() != draft.len() {
        return Err(LogitsError::Shape {
            path,
            array: draft_ids.to_string(),
            shape: vec![draft.len()],
            expected: format!("{} rows, as the target", target.len()),
        });
    }
    let kept = (
        target.first().map_or(0, Vec::len),
        draft.first().map_or(0, Vec::len),
    );
    Ok(TopKRows {
        rows: target
            .into_iter()
            .zip(draft)
            .map(|(target, draft)| TopKRow { target, draft })
            .collect(),
        kept,
        source: path,
    })
}
