//! One sum tolerance for every reader (`FloatType::sum_tolerance`,
//! `docs/DESIGN.md` §7): rounding to the stored type never moves a row's sum
//! past half of it, a data file and a `-p`/`-q` argument refuse and accept
//! the same rows, and a refusal names the row, its sum and the tolerance.

use std::ffi::OsString;
use std::path::Path;

use half::{bf16, f16};
use mdsd_core::CoreError;
use mdsd_logits::{FloatType, LogitsError, ReadOptions, read_argument_pairs, read_pairs};
use proptest::prelude::*;
use safetensors::{Dtype, tensor::TensorView};

/// A `.npy` file of `rows` in float16 or float32, written byte by byte
/// (ndarray-npy writes neither float16 nor a chosen dtype).
fn write_npy(path: &Path, rows: &[Vec<f64>], float: FloatType) {
    let (descriptor, bytes): (&str, Vec<u8>) = match float {
        FloatType::Float16 => (
            "<f2",
            (rows.iter().flatten())
                .flat_map(|&x| f16::from_f64(x).to_le_bytes())
                .collect(),
        ),
        FloatType::Float32 => (
            "<f4",
            (rows.iter().flatten())
                .flat_map(|&x| (x as f32).to_le_bytes())
                .collect(),
        ),
        other => panic!("no .npy writer here for {other}"),
    };
    let mut header = format!(
        "{{'descr': '{descriptor}', 'fortran_order': False, 'shape': ({}, {}), }}",
        rows.len(),
        rows[0].len()
    );
    // Magic (6) + version (2) + length (2) + header + newline: a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((header.len() as u16).to_le_bytes());
    file.extend(header.as_bytes());
    file.extend(bytes);
    std::fs::write(path, file).unwrap();
}

/// A data directory with the same rows as target and draft.
fn data_dir(rows: &[Vec<f64>], float: FloatType) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_npy(&dir.path().join("p_target.npy"), rows, float);
    write_npy(&dir.path().join("q_draft.npy"), rows, float);
    dir
}

fn rounded(x: f64, float: FloatType) -> f64 {
    match float {
        FloatType::Float16 => f16::from_f64(x).to_f64(),
        FloatType::BFloat16 => bf16::from_f64(x).to_f64(),
        FloatType::Float32 => f64::from(x as f32),
        FloatType::Float64 => x,
    }
}

#[test]
fn the_tolerances_named_in_the_design_notes() {
    let v = 151_936;
    let tolerance = |float: FloatType| float.sum_tolerance(v);
    assert!((tolerance(FloatType::Float16) - 1.0e-2).abs() < 1e-4);
    assert!((tolerance(FloatType::BFloat16) - 7.8e-3).abs() < 1e-4);
    assert_eq!(tolerance(FloatType::Float32), mdsd_core::SUM_TOLERANCE);
    assert_eq!(tolerance(FloatType::Float64), mdsd_core::SUM_TOLERANCE);
}

proptest! {
    /// A probability row rounded entry by entry to a type (tiny entries
    /// included, where float16 is subnormal or flushes to 0) sums to 1
    /// within half its type's tolerance: the tolerance is the rounding's
    /// bound, doubled for rows computed in the type.
    #[test]
    fn rounding_to_the_type_stays_within_half_the_tolerance(
        weights in prop::collection::vec((0.0f64..1.0, -30i32..0), 1..3000),
        float in prop::sample::select(vec![
            FloatType::Float16, FloatType::BFloat16, FloatType::Float32, FloatType::Float64,
        ]),
    ) {
        let raw: Vec<f64> = weights.iter().map(|&(w, e)| w * 2f64.powi(e)).collect();
        let total: f64 = raw.iter().sum();
        prop_assume!(total > 0.0);
        let sum: f64 = raw.iter().map(|&x| rounded(x / total, float)).sum();
        let tolerance = float.sum_tolerance(raw.len());
        prop_assert!((sum - 1.0).abs() <= tolerance / 2.0, "{float}: sum {sum}, tolerance {tolerance}");
    }
}

#[test]
fn data_files_and_arguments_accept_and_refuse_the_same_rows() {
    // float32 at 1.005 (the row): refused by both readers, at 1e-6.
    // float16 at 1 + 4e-4 (four entries: tolerance 9.8e-4): accepted by both,
    // and renormalised; float16 at 1 + 2e-3: refused by both.
    let cases = [
        (FloatType::Float32, 0.005, false),
        (FloatType::Float32, 5e-8, true),
        (FloatType::Float16, 4e-4, true),
        (FloatType::Float16, 2e-3, false),
    ];
    for (float, excess, accepted) in cases {
        let row = vec![0.5 + excess, 0.25, 0.125, 0.125];
        let dir = data_dir(std::slice::from_ref(&row), float);
        let from_data = read_pairs(dir.path(), &ReadOptions::default());
        let file = dir.path().join("p_target.npy");
        let draft = [OsString::from(dir.path().join("q_draft.npy"))];
        let from_argument = read_argument_pairs(file.as_os_str(), &draft, &ReadOptions::default());
        let tolerance = float.sum_tolerance(4);
        let sum: f64 = row.iter().map(|&x| rounded(x, float)).sum();
        if accepted {
            for pairs in [from_data.unwrap(), from_argument.unwrap()] {
                let total: f64 = pairs.target.row(0).iter().sum();
                assert!(
                    (total - 1.0).abs() < 1e-15,
                    "{float} {excess}: renormalised"
                );
            }
            continue;
        }
        let err = from_data.unwrap_err();
        assert!(
            matches!(&err, LogitsError::NotProbabilities { row: 0, sum: s, tolerance: t, float: f, .. }
                if *s == sum && *t == tolerance && *f == float),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains(&format!("{float} rows")), "{message}");
        let err = from_argument.unwrap_err();
        let LogitsError::InArgument {
            role: "target",
            source,
        } = &err
        else {
            panic!("{err}");
        };
        assert!(
            matches!(**source, LogitsError::ArgumentRow { row: 0, source: CoreError::BadSum { sum: s, tolerance: t }, .. }
                if s == sum && t == tolerance),
            "{err}"
        );
    }
}

#[test]
fn a_negative_entry_is_named_before_the_sum() {
    // Sums to 1 with a negative entry: the entry is the problem.
    let row = vec![0.75, -0.25, 0.5];
    let dir = data_dir(std::slice::from_ref(&row), FloatType::Float32);
    let options = ReadOptions {
        values: Some(mdsd_logits::Values::Probabilities),
        ..ReadOptions::default()
    };
    let err = read_pairs(dir.path(), &options).unwrap_err();
    assert!(
        matches!(err, LogitsError::NotProbability { row: 0, index: 1, value, .. } if value == -0.25),
        "{err}"
    );
    let draft = [OsString::from("0.5,0.25,0.25")];
    let err = read_argument_pairs("0.75,-0.25,0.5".as_ref(), &draft, &ReadOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("entry 1 is -0.25"), "{err}");
}

#[test]
fn a_negative_tail_is_named_as_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.safetensors");
    let ids: Vec<u8> = [0i32, 1, 0, 1]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let kept: Vec<u8> = [0.6f32, 0.4, 0.5, 0.5]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let tails: Vec<u8> = [0.0f64, -0.01]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let tensors = [
        (
            "ids",
            TensorView::new(Dtype::I32, vec![2, 2], &ids).unwrap(),
        ),
        ("p", TensorView::new(Dtype::F32, vec![2, 2], &kept).unwrap()),
        ("q", TensorView::new(Dtype::F32, vec![2, 2], &kept).unwrap()),
        (
            "p_tail",
            TensorView::new(Dtype::F64, vec![2], &tails).unwrap(),
        ),
        (
            "q_tail",
            TensorView::new(Dtype::F64, vec![2], &tails).unwrap(),
        ),
    ];
    safetensors::serialize_to_file(tensors, None, &path).unwrap();
    let err = read_pairs(&path, &ReadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LogitsError::NotTailMass { array, row: 1, value, .. }
            if array == "p_tail" && *value == -0.01),
        "{err}"
    );
    assert!(err.to_string().contains("tail mass"), "{err}");
}
