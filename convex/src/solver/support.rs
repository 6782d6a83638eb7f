//! The draft's support: every scheme's programs live on the tokens some
//! draft law can propose, found from the draft laws alone, so a top-k
//! draft costs O(k) after one pass over q.

use mdsd_core::{CoreError, Distribution};

use crate::error::ConvexError;
use crate::numeric::{lane_sum, least, sum_where};
use crate::selection_rule::Support;
use crate::workspace::Workspace;

/// The tokens some draft law (of one vocabulary) gives a probability of at
/// least `DRAFTED_AT_LEAST`: the whole vocabulary where every token is
/// (a softmax: one pass that only reads a law shows it), else their list
/// (`drafted_tokens`).
pub(super) fn draft_support(laws: &[&[f64]]) -> Support {
    let size = laws.first().map_or(0, |law| law.len());
    // A minimum over each law, which vectorises, where a test per token
    // would stop early only on laws that are not full.
    let least = (laws.iter()).map(|law| least(law)).fold(0.0f64, f64::max);
    if least >= DRAFTED_AT_LEAST {
        return Support::Vocabulary(size);
    }
    // Laws that each leave tokens out may still cover all of them.
    let tokens = drafted_tokens(laws);
    match tokens.len() == size {
        true => Support::Vocabulary(size),
        false => Support::Tokens(tokens),
    }
}

/// The tokens some draft law (of one vocabulary) gives a probability of at
/// least `DRAFTED_AT_LEAST`, ascending, in one pass over the laws alone (p
/// is read only on them, by `restrict`). Chunks with no set bit in any law are
/// skipped after one OR over them (a truncated draft's are mostly
/// empty); the tests of the others become a bit mask: drafted tokens are
/// spread along the vocabulary, and a branch per token would mispredict
/// on each of them.
fn drafted_tokens(laws: &[&[f64]]) -> Vec<usize> {
    const CHUNK: usize = 32;
    let size = laws.first().map_or(0, |law| law.len());
    let mut support = Vec::new();
    let whole = size - size % CHUNK;
    for start in (0..whole).step_by(CHUNK) {
        let chunks = laws.iter().map(|law| &law[start..start + CHUNK]);
        // Only +0.0 has no bit set (a draft's entries are never negative).
        let any = (chunks.clone())
            .flat_map(|chunk| chunk.iter())
            .fold(0, |any, q| any | q.to_bits());
        if any == 0 {
            continue;
        }
        let mut drafted = 0u32;
        for chunk in chunks {
            for (lane, &q) in chunk.iter().enumerate() {
                drafted |= u32::from(q >= DRAFTED_AT_LEAST) << lane;
            }
        }
        if drafted == u32::MAX {
            // Every token of the chunk (at the full vocabulary, all of them).
            support.extend(start..start + CHUNK);
            continue;
        }
        while drafted != 0 {
            support.push(start + drafted.trailing_zeros() as usize);
            drafted &= drafted - 1;
        }
    }
    support.extend((whole..size).filter(|&y| laws.iter().any(|law| law[y] >= DRAFTED_AT_LEAST)));
    support
}

/// The least draft probability of a token the programs hold: below the
/// smallest normal float, p / q overflows and q^n underflows, and the
/// draft tuples holding such a token have a probability below 1e-307 (the
/// rule gives them a law all the same, which moves the output by less).
const DRAFTED_AT_LEAST: f64 = f64::MIN_POSITIVE;

/// `solve` of the problem on the draft's support (`draft_support`): on p
/// and q restricted to it (`restrict`) where the draft leaves tokens out
/// (the support is shorter than the vocabulary), else on `target` and
/// `draft` as they are; with the support, whose tokens come first. The
/// restricted vectors go back to the workspace afterwards.
pub(super) fn on_support<T>(
    target: &Distribution,
    draft: &Distribution,
    workspace: &mut Workspace,
    solve: impl FnOnce(
        (&Distribution, &Distribution),
        Support,
        &mut Workspace,
    ) -> Result<T, ConvexError>,
) -> Result<T, ConvexError> {
    let support = match draft_support(&[draft.probs()]) {
        Support::Tokens(tokens) if tokens.len() < target.len() => tokens,
        _ => {
            return solve(
                (target, draft),
                Support::Vocabulary(target.len()),
                workspace,
            );
        }
    };
    let (p, q) = restrict(target, draft, &support, workspace)?;
    let solution = solve((&p, &q), Support::Tokens(support), workspace);
    workspace.give_problem(p.into_probs(), q.into_probs());
    solution
}

/// The problem on the draft's support, whose tokens come first in the
/// order of `support`, plus one token of draft probability 0 holding the
/// target mass of the rest when it has any. A token that is never drafted
/// gets no weight, and is never in H*: adding it to H raises p(H) and not
/// q(H). So alpha* and H* are those of the whole problem, found in O(k)
/// after one pass over the draft.
///
/// The rest is 1 - p(support), not a sum over the other tokens, which
/// would read all of p where a top-k draft needs k entries of it: its
/// error, the rounding of p's normalisation, at most about V ε, is
/// absolute, as is every error of an acceptance. Below V ε the rest is
/// summed directly over the undrafted tokens: a draft that covers all of
/// the target's mass gets no token of rounding-sized mass, which would
/// shift ties of H* in degenerate problems (alpha* = 1) to where the inner
/// program cannot reach its tolerance (a saved proptest regression).
fn restrict(
    target: &Distribution,
    draft: &Distribution,
    support: &[usize],
    workspace: &mut Workspace,
) -> Result<(Distribution, Distribution), CoreError> {
    let (p, q) = (target.probs(), draft.probs());
    // With room for the token of the rest.
    let (mut p_support, mut q_support) = workspace.take_problem(support.len() + 1);
    p_support.extend(support.iter().map(|&y| p[y]));
    q_support.extend(support.iter().map(|&y| q[y]));
    let mut rest = 1.0 - lane_sum(&p_support);
    if rest <= p.len() as f64 * f64::EPSILON {
        rest = sum_where(p, q, |q| q == 0.0);
    }
    if rest > 0.0 {
        p_support.push(rest);
        q_support.push(0.0);
    }
    Ok((
        Distribution::from_probs(p_support)?,
        Distribution::from_probs(q_support)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::{Support, draft_support, drafted_tokens};

    /// The support is the tokens with q > 0, ascending, whatever blocks
    /// they fall in: empty blocks, full ones, -0.0 entries (bits set, not
    /// drafted), and a remainder after the last whole block; of two laws,
    /// the tokens positive in either.
    #[test]
    fn draft_support_is_the_positive_entries() {
        for v in [0, 5, 31, 32, 33, 64, 100, 1000] {
            for stride in [1, 3, 32, 37, 200] {
                let q: Vec<f64> = (0..v)
                    .map(|y| match y % stride {
                        0 => 1.0 / v as f64,
                        1 => -0.0,
                        _ => 0.0,
                    })
                    .collect();
                let expected: Vec<usize> = (0..v).filter(|&y| q[y] > 0.0).collect();
                assert_eq!(drafted_tokens(&[&q]), expected, "v = {v}, stride {stride}");
                // Listed unless every token is drafted.
                let support = match expected.len() == v {
                    true => Support::Vocabulary(v),
                    false => Support::Tokens(expected.clone()),
                };
                assert_eq!(draft_support(&[&q]), support, "v = {v}, stride {stride}");
                // A second law, positive elsewhere: the union.
                let other: Vec<f64> = (0..v).map(|y| if y % 7 == 2 { 0.5 } else { 0.0 }).collect();
                let either: Vec<usize> = (0..v).filter(|&y| q[y] > 0.0 || other[y] > 0.0).collect();
                assert_eq!(
                    drafted_tokens(&[&q, &other]),
                    either,
                    "two laws, v = {v}, stride {stride}"
                );
                // Two laws that each leave tokens out and together cover
                // them all make the whole vocabulary.
                let rest: Vec<f64> = (0..v).map(|y| if q[y] > 0.0 { 0.0 } else { 1.0 }).collect();
                assert_eq!(draft_support(&[&q, &rest]), Support::Vocabulary(v));
            }
        }
    }
}
