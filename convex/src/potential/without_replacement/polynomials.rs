//! The polynomials in λ of the clocks' generating functions: one token's
//! factors absorbed into `(U, M)`, and the tail's series in q t
//! (`docs/DESIGN.md` §6b, "The clock's tail").

use std::sync::LazyLock;

/// Terms of a tail token's series in q t beyond the leading one: (e^x -
/// 1)^k = x^k g(x)^k with g's coefficients below e^x's, so cutting after
/// d terms leaves at most (k x)^(d+1) e^(k x) / (d+1)! of it, below
/// `SERIES_TOLERANCE` for k x <= n q t <= 1 and d = EXTRA_TERMS.
pub(super) const EXTRA_TERMS: usize = 18;
pub(super) const SERIES_TOLERANCE: f64 = 1e-16;
/// Series coefficients of one power of ε: index e for x^(k + e).
pub(super) type Series = [f64; EXTRA_TERMS + 1];
/// Expected arrivals, past 2n, beyond which a node in t is negligible
/// (`head_cap`).
pub(super) const SURE_ARRIVALS: f64 = 900.0;

/// Coefficient k of `(U, M)` times one token's factors, U (s + λ b) and
/// M (s + λ b) + U m, from coefficients k (`now`) and k - 1 (`below`).
#[inline]
pub(super) fn absorbed(
    now: (f64, f64),
    below: (f64, f64),
    s: f64,
    b: f64,
    marked: f64,
) -> (f64, f64) {
    (
        now.0 * s + below.0 * b,
        now.1 * s + below.1 * b + now.0 * marked,
    )
}

/// `(U, M)` times one token's factors, in place.
#[inline]
pub(super) fn absorb(u: &mut [f64], m: &mut [f64], s: f64, b: f64, marked: f64) {
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
pub(super) fn absorb_into(
    from: (&[f64], &[f64]),
    to: (&mut [f64], &mut [f64]),
    s: f64,
    b: f64,
    marked: f64,
) {
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
pub(super) trait Coefficients: AsRef<[f64]> + AsMut<[f64]> + Clone {
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
pub(super) fn clock(q: f64, t: f64) -> (f64, f64) {
    ((-q * t).exp(), -(-q * t).exp_m1())
}

/// `(U, M)` of two disjoint sets of tokens: (U_1 U_2, M_1 U_2 + U_1 M_2),
/// to the degree of `u`.
#[inline]
pub(super) fn multiply(
    first: (&[f64], &[f64]),
    second: (&[f64], &[f64]),
    u: &mut [f64],
    m: &mut [f64],
) {
    for k in 0..u.len() {
        u[k] = (0..=k).map(|i| first.0[i] * second.0[k - i]).sum();
        m[k] = (0..=k)
            .map(|i| first.1[i] * second.0[k - i] + first.0[i] * second.1[k - i])
            .sum();
    }
}

/// Per power k <= n of ε = e^x - 1, the coefficients of x^(k + e) in ε^k.
pub(super) fn clock_series(n: usize) -> Vec<Series> {
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
pub(super) fn arrivals_below(arrivals: f64, n: usize) -> f64 {
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
pub(super) const CLOCK_TAIL_MARGIN: f64 = 1e-3;

/// A node in t where more clocks than this have n q t > 1 is left out:
/// each has rung by then with probability at least 1 - e^(-1/n), so at
/// least μ = 2n + SURE_ARRIVALS arrivals are expected before it, and n - 1
/// or fewer happen with probability below e^(-μ/8) < e^-112 (Chernoff's
/// lower tail, (n - 1) <= μ/2): under the fine rule's negligible share
/// (`Grid::clock_negligible`, 1e-18) of any world more likely than 1e-31.
pub(super) fn head_cap(n: usize) -> usize {
    let arrivals = 2.0 * n as f64 + SURE_ARRIVALS;
    (arrivals / -(-1.0 / n as f64).exp_m1()).ceil() as usize
}

/// The terms beyond the leading one that a tail token's series needs,
/// `x` = n q t_max <= 1 (see `EXTRA_TERMS`): how many of the least x at
/// which `extra_terms_by_bound` gives one more term it reaches, which
/// gives the same count (each term's bound grows with x) without an
/// exponential and a loop per token.
#[inline]
pub(super) fn extra_terms(x: f64) -> usize {
    (EXTRA_TERMS_FROM.iter()).filter(|&&from| x >= from).count()
}

/// Per d < EXTRA_TERMS, the least float x >= 0 at which
/// `extra_terms_by_bound(x)` exceeds d: by bisection on the bit patterns,
/// which increase with non-negative floats.
pub(super) static EXTRA_TERMS_FROM: LazyLock<[f64; EXTRA_TERMS]> = LazyLock::new(|| {
    std::array::from_fn(|d| {
        // extra_terms_by_bound(lo) <= d < extra_terms_by_bound(hi): at 0
        // no term, at the largest float every one.
        let (mut lo, mut hi) = (0.0f64.to_bits(), f64::MAX.to_bits());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match extra_terms_by_bound(f64::from_bits(mid)) > d {
                true => hi = mid,
                false => lo = mid,
            }
        }
        f64::from_bits(hi)
    })
});

/// The terms beyond the leading one until the next one's bound, x e^x
/// x^d / (d + 1)!, is within `SERIES_TOLERANCE`, at most `EXTRA_TERMS`.
pub(super) fn extra_terms_by_bound(x: f64) -> usize {
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
pub(super) fn tail_sums(
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
pub(super) fn powers_of(t: f64) -> Series {
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
pub(super) fn tail_sum_by_logarithms(series: &Series, t: f64, k: usize, moments: &Series) -> f64 {
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
pub(super) fn tail_polynomials(
    power: &[f64],
    marked: &[f64],
    survival: f64,
    u: &mut [f64],
    m: &mut [f64],
) {
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

/// Adds Σ_x q_x^m to `sums[m]` (m < sums.len()) over the tokens of `q`,
/// four at a time: one token's powers are a chain of multiplications,
/// each waiting on the last, and four chains side by side keep the
/// multiplier busy (summed in another order than token by token, which
/// moves the sums by their rounding alone).
pub(super) fn add_power_sums(sums: &mut [f64], q: impl IntoIterator<Item = f64>) {
    let mut q = q.into_iter();
    while let Some(first) = q.next() {
        let four = [Some(first), q.next(), q.next(), q.next()];
        let rates = four.map(|q| q.unwrap_or(0.0));
        // A missing token adds nothing: its powers start at 0.
        let mut powers = four.map(|q| f64::from(u8::from(q.is_some())));
        for sum in sums.iter_mut() {
            *sum += (powers[0] + powers[1]) + (powers[2] + powers[3]);
            (powers.iter_mut().zip(&rates)).for_each(|(power, q)| *power *= q);
        }
    }
}
