//! The selection potential for drafts from different draft models
//! (`docs/DESIGN.md` §6b): draft i is drawn from its own law q_i, and the
//! rule selects one draft index with probability proportional to e^(theta
//! of its token), as for i.i.d. drafts (`potential::iid`).
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
//! The integrals use the i.i.d. rule's nodes (trapezoidal in ln c), and
//! their sums over tokens run as the i.i.d. rule's (`potential::iid::Sums`):
//! through buckets of theta for large programs (per bucket, a series in
//! each token's offset from its centre), so that each sum costs O(V)
//! multiplications plus O(buckets x nodes) exponentials, however many
//! distinct weights the tokens take, and token by token for small ones;
//! the tokens at the least and the greatest weight, where the held ones
//! sit, count as one token each (`Compact`). The Newton direction is
//! found by conjugate gradients on Hessian-vector products over the free
//! tokens (`FreeHessian`), each 2n such sums, not by the i.i.d. Hessian's
//! Woodbury structure.
//!
//! Drafts drawn from one law (several samples of one draft model) share
//! their phi_i, and so their terms: the potential holds each distinct law
//! once with its count of drafts (`counts`), every sum over tokens runs
//! once per distinct law, with the kernels of a law's drafts added up, and
//! only the products over drafts at each node, O(n) numbers, run draft by
//! draft (`per_draft`). Two samples from each of two models cost what two
//! drafts cost, not four.

use mdsd_core::powi_count;

use crate::newton::{Evaluation, Potential, newton_by_conjugate_gradients};
use crate::numeric::{lane_sum, sum_where};
use crate::potential::iid::Sums;
use crate::potential::nodes::{STEP, left_tail, nodes};
use crate::workspace::Workspace;

/// The selectable tokens of one side of a problem with independent drafts.
pub(crate) struct Independent<'a> {
    /// q on the selectable tokens, one row per distinct draft law.
    pub q: &'a [Vec<f64>],
    /// Per law, the number of drafts drawn from it (n in all).
    pub counts: &'a [usize],
    /// Per law, the mass of the tokens drafted but never selected.
    pub base: &'a [f64],
    /// Whether Newton's iteration may take the direction's component along
    /// 1 off (`Potential::flat_along_ones`): true for the outer and inner
    /// programs, false for the separating one over every drafted token,
    /// whose objective drifts along 1 by 1 - p(drafted tokens).
    pub flat: bool,
    /// Per law, the mass of its world, s_i = base_i + Σ q_i: every
    /// evaluation's, summed once.
    worlds: Vec<f64>,
    /// Per draft, its law; per law, its first draft.
    law_of: Vec<usize>,
    first: Vec<usize>,
}

impl<'a> Independent<'a> {
    pub(crate) fn new(q: &'a [Vec<f64>], counts: &'a [usize], base: &'a [f64], flat: bool) -> Self {
        let worlds = (q.iter().zip(base))
            .map(|(law, base)| base + lane_sum(law))
            .collect();
        let law_of: Vec<usize> = (counts.iter().enumerate())
            .flat_map(|(law, &count)| std::iter::repeat_n(law, count))
            .collect();
        let first = (counts.iter())
            .scan(0, |first, &count| {
                let this = *first;
                *first += count;
                Some(this)
            })
            .collect();
        Self {
            q,
            counts,
            base,
            flat,
            worlds,
            law_of,
            first,
        }
    }

    /// P(S > 0): some draft on a selectable token, Π_i (base_i + Σ q_i) -
    /// Π_i base_i, the total of r whatever theta.
    pub(crate) fn selected_mass(&self) -> f64 {
        over_drafts(&self.worlds, self.counts) - over_drafts(self.base, self.counts)
    }

    /// A value per law as one per draft.
    fn per_draft(&self, per_law: impl Fn(usize) -> f64) -> Vec<f64> {
        self.law_of.iter().map(|&law| per_law(law)).collect()
    }

    /// Law `law`'s count of drafts as a factor.
    fn count(&self, law: usize) -> f64 {
        self.counts[law] as f64
    }
}

/// Per law, the derivative of Π over the drafts of their law's value in
/// that law's value: its count times the product over its other drafts
/// and every other law's.
pub(crate) fn draft_weights(per_law: &[f64], counts: &[usize]) -> Vec<f64> {
    (0..per_law.len())
        .map(|law| {
            let others: f64 = (per_law.iter().zip(counts).enumerate())
                .map(|(other, (&x, &count))| match other == law {
                    true => powi_count(x, count - 1),
                    false => powi_count(x, count),
                })
                .product();
            counts[law] as f64 * others
        })
        .collect()
}

/// Π over the drafts of their law's value: each law's value to the power
/// of its count.
pub(crate) fn over_drafts(per_law: &[f64], counts: &[usize]) -> f64 {
    (per_law.iter().zip(counts))
        .map(|(&x, &count)| powi_count(x, count))
        .product()
}

/// What a Newton direction needs of an evaluation: the nodes, each
/// draft's transform phi_i at each node, and the tokens ready for sums.
pub(crate) struct Kernels {
    c: Vec<f64>,
    /// phi[k][i] = phi_i(c_k).
    phi: Vec<Vec<f64>>,
    /// The compact tokens (`Compact`) ready for node sums, and where each
    /// token's row is.
    tokens: Sums,
    rows: Rows,
}

/// The tokens with the tokens at the least and at the greatest weight
/// (where a program's held tokens sit: H's at the lower bound in the
/// separating program, most of H at 0 in the inner one) as one token
/// each, of their total q_i: every integral depends on a token only
/// through its weight, so this is exact, and an evaluation then costs per
/// token only for the others. No vocabulary-sized map of rows is made:
/// a token's row follows from its weight and the kept tokens (`Rows`).
struct Compact {
    /// The ends' weights, then the kept tokens'.
    theta: Vec<f64>,
    /// q_i per row, one vector per draft.
    q: Vec<Vec<f64>>,
    rows: Rows,
}

/// Where each token's row of a `Compact` is: rows 0 and 1 are the least
/// and the greatest weight (one row when they are equal), the kept
/// tokens (at neither) follow in order.
struct Rows {
    least: f64,
    greatest: f64,
    /// The kept tokens, ascending.
    kept: Vec<usize>,
}

impl Rows {
    fn ends(&self) -> usize {
        1 + usize::from(self.least < self.greatest)
    }

    /// The end row of a token at weight `theta`, if it is at one.
    fn end(&self, theta: f64) -> Option<usize> {
        (theta == self.least || theta == self.greatest)
            .then(|| usize::from(theta == self.greatest && self.least < self.greatest))
    }

    /// Token y's row, its weight `theta`.
    fn row(&self, y: usize, theta: f64) -> usize {
        self.end(theta).unwrap_or_else(|| {
            let place = (self.kept.binary_search(&y)).expect("a token at neither end is kept");
            self.ends() + place
        })
    }
}

impl Compact {
    /// The compact tokens of weights `theta`, whose laws `q` have the
    /// masses `totals`.
    fn new(theta: &[f64], q: &[Vec<f64>], totals: &[f64]) -> Self {
        let (least, greatest) = (theta.iter())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &t| {
                (lo.min(t), hi.max(t))
            });
        // Most tokens sit at an end (the separating program's at the
        // least, the inner program's at the greatest): the kept ones are
        // few. On the calling thread: a pass this light costs less than
        // waking the pool's other workers.
        let kept: Vec<usize> = (0..theta.len())
            .filter(|&y| theta[y] != least && theta[y] != greatest)
            .collect();
        let rows = Rows {
            least,
            greatest,
            kept,
        };
        if theta.is_empty() {
            return Self {
                theta: Vec::new(),
                q: vec![Vec::new(); q.len()],
                rows,
            };
        }
        let ends = rows.ends();
        let mut compact_theta = vec![least, greatest];
        compact_theta.truncate(ends);
        compact_theta.extend(rows.kept.iter().map(|&y| theta[y]));
        // Each law's mass at the ends, then its kept tokens' q; the least
        // weight's mass is what the others leave of the law's (an error
        // of its rounding, 1e-16, in phi's absolute terms).
        // The mass at the greatest weight by a masked sum without a branch
        // (`sum_where`): whether a token is there follows no pattern along
        // the vocabulary.
        let compact_q = (q.iter().zip(totals))
            .map(|(law, total)| {
                let greatest_mass = match ends {
                    1 => 0.0,
                    _ => sum_where(law, theta, |t| t == greatest),
                };
                let kept: Vec<f64> = rows.kept.iter().map(|&y| law[y]).collect();
                let least_mass = total - greatest_mass - lane_sum(&kept);
                let mut compact = vec![least_mass, greatest_mass];
                compact.truncate(ends);
                compact.extend(kept);
                compact
            })
            .collect();
        Self {
            theta: compact_theta,
            q: compact_q,
            rows,
        }
    }
}

impl Kernels {
    /// Per node, `STEP c_k² f(phi at c_k)`: the weights of the Hessian's
    /// integrals (1/S² = ∫ c e^(-cS) dc, times the Jacobian c of c = e^u).
    fn hessian_kernel(&self, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
        (self.c.iter().zip(&self.phi))
            .map(|(&c, phi)| STEP * c * c * f(phi))
            .collect()
    }
}

/// Π_{j ∉ skip} phi_j.
fn product_without(phi: &[f64], skip: &[usize]) -> f64 {
    (phi.iter().enumerate())
        .filter(|(j, _)| !skip.contains(j))
        .map(|(_, f)| f)
        .product()
}

/// Σ_i q_i(y) values[i][y] for every token y.
fn per_token(q: &[Vec<f64>], values: &[Vec<f64>]) -> Vec<f64> {
    let mut sum = vec![0.0; q.first().map_or(0, Vec::len)];
    for (q, values) in q.iter().zip(values) {
        (sum.iter_mut().zip(q).zip(values)).for_each(|((s, q), v)| *s += q * v);
    }
    sum
}

impl Independent<'_> {
    fn drafts(&self) -> usize {
        self.law_of.len()
    }
}

/// The Hessian on the free tokens of a Newton direction (its products
/// with vectors zero on the held tokens need no sum over those): their
/// q_i, r and buckets, the evaluation's nodes and phi, and `own`.
struct FreeHessian<'a> {
    /// q of each law on the free tokens.
    q: Vec<Vec<f64>>,
    /// The potential, whose drafts (per law its count and first draft,
    /// per draft its law) the products read.
    potential: &'a Independent<'a>,
    r: Vec<f64>,
    tokens: Sums,
    kernels: &'a Kernels,
    /// E[π_y²] / a_y² without its cross-draft part: Σ_i q_i(y) ∫ c
    /// e^(-a_y c) Π_{j≠i} phi_j dc, what the diagonal and the products
    /// share.
    own: Vec<f64>,
}

impl<'a> FreeHessian<'a> {
    fn new(
        potential: &'a Independent<'a>,
        theta: &[f64],
        at: &'a Evaluation<Kernels>,
        free: &[usize],
    ) -> Self {
        let kernels = &at.hessian;
        let rows: Vec<usize> = (free.iter())
            .map(|&y| kernels.rows.row(y, theta[y]))
            .collect();
        let tokens = kernels.tokens.restrict(&rows);
        let q: Vec<Vec<f64>> = (potential.q.iter())
            .map(|law| free.iter().map(|&y| law[y]).collect())
            .collect();
        let values: Vec<Vec<f64>> = (0..q.len())
            .map(|law| {
                let (first, count) = (potential.first[law], potential.count(law));
                let kernel = kernels.hessian_kernel(|phi| count * product_without(phi, &[first]));
                tokens.smooth(&kernels.c, &kernel, 1, 2)
            })
            .collect();
        Self {
            own: per_token(&q, &values),
            r: free.iter().map(|&y| at.marginal[y]).collect(),
            potential,
            q,
            tokens,
            kernels,
        }
    }

    /// The Hessian times `v`.
    fn times(&self, v: &[f64]) -> Vec<f64> {
        let (kernels, tokens, drafts) = (self.kernels, &self.tokens, self.potential);
        let n = drafts.drafts();
        // psi_j(c_k) = Σ_z q_j(z) a_z v_z e^(-a_z c_k), once per law.
        let psi: Vec<Vec<f64>> = (self.q.iter())
            .map(|law| tokens.transform(|z| law[z] * tokens.weight(z) * v[z], &kernels.c, false))
            .collect();
        // Per draft i: ∫ c e^(-a_y c) Σ_{j≠i} Π_{k∉{i,j}} phi_k psi_j dc,
        // the same for the drafts of one law: once per law, times its
        // count.
        let cross: Vec<Vec<f64>> = (0..self.q.len())
            .map(|law| {
                let (i, count) = (drafts.first[law], drafts.count(law));
                let kernel: Vec<f64> = (kernels.c.iter().zip(&kernels.phi).enumerate())
                    .map(|(k, (&c, phi))| {
                        let coupled: f64 = (0..n)
                            .filter(|&j| j != i)
                            .map(|j| product_without(phi, &[i, j]) * psi[drafts.law_of[j]][k])
                            .sum();
                        STEP * c * c * count * coupled
                    })
                    .collect();
                tokens.smooth(&kernels.c, &kernel, 1, 2)
            })
            .collect();
        let cross = per_token(&self.q, &cross);
        (0..v.len())
            .map(|y| {
                let a = tokens.weight(y);
                self.r[y] * v[y] - a * (cross[y] + a * v[y] * self.own[y])
            })
            .collect()
    }

    /// The diagonal: r_y - E[π_y²]; the part of two drafts on one token
    /// has e^(-2 a_y c).
    fn diagonal(&self) -> Vec<f64> {
        let (laws, kernels, tokens) = (self.q.len(), self.kernels, &self.tokens);
        let (counts, first) = (self.potential.counts, &self.potential.first);
        let mut pairs = vec![0.0; self.r.len()];
        // The pairs of drafts i < j by their laws: k (k - 1) / 2 of one law
        // of k drafts, k k' of two laws, each pair of a kind with one
        // kernel.
        for l in 0..laws {
            for m in l..laws {
                let (count, j) = match l == m {
                    true => (counts[l] * counts[l].saturating_sub(1) / 2, first[l] + 1),
                    false => (counts[l] * counts[m], first[m]),
                };
                if count == 0 {
                    continue;
                }
                let i = first[l];
                let kernel = kernels.hessian_kernel(|phi| product_without(phi, &[i, j]));
                let values = tokens.smooth(&kernels.c, &kernel, 2, 2);
                // Both orders of the two drafts.
                let factor = 2.0 * count as f64;
                (pairs.iter_mut().zip(values).enumerate())
                    .for_each(|(y, (p, x))| *p += factor * self.q[l][y] * self.q[m][y] * x);
            }
        }
        (0..self.r.len())
            .map(|y| {
                let a = tokens.weight(y);
                self.r[y] - a * a * (pairs[y] + self.own[y])
            })
            .collect()
    }
}

impl Potential for Independent<'_> {
    type Hessian = Kernels;

    fn evaluate(&self, theta: &[f64], workspace: &mut Workspace) -> Evaluation<Kernels> {
        let n = self.drafts();
        let totals: Vec<f64> = (self.worlds.iter().zip(self.base))
            .map(|(world, base)| world - base)
            .collect();
        let compact = Compact::new(theta, self.q, &totals);
        let c = nodes(&compact.theta, n);
        let tokens = Sums::new(&compact.theta, &c, workspace);
        // phi_i - s_i = Σ_y q_i(y) (e^(-a_y c) - 1), without cancellation.
        let shifts: Vec<Vec<f64>> = (compact.q.iter())
            .map(|law| tokens.transform(|y| law[y], &c, true))
            .collect();
        let worlds = self.per_draft(|law| self.worlds[law]);
        let selectable = self.selected_mass();
        let mut potential = 0.0;
        let mut phi_at = Vec::with_capacity(c.len());
        for (k, &ck) in c.iter().enumerate() {
            // The first node stands for the rule's infinite left end too,
            // where every integrand grows like c (`left_tail`).
            let weight = if k == 0 {
                STEP * (1.0 + left_tail(STEP))
            } else {
                STEP
            };
            let phi = self.per_draft(|law| self.worlds[law] + shifts[law][k]);
            // Π phi_i - Π s_i, accumulated factor by factor.
            let (mut worlds_so_far, mut product_shift) = (1.0, 0.0);
            for i in 0..n {
                product_shift = product_shift * phi[i] + worlds_so_far * shifts[self.law_of[i]][k];
                worlds_so_far *= worlds[i];
            }
            // (m e^(-c) - (Π phi - Π base)) = m (e^(-c) - 1) - (Π phi - Π s).
            potential += weight * (selectable * (-ck).exp_m1() - product_shift);
            phi_at.push(phi);
        }
        // r_y = a_y Σ_i q_i(y) ∫ e^(-a_y c) Π_{j≠i} phi_j dc, each integral
        // with the Jacobian c of c = e^u; the drafts of one law have one
        // kernel, taken once per law with its count.
        let selected: Vec<Vec<f64>> = (0..self.q.len())
            .map(|law| {
                let (first, count) = (self.first[law], self.count(law));
                let kernel: Vec<f64> = (c.iter().zip(&phi_at))
                    .map(|(&ck, phi)| STEP * ck * count * product_without(phi, &[first]))
                    .collect();
                tokens.smooth(&c, &kernel, 1, 1)
            })
            .collect();
        let rows = compact.rows;
        // r_y = Σ_i q_i(y) a_row selected_i(row): per end row, a_row
        // selected_i(row) once, then the tokens at the ends (on the calling
        // thread, as `Compact::new`'s passes), then the kept ones.
        let factors = |row: usize| -> Vec<f64> {
            let a = tokens.weight(row);
            selected.iter().map(|values| a * values[row]).collect()
        };
        let at_ends: Vec<Vec<f64>> = (0..rows.ends().min(theta.len())).map(factors).collect();
        // A pass over the vocabulary per law, each without a branch (a
        // select per token of its end's factor, 0 at neither end).
        let mut marginal = workspace.filled(theta.len(), 0.0);
        if let (Some(at_least), Some(at_greatest)) = (at_ends.first(), at_ends.last()) {
            for (i, law) in self.q.iter().enumerate() {
                let (least, greatest) = (at_least[i], at_greatest[i]);
                (marginal.iter_mut().zip(theta).zip(law)).for_each(|((r, &t), &q)| {
                    let factor = if t == rows.least {
                        least
                    } else if t == rows.greatest {
                        greatest
                    } else {
                        0.0
                    };
                    *r += q * factor;
                });
            }
        }
        for (place, &y) in rows.kept.iter().enumerate() {
            let row = rows.ends() + place;
            let sum: f64 = (self.q.iter().zip(&selected))
                .map(|(law, values)| law[y] * values[row])
                .sum();
            marginal[y] = tokens.weight(row) * sum;
        }
        let kernels = Kernels {
            c,
            phi: phi_at,
            tokens,
            rows,
        };
        Evaluation {
            potential,
            marginal,
            hessian: kernels,
        }
    }

    /// Newton's direction on the free variables by conjugate gradients on
    /// the Hessian-vector products, preconditioned by the diagonal: on
    /// the free tokens alone (in the separating program at the full
    /// vocabulary, H's tokens are most of them and held).
    fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<Kernels>,
        gradient: &[f64],
        held: &[bool],
        enough: f64,
        workspace: &mut Workspace,
    ) -> Vec<f64> {
        let free: Vec<usize> = (0..held.len()).filter(|&y| !held[y]).collect();
        let hessian = FreeHessian::new(self, theta, at, &free);
        let free_gradient: Vec<f64> = free.iter().map(|&y| gradient[y]).collect();
        let step = newton_by_conjugate_gradients(
            |v| hessian.times(v),
            &hessian.diagonal(),
            &hessian.r,
            &free_gradient,
            &vec![false; free.len()],
            enough,
        );
        let mut direction = workspace.filled(held.len(), 0.0);
        free.iter().zip(step).for_each(|(&y, d)| direction[y] = d);
        direction
    }

    fn flat_along_ones(&self) -> bool {
        self.flat
    }

    /// P(y ∈ S; world), every draft in the world and one on y: Π_i s_i
    /// (1 - Π_i (1 - x_i)), x_i = q_i(y) / s_i, with 1 - Π (1 - x_i) =
    /// P(some draft on y) summed draft by draft as P + x_i (1 - P), free
    /// of the cancellation of Π s_i - Π (s_i - q_i(y)) for a token of
    /// small q.
    fn saturation(&self) -> Option<impl Fn(usize) -> f64 + '_> {
        let worlds = over_drafts(&self.worlds, self.counts);
        Some(move |y: usize| {
            if worlds <= 0.0 {
                return 0.0;
            }
            let some = (self.law_of.iter()).fold(0.0, |some, &law| {
                some + self.q[law][y] / self.worlds[law] * (1.0 - some)
            });
            worlds * some
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::potential::iid::Selectable;

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
            // Every token at one weight: one row.
            (
                vec![vec![0.3, 0.3, 0.2], vec![0.1, 0.6, 0.2]],
                vec![0.2, 0.1],
                vec![-0.5, -0.5, -0.5],
            ),
            // Tied weights: one group of two tokens.
            (
                vec![vec![0.4, 0.3, 0.3], vec![0.2, 0.5, 0.3]],
                vec![0.0, 0.0],
                vec![-1.5, 0.0, -1.5],
            ),
        ];
        for (q, base, theta) in cases {
            let ones = vec![1; q.len()];
            let potential = Independent::new(&q, &ones, &base, true);
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

    /// The limit of r_y as theta_y grows (`Potential::saturation`) is
    /// P(y ∈ S; world) by enumeration of the draft tuples, and for one law
    /// repeated, the i.i.d. potential's closed form: with and without a
    /// never-selected mass, a world below 1 and a token of q 1e-12.
    #[test]
    fn saturation_is_the_inclusion_probability() {
        // (q per draft, base per draft).
        let cases: [(Vec<Vec<f64>>, Vec<f64>); 4] = [
            (
                vec![vec![0.5, 0.3, 0.2], vec![0.1, 0.1, 0.8]],
                vec![0.0, 0.0],
            ),
            (
                vec![
                    vec![0.2, 0.3, 0.1],
                    vec![0.3, 0.1, 0.2],
                    vec![0.0, 0.5, 0.25],
                ],
                vec![0.4, 0.4, 0.25],
            ),
            (vec![vec![0.05, 0.1], vec![0.2, 0.1]], vec![0.0, 0.0]),
            (vec![vec![0.3, 1e-12, 0.2]; 3], vec![0.2; 3]),
        ];
        for (q, base) in cases {
            let ones = vec![1; q.len()];
            let potential = Independent::new(&q, &ones, &base, true);
            let limit = potential.saturation().expect("independent drafts know it");
            let v = q[0].len();
            let mut inclusion = vec![0.0; v];
            let mut tuple = vec![0usize; q.len()];
            'tuples: loop {
                let weight: f64 = (tuple.iter().zip(&q).zip(&base))
                    .map(|((&x, law), &b)| if x == v { b } else { law[x] })
                    .product();
                for (y, inclusion) in inclusion.iter_mut().enumerate() {
                    if tuple.contains(&y) {
                        *inclusion += weight;
                    }
                }
                for x in tuple.iter_mut() {
                    if *x < v {
                        *x += 1;
                        continue 'tuples;
                    }
                    *x = 0;
                }
                break;
            }
            for (y, want) in inclusion.iter().enumerate() {
                let got = limit(y);
                assert!(
                    (got - want).abs() <= 1e-15 + 1e-13 * want,
                    "token {y}: {got} vs {want}"
                );
            }
            if q.iter().all(|law| *law == q[0]) && base.iter().all(|&b| b == base[0]) {
                let iid = Selectable {
                    q: &q[0],
                    base: base[0],
                    n: q.len(),
                };
                let closed = iid.saturation().expect("i.i.d. drafts know it");
                for y in 0..v {
                    assert!(
                        (closed(y) - limit(y)).abs() <= 1e-13 * limit(y),
                        "token {y}"
                    );
                }
            }
        }
    }

    /// Each distinct law once with its count of drafts gives what its
    /// drafts give one by one: the potential, r, the Hessian's products
    /// and diagonal, the saturation and P(S > 0), to rounding, on free
    /// and held tokens, with and without a never-selected mass.
    #[test]
    fn a_law_counted_once_is_its_drafts() {
        let (a, b) = (vec![0.4, 0.3, 0.2, 0.05], vec![0.1, 0.5, 0.25, 0.1]);
        // (distinct laws, counts, base per law, theta).
        type Case = (Vec<Vec<f64>>, Vec<usize>, Vec<f64>, Vec<f64>);
        let cases: Vec<Case> = vec![
            (
                vec![a.clone()],
                vec![3],
                vec![0.05],
                vec![0.0, -2.0, -0.7, -2.0],
            ),
            (
                vec![a.clone(), b.clone()],
                vec![2, 1],
                vec![0.05, 0.05],
                vec![0.0, -2.0, -0.7, -4.0],
            ),
            (
                vec![b.clone(), a.clone()],
                vec![2, 2],
                vec![0.0, 0.0],
                vec![0.3, 1.5, 0.0, 2.5],
            ),
            (
                vec![a, b],
                vec![1, 3],
                vec![0.05, 0.05],
                vec![-1.0, -1.0, -0.2, -1.0],
            ),
        ];
        for (laws, counts, base, theta) in cases {
            let expanded: Vec<Vec<f64>> = (laws.iter().zip(&counts))
                .flat_map(|(law, &count)| std::iter::repeat_n(law.clone(), count))
                .collect();
            let expanded_base: Vec<f64> = (base.iter().zip(&counts))
                .flat_map(|(&b, &count)| std::iter::repeat_n(b, count))
                .collect();
            let ones = vec![1; expanded.len()];
            let counted = Independent::new(&laws, &counts, &base, true);
            let apart = Independent::new(&expanded, &ones, &expanded_base, true);
            let close = |x: f64, y: f64, what: &str| {
                assert!(
                    (x - y).abs() <= 1e-14 * (1.0 + y.abs()),
                    "{what}: {x} vs {y}, counts {counts:?}"
                );
            };
            close(counted.selected_mass(), apart.selected_mass(), "P(S > 0)");
            let mut workspace = Workspace::default();
            let (at, want) = (
                counted.evaluate(&theta, &mut workspace),
                apart.evaluate(&theta, &mut workspace),
            );
            close(at.potential, want.potential, "potential");
            (at.marginal.iter().zip(&want.marginal)).for_each(|(&x, &y)| close(x, y, "r"));
            let (limit, want_limit) = (counted.saturation().unwrap(), apart.saturation().unwrap());
            (0..theta.len()).for_each(|y| close(limit(y), want_limit(y), "saturation"));
            for free in [vec![0, 1, 2, 3], vec![1, 3]] {
                let hessian = FreeHessian::new(&counted, &theta, &at, &free);
                let expected = FreeHessian::new(&apart, &theta, &want, &free);
                let v: Vec<f64> = (0..free.len()).map(|i| 0.3 - 0.2 * i as f64).collect();
                (hessian.times(&v).iter().zip(expected.times(&v)))
                    .for_each(|(&x, y)| close(x, y, "Hv"));
                (hessian.diagonal().iter().zip(expected.diagonal()))
                    .for_each(|(&x, y)| close(x, y, "diagonal"));
            }
        }
    }

    /// A side without tokens (an empty H) has potential 0 and no r.
    #[test]
    fn no_tokens() {
        let (q, base) = (vec![Vec::new(), Vec::new()], vec![0.5, 1.0]);
        let ones = vec![1; q.len()];
        let potential = Independent::new(&q, &ones, &base, true);
        let at = potential.evaluate(&[], &mut Workspace::default());
        assert_eq!((at.potential, at.marginal.len()), (0.0, 0));
    }

    /// The Hessian-vector product matches finite differences of r.
    #[test]
    fn hessian_times_matches_differences_of_r() {
        let q = vec![vec![0.4, 0.3, 0.2, 0.1], vec![0.1, 0.5, 0.3, 0.1]];
        let base = vec![0.0, 0.0];
        let theta = vec![0.0, -2.0, -0.7, -2.0];
        let ones = vec![1; q.len()];
        let potential = Independent::new(&q, &ones, &base, true);
        let mut workspace = Workspace::default();
        let at = potential.evaluate(&theta, &mut workspace);
        let v = [0.3, -0.2, 0.5, 0.1];
        let hessian = FreeHessian::new(&potential, &theta, &at, &[0, 1, 2, 3]);
        let hv = hessian.times(&v);
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
        let diagonal = hessian.diagonal();
        for y in 0..4 {
            let mut unit = [0.0; 4];
            unit[y] = 1.0;
            let column = hessian.times(&unit);
            assert!((diagonal[y] - column[y]).abs() < 1e-12);
        }
        // On a subset of the tokens, the same entries.
        let part = FreeHessian::new(&potential, &theta, &at, &[1, 3]);
        let column = part.times(&[1.0, 0.0]);
        let mut unit = [0.0; 4];
        unit[1] = 1.0;
        let whole = hessian.times(&unit);
        assert!((column[0] - whole[1]).abs() < 1e-15 && (column[1] - whole[3]).abs() < 1e-15);
    }
}
