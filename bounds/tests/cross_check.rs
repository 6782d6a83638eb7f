//! The closed-form bounds against both LP formulations on random instances
//! (V 2..6, n 1..3, flat and peaked, zeros in p and q), to 1e-9.

mod common;

use common::{Instance, instances};
use mdsd_bounds::{
    IidAlgorithm, acceptance_upper_bound, optimal_acceptance, optimal_acceptance_iid,
};
use mdsd_core::{Problem, SchemeKind};
use mdsd_core::{Solve, Status};
use mdsd_lp::{Formulation, LpSolver};
use proptest::prelude::*;

const TOL: f64 = 1e-9;

/// bound = full LP = relaxed LP; every certificate attains its value; the
/// LP plans are couplings of Q and p; n = 1 gives Σ min(p, q).
fn check(instance: Instance) -> Result<(), TestCaseError> {
    let problem = Problem::new(instance.p.clone(), instance.drafts.clone()).unwrap();
    let bound = optimal_acceptance(&problem).unwrap();
    let upper = acceptance_upper_bound(&problem, &bound.certificate).unwrap();
    prop_assert!(
        (upper - bound.alpha_star).abs() <= TOL,
        "certificate gives {upper}, bound {}",
        bound.alpha_star
    );

    for formulation in [Formulation::Full, Formulation::Relaxed] {
        let lp = LpSolver::default()
            .with_formulation(formulation)
            .solve(&problem)
            .unwrap();
        prop_assert!(
            (lp.summary.alpha_star - bound.alpha_star).abs() <= TOL,
            "{formulation} LP {} vs bound {}",
            lp.summary.alpha_star,
            bound.alpha_star
        );
        prop_assert!(
            lp.max_marginal_error <= TOL,
            "plan marginals off by {}",
            lp.max_marginal_error
        );
        prop_assert!((lp.plan.acceptance() - lp.summary.alpha_star).abs() <= TOL);
        prop_assert_eq!(
            lp.summary.status,
            Status::Optimal,
            "the min cut of an optimal flow verifies"
        );
        let cut = &lp.summary.certificate;
        let cut_value = acceptance_upper_bound(&problem, cut).unwrap();
        prop_assert!((cut_value - bound.alpha_star).abs() <= TOL);
    }

    // One draft drawn from q: the single-draft acceptance.
    if instance.drafts.n() == 1 && !instance.drafts.kind().is_deterministic() {
        let single: f64 = instance
            .p
            .probs()
            .iter()
            .zip(instance.drafts.drafts()[0].probs())
            .map(|(a, b)| a.min(*b))
            .sum();
        prop_assert!(
            (bound.alpha_star - single).abs() <= TOL,
            "n = 1: {} vs Σ min {single}",
            bound.alpha_star
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn iid_bound_equals_lp(instance in instances(SchemeKind::Iid, 6, 3)) {
        check(instance.clone())?;
        let q = &instance.drafts.drafts()[0];
        let n = instance.drafts.n();
        let sort = optimal_acceptance_iid(&instance.p, q, n, IidAlgorithm::Sort).unwrap();
        let selection = optimal_acceptance_iid(&instance.p, q, n, IidAlgorithm::Selection).unwrap();
        prop_assert!((sort.alpha_star - selection.alpha_star).abs() <= 1e-12);
    }

    #[test]
    fn wor_bound_equals_lp(instance in instances(SchemeKind::WithoutReplacement, 6, 3)) {
        check(instance)?;
    }

    #[test]
    fn greedy_bound_equals_lp(instance in instances(SchemeKind::Greedy, 6, 3)) {
        check(instance)?;
    }

    #[test]
    fn independent_bound_equals_lp(instance in instances(SchemeKind::Independent, 6, 3)) {
        check(instance)?;
    }

    #[test]
    fn hub_bound_equals_lp(instance in instances(SchemeKind::Hub, 6, 2)) {
        check(instance)?;
    }

    /// Deterministic sets: p(S), the LP's value too.
    #[test]
    fn argmax_and_top_bounds_equal_lp(
        argmax in instances(SchemeKind::Argmax, 6, 1),
        top in instances(SchemeKind::Top, 6, 3),
    ) {
        for instance in [argmax, top] {
            let set = instance.drafts.fixed_tokens();
            let p_of_set: f64 = set.iter().map(|&t| instance.p.prob(t)).sum();
            let problem = Problem::new(instance.p.clone(), instance.drafts.clone()).unwrap();
            let bound = optimal_acceptance(&problem).unwrap();
            prop_assert!((bound.alpha_star - p_of_set).abs() <= TOL);
            check(instance)?;
        }
    }

    /// The ascending-p/q prefix is conjectured optimal for drafts without
    /// replacement (`docs/DESIGN.md` §3): test it against every subset at V <= 8.
    #[test]
    fn wor_prefix_is_optimal_among_all_subsets(instance in instances(SchemeKind::WithoutReplacement, 8, 4)) {
        let problem = Problem::new(instance.p, instance.drafts).unwrap();
        let bound = optimal_acceptance(&problem).unwrap();
        let v = problem.vocab_size();
        for mask in 0u32..(1 << v) {
            let set: Vec<usize> = (0..v).filter(|i| mask >> i & 1 == 1).collect();
            let value = acceptance_upper_bound(&problem, &set).unwrap();
            prop_assert!(value >= bound.alpha_star - 1e-12, "H = {set:?} gives {value} < prefix bound {}", bound.alpha_star);
        }
    }
}

/// Draft probabilities near and below the smallest normal float (the
/// exponential clocks' horizon over such a mass overflowed, and the
/// quadrature had no node): the closed form answers, with the LP's alpha*.
/// (The LP's plan over tuples of probability 0 in f64 is issue 47's.)
#[test]
fn wor_with_subnormal_draft_probabilities() {
    use mdsd_core::{Distribution, DraftScheme};
    let cases: [(&[f64], &[f64], usize); 4] = [
        (&[0.3, 0.3, 0.4], &[0.6, 0.4, 1e-310], 2),
        (&[0.1, 0.1, 0.8], &[0.7, 0.3, 1e-306], 2),
        (&[0.2, 0.5, 0.3], &[0.5, 0.5, 5e-324], 2),
        (&[0.25, 0.25, 0.25, 0.25], &[0.5, 0.5, 1e-300, 1e-310], 3),
    ];
    for (p, q, n) in cases {
        let drafts =
            DraftScheme::without_replacement(Distribution::from_probs(q.to_vec()).unwrap(), n)
                .unwrap();
        let problem = Problem::new(Distribution::from_probs(p.to_vec()).unwrap(), drafts).unwrap();
        let bound = optimal_acceptance(&problem).unwrap();
        let lp = LpSolver::default().solve(&problem).unwrap();
        assert!(
            (bound.alpha_star - lp.summary.alpha_star).abs() <= TOL,
            "p = {p:?}, q = {q:?}, n = {n}: bound {} LP {}",
            bound.alpha_star,
            lp.summary.alpha_star
        );
    }
}
