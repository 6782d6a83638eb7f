//! [`ConvexSolver`]: the enumeration-free optimal verifier of every scheme
//! it covers. The solver checks its [`Budget`] once, picks the scheme's
//! module, which builds its two potentials, and the routine of `programs`
//! runs the two programs and assembles the rule.

mod iid;
mod independent;
mod programs;
mod support;
mod without_replacement;

pub use programs::ConvexSolution;

use std::time::Instant;

use mdsd_core::{Problem, SchemeKind, Solve};

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::workspace::{Workspace, WorkspacePool};

/// The enumeration-free convex solver. It keeps the memory of its solves
/// for the next ones (one [`Workspace`] per solve running at once); a
/// clone starts without.
#[derive(Debug, Clone, Default)]
pub struct ConvexSolver {
    budget: Budget,
    workspaces: WorkspacePool,
}

impl Solve for ConvexSolver {
    type Solution = ConvexSolution;
    type Error = ConvexError;

    fn name(&self) -> &'static str {
        "convex"
    }

    fn check_settings(&self) -> Result<(), ConvexError> {
        self.budget.check()
    }

    /// Solves the outer and inner programs of the problem, with a
    /// workspace of the solver's own.
    fn solve(&self, problem: &Problem) -> Result<ConvexSolution, ConvexError> {
        self.workspaces
            .with(|workspace| self.solve_with(problem, workspace))
    }
}

impl ConvexSolver {
    /// The solver with this budget (checked when it solves).
    pub fn with_budget(self, budget: Budget) -> Self {
        Self { budget, ..self }
    }

    /// The solver with this target gap: bound on alpha* - acceptance,
    /// split evenly between the two programs.
    pub fn with_max_gap(self, max_gap: f64) -> Self {
        let budget = self.budget.with_max_gap(max_gap);
        self.with_budget(budget)
    }

    /// The solver with this cap on each program's Newton iterations.
    pub fn with_max_iterations(self, max_iterations: usize) -> Self {
        let budget = self.budget.with_max_iterations(max_iterations);
        self.with_budget(budget)
    }

    /// The solver with this time limit per solve ([`Budget::time_limit`]).
    pub fn with_time_limit(self, time_limit: Option<std::time::Duration>) -> Self {
        let budget = self.budget.with_time_limit(time_limit);
        self.with_budget(budget)
    }

    /// The target gap, iteration cap and time limit.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// [`Solve::solve`] with memory the caller holds: vectors of the
    /// program's size stay in `workspace` for the next solve.
    pub fn solve_with(
        &self,
        problem: &Problem,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        self.check_settings()?;
        let start = Instant::now();
        let budget = &self.budget.started(start);
        let mut solution = match problem.drafts().kind() {
            SchemeKind::Iid => iid::solve(problem, budget, workspace),
            SchemeKind::Independent => independent::solve(problem, budget, workspace),
            // Every evaluation of drafts without replacement makes parallel
            // calls, whatever the support's size: the whole solve goes to
            // the pool once, where each call from outside it would wake a
            // worker and wait for it.
            SchemeKind::WithoutReplacement => {
                rayon::scope(|_| without_replacement::solve(problem, budget, workspace))
            }
            scheme => Err(ConvexError::Unsupported { scheme }),
        }?;
        solution.summary.elapsed = start.elapsed();
        Ok(solution)
    }
}
