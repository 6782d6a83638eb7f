//! The selection potential for drafts from different draft models
//! (`docs/DESIGN.md` §6b): draft i is drawn from its own law q_i, and the
//! rule selects one draft index with probability proportional to e^(theta
//! of its token), as for i.i.d. drafts (module `selection`).
//!
//! With a_y = e^(theta_y), `base_i` the mass of q_i on tokens drafted but
//! never selected, s_i = base_i + Σ_y q_i(y) the mass of draft i's world
//! and phi_i(c) = base_i + Σ_y q_i(y) e^(-a_y c), the product of the
//! drafts' transforms replaces the i.i.d. power phi^n:
//!
//! * the selected token's law is
//!   `r_y = a_y Σ_i q_i(y) ∫_0^∞ e^(-a_y c) Π_{j≠i} phi_j(c) dc`
//!   (1/S = ∫ e^(-cS) dc, the drafts independent);
//! * the potential E[1{S > 0} log S] is (Frullani)
//!   `∫_0^∞ (m e^(-c) - (Π phi_i(c) - Π base_i)) / c dc`, m = Π s_i - Π
//!   base_i, whose gradient in theta is r;
//! * its Hessian is Diag(r) - E[π πᵀ], π the selection vector, with
//!   `E[π_y π_z] = a_y a_z ∫ c e^(-(a_y + a_z) c) Σ_{i≠j} q_i(y) q_j(z)
//!   Π_{k∉{i,j}} phi_k dc + [y = z] a_y² ∫ c e^(-a_y c) Σ_i q_i(y)
//!   Π_{j≠i} phi_j dc` (1/S² = ∫ c e^(-cS) dc).
//!
//! The integrals use the i.i.d. rule's nodes (trapezoidal in ln c), token
//! by token; the Newton direction is found by conjugate gradients on
//! Hessian-vector products, which cost O(n² V) per node, not by the
//! i.i.d. Hessian's Woodbury structure.

use crate::Workspace;
use crate::newton::{Evaluation, Potential, newton_by_conjugate_gradients};
use crate::selection::{STEP, left_tail, nodes};

/// The selectable tokens of one side of a problem with independent drafts.
pub(crate) struct Independent<'a> {
    /// q_i on the selectable tokens, one row per draft.
    pub q: &'a [Vec<f64>],
    /// Per draft, the mass of the tokens drafted but never selected.
    pub base: &'a [f64],
    /// Whether Newton's iteration may take the direction's component along
    /// 1 off (`Potential::flat_along_ones`): true for the outer and inner
    /// programs, false for the separating one over every drafted token,
    /// whose objective drifts along 1 by 1 - p(drafted tokens).
    pub flat: bool,
}

/// What a Newton direction needs of an evaluation: the nodes, each
/// draft's transform phi_i at each node, and the tokens' groups.
pub(crate) struct Kernels {
    c: Vec<f64>,
    /// phi[k][i] = phi_i(c_k).
    phi: Vec<Vec<f64>>,
    groups: Groups,
    /// e^(-a_g c_k), node after node, kept from the evaluation when the
    /// table is at most EXPONENTIALS_KEPT entries: the Hessian products
    /// of the conjugate gradients read it instead of computing it again.
    exponentials: Option<Vec<f64>>,
}

/// The most entries (nodes x groups) of the exponentials kept between an
/// evaluation and its Newton direction (32 MB).
const EXPONENTIALS_KEPT: usize = 1 << 22;

impl Kernels {
    /// e^(-a_g c_k) for every group g at node k: the kept row, or computed
    /// into `buffer`.
    fn exponentials<'a>(&'a self, k: usize, buffer: &'a mut Vec<f64>) -> &'a [f64] {
        let groups = self.groups.a.len();
        match &self.exponentials {
            Some(table) => &table[k * groups..(k + 1) * groups],
            None => {
                buffer.clear();
                buffer.extend(self.groups.a.iter().map(|&a| (-a * self.c[k]).exp()));
                buffer
            }
        }
    }
}

/// The tokens grouped by their weight a = e^theta: the integrals depend on
/// a token only through a, and at and near the optimum most tokens share
/// one of a few weights (those held at a bound), so each integral is
/// computed once per group and each token reads its group's.
struct Groups {
    /// The weight of each group.
    a: Vec<f64>,
    /// The group of each token.
    of: Vec<usize>,
}

impl Groups {
    fn new(theta: &[f64]) -> Self {
        let mut index = std::collections::HashMap::new();
        let mut a = Vec::new();
        let of = theta
            .iter()
            .map(|t| {
                *index.entry(t.to_bits()).or_insert_with(|| {
                    a.push(t.exp());
                    a.len() - 1
                })
            })
            .collect();
        Self { a, of }
    }

    /// Σ over each group's tokens of `x`, per draft: `sums[i][g]`.
    fn sums(&self, x: impl Fn(usize, usize) -> f64, drafts: usize) -> Vec<Vec<f64>> {
        let mut sums = vec![vec![0.0; self.a.len()]; drafts];
        for (y, &g) in self.of.iter().enumerate() {
            for (i, sum) in sums.iter_mut().enumerate() {
                sum[g] += x(i, y);
            }
        }
        sums
    }
}

/// Π_{j ∉ skip} phi_j.
fn product_without(phi: &[f64], skip: &[usize]) -> f64 {
    (phi.iter().enumerate())
        .filter(|(j, _)| !skip.contains(j))
        .map(|(_, f)| f)
        .product()
}

impl Independent<'_> {
    fn drafts(&self) -> usize {
        self.q.len()
    }

    /// Σ_i q_i(y) values[i][g(y)] for every token y.
    fn per_token(&self, groups: &Groups, values: &[Vec<f64>]) -> Vec<f64> {
        (groups.of.iter().enumerate())
            .map(|(y, &g)| {
                (0..self.drafts())
                    .map(|i| self.q[i][y] * values[i][g])
                    .sum()
            })
            .collect()
    }

    /// The Hessian times `v` (zero on the held variables).
    fn hessian_times(&self, r: &[f64], kernels: &Kernels, v: &[f64]) -> Vec<f64> {
        let n = self.drafts();
        let groups = &kernels.groups;
        let weighted = groups.sums(|i, z| self.q[i][z] * v[z], n);
        // Per group g and draft i: Σ_k w_k e^(-a_g c) Σ_{j≠i} K_ij psi_j
        // (cross) and Σ_k w_k e^(-a_g c) K_i (own), w_k = STEP c_k².
        let mut cross = vec![vec![0.0; groups.a.len()]; n];
        let mut own = vec![vec![0.0; groups.a.len()]; n];
        let mut buffer = Vec::new();
        for (k, (&c, phi)) in kernels.c.iter().zip(&kernels.phi).enumerate() {
            let weight = STEP * c * c;
            let e = kernels.exponentials(k, &mut buffer);
            // psi_j = Σ_z q_j(z) a_z v_z e^(-a_z c).
            let psi: Vec<f64> = (0..n)
                .map(|j| {
                    (0..e.len())
                        .map(|g| weighted[j][g] * groups.a[g] * e[g])
                        .sum()
                })
                .collect();
            for i in 0..n {
                let coupled: f64 = (0..n)
                    .filter(|&j| j != i)
                    .map(|j| product_without(phi, &[i, j]) * psi[j])
                    .sum();
                let alone = product_without(phi, &[i]);
                for (g, &e) in e.iter().enumerate() {
                    cross[i][g] += weight * e * coupled;
                    own[i][g] += weight * e * alone;
                }
            }
        }
        let (cross, own) = (self.per_token(groups, &cross), self.per_token(groups, &own));
        (0..r.len())
            .map(|y| {
                let a = groups.a[groups.of[y]];
                r[y] * v[y] - a * (cross[y] + a * v[y] * own[y])
            })
            .collect()
    }

    /// The Hessian's diagonal: r_y - E[π_y²].
    fn hessian_diagonal(&self, r: &[f64], kernels: &Kernels) -> Vec<f64> {
        let n = self.drafts();
        let groups = &kernels.groups;
        // Per group: pairs[i][j][g] = Σ_k w_k e^(-2 a_g c) K_ij, own[i][g] =
        // Σ_k w_k e^(-a_g c) K_i.
        let mut pairs = vec![vec![vec![0.0; groups.a.len()]; n]; n];
        let mut own = vec![vec![0.0; groups.a.len()]; n];
        let mut buffer = Vec::new();
        for (k, (&c, phi)) in kernels.c.iter().zip(&kernels.phi).enumerate() {
            let weight = STEP * c * c;
            let row = kernels.exponentials(k, &mut buffer);
            for (g, &e) in row.iter().enumerate() {
                for i in 0..n {
                    own[i][g] += weight * e * product_without(phi, &[i]);
                    for j in (0..n).filter(|&j| j != i) {
                        pairs[i][j][g] += weight * e * e * product_without(phi, &[i, j]);
                    }
                }
            }
        }
        let own = self.per_token(groups, &own);
        (0..r.len())
            .map(|y| {
                let g = groups.of[y];
                let a = groups.a[g];
                let coupled: f64 = (0..n)
                    .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
                    .map(|(i, j)| self.q[i][y] * self.q[j][y] * pairs[i][j][g])
                    .sum();
                r[y] - a * a * (coupled + own[y])
            })
            .collect()
    }
}

impl Potential for Independent<'_> {
    type Hessian = Kernels;

    fn evaluate(&self, theta: &[f64], _workspace: &mut Workspace) -> Evaluation<Kernels> {
        let n = self.drafts();
        let groups = Groups::new(theta);
        let mass = groups.sums(|i, y| self.q[i][y], n);
        let c = nodes(theta, n);
        let worlds: Vec<f64> = (0..n)
            .map(|i| self.base[i] + self.q[i].iter().sum::<f64>())
            .collect();
        let selectable = worlds.iter().product::<f64>() - self.base.iter().product::<f64>();
        // Per draft i and group g: Σ_k w_k a c_k e^(-a c_k) Π_{j≠i} phi_j.
        let mut selected = vec![vec![0.0; groups.a.len()]; n];
        let mut potential = 0.0;
        let mut phi_at = Vec::with_capacity(c.len());
        let mut exponentials = (c.len() * groups.a.len() <= EXPONENTIALS_KEPT)
            .then(|| Vec::with_capacity(c.len() * groups.a.len()));
        for (k, &ck) in c.iter().enumerate() {
            // The first node stands for the rule's infinite left end too,
            // where every integrand grows like c (`left_tail`).
            let weight = if k == 0 {
                STEP * (1.0 + left_tail())
            } else {
                STEP
            };
            // phi_i - s_i = Σ_y q_i(y) (e^(-a_y c) - 1), without cancellation;
            // e^(-a c) - 1 once per group for every draft.
            let expm1: Vec<f64> = groups.a.iter().map(|&a| (-a * ck).exp_m1()).collect();
            let shift: Vec<f64> = (0..n)
                .map(|i| mass[i].iter().zip(&expm1).map(|(q, m)| q * m).sum())
                .collect();
            let phi: Vec<f64> = worlds.iter().zip(&shift).map(|(s, d)| s + d).collect();
            // Π phi_i - Π s_i, accumulated factor by factor.
            let (mut worlds_so_far, mut product_shift) = (1.0, 0.0);
            for i in 0..n {
                product_shift = product_shift * phi[i] + worlds_so_far * shift[i];
                worlds_so_far *= worlds[i];
            }
            // (m e^(-c) - (Π phi - Π base)) = m (e^(-c) - 1) - (Π phi - Π s).
            potential += weight * (selectable * (-ck).exp_m1() - product_shift);
            let e: Vec<f64> = groups.a.iter().map(|&a| (-a * ck).exp()).collect();
            for (i, selected) in selected.iter_mut().enumerate() {
                let kernel = product_without(&phi, &[i]);
                for (g, (&a, &e)) in groups.a.iter().zip(&e).enumerate() {
                    selected[g] += weight * a * ck * e * kernel;
                }
            }
            if let Some(table) = exponentials.as_mut() {
                table.extend_from_slice(&e);
            }
            phi_at.push(phi);
        }
        Evaluation {
            potential,
            marginal: self.per_token(&groups, &selected),
            hessian: Kernels {
                c,
                phi: phi_at,
                groups,
                exponentials,
            },
        }
    }

    /// Newton's direction on the free variables by conjugate gradients on
    /// the Hessian-vector products, preconditioned by the diagonal.
    fn direction(
        &self,
        _theta: &[f64],
        at: &Evaluation<Kernels>,
        gradient: &[f64],
        held: &[bool],
        _workspace: &mut Workspace,
    ) -> Vec<f64> {
        let diagonal = self.hessian_diagonal(&at.marginal, &at.hessian);
        newton_by_conjugate_gradients(
            |v| self.hessian_times(&at.marginal, &at.hessian, v),
            &diagonal,
            &at.marginal,
            gradient,
            held,
        )
    }

    fn flat_along_ones(&self) -> bool {
        self.flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// r, by enumerating the draft tuples: the softmax of theta over each
    /// tuple's selectable drafts, weighted by the tuple's probability.
    fn enumerated(q: &[Vec<f64>], base: &[f64], theta: &[f64]) -> (Vec<f64>, f64) {
        // Token v stands for "drafted, never selected", of mass base_i.
        let v = theta.len();
        let n = q.len();
        let mut r = vec![0.0; v];
        let mut potential = 0.0;
        let mut tuple = vec![0usize; n];
        loop {
            let weight: f64 = (0..n)
                .map(|i| {
                    if tuple[i] == v {
                        base[i]
                    } else {
                        q[i][tuple[i]]
                    }
                })
                .product();
            let sum: f64 = tuple
                .iter()
                .filter(|&&x| x < v)
                .map(|&x| theta[x].exp())
                .sum();
            if weight > 0.0 && sum > 0.0 {
                potential += weight * sum.ln();
                for &x in tuple.iter().filter(|&&x| x < v) {
                    r[x] += weight * theta[x].exp() / sum;
                }
            }
            let mut i = 0;
            while i < n && tuple[i] == v {
                tuple[i] = 0;
                i += 1;
            }
            if i == n {
                return (r, potential);
            }
            tuple[i] += 1;
        }
    }

    /// The quadrature's r and potential match enumeration, for two and
    /// three drafts, with and without a never-selected mass, and inner
    /// worlds whose laws sum below 1.
    #[test]
    fn selected_law_and_potential_match_enumeration() {
        // (q per draft, base per draft, theta).
        type Case = (Vec<Vec<f64>>, Vec<f64>, Vec<f64>);
        let cases: Vec<Case> = vec![
            (
                vec![vec![0.5, 0.3, 0.2], vec![0.1, 0.1, 0.8]],
                vec![0.0, 0.0],
                vec![0.0, -1.0, -3.0],
            ),
            (
                vec![
                    vec![0.2, 0.3, 0.1],
                    vec![0.3, 0.1, 0.2],
                    vec![0.0, 0.5, 0.25],
                ],
                vec![0.4, 0.4, 0.25],
                vec![-0.5, 0.0, -12.0],
            ),
            (
                vec![vec![0.05, 0.1], vec![0.2, 0.1]],
                vec![0.0, 0.0],
                vec![0.0, 2.5],
            ),
            // Tied weights: one group of two tokens.
            (
                vec![vec![0.4, 0.3, 0.3], vec![0.2, 0.5, 0.3]],
                vec![0.0, 0.0],
                vec![-1.5, 0.0, -1.5],
            ),
        ];
        for (q, base, theta) in cases {
            let potential = Independent {
                q: &q,
                base: &base,
                flat: true,
            };
            let at = potential.evaluate(&theta, &mut Workspace::default());
            let (r, value) = enumerated(&q, &base, &theta);
            for (got, want) in at.marginal.iter().zip(&r) {
                assert!((got - want).abs() < 1e-13, "r {got} vs {want}");
            }
            assert!(
                (at.potential - value).abs() < 1e-12,
                "{} vs {value}",
                at.potential
            );
        }
    }

    /// The Hessian-vector product matches finite differences of r.
    #[test]
    fn hessian_times_matches_differences_of_r() {
        let q = vec![vec![0.4, 0.3, 0.2, 0.1], vec![0.1, 0.5, 0.3, 0.1]];
        let base = vec![0.0, 0.0];
        let theta = vec![0.0, -2.0, -0.7, -2.0];
        let potential = Independent {
            q: &q,
            base: &base,
            flat: true,
        };
        let mut workspace = Workspace::default();
        let at = potential.evaluate(&theta, &mut workspace);
        let v = [0.3, -0.2, 0.5, 0.1];
        let hv = potential.hessian_times(&at.marginal, &at.hessian, &v);
        let h = 1e-6;
        let mut moved = |s: f64| {
            let t: Vec<f64> = theta.iter().zip(&v).map(|(t, v)| t + s * v).collect();
            potential.evaluate(&t, &mut workspace).marginal
        };
        let (plus, minus) = (moved(h), moved(-h));
        for y in 0..4 {
            let want = (plus[y] - minus[y]) / (2.0 * h);
            assert!((hv[y] - want).abs() < 1e-7, "{} vs {want}", hv[y]);
        }
        // Without the kept exponentials (past EXPONENTIALS_KEPT), the same.
        let mut unkept = potential.evaluate(&theta, &mut workspace);
        assert!(unkept.hessian.exponentials.take().is_some());
        let again = potential.hessian_times(&unkept.marginal, &unkept.hessian, &v);
        assert!(hv.iter().zip(&again).all(|(a, b)| (a - b).abs() < 1e-15));
        let diagonal = potential.hessian_diagonal(&at.marginal, &at.hessian);
        let recomputed = potential.hessian_diagonal(&unkept.marginal, &unkept.hessian);
        assert!(
            diagonal
                .iter()
                .zip(&recomputed)
                .all(|(a, b)| (a - b).abs() < 1e-15)
        );
        for y in 0..4 {
            let mut unit = [0.0; 4];
            unit[y] = 1.0;
            let column = potential.hessian_times(&at.marginal, &at.hessian, &unit);
            assert!((diagonal[y] - column[y]).abs() < 1e-12);
        }
    }
}
