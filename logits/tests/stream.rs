//! The windowed reader: a directory of `.npy` files, a `.safetensors`
//! file and a directory of `.safetensors` shards give, window by window,
//! exactly the rows `read_pairs` gives of the same data at once.

use std::collections::HashMap;

use mdsd_logits::{ReadOptions, RowReader, read_pairs};
use ndarray::Array2;
use ndarray_npy::WriteNpyExt;
use safetensors::tensor::{Dtype, TensorView};

/// 10 rows of 7 probabilities, row r leaning on token r % 7.
fn rows(salt: usize) -> Array2<f32> {
    let mut rows = Array2::from_shape_fn((10, 7), |(r, c)| {
        1.0 + ((r * 7 + c + salt) % 5) as f32 + if c == r % 7 { 9.0 } else { 0.0 }
    });
    for mut row in rows.rows_mut() {
        let total: f32 = row.sum();
        row.mapv_inplace(|x| x / total);
    }
    rows
}

fn safetensors(path: &std::path::Path, p: &Array2<f32>, q: &Array2<f32>) {
    let bytes = |a: &Array2<f32>| a.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (pb, qb) = (bytes(p), bytes(q));
    let shape = |a: &Array2<f32>| a.shape().to_vec();
    let tensors: HashMap<String, TensorView> = [
        (
            "p_target".to_string(),
            TensorView::new(Dtype::F32, shape(p), &pb).unwrap(),
        ),
        (
            "q_draft".to_string(),
            TensorView::new(Dtype::F32, shape(q), &qb).unwrap(),
        ),
    ]
    .into_iter()
    .collect();
    safetensors::tensor::serialize_to_file(tensors, None, path).unwrap();
}

#[test]
fn windows_of_every_streamed_form_are_the_rows_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (p, q) = (rows(0), rows(3));
    let npy = dir.path().join("npy");
    std::fs::create_dir(&npy).unwrap();
    p.write_npy(std::fs::File::create(npy.join("p_target.npy")).unwrap())
        .unwrap();
    q.write_npy(std::fs::File::create(npy.join("q_draft.npy")).unwrap())
        .unwrap();
    let whole = read_pairs(&npy, &ReadOptions::default()).unwrap();

    let single = dir.path().join("rows.safetensors");
    safetensors(&single, &p, &q);
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let part =
        |a: &Array2<f32>, rows: std::ops::Range<usize>| a.slice(ndarray::s![rows, ..]).to_owned();
    safetensors(
        &shards.join("part-0.safetensors"),
        &part(&p, 0..4),
        &part(&q, 0..4),
    );
    safetensors(
        &shards.join("part-1.safetensors"),
        &part(&p, 4..10),
        &part(&q, 4..10),
    );

    for source in [&npy, &single, &shards] {
        let reader = RowReader::open(source, &ReadOptions::default()).unwrap();
        assert_eq!(reader.rows(), 10, "{}", source.display());
        assert_eq!(reader.shape(), [10, 7]);
        // Windows that start, end and cross the shards' boundary.
        for window in [0..10, 0..1, 3..6, 4..10, 9..10] {
            let got = reader.read(window.clone()).unwrap();
            for (k, r) in window.clone().enumerate() {
                assert_eq!(
                    got.target.row(k),
                    whole.target.row(r),
                    "{} row {r}",
                    source.display()
                );
                assert_eq!(
                    got.draft.row(k),
                    whole.draft.row(r),
                    "{} row {r}",
                    source.display()
                );
            }
        }
        let error = reader.read(8..12).unwrap_err().to_string();
        assert!(error.contains("8..12") && error.contains("10"), "{error}");
    }
}

/// A header that claims more than its file holds, or no axis, is an error
/// named before any window is sized from it (no allocation of the claim).
#[test]
fn headers_that_lie_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, header: &str, data: usize| {
        let path = dir.path().join(name);
        let mut header = header.to_string();
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend(vec![0u8; data]);
        std::fs::write(path, bytes).unwrap();
    };
    let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1000000000000), }";
    let small = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    let npy = dir.path().to_path_buf();
    write("p_target.npy", huge, 24);
    write("q_draft.npy", small, 24);
    let error = RowReader::open(&npy, &ReadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("truncated") && error.contains("p_target"),
        "{error}"
    );
    write(
        "p_target.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
        4,
    );
    let error = RowReader::open(&npy, &ReadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("at least one axis"), "{error}");
}

/// Shards whose rows differ in length do not join.
#[test]
fn shards_of_other_vocabularies_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (p, q) = (rows(0), rows(1));
    safetensors(&dir.path().join("a.safetensors"), &p, &q);
    let (p, q) = (
        p.slice(ndarray::s![.., ..5]).to_owned(),
        q.slice(ndarray::s![.., ..5]).to_owned(),
    );
    safetensors(&dir.path().join("b.safetensors"), &p, &q);
    let error = RowReader::open(dir.path(), &ReadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("b.safetensors") && error.contains("5 entries"),
        "{error}"
    );
}

/// A `.safetensors` file of `p` and `q`, each `[rows, cols]` F32 of
/// `value`, whose header gives each tensor the offsets `offsets(index,
/// bytes)` (the right ones are (index x bytes, (index + 1) x bytes)).
fn safetensors_with(
    rows: usize,
    cols: usize,
    offsets: impl Fn(usize, usize) -> (u64, u64),
) -> Vec<u8> {
    let bytes = rows * cols * 4;
    let entry = |index: usize| {
        let (start, end) = offsets(index, bytes);
        format!("{{\"dtype\":\"F32\",\"shape\":[{rows},{cols}],\"data_offsets\":[{start},{end}]}}")
    };
    let header = format!("{{\"p\":{},\"q\":{}}}", entry(0), entry(1));
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    let value = (1.0f32 / cols as f32).to_le_bytes();
    for _ in 0..2 * rows * cols {
        out.extend_from_slice(&value);
    }
    out
}

/// Offsets that do not hold the shape their tensor claims (too short, too
/// long, reversed, past the file) and a header longer than the file are
/// refused naming what is wrong; the right offsets open.
#[test]
fn safetensors_offsets_are_checked_against_shapes_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let options = mdsd_logits::ReadOptions::default();
    let good = write(
        "good.safetensors",
        safetensors_with(4, 8, |i, b| ((i * b) as u64, ((i + 1) * b) as u64)),
    );
    assert_eq!(
        mdsd_logits::RowReader::open(&good, &options)
            .unwrap()
            .rows(),
        4
    );
    type Offsets = Box<dyn Fn(usize, usize) -> (u64, u64)>;
    let bad: [(&str, Offsets, &str); 4] = [
        (
            "short",
            Box::new(|i, b| ((i * b) as u64, (i * b + 16) as u64)),
            "data_offsets",
        ),
        (
            "long",
            Box::new(|i, b| ((i * b) as u64, 1_000_000_000_000)),
            "data_offsets",
        ),
        (
            "reversed",
            Box::new(|i, b| (((i + 1) * b) as u64, (i * b) as u64)),
            "data_offsets",
        ),
        (
            "past",
            Box::new(|i, b| (((i + 2) * b) as u64, ((i + 3) * b) as u64)),
            "the file holds",
        ),
    ];
    for (name, offsets, needle) in bad {
        let path = write(
            &format!("{name}.safetensors"),
            safetensors_with(4, 8, offsets),
        );
        let error = mdsd_logits::RowReader::open(&path, &options)
            .err()
            .map(|e| e.to_string());
        assert!(
            error.as_deref().is_some_and(|e| e.contains(needle)),
            "{name}: {error:?}"
        );
    }
    let mut truncated = 1000u64.to_le_bytes().to_vec();
    truncated.extend_from_slice(b"{\"p\":");
    let path = write("truncated.safetensors", truncated);
    let error = mdsd_logits::RowReader::open(&path, &options)
        .err()
        .map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("header claims 1000 bytes")),
        "{error:?}"
    );
}
