//! With the `highs` feature: HiGHS and microlp agree on both formulations.

#![cfg(feature = "highs")]

use mdsd_core::{Distribution, DraftScheme, Problem, SchemeKind};
use mdsd_lp::{Formulation, LpBackend, LpSolver};
use proptest::prelude::*;

fn normalised(w: &[f64]) -> Distribution {
    let total: f64 = w.iter().sum();
    Distribution::from_probs(w.iter().map(|x| x / total).collect::<Vec<_>>()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn highs_agrees_with_microlp(
        weights in prop::collection::vec(0.0f64..1.0, 12),
        v in 2usize..6,
        n in 1usize..4,
        kind in 0usize..SchemeKind::ALL.len(),
    ) {
        let kind = SchemeKind::ALL[kind];
        let p = normalised(&[&weights[..v - 1], &[1e-3]].concat());
        let q = normalised(&weights[6..6 + v].iter().map(|x| x + 0.05).collect::<Vec<_>>());
        let n = kind.fixed_n().unwrap_or(if kind.draws_distinct() { n.min(v) } else { n });
        let qs = if kind == SchemeKind::Independent { vec![q; n] } else { vec![q] };
        let problem = Problem::new(p, DraftScheme::new(kind, qs, n).unwrap()).unwrap();
        for formulation in [Formulation::Full, Formulation::Relaxed] {
            let solver = LpSolver::default().with_formulation(formulation);
            let micro = solver.solve(&problem).unwrap();
            let highs = solver.with_backend(LpBackend::Highs).solve(&problem).unwrap();
            prop_assert!((micro.alpha - highs.alpha).abs() <= 1e-7, "{formulation}: microlp {} highs {}", micro.alpha, highs.alpha);
            prop_assert!(highs.status.max_marginal_error <= 1e-9);
        }
    }
}
