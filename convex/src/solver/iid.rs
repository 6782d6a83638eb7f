//! n i.i.d. drafts (`docs/DESIGN.md` §5): H* from the closed form, the
//! enumeration-free selection potential on each side, both programs
//! started from programs over groups of tokens by ratio.

use mdsd_bounds::{IidAlgorithm, optimal_acceptance_iid};
use mdsd_core::{Distribution, Problem};

use super::programs::{ConvexSolution, Side, Sides, assemble, solve_side};
use super::support::on_support;
use crate::budget::Budget;
use crate::error::ConvexError;
use crate::group_rule;
use crate::numeric::sum_at;
use crate::potential::iid::Selectable;
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
/// (`restrict`), whose first tokens are `support`'s.
fn solve_on_support(
    target: &Distribution,
    draft: &Distribution,
    n: usize,
    support: Vec<usize>,
    vocabulary: usize,
    budget: &Budget,
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
    // H*'s slots are its tokens on the support, ascending: the closed
    // form's list, without the extra token of `restrict` past them.
    let mut inner = bound.certificate;
    inner.truncate(inner.partition_point(|&y| y < support.len()));
    // Branch-free compaction: whether a token is in H* follows no pattern
    // along the vocabulary. Each token is written at the next free slot,
    // which moves on only past the outer ones (one slot of room past them).
    let mut outer = vec![0; support.len() - inner.len() + 1];
    let mut kept = 0;
    for (y, &inside) in in_h.iter().enumerate() {
        outer[kept] = y;
        kept += usize::from(!inside);
    }
    outer.truncate(kept);
    let q_h = sum_at(&inner, q);

    // The outer program's world holds H*'s draft mass as its base: a
    // draft in H* is drafted but never selected there.
    let (outer_q, outer_p) = (workspace.gather(&outer, q), workspace.gather(&outer, p));
    let outer_potential = Selectable {
        q: &outer_q,
        base: q_h,
        n,
    };
    let outer_solved = solve_side(
        Side::Outer,
        &outer_potential,
        &outer_p,
        budget,
        group_rule::minimise,
        workspace,
    )?;
    let (inner_q, inner_p) = (workspace.gather(&inner, q), workspace.gather(&inner, p));
    let inner_potential = Selectable {
        q: &inner_q,
        base: 0.0,
        n,
    };
    let inner_solved = solve_side(
        Side::Inner,
        &inner_potential,
        &inner_p,
        budget,
        group_rule::minimise,
        workspace,
    )?;
    let sides = Sides {
        outer: (&outer, &outer_p),
        inner: (inner, &inner_p),
        support,
        vocabulary,
        p,
    };
    let solution = assemble(
        budget,
        sides,
        (outer_solved, inner_solved),
        bound.alpha_star,
        workspace,
    );
    for vector in [outer_q, outer_p, inner_q, inner_p] {
        workspace.give(vector);
    }
    Ok(solution)
}
