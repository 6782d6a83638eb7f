//! Block-level verifiers: the block rows of docs/TEST_VECTORS.md, block
//! verification against the single-path LP, GBV and every composed
//! verifier lossless by enumeration and never above the K-path LP, the
//! samplers against exact enumeration, and GBV sampled at full vocabulary.

use mdsd_benches::{normalised, real_rows};
use mdsd_core::{ContextIndependent, ContextModel, MarkovModel};
use mdsd_lp::LpSolver;
use mdsd_verify::VerifierKind;
use mdsd_verify::block::{BlockReport, exact_block, prepare_block, sampled_block};
use proptest::prelude::*;

const LIMIT: usize = 1_000_000;
/// Tolerance of exact enumeration in f64.
const EXACT: f64 = 1e-12;
/// Tolerance of microlp's optimum.
const LP: f64 = 1e-8;

fn toy() -> ContextIndependent {
    ContextIndependent::new(normalised(&[1.0, 2.0]), normalised(&[2.0, 1.0])).unwrap()
}

fn exact(model: &dyn ContextModel, name: &str, depth: usize, paths: usize) -> BlockReport {
    let verifier = prepare_block(name, model, depth).unwrap();
    exact_block(model, verifier.as_ref(), depth, paths, LIMIT).unwrap()
}

/// Token-level verifiers for iid drafts, each composed over the tree.
fn composable() -> Vec<&'static str> {
    VerifierKind::ALL
        .into_iter()
        .filter(|kind| kind.supports(mdsd_core::SchemeKind::Iid))
        .map(VerifierKind::name)
        .collect()
}

#[test]
fn toy_expected_accepted_tokens() {
    let model = toy();
    let rows = [
        (1, 2.0 / 3.0, 2.0 / 3.0),
        (2, 10.0 / 9.0, 11.0 / 9.0),
        (3, 38.0 / 27.0, 5.0 / 3.0),
    ];
    for (depth, token, block) in rows {
        for (name, want) in [("token", token), ("bv", block)] {
            let report = exact(&model, name, depth, 1);
            assert!(
                (report.expected_accepted - want).abs() < EXACT,
                "{name} at L = {depth}: {} != {want}",
                report.expected_accepted
            );
            assert!((report.block_efficiency - want - 1.0).abs() < EXACT);
            assert!(report.max_law_error.unwrap() < EXACT, "{name} lossless");
        }
    }
}

/// Per path (w1, w2; h1, h2): P(tau = 2) = h2, P(tau = 1) = h1 (1 - h2),
/// P(tau = 0) = (1 - h1)(1 - h2), and the residual at tau = 0 is (0, 1).
#[test]
fn toy_block_verification_weights() {
    let model = toy();
    let bv = prepare_block("bv", &model, 2).unwrap();
    let rows = [
        ([0, 0], [0.0, 0.25]),
        ([0, 1], [0.0, 1.0]),
        ([1, 0], [1.0, 0.5]),
        ([1, 1], [1.0, 1.0]),
    ];
    for (path, [h1, h2]) in rows {
        let law = bv.law(&[path.to_vec()]).unwrap();
        let at = |tau: usize| -> f64 {
            law.iter()
                .filter(|(s, _)| s.len() == tau + 1)
                .map(|l| l.1)
                .sum()
        };
        assert!((at(2) - h2).abs() < EXACT, "{path:?}");
        assert!((at(1) - h1 * (1.0 - h2)).abs() < EXACT, "{path:?}");
        assert!((at(0) - (1.0 - h1) * (1.0 - h2)).abs() < EXACT, "{path:?}");
        assert!(
            law.iter()
                .filter(|(s, _)| s.len() == 1)
                .all(|(s, _)| s == &[1])
        );
    }
}

#[test]
fn toy_greedy_block_verification_and_lp() {
    let model = toy();
    for (paths, want) in [(1, 11.0 / 9.0), (2, 131.0 / 81.0)] {
        let report = exact(&model, "gbv", 2, paths);
        assert!(
            (report.expected_accepted - want).abs() < EXACT,
            "K = {paths}"
        );
        assert!(report.max_law_error.unwrap() < EXACT);
        // The test-vector rows hold the LP to 1e-12 too: at this size the
        // simplex's vertex is exact to rounding.
        let lp = LpSolver::default().solve_block(&model, 2, paths).unwrap();
        assert!(
            (lp.expected_accepted - want).abs() < EXACT,
            "LP, K = {paths}: {}",
            lp.expected_accepted
        );
        assert!(lp.max_law_error < EXACT);
    }
}

#[test]
fn every_composed_verifier_is_lossless() {
    for seed in [1, 2] {
        let model = MarkovModel::random(3, 1, seed).unwrap();
        for name in composable() {
            for paths in 1..=3 {
                let report = exact(&model, name, 2, paths);
                assert!(
                    report.max_law_error.unwrap() < EXACT,
                    "{name}, K = {paths}, seed {seed}: {:?}",
                    report.max_law_error
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Block verification attains the single-path LP optimum.
    #[test]
    fn block_verification_is_the_single_path_optimum(
        seed in any::<u64>(), depth in 1usize..=3, order in 0usize..=2,
    ) {
        let model = MarkovModel::random(3, order, seed).unwrap();
        let bv = exact(&model, "bv", depth, 1);
        prop_assert!(bv.max_law_error.unwrap() < EXACT);
        let lp = LpSolver::default().solve_block(&model, depth, 1).unwrap();
        prop_assert!(lp.max_law_error < LP);
        prop_assert!(
            (bv.expected_accepted - lp.expected_accepted).abs() < LP,
            "bv {} vs LP {}", bv.expected_accepted, lp.expected_accepted
        );
        let token = exact(&model, "token", depth, 1);
        prop_assert!(token.expected_accepted <= bv.expected_accepted + EXACT);
    }

    /// GBV and composed SpecInfer are lossless, never above the K-path LP;
    /// with one path GBV is block verification and composed SpecInfer is
    /// token-by-token speculative sampling.
    #[test]
    fn greedy_block_verification_is_lossless_and_below_the_lp(
        seed in any::<u64>(), vocab in 2usize..=3, depth in 1usize..=2, paths in 1usize..=3,
    ) {
        let model = MarkovModel::random(vocab, 1, seed).unwrap();
        let lp = LpSolver::default().solve_block(&model, depth, paths).unwrap();
        for name in ["gbv", "specinfer"] {
            let report = exact(&model, name, depth, paths);
            prop_assert!(report.max_law_error.unwrap() < EXACT, "{name}");
            prop_assert!(report.expected_accepted <= lp.expected_accepted + LP, "{name}");
        }
        if paths == 1 {
            let pairs = [("gbv", "bv"), ("specinfer", "token")];
            for (a, b) in pairs {
                let (a, b) = (exact(&model, a, depth, 1), exact(&model, b, depth, 1));
                prop_assert!((a.expected_accepted - b.expected_accepted).abs() < EXACT);
            }
        }
    }
}

/// The samplers agree with exact enumeration: E[tau] within 4.5 standard
/// errors, and the first output token passes chi-square.
#[test]
fn sampling_agrees_with_exact_enumeration() {
    let model = MarkovModel::random(3, 1, 5).unwrap();
    for name in ["token", "bv", "gbv", "specinfer", "kseq"] {
        let verifier = prepare_block(name, &model, 2).unwrap();
        let exact = exact_block(&model, verifier.as_ref(), 2, 3, LIMIT).unwrap();
        let sampled = sampled_block(&model, verifier.as_ref(), 2, 3, 40_000, 9).unwrap();
        let se = sampled.standard_error.unwrap();
        assert!(
            (sampled.expected_accepted - exact.expected_accepted).abs() < 4.5 * se,
            "{name}: sampled {} exact {} se {se}",
            sampled.expected_accepted,
            exact.expected_accepted
        );
        assert!(sampled.first_token_p_value.unwrap() > 1e-4, "{name}");
        // The law of tau: exact, a law whose mean is E(tau); sampled, each
        // P(tau = d) within 4.5 of its standard errors of the exact one.
        assert_eq!(exact.tau_law.len(), 3, "{name}: d = 0..=L");
        assert!(
            (exact.tau_law.iter().sum::<f64>() - 1.0).abs() < EXACT,
            "{name}"
        );
        let mean: f64 = (exact.tau_law.iter().enumerate())
            .map(|(d, p)| d as f64 * p)
            .sum();
        assert!((mean - exact.expected_accepted).abs() < EXACT, "{name}");
        for (d, (&s, &e)) in sampled.tau_law.iter().zip(&exact.tau_law).enumerate() {
            let se = (e * (1.0 - e) / 40_000.0).sqrt();
            assert!(
                (s - e).abs() <= 4.5 * se + 1e-12,
                "{name} P(tau = {d}): {s} vs {e}"
            );
        }
        // Acceptance per depth from the law: P(tau >= d) / P(tau >= d - 1).
        let at_least = |d: usize| exact.tau_law[d..].iter().sum::<f64>();
        for (d, &a) in exact.depth_acceptance().iter().enumerate() {
            assert!(
                (a - at_least(d + 1) / at_least(d)).abs() < EXACT,
                "{name} depth {d}"
            );
        }
    }
}

/// GBV on a real row pair (V = 151936) as context-independent laws: the
/// first output token passes chi-square against p, and more paths accept
/// more.
#[test]
fn greedy_block_verification_at_full_vocabulary() {
    let (p, q) = real_rows().swap_remove(0);
    let model = ContextIndependent::new(p, q).unwrap();
    let gbv = prepare_block("gbv", &model, 4).unwrap();
    let mut last = 0.0;
    for paths in [1, 4] {
        let report = sampled_block(&model, gbv.as_ref(), 4, paths, 4_000, 3).unwrap();
        assert!(report.first_token_p_value.unwrap() > 1e-4, "K = {paths}");
        assert!(report.expected_accepted > last);
        last = report.expected_accepted;
    }
}

#[test]
fn bad_paths_get_typed_errors() {
    let model = toy();
    let bv = prepare_block("bv", &model, 2).unwrap();
    let err = |paths: &[Vec<usize>]| bv.law(paths).unwrap_err().to_string();
    assert!(err(&[vec![0]]).contains("has 1 tokens; the block depth is 2"));
    assert!(err(&[vec![0, 5]]).contains("token 5 is out of range"));
    assert!(err(&[]).contains("expected 1 drafts, got 0"));
    let prepare_err = |name| prepare_block(name, &model, 2).err().unwrap().to_string();
    assert!(prepare_err("spechub").contains("does not support iid"));
    assert!(prepare_err("nonsense").contains("unknown verifier"));
    let big = MarkovModel::random(50, 0, 1).unwrap();
    let e = exact_block(&big, bv.as_ref(), 4, 2, LIMIT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("use sampling"), "{e}");
    let lp = LpSolver::default()
        .solve_block(&big, 4, 2)
        .unwrap_err()
        .to_string();
    assert!(lp.contains("gbv"), "{lp}");
}

/// GBV chooses by the clamped ratio min(1, p/q), ties to the earliest path:
/// with p == q every child is certain, the skewed law is q = p, and every
/// draft token is accepted: E[tau] = L for every K (single-path block
/// verification's value), exactly.
#[test]
fn gbv_accepts_everything_when_target_and_draft_agree() {
    let law = normalised(&[0.5, 0.3, 0.2]);
    let model = ContextIndependent::new(law.clone(), law).unwrap();
    for depth in 1..=2 {
        for paths in 1..=3 {
            let gbv = exact(&model, "gbv", depth, paths);
            assert!(
                (gbv.expected_accepted - depth as f64).abs() <= EXACT,
                "L = {depth}, K = {paths}: {}",
                gbv.expected_accepted
            );
            assert!(gbv.max_law_error.unwrap() <= EXACT);
        }
    }
}

/// Exact ties of the clamped ratio, among certain children (p >= q) and
/// among uncertain ones of one ratio: GBV stays lossless (1e-12) and
/// within the K-path LP, and is single-path block verification at K = 1.
#[test]
fn gbv_is_lossless_at_ties_of_the_ratio() {
    let cases = [
        // Tokens 0-2 share ratio 1/2; token 3 is certain.
        (vec![0.2, 0.1, 0.1, 0.6], vec![0.4, 0.2, 0.2, 0.2]),
        // Tokens 0 and 1 are certain (ratios 2 and 1), token 2 is not.
        (vec![0.4, 0.3, 0.3], vec![0.2, 0.3, 0.5]),
        // Two uncertain tokens of one ratio and two certain ones.
        (vec![0.1, 0.1, 0.3, 0.5], vec![0.3, 0.3, 0.2, 0.2]),
    ];
    for (p, q) in cases {
        let model = ContextIndependent::new(normalised(&p), normalised(&q)).unwrap();
        for depth in 1..=2 {
            let bv = exact(&model, "bv", depth, 1);
            for paths in 1..=3 {
                let gbv = exact(&model, "gbv", depth, paths);
                assert!(gbv.max_law_error.unwrap() <= EXACT, "{p:?}, K = {paths}");
                if paths == 1 {
                    assert!((gbv.expected_accepted - bv.expected_accepted).abs() <= EXACT);
                }
                if depth == 1 && paths <= 2 {
                    let lp = LpSolver::default()
                        .solve_block(&model, depth, paths)
                        .unwrap();
                    assert!(gbv.expected_accepted <= lp.expected_accepted + LP);
                }
            }
        }
    }
}
