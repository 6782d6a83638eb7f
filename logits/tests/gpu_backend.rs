//! The GPU backend against the CPU backend, on the built-in sample and on
//! `../shared/data`'s 64 dense rows at V = 151936 (when present). They need
//! a Vulkan or DX12 adapter with 64-bit floats, so they are ignored unless
//! asked for (`cargo test -p mdsd-logits --test gpu_backend -- --ignored`,
//! which `.ci/run` runs on Mesa's lavapipe); asked for without an adapter,
//! they fail saying why.
//!
//! Tolerances: both backends compute in f64 and differ only in the order
//! of their sums (a tree on the GPU, a loop on the CPU; bucket masses in
//! 2^-62 fixed point), so they agree to 1e-12, far inside the 1e-6 the
//! backends promise.

use std::path::Path;

use mdsd_core::{CoreError, Transform};
use mdsd_logits::{
    Backend, CpuBackend, LogitsError, Matrix, ReadOptions, Values, WgpuBackend, builtin_sample,
    read_pairs,
};

const AGREEMENT: f64 = 1e-12;
const NS: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

/// The adapter's backend; without one, the tests asked for fail saying why.
fn gpu() -> WgpuBackend {
    match WgpuBackend::new() {
        Ok(gpu) => {
            eprintln!("GPU backend on {}", gpu.adapter());
            gpu
        }
        Err(e) => panic!("the GPU tests need an adapter with 64-bit floats: {e}"),
    }
}

fn max_abs_difference(a: &Matrix, b: &Matrix) -> f64 {
    assert_eq!((a.rows(), a.cols()), (b.rows(), b.cols()));
    a.as_slice()
        .iter()
        .zip(b.as_slice())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// `scale * ln(p)`: logits whose softmax at temperature `scale` is `p`.
fn logits_of(probs: &Matrix, scale: f64) -> Matrix {
    let logits = probs.as_slice().iter().map(|&p| scale * p.ln()).collect();
    Matrix::new(probs.rows(), probs.cols(), logits).unwrap()
}

fn assert_iid_agrees(gpu: &WgpuBackend, target: &Matrix, draft: &Matrix, ns: &[usize]) {
    let cpu_alpha = CpuBackend
        .optimal_acceptance_iid(target, draft, ns)
        .unwrap();
    let gpu_alpha = gpu.optimal_acceptance_iid(target, draft, ns).unwrap();
    let gap = max_abs_difference(&cpu_alpha, &gpu_alpha);
    eprintln!(
        "iid alpha*, {} rows x {}: max |cpu - gpu| = {gap:e}",
        target.rows(),
        target.cols()
    );
    assert!(gap <= AGREEMENT, "{gap}");
}

fn assert_softmax_agrees(gpu: &WgpuBackend, logits: &Matrix, transform: &Transform) {
    let cpu = CpuBackend
        .distributions(logits, Values::Logits, transform)
        .unwrap();
    let on_gpu = gpu
        .distributions(logits, Values::Logits, transform)
        .unwrap();
    let gap = max_abs_difference(&cpu, &on_gpu);
    eprintln!(
        "softmax {transform:?}, {} rows x {}: max |cpu - gpu| = {gap:e}",
        logits.rows(),
        logits.cols()
    );
    assert!(gap <= AGREEMENT, "{gap}");
}

#[test]
#[ignore = "needs a GPU adapter with f64: run with --ignored"]
fn iid_alpha_matches_the_cpu_on_the_builtin_sample() {
    let gpu = gpu();
    let pairs = builtin_sample().unwrap();
    assert_iid_agrees(
        &gpu,
        &pairs.target,
        &pairs.draft,
        &[1, 2, 3, 4, 6, 8, 12, 16],
    );
}

#[test]
#[ignore = "needs a GPU adapter with f64: run with --ignored"]
fn softmax_and_transforms_match_the_cpu() {
    let gpu = gpu();
    let pairs = builtin_sample().unwrap();
    let logits = logits_of(&pairs.target, 3.0);
    for temperature in [None, Some(0.0), Some(0.7), Some(2.0)] {
        let transform = Transform {
            temperature,
            ..Transform::default()
        };
        assert_softmax_agrees(&gpu, &logits, &transform);
    }
    let truncated = Transform {
        temperature: Some(1.3),
        top_k: Some(40),
        top_p: Some(0.9),
    };
    assert_softmax_agrees(&gpu, &logits, &truncated);
    // Probability rows take the CPU's path whatever the backend.
    let cpu = CpuBackend
        .distributions(&pairs.draft, Values::Probabilities, &truncated)
        .unwrap();
    let on_gpu = gpu
        .distributions(&pairs.draft, Values::Probabilities, &truncated)
        .unwrap();
    assert_eq!(cpu, on_gpu);
}

/// The full check: 64 real rows at V = 151936, softmax and alpha* at 8
/// values of n. Skipped without `../shared/data` (the repository must not
/// need it).
#[test]
#[ignore = "needs a GPU adapter with f64: run with --ignored"]
fn sixty_four_real_rows_at_full_vocabulary_agree() {
    let dense = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/qwen-coder/dense");
    if !dense.exists() {
        eprintln!("skipped: {} not found", dense.display());
        return;
    }
    let gpu = gpu();
    let pairs = read_pairs(&dense, &ReadOptions::default()).unwrap();
    assert_eq!((pairs.rows(), pairs.target.cols()), (64, 151_936));
    assert_iid_agrees(&gpu, &pairs.target, &pairs.draft, &NS);
    assert_softmax_agrees(&gpu, &logits_of(&pairs.draft, 1.0), &Transform::default());
}

#[test]
#[ignore = "needs a GPU adapter with f64: run with --ignored"]
fn bad_rows_are_typed_errors_naming_row_and_index() {
    let gpu = gpu();
    let mut logits = vec![0.5; 4 * 300];
    logits[2 * 300 + 17] = f64::NAN;
    logits[2 * 300 + 40] = f64::INFINITY;
    let logits = Matrix::new(4, 300, logits).unwrap();
    let err = gpu
        .distributions(&logits, Values::Logits, &Transform::default())
        .unwrap_err();
    match err {
        LogitsError::InvalidRow {
            row: 2,
            source: CoreError::BadLogit { index: 17, value },
            ..
        } => {
            assert!(value.is_nan())
        }
        other => panic!("{other}"),
    }
    let silent = Matrix::new(1, 3, vec![f64::NEG_INFINITY; 3]).unwrap();
    let err = gpu
        .distributions(&silent, Values::Logits, &Transform::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogitsError::InvalidRow {
                row: 0,
                source: CoreError::NoFiniteLogit,
                ..
            }
        ),
        "{err}"
    );
    let cold = Transform {
        temperature: Some(-1.0),
        ..Transform::default()
    };
    assert!(gpu.distributions(&logits, Values::Logits, &cold).is_err());

    let fine = Matrix::new(2, 3, vec![0.2, 0.3, 0.5, 0.1, 0.1, 0.8]).unwrap();
    let negative = Matrix::new(2, 3, vec![0.2, 0.3, 0.5, 0.1, -0.1, 1.0]).unwrap();
    let err = gpu
        .optimal_acceptance_iid(&fine, &negative, &[2])
        .unwrap_err();
    assert!(err.to_string().contains("draft row 1"), "{err}");
    assert!(gpu.optimal_acceptance_iid(&fine, &fine, &[0]).is_err());
    let short = Matrix::new(2, 2, vec![0.5; 4]).unwrap();
    assert!(gpu.optimal_acceptance_iid(&fine, &short, &[1]).is_err());
}
