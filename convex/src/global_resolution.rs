//! Global Resolution (Thomas & Pal, ICLR 2026), the published method this
//! crate's enumeration-free solver is measured against (`docs/DESIGN.md` §5).
//!
//! The drafts are truncated to the smallest set T of most likely draft
//! tokens with P(all n drafts in T) >= 1 - tau; draft tuples leaving T
//! select nothing (their mass goes to the residual, which costs at most tau
//! of acceptance). Tuples are grouped by their set of distinct tokens:
//! * outer sets s (a draft in T \ H*): select y in s \ H* with probability
//!   softmax(alpha over s \ H*), where alpha <= 0 minimises
//!   `Phi(alpha) = Σ_s Q(s) logsumexp(alpha on s \ H*) - <p, alpha>`;
//! * inner sets s (every draft in T ∩ H*): select y with probability
//!   `e^(beta_y) / (1 + Σ_{z in s} e^(beta_z))`, select nothing otherwise,
//!   where beta minimises `Theta(beta) = Σ_s Q(s) log(1 + Σ_{z in s} e^(beta_z)) - <p, beta>`.
//!
//! Enumerating sets of size <= n of T costs `Σ_{m <= n} C(|T|, m)` terms:
//! the method fails (a typed error, as the paper counts failures) when that
//! exceeds the enumeration budget, or when either program hits its
//! iteration cap.

use std::time::Instant;

use mdsd_bounds::{IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{CoreError, Problem, SchemeKind, Solution, Solve, Status, Summary};
use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::newton::{Evaluation, MAX_STEP_THETA, Potential, Program, Stop};
use crate::numeric::{curvature_floor, merged_in_order};
use crate::selection_rule::{Assembly, Counting, SelectionRule, Support};
use crate::thresholds::THETA_LIMIT;
use crate::workspace::Workspace;

/// Default tau: P(some draft outside the truncation set) at most 1e-4.
pub const DEFAULT_TRUNCATION: f64 = 1e-4;
/// Default cap on the draft sets enumerated by both programs together.
pub const DEFAULT_ENUMERATION_BUDGET: usize = 1 << 20;
/// Draft sets per parallel task.
const SETS_PER_TASK: usize = 1 << 14;
/// Tokens of largest draft probability whose Hessian entries are kept
/// dense (`dense_direction`).
const DENSE: usize = 48;
/// Marks the unused slots of a set shorter than n.
const EMPTY: u32 = u32::MAX;

/// The Global Resolution baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalResolution {
    /// tau: the largest probability of a draft outside the truncation set.
    pub truncation: f64,
    /// Bound on each program's projected gradient (l1), and the cap on
    /// each program's iterations.
    pub budget: Budget,
    /// Most draft sets the two programs may enumerate together.
    pub enumeration_budget: usize,
}

impl Default for GlobalResolution {
    fn default() -> Self {
        Self {
            truncation: DEFAULT_TRUNCATION,
            budget: Budget::default(),
            enumeration_budget: DEFAULT_ENUMERATION_BUDGET,
        }
    }
}

/// The solved set-grouped selection rule.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalResolutionSolution {
    /// alpha* and H* from the closed form; the acceptance of the selected
    /// token, Σ min(p, r); the iterations of both programs.
    pub summary: Summary,
    /// The rule on the truncation set T: e^alpha on T \ H*, e^beta on
    /// T ∩ H*, weight 1 for "select nothing" among inner sets, duplicates
    /// counted once per set; r of total P(all drafts in T) minus the inner
    /// sets' "select nothing".
    pub rule: SelectionRule,
    /// The truncation set T, by descending draft probability.
    pub truncation_set: Vec<usize>,
    /// Draft sets enumerated by the two programs.
    pub sets: usize,
}

impl Solution for GlobalResolutionSolution {
    fn summary(&self) -> &Summary {
        &self.summary
    }
}

impl Solve for GlobalResolution {
    type Solution = GlobalResolutionSolution;
    type Error = ConvexError;

    fn name(&self) -> &'static str {
        "global-resolution"
    }

    fn check_settings(&self) -> Result<(), ConvexError> {
        self.budget.check()?;
        if !(0.0..1.0).contains(&self.truncation) {
            return Err(CoreError::setting("truncation", self.truncation, "in [0, 1)").into());
        }
        Ok(())
    }

    /// Solves the truncated outer and inner programs of an i.i.d. problem.
    fn solve(&self, problem: &Problem) -> Result<GlobalResolutionSolution, ConvexError> {
        self.check_settings()?;
        let start = Instant::now();
        let drafts = problem.drafts();
        if drafts.kind() != SchemeKind::Iid {
            return Err(ConvexError::Unsupported {
                scheme: drafts.kind(),
            });
        }
        let n = drafts.n();
        let target = problem.target();
        let draft = &drafts.drafts()[0];
        let bound = optimal_acceptance_iid(target, draft, n, IidAlgorithm::default())?;
        let (p, q) = (target.probs(), draft.probs());
        let v = p.len();
        let truncation_set = truncation_set(q, n, self.truncation);
        let mut in_h = vec![false; v];
        bound.certificate.iter().for_each(|&y| in_h[y] = true);
        // The rule's tokens: T ascending; the programs are over its slots.
        let mut tokens = truncation_set.clone();
        tokens.sort_unstable();
        let (inner, outer): (Vec<usize>, Vec<usize>) =
            (0..tokens.len()).partition(|&s| in_h[tokens[s]]);
        let mut workspace = Workspace::new();
        let (p_t, q_t) = (workspace.gather(&tokens, p), workspace.gather(&tokens, q));

        let sets = set_count(outer.len(), n) + set_count(inner.len(), n);
        if sets > self.enumeration_budget as f64 {
            return Err(ConvexError::EnumerationBudget {
                sets,
                budget: self.enumeration_budget,
            });
        }
        let (outer_q, outer_p) = (
            workspace.gather(&outer, &q_t),
            workspace.gather(&outer, &p_t),
        );
        let (inner_q, inner_p) = (
            workspace.gather(&inner, &q_t),
            workspace.gather(&inner, &p_t),
        );
        let outer_sets = DraftSets::enumerate(&outer_q, n, inner_q.iter().sum(), false);
        let inner_sets = DraftSets::enumerate(&inner_q, n, 0.0, true);
        let side_budget = self.budget.share(0.5);
        let outer_solved = Program {
            name: "outer",
            potential: &outer_sets,
            p: &outer_p,
            bounds: (-THETA_LIMIT, 0.0),
            stop: Stop::ProjectedGradient,
            reach: MAX_STEP_THETA,
        }
        .minimise(vec![0.0; outer_p.len()], &side_budget, &mut workspace)?;
        let inner_solved = Program {
            name: "inner",
            potential: &inner_sets,
            p: &inner_p,
            bounds: (-THETA_LIMIT, THETA_LIMIT),
            stop: Stop::ProjectedGradient,
            reach: MAX_STEP_THETA,
        }
        .minimise(vec![0.0; inner_p.len()], &side_budget, &mut workspace)?;

        let (rule, iterations) = Assembly {
            vocabulary: v,
            tokens: Support::Tokens(tokens),
            outer: (&outer, outer_solved),
            inner: (&inner, inner_solved),
            inner_none: 1.0,
            counting: Counting::PerSet,
        }
        .rule(&mut workspace);
        let summary = Summary {
            alpha_star: bound.alpha_star,
            acceptance: rule.acceptance(&p_t),
            certificate: bound.certificate,
            // Truncation costs at most tau of acceptance, the programs'
            // projected gradients at most their tolerance.
            status: Status::Converged {
                tolerance: self.truncation + self.budget.max_gap,
            },
            iterations,
            elapsed: start.elapsed(),
        };
        Ok(GlobalResolutionSolution {
            summary,
            rule,
            truncation_set,
            sets: outer_sets.mass.len() + inner_sets.mass.len(),
        })
    }
}

/// The smallest set of most likely draft tokens T (q descending, ties by
/// id) with 1 - q(T)^n <= tau, computed from the left-out mass as
/// `-expm1(n ln1p(-tail))` (no cancellation near 1).
fn truncation_set(q: &[f64], n: usize, tau: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..q.len()).filter(|&y| q[y] > 0.0).collect();
    order.sort_unstable_by(|&a, &b| q[b].total_cmp(&q[a]).then(a.cmp(&b)));
    // tails[k]: the draft mass of order[k..], summed from the smallest.
    let mut tails = vec![0.0; order.len() + 1];
    for k in (0..order.len()).rev() {
        tails[k] = tails[k + 1] + q[order[k]];
    }
    let left_out = |tail: f64| -(n as f64 * (-tail).ln_1p()).exp_m1();
    let size = (0..=order.len())
        .find(|&k| left_out(tails[k]) <= tau)
        .unwrap_or(order.len());
    order.truncate(size);
    order
}

/// `Σ_{m=1}^{min(n, size)} C(size, m)`, in floating point (it may not fit
/// an integer).
fn set_count(size: usize, n: usize) -> f64 {
    let mut binomial = 1.0;
    let mut total = 0.0;
    for m in 1..=n.min(size) {
        binomial *= (size + 1 - m) as f64 / m as f64;
        total += binomial;
    }
    total
}

/// The distinct-token sets of one program with their probabilities.
struct DraftSets {
    n: usize,
    tokens: usize,
    /// Members of set i at `members[i n .. (i + 1) n]`, padded with EMPTY.
    members: Vec<u32>,
    mass: Vec<f64>,
    /// Inner sets may select nothing: weight 1 for "none".
    none: bool,
    /// The tokens whose Hessian entries are kept dense (`dense_tokens`).
    dense: Vec<usize>,
}

impl DraftSets {
    /// Every set s of 1..=n tokens of `q` with its probability. With b the
    /// draft mass of tokens that are drafted but not in the program, the
    /// probability that the tuple's tokens outside b are exactly s is
    /// `Σ_{j=|s|}^{n} C(n, j) b^(n-j) j! [t^j] Π_{y in s} (e^(q_y t) - 1)`
    /// (exponential generating functions: j draws cover exactly s); inner
    /// sets (b = 0) keep the j = n term. Every coefficient is positive, so
    /// there is no cancellation, and a depth-first walk shares the product
    /// of each prefix.
    fn enumerate(q: &[f64], n: usize, base: f64, inner: bool) -> Self {
        let mut factorial = vec![1.0; n + 1];
        for j in 1..=n {
            factorial[j] = factorial[j - 1] * j as f64;
        }
        let factor: Vec<f64> = (0..=n)
            .map(|j| {
                if inner {
                    if j == n { factorial[n] } else { 0.0 }
                } else {
                    factorial[n] / factorial[n - j] * base.powi((n - j) as i32)
                }
            })
            .collect();
        let mut sets = Self {
            n,
            tokens: q.len(),
            members: Vec::new(),
            mass: Vec::new(),
            none: inner,
            dense: dense_tokens(q),
        };
        let mut stack = Vec::with_capacity(n);
        let mut unit = vec![0.0; n + 1];
        unit[0] = 1.0;
        sets.visit(q, &factor, 0, &unit, &mut stack);
        sets
    }

    fn visit(
        &mut self,
        q: &[f64],
        factor: &[f64],
        start: usize,
        prefix: &[f64],
        stack: &mut Vec<u32>,
    ) {
        let n = self.n;
        for (y, &qy) in q.iter().enumerate().skip(start) {
            // prefix · (e^(q_y t) - 1), truncated at degree n.
            let mut series = vec![0.0; n + 1];
            let mut term = 1.0;
            for (k, coefficient) in series.iter_mut().enumerate().skip(1) {
                term *= qy / k as f64;
                *coefficient = term;
            }
            let product: Vec<f64> = (0..=n)
                .map(|j| (1..=j).map(|k| prefix[j - k] * series[k]).sum())
                .collect();
            stack.push(y as u32);
            self.members.extend_from_slice(stack);
            self.members
                .extend(std::iter::repeat_n(EMPTY, n - stack.len()));
            self.mass
                .push(product.iter().zip(factor).map(|(c, f)| c * f).sum());
            if stack.len() < n {
                self.visit(q, factor, y + 1, &product, stack);
            }
            stack.pop();
        }
    }
}

/// Partial sums of one chunk of sets.
struct Partial {
    potential: f64,
    marginal: Vec<f64>,
    curvature: Vec<f64>,
    coupling: Vec<f64>,
}

impl Potential for DraftSets {
    type Hessian = DenseCoupling;

    /// `Σ_s Q(s) log(none + Σ_{y in s} e^(theta_y))`: r_y = Σ_{s ∋ y} Q(s) pi_y,
    /// dr_y / dtheta_y = Σ Q(s) pi_y (1 - pi_y), dr_y / dtheta_z = -Σ Q(s) pi_y pi_z.
    fn evaluate(&self, theta: &[f64], _: &mut Workspace) -> Evaluation<DenseCoupling> {
        let dense = &self.dense;
        let m = dense.len();
        let mut position = vec![usize::MAX; self.tokens];
        dense.iter().enumerate().for_each(|(i, &y)| position[y] = i);
        let empty = || Partial {
            potential: 0.0,
            marginal: vec![0.0; self.tokens],
            curvature: vec![0.0; self.tokens],
            coupling: vec![0.0; m * m],
        };
        let partials = self
            .members
            .par_chunks(SETS_PER_TASK * self.n)
            .zip(self.mass.par_chunks(SETS_PER_TASK))
            .map(|(members, mass)| {
                let mut partial = empty();
                let mut pi = vec![0.0; self.n];
                for (set, &mass) in members.chunks_exact(self.n).zip(mass) {
                    let set: Vec<usize> = set
                        .iter()
                        .take_while(|&&y| y != EMPTY)
                        .map(|&y| y as usize)
                        .collect();
                    // log-sum-exp shifted by the largest term.
                    let none = if self.none { 0.0 } else { f64::NEG_INFINITY };
                    let shift = set.iter().map(|&y| theta[y]).fold(none, f64::max);
                    let mut sum = (none - shift).exp();
                    for (k, &y) in set.iter().enumerate() {
                        pi[k] = (theta[y] - shift).exp();
                        sum += pi[k];
                    }
                    partial.potential += mass * (shift + sum.ln());
                    for (k, &y) in set.iter().enumerate() {
                        pi[k] /= sum;
                        partial.marginal[y] += mass * pi[k];
                        partial.curvature[y] += mass * pi[k] * (1.0 - pi[k]);
                    }
                    for (k, &y) in set.iter().enumerate() {
                        for (l, &z) in set.iter().enumerate().skip(k + 1) {
                            let (i, j) = (position[y], position[z]);
                            if i != usize::MAX && j != usize::MAX {
                                let entry = mass * pi[k] * pi[l];
                                partial.coupling[i * m + j] -= entry;
                                partial.coupling[j * m + i] -= entry;
                            }
                        }
                    }
                }
                partial
            });
        let total = merged_in_order(partials, |a, b| {
            a.potential += b.potential;
            for (x, y) in [
                (&mut a.marginal, &b.marginal),
                (&mut a.curvature, &b.curvature),
                (&mut a.coupling, &b.coupling),
            ] {
                x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
            }
        })
        .unwrap_or_else(empty);
        Evaluation {
            potential: total.potential,
            marginal: total.marginal,
            hessian: DenseCoupling {
                curvature: total.curvature,
                coupling: total.coupling,
            },
        }
    }

    fn direction(
        &self,
        _theta: &[f64],
        at: &Evaluation<DenseCoupling>,
        gradient: &[f64],
        held: &[bool],
        _enough: f64,
        _: &mut Workspace,
    ) -> Vec<f64> {
        dense_direction(&at.marginal, &at.hessian, &self.dense, gradient, held)
    }
}

/// The Hessian's diagonal, and its entries among the `dense` tokens (row
/// major, zero diagonal): where set-grouped potentials couple tokens.
struct DenseCoupling {
    curvature: Vec<f64>,
    coupling: Vec<f64>,
}

/// The `DENSE` tokens of largest q, where the coupling of set-grouped
/// potentials lives.
fn dense_tokens(q: &[f64]) -> Vec<usize> {
    let mut dense: Vec<usize> = (0..q.len()).collect();
    let by_q = |&a: &usize, &b: &usize| q[b].total_cmp(&q[a]);
    if dense.len() > DENSE {
        dense.select_nth_unstable_by(DENSE, by_q);
        dense.truncate(DENSE);
    }
    dense.sort_unstable_by(by_q);
    dense
}

/// The Newton direction of a model with the exact Hessian among the
/// `dense` tokens and its diagonal elsewhere. Pure diagonal scaling crawls
/// on real rows: the top tokens (q up to 0.6) couple strongly.
fn dense_direction(
    r: &[f64],
    hessian: &DenseCoupling,
    dense: &[usize],
    gradient: &[f64],
    held: &[bool],
) -> Vec<f64> {
    let diagonal = |k: usize| curvature_floor(hessian.curvature[k], r[k]);
    let mut direction: Vec<f64> = (0..r.len())
        .map(|k| {
            if held[k] {
                0.0
            } else {
                -gradient[k] / diagonal(k)
            }
        })
        .collect();
    let m = dense.len();
    let free: Vec<usize> = (0..m).filter(|&i| !held[dense[i]]).collect();
    if free.len() > 1 {
        let f = free.len();
        let hessian = DMatrix::from_fn(f, f, |i, j| {
            let (a, b) = (free[i], free[j]);
            if a == b {
                diagonal(dense[a])
            } else {
                hessian.coupling[a * m + b]
            }
        });
        let rhs = DVector::from_fn(f, |i, _| -gradient[dense[free[i]]]);
        // The dense part is singular when every draft is selectable (theta +
        // t·1 changes nothing), and its diagonal, computed without the
        // rule's tail terms, can fall a hair short of positive
        // semidefinite: a ridge from 1e-8 of the largest curvature up.
        let largest = free.iter().map(|&a| diagonal(dense[a])).fold(0.0, f64::max);
        let solution = [1e-8, 1e-6, 1e-4].into_iter().find_map(|ridge| {
            let ridged = &hessian + DMatrix::identity(f, f) * (ridge * largest);
            ridged.cholesky().map(|c| c.solve(&rhs))
        });
        if let Some(solution) = solution {
            for (i, &a) in free.iter().enumerate() {
                direction[dense[a]] = solution[i];
            }
        }
    }
    direction
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_probabilities_sum_to_the_programs_mass() {
        let q = [0.4, 0.25, 0.2, 0.1, 0.05];
        for n in 1..=4 {
            // Tokens 0..2 outer, 3..4 inner (b = 0.15).
            let outer = DraftSets::enumerate(&q[..3], n, 0.15, false);
            let inner = DraftSets::enumerate(&q[3..], n, 0.0, true);
            let outer_total: f64 = outer.mass.iter().sum();
            let inner_total: f64 = inner.mass.iter().sum();
            assert!((outer_total - (1.0 - 0.15f64.powi(n as i32))).abs() < 1e-15);
            assert!((inner_total - 0.15f64.powi(n as i32)).abs() < 1e-15);
            assert_eq!(outer.mass.len() as f64, set_count(3, n));
        }
    }

    #[test]
    fn truncation_keeps_the_likely_tokens() {
        let q = [0.05, 0.5, 0.3, 0.15];
        assert_eq!(truncation_set(&q, 2, 0.0), vec![1, 2, 3, 0]);
        // 1 - 0.95^2 = 0.0975.
        assert_eq!(truncation_set(&q, 2, 0.1), vec![1, 2, 3]);
        assert_eq!(truncation_set(&q, 2, 0.09), vec![1, 2, 3, 0]);
    }
}
