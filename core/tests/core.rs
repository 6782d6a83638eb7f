//! Validation, transforms, exact draft laws and sampling of mdsd-core.

use std::collections::HashMap;

use mdsd_core::{
    CheckedChunks, CoreError, CumulativeDistribution, DEFAULT_ENUMERATION_LIMIT, Distribution,
    DraftSampler, DraftScheme, ProbabilityRow, SchemeKind, Transform,
};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn dist(x: &[f64]) -> Distribution {
    Distribution::from_probs(x.to_vec()).unwrap()
}

#[test]
fn invalid_vectors_are_named() {
    assert_eq!(Distribution::from_probs(vec![]), Err(CoreError::Empty));
    assert_eq!(
        Distribution::from_probs(vec![0.5, f64::NAN, 0.5])
            .unwrap_err()
            .to_string(),
        "entry 1 is NaN, which is not a finite number"
    );
    assert!(matches!(
        Distribution::from_probs(vec![0.5, 0.6, -0.1]),
        Err(CoreError::Negative { index: 2, .. })
    ));
    assert!(matches!(
        Distribution::from_probs(vec![0.5, 0.6]),
        Err(CoreError::BadSum { sum, .. }) if (sum - 1.1).abs() < 1e-12
    ));
    assert!(matches!(
        Distribution::from_probs(vec![0.5, f64::INFINITY]),
        Err(CoreError::NonFinite { index: 1, .. })
    ));
}

/// A borrowed row is refused exactly as a copied one, and stands for the
/// same renormalised vector.
#[test]
fn borrowed_rows_are_checked_like_distributions() {
    let bad: [&[f64]; 5] = [
        &[],
        &[0.5, f64::NAN, 0.5],
        &[0.5, 0.6, -0.1],
        &[0.5, 0.6],
        &[0.5, f64::INFINITY],
    ];
    for row in bad {
        // Compared as text: a NaN entry makes the errors unequal as values.
        assert_eq!(
            ProbabilityRow::new(row).unwrap_err().to_string(),
            Distribution::from_probs(row).unwrap_err().to_string()
        );
    }
    let row = [0.25, 0.75 + 5e-7];
    let borrowed = ProbabilityRow::new(&row).unwrap();
    assert_eq!(borrowed.unnormalised(), &row);
    let copied = dist(&row);
    for (x, y) in row.iter().zip(copied.probs()) {
        assert!((x / borrowed.sum() - y).abs() <= 1e-16);
    }
    assert_eq!(ProbabilityRow::from(&copied).sum(), 1.0);
}

/// A row of `len` entries around the block length, summing to `1 + off`,
/// with `bad` (NaN, inf or negative) at `at` when given.
fn blocked_row(len: usize, off: f64, bad: Option<(usize, f64)>) -> Vec<f64> {
    let mut row: Vec<f64> = (0..len).map(|i| (1 + i % 7) as f64).collect();
    let sum: f64 = row.iter().sum();
    row.iter_mut().for_each(|x| *x *= (1.0 + off) / sum);
    if let Some((at, value)) = bad {
        row[at % len] = value;
    }
    row
}

proptest! {
    /// However much of a row is read before `finish` (none, some blocks,
    /// all), the blocks are the row in order, BLOCK long but the last, and
    /// `finish` gives what `ProbabilityRow::new` gives: the same sum to the
    /// bit, or the same error.
    #[test]
    fn checked_blocks_give_what_new_gives(
        len in prop_oneof![1usize..20, 1000usize..1050, 2040usize..2060, 3000usize..5000],
        off in prop_oneof![Just(0.0), -2e-6f64..2e-6],
        bad in proptest::option::weighted(0.3, (0usize..5000, prop_oneof![
            Just(f64::NAN), Just(f64::INFINITY), Just(-1e-9), Just(-0.0),
        ])),
        read in 0usize..6,
    ) {
        let row = blocked_row(len, off, bad);
        let mut blocks = CheckedChunks::new(&row);
        let mut seen = Vec::new();
        for block in blocks.by_ref().take(read) {
            prop_assert!(block.len() == CheckedChunks::CHUNK || seen.len() + block.len() == len);
            seen.extend_from_slice(block);
        }
        let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&row[..seen.len()]), bits(&seen));
        let checked = blocks.finish();
        match (&checked, ProbabilityRow::new(&row)) {
            (Ok(checked), Ok(new)) => {
                prop_assert_eq!(checked.sum().to_bits(), new.sum().to_bits());
                prop_assert_eq!(checked.unnormalised(), &row[..]);
            }
            // As text: a NaN entry makes the errors unequal as values.
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "blocks {:?}, new {:?}", a, b),
        }
        // And against the checks written out entry by entry.
        let offender = row.iter().enumerate().find(|&(_, v)| !v.is_finite() || *v < 0.0);
        let naive_sum: f64 = row.iter().sum();
        match (checked, offender) {
            (Err(CoreError::NonFinite { index, .. }), Some((at, v))) => {
                prop_assert!(index == at && !v.is_finite());
            }
            (Err(CoreError::Negative { index, .. }), Some((at, v))) => {
                prop_assert!(index == at && *v < 0.0);
            }
            (Err(CoreError::BadSum { sum, .. }), None) => {
                prop_assert!((sum - naive_sum).abs() <= 1e-12 && (naive_sum - 1.0).abs() > 0.9e-6);
            }
            (Ok(checked), None) => {
                prop_assert!((checked.sum() - naive_sum).abs() <= 1e-12 && (naive_sum - 1.0).abs() < 1.1e-6);
            }
            (checked, offender) => prop_assert!(false, "{:?} with offender {:?}", checked, offender),
        }
    }
}

#[test]
fn checked_blocks_name_the_first_offender_past_the_first_block() {
    let row = blocked_row(3000, 0.0, Some((2500, f64::NAN)));
    let mut blocks = CheckedChunks::new(&row);
    assert_eq!(blocks.next().map(<[f64]>::len), Some(CheckedChunks::CHUNK));
    assert!(matches!(
        blocks.finish(),
        Err(CoreError::NonFinite { index: 2500, value }) if value.is_nan()
    ));
    assert_eq!(CheckedChunks::new(&[]).finish(), Err(CoreError::Empty));
}

#[test]
fn near_one_sums_are_renormalised() {
    let d = dist(&[0.5, 0.5 + 5e-7]);
    assert!((d.probs().iter().sum::<f64>() - 1.0).abs() < 1e-15);
}

#[test]
fn logits_softmax_and_argmax() {
    let d = Distribution::from_logits(&[0.0, 2f64.ln(), f64::NEG_INFINITY], 1.0).unwrap();
    assert!((d.prob(0) - 1.0 / 3.0).abs() < 1e-15 && d.prob(2) == 0.0);
    let sharp = Distribution::from_logits(&[0.0, 2f64.ln()], 0.5).unwrap();
    assert!((sharp.prob(1) - 0.8).abs() < 1e-15);
    let argmax = Distribution::from_logits(&[1.0, 3.0, 3.0], 0.0).unwrap();
    assert_eq!(argmax.probs(), &[0.0, 1.0, 0.0]);
    assert!(matches!(
        Distribution::from_logits(&[1.0, f64::INFINITY], 1.0),
        Err(CoreError::BadLogit { index: 1, .. })
    ));
    assert_eq!(
        Distribution::from_logits(&[f64::NEG_INFINITY; 2], 1.0),
        Err(CoreError::NoFiniteLogit)
    );
    assert_eq!(
        Distribution::from_logits(&[1.0], -1.0),
        Err(CoreError::InvalidTemperature(-1.0))
    );
}

#[test]
fn top_k_top_p_and_temperature() {
    let d = dist(&[0.1, 0.4, 0.2, 0.3]);
    let top2 = d.top_k(2).unwrap();
    let expected = [0.0, 4.0 / 7.0, 0.0, 3.0 / 7.0];
    top2.probs()
        .iter()
        .zip(&expected)
        .for_each(|(a, b)| assert!((a - b).abs() < 1e-15));
    assert_eq!(d.top_k(0), Err(CoreError::InvalidTopK));
    assert_eq!(d.top_p(0.65).unwrap().support_size(), 2);
    assert_eq!(d.top_p(0.7).unwrap().support_size(), 2);
    assert_eq!(d.top_p(0.71).unwrap().support_size(), 3);
    assert_eq!(d.top_p(1.5), Err(CoreError::InvalidTopP(1.5)));
    let hot = d.with_temperature(2.0).unwrap();
    let roots: Vec<f64> = d.probs().iter().map(|x| x.sqrt()).collect();
    let total: f64 = roots.iter().sum();
    hot.probs()
        .iter()
        .zip(&roots)
        .for_each(|(a, b)| assert!((a - b / total).abs() < 1e-15));
    let transform = Transform {
        temperature: Some(1.0),
        top_k: Some(3),
        top_p: Some(0.6),
    };
    let applied = transform.apply(&d).unwrap();
    assert_eq!(applied.support_size(), 2);
    let logits: Vec<f64> = d.probs().iter().map(|x| x.ln()).collect();
    let from_logits = transform.apply_to_logits(&logits).unwrap();
    from_logits
        .probs()
        .iter()
        .zip(applied.probs())
        .for_each(|(a, b)| assert!((a - b).abs() < 1e-15));
}

#[test]
fn scheme_errors() {
    let q = dist(&[0.5, 0.5, 0.0]);
    assert_eq!(DraftScheme::iid(q.clone(), 0), Err(CoreError::NoDrafts));
    assert_eq!(
        DraftScheme::without_replacement(q.clone(), 3)
            .unwrap_err()
            .to_string(),
        "wor drafting of n = 3 drafts needs at least 3 tokens with positive draft probability, but only 2 have it"
    );
    assert!(matches!(
        DraftScheme::independent(vec![q.clone(), dist(&[1.0])]),
        Err(CoreError::LengthMismatch {
            expected: 3,
            found: 1,
            ..
        })
    ));
    assert!(matches!(
        DraftScheme::new(SchemeKind::Iid, vec![q.clone(), q.clone()], 2),
        Err(CoreError::DraftCountMismatch { .. })
    ));
    assert_eq!(
        "nope".parse::<SchemeKind>(),
        Err(CoreError::UnknownScheme("nope".into()))
    );
    let big = DraftScheme::iid(dist(&[0.25; 4]), 12).unwrap();
    assert!(matches!(
        big.tuple_law(DEFAULT_ENUMERATION_LIMIT),
        Err(CoreError::TooLarge { size, limit, .. })
            if size == 4u128.pow(12) && limit == DEFAULT_ENUMERATION_LIMIT as u128
    ));
}

#[test]
fn known_laws() {
    let q = dist(&[0.2, 0.3, 0.5]);
    let wor = DraftScheme::without_replacement(q.clone(), 2).unwrap();
    let sets = wor.set_law(DEFAULT_ENUMERATION_LIMIT).unwrap();
    // P({0,1}) = .2 * .3/.8 + .3 * .2/.7
    let expected = 0.2 * 0.3 / 0.8 + 0.3 * 0.2 / 0.7;
    assert_eq!(sets.outcomes[0], vec![0, 1]);
    assert!((sets.probs[0] - expected).abs() < 1e-15);
    let greedy = DraftScheme::greedy(q, 2).unwrap();
    assert_eq!(greedy.fixed_tokens(), &[2]);
    let law = greedy.tuple_law(DEFAULT_ENUMERATION_LIMIT).unwrap();
    assert_eq!(law.outcomes, vec![vec![2, 0], vec![2, 1]]);
    assert!((law.probs[0] - 0.4).abs() < 1e-15);
}

fn scheme_strategy() -> impl Strategy<Value = DraftScheme> {
    (
        2usize..6,
        1usize..4,
        0usize..SchemeKind::ALL.len(),
        prop::collection::vec(0.001f64..1.0, 18),
    )
        .prop_map(|(v, n, kind, weights)| {
            let kind = SchemeKind::ALL[kind];
            let draw = |i: usize| {
                let w = &weights[i * v..(i + 1) * v];
                let total: f64 = w.iter().sum();
                dist(&w.iter().map(|x| x / total).collect::<Vec<_>>())
            };
            let n = match kind {
                SchemeKind::Iid | SchemeKind::Independent => n,
                _ => kind.fixed_n().unwrap_or(n.min(v)),
            };
            let qs = if kind == SchemeKind::Independent {
                (0..n).map(draw).collect()
            } else {
                vec![draw(0)]
            };
            DraftScheme::new(kind, qs, n).unwrap()
        })
}

proptest! {
    /// Every exact law sums to 1, the tuple count is exact, and without
    /// replacement never repeats a token.
    #[test]
    fn laws_are_distributions(scheme in scheme_strategy()) {
        let tuples = scheme.tuple_law(DEFAULT_ENUMERATION_LIMIT).unwrap();
        prop_assert_eq!(tuples.len() as u128, scheme.tuple_count());
        prop_assert!((tuples.probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let sets = scheme.set_law(DEFAULT_ENUMERATION_LIMIT).unwrap();
        prop_assert!((sets.probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        if scheme.kind() == SchemeKind::WithoutReplacement {
            prop_assert!(tuples.outcomes.iter().all(|t| mdsd_core::token_set(t).len() == t.len()));
        }
    }
}

/// Sampled tuple frequencies, by `DraftScheme::sample` and by `DraftSampler`,
/// match the exact law within 5 standard errors.
#[test]
fn sampling_matches_exact_law() {
    let q = dist(&[0.1, 0.2, 0.3, 0.4]);
    let schemes = [
        DraftScheme::iid(q.clone(), 2).unwrap(),
        DraftScheme::without_replacement(q.clone(), 3).unwrap(),
        // Most mass on one token: excluding it must not slow or bias sampling.
        DraftScheme::without_replacement(dist(&[0.997, 0.001, 0.001, 0.001]), 3).unwrap(),
        DraftScheme::greedy(q.clone(), 2).unwrap(),
        DraftScheme::independent(vec![q.clone(), dist(&[0.7, 0.1, 0.1, 0.1])]).unwrap(),
    ];
    let draws = 200_000;
    for (scheme, fast) in schemes.iter().flat_map(|s| [(s, false), (s, true)]) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let sampler = DraftSampler::new(scheme);
        let mut counts: HashMap<Vec<usize>, usize> = HashMap::new();
        for _ in 0..draws {
            let tuple = if fast {
                sampler.sample(&mut rng)
            } else {
                scheme.sample(&mut rng)
            };
            *counts.entry(tuple).or_default() += 1;
        }
        let law = scheme.tuple_law(DEFAULT_ENUMERATION_LIMIT).unwrap();
        let total_seen: usize = law
            .outcomes
            .iter()
            .map(|t| counts.get(t).copied().unwrap_or(0))
            .sum();
        assert_eq!(
            total_seen,
            draws,
            "{} sampled a tuple of probability 0",
            scheme.kind()
        );
        for (tuple, prob) in law.iter() {
            let freq = counts.get(tuple).copied().unwrap_or(0) as f64 / draws as f64;
            let se = (prob * (1.0 - prob) / draws as f64).sqrt();
            assert!(
                (freq - prob).abs() <= 5.0 * se,
                "{} {tuple:?}: {freq} vs {prob}",
                scheme.kind()
            );
        }
    }
}

/// Without replacement, a token whose mass is below the rounding of the
/// running total is still drawn once the others are excluded: the draw
/// ends, and gives the only token left. (A mass of 2.3e-18 beside 1 made
/// the excluded total equal the whole, and the draw looped for ever.)
#[test]
fn drafts_without_replacement_reach_tokens_below_the_rounding_of_the_total() {
    let laws = [
        vec![2.3e-18, 1.0 - 2.3e-18],
        vec![1.0 - 2e-18, 1e-18, 1e-18],
        vec![1e-300, 0.5, 1e-300, 0.5],
    ];
    for probs in laws {
        let q = Distribution::from_probs(probs.clone()).unwrap();
        let n = probs.len();
        let scheme = DraftScheme::without_replacement(q, n).unwrap();
        let sampler = DraftSampler::new(&scheme);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for _ in 0..1000 {
            let tuple = sampler.sample(&mut rng);
            assert_eq!(mdsd_core::token_set(&tuple), (0..n).collect::<Vec<_>>());
        }
    }
}

proptest! {
    /// A draw within a range of indices follows the weights there: every
    /// index's frequency within 5 standard deviations of its share (a
    /// false alarm below 1e-5 an index), never an index of weight zero;
    /// a range of zero weight gives its first index.
    #[test]
    fn draws_within_a_range_follow_its_weights(
        weights in prop::collection::vec(prop_oneof![Just(0.0), 0.0..1.0f64], 2..12),
        ends in (0usize..12, 0usize..12),
        seed in 0u64..1000,
    ) {
        let n = weights.len();
        let (low, high) = (ends.0 % n, ends.1 % n + 1);
        prop_assume!(low < high);
        let law = CumulativeDistribution::new(&weights);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let inside: f64 = weights[low..high].iter().sum();
        if inside == 0.0 {
            prop_assert_eq!(law.sample_in(low..high, &mut rng), low);
            return Ok(());
        }
        let draws = 4000;
        let mut counts = vec![0u64; n];
        for _ in 0..draws {
            let i = law.sample_in(low..high, &mut rng);
            prop_assert!((low..high).contains(&i) && weights[i] > 0.0, "{} in {:?}", i, low..high);
            counts[i] += 1;
        }
        for i in low..high {
            let share = weights[i] / inside;
            let sd = (draws as f64 * share * (1.0 - share)).sqrt();
            let off = (counts[i] as f64 - draws as f64 * share).abs();
            prop_assert!(off <= 5.0 * sd + 1e-9, "index {}: {} draws, share {}", i, counts[i], share);
        }
    }
}
