//! From an optimal accepted flow, as an LP or a max-flow solver returns it,
//! to an exact coupling (`docs/DESIGN.md` §3) and to the certificate H* (`docs/DESIGN.md` §4).

use crate::{CoreError, DraftLaw, Instead, Plan, token_set};

/// Accepted mass per outcome: `(token in the outcome, mass)`.
pub type Accepted = Vec<Vec<(usize, f64)>>;

/// The most entries (draft sets x vocabulary) a dense [`Plan`] may hold:
/// 2^27 f64, 1 GiB. Solvers that return a plan check this before any work.
pub const PLAN_ENTRY_LIMIT: u128 = 1 << 27;

/// Refuses a plan of `outcomes` rows of `vocab_size` entries above
/// [`PLAN_ENTRY_LIMIT`], before it is allocated, naming what scales instead.
pub fn check_plan_size(
    outcomes: usize,
    vocab_size: usize,
    instead: Instead,
) -> Result<(), CoreError> {
    let size = outcomes as u128 * vocab_size as u128;
    if size > PLAN_ENTRY_LIMIT {
        return Err(CoreError::TooLarge {
            what: "the dense plan (draft sets x vocabulary)",
            size,
            limit: PLAN_ENTRY_LIMIT,
            instead,
        });
    }
    Ok(())
}

/// Turns accepted mass a(x, y) (y in outcome x), feasible only to a
/// solver's tolerance, into a plan whose marginals hold to round-off:
/// negative entries are dropped, each row is scaled down to at most Q(x) and
/// each column to at most p(y), then the independent residual
/// `r_x r_y / Σ r_y` (r_x = Q(x) - a_x, r_y = p(y) - a_y) completes the
/// coupling without lowering the acceptance. Returns the plan and the
/// clipped accepted mass.
pub fn complete_plan(law: DraftLaw, p: &[f64], mut accepted: Accepted) -> (Plan, Accepted) {
    for (edges, &prob) in accepted.iter_mut().zip(&law.probs) {
        edges.iter_mut().for_each(|e| e.1 = e.1.max(0.0));
        let total: f64 = edges.iter().map(|e| e.1).sum();
        if total > prob {
            edges.iter_mut().for_each(|e| e.1 *= prob / total);
        }
    }
    let column_total = |accepted: &Accepted| {
        let mut totals = vec![0.0; p.len()];
        accepted.iter().flatten().for_each(|&(y, a)| totals[y] += a);
        totals
    };
    let scale: Vec<f64> = column_total(&accepted)
        .iter()
        .zip(p)
        .map(|(&a, &py)| if a > py { py / a } else { 1.0 })
        .collect();
    accepted
        .iter_mut()
        .flatten()
        .for_each(|e| e.1 *= scale[e.0]);

    let mut column_residual: Vec<f64> = column_total(&accepted)
        .iter()
        .zip(p)
        .map(|(a, py)| (py - a).max(0.0))
        .collect();
    let mut residual_total: f64 = column_residual.iter().sum();
    if residual_total == 0.0 {
        // The rows' residual (summed from small terms) can be positive while
        // every column's p(y) - a_y rounds to 0: spread it along p, which
        // moves the columns by round-off only.
        column_residual = p.to_vec();
        residual_total = 1.0;
    }
    let v = p.len();
    let mut conditional = vec![0.0; law.len() * v];
    for (x, (edges, &prob)) in accepted.iter().zip(&law.probs).enumerate() {
        let row = &mut conditional[x * v..(x + 1) * v];
        // Below the smallest normal float a probability has few digits
        // left, and the row's ratios to it none.
        if prob < f64::MIN_POSITIVE {
            accepting_row(&law.outcomes[x], p, row);
            continue;
        }
        let row_residual = (prob - edges.iter().map(|e| e.1).sum::<f64>()).max(0.0);
        for (r, c) in row.iter_mut().zip(&column_residual) {
            *r = row_residual * c / residual_total / prob;
        }
        for &(y, a) in edges {
            row[y] += a / prob;
        }
    }
    (Plan::new(law, v, conditional), accepted)
}

/// The law given an outcome of probability 0 or nearly (one whose
/// probability underflows, a product of draft probabilities below the
/// smallest normal float, 2.2e-308): p on the
/// outcome's tokens, renormalised, so that a draft is accepted (p itself
/// where it gives them no mass). Any law leaves the output's law as it is;
/// this one is a law, where dividing by the outcome's probability would
/// give NaN.
fn accepting_row(outcome: &[usize], p: &[f64], row: &mut [f64]) {
    let tokens = token_set(outcome);
    let mass: f64 = tokens.iter().map(|&y| p[y]).sum();
    if mass > 0.0 {
        tokens.iter().for_each(|&y| row[y] = p[y] / mass);
    } else {
        row.copy_from_slice(p);
    }
}

/// Residual capacities at or below a threshold are treated as saturated;
/// solver round-off can make any one threshold misjudge an edge, so each of
/// these is tried and the best resulting cut is kept.
const SATURATION_THRESHOLDS: [f64; 5] = [0.0, 1e-13, 1e-11, 1e-9, 1e-7];
/// The cut must reproduce the LP's value to this tolerance to be returned.
const CUT_TOLERANCE: f64 = 1e-7;

/// The tokens reachable from the source in the residual network: the source
/// side of a minimum cut, so `p(H) + 1 - Q(all drafts in H) = alpha`. Every
/// set's value is an upper bound on alpha* (LP duality), so the smallest
/// over the thresholds is kept. Returns `None` when even that misses `alpha`
/// by more than `CUT_TOLERANCE` (1e-7): an unverified certificate is never reported.
pub fn min_cut_certificate(
    sets: &DraftLaw,
    p: &[f64],
    flow: &Accepted,
    alpha: f64,
) -> Option<Vec<usize>> {
    SATURATION_THRESHOLDS
        .iter()
        .map(|&saturated| source_side(sets, p, flow, saturated))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .filter(|(cut, _)| (cut - alpha).abs() <= CUT_TOLERANCE)
        .map(|(_, tokens)| tokens)
}

/// The cut value and the tokens reachable from the source when residuals at
/// or below `saturated` count as zero.
fn source_side(
    sets: &DraftLaw,
    p: &[f64],
    flow: &[Vec<(usize, f64)>],
    saturated: f64,
) -> (f64, Vec<usize>) {
    let mut sets_feeding = vec![Vec::new(); p.len()];
    for (s, edges) in flow.iter().enumerate() {
        for &(y, f) in edges {
            if f > saturated {
                sets_feeding[y].push(s);
            }
        }
    }
    let mut set_reached = vec![false; sets.len()];
    let mut token_reached = vec![false; p.len()];
    let mut queue: Vec<usize> = (0..sets.len())
        .filter(|&s| sets.probs[s] - flow[s].iter().map(|e| e.1).sum::<f64>() > saturated)
        .collect();
    queue.iter().for_each(|&s| set_reached[s] = true);
    while let Some(s) = queue.pop() {
        for &y in &sets.outcomes[s] {
            if !token_reached[y] {
                token_reached[y] = true;
                for &t in &sets_feeding[y] {
                    if !set_reached[t] {
                        set_reached[t] = true;
                        queue.push(t);
                    }
                }
            }
        }
    }
    let p_in: f64 = (0..p.len())
        .filter(|&y| token_reached[y])
        .map(|y| p[y])
        .sum();
    let all_in: f64 = sets
        .iter()
        .filter(|(set, _)| set.iter().all(|&y| token_reached[y]))
        .map(|(_, prob)| prob)
        .sum();
    let cut = p_in + 1.0 - all_in;
    (cut, (0..p.len()).filter(|&y| token_reached[y]).collect())
}
