//! The Newton direction of the selection potential (module `integrals`)
//! from the structure of its Hessian.
//!
//! With `U_yk = q_y a_y e^(-a_y c_k)` and `W_k = n (n-1) h c_k² phi(c_k)^(n-2)`
//! on nodes c_k of step h in u = ln c, the coupling of two tokens is
//! `dr_y / dtheta_z = -n (n-1) q_y a_y q_z a_z ∫ c e^(-(a_y + a_z) c) phi^(n-2) dc = -(U W Uᵀ)_yz`,
//! and, integrating the diagonal by parts (the potential is flat along
//! theta + t·1 on the selectable tokens), the Hessian is the weighted graph
//! Laplacian `H = Λ - U W Uᵀ`, `Λ = Diag(U W Uᵀ 1)`. Its coupling has the
//! rank of the node count K, so on the free tokens F Woodbury's identity
//! turns the Newton system `H_FF d = -g` into a K x K one:
//! `d = -Λ⁻¹ (g + U z)`, `(I - ω C ω) ω⁻¹ z = ω t`, with `C = Uᵀ Λ⁻¹ U`,
//! `t = Uᵀ Λ⁻¹ g` (sums over F) and `ω = W^(1/2)`; `I - ω C ω` is positive
//! semidefinite exactly when H_FF is (Schur complements), singular only
//! along the flat direction.
//!
//! Approximations keep it cheap, and only cost Newton's rate, never
//! exactness (the line search and the stop rule use the exact r):
//! * every third node of the evaluation (step ln 2: relative error
//!   e^(-π² / ln 2), about 7e-7 in the Hessian), and only those where the
//!   free tokens' rows of U live (`coarse_nodes`: 3e-7 of any free
//!   token's curvature left out);
//! * for programs evaluated through buckets of theta (from `BUCKETED_FROM`
//!   tokens, module `buckets`), rows of U from the buckets
//!   (`Assignment`) to first order in the offset δ = a / a_b - 1:
//!   `e^(-a c) ≈ e^(-x) (1 - δ x)`, x = a_b c <= `ROW_HORIZON`, so that every
//!   sum over tokens is a sum over buckets of two or three moments
//!   (relative error (δ x)² / 2, below 2e-3 where e^(-x) > 1e-7). Λ is
//!   built from the same rows, so the model stays a Laplacian with
//!   nonnegative weights (positive semidefinite). Smaller programs take
//!   U token by token, exactly: there buckets hold about one token each,
//!   and a token is one column of the Gram factor where a bucket is two.

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::buckets::Assignment;
use super::integrals::Selectable;
use crate::potential::nodes::{Nodes, STEP};
use mdsd_core::powi_count;

use crate::numeric::{SQUARING_FROM, curvature_floor, lane_sum, small_expm1};
use crate::thresholds::TOKENS_PER_TASK;
use crate::workspace::Workspace;

/// Nodes with x = a c above this are left out of a token's (or a
/// bucket's) row of U: e^(-40) is negligible, and 1 - δ x stays positive
/// (|δ| < 0.016).
const ROW_HORIZON: f64 = 40.0;

/// The (approximate) Newton direction of `side` at theta, whose
/// evaluation gave `nodes` and r = `marginal`: zero on `held` tokens.
/// U's rows come token by token, or from buckets of theta when `grouped`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn direction(
    side: &Selectable,
    theta: &[f64],
    nodes: &Nodes,
    marginal: &[f64],
    gradient: &[f64],
    held: &[bool],
    grouped: bool,
    workspace: &mut Workspace,
) -> Vec<f64> {
    let n = side.n;
    if n < 2 {
        // One draft: r = q whatever theta, the potential is linear.
        return gradient
            .iter()
            .zip(held)
            .map(|(g, &h)| if h { 0.0 } else { -g })
            .collect();
    }
    let Some(free) = free_weights(theta, held) else {
        return vec![0.0; theta.len()];
    };
    let (coarse, omega) = coarse_nodes(nodes, n, free);
    let at = Linearised {
        side,
        theta,
        coarse: &coarse,
        omega: &omega,
        marginal,
        gradient,
        held,
    };
    if grouped {
        at.by_bucket(workspace)
    } else {
        at.by_token()
    }
}

/// The least and the greatest weight a = e^theta of the free tokens,
/// `None` when every token is held.
fn free_weights(theta: &[f64], held: &[bool]) -> Option<(f64, f64)> {
    let (lo, hi) = theta
        .iter()
        .zip(held)
        .filter(|&(_, &h)| !h)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (&t, _)| {
            (lo.min(t), hi.max(t))
        });
    (lo <= hi).then(|| (lo.exp(), hi.exp()))
}

/// Every third node of the evaluation, c_k, and ω_k = W_k^(1/2) with
/// `W_k = n (n-1) 3h c_k² phi(c_k)^(n-2)`, on the nodes where some free
/// token's row of U lives (weights `free` = (least, greatest)), without
/// the nodes at either end whose weight is below 1e-16 of the largest
/// there (c² at small c, phi^(n-2) at large c): the system's cost grows
/// with the square of the node count. A free token's row is 0 past
/// a c = ROW_HORIZON (`exponential_table`), so nodes above ROW_HORIZON / least change
/// nothing. Below c = 1 / a, U_yk is about q_y a_y and W_k grows like c²,
/// so the nodes below 2^-DEPTH / greatest add under 4^-DEPTH / 3 (3e-7) of
/// any free token's Λ_y and coupling: about the coarse nodes' own error
/// (module docs), while the Gram product's cost goes with the square of
/// the node count. Past 16 drafts phi^(n-2) decays from c ~ 16 / (n a)
/// on, where W then lives: the low end moves down by the factor n / 16,
/// as the evaluation's first node does (module `nodes`). Dropping nodes moves the direction far less than the
/// coarse nodes themselves do (`directions_are_newtons` bounds both).
fn coarse_nodes(nodes: &Nodes, n: usize, free: (f64, f64)) -> (Vec<f64>, Vec<f64>) {
    const DEPTH: i32 = 10;
    let Nodes { c, phi } = nodes;
    let (least, greatest) = free;
    let many = (n as f64 / 16.0).max(1.0);
    let (low, high) = (2f64.powi(-DEPTH) / greatest / many, ROW_HORIZON / least);
    let scale = n as f64 * (n - 1) as f64 * 3.0 * STEP;
    let (coarse, omega): (Vec<f64>, Vec<f64>) = c
        .iter()
        .zip(phi)
        .step_by(3)
        .filter(|&(&ck, _)| (low..=high).contains(&ck))
        .map(|(&ck, f)| (ck, (scale * ck * ck * powi_count(*f, n - 2)).sqrt()))
        .unzip();
    let largest = omega.iter().fold(0.0f64, |m, &w| m.max(w));
    let weighty = |w: &f64| *w >= 1e-8 * largest;
    let first = omega.iter().position(weighty).unwrap_or(0);
    let end = omega.iter().rposition(weighty).map_or(first, |k| k + 1);
    (coarse[first..end].to_vec(), omega[first..end].to_vec())
}

/// What both ways of building U need: the point, and the coarse nodes with
/// their weights ω = W^(1/2).
struct Linearised<'a> {
    side: &'a Selectable<'a>,
    theta: &'a [f64],
    coarse: &'a [f64],
    omega: &'a [f64],
    marginal: &'a [f64],
    gradient: &'a [f64],
    held: &'a [bool],
}

impl Linearised<'_> {
    /// Λ_y from its row of U and the weighted node sums W Uᵀ 1, floored so
    /// that a flat r still gives a finite step.
    fn lambda(&self, y: usize, row_sum: f64) -> f64 {
        curvature_floor(row_sum, self.marginal[y])
    }

    /// U token by token, node-major: with the free tokens first, row k
    /// of the table holds U_yk of every token y, and its first F entries
    /// become row k of G, G_ki = ω_k U_yk / sqrt(Λ_y) for the i-th free
    /// token y. With h_i = g_y / sqrt(Λ_y), Woodbury's system is
    /// (I - G Gᵀ) s = G h, and d_y = -(h_i + (Gᵀ s)_i) / sqrt(Λ_y) (z =
    /// ω ∘ s): the coarse nodes' Newton direction, to rounding.
    ///
    /// A held token enters only through its term of Uᵀ 1 in Λ, which
    /// tokens of one weight add up to through their total q: the held
    /// tokens at theta = 0, most of a solved inner program's tokens on
    /// real rows, are one column of the table. The direction is the same, with per-token
    /// work only for the others.
    fn by_token(&self) -> Vec<f64> {
        let v = self.theta.len();
        let (mut free, mut held, mut q_zero) = (Vec::new(), Vec::new(), 0.0);
        for y in 0..v {
            if !self.held[y] {
                free.push(y);
            } else if self.theta[y] == 0.0 {
                q_zero += self.side.q[y];
            } else {
                held.push(y);
            }
        }
        let f = free.len();
        if f == 0 {
            return vec![0.0; v];
        }
        let order: Vec<usize> = free.iter().chain(&held).copied().collect();
        let mut weights: Vec<f64> = order.iter().map(|&y| self.theta[y].exp()).collect();
        let mut scales: Vec<f64> = order
            .iter()
            .zip(&weights)
            .map(|(&y, a)| self.side.q[y] * a)
            .collect();
        if q_zero > 0.0 {
            weights.push(1.0);
            scales.push(q_zero);
        }
        let columns = weights.len();
        let mut table = exponential_table(&weights, self.coarse);
        // Λ_y = Σ_k U_yk W_k s_k with s = Uᵀ 1 over every token, held or not.
        let mut lambda = vec![0.0; f];
        for (row, w) in table.chunks_exact_mut(columns).zip(self.omega) {
            row.iter_mut().zip(&scales).for_each(|(e, s)| *e *= s);
            let weighted = lane_sum(row) * w * w;
            lambda
                .iter_mut()
                .zip(&*row)
                .for_each(|(l, u)| *l += weighted * u);
        }
        let inverse_roots: Vec<f64> = free
            .iter()
            .zip(&lambda)
            .map(|(&y, &l)| self.lambda(y, l).sqrt().recip())
            .collect();
        for (row, w) in table.chunks_exact_mut(columns).zip(self.omega) {
            row.iter_mut()
                .zip(&inverse_roots)
                .for_each(|(u, r)| *u *= w * r);
        }
        // G read in place: its (k, i) entry is table[k columns + i].
        let k_count = self.coarse.len();
        let system = identity_minus_gram(&table, (k_count, f), (columns, 1));
        let table = DMatrix::from_vec(columns, k_count, table);
        let transposed = table.rows(0, f);
        let scaled = DVector::from_iterator(
            f,
            free.iter()
                .zip(&inverse_roots)
                .map(|(&y, r)| self.gradient[y] * r),
        );
        let solution = solve_ridged(system, transposed.tr_mul(&scaled));
        let coupled = scaled + transposed * solution;
        let mut direction = vec![0.0; v];
        for ((&y, c), r) in free.iter().zip(&coupled).zip(&inverse_roots) {
            direction[y] = -c * r;
        }
        direction
    }

    /// U from buckets of theta (`Assignment`), to first order in each
    /// token's offset from its bucket's centre (module docs).
    fn by_bucket(&self, workspace: &mut Workspace) -> Vec<f64> {
        let Self {
            side,
            theta,
            coarse,
            omega,
            gradient,
            held,
            ..
        } = *self;
        let tokens = Assignment::new(theta, workspace);
        let qa = |y: usize| side.q[y] * tokens.weight(y);
        let all = tokens.moments::<2>(qa);
        // Per occupied bucket, (x, e^(-x)) at the coarse nodes with x <= ROW_HORIZON.
        let occupied: Vec<usize> = (0..all.len()).filter(|&b| all[b][0] > 0.0).collect();
        let rows: Vec<Vec<(f64, f64)>> = occupied
            .iter()
            .map(|&b| {
                let mut row = Vec::with_capacity(coarse.len());
                exponentials(tokens.centre[b], coarse, |_, x, e| row.push((x, e)));
                row
            })
            .collect();
        // Σ_k over a bucket's row of e (f0 - x f1) v_k: the first-order row
        // against a node vector, for a bucket's moments (f0, f1).
        let node_sum = |row: &[(f64, f64)], f0: f64, f1: f64, v: &[f64]| -> f64 {
            row.iter()
                .zip(v)
                .map(|(&(x, e), v)| e * (f0 - x * f1) * v)
                .sum()
        };
        let mut index = vec![usize::MAX; all.len()];
        occupied.iter().enumerate().for_each(|(i, &b)| index[b] = i);

        // Λ_y = q_y a_y Σ_k e_yk W_k s_k with s = Uᵀ 1 over every token.
        let k_count = coarse.len();
        let mut ones = vec![0.0; k_count];
        for (row, &b) in rows.iter().zip(&occupied) {
            for (k, &(x, e)) in row.iter().enumerate() {
                ones[k] += e * (all[b][0] - x * all[b][1]);
            }
        }
        let weighted: Vec<f64> = ones.iter().zip(omega).map(|(s, w)| s * w * w).collect();
        let diagonal_rows: Vec<(f64, f64)> = rows
            .iter()
            .map(|row| {
                (
                    node_sum(row, 1.0, 0.0, &weighted),
                    node_sum(row, 0.0, -1.0, &weighted),
                )
            })
            .collect();
        let mut lambda = workspace.take(theta.len());
        (0..theta.len())
            .into_par_iter()
            .with_min_len(TOKENS_PER_TASK)
            .map(|y| {
                let (lam, mu) = diagonal_rows[index[tokens.slot[y] as usize]];
                self.lambda(y, qa(y) * (lam - tokens.delta[y] * mu))
            })
            .collect_into_vec(&mut lambda);

        // C = Uᵀ Λ⁻¹ U and t = Uᵀ Λ⁻¹ g over the free tokens.
        let free = |y: usize| if held[y] { 0.0 } else { 1.0 };
        let second = tokens.moments::<3>(|y| free(y) * qa(y) * qa(y) / lambda[y]);
        let first = tokens.moments::<2>(|y| free(y) * qa(y) * gradient[y] / lambda[y]);
        // Bucket b adds U_b M_b U_bᵀ to C, U_b's columns (e_k, x_k e_k) on its
        // row's nodes, M_b = [[m0, -m1], [-m1, m2]] positive semidefinite (the
        // moments of δ under non-negative weights). With M_b = L Lᵀ that is two
        // columns of a factor G, ω C ω = G Gᵀ: one matrix product (SIMD in
        // matrixmultiply) instead of a rank-3 update per bucket.
        let mut factor = DMatrix::<f64>::zeros(k_count, 2 * rows.len());
        let mut rhs = DVector::<f64>::zeros(k_count);
        for (i, (row, &b)) in rows.iter().zip(&occupied).enumerate() {
            let [m0, m1, m2] = second[b];
            // m0 = 0: every token of the bucket is held, and t has no term either.
            if m0 <= 0.0 {
                continue;
            }
            let shear = m1 / m0;
            let (root, spread) = (m0.sqrt(), (m2 - m1 * shear).max(0.0).sqrt());
            for (k, &(x, e)) in row.iter().enumerate() {
                rhs[k] += e * (first[b][0] - x * first[b][1]);
                factor[(k, 2 * i)] = omega[k] * root * e * (1.0 - shear * x);
                factor[(k, 2 * i + 1)] = omega[k] * spread * x * e;
            }
        }
        // I - ω C ω, and ω t.
        let system = identity_minus_gram(factor.as_slice(), factor.shape(), (1, k_count));
        rhs.iter_mut().zip(omega).for_each(|(t, w)| *t *= w);
        let solution = solve_ridged(system, rhs);
        let z: Vec<f64> = solution.iter().zip(omega).map(|(y, w)| y * w).collect();
        let coupled: Vec<(f64, f64)> = rows
            .iter()
            .map(|row| (node_sum(row, 1.0, 0.0, &z), node_sum(row, 0.0, -1.0, &z)))
            .collect();
        let direction = (0..theta.len())
            .into_par_iter()
            .with_min_len(TOKENS_PER_TASK)
            .map(|y| {
                if held[y] {
                    return 0.0;
                }
                let (zeta, xi) = coupled[index[tokens.slot[y] as usize]];
                -(gradient[y] + qa(y) * (zeta - tokens.delta[y] * xi)) / lambda[y]
            })
            .collect();
        workspace.give(lambda);
        workspace.give(tokens.delta);
        direction
    }
}

/// I - G Gᵀ for the K x F matrix G whose (k, i) entry is `g[k rs + i
/// cs]`, `shape` = (K, F) and `strides` = (rs, cs): one product by
/// matrixmultiply's gemm, which takes any strides, so G is read where it
/// lies: nalgebra's product needs Gᵀ copied, and its small-matrix path
/// rejects a view of G with a row stride.
fn identity_minus_gram(g: &[f64], shape: (usize, usize), strides: (usize, usize)) -> DMatrix<f64> {
    let ((rows, columns), (rs, cs)) = (shape, strides);
    assert!(
        rows == 0 || columns == 0 || (rows - 1) * rs + (columns - 1) * cs < g.len(),
        "G lies within its slice"
    );
    let mut system = DMatrix::<f64>::identity(rows, rows);
    let (rs, cs, k) = (rs as isize, cs as isize, rows as isize);
    // SAFETY: A = G (K x F, strides (rs, cs)) and B = Gᵀ (F x K, strides
    // (cs, rs)) lie within `g` (asserted above); C is `system`, K x K,
    // column-major with strides (1, K), its own allocation.
    unsafe {
        matrixmultiply::dgemm(
            rows,
            columns,
            rows,
            -1.0,
            g.as_ptr(),
            rs,
            cs,
            g.as_ptr(),
            cs,
            rs,
            1.0,
            system.as_mut_ptr(),
            1,
            k,
        );
    }
    system
}

/// The solution of `system x = rhs` for the positive semidefinite
/// I - ω C ω, singular along theta + t·1 when every token is free: with
/// the least ridge (none, then 1e-12 up) that lets Cholesky through.
fn solve_ridged(system: DMatrix<f64>, rhs: DVector<f64>) -> DVector<f64> {
    let k_count = system.nrows();
    [0.0, 1e-12, 1e-10, 1e-8, 1e-6]
        .into_iter()
        .find_map(|ridge| {
            let ridged = &system + DMatrix::identity(k_count, k_count) * ridge;
            ridged.cholesky().map(|factor| factor.solve(&rhs))
        })
        .unwrap_or_else(|| DVector::zeros(k_count))
}

/// e^(-a_y c_k) for every weight and coarse node with a c <= ROW_HORIZON (0
/// past it), node-major: row k holds every weight's, and each row comes
/// from the one before in a pass over the weights that vectorises.
/// Coarse nodes double exactly, so below x = 1/64 the next m = e^(-x) - 1
/// is m (2 + m) (relative error growing by about 2 ulps a node, where
/// squaring e^(-x) would double it), and from there on e^(-x) is the
/// square of the previous one (relative error at most 64 x · 1e-16, as in
/// `exponentials`).
fn exponential_table(weights: &[f64], coarse: &[f64]) -> Vec<f64> {
    let Some((&c0, rest)) = coarse.split_first() else {
        return Vec::new();
    };
    let mut small: Vec<f64> = weights
        .iter()
        .map(|&a| small_expm1(-(a * c0).min(SQUARING_FROM)))
        .collect();
    let mut current: Vec<f64> = weights
        .iter()
        .zip(&small)
        .map(|(&a, m)| match a * c0 {
            x if x < SQUARING_FROM => 1.0 + m,
            x if x <= ROW_HORIZON => (-x).exp(),
            _ => 0.0,
        })
        .collect();
    let mut table = Vec::with_capacity(weights.len() * coarse.len());
    table.extend_from_slice(&current);
    for &ck in rest {
        for ((e, m), &a) in current.iter_mut().zip(&mut small).zip(weights) {
            // x / 2 is the previous node's x, exactly.
            let x = a * ck;
            *m *= 2.0 + *m;
            let next = if 0.5 * x < SQUARING_FROM {
                1.0 + *m
            } else {
                *e * *e
            };
            *e = if x <= ROW_HORIZON { next } else { 0.0 };
        }
        table.extend_from_slice(&current);
    }
    table
}

/// Calls `term(k, x, e^(-x))` for the coarse nodes with x = a c_k <=
/// ROW_HORIZON. Coarse nodes double (c_(k+3) = 2 c_k on the evaluation's
/// nodes), so past x = 1/64 e^(-x) is the square of the previous one: one
/// `exp` per row instead of one per node (squaring doubles the exponent's
/// error, so at x the relative error is at most 64 x · 1e-16 < 3e-13, far
/// below the model's own error). Below 1/64, where a square would carry
/// the rounding of 1 - x, e^(-x) is its Taylor polynomial.
fn exponentials(a: f64, coarse: &[f64], mut term: impl FnMut(usize, f64, f64)) {
    let mut previous: Option<f64> = None;
    for (k, &ck) in coarse.iter().enumerate() {
        let x = a * ck;
        if x > ROW_HORIZON {
            break;
        }
        let e = match previous {
            Some(e) => e * e,
            None if x < SQUARING_FROM => 1.0 + small_expm1(-x),
            None => (-x).exp(),
        };
        if x >= SQUARING_FROM {
            previous = Some(e);
        }
        term(k, x, e);
    }
}

#[cfg(test)]
mod tests {
    use nalgebra::{DMatrix, DVector};

    use super::{ROW_HORIZON, coarse_nodes, direction, exponential_table, exponentials};
    use crate::newton::Potential;
    use crate::potential::iid::Selectable;
    use crate::potential::nodes::Nodes;
    use crate::workspace::Workspace;

    /// A program of 30 tokens with weights spread over e^-6..e^1.5, some
    /// at theta = 0 held by their gradient, and undrafted mass.
    fn instance() -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<bool>) {
        let q: Vec<f64> = (1..=30).map(|i| (i % 7 + 1) as f64 / 170.0).collect();
        let theta: Vec<f64> = (0..q.len())
            .map(|i| {
                if i % 5 == 0 {
                    0.0
                } else {
                    0.25 * i as f64 - 6.0
                }
            })
            .collect();
        let gradient: Vec<f64> = (0..q.len())
            .map(|i| {
                if i % 2 == 0 {
                    1e-3 * q[i]
                } else {
                    -2e-3 * q[i]
                }
            })
            .collect();
        let held = (0..q.len())
            .map(|i| theta[i] == 0.0 && gradient[i] > 0.0)
            .collect();
        (q, theta, gradient, held)
    }

    /// The Newton direction of the model Hessian Λ - U W Uᵀ on the coarse
    /// nodes, built densely: what Woodbury's identity must give.
    fn dense_model(
        side: &Selectable,
        theta: &[f64],
        nodes: &Nodes,
        gradient: &[f64],
        held: &[bool],
    ) -> Vec<f64> {
        let free = super::free_weights(theta, held).expect("a free token");
        let (coarse, omega) = coarse_nodes(nodes, side.n, free);
        let u = DMatrix::from_fn(theta.len(), coarse.len(), |y, k| {
            let a = theta[y].exp();
            side.q[y] * a * (-a * coarse[k]).exp()
        });
        let w = DMatrix::from_diagonal(&DVector::from_iterator(
            omega.len(),
            omega.iter().map(|w| w * w),
        ));
        let coupling = &u * &w * u.transpose();
        let lambda = coupling.column_sum();
        let free: Vec<usize> = (0..theta.len()).filter(|&y| !held[y]).collect();
        let hessian = DMatrix::from_fn(free.len(), free.len(), |i, j| {
            let (y, z) = (free[i], free[j]);
            if i == j {
                lambda[y] - coupling[(y, z)]
            } else {
                -coupling[(y, z)]
            }
        });
        solve_on(&free, theta.len(), hessian, gradient)
    }

    /// The Newton direction of the exact Hessian, by central differences
    /// of r (step 1e-5; r is exact to 1e-14, and the result moved by under
    /// 1e-9 with steps 1e-4 and 1e-6).
    fn dense_newton(side: &Selectable, theta: &[f64], gradient: &[f64], held: &[bool]) -> Vec<f64> {
        let free: Vec<usize> = (0..theta.len()).filter(|&y| !held[y]).collect();
        let step = 1e-5;
        let marginal = |z: usize, by: f64| {
            let mut moved = theta.to_vec();
            moved[z] += by;
            side.evaluate(&moved, &mut Workspace::new()).marginal
        };
        let columns: Vec<Vec<f64>> = free
            .iter()
            .map(|&z| {
                let (up, down) = (marginal(z, step), marginal(z, -step));
                free.iter()
                    .map(|&y| (up[y] - down[y]) / (2.0 * step))
                    .collect()
            })
            .collect();
        let hessian = DMatrix::from_fn(free.len(), free.len(), |i, j| columns[j][i]);
        solve_on(&free, theta.len(), hessian, gradient)
    }

    /// d on the free tokens from `hessian` d = -g, zero elsewhere.
    fn solve_on(free: &[usize], v: usize, hessian: DMatrix<f64>, gradient: &[f64]) -> Vec<f64> {
        let rhs = DVector::from_iterator(free.len(), free.iter().map(|&y| -gradient[y]));
        let solution = hessian
            .lu()
            .solve(&rhs)
            .expect("nonsingular with undrafted mass");
        let mut d = vec![0.0; v];
        free.iter()
            .zip(solution.iter())
            .for_each(|(&y, &s)| d[y] = s);
        d
    }

    fn assert_close(d: &[f64], reference: &[f64], tolerance: f64, what: &str) {
        let scale = reference.iter().fold(0.0f64, |m, d| m.max(d.abs()));
        for (y, (a, b)) in d.iter().zip(reference).enumerate() {
            assert!(
                (a - b).abs() <= tolerance * scale,
                "{what}, token {y}: {a} vs {b}"
            );
        }
    }

    /// Token by token, the direction is the model's Newton direction to
    /// rounding (1e-12 of its largest entry: Woodbury's identity is exact),
    /// and the model's Hessian differs from the exact one only by the
    /// coarse nodes (step ln 2), which moved the direction by under 1.5e-5
    /// of its largest entry here: asserted within 5e-5. The buckets'
    /// first-order rows (relative error up to 2e-3) moved it by under 6e-4:
    /// asserted within 2e-3. Both are zero on held tokens.
    #[test]
    fn directions_are_newtons() {
        let (q, theta, gradient, held) = instance();
        for n in [2, 4, 8] {
            let base = 1.0 - q.iter().sum::<f64>();
            let side = Selectable { q: &q, base, n };
            let at = side.evaluate(&theta, &mut Workspace::new());
            let model = dense_model(&side, &theta, &at.hessian, &gradient, &held);
            let exact = dense_newton(&side, &theta, &gradient, &held);
            let (nodes, r) = (&at.hessian, &at.marginal);
            let at_theta = |grouped| {
                let mut workspace = Workspace::new();
                direction(
                    &side,
                    &theta,
                    nodes,
                    r,
                    &gradient,
                    &held,
                    grouped,
                    &mut workspace,
                )
            };
            let (tokens, buckets) = (at_theta(false), at_theta(true));
            assert_close(
                &tokens,
                &model,
                1e-12,
                &format!("n = {n}, tokens against the model"),
            );
            assert_close(
                &tokens,
                &exact,
                5e-5,
                &format!("n = {n}, tokens against Newton"),
            );
            assert_close(
                &buckets,
                &exact,
                2e-3,
                &format!("n = {n}, buckets against Newton"),
            );
            for d in [tokens, buckets] {
                assert!(d.iter().zip(&held).all(|(d, &h)| !h || *d == 0.0));
            }
        }
    }

    /// Held tokens at theta = 0 are one column of the table: with most
    /// tokens there (two in three at 0, half of those held), the direction
    /// is still the dense model's, to 1e-12 of its largest entry.
    #[test]
    fn held_tokens_at_zero_as_one_column() {
        let q: Vec<f64> = (1..=40).map(|i| (i % 7 + 1) as f64 / 170.0).collect();
        let base = 1.0 - q.iter().sum::<f64>();
        let theta: Vec<f64> = (0..q.len())
            .map(|i| if i % 3 == 0 { 0.2 * i as f64 } else { 0.0 })
            .collect();
        let gradient: Vec<f64> = (0..q.len())
            .map(|i| if i % 2 == 0 { 1e-3 } else { -2e-3 * q[i] })
            .collect();
        let held: Vec<bool> = (0..q.len())
            .map(|i| theta[i] == 0.0 && gradient[i] > 0.0)
            .collect();
        let side = Selectable { q: &q, base, n: 4 };
        let at = side.evaluate(&theta, &mut Workspace::new());
        let model = dense_model(&side, &theta, &at.hessian, &gradient, &held);
        let (nodes, r) = (&at.hessian, &at.marginal);
        let mut workspace = Workspace::new();
        let tokens = direction(
            &side,
            &theta,
            nodes,
            r,
            &gradient,
            &held,
            false,
            &mut workspace,
        );
        assert_close(&tokens, &model, 1e-12, "held tokens at 0 lumped");
        assert!(tokens.iter().zip(&held).all(|(d, &h)| !h || *d == 0.0));
    }

    /// The table's recurrences give e^(-a c) within their bound, 64 x ·
    /// 5e-16 relative plus rounding, at every coarse node up to ROW_HORIZON (and
    /// 0 past it), over weights from e^-30 to e^30, and the rows of
    /// `exponentials` within the same bound.
    #[test]
    fn exponential_table_matches_exp() {
        let coarse: Vec<f64> = (0..90).map(|k| 1e-12 * 2f64.powi(k)).collect();
        let weights: Vec<f64> = (-30..=30).map(|t| (t as f64 + 0.37).exp()).collect();
        let table = exponential_table(&weights, &coarse);
        for (k, row) in table.chunks_exact(weights.len()).enumerate() {
            for (&a, &e) in weights.iter().zip(row) {
                let x = a * coarse[k];
                let exact = if x <= ROW_HORIZON { (-x).exp() } else { 0.0 };
                let bound = (64.0 * x * 5e-16 + 1e-15) * exact;
                assert!((e - exact).abs() <= bound, "x = {x}: {e} vs {exact}");
            }
        }
        for (y, &a) in weights.iter().enumerate() {
            exponentials(a, &coarse, |k, x, e| {
                let entry = table[k * weights.len() + y];
                let bound = 2.0 * (64.0 * x * 5e-16 + 1e-15) * e;
                assert!((e - entry).abs() <= bound, "a = {a}, node {k}");
            });
        }
    }
}
