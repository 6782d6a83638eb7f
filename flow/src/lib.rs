//! # mdsd-flow
//!
//! The max-flow / min-cut formulation of multi-draft speculative sampling
//! (`docs/DESIGN.md` §4). The network
//!
//! ```text
//! source -> draft set S (capacity Q(S)) -> token y in S (unbounded) -> sink (capacity p(y))
//! ```
//!
//! has max flow alpha*; its flow is an optimal verifier pi(y | S) =
//! flow(S, y) / Q(S), completed by the independent residual so both
//! marginals hold; the source side of a minimum cut is the certificate H*.
//! Polynomial in V for fixed n, for every draft scheme, and the exact method
//! for independent drafts, where no closed form exists. The
//! [`FlowSolver`] (a [`Solve`]r) can also solve the two smaller networks
//! that complementary slackness splits the problem into (Global
//! Resolution's decomposition); [`FlowSolver::optimum`] is alpha* by the
//! closed form where one exists, else by max flow. The optimal verifier
//! that follows the plan is mdsd-verify's `OptimalFlow`.
//!
//! ```
//! use mdsd_core::{Distribution, DraftScheme, Problem, Solve};
//! use mdsd_flow::FlowSolver;
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p, DraftScheme::iid(q, 2)?)?;
//! let solution = FlowSolver::default().solve(&problem)?;
//! assert!((solution.summary.alpha_star - 0.86).abs() < 1e-9);
//! assert_eq!(solution.summary.certificate, vec![1, 2]);
//! // The plan's output law for the draft set {2}: a law over the vocabulary.
//! let row = solution.plan.law().outcomes.iter().position(|s| s == &[2]).unwrap();
//! assert!((solution.plan.conditional(row).iter().sum::<f64>() - 1.0).abs() < 1e-12);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod network;

use std::time::Instant;

use mdsd_bounds::{Bound, BoundError, ascending_ratio_order, optimal_acceptance};
use mdsd_core::{
    Accepted, CoreError, Count, DraftLaw, Instead, Method, Plan, Problem, SchemeKind, Solution,
    Solve, Summary, check_plan_size, complete_plan, min_cut_certificate,
};
use thiserror::Error;

use network::{SetArcs, max_flow};

/// Default cap on the number of draft sets (network nodes).
pub const DEFAULT_MAX_SETS: usize = 1_000_000;
/// The largest set budget accepted: a network of more draft sets cannot
/// fit in the memory of a machine this runs on.
pub const MAX_SETS_CEILING: usize = 1 << 27;

/// How far the two halves of the decomposition may fall short of their
/// complementary-slackness values before H* is declared not optimal.
const DECOMPOSITION_TOLERANCE: f64 = 1e-9;

/// Why the flow was not computed.
#[derive(Debug, Error)]
pub enum FlowError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error(
        "the flow network needs up to {} draft sets, above the budget of {limit}{}",
        Count(*sets),
        Instead(FLOW_INSTEAD)
    )]
    TooLarge { sets: u128, limit: usize },
    #[error(
        "H* = {certificate:?} does not split the problem: the {half} network carries {found}, \
         complementary slackness needs {expected}"
    )]
    NotOptimal {
        certificate: Vec<usize>,
        half: &'static str,
        found: f64,
        expected: f64,
    },
    #[error(
        "the draft sets are collected from {} ordered draft tuples, above the limit of {limit}{}",
        Count(*tuples),
        Instead(FLOW_INSTEAD)
    )]
    TooManyTuples { tuples: u128, limit: usize },
    #[error("no minimum cut of the flow reproduces its value {alpha} to 1e-7")]
    CutNotVerified { alpha: f64 },
}

/// What scales where the flow network refuses.
const FLOW_INSTEAD: &[Method] = &[Method::ClosedForm, Method::Convex];

impl FlowError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            FlowError::Invalid(e) => e.instead(),
            FlowError::Bound(e) => e.instead(),
            FlowError::TooLarge { .. } | FlowError::TooManyTuples { .. } => FLOW_INSTEAD,
            FlowError::NotOptimal { .. } | FlowError::CutNotVerified { .. } => &[],
        }
    }
}

/// An optimal solution.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSolution {
    /// The max flow, alpha*, and H*: from the minimum cut, or the closed
    /// form's set for the decomposed solver.
    pub summary: Summary,
    /// The optimal plan pi(y | S) over draft sets S.
    pub plan: Plan,
}

impl Solution for FlowSolution {
    fn summary(&self) -> &Summary {
        &self.summary
    }

    fn plan(&self) -> Option<&Plan> {
        Some(&self.plan)
    }
}

/// The max-flow solver. `decomposed` solves the inner and outer networks of
/// complementary slackness separately (`docs/DESIGN.md` §4) instead of one network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSolver {
    pub max_sets: usize,
    pub decomposed: bool,
}

impl Default for FlowSolver {
    fn default() -> Self {
        Self {
            max_sets: DEFAULT_MAX_SETS,
            decomposed: false,
        }
    }
}

impl Solve for FlowSolver {
    type Solution = FlowSolution;
    type Error = FlowError;

    fn name(&self) -> &'static str {
        "flow"
    }

    fn check_settings(&self) -> Result<(), FlowError> {
        if !(1..=MAX_SETS_CEILING).contains(&self.max_sets) {
            return Err(CoreError::setting(
                "max_sets",
                self.max_sets,
                "in 1..=134217728 (2^27; larger networks cannot fit in memory)",
            )
            .into());
        }
        Ok(())
    }

    fn solve(&self, problem: &Problem) -> Result<FlowSolution, FlowError> {
        self.check_settings()?;
        let start = Instant::now();
        let sets = self.sets(problem)?;
        let (alpha_star, plan, certificate) = if self.decomposed {
            self.solve_decomposed(problem, sets)?
        } else {
            solve_whole(problem, sets)?
        };
        Ok(FlowSolution {
            summary: Summary::exact(alpha_star, Some(certificate), start.elapsed()),
            plan,
        })
    }
}

impl FlowSolver {
    pub fn with_max_sets(self, max_sets: usize) -> Self {
        Self { max_sets, ..self }
    }

    pub fn with_decomposition(self, decomposed: bool) -> Self {
        Self { decomposed, ..self }
    }

    /// alpha* and H*: the closed form where one exists (mdsd-bounds), else
    /// this max flow (independent drafts beyond the subset search).
    pub fn optimum(&self, problem: &Problem) -> Result<Bound, FlowError> {
        match optimal_acceptance(problem) {
            Ok(bound) => Ok(bound),
            Err(BoundError::TooManyTokens { .. }) => {
                let (alpha_star, _, certificate) = solve_whole(problem, self.sets(problem)?)?;
                Ok(Bound {
                    alpha_star,
                    certificate,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The draft sets, refused above the budget before enumeration.
    fn sets(&self, problem: &Problem) -> Result<DraftLaw, FlowError> {
        let bound = problem.drafts().set_count_bound();
        if bound > self.max_sets as u128 {
            return Err(FlowError::TooLarge {
                sets: bound,
                limit: self.max_sets,
            });
        }
        // The sets are collected from the ordered tuples, which can be
        // many more (n drafts of few tokens).
        let limit = mdsd_core::DEFAULT_ENUMERATION_LIMIT.max(self.max_sets);
        let tuples = problem.drafts().tuple_count();
        if tuples > limit as u128 {
            return Err(FlowError::TooManyTuples { tuples, limit });
        }
        Ok(problem.drafts().set_law(limit)?)
    }

    /// Complementary slackness at H* (`docs/DESIGN.md` §4): every token of H* is saturated
    /// by sets inside H* (inner network), and every set not inside H* is
    /// saturated by tokens outside H* (outer network). Two smaller max flows.
    fn solve_decomposed(
        &self,
        problem: &Problem,
        sets: DraftLaw,
    ) -> Result<(f64, Plan, Vec<usize>), FlowError> {
        let p = problem.target().probs();
        check_plan_size(sets.len(), p.len(), Instead(FLOW_INSTEAD))?;
        let certificate = self.optimum(problem)?.certificate;
        let in_h = problem.indicator(&certificate)?;
        let masked = |inside: bool| -> Vec<f64> {
            p.iter()
                .zip(&in_h)
                .map(|(&x, &i)| if i == inside { x } else { 0.0 })
                .collect()
        };
        let inside = |set: &[usize]| set.iter().all(|&y| in_h[y]);
        let mut accepted = vec![Vec::new(); sets.len()];

        let (rows, tokens) = arcs(&sets, p, inside, |_| true);
        let inner = run(&sets, &rows, &tokens, &masked(true), &mut accepted);
        let p_h: f64 = masked(true).iter().sum();
        // Where the optimal sets are prefixes of the ascending-p/q order, each
        // outer token is capped at its closed-form amount (`docs/DESIGN.md` §4). Those sum
        // to exactly 1 - Q(all in H*), so a saturating outer flow proves every
        // token absorbs exactly its closed-form amount.
        let prefix_len = certificate.len();
        let outer_caps = match problem.drafts().kind() {
            SchemeKind::Iid | SchemeKind::WithoutReplacement
                if is_ratio_prefix(problem, &in_h, prefix_len) =>
            {
                outer_absorption(problem, &sets, prefix_len)
            }
            _ => masked(false),
        };
        let (rows, tokens) = arcs(&sets, p, |s| !inside(s), |y| !in_h[y]);
        let outer = run(&sets, &rows, &tokens, &outer_caps, &mut accepted);
        let outer_expected: f64 = sets
            .iter()
            .filter(|(set, _)| !inside(set))
            .map(|(_, prob)| prob)
            .sum();
        for (half, found, expected) in [("inner", inner, p_h), ("outer", outer, outer_expected)] {
            if found < expected - DECOMPOSITION_TOLERANCE {
                return Err(FlowError::NotOptimal {
                    certificate,
                    half,
                    found,
                    expected,
                });
            }
        }
        let (plan, _) = complete_plan(sets, p, accepted);
        Ok((inner + outer, plan, certificate))
    }
}

/// The sets chosen by `keep` (their indices), each with its tokens that can
/// take flow: p(y) > 0 and `token_ok(y)`.
fn arcs(
    sets: &DraftLaw,
    p: &[f64],
    keep: impl Fn(&[usize]) -> bool,
    token_ok: impl Fn(usize) -> bool,
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut rows = Vec::new();
    let mut tokens = Vec::new();
    for (i, set) in sets.outcomes.iter().enumerate() {
        if keep(set) {
            rows.push(i);
            tokens.push(
                set.iter()
                    .copied()
                    .filter(|&y| p[y] > 0.0 && token_ok(y))
                    .collect(),
            );
        }
    }
    (rows, tokens)
}

/// Max flow over the sets `rows` (with their allowed `tokens`) into a sink
/// capped by `sink`; the flow is scattered into `accepted` by set index.
fn run(
    sets: &DraftLaw,
    rows: &[usize],
    tokens: &[Vec<usize>],
    sink: &[f64],
    accepted: &mut Accepted,
) -> f64 {
    let arcs: Vec<SetArcs> = rows
        .iter()
        .zip(tokens)
        .map(|(&i, t)| SetArcs {
            prob: sets.probs[i],
            tokens: t,
        })
        .collect();
    let (value, flows) = max_flow(&arcs, sink);
    for (&i, flow) in rows.iter().zip(flows) {
        accepted[i] = flow;
    }
    value
}

/// One network over all sets: alpha*, the plan, and H* from its minimum cut.
fn solve_whole(problem: &Problem, sets: DraftLaw) -> Result<(f64, Plan, Vec<usize>), FlowError> {
    let p = problem.target().probs();
    check_plan_size(sets.len(), p.len(), Instead(FLOW_INSTEAD))?;
    let (rows, tokens) = arcs(&sets, p, |_| true, |_| true);
    let mut accepted = vec![Vec::new(); sets.len()];
    let alpha = run(&sets, &rows, &tokens, p, &mut accepted);
    let (plan, flow) = complete_plan(sets, p, accepted);
    // The flow is exact on the capacity grid, so a cut verifies up to the
    // grid's rounding; failing that is a bug to report, not to hide.
    let certificate = min_cut_certificate(plan.law(), p, &flow, alpha)
        .ok_or(FlowError::CutNotVerified { alpha })?;
    Ok((alpha, plan, certificate))
}

/// Whether `in_h` is the first `len` tokens of the ascending-p/q order.
fn is_ratio_prefix(problem: &Problem, in_h: &[bool], len: usize) -> bool {
    let order = ascending_ratio_order(
        problem.target().probs(),
        problem.drafts().drafts()[0].probs(),
    );
    order[..len].iter().all(|&t| in_h[t])
}

/// psi_r = p(P_r) - Q(all drafts in P_r) for the prefixes P_r of the
/// ascending-p/q order, r = 0..=V, and that order. Q comes from the set law
/// in one pass: each set counts for the prefixes holding its last token.
fn prefix_psi(problem: &Problem, sets: &DraftLaw) -> (Vec<f64>, Vec<usize>) {
    let p = problem.target().probs();
    let order = ascending_ratio_order(p, problem.drafts().drafts()[0].probs());
    let mut rank = vec![0; order.len()];
    for (r, &token) in order.iter().enumerate() {
        rank[token] = r;
    }
    let mut completed_at = vec![0.0; order.len()];
    for (set, prob) in sets.iter() {
        completed_at[set.iter().map(|&y| rank[y]).max().unwrap_or(0)] += prob;
    }
    let mut psi = vec![0.0; order.len() + 1];
    let (mut p_in, mut all_in) = (0.0, 0.0);
    for (r, &token) in order.iter().enumerate() {
        p_in += p[token];
        all_in += completed_at[r];
        psi[r + 1] = p_in - all_in;
    }
    (psi, order)
}

/// The closed-form outer amounts when H* is the prefix P_m.
fn outer_absorption(problem: &Problem, sets: &DraftLaw, m: usize) -> Vec<f64> {
    let p = problem.target().probs();
    let (psi, order) = prefix_psi(problem, sets);
    let mut suffix_min = psi;
    for r in (0..order.len()).rev() {
        suffix_min[r] = suffix_min[r].min(suffix_min[r + 1]);
    }
    let mut absorbed = vec![0.0; order.len()];
    for r in m + 1..=order.len() {
        absorbed[order[r - 1]] = p[order[r - 1]] + suffix_min[r - 1] - suffix_min[r];
    }
    absorbed
}

/// The amount each token absorbs from the outer network, in closed form
/// (`docs/DESIGN.md` §4), for schemes whose optimal sets are prefixes of the
/// ascending-p/q order (iid, and without replacement as tested): with
/// prefixes P_r, psi_r = p(P_r) - Q(all drafts in P_r), m = argmin psi and
/// M_r = min over l >= r of psi_l, token x_r (r > m) absorbs
/// p(x_r) + M_(r-1) - M_r; tokens of P_m absorb nothing. Indexed by token.
/// Optimal outer flows need not be unique; this is the one that leaves each
/// prefix of outer tokens the least, and the decomposed [`FlowSolver`]
/// realises it. Enumerates the set law (default enumeration limit).
pub fn outer_absorption_closed_form(problem: &Problem) -> Result<Vec<f64>, FlowError> {
    let sets = problem
        .drafts()
        .set_law(mdsd_core::DEFAULT_ENUMERATION_LIMIT)?;
    let (psi, _) = prefix_psi(problem, &sets);
    let m = (0..psi.len()).fold(0, |best, r| if psi[r] < psi[best] { r } else { best });
    Ok(outer_absorption(problem, &sets, m))
}
