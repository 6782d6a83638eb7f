//! Drafts without replacement: P(all n drafts in H) exactly by enumeration
//! at small V, by exponential clocks and quadrature at large V (`docs/DESIGN.md` §3).

use mdsd_core::{CoreError, DraftLaw, DraftScheme};

use crate::iid::iid_objective;
use crate::objective;
use crate::order::{drafted_ratio_order, masses_after, split_mass};

/// Largest number of ordered draft tuples summed exactly; above it the
/// exponential-clock quadrature is used.
pub const WOR_EXACT_TUPLE_LIMIT: usize = 200_000;

/// Step of the rule `h Σ f(s_j)` in s = ln t. The integrands are analytic
/// in a strip around the real s axis, so the discretisation error falls as
/// exp(-2π d / STEP); on the real rows of `data/` it is below 1e-14 in
/// alpha* at this step against a step of 0.1 (and 1e-12 at 0.3), far inside
/// the 1e-9 promised.
const STEP: f64 = 0.25;
/// Bound on what the quadrature leaves out below its first node: there
/// P(N_H(t) >= n) <= (q(H) t)^n / n!, so the all-in integral over [0, T] is
/// below T^(n+1) / (n+1)!, and the head of the complement integral,
/// ∫_0^T q_c e^(-q_c t) dt, is added in closed form.
const HEAD_ERROR: f64 = 1e-14;
/// The rule reaches t = HORIZON / q_c, past which the density e^(-q_c t)
/// is below e^(-60).
const HORIZON: f64 = 60.0;
/// A node whose P(N_H(t) < n) is below this is saturated: adding tokens
/// only moves probability up, so it stays below, and the node is left out
/// of further updates with P(N_H(t) >= n) = 1 (an error under 1e-20 in
/// each integral, whose densities sum to at most about 1).
const SATURATED: f64 = 1e-20;

/// The first node T of the rule for n drafts: the largest t with
/// t^(n+1) / (n+1)! <= HEAD_ERROR, so that fewer drafts need fewer nodes.
fn head(n: usize) -> f64 {
    let factorial: f64 = (1..=n + 1).map(|k| k as f64).product();
    (HEAD_ERROR * factorial).powf(1.0 / (n + 1) as f64).min(1.0)
}

/// `(P(all drafts in H), P(not all in H))` for every prefix H = order[..k],
/// k = 0..=V, from the exact tuple law: each tuple counts for the prefixes
/// that contain its highest-ranked token.
fn exact_prefix_masses(law: &DraftLaw, order: &[usize]) -> Vec<(f64, f64)> {
    let mut rank = vec![0; order.iter().max().map_or(0, |&t| t + 1)];
    for (k, &t) in order.iter().enumerate() {
        rank[t] = k;
    }
    let mut by_last = vec![0.0; order.len()];
    for (tuple, prob) in law.iter() {
        let last = tuple.iter().map(|&t| rank[t]).max().unwrap_or(0);
        by_last[last] += prob;
    }
    let mut masses = vec![(0.0, 0.0); order.len() + 1];
    for k in (0..order.len()).rev() {
        masses[k].1 = masses[k + 1].1 + by_last[k];
    }
    for k in 1..=order.len() {
        masses[k].0 = masses[k - 1].0 + by_last[k - 1];
    }
    masses
}

/// The rule's nodes t_m = t_0 e^(-m h), m = 1, 2, ..., below the first,
/// summed for the complement integrand with P(N_H(t) < n) = 1:
///   Σ_m h t_m q_c e^(-q_c t_m) = q_c h Σ_k (-q_c)^k / k! · t_0^(k+1) r^(k+1) / (1 - r^(k+1)),
/// r = e^(-h), by expanding the exponential (q_c t_0 <= 1 by [`head`], so
/// the terms fall as 1/k! and twenty reach rounding). Cutting the rule at t_0 instead would leave an end
/// error of order h² times the integrand there, q_c t_0.
fn head_of_complement(q_out: f64, t0: f64) -> f64 {
    let r = (-STEP).exp();
    let (mut sum, mut coefficient, mut r_power) = (0.0, q_out * STEP * t0, r);
    for k in 0..32 {
        let term = coefficient * r_power / (1.0 - r_power);
        sum += term;
        if term.abs() <= f64::EPSILON * 1e-3 * sum {
            break;
        }
        coefficient *= -q_out * t0 / (k + 1) as f64;
        r_power *= r;
    }
    sum
}

/// Below SERIES_LIMIT the arrival probability 1 - e^(-x), x = q t, is
/// summed as its series: unlike libm's `exp`, the loop vectorises, and most
/// pairs of a token and a live node at full vocabulary are this small, most
/// of them below SHORT_SERIES_LIMIT. Each series stops where its remainder,
/// x^(K+1) / (K+1)!, is below 1e-20 at its limit.
const SERIES_LIMIT: f64 = 0.05;
const SERIES_TERMS: usize = 10;
const SHORT_SERIES_LIMIT: f64 = 1e-4;
const SHORT_SERIES_TERMS: usize = 4;

/// The Taylor coefficients of 1 - e^(-x) from x^1 to x^K: (-1)^(k+1) / k!.
const fn arrival_coefficients<const K: usize>() -> [f64; K] {
    let mut coefficients = [0.0; K];
    let mut term = 1.0;
    let mut k = 0;
    while k < K {
        coefficients[k] = term;
        term = -term / (k + 2) as f64;
        k += 1;
    }
    coefficients
}

/// 1 - e^(-x) to the term x^K, by Horner's rule.
fn arrival_series<const K: usize>(x: f64) -> f64 {
    let coefficients: [f64; K] = const { arrival_coefficients::<K>() };
    x * coefficients.iter().rev().fold(0.0, |sum, &c| c + x * sum)
}

/// `out[j] = 1 - e^(-rate t_j)`, the probability that a clock of this rate
/// has rung by t_j, for ascending times: each range of x = rate t by the
/// cheapest form accurate there.
fn arrivals(rate: f64, times: &[f64], out: &mut [f64]) {
    let shortest = times.partition_point(|&t| rate * t <= SHORT_SERIES_LIMIT);
    let short = times.partition_point(|&t| rate * t <= SERIES_LIMIT);
    let (head, rest) = out.split_at_mut(shortest);
    let (middle, tail) = rest.split_at_mut(short - shortest);
    for (a, &t) in head.iter_mut().zip(&times[..shortest]) {
        *a = arrival_series::<SHORT_SERIES_TERMS>(rate * t);
    }
    for (a, &t) in middle.iter_mut().zip(&times[shortest..short]) {
        *a = arrival_series::<SERIES_TERMS>(rate * t);
    }
    for (a, &t) in tail.iter_mut().zip(&times[short..]) {
        *a = -(-rate * t).exp_m1();
    }
}

/// P(all drafts in H) by exponential clocks: give token i an arrival time
/// E_i ~ Exp(q_i); arrival order is the without-replacement draw order. With
/// q_c = q(outside H), the first outside arrival has density q_c e^(-q_c t)
/// and all n drafts are in H iff n tokens of H arrived before it:
///   Q_wo(H) = ∫ q_c e^(-q_c t) P(N_H(t) >= n) dt,
/// N_H(t) Poisson-binomial with success probabilities 1 - e^(-q_i t),
/// counted by a DP capped at n at every quadrature node. Tokens are added
/// one at a time, so a scan over prefixes reuses the DP. P(N_H(t) < n)
/// falls as t grows, so the saturated nodes are a suffix of the rule and
/// only the nodes before it are updated.
pub(crate) struct ExponentialClocks {
    n: usize,
    times: Vec<f64>,
    weights: Vec<f64>,
    /// Count-major, so that the update runs along nodes:
    /// `counts[c * nodes + j]` = P(N_H(t_j) = c) for c < n, and
    /// P(N_H(t_j) >= n) for c = n.
    counts: Vec<f64>,
    /// Scratch per node: the arrival probability of the token being added,
    /// or P(N < n) while the masses are summed.
    arrive: Vec<f64>,
    /// e^(-survival_rate t_j), the probability that the first outside
    /// clock has not rung by t_j, on the live nodes; `scalings` counts the
    /// updates since it was last computed afresh.
    survival: Vec<f64>,
    survival_rate: f64,
    scalings: usize,
    /// Nodes from here on are saturated.
    live: usize,
    tokens_in: usize,
}

impl ExponentialClocks {
    /// An empty H; `q_out_min` is the least positive outside mass that
    /// [`Self::masses`] will be asked about (it sets the quadrature range).
    pub(crate) fn new(n: usize, q_out_min: f64) -> Self {
        let s_lo = head(n).ln();
        // For an outside mass near the subnormals HORIZON / q_out_min
        // overflows: its logarithm by difference is finite.
        let reach = HORIZON / q_out_min;
        let s_hi = if reach.is_finite() {
            reach.ln()
        } else {
            HORIZON.ln() - q_out_min.ln()
        }
        .max(s_lo);
        let nodes = ((s_hi - s_lo) / STEP).ceil() as usize + 1;
        let times: Vec<f64> = (0..nodes).map(|j| (s_lo + j as f64 * STEP).exp()).collect();
        let weights = times.iter().map(|t| STEP * t).collect();
        let mut counts = vec![0.0; nodes * (n + 1)];
        counts[..nodes].fill(1.0);
        Self {
            n,
            times,
            weights,
            counts,
            arrive: vec![0.0; nodes],
            survival: vec![1.0; nodes],
            survival_rate: 0.0,
            scalings: 0,
            live: nodes,
            tokens_in: 0,
        }
    }

    /// Adds a token of draft probability `q` to H.
    pub(crate) fn add_token(&mut self, q: f64) {
        if q <= 0.0 {
            return;
        }
        self.tokens_in += 1;
        let (n, nodes, live) = (self.n, self.times.len(), self.live);
        let arrive = &mut self.arrive[..live];
        arrivals(q, &self.times[..live], arrive);
        // Count c takes its own mass that stays and count c - 1's that
        // arrives; from the top count down, so each reads the old c - 1.
        for c in (1..=n).rev() {
            let (below, from_c) = self.counts.split_at_mut(c * nodes);
            let lower = &below[(c - 1) * nodes..(c - 1) * nodes + live];
            let upper = &mut from_c[..live];
            if c == n {
                for ((u, &l), &a) in upper.iter_mut().zip(lower).zip(arrive.iter()) {
                    *u += l * a;
                }
            } else {
                for ((u, &l), &a) in upper.iter_mut().zip(lower).zip(arrive.iter()) {
                    *u += (l - *u) * a;
                }
            }
        }
        for (u, &a) in self.counts[..live].iter_mut().zip(arrive.iter()) {
            *u -= *u * a;
        }
        while self.live > 0 {
            let j = self.live - 1;
            if (0..n).map(|c| self.counts[c * nodes + j]).sum::<f64>() > SATURATED {
                break;
            }
            (0..n).for_each(|c| self.counts[c * nodes + j] = 0.0);
            self.counts[n * nodes + j] = 1.0;
            self.live -= 1;
        }
    }

    /// Sets `survival[j] = e^(-q_out t_j)` on the live nodes. Successive
    /// prefixes differ by a few tokens, so the outside mass moves little:
    /// while every x = (q_out - survival_rate) t_j is within the series'
    /// range the old values are scaled by e^(-x) from the series, and only
    /// every REFRESH_AFTER scalings (a relative drift of about 1e-14) or
    /// after a larger move are they computed afresh, exponentials and all.
    fn update_survival(&mut self, q_out: f64) {
        const REFRESH_AFTER: usize = 64;
        let live = self.live;
        let times = &self.times[..live];
        let delta = q_out - self.survival_rate;
        let t_max = times.last().copied().unwrap_or(0.0);
        let reach = delta.abs() * t_max;
        if self.scalings < REFRESH_AFTER && reach <= SERIES_LIMIT {
            let survival = self.survival[..live].iter_mut().zip(times);
            if reach <= SHORT_SERIES_LIMIT {
                survival.for_each(|(s, &t)| {
                    *s -= *s * arrival_series::<SHORT_SERIES_TERMS>(delta * t);
                });
            } else {
                survival.for_each(|(s, &t)| *s -= *s * arrival_series::<SERIES_TERMS>(delta * t));
            }
            self.scalings += 1;
        } else {
            arrivals(q_out, times, &mut self.survival[..live]);
            self.survival[..live].iter_mut().for_each(|s| *s = 1.0 - *s);
            self.scalings = 0;
        }
        self.survival_rate = q_out;
    }

    /// `(P(all drafts in H), P(not all in H))` given the outside mass `q_out`.
    /// The nodes below the first, where P(N < n) = 1 to within HEAD_ERROR,
    /// are summed in closed form ([`head_of_complement`]). The saturated
    /// nodes add their whole density to P(all in H); the rule's densities
    /// over every node sum to 1 (the trapezoid rule in s = ln t on
    /// q e^(s - q e^s), whose error is below e^(-π²/h) ≈ 1e-21), so their
    /// sum is what the head and the live nodes leave of 1, and no
    /// exponential is spent on them.
    pub(crate) fn masses(&mut self, q_out: f64) -> (f64, f64) {
        if q_out <= 0.0 {
            return if self.tokens_in >= self.n {
                (1.0, 0.0)
            } else {
                (0.0, 1.0)
            };
        }
        let (n, nodes, live) = (self.n, self.times.len(), self.live);
        self.update_survival(q_out);
        let head = head_of_complement(q_out, self.times[0]);
        let (mut all_in, mut not_all_in, mut live_density) = (0.0, head, 0.0);
        // P(N < n) per node, summed count by count along the nodes.
        let below = &mut self.arrive[..live];
        below.copy_from_slice(&self.counts[..live]);
        for c in 1..n {
            let count = &self.counts[c * nodes..c * nodes + live];
            below.iter_mut().zip(count).for_each(|(b, &x)| *b += x);
        }
        let at_least = &self.counts[n * nodes..n * nodes + live];
        for (((&w, &survival), &below), &at_least) in self
            .weights
            .iter()
            .zip(&self.survival[..live])
            .zip(below.iter())
            .zip(at_least)
        {
            let density = w * q_out * survival;
            live_density += density;
            all_in += density * at_least;
            not_all_in += density * below;
        }
        if self.live < nodes {
            all_in += 1.0 - head - live_density;
        }
        (all_in, not_all_in)
    }
}

/// Exact `(P(all in H), P(not all in H))` from an enumerated tuple law.
fn exact_masses(law: &DraftLaw, in_set: &[bool]) -> (f64, f64) {
    let (mut all_in, mut not_all_in) = (0.0, 0.0);
    for (tuple, prob) in law.iter() {
        if tuple.iter().all(|&t| in_set[t]) {
            all_in += prob;
        } else {
            not_all_in += prob;
        }
    }
    (all_in, not_all_in)
}

/// `(P(all in H), P(not all in H))` for without-replacement drafts: exact up
/// to [`WOR_EXACT_TUPLE_LIMIT`] tuples, quadrature above.
pub(crate) fn wor_masses(drafts: &DraftScheme, in_set: &[bool]) -> (f64, f64) {
    match drafts.tuple_law(WOR_EXACT_TUPLE_LIMIT) {
        Ok(law) => exact_masses(&law, in_set),
        Err(_) => {
            let q = drafts.drafts()[0].probs();
            let (_, q_out) = split_mass(q, in_set);
            let mut clocks = ExponentialClocks::new(drafts.n(), q_out);
            q.iter()
                .zip(in_set)
                .filter(|(_, i)| **i)
                .for_each(|(&x, _)| clocks.add_token(x));
            clocks.masses(q_out)
        }
    }
}

/// The best ascending-p/q prefix for without-replacement drafts: `(alpha - 1,
/// tokens)`. That a prefix is optimal is conjectured, not proven (`docs/DESIGN.md` §3);
/// the tests check it against the LP and against all subsets. The prefixes
/// are of the drafted tokens alone (`drafted_ratio_order`): an undrafted
/// token adds its p to a set and nothing to P(all drafts in it), and a
/// draft truncated to its top k would otherwise make the search sort and
/// sum the whole vocabulary.
pub(crate) fn wor_by_prefix(
    p: &[f64],
    drafts: &DraftScheme,
) -> Result<(f64, Vec<usize>), CoreError> {
    let q = drafts.drafts()[0].probs();
    let n = drafts.n();
    let (order, undrafted_mass) = drafted_ratio_order(p, q);
    let v = order.len();
    let (p_out, q_out) = masses_after(p, q, &order, undrafted_mass);
    let (mut best, mut best_len) = (0.0, 0);
    match drafts.tuple_law(WOR_EXACT_TUPLE_LIMIT) {
        Ok(law) => {
            let masses = exact_prefix_masses(&law, &order);
            let mut p_in = 0.0;
            for k in 1..=v {
                p_in += p[order[k - 1]];
                let (all_in, not_all_in) = masses[k];
                let value = objective(p_in, p_out[k], all_in, not_all_in);
                if value < best {
                    best = value;
                    best_len = k;
                }
            }
        }
        Err(CoreError::TooLarge { .. }) => {
            let q_out_min = q_out
                .iter()
                .copied()
                .filter(|&x| x > 0.0)
                .fold(1.0, f64::min);
            let mut clocks = ExponentialClocks::new(n, q_out_min);
            // Gathered once into scan order: the loads of a gather overlap,
            // those inside the scan's long body would each wait on memory.
            let in_order = |x: &[f64]| order.iter().map(|&t| x[t]).collect::<Vec<f64>>();
            let (p_ordered, q_ordered) = (in_order(p), in_order(q));
            let (mut p_in, mut q_in) = (0.0, 0.0);
            // Tokens join the clocks only when a prefix is evaluated, so
            // none is added past the last prefix the bound lets through.
            let mut added = 0;
            for k in 1..=v {
                p_in += p_ordered[k - 1];
                q_in += q_ordered[k - 1];
                // Without replacement, each further draw lands in H with
                // probability at most q(H), so Q_wo(H) <= q(H)^n and the iid
                // objective is a lower bound: skip prefixes it rules out.
                if iid_objective(p_in, p_out[k], q_in, q_out[k], n as i32) >= best {
                    continue;
                }
                q_ordered[added..k]
                    .iter()
                    .for_each(|&x| clocks.add_token(x));
                added = k;
                let (all_in, not_all_in) = clocks.masses(q_out[k]);
                let value = objective(p_in, p_out[k], all_in, not_all_in);
                if value < best {
                    best = value;
                    best_len = k;
                }
            }
        }
        Err(other) => return Err(other),
    }
    let mut certificate = order[..best_len].to_vec();
    certificate.sort_unstable();
    Ok((best, certificate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdsd_core::Distribution;

    use crate::order::ascending_ratio_order;

    /// Every prefix's masses by the quadrature against exact enumeration,
    /// evaluated one prefix after another as the scan does (so the
    /// survival updates, the saturated nodes and all three forms of
    /// `arrivals` are on the path).
    fn check_against_enumeration(p: &[f64], q: &Distribution, n: usize, tolerance: f64) {
        let v = p.len();
        let drafts = DraftScheme::without_replacement(q.clone(), n).unwrap();
        let law = drafts.tuple_law(usize::MAX).unwrap();
        let order = ascending_ratio_order(p, q.probs());
        let exact = exact_prefix_masses(&law, &order);
        let q_out: Vec<f64> = (0..=v)
            .map(|k| order[k..].iter().map(|&t| q.prob(t)).sum())
            .collect();
        let mut clocks = ExponentialClocks::new(n, q_out[v - 1]);
        for k in 0..=v {
            if k > 0 {
                clocks.add_token(q.prob(order[k - 1]));
            }
            let (all_in, not_all_in) = clocks.masses(q_out[k]);
            assert!(
                (all_in - exact[k].0).abs() <= tolerance,
                "V={v} n={n} k={k}: {all_in} vs {}",
                exact[k].0
            );
            assert!(
                (not_all_in - exact[k].1).abs() <= tolerance,
                "V={v} n={n} k={k}: {not_all_in} vs {}",
                exact[k].1
            );
        }
    }

    fn normalised(raw: &[f64]) -> Vec<f64> {
        let total: f64 = raw.iter().sum();
        raw.iter().map(|x| x / total).collect()
    }

    /// A small instance, n = 1..4, to 1e-12.
    #[test]
    fn quadrature_matches_exact_enumeration() {
        let raw = [0.31, 0.02, 0.17, 1e-4, 0.25, 0.08, 0.0999, 0.07];
        let q = Distribution::from_probs(normalised(&raw)).unwrap();
        let p = [0.05, 0.3, 0.1, 0.2, 0.05, 0.1, 0.1, 0.1];
        for n in 1..=4 {
            check_against_enumeration(&p, &q, n, 1e-12);
        }
    }

    /// A heavy tail as real rows have (draft masses from 0.4 down to 1e-12,
    /// so some nodes saturate and the outside mass spans eleven decades),
    /// n = 2..4, to 1e-12.
    #[test]
    fn quadrature_matches_exact_enumeration_on_a_heavy_tail() {
        let v = 32;
        let q_raw: Vec<f64> = (0..v).map(|i| (-(i as f64) * 0.87).exp()).collect();
        let p_raw: Vec<f64> = (0..v)
            .map(|i| (-((i * 7 % v) as f64) * 0.6).exp())
            .collect();
        let q = Distribution::from_probs(normalised(&q_raw)).unwrap();
        let p = normalised(&p_raw);
        for n in 2..=4 {
            check_against_enumeration(&p, &q, n, 1e-12);
        }
    }
}
