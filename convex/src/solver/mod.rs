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

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use mdsd_core::{Problem, SchemeKind, Solve};

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::workspace::{Workspace, WorkspacePool};

/// The enumeration-free convex solver. It keeps the memory of its solves
/// for the next ones (one [`Workspace`] per solve running at once), and
/// its clones share it; [`ConvexSolver::with_shared_workspaces`] draws it
/// from the process's pool instead.
#[derive(Debug, Clone, Default)]
pub struct ConvexSolver {
    budget: Budget,
    workspaces: Arc<WorkspacePool>,
}

/// The process's workspaces, for solvers made for one call
/// ([`ConvexSolver::with_shared_workspaces`]): at most one per thread the
/// machine runs at once, so a long-lived process keeps at most that many
/// programs' vectors.
static SHARED_WORKSPACES: LazyLock<Arc<WorkspacePool>> = LazyLock::new(|| {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Arc::new(WorkspacePool::keeping(threads))
});

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

    /// The solver with the process's workspaces, shared with every other
    /// solver made so: for a solver made for one call (a Python call, one
    /// decoding step), whose own workspaces would go with it, so that each
    /// call would fault in a full-vocabulary program's memory afresh.
    pub fn with_shared_workspaces(self) -> Self {
        Self {
            workspaces: Arc::clone(&SHARED_WORKSPACES),
            ..self
        }
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
