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
//! all-token term [M]_(n-1). Leaving each token out costs products of
//! prefix and suffix polynomials of degree n - 1: O(V n²) per pair of
//! nodes (the nodes in c in parallel; the nodes in t whose share of
//! P(world) is negligible left out, `CLOCK_NEGLIGIBLE`). The Newton
//! direction comes from conjugate gradients on differences of r on a
//! coarser grid (`Grid::Coarse`).

use rayon::prelude::*;

use crate::Workspace;
use crate::newton::{Evaluation, Potential, newton_by_conjugate_gradients};
use crate::selection::{STEP, left_tail, nodes};

/// Step of the rule in ln t, as mdsd-bounds' clocks take it.
const CLOCK_STEP: f64 = 0.25;
/// The integrands in t grow like t^(n-1) from 0: the rule starts where
/// the part it leaves out, below t^n / n!, is this small.
const CLOCK_HEAD: f64 = 1e-16;
/// The rule ends at t = CLOCK_HORIZON / (least q), past which every clock
/// has rung but with probability e^-60.
const CLOCK_HORIZON: f64 = 60.0;
/// Step of the central differences of r that stand for Hessian-vector
/// products, for a direction of unit largest entry.
const DIFFERENCE: f64 = 1e-5;

/// The tokens of one side of a problem with drafts without replacement.
pub(crate) struct WithoutReplacement<'a> {
    /// q of the selectable tokens.
    pub q: &'a [f64],
    /// q of the tokens drafted but never selected.
    pub silent: &'a [f64],
    /// q of the tokens whose drafting leaves the program's world (the
    /// inner program's: all drafts in H).
    pub excluded: &'a [f64],
    pub n: usize,
}

/// `(U, M)` times one token's factors: U (s + λ b), M (s + λ b) + U m.
fn absorb(u: &mut [f64], m: &mut [f64], s: f64, b: f64, marked: f64) {
    for k in (0..u.len()).rev() {
        let below = |x: &[f64]| if k > 0 { x[k - 1] } else { 0.0 };
        m[k] = m[k] * s + below(m) * b + u[k] * marked;
        u[k] = u[k] * s + below(u) * b;
    }
}

/// The quadrature of an evaluation: the fine one of r and the potential,
/// or a coarse one for the differences of r that stand for Hessian-vector
/// products, every other node in c (step 2 ln 2 / 3: relative error
/// about e^(-π² / 0.46), 5e-10) and twice the step in t (e^(-π² / 0.5),
/// 3e-9). The Hessian's accuracy costs Newton's rate, never exactness:
/// the line search and the stop rule use the fine r. Every third node in
/// c (step ln 2, 7e-7) is too coarse: on one of the shared rows (row 33,
/// top 100, n = 2, alpha* = 0.99988) the inner program then stalls short
/// of its tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Grid {
    Fine,
    Coarse,
}

impl Grid {
    /// Every how many nodes of the fine rule in c, and the step in ln t.
    fn strides(self) -> (usize, f64) {
        match self {
            Grid::Fine => (1, CLOCK_STEP),
            Grid::Coarse => (2, 2.0 * CLOCK_STEP),
        }
    }
}

/// The nodes in t whose contribution to P(world) is below this share of
/// it are left out: the selected mass they carry is smaller still (at
/// each time, the selected token's law sums to the density of the world's
/// n-th arrival), and which nodes go depends on q alone, not on theta.
const CLOCK_NEGLIGIBLE: f64 = 1e-18;

/// A rayon task's sums over its nodes in c, r and the potential, and its
/// buffers: the prefix polynomials (U, M) of the tokens before y (row y
/// of n entries), and the tokens' e^(-a c).
struct NodeSums {
    r: Vec<f64>,
    potential: f64,
    prefix: (Vec<f64>, Vec<f64>),
    z: Vec<f64>,
}

impl NodeSums {
    fn new(v: usize, n: usize) -> Self {
        Self {
            r: vec![0.0; v],
            potential: 0.0,
            prefix: (vec![0.0; v * n], vec![0.0; v * n]),
            z: vec![0.0; v],
        }
    }

    fn merge(mut self, other: Self) -> Self {
        (self.r.iter_mut().zip(&other.r)).for_each(|(a, b)| *a += b);
        self.potential += other.potential;
        self
    }
}

/// One node of the clocks' quadrature in t.
struct Clock {
    weight: f64,
    /// Its terms of P(world) and of P(S = 0 in it).
    world: f64,
    empty: f64,
    /// s_y = e^(-q_y t) of the selectable tokens.
    survival: Vec<f64>,
    /// The silent and excluded tokens' (U, M).
    background: (Vec<f64>, Vec<f64>),
}

/// The clocks' quadrature in t, of step `step` in ln t: nodes and weights
/// of ∫_0^∞ dt.
fn clock_nodes(n: usize, q_least: f64, step: f64) -> (Vec<f64>, Vec<f64>) {
    let factorial: f64 = (1..=n).map(|k| k as f64).product();
    let first = (CLOCK_HEAD * factorial).powf(1.0 / n as f64);
    let (lo, hi) = (first.ln(), (CLOCK_HORIZON / q_least).ln().max(first.ln()));
    let count = ((hi - lo) / step).ceil() as usize + 1;
    let t: Vec<f64> = (0..count).map(|j| (lo + j as f64 * step).exp()).collect();
    let mut w: Vec<f64> = t.iter().map(|t| step * t).collect();
    // [0, first], where the integrand grows like t^(n-1): first / n of it.
    w[0] += first / n as f64;
    (t, w)
}

impl WithoutReplacement<'_> {
    fn q_least(&self) -> f64 {
        (self.q.iter().chain(self.silent).chain(self.excluded))
            .filter(|&&q| q > 0.0)
            .fold(f64::INFINITY, |m, &q| m.min(q))
    }

    /// `(U, M)` of the silent and excluded tokens at time t (weights z = 1
    /// and z = 0).
    fn background(&self, t: f64) -> (Vec<f64>, Vec<f64>) {
        let mut u = vec![0.0; self.n];
        let mut m = vec![0.0; self.n];
        u[0] = 1.0;
        for &q in self.silent {
            let s = (-q * t).exp();
            absorb(&mut u, &mut m, s, 1.0 - s, q * s);
        }
        for &q in self.excluded {
            absorb(&mut u, &mut m, (-q * t).exp(), 0.0, 0.0);
        }
        (u, m)
    }

    /// r and the potential at theta, on the nodes in c of `grid` from those
    /// of the point `at` (theta itself, or the point of a Newton direction
    /// whose differences share them).
    fn integrals(&self, theta: &[f64], at: &[f64], grid: Grid) -> (Vec<f64>, f64) {
        let (n, v) = (self.n, theta.len());
        let a: Vec<f64> = theta.iter().map(|t| t.exp()).collect();
        let (stride, clock_step) = grid.strides();
        let (all_t, all_weights) = clock_nodes(n, self.q_least(), clock_step);
        let c: Vec<f64> = nodes(at, n).into_iter().step_by(stride).collect();
        let c_step = STEP * stride as f64;
        // Per node in t: the selectable tokens' s, the background's U and M;
        // P(world) and P(S = 0 in it): [M]_(n-1) with z = 1, and z = 0 on
        // the selectable tokens.
        let mut clocks = Vec::with_capacity(all_t.len());
        for (&t, &wt) in all_t.iter().zip(&all_weights) {
            let (bu, bm) = self.background(t);
            let (mut u, mut m) = (bu.clone(), bm.clone());
            let (mut none_u, mut none_m) = (bu.clone(), bm.clone());
            let mut survival = Vec::with_capacity(v);
            for &q in self.q {
                let s = (-q * t).exp();
                survival.push(s);
                absorb(&mut u, &mut m, s, 1.0 - s, q * s);
                absorb(&mut none_u, &mut none_m, s, 0.0, 0.0);
            }
            clocks.push(Clock {
                weight: wt,
                world: wt * m[n - 1],
                empty: wt * none_m[n - 1],
                survival,
                background: (bu, bm),
            });
        }
        let whole: f64 = clocks.iter().map(|clock| clock.world).sum();
        clocks.retain(|clock| clock.world >= CLOCK_NEGLIGIBLE * whole);
        let world: f64 = clocks.iter().map(|clock| clock.world).sum();
        let empty: f64 = clocks.iter().map(|clock| clock.empty).sum();
        let selectable = world - empty;
        // The nodes in c are independent of each other: one rayon task per
        // run of nodes, each with its own sums and buffers.
        let per_node = |mut sums: NodeSums, (k, &ck): (usize, &f64)| {
            let NodeSums {
                r,
                potential,
                prefix: (pre_u, pre_m),
                z,
            } = &mut sums;
            let wc = if k == 0 {
                c_step * (1.0 + left_tail(c_step))
            } else {
                c_step
            };
            z.iter_mut().zip(&a).for_each(|(z, a)| *z = (-a * ck).exp());
            let mut transform = 0.0;
            for clock in &clocks {
                let (s, wt) = (&clock.survival, clock.weight);
                let (mut u, mut m) = clock.background.clone();
                // Token y's factors at this pair of nodes.
                let token = |u: &mut [f64], m: &mut [f64], y: usize| {
                    absorb(u, m, s[y], (1.0 - s[y]) * z[y], self.q[y] * s[y] * z[y]);
                };
                for y in 0..v {
                    pre_u[y * n..(y + 1) * n].copy_from_slice(&u);
                    pre_m[y * n..(y + 1) * n].copy_from_slice(&m);
                    token(&mut u, &mut m, y);
                }
                transform += wt * m[n - 1];
                // Suffix polynomials from the last token back; leaving y
                // out needs two coefficients of prefix x suffix.
                u.fill(0.0);
                m.fill(0.0);
                u[0] = 1.0;
                for y in (0..v).rev() {
                    let (pu, pm) = (&pre_u[y * n..(y + 1) * n], &pre_m[y * n..(y + 1) * n]);
                    let last: f64 = (0..n).map(|i| pu[i] * u[n - 1 - i]).sum();
                    let mut integrand = self.q[y] * s[y] * last;
                    if n >= 2 {
                        let marked: f64 = (0..n - 1)
                            .map(|i| pm[i] * u[n - 2 - i] + pu[i] * m[n - 2 - i])
                            .sum();
                        integrand += (1.0 - s[y]) * marked;
                    }
                    r[y] += wc * wt * a[y] * ck * z[y] * integrand;
                    token(&mut u, &mut m, y);
                }
            }
            // m e^(-c) - (E[e^(-cS); world] - P(S = 0)) = m (e^(-c) - 1) +
            // P(world) - E[e^(-cS); world].
            *potential += wc * (selectable * (-ck).exp_m1() + world - transform);
            sums
        };
        let fresh = || NodeSums::new(v, n);
        let NodeSums { r, potential, .. } = (c.par_iter().enumerate())
            .fold(fresh, per_node)
            .reduce(fresh, NodeSums::merge);
        (r, potential)
    }
}

impl Potential for WithoutReplacement<'_> {
    /// The evaluation point, from which differences of r are taken.
    type Hessian = Vec<f64>;

    fn evaluate(&self, theta: &[f64], _workspace: &mut Workspace) -> Evaluation<Vec<f64>> {
        let (marginal, potential) = self.integrals(theta, theta, Grid::Fine);
        Evaluation {
            potential,
            marginal,
            hessian: theta.to_vec(),
        }
    }

    /// Newton's direction by conjugate gradients on central differences of
    /// r along each search direction (on the coarse grid from theta's
    /// nodes, so that both sides of a difference share them),
    /// preconditioned by r (which bounds the Hessian's diagonal).
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Vec<f64>>,
        gradient: &[f64],
        held: &[bool],
        _workspace: &mut Workspace,
    ) -> Vec<f64> {
        let product = |v: &[f64]| {
            let size = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if size == 0.0 {
                return vec![0.0; v.len()];
            }
            let h = DIFFERENCE / size;
            let moved = |sign: f64| {
                let point: Vec<f64> = theta.iter().zip(v).map(|(t, v)| t + sign * h * v).collect();
                self.integrals(&point, theta, Grid::Coarse).0
            };
            let (plus, minus) = (moved(1.0), moved(-1.0));
            plus.iter()
                .zip(&minus)
                .map(|(a, b)| (a - b) / (2.0 * h))
                .collect()
        };
        newton_by_conjugate_gradients(product, &at.marginal, &at.marginal, gradient, held)
    }

    fn flat_along_ones(&self) -> bool {
        true
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
    ) -> (Vec<f64>, f64) {
        let all: Vec<f64> = q.iter().chain(silent).chain(excluded).copied().collect();
        let (v, quiet) = (q.len(), q.len() + silent.len());
        let mut r = vec![0.0; v];
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
            if sum > 0.0 {
                potential += prob * sum.ln();
                for &x in tuple.iter().filter(|&&x| x < v) {
                    r[x] += prob * theta[x].exp() / sum;
                }
            }
        });
        (r, potential)
    }

    /// The double integrals match enumeration, for one to three drafts,
    /// with silent and excluded tokens.
    #[test]
    fn selected_law_and_potential_match_enumeration() {
        // (selectable q, silent q, excluded q, n, theta).
        type Case<'a> = (&'a [f64], &'a [f64], &'a [f64], usize, &'a [f64]);
        let cases: [Case; 6] = [
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
        ];
        for (q, silent, excluded, n, theta) in cases {
            let potential = WithoutReplacement {
                q,
                silent,
                excluded,
                n,
            };
            let (r, value) = potential.integrals(theta, theta, Grid::Fine);
            let (want_r, want_value) = enumerated(q, silent, excluded, n, theta);
            for (got, want) in r.iter().zip(&want_r) {
                assert!((got - want).abs() < 1e-12, "n = {n}: r {got} vs {want}");
            }
            assert!(
                (value - want_value).abs() < 1e-11,
                "n = {n}: {value} vs {want_value}"
            );
        }
    }
}
