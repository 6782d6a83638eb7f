//! An upper bound on the expected accepted tokens E(tau) of every lossless
//! verifier of K i.i.d. draft paths of L tokens, where the K-path LP is
//! too large (`docs/DESIGN.md` §6c):
//!
//! ```text
//! E(tau) = Σ_(d=1..L) P(tau >= d) <= Σ_(d=1..L) alpha*_d,
//! alpha*_d = 1 + min over sets H of d-sequences of ( p_d(H) - q_d(H)^K ),
//! ```
//!
//! alpha*_d the optimal acceptance of the target's law p_d of the first d
//! tokens against K i.i.d. drafts from the draft's law q_d of d-prefixes.
//! On tau >= d the output's first d tokens are a drafted d-prefix, and the
//! output extended by target samples has the law p, so the event is a
//! coupling of p_d with K i.i.d. draws from q_d: at most alpha*_d. The
//! bound is valid but not tight: no verifier reaches every depth's coupling
//! at once.

use mdsd_core::{
    ContextModel, CoreError, Distribution, Instead, Method, check_depth, saturating_pow,
};

use crate::{BoundError, IidAlgorithm, optimal_acceptance_iid};

/// The bound, depth by depth.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockBound {
    /// alpha*_d for d = 1..=L: bounds on P(tau >= d).
    pub per_depth: Vec<f64>,
    /// Σ_d alpha*_d: the bound on E(tau).
    pub expected_accepted: f64,
}

/// The bound for `paths` i.i.d. draft paths of `depth` tokens: the laws of
/// every d-prefix are enumerated, so at most `limit` sequences of `depth`
/// tokens (refused before anything is built).
pub fn block_upper_bound(
    model: &dyn ContextModel,
    depth: usize,
    paths: usize,
    limit: usize,
) -> Result<BlockBound, BoundError> {
    check_depth(model, depth)?;
    if paths == 0 {
        return Err(CoreError::NoDrafts.into());
    }
    let v = model.vocab_size();
    let sequences = saturating_pow(v as u128, depth);
    if sequences > limit as u128 {
        return Err(CoreError::TooLarge {
            what: "the set of draft sequences of the block's depth",
            size: sequences,
            limit: limit as u128,
            instead: Instead(&[Method::Sampling]),
        }
        .into());
    }
    // The d-prefixes with their target and draft probabilities, extended a
    // token at a time in base-V order.
    let mut prefixes: Vec<(Vec<usize>, f64, f64)> = vec![(Vec::new(), 1.0, 1.0)];
    let mut per_depth = Vec::with_capacity(depth);
    for _ in 0..depth {
        prefixes = prefixes
            .into_iter()
            .flat_map(|(seq, p_seq, q_seq)| {
                let context = model.context(&seq);
                let (p, q) = (model.target(context).probs(), model.draft(context).probs());
                (0..v).map(move |y| {
                    let mut next = seq.clone();
                    next.push(y);
                    (next, p_seq * p[y], q_seq * q[y])
                })
            })
            .collect();
        let law = |which: fn(&(Vec<usize>, f64, f64)) -> f64| {
            Distribution::from_probs(prefixes.iter().map(which).collect::<Vec<f64>>())
        };
        let (p_d, q_d) = (law(|s| s.1)?, law(|s| s.2)?);
        per_depth.push(optimal_acceptance_iid(&p_d, &q_d, paths, IidAlgorithm::Sort)?.alpha_star);
    }
    Ok(BlockBound {
        expected_accepted: per_depth.iter().sum(),
        per_depth,
    })
}
