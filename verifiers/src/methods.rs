//! The published token-level verifiers (DESIGN §6), each as an exact
//! conditional law of the output given the drafts.

use mdsd_convex::{ConvexSolution, ConvexSolver};
use mdsd_core::{CumulativeDistribution, DraftScheme, Problem, SchemeKind};
use mdsd_flow::{FlowSolver, FlowVerifier};
use rand::{Rng, RngCore};

use crate::residual::{accept_prob, overlap, residual};
use crate::{OutputLaw, Verifier, VerifyError};

/// Point masses on drafts plus a weighted residual law, as one output law.
pub(crate) fn mix(points: &[(usize, f64)], rest_weight: f64, rest: &[f64]) -> OutputLaw {
    let mut dense: Vec<f64> = rest.iter().map(|r| rest_weight * r).collect();
    for &(y, w) in points {
        dense[y] += w;
    }
    dense
        .into_iter()
        .enumerate()
        .filter(|&(_, w)| w > 0.0)
        .collect()
}

/// The output law of single-draft speculative sampling applied to a selected
/// draft (the second step of Khisti et al.'s canonical decomposition): the
/// selected token, of law r, is accepted with min(1, p / r); otherwise the
/// output is drawn from `rest` = (p - r)+ renormalised.
pub(crate) fn verify_selected(
    selection: &[(usize, f64)],
    p: &[f64],
    r: &[f64],
    rest: &Rest,
) -> OutputLaw {
    let mut points = Vec::with_capacity(selection.len());
    let mut rejected = 0.0;
    for &(x, prob) in selection {
        let a = accept_prob(p, r, x);
        points.push((x, prob * a));
        rejected += prob * (1.0 - a);
    }
    mix(&points, rejected, &rest.law)
}

/// A residual law, with its sampler.
pub(crate) struct Rest {
    pub(crate) law: Vec<f64>,
    pub(crate) sampler: CumulativeDistribution,
}

impl Rest {
    pub(crate) fn new(law: Vec<f64>) -> Self {
        Self {
            sampler: CumulativeDistribution::new(&law),
            law,
        }
    }
}

/// Verifiers that try the drafts in order, accepting each with some
/// probability, and otherwise draw from a residual law fixed in advance.
/// Both the exact law and the O(n log V) sampler come from [`steps`].
///
/// [`steps`]: Sequential::steps
trait Sequential {
    /// Each draft in the order tried, with its acceptance probability given
    /// that the ones before it were rejected.
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError>;
    fn rest(&self) -> &Rest;
}

fn sequential_law(verifier: &impl Sequential, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
    let mut points = Vec::with_capacity(drafts.len());
    let mut remaining = 1.0;
    for (x, a) in verifier.steps(drafts)? {
        points.push((x, remaining * a));
        remaining *= 1.0 - a;
    }
    Ok(mix(&points, remaining, &verifier.rest().law))
}

fn sequential_sample(
    verifier: &impl Sequential,
    drafts: &[usize],
    rng: &mut dyn RngCore,
) -> Result<usize, VerifyError> {
    for (x, a) in verifier.steps(drafts)? {
        if rng.random::<f64>() < a {
            return Ok(x);
        }
    }
    Ok(verifier.rest().sampler.sample(rng))
}

/// Implements [`Verifier`] for a [`Sequential`] verifier.
macro_rules! sequential_verifier {
    ($type:ty, $name:literal) => {
        impl Verifier for $type {
            fn name(&self) -> &str {
                $name
            }

            fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
                sequential_law(self, drafts)
            }

            fn sample(
                &self,
                drafts: &[usize],
                rng: &mut dyn RngCore,
            ) -> Result<usize, VerifyError> {
                sequential_sample(self, drafts, rng)
            }
        }
    };
}

pub(crate) fn check_drafts(drafts: &[usize], n: usize, vocab: usize) -> Result<(), VerifyError> {
    if drafts.len() != n {
        return Err(VerifyError::DraftCount {
            expected: n,
            found: drafts.len(),
        });
    }
    match drafts.iter().find(|&&t| t >= vocab) {
        Some(&token) => Err(VerifyError::TokenOutOfRange {
            token,
            vocab_size: vocab,
        }),
        None => Ok(()),
    }
}

/// Draft `i`'s own law: q_i for independent drafts, q otherwise.
pub(crate) fn draft_law(drafts: &DraftScheme, i: usize) -> &[f64] {
    let all = drafts.drafts();
    all[i.min(all.len() - 1)].probs()
}

/// Ignores the drafts: the output is drawn from p.
pub struct Nss {
    p: Vec<f64>,
    p_sampler: CumulativeDistribution,
    n: usize,
}

impl Nss {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        Self {
            p_sampler: CumulativeDistribution::new(&p),
            p,
            n: problem.drafts().n(),
        }
    }
}

impl Verifier for Nss {
    fn name(&self) -> &str {
        "nss"
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        Ok(mix(&[], 1.0, &self.p))
    }

    fn sample(&self, drafts: &[usize], rng: &mut dyn RngCore) -> Result<usize, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        Ok(self.p_sampler.sample(rng))
    }
}

/// Single-draft speculative sampling on the first draft: accept x1 with
/// probability min(1, p/q1), else draw from (p - q1)+, q1 the first draft's
/// own law.
pub struct Naive {
    p: Vec<f64>,
    first: Vec<f64>,
    rest: Rest,
    n: usize,
}

impl Naive {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let first = first_draft_law(problem.drafts());
        let rest = Rest::new(residual(&p, &first));
        Self {
            p,
            first,
            rest,
            n: problem.drafts().n(),
        }
    }
}

/// The law of the first draft: q (also for hub drafts), or q_1, or for
/// greedy drafts the most likely token with certainty (q' when n = 1).
pub(crate) fn first_draft_law(drafts: &DraftScheme) -> Vec<f64> {
    if drafts.kind() != SchemeKind::Greedy {
        return draft_law(drafts, 0).to_vec();
    }
    match drafts.fixed_tokens().first() {
        Some(&top) => {
            let mut law = vec![0.0; drafts.vocab_size()];
            law[top] = 1.0;
            law
        }
        None => drafts.free_token_law(),
    }
}

impl Sequential for Naive {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        let x = drafts[0];
        if self.first[x] <= 0.0 {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(vec![(x, accept_prob(&self.p, &self.first, x))])
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

sequential_verifier!(Naive, "naive");

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

sequential_verifier!(SpecInfer, "specinfer");

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

impl Verifier for RrsWithoutReplacement {
    fn name(&self) -> &str {
        "rrs-wor"
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
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
        loop {
            let y = self.second_sampler.sample(rng);
            let keep = (1.0 - c_acc * self.q[y] / self.second[y]).max(0.0);
            if !drafts.contains(&y) && rng.random::<f64>() < keep {
                return Ok(y);
            }
        }
    }
}

/// SpecTr's K-SEQ for i.i.d. drafts: each draft is accepted with
/// probability min(1, p / (rho* q)), with rho* in [1, n] solving
/// 1 - (1 - β(rho))^n = rho β(rho), β(rho) = Σ min(q, p / rho); if none is,
/// the output is drawn from (p - rho* min(q, p / rho*))+.
pub struct KSeq {
    p: Vec<f64>,
    q: Vec<f64>,
    rho: f64,
    rest: Rest,
    n: usize,
}

impl KSeq {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let q = problem.drafts().drafts()[0].probs().to_vec();
        let n = problem.drafts().n();
        let rho = kseq_rho(&p, &q, n);
        // Mass handed out by accepting drafts, [1 - (1 - β)^n] / β · min(q, p/rho),
        // is at most p where f(rho) <= 0; the residual is what is left of p.
        let beta = kseq_beta(&p, &q, rho);
        let scale = if beta > 0.0 {
            (1.0 - (1.0 - beta).powi(n as i32)) / beta
        } else {
            0.0
        };
        let accepted: Vec<f64> = q
            .iter()
            .zip(&p)
            .map(|(qy, py)| scale * qy.min(py / rho))
            .collect();
        let rest = Rest::new(residual(&p, &accepted));
        Self { p, q, rho, rest, n }
    }

    /// rho*.
    pub fn rho(&self) -> f64 {
        self.rho
    }
}

/// β(rho) = Σ min(q, p / rho).
pub(crate) fn kseq_beta(p: &[f64], q: &[f64], rho: f64) -> f64 {
    p.iter().zip(q).map(|(py, qy)| qy.min(py / rho)).sum()
}

/// The root in [1, n] of f(rho) = 1 - (1 - β(rho))^n - rho β(rho), which
/// decreases in rho (β falls, rho β = Σ min(rho q, p) rises), with
/// f(1) >= 0 >= f(n): bisection to the last bit, returning the end with
/// f <= 0. K-SEQ is lossless for every such rho (the accepted mass stays
/// below p); rho* is the least of them.
pub(crate) fn kseq_rho(p: &[f64], q: &[f64], n: usize) -> f64 {
    let f = |rho: f64| {
        let beta = kseq_beta(p, q, rho);
        1.0 - (1.0 - beta).powi(n as i32) - rho * beta
    };
    let (mut lo, mut hi) = (1.0, n as f64);
    if f(lo) <= 0.0 {
        return lo;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if f(mid) > 0.0 { lo = mid } else { hi = mid }
    }
    hi
}

impl Sequential for KSeq {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        drafts
            .iter()
            .map(|&x| {
                if self.q[x] <= 0.0 {
                    return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
                }
                Ok((x, (self.p[x] / (self.rho * self.q[x])).min(1.0)))
            })
            .collect()
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

sequential_verifier!(KSeq, "kseq");

/// Hu et al.'s verifier for their greedy drafts (the n-1 most likely tokens
/// plus one drawn from q' outside them): accept the drawn token with
/// probability min(1, p / q'), else draw from p on the top tokens plus
/// (p - q')+ outside them. It reaches alpha* for greedy drafts (and for hub
/// drafts, whose sets have the same shape: see [`SpecHub`]).
pub struct Greedy {
    p: Vec<f64>,
    rest_law: Vec<f64>,
    top: Vec<usize>,
    rest: Rest,
}

impl Greedy {
    pub fn new(problem: &Problem) -> Self {
        let p = problem.target().probs().to_vec();
        let drafts = problem.drafts();
        let top = drafts.fixed_tokens().to_vec();
        let rest_law = drafts.free_token_law();
        // (p - q')+ is p itself on the top tokens, where q' is zero.
        let rest = Rest::new(residual(&p, &rest_law));
        Self {
            p,
            rest_law,
            top,
            rest,
        }
    }
}

impl Sequential for Greedy {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.top.len() + 1, self.p.len())?;
        let mut outside = drafts.iter().filter(|t| !self.top.contains(t));
        let (Some(&x), None) = (outside.next(), outside.next()) else {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        };
        if self.rest_law[x] <= 0.0 || !self.top.iter().all(|t| drafts.contains(t)) {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(vec![(x, accept_prob(&self.p, &self.rest_law, x))])
    }

    fn rest(&self) -> &Rest {
        &self.rest
    }
}

sequential_verifier!(Greedy, "greedy");

/// SpecHub (Sun et al. 2024) for its own hub drafts (`SchemeKind::Hub`):
/// every draft set is {a, x}, a = argmax q the hub and x ~ q' = q without a,
/// renormalised. The non-hub draft x is accepted with probability
/// min(1, p(x) / q'(x)); otherwise the output is drawn from p on the hub
/// plus (p - q')+ elsewhere. That is the optimal transport plan of the
/// sparse hub draft law (the "compact LP" of the paper solved in closed
/// form), and it is Hu et al.'s greedy verifier for n = 2 applied to the
/// hub's sets: one piece of code serves both.
pub struct SpecHub(Greedy);

impl SpecHub {
    pub fn new(problem: &Problem) -> Self {
        Self(Greedy::new(problem))
    }
}

impl Sequential for SpecHub {
    fn steps(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        self.0.steps(drafts)
    }

    fn rest(&self) -> &Rest {
        self.0.rest()
    }
}

sequential_verifier!(SpecHub, "spechub");

/// The optimal verifier of mdsd-convex for i.i.d. drafts: select one draft
/// by the solved softmax weights (outer drafts first), then single-draft
/// speculative sampling of the selected token against p: accept with
/// min(1, p / r), else draw from (p - r)+, r the selected token's law.
/// Lossless for any weights; optimal up to the solver's tolerance.
pub struct OptimalConvex {
    p: Vec<f64>,
    solution: ConvexSolution,
    /// r on the vocabulary.
    selected: Vec<f64>,
    q: Vec<f64>,
    rest: Rest,
    n: usize,
}

impl OptimalConvex {
    pub fn new(problem: &Problem, solver: ConvexSolver) -> Result<Self, VerifyError> {
        let solution = solver.solve(problem)?;
        let p = problem.target().probs().to_vec();
        let selected = solution.selected_law();
        let rest = Rest::new(residual(&p, &selected));
        Ok(Self {
            selected,
            q: problem.drafts().drafts()[0].probs().to_vec(),
            n: problem.drafts().n(),
            p,
            solution,
            rest,
        })
    }

    /// The solved selection rule and r.
    pub fn solution(&self) -> &ConvexSolution {
        &self.solution
    }

    fn check(&self, drafts: &[usize]) -> Result<(), VerifyError> {
        check_drafts(drafts, self.n, self.p.len())?;
        if drafts.iter().any(|&x| self.q[x] <= 0.0) {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(())
    }
}

impl Verifier for OptimalConvex {
    fn name(&self) -> &str {
        "optimal-convex"
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        self.check(drafts)?;
        let selection = self.solution.selection(drafts);
        Ok(verify_selected(
            &selection,
            &self.p,
            &self.selected,
            &self.rest,
        ))
    }

    /// O(n + log V) per draw.
    fn sample(&self, drafts: &[usize], rng: &mut dyn RngCore) -> Result<usize, VerifyError> {
        self.check(drafts)?;
        let law = self.solution.selection(drafts);
        let mut u = rng.random::<f64>();
        let mut selected = law[law.len() - 1].0;
        for &(x, prob) in &law {
            if u < prob {
                selected = x;
                break;
            }
            u -= prob;
        }
        if rng.random::<f64>() < accept_prob(&self.p, &self.selected, selected) {
            return Ok(selected);
        }
        Ok(self.rest.sampler.sample(rng))
    }
}

/// The optimal verifier of mdsd-flow (max flow over draft sets).
pub struct OptimalFlow {
    inner: FlowVerifier,
    n: usize,
}

impl OptimalFlow {
    pub fn new(problem: &Problem) -> Result<Self, VerifyError> {
        Ok(Self {
            inner: FlowSolver::default().solve(problem)?.verifier(),
            n: problem.drafts().n(),
        })
    }
}

impl Verifier for OptimalFlow {
    fn name(&self) -> &str {
        "optimal-flow"
    }

    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        let law = self.inner.conditional(drafts)?;
        check_drafts(drafts, self.n, law.len())?;
        Ok(law
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, w)| w > 0.0)
            .collect())
    }
}
