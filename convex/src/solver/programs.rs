//! The two programs every scheme solves (`docs/DESIGN.md` §5): the outer
//! one over the tokens outside H (theta <= 0, stopped on the excess
//! Σ (r - p)+) and the inner one over H (theta >= 0, stopped on the
//! shortfall Σ (p - r)+), each run by `solve_side` with half the tolerance,
//! and their solutions assembled by `assemble` into one rule and its
//! `Summary`. A scheme builds its two potentials and says how each program
//! starts.

use mdsd_core::{Solution, Status, Summary};

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::newton::{Potential, Program, Solved};
use crate::selection_rule::{Assembly, Counting, SelectionRule, Support};
use crate::workspace::Workspace;

/// The solved selection rule, on the draft's support: with the draft
/// truncated to its top k tokens that is k of the V tokens, and the
/// solution costs O(k), not O(V).
#[derive(Debug, Clone, PartialEq)]
pub struct ConvexSolution {
    /// alpha* and H* from the closed form (for independent drafts, the
    /// upper end of the certified interval and its H); the acceptance of
    /// the selected token, Σ min(p, r); the Newton iterations of both
    /// programs, counting those of the grouped programs that start large
    /// ones.
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

pub(super) use crate::potential::Side;

impl Side {
    /// The side's program over `potential` with target `p`.
    fn program<'a, P: Potential>(self, potential: &'a P, p: &'a [f64]) -> Program<'a, P> {
        match self {
            Side::Outer => Program::outer(potential, p),
            Side::Inner => Program::inner(potential, p),
        }
    }
}

/// The two sides of a problem on its drafted tokens (`support`, in
/// vocabulary ids): each side's slots in `support` and its p, and p on
/// the whole support. The inner slots become H* in vocabulary ids.
pub(super) struct Sides<'a> {
    pub outer: (&'a [usize], &'a [f64]),
    pub inner: (Vec<usize>, &'a [f64]),
    pub support: Support,
    pub vocabulary: usize,
    pub p: &'a [f64],
}

/// Solves one side's program over `potential` with target `p`, started
/// by `start`, with half of `budget`'s tolerance: the acceptance lost is
/// the sum of the two programs'. A scheme solves the outer side before it
/// gathers the inner one's vectors, so that the outer program finds the
/// workspace's vectors free.
pub(super) fn solve_side<P: Potential>(
    side: Side,
    potential: &P,
    p: &[f64],
    budget: &Budget,
    start: impl FnOnce(&Program<P>, &Budget, &mut Workspace) -> Result<Solved, ConvexError>,
    workspace: &mut Workspace,
) -> Result<Solved, ConvexError> {
    start(&side.program(potential, p), &budget.share(0.5), workspace)
}

/// The rule of the outer and inner programs' solutions (`docs/DESIGN.md`
/// §5), and its summary with `alpha_star` and H (the inner slots).
pub(super) fn assemble(
    budget: &Budget,
    sides: Sides,
    (outer, inner): (Solved, Solved),
    alpha_star: f64,
    workspace: &mut Workspace,
) -> ConvexSolution {
    let out_of_time = outer.out_of_time || inner.out_of_time;
    let (rule, iterations) = Assembly {
        vocabulary: sides.vocabulary,
        tokens: sides.support,
        outer: (sides.outer.0, outer),
        inner: (&sides.inner.0, inner),
        inner_none: 0.0,
        counting: Counting::PerDraft,
    }
    .rule(workspace);
    let acceptance = rule.acceptance(sides.p);
    solution(
        budget,
        rule,
        (alpha_star, sides.inner.0),
        (iterations, out_of_time),
        acceptance,
    )
}

/// The solution of `rule` on the support, of `acceptance` against p
/// ([`SelectionRule::acceptance`]): its summary with `alpha_star` and H
/// (`certificate`, slots of the support, ascending), the Newton iterations
/// of both programs and whether the time limit stopped either.
pub(super) fn solution(
    budget: &Budget,
    rule: SelectionRule,
    (alpha_star, mut certificate): (f64, Vec<usize>),
    (iterations, out_of_time): (usize, bool),
    acceptance: f64,
) -> ConvexSolution {
    let status = if out_of_time {
        Status::TimeLimit
    } else {
        Status::Converged {
            tolerance: budget.max_gap,
        }
    };
    // H*: the slots, in place, as the rule's tokens.
    if let Support::Tokens(tokens) = &rule.tokens {
        certificate.iter_mut().for_each(|k| *k = tokens[*k]);
    }
    let summary = Summary {
        alpha_star,
        acceptance,
        certificate,
        status,
        iterations,
        elapsed: Default::default(),
    };
    ConvexSolution { summary, rule }
}
