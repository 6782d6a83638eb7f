//! The choice of solver by method, what `mdsd bound`, `mdsd solve` and
//! Python's `mdsd.solve` run: [`SolveMethod`] names it, [`solve_problem`] solves
//! one problem and [`solve_rows`] every row an [`Input`] selects, a window
//! at a time where the file streams.

use crate::bounds::ClosedForm;
use crate::convex::Budget;
use crate::core::{Plan, SchemeKind, Solution, Solve, Summary};
use crate::error::{Error, SolveError};
use crate::input::{Input, InputReport};
use crate::{ConvexSolver, FlowSolver, Formulation, LpSolver, Problem};

/// The f64 bytes of the rows a window of [`solve_rows`] holds (the two
/// sides' rows): streamed files pass in bounded memory.
const WINDOW_BYTES: usize = 16 << 20;

/// How a problem is solved, with its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SolveMethod {
    /// alpha* and H* in closed form (any vocabulary); independent drafts
    /// past the subset search take the convex solver's certified interval.
    ClosedForm,
    /// The optimal-transport linear program (small vocabularies).
    Lp {
        formulation: Formulation,
        max_variables: usize,
    },
    /// Max flow over draft sets (polynomial in V for fixed n).
    Flow { max_sets: usize, decomposed: bool },
    /// The enumeration-free convex programs: the acceptance of their
    /// selection rule, within `max_gap` of alpha*, or as close as a solve
    /// of `budget_ms` milliseconds per row gets (`mdsd_convex::Budget`).
    Convex {
        max_gap: f64,
        budget_ms: Option<f64>,
    },
}

impl SolveMethod {
    /// How the drafts of the method's plan are named: ordered tuples for
    /// the full LP, sets for the relaxed LP and max flow; `None` for the
    /// methods without a plan.
    pub fn plan_drafts(&self) -> Option<&'static str> {
        match self {
            SolveMethod::Lp {
                formulation: Formulation::Full,
                ..
            } => Some("tuples"),
            SolveMethod::Lp { .. } | SolveMethod::Flow { .. } => Some("sets"),
            _ => None,
        }
    }
}

/// What JSON says of H*: checkable without its ids (which run to 150k at
/// full vocabulary). Its size, p(H*), and where H* is a prefix of the
/// ascending-p/q order (`mdsd_bounds::ratio_prefix_end`), the pair (p/q,
/// token) that ends it: H* is every token whose (p/q, id) is at most that
/// pair, ties broken by ascending id.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactCertificate {
    pub size: usize,
    pub p_mass: f64,
    pub ratio_prefix_end: Option<(f64, usize)>,
}

impl CompactCertificate {
    /// The compact form of H* = `tokens` of `problem`; for i.i.d. and
    /// without-replacement drafts, whose optimal sets are ratio prefixes
    /// (`docs/DESIGN.md` §3), with the pair that ends the prefix when H*
    /// is one.
    pub fn of(problem: &Problem, tokens: &[usize]) -> Self {
        let p = problem.target().probs();
        let ratio_prefix_end = match problem.drafts().kind() {
            SchemeKind::Iid | SchemeKind::WithoutReplacement => {
                problem.indicator(tokens).ok().and_then(|in_h| {
                    crate::bounds::ratio_prefix_end(p, problem.drafts().drafts()[0].probs(), &in_h)
                })
            }
            _ => None,
        };
        Self {
            size: tokens.len(),
            p_mass: tokens.iter().fold(0.0, |mass, &y| mass + p[y]),
            ratio_prefix_end,
        }
    }
}

/// One problem solved: its summary and, for the LP and max flow, the plan.
#[derive(Debug, Clone)]
pub struct Solved {
    pub summary: Summary,
    pub plan: Option<Plan>,
}

/// Solves one problem by `method`; the row named in errors is `row`.
pub fn solve_problem(problem: &Problem, method: &SolveMethod, row: usize) -> Result<Solved, Error> {
    let solver = Solver::new(method)?;
    match solver.solve(problem, row) {
        Err(e) if solver.past_closed_form(problem.drafts().kind(), &e) => {
            Solver::convex().solve(problem, row)
        }
        other => other,
    }
}

/// The rows of every problem `input` selects, solved by one method.
pub struct SolvedRows {
    pub input: InputReport,
    /// The method that solved them: `method`, or the convex solver where
    /// the closed form does not reach independent drafts.
    pub method: &'static str,
    /// Per row, its summary, with H*'s first `kept_ids` ids (all of them
    /// where asked), and H*'s compact form.
    pub rows: Vec<(Summary, CompactCertificate)>,
    /// Per row, its plan, where asked for and the method has one.
    pub plans: Vec<Plan>,
}

/// Solves every problem of `scheme` with `n` drafts that `input` selects,
/// one solver for every row (it keeps its memory between solves), a share
/// of each window per thread of rayon's pool. Each row keeps its summary
/// with the first `kept_ids` ids of H* (`None`: all), its compact
/// certificate, and its plan where `plans`. Independent drafts past the
/// closed form's subset search are solved by the convex solver, whose
/// certified interval holds alpha*.
pub fn solve_rows(
    input: &Input,
    scheme: SchemeKind,
    n: usize,
    method: &SolveMethod,
    kept_ids: Option<usize>,
    plans: bool,
) -> Result<SolvedRows, Error> {
    let solver = Solver::new(method)?;
    match solve_rows_by(&solver, input, scheme, n, kept_ids, plans) {
        Err(e) if solver.past_closed_form(scheme, &e) => {
            solve_rows_by(&Solver::convex(), input, scheme, n, kept_ids, plans)
        }
        other => other,
    }
}

fn solve_rows_by(
    solver: &Solver,
    input: &Input,
    scheme: SchemeKind,
    n: usize,
    kept_ids: Option<usize>,
    plans: bool,
) -> Result<SolvedRows, Error> {
    let (solved, report) = input.map_rows(scheme, n, WINDOW_BYTES, |problems, first_row| {
        problems
            .iter()
            .enumerate()
            .map(|(row, problem)| {
                let Solved { summary, plan } = solver.solve(problem, first_row + row)?;
                let compact = CompactCertificate::of(problem, &summary.certificate);
                // Only the ids asked for are kept: H* runs to 150k ids a row.
                let kept = kept_ids.unwrap_or(summary.certificate.len());
                let certificate = summary.certificate.iter().take(kept).copied().collect();
                let summary = Summary {
                    certificate,
                    ..summary
                };
                Ok((summary, compact, plan.filter(|_| plans)))
            })
            .collect()
    })?;
    let mut rows = Vec::with_capacity(solved.len());
    let mut kept_plans = Vec::new();
    for (summary, compact, plan) in solved {
        rows.push((summary, compact));
        kept_plans.extend(plan);
    }
    Ok(SolvedRows {
        input: report,
        method: solver.name(),
        rows,
        plans: kept_plans,
    })
}

/// A method's solver, its settings checked.
enum Solver {
    ClosedForm,
    Lp(LpSolver),
    Flow(FlowSolver),
    Convex(ConvexSolver),
}

impl Solver {
    /// The solver of `method`, whose settings are refused here, before any
    /// row is read, naming the flag.
    fn new(method: &SolveMethod) -> Result<Self, Error> {
        let solver = match *method {
            SolveMethod::ClosedForm => Solver::ClosedForm,
            SolveMethod::Lp {
                formulation,
                max_variables,
            } => Solver::Lp(
                LpSolver::default()
                    .with_formulation(formulation)
                    .with_max_variables(max_variables),
            ),
            SolveMethod::Flow {
                max_sets,
                decomposed,
            } => Solver::Flow(
                FlowSolver::default()
                    .with_max_sets(max_sets)
                    .with_decomposition(decomposed),
            ),
            SolveMethod::Convex { max_gap, budget_ms } => {
                let budget = Budget::default().with_max_gap(max_gap);
                let budget = match budget_ms {
                    Some(ms) => budget
                        .with_budget_ms(ms)
                        .map_err(SolveError::into_setting_error)?,
                    None => budget,
                };
                Solver::Convex(
                    ConvexSolver::default()
                        .with_shared_workspaces()
                        .with_budget(budget),
                )
            }
        };
        match &solver {
            Solver::ClosedForm => Ok(()),
            Solver::Lp(s) => s.check_settings().map_err(SolveError::into_setting_error),
            Solver::Flow(s) => s.check_settings().map_err(SolveError::into_setting_error),
            Solver::Convex(s) => s.check_settings().map_err(SolveError::into_setting_error),
        }?;
        Ok(solver)
    }

    fn convex() -> Self {
        Solver::Convex(ConvexSolver::default().with_shared_workspaces())
    }

    fn name(&self) -> &'static str {
        match self {
            Solver::ClosedForm => ClosedForm.name(),
            Solver::Lp(s) => s.name(),
            Solver::Flow(s) => s.name(),
            Solver::Convex(s) => s.name(),
        }
    }

    fn solve(&self, problem: &Problem, row: usize) -> Result<Solved, Error> {
        match self {
            Solver::ClosedForm => with_solver(problem, &ClosedForm, row),
            Solver::Lp(s) => with_solver(problem, s, row),
            Solver::Flow(s) => with_solver(problem, s, row),
            Solver::Convex(s) => with_solver(problem, s, row),
        }
    }

    /// Whether `error` is the closed form's refusal of independent drafts
    /// past its subset search, which the convex solver takes instead.
    fn past_closed_form(&self, scheme: SchemeKind, error: &Error) -> bool {
        matches!(self, Solver::ClosedForm)
            && scheme == SchemeKind::Independent
            && matches!(error, Error::Solve { instead, .. } if instead.contains(&crate::Method::Convex))
    }
}

fn with_solver<S>(problem: &Problem, solver: &S, row: usize) -> Result<Solved, Error>
where
    S: Solve,
    S::Error: SolveError,
{
    let solution = solver.solve(problem).map_err(|e| e.at_row(row))?;
    Ok(Solved {
        summary: solution.summary().clone(),
        plan: solution.plan().cloned(),
    })
}
