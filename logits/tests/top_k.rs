//! Rows of top-k entries only: both layouts read, the full-row reader
//! sends them here, and bad entries are named.

use mdsd_logits::{LogitsError, ReadOptions, read_pairs, read_top_k};
use ndarray::{Array2, array};
use ndarray_npy::NpzWriter;

fn write(
    dir: &std::path::Path,
    arrays: &[(&str, Array2<f64>)],
    ids: &[(&str, Array2<i32>)],
) -> std::path::PathBuf {
    let path = dir.join("rows.npz");
    let mut out = NpzWriter::new(std::fs::File::create(&path).unwrap());
    for (name, a) in arrays {
        out.add_array(*name, a).unwrap();
    }
    for (name, a) in ids {
        out.add_array(*name, a).unwrap();
    }
    out.finish().unwrap();
    path
}

#[test]
fn shared_and_per_side_ids_are_read() {
    let dir = tempfile::tempdir().unwrap();
    // The sparse format's ids, p and q without tails: both sides known on
    // the same ids.
    let path = write(
        dir.path(),
        &[("p", array![[0.5, 0.2]]), ("q", array![[0.3, 0.4]])],
        &[("ids", array![[7, 2]])],
    );
    let rows = read_top_k(&path).unwrap();
    assert_eq!(rows.rows[0].target, vec![(7, 0.5), (2, 0.2)]);
    assert_eq!(rows.rows[0].draft, vec![(7, 0.3), (2, 0.4)]);
    assert!(matches!(
        read_pairs(&path, &ReadOptions::default()),
        Err(LogitsError::TopKOnly { .. })
    ));
    // Per side, log-probabilities.
    let path = write(
        dir.path(),
        &[
            ("p_logprobs", array![[0.5f64.ln()]]),
            ("q_logprobs", array![[0.25f64.ln()]]),
        ],
        &[("p_ids", array![[1]]), ("q_ids", array![[4]])],
    );
    let rows = read_top_k(&path).unwrap();
    assert!((rows.rows[0].target[0].1 - 0.5).abs() < 1e-15 && rows.rows[0].draft[0].0 == 4);
    assert_eq!(rows.kept, (1, 1));
}

#[test]
fn bad_entries_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let error = |arrays: &[(&str, Array2<f64>)], ids: &[(&str, Array2<i32>)]| {
        read_top_k(write(dir.path(), arrays, ids))
            .unwrap_err()
            .to_string()
    };
    let message = error(
        &[("p", array![[0.5]]), ("q", array![[0.5]])],
        &[("p_ids", array![[-3]]), ("q_ids", array![[0]])],
    );
    assert!(
        message.contains("token id -3 is negative") && message.contains("row 0"),
        "{message}"
    );
    let message = error(
        &[("p_logprobs", array![[0.2]]), ("q", array![[0.5]])],
        &[("p_ids", array![[1]]), ("q_ids", array![[0]])],
    );
    assert!(message.contains("logprob 0.2"), "{message}");
    let message = error(
        &[("p", array![[0.5, 0.1]]), ("q", array![[0.5]])],
        &[("p_ids", array![[1]]), ("q_ids", array![[0]])],
    );
    assert!(
        message.contains("`p`") && message.contains("[1, 1]"),
        "{message}"
    );
}
