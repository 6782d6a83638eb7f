//! # mdsd-benches
//!
//! Criterion benchmarks across the mdsd crates (`cargo bench -p mdsd-benches`)
//! and the fixtures they share: [`real_rows`] loads the real full-vocabulary
//! rows of `data/qwen-coder-dense-8rows.npz`, and [`iid_instance`] the fixed
//! small instances of the solver benchmarks.
//!
//! ```
//! let rows = mdsd_benches::real_rows();
//! assert_eq!(rows.len(), 8);
//! assert_eq!(rows[0].0.len(), 151_936);
//! ```

use std::path::PathBuf;

use mdsd_core::{Distribution, DraftScheme, Problem};
use ndarray::Array2;
use ndarray_npy::NpzReader;

/// The 8 real (target, draft) rows at V = 151936, renormalised in f64.
///
/// # Panics
/// If the fixture shipped in `data/` is missing or unreadable.
pub fn real_rows() -> Vec<(Distribution, Distribution)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/qwen-coder-dense-8rows.npz");
    let mut npz = NpzReader::new(
        std::fs::File::open(&path).expect("fixture data/qwen-coder-dense-8rows.npz"),
    )
    .expect("readable npz");
    let p: Array2<f32> = npz.by_name("p.npy").expect("array p");
    let q: Array2<f32> = npz.by_name("q.npy").expect("array q");
    let to_dist = |row: ndarray::ArrayView1<f32>| {
        Distribution::from_probs(row.iter().map(|&x| f64::from(x)).collect::<Vec<_>>())
            .expect("valid row")
    };
    p.rows()
        .into_iter()
        .zip(q.rows())
        .map(|(p, q)| (to_dist(p), to_dist(q)))
        .collect()
}

/// A fixed, generic iid instance of vocabulary `v` with `n` drafts: p and q
/// with distinct, uneven entries (no ties in p/q to help any method).
pub fn iid_instance(v: usize, n: usize) -> Problem {
    let normalise = |w: Vec<f64>| {
        let total: f64 = w.iter().sum();
        Distribution::from_probs(w.into_iter().map(|x| x / total).collect::<Vec<_>>())
            .expect("valid weights")
    };
    let p = normalise((0..v).map(|i| 1.0 + ((i * 7 + 3) % v) as f64).collect());
    let q = normalise(
        (0..v)
            .map(|i| 1.0 + ((i * 5 + 1) % v) as f64 * 1.3)
            .collect(),
    );
    Problem::new(p, DraftScheme::iid(q, n).expect("n >= 1")).expect("same vocabulary")
}
