//! Drafts without replacement: P(all n drafts in H) exactly by enumeration
//! at small V, by exponential clocks and quadrature at large V (`docs/DESIGN.md` §3).

use mdsd_core::{CoreError, DraftLaw, DraftScheme};

use crate::iid::iid_objective;
use crate::objective;
use crate::order::{ascending_ratio_order, masses_after, split_mass};

/// Largest number of ordered draft tuples summed exactly; above it the
/// exponential-clock quadrature is used.
pub const WOR_EXACT_TUPLE_LIMIT: usize = 200_000;

/// Step of the rule `h Σ f(s_j)` in s = ln t. The integrands are analytic
/// in a strip of half-width close to π/2 around the real s axis, so the
/// discretisation error is about exp(-2π·1.2/STEP) ≈ 1e-16.
const STEP: f64 = 0.2;
/// Below this t no clock is resolved: there P(N_H(t) >= n) <= t^n, and the
/// head of the complement integral, ∫_0^t q_c e^(-q_c t) dt, is added in
/// closed form.
const HEAD: f64 = 1e-11;
/// Above t = HORIZON / q_c the density e^(-q_c t) is below e^(-60).
const HORIZON: f64 = 60.0;

/// `(P(all drafts in H), P(not all in H))` for every prefix H = order[..k],
/// k = 0..=V, from the exact tuple law: each tuple counts for the prefixes
/// that contain its highest-ranked token.
fn exact_prefix_masses(law: &DraftLaw, order: &[usize]) -> Vec<(f64, f64)> {
    let mut rank = vec![0; order.len()];
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

/// P(all drafts in H) by exponential clocks: give token i an arrival time
/// E_i ~ Exp(q_i); arrival order is the without-replacement draw order. With
/// q_c = q(outside H), the first outside arrival has density q_c e^(-q_c t)
/// and all n drafts are in H iff n tokens of H arrived before it:
///   Q_wo(H) = ∫ q_c e^(-q_c t) P(N_H(t) >= n) dt,
/// N_H(t) Poisson-binomial with success probabilities 1 - e^(-q_i t),
/// counted by a DP capped at n at every quadrature node. Tokens are added
/// one at a time, so a scan over prefixes reuses the DP.
pub(crate) struct ExponentialClocks {
    n: usize,
    times: Vec<f64>,
    weights: Vec<f64>,
    /// Node-major: `counts[j * (n + 1) + c]` = P(N_H(t_j) = c) for c < n,
    /// and P(N_H(t_j) >= n) for c = n.
    counts: Vec<f64>,
    tokens_in: usize,
}

impl ExponentialClocks {
    /// An empty H; `q_out_min` is the least positive outside mass that
    /// [`Self::masses`] will be asked about (it sets the quadrature range).
    pub(crate) fn new(n: usize, q_out_min: f64) -> Self {
        let s_lo = HEAD.ln();
        let s_hi = (HORIZON / q_out_min).ln().max(s_lo);
        let nodes = ((s_hi - s_lo) / STEP).ceil() as usize + 1;
        let times: Vec<f64> = (0..nodes).map(|j| (s_lo + j as f64 * STEP).exp()).collect();
        let weights = times.iter().map(|t| STEP * t).collect();
        let mut counts = vec![0.0; nodes * (n + 1)];
        counts.iter_mut().step_by(n + 1).for_each(|c| *c = 1.0);
        Self {
            n,
            times,
            weights,
            counts,
            tokens_in: 0,
        }
    }

    /// Adds a token of draft probability `q` to H.
    pub(crate) fn add_token(&mut self, q: f64) {
        if q <= 0.0 {
            return;
        }
        self.tokens_in += 1;
        let n = self.n;
        for (row, &t) in self.counts.chunks_exact_mut(n + 1).zip(&self.times) {
            let stay = (-q * t).exp();
            let arrive = -(-q * t).exp_m1();
            row[n] += row[n - 1] * arrive;
            for c in (1..n).rev() {
                row[c] = row[c] * stay + row[c - 1] * arrive;
            }
            row[0] *= stay;
        }
    }

    /// `(P(all drafts in H), P(not all in H))` given the outside mass `q_out`;
    /// both are integrated directly, so neither is computed as 1 - the other.
    /// Node j stands for the cell [s_j - h/2, s_j + h/2]; below the first cell
    /// P(N < n) = 1 up to t^n, so that head of the complement is exact.
    pub(crate) fn masses(&self, q_out: f64) -> (f64, f64) {
        if q_out <= 0.0 {
            return if self.tokens_in >= self.n {
                (1.0, 0.0)
            } else {
                (0.0, 1.0)
            };
        }
        let n = self.n;
        let head_end = self.times[0] * (-STEP / 2.0).exp();
        let (mut all_in, mut not_all_in) = (0.0, -(-q_out * head_end).exp_m1());
        for ((row, &t), &w) in self
            .counts
            .chunks_exact(n + 1)
            .zip(&self.times)
            .zip(&self.weights)
        {
            let density = w * q_out * (-q_out * t).exp();
            all_in += density * row[n];
            not_all_in += density * row[..n].iter().sum::<f64>();
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
/// the tests check it against the LP and against all subsets.
pub(crate) fn wor_by_prefix(
    p: &[f64],
    drafts: &DraftScheme,
) -> Result<(f64, Vec<usize>), CoreError> {
    let q = drafts.drafts()[0].probs();
    let n = drafts.n();
    let order = ascending_ratio_order(p, q);
    let v = order.len();
    let (p_out, q_out) = masses_after(p, q, &order);
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
            let (mut p_in, mut q_in) = (0.0, 0.0);
            for k in 1..=v {
                let token = order[k - 1];
                clocks.add_token(q[token]);
                p_in += p[token];
                q_in += q[token];
                // Without replacement, each further draw lands in H with
                // probability at most q(H), so Q_wo(H) <= q(H)^n and the iid
                // objective is a lower bound: skip prefixes it rules out.
                if iid_objective(p_in, p_out[k], q_in, q_out[k], n as i32) >= best {
                    continue;
                }
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

    /// The quadrature agrees with exact enumeration to 1e-10 (the accuracy
    /// promised) on every prefix of a small instance, for n = 1..4.
    #[test]
    fn quadrature_matches_exact_enumeration() {
        let raw = [0.31, 0.02, 0.17, 1e-4, 0.25, 0.08, 0.0999, 0.07];
        let q = Distribution::from_probs(
            raw.iter()
                .map(|x| x / raw.iter().sum::<f64>())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let p = [0.05, 0.3, 0.1, 0.2, 0.05, 0.1, 0.1, 0.1];
        for n in 1..=4 {
            let drafts = DraftScheme::without_replacement(q.clone(), n).unwrap();
            let law = drafts.tuple_law(usize::MAX).unwrap();
            let order = ascending_ratio_order(&p, q.probs());
            let exact = exact_prefix_masses(&law, &order);
            let q_out: Vec<f64> = (0..=8)
                .map(|k| order[k..].iter().map(|&t| q.prob(t)).sum())
                .collect();
            let mut clocks = ExponentialClocks::new(n, q_out[7]);
            for k in 0..=8 {
                if k > 0 {
                    clocks.add_token(q.prob(order[k - 1]));
                }
                let (all_in, not_all_in) = clocks.masses(q_out[k]);
                assert!(
                    (all_in - exact[k].0).abs() <= 1e-10,
                    "n={n} k={k}: {all_in} vs {}",
                    exact[k].0
                );
                assert!((not_all_in - exact[k].1).abs() <= 1e-10, "n={n} k={k}");
            }
        }
    }
}
