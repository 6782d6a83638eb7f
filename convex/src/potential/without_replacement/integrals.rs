//! One evaluation: r, the potential and the Hessian's diagonal at theta on
//! a grid, node by node in c over the nodes in t (`docs/DESIGN.md` §6b).

use super::clocks::{Clocks, WithoutReplacement};
use super::grids::{Grid, LEFT_END_NODES, left_end_head};
use super::polynomials::{
    Coefficients, EXTRA_TERMS, Series, absorb, absorb_into, add_power_sums, clock_series, multiply,
    powers_of, tail_polynomials, tail_sums,
};
use super::tail::Tail;
use crate::newton::{Evaluation, MAX_STEP_THETA};
use crate::potential::nodes::{left_end, nodes_from};
use rayon::prelude::*;

/// What an evaluation keeps for Newton's direction: its grid, the
/// Hessian's diagonal there, and for an evaluation on the fine grid r on
/// the coarse one at the same theta where it is known (`refine`), the
/// base of the direction's differences (on the coarse grid, that is the
/// evaluation's own r).
pub(crate) struct Curvature {
    pub(super) grid: Grid,
    pub(super) diagonal: Vec<f64>,
    pub(super) coarse_marginal: Option<Vec<f64>>,
}

/// One node in c as its pairs of nodes see it.
pub(super) struct NodeInC {
    /// The tail's moments there (`TailBuckets::moments_at`).
    pub(super) moments: Vec<Series>,
    /// z = e^(-a c) of the exact selectable tokens.
    pub(super) z: Vec<f64>,
    /// The factors of the exact tokens' integrands in t (r's measure a
    /// e^(-a c) dc at the node) and of the tail's kernels (dc).
    pub(super) head_measure: Vec<f64>,
    pub(super) kernel_measure: f64,
    /// The node's weight in ln c.
    pub(super) weight: f64,
}

/// The most `WithoutReplacement::place_short_head_tokens` raises a
/// token's weight: twice a Newton step's reach (`MAX_STEP_THETA`), which
/// the likeliest target token at the coarsest level of groups takes on
/// the shared rows (up to 7.3).
const HEAVY_PLACEMENT_REACH: f64 = 2.0 * MAX_STEP_THETA;
/// Bisections of a placed weight in ln a: to 2^-40 of the reach.
const HEAVY_PLACEMENT_BISECTIONS: usize = 40;

/// One evaluation's pass over the nodes in c: the nodes, each one's sums,
/// and what r's assembly reads beside them (the tail's buckets at theta,
/// the exact tokens' weights a = e^theta).
struct NodePass {
    c: Vec<f64>,
    sums: Vec<NodeSums>,
    tail: Tail,
    head_a: Vec<f64>,
}

/// r, the potential and the Hessian's diagonal at one theta.
pub(super) struct Integrals {
    pub(super) marginal: Vec<f64>,
    pub(super) potential: f64,
    pub(super) diagonal: Vec<f64>,
}

/// One node in c's share of r and the potential: the exact tokens' terms
/// of r, the tail's kernels κ_(j, p) (row j, entry p - j - 1, with the
/// measure of the node), E[e^(-cS); world] and the node's weight in ln c.
pub(super) struct NodeSums {
    pub(super) weight: f64,
    pub(super) head: Vec<f64>,
    pub(super) kernel: Vec<f64>,
    pub(super) transform: f64,
}

impl<'a> WithoutReplacement<'a> {
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
            add_power_sums(&mut sums, clocks.tail.iter().map(|&y| self.q[y]));
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

    /// The potential at theta on `grid`, with the Hessian's diagonal.
    pub(super) fn evaluate_on(&self, theta: &[f64], grid: Grid) -> Evaluation<Curvature> {
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

    /// The pass over the nodes in c of `grid` (those of the point `at`) at
    /// theta: each node's sums, with the tail's buckets and the exact
    /// tokens' weights that r's assembly reads after it.
    fn node_pass(&self, theta: &[f64], at: &[f64], grid: Grid) -> NodePass {
        let n = self.n;
        let clocks = self.clocks(grid);
        let series = clock_series(n);
        let c_step = grid.steps(n).0;
        let c = nodes_from(at, n, left_end_head(grid.selection_error(), n), c_step);
        let left = left_end(c_step, LEFT_END_NODES);
        let tail_theta: Vec<f64> = clocks.tail.iter().map(|&y| theta[y]).collect();
        let tail = Tail::new(&tail_theta, clocks, self.q, n);
        let head_a: Vec<f64> = clocks.head.iter().map(|&y| theta[y].exp()).collect();
        let sums = (c.par_iter().enumerate())
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
        NodePass {
            c,
            sums,
            tail,
            head_a,
        }
    }

    /// Raises each exact token whose r falls short of p, the others'
    /// weights as they are, to the weight at which its r meets p, where a
    /// weight within `HEAVY_PLACEMENT_REACH` above its own does (a token
    /// that saturates short of p is left to Newton); `hi` bounds theta.
    /// Returns how many tokens moved. With the other weights fixed, an
    /// exact token's r is a Laplace transform: its term at node c_k is a
    /// e^(-a c_k) times a sum over t that leaves its own factor out, so at
    /// weight a' it is that term times (a' / a) e^(-(a' - a) c_k) (only
    /// its share in the tail's series, at the nodes in t where it is light,
    /// moves with a otherwise). One pass over the nodes in c (on the
    /// coarse grid: it only starts Newton) gives every token's transform;
    /// its root is found by bisection in ln a'. A token taken up takes
    /// its mass from the others, which hold the excess at the model's
    /// start (`ratio_groups`), so only the short ones move.
    pub(crate) fn place_short_head_tokens(&self, theta: &mut [f64], p: &[f64], hi: f64) -> usize {
        let clocks = self.clocks(Grid::Coarse);
        // The nodes in c follow the largest weight of the point they are
        // made from: made from the head tokens' weights at their reach, they
        // hold each transform up to it (from theta's own, a token raised
        // past the largest weight would have its term below the first node).
        let mut reached = theta.to_vec();
        for &y in &clocks.head {
            reached[y] = (theta[y] + HEAVY_PLACEMENT_REACH).min(hi).max(theta[y]);
        }
        let pass = self.node_pass(theta, &reached, Grid::Coarse);
        let mut moved = 0;
        for (x, (&y, &a)) in clocks.head.iter().zip(&pass.head_a).enumerate() {
            // r at weight a e^s.
            let r_at = |s: f64| -> f64 {
                let grow = s.exp();
                (pass.sums.iter().zip(&pass.c))
                    .map(|(sums, &ck)| sums.head[x] * grow * (-a * (grow - 1.0) * ck).exp())
                    .sum()
            };
            let reach = reached[y] - theta[y];
            if reach <= 0.0 || r_at(0.0) >= p[y] || r_at(reach) <= p[y] {
                continue;
            }
            let (mut below, mut above) = (0.0, reach);
            for _ in 0..HEAVY_PLACEMENT_BISECTIONS {
                let middle = 0.5 * (below + above);
                if r_at(middle) < p[y] {
                    below = middle;
                } else {
                    above = middle;
                }
            }
            theta[y] += 0.5 * (below + above);
            moved += 1;
        }
        moved
    }

    /// r and the potential at theta, on the nodes in c of `grid` from those
    /// of the point `at` (theta itself, or the point of a Newton direction
    /// whose differences share them), and when `curvature` the Hessian's
    /// diagonal (else empty).
    pub(super) fn integrals(
        &self,
        theta: &[f64],
        at: &[f64],
        grid: Grid,
        curvature: bool,
        only: Option<&[bool]>,
    ) -> Integrals {
        let v = theta.len();
        let clocks = self.clocks(grid);
        let NodePass {
            c,
            sums: nodes_c,
            tail,
            head_a,
        } = self.node_pass(theta, at, grid);
        let selectable = clocks.world - clocks.empty;
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
    pub(super) fn node_sums(&self, clocks: &Clocks, series: &[Series], node: NodeInC) -> NodeSums {
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

    pub(super) fn node_sums_of<P: Coefficients>(
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
                join_series(&mut moments, head_q[x], z[x]);
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
            let factors = ExactFactors {
                q: &head_q,
                s,
                arrived,
                z: &z,
            };
            prefix_products(&mut pre_u, &mut pre_m, exact, &factors);
            let (whole_u, whole_m) = (pre_u[exact].as_ref(), pre_m[exact].as_ref());
            sums.transform += wt * whole_m[n - 1];
            // The tail's kernels, on every token's U and M at this pair.
            // Each entry's power of t from the node's powers, not a
            // running product (a chain of multiplications).
            add_kernels(&mut segment, series, (whole_u, whole_m), (t, &t_powers), wt);
            let suffix = (u.as_mut(), m.as_mut());
            let prefixes = (&pre_u[..exact], &pre_m[..exact]);
            add_exact_terms(
                prefixes,
                suffix,
                &factors,
                wt,
                &head_measure,
                &mut sums.head,
            );
        }
        segments.extend_from_slice(&segment);
        let size = n * width;
        accumulate_segments(&mut segments, size);
        // A head token in the series leaves it by its division: Σ_j (-z)^j
        // Σ_e q^(j+1+e) κ_(j,e) over its segments, as a tail token's
        // (`TailBuckets::marginal`).
        for (x, first) in first_segment.iter().enumerate() {
            let Some(first) = *first else { continue };
            let row = &segments[first..first + size];
            sums.head[x] += head_measure[x] * leave_series(row, head_q[x], z[x]);
        }
        sums.kernel = segments[..size]
            .iter()
            .map(|k| kernel_measure * k)
            .collect();
        sums
    }
}

/// Adds a head token of draft probability q and z = e^(-a c) to the tail's
/// moments at a node: its terms q^(k+e) z^k, row k, entry e.
#[inline(always)]
fn join_series(moments: &mut [Series], q: f64, z: f64) {
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

/// Adds one pair of nodes' share to the tail's kernels κ_(j,e) (rows of
/// `EXTRA_TERMS + 1`), from every token's U and M there (`whole`), the
/// node in t with its powers, and the pair's weight. Each entry's power of
/// t comes from the node's powers, not a running product (a chain of
/// multiplications). Always inlined into `node_sums_of`, where the number
/// of drafts is the storage's constant and the loops unroll.
#[inline(always)]
fn add_kernels(
    segment: &mut [f64],
    series: &[Series],
    (whole_u, whole_m): (&[f64], &[f64]),
    (t, t_powers): (f64, &Series),
    weight: f64,
) {
    let n = whole_u.len();
    let width = EXTRA_TERMS + 1;
    let mut measure = weight;
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
}

/// From the segment of the least t up, each segment's kernels (of `size`
/// numbers) with those of the segments after it: sums of terms of one
/// sign.
fn accumulate_segments(segments: &mut [f64], size: usize) {
    for k in (size..segments.len()).step_by(size).rev() {
        let (before, after) = segments.split_at_mut(k);
        (before[k - size..].iter_mut().zip(&after[..size])).for_each(|(a, b)| *a += b);
    }
}

/// The integrand of a token of draft probability q and z = e^(-a c) that
/// leaves the tail's series by its division, from the kernels `rows`
/// (rows j of `EXTRA_TERMS + 1`): Σ_j (-z)^j Σ_e q^(j+1+e) κ_(j,e).
fn leave_series(rows: &[f64], q: f64, z: f64) -> f64 {
    let (mut sign_power, mut integrand) = (1.0, 0.0);
    for (j, row) in rows.chunks(EXTRA_TERMS + 1).enumerate() {
        let mut power = q.powi(j as i32 + 1);
        let mut part = 0.0;
        for entry in row {
            part += power * entry;
            power *= q;
        }
        integrand += sign_power * part;
        sign_power *= -z;
    }
    integrand
}

/// The exact tokens' factors at one pair of nodes: q, s = e^(-q t) and u =
/// 1 - s per head token, and z = e^(-a c) at the node in c.
struct ExactFactors<'a> {
    q: &'a [f64],
    s: &'a [f64],
    arrived: &'a [f64],
    z: &'a [f64],
}

impl ExactFactors<'_> {
    /// Token x's factors (s, u z, q s z) of `(U, M)`.
    #[inline]
    fn of(&self, x: usize) -> (f64, f64, f64) {
        let (s, z) = (self.s[x], self.z[x]);
        (s, self.arrived[x] * z, self.q[x] * s * z)
    }
}

/// The prefix products of `(U, M)`: prefix x + 1 is prefix x times token
/// x's factors, for the first `exact` tokens.
#[inline]
fn prefix_products<P: Coefficients>(
    pre_u: &mut [P],
    pre_m: &mut [P],
    exact: usize,
    factors: &ExactFactors,
) {
    for x in 0..exact {
        let (before_u, after_u) = pre_u.split_at_mut(x + 1);
        let (before_m, after_m) = pre_m.split_at_mut(x + 1);
        let (s, b, marked) = factors.of(x);
        absorb_into(
            (before_u[x].as_ref(), before_m[x].as_ref()),
            (after_u[0].as_mut(), after_m[0].as_mut()),
            s,
            b,
            marked,
        );
    }
}

/// Adds each exact token's term of r at one pair of nodes to `head`, from
/// the suffix polynomials built from the last exact token back in
/// `suffix`: leaving token x out needs two coefficients of prefix x times
/// suffix x + 1.
#[inline]
fn add_exact_terms<P: Coefficients>(
    (pre_u, pre_m): (&[P], &[P]),
    (u, m): (&mut [f64], &mut [f64]),
    factors: &ExactFactors,
    weight: f64,
    head_measure: &[f64],
    head: &mut [f64],
) {
    let n = u.len();
    u.fill(0.0);
    m.fill(0.0);
    u[0] = 1.0;
    for x in (0..pre_u.len()).rev() {
        let (pu, pm) = (pre_u[x].as_ref(), pre_m[x].as_ref());
        let last: f64 = (0..n).map(|i| pu[i] * u[n - 1 - i]).sum();
        let mut integrand = factors.q[x] * factors.s[x] * last;
        if n >= 2 {
            let marked: f64 = (0..n - 1)
                .map(|i| pm[i] * u[n - 2 - i] + pu[i] * m[n - 2 - i])
                .sum();
            integrand += factors.arrived[x] * marked;
        }
        head[x] += head_measure[x] * weight * integrand;
        let (s, b, marked) = factors.of(x);
        absorb(u, m, s, b, marked);
    }
}
