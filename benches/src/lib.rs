//! # mdsd-benches
//!
//! Criterion benchmarks across the mdsd crates (`cargo bench -p mdsd-benches`)
//! and the fixtures they and the test suites share (not published): [`real_rows`] loads the real full-vocabulary
//! rows of `data/qwen-coder-dense-8rows.npz`, and [`iid_instance`] the fixed
//! small instances of the solver benchmarks.
//!
//! ```
//! let rows = mdsd_benches::real_rows();
//! assert_eq!(rows.len(), 8);
//! assert_eq!(rows[0].0.len(), 151_936);
//! ```

use std::path::PathBuf;

use mdsd_core::{Distribution, DraftScheme, Problem, SchemeKind};
use ndarray::Array2;
use ndarray_npy::NpzReader;
use proptest::prelude::*;

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
    p.rows()
        .into_iter()
        .zip(q.rows())
        .map(|(p, q)| (row(p), row(q)))
        .collect()
}

/// The 64 real rows of `../shared/data/qwen-coder/dense` (beside the
/// checkout, or where `MDSD_SHARED_DATA` points), for benchmarks that need
/// more rows than the repository ships; `None` when that folder is absent.
///
/// # Panics
/// If the folder exists but its arrays are unreadable.
pub fn shared_rows() -> Option<Vec<(Distribution, Distribution)>> {
    let folder = std::env::var_os("MDSD_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"))
        .join("qwen-coder/dense");
    if !folder.is_dir() {
        return None;
    }
    let read = |name: &str| -> Array2<f32> {
        ndarray_npy::read_npy(folder.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let (p, q) = (read("p_target.npy"), read("q_draft.npy"));
    Some(
        p.rows()
            .into_iter()
            .zip(q.rows())
            .map(|(p, q)| (row(p), row(q)))
            .collect(),
    )
}

/// A float32 row in f64 (`from_probs` renormalises).
fn row(row: ndarray::ArrayView1<f32>) -> Distribution {
    Distribution::from_probs(row.iter().map(|&x| f64::from(x)).collect::<Vec<_>>())
        .expect("valid row")
}

/// The two temperatures of the grids' independent drafts' laws.
pub const INDEPENDENT_TEMPERATURES: [f64; 2] = [0.7, 1.3];

/// The grids' problem of a real row: `n` drafts of `scheme` from `q`'s top
/// `k` tokens; independent drafts from `q` at the two
/// [`INDEPENDENT_TEMPERATURES`], taken in turn.
///
/// # Panics
/// If `k` or `n` is out of range for the row.
pub fn grid_problem(
    p: &Distribution,
    q: &Distribution,
    scheme: SchemeKind,
    k: usize,
    n: usize,
) -> Problem {
    let drafts = match scheme {
        SchemeKind::Independent => {
            let laws: Vec<Distribution> = (INDEPENDENT_TEMPERATURES.iter())
                .map(|&t| q.with_temperature(t).and_then(|q| q.top_k(k)).unwrap())
                .collect();
            DraftScheme::independent_cycled(&laws, n)
        }
        _ => DraftScheme::new(scheme, vec![q.top_k(k).unwrap()], n),
    };
    Problem::new(p.clone(), drafts.unwrap()).unwrap()
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

/// A small problem built from raw parameters, for property tests: V = `v`
/// tokens and `n` drafts (capped at V where drafts must be distinct, and
/// replaced by the scheme's own count where it fixes one);
/// `weights` and `zeros` hold at least 6 entries per distribution (p first,
/// then the drafts), flat (`x + 1e-3`) or `peaked` (`x^6 + 1e-9`), an entry
/// zeroed where `zeros` says so, keeping the first entry of p and enough
/// entries of q for the scheme positive.
///
/// # Panics
/// If `weights` or `zeros` are too short, or `v` is 0 or above 6.
pub fn small_problem(
    kind: SchemeKind,
    v: usize,
    n: usize,
    weights: &[f64],
    zeros: &[bool],
    peaked: bool,
) -> Problem {
    let shape = |x: f64| if peaked { x.powi(6) + 1e-9 } else { x + 1e-3 };
    let distinct = kind.draws_distinct();
    let n = kind
        .fixed_n()
        .unwrap_or(if distinct { n.min(v) } else { n });
    let draw = |i: usize, keep: usize| {
        let row: Vec<f64> = (0..v)
            .map(|j| {
                if zeros[i * 6 + j] && j >= keep {
                    0.0
                } else {
                    shape(weights[i * 6 + j])
                }
            })
            .collect();
        let total: f64 = row.iter().sum();
        Distribution::from_probs(row.iter().map(|x| x / total).collect::<Vec<_>>())
            .expect("positive weights")
    };
    let qs: Vec<Distribution> = if kind == SchemeKind::Independent {
        (0..n).map(|i| draw(1 + i, 1)).collect()
    } else {
        vec![draw(1, if distinct { n } else { 1 })]
    };
    Problem::new(
        draw(0, 1),
        DraftScheme::new(kind, qs, n).expect("valid scheme"),
    )
    .expect("same vocabulary")
}

/// Weights scaled to sum to 1, as a distribution.
///
/// # Panics
/// If the weights are not finite, non-negative and with a positive sum.
pub fn normalised(weights: &[f64]) -> Distribution {
    let total: f64 = weights.iter().sum();
    Distribution::from_probs(weights.iter().map(|x| x / total).collect::<Vec<_>>())
        .expect("valid weights")
}

/// Random [`small_problem`]s of one scheme: V in 2..=6, n in 1..=3, flat or
/// peaked, some zeros.
pub fn small_problems(kind: SchemeKind) -> impl Strategy<Value = Problem> {
    (
        2usize..=6,
        1usize..=3,
        prop::collection::vec(0.0f64..1.0, 24),
        prop::collection::vec(prop::bool::weighted(0.2), 24),
        prop::bool::ANY,
    )
        .prop_map(move |(v, n, w, zero, peaked)| small_problem(kind, v, n, &w, &zero, peaked))
}

/// Random problems of independent drafts that repeat their laws (several
/// samples of one draft model): 3 or 4 drafts, each the law of one of the
/// first two drafts of a [`small_problems`] instance of independent
/// drafts, so that some law is drawn at least twice.
pub fn repeated_laws_problems() -> impl Strategy<Value = Problem> {
    (
        small_problems(SchemeKind::Independent),
        prop::collection::vec(0usize..2, 3..=4),
    )
        .prop_map(|(problem, pattern)| {
            let laws = problem.drafts().drafts();
            let drafts = pattern.iter().map(|&i| laws[i % laws.len()].clone());
            Problem::new(
                problem.target().clone(),
                DraftScheme::independent(drafts.collect()).expect("valid scheme"),
            )
            .expect("same vocabulary")
        })
}
