//! The optimal verifiers: the selection rule of mdsd-convex for i.i.d.
//! drafts, drafts without replacement and from different models, and the optimal plan of
//! mdsd-flow for any scheme at small vocabularies.

use std::borrow::Cow;
use std::collections::HashMap;

use mdsd_convex::{ConvexSolution, ConvexSolver};
use mdsd_core::{DraftScheme, Plan, Problem, Progress, Solve, Status, token_set};
use mdsd_flow::FlowSolver;
use rayon::prelude::*;

use crate::laws::{check_drafts, draft_law};
use crate::selecting::{Selecting, Verification};
use crate::{OutputLaw, Verifier, VerifierKind, VerifyError, sample_rows};

/// The optimal verifier of mdsd-convex for i.i.d. drafts, drafts without
/// replacement and drafts from different models:
/// select one draft by the solved softmax weights (outer drafts first),
/// then single-draft speculative sampling of the selected token against p:
/// accept with min(1, p / r), else draw from (p - r)+, r the selected
/// token's law. Lossless for any weights; optimal up to the solver's
/// tolerance (independent drafts: within the interval it certifies).
pub struct OptimalConvex {
    solution: ConvexSolution,
    /// p and the residual.
    verification: Verification,
    /// r on the vocabulary where the rule holds fewer tokens (a truncated
    /// draft); at a full support r is the rule's own, not copied.
    expanded: Option<Vec<f64>>,
    /// The draft scheme, whose laws reject impossible drafts: one law
    /// for every position of i.i.d. drafts and drafts without replacement,
    /// held once.
    drafts: DraftScheme,
}

impl OptimalConvex {
    pub fn new(problem: &Problem, solver: &ConvexSolver) -> Result<Self, VerifyError> {
        Ok(Self::from_solution(problem.clone(), solver.solve(problem)?))
    }

    /// The verifier of a solution the caller already has (of `problem`,
    /// by a [`ConvexSolver`]), which keeps the problem's target and drafts
    /// as they are: at a full vocabulary each is a vector of its size.
    pub fn from_solution(problem: Problem, solution: ConvexSolution) -> Self {
        let (target, drafts) = problem.into_parts();
        let expanded = match solution.rule.selected_law() {
            Cow::Borrowed(_) => None,
            Cow::Owned(law) => Some(law),
        };
        Self {
            drafts,
            solution,
            verification: Verification::new(target.into_probs()),
            expanded,
        }
    }

    /// The solved selection rule and r.
    pub fn solution(&self) -> &ConvexSolution {
        &self.solution
    }
}

impl Selecting for OptimalConvex {
    fn selection(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        check_drafts(drafts, self.drafts.n(), self.verification.p.len())?;
        let impossible = |(i, &x): (usize, &usize)| draft_law(&self.drafts, i)[x] <= 0.0;
        if drafts.iter().enumerate().any(impossible) {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(self.solution.rule.selection(drafts))
    }

    fn selected_law(&self) -> &[f64] {
        match &self.expanded {
            Some(law) => law,
            None => &self.solution.rule.selected,
        }
    }

    fn verification(&self) -> &Verification {
        &self.verification
    }
}

// The solver's acceptance of the rule it returned: what a second solve of
// the same problem reports. A rule stopped by a time limit has only a lower
// bound on its acceptance, and a second solve need not stop at the same
// iterate: none then.
verifier_of_shape!(
    OptimalConvex,
    VerifierKind::OptimalConvex,
    selecting,
    |rule: &OptimalConvex| {
        let summary = &rule.solution.summary;
        (summary.status != Status::TimeLimit).then_some(summary.acceptance)
    }
);

/// The optimal verifier of B rows at once, the shape of a decoding step
/// (one row per sequence in flight): B selection rules prepared on
/// rayon's pool, one output token per row of `[B, n]` drafts. Each row's
/// rule is [`OptimalConvex`]'s for that row, so that the batch gives the
/// rows' single results; under a time budget ([`mdsd_convex::Budget`])
/// each row's solve has its own.
pub struct OptimalRules {
    rules: Vec<OptimalConvex>,
}

impl OptimalRules {
    /// The rules of `problems`, each solved by `solver` (whose workspaces
    /// serve the solves running at once) and keeping its problem's target
    /// and drafts (`OptimalConvex::from_solution`); the caller is asked
    /// between rows whether to stop. An error names its row.
    pub fn prepare(
        problems: Vec<Problem>,
        solver: &ConvexSolver,
        progress: &dyn Progress,
    ) -> Result<Self, VerifyError> {
        solver.check_settings()?;
        progress.start(problems.len() as u64);
        let rules = (problems.into_par_iter().enumerate())
            .map(|(row, problem)| {
                progress.check_stop()?;
                let solution = solver
                    .solve(&problem)
                    .map_err(|e| VerifyError::from(e).at_row(row))?;
                progress.advance(1);
                Ok(OptimalConvex::from_solution(problem, solution))
            })
            .collect::<Result<Vec<_>, VerifyError>>()?;
        Ok(Self { rules })
    }

    /// The rows' rules, in order.
    pub fn rules(&self) -> &[OptimalConvex] {
        &self.rules
    }

    /// One output token per row: row b verifies `drafts[b]` with its rule,
    /// drawing from stream b of `seed`, so that a seed gives the same
    /// tokens whatever the pool's size; the caller is asked between rows
    /// whether to stop.
    pub fn sample<D: AsRef<[usize]> + Sync>(
        &self,
        drafts: &[D],
        seed: u64,
        progress: &dyn Progress,
    ) -> Result<Vec<usize>, VerifyError> {
        let drafts_of = |row: usize, ids: &mut Vec<usize>| {
            ids.extend_from_slice(drafts[row].as_ref());
            Ok(())
        };
        self.sample_with(drafts.len(), drafts_of, seed, progress)
    }

    /// [`Self::sample`] of `rows` rows of drafts that `drafts_of(b, ids)`
    /// writes into an empty buffer, so that a caller reads them where they
    /// are ([`sample_rows`]).
    pub fn sample_with(
        &self,
        rows: usize,
        drafts_of: impl Fn(usize, &mut Vec<usize>) -> Result<(), VerifyError> + Sync,
        seed: u64,
        progress: &dyn Progress,
    ) -> Result<Vec<usize>, VerifyError> {
        if rows != self.rules.len() {
            return Err(VerifyError::BatchRows {
                rules: self.rules.len(),
                drafts: rows,
            });
        }
        sample_rows(rows, |row| &self.rules[row], drafts_of, seed, progress)
    }
}

/// The optimal verifier of mdsd-flow: the optimal plan pi(y | draft set)
/// of max flow over draft sets, for any scheme. It depends on the drafts
/// only through their set.
pub struct OptimalFlow {
    plan: Plan,
    row_of_set: HashMap<Vec<usize>, usize>,
    n: usize,
}

impl OptimalFlow {
    /// Solves the max-flow network of `problem` and follows its plan.
    pub fn new(problem: &Problem) -> Result<Self, VerifyError> {
        let plan = FlowSolver::default().solve(problem)?.plan;
        Ok(Self::from_plan(plan, problem.drafts().n()))
    }

    /// Follows a plan over draft sets (as mdsd-flow's solutions hold) for
    /// `n` drafts.
    pub fn from_plan(plan: Plan, n: usize) -> Self {
        let row_of_set = plan
            .law()
            .outcomes
            .iter()
            .enumerate()
            .map(|(row, set)| (set.clone(), row))
            .collect();
        Self {
            plan,
            row_of_set,
            n,
        }
    }

    /// The plan the verifier follows.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}

impl Verifier for OptimalFlow {
    fn name(&self) -> &str {
        VerifierKind::OptimalFlow.name()
    }

    /// pi(. | set(drafts)), for drafts in any order, repeats allowed.
    fn conditional(&self, drafts: &[usize]) -> Result<OutputLaw, VerifyError> {
        check_drafts(drafts, self.n, self.plan.vocab_size())?;
        let row = self
            .row_of_set
            .get(&token_set(drafts))
            .ok_or_else(|| VerifyError::ImpossibleDrafts(drafts.to_vec()))?;
        Ok(self
            .plan
            .conditional(*row)
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, w)| w > 0.0)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mdsd_convex::ConvexSolver;
    use mdsd_core::{Distribution, DraftScheme, Problem, Status};

    use super::OptimalConvex;
    use crate::{Verifier, VerifierKind, VerifyError, exact};

    /// The second step reads the rule's own r where the rule holds every
    /// token (no copy of the vocabulary's size), and r on the vocabulary,
    /// zero off the rule's tokens, where the draft leaves some out.
    #[test]
    fn the_second_step_reads_the_rules_own_r() {
        use crate::selecting::Selecting;
        use mdsd_convex::Support;
        let law = |x: &[f64]| Distribution::from_probs(x.to_vec()).unwrap();
        let p = law(&[0.1, 0.2, 0.3, 0.4]);
        for q in [[0.4, 0.3, 0.2, 0.1], [0.5, 0.0, 0.5, 0.0]] {
            let problem = Problem::new(p.clone(), DraftScheme::iid(law(&q), 2).unwrap()).unwrap();
            let verifier = OptimalConvex::new(&problem, &ConvexSolver::default()).unwrap();
            let rule = &verifier.solution().rule;
            let r = verifier.selected_law();
            assert_eq!(r.len(), 4);
            // The rule holds the draft's support.
            assert_eq!(matches!(rule.tokens, Support::Tokens(_)), q.contains(&0.0));
            match &rule.tokens {
                Support::Vocabulary(_) => assert_eq!(r.as_ptr(), rule.selected.as_ptr()),
                Support::Tokens(tokens) => {
                    assert_eq!(tokens, &[0, 2]);
                    let on_tokens: Vec<f64> = tokens.iter().map(|&y| r[y]).collect();
                    assert_eq!(on_tokens, rule.selected);
                    assert_eq!((r[1], r[3]), (0.0, 0.0));
                }
            }
        }
    }

    /// A draft of probability 0 at its own position is refused, by the
    /// law of that position: each draft's own for independent drafts, q
    /// at every position otherwise.
    #[test]
    fn drafts_of_probability_zero_are_refused_by_their_position() {
        let law = |x: &[f64]| Distribution::from_probs(x.to_vec()).unwrap();
        let p = law(&[0.3, 0.3, 0.4]);
        let (q1, q2) = (law(&[0.5, 0.5, 0.0]), law(&[0.0, 0.5, 0.5]));
        let independent = DraftScheme::independent(vec![q1.clone(), q2]).unwrap();
        let iid = DraftScheme::iid(q1, 2).unwrap();
        let solver = Default::default();
        for (drafts, possible, impossible) in [(independent, [0, 2], [2, 0]), (iid, [0, 1], [1, 2])]
        {
            let problem = Problem::new(p.clone(), drafts).unwrap();
            let verifier = OptimalConvex::new(&problem, &solver).unwrap();
            assert!(verifier.conditional(&possible).is_ok());
            assert!(matches!(
                verifier.conditional(&impossible),
                Err(VerifyError::ImpossibleDrafts(_))
            ));
        }
    }

    /// The acceptance a prepared rule knows is the one `exact_acceptance`
    /// solves for, and the exact enumeration of its output law within the
    /// solver's gap; none for a rule stopped by a time limit.
    #[test]
    fn a_prepared_rule_knows_its_acceptance() {
        let law = |x: &[f64]| Distribution::from_probs(x.to_vec()).unwrap();
        let p = law(&[0.05, 0.4, 0.1, 0.3, 0.15]);
        let q = law(&[0.3, 0.1, 0.35, 0.05, 0.2]);
        for drafts in [
            DraftScheme::iid(q.clone(), 3).unwrap(),
            DraftScheme::without_replacement(q.clone(), 3).unwrap(),
        ] {
            let problem = Problem::new(p.clone(), drafts).unwrap();
            let solver = ConvexSolver::default();
            let verifier = OptimalConvex::new(&problem, &solver).unwrap();
            let known = verifier.known_acceptance().unwrap();
            let solved = VerifierKind::OptimalConvex
                .exact_acceptance(&problem, &solver)
                .unwrap()
                .unwrap();
            assert_eq!(known, solved);
            let enumerated = exact(&problem, &verifier, 1 << 20).unwrap().acceptance;
            assert!((known - enumerated).abs() <= solver.budget().max_gap + 1e-12);

            let zero = ConvexSolver::default().with_time_limit(Some(Duration::ZERO));
            let stopped = OptimalConvex::new(&problem, &zero).unwrap();
            assert_eq!(stopped.solution().summary.status, Status::TimeLimit);
            assert_eq!(stopped.known_acceptance(), None);
        }
    }
}
