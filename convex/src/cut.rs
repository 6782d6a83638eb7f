//! The cut p(H) - Π_i q_i(H) of independent drafts (`docs/DESIGN.md` §6b,
//! "Finding H without a closed form"): its best prefix in an order of the
//! tokens, and the combinatorial search for the H that minimises it.

use std::ops::Range;

use mdsd_bounds::{RATIO_BUCKETS, ratio_key_bucket, tokens_in_buckets};

use mdsd_core::powi_count;

use crate::potential::independent::{draft_weights, over_drafts};

/// Tokens whose keys are made in one pass and summed into their buckets
/// while they are in L1.
const BLOCK: usize = 1024;

/// `key` with every NaN the positive one, which `f64::total_cmp` puts
/// after +inf, as the ratio buckets put NaN in the last one.
fn canonical(key: f64) -> f64 {
    if key.is_nan() { f64::NAN } else { key }
}

/// A set H of tokens, as a mask, with its cut p(H) - Π_i q_i(H), p(H)
/// and each q_i(H) (one per distinct law; the product is over the drafts,
/// each law's factor to the power of its count, `over_drafts`).
pub(crate) struct PrefixCut {
    pub in_h: Vec<bool>,
    pub cut: f64,
    pub p_h: f64,
    pub q_h: Vec<f64>,
}

/// The set H among the prefixes of the tokens by ascending `key` (ties by
/// index, NaN after +inf; the empty prefix included) that minimises the
/// cut p(H) - Π_i q_i(H), with that minimum (1 + it bounds alpha* from
/// above: max flow's cut, `docs/DESIGN.md` §6b).
///
/// Sorting every token costs more than the rest of a round of the search
/// at full vocabulary, and the prefixes that can win are few: with the
/// tokens in the ratio buckets of mdsd-bounds (`ratio_key_bucket`, 32 an
/// octave), the cut at each bucket's end comes from the buckets' sums, and
/// a prefix that ends inside bucket b, after the sums P, Q_i of the
/// buckets before it, has a cut at least P - Π_i (Q_i + q_i(b)) (p only
/// adds, and the product grows in each q_i). Only the buckets whose bound
/// is below the best end of a bucket are sorted and scanned token by
/// token.
pub(crate) fn best_prefix_cut(key: &[f64], p: &[f64], q: &[&[f64]], counts: &[usize]) -> PrefixCut {
    best_prefix_cut_by(
        |range, keys| keys.copy_from_slice(&key[range]),
        p,
        q,
        counts,
    )
}

/// `best_prefix_cut` with the keys of the tokens in `range` written by
/// `keys_of` (a search round's keys are a division each: made twice for
/// the few tokens of the sorted buckets, that costs less than a
/// vocabulary-sized vector of them written and read).
fn best_prefix_cut_by(
    keys_of: impl Fn(Range<usize>, &mut [f64]),
    p: &[f64],
    q: &[&[f64]],
    counts: &[usize],
) -> PrefixCut {
    let width = q.len() + 1;
    // Per bucket: Σ p, then Σ q_i, in one row. Each token's bucket once,
    // a block of keys at a time, summed into the buckets while the block
    // is in L1; the passes below read the buckets. On the calling thread,
    // as every pass of the search: split over rayon's pool, the tasks'
    // own sums, cleared and added up, cost more than the pass.
    let mut bucket: Vec<u16> = Vec::with_capacity(p.len());
    let mut sums = vec![0.0; RATIO_BUCKETS * width];
    let mut keys = [0.0; BLOCK];
    for start in (0..p.len()).step_by(BLOCK) {
        let range = start..(start + BLOCK).min(p.len());
        let keys = &mut keys[..range.len()];
        keys_of(range.clone(), keys);
        bucket.extend(keys.iter().map(|&key| ratio_key_bucket(key) as u16));
        for (y, &b) in range.clone().zip(&bucket[range]) {
            let row = &mut sums[usize::from(b) * width..][..width];
            row[0] += p[y];
            (row[1..].iter_mut().zip(q)).for_each(|(m, law)| *m += law[y]);
        }
    }
    let occupied: Vec<usize> = (0..RATIO_BUCKETS)
        .filter(|&b| sums[b * width..][..width].iter().any(|&x| x != 0.0))
        .collect();
    // The masses before each occupied bucket, and the best end of one.
    let mut before = Vec::with_capacity(occupied.len());
    let mut running = vec![0.0; width];
    let mut best = (0.0, Prefix::Empty, vec![0.0; width]);
    for &b in &occupied {
        before.push(running.clone());
        let row = &sums[b * width..][..width];
        running.iter_mut().zip(row).for_each(|(m, x)| *m += x);
        let cut = running[0] - over_drafts(&running[1..], counts);
        if cut < best.0 {
            best = (cut, Prefix::Through(b), running.clone());
        }
    }
    let refined: Vec<bool> = {
        let mut refined = vec![false; RATIO_BUCKETS];
        for (&b, before) in occupied.iter().zip(&before) {
            let row = &sums[b * width..][..width];
            let least: f64 = (before[1..].iter().zip(&row[1..]).zip(counts))
                .map(|((m, x), &count)| powi_count(m + x, count))
                .product();
            refined[b] = before[0] - least < best.0;
        }
        refined
    };
    let key = |y: usize| {
        let mut key = [0.0];
        keys_of(y..y + 1, &mut key);
        canonical(key[0])
    };
    let mut inside: Vec<(f64, usize)> = (tokens_in_buckets(&bucket, &refined).into_iter())
        .map(|y| (key(y), y))
        .collect();
    inside.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut at = 0;
    for (&b, before) in occupied.iter().zip(&before) {
        if !refined[b] {
            continue;
        }
        let mut masses = before.clone();
        while at < inside.len() && ratio_key_bucket(inside[at].0) == b {
            let y = inside[at].1;
            masses[0] += p[y];
            (masses[1..].iter_mut().zip(q)).for_each(|(m, law)| *m += law[y]);
            let cut = masses[0] - over_drafts(&masses[1..], counts);
            if cut < best.0 {
                best = (cut, Prefix::Within(b, at), masses.clone());
            }
            at += 1;
        }
    }
    // The buckets before the last one whole, and of the last its sorted
    // tokens up to the prefix's end.
    let (whole, within) = match best.1 {
        Prefix::Empty => (0, &inside[..0]),
        Prefix::Through(b) => (b + 1, &inside[..0]),
        Prefix::Within(b, end) => {
            let start = inside.partition_point(|&(k, _)| ratio_key_bucket(k) < b);
            (b, &inside[start..=end])
        }
    };
    let mut in_h: Vec<bool> = bucket.iter().map(|&b| usize::from(b) < whole).collect();
    within.iter().for_each(|&(_, y)| in_h[y] = true);
    PrefixCut {
        in_h,
        cut: best.0,
        p_h: best.2[0],
        q_h: best.2[1..].to_vec(),
    }
}

/// The relative move of the round's λ beyond which the search takes
/// another round rather than leaving the tokens it moves to single moves.
const SETTLED: f64 = 1.0 / 16.0;

/// Whether weights `after` order every token's key p / Σ_i λ_i q_i within
/// a factor 1 + `SETTLED` of its order by `before`: the key's factor is a
/// mean of the λ_i's ratios after / before, so it lies between the least
/// and the greatest of them (a zero or a NaN among them settles nothing).
fn settled(before: &[f64], after: &[f64]) -> bool {
    let ratios = || before.iter().zip(after).map(|(b, a)| a / b);
    if !ratios().all(|x| x.is_finite() && x > 0.0) {
        return false;
    }
    let (least, greatest) = ratios().fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    greatest <= (1.0 + SETTLED) * least
}

/// Where the best prefix ends: nowhere, with a whole bucket, or inside
/// one, at a token (its place among the sorted tokens of the refined
/// buckets).
#[derive(Clone, Copy)]
enum Prefix {
    Empty,
    Through(usize),
    Within(usize, usize),
}

/// An H that minimises the cut p(H) - Π_i q_i(H), searched for
/// combinatorially, and its cut. Linearising the product at the current
/// H, a token belongs to H when its p is below the cut's first-order
/// decrease Σ_i λ_i q_i(y), λ_i = Π_(j≠i) q_j(H) (per distinct law, the
/// sum over its drafts, `draft_weights`; the i.i.d. rule's H* is
/// the fixed point of this: p / q below n q(H)^(n-1)); rather than that
/// threshold, each round takes the best prefix of the tokens by ascending
/// p / Σ_i λ_i q_i, from H = every token until the prefix repeats or the
/// order has settled: where no λ_i moves by a factor of more than 1 +
/// `SETTLED` against the others, no token's key moves by more, and the
/// tokens that could then change sides are those within that factor of
/// the prefix's end, which the single moves test one by one. Then single
/// tokens move in or out while that lowers the cut exactly. Nothing
/// proves the result optimal: it is checked, as any H is, by the programs
/// that it starts (`ConvexSolver::solve_independent`).
pub(crate) fn searched_cut(p: &[f64], q: &[&[f64]], counts: &[usize]) -> (Vec<bool>, f64) {
    const ROUNDS: usize = 32;
    let weights = |mass: &[f64]| draft_weights(mass, counts);
    // The first round from H = every token, where each law's mass is 1 (a
    // law lives on its drafted tokens), so λ is each law's count without a
    // pass over the laws (for laws of other masses, only a first order);
    // every round sets H, p(H) and the q_i(H).
    let mut lambda: Vec<f64> = counts.iter().map(|&count| count as f64).collect();
    let (mut in_h, mut p_h, mut mass) = (vec![true; p.len()], 0.0, Vec::new());
    for _ in 0..ROUNDS {
        // p / Σ_i λ_i q_i, law by law over a block, then the divisions.
        let order = |range: Range<usize>, keys: &mut [f64]| {
            keys.fill(0.0);
            for (law, l) in q.iter().zip(&lambda) {
                (keys.iter_mut().zip(&law[range.clone()])).for_each(|(k, x)| *k += l * x);
            }
            (keys.iter_mut().zip(&p[range])).for_each(|(k, p)| *k = p / *k);
        };
        let next = best_prefix_cut_by(order, p, q, counts);
        let repeats = next.in_h == in_h;
        (in_h, p_h, mass) = (next.in_h, next.p_h, next.q_h);
        let moved = weights(&mass);
        if repeats || settled(&lambda, &moved) {
            break;
        }
        lambda = moved;
    }
    // Single moves, each a token's exact change of the cut, taken where it
    // is a decrease beyond rounding. A pass looks for the first such token
    // (on real rows there is rarely one), then moves tokens one after
    // another from there.
    const LOWER: f64 = 1e-15;
    // Whether moving y lowers the cut, for masses `mass` of product `now`.
    let lowers = |y: usize, in_h: &[bool], mass: &[f64], now: f64| -> bool {
        let sign = if in_h[y] { -1.0 } else { 1.0 };
        let after: f64 = (mass.iter().zip(q).zip(counts))
            .map(|((m, law), &count)| powi_count(m + sign * law[y], count))
            .product();
        sign * p[y] - (after - now) < -LOWER
    };
    for _ in 0..ROUNDS {
        let now = over_drafts(&mass, counts);
        let Some(first) = (0..p.len()).find(|&y| lowers(y, &in_h, &mass, now)) else {
            break;
        };
        for y in first..p.len() {
            if lowers(y, &in_h, &mass, over_drafts(&mass, counts)) {
                let sign = if in_h[y] { -1.0 } else { 1.0 };
                in_h[y] = !in_h[y];
                p_h += sign * p[y];
                (mass.iter_mut().zip(q)).for_each(|(m, law)| *m += sign * law[y]);
            }
        }
    }
    // The masses as the rounds and moves kept them: sums by buckets of
    // the key, within 1e-15 of any other order of addition.
    (in_h, p_h - over_drafts(&mass, counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Σ x over the tokens in H.
    fn mass_in(x: &[f64], in_h: &[bool]) -> f64 {
        (x.iter().zip(in_h))
            .filter(|&(_, &inside)| inside)
            .map(|(x, _)| x)
            .sum()
    }
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// The prefixes' least cut by sorting every token, as the bucketed
    /// scan must find it.
    fn sorted_prefix_cut(key: &[f64], p: &[f64], q: &[Vec<f64>]) -> f64 {
        let mut order: Vec<usize> = (0..key.len()).collect();
        order.sort_by(|&a, &b| {
            canonical(key[a])
                .total_cmp(&canonical(key[b]))
                .then(a.cmp(&b))
        });
        let (mut p_h, mut q_h, mut best) = (0.0, vec![0.0; q.len()], 0.0f64);
        for y in order {
            p_h += p[y];
            q_h.iter_mut().zip(q).for_each(|(m, law)| *m += law[y]);
            best = best.min(p_h - q_h.iter().product::<f64>());
        }
        best
    }

    fn views(q: &[Vec<f64>]) -> Vec<&[f64]> {
        q.iter().map(Vec::as_slice).collect()
    }

    fn normalised(weights: Vec<f64>) -> Vec<f64> {
        let total: f64 = weights.iter().sum();
        let scale = if total > 0.0 { 1.0 / total } else { 0.0 };
        weights.into_iter().map(|w| w * scale).collect()
    }

    /// Weights with zeros; keys that crowd into few buckets (equal keys of
    /// both signs, NaN) or spread over many.
    fn instances() -> impl Strategy<Value = (Vec<f64>, Vec<Vec<f64>>, Vec<f64>, bool)> {
        let weight = || prop_oneof![Just(0.0), 0.0..1.0f64];
        let key = prop_oneof![
            (-2i32..4).prop_map(|k| f64::from(k) * 0.5),
            -1e3..1e3f64,
            Just(f64::NAN),
        ];
        (1usize..2000, 1usize..4).prop_flat_map(move |(v, n)| {
            (
                vec(weight(), v).prop_map(normalised),
                vec(vec(weight(), v).prop_map(normalised), n),
                vec(key.clone(), v),
                any::<bool>(),
            )
        })
    }

    /// The order settles only where every λ_i moves by nearly one factor:
    /// a common factor of any size settles it, a spread of more than
    /// `SETTLED` between two λ_i does not, and a zero, an infinity or a NaN
    /// among the ratios never does.
    #[test]
    fn order_settles_on_a_common_factor_only() {
        assert!(settled(&[0.2, 0.5], &[2.0, 5.0]));
        assert!(settled(
            &[0.2, 0.5, 1.0],
            &[0.2, 0.5 * (1.0 + 0.5 * SETTLED), 1.0]
        ));
        assert!(!settled(&[0.2, 0.5], &[0.2, 0.5 * (1.0 + 2.0 * SETTLED)]));
        assert!(!settled(&[0.2, 0.5], &[0.2 * (1.0 + 2.0 * SETTLED), 0.5]));
        assert!(!settled(&[0.0, 0.5], &[0.0, 0.5]));
        assert!(!settled(&[0.2, 0.5], &[0.0, 0.5]));
        assert!(!settled(&[0.2, 0.5], &[f64::NAN, 0.5]));
        assert!(settled(&[1.0], &[3.0]));
    }

    /// A vocabulary of many tokens a bucket: the same least cut as the
    /// sorted scan.
    #[test]
    fn large_prefix_cut_matches_a_full_sort() {
        let v = 50_000;
        let spread = |spin: f64| -> Vec<f64> {
            normalised(
                (0..v)
                    .map(|y| (-12.0 * (y as f64 * spin).fract()).exp())
                    .collect(),
            )
        };
        let (p, q) = (
            spread(0.618_033_988_7),
            vec![spread(0.754_877_666_2), spread(0.569_840_290_9)],
        );
        let key: Vec<f64> = (0..v).map(|y| p[y] / (q[0][y] + q[1][y])).collect();
        let PrefixCut { in_h, cut, .. } = best_prefix_cut(&key, &p, &views(&q), &vec![1; q.len()]);
        let expected = sorted_prefix_cut(&key, &p, &q);
        assert!(cut < -0.1, "a cut of {cut}: H is not trivial");
        assert!((cut - expected).abs() < 1e-12, "{cut} vs {expected}");
        let of_mask = mass_in(&p, &in_h) - q.iter().map(|law| mass_in(law, &in_h)).product::<f64>();
        assert!(
            (of_mask - cut).abs() < 1e-12,
            "the mask's cut {of_mask} vs {cut}"
        );
    }

    proptest! {
        /// The search's cut, from the masses its rounds and moves keep, is
        /// its mask's (to 1e-12), and no single token moved in or out of H
        /// lowers it by more than rounding.
        #[test]
        fn searched_cut_is_its_masks((p, q, _, _) in instances()) {
            let (in_h, cut) = searched_cut(&p, &views(&q), &vec![1; q.len()]);
            let of_mask = mass_in(&p, &in_h) - q.iter().map(|law| mass_in(law, &in_h)).product::<f64>();
            prop_assert!((of_mask - cut).abs() < 1e-12, "{} vs {}", of_mask, cut);
            for y in 0..p.len() {
                let mut moved = in_h.clone();
                moved[y] = !moved[y];
                let after = mass_in(&p, &moved) - q.iter().map(|law| mass_in(law, &moved)).product::<f64>();
                prop_assert!(after >= cut - 1e-12, "moving token {} lowers the cut to {}", y, after);
            }
        }

        /// Each distinct law once with its count of drafts gives what its
        /// drafts give one by one: the search's H and cut, and the best
        /// prefix's, to rounding.
        #[test]
        fn a_law_counted_once_is_its_drafts(
            (p, q, key, _) in instances(),
            counts in prop::collection::vec(1usize..=3, 3),
        ) {
            let counts = &counts[..q.len()];
            let expanded: Vec<Vec<f64>> = (q.iter().zip(counts))
                .flat_map(|(law, &count)| std::iter::repeat_n(law.clone(), count))
                .collect();
            let ones = vec![1; expanded.len()];
            let (in_h, cut) = searched_cut(&p, &views(&q), counts);
            let (want_h, want_cut) = searched_cut(&p, &views(&expanded), &ones);
            prop_assert!((cut - want_cut).abs() < 1e-12, "{} vs {}", cut, want_cut);
            prop_assert_eq!(in_h, want_h);
            let prefix = best_prefix_cut(&key, &p, &views(&q), counts);
            let want = best_prefix_cut(&key, &p, &views(&expanded), &ones);
            prop_assert!((prefix.cut - want.cut).abs() < 1e-12, "{} vs {}", prefix.cut, want.cut);
        }

        /// The bucketed scan finds the sorted scan's least cut (to 1e-12,
        /// the sums' different order of addition), with keys as given or
        /// the search's own p / Σ q (NaN where both are 0), and its mask
        /// is a prefix of the order with that cut.
        #[test]
        fn bucketed_prefix_cut_matches_a_full_sort(
            (p, q, key, ratios) in instances()
        ) {
            let key: Vec<f64> = if ratios {
                (0..p.len()).map(|y| p[y] / q.iter().map(|law| law[y]).sum::<f64>()).collect()
            } else {
                key
            };
            let PrefixCut { in_h, cut, p_h, q_h } = best_prefix_cut(&key, &p, &views(&q), &vec![1; q.len()]);
            prop_assert!((mass_in(&p, &in_h) - p_h).abs() < 1e-12, "p(H) {} vs {}", mass_in(&p, &in_h), p_h);
            for (law, m) in q.iter().zip(&q_h) {
                prop_assert!((mass_in(law, &in_h) - m).abs() < 1e-12, "q(H) {} vs {}", mass_in(law, &in_h), m);
            }
            let expected = sorted_prefix_cut(&key, &p, &q);
            prop_assert!((cut - expected).abs() < 1e-12, "{} vs {}", cut, expected);
            let masses: f64 = q.iter().map(|law| mass_in(law, &in_h)).product();
            let of_mask = mass_in(&p, &in_h) - masses;
            prop_assert!((of_mask - cut).abs() < 1e-12, "the mask's cut {} vs {}", of_mask, cut);
            let last_in = (0..p.len()).filter(|&y| in_h[y]).map(|y| canonical(key[y])).max_by(f64::total_cmp);
            let first_out = (0..p.len()).filter(|&y| !in_h[y]).map(|y| canonical(key[y])).min_by(f64::total_cmp);
            if let (Some(a), Some(b)) = (last_in, first_out) {
                prop_assert!(a.total_cmp(&b).is_le(), "not a prefix: {} after {}", a, b);
            }
        }
    }
}
