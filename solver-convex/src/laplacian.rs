//! The Newton direction of the selection potential (module `quadrature`)
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
//! Two approximations keep it cheap, and only cost Newton's rate, never
//! exactness (the line search and the stop rule use the exact r):
//! * every third node of the evaluation (step ln 2: relative error
//!   e^(-π² / ln 2), about 7e-7);
//! * rows of U from buckets of theta (`Assignment`) to first order in the
//!   offset δ = a / a_b - 1: `e^(-a c) ≈ e^(-x) (1 - δ x)`, x = a_b c <=
//!   `LIMIT`, so that every sum over tokens is a sum over buckets of two or
//!   three moments (relative error (δ x)² / 2, below 2e-3 where e^(-x) >
//!   1e-7). Λ is built from the same rows, so the model stays a Laplacian
//!   with nonnegative weights (positive semidefinite).

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use crate::quadrature::{Assignment, Nodes, STEP, Selectable, small_expm1};

/// Nodes with x = a_b c above this are left out of a bucket's row: e^(-40)
/// is negligible, and 1 - δ x stays positive (|δ| < 0.016).
const LIMIT: f64 = 40.0;

/// The (approximate) Newton direction of `side` at theta, whose
/// evaluation gave `nodes` and r = `marginal`: zero on `held` tokens.
pub(crate) fn direction(
    side: &Selectable,
    theta: &[f64],
    nodes: &Nodes,
    marginal: &[f64],
    gradient: &[f64],
    held: &[bool],
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
    let Nodes { c, phi } = nodes;
    let coarse: Vec<f64> = c.iter().step_by(3).copied().collect();
    let scale = (n * (n - 1)) as f64 * 3.0 * STEP;
    let omega: Vec<f64> = c
        .iter()
        .zip(phi)
        .step_by(3)
        .map(|(ck, f)| (scale * ck * ck * f.powi(n as i32 - 2)).sqrt())
        .collect();
    // Nodes of weight W_k = ω_k² below 1e-16 of the largest change the
    // model by less than its own rounding: at both ends (c² at small c,
    // phi^(n-2) at large c) they are about a quarter of the nodes, and the
    // system's cost grows with their square.
    let largest = omega.iter().fold(0.0f64, |m, &w| m.max(w));
    let weighty = |w: &f64| *w >= 1e-8 * largest;
    let first = omega.iter().position(weighty).unwrap_or(0);
    let end = omega.iter().rposition(weighty).map_or(first, |k| k + 1);
    let (coarse, omega) = (coarse[first..end].to_vec(), omega[first..end].to_vec());

    let tokens = Assignment::new(theta);
    let qa =
        |y: usize| side.q[y] * tokens.centre[tokens.slot[y] as usize] * (1.0 + tokens.delta[y]);
    let all = tokens.moments::<2>(qa);
    // Per occupied bucket, (x, e^(-x)) at the coarse nodes with x <= LIMIT.
    let occupied: Vec<usize> = (0..all.len()).filter(|&b| all[b][0] > 0.0).collect();
    let rows: Vec<Vec<(f64, f64)>> = occupied
        .iter()
        .map(|&b| row_exponentials(tokens.centre[b], &coarse))
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
    let weighted: Vec<f64> = ones.iter().zip(&omega).map(|(s, w)| s * w * w).collect();
    let diagonal_rows: Vec<(f64, f64)> = rows
        .iter()
        .map(|row| {
            (
                node_sum(row, 1.0, 0.0, &weighted),
                node_sum(row, 0.0, -1.0, &weighted),
            )
        })
        .collect();
    let lambda: Vec<f64> = (0..theta.len())
        .into_par_iter()
        .with_min_len(4096)
        .map(|y| {
            let (lam, mu) = diagonal_rows[index[tokens.slot[y] as usize]];
            (qa(y) * (lam - tokens.delta[y] * mu))
                .max(1e-12 * marginal[y])
                .max(1e-300)
        })
        .collect();

    // C = Uᵀ Λ⁻¹ U and t = Uᵀ Λ⁻¹ g over the free tokens.
    let free = |y: usize| if held[y] { 0.0 } else { 1.0 };
    let second = tokens.moments::<3>(|y| free(y) * qa(y) * qa(y) / lambda[y]);
    let first = tokens.moments::<2>(|y| free(y) * qa(y) * gradient[y] / lambda[y]);
    // Bucket b adds U_b M_b U_bᵀ to C, U_b's columns (e_k, x_k e_k) on its
    // row's nodes, M_b = [[m0, -m1], [-m1, m2]] positive semidefinite (the
    // moments of δ under non-negative weights). With M_b = L Lᵀ that is two
    // columns of a factor G, ω C ω = G Gᵀ: one matrix product (SIMD in
    // matrixmultiply) instead of a rank-3 update per bucket, which at
    // k = 1000 tokens was most of the cost of a Newton step.
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
    let mut system = DMatrix::<f64>::identity(k_count, k_count);
    system.gemm(-1.0, &factor, &factor.transpose(), 1.0);
    rhs.iter_mut().zip(&omega).for_each(|(t, w)| *t *= w);
    // Singular along theta + t·1 when every token is free: a ridge.
    let solution = [0.0, 1e-12, 1e-10, 1e-8, 1e-6]
        .into_iter()
        .find_map(|ridge| {
            let ridged = &system + DMatrix::identity(k_count, k_count) * ridge;
            ridged.cholesky().map(|factor| factor.solve(&rhs))
        })
        .unwrap_or_else(|| DVector::zeros(k_count));
    let z: Vec<f64> = solution.iter().zip(&omega).map(|(y, w)| y * w).collect();
    let coupled: Vec<(f64, f64)> = rows
        .iter()
        .map(|row| (node_sum(row, 1.0, 0.0, &z), node_sum(row, 0.0, -1.0, &z)))
        .collect();
    (0..theta.len())
        .into_par_iter()
        .with_min_len(4096)
        .map(|y| {
            if held[y] {
                return 0.0;
            }
            let (zeta, xi) = coupled[index[tokens.slot[y] as usize]];
            -(gradient[y] + qa(y) * (zeta - tokens.delta[y] * xi)) / lambda[y]
        })
        .collect()
}

/// (x, e^(-x)) at the coarse nodes with x = a c <= LIMIT. Coarse nodes
/// double (c_(k+3) = 2 c_k on the evaluation's nodes), so past x = 1/64
/// e^(-x) is the square of the previous one: one `exp` per bucket instead
/// of one per node (squaring doubles the exponent's error, so at x the
/// relative error is at most 64 x · 1e-16 < 3e-13, far below the model's
/// own first-order error). Below 1/64, where a square would carry the
/// rounding of 1 - x, e^(-x) is its Taylor polynomial.
fn row_exponentials(a: f64, coarse: &[f64]) -> Vec<(f64, f64)> {
    const SQUARING_FROM: f64 = 1.0 / 64.0;
    let mut row = Vec::with_capacity(coarse.len());
    let mut previous: Option<f64> = None;
    for &ck in coarse {
        let x = a * ck;
        if x > LIMIT {
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
        row.push((x, e));
    }
    row
}
