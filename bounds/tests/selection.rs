//! Bucket selection against the full sort on larger, adversarial instances:
//! exact ties in p/q, ratios far outside the bucketed exponent range, zeros.

use mdsd_bounds::{
    BoundError, IidAlgorithm, RATIO_BUCKETS, RatioBucketMasses, SELECTION_MIN_VOCAB,
    acceptance_upper_bound, ascending_ratio_order, optimal_acceptance_iid,
    optimal_acceptance_iid_from_buckets, optimal_acceptance_iid_many, optimal_acceptance_iid_rows,
    optimal_acceptance_independent, ratio_bucket,
};
use mdsd_core::{CoreError, Distribution, DraftScheme, ProbabilityRow, Problem};
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
        prop_assert!((sort.alpha_star - selection.alpha_star).abs() <= 1e-12, "sort {} selection {}", sort.alpha_star, selection.alpha_star);
        let problem = Problem::new(p, DraftScheme::iid(q, n).unwrap()).unwrap();
        let value = acceptance_upper_bound(&problem, &selection.certificate).unwrap();
        prop_assert!((value - selection.alpha_star).abs() <= 1e-12);
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
            prop_assert!((sort.alpha_star - alpha).abs() <= 1e-12, "n {} sort {} many {}", n, sort.alpha_star, alpha);
        }
    }

    /// Rows left unnormalised in a buffer (sums 1 ± 5e-7, as f32 rows
    /// read into f64 have) against the same rows renormalised and copied:
    /// checked first (`ProbabilityRow`) and checked in the bucket pass
    /// (`optimal_acceptance_iid_rows`, which buckets by the ratio of the
    /// values as given).
    #[test]
    fn borrowed_rows_match_distributions(
        (p, q) in prop_oneof![adversarial(), adversarial_of(SELECTION_MIN_VOCAB..SELECTION_MIN_VOCAB + 2000)],
        ns in prop::collection::vec(1usize..17, 1..9),
        (p_off, q_off) in (-5e-7f64..5e-7, -5e-7f64..5e-7),
    ) {
        let p_row: Vec<f64> = p.probs().iter().map(|x| x * (1.0 + p_off)).collect();
        let q_row: Vec<f64> = q.probs().iter().map(|x| x * (1.0 + q_off)).collect();
        let (p_row, q_row) = (ProbabilityRow::new(&p_row).unwrap(), ProbabilityRow::new(&q_row).unwrap());
        let borrowed = optimal_acceptance_iid_many(p_row, q_row, &ns).unwrap();
        let copied = optimal_acceptance_iid_many(
            &Distribution::from_probs(p_row.unnormalised()).unwrap(),
            &Distribution::from_probs(q_row.unnormalised()).unwrap(),
            &ns,
        ).unwrap();
        let in_place = optimal_acceptance_iid_rows(p_row.unnormalised(), q_row.unnormalised(), &ns).unwrap();
        for (n, ((b, i), c)) in ns.iter().zip(borrowed.iter().zip(&in_place).zip(&copied)) {
            prop_assert!((b - c).abs() <= 1e-12, "n {} borrowed {} copied {}", n, b, c);
            prop_assert!((i - c).abs() <= 1e-12, "n {} in place {} copied {}", n, i, c);
        }
    }
}

/// A row checked in the bucket pass fails as `ProbabilityRow::new` fails,
/// naming which row, on both sides of the vocabulary size where the pass
/// takes over; the target is checked first.
#[test]
fn rows_checked_in_place_name_what_is_wrong() {
    for len in [10, SELECTION_MIN_VOCAB + 3000] {
        let fine = vec![1.0 / len as f64; len];
        let mut negative = fine.clone();
        negative[len - 2] = -1e-3;
        let mut nan = fine.clone();
        nan[len / 2] = f64::NAN;
        let heavy: Vec<f64> = fine.iter().map(|x| x * 1.01).collect();
        for (bad, what) in [(&negative, "draft"), (&nan, "target"), (&heavy, "draft")] {
            let (p, q) = if what == "target" {
                (bad, &fine)
            } else {
                (&fine, bad)
            };
            let err = optimal_acceptance_iid_rows(p, q, &[1, 4]).unwrap_err();
            let expected = ProbabilityRow::new(bad).unwrap_err();
            match err {
                BoundError::InvalidRow {
                    what: named,
                    source,
                } => {
                    assert_eq!(named, what);
                    assert_eq!(source.to_string(), expected.to_string());
                }
                other => panic!("{other}"),
            }
        }
        let err = optimal_acceptance_iid_rows(&nan, &negative, &[1]).unwrap_err();
        assert!(
            matches!(err, BoundError::InvalidRow { what: "target", source: CoreError::NonFinite { index, .. } } if index == len / 2),
            "{err}"
        );
        assert!(matches!(
            optimal_acceptance_iid_rows(&fine, &fine[1..], &[1]),
            Err(BoundError::Invalid(CoreError::LengthMismatch { .. }))
        ));
        assert!(matches!(
            optimal_acceptance_iid_rows(&fine, &fine, &[0]),
            Err(BoundError::Invalid(CoreError::NoDrafts))
        ));
    }
}

/// The bucket masses and the candidates' `(token, bucket)` as an
/// accelerator hands them over: each bucket summed from the last token to
/// the first (another order than the CPU pass), the candidates unordered.
fn first_pass_elsewhere(
    p: &Distribution,
    q: &Distribution,
    ns: &[usize],
) -> (RatioBucketMasses, Vec<(usize, usize)>) {
    let buckets: Vec<usize> = p
        .probs()
        .iter()
        .zip(q.probs())
        .map(|(&a, &b)| ratio_bucket(a, b))
        .collect();
    let (mut mass_p, mut mass_q) = (vec![0.0; RATIO_BUCKETS], vec![0.0; RATIO_BUCKETS]);
    for (t, &b) in buckets.iter().enumerate().rev() {
        mass_p[b] += p.probs()[t];
        mass_q[b] += q.probs()[t];
    }
    let masses = RatioBucketMasses::new(mass_p, mass_q).unwrap();
    let wanted = masses.candidate_buckets(ns).unwrap();
    let candidates = buckets
        .iter()
        .enumerate()
        .rev()
        .filter(|&(_, &b)| wanted[b])
        .map(|(t, &b)| (t, b))
        .collect();
    (masses, candidates)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The bucket selection with its first pass done elsewhere against the
    /// full sort.
    #[test]
    fn first_pass_elsewhere_matches_sort(
        (p, q) in prop_oneof![adversarial(), adversarial_of(SELECTION_MIN_VOCAB..SELECTION_MIN_VOCAB + 2000)],
        ns in prop::collection::vec(1usize..17, 1..9),
    ) {
        let (masses, candidates) = first_pass_elsewhere(&p, &q, &ns);
        let alphas = optimal_acceptance_iid_from_buckets(&p, &q, &masses, &ns, &candidates).unwrap();
        for (&n, &alpha) in ns.iter().zip(&alphas) {
            let sort = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort).unwrap();
            prop_assert!((sort.alpha_star - alpha).abs() <= 1e-12, "n {} sort {} from buckets {}", n, sort.alpha_star, alpha);
        }
    }
}

#[test]
fn first_pass_elsewhere_refuses_wrong_layouts_and_missing_tokens() {
    let p = normalised((1..=5000).map(|i| f64::from(i % 97 + 1)).collect());
    let q = normalised((1..=5000).map(|i| f64::from(i % 89 + 1)).collect());
    let ns = [1, 4];
    let short = RatioBucketMasses::new(vec![0.0; 3], vec![0.0; RATIO_BUCKETS]).unwrap_err();
    assert!(short.to_string().contains("3 buckets"), "{short}");
    let mut negative = vec![0.0; RATIO_BUCKETS];
    negative[7] = -1.0;
    let negative = RatioBucketMasses::new(vec![0.0; RATIO_BUCKETS], negative).unwrap_err();
    assert!(
        negative.to_string().contains("bucket 7 holds -1"),
        "{negative}"
    );

    let (masses, mut candidates) = first_pass_elsewhere(&p, &q, &ns);
    assert!(!candidates.is_empty());
    let (_, bucket) = candidates.pop().unwrap();
    let missing =
        optimal_acceptance_iid_from_buckets(&p, &q, &masses, &ns, &candidates).unwrap_err();
    assert!(
        missing.to_string().contains(&format!("bucket {bucket}")),
        "{missing}"
    );
    let out_of_range =
        optimal_acceptance_iid_from_buckets(&p, &q, &masses, &ns, &[(5000, 0)]).unwrap_err();
    assert!(
        out_of_range.to_string().contains("token 5000"),
        "{out_of_range}"
    );
    assert!(optimal_acceptance_iid_from_buckets(&p, &q, &masses, &[0], &[]).is_err());
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
    assert!(
        err.to_string()
            .contains("use the convex solver or max flow"),
        "{err}"
    );
    assert_eq!(
        err.instead(),
        &[mdsd_core::Method::Convex, mdsd_core::Method::MaxFlow]
    );
}

/// `-0.0` is a valid zero: the selection must order it as the 0 it is.
#[test]
fn negative_zero_entries_order_as_zero() {
    let v = SELECTION_MIN_VOCAB + 1000;
    let mut p: Vec<f64> = (0..v).map(|i| f64::from((i % 13) as u32 + 1)).collect();
    let q: Vec<f64> = (0..v).map(|i| f64::from((i % 7) as u32 + 1)).collect();
    let total: f64 = p.iter().sum();
    p.iter_mut().for_each(|x| *x /= total);
    for i in (0..v).step_by(5) {
        p[i] = -0.0;
    }
    let total: f64 = p.iter().sum();
    let p = Distribution::from_probs(p.iter().map(|x| x / total).collect::<Vec<_>>()).unwrap();
    let q = normalised(q);
    let many = optimal_acceptance_iid_many(&p, &q, &[1, 2, 4, 8]).unwrap();
    for (&n, &alpha) in [1, 2, 4, 8].iter().zip(&many) {
        let sort = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort).unwrap();
        assert!(
            (sort.alpha_star - alpha).abs() <= 1e-12,
            "n {n}: sort {} many {alpha}",
            sort.alpha_star
        );
    }
}

proptest! {
    /// The ratio order is the sort of (p/q, id) written out with a
    /// comparator (q = 0 last, -0.0 as the zero it is, tied with +0.0 by
    /// id), on adversarial rows with ties, zeros and negative zeros.
    #[test]
    fn ratio_order_is_the_sort_by_ratio_then_id(
        (p, q) in adversarial_of(1..400),
        negative in prop::collection::vec(any::<bool>(), 400),
    ) {
        let mut p = p.probs().to_vec();
        p.iter_mut()
            .zip(&negative)
            .filter(|(x, _)| **x < 1e-290)
            .for_each(|(x, &n)| *x = if n { -0.0 } else { 0.0 });
        let q = q.probs();
        let ratio = |y: usize| if q[y] > 0.0 { (p[y] / q[y]).abs() } else { f64::INFINITY };
        let mut expected: Vec<usize> = (0..p.len()).collect();
        expected.sort_by(|&a, &b| ratio(a).total_cmp(&ratio(b)).then(a.cmp(&b)));
        prop_assert_eq!(ascending_ratio_order(&p, q), expected);
    }
}
