//! The enumeration-free solver against the closed-form alpha* on random
//! small instances and on real rows.

use mdsd_benches::small_problems;
use mdsd_convex::{ConvexError, ConvexSolver};
use mdsd_core::{DraftScheme, Problem, SchemeKind};
use proptest::prelude::*;

fn check(problem: &Problem, tolerance: f64) -> Result<(), TestCaseError> {
    let solution = ConvexSolver::default()
        .with_tolerance(tolerance)
        .solve(problem)
        .map_err(|e| {
            TestCaseError::fail(format!(
                "{e} on p {:?} q {:?} n {}",
                problem.target().probs(),
                problem.drafts().drafts()[0].probs(),
                problem.drafts().n()
            ))
        })?;
    prop_assert!(
        solution.alpha >= solution.alpha_star - tolerance - 1e-12,
        "alpha {} < alpha* {}",
        solution.alpha,
        solution.alpha_star
    );
    prop_assert!(solution.alpha <= solution.alpha_star + 1e-12);
    let total: f64 = solution.selected.iter().sum();
    prop_assert!((total - 1.0).abs() <= 1e-13, "r sums to {total}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn reaches_alpha_star_within_its_tolerance(problem in small_problems(SchemeKind::Iid)) {
        check(&problem, 1e-9)?;
    }
}

#[test]
fn real_rows_at_full_vocabulary() {
    for (p, q) in mdsd_benches::real_rows().into_iter().take(2) {
        for n in [2, 4] {
            let problem = Problem::new(p.clone(), DraftScheme::iid(q.clone(), n).unwrap()).unwrap();
            let solution = ConvexSolver::default().solve(&problem).unwrap();
            assert!(solution.alpha >= solution.alpha_star - 1e-6);
            assert!(solution.alpha <= solution.alpha_star + 1e-12);
            let total: f64 = solution.selected.iter().sum();
            assert!((total - 1.0).abs() <= 1e-12, "r sums to {total}");
        }
    }
}

#[test]
fn refuses_other_schemes() {
    let p = mdsd_benches::normalised(&[0.5, 0.5]);
    let problem = Problem::new(p.clone(), DraftScheme::without_replacement(p, 2).unwrap()).unwrap();
    assert!(matches!(
        ConvexSolver::default().solve(&problem),
        Err(ConvexError::Unsupported(SchemeKind::WithoutReplacement))
    ));
}
