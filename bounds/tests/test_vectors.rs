//! The token-level rows of docs/TEST_VECTORS.md (alpha* columns), by the bounds
//! and by the LP.

use mdsd_bounds::{
    IidAlgorithm, acceptance_upper_bound, optimal_acceptance, optimal_acceptance_iid,
};
use mdsd_core::Solve;
use mdsd_core::{Distribution, DraftScheme, Problem, SchemeKind};
use mdsd_lp::LpSolver;

const TOL: f64 = 1e-9;

fn dist(x: &[f64]) -> Distribution {
    Distribution::from_probs(x.to_vec()).unwrap()
}

/// alpha* by the bound and by the full LP, checked equal to each other.
fn alpha(p: &[f64], q: &[f64], kind: SchemeKind, n: usize) -> f64 {
    let problem = Problem::new(dist(p), DraftScheme::new(kind, vec![dist(q)], n).unwrap()).unwrap();
    let bound = optimal_acceptance(&problem).unwrap();
    let lp = LpSolver::default().solve(&problem).unwrap();
    assert!(
        (bound.alpha_star - lp.summary.alpha_star).abs() <= TOL,
        "{kind}: bound {} vs LP {}",
        bound.alpha_star,
        lp.summary.alpha_star
    );
    let certified = acceptance_upper_bound(&problem, &bound.certificate).unwrap();
    assert!((certified - bound.alpha_star).abs() <= TOL);
    bound.alpha_star
}

fn assert_close(found: f64, expected: f64) {
    assert!(
        (found - expected).abs() <= TOL,
        "found {found}, expected {expected}"
    );
}

#[test]
fn row_1() {
    let (p, q) = ([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]);
    assert_close(alpha(&p, &q, SchemeKind::Iid, 2), 0.86);
    assert_close(
        alpha(&p, &q, SchemeKind::WithoutReplacement, 2),
        69.0 / 70.0,
    );
    assert_close(alpha(&p, &q, SchemeKind::Greedy, 2), 0.90);
    for algorithm in [IidAlgorithm::Sort, IidAlgorithm::Selection] {
        let bound = optimal_acceptance_iid(&dist(&p), &dist(&q), 2, algorithm).unwrap();
        assert_eq!(bound.certificate, vec![1, 2], "{algorithm:?}");
    }
}

#[test]
fn row_2() {
    let (p, q) = ([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]);
    assert_close(alpha(&p, &q, SchemeKind::Iid, 3), 0.871);
    assert_close(alpha(&p, &q, SchemeKind::WithoutReplacement, 3), 1.0);
    assert_close(alpha(&p, &q, SchemeKind::Greedy, 3), 0.93333333333);
}

#[test]
fn uniform_draft_full_acceptance_band() {
    let q = [1.0 / 3.0; 3];
    for i in 0..=60 {
        let t = f64::from(i) / 90.0;
        let p = [1.0 / 3.0, t, 2.0 / 3.0 - t];
        let a = alpha(&p, &q, SchemeKind::Iid, 2);
        if (1.0 / 9.0 + 1e-12..=5.0 / 9.0 - 1e-12).contains(&t) {
            assert_close(a, 1.0);
        } else if !(1.0 / 9.0 - 1e-12..=5.0 / 9.0 + 1e-12).contains(&t) {
            assert!(a < 1.0 - 1e-6, "t = {t}: alpha {a} should be below 1");
        }
    }
}

#[test]
fn uniform_draft_rows() {
    let q = [1.0 / 3.0; 3];
    let p = [1.0 / 3.0, 0.0, 2.0 / 3.0];
    assert_close(alpha(&p, &q, SchemeKind::Iid, 2), 8.0 / 9.0);
    assert_close(alpha(&p, &q, SchemeKind::WithoutReplacement, 2), 1.0);
    assert_close(alpha(&p, &q, SchemeKind::Iid, 1), 2.0 / 3.0);
    let bound = optimal_acceptance_iid(&dist(&p), &dist(&q), 2, IidAlgorithm::Selection).unwrap();
    assert_eq!(bound.certificate, vec![1]);

    let p = [1.0 / 6.0, 0.0, 5.0 / 6.0];
    assert_close(alpha(&p, &q, SchemeKind::Iid, 2), 13.0 / 18.0);
    assert_close(alpha(&p, &q, SchemeKind::WithoutReplacement, 2), 5.0 / 6.0);
    assert_close(alpha(&p, &q, SchemeKind::Iid, 1), 0.5);
}

#[test]
fn single_draft_is_overlap_for_every_scheme() {
    let (p, q): ([f64; 4], [f64; 4]) = ([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]);
    let overlap: f64 = p.iter().zip(&q).map(|(a, b)| a.min(*b)).sum();
    for kind in [
        SchemeKind::Iid,
        SchemeKind::WithoutReplacement,
        SchemeKind::Greedy,
        SchemeKind::Independent,
    ] {
        assert_close(alpha(&p, &q, kind, 1), overlap);
    }
}
