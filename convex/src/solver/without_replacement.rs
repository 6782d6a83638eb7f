//! Drafts without replacement (`docs/DESIGN.md` §6b): H* from the closed
//! form (mdsd-bounds), then the outer program over the drafted tokens
//! outside H* (H*'s tokens drafted but never selected) and the inner one
//! over H* (its world: every draft in H*), with the exponential-clock
//! potential, each from a program over groups of tokens by ratio where
//! it is large (`ratio_groups`), else from the better of the log-ratio
//! model and theta = 0.

use mdsd_bounds::optimal_acceptance_wor;
use mdsd_core::{Distribution, DraftScheme, Problem};

use super::programs::{ConvexSolution, Side, Sides, assemble, solve_side};
use super::support::on_support;
use crate::budget::Budget;
use crate::error::ConvexError;
use crate::numeric::join_from;
use crate::potential::without_replacement::{QOrder, WithoutReplacement};
use crate::ratio_groups;
use crate::selection_rule::Support;
use crate::workspace::Workspace;

/// Solves a problem with drafts without replacement on the draft's
/// support, as the i.i.d. solve does (`on_support`): a draft truncated to
/// its top k needs k entries of p, and the closed form a sort of k
/// tokens, not of the vocabulary.
pub(super) fn solve(
    problem: &Problem,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    let (target, draft) = (problem.target(), &problem.drafts().drafts()[0]);
    let vocabulary = problem.vocab_size();
    on_support(target, draft, workspace, |(p, q), support, workspace| {
        // One token holds q to the float's resolution: the others are of
        // subnormal probability, out of the programs, and too few to draw
        // n of; or 1 - q(top), which the inclusion laws divide by, rounds
        // to 0.
        let n = problem.drafts().n();
        if support.len() < n || (support.len() > 1 && draft.probs().contains(&1.0)) {
            return Err(dominant_draft(draft.probs()));
        }
        if support.len() == vocabulary {
            return solve_on_support(p, problem.drafts(), support, vocabulary, budget, workspace);
        }
        let drafts = DraftScheme::without_replacement(q.clone(), problem.drafts().n())?;
        solve_on_support(p, &drafts, support, vocabulary, budget, workspace)
    })
}

/// [`ConvexError::DominantDraft`] of a draft law: its most likely token,
/// and the mass of the others.
fn dominant_draft(q: &[f64]) -> ConvexError {
    let (token, _) = (q.iter().enumerate())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .expect("a distribution has entries");
    let rest = (q.iter().enumerate())
        .filter(|&(y, _)| y != token)
        .map(|(_, x)| x)
        .sum();
    ConvexError::DominantDraft { token, rest }
}

/// `solve` on the problem restricted to the draft's support, whose first
/// tokens are `support`'s.
fn solve_on_support(
    target: &Distribution,
    drafts: &DraftScheme,
    support: Support,
    vocabulary: usize,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    let slots = support.len();
    let (p, q) = (
        &target.probs()[..slots],
        &drafts.drafts()[0].probs()[..slots],
    );
    // Both sides' potentials read the tokens by ascending q: ranked on the
    // pool's other thread while this one finds H*.
    let (bound, ranked) = join_from(
        slots,
        || optimal_acceptance_wor(target, drafts),
        || QOrder::rank(q),
    );
    let bound = bound?;
    // The token of the rest, if any, is never drafted, so never in H*.
    let mut in_h = vec![false; slots];
    bound.certificate.iter().for_each(|&y| in_h[y] = true);
    let inner: Vec<usize> = (0..slots).filter(|&k| in_h[k]).collect();
    let outer: Vec<usize> = (0..slots).filter(|&k| !in_h[k]).collect();
    let gather = |x: &[f64], slots: &[usize]| -> Vec<f64> { slots.iter().map(|&k| x[k]).collect() };
    let (outer_q, outer_p, inner_q, inner_p) = (
        gather(q, &outer),
        gather(p, &outer),
        gather(q, &inner),
        gather(p, &inner),
    );
    let n = drafts.n();
    let order = QOrder {
        slots: &ranked,
        q,
        in_h: &in_h,
    };
    let outer_potential =
        WithoutReplacement::new(&outer_q, &inner_q, &[], n).in_order(order, Side::Outer);
    let inner_potential =
        WithoutReplacement::new(&inner_q, &[], &outer_q, n).in_order(order, Side::Inner);
    // The two sides side by side: the outer one's work is mostly its
    // clocks' first passes over H*'s tokens (its levels of groups share
    // them), on one thread, where the inner one's evaluations leave the
    // pool's other worker idle at times.
    let mut outer_workspace = workspace.take_beside();
    let (outer_solved, inner_solved) = join_from(
        slots,
        || {
            solve_side(
                Side::Outer,
                &outer_potential,
                &outer_p,
                budget,
                ratio_groups::minimise,
                &mut outer_workspace,
            )
        },
        || {
            solve_side(
                Side::Inner,
                &inner_potential,
                &inner_p,
                budget,
                ratio_groups::minimise,
                workspace,
            )
        },
    );
    workspace.give_beside(outer_workspace);
    let (outer_solved, inner_solved) = (outer_solved?, inner_solved?);
    let sides = Sides {
        outer: (&outer, &outer_p),
        inner: (inner, &inner_p),
        support,
        vocabulary,
        p,
    };
    Ok(assemble(
        budget,
        sides,
        (outer_solved, inner_solved),
        bound.alpha_star,
        workspace,
    ))
}
