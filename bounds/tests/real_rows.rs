//! Full-vocabulary (V = 151936) rows of the real Qwen2.5-Coder pairs.

use mdsd_bounds::{
    IidAlgorithm, acceptance_upper_bound, optimal_acceptance_iid, optimal_acceptance_wor,
};
use mdsd_core::{DraftScheme, Problem};

#[test]
fn iid_sort_and_selection_agree_and_grow_with_n() {
    for (row, (p, q)) in mdsd_benches::real_rows().into_iter().enumerate() {
        let tv = p.total_variation(&q).unwrap();
        let mut previous = 0.0;
        for n in 1..=8 {
            let sort = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort).unwrap();
            let selection = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Selection).unwrap();
            assert!(
                (sort.alpha_star - selection.alpha_star).abs() <= 1e-12,
                "row {row} n {n}: sort {} selection {}",
                sort.alpha_star,
                selection.alpha_star
            );
            assert!(
                selection.alpha_star >= previous - 1e-15,
                "row {row}: alpha fell at n = {n}"
            );
            previous = selection.alpha_star;
            if n == 1 {
                assert!(
                    (selection.alpha_star - (1.0 - tv)).abs() <= 1e-12,
                    "row {row}: n = 1 is 1 - TV"
                );
            }
            let problem = Problem::new(p.clone(), DraftScheme::iid(q.clone(), n).unwrap()).unwrap();
            for certificate in [&sort.certificate, &selection.certificate] {
                let value = acceptance_upper_bound(&problem, certificate).unwrap();
                assert!(
                    (value - selection.alpha_star).abs() <= 1e-12,
                    "row {row} n {n}: certificate gives {value}"
                );
            }
        }
    }
}

/// Q_wo(H) <= q(H)^n for every H, so without replacement never does worse
/// than i.i.d.; at n = 1 the two coincide.
#[test]
fn without_replacement_dominates_iid() {
    for (row, (p, q)) in mdsd_benches::real_rows().into_iter().enumerate().step_by(2) {
        for n in [1, 2, 4] {
            let iid = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Selection).unwrap();
            let wor = optimal_acceptance_wor(
                &p,
                &DraftScheme::without_replacement(q.clone(), n).unwrap(),
            )
            .unwrap();
            assert!(
                wor.alpha_star >= iid.alpha_star - 1e-12,
                "row {row} n {n}: wor {} < iid {}",
                wor.alpha_star,
                iid.alpha_star
            );
            if n == 1 {
                assert!(
                    (wor.alpha_star - iid.alpha_star).abs() <= 1e-10,
                    "row {row}: wor {} iid {}",
                    wor.alpha_star,
                    iid.alpha_star
                );
            }
        }
    }
}

/// Real full-vocabulary rows cut to their top 20 entries per side (what
/// vLLM returns by default): the exact alpha* of the full rows lies in the
/// interval, for n = 1, 2, 4, 8.
#[test]
fn top_20_intervals_hold_the_full_rows_alpha() {
    let top = |d: &mdsd_core::Distribution| {
        let mut entries: Vec<(usize, f64)> = d.probs().iter().copied().enumerate().collect();
        entries.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        entries.truncate(20);
        entries
    };
    let ns = [1, 2, 4, 8];
    for (r, (p, q)) in mdsd_benches::real_rows().iter().enumerate() {
        let intervals =
            mdsd_bounds::optimal_acceptance_iid_interval(&top(p), &top(q), &ns).unwrap();
        let exact = mdsd_bounds::optimal_acceptance_iid_many(p, q, &ns).unwrap();
        for ((n, interval), alpha) in ns.iter().zip(&intervals).zip(&exact) {
            assert!(
                interval.lower <= alpha + 1e-12 && *alpha <= interval.upper + 1e-12,
                "row {r} n={n}: {interval:?} vs {alpha}"
            );
        }
    }
}

/// Real rows sharpened to temperature 0.05, whose draft probabilities run
/// down to the subnormals (the clocks' horizon over the least of them
/// overflowed, and the quadrature had no node): the closed form for drafts
/// without replacement answers on every row, at least the i.i.d. one.
#[test]
fn without_replacement_at_a_low_temperature() {
    use mdsd_core::Transform;
    let cold = Transform {
        temperature: Some(0.05),
        ..Transform::default()
    };
    for (row, (p, q)) in mdsd_benches::real_rows().into_iter().enumerate() {
        let (p, q) = (cold.apply(&p).unwrap(), cold.apply(&q).unwrap());
        let least = q
            .probs()
            .iter()
            .copied()
            .filter(|&x| x > 0.0)
            .fold(1.0, f64::min);
        for n in [2, 4] {
            let iid = optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Selection).unwrap();
            let wor = optimal_acceptance_wor(
                &p,
                &DraftScheme::without_replacement(q.clone(), n).unwrap(),
            )
            .unwrap_or_else(|e| panic!("row {row} n {n} (least q {least:e}): {e}"));
            assert!(
                (0.0..=1.0 + 1e-12).contains(&wor.alpha_star)
                    && wor.alpha_star >= iid.alpha_star - 1e-9,
                "row {row} n {n}: wor {} iid {}",
                wor.alpha_star,
                iid.alpha_star
            );
        }
    }
}
