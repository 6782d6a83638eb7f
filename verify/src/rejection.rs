//! Recursive rejection sampling: SpecInfer (with replacement) and its
//! variant without replacement (`docs/DESIGN.md` §6).

use mdsd_core::{CumulativeDistribution, Problem, sample_index};
use rand::{Rng, RngCore};

use crate::laws::{Rest, accept_prob, check_drafts, draft_law, mix, overlap, residual};
use crate::sequential::Sequential;
use crate::{OutputLaw, Verifier, VerifierKind, VerifyError};

/// Recursive rejection sampling (SpecInfer) for drafts drawn independently:
/// draft i is tried against the current target p_i with probability
/// min(1, p_i / q_i); on rejection p_(i+1) = (p_i - q_i)+ renormalised;
/// after n rejections the output is drawn from p_(n+1). The chain p_i does
/// not depend on the drafts, so it is computed once.
pub struct SpecInfer {
    /// `targets[i]` = p_i (i = 0..n), `laws[i]` = q_i; `rest` is p_(n+1).
    targets: Vec<Vec<f64>>,
    laws: Vec<Vec<f64>>,
    rest: Rest,
}

impl SpecInfer {
    pub fn new(problem: &Problem) -> Self {
        let n = problem.drafts().n();
        let laws: Vec<Vec<f64>> = (0..n)
            .map(|i| draft_law(problem.drafts(), i).to_vec())
            .collect();
        let mut targets = vec![problem.target().probs().to_vec()];
        for q in &laws {
            let next = residual(targets.last().expect("starts with p"), q);
            targets.push(next);
        }
        let rest = Rest::new(targets.pop().expect("n + 1 targets"));
        Self {
            targets,
            laws,
            rest,
        }
    }

    /// The acceptance of each step, β_i = Σ min(p_i, q_i).
    pub(crate) fn step_overlaps(&self) -> impl Iterator<Item = f64> + '_ {
        self.targets
            .iter()
            .zip(&self.laws)
            .map(|(p, q)| overlap(p, q))
    }
}

impl Sequential for SpecInfer {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.laws.len(), self.rest.law.len())?;
        drafts
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                if self.laws[i][x] <= 0.0 {
                    return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
                }
                Ok((x, accept_prob(&self.targets[i], &self.laws[i], x)))
            })
            .collect()
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

verifier_of_shape!(SpecInfer, VerifierKind::SpecInfer, sequential);

/// Recursive rejection sampling without replacement: as SpecInfer, but each
/// rejected draft is zeroed in q, which is renormalised, since the next draft
/// is drawn from q without the tokens already drawn.
pub struct RrsWithoutReplacement {
    p: Vec<f64>,
    q: Vec<f64>,
    n: usize,
    /// p_2 = (p - q)+ renormalised, the target after the first rejection.
    second: Vec<f64>,
    second_sampler: CumulativeDistribution,
    /// The ratios p_2 / q in ascending order (q = 0 last, as +inf), with the
    /// masses of p_2 and q from each position on: G(C) in O(log V).
    ratios: Vec<f64>,
    second_from: Vec<f64>,
    q_from: Vec<f64>,
}

impl RrsWithoutReplacement {
    /// The drafts verified in turn: the mass each is accepted with, the
    /// mass left when all are rejected, and the last residual target,
    /// which that mass follows.
    #[allow(clippy::type_complexity)]
    fn verified_in_turn(
        &self,
        drafts: &[usize],
    ) -> Result<(Vec<(usize, f64)>, f64, Vec<f64>), VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        let mut target = self.p.clone();
        let mut law = self.q.clone();
        let mut points = Vec::with_capacity(drafts.len());
        let mut remaining = 1.0;
        for &x in drafts {
            if law[x] <= 0.0 {
                return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
            }
            let a = accept_prob(&target, &law, x);
            points.push((x, remaining * a));
            remaining *= 1.0 - a;
            if remaining <= 0.0 {
                break;
            }
            target = residual(&target, &law);
            law[x] = 0.0;
            // The mass left is summed directly, not taken as 1 - q(drawn).
            let total: f64 = law.iter().sum();
            law.iter_mut().for_each(|v| *v /= total);
        }
        Ok((points, remaining, target))
    }

    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let q = problem.drafts().drafts()[0].probs().to_vec();
        let second = residual(&p, &q);
        let ratio = |y: usize| {
            if q[y] > 0.0 {
                second[y] / q[y]
            } else {
                f64::INFINITY
            }
        };
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_unstable_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
        let ratios = order.iter().map(|&y| ratio(y)).collect();
        let mut second_from = vec![0.0; p.len() + 1];
        let mut q_from = vec![0.0; p.len() + 1];
        for (k, &y) in order.iter().enumerate().rev() {
            second_from[k] = second_from[k + 1] + second[y];
            q_from[k] = q_from[k + 1] + q[y];
        }
        Self {
            second_sampler: CumulativeDistribution::new(&second),
            n: problem.drafts().n(),
            p,
            q,
            second,
            ratios,
            second_from,
            q_from,
        }
    }

    /// G(C) = Σ_y (p_2(y) - C q(y))+, from the tokens whose ratio exceeds C.
    fn excess(&self, c: f64) -> f64 {
        let k = self.ratios.partition_point(|&r| r <= c);
        (self.second_from[k] - c * self.q_from[k]).max(0.0)
    }
}

/// Proposals from p_2 the last residual draw makes before it draws from
/// the residual's exact law, O(n V): about 1 / N_n are needed, so this
/// many fail only where N_n is a sliver.
const RESIDUAL_PROPOSALS: usize = 1 << 12;

impl Verifier for RrsWithoutReplacement {
    fn name(&self) -> &str {
        VerifierKind::RrsWithoutReplacement.name()
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        let (points, remaining, target) = self.verified_in_turn(drafts)?;
        Ok(mix(&points, remaining, &target))
    }

    /// O(n log V) per draw. After the first rejection every target has the
    /// form p_(i+1)(y) = (p_2(y) - C_i q(y))+ / N_i on the tokens not drafted
    /// yet (zero on the drafted ones), with C_1 = 0, N_1 = 1 and, with c the
    /// renormaliser of q once x_1..x_i are removed,
    ///   C_(i+1) = C_i + c N_i,
    ///   N_(i+1) = G(C_(i+1)) - Σ_(j <= i) (p_2(x_j) - C_(i+1) q(x_j))+,
    /// G from the sorted ratios p_2 / q. The last residual is drawn from p_2
    /// by rejection (keep y with probability (1 - C_n q(y) / p_2(y))+), about
    /// 1 / N_n proposals, reached with probability about N_n. The mass left in
    /// q is 1 - q(drafted) here, not summed, to stay O(n log V).
    fn sample(&self, drafts: &[usize], rng: &mut dyn RngCore) -> Result<usize, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        let impossible = || VerifyError::ImpossibleDrafts(drafts.to_vec());
        let first = drafts[0];
        if self.q[first] <= 0.0 {
            return Err(impossible());
        }
        if rng.random::<f64>() < accept_prob(&self.p, &self.q, first) {
            return Ok(first);
        }
        let (mut c_acc, mut norm, mut drafted_mass) = (0.0, 1.0, self.q[first]);
        for (i, &x) in drafts.iter().enumerate().skip(1) {
            if self.q[x] <= 0.0 || drafts[..i].contains(&x) {
                return Err(impossible());
            }
            let c = 1.0 / (1.0 - drafted_mass);
            let target = (self.second[x] - c_acc * self.q[x]).max(0.0) / norm;
            if rng.random::<f64>() < (target / (c * self.q[x])).min(1.0) {
                return Ok(x);
            }
            let next = c_acc + c * norm;
            let drafted_excess: f64 = drafts[..i]
                .iter()
                .map(|&y| (self.second[y] - next * self.q[y]).max(0.0))
                .sum();
            norm = self.excess(next) - drafted_excess;
            c_acc = next;
            drafted_mass += self.q[x];
            if norm <= 0.0 {
                // Rejection had probability 0 up to rounding; p_2 stands in.
                break;
            }
        }
        for _ in 0..RESIDUAL_PROPOSALS {
            let y = self.second_sampler.sample(rng);
            let keep = (1.0 - c_acc * self.q[y] / self.second[y]).max(0.0);
            if !drafts.contains(&y) && rng.random::<f64>() < keep {
                return Ok(y);
            }
        }
        // The residual is a sliver of p_2 (its mass underflows, or rounding
        // left none of it off the drafts): drawn from its exact law
        // instead, the law the proposals would have kept to.
        let (_, _, residual) = self.verified_in_turn(drafts)?;
        match residual.iter().sum::<f64>() > 0.0 {
            true => Ok(sample_index(&residual, rng)),
            false => Ok(self.second_sampler.sample(rng)),
        }
    }
}
