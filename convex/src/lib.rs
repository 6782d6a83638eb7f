//! # mdsd-convex
//!
//! The optimal verifier for n i.i.d. drafts at full vocabulary by convex
//! programs in the weights of a selection rule (`docs/DESIGN.md` §5),
//! without enumerating draft sets; for drafts without replacement (§6b,
//! the exponential clocks' double integral: exact, slow past top 1000);
//! and for drafts from different draft models (§6b), where H* has no
//! closed form and the solution is an interval [acceptance, alpha_star]
//! that holds alpha*, certified by H. Entry point: [`ConvexSolver`], a
//! [`Solve`]r; [`ConvexSolver::solve_with`] takes a [`Workspace`] the
//! caller holds.
//!
//! The verifier selects one draft index with probability proportional to
//! e^(theta of its token), counting duplicates: among the drafts outside
//! H* with the outer weights when there is one, among all drafts with the
//! inner weights otherwise ([`SelectionRule`]). The selected token's law r
//! is a one-dimensional integral per token, and single-draft speculative
//! sampling of the selected token against p (accept with min(1, p / r),
//! else draw from (p - r)+) outputs exactly p for *any* weights. The
//! weights minimise two box-constrained convex potentials whose gradients
//! are r - p: the outer one over theta <= 0 (optimum r <= p outside H*) and
//! the inner one over theta >= 0 (r >= p on H*), where the acceptance
//! Σ min(p, r) is alpha* = p(H*) + 1 - q(H*)^n. The solver's tolerance only
//! costs acceptance, never exactness.
//!
//! [`GlobalResolution`] is the published baseline (Thomas & Pal): the same
//! two programs over enumerated draft sets of a truncation set, refused
//! with [`ConvexError::EnumerationBudget`] when those are too many.
//!
//! ## Inside
//!
//! * `newton`: projected Newton for box-constrained programs (Bertsekas'
//!   two-metric projection, ε-active set, Armijo along the projection arc),
//!   over a `Potential` that supplies its own Newton direction.
//! * `selection`: the enumeration-free rule's potential. `nodes` holds the
//!   trapezoidal rule in ln c (step ln 2 / 3, ~1e-14 relative);
//!   `integrals` evaluates r and the potential token by token (a Taylor
//!   series below a c = 1/64 summed as node moments, squaring chains above;
//!   tokens at theta = 0 as one token, exactly); `buckets` does the same
//!   from `BUCKETED_FROM` tokens per bucket of theta of width 1/32 (a
//!   9-term series in the offset from the centre); `hessian` solves the
//!   Newton system of the Hessian's structure, a weighted graph Laplacian
//!   Diag(U W Uᵀ 1) - U W Uᵀ of node rank, by Woodbury on the coarse nodes
//!   where the free tokens' rows of U live.
//! * `independent`: the potential of drafts from different models (a
//!   product of the drafts' transforms in place of phi^n), its sums over
//!   tokens as the i.i.d. evaluation takes them (`selection::Sums`: by
//!   bucket of theta from `BUCKETED_FROM` tokens, token by token below),
//!   with Newton directions by conjugate gradients.
//! * `without_replacement`: the potential of drafts without replacement,
//!   prefix and suffix polynomials over the tokens at each pair of nodes
//!   (in c and in the clocks' time t), Newton directions from central
//!   differences of r on a coarser grid.
//! * `ratio_groups`: starting points, a clipped log-ratio model, or from
//!   `GROUPED_START_FROM` tokens nested programs over groups of tokens by
//!   their ratio p / q.
//! * `selection_rule`: the solved rule of both methods.
//! * `global_resolution`: the baseline, with its dense Hessian block.
//! * `thresholds` (sizes and bounds, one name per meaning), `numeric`
//!   (short polynomials and sums), `workspace` (memory kept between solves).
//!
//! The programs live on the draft's support (found from q alone, so a top-k
//! draft costs O(k) after one pass over q). Supports below `PARALLEL_FROM`
//! tokens are solved on the calling thread, larger ones on rayon's pool.
//!
//! ```
//! use mdsd_convex::ConvexSolver;
//! use mdsd_core::{Distribution, DraftScheme, Problem, Solve};
//!
//! let p = Distribution::from_probs(vec![0.5, 0.3, 0.2])?;
//! let q = Distribution::from_probs(vec![0.2, 0.3, 0.5])?;
//! let problem = Problem::new(p, DraftScheme::iid(q, 2)?)?;
//! let solution = ConvexSolver::default().solve(&problem)?;
//! assert!((solution.summary.acceptance - 0.86).abs() < 1e-7);
//! // The selection law of the drafts (2, 0): by the outer weights, token 0.
//! let law = solution.rule.selection(&[2, 0]);
//! assert_eq!(law, vec![(0, 1.0)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cut;
mod global_resolution;
mod independent;
mod newton;
mod numeric;
mod ratio_groups;
mod selection;
mod selection_rule;
mod thresholds;
mod without_replacement;
mod workspace;

use std::time::Instant;

use mdsd_bounds::{BoundError, IidAlgorithm, optimal_acceptance_iid, optimal_acceptance_wor};
use mdsd_core::{
    CoreError, Count, Distribution, DraftScheme, Instead, Method, Problem, SchemeKind, Solution,
    Solve, Status, Summary,
};
use thiserror::Error;

pub use global_resolution::{
    DEFAULT_ENUMERATION_BUDGET, DEFAULT_TRUNCATION, GlobalResolution, GlobalResolutionSolution,
};
pub use selection_rule::{Counting, SelectionRule};
pub use workspace::Workspace;

use cut::{PrefixCut, best_prefix_cut, searched_cut};
use independent::Independent;
use newton::{Potential, Program, REACH, Solved, Stop};
use numeric::{lane_sum, sum_where};
use ratio_groups::log_ratio_start;
use selection::Selectable;
use selection_rule::Assembly;
use thresholds::{PARALLEL_FROM, THETA_LIMIT};
use without_replacement::WithoutReplacement;

use workspace::WorkspacePool;

/// The two programs of `docs/DESIGN.md` §5: the outer one over the tokens
/// outside H (theta <= 0, stopped on the excess Σ (r - p)+) and the inner
/// one over H (theta >= 0, stopped on the shortfall Σ (p - r)+).
#[derive(Debug, Clone, Copy)]
enum Side {
    Outer,
    Inner,
}

impl Side {
    fn program<'a, P: Potential>(self, potential: &'a P, p: &'a [f64]) -> Program<'a, P> {
        let (name, bounds, stop) = match self {
            Side::Outer => ("outer", (-THETA_LIMIT, 0.0), Stop::Excess),
            Side::Inner => ("inner", (0.0, THETA_LIMIT), Stop::Shortfall),
        };
        Program {
            name,
            potential,
            p,
            bounds,
            stop,
            reach: REACH,
        }
    }
}

/// Default bound on the acceptance lost to the solver, alpha* - acceptance.
pub const DEFAULT_TOLERANCE: f64 = 1e-7;
/// Default cap on iterations of each of the two programs.
pub const DEFAULT_MAX_ITERATIONS: usize = 100;

/// Why no solution.
#[derive(Debug, Error)]
pub enum ConvexError {
    #[error(transparent)]
    Invalid(#[from] CoreError),
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error(
        "the convex solver handles i.i.d., wor and independent drafts, not {scheme} drafts{instead}",
        instead = Instead(UNSUPPORTED_INSTEAD)
    )]
    Unsupported { scheme: SchemeKind },
    #[error(
        "Global Resolution would enumerate {sets:.3e} draft sets (budget {budget}){}",
        Instead(ENUMERATION_INSTEAD)
    )]
    EnumerationBudget { sets: f64, budget: usize },
    #[error(
        "the {side} program did not reach the tolerance {tolerance:.1e} in {iterations} \
         iterations (acceptance lost: {lost:.2e})"
    )]
    IterationCap {
        side: &'static str,
        iterations: usize,
        lost: f64,
        tolerance: f64,
    },
    #[error(
        "n = {} drafts is past what the convex programs resolve at the tolerance {tolerance:.1e}: \
         their kernel phi^(n-1) carries a relative rounding of about n x 1.1e-16, so they take \
         up to {} drafts{}",
        Count(*n as u128),
        Count(*limit as u128),
        Instead(PRECISION_INSTEAD)
    )]
    Precision {
        n: usize,
        limit: usize,
        tolerance: f64,
    },
}

/// Gives alpha* where the convex programs cannot resolve their tolerance.
const PRECISION_INSTEAD: &[Method] = &[Method::ClosedForm];

/// The most drafts the programs take at `tolerance`. phi(c) is computed to
/// a few units of rounding, so phi(c)^(n-1) carries a relative rounding of
/// order n ε, and so does the acceptance of the rule built on it: measured
/// on rows of 2 to 4 tokens from 10^7 to 10^12 drafts, the acceptance lost
/// grew as n x 1.1e-16 = n ε / 2. Up to tolerance / (2 ε) drafts that is
/// at most a quarter of the tolerance (2.2e8 drafts at the default 1e-7).
pub fn resolvable_drafts(tolerance: f64) -> usize {
    // Saturating float-to-integer conversion: a huge tolerance allows any n.
    (tolerance / (2.0 * f64::EPSILON)) as usize
}

/// What covers the schemes the convex solver does not.
const UNSUPPORTED_INSTEAD: &[Method] = &[Method::ClosedForm, Method::MaxFlow];
/// What scales where Global Resolution's enumeration refuses.
const ENUMERATION_INSTEAD: &[Method] = &[Method::Convex];

impl ConvexError {
    /// The methods this error points to instead (empty for most).
    pub fn instead(&self) -> &'static [Method] {
        match self {
            ConvexError::Invalid(e) => e.instead(),
            ConvexError::Bound(e) => e.instead(),
            ConvexError::Unsupported { .. } => UNSUPPORTED_INSTEAD,
            ConvexError::EnumerationBudget { .. } => ENUMERATION_INSTEAD,
            ConvexError::IterationCap { .. } => &[],
            ConvexError::Precision { .. } => PRECISION_INSTEAD,
        }
    }
}

/// Checks an iterative method's tolerance and iteration cap.
fn check_tolerance(tolerance: f64, max_iterations: usize) -> Result<(), ConvexError> {
    if !(tolerance > 0.0 && tolerance.is_finite()) {
        return Err(CoreError::setting("tolerance", tolerance, "a positive finite number").into());
    }
    if max_iterations == 0 {
        return Err(CoreError::setting("max_iterations", 0, "at least 1").into());
    }
    Ok(())
}

/// The enumeration-free convex solver. It keeps the memory of its solves
/// for the next ones (one [`Workspace`] per solve running at once); a
/// clone starts without.
#[derive(Debug, Clone)]
pub struct ConvexSolver {
    /// Bound on alpha* - acceptance, split evenly between the two programs.
    pub tolerance: f64,
    pub max_iterations: usize,
    workspaces: WorkspacePool,
}

impl Default for ConvexSolver {
    fn default() -> Self {
        Self {
            tolerance: DEFAULT_TOLERANCE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            workspaces: WorkspacePool::default(),
        }
    }
}

/// The solved selection rule, on the draft's support: with the draft
/// truncated to its top k tokens that is k of the V tokens, and the
/// solution costs O(k), not O(V).
#[derive(Debug, Clone, PartialEq)]
pub struct ConvexSolution {
    /// alpha* and H* from the closed form; the acceptance of the selected
    /// token, Σ min(p, r); the Newton iterations of both programs,
    /// counting those of the grouped programs that start large ones.
    pub summary: Summary,
    /// The rule: outer weights e^theta (<= 1) outside H*, inner weights
    /// (>= 1) on H*, duplicates counted per draft, r on the support.
    pub rule: SelectionRule,
}

impl Solution for ConvexSolution {
    fn summary(&self) -> &Summary {
        &self.summary
    }
}

impl Solve for ConvexSolver {
    type Solution = ConvexSolution;
    type Error = ConvexError;

    fn name(&self) -> &'static str {
        "convex"
    }

    fn check_settings(&self) -> Result<(), ConvexError> {
        check_tolerance(self.tolerance, self.max_iterations)
    }

    /// Solves the outer and inner programs of an i.i.d. problem, with a
    /// workspace of the solver's own.
    fn solve(&self, problem: &Problem) -> Result<ConvexSolution, ConvexError> {
        self.workspaces
            .with(|workspace| self.solve_with(problem, workspace))
    }
}

impl ConvexSolver {
    pub fn with_tolerance(self, tolerance: f64) -> Self {
        Self { tolerance, ..self }
    }

    pub fn with_max_iterations(self, max_iterations: usize) -> Self {
        Self {
            max_iterations,
            ..self
        }
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
        let drafts = problem.drafts();
        let other = match drafts.kind() {
            SchemeKind::Independent => Some(self.solve_independent(problem, workspace)),
            // Every evaluation of drafts without replacement makes parallel
            // calls, whatever the support's size: the whole solve goes to
            // the pool once, where each call from outside it would wake a
            // worker and wait for it.
            SchemeKind::WithoutReplacement => Some(rayon::scope(|_| {
                self.solve_without_replacement(problem, workspace)
            })),
            _ => None,
        };
        if let Some(solution) = other {
            let mut solution = solution?;
            solution.summary.elapsed = start.elapsed();
            return Ok(solution);
        }
        if drafts.kind() != SchemeKind::Iid {
            return Err(ConvexError::Unsupported {
                scheme: drafts.kind(),
            });
        }
        let limit = resolvable_drafts(self.tolerance);
        if drafts.n() > limit {
            return Err(ConvexError::Precision {
                n: drafts.n(),
                limit,
                tolerance: self.tolerance,
            });
        }
        let (target, draft) = (problem.target(), &drafts.drafts()[0]);
        let support = draft_support(&[draft.probs()]);
        let restricted = (support.len() < target.len())
            .then(|| restrict(target, draft, &support, workspace))
            .transpose()?;
        let (target, draft) = restricted.as_ref().map_or((target, draft), |(p, q)| (p, q));
        let vocabulary = problem.vocab_size();
        let parallel = support.len() >= PARALLEL_FROM;
        let solve = |workspace: &mut Workspace| {
            self.solve_on_support(target, draft, drafts.n(), support, vocabulary, workspace)
        };
        // Small programs make no parallel call and run on the calling
        // thread; larger ones do, and each call from outside the pool would
        // wake a worker and wait for it: there the whole solve goes to the
        // pool once. The pass over the vocabulary above stays on the
        // calling thread, whose cache holds the rows.
        let solution = if parallel {
            rayon::scope(|_| solve(workspace))
        } else {
            solve(workspace)
        };
        if let Some((target, draft)) = restricted {
            workspace.give_problem(target.into_probs(), draft.into_probs());
        }
        let mut solution = solution?;
        solution.summary.elapsed = start.elapsed();
        Ok(solution)
    }

    /// Solves the programs of the problem restricted to the draft's
    /// support (`restrict`), whose first tokens are `support`'s.
    fn solve_on_support(
        &self,
        target: &Distribution,
        draft: &Distribution,
        n: usize,
        support: Vec<usize>,
        vocabulary: usize,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        let bound = optimal_acceptance_iid(target, draft, n, IidAlgorithm::default())?;
        // Programs, solution and acceptance on the support (the extra token
        // of `restrict`, if any, is never selected and never in H*).
        let (p, q) = (
            &target.probs()[..support.len()],
            &draft.probs()[..support.len()],
        );
        let mut in_h = vec![false; support.len()];
        bound
            .certificate
            .iter()
            .filter(|&&y| y < support.len())
            .for_each(|&y| in_h[y] = true);
        // Sized up front, not grown by doubling: each growth step of a
        // vocabulary-sized list is a fresh mapping to fault in.
        let mut inner = Vec::with_capacity(bound.certificate.len());
        inner.extend(bound.certificate.iter().take_while(|&&y| y < support.len()));
        let mut outer = Vec::with_capacity(support.len() - inner.len());
        outer.extend((0..support.len()).filter(|&y| !in_h[y]));
        let q_h: f64 = inner.iter().map(|&y| q[y]).sum();

        let side_tolerance = 0.5 * self.tolerance;
        let (outer_q, outer_p) = (workspace.gather(&outer, q), workspace.gather(&outer, p));
        let outer_potential = Selectable {
            q: &outer_q,
            base: q_h,
            n,
        };
        let outer_solved = ratio_groups::minimise(
            &Side::Outer.program(&outer_potential, &outer_p),
            side_tolerance,
            self.max_iterations,
            workspace,
        )?;
        let (inner_q, inner_p) = (workspace.gather(&inner, q), workspace.gather(&inner, p));
        let inner_potential = Selectable {
            q: &inner_q,
            base: 0.0,
            n,
        };
        let inner_solved = ratio_groups::minimise(
            &Side::Inner.program(&inner_potential, &inner_p),
            side_tolerance,
            self.max_iterations,
            workspace,
        )?;

        let certificate = inner.iter().map(|&y| support[y]).collect();
        let (rule, iterations) = Assembly {
            vocabulary,
            tokens: support,
            outer: (&outer, outer_solved),
            inner: (&inner, inner_solved),
            inner_none: 0.0,
            counting: Counting::PerDraft,
        }
        .rule(workspace);
        for vector in [outer_q, outer_p, inner_q, inner_p] {
            workspace.give(vector);
        }
        let summary = Summary {
            alpha_star: bound.alpha_star,
            acceptance: rule.acceptance(p),
            certificate,
            status: Status::Converged {
                tolerance: self.tolerance,
            },
            iterations,
            elapsed: Default::default(),
        };
        Ok(ConvexSolution { summary, rule })
    }
}

impl ConvexSolver {
    /// Drafts from different draft models (`docs/DESIGN.md` §6b), whose
    /// H* has no closed form. H comes from a combinatorial search
    /// (`searched_cut`); the outer and inner programs of the i.i.d.
    /// method, with H for H*, give a lossless rule whose acceptance is a
    /// lower bound on alpha*, and H's cut p(H) + 1 - Π q_i(H) an upper
    /// one: the solution's `alpha_star` and `acceptance` are the ends of
    /// an interval that holds alpha*, and H is its certificate. Both
    /// programs reach their tolerance only where H's cut is within it of
    /// the least (their acceptances then add up to the upper end): when
    /// one does not, a program over every drafted token, theta in
    /// [-THETA_LIMIT, 0], looks for a better H (the "separating" program:
    /// its objective grows like THETA_LIMIT x (p(H) - Π q_i(H)) for the
    /// tokens held at the lower bound, so its minimiser holds a minimiser
    /// of the cut), started from the searched H at the lower bound, and H
    /// is the best prefix of the tokens by ascending theta there.
    fn solve_independent(
        &self,
        problem: &Problem,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        let laws: Vec<&[f64]> = problem
            .drafts()
            .drafts()
            .iter()
            .map(|q| q.probs())
            .collect();
        let target = problem.target().probs();
        // p and q on the drafted tokens, from the workspace; where every
        // token is drafted (a softmax at the full vocabulary), the laws as
        // they are.
        let support = draft_support(&laws);
        let gathered: Vec<Vec<f64>> = if support.len() < target.len() {
            (std::iter::once(target).chain(laws.iter().copied()))
                .map(|x| workspace.gather(&support, x))
                .collect()
        } else {
            Vec::new()
        };
        let (p, q): (&[f64], Vec<&[f64]>) = match gathered.split_first() {
            Some((p, q)) => (p, q.iter().map(Vec::as_slice).collect()),
            None => (target, laws),
        };
        let drafted = Drafted {
            p,
            q: &q,
            support: &support,
            vocabulary: target.len(),
        };
        let solved = self.solve_drafted(&drafted, workspace);
        for vector in gathered {
            workspace.give(vector);
        }
        solved
    }

    /// `solve_independent` on the drafted tokens: the searched H, and
    /// where a side reaches its cap, the separating program's.
    fn solve_drafted(
        &self,
        drafted: &Drafted,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        let Drafted { p, q, .. } = *drafted;
        let n = q.len();
        let (in_h, cut) = searched_cut(p, q);
        let failure = match self.solve_independent_sides(drafted, (&in_h, cut), None, workspace) {
            Err(failure @ ConvexError::IterationCap { .. }) => failure,
            solved => return solved,
        };
        let nothing = vec![0.0; n];
        let laws: Vec<Vec<f64>> = q.iter().map(|law| law.to_vec()).collect();
        let separating = Program {
            name: "separating",
            potential: &Independent::new(&laws, &nothing, false),
            p,
            bounds: (-THETA_LIMIT, 0.0),
            stop: Stop::ProjectedGradient,
            reach: THETA_LIMIT,
        };
        let start = (in_h.iter())
            .map(|&inside| if inside { -THETA_LIMIT } else { 0.0 })
            .collect();
        let separated =
            separating.minimise(start, 0.1 * self.tolerance, self.max_iterations, workspace)?;
        let PrefixCut {
            in_h: prefix,
            cut: prefix_cut,
            ..
        } = best_prefix_cut(&separated.theta, p, q);
        if prefix_cut >= cut {
            return Err(failure);
        }
        let mut solution = self.solve_independent_sides(
            drafted,
            (&prefix, prefix_cut),
            Some(&separated.theta),
            workspace,
        )?;
        solution.summary.iterations += separated.iterations;
        Ok(solution)
    }

    /// The outer and inner programs of independent drafts with H =
    /// `in_h` of cut `cut`, the outer one started from `outer_guess` on
    /// its tokens where given (else, as the inner one, from the solution
    /// of a program over groups of tokens, `ratio_groups`).
    fn solve_independent_sides(
        &self,
        drafted: &Drafted,
        (in_h, cut): (&[bool], f64),
        outer_guess: Option<&[f64]>,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        let Drafted { p, q, .. } = *drafted;
        // Both lists sized up front, as the i.i.d. method's, and each
        // side's p and q_i from the workspace.
        let inside = in_h.iter().filter(|&&inside| inside).count();
        let (mut inner, mut outer) = (
            Vec::with_capacity(inside),
            Vec::with_capacity(p.len() - inside),
        );
        for (y, &inside) in in_h.iter().enumerate() {
            if inside {
                inner.push(y);
            } else {
                outer.push(y);
            }
        }
        let mut restricted = |slots: &[usize]| -> (Vec<Vec<f64>>, Vec<f64>) {
            (
                q.iter().map(|law| workspace.gather(slots, law)).collect(),
                workspace.gather(slots, p),
            )
        };
        let (outer_q, outer_p) = restricted(&outer);
        let (inner_q, inner_p) = restricted(&inner);
        let q_h: Vec<f64> = inner_q.iter().map(|law| lane_sum(law)).collect();
        let sides = Sides {
            outer: (&outer, &outer_p),
            inner: (&inner, &inner_p),
            support: drafted.support.to_vec(),
            vocabulary: drafted.vocabulary,
            p,
        };
        let nothing = vec![0.0; q.len()];
        let outer_potential = Independent::new(&outer_q, &q_h, true);
        let inner_potential = Independent::new(&inner_q, &nothing, true);
        let side_tolerance = 0.5 * self.tolerance;
        let outer_program = Side::Outer.program(&outer_potential, &outer_p);
        let outer_solved = match outer_guess {
            Some(theta) => {
                let guess = outer.iter().map(|&y| theta[y]).collect();
                outer_program.minimise_from_better(
                    guess,
                    side_tolerance,
                    self.max_iterations,
                    workspace,
                )
            }
            None => ratio_groups::minimise(
                &outer_program,
                side_tolerance,
                self.max_iterations,
                workspace,
            ),
        }?;
        let inner_solved = ratio_groups::minimise(
            &Side::Inner.program(&inner_potential, &inner_p),
            side_tolerance,
            self.max_iterations,
            workspace,
        )?;
        let solution = self.assemble(sides, (outer_solved, inner_solved), 1.0 + cut, workspace);
        for vector in outer_q.into_iter().chain(inner_q).chain([outer_p, inner_p]) {
            workspace.give(vector);
        }
        Ok(solution)
    }
}

/// The drafted tokens of a problem with independent drafts: p and each
/// draft's q on them, their vocabulary ids and the vocabulary's size.
struct Drafted<'a> {
    p: &'a [f64],
    q: &'a [&'a [f64]],
    support: &'a [usize],
    vocabulary: usize,
}

impl ConvexSolver {
    /// Drafts without replacement (`docs/DESIGN.md` §6b): H* from the
    /// closed form (mdsd-bounds), then the outer program over the drafted
    /// tokens outside H* (H*'s tokens drafted but never selected) and the
    /// inner one over H* (its world: every draft in H*), with the
    /// exponential-clock potential.
    fn solve_without_replacement(
        &self,
        problem: &Problem,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        let (target, draft) = (problem.target(), &problem.drafts().drafts()[0]);
        // On the draft's support, as the i.i.d. solve (`restrict`): a draft
        // truncated to its top k needs k entries of p, and the closed form
        // a sort of k tokens, not of the vocabulary.
        let support = draft_support(&[draft.probs()]);
        let restricted = (support.len() < target.len())
            .then(|| restrict(target, draft, &support, workspace))
            .transpose()?;
        let vocabulary = problem.vocab_size();
        let solution = match &restricted {
            Some((p, q)) => {
                let drafts = DraftScheme::without_replacement(q.clone(), problem.drafts().n())?;
                self.solve_without_replacement_on_support(
                    p, &drafts, support, vocabulary, workspace,
                )
            }
            None => self.solve_without_replacement_on_support(
                target,
                problem.drafts(),
                support,
                vocabulary,
                workspace,
            ),
        };
        if let Some((target, draft)) = restricted {
            workspace.give_problem(target.into_probs(), draft.into_probs());
        }
        solution
    }

    /// `solve_without_replacement` on the problem restricted to the
    /// draft's support, whose first tokens are `support`'s.
    fn solve_without_replacement_on_support(
        &self,
        target: &Distribution,
        drafts: &DraftScheme,
        support: Vec<usize>,
        vocabulary: usize,
        workspace: &mut Workspace,
    ) -> Result<ConvexSolution, ConvexError> {
        let bound = optimal_acceptance_wor(target, drafts)?;
        let slots = support.len();
        let (p, q) = (
            &target.probs()[..slots],
            &drafts.drafts()[0].probs()[..slots],
        );
        // The token of the rest, if any, is never drafted, so never in H*.
        let mut in_h = vec![false; slots];
        bound.certificate.iter().for_each(|&y| in_h[y] = true);
        let inner: Vec<usize> = (0..slots).filter(|&k| in_h[k]).collect();
        let outer: Vec<usize> = (0..slots).filter(|&k| !in_h[k]).collect();
        let gather =
            |x: &[f64], slots: &[usize]| -> Vec<f64> { slots.iter().map(|&k| x[k]).collect() };
        let (outer_q, outer_p, inner_q, inner_p) = (
            gather(q, &outer),
            gather(p, &outer),
            gather(q, &inner),
            gather(p, &inner),
        );
        let n = drafts.n();
        let sides = Sides {
            outer: (&outer, &outer_p),
            inner: (&inner, &inner_p),
            support,
            vocabulary,
            p,
        };
        let outer_potential = WithoutReplacement::new(&outer_q, &inner_q, &[], n);
        let inner_potential = WithoutReplacement::new(&inner_q, &[], &outer_q, n);
        // Newton from theta = 0, a bound of both programs, frees the
        // tokens off it a few at a time (tens of iterations at full V):
        // the log-ratio model's start where it is better.
        let mut solve = |side: Side, potential: &WithoutReplacement, q: &[f64], p: &[f64]| {
            let program = side.program(potential, p);
            // The selected mass makes the potential's fine grid: none for
            // a side without tokens, which the program returns at once.
            let guess = if p.is_empty() {
                Vec::new()
            } else {
                log_ratio_start(q, p, program.bounds, potential.selected_mass())
            };
            program.minimise_from_better(
                guess,
                0.5 * self.tolerance,
                self.max_iterations,
                workspace,
            )
        };
        let outer_solved = solve(Side::Outer, &outer_potential, &outer_q, &outer_p)?;
        let inner_solved = solve(Side::Inner, &inner_potential, &inner_q, &inner_p)?;
        Ok(self.assemble(
            sides,
            (outer_solved, inner_solved),
            bound.alpha_star,
            workspace,
        ))
    }

    /// The rule of the outer and inner programs' solutions (`docs/DESIGN.md`
    /// §5), and its summary with `alpha_star` and H (the inner slots).
    fn assemble(
        &self,
        sides: Sides,
        (outer, inner): (Solved, Solved),
        alpha_star: f64,
        workspace: &mut Workspace,
    ) -> ConvexSolution {
        let certificate = sides.inner.0.iter().map(|&k| sides.support[k]).collect();
        let (rule, iterations) = Assembly {
            vocabulary: sides.vocabulary,
            tokens: sides.support,
            outer: (sides.outer.0, outer),
            inner: (sides.inner.0, inner),
            inner_none: 0.0,
            counting: Counting::PerDraft,
        }
        .rule(workspace);
        let summary = Summary {
            alpha_star,
            acceptance: rule.acceptance(sides.p),
            certificate,
            status: Status::Converged {
                tolerance: self.tolerance,
            },
            iterations,
            elapsed: Default::default(),
        };
        ConvexSolution { summary, rule }
    }
}

/// The two sides of a problem on its drafted tokens (`support`, in
/// vocabulary ids): each side's slots in `support` and its p, and p on
/// the whole support.
struct Sides<'a> {
    outer: (&'a [usize], &'a [f64]),
    inner: (&'a [usize], &'a [f64]),
    support: Vec<usize>,
    vocabulary: usize,
    p: &'a [f64],
}

/// The tokens of positive probability under some draft law (the laws of
/// one vocabulary), ascending, in one pass over the laws alone (p is read
/// only on them, by `restrict`). Chunks with no set bit in any law are
/// skipped after one OR over them (a truncated draft's are mostly
/// empty); the tests of the others become a bit mask: drafted tokens are
/// spread along the vocabulary, and a branch per token would mispredict
/// on each of them.
fn draft_support(laws: &[&[f64]]) -> Vec<usize> {
    const CHUNK: usize = 32;
    let size = laws.first().map_or(0, |law| law.len());
    let mut support = Vec::new();
    let whole = size - size % CHUNK;
    for start in (0..whole).step_by(CHUNK) {
        let chunks = laws.iter().map(|law| &law[start..start + CHUNK]);
        // Only +0.0 has no bit set (a draft's entries are never negative).
        let any = (chunks.clone())
            .flat_map(|chunk| chunk.iter())
            .fold(0, |any, q| any | q.to_bits());
        if any == 0 {
            continue;
        }
        let mut drafted = 0u32;
        for chunk in chunks {
            for (lane, &q) in chunk.iter().enumerate() {
                drafted |= u32::from(q > 0.0) << lane;
            }
        }
        if drafted == u32::MAX {
            // Every token of the chunk (at the full vocabulary, all of them).
            support.extend(start..start + CHUNK);
            continue;
        }
        while drafted != 0 {
            support.push(start + drafted.trailing_zeros() as usize);
            drafted &= drafted - 1;
        }
    }
    support.extend((whole..size).filter(|&y| laws.iter().any(|law| law[y] > 0.0)));
    support
}

/// The problem on the draft's support, whose tokens come first in the
/// order of `support`, plus one token of draft probability 0 holding the
/// target mass of the rest when it has any. A token that is never drafted
/// gets no weight, and is never in H*: adding it to H raises p(H) and not
/// q(H). So alpha* and H* are those of the whole problem, found in O(k)
/// after one pass over the draft.
///
/// The rest is 1 - p(support), not a sum over the other tokens, which
/// would read all of p where a top-k draft needs k entries of it: its
/// error, the rounding of p's normalisation, at most about V ε, is
/// absolute, as is every error of an acceptance. Below V ε the rest is
/// summed directly over the undrafted tokens: a draft that covers all of
/// the target's mass gets no token of rounding-sized mass, which would
/// shift ties of H* in degenerate problems (alpha* = 1) to where the inner
/// program cannot reach its tolerance (a saved proptest regression).
fn restrict(
    target: &Distribution,
    draft: &Distribution,
    support: &[usize],
    workspace: &mut Workspace,
) -> Result<(Distribution, Distribution), CoreError> {
    let (p, q) = (target.probs(), draft.probs());
    // With room for the token of the rest.
    let (mut p_support, mut q_support) = workspace.take_problem(support.len() + 1);
    p_support.extend(support.iter().map(|&y| p[y]));
    q_support.extend(support.iter().map(|&y| q[y]));
    let mut rest = 1.0 - lane_sum(&p_support);
    if rest <= p.len() as f64 * f64::EPSILON {
        rest = sum_where(p, q, |q| q == 0.0);
    }
    if rest > 0.0 {
        p_support.push(rest);
        q_support.push(0.0);
    }
    Ok((
        Distribution::from_probs(p_support)?,
        Distribution::from_probs(q_support)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::{ConvexSolver, draft_support, searched_cut};
    use mdsd_core::{Distribution, DraftScheme, Problem, Solve};
    use mdsd_lp::LpSolver;

    /// Instances on which the searched cut stops at a local minimum (two
    /// or three draft laws on partly disjoint supports): the solver falls
    /// back on the separating program, and its interval holds the LP's
    /// alpha*, narrower than the tolerance, with a certificate that
    /// reproduces the upper end.
    #[test]
    fn independent_drafts_past_a_searched_cut_that_misses() {
        type Case<'a> = (&'a [f64], &'a [&'a [f64]]);
        let cases: [Case; 2] = [
            (
                &[
                    0.1449052066655149,
                    0.045619143133078716,
                    0.8094564590842702,
                    1.9191117136198334e-5,
                ],
                &[
                    &[
                        0.4753254863994784,
                        0.004428224707498271,
                        0.0,
                        0.5202462888930234,
                    ],
                    &[0.0, 0.10034808267536974, 0.8996519173246303, 0.0],
                ],
            ),
            (
                &[
                    0.33749501079759264,
                    0.0023197030707433767,
                    0.043905640438279686,
                    0.38602631923001984,
                    0.0,
                    0.01962087082690741,
                    0.0,
                    0.21063245563645705,
                ],
                &[
                    &[
                        5.394828333460408e-5,
                        0.0,
                        0.0,
                        0.010815549685181872,
                        0.0202592299827595,
                        0.14665923376844597,
                        0.25335811695074356,
                        0.5688539213295346,
                    ],
                    &[
                        0.016043842750714854,
                        0.004601739760821601,
                        0.0053096338856489095,
                        0.09983493274013039,
                        0.29523862710348303,
                        0.2726440859123744,
                        0.2970931255834386,
                        0.009234012263388248,
                    ],
                    &[
                        0.4391402497422637,
                        0.04018286052500709,
                        0.04767599797897509,
                        0.462110309727216,
                        0.0,
                        0.0,
                        0.0,
                        0.010890582026538033,
                    ],
                ],
            ),
        ];
        for (p, laws) in cases {
            let q: Vec<&[f64]> = laws.to_vec();
            let cut_of = |h: &[bool]| -> f64 {
                let inside =
                    |x: &[f64]| -> f64 { (0..x.len()).filter(|&y| h[y]).map(|y| x[y]).sum() };
                inside(p) - q.iter().map(|law| inside(law)).product::<f64>()
            };
            let least = (0..1u32 << p.len())
                .map(|mask| cut_of(&(0..p.len()).map(|y| mask >> y & 1 == 1).collect::<Vec<_>>()))
                .fold(f64::INFINITY, f64::min);
            let (_, searched) = searched_cut(p, &q);
            assert!(
                searched > least + 1e-3,
                "the search finds the least cut here"
            );

            let laws: Vec<Distribution> = (laws.iter())
                .map(|law| Distribution::from_probs(law.to_vec()).unwrap())
                .collect();
            let problem = Problem::new(
                Distribution::from_probs(p.to_vec()).unwrap(),
                DraftScheme::independent(laws).unwrap(),
            )
            .unwrap();
            let solver = ConvexSolver::default();
            let s = solver.solve(&problem).unwrap().summary;
            let exact = LpSolver::default()
                .solve(&problem)
                .unwrap()
                .summary
                .alpha_star;
            assert!(s.acceptance <= exact + 1e-9 && exact <= s.alpha_star + 1e-9);
            assert!(s.alpha_star - s.acceptance <= solver.tolerance);
            let mut h = vec![false; p.len()];
            s.certificate.iter().for_each(|&y| h[y] = true);
            assert!((1.0 + cut_of(&h) - s.alpha_star).abs() < 1e-12);
        }
    }

    /// The support is the tokens with q > 0, ascending, whatever blocks
    /// they fall in: empty blocks, full ones, -0.0 entries (bits set, not
    /// drafted), and a remainder after the last whole block; of two laws,
    /// the tokens positive in either.
    #[test]
    fn draft_support_is_the_positive_entries() {
        for v in [0, 5, 31, 32, 33, 64, 100, 1000] {
            for stride in [1, 3, 32, 37, 200] {
                let q: Vec<f64> = (0..v)
                    .map(|y| match y % stride {
                        0 => 1.0 / v as f64,
                        1 => -0.0,
                        _ => 0.0,
                    })
                    .collect();
                let expected: Vec<usize> = (0..v).filter(|&y| q[y] > 0.0).collect();
                assert_eq!(draft_support(&[&q]), expected, "v = {v}, stride {stride}");
                // A second law, positive elsewhere: the union.
                let other: Vec<f64> = (0..v).map(|y| if y % 7 == 2 { 0.5 } else { 0.0 }).collect();
                let either: Vec<usize> = (0..v).filter(|&y| q[y] > 0.0 || other[y] > 0.0).collect();
                assert_eq!(
                    draft_support(&[&q, &other]),
                    either,
                    "two laws, v = {v}, stride {stride}"
                );
            }
        }
    }
}
