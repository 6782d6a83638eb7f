//! Every verifier lossless by exact enumeration, never above alpha*, closed
//! forms equal to enumeration, the verifier rows of docs/TEST_VECTORS.md, and the
//! harness catching broken verifiers.

use mdsd_benches::{normalised, repeated_laws_problems, small_problems};
use mdsd_core::{DEFAULT_ENUMERATION_LIMIT, DraftScheme, Problem, SchemeKind};
use mdsd_verify::{
    KHISTI_MAX_TRUNCATION, KHISTI_TRUNCATION, Khisti, OutputLaw, Verifier, VerifierKind,
    VerifyError, exact, kseq_acceptance, naive_acceptance, nss_acceptance, specinfer_acceptance,
};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const TOL: f64 = 1e-12;

fn check(problem: &Problem) -> Result<(), TestCaseError> {
    let kind = problem.drafts().kind();
    for name in VerifierKind::ALL.into_iter() {
        if !name.supports(kind) {
            let refused = matches!(name.prepare(problem), Err(VerifyError::Unsupported { .. }));
            prop_assert!(refused, "{name} accepted {kind}");
            continue;
        }
        let verifier = name.prepare(problem).unwrap();
        let report = exact(problem, verifier.as_ref(), DEFAULT_ENUMERATION_LIMIT).unwrap();
        prop_assert!(
            report.max_marginal_error <= TOL,
            "{name} on {kind}: marginal off by {}",
            report.max_marginal_error
        );
        prop_assert!(
            report.max_law_error <= TOL,
            "{name}: law off by {}",
            report.max_law_error
        );
        prop_assert!(
            report.acceptance <= report.alpha_star + TOL,
            "{name}: {} > alpha* {}",
            report.acceptance,
            report.alpha_star
        );
        let closed = match name.name() {
            "nss" if kind != SchemeKind::WithoutReplacement => {
                Some(nss_acceptance(problem).unwrap())
            }
            "naive" if !matches!(kind, SchemeKind::WithoutReplacement | SchemeKind::Hub) => {
                Some(naive_acceptance(problem).unwrap())
            }
            "specinfer" => Some(specinfer_acceptance(problem).unwrap()),
            "kseq" => Some(kseq_acceptance(problem).unwrap().0),
            // Optimal by construction (spechub for its own hub drafts;
            // deterministic at p(S), alpha* of a deterministic set S).
            "greedy" | "spechub" | "deterministic" | "optimal-flow" => Some(report.alpha_star),
            _ => None,
        };
        // Khisti et al.'s Theorem 1: with two drafts, the pair-weight LP over
        // every draft token (V <= 6 is within the truncation) reaches alpha*,
        // up to microlp's feasibility tolerance (~1e-7).
        if name == VerifierKind::Khisti && problem.drafts().n() <= 2 {
            prop_assert!(
                report.acceptance >= report.alpha_star - 1e-6,
                "khisti on {kind}: {} < alpha* {}",
                report.acceptance,
                report.alpha_star
            );
        }
        // The convex solver's default tolerance: alpha* - 1e-7.
        if name == VerifierKind::OptimalConvex {
            prop_assert!(
                report.acceptance >= report.alpha_star - 1e-7 - TOL,
                "optimal-convex: {} < alpha* {}",
                report.acceptance,
                report.alpha_star
            );
        }
        if let Some(closed) = closed {
            prop_assert!(
                (closed - report.acceptance).abs() <= 1e-9,
                "{name} on {kind}: closed form {closed}, enumeration {}",
                report.acceptance
            );
        }
    }
    Ok(())
}

proptest! {
    // 7 schemes x 150 = 1050 random instances.
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn iid(problem in small_problems(SchemeKind::Iid)) { check(&problem)?; }

    #[test]
    fn without_replacement(problem in small_problems(SchemeKind::WithoutReplacement)) { check(&problem)?; }

    #[test]
    fn greedy(problem in small_problems(SchemeKind::Greedy)) { check(&problem)?; }

    #[test]
    fn independent(problem in small_problems(SchemeKind::Independent)) { check(&problem)?; }

    /// Several drafts from one law, which the convex solver takes once.
    #[test]
    fn independent_with_repeated_laws(problem in repeated_laws_problems()) { check(&problem)?; }

    #[test]
    fn hub(problem in small_problems(SchemeKind::Hub)) { check(&problem)?; }

    #[test]
    fn argmax(problem in small_problems(SchemeKind::Argmax)) { check(&problem)?; }

    #[test]
    fn top(problem in small_problems(SchemeKind::Top)) { check(&problem)?; }
}

fn acceptance(name: &str, p: &[f64], q: &[f64], kind: SchemeKind, n: usize) -> f64 {
    let problem = Problem::new(
        normalised(p),
        DraftScheme::new(kind, vec![normalised(q)], n).unwrap(),
    )
    .unwrap();
    let verifier = name
        .parse::<VerifierKind>()
        .unwrap()
        .prepare(&problem)
        .unwrap();
    let report = exact(&problem, verifier.as_ref(), DEFAULT_ENUMERATION_LIMIT).unwrap();
    assert!(report.max_marginal_error <= TOL);
    report.acceptance
}

fn assert_close(found: f64, expected: f64, tol: f64) {
    assert!(
        (found - expected).abs() <= tol,
        "found {found}, expected {expected}"
    );
}

#[test]
fn test_vector_rows() {
    let (p, q) = ([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]);
    assert_close(
        acceptance("specinfer", &p, &q, SchemeKind::Iid, 2),
        0.76,
        TOL,
    );
    assert_close(
        acceptance("rrs-wor", &p, &q, SchemeKind::WithoutReplacement, 2),
        0.82,
        TOL,
    );
    assert_close(
        acceptance("kseq", &p, &q, SchemeKind::Iid, 2),
        0.79135528726,
        1e-10,
    );
    assert_close(
        acceptance("greedy", &p, &q, SchemeKind::Greedy, 2),
        0.90,
        TOL,
    );
    let problem =
        Problem::new(normalised(&p), DraftScheme::iid(normalised(&q), 2).unwrap()).unwrap();
    assert_close(kseq_acceptance(&problem).unwrap().1, 1.45677643628, 1e-10);

    let (p, q) = ([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]);
    assert_close(
        acceptance("specinfer", &p, &q, SchemeKind::Iid, 3),
        0.768,
        TOL,
    );
    assert_close(
        acceptance("rrs-wor", &p, &q, SchemeKind::WithoutReplacement, 3),
        0.840298,
        1e-6,
    );
    assert_close(
        acceptance("kseq", &p, &q, SchemeKind::Iid, 3),
        0.79394996831,
        1e-10,
    );
    assert_close(
        acceptance("greedy", &p, &q, SchemeKind::Greedy, 3),
        0.93333333333,
        1e-10,
    );
    let problem =
        Problem::new(normalised(&p), DraftScheme::iid(normalised(&q), 3).unwrap()).unwrap();
    assert_close(kseq_acceptance(&problem).unwrap().1, 1.93949968308, 1e-10);
}

#[test]
fn uniform_draft_rows() {
    let q = [1.0 / 3.0; 3];
    let p = [1.0 / 3.0, 0.0, 2.0 / 3.0];
    let problem =
        Problem::new(normalised(&p), DraftScheme::iid(normalised(&q), 2).unwrap()).unwrap();
    let (kseq, rho) = kseq_acceptance(&problem).unwrap();
    assert_close(rho, (5.0 + 13f64.sqrt()) / 6.0, 1e-12);
    assert_close(kseq, 0.81141951530, 1e-10);
    assert_close(
        acceptance("kseq", &p, &q, SchemeKind::Iid, 2),
        0.81141951530,
        1e-10,
    );
    assert_close(
        acceptance("specinfer", &p, &q, SchemeKind::Iid, 2),
        7.0 / 9.0,
        TOL,
    );
    for name in ["naive", "specinfer", "kseq"] {
        assert_close(acceptance(name, &p, &q, SchemeKind::Iid, 1), 2.0 / 3.0, TOL);
    }
    let p = [1.0 / 6.0, 0.0, 5.0 / 6.0];
    assert_close(
        acceptance("specinfer", &p, &q, SchemeKind::Iid, 2),
        2.0 / 3.0,
        TOL,
    );
    for name in ["naive", "specinfer", "kseq"] {
        assert_close(acceptance(name, &p, &q, SchemeKind::Iid, 1), 0.5, TOL);
    }
}

/// SpecInfer whose residual (p - q)+ is not renormalised: mass goes
/// missing. (`tests/sampling.rs` has one drawing from p after a rejection,
/// caught by both the exact and the chi-square check.)
struct Unnormalised {
    p: Vec<f64>,
    q: Vec<f64>,
}

impl Verifier for Unnormalised {
    fn name(&self) -> &str {
        "unnormalised"
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        let x = drafts[0];
        let a = (self.p[x] / self.q[x]).min(1.0);
        let mut dense: Vec<f64> = self
            .p
            .iter()
            .zip(&self.q)
            .map(|(&py, &qy)| (1.0 - a) * (py - qy).max(0.0))
            .collect();
        dense[x] += a;
        Ok(dense
            .into_iter()
            .enumerate()
            .filter(|&(_, w)| w > 0.0)
            .collect())
    }
}

#[test]
fn the_harness_catches_a_broken_verifier() {
    let p = normalised(&[0.5, 0.3, 0.2]);
    let q = normalised(&[0.2, 0.3, 0.5]);
    let problem = Problem::new(p.clone(), DraftScheme::iid(q.clone(), 1).unwrap()).unwrap();
    let broken = Unnormalised {
        p: p.probs().to_vec(),
        q: q.probs().to_vec(),
    };
    let report = exact(&problem, &broken, DEFAULT_ENUMERATION_LIMIT).unwrap();
    assert!(
        report.max_marginal_error > 1e-3,
        "marginal error {}",
        report.max_marginal_error
    );
    assert!(
        report.max_law_error > 1e-3,
        "law error {}",
        report.max_law_error
    );
}

/// Each verifier's own sampler (O(n log V) where it has one) draws from its
/// exact conditional law, for every ordered draft tuple of a small problem.
#[test]
fn sampling_follows_the_conditional_law() {
    let p = normalised(&[0.35, 0.25, 0.2, 0.12, 0.08]);
    let q = normalised(&[0.1, 0.15, 0.3, 0.05, 0.4]);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let draws = 20_000;
    for drafts in [
        DraftScheme::without_replacement(q.clone(), 3).unwrap(),
        DraftScheme::iid(q.clone(), 3).unwrap(),
        DraftScheme::greedy(q.clone(), 3).unwrap(),
        DraftScheme::hub(q.clone()).unwrap(),
        DraftScheme::independent(vec![q.clone(), p.clone(), q.clone()]).unwrap(),
        DraftScheme::new(SchemeKind::Argmax, vec![q.clone()], 1).unwrap(),
        DraftScheme::new(SchemeKind::Top, vec![q.clone()], 3).unwrap(),
    ] {
        let problem = Problem::new(p.clone(), drafts).unwrap();
        let tuples = problem
            .drafts()
            .tuple_law(DEFAULT_ENUMERATION_LIMIT)
            .unwrap();
        for name in VerifierKind::ALL
            .into_iter()
            .filter(|n| n.supports(problem.drafts().kind()))
        {
            let verifier = name.prepare(&problem).unwrap();
            for tuple in &tuples.outcomes {
                let law = verifier.conditional(tuple).unwrap();
                let mut counts = [0usize; 5];
                for _ in 0..draws {
                    counts[verifier.sample(tuple, &mut rng).unwrap()] += 1;
                }
                for (y, &count) in counts.iter().enumerate() {
                    let w = law.iter().find(|l| l.0 == y).map_or(0.0, |l| l.1);
                    let freq = count as f64 / draws as f64;
                    let se = (w * (1.0 - w) / draws as f64).sqrt();
                    assert!(
                        (freq - w).abs() <= 5.0 * se + 1e-12,
                        "{name} {tuple:?} token {y}: {freq} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn errors_are_typed() {
    let p = normalised(&[0.5, 0.5]);
    let problem = Problem::new(p.clone(), DraftScheme::iid(p, 2).unwrap()).unwrap();
    assert!(matches!(
        "magic".parse::<VerifierKind>(),
        Err(VerifyError::UnknownVerifier { .. })
    ));
    let err = VerifierKind::RrsWithoutReplacement
        .prepare(&problem)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "verifier rrs-wor does not support iid drafts (it supports: wor)"
    );
    let specinfer = VerifierKind::SpecInfer.prepare(&problem).unwrap();
    assert!(matches!(
        specinfer.conditional(&[0]),
        Err(VerifyError::DraftCount {
            expected: 2,
            found: 1
        })
    ));
    assert!(matches!(
        specinfer.conditional(&[0, 7]),
        Err(VerifyError::TokenOutOfRange { token: 7, .. })
    ));
}

/// A random problem of vocabulary `v` (Dirichlet(1)-like weights from a seed).
fn random_problem(
    v: usize,
    seed: u64,
    scheme: impl Fn(mdsd_core::Distribution) -> DraftScheme,
) -> Problem {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draw = || -> Vec<f64> {
        (0..v)
            .map(|_| -(1.0 - rand::Rng::random::<f64>(&mut rng)).ln())
            .collect()
    };
    let p = normalised(&draw());
    let q = normalised(&draw());
    Problem::new(p, scheme(q)).unwrap()
}

/// Beyond the truncation (V = 40 > s): khisti stays lossless by exact
/// enumeration, its LP never does worse than the plain order rule (s = 1,
/// no pairs to weigh), and the tournament (n = 3) is lossless too.
#[test]
fn khisti_beyond_its_truncation() {
    for seed in 0..8 {
        let problem = random_problem(40, seed, |q| DraftScheme::iid(q, 2).unwrap());
        let rule_only = Khisti::new(&problem, 1).unwrap();
        let truncated = Khisti::new(&problem, KHISTI_TRUNCATION).unwrap();
        assert!(
            truncated.selected_acceptance() >= rule_only.selected_acceptance() - 1e-9,
            "seed {seed}: LP {} < rule {}",
            truncated.selected_acceptance(),
            rule_only.selected_acceptance()
        );
        for khisti in [&rule_only, &truncated] {
            let report = exact(&problem, khisti, DEFAULT_ENUMERATION_LIMIT).unwrap();
            assert!(report.max_marginal_error <= TOL && report.max_law_error <= TOL);
            assert!(report.acceptance >= khisti.selected_acceptance() - TOL);
            assert!(report.acceptance <= report.alpha_star + TOL);
        }
        let three = random_problem(12, seed, |q| DraftScheme::iid(q, 3).unwrap());
        let khisti = Khisti::new(&three, 5).unwrap();
        let report = exact(&three, &khisti, DEFAULT_ENUMERATION_LIMIT).unwrap();
        assert!(report.max_marginal_error <= TOL && report.acceptance <= report.alpha_star + TOL);
    }
    let problem = random_problem(4, 0, |q| DraftScheme::iid(q, 2).unwrap());
    for s in [0, KHISTI_MAX_TRUNCATION + 1] {
        let err = Khisti::new(&problem, s).err().unwrap();
        assert!(matches!(err, VerifyError::Truncation { truncation, .. } if truncation == s));
    }
}

/// SpecHub's drafts: the hub is argmax q, the scheme refuses n != 2, and
/// spechub reaches alpha* of its drafts, the greedy n = 2 value (same sets).
#[test]
fn spechub_on_its_hub_drafts() {
    let p = normalised(&[0.5, 0.3, 0.2]);
    let q = normalised(&[0.2, 0.3, 0.5]);
    let hub = DraftScheme::hub(q.clone()).unwrap();
    assert_eq!(hub.fixed_tokens(), &[2]);
    assert!(DraftScheme::new(SchemeKind::Hub, vec![q.clone()], 3).is_err());
    // Sets {2, 0} (q' = 0.4) and {2, 1} (0.6): alpha* = p(2) + min(.5,.4) + min(.3,.6).
    assert_close(
        acceptance("spechub", p.probs(), q.probs(), SchemeKind::Hub, 2),
        0.9,
        TOL,
    );
    assert_close(
        acceptance("greedy", p.probs(), q.probs(), SchemeKind::Greedy, 2),
        0.9,
        TOL,
    );
}

/// Verifiers without a closed form on a scheme (nss and naive on drafts
/// without replacement) are rated by sampling, within the 99% interval of
/// their enumerated acceptance, rather than refused.
#[test]
fn schemes_without_a_closed_form_are_rated_by_sampling() {
    let p = mdsd_core::Distribution::from_probs(vec![0.4, 0.3, 0.2, 0.1]).unwrap();
    let q = mdsd_core::Distribution::from_probs(vec![0.1, 0.2, 0.3, 0.4]).unwrap();
    let problem = Problem::new(p, DraftScheme::without_replacement(q, 2).unwrap()).unwrap();
    let convex = mdsd_convex::ConvexSolver::default();
    for kind in [VerifierKind::Nss, VerifierKind::Naive] {
        assert!(kind.exact_acceptance(&problem, &convex).is_none(), "{kind}");
        let rating = kind.rate(&problem, &convex, 50_000, 1, &|_| {}).unwrap();
        let verifier = kind.prepare(&problem).unwrap();
        let exact = mdsd_verify::exact(&problem, verifier.as_ref(), DEFAULT_ENUMERATION_LIMIT)
            .unwrap()
            .acceptance;
        let (low, high) = rating.interval.unwrap();
        assert!(
            low <= exact && exact <= high,
            "{kind}: {exact} not in [{low}, {high}]"
        );
    }
}
