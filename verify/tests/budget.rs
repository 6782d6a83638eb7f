//! The optimal verifier under a time budget: whatever the budget (none, a
//! few microseconds, or zero, which leaves the start rule), the rule it
//! returns is lossless by exact enumeration, its reported acceptance is
//! at most the enumerated one, and its reported gap holds against alpha*
//! from the exact methods.

use std::time::Duration;

use mdsd_benches::small_problems;
use mdsd_convex::ConvexSolver;
use mdsd_core::{DEFAULT_ENUMERATION_LIMIT, Problem, SchemeKind, Status};
use mdsd_verify::{OptimalConvex, exact};
use proptest::prelude::*;

/// Enumerated laws are sums of a few hundred products: exact to this.
const TOL: f64 = 1e-12;

/// The time limits every problem is solved under: zero (the start rule),
/// two that stop some solves part way, and none.
const TIME_LIMITS: [Option<Duration>; 4] = [
    Some(Duration::ZERO),
    Some(Duration::from_micros(20)),
    Some(Duration::from_micros(200)),
    None,
];

fn check(problem: &Problem) -> Result<(), TestCaseError> {
    for time_limit in TIME_LIMITS {
        let solver = ConvexSolver::default().with_time_limit(time_limit);
        let verifier = OptimalConvex::new(problem, &solver).unwrap();
        let summary = &verifier.solution().summary;
        let report = exact(problem, &verifier, DEFAULT_ENUMERATION_LIMIT).unwrap();
        let at = format!("{:?} on {problem:?}", time_limit);
        prop_assert!(
            report.max_law_error <= TOL,
            "law off by {} at {at}",
            report.max_law_error
        );
        // The reported acceptance is the selected token's, Σ min(p, r):
        // the output is a draft at least that often (a rejected selection's
        // residual draw may land on another draft), and never above alpha*.
        prop_assert!(
            summary.acceptance <= report.acceptance + 1e-9,
            "reported acceptance {} above the enumerated {} at {at}",
            summary.acceptance,
            report.acceptance
        );
        prop_assert!(report.acceptance <= report.alpha_star + TOL);
        // The gap is certified: alpha* (exact, by the LP or max flow) is
        // at most acceptance + gap.
        prop_assert!(
            summary.acceptance + summary.gap() >= report.alpha_star - TOL,
            "gap {} below alpha* {} - acceptance {} at {at}",
            summary.gap(),
            report.alpha_star,
            summary.acceptance
        );
        match summary.status {
            Status::Converged { tolerance } => prop_assert!(
                summary.gap() <= tolerance + TOL,
                "converged with gap {} at {at}",
                summary.gap()
            ),
            Status::TimeLimit => prop_assert!(time_limit.is_some(), "time limit without one"),
            other => prop_assert!(false, "status {other} at {at}"),
        }
        if time_limit == Some(Duration::ZERO) {
            prop_assert_eq!(summary.iterations, 0, "iterations at a zero budget");
        }
    }
    Ok(())
}

proptest! {
    // 3 schemes x 100 problems x 4 budgets.
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn iid(problem in small_problems(SchemeKind::Iid)) { check(&problem)?; }

    #[test]
    fn without_replacement(problem in small_problems(SchemeKind::WithoutReplacement)) {
        check(&problem)?;
    }

    #[test]
    fn independent(problem in small_problems(SchemeKind::Independent)) { check(&problem)?; }
}

/// A batch of rows gives the rows' single results: the same rules (each
/// row's r and acceptance), and from one seed the tokens that each row's
/// verifier draws from its stream, on a pool of one thread as on the
/// default pool.
#[test]
fn batches_give_the_rows_single_results() {
    use mdsd_verify::{OptimalRules, Verifier, seeded_stream};

    let rows = mdsd_benches::real_rows();
    let n = 3;
    let problems: Vec<Problem> = (rows.iter().take(4))
        .enumerate()
        .map(|(b, (p, q))| {
            let q = q.top_k(500 + 500 * b).unwrap();
            let drafts = match b % 2 {
                0 => mdsd_core::DraftScheme::iid(q, n),
                _ => mdsd_core::DraftScheme::without_replacement(q, n),
            };
            Problem::new(p.clone(), drafts.unwrap()).unwrap()
        })
        .collect();
    let solver = ConvexSolver::default();
    let batch = OptimalRules::prepare(problems.clone(), &solver, &|_| {}).unwrap();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let serial = one_thread
        .install(|| OptimalRules::prepare(problems.clone(), &solver, &|_| {}))
        .unwrap();
    // Drafts: each row's n most likely draft tokens.
    let drafts: Vec<Vec<usize>> = (problems.iter())
        .map(|problem| {
            let q = problem.drafts().drafts()[0].probs();
            let mut order: Vec<usize> = (0..q.len()).collect();
            order.sort_by(|&a, &b| q[b].total_cmp(&q[a]));
            order.truncate(n);
            order
        })
        .collect();
    let seed = 17;
    let tokens = batch.sample(&drafts, seed, &|_| {}).unwrap();
    assert_eq!(
        tokens,
        one_thread
            .install(|| serial.sample(&drafts, seed, &|_| {}))
            .unwrap()
    );
    for (b, problem) in problems.iter().enumerate() {
        let single = OptimalConvex::new(problem, &solver).unwrap();
        for rules in [&batch, &serial] {
            let rule = &rules.rules()[b].solution();
            assert_eq!(rule.rule, single.solution().rule, "row {b}");
            assert_eq!(
                rule.summary.acceptance,
                single.solution().summary.acceptance
            );
        }
        let mut rng = seeded_stream(seed, b as u64);
        assert_eq!(
            tokens[b],
            single.sample(&drafts[b], &mut rng).unwrap(),
            "row {b}"
        );
    }
    let short = batch.sample(&drafts[..2], seed, &|_| {});
    assert!(matches!(
        short,
        Err(mdsd_verify::VerifyError::BatchRows {
            rules: 4,
            drafts: 2
        })
    ));
}
