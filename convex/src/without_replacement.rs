//! The selection potential for drafts without replacement (`docs/DESIGN.md`
//! §6b): n distinct tokens drawn from q, one selected with probability
//! proportional to e^(theta of its token).
//!
//! Drafting without replacement is the order of arrival of independent
//! exponential clocks of rates q_x, the drafted set S the first n arrivals
//! (mdsd-bounds' `ExponentialClocks`). Condition on the n-th arrival, of
//! token w at time t: with s_x = e^(-q_x t) (not arrived), u_x = 1 - s_x
//! (arrived) and, for any weights z_x,
//!
//!   E[Π_{x∈S} z_x] = ∫_0^∞ dt Σ_w q_w s_w z_w [Π_{x≠w} (s_x + λ u_x z_x)]_(n-1),
//!
//! [·]_k the coefficient of λ^k: w rings at t, n - 1 others before. With
//! 1/S = ∫ e^(-cS) dc and z_x = e^(-a_x c), a_x = e^(theta_x) (z = 1 for a
//! token drafted but never selected, z = 0 for one whose drafting leaves
//! the program's world), the selected token's law is a double integral,
//!
//!   r_y = a_y ∫ dc e^(-a_y c) ∫ dt ( q_y s_y [U^{∖y}]_(n-1) + u_y [M^{∖y}]_(n-2) ),
//!
//! U = Π_x (s_x + λ u_x z_x) and M = Σ_w q_w s_w z_w Π_{x≠w} (s_x + λ u_x
//! z_x), ∖y leaving token y out (y is the n-th arrival, or an earlier
//! one), and the potential E[1{S > 0} log S] is Frullani's integral of the
//! all-token term [M]_(n-1).
//!
//! The tokens split in two (§6b, "The clock's tail"). The few whose clocks
//! may ring by the last node in t (n q t > 1 there; more arrivals than
//! about 60 make a node negligible, so they are few) are exact factors,
//! each left out by products of prefix and suffix polynomials. For the
//! others ρ_x = (e^(q_x t) - 1) z_x <= e^(1/n) - 1, and with ε = e^(q t) - 1
//! expanded in powers of q t everything is a sum over tokens of q^m z^k
//! times a function of t alone. Their factor Π (s + λ u z) is e^(-t
//! q(tail)) exp(Σ_k (-1)^(k+1) λ^k P_k / k), P_k = Σ ρ^k (Newton's
//! identities), and their part of M that times Σ_j (-λ)^j Σ q z ρ^j.
//! Leaving a tail token y out divides by its factor, a series in ρ_y:
//!
//!   q_y s_y [U^{∖y}]_(n-1) + u_y [M^{∖y}]_(n-2)
//!     = Σ_j (-1)^j z_y^j ((j + 1) q_y ε_y^j U_(n-1-j) + ε_y^(j+1) M_(n-2-j)),
//!
//! so r_y is Σ_(j,e) q_y^(j+1+e) ∫ κ_(j,e)(c) e^(-(j+1) a_y c) dc with
//! kernels κ_(j,e)(c) = ∫ dt (...)(c, t) shared by every token. At each
//! node in t a head token whose n q t is still at most 1 joins the tail's
//! series and leaves it by the same division (its ε exact): only the head
//! tokens whose clocks may ring by that node are exact factors there.
//!
//! The tail's sums Σ q^m e^(-k a c) and the per-token integrals of the
//! kernels go through buckets of theta (the other schemes' from
//! `BUCKETED_FROM` tokens, wider below, `WIDE_BUCKET`; at the nodes where
//! a bucket's k a c is small, power series that all such buckets share,
//! `LEFT_REACH`); a head token in the series takes its terms from the
//! kernels summed over the nodes in t where it is in it. An evaluation
//! costs O(V n d) series terms (d the terms a token's series needs) plus
//! O(exact n² + n d) per pair of nodes, not O(V n²) per pair (the nodes in
//! c in parallel; the nodes in t whose share of P(world) is negligible
//! left out, `CLOCK_NEGLIGIBLE_OF_ERROR`). The Newton direction comes from
//! conjugate gradients on differences of r on a coarser grid
//! (`Grid::Coarse`), on the free tokens alone, preconditioned by the
//! Hessian's exact diagonal.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::Workspace;
use crate::newton::{Evaluation, Potential, newton_by_conjugate_gradients};
use crate::selection::{Assignment, NEGLIGIBLE, ORDER, left_end, left_end_from_power, nodes_from};
use crate::thresholds::BUCKETED_FROM;

/// The rule in c starts at c a_max = x_0 (`nodes_from`) and sums its
/// infinite left end from its first LEFT_END_NODES nodes (`left_end`):
/// the integrands there are c g(c) with g analytic on the scale 1 / (n
/// a_max), so the left end's error is about (n a c)^4 at the fourth node
/// (c = e^(3h) c_lo, at most 4 c_lo on either grid) times the left end's
/// share of the integral, n a c_lo: 256 n^5 x_0^5, which `left_end_head`
/// sets to the grid's error in c (n at most 16: the start moves down by n
/// / 16 past that). The fine grid starts at x_0 = 8e-5 for n = 4 (the
/// error of a first-order left end takes 1e-9, 45 more nodes), the coarse
/// one at 1.1e-3. Each node costs a pass over the nodes in t and the
/// exact tokens.
const LEFT_END_NODES: usize = 4;

/// The start x_0 = c_lo a_max of the rule in c whose left end's error is
/// about `error` (see `LEFT_END_NODES`).
fn left_end_head(error: f64, n: usize) -> f64 {
    (error / (256.0 * (n.min(16) as f64).powi(5))).powf(0.2)
}
/// Step of the rule in ln t, as mdsd-bounds' clocks take it.
const CLOCK_STEP: f64 = 0.25;
/// The integrands in t grow like t^(n-1) from 0: the rule starts where
/// the part it leaves out, below t^n / n!, is this small.
const CLOCK_HEAD: f64 = 1e-16;
/// Or no lower than a floor, summing its infinite left end from its
/// first CLOCK_LEFT_NODES nodes (`left_end_from_power`, exact for t^(n-1)
/// g(t) with g a polynomial of degree below CLOCK_LEFT_NODES): the
/// clocks' rates sum to 1, so g's Taylor terms are at most about (2 t)^k
/// / k!, and its remainder at the sixth node t_5 = e^(5h) t_0 is below
/// (2 t_5)^6 of g, times the left end's share of the integral, about
/// t_0^n: `clock_floor` puts t_0 where that is a hundredth of the grid's
/// error in t (for n = 4, 7.8e-3 on the fine grid and 2.3e-2 on the
/// coarse one). Where t^n / n!
/// reaches `CLOCK_HEAD` below the floor (n <= 7 on the fine grid), the
/// rule leaves out ln(t_0 / t) / h nodes at its left end.
const CLOCK_LEFT_NODES: usize = 6;
/// The rule ends at t = CLOCK_HORIZON / (least q), past which every clock
/// has rung but with probability e^-60.
const CLOCK_HORIZON: f64 = 60.0;
/// Step of the one-sided differences of r that stand for Hessian-vector
/// products, for a direction of unit largest entry: their error is about
/// the step (1e-7 of the Hessian, from the third derivative) plus the
/// rounding of r over the step (1e-9), which costs Newton's rate only
/// near the tolerance, for one evaluation a product where central
/// differences take two.
const DIFFERENCE: f64 = 1e-7;
/// A token is in the tail when n q t <= TAIL_REACH at every node in t.
const TAIL_REACH: f64 = 1.0;
/// Terms of a tail token's series in q t beyond the leading one: (e^x -
/// 1)^k = x^k g(x)^k with g's coefficients below e^x's, so cutting after
/// d terms leaves at most (k x)^(d+1) e^(k x) / (d+1)! of it, below
/// `SERIES_TOLERANCE` for k x <= n q t <= 1 and d = EXTRA_TERMS.
const EXTRA_TERMS: usize = 18;
const SERIES_TOLERANCE: f64 = 1e-16;
/// Series coefficients of one power of ε: index e for x^(k + e).
type Series = [f64; EXTRA_TERMS + 1];
/// Expected arrivals, past 2n, beyond which a node in t is negligible
/// (`head_cap`).
const SURE_ARRIVALS: f64 = 900.0;
/// The nodes in t whose contribution to P(world) is below its share
/// `Grid::clock_negligible` are left out: the selected mass they carry is
/// smaller still (at each time, the selected token's law sums to the
/// density of the world's n-th arrival), and which nodes go depends on q
/// alone, not on theta. The share is this much of the rule's relative
/// error in t: 1e-18 on the fine rule, 1e-10 on the coarse one, where
/// the rule starts at a floor set for its left end's error alone and its
/// first nodes carry far less (down to 1e-15 of P(world) on the shared
/// rows at top 1000, n = 4), so the coarse rule loses a few nodes at each
/// end (figures in benches/README.md, "The schemes grid").
const CLOCK_NEGLIGIBLE_OF_ERROR: f64 = 1e-4;
/// Width in theta of the buckets of a tail of fewer than `BUCKETED_FROM`
/// tokens, and the Taylor terms in each token's offset δ = a / a_b - 1
/// that its sums take: |δ| <= e^(1/8) - 1 < 0.134, and e^(-x (1 + δ)) =
/// e^(-x) Σ_i (-x δ)^i / i! cut after WIDE_ORDER terms leaves at most
/// max_x (x |δ|)^O e^(-x (1 - |δ|)) / O! = (|δ| / (1 - |δ|))^O (O / e)^O
/// / O! < 1e-18 of the token's term over all x (O = WIDE_ORDER). A sum
/// over buckets costs about the same per bucket and node for any order
/// up to this, and a small tail spreads thin over the other schemes'
/// buckets (`Assignment::new`, 9 terms), so buckets eight times as wide
/// take fewer sums (with the offset its tokens at one theta share,
/// `TailBuckets::shared_offset`, fewer than buckets half as wide with 14
/// terms: benches/README.md, "The schemes grid"); a large tail
/// fills its buckets, and its per-token terms, which grow with the order,
/// keep the narrow ones.
const WIDE_BUCKET: f64 = 1.0 / 4.0;
const WIDE_ORDER: usize = 21;
/// A bucket whose x = k a_b c is at most LEFT_REACH at a node in c joins
/// the tail's moments there through power series in x shared by every
/// such bucket (`left_sums`): Σ_y q^m e^(-k a_y c) = Σ_p (-k c a)^p / p!
/// Σ_y q^m (a_y / a)^p for any a with every k a_y c <= LEFT_REACH (1 +
/// |δ|) < 0.57 (|δ| below e^(1/8) - 1), cut after LEFT_TERMS terms with a
/// remainder below 0.57^16 / 16! < 6e-18 of Σ q^m, against a value of at
/// least e^(-0.57) of it, in sums whose terms exceed the value by at most
/// e^1.14. Most of a bucket's nodes in c lie there (from 1e-5 / a_max to
/// LEFT_REACH / a_b), so its nodes past them (to NEGLIGIBLE / a_b, ln(120)
/// / h of them) are the only ones it costs on its own.
const LEFT_REACH: f64 = 0.5;
const LEFT_TERMS: usize = 16;
/// The power series of the left part: index p for x^p.
type LeftSeries = [f64; LEFT_TERMS];

/// The tokens of one side of a problem with drafts without replacement.
pub(crate) struct WithoutReplacement<'a> {
    /// q of the selectable tokens.
    q: &'a [f64],
    /// q of the tokens drafted but never selected.
    silent: &'a [f64],
    /// q of the tokens whose drafting leaves the program's world (the
    /// inner program's: all drafts in H).
    excluded: &'a [f64],
    n: usize,
    /// n q t_max above which a token is an exact factor (`TAIL_REACH`;
    /// the tests set 0, every token exact, to check the tail's series).
    tail_reach: f64,
    /// The part of each grid that depends on q alone, made on first use.
    clocks: [OnceLock<Clocks>; 2],
    /// P(y ∈ S; world) per selectable token (`inclusion`), made on first use.
    inclusion: OnceLock<Vec<f64>>,
}

/// Coefficient k of `(U, M)` times one token's factors, U (s + λ b) and
/// M (s + λ b) + U m, from coefficients k (`now`) and k - 1 (`below`).
#[inline]
fn absorbed(now: (f64, f64), below: (f64, f64), s: f64, b: f64, marked: f64) -> (f64, f64) {
    (
        now.0 * s + below.0 * b,
        now.1 * s + below.1 * b + now.0 * marked,
    )
}

/// `(U, M)` times one token's factors, in place.
#[inline]
fn absorb(u: &mut [f64], m: &mut [f64], s: f64, b: f64, marked: f64) {
    for k in (0..u.len()).rev() {
        let below = if k > 0 {
            (u[k - 1], m[k - 1])
        } else {
            (0.0, 0.0)
        };
        (u[k], m[k]) = absorbed((u[k], m[k]), below, s, b, marked);
    }
}

/// `(U, M)` times one token's factors, from `from` into `to`: the exact
/// tokens' prefix products are made this way, each from the one before,
/// where a copy and an update in place would cost a call per copy.
#[inline]
fn absorb_into(from: (&[f64], &[f64]), to: (&mut [f64], &mut [f64]), s: f64, b: f64, marked: f64) {
    for k in 0..to.0.len() {
        let below = if k > 0 {
            (from.0[k - 1], from.1[k - 1])
        } else {
            (0.0, 0.0)
        };
        (to.0[k], to.1[k]) = absorbed((from.0[k], from.1[k]), below, s, b, marked);
    }
}

/// The n coefficients in λ of one of a node's polynomials: an array for
/// the few drafts of practice, whose loops then have a length the
/// compiler knows (it unrolls them), else a vector.
trait Coefficients: AsRef<[f64]> + AsMut<[f64]> + Clone {
    fn zeros(n: usize) -> Self;
}

impl<const N: usize> Coefficients for [f64; N] {
    fn zeros(n: usize) -> Self {
        debug_assert_eq!(n, N);
        [0.0; N]
    }
}

impl Coefficients for Vec<f64> {
    fn zeros(n: usize) -> Self {
        vec![0.0; n]
    }
}

/// A clock of rate q at time t: not rung (s = e^(-q t)) and rung (u = 1 -
/// s, without the cancellation of the difference where q t is small).
fn clock(q: f64, t: f64) -> (f64, f64) {
    ((-q * t).exp(), -(-q * t).exp_m1())
}

/// `(U, M)` of two disjoint sets of tokens: (U_1 U_2, M_1 U_2 + U_1 M_2),
/// to the degree of `u`.
#[inline]
fn multiply(first: (&[f64], &[f64]), second: (&[f64], &[f64]), u: &mut [f64], m: &mut [f64]) {
    for k in 0..u.len() {
        u[k] = (0..=k).map(|i| first.0[i] * second.0[k - i]).sum();
        m[k] = (0..=k)
            .map(|i| first.1[i] * second.0[k - i] + first.0[i] * second.1[k - i])
            .sum();
    }
}

/// Per power k <= n of ε = e^x - 1, the coefficients of x^(k + e) in ε^k.
fn clock_series(n: usize) -> Vec<Series> {
    let mut inverse_factorial = [1.0; EXTRA_TERMS + 2];
    for i in 1..inverse_factorial.len() {
        inverse_factorial[i] = inverse_factorial[i - 1] / i as f64;
    }
    let mut series = vec![[0.0; EXTRA_TERMS + 1]; n + 1];
    series[0][0] = 1.0;
    // ε^k = ε^(k-1) ε, ε = Σ_(i>=1) x^i / i!.
    for k in 1..=n {
        for e in 0..=EXTRA_TERMS {
            series[k][e] = (1..=e + 1)
                .map(|i| series[k - 1][e + 1 - i] * inverse_factorial[i])
                .sum();
        }
    }
    series
}

/// A bound on P(fewer than n of independent clocks have rung), given the
/// expected number rung, `arrivals` (Chernoff's lower tail for a sum of
/// independent indicators, P(N <= k) <= e^(-μ) (e μ / k)^k for k < μ;
/// 1 where that does not apply). Past a node t the n-th arrival's density
/// carries P(N(t) < n) in all: the world's share of it, and every later
/// node's, is at most this.
fn arrivals_below(arrivals: f64, n: usize) -> f64 {
    let k = (n - 1) as f64;
    if arrivals <= k {
        return 1.0;
    }
    if n == 1 {
        return (-arrivals).exp();
    }
    (-arrivals + k * (1.0 + (arrivals / k).ln())).exp()
}

/// The share of `Grid::clock_negligible` that the nodes past the last one
/// of a clock pass may carry together, as a bound by `arrivals_below`: the
/// rule sums a positive tail within a small factor of its integral, and
/// every node it leaves out then carries less than that share alone, so
/// the nodes kept are those that a pass over every node keeps.
const CLOCK_TAIL_MARGIN: f64 = 1e-3;

/// A node in t where more clocks than this have n q t > 1 is left out:
/// each has rung by then with probability at least 1 - e^(-1/n), so at
/// least μ = 2n + SURE_ARRIVALS arrivals are expected before it, and n - 1
/// or fewer happen with probability below e^(-μ/8) < e^-112 (Chernoff's
/// lower tail, (n - 1) <= μ/2): under the fine rule's negligible share
/// (`Grid::clock_negligible`, 1e-18) of any world more likely than 1e-31.
fn head_cap(n: usize) -> usize {
    let arrivals = 2.0 * n as f64 + SURE_ARRIVALS;
    (arrivals / -(-1.0 / n as f64).exp_m1()).ceil() as usize
}

/// The terms beyond the leading one that a tail token's series needs,
/// `x` = n q t_max <= 1 (see `EXTRA_TERMS`).
fn extra_terms(x: f64) -> usize {
    let mut bound = x * x.exp();
    let mut d = 0;
    while bound > SERIES_TOLERANCE && d < EXTRA_TERMS {
        d += 1;
        bound *= x / (d + 1) as f64;
    }
    d
}

/// The tail's power sums at time t from its moments `moments[k][e]` = Σ
/// q^(k+e) z^k: P_k = Σ ρ^k (k = 1..n-1, in `power[k]`) and Q_j = Σ q z
/// ρ^j (j = 0..n-1, in `marked[j]`), ρ^k = z^k Σ_e series[k][e] (q
/// t)^(k+e).
#[inline]
fn tail_sums(
    series: &[Series],
    (t, t_powers): (f64, &Series),
    moments: &[Series],
    power: &mut [f64],
    marked: &mut [f64],
) {
    let n = marked.len();
    // Σ_e series_e m_e t^(k+e) = t^k Σ_e series_e m_e t^e with the powers
    // t^e made once a pair (`powers_of`): a dot product in four running
    // sums (as a chain of additions, or of multiplications for the powers,
    // each sum would wait on its previous term).
    let at = |k: usize, moments: &Series| {
        let mut lanes = [0.0; 4];
        for (e, ((c, m), p)) in series[k].iter().zip(moments).zip(t_powers).enumerate() {
            lanes[e % 4] += c * m * p;
        }
        let sum = t.powi(k as i32) * (lanes[0] + lanes[1] + lanes[2] + lanes[3]);
        if sum.is_finite() {
            sum
        } else {
            tail_sum_by_logarithms(&series[k], t, k, moments)
        }
    };
    for k in 1..n {
        power[k] = at(k, &moments[k]);
    }
    for j in 0..n {
        // Σ q z ρ^j: the moments of z^(j+1) q^(j+1+e) = q z^(j+1) q^(j+e).
        marked[j] = at(j, &moments[j + 1]);
    }
}

/// t^e for e <= EXTRA_TERMS: the powers of one node in t that its sums
/// and kernels take.
#[inline]
fn powers_of(t: f64) -> Series {
    let mut powers = [1.0; EXTRA_TERMS + 1];
    for e in 1..powers.len() {
        powers[e] = powers[e - 1] * t;
    }
    powers
}

/// `tail_sums`' Σ_e series_e m_e t^(k+e) where a power of t overflows:
/// m t^p is Σ (q t)^p over the tail, each term at most n^-p; the power
/// alone overflows past t ~ 1e308^(1/p), at nodes that the clock pass
/// visits before it drops them as negligible, where m underflows or is
/// zero: the product then comes from logarithms.
#[cold]
fn tail_sum_by_logarithms(series: &Series, t: f64, k: usize, moments: &Series) -> f64 {
    let mut sum = 0.0;
    let mut scale = t.powi(k as i32);
    for (e, (c, &m)) in series.iter().zip(moments).enumerate() {
        let term = scale * m;
        sum += c * if term.is_finite() {
            term
        } else if m > 0.0 {
            (m.ln() + (k + e) as f64 * t.ln()).exp()
        } else {
            0.0
        };
        scale *= t;
    }
    sum
}

/// The tail's `(U, M)` from its power sums and survival e^(-t q(tail)):
/// E = Π (1 + λ ρ) by Newton's identities k E_k = Σ_i (-1)^(i-1) E_(k-i)
/// P_i, U = S E, M = S E Σ_j (-λ)^j Q_j.
#[inline]
fn tail_polynomials(power: &[f64], marked: &[f64], survival: f64, u: &mut [f64], m: &mut [f64]) {
    let n = u.len();
    u[0] = 1.0;
    for k in 1..n {
        let mut sum = 0.0;
        for i in 1..=k {
            let term = u[k - i] * power[i];
            sum += if i % 2 == 1 { term } else { -term };
        }
        u[k] = sum / k as f64;
    }
    for k in 0..n {
        m[k] = survival
            * (0..=k)
                .map(|j| {
                    let term = u[k - j] * marked[j];
                    if j % 2 == 0 { term } else { -term }
                })
                .sum::<f64>();
    }
    u.iter_mut().for_each(|x| *x *= survival);
}

/// The quadrature of an evaluation: the fine one of r and the potential
/// (relative error 1e-15 in c, `FINE_SELECTION`, and about 1e-14 in t),
/// or a coarse one for the differences of r that stand for Hessian-vector
/// products (5e-10 in c, `COARSE_SELECTION`, and about 1e-6 in t,
/// `clock_step`). The Hessian's accuracy costs Newton's rate, never
/// exactness: the line search and the stop rule use the fine r. A step in
/// c of ln 2 (7e-7) is too coarse: on one of the shared rows (row 33, top
/// 100, n = 2, alpha* = 0.99988) the inner program then stalls short of
/// its tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Grid {
    Fine,
    Coarse,
}

impl Grid {
    /// The relative error the rule in t aims at.
    fn clock_error(self) -> f64 {
        match self {
            Grid::Fine => FINE_CLOCKS,
            Grid::Coarse => COARSE_CLOCKS,
        }
    }

    /// The share of P(world) below which a node in t is left out
    /// (`CLOCK_NEGLIGIBLE_OF_ERROR`).
    fn clock_negligible(self) -> f64 {
        CLOCK_NEGLIGIBLE_OF_ERROR * self.clock_error()
    }

    /// The relative error the rule in c aims at.
    fn selection_error(self) -> f64 {
        match self {
            Grid::Fine => FINE_SELECTION,
            Grid::Coarse => COARSE_SELECTION,
        }
    }

    /// The steps in ln c and in ln t for n drafts.
    fn steps(self, n: usize) -> (f64, f64) {
        let fine = clock_step(n, FINE_CLOCKS).min(CLOCK_STEP);
        match self {
            Grid::Fine => (selection_step(FINE_SELECTION), fine),
            Grid::Coarse => (
                selection_step(COARSE_SELECTION),
                (2.0 * fine).min(clock_step(n, COARSE_CLOCKS)),
            ),
        }
    }
}

/// The relative errors the fine and the coarse rule in t aim at.
const FINE_CLOCKS: f64 = 1e-14;
const COARSE_CLOCKS: f64 = 1e-6;
/// The relative errors the fine and the coarse rule in c aim at.
const FINE_SELECTION: f64 = 1e-15;
const COARSE_SELECTION: f64 = 5e-10;
/// The acceptance lost above which Newton's iteration evaluates on the
/// coarse grid (`Potential::rough_until`): on the shared rows the coarse
/// loss is within about 1e-7 of the fine one at top 100 and 1000, and
/// its optimum up to 1.6e-6 from the fine one at the full vocabulary.
const ROUGH_UNTIL: f64 = 1e-6;

/// The step in ln c for a relative error near `error`: the integrands in
/// u = ln c are bounded in the strip |Im u| < π/2 (`docs/DESIGN.md` §6b),
/// so the rule's error is about e^(-π² / h).
fn selection_step(error: f64) -> f64 {
    std::f64::consts::PI.powi(2) / -error.ln()
}

/// The step in ln t for n drafts that keeps the rule's relative error
/// near `error` (the fine rule's at most `CLOCK_STEP`). In u = ln t the integrands are
/// analytic in the strip |Im u| < π/2, where the n arrived clocks'
/// factors 1 - e^(-q t) grow beyond their real values, so the
/// trapezoidal rule's error is about C^n e^(-π² / h) (Trefethen &
/// Weideman, SIAM Review 2014), not the e^(-π² / h) of a bounded
/// integrand: with h = 1/4, on 303 clocks of rates from 0.3 down to 1e-8
/// (`clock_rule_holds_for_many_drafts`), P(S > 0) came out 3e-12 above 1
/// at n = 8, 7e-10 at n = 12 and 2e-8 at n = 16, C about 5.
fn clock_step(n: usize, error: f64) -> f64 {
    let growth = n as f64 * 5f64.ln();
    std::f64::consts::PI.powi(2) / (growth - error.ln())
}

/// The floor of the rule in t of step `step` whose left end's error is a
/// hundredth of `error` (see `CLOCK_LEFT_NODES`).
fn clock_floor(n: usize, step: f64, error: f64) -> f64 {
    let last = CLOCK_LEFT_NODES - 1;
    let growth = (2.0 * (last as f64 * step).exp()).powi(CLOCK_LEFT_NODES as i32);
    (1e-2 * error / growth).powf(1.0 / (CLOCK_LEFT_NODES + n) as f64)
}

/// The clocks' quadrature in t, of step `step` in ln t and relative error
/// near `error`: nodes and weights of ∫_0^∞ dt. It starts where t^n / n!
/// is `CLOCK_HEAD`, with the part below from the integrand's growth like
/// t^(n-1), unless that is below the floor (`clock_floor`): there it
/// starts at the floor and sums its left end from its first
/// `CLOCK_LEFT_NODES` nodes.
fn clock_nodes(n: usize, q_least: f64, step: f64, error: f64) -> (Vec<f64>, Vec<f64>) {
    let factorial: f64 = (1..=n).map(|k| k as f64).product();
    let head = (CLOCK_HEAD * factorial).powf(1.0 / n as f64);
    let floor = clock_floor(n, step, error);
    let first = head.max(floor);
    let (lo, hi) = (first.ln(), (CLOCK_HORIZON / q_least).ln().max(first.ln()));
    let count = ((hi - lo) / step).ceil() as usize + 1;
    let t: Vec<f64> = (0..count).map(|j| (lo + j as f64 * step).exp()).collect();
    let mut w: Vec<f64> = t.iter().map(|t| step * t).collect();
    if head >= floor {
        // [0, first], where the integrand grows like t^(n-1): first / n of it.
        w[0] += first / n as f64;
    } else {
        let left = left_end_from_power(step, CLOCK_LEFT_NODES.min(count), n);
        w.iter_mut()
            .zip(&t)
            .zip(&left)
            .for_each(|((w, t), g)| *w += step * t * g);
    }
    (t, w)
}

/// What a grid's evaluations share, made from q alone: the nodes in t
/// that carry P(world), the exact tokens and the tail's c-free parts.
struct Clocks {
    /// Nodes and weights of the rule in t.
    t: Vec<f64>,
    weight: Vec<f64>,
    /// P(world) and P(S = 0 in it).
    world: f64,
    empty: f64,
    /// The selectable tokens whose clocks may ring by the last node (the
    /// head, by descending q), and the tail's, with each tail token's
    /// extra series terms.
    head: Vec<usize>,
    tail: Vec<usize>,
    extra: Vec<usize>,
    /// Per node: how many head tokens are exact factors there (n q t above
    /// `tail_reach`, a prefix of the head; the others join the tail's
    /// series there), s and u of the head tokens (rows of
    /// `head.len()`), the exact silent and excluded tokens' `(U, M)`, and
    /// the survival e^(-t q) of the tail and the head tokens in it.
    exact: Vec<usize>,
    survival: Vec<f64>,
    arrived: Vec<f64>,
    background: Vec<(Vec<f64>, Vec<f64>)>,
    tail_survival: Vec<f64>,
    /// Σ q^m over the silent tail, m <= n + EXTRA_TERMS.
    silent_moments: Vec<f64>,
}

/// How a token's drafting enters the world: selectable (z = e^(-a c)),
/// silent (z = 1) or excluded (z = 0).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Selectable,
    Silent,
    Excluded,
}

impl<'a> WithoutReplacement<'a> {
    pub(crate) fn new(q: &'a [f64], silent: &'a [f64], excluded: &'a [f64], n: usize) -> Self {
        Self {
            q,
            silent,
            excluded,
            n,
            tail_reach: TAIL_REACH,
            clocks: [OnceLock::new(), OnceLock::new()],
            inclusion: OnceLock::new(),
        }
    }

    /// P(y ∈ S; world) for each selectable token y: the limit of r_y as
    /// theta_y grows with the other weights fixed, where y is selected
    /// whenever it is drafted into the world. It is r's integrand in t at
    /// c = 0, where every selectable z is 1: the pairs of nodes of one
    /// node in c with measure 1, and for the tail Σ_j (-1)^j Σ_e
    /// q_y^(j+1+e) κ_(j,e)(0).
    pub(crate) fn inclusion(&self) -> &[f64] {
        self.inclusion.get_or_init(|| {
            let n = self.n;
            let clocks = self.clocks(Grid::Fine);
            let h = clocks.head.len();
            // The tail's moments at c = 0: Σ q^m over its selectable and
            // silent tokens.
            let mut sums = clocks.silent_moments.clone();
            for &y in &clocks.tail {
                let mut power = 1.0;
                for m in sums.iter_mut() {
                    *m += power;
                    power *= self.q[y];
                }
            }
            let node = NodeInC {
                moments: (0..=n)
                    .map(|k| std::array::from_fn(|e| sums.get(k + e).copied().unwrap_or(0.0)))
                    .collect(),
                z: vec![1.0; h],
                head_measure: vec![1.0; h],
                kernel_measure: 1.0,
                weight: 0.0,
            };
            let at_zero = self.node_sums(clocks, &clock_series(n), node);
            let mut inclusion = vec![0.0; self.q.len()];
            for (&y, &x) in clocks.head.iter().zip(&at_zero.head) {
                inclusion[y] = x;
            }
            let width = EXTRA_TERMS + 1;
            for &y in &clocks.tail {
                let q = self.q[y];
                inclusion[y] = (0..n)
                    .map(|j| {
                        let mut power = q.powi(j as i32 + 1);
                        let part: f64 = (at_zero.kernel[j * width..(j + 1) * width].iter())
                            .map(|k| {
                                let term = power * k;
                                power *= q;
                                term
                            })
                            .sum();
                        if j % 2 == 0 { part } else { -part }
                    })
                    .sum();
            }
            inclusion
        })
    }

    /// P(S > 0 in the world): the total of r, whatever theta.
    pub(crate) fn selected_mass(&self) -> f64 {
        let clocks = self.clocks(Grid::Fine);
        clocks.world - clocks.empty
    }

    fn q_least(&self) -> f64 {
        (self.q.iter().chain(self.silent).chain(self.excluded))
            .filter(|&&q| q > 0.0)
            .fold(f64::INFINITY, |m, &q| m.min(q))
    }

    fn clocks(&self, grid: Grid) -> &Clocks {
        let index = (grid == Grid::Coarse) as usize;
        self.clocks[index].get_or_init(|| self.clock_pass(grid))
    }

    /// Every token with its q and role, by ascending q.
    fn tokens(&self) -> Vec<(f64, Role)> {
        let mut tokens: Vec<(f64, Role)> = (self.q.iter().map(|&q| (q, Role::Selectable)))
            .chain(self.silent.iter().map(|&q| (q, Role::Silent)))
            .chain(self.excluded.iter().map(|&q| (q, Role::Excluded)))
            .filter(|&(q, _)| q > 0.0)
            .collect();
        tokens.sort_by(|a, b| a.0.total_cmp(&b.0));
        tokens
    }

    /// The nodes in t of `grid` that carry P(world), and the rest of
    /// `Clocks`. Each node splits the tokens at n q t = `tail_reach` (the
    /// tail's moments summed from the least q up, node by node from the
    /// last), so a pass costs O(V) series terms plus the exact tokens.
    fn clock_pass(&self, grid: Grid) -> Clocks {
        let n = self.n;
        let series = clock_series(n);
        let (all_t, all_weights) =
            clock_nodes(n, self.q_least(), grid.steps(n).1, grid.clock_error());
        let tokens = self.tokens();
        let terms = n + EXTRA_TERMS + 1;
        let in_tail = |q: f64, t: f64| n as f64 * q * t <= self.tail_reach;
        let bound: Vec<usize> = (all_t.iter())
            .map(|&t| tokens.partition_point(|&(q, _)| in_tail(q, t)))
            .collect();
        // Per node, the tail's Σ q^m over tokens drafted into the world
        // (z = 1 there) and over the silent ones, and its q(tail).
        let (mut open, mut silent, mut mass) = (vec![0.0; terms], vec![0.0; terms], 0.0);
        let mut next = 0;
        let mut moments = vec![(Vec::new(), Vec::new(), 0.0); all_t.len()];
        for j in (0..all_t.len()).rev() {
            for &(q, role) in &tokens[next..bound[j].max(next)] {
                mass += q;
                let mut power = 1.0;
                for m in 0..terms {
                    if role != Role::Excluded {
                        open[m] += power;
                    }
                    if role == Role::Silent {
                        silent[m] += power;
                    }
                    power *= q;
                }
            }
            next = next.max(bound[j]);
            moments[j] = (open.clone(), silent.clone(), mass);
        }
        // [M]_(n-1) with z = 1 on the world's tokens (P(world)), and with
        // z = 0 on the selectable ones too (P(S = 0)), from the first node
        // on until what the nodes after it can carry is negligible
        // (`arrivals_below`).
        let mut densities = vec![(0.0, 0.0); all_t.len()];
        let mut world_so_far = 0.0;
        for (j, &t) in all_t.iter().enumerate() {
            let head = &tokens[bound[j]..];
            if head.len() > head_cap(n) {
                break;
            }
            let t_powers = powers_of(t);
            let survival = (-t * moments[j].2).exp();
            let tail_part = |sums: &[f64]| {
                let table: Vec<Series> = (0..=n)
                    .map(|k| std::array::from_fn(|e| sums.get(k + e).copied().unwrap_or(0.0)))
                    .collect();
                let (mut power, mut marked) = (vec![0.0; n], vec![0.0; n]);
                tail_sums(&series, (t, &t_powers), &table, &mut power, &mut marked);
                let (mut u, mut m) = (vec![0.0; n], vec![0.0; n]);
                tail_polynomials(&power, &marked, survival, &mut u, &mut m);
                (u, m)
            };
            let (mut world_u, mut world_m) = tail_part(&moments[j].0);
            let (mut empty_u, mut empty_m) = tail_part(&moments[j].1);
            // Each tail clock has rung by t with probability at least
            // q t (1 - q t / 2) >= q t (1 - 1 / 2n) (n q t <= `tail_reach`).
            let mut arrivals = t * moments[j].2 * (1.0 - 0.5 / n as f64);
            for &(q, role) in head {
                let (s, arrived) = clock(q, t);
                arrivals += arrived;
                let (world, empty) = match role {
                    Role::Selectable => (arrived, 0.0),
                    Role::Silent => (arrived, arrived),
                    Role::Excluded => (0.0, 0.0),
                };
                absorb(
                    &mut world_u,
                    &mut world_m,
                    s,
                    world,
                    if world > 0.0 { q * s } else { 0.0 },
                );
                absorb(
                    &mut empty_u,
                    &mut empty_m,
                    s,
                    empty,
                    if empty > 0.0 { q * s } else { 0.0 },
                );
            }
            densities[j] = (
                all_weights[j] * world_m[n - 1],
                all_weights[j] * empty_m[n - 1],
            );
            world_so_far += densities[j].0;
            if j >= CLOCK_LEFT_NODES
                && arrivals_below(arrivals, n)
                    <= CLOCK_TAIL_MARGIN * grid.clock_negligible() * world_so_far
            {
                break;
            }
        }
        let whole: f64 = densities.iter().map(|d| d.0).sum();
        let kept: Vec<usize> = (0..all_t.len())
            .filter(|&j| {
                // A node of the left end may weigh less than nothing.
                let share = densities[j].0.abs();
                share > 0.0 && share >= grid.clock_negligible() * whole
            })
            .collect();
        let t: Vec<f64> = kept.iter().map(|&j| all_t[j]).collect();
        let weight: Vec<f64> = kept.iter().map(|&j| all_weights[j]).collect();
        let world = kept.iter().map(|&j| densities[j].0).sum();
        let empty = kept.iter().map(|&j| densities[j].1).sum();
        self.split(t, weight, world, empty)
    }

    /// `Clocks` on the kept nodes: the tokens with n q t_max above
    /// `tail_reach` exact, the rest in the tail.
    fn split(&self, t: Vec<f64>, weight: Vec<f64>, world: f64, empty: f64) -> Clocks {
        let n = self.n;
        let t_max = t.last().copied().unwrap_or(0.0);
        let reach = |q: f64| n as f64 * q * t_max;
        let exact = |q: f64| reach(q) > self.tail_reach;
        let (mut head, tail): (Vec<usize>, Vec<usize>) =
            (0..self.q.len()).partition(|&y| exact(self.q[y]));
        head.sort_by(|&x, &y| self.q[y].total_cmp(&self.q[x]));
        let exact_at: Vec<usize> = (t.iter())
            .map(|&t| head.partition_point(|&y| n as f64 * self.q[y] * t > self.tail_reach))
            .collect();
        // q of the head tokens from x on, for the survival of those in the
        // tail's series.
        let mut head_after = vec![0.0; head.len() + 1];
        for x in (0..head.len()).rev() {
            head_after[x] = head_after[x + 1] + self.q[head[x]];
        }
        let extra = tail
            .iter()
            .map(|&y| extra_terms(reach(self.q[y])))
            .collect();
        let (survival, arrived) = t
            .iter()
            .flat_map(|&t| head.iter().map(move |&y| clock(self.q[y], t)))
            .unzip();
        let tail_mass: f64 = (tail.iter().map(|&y| self.q[y]))
            .chain(
                self.silent
                    .iter()
                    .chain(self.excluded)
                    .copied()
                    .filter(|&q| !exact(q)),
            )
            .sum();
        let background = (t.iter())
            .map(|&t| {
                let (mut u, mut m) = (vec![0.0; n], vec![0.0; n]);
                u[0] = 1.0;
                for &q in self.silent.iter().filter(|&&q| exact(q)) {
                    let (s, arrived) = clock(q, t);
                    absorb(&mut u, &mut m, s, arrived, q * s);
                }
                for &q in self.excluded.iter().filter(|&&q| exact(q)) {
                    absorb(&mut u, &mut m, (-q * t).exp(), 0.0, 0.0);
                }
                (u, m)
            })
            .collect();
        let tail_survival = (t.iter().zip(&exact_at))
            .map(|(&t, &exact)| (-t * (tail_mass + head_after[exact])).exp())
            .collect();
        let mut silent_moments = vec![0.0; n + EXTRA_TERMS + 1];
        for &q in self.silent.iter().filter(|&&q| !exact(q)) {
            let mut power = 1.0;
            for m in silent_moments.iter_mut() {
                *m += power;
                power *= q;
            }
        }
        Clocks {
            t,
            weight,
            world,
            empty,
            head,
            tail,
            extra,
            exact: exact_at,
            survival,
            arrived,
            background,
            tail_survival,
            silent_moments,
        }
    }

    /// The potential at theta on `grid`, with the Hessian's diagonal.
    fn evaluate_on(&self, theta: &[f64], grid: Grid) -> Evaluation<Curvature> {
        let Integrals {
            marginal,
            potential,
            diagonal,
        } = self.integrals(theta, theta, grid, true, None);
        Evaluation {
            potential,
            marginal,
            hessian: Curvature {
                grid,
                diagonal,
                coarse_marginal: None,
            },
        }
    }

    /// r and the potential at theta, on the nodes in c of `grid` from those
    /// of the point `at` (theta itself, or the point of a Newton direction
    /// whose differences share them), and when `curvature` the Hessian's
    /// diagonal (else empty).
    fn integrals(
        &self,
        theta: &[f64],
        at: &[f64],
        grid: Grid,
        curvature: bool,
        only: Option<&[bool]>,
    ) -> Integrals {
        let (n, v) = (self.n, theta.len());
        let clocks = self.clocks(grid);
        let series = clock_series(n);
        let c_step = grid.steps(n).0;
        let c = nodes_from(at, n, left_end_head(grid.selection_error(), n), c_step);
        let left = left_end(c_step, LEFT_END_NODES);
        let tail_theta: Vec<f64> = clocks.tail.iter().map(|&y| theta[y]).collect();
        let tail = Tail::new(&tail_theta, clocks, self.q, n);
        let head_a: Vec<f64> = clocks.head.iter().map(|&y| theta[y].exp()).collect();
        let selectable = clocks.world - clocks.empty;
        let nodes_c: Vec<NodeSums> = (c.par_iter().enumerate())
            .map(|(k, &ck)| {
                let wc = c_step * (1.0 + left.get(k).copied().unwrap_or(0.0));
                let z: Vec<f64> = head_a.iter().map(|a| (-a * ck).exp()).collect();
                // a e^(-a c) dc, dc = c d(ln c): r's measure at the node.
                let head_measure = (head_a.iter().zip(&z))
                    .map(|(a, z)| wc * ck * a * z)
                    .collect();
                let node = NodeInC {
                    moments: tail.moments_at(ck, &clocks.silent_moments, n),
                    z,
                    head_measure,
                    kernel_measure: wc * ck,
                    weight: wc,
                };
                self.node_sums(clocks, &series, node)
            })
            .collect();
        let mut r = vec![0.0; v];
        let mut diagonal = vec![0.0; if curvature { v } else { 0 }];
        let mut potential = 0.0;
        for (sums, &ck) in nodes_c.iter().zip(&c) {
            for (&y, &x) in clocks.head.iter().zip(&sums.head) {
                r[y] += x;
            }
            if curvature {
                // d/dtheta_y of a_y e^(-a_y c): the same term times 1 - a_y c.
                for ((&y, &x), a) in clocks.head.iter().zip(&sums.head).zip(&head_a) {
                    diagonal[y] += x * (1.0 - a * ck);
                }
            }
            // m e^(-c) - (E[e^(-cS); world] - P(S = 0)) = m (e^(-c) - 1) +
            // P(world) - E[e^(-cS); world].
            potential +=
                sums.weight * (selectable * (-ck).exp_m1() + clocks.world - sums.transform);
        }
        let kernels: Vec<&[f64]> = nodes_c.iter().map(|s| s.kernel.as_slice()).collect();
        let marginal = tail.marginal(&c, &kernels, clocks, self.q, curvature, only);
        for (&y, (x, d)) in clocks.tail.iter().zip(marginal) {
            r[y] = x;
            if curvature {
                diagonal[y] = d;
            }
        }
        Integrals {
            marginal: r,
            potential,
            diagonal,
        }
    }

    /// One node in c: over the nodes in t, the exact tokens' terms of r,
    /// the tail's kernels and E[e^(-cS); world], for the drafts that the
    /// storage of the polynomials holds as a constant.
    fn node_sums(&self, clocks: &Clocks, series: &[Series], node: NodeInC) -> NodeSums {
        match self.n {
            1 => self.node_sums_of::<[f64; 1]>(clocks, series, node),
            2 => self.node_sums_of::<[f64; 2]>(clocks, series, node),
            3 => self.node_sums_of::<[f64; 3]>(clocks, series, node),
            4 => self.node_sums_of::<[f64; 4]>(clocks, series, node),
            5 => self.node_sums_of::<[f64; 5]>(clocks, series, node),
            6 => self.node_sums_of::<[f64; 6]>(clocks, series, node),
            7 => self.node_sums_of::<[f64; 7]>(clocks, series, node),
            8 => self.node_sums_of::<[f64; 8]>(clocks, series, node),
            _ => self.node_sums_of::<Vec<f64>>(clocks, series, node),
        }
    }

    fn node_sums_of<P: Coefficients>(
        &self,
        clocks: &Clocks,
        series: &[Series],
        node: NodeInC,
    ) -> NodeSums {
        // n from the storage: for an array, a constant of the loops below.
        let n = P::zeros(self.n).as_ref().len();
        let h = clocks.head.len();
        let NodeInC {
            moments,
            z,
            head_measure,
            kernel_measure,
            weight,
        } = node;
        let mut sums = NodeSums {
            weight,
            head: vec![0.0; h],
            kernel: Vec::new(),
            transform: 0.0,
        };
        let (mut power, mut marked) = (P::zeros(n), P::zeros(n));
        let (mut tu, mut tm) = (P::zeros(n), P::zeros(n));
        let (mut u, mut m) = (P::zeros(n), P::zeros(n));
        // Prefix x: the tail, the background and the exact tokens before x.
        let (mut pre_u, mut pre_m) = (vec![P::zeros(n); h + 1], vec![P::zeros(n); h + 1]);
        // The tail's moments with the head tokens in its series at the
        // node: from the last node back, each head token joins once (its n q
        // t falls below `tail_reach`), its terms q^(k+e) z^k added.
        let mut moments = moments;
        let mut joined = h;
        // The tail's kernels (without the node's measure in c) summed over
        // the nodes since the last head token joined the series (a
        // segment), and the segments before: a head token in the series
        // from node i on takes its terms of r from the kernels of the
        // segments from i, as a tail token takes them from all of them,
        // where it would cost a term at every pair of nodes.
        let width = EXTRA_TERMS + 1;
        let mut segment = vec![0.0; n * width];
        // The segments one after another, `n * width` numbers each.
        let mut segments: Vec<f64> = Vec::new();
        // Per head token, where in `segments` the segment from which it is
        // in the series starts.
        let mut first_segment = vec![None; h];
        // The head tokens' q in their order, read at every pair of nodes.
        let head_q: Vec<f64> = clocks.head.iter().map(|&y| self.q[y]).collect();
        for i in (0..clocks.t.len()).rev() {
            let (t, wt, exact) = (clocks.t[i], clocks.weight[i], clocks.exact[i]);
            if exact < joined {
                segments.extend_from_slice(&segment);
                segment.fill(0.0);
                first_segment[exact..joined].fill(Some(segments.len()));
            }
            for x in exact..joined {
                let (q, z) = (head_q[x], z[x]);
                let mut zk = 1.0;
                for (k, row) in moments.iter_mut().enumerate().skip(1) {
                    zk *= z;
                    let mut term = zk * q.powi(k as i32);
                    for entry in row.iter_mut() {
                        *entry += term;
                        term *= q;
                    }
                }
            }
            joined = joined.min(exact);
            let t_powers = powers_of(t);
            tail_sums(
                series,
                (t, &t_powers),
                &moments,
                power.as_mut(),
                marked.as_mut(),
            );
            tail_polynomials(
                power.as_ref(),
                marked.as_ref(),
                clocks.tail_survival[i],
                tu.as_mut(),
                tm.as_mut(),
            );
            let background = &clocks.background[i];
            multiply(
                (tu.as_ref(), tm.as_ref()),
                (&background.0, &background.1),
                pre_u[0].as_mut(),
                pre_m[0].as_mut(),
            );
            let s = &clocks.survival[i * h..(i + 1) * h];
            let arrived = &clocks.arrived[i * h..(i + 1) * h];
            let q = |x: usize| head_q[x];
            // Exact token x's factors at this pair of nodes.
            let factors = |x: usize| (s[x], arrived[x] * z[x], q(x) * s[x] * z[x]);
            for x in 0..exact {
                let (before_u, after_u) = pre_u.split_at_mut(x + 1);
                let (before_m, after_m) = pre_m.split_at_mut(x + 1);
                let (s, b, marked) = factors(x);
                absorb_into(
                    (before_u[x].as_ref(), before_m[x].as_ref()),
                    (after_u[0].as_mut(), after_m[0].as_mut()),
                    s,
                    b,
                    marked,
                );
            }
            let (whole_u, whole_m) = (pre_u[exact].as_ref(), pre_m[exact].as_ref());
            sums.transform += wt * whole_m[n - 1];
            // The tail's kernels, on every token's U and M at this pair.
            // Each entry's power of t from the node's powers, not a
            // running product (a chain of multiplications).
            let mut measure = wt;
            for j in 0..n {
                let row = &mut segment[j * width..(j + 1) * width];
                for (e, entry) in row.iter_mut().enumerate() {
                    let mut term = (j + 1) as f64 * series[j][e] * whole_u[n - 1 - j];
                    if j + 2 <= n {
                        term += series[j + 1][e] * t * whole_m[n - 2 - j];
                    }
                    *entry += measure * t_powers[e] * term;
                }
                measure *= t;
            }
            // Suffix polynomials from the last exact token back; leaving x
            // out needs two coefficients of prefix x suffix.
            let (u, m) = (u.as_mut(), m.as_mut());
            u.fill(0.0);
            m.fill(0.0);
            u[0] = 1.0;
            for x in (0..exact).rev() {
                let (pu, pm) = (pre_u[x].as_ref(), pre_m[x].as_ref());
                let last: f64 = (0..n).map(|i| pu[i] * u[n - 1 - i]).sum();
                let mut integrand = q(x) * s[x] * last;
                if n >= 2 {
                    let marked: f64 = (0..n - 1)
                        .map(|i| pm[i] * u[n - 2 - i] + pu[i] * m[n - 2 - i])
                        .sum();
                    integrand += arrived[x] * marked;
                }
                sums.head[x] += head_measure[x] * wt * integrand;
                let (s, b, marked) = factors(x);
                absorb(u, m, s, b, marked);
            }
        }
        segments.extend_from_slice(&segment);
        // From the segment of the least t up, each segment's kernels with
        // those of the segments after it: sums of terms of one sign.
        let size = n * width;
        for k in (size..segments.len()).step_by(size).rev() {
            let (before, after) = segments.split_at_mut(k);
            (before[k - size..].iter_mut().zip(&after[..size])).for_each(|(a, b)| *a += b);
        }
        // A head token in the series leaves it by its division: Σ_j (-z)^j
        // Σ_e q^(j+1+e) κ_(j,e) over its segments, as a tail token's
        // (`TailBuckets::marginal`).
        for (x, first) in first_segment.iter().enumerate() {
            let Some(first) = *first else { continue };
            let (q, z) = (head_q[x], z[x]);
            let (mut sign_power, mut integrand) = (1.0, 0.0);
            for (j, row) in segments[first..first + size].chunks(width).enumerate() {
                let mut power = q.powi(j as i32 + 1);
                let mut part = 0.0;
                for entry in row {
                    part += power * entry;
                    power *= q;
                }
                integrand += sign_power * part;
                sign_power *= -z;
            }
            sums.head[x] += head_measure[x] * integrand;
        }
        sums.kernel = segments[..size]
            .iter()
            .map(|k| kernel_measure * k)
            .collect();
        sums
    }
}

/// What an evaluation keeps for Newton's direction: its grid, the
/// Hessian's diagonal there, and for an evaluation on the fine grid r on
/// the coarse one at the same theta where it is known (`refine`), the
/// base of the direction's differences (on the coarse grid, that is the
/// evaluation's own r).
pub(crate) struct Curvature {
    grid: Grid,
    diagonal: Vec<f64>,
    coarse_marginal: Option<Vec<f64>>,
}

/// One node in c as its pairs of nodes see it.
struct NodeInC {
    /// The tail's moments there (`TailBuckets::moments_at`).
    moments: Vec<Series>,
    /// z = e^(-a c) of the exact selectable tokens.
    z: Vec<f64>,
    /// The factors of the exact tokens' integrands in t (r's measure a
    /// e^(-a c) dc at the node) and of the tail's kernels (dc).
    head_measure: Vec<f64>,
    kernel_measure: f64,
    /// The node's weight in ln c.
    weight: f64,
}

/// r, the potential and the Hessian's diagonal at one theta.
struct Integrals {
    marginal: Vec<f64>,
    potential: f64,
    diagonal: Vec<f64>,
}

/// One node in c's share of r and the potential: the exact tokens' terms
/// of r, the tail's kernels κ_(j, p) (row j, entry p - j - 1, with the
/// measure of the node), E[e^(-cS); world] and the node's weight in ln c.
struct NodeSums {
    weight: f64,
    head: Vec<f64>,
    kernel: Vec<f64>,
    transform: f64,
}

/// The selectable tail in buckets of theta: the other schemes' narrow
/// ones from `BUCKETED_FROM` tokens, else wide ones (`WIDE_BUCKET`).
enum Tail {
    Narrow(TailBuckets<ORDER>),
    Wide(TailBuckets<WIDE_ORDER>),
}

impl Tail {
    fn new(theta: &[f64], clocks: &Clocks, q: &[f64], n: usize) -> Self {
        if theta.len() >= BUCKETED_FROM {
            let tokens = Assignment::new(theta, &mut Workspace::new());
            Tail::Narrow(TailBuckets::new(tokens, clocks, q, n))
        } else {
            let tokens = Assignment::with_width(theta, WIDE_BUCKET, &mut Workspace::new());
            Tail::Wide(TailBuckets::new(tokens, clocks, q, n))
        }
    }

    fn moments_at(&self, c: f64, silent: &[f64], n: usize) -> Vec<Series> {
        match self {
            Tail::Narrow(tail) => tail.moments_at(c, silent, n),
            Tail::Wide(tail) => tail.moments_at(c, silent, n),
        }
    }

    fn marginal(
        &self,
        c: &[f64],
        kernels: &[&[f64]],
        clocks: &Clocks,
        q: &[f64],
        curvature: bool,
        only: Option<&[bool]>,
    ) -> Vec<(f64, f64)> {
        match self {
            Tail::Narrow(tail) => tail.marginal(c, kernels, clocks, q, curvature, only),
            Tail::Wide(tail) => tail.marginal(c, kernels, clocks, q, curvature, only),
        }
    }
}

/// The selectable tail by buckets of theta: per occupied bucket, its
/// centre a_b, the most extra series terms of its tokens and the moments
/// Σ q^m (-δ)^i / i! (m <= n + extra, i < O) of e^(-k a c) = e^(-x)
/// Σ_i x^i (-δ)^i / i!, x = k a_b c.
struct TailBuckets<const O: usize> {
    tokens: Assignment,
    /// Per row m <= n + EXTRA_TERMS and occupied bucket b (ascending
    /// a_b), the left part's sums over the buckets up to b (`left_sums`).
    left: Vec<Vec<LeftSeries>>,
    centre: Vec<f64>,
    extra: Vec<usize>,
    moments: Vec<Vec<[f64; O]>>,
    /// Per occupied bucket, the offset δ that its tokens at one theta
    /// share (its first token's).
    shared_offset: Vec<f64>,
    /// Per slot of the assignment, its position among the occupied.
    index: Vec<usize>,
}

impl<const O: usize> TailBuckets<O> {
    fn new(tokens: Assignment, clocks: &Clocks, q: &[f64], n: usize) -> Self {
        let buckets = &tokens;
        let occupied = buckets.occupied();
        let mut index = vec![usize::MAX; buckets.centre.len()];
        occupied.iter().enumerate().for_each(|(i, &s)| index[s] = i);
        let mut extra = vec![0; occupied.len()];
        for (x, &d) in clocks.extra.iter().enumerate() {
            let b = index[buckets.slot[x] as usize];
            extra[b] = extra[b].max(d);
        }
        // The tail tokens by bucket (a counting sort), so that each bucket's
        // moments are one task's: a pass over the tokens on one thread
        // would leave the pool's other worker idle long enough to fall
        // asleep, and the node sums that follow would wait for it to wake.
        let mut start = vec![0; occupied.len() + 1];
        for &slot in &buckets.slot {
            start[index[slot as usize] + 1] += 1;
        }
        for b in 0..occupied.len() {
            start[b + 1] += start[b];
        }
        let mut by_bucket = vec![0; clocks.tail.len()];
        let mut next = start.clone();
        for (x, &slot) in buckets.slot.iter().enumerate() {
            let b = index[slot as usize];
            by_bucket[next[b]] = x;
            next[b] += 1;
        }
        let reciprocals = reciprocals::<O>();
        let (moments, shared_offset): (Vec<Vec<[f64; O]>>, Vec<f64>) = (0..occupied.len())
            .into_par_iter()
            .map(|b| {
                let tokens = &by_bucket[start[b]..start[b + 1]];
                // The tokens at the first one's theta (in a program, those
                // held at a bound: most of a large tail) share its offset:
                // their powers of q are summed first, and multiply its
                // series once.
                let shared = buckets.delta[tokens[0]];
                let mut shared_sums = vec![0.0; n + extra[b] + 1];
                let mut moments = vec![[0.0; O]; n + extra[b] + 1];
                for &x in tokens {
                    let rows = n + clocks.extra[x] + 1;
                    let mut power = 1.0;
                    if buckets.delta[x] == shared {
                        for sum in &mut shared_sums[..rows] {
                            *sum += power;
                            power *= q[clocks.tail[x]];
                        }
                        continue;
                    }
                    let offsets = series_in_offset(buckets.delta[x], &reciprocals);
                    for row in &mut moments[..rows] {
                        row.iter_mut()
                            .zip(&offsets)
                            .for_each(|(m, o)| *m += power * o);
                        power *= q[clocks.tail[x]];
                    }
                }
                let offsets = series_in_offset(shared, &reciprocals);
                for (row, sum) in moments.iter_mut().zip(&shared_sums) {
                    row.iter_mut()
                        .zip(&offsets)
                        .for_each(|(m, o)| *m += sum * o);
                }
                (moments, shared)
            })
            .unzip();
        let centre: Vec<f64> = occupied.iter().map(|&s| buckets.centre[s]).collect();
        let left = left_sums(&centre, &moments, n);
        Self {
            tokens,
            left,
            centre,
            extra,
            moments,
            shared_offset,
            index,
        }
    }

    /// The tail's moments at node c: `[k][e]` = Σ q^(k+e) z^k (k <= n),
    /// the silent tail's (z = 1) included.
    fn moments_at(&self, c: f64, silent: &[f64], n: usize) -> Vec<Series> {
        let mut table: Vec<Series> = (0..=n)
            .map(|k| std::array::from_fn(|e| silent[k + e]))
            .collect();
        // Per row k, the buckets before `first[k]` (k a_b c <= LEFT_REACH)
        // join through the left part's sums at the last of them.
        let mut first = vec![0; n + 1];
        for (k, row) in table.iter_mut().enumerate().skip(1) {
            let reach = LEFT_REACH / (k as f64 * c);
            first[k] = self.centre.partition_point(|&a| a <= reach);
            let Some(last) = first[k].checked_sub(1) else {
                continue;
            };
            let x = k as f64 * c * self.centre[last];
            let mut powers = [0.0; LEFT_TERMS];
            let mut power = 1.0;
            for (p, entry) in powers.iter_mut().enumerate() {
                *entry = power;
                power *= -x / (p + 1) as f64;
            }
            for (e, entry) in row.iter_mut().enumerate() {
                *entry += (self.left[k + e][last].iter().zip(&powers))
                    .map(|(m, p)| m * p)
                    .sum::<f64>();
            }
        }
        for (b, moments) in self.moments.iter().enumerate() {
            // e^(-k a_b c) as the k-th power of e^(-a_b c): one exponential
            // a bucket, not one a row.
            let decay = (-self.centre[b] * c).exp();
            let mut decay_k = 1.0;
            for (k, row) in table.iter_mut().enumerate().skip(1) {
                let x = k as f64 * self.centre[b] * c;
                if x > NEGLIGIBLE {
                    break;
                }
                decay_k *= decay;
                if b < first[k] {
                    continue;
                }
                // e^(-x) x^i once, for the row's polynomials in x: as
                // dot products they are independent of each other, where
                // Horner's rule would chain each one's multiplications.
                let mut powers = [0.0; O];
                let mut power = decay_k;
                for entry in &mut powers {
                    *entry = power;
                    power *= x;
                }
                for (e, entry) in row.iter_mut().enumerate() {
                    let Some(m) = moments.get(k + e) else { break };
                    *entry += m.iter().zip(&powers).map(|(m, p)| m * p).sum::<f64>();
                }
            }
        }
        table
    }

    /// r of the tail tokens, a_y Σ_j (-1)^j Σ_e q_y^(j+1+e) Σ_k
    /// κ_(j,e)(c_k) e^(-(j+1) a_y c_k) (the node sums per bucket, a
    /// polynomial in δ per token; in a bucket of few offsets, the node
    /// sums at each offset), and when `curvature` the Hessian's
    /// diagonal: r_y - a_y² ∫ c e^(-a_y c) (...) dc, the same sums with
    /// the kernels times c (the integrand's factor without y does not
    /// depend on theta_y).
    fn marginal(
        &self,
        c: &[f64],
        kernels: &[&[f64]],
        clocks: &Clocks,
        q: &[f64],
        curvature: bool,
        only: Option<&[bool]>,
    ) -> Vec<(f64, f64)> {
        let width = EXTRA_TERMS + 1;
        let n = kernels.first().map_or(0, |k| k.len() / width);
        let sets = 1 + curvature as usize;
        let wanted = |y: usize| only.is_none_or(|only| only[y]);
        // Per bucket, how many of its wanted tokens have an offset of
        // their own, and whether one has its shared offset.
        let mut own = vec![0usize; self.centre.len()];
        let mut shares = vec![false; self.centre.len()];
        for (x, &y) in clocks.tail.iter().enumerate() {
            if wanted(y) {
                let b = self.index[self.tokens.slot[x] as usize];
                if self.tokens.delta[x] == self.shared_offset[b] {
                    shares[b] = true;
                } else {
                    own[b] += 1;
                }
            }
        }
        let occupied: Vec<bool> = (own.iter().zip(&shares))
            .map(|(&own, &shares)| own > 0 || shares)
            .collect();
        // A bucket's table costs O times the sums at one offset over the
        // nodes (`sums_at_weight`), and each offset's sums from it O per
        // row more: a bucket of at most O / 2 offsets takes the sums at
        // each of them instead (figures in benches/README.md, "The
        // schemes grid").
        let direct: Vec<bool> = (own.iter().zip(&shares))
            .map(|(&own, &shares)| own + shares as usize <= O / 2)
            .collect();
        // Per bucket, [set][j][e][i]: Σ_k κ_(j,e)(c_k) c_k^set e^(-x) x^i
        // (-1)^i / i!, x = (j + 1) a_b c_k.
        let tables: Vec<Vec<[f64; O]>> = (0..self.centre.len())
            .into_par_iter()
            .map(|b| {
                if !occupied[b] || direct[b] {
                    return Vec::new();
                }
                let mut table = vec![[0.0; O]; sets * n * width];
                // e^(-a_b c_k) per node, whose (j + 1)-th powers every row
                // takes: one exponential a node, not one a row.
                let decays: Vec<f64> = (c.iter())
                    .map(|&ck| self.centre[b] * ck)
                    .take_while(|&x| x <= NEGLIGIBLE)
                    .map(|x| (-x).exp())
                    .collect();
                for (set, j) in (0..sets).flat_map(|set| (0..n).map(move |j| (set, j))) {
                    let rows = (set * n + j) * width..(set * n + j + 1) * width;
                    let scale = (j + 1) as f64 * self.centre[b];
                    for ((kernel, &ck), &decay) in kernels.iter().zip(c).zip(&decays) {
                        let x = scale * ck;
                        if x > NEGLIGIBLE {
                            break;
                        }
                        let mut powers = [0.0; O];
                        let mut p = (0..=j).fold(1.0, |e, _| e * decay);
                        for entry in powers.iter_mut() {
                            *entry = p;
                            p *= x;
                        }
                        let moment = if set == 1 { ck } else { 1.0 };
                        for e in 0..=self.extra[b] {
                            let weight = moment * kernel[j * width + e];
                            let row = &mut table[rows.start + e];
                            row.iter_mut()
                                .zip(&powers)
                                .for_each(|(r, p)| *r += weight * p);
                        }
                    }
                    for row in &mut table[rows] {
                        let mut factor = 1.0;
                        for (i, entry) in row.iter_mut().enumerate() {
                            if i > 0 {
                                factor *= -1.0 / i as f64;
                            }
                            *entry *= factor;
                        }
                    }
                }
                table
            })
            .collect();
        // Per bucket, the rows' polynomials at its shared offset
        // (`shared_offset`), [set][j][e]: a token there takes them as they
        // are, a product per row, where its own offset costs the bucket's
        // order per row.
        let at_shared: Vec<Vec<f64>> = (0..self.centre.len())
            .into_par_iter()
            .map(|b| {
                if !shares[b] {
                    return Vec::new();
                }
                if direct[b] {
                    let a = self.centre[b] * (1.0 + self.shared_offset[b]);
                    return sums_at_weight(a, c, kernels, n, self.extra[b], sets);
                }
                let powers = powers_of_offset::<O>(self.shared_offset[b]);
                (tables[b].iter())
                    .map(|row| row.iter().zip(&powers).map(|(r, d)| r * d).sum())
                    .collect()
            })
            .collect();
        (clocks.tail.par_iter().enumerate())
            .map(|(x, &y)| {
                if !wanted(y) {
                    return (0.0, 0.0);
                }
                let b = self.index[self.tokens.slot[x] as usize];
                let delta = self.tokens.delta[x];
                let shared = delta == self.shared_offset[b];
                let delta_powers = powers_of_offset::<O>(delta);
                let own_sums = (direct[b] && !shared).then(|| {
                    sums_at_weight(self.tokens.weight(x), c, kernels, n, clocks.extra[x], sets)
                });
                let at_offset = if shared {
                    Some(&at_shared[b])
                } else {
                    own_sums.as_ref()
                };
                // Per (set, j), the rows' polynomials in δ summed with
                // their powers of q first (O sums side by side), then one
                // polynomial: a row's own by Horner's rule would chain
                // each multiplication on the last.
                let sum = |set: usize| {
                    let mut sum = 0.0;
                    for j in 0..n {
                        let mut power = q[y].powi(j as i32 + 1);
                        let first = (set * n + j) * width;
                        let part = if let Some(at_offset) = at_offset {
                            let mut part = 0.0;
                            for value in &at_offset[first..=first + clocks.extra[x]] {
                                part += power * value;
                                power *= q[y];
                            }
                            part
                        } else {
                            let mut combined = [0.0; O];
                            for row in &tables[b][first..=first + clocks.extra[x]] {
                                (combined.iter_mut().zip(row)).for_each(|(c, r)| *c += power * r);
                                power *= q[y];
                            }
                            (combined.iter().zip(&delta_powers))
                                .map(|(c, d)| c * d)
                                .sum()
                        };
                        sum += if j % 2 == 0 { part } else { -part };
                    }
                    sum
                };
                let a = self.tokens.weight(x);
                let r = a * sum(0);
                (r, if curvature { r - a * a * sum(1) } else { 0.0 })
            })
            .collect()
    }
}

/// The left part's sums (`LEFT_REACH`) per row m <= n + EXTRA_TERMS and
/// bucket b, ascending in a_b: Σ_(b' <= b) (a_b' / a_b)^p S_b'(m, p),
/// S_b(m, p) = Σ_(y in b) q^m (1 + δ_y)^p = Σ_i (-1)^i p! / (p - i)!
/// moments_b(m, i) from the bucket's moments Σ q^m (-δ)^i / i!; the terms
/// i >= O that those leave out are below (p |δ|)^O / O! of S_b, times at
/// most 0.54^p / p! in the series. The rows are independent (each a
/// running sum over the buckets), so they go in parallel: run on the
/// calling thread, this pass would leave the pool's other worker idle
/// long enough to fall asleep, and the node sums that follow would wait
/// for it to wake.
fn left_sums<const O: usize>(
    centre: &[f64],
    moments: &[Vec<[f64; O]>],
    n: usize,
) -> Vec<Vec<LeftSeries>> {
    // Column i: (-1)^i p! / (p - i)! for each p (zero below i).
    let coefficients: Vec<LeftSeries> = (0..O)
        .map(|i| {
            std::array::from_fn(|p| {
                let falling: f64 = (p + 1 - i.min(p + 1)..=p).map(|f| f as f64).product();
                if i > p {
                    0.0
                } else if i % 2 == 0 {
                    falling
                } else {
                    -falling
                }
            })
        })
        .collect();
    // (a_(b-1) / a_b)^p, which carries the sums from one bucket to the next.
    let scales: Vec<LeftSeries> = (centre.windows(2))
        .map(|pair| {
            let ratio = pair[0] / pair[1];
            let mut scale = [1.0; LEFT_TERMS];
            for p in 1..LEFT_TERMS {
                scale[p] = scale[p - 1] * ratio;
            }
            scale
        })
        .collect();
    (0..n + EXTRA_TERMS + 1)
        .into_par_iter()
        .map(|m| {
            let mut sums: Vec<LeftSeries> = Vec::with_capacity(centre.len());
            for (b, bucket) in moments.iter().enumerate() {
                let mut sum = match b.checked_sub(1) {
                    Some(before) => std::array::from_fn(|p| scales[before][p] * sums[before][p]),
                    None => [0.0; LEFT_TERMS],
                };
                if let Some(row) = bucket.get(m) {
                    for (moment, column) in row.iter().zip(&coefficients) {
                        (sum.iter_mut().zip(column)).for_each(|(s, c)| *s += c * moment);
                    }
                }
                sums.push(sum);
            }
            sums
        })
        .collect()
}

/// (-δ)^i / i! for i < O, from `reciprocals` (`reciprocals::<O>`): a
/// product per term, where a division per term would cost a token's
/// moments as much as all their products.
fn series_in_offset<const O: usize>(delta: f64, reciprocals: &[f64; O]) -> [f64; O] {
    let mut terms = [1.0; O];
    for i in 1..O {
        terms[i] = terms[i - 1] * -delta * reciprocals[i];
    }
    terms
}

/// Σ_k κ_(j,e)(c_k) c_k^set e^(-(j + 1) a c_k) for one weight a, as
/// [set][j][e] (e up to `extra`): the sums that a bucket's table gives
/// at one offset, from the nodes themselves, for a bucket of few offsets.
fn sums_at_weight(
    a: f64,
    c: &[f64],
    kernels: &[&[f64]],
    n: usize,
    extra: usize,
    sets: usize,
) -> Vec<f64> {
    let width = EXTRA_TERMS + 1;
    let mut sums = vec![0.0; sets * n * width];
    for (kernel, &ck) in kernels.iter().zip(c) {
        let x = a * ck;
        if x > NEGLIGIBLE {
            break;
        }
        let decay = (-x).exp();
        let mut weight = 1.0;
        for j in 0..n {
            weight *= decay;
            for set in 0..sets {
                let w = if set == 1 { weight * ck } else { weight };
                let row = &mut sums[(set * n + j) * width..][..=extra];
                (row.iter_mut().zip(&kernel[j * width..])).for_each(|(s, k)| *s += w * k);
            }
        }
    }
    sums
}

/// δ^i for i < O.
fn powers_of_offset<const O: usize>(delta: f64) -> [f64; O] {
    let mut powers = [1.0; O];
    for i in 1..O {
        powers[i] = powers[i - 1] * delta;
    }
    powers
}

/// 1 / i for 0 < i < O (entry 0 unused).
fn reciprocals<const O: usize>() -> [f64; O] {
    std::array::from_fn(|i| if i == 0 { 1.0 } else { 1.0 / i as f64 })
}

impl Potential for WithoutReplacement<'_> {
    type Hessian = Curvature;

    fn evaluate(&self, theta: &[f64], _workspace: &mut Workspace) -> Evaluation<Self::Hessian> {
        self.evaluate_on(theta, Grid::Fine)
    }

    /// The coarse grid (`ROUGH_UNTIL`): far from the optimum it guides
    /// Newton as well as the fine one, and each of its evaluations is also
    /// the base of the next direction's differences.
    fn rough_until(&self) -> Option<f64> {
        Some(ROUGH_UNTIL)
    }

    fn evaluate_rough(
        &self,
        theta: &[f64],
        _workspace: &mut Workspace,
    ) -> Evaluation<Self::Hessian> {
        self.evaluate_on(theta, Grid::Coarse)
    }

    /// The fine evaluation keeps the coarse one's r: the next direction's
    /// differences start from it.
    fn refine(
        &self,
        theta: &[f64],
        rough: Evaluation<Self::Hessian>,
        _workspace: &mut Workspace,
    ) -> Evaluation<Self::Hessian> {
        let mut exact = self.evaluate_on(theta, Grid::Fine);
        if rough.hessian.grid == Grid::Coarse {
            exact.hessian.coarse_marginal = Some(rough.marginal);
        }
        exact
    }

    /// Newton's direction by conjugate gradients on one-sided differences
    /// of r along each search direction (on the coarse grid from theta's
    /// nodes, so that both ends of a difference share them, from `at`'s r
    /// where `at` is on that grid), preconditioned by the Hessian's
    /// diagonal at theta.
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Self::Hessian>,
        gradient: &[f64],
        held: &[bool],
        enough: f64,
        _workspace: &mut Workspace,
    ) -> Vec<f64> {
        // r on the free tokens alone: conjugate gradients read the
        // products there.
        let free: Vec<bool> = held.iter().map(|&held| !held).collect();
        let r = |point: &[f64]| {
            (self.integrals(point, theta, Grid::Coarse, false, Some(&free))).marginal
        };
        let computed;
        let base = match (at.hessian.grid, &at.hessian.coarse_marginal) {
            (Grid::Coarse, _) => &at.marginal,
            (Grid::Fine, Some(kept)) => kept,
            (Grid::Fine, None) => {
                computed = r(theta);
                &computed
            }
        };
        let product = |v: &[f64]| {
            let size = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if size == 0.0 {
                return vec![0.0; v.len()];
            }
            let h = DIFFERENCE / size;
            let point: Vec<f64> = theta.iter().zip(v).map(|(t, v)| t + h * v).collect();
            let moved = r(&point);
            moved.iter().zip(base).map(|(a, b)| (a - b) / h).collect()
        };
        newton_by_conjugate_gradients(
            product,
            &at.hessian.diagonal,
            &at.marginal,
            gradient,
            held,
            enough,
        )
    }

    fn flat_along_ones(&self) -> bool {
        true
    }

    fn saturation(&self) -> Option<impl Fn(usize) -> f64 + '_> {
        let inclusion = self.inclusion();
        Some(move |y: usize| inclusion[y])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
