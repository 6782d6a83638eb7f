//! Khisti et al., "Multi-Draft Speculative Sampling: Canonical Decomposition
//! and Theoretical Limits" (ICLR 2025). Their Theorem 1: an optimal verifier
//! can be taken in two steps, (1) importance-sampling selection of one of the
//! drafts, (2) single-draft speculative sampling of the selected token
//! against p. If the selected token has law r, step (2) accepts it with
//! probability min(1, p / r) and otherwise draws from (p - r)+, so the
//! output is p for *any* selection rule and the acceptance is at least
//! Σ min(p, r). For K = 2 the rule is a weight per token pair, and the best
//! weights solve a linear program; truncated to pairs of the s most likely
//! draft tokens (s <= 15) it stays small at any vocabulary size (their §4).
//!
//! Here:
//! * Pairs with a token outside the truncation set T go to the token ranked
//!   higher in one strict order: p / q̄ descending, then token id ascending
//!   (q̄ the mean of the draft laws). The selected-token law of that rule is
//!   O(V) from prefix sums along the order.
//! * Pairs inside T split their mass by the LP, which is a transportation
//!   problem (pair masses to tokens, each token y in T taking at most what
//!   p(y) still lacks over the rule's share) solved by mdsd-lp's
//!   [`LpSolver::solve_assignment`]. Mass the LP leaves unassigned goes to
//!   the rule's choice (more r never lowers Σ min(p, r)). With T holding
//!   every draft token this is the full pair LP, whose value is alpha* for
//!   two drafts (Theorem 1).
//! * K > 2: a tournament. The winner of drafts 1..k meets draft k + 1 in a
//!   duel with its own truncated LP, built from the two laws that meet (the
//!   winner's law, then q_(k+1)); the final winner is the selected token.
//!   Drafts are independent, so each duel's laws are products.

use mdsd_core::{DraftLaw, Problem};
use mdsd_lp::LpSolver;
use rand::{Rng, RngCore};

use crate::laws::{check_drafts, draft_law};
use crate::selecting::{Selecting, Verification};
use crate::{VerifierKind, VerifyError};

/// The truncation [`VerifierKind::Khisti`] prepares with: pairs among the 15
/// most likely draft tokens are weighted by the LP.
pub const KHISTI_TRUNCATION: usize = 15;

/// The largest truncation accepted (the paper's range; the LP has s(s-1)
/// variables).
pub const KHISTI_MAX_TRUNCATION: usize = 15;

/// Khisti et al.'s importance-sampling verifier (name `khisti`), for i.i.d.
/// or independent drafts.
pub struct Khisti {
    /// p and the residual.
    verification: Verification,
    /// r, the law of the tournament's winner.
    winner: Vec<f64>,
    /// q_i for each draft position (to reject impossible drafts).
    laws: Vec<Vec<f64>>,
    rule: Rule,
    /// One per meeting of drafts: `duels[k]` decides between the winner of
    /// drafts 0..=k and draft k + 1.
    duels: Vec<Duel>,
}

/// The fixed part of the selection: the order and the truncation set.
struct Rule {
    /// Each token's position in the order; the later one wins a duel.
    rank: Vec<usize>,
    /// The tokens in the order's sequence.
    order: Vec<usize>,
    /// The truncation set T, and each token's index in it.
    truncation: Vec<usize>,
    index_in_truncation: Vec<Option<usize>>,
}

/// The selection weights of one duel on pairs inside T:
/// `keep[i][j]` = P(the token T[i] is selected | the pair {T[i], T[j]} met).
struct Duel {
    keep: Vec<Vec<f64>>,
}

impl Khisti {
    /// Prepares the verifier with the LP over pairs of the `truncation` most
    /// likely draft tokens (by the mean draft law).
    pub fn new(problem: &Problem, truncation: usize) -> Result<Self, VerifyError> {
        let drafts = problem.drafts();
        VerifierKind::Khisti.check_scheme(drafts.kind())?;
        if !(1..=KHISTI_MAX_TRUNCATION).contains(&truncation) {
            return Err(VerifyError::Truncation {
                truncation,
                max: KHISTI_MAX_TRUNCATION,
            });
        }
        let p = problem.target().probs().to_vec();
        let v = p.len();
        let n = drafts.n();
        let laws: Vec<Vec<f64>> = (0..n).map(|i| draft_law(drafts, i).to_vec()).collect();
        let mean: Vec<f64> = (0..v)
            .map(|y| laws.iter().map(|q| q[y]).sum::<f64>() / n as f64)
            .collect();

        // The strict order: ascending p / q̄ (q̄ = 0 as +inf), then descending
        // id, so that later in the order means preferred.
        let ratio = |y: usize| {
            if mean[y] > 0.0 {
                p[y] / mean[y]
            } else {
                f64::INFINITY
            }
        };
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_unstable_by(|&a, &b| ratio(a).total_cmp(&ratio(b)).then(b.cmp(&a)));
        let mut rank = vec![0; v];
        for (position, &y) in order.iter().enumerate() {
            rank[y] = position;
        }

        let mut by_mass: Vec<usize> = (0..v).filter(|&y| mean[y] > 0.0).collect();
        by_mass.sort_unstable_by(|&a, &b| mean[b].total_cmp(&mean[a]).then(a.cmp(&b)));
        by_mass.truncate(truncation);
        let mut index_in_truncation = vec![None; v];
        for (i, &y) in by_mass.iter().enumerate() {
            index_in_truncation[y] = Some(i);
        }

        let rule = Rule {
            rank,
            order,
            truncation: by_mass,
            index_in_truncation,
        };
        let mut duels = Vec::with_capacity(n - 1);
        let mut winner = laws[0].clone();
        for law in &laws[1..] {
            let (duel, next) = rule.duel(&p, &winner, law)?;
            duels.push(duel);
            winner = next;
        }
        Ok(Self {
            verification: Verification::new(p),
            winner,
            laws,
            rule,
            duels,
        })
    }

    /// r, the law of the selected token (before speculative sampling).
    pub fn selected_law(&self) -> &[f64] {
        &self.winner
    }

    /// Σ min(p, r): the acceptance of the selected token. The verifier's
    /// acceptance is at least this (a residual draw may land on another
    /// draft), and equals alpha* for two drafts when T holds every draft token.
    pub fn selected_acceptance(&self) -> f64 {
        let (p, r) = (&self.verification.p, &self.winner);
        p.iter().zip(r).map(|(a, b)| a.min(*b)).sum()
    }

    fn check(&self, drafts: &[usize]) -> Result<(), VerifyError> {
        check_drafts(drafts, self.laws.len(), self.verification.p.len())?;
        if drafts.iter().zip(&self.laws).any(|(&x, q)| q[x] <= 0.0) {
            return Err(VerifyError::ImpossibleDrafts(drafts.to_vec()));
        }
        Ok(())
    }
}

impl Selecting for Khisti {
    /// The law of the tournament's winner: (token, probability).
    fn selection(&self, drafts: &[usize]) -> Result<Vec<(usize, f64)>, VerifyError> {
        self.check(drafts)?;
        let mut winners = vec![(drafts[0], 1.0)];
        for (duel, &challenger) in self.duels.iter().zip(&drafts[1..]) {
            let mut next: Vec<(usize, f64)> = Vec::with_capacity(winners.len() + 1);
            let mut add = |token: usize, prob: f64| match next.iter_mut().find(|e| e.0 == token) {
                Some(entry) => entry.1 += prob,
                None => next.push((token, prob)),
            };
            for &(u, prob) in &winners {
                let keep = self.rule.keep_prob(duel, u, challenger);
                add(u, prob * keep);
                add(challenger, prob * (1.0 - keep));
            }
            winners = next;
        }
        Ok(winners)
    }

    /// O(n): the n - 1 duels, one draw each.
    fn select(
        &self,
        drafts: &[usize],
        rng: &mut dyn RngCore,
    ) -> Result<Option<usize>, VerifyError> {
        self.check(drafts)?;
        let mut winner = drafts[0];
        for (duel, &challenger) in self.duels.iter().zip(&drafts[1..]) {
            if rng.random::<f64>() >= self.rule.keep_prob(duel, winner, challenger) {
                winner = challenger;
            }
        }
        Ok(Some(winner))
    }

    fn selected_law(&self) -> &[f64] {
        &self.winner
    }

    fn verification(&self) -> &Verification {
        &self.verification
    }
}

verifier_of_shape!(Khisti, VerifierKind::Khisti, selecting);

impl Rule {
    /// Whether `u` beats `v` by the rule (distinct tokens).
    fn wins_by_rule(&self, u: usize, v: usize) -> bool {
        self.rank[u] > self.rank[v]
    }

    /// P(the incumbent `u` is selected when it meets `v` in `duel`).
    fn keep_prob(&self, duel: &Duel, u: usize, v: usize) -> f64 {
        if u == v {
            return 1.0;
        }
        match (self.index_in_truncation[u], self.index_in_truncation[v]) {
            (Some(i), Some(j)) => duel.keep[i][j],
            _ => f64::from(u8::from(self.wins_by_rule(u, v))),
        }
    }

    /// The duel between a token of law `a` (the incumbent) and an
    /// independent one of law `b`: its LP weights and the law of its winner.
    fn duel(&self, p: &[f64], a: &[f64], b: &[f64]) -> Result<(Duel, Vec<f64>), VerifyError> {
        let v = a.len();
        let in_t = |y: usize| self.index_in_truncation[y].is_some();
        // The rule's share, along the order: a token y wins against every
        // token ranked below it, and against itself. Masses of tokens outside
        // T are accumulated separately for the tokens in T, whose pairs
        // inside T are left to the LP.
        let mut law = vec![0.0; v];
        let (mut a_below, mut b_below) = (0.0, 0.0);
        let (mut a_out_below, mut b_out_below) = (0.0, 0.0);
        for &y in &self.order {
            if in_t(y) {
                law[y] = a[y] * (b_out_below + b[y]) + b[y] * a_out_below;
            } else {
                law[y] = a[y] * (b_below + b[y]) + b[y] * a_below;
                a_out_below += a[y];
                b_out_below += b[y];
            }
            a_below += a[y];
            b_below += b[y];
        }

        // The LP over pairs inside T: sources {T[i], T[j]}, i < j, of mass
        // a(y)b(z) + a(z)b(y); token T[i] takes at most (p - rule share)+.
        let t = &self.truncation;
        let mut sources = DraftLaw {
            outcomes: Vec::new(),
            probs: Vec::new(),
        };
        for i in 0..t.len() {
            for j in i + 1..t.len() {
                let (y, z) = (t[i], t[j]);
                let mass = a[y] * b[z] + a[z] * b[y];
                if mass > 0.0 {
                    sources.outcomes.push(vec![i, j]);
                    sources.probs.push(mass);
                }
            }
        }
        let capacities: Vec<f64> = t.iter().map(|&y| (p[y] - law[y]).max(0.0)).collect();
        let assigned = LpSolver::default().solve_assignment(&sources, &capacities)?;

        let mut keep = vec![vec![0.0; t.len()]; t.len()];
        for i in 0..t.len() {
            for j in 0..t.len() {
                if i != j {
                    keep[i][j] = f64::from(u8::from(self.wins_by_rule(t[i], t[j])));
                }
            }
        }
        for ((pair, &mass), split) in sources.outcomes.iter().zip(&sources.probs).zip(&assigned) {
            let (i, j) = (pair[0], pair[1]);
            let given = |k: usize| {
                split
                    .iter()
                    .filter(|&&(token, _)| token == k)
                    .map(|&(_, f)| f)
                    .sum::<f64>()
            };
            let (to_i, to_j) = (given(i), given(j));
            let unassigned = (mass - to_i - to_j).max(0.0);
            let to_i = to_i + unassigned * keep[i][j];
            // P(T[i] selected | pair), clipped against solver round-off.
            let w = (to_i / mass).clamp(0.0, 1.0);
            keep[i][j] = w;
            keep[j][i] = 1.0 - w;
            law[t[i]] += mass * w;
            law[t[j]] += mass * (1.0 - w);
        }
        Ok((Duel { keep }, law))
    }
}
