//! From an LP's accepted mass to an exact coupling (DESIGN §3).

use mdsd_core::{DraftLaw, Plan};

/// Accepted mass per outcome: `(token in the outcome, mass)`.
pub(crate) type Accepted = Vec<Vec<(usize, f64)>>;

/// Turns accepted mass a(x, y) (y in outcome x), feasible only to the
/// solver's tolerance, into a plan whose marginals hold to round-off:
/// negative entries are dropped, each row is scaled down to at most Q(x) and
/// each column to at most p(y), then the independent residual
/// `r_x r_y / Σ r_y` (r_x = Q(x) - a_x, r_y = p(y) - a_y) completes the
/// coupling without lowering the acceptance. Returns the plan and the
/// clipped accepted mass.
pub(crate) fn complete_plan(law: DraftLaw, p: &[f64], mut accepted: Accepted) -> (Plan, Accepted) {
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
