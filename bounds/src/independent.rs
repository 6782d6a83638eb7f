//! Independent drafts from n draft models: alpha* = 1 + min_H (p(H) - Π_t q_t(H))
//! (`docs/DESIGN.md` §3). No closed form is known; small instances are solved exactly
//! by trying every subset of the undecided tokens.

use crate::objective;

/// Most undecided tokens the subset search accepts (2^20 subsets).
pub const INDEPENDENT_SUBSET_LIMIT: usize = 20;

/// `(alpha - 1, H*)`, or `Err(undecided)` when more than
/// [`INDEPENDENT_SUBSET_LIMIT`] tokens are undecided.
pub(crate) fn independent_by_subsets(p: &[f64], qs: &[&[f64]]) -> Result<(f64, Vec<usize>), usize> {
    // A token no draft model can propose never helps H (it adds p, not Q);
    // a token with p = 0 never hurts it (Q is non-decreasing in H).
    let proposable = |t: usize| qs.iter().any(|q| q[t] > 0.0);
    let forced: Vec<usize> = (0..p.len())
        .filter(|&t| p[t] == 0.0 && proposable(t))
        .collect();
    let free: Vec<usize> = (0..p.len())
        .filter(|&t| p[t] > 0.0 && proposable(t))
        .collect();
    if free.len() > INDEPENDENT_SUBSET_LIMIT {
        return Err(free.len());
    }
    let forced_q: Vec<f64> = qs
        .iter()
        .map(|q| forced.iter().map(|&t| q[t]).sum())
        .collect();
    // Mass of the tokens that are never in H (no draft model proposes them).
    let never_in: f64 = (0..p.len()).filter(|&t| !proposable(t)).map(|t| p[t]).sum();
    let (mut best, mut best_mask) = (0.0, 0u32);
    for mask in 0u32..(1 << free.len()) {
        let members = || {
            (0..free.len())
                .filter(move |i| mask >> i & 1 == 1)
                .map(|i| free[i])
        };
        let p_in: f64 = members().map(|t| p[t]).sum();
        let p_out: f64 = never_in
            + (0..free.len())
                .filter(|i| mask >> i & 1 == 0)
                .map(|i| p[free[i]])
                .sum::<f64>();
        let all_in: f64 = qs
            .iter()
            .zip(&forced_q)
            .map(|(q, f)| f + members().map(|t| q[t]).sum::<f64>())
            .product();
        let value = objective(p_in, p_out, all_in, 1.0 - all_in);
        if value < best {
            best = value;
            best_mask = mask;
        }
    }
    let mut certificate = forced;
    certificate.extend(
        (0..free.len())
            .filter(|i| best_mask >> i & 1 == 1)
            .map(|i| free[i]),
    );
    certificate.sort_unstable();
    Ok((best, certificate))
}
