//! The potential against enumeration, and its parts against each other.

use super::WithoutReplacement;
use super::grids::*;
use super::integrals::*;

/// r and the potential by enumerating ordered draft tuples without
/// replacement over every token (selectable, silent, excluded), the
/// tuples with an excluded token left out.
fn enumerated(
    q: &[f64],
    silent: &[f64],
    excluded: &[f64],
    n: usize,
    theta: &[f64],
) -> (Vec<f64>, f64, Vec<f64>) {
    let all: Vec<f64> = q.iter().chain(silent).chain(excluded).copied().collect();
    let (v, quiet) = (q.len(), q.len() + silent.len());
    let mut r = vec![0.0; v];
    let mut inclusion = vec![0.0; v];
    let mut potential = 0.0;
    fn walk(
        all: &[f64],
        n: usize,
        tuple: &mut Vec<usize>,
        prob: f64,
        visit: &mut dyn FnMut(&[usize], f64),
    ) {
        if tuple.len() == n {
            visit(tuple, prob);
            return;
        }
        let left: f64 = (0..all.len())
            .filter(|x| !tuple.contains(x))
            .map(|x| all[x])
            .sum();
        for x in 0..all.len() {
            if tuple.contains(&x) || all[x] == 0.0 {
                continue;
            }
            tuple.push(x);
            walk(all, n, tuple, prob * all[x] / left, visit);
            tuple.pop();
        }
    }
    walk(&all, n, &mut Vec::new(), 1.0, &mut |tuple, prob| {
        if tuple.iter().any(|&x| x >= quiet) {
            return;
        }
        let sum: f64 = tuple
            .iter()
            .filter(|&&x| x < v)
            .map(|&x| theta[x].exp())
            .sum();
        for &x in tuple.iter().filter(|&&x| x < v) {
            inclusion[x] += prob;
        }
        if sum > 0.0 {
            potential += prob * sum.ln();
            for &x in tuple.iter().filter(|&&x| x < v) {
                r[x] += prob * theta[x].exp() / sum;
            }
        }
    });
    (r, potential, inclusion)
}

/// The double integrals match enumeration, for one to three drafts,
/// with silent and excluded tokens.
#[test]
fn selected_law_and_potential_match_enumeration() {
    // (selectable q, silent q, excluded q, n, theta).
    type Case<'a> = (&'a [f64], &'a [f64], &'a [f64], usize, &'a [f64]);
    let cases: [Case; 8] = [
        (
            &[0.14, 0.01, 0.12],
            &[0.43, 0.3],
            &[],
            2,
            &[0.0, 0.0, -0.14],
        ),
        (&[0.5, 0.3, 0.2], &[], &[], 2, &[0.0, -1.0, -3.0]),
        (&[0.4, 0.1, 0.2], &[0.3], &[], 2, &[0.0, -0.5, -2.0]),
        (&[0.25, 0.1], &[], &[0.6, 0.05], 2, &[0.0, 1.5]),
        (
            &[0.3, 0.2, 0.1, 0.15],
            &[0.05],
            &[0.2],
            3,
            &[-0.3, 0.0, -6.0, -1.0],
        ),
        (&[0.6, 0.4], &[], &[], 1, &[0.0, -2.0]),
        // One clock of rate near 1 and three of 1e-6: the third
        // arrival waits for the small ones.
        (
            &[
                8.521596999241908e-7,
                2.4720988959344064e-6,
                0.9999963003822058,
            ],
            &[],
            &[3.753591983484204e-7],
            3,
            &[5.0, 0.0, 2.0],
        ),
        // Every token drafted, the last after a wait of 1e8.
        (
            &[
                0.004115015171448848,
                0.9958849763166915,
                8.511859722106488e-9,
            ],
            &[],
            &[],
            3,
            &[-2.5, -11.3, -0.085],
        ),
    ];
    for (q, silent, excluded, n, theta) in cases {
        let potential = WithoutReplacement::new(q, silent, excluded, n);
        let Integrals {
            marginal: r,
            potential: value,
            ..
        } = potential.integrals(theta, theta, Grid::Fine, false, None);
        let (want_r, want_value, want_inclusion) = enumerated(q, silent, excluded, n, theta);
        for (got, want) in r.iter().zip(&want_r) {
            assert!((got - want).abs() < 1e-12, "n = {n}: r {got} vs {want}");
        }
        for (got, want) in potential.inclusion().iter().zip(&want_inclusion) {
            assert!(
                (got - want).abs() < 1e-12,
                "n = {n}: inclusion {got} vs {want}"
            );
        }
        assert!(
            (value - want_value).abs() < 1e-11,
            "n = {n}: {value} vs {want_value}"
        );
    }
}

/// Uniform draws on [0, 1) from a fixed xorshift stream.
fn uniform_stream() -> impl FnMut() -> f64 {
    let mut state = 0x9e3779b97f4a7c15u64;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Rates summing to 1: three large clocks, then 300 small ones spread
/// over five decades.
fn many_clocks(uniform: &mut impl FnMut() -> f64) -> Vec<f64> {
    let mut q: Vec<f64> = vec![0.3, 0.15, 0.08];
    q.extend((0..300).map(|_| 10f64.powf(-2.0 - 5.0 * uniform())));
    let total: f64 = q.iter().sum();
    q.iter_mut().for_each(|w| *w /= total);
    q
}

/// The tail's series match the exact factors (every token exact when
/// `tail_reach` is 0) on both grids, with many small clocks among
/// selectable, silent and excluded tokens, one to four and eight drafts.
#[test]
fn tail_series_match_exact_factors() {
    let mut uniform = uniform_stream();
    for n in [1, 2, 3, 4, 8] {
        let weights = many_clocks(&mut uniform);
        let (q, rest) = weights.split_at(200);
        let (silent, excluded) = rest.split_at(60);
        let theta: Vec<f64> = (0..q.len()).map(|_| -4.0 + 5.0 * uniform()).collect();
        for (silent, excluded) in [(silent, &[][..]), (&[][..], excluded), (silent, excluded)] {
            let series = WithoutReplacement::new(q, silent, excluded, n);
            let mut exact = WithoutReplacement::new(q, silent, excluded, n);
            exact.tail_reach = 0.0;
            for grid in [Grid::Fine, Grid::Coarse] {
                assert!(series.clocks(grid).tail.len() > 100, "n = {n}: tail");
                assert!(exact.clocks(grid).tail.is_empty());
                let Integrals {
                    marginal: r,
                    potential: value,
                    diagonal,
                } = series.integrals(&theta, &theta, grid, true, None);
                let want = exact.integrals(&theta, &theta, grid, true, None);
                let (want_r, want_value) = (want.marginal, want.potential);
                for (y, (got, want)) in diagonal.iter().zip(&want.diagonal).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-11 * want.abs() + 1e-13 * want_r[y],
                        "n = {n}, {grid:?}, token {y}: diagonal {got} vs {want}"
                    );
                }
                for (y, (got, want)) in r.iter().zip(&want_r).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-13 * want.abs(),
                        "n = {n}, {grid:?}, token {y}: r {got} vs {want}"
                    );
                }
                assert!(
                    (value - want_value).abs() <= 1e-13 * want_value.abs().max(1.0),
                    "n = {n}, {grid:?}: {value} vs {want_value}"
                );
            }
            let pairs = series.inclusion().iter().zip(exact.inclusion());
            for (y, (got, want)) in pairs.enumerate() {
                assert!(
                    (got - want).abs() <= 1e-13 * want,
                    "n = {n}, token {y}: inclusion {got} vs {want}"
                );
            }
        }
    }
}

/// A program over groups of a side's selectable tokens reads the side's
/// silent and excluded tokens' part of each grid's pass from it
/// (`with_selectable`), on the nodes in t of the side's least q: its r,
/// potential and P(S > 0) are those of the same program made afresh,
/// whose nodes end by its own least q, on both grids, with the least q
/// among the others and among the grouped tokens (where the shared rule
/// in t runs longer).
#[test]
fn groups_share_their_sides_other_tokens() {
    let mut uniform = uniform_stream();
    for n in [2, 4, 8] {
        let weights = many_clocks(&mut uniform);
        let (first, rest) = weights.split_at(200);
        let (silent, excluded) = rest.split_at(60);
        let mut least_first = first.to_vec();
        least_first.sort_by(f64::total_cmp);
        let least = least_first[0].min(rest.iter().copied().fold(f64::INFINITY, f64::min));
        for (q, least_selectable) in [(first, false), (&least_first[..], true)] {
            let mut q = q.to_vec();
            if least_selectable {
                q[0] = least;
            }
            let grouped: Vec<f64> = q.chunks(2).map(|pair| pair.iter().sum()).collect();
            let theta: Vec<f64> = (0..grouped.len()).map(|_| -4.0 + 5.0 * uniform()).collect();
            let whole = WithoutReplacement::new(&q, silent, excluded, n);
            let shared = whole.with_selectable(&grouped);
            let fresh = WithoutReplacement::new(&grouped, silent, excluded, n);
            let case = format!("n = {n}, least q selectable: {least_selectable}");
            let (got, want) = (shared.selected_mass(), fresh.selected_mass());
            assert!(
                (got - want).abs() <= 1e-13 * want,
                "{case}: P(S > 0) {got} vs {want}"
            );
            for grid in [Grid::Fine, Grid::Coarse] {
                let got = shared.integrals(&theta, &theta, grid, false, None);
                let want = fresh.integrals(&theta, &theta, grid, false, None);
                for (y, (got, want)) in got.marginal.iter().zip(&want.marginal).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-13 * want.abs(),
                        "{case}, {grid:?}, group {y}: r {got} vs {want}"
                    );
                }
                let (got, want) = (got.potential, want.potential);
                assert!(
                    (got - want).abs() <= 1e-13 * want.abs().max(1.0),
                    "{case}, {grid:?}: potential {got} vs {want}"
                );
            }
        }
    }
}

/// With every token selectable, P(S > 0) = 1 and r sums to it, for
/// many drafts too: 303 clocks of rates from 0.3 down to about 1e-8,
/// whose n-th arrival comes late, with the tail's series at nodes up
/// to t = 60 / (least rate).
#[test]
fn clock_rule_holds_for_many_drafts() {
    let mut uniform = uniform_stream();
    let q = many_clocks(&mut uniform);
    let theta: Vec<f64> = (0..q.len()).map(|_| -4.0 + 5.0 * uniform()).collect();
    for n in [2, 4, 8, 12, 16, 20, 24, 32, 48] {
        let potential = WithoutReplacement::new(&q, &[], &[], n);
        let mass = potential.selected_mass();
        assert!((mass - 1.0).abs() < 1e-13, "n = {n}: P(S > 0) = {mass}");
        let r = potential
            .integrals(&theta, &theta, Grid::Fine, false, None)
            .marginal;
        let sum: f64 = r.iter().sum();
        assert!((sum - 1.0).abs() < 1e-13, "n = {n}: r sums to {sum}");
    }
}

/// The Hessian's diagonal is the derivative of r_y in theta_y, by
/// central differences on the same nodes, for exact and tail tokens.
#[test]
fn diagonal_is_the_derivative_of_r() {
    let q: Vec<f64> = (0..40).map(|i| 0.4 / 1.3f64.powi(i)).collect();
    let silent = [0.05, 0.02];
    let theta: Vec<f64> = (0..q.len()).map(|i| -2.5 + 0.1 * (i % 13) as f64).collect();
    for n in 2..=4 {
        let potential = WithoutReplacement::new(&q, &silent, &[], n);
        assert!(!potential.clocks(Grid::Fine).tail.is_empty());
        assert!(!potential.clocks(Grid::Fine).head.is_empty());
        let at = potential.integrals(&theta, &theta, Grid::Fine, true, None);
        let h = 1e-5;
        for y in 0..q.len() {
            let r_at = |shift: f64| {
                let mut moved = theta.clone();
                moved[y] += shift;
                potential
                    .integrals(&moved, &theta, Grid::Fine, false, None)
                    .marginal[y]
            };
            let difference = (r_at(h) - r_at(-h)) / (2.0 * h);
            assert!(
                (difference - at.diagonal[y]).abs() <= 1e-7 * at.marginal[y],
                "n = {n}, token {y}: {difference} vs {}",
                at.diagonal[y]
            );
        }
    }
}

/// Power sums four tokens at a time are the token-by-token sums (to
/// their rounding), for any count of tokens (whole fours and the rest).
#[test]
fn power_sums_match_token_by_token() {
    let mut uniform = uniform_stream();
    for count in 0..11 {
        let q: Vec<f64> = (0..count).map(|_| uniform()).collect();
        let mut fast = vec![0.5; 23];
        super::polynomials::add_power_sums(&mut fast, q.iter().copied());
        for (m, &sum) in fast.iter().enumerate() {
            let slow: f64 = 0.5 + q.iter().map(|q| q.powi(m as i32)).sum::<f64>();
            assert!(
                (sum - slow).abs() <= 1e-14 * slow,
                "{count} tokens, m = {m}"
            );
        }
    }
}

/// Both sides' tokens read off the problem's order by q (`in_order`) are
/// the lists each side sorts for itself: every token with q > 0 (the
/// problem's q = 0 token left out) by ascending q with its role, and the
/// others (H*'s tokens silent outside it, the rest excluded on it); so
/// are their clocks on both grids, bit for bit.
#[test]
fn sides_in_the_problems_order_are_the_sorted_sides() {
    use super::{Grid, QOrder};
    use crate::potential::Side;
    let mut uniform = uniform_stream();
    let mut q = many_clocks(&mut uniform);
    q.push(0.0);
    let in_h: Vec<bool> = (0..q.len()).map(|_| uniform() < 0.6).collect();
    let ranked = QOrder::rank(&q);
    let order = QOrder {
        slots: &ranked,
        q: &q,
        in_h: &in_h,
    };
    let on = |inside: bool| -> Vec<f64> {
        (0..q.len())
            .filter(|&y| in_h[y] == inside)
            .map(|y| q[y])
            .collect()
    };
    let (inner_q, outer_q) = (on(true), on(false));
    for n in [2, 4] {
        let sides = [
            (
                Side::Outer,
                WithoutReplacement::new(&outer_q, &inner_q, &[], n),
            ),
            (
                Side::Inner,
                WithoutReplacement::new(&inner_q, &[], &outer_q, n),
            ),
        ];
        for (side, sorted) in sides {
            let ordered = WithoutReplacement::new(sorted.q, sorted.silent, sorted.excluded, n)
                .in_order(order, side);
            let selectable = (ordered.selectable_by_q(), sorted.selectable_by_q());
            assert_eq!(selectable.0, selectable.1, "{side:?}, n = {n}");
            let others = (ordered.other_tokens(), sorted.other_tokens());
            assert_eq!(others.0, others.1, "{side:?}, n = {n}");
            for grid in [Grid::Fine, Grid::Coarse] {
                let (a, b) = (ordered.clocks(grid), sorted.clocks(grid));
                assert_eq!((&a.t, &a.weight, a.world), (&b.t, &b.weight, b.world));
                assert_eq!(a.silent_moments, b.silent_moments, "{side:?}, n = {n}");
            }
        }
    }
}

/// A tail token's extra terms read off the table of thresholds are those
/// its bound's loop gives: at random x over the tail's reach and past it,
/// and one float either side of every threshold.
#[test]
fn extra_terms_match_their_bound() {
    use super::polynomials::{EXTRA_TERMS_FROM, extra_terms, extra_terms_by_bound};
    let mut uniform = uniform_stream();
    let mut xs: Vec<f64> = (0..20_000).map(|_| 1.5 * uniform()).collect();
    xs.extend((0..2_000).map(|_| 10f64.powf(-20.0 + 21.0 * uniform())));
    xs.extend([0.0, 1.0, f64::MIN_POSITIVE, f64::MAX]);
    for from in EXTRA_TERMS_FROM.iter() {
        let bits = from.to_bits();
        xs.extend((bits - 3..=bits + 3).map(f64::from_bits));
    }
    for x in xs {
        assert_eq!(extra_terms(x), extra_terms_by_bound(x), "x = {x:e}");
    }
}

/// An exact token short of p is raised to where its r meets p with the
/// other weights fixed (its r by enumeration there, within the coarse
/// grid's error in t, 1e-6 relative, which the placement's pass runs
/// on), the tokens with r >= p stay, and a token whose p lies past what
/// it can reach (its inclusion probability) stays too.
#[test]
fn short_exact_tokens_are_placed_at_their_own_root() {
    // (selectable q, silent q, excluded q, n, theta).
    type Case<'a> = (&'a [f64], &'a [f64], &'a [f64], usize, &'a [f64]);
    let cases: [Case; 4] = [
        (
            &[0.45, 0.2, 0.15, 0.1],
            &[],
            &[0.1],
            2,
            &[0.0, 0.5, 1.0, 0.0],
        ),
        (&[0.6, 0.25, 0.1], &[0.05], &[], 3, &[-1.0, 0.0, 0.5]),
        (&[0.3, 0.3, 0.2, 0.1], &[], &[0.1], 3, &[2.0, 0.0, 0.0, 1.0]),
        (&[0.9, 0.06, 0.04], &[], &[], 2, &[0.0, 2.0, 3.0]),
    ];
    for (q, silent, excluded, n, theta) in cases {
        let potential = WithoutReplacement::new(q, silent, excluded, n);
        let (r, _, inclusion) = enumerated(q, silent, excluded, n, theta);
        // Token 0 short of p, halfway from its r to its limit; the others
        // at 0.9 of their r, above p; hi far off.
        let mut p: Vec<f64> = r.iter().map(|r| 0.9 * r).collect();
        p[0] = 0.5 * (r[0] + inclusion[0]);
        let mut placed = theta.to_vec();
        let moved = potential.place_short_head_tokens(&mut placed, &p, 40.0);
        assert_eq!(moved, 1, "n = {n}, q = {q:?}");
        assert!(placed[0] > theta[0]);
        assert_eq!(&placed[1..], &theta[1..]);
        let (r_placed, _, _) = enumerated(q, silent, excluded, n, &placed);
        let relative = (r_placed[0] - p[0]).abs() / p[0];
        assert!(
            relative < 1e-5,
            "n = {n}, q = {q:?}: r {} vs p {}",
            r_placed[0],
            p[0]
        );
        // Past its limit: nothing moves.
        p[0] = inclusion[0] * 1.001;
        let mut unmoved = theta.to_vec();
        assert_eq!(potential.place_short_head_tokens(&mut unmoved, &p, 40.0), 0);
        assert_eq!(&unmoved[..], theta);
    }
}
