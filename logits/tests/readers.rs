//! The readers against files written by numpy and by Python's safetensors
//! (`scripts/make_fixtures.py`): every dtype and container reads back the
//! values the script recorded, and malformed files give typed errors.

use std::path::{Path, PathBuf};

use mdsd_logits::{Layout, LogitsError, ReadOptions, Values, builtin_sample, read_pairs};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn expected() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn matrix(value: &serde_json::Value) -> Vec<Vec<f64>> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn every_fixture_reads_back_what_python_wrote() {
    let expected = expected();
    let cases = expected.as_object().unwrap();
    assert_eq!(cases.len(), 11, "fixtures: {:?}", cases.keys());
    for (name, case) in cases {
        let pairs = read_pairs(fixtures().join(name), &ReadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let logits = case["values"] == "logits";
        assert_eq!(
            pairs.values,
            if logits {
                Values::Logits
            } else {
                Values::Probabilities
            },
            "{name}"
        );
        for (side, got) in [("target", &pairs.target), ("draft", &pairs.draft)] {
            let want = matrix(&case[side]);
            assert_eq!(
                (got.rows(), got.cols()),
                (want.len(), want[0].len()),
                "{name} {side}"
            );
            for (r, want_row) in want.iter().enumerate() {
                // Probabilities come back renormalised in f64; logits as stored.
                let sum: f64 = if logits { 1.0 } else { want_row.iter().sum() };
                for (i, (&g, &w)) in got.row(r).iter().zip(want_row).enumerate() {
                    let w = w / sum;
                    assert!(
                        (g - w).abs() <= 1e-15 * w.abs().max(1.0),
                        "{name} {side} row {r} entry {i}: read {g}, wrote {w}"
                    );
                }
            }
        }
        let sparse = name.starts_with("sparse");
        assert_eq!(
            pairs.layout,
            if sparse {
                Layout::SparseWithTail {
                    kept: 3,
                    vocabulary: Some(8),
                }
            } else {
                Layout::Dense
            },
            "{name}"
        );
    }
}

#[test]
fn explicit_values_override_detection() {
    let options = ReadOptions {
        values: Some(Values::Logits),
        ..ReadOptions::default()
    };
    let pairs = read_pairs(fixtures().join("pairs.npz"), &options).unwrap();
    assert_eq!(pairs.values, Values::Logits);
    // Logits that are not probabilities cannot be read as probabilities:
    // the error names the first entry outside [0, 1].
    let options = ReadOptions {
        values: Some(Values::Probabilities),
        ..ReadOptions::default()
    };
    let err = read_pairs(fixtures().join("logits.safetensors"), &options).unwrap_err();
    assert!(
        matches!(err, LogitsError::NotProbability { row: 0, value, .. } if !(0.0..=1.0).contains(&value)),
        "{err}"
    );
}

fn error_of(name: &str) -> LogitsError {
    read_pairs(fixtures().join(name), &ReadOptions::default()).unwrap_err()
}

#[test]
fn malformed_files_give_typed_errors_naming_the_problem() {
    let err = error_of("bad-rows.npz");
    assert!(
        matches!(
            err,
            LogitsError::RowCount {
                target: 3,
                draft: 2,
                ..
            }
        ),
        "{err}"
    );
    let err = error_of("bad-dtype.npz");
    assert!(
        matches!(&err, LogitsError::Dtype { array, dtype, .. } if array == "p" && dtype == "int32"),
        "{err}"
    );
    let err = error_of("bad-shape.npz");
    assert!(
        matches!(&err, LogitsError::Shape { shape, .. } if shape.is_empty()),
        "{err}"
    );
    let err = error_of("no-draft.npz");
    assert!(
        matches!(&err, LogitsError::MissingArray { role: "draft", found, .. } if found == "p"),
        "{err}"
    );
    let err = error_of("bad-vocab.safetensors");
    assert!(
        matches!(
            err,
            LogitsError::VocabMismatch {
                target: 4,
                draft: 5,
                ..
            }
        ),
        "{err}"
    );
    let err = error_of("bad-sum.npz");
    assert!(
        matches!(&err, LogitsError::NotProbabilities { array, row: 1, sum, .. }
            if array == "p" && (sum - 0.5).abs() < 0.5),
        "{err}"
    );
    let err = error_of("expected.json");
    assert!(matches!(err, LogitsError::Format { .. }), "{err}");
    let err = error_of("missing.npz");
    assert!(matches!(err, LogitsError::Io { .. }), "{err}");
    // Every message names the file.
    for name in [
        "bad-rows.npz",
        "bad-dtype.npz",
        "no-draft.npz",
        "missing.npz",
    ] {
        assert!(error_of(name).to_string().contains(name), "{name}");
    }
}

#[test]
fn corrupt_bytes_are_format_errors() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["x.npz", "x.safetensors"] {
        let path = dir.path().join(name);
        std::fs::write(&path, b"not an archive").unwrap();
        let err = read_pairs(&path, &ReadOptions::default()).unwrap_err();
        assert!(matches!(err, LogitsError::Format { .. }), "{name}: {err}");
    }
    // A .npy member whose header is cut short.
    let npy = dir.path().join("cut");
    std::fs::create_dir(&npy).unwrap();
    let whole = std::fs::read(fixtures().join("npy-f32/p_target.npy")).unwrap();
    std::fs::write(npy.join("p.npy"), &whole[..20]).unwrap();
    std::fs::write(npy.join("q.npy"), &whole).unwrap();
    let err = read_pairs(&npy, &ReadOptions::default()).unwrap_err();
    assert!(matches!(err, LogitsError::Format { .. }), "{err}");
}

#[test]
fn the_builtin_sample_is_32_real_sparse_rows() {
    let sample = builtin_sample().unwrap();
    assert_eq!(sample.rows(), 32);
    assert_eq!(sample.target.cols(), 1025);
    assert_eq!(sample.values, Values::Probabilities);
    assert_eq!(
        sample.layout,
        Layout::SparseWithTail {
            kept: 1024,
            vocabulary: Some(151936)
        }
    );
    for side in [&sample.target, &sample.draft] {
        for row in side.iter_rows() {
            let sum: f64 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-12 && row.iter().all(|&x| x >= 0.0));
        }
    }
}
