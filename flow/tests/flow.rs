//! Max flow against the LP and the closed-form bound, the plan's marginals,
//! the min-cut certificate, the decomposition, and the verifier object.

use mdsd_benches::{normalised, small_problems};
use mdsd_bounds::{acceptance_upper_bound, optimal_acceptance};
use mdsd_core::{DraftScheme, Problem, SchemeKind, Solve};
use mdsd_flow::{FlowError, FlowSolver, outer_absorption_closed_form};
use mdsd_lp::{Formulation, LpSolver};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const TOL: f64 = 1e-9;

fn check(problem: &Problem) -> Result<(), TestCaseError> {
    let bound = optimal_acceptance(problem).unwrap();
    let lp = LpSolver::default()
        .with_formulation(Formulation::Relaxed)
        .solve(problem)
        .unwrap();
    let flow = FlowSolver::default().solve(problem).unwrap();
    prop_assert!(
        (flow.summary.alpha_star - lp.summary.alpha_star).abs() <= TOL,
        "flow {} lp {}",
        flow.summary.alpha_star,
        lp.summary.alpha_star
    );
    prop_assert!(
        (flow.summary.alpha_star - bound.alpha_star).abs() <= TOL,
        "flow {} bound {}",
        flow.summary.alpha_star,
        bound.alpha_star
    );

    // Marginals in L1: each row sums to 1, so Σ_S Q(S) |Σ_y pi - 1|, and the
    // output law against p.
    let plan = &flow.plan;
    let rows: f64 = plan
        .law()
        .probs
        .iter()
        .enumerate()
        .map(|(i, q)| q * (plan.conditional(i).iter().sum::<f64>() - 1.0).abs())
        .sum();
    let columns: f64 = plan
        .output_marginal()
        .iter()
        .zip(problem.target().probs())
        .map(|(a, b)| (a - b).abs())
        .sum();
    prop_assert!(
        rows <= TOL && columns <= TOL,
        "L1 marginal errors {rows} {columns}"
    );
    prop_assert!((plan.acceptance() - flow.summary.alpha_star).abs() <= TOL);

    let cut = acceptance_upper_bound(problem, &flow.summary.certificate).unwrap();
    prop_assert!(
        (cut - bound.alpha_star).abs() <= TOL,
        "min cut gives {cut}, bound {}",
        bound.alpha_star
    );

    let decomposed = FlowSolver::default()
        .with_decomposition(true)
        .solve(problem)
        .unwrap();
    prop_assert!(
        (decomposed.summary.alpha_star - flow.summary.alpha_star).abs() <= TOL,
        "decomposed {} whole {}",
        decomposed.summary.alpha_star,
        flow.summary.alpha_star
    );
    prop_assert!(decomposed.plan.max_marginal_error(problem.target()) <= TOL);
    prop_assert!((decomposed.plan.acceptance() - flow.summary.alpha_star).abs() <= TOL);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn iid(problem in small_problems(SchemeKind::Iid)) { check(&problem)?; }

    #[test]
    fn without_replacement(problem in small_problems(SchemeKind::WithoutReplacement)) { check(&problem)?; }

    #[test]
    fn greedy(problem in small_problems(SchemeKind::Greedy)) { check(&problem)?; }

    #[test]
    fn independent(problem in small_problems(SchemeKind::Independent)) { check(&problem)?; }

    #[test]
    fn hub(problem in small_problems(SchemeKind::Hub)) { check(&problem)?; }
}

/// Independent drafts beyond the subset search (V = 24): flow is the exact
/// method; its cut certifies it and the LP agrees.
#[test]
fn independent_drafts_beyond_the_subset_search() {
    let p = normalised(
        &(0..24)
            .map(|i| 1.0 + (i * 7 % 24) as f64)
            .collect::<Vec<_>>(),
    );
    let q1 = normalised(
        &(0..24)
            .map(|i| 1.0 + (i * 5 % 24) as f64)
            .collect::<Vec<_>>(),
    );
    let q2 = normalised(
        &(0..24)
            .map(|i| 1.0 + (i * 11 % 24) as f64 * 0.5)
            .collect::<Vec<_>>(),
    );
    let problem = Problem::new(p, DraftScheme::independent(vec![q1, q2]).unwrap()).unwrap();
    assert!(
        optimal_acceptance(&problem).is_err(),
        "the subset search refuses V = 24"
    );
    let flow = FlowSolver::default().solve(&problem).unwrap();
    let lp = LpSolver::default()
        .with_formulation(Formulation::Relaxed)
        .solve(&problem)
        .unwrap();
    assert!((flow.summary.alpha_star - lp.summary.alpha_star).abs() <= TOL);
    assert!(
        (acceptance_upper_bound(&problem, &flow.summary.certificate).unwrap()
            - flow.summary.alpha_star)
            .abs()
            <= TOL
    );
    let decomposed = FlowSolver::default()
        .with_decomposition(true)
        .solve(&problem)
        .unwrap();
    assert!((decomposed.summary.alpha_star - flow.summary.alpha_star).abs() <= TOL);
}

#[test]
fn outer_absorption_matches_closed_form() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..200 {
        let v = rand::Rng::random_range(&mut rng, 3..8);
        let n = rand::Rng::random_range(&mut rng, 1..4);
        let draw = |rng: &mut ChaCha8Rng| {
            normalised(
                &(0..v)
                    .map(|_| rand::Rng::random::<f64>(rng).powi(3) + 1e-4)
                    .collect::<Vec<_>>(),
            )
        };
        let p = draw(&mut rng);
        let q = draw(&mut rng);
        let problem = Problem::new(p, DraftScheme::iid(q, n).unwrap()).unwrap();
        let solution = FlowSolver::default()
            .with_decomposition(true)
            .solve(&problem)
            .unwrap();
        let in_h = problem.indicator(&solution.summary.certificate).unwrap();
        // Flow into each token from the sets not inside H*.
        let mut absorbed = vec![0.0; v];
        for (i, (set, prob)) in solution.plan.law().iter().enumerate() {
            if set.iter().all(|&y| in_h[y]) {
                continue;
            }
            for &y in set {
                absorbed[y] += prob * solution.plan.conditional(i)[y];
            }
        }
        let closed = outer_absorption_closed_form(&problem).unwrap();
        for y in 0..v {
            if !in_h[y] {
                assert!(
                    (absorbed[y] - closed[y]).abs() <= 1e-9,
                    "token {y}: flow {} closed form {}",
                    absorbed[y],
                    closed[y]
                );
            }
        }
    }
}

#[test]
fn set_budget_is_enforced() {
    let q = normalised(&[1.0; 40]);
    let problem = Problem::new(q.clone(), DraftScheme::iid(q, 3).unwrap()).unwrap();
    let err = FlowSolver::default()
        .with_max_sets(1000)
        .solve(&problem)
        .unwrap_err();
    assert!(
        matches!(
            err,
            FlowError::TooLarge {
                sets: 10700,
                limit: 1000
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("10700"));
}
