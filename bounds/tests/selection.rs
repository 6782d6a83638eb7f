//! Bucket selection against the full sort on larger, adversarial instances:
//! exact ties in p/q, ratios far outside the bucketed exponent range, zeros.

use mdsd_bounds::{
    BoundError, IidAlgorithm, SELECTION_MIN_VOCAB, acceptance_upper_bound, optimal_acceptance_iid,
    optimal_acceptance_iid_many, optimal_acceptance_independent,
};
use mdsd_core::{Distribution, DraftScheme, Problem};
use proptest::prelude::*;

fn normalised(w: Vec<f64>) -> Distribution {
    let total: f64 = w.iter().sum();
    Distribution::from_probs(w.into_iter().map(|x| x / total).collect::<Vec<_>>()).unwrap()
}

/// (p, q) of length V with blocks of tied ratios, extreme ratios and zeros.
fn adversarial() -> impl Strategy<Value = (Distribution, Distribution)> {
    adversarial_of(2..3000)
}

fn adversarial_of(
    sizes: std::ops::Range<usize>,
) -> impl Strategy<Value = (Distribution, Distribution)> {
    prop::collection::vec((0u8..6, 0.0f64..1.0, -80.0f64..80.0), sizes).prop_map(|tokens| {
        let (mut p, mut q) = (Vec::new(), Vec::new());
        for (kind, u, log_ratio) in tokens {
            let (a, b) = match kind {
                0 => (u, u),                    // ratio exactly 1
                1 => (2.0 * u, u),              // ratio exactly 2
                2 => (u * log_ratio.exp2(), u), // anywhere in 2^±80
                3 => (0.0, u),                  // p = 0
                4 => (u, 0.0),                  // q = 0
                _ => (u * 1e-300, u),           // ratio below 2^-64
            };
            p.push(a + 1e-300);
            q.push(b);
        }
        if q.iter().all(|&x| x == 0.0) {
            q[0] = 1.0;
        }
        (normalised(p), normalised(q))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn selection_matches_sort((p, q) in adversarial(), n in 1usize..9) {
        let sort = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort).unwrap();
        let selection = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Selection).unwrap();
        prop_assert!((sort.alpha - selection.alpha).abs() <= 1e-12, "sort {} selection {}", sort.alpha, selection.alpha);
        let problem = Problem::new(p, DraftScheme::iid(q, n).unwrap()).unwrap();
        let value = acceptance_upper_bound(&problem, &selection.certificate).unwrap();
        prop_assert!((value - selection.alpha).abs() <= 1e-12);
    }

    /// All n at once (one sort or one bucket pass) against one n at a time,
    /// on both sides of the vocabulary size where the pass takes over.
    #[test]
    fn many_n_match_one_at_a_time(
        (p, q) in prop_oneof![adversarial(), adversarial_of(SELECTION_MIN_VOCAB..SELECTION_MIN_VOCAB + 2000)],
        ns in prop::collection::vec(1usize..17, 1..9),
    ) {
        let many = optimal_acceptance_iid_many(&p, &q, &ns).unwrap();
        prop_assert_eq!(many.len(), ns.len());
        for (&n, &alpha) in ns.iter().zip(&many) {
            let sort = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort).unwrap();
            prop_assert!((sort.alpha - alpha).abs() <= 1e-12, "n {} sort {} many {}", n, sort.alpha, alpha);
        }
    }
}

#[test]
fn many_n_refuse_zero_drafts_and_mismatched_vocabularies() {
    let p = normalised(vec![1.0, 2.0, 3.0]);
    let q = normalised(vec![3.0, 2.0, 1.0]);
    assert!(optimal_acceptance_iid_many(&p, &q, &[1, 0]).is_err());
    let short = normalised(vec![1.0, 1.0]);
    assert!(optimal_acceptance_iid_many(&p, &short, &[2]).is_err());
}

#[test]
fn independent_subset_search_refuses_large_instances() {
    let uniform = normalised(vec![1.0; 24]);
    let err =
        optimal_acceptance_independent(&uniform, &[uniform.clone(), uniform.clone()]).unwrap_err();
    assert_eq!(
        err,
        BoundError::TooManyTokens {
            size: 24,
            limit: 20
        }
    );
    assert!(err.to_string().contains("mdsd-flow"));
}
