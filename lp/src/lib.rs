//! # mdsd-lp
//!
//! The optimal-transport linear program of multi-draft speculative sampling,
//! solved exactly for small vocabularies (`docs/DESIGN.md` §3). Two formulations:
//!
//! * [`Formulation::Full`]: a coupling pi(x, y) of the draft-tuple law Q and
//!   the target p over all ordered tuples x (V^n x V variables), maximising
//!   P(y in x). One redundant marginal row is dropped (`docs/DESIGN.md` §7).
//! * [`Formulation::Relaxed`]: accepted mass f(S, y) only on pairs with y in
//!   the draft set S, rows <= p, columns <= Q(S); the plan is completed by
//!   the independent residual. Same value, far fewer variables.
//!
//! For blocks of L draft tokens from K paths, [`LpSolver::solve_block`]
//! solves the K-path block LP (`docs/DESIGN.md` §6) over a context model: the best
//! expected number of accepted tokens of any lossless verifier.
//!
//! Both token-level formulations are a [`Solve`]r: the solution's
//! [`Summary`] holds alpha* and the certificate H* read off a minimum cut
//! of the optimal flow (status [`Status::CertificateUnverified`](mdsd_core::Status::CertificateUnverified) when no
//! cut reproduces the value), and the solution the plan pi(y | outcome)
//! and the LP's size. The solver is good_lp's pure-Rust microlp; the cargo
//! feature `highs` adds HiGHS. Instances above a variable budget are
//! refused with a typed error naming the methods that scale.
//!
//! ```
//! use mdsd_core::{Distribution, DraftScheme, Problem, Solve};
//! use mdsd_lp::LpSolver;
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p, DraftScheme::iid(q, 2)?)?;
//! let solution = LpSolver::default().solve(&problem)?;
//! assert!((solution.summary.alpha_star - 0.86).abs() < 1e-9);
//! assert_eq!(solution.summary.certificate, vec![1, 2]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod block;
mod program;

pub use block::BlockLpSolution;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use mdsd_core::{
    Accepted, CoreError, Count, DraftLaw, DraftScheme, Instead, Method, Plan, Problem, Solution,
    Solve, Summary, check_plan_size, complete_plan, min_cut_certificate, token_set,
};
use thiserror::Error;

use program::{LinearProgram, RowKind};

/// Default cap on the number of LP variables.
pub const DEFAULT_MAX_VARIABLES: usize = 200_000;
/// The largest variable budget accepted: an LP of more variables cannot
/// fit in the memory of a machine this runs on (each variable carries
/// coefficients in two rows and the solver's tableau).
pub const MAX_VARIABLES_CEILING: usize = 1 << 27;

/// Which linear program to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Formulation {
    /// Ordered tuples x tokens: the OT LP as stated.
    #[default]
    Full,
    /// (set, token) pairs with the token in the set.
    Relaxed,
}

impl fmt::Display for Formulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Formulation::Full => "full",
            Formulation::Relaxed => "relaxed",
        })
    }
}

/// The LP solver behind good_lp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LpBackend {
    /// microlp, pure Rust (good_lp feature `minilp`).
    #[default]
    Microlp,
    /// HiGHS (this crate's feature `highs`).
    #[cfg(feature = "highs")]
    Highs,
}

impl fmt::Display for LpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LpBackend::Microlp => "microlp",
            #[cfg(feature = "highs")]
            LpBackend::Highs => "highs",
        })
    }
}

/// Why the LP was not solved.
#[derive(Debug, Error)]
pub enum LpError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(
        "the {formulation} LP needs {} variables, above the budget of {limit}{}",
        Count(*variables),
        Instead(LP_INSTEAD)
    )]
    TooLarge {
        formulation: Formulation,
        variables: u128,
        limit: usize,
    },
    #[error(
        "the block LP needs {} variables, path tuples, output sequences or variables x rows, \
         above the budget of {limit}{}",
        Count(*size),
        Instead(BLOCK_LP_INSTEAD)
    )]
    BlockTooLarge { size: u128, limit: usize },
    #[error("the {backend} solver failed on the block LP: {message}")]
    BlockSolver { backend: LpBackend, message: String },
    #[error("the {backend} solver failed on the {formulation} LP: {message}")]
    Solver {
        backend: LpBackend,
        formulation: Formulation,
        message: String,
    },
}

/// What scales where the token-level LP refuses.
const LP_INSTEAD: &[Method] = &[Method::ClosedForm, Method::MaxFlow, Method::Convex];
/// What scales where the block LP refuses.
const BLOCK_LP_INSTEAD: &[Method] = &[Method::BlockVerification];

impl LpError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            LpError::Invalid(e) => e.instead(),
            LpError::TooLarge { .. } => LP_INSTEAD,
            LpError::BlockTooLarge { .. } => BLOCK_LP_INSTEAD,
            LpError::BlockSolver { .. } | LpError::Solver { .. } => &[],
        }
    }
}

/// An optimal solution.
#[derive(Debug, Clone, PartialEq)]
pub struct LpSolution {
    /// alpha* and H* (from a minimum cut of the optimal flow; empty, with
    /// [`Status::CertificateUnverified`](mdsd_core::Status::CertificateUnverified), only if solver round-off kept
    /// every cut from reproducing alpha* to 1e-7).
    pub summary: Summary,
    /// pi(y | outcome): over ordered tuples for [`Formulation::Full`], over
    /// sets for [`Formulation::Relaxed`].
    pub plan: Plan,
    pub backend: LpBackend,
    pub formulation: Formulation,
    pub variables: usize,
    pub constraints: usize,
    /// The largest violation of the returned plan's marginals (rows sum to
    /// 1, output law equals p), measured after the solve.
    pub max_marginal_error: f64,
}

impl Solution for LpSolution {
    fn summary(&self) -> &Summary {
        &self.summary
    }

    fn plan(&self) -> Option<&Plan> {
        Some(&self.plan)
    }
}

/// The LP solver: choose a formulation, a backend and a variable budget,
/// then [`LpSolver::solve`] problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LpSolver {
    pub formulation: Formulation,
    pub backend: LpBackend,
    pub max_variables: usize,
}

impl Default for LpSolver {
    fn default() -> Self {
        Self {
            formulation: Formulation::default(),
            backend: LpBackend::default(),
            max_variables: DEFAULT_MAX_VARIABLES,
        }
    }
}

impl Solve for LpSolver {
    type Solution = LpSolution;
    type Error = LpError;

    fn name(&self) -> &'static str {
        "lp"
    }

    fn check_settings(&self) -> Result<(), LpError> {
        if !(1..=MAX_VARIABLES_CEILING).contains(&self.max_variables) {
            return Err(CoreError::setting(
                "max_variables",
                self.max_variables,
                "in 1..=134217728 (2^27; larger LPs cannot fit in memory)",
            )
            .into());
        }
        Ok(())
    }

    fn solve(&self, problem: &Problem) -> Result<LpSolution, LpError> {
        self.check_settings()?;
        let start = Instant::now();
        let mut solution = match self.formulation {
            Formulation::Full => self.solve_full(problem),
            Formulation::Relaxed => self.solve_relaxed(problem),
        }?;
        solution.summary.elapsed = start.elapsed();
        Ok(solution)
    }
}

impl LpSolver {
    pub fn with_formulation(self, formulation: Formulation) -> Self {
        Self {
            formulation,
            ..self
        }
    }

    pub fn with_backend(self, backend: LpBackend) -> Self {
        Self { backend, ..self }
    }

    pub fn with_max_variables(self, max_variables: usize) -> Self {
        Self {
            max_variables,
            ..self
        }
    }

    fn too_large(&self, variables: u128) -> LpError {
        LpError::TooLarge {
            formulation: self.formulation,
            variables,
            limit: self.max_variables,
        }
    }

    /// The draft scheme, if its tuples fit the variable budget (each tuple
    /// carries at least one variable).
    fn within_budget<'a>(&self, problem: &'a Problem) -> Result<&'a DraftScheme, LpError> {
        let count = problem.drafts().tuple_count();
        if count > self.max_variables as u128 {
            return Err(self.too_large(count));
        }
        // The plan holds a row per tuple (full) or per set (relaxed, no
        // more sets than tuples): refused here, before the LP is built.
        check_plan_size(count as usize, problem.vocab_size(), Instead(LP_INSTEAD))?;
        Ok(problem.drafts())
    }

    fn run(&self, lp: &LinearProgram) -> Result<Vec<f64>, LpError> {
        self.run_with_backend(lp).map_err(|e| LpError::Solver {
            backend: self.backend,
            formulation: self.formulation,
            message: e,
        })
    }

    /// The variable values from the chosen backend, or its error message.
    fn run_with_backend(&self, lp: &LinearProgram) -> Result<Vec<f64>, String> {
        match self.backend {
            LpBackend::Microlp => lp.solve_with(good_lp::microlp),
            #[cfg(feature = "highs")]
            LpBackend::Highs => lp.solve_with(good_lp::highs),
        }
    }

    /// The solution, with the marginal error measured on the returned plan
    /// (the elapsed time is the caller's to set).
    fn solution(
        &self,
        problem: &Problem,
        lp: &LinearProgram,
        alpha_star: f64,
        plan: Plan,
        certificate: Option<Vec<usize>>,
    ) -> LpSolution {
        LpSolution {
            summary: Summary::exact(alpha_star, certificate, Default::default()),
            max_marginal_error: plan.max_marginal_error(problem.target()),
            plan,
            backend: self.backend,
            formulation: self.formulation,
            variables: lp.variables,
            constraints: lp.rows.len(),
        }
    }

    fn solve_full(&self, problem: &Problem) -> Result<LpSolution, LpError> {
        let p = problem.target().probs();
        let support: Vec<usize> = (0..p.len()).filter(|&y| p[y] > 0.0).collect();
        // One variable per (tuple, token with p > 0).
        let variables = problem
            .drafts()
            .tuple_count()
            .saturating_mul(support.len() as u128);
        if variables > self.max_variables as u128 {
            return Err(self.too_large(variables));
        }
        let tuples = problem.drafts().tuple_law(self.max_variables)?;
        let s = support.len();
        let var = |i: usize, j: usize| i * s + j;
        let mut lp = LinearProgram {
            variables: tuples.len() * s,
            ..Default::default()
        };
        for (i, (tuple, prob)) in tuples.iter().enumerate() {
            lp.row((0..s).map(|j| var(i, j)).collect(), RowKind::Equal, prob);
            lp.objective.extend(
                (0..s)
                    .filter(|&j| tuple.contains(&support[j]))
                    .map(|j| (var(i, j), 1.0)),
            );
        }
        // The rows sum to the same total as the columns: drop the last column.
        for j in 0..s - 1 {
            lp.row(
                (0..tuples.len()).map(|i| var(i, j)).collect(),
                RowKind::Equal,
                p[support[j]],
            );
        }
        let x = self.run(&lp)?;
        let alpha: f64 = lp.objective.iter().map(|&(k, _)| x[k].max(0.0)).sum();

        let accepted: Accepted = tuples
            .outcomes
            .iter()
            .enumerate()
            .map(|(i, tuple)| {
                (0..s)
                    .filter(|&j| tuple.contains(&support[j]))
                    .map(|j| (support[j], x[var(i, j)]))
                    .collect()
            })
            .collect();
        let (plan, accepted) = complete_plan(tuples, p, accepted);
        // The certificate lives on sets: collapse tuples to their sets.
        let mut by_set: BTreeMap<Vec<usize>, (f64, BTreeMap<usize, f64>)> = BTreeMap::new();
        for ((tuple, prob), edges) in plan.law().iter().zip(&accepted) {
            let entry = by_set.entry(token_set(tuple)).or_default();
            entry.0 += prob;
            for &(y, a) in edges {
                *entry.1.entry(y).or_insert(0.0) += a;
            }
        }
        let mut sets = DraftLaw {
            outcomes: Vec::new(),
            probs: Vec::new(),
        };
        let mut flow = Vec::new();
        for (set, (prob, edges)) in by_set {
            sets.outcomes.push(set);
            sets.probs.push(prob);
            flow.push(edges.into_iter().collect());
        }
        let certificate = min_cut_certificate(&sets, p, &flow, alpha);
        Ok(self.solution(problem, &lp, alpha, plan, certificate))
    }

    fn solve_relaxed(&self, problem: &Problem) -> Result<LpSolution, LpError> {
        let p = problem.target().probs();
        // Each tuple is enumerated on the way to its set: the budget bounds them.
        let sets = self.within_budget(problem)?.set_law(self.max_variables)?;
        let (accepted, lp) = self.assignment_lp(&sets, p)?;
        let alpha: f64 = accepted.iter().flatten().map(|f| f.1).sum();
        let (plan, flow) = complete_plan(sets, p, accepted);
        let certificate = min_cut_certificate(plan.law(), p, &flow, alpha);
        Ok(self.solution(problem, &lp, alpha, plan, certificate))
    }

    /// The transportation LP of the relaxed formulation, for any sources:
    /// each source S splits at most its mass among its tokens, each token y
    /// takes at most `capacities[y]`; maximise the total taken. Returns, per
    /// source, the (token, amount) it gives (amounts >= 0). The relaxed OT LP
    /// is this with the draft sets and p; Khisti et al.'s pair-weight
    /// selection (mdsd-verify) is this with token pairs.
    pub fn solve_assignment(
        &self,
        sources: &DraftLaw,
        capacities: &[f64],
    ) -> Result<Accepted, LpError> {
        Ok(self.assignment_lp(sources, capacities)?.0)
    }

    fn assignment_lp(
        &self,
        sources: &DraftLaw,
        capacities: &[f64],
    ) -> Result<(Accepted, LinearProgram), LpError> {
        let v = capacities.len();
        if let Some(&token) = sources.outcomes.iter().flatten().find(|&&y| y >= v) {
            return Err(CoreError::TokenOutOfRange {
                token,
                vocab_size: v,
            }
            .into());
        }
        // One variable per (source, token in it with positive capacity).
        let pairs: Vec<(usize, usize)> = sources
            .outcomes
            .iter()
            .enumerate()
            .flat_map(|(s, set)| {
                set.iter()
                    .filter(|&&y| capacities[y] > 0.0)
                    .map(move |&y| (s, y))
            })
            .collect();
        if pairs.len() > self.max_variables {
            return Err(self.too_large(pairs.len() as u128));
        }
        let mut lp = LinearProgram {
            variables: pairs.len(),
            objective: (0..pairs.len()).map(|k| (k, 1.0)).collect(),
            ..Default::default()
        };
        let mut by_source = vec![Vec::new(); sources.len()];
        let mut by_token = vec![Vec::new(); v];
        for (k, &(s, y)) in pairs.iter().enumerate() {
            by_source[s].push(k);
            by_token[y].push(k);
        }
        for (s, vars) in by_source.into_iter().enumerate() {
            lp.row(vars, RowKind::AtMost, sources.probs[s]);
        }
        for (y, vars) in by_token.into_iter().enumerate() {
            if !vars.is_empty() {
                lp.row(vars, RowKind::AtMost, capacities[y]);
            }
        }
        let x = self.run(&lp)?;
        let mut accepted: Accepted = vec![Vec::new(); sources.len()];
        for (k, &(s, y)) in pairs.iter().enumerate() {
            accepted[s].push((y, x[k].max(0.0)));
        }
        Ok((accepted, lp))
    }
}
