//! H* read off a minimum cut of the network source -> draft set S (capacity
//! Q(S)) -> token y in S (unbounded) -> sink (capacity p(y)) (DESIGN §4),
//! given an optimal accepted flow f(S, y) such as an LP returns.

use mdsd_core::DraftLaw;

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
/// by more than [`CUT_TOLERANCE`]: an unverified certificate is never reported.
pub(crate) fn certificate_from_flow(
    sets: &DraftLaw,
    p: &[f64],
    flow: &[Vec<(usize, f64)>],
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
