//! n i.i.d. drafts (`docs/DESIGN.md` §5): H* from the closed form, the
//! enumeration-free selection potential on each side, both programs
//! started from programs over groups of tokens by ratio.

use mdsd_bounds::{IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{Distribution, Problem};

use super::programs::{ConvexSolution, Side, solution, solve_side};
use super::support::on_support;
use crate::budget::Budget;
use crate::error::ConvexError;
use crate::group_rule::{self, BothSides};
use crate::numeric::join_from;
use crate::potential::iid::Selectable;
use crate::selection_rule::{Counting, SelectionRule, Support};
use crate::thresholds::PARALLEL_FROM;
use crate::workspace::Workspace;

/// Solves an i.i.d. problem on the draft's support (`on_support`).
pub(super) fn solve(
    problem: &Problem,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    let drafts = problem.drafts();
    let limit = budget.resolvable_drafts();
    if drafts.n() > limit {
        return Err(ConvexError::Precision {
            n: drafts.n(),
            limit,
            tolerance: budget.max_gap,
        });
    }
    let vocabulary = problem.vocab_size();
    let (target, draft) = (problem.target(), &drafts.drafts()[0]);
    on_support(
        target,
        draft,
        workspace,
        |(target, draft), support, workspace| {
            let parallel = support.len() >= PARALLEL_FROM;
            let solve = |workspace: &mut Workspace| {
                solve_on_support(
                    target,
                    draft,
                    drafts.n(),
                    support,
                    vocabulary,
                    budget,
                    workspace,
                )
            };
            // Small programs make no parallel call and run on the calling
            // thread; larger ones do, and each call from outside the pool would
            // wake a worker and wait for it: there the whole solve goes to the
            // pool once. The pass over the vocabulary above stays on the
            // calling thread, whose cache holds the rows.
            if parallel {
                rayon::scope(|_| solve(workspace))
            } else {
                solve(workspace)
            }
        },
    )
}

/// Solves the programs of the problem restricted to the draft's support
/// (`restrict`), whose first tokens are `support`'s: both sides by rules
/// constant on groups in one pass over the tokens where they are large
/// (`group_rule::both_sides`), each other side on its own tokens.
fn solve_on_support(
    target: &Distribution,
    draft: &Distribution,
    n: usize,
    support: Support,
    vocabulary: usize,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    // Programs, solution and acceptance on the support (the extra token
    // of `restrict`, if any, is never selected and never in H*).
    let (p, q) = (
        &target.probs()[..support.len()],
        &draft.probs()[..support.len()],
    );
    // The tokens' cells of ratio need no side: made beside the closed
    // form, on the pool's other thread, where the solve runs on the pool.
    let closed_form = || optimal_acceptance_iid(target, draft, n, IidAlgorithm::default());
    let cells = || group_rule::coarse_cells(p, q, workspace);
    let (bound, cells) = join_from(support.len(), closed_form, cells);
    let bound = bound?;
    // H*'s slots are its tokens on the support, ascending: the closed
    // form's list, without the extra token of `restrict` past them.
    let mut inner = bound.certificate;
    inner.truncate(inner.partition_point(|&y| y < support.len()));
    let (in_h, q_h) = mask_and_mass(&inner, q);
    let BothSides {
        mut theta,
        mut marginal,
        solved,
        acceptance,
    } = group_rule::both_sides(cells, (p, q), &in_h, q_h, n, &budget.share(0.5), workspace);
    let (mut iterations, mut out_of_time) = (0, false);
    for (side, solved) in [Side::Outer, Side::Inner].into_iter().zip(solved) {
        let (side_iterations, side_out_of_time) = match solved {
            Some(solved) => solved,
            None => {
                // The outer program's world holds H*'s draft mass as its
                // base: a draft in H* is drafted but never selected there.
                let outer;
                let (slots, base) = match side {
                    Side::Outer => {
                        outer = outer_slots(&in_h);
                        (&outer, q_h)
                    }
                    Side::Inner => (&inner, 0.0),
                };
                let (side_q, side_p) = (workspace.gather(slots, q), workspace.gather(slots, p));
                let potential = Selectable {
                    q: &side_q,
                    base,
                    n,
                };
                let solved = solve_side(
                    side,
                    &potential,
                    &side_p,
                    budget,
                    group_rule::minimise,
                    workspace,
                )?;
                for ((&slot, &t), &r) in slots.iter().zip(&solved.theta).zip(&solved.marginal) {
                    theta[slot] = t;
                    marginal[slot] = r;
                }
                for vector in [side_q, side_p, solved.theta, solved.marginal] {
                    workspace.give(vector);
                }
                (solved.iterations, solved.out_of_time)
            }
        };
        iterations += side_iterations;
        out_of_time |= side_out_of_time;
    }
    let rule = SelectionRule {
        vocabulary,
        tokens: support,
        theta,
        in_certificate: in_h,
        selected: marginal,
        inner_none: 0.0,
        counting: Counting::PerDraft,
    };
    let acceptance = acceptance.unwrap_or_else(|| rule.acceptance(p));
    Ok(solution(
        budget,
        rule,
        (bound.alpha_star, inner),
        (iterations, out_of_time),
        acceptance,
    ))
}

/// Whether each slot is in H* (`inner`, its slots), and H*'s draft mass,
/// in one pass over H*. Its own function, not inlined: inlined into a
/// caller with many live values the accumulator goes to the stack, a
/// store and a load per token.
#[inline(never)]
fn mask_and_mass(inner: &[usize], q: &[f64]) -> (Vec<bool>, f64) {
    let mut in_h = vec![false; q.len()];
    let mut mass = 0.0;
    for &y in inner {
        in_h[y] = true;
        mass += q[y];
    }
    (in_h, mass)
}

/// The slots outside H*, ascending, compacted without a branch: whether a
/// token is in H* follows no pattern along the vocabulary. Each token is
/// written at the next free slot, which moves on only past the outer ones
/// (one slot of room past them).
fn outer_slots(in_h: &[bool]) -> Vec<usize> {
    let outside = in_h.iter().filter(|&&inside| !inside).count();
    let mut outer = vec![0; outside + 1];
    let mut kept = 0;
    for (y, &inside) in in_h.iter().enumerate() {
        outer[kept] = y;
        kept += usize::from(!inside);
    }
    outer.truncate(kept);
    outer
}
