//! Drafts from different draft models (`docs/DESIGN.md` §6b), whose H* has
//! no closed form. H comes from a combinatorial search (`searched_cut`);
//! the outer and inner programs of the i.i.d. method, with H for H*, give
//! a lossless rule whose acceptance is a lower bound on alpha*, and H's
//! cut p(H) + 1 - Π q_i(H) an upper one: the solution's `alpha_star` and
//! `acceptance` are the ends of an interval that holds alpha*, and H is
//! its certificate. Both programs reach their tolerance only where H's cut
//! is within it of the least (their acceptances then add up to the upper
//! end): when one does not, a program over every drafted token, theta in
//! [-THETA_LIMIT, 0], looks for a better H (the "separating" program: its
//! objective grows like THETA_LIMIT x (p(H) - Π q_i(H)) for the tokens
//! held at the lower bound, so its minimiser holds a minimiser of the
//! cut), started from the searched H at the lower bound, and H is the best
//! prefix of the tokens by ascending theta there.

use mdsd_core::Problem;

use super::programs::{ConvexSolution, Side, Sides, assemble, solve_side};
use super::support::draft_support;
use crate::budget::Budget;
use crate::cut::{PrefixCut, best_prefix_cut, searched_cut};
use crate::error::ConvexError;
use crate::newton::{Program, Stop};
use crate::numeric::lane_sum;
use crate::potential::independent::Independent;
use crate::ratio_groups;
use crate::selection_rule::Support;
use crate::thresholds::THETA_LIMIT;
use crate::workspace::Workspace;

/// The share of the tolerance the separating program is solved to.
const SEPARATING_TOLERANCE_SHARE: f64 = 0.1;

/// The drafted tokens of a problem with independent drafts: p and each
/// distinct draft law's q on them with its count of drafts, their
/// vocabulary ids and the vocabulary's size.
struct Drafted<'a> {
    p: &'a [f64],
    q: &'a [&'a [f64]],
    counts: &'a [usize],
    support: &'a Support,
    vocabulary: usize,
}

/// Solves a problem with independent drafts on the drafted tokens.
pub(super) fn solve(
    problem: &Problem,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    let (laws, counts) = distinct_laws(problem.drafts().drafts().iter().map(|q| q.probs()));
    let target = problem.target().probs();
    // p and q on the drafted tokens, from the workspace; where every
    // token is drafted (a softmax at the full vocabulary), the laws as
    // they are.
    let support = draft_support(&laws);
    let gathered: Vec<Vec<f64>> = match &support {
        Support::Tokens(tokens) => (std::iter::once(target).chain(laws.iter().copied()))
            .map(|x| workspace.gather(tokens, x))
            .collect(),
        Support::Vocabulary(_) => Vec::new(),
    };
    let (p, q): (&[f64], Vec<&[f64]>) = match gathered.split_first() {
        Some((p, q)) => (p, q.iter().map(Vec::as_slice).collect()),
        None => (target, laws),
    };
    let drafted = Drafted {
        p,
        q: &q,
        counts: &counts,
        support: &support,
        vocabulary: target.len(),
    };
    let solved = solve_drafted(&drafted, budget, workspace);
    for vector in gathered {
        workspace.give(vector);
    }
    solved
}

/// The distinct laws among the drafts', in their first draft's order, and
/// the number of drafts of each: drafts of one law share every sum over
/// tokens (`potential::independent`). Equal values make one law, whether
/// or not they are one vector.
fn distinct_laws<'a>(drafts: impl Iterator<Item = &'a [f64]>) -> (Vec<&'a [f64]>, Vec<usize>) {
    let (mut laws, mut counts): (Vec<&[f64]>, Vec<usize>) = (Vec::new(), Vec::new());
    for law in drafts {
        let same = |other: &&[f64]| std::ptr::eq(*other, law) || *other == law;
        match laws.iter().position(same) {
            Some(at) => counts[at] += 1,
            None => {
                laws.push(law);
                counts.push(1);
            }
        }
    }
    (laws, counts)
}

/// `solve` on the drafted tokens: the searched H, and where a side
/// reaches its cap, the separating program's.
fn solve_drafted(
    drafted: &Drafted,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    let Drafted { p, q, counts, .. } = *drafted;
    let (in_h, cut) = searched_cut(p, q, counts);
    let failure = match solve_sides(drafted, (&in_h, cut), None, budget, workspace) {
        Err(failure @ ConvexError::IterationCap { .. }) => failure,
        solved => return solved,
    };
    let nothing = vec![0.0; q.len()];
    let laws: Vec<Vec<f64>> = q.iter().map(|law| law.to_vec()).collect();
    let separating = Program {
        name: "separating",
        potential: &Independent::new(&laws, counts, &nothing, false),
        p,
        bounds: (-THETA_LIMIT, 0.0),
        stop: Stop::ProjectedGradient,
        reach: THETA_LIMIT,
    };
    let start = (in_h.iter())
        .map(|&inside| if inside { -THETA_LIMIT } else { 0.0 })
        .collect();
    let separated =
        separating.minimise(start, &budget.share(SEPARATING_TOLERANCE_SHARE), workspace)?;
    let PrefixCut {
        in_h: prefix,
        cut: prefix_cut,
        ..
    } = best_prefix_cut(&separated.theta, p, q, counts);
    if prefix_cut >= cut {
        return Err(failure);
    }
    let mut solution = solve_sides(
        drafted,
        (&prefix, prefix_cut),
        Some(&separated.theta),
        budget,
        workspace,
    )?;
    solution.summary.iterations += separated.iterations;
    Ok(solution)
}

/// The outer and inner programs of independent drafts with H = `in_h` of
/// cut `cut`, the outer one started from `outer_guess` on its tokens where
/// given (else, as the inner one, from the solution of a program over
/// groups of tokens, `ratio_groups`).
fn solve_sides(
    drafted: &Drafted,
    (in_h, cut): (&[bool], f64),
    outer_guess: Option<&[f64]>,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<ConvexSolution, ConvexError> {
    let Drafted { p, q, counts, .. } = *drafted;
    // Both lists sized up front, as the i.i.d. method's, and each side's
    // p and q_i from the workspace.
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
        inner: (inner, &inner_p),
        support: drafted.support.clone(),
        vocabulary: drafted.vocabulary,
        p,
    };
    let nothing = vec![0.0; q.len()];
    let outer_potential = Independent::new(&outer_q, counts, &q_h, true);
    let inner_potential = Independent::new(&inner_q, counts, &nothing, true);
    let outer_solved = solve_side(
        Side::Outer,
        &outer_potential,
        &outer_p,
        budget,
        |program, budget, workspace| match outer_guess {
            Some(theta) => {
                let guess = outer.iter().map(|&y| theta[y]).collect();
                program.minimise_from_better(guess, budget, workspace)
            }
            None => ratio_groups::minimise(program, budget, workspace),
        },
        workspace,
    );
    let inner_solved = outer_solved.and_then(|outer_solved| {
        let inner_solved = solve_side(
            Side::Inner,
            &inner_potential,
            &inner_p,
            budget,
            ratio_groups::minimise,
            workspace,
        )?;
        Ok((outer_solved, inner_solved))
    });
    let solution = inner_solved.map(|solved| assemble(budget, sides, solved, 1.0 + cut, workspace));
    for vector in outer_q.into_iter().chain(inner_q).chain([outer_p, inner_p]) {
        workspace.give(vector);
    }
    solution
}

#[cfg(test)]
mod tests {
    use crate::cut::searched_cut;
    use crate::solver::ConvexSolver;
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
            let (_, searched) = searched_cut(p, &q, &vec![1; q.len()]);
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
            assert!(s.alpha_star - s.acceptance <= solver.budget().max_gap);
            let mut h = vec![false; p.len()];
            s.certificate.iter().for_each(|&y| h[y] = true);
            assert!((1.0 + cut_of(&h) - s.alpha_star).abs() < 1e-12);
        }
    }
}
