//! alpha* of i.i.d. drafts when each side gives only its top k entries
//! (vLLM's logprobs): an interval that holds for every completion of the
//! rows consistent with what is known (`docs/DESIGN.md` §3).
//!
//! Known: target probabilities p_i on the ids K_p, draft probabilities q_j
//! on K_q; unknown: p off K_p (total m_p = 1 - p(K_p)) and q off K_q
//! (total m_q). alpha* = 1 - max_H [q(H)^n - p(H)] for i.i.d. drafts.
//!
//! Upper end: merge every token outside C = K_p ∩ K_q into one token U,
//! with p(U) = 1 - p(C) and q(U) = 1 - q(C), both known. Any completion's
//! sets include the merged problem's (a set of the merged problem is a set
//! of the completion with U read as all of the outside, with the same p(H)
//! and q(H)), so the completion's max is at least the merged one's and its
//! alpha* at most the merged alpha*.
//!
//! Lower end: the known entries, 0 where a side's value is unknown, one
//! token a with p = m_p, q = 0 and one token b with p = 0, q = m_q (the
//! missing masses on disjoint tokens). For any completion and any H of it,
//! take H' = (H ∩ the known ids) ∪ {b}. Then q'(H') = q(H's known
//! entries) + m_q is at least q(H), since H holds at most m_q of the
//! unknown draft mass, and p'(H') = p(H's known entries) is at most p(H);
//! so q'(H')^n - p'(H') is at least q(H)^n - p(H). The lower problem's max
//! is at least every completion's, its alpha* at most theirs. A completion reaches it when the vocabulary has room to spread
//! m_p and m_q over distinct tokens outside K_p ∪ K_q (each under the
//! k-th known value), so the lower end is then the worst case itself.

use mdsd_core::Distribution;

use crate::{BoundError, optimal_acceptance_iid_many};

/// One side's known entries: (token id, probability), ids distinct.
pub type KnownEntries<'a> = &'a [(usize, f64)];

/// Bounds on alpha* that hold for every completion of partial rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlphaInterval {
    pub lower: f64,
    pub upper: f64,
}

/// The known probabilities of a side may sum past 1 by this much (rows
/// written in float32 or float16 round): what is missing is then 0.
pub const PARTIAL_SUM_TOLERANCE: f64 = 1e-3;

/// The alpha* interval of i.i.d. drafts for each n in `ns`, from each
/// side's known entries (see the module's proof).
pub fn optimal_acceptance_iid_interval(
    target: KnownEntries,
    draft: KnownEntries,
    ns: &[usize],
) -> Result<Vec<AlphaInterval>, BoundError> {
    let p_missing = missing_mass("target", target)?;
    let q_missing = missing_mass("draft", draft)?;
    let mut ids: Vec<usize> = target.iter().chain(draft).map(|&(id, _)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    let value =
        |side: KnownEntries, id: usize| side.iter().find(|&&(i, _)| i == id).map(|&(_, x)| x);
    let known: Vec<(Option<f64>, Option<f64>)> = ids
        .iter()
        .map(|&id| (value(target, id), value(draft, id)))
        .collect();

    // Upper: C = ids known on both sides, and U, all the rest, its masses
    // summed from what makes them up rather than as 1 - p(C).
    let (mut p_upper, mut q_upper) = (Vec::new(), Vec::new());
    let (mut p_lump, mut q_lump) = (p_missing, q_missing);
    for &(p, q) in &known {
        match (p, q) {
            (Some(p), Some(q)) => {
                p_upper.push(p);
                q_upper.push(q);
            }
            (p, q) => {
                p_lump += p.unwrap_or(0.0);
                q_lump += q.unwrap_or(0.0);
            }
        }
    }
    p_upper.push(p_lump);
    q_upper.push(q_lump);

    // Lower: unknown values 0, then a = (m_p, 0) and b = (0, m_q).
    let mut p_lower: Vec<f64> = known.iter().map(|k| k.0.unwrap_or(0.0)).collect();
    let mut q_lower: Vec<f64> = known.iter().map(|k| k.1.unwrap_or(0.0)).collect();
    p_lower.extend([p_missing, 0.0]);
    q_lower.extend([0.0, q_missing]);

    let alpha = |p: Vec<f64>, q: Vec<f64>| -> Result<Vec<f64>, BoundError> {
        let (p, q) = (Distribution::from_probs(p)?, Distribution::from_probs(q)?);
        optimal_acceptance_iid_many(&p, &q, ns)
    };
    let upper = alpha(p_upper, q_upper)?;
    let lower = alpha(p_lower, q_lower)?;
    Ok(lower
        .into_iter()
        .zip(upper)
        .map(|(lower, upper)| AlphaInterval { lower, upper })
        .collect())
}

/// 1 - the known mass of a side, after checking its entries: each a
/// probability, ids distinct, the sum at most 1 + [`PARTIAL_SUM_TOLERANCE`].
fn missing_mass(side: &'static str, entries: KnownEntries) -> Result<f64, BoundError> {
    let invalid = |detail: String| BoundError::PartialRow { side, detail };
    if entries.is_empty() {
        return Err(invalid("no entry is known".into()));
    }
    if let Some(&(id, x)) = entries.iter().find(|e| !(0.0..=1.0).contains(&e.1)) {
        return Err(invalid(format!(
            "token {id} has probability {x}, outside [0, 1]"
        )));
    }
    let mut ids: Vec<usize> = entries.iter().map(|e| e.0).collect();
    ids.sort_unstable();
    if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(invalid(format!("token {} is listed twice", pair[0])));
    }
    let known: f64 = entries.iter().map(|e| e.1).sum();
    if known > 1.0 + PARTIAL_SUM_TOLERANCE {
        return Err(invalid(format!(
            "the known probabilities sum to {known}, more than 1"
        )));
    }
    Ok((1.0 - known).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IidAlgorithm;
    use proptest::prelude::*;

    /// The top k entries of a full row, as an engine returns them.
    fn top_k(row: &[f64], k: usize) -> Vec<(usize, f64)> {
        let mut entries: Vec<(usize, f64)> = row.iter().copied().enumerate().collect();
        entries.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        entries.truncate(k);
        entries
    }

    fn exact(p: &[f64], q: &[f64], n: usize) -> f64 {
        let (p, q) = (
            Distribution::from_probs(p.to_vec()).unwrap(),
            Distribution::from_probs(q.to_vec()).unwrap(),
        );
        crate::optimal_acceptance_iid(&p, &q, n, IidAlgorithm::Sort)
            .unwrap()
            .alpha_star
    }

    fn row(raw: &[f64]) -> Vec<f64> {
        let total: f64 = raw.iter().sum();
        raw.iter().map(|x| x / total).collect()
    }

    proptest! {
        /// Full rows cut to their top k: the exact alpha* of the full rows
        /// lies in the interval (1e-12), for every n.
        #[test]
        fn interval_holds_the_full_rows_alpha(
            raw_p in proptest::collection::vec(0.0f64..1.0, 12),
            raw_q in proptest::collection::vec(0.0f64..1.0, 12),
            k in 1usize..12,
        ) {
            prop_assume!(raw_p.iter().sum::<f64>() > 0.1 && raw_q.iter().sum::<f64>() > 0.1);
            let (p, q) = (row(&raw_p), row(&raw_q));
            let ns = [1, 2, 3, 5];
            let intervals = optimal_acceptance_iid_interval(&top_k(&p, k), &top_k(&q, k), &ns).unwrap();
            for (&n, interval) in ns.iter().zip(&intervals) {
                let alpha = exact(&p, &q, n);
                prop_assert!(interval.lower <= alpha + 1e-12, "n={n}: {interval:?} vs {alpha}");
                prop_assert!(alpha <= interval.upper + 1e-12, "n={n}: {interval:?} vs {alpha}");
            }
        }
    }

    /// Everything known: the interval closes on the exact alpha*.
    #[test]
    fn full_knowledge_closes_the_interval() {
        let p = row(&[0.5, 0.3, 0.2]);
        let q = row(&[0.2, 0.3, 0.5]);
        let all = |r: &[f64]| r.iter().copied().enumerate().collect::<Vec<_>>();
        let interval = optimal_acceptance_iid_interval(&all(&p), &all(&q), &[2]).unwrap()[0];
        assert!((interval.lower - 0.86).abs() < 1e-12 && (interval.upper - 0.86).abs() < 1e-12);
    }

    /// The lower end is reached: a completion that spreads the missing
    /// masses over tokens of their own has exactly the lower alpha*.
    #[test]
    fn the_lower_end_is_a_completion() {
        let target = [(0, 0.5), (1, 0.2)];
        let draft = [(1, 0.4), (2, 0.3)];
        let interval = optimal_acceptance_iid_interval(&target, &draft, &[3]).unwrap()[0];
        // p: 0.5, 0.2, 0 on token 2, 0.3 spread on tokens 3..6; q: 0 on
        // token 0, 0.4, 0.3, 0.3 spread on tokens 6..9.
        let p = [0.5, 0.2, 0.0, 0.1, 0.1, 0.1, 0.0, 0.0, 0.0];
        let q = [0.0, 0.4, 0.3, 0.0, 0.0, 0.0, 0.1, 0.1, 0.1];
        assert!(
            (exact(&p, &q, 3) - interval.lower).abs() < 1e-12,
            "{interval:?}"
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let error = |t: &[(usize, f64)]| {
            optimal_acceptance_iid_interval(t, &[(0, 0.5)], &[1])
                .unwrap_err()
                .to_string()
        };
        assert!(error(&[(3, 0.5), (3, 0.1)]).contains("token 3 is listed twice"));
        assert!(error(&[(2, 1.5)]).contains("token 2 has probability 1.5"));
        assert!(error(&[(0, 0.7), (1, 0.7)]).contains("sum to 1.4"));
        assert!(error(&[]).contains("no entry"));
    }
}
