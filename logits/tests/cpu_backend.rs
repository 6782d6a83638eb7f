//! The CPU backend against mdsd-bounds one n at a time, on the built-in
//! sample, the 8-row full-vocabulary fixture and (when present) the
//! published statistics of `../shared/data`.

use std::path::{Path, PathBuf};

use mdsd_bounds::{IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{CoreError, Distribution, Transform};
use mdsd_logits::{
    Backend, CpuBackend, LogitsError, Matrix, Pairs, ReadOptions, Values, builtin_sample,
    read_pairs,
};

const NS: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn distribution(row: &[f64]) -> Distribution {
    Distribution::from_probs(row).unwrap()
}

/// Every row and n against a full sort for that n alone.
fn check_iid_against_sort(pairs: &Pairs) {
    let alpha = CpuBackend
        .optimal_acceptance_iid(&pairs.target, &pairs.draft, &NS)
        .unwrap();
    assert_eq!((alpha.rows(), alpha.cols()), (pairs.rows(), NS.len()));
    for r in 0..pairs.rows() {
        let (p, q) = (
            distribution(pairs.target.row(r)),
            distribution(pairs.draft.row(r)),
        );
        for (j, &n) in NS.iter().enumerate() {
            let sort = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort).unwrap();
            assert!(
                (alpha.row(r)[j] - sort.alpha_star).abs() <= 1e-12,
                "row {r} n {n}: batch {} sort {}",
                alpha.row(r)[j],
                sort.alpha_star
            );
        }
        assert!(
            alpha.row(r).windows(2).all(|w| w[0] <= w[1] + 1e-12),
            "row {r}"
        );
    }
}

#[test]
fn iid_batch_matches_one_n_at_a_time_on_the_sample() {
    check_iid_against_sort(&builtin_sample().unwrap());
}

#[test]
fn iid_batch_matches_one_n_at_a_time_at_full_vocabulary() {
    let pairs = read_pairs(
        repository().join("data/qwen-coder-dense-8rows.npz"),
        &ReadOptions::default(),
    )
    .unwrap();
    assert_eq!((pairs.rows(), pairs.target.cols()), (8, 151936));
    check_iid_against_sort(&pairs);
}

#[test]
fn wor_at_one_draft_is_one_minus_total_variation_and_beats_iid() {
    let pairs = builtin_sample().unwrap().head(8);
    let wor = CpuBackend
        .optimal_acceptance_wor(&pairs.target, &pairs.draft, &[1, 2, 3])
        .unwrap();
    let iid = CpuBackend
        .optimal_acceptance_iid(&pairs.target, &pairs.draft, &[1, 2, 3])
        .unwrap();
    for r in 0..pairs.rows() {
        let (p, q) = (
            distribution(pairs.target.row(r)),
            distribution(pairs.draft.row(r)),
        );
        let tv = p.total_variation(&q).unwrap();
        assert!((wor.row(r)[0] - (1.0 - tv)).abs() < 1e-12, "row {r}");
        // Distinct drafts cover at least as much as repeated ones.
        for j in 1..3 {
            assert!(wor.row(r)[j] >= iid.row(r)[j] - 1e-9, "row {r} column {j}");
        }
    }
}

#[test]
fn softmax_of_logits_recovers_the_probabilities() {
    let fixtures = repository().join("logits/tests/fixtures");
    let logits = read_pairs(fixtures.join("logits.safetensors"), &ReadOptions::default()).unwrap();
    let probs = read_pairs(
        fixtures.join("pairs-f64.safetensors"),
        &ReadOptions::default(),
    )
    .unwrap();
    for (from_logits, want) in [
        (&logits.target, &probs.target),
        (&logits.draft, &probs.draft),
    ] {
        let got = CpuBackend
            .distributions(from_logits, Values::Logits, &Transform::default())
            .unwrap();
        // The logits were stored in float32: 1e-7 relative.
        for (g, w) in got.as_slice().iter().zip(want.as_slice()) {
            assert!((g - w).abs() <= 1e-6 * w, "{g} vs {w}");
        }
    }
}

#[test]
fn transforms_apply_per_row() {
    let pairs = builtin_sample().unwrap().head(4);
    let top2 = Transform {
        top_k: Some(2),
        ..Transform::default()
    };
    let out = CpuBackend
        .distributions(&pairs.target, pairs.values, &top2)
        .unwrap();
    for row in out.iter_rows() {
        assert_eq!(row.iter().filter(|&&x| x > 0.0).count(), 2);
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    let bad = Transform {
        temperature: Some(-1.0),
        ..Transform::default()
    };
    assert!(
        CpuBackend
            .distributions(&pairs.target, pairs.values, &bad)
            .is_err()
    );
}

#[test]
fn mismatched_batches_and_bad_rows_are_refused() {
    let pairs = builtin_sample().unwrap().head(2);
    let short = pairs.draft.clone();
    let three = builtin_sample().unwrap().head(3);
    assert!(
        CpuBackend
            .optimal_acceptance_iid(&three.target, &short, &[2])
            .is_err()
    );
    let zero_row = Matrix::new(1, 3, vec![0.0, 0.0, 0.0]).unwrap();
    let fine = Matrix::new(1, 3, vec![0.2, 0.3, 0.5]).unwrap();
    let err = CpuBackend
        .optimal_acceptance_iid(&zero_row, &fine, &[2])
        .unwrap_err();
    assert!(err.to_string().contains("target row 0"), "{err}");
    let err = CpuBackend
        .optimal_acceptance_iid(&fine, &fine, &[0])
        .unwrap_err();
    assert!(err.to_string().contains("row 0"), "{err}");
    // At full vocabulary rows are checked inside the bucket pass: the
    // error still names the row, which of the two, and the entry.
    let dense = read_pairs(
        repository().join("data/qwen-coder-dense-8rows.npz"),
        &ReadOptions::default(),
    )
    .unwrap()
    .head(2);
    let cols = dense.draft.cols();
    let mut values: Vec<f64> = dense.draft.iter_rows().flatten().copied().collect();
    values[cols + 70_000] = -0.1;
    let bad_draft = Matrix::new(2, cols, values).unwrap();
    let err = CpuBackend
        .optimal_acceptance_iid(&dense.target, &bad_draft, &[1, 8])
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogitsError::InvalidRow {
                what: "draft",
                row: 1,
                source: CoreError::Negative { index: 70_000, .. }
            }
        ),
        "{err}"
    );
}

/// Mean alpha* over `../shared/data`'s rows against the statistics its
/// README publishes (4 decimals). Skipped when the folder is absent (the
/// repository must not need it).
#[test]
fn shared_data_means_match_the_published_statistics() {
    let shared = repository().join("../shared/data/qwen-coder");
    if !shared.exists() {
        eprintln!("skipped: {} not found", shared.display());
        return;
    }
    let mean_columns = |m: &Matrix| -> Vec<f64> {
        (0..m.cols())
            .map(|j| m.iter_rows().map(|row| row[j]).sum::<f64>() / m.rows() as f64)
            .collect()
    };
    let check = |what: &str, got: Vec<f64>, want: &[f64]| {
        for (n, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 5e-5,
                "{what} n = {}: {g} vs published {w}",
                n + 1
            );
        }
    };
    let dense = read_pairs(shared.join("dense"), &ReadOptions::default()).unwrap();
    let iid = CpuBackend
        .optimal_acceptance_iid(&dense.target, &dense.draft, &NS)
        .unwrap();
    check(
        "dense iid",
        mean_columns(&iid),
        &[
            0.7121, 0.8148, 0.8516, 0.8725, 0.8866, 0.8968, 0.9052, 0.9121,
        ],
    );
    let sparse = read_pairs(
        shared.join("sparse/pairs.safetensors"),
        &ReadOptions::default(),
    )
    .unwrap();
    let iid = CpuBackend
        .optimal_acceptance_iid(&sparse.target, &sparse.draft, &NS)
        .unwrap();
    check(
        "sparse iid",
        mean_columns(&iid),
        &[
            0.7019, 0.8010, 0.8437, 0.8690, 0.8859, 0.8979, 0.9072, 0.9145,
        ],
    );
    let wor = CpuBackend
        .optimal_acceptance_wor(&sparse.target, &sparse.draft, &[1, 2, 3, 4])
        .unwrap();
    check(
        "sparse wor",
        mean_columns(&wor),
        &[0.7019, 0.8348, 0.8843, 0.9101],
    );
}
