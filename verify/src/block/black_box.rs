//! A caller's own block sampler checked as a black box, in the layout of
//! vLLM's rejection sampler (`docs/check-block.md`): each output row holds
//! the accepted draft tokens, one recovered or bonus token, then -1 to the
//! end. [`block_output`] reads a row and refuses one that breaks the
//! layout; [`TabledLaws`] is the world of Python's `check_block_verifier`:
//! laws after every prefix of up to L tokens, the draft blocks it draws,
//! the sampler's arrays, and its outputs completed to L + 1 tokens by
//! target samples, whose law the chi-square test compares with the
//! target's (`goodness_of_fit`).
//!
//! The loop stays with the caller, who calls the sampler between these
//! steps; each step is a pass over a batch in native code, so that the
//! check costs little beside the sampler it checks.

use mdsd_core::{CoreError, CumulativeDistribution, ProbabilityRow};
use rand::RngCore;

use crate::VerifyError;

/// The tokens of one output row: tokens, then -1 to the end of the row
/// (refused otherwise, naming the sampler and showing the row); what they
/// are is for [`check_block_output`] to check.
pub fn padded_output(name: &str, row: &[i64]) -> Result<Vec<usize>, VerifyError> {
    let length = row.iter().position(|&t| t < 0).unwrap_or(row.len());
    if row[length..].iter().any(|&t| t != -1) {
        return Err(VerifyError::Sampler {
            name: name.into(),
            message: format!("output row {row:?}: tokens, then -1 padding to the end"),
        });
    }
    Ok(row[..length].iter().map(|&t| t as usize).collect())
}

/// The tokens of one output row ([`padded_output`]), checked by
/// [`check_block_output`].
pub fn block_output<'p>(
    name: &str,
    row: &[i64],
    paths: impl Iterator<Item = &'p [usize]> + Clone,
    vocab_size: usize,
) -> Result<Vec<usize>, VerifyError> {
    let tokens = padded_output(name, row)?;
    check_block_output(name, &tokens, paths, vocab_size)?;
    Ok(tokens)
}

/// A block's output is 1 to L + 1 tokens of the vocabulary, those before
/// the last a prefix of one of the drafted `paths` (of L tokens each).
pub fn check_block_output<'p>(
    name: &str,
    output: &[usize],
    paths: impl Iterator<Item = &'p [usize]> + Clone,
    vocab_size: usize,
) -> Result<(), VerifyError> {
    let failed = |problem: String| VerifyError::Sampler {
        name: name.into(),
        message: format!("output {output:?}: {problem}"),
    };
    let depth = paths.clone().next().map_or(0, <[usize]>::len);
    if output.is_empty() || output.len() > depth + 1 {
        return Err(failed(format!(
            "{} tokens; a block of depth {depth} emits its accepted draft tokens and one more, \
             1 to {}",
            output.len(),
            depth + 1
        )));
    }
    if let Some(&token) = output.iter().find(|&&t| t >= vocab_size) {
        return Err(failed(format!(
            "token {token} is outside the vocabulary [0, {vocab_size})"
        )));
    }
    let accepted = &output[..output.len() - 1];
    if !paths.clone().any(|path| path.starts_with(accepted)) {
        let paths: Vec<&[usize]> = paths.collect();
        return Err(failed(format!(
            "its accepted tokens {accepted:?} are not a drafted prefix (paths {paths:?})"
        )));
    }
    Ok(())
}

/// The target's and the draft's laws after every prefix of up to L
/// tokens, as rows of V: the prefixes of d tokens from row `offsets[d]`,
/// in the order of their tokens read in base V.
#[derive(Debug, Clone)]
pub struct TabledLaws {
    vocab_size: usize,
    depth: usize,
    offsets: Vec<usize>,
    target: Vec<f64>,
    draft: Vec<f64>,
    /// The target's law of L + 1 tokens, over V^(L+1) sequences indexed
    /// in base V (most significant token first).
    target_sequences: Vec<f64>,
    target_sampler: CumulativeDistribution,
    /// The draft's law of L tokens.
    draft_sampler: CumulativeDistribution,
}

/// Most sequences of L + 1 tokens a [`TabledLaws`] holds the law of
/// (the chi-square test counts each).
pub const SEQUENCE_LIMIT: usize = 2_000_000;

/// B draft blocks of K paths of L tokens, drawn or given: `tokens` `[B,
/// K, L]` and `rows`, the table rows of every prefix of each path, `[B, K,
/// L + 1]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftBlocks {
    count: usize,
    paths: usize,
    tokens: Vec<usize>,
    rows: Vec<usize>,
}

impl DraftBlocks {
    pub fn count(&self) -> usize {
        self.count
    }

    pub fn paths(&self) -> usize {
        self.paths
    }

    /// `[B, K, L]`, row-major.
    pub fn tokens(&self) -> &[usize] {
        &self.tokens
    }
}

/// What reading a batch of outputs found: each block's output length (its
/// accepted tokens + 1), the output's tokens read as a number in base V,
/// and, where an output token has target probability 0 after its prefix,
/// the first example (a loss, not a layout error).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputsRead {
    pub lengths: Vec<usize>,
    numbers: Vec<usize>,
    pub impossible: Option<String>,
}

impl TabledLaws {
    /// Tables of `Σ_{d ≤ L} V^d` rows of V, each a law (checked as
    /// [`ProbabilityRow::new`] checks a row).
    pub fn new(
        vocab_size: usize,
        depth: usize,
        target: Vec<f64>,
        draft: Vec<f64>,
    ) -> Result<Self, VerifyError> {
        if vocab_size == 0 || depth == 0 {
            return Err(VerifyError::Model {
                side: "target",
                message: format!(
                    "tables for a vocabulary of {vocab_size} and depth {depth}: both at least 1"
                ),
            });
        }
        let sequences = (vocab_size as u128).saturating_pow((depth + 1) as u32);
        if sequences > SEQUENCE_LIMIT as u128 {
            return Err(CoreError::TooLarge {
                what: "the sequences of L + 1 tokens of a check",
                size: sequences,
                limit: SEQUENCE_LIMIT as u128,
                instead: mdsd_core::Instead(&[]),
            }
            .into());
        }
        // Σ_{d ≤ L} V^d rows: fewer than V^(L+1), so no sum overflows.
        let mut offsets = vec![0usize];
        for d in 0..=depth {
            offsets.push(offsets[d] + vocab_size.pow(d as u32));
        }
        let rows = offsets[depth + 1];
        let cells = rows * vocab_size;
        for (side, table) in [("target", &target), ("draft", &draft)] {
            if table.len() != cells {
                return Err(VerifyError::Model {
                    side,
                    message: format!(
                        "a table of {} values for {rows} prefixes of up to {depth} tokens of a \
                         vocabulary of {vocab_size}: expected {cells}",
                        table.len()
                    ),
                });
            }
            for (row, law) in table.chunks(vocab_size).enumerate() {
                ProbabilityRow::new(law).map_err(|e| VerifyError::Model {
                    side,
                    message: format!("row {row} of the table is not a law: {e}"),
                })?;
            }
        }
        let sequence_law = |rows: &[f64], length: usize| {
            let mut law = vec![1.0];
            for d in 0..length {
                let level = &rows[offsets[d] * vocab_size..offsets[d + 1] * vocab_size];
                law = law
                    .iter()
                    .zip(level.chunks(vocab_size))
                    .flat_map(|(&w, row)| row.iter().map(move |&x| w * x))
                    .collect();
            }
            law
        };
        let target_sequences = sequence_law(&target, depth + 1);
        let draft_sequences = sequence_law(&draft, depth);
        Ok(Self {
            vocab_size,
            depth,
            target_sampler: CumulativeDistribution::new(&target_sequences),
            draft_sampler: CumulativeDistribution::new(&draft_sequences),
            offsets,
            target,
            draft,
            target_sequences,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The target's law of L + 1 tokens over the V^(L+1) sequences,
    /// indexed in base V.
    pub fn target_sequences(&self) -> &[f64] {
        &self.target_sequences
    }

    /// The same laws with the target's law at the root (after no token)
    /// replaced by `root`: the negative control's target.
    pub fn with_root(&self, root: Vec<f64>) -> Result<Self, VerifyError> {
        let mut target = self.target.clone();
        if root.len() != self.vocab_size {
            return Err(VerifyError::Model {
                side: "target",
                message: format!(
                    "a root law of {} values for a vocabulary of {}",
                    root.len(),
                    self.vocab_size
                ),
            });
        }
        target[..self.vocab_size].copy_from_slice(&root);
        Self::new(self.vocab_size, self.depth, target, self.draft.clone())
    }

    /// The row of `prefix` (a row of a prefix of `length` tokens) followed
    /// by `token`.
    fn child(&self, prefix: usize, length: usize, token: usize) -> usize {
        self.offsets[length + 1] + (prefix - self.offsets[length]) * self.vocab_size + token
    }

    /// `count` blocks of `paths` i.i.d. paths drawn from the draft, one
    /// draw a path from the draft's law of L tokens.
    pub fn draw(&self, count: usize, paths: usize, rng: &mut dyn RngCore) -> DraftBlocks {
        let (v, depth) = (self.vocab_size, self.depth);
        let mut tokens = vec![0; count * paths * depth];
        for path in tokens.chunks_mut(depth) {
            let mut sequence = self.draft_sampler.sample(rng);
            for slot in path.iter_mut().rev() {
                *slot = sequence % v;
                sequence /= v;
            }
        }
        self.blocks_of(count, paths, tokens)
    }

    /// Given draft blocks, `tokens` `[count, paths, L]` row-major (exact
    /// mode's enumeration); refuses a token outside the vocabulary or a
    /// count of tokens that is not that shape.
    pub fn blocks(
        &self,
        count: usize,
        paths: usize,
        tokens: Vec<usize>,
    ) -> Result<DraftBlocks, VerifyError> {
        let expected = count
            .checked_mul(paths)
            .and_then(|n| n.checked_mul(self.depth));
        if expected != Some(tokens.len()) {
            return Err(VerifyError::PathLength {
                expected: self.depth,
                found: tokens.len() / (count * paths).max(1),
            });
        }
        mdsd_core::check_tokens(&tokens, self.vocab_size)?;
        Ok(self.blocks_of(count, paths, tokens))
    }

    fn blocks_of(&self, count: usize, paths: usize, tokens: Vec<usize>) -> DraftBlocks {
        let depth = self.depth;
        let mut rows = Vec::with_capacity(count * paths * (depth + 1));
        for path in tokens.chunks(depth) {
            let mut row = 0;
            rows.push(row);
            for (j, &token) in path.iter().enumerate() {
                row = self.child(row, j, token);
                rows.push(row);
            }
        }
        DraftBlocks {
            count,
            paths,
            tokens,
            rows,
        }
    }

    /// Writes the sampler's `target_probs` `[B, K, L + 1, V]` and
    /// `draft_probs` `[B, K, L, V]` for `blocks` (row-major) into `target`
    /// and `draft`, row by row from the tables; refuses buffers of other
    /// sizes.
    pub fn fill_arrays(
        &self,
        blocks: &DraftBlocks,
        target: &mut [f64],
        draft: &mut [f64],
    ) -> Result<(), VerifyError> {
        let (v, depth) = (self.vocab_size, self.depth);
        let paths = blocks.rows.len() / (depth + 1);
        if target.len() != paths * (depth + 1) * v || draft.len() != paths * depth * v {
            return Err(VerifyError::Model {
                side: "target",
                message: format!(
                    "buffers of {} and {} values for {paths} paths of depth {depth} and a \
                     vocabulary of {v}",
                    target.len(),
                    draft.len()
                ),
            });
        }
        let rows = blocks.rows.chunks(depth + 1);
        let targets = target.chunks_mut((depth + 1) * v);
        let drafts = draft.chunks_mut(depth * v);
        for ((prefixes, target), draft) in rows.zip(targets).zip(drafts) {
            for (&row, out) in prefixes.iter().zip(target.chunks_mut(v)) {
                out.copy_from_slice(&self.target[row * v..(row + 1) * v]);
            }
            for (&row, out) in prefixes.iter().zip(draft.chunks_mut(v)) {
                out.copy_from_slice(&self.draft[row * v..(row + 1) * v]);
            }
        }
        Ok(())
    }

    /// Reads the sampler's `outputs` (`[B, L + 1]`, row-major) for
    /// `blocks` ([`block_output`]), and names the first output token of
    /// target probability 0 after its prefix.
    pub fn read(
        &self,
        name: &str,
        outputs: &[i64],
        blocks: &DraftBlocks,
    ) -> Result<OutputsRead, VerifyError> {
        let (v, depth, k, count) = (self.vocab_size, self.depth, blocks.paths, blocks.count);
        if outputs.len() != count * (depth + 1) {
            return Err(VerifyError::Sampler {
                name: name.into(),
                message: format!(
                    "{} output values for {count} blocks of depth {depth}; expected \
                     ({count}, {}): the accepted draft tokens, one recovered or bonus token, \
                     then -1",
                    outputs.len(),
                    depth + 1
                ),
            });
        }
        let mut lengths = Vec::with_capacity(count);
        let mut numbers = Vec::with_capacity(count);
        let mut impossible = None;
        for (b, row) in outputs.chunks(depth + 1).enumerate() {
            let drafted = &blocks.tokens[b * k * depth..(b + 1) * k * depth];
            let paths = drafted.chunks(depth);
            let tokens = block_output(name, row, paths, v).map_err(|e| e.at_row(b))?;
            if impossible.is_none() {
                let mut prefix = 0;
                for (j, &token) in tokens.iter().enumerate() {
                    if self.target[prefix * v + token] == 0.0 {
                        impossible = Some(format!(
                            "token {token} at position {j} of output {tokens:?} has target \
                             probability 0 after its prefix"
                        ));
                        break;
                    }
                    if j < depth {
                        prefix = self.child(prefix, j, token);
                    }
                }
            }
            lengths.push(tokens.len());
            numbers.push(tokens.iter().fold(0, |number, &t| number * v + t));
        }
        Ok(OutputsRead {
            lengths,
            numbers,
            impossible,
        })
    }

    /// Each output that [`TabledLaws::read`] read, extended to L + 1
    /// tokens by the target: the sequence's index in base V.
    pub fn complete(&self, read: &OutputsRead, rng: &mut dyn RngCore) -> Vec<usize> {
        let (v, depth) = (self.vocab_size, self.depth);
        (read.numbers.iter().zip(&read.lengths))
            .map(|(&prefix, &length)| {
                let span = v.pow((depth + 1 - length) as u32);
                (self.target_sampler).sample_in(prefix * span..(prefix + 1) * span, rng)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::seeded_stream;
    use rand::Rng;

    const V: usize = 3;
    const DEPTH: usize = 2;

    /// Random laws after every prefix of up to `DEPTH` tokens, some with
    /// zeros.
    fn random_tables(seed: u64) -> (Vec<f64>, Vec<f64>) {
        let mut rng = seeded_stream(seed, 0);
        let rows = 1 + V + V * V;
        let mut table = || {
            let mut values: Vec<f64> = Vec::with_capacity(rows * V);
            for _ in 0..rows {
                let mut row: Vec<f64> = (0..V)
                    .map(|_| match rng.random::<f64>() {
                        x if x < 0.2 => 0.0,
                        x => x,
                    })
                    .collect();
                row[rng.random_range(0..V)] += 0.1;
                let total: f64 = row.iter().sum();
                values.extend(row.iter().map(|x| x / total));
            }
            values
        };
        (table(), table())
    }

    fn laws(seed: u64) -> TabledLaws {
        let (target, draft) = random_tables(seed);
        TabledLaws::new(V, DEPTH, target, draft).unwrap()
    }

    /// The law of `length` tokens of `rows` after every prefix, by the
    /// chain rule, token by token.
    fn chain_law(laws: &TabledLaws, rows: &[f64], sequence: &[usize]) -> f64 {
        let mut row = 0;
        let mut mass = 1.0;
        for (j, &token) in sequence.iter().enumerate() {
            mass *= rows[row * V + token];
            if j < DEPTH {
                row = laws.child(row, j, token);
            }
        }
        mass
    }

    #[test]
    fn sequence_laws_follow_the_chain_rule() {
        for seed in 0..5 {
            let laws = laws(seed);
            let law = laws.target_sequences();
            assert_eq!(law.len(), V.pow(DEPTH as u32 + 1));
            for (number, &mass) in law.iter().enumerate() {
                let sequence = [number / (V * V), number / V % V, number % V];
                let chained = chain_law(&laws, &laws.target, &sequence);
                assert!(
                    (mass - chained).abs() < 1e-15,
                    "{sequence:?}: {mass} {chained}"
                );
            }
        }
    }

    /// Frequencies of `draws` draws against `law`: every cell within 5
    /// standard deviations (a false alarm below 1e-5 a cell).
    fn assert_frequencies(counts: &[u64], law: &[f64], draws: u64) {
        for (cell, (&count, &p)) in counts.iter().zip(law).enumerate() {
            let expected = p * draws as f64;
            let sd = (draws as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (count as f64 - expected).abs() <= 5.0 * sd + 1e-9,
                "cell {cell}: {count} against {expected} (sd {sd})"
            );
        }
    }

    #[test]
    fn drawn_paths_follow_the_draft_and_their_rows_are_their_prefixes() {
        let laws = laws(7);
        let draws = 60_000;
        let blocks = laws.draw(draws / 2, 2, &mut seeded_stream(1, 0));
        assert_eq!((blocks.count(), blocks.paths()), (draws / 2, 2));
        let mut counts = vec![0u64; V * V];
        for path in blocks.tokens().chunks(DEPTH) {
            counts[path[0] * V + path[1]] += 1;
        }
        let law: Vec<f64> = (0..V * V)
            .map(|n| chain_law(&laws, &laws.draft, &[n / V, n % V]))
            .collect();
        assert_frequencies(&counts, &law, draws as u64);
        // The arrays are the rows after each path's prefixes.
        let mut target = vec![0.0; draws * (DEPTH + 1) * V];
        let mut draft = vec![0.0; draws * DEPTH * V];
        laws.fill_arrays(&blocks, &mut target, &mut draft).unwrap();
        assert!(
            laws.fill_arrays(&blocks, &mut draft.clone(), &mut draft)
                .is_err()
        );
        for (i, path) in blocks.tokens().chunks(DEPTH).enumerate().take(200) {
            let mut row = 0;
            for j in 0..=DEPTH {
                let at = (i * (DEPTH + 1) + j) * V;
                assert_eq!(target[at..at + V], laws.target[row * V..(row + 1) * V]);
                if let Some(&token) = path.get(j) {
                    let at = (i * DEPTH + j) * V;
                    assert_eq!(draft[at..at + V], laws.draft[row * V..(row + 1) * V]);
                    row = laws.child(row, j, token);
                }
            }
        }
        assert_eq!(
            laws.blocks(draws / 2, 2, blocks.tokens().to_vec()).unwrap(),
            blocks
        );
    }

    #[test]
    fn completions_follow_the_target_after_the_output() {
        let laws = laws(3);
        let draws = 40_000;
        // Every block outputs the first drafted token only (a layout test,
        // not a lossless sampler): completions follow p after it.
        let blocks = laws.draw(draws, 1, &mut seeded_stream(2, 0));
        let outputs: Vec<i64> = (blocks.tokens().chunks(DEPTH))
            .flat_map(|path| [path[0] as i64, -1, -1])
            .collect();
        let read = laws.read("first", &outputs, &blocks).unwrap();
        assert!(read.lengths.iter().all(|&l| l == 1));
        let sequences = laws.complete(&read, &mut seeded_stream(2, 1));
        for first in 0..V {
            let mut counts = vec![0u64; V * V];
            let mut total = 0;
            for &s in &sequences {
                if s / (V * V) == first {
                    counts[s % (V * V)] += 1;
                    total += 1;
                }
            }
            // A first token of target mass 0 has no law to complete by.
            if total == 0 || laws.target[first] == 0.0 {
                continue;
            }
            let law: Vec<f64> = (0..V * V)
                .map(|n| {
                    let sequence = [first, n / V, n % V];
                    chain_law(&laws, &laws.target, &sequence) / laws.target[first]
                })
                .collect();
            assert_frequencies(&counts, &law, total);
        }
    }

    #[test]
    fn outputs_that_break_the_layout_are_refused_by_row() {
        let laws = laws(1);
        let blocks = laws.blocks(2, 1, vec![0, 1, 2, 2]).unwrap();
        let message = |outputs: &[i64]| match laws.read("mine", outputs, &blocks) {
            Err(e) => e.to_string(),
            Ok(read) => panic!("{outputs:?} read as {read:?}"),
        };
        let valid = [0, 1, 2, 1, -1, -1];
        let read = laws.read("mine", &valid, &blocks).unwrap();
        assert_eq!(read.lengths, vec![3, 1]);
        for (outputs, expected) in [
            (
                &[0, -1, 2, 1, -1, -1][..],
                "row 0: the sampler mine: output row [0, -1, 2]: tokens, then -1",
            ),
            (
                &[0, 1, 2, -1, -1, -1],
                "row 1: the sampler mine: output []: 0 tokens",
            ),
            (
                &[0, 1, 2, 2, 3, -1],
                "token 3 is outside the vocabulary [0, 3)",
            ),
            (
                &[0, 1, 2, 2, 1, 0],
                "accepted tokens [2, 1] are not a drafted prefix (paths [[2, 2]])",
            ),
            (
                &[0, 1, 2],
                "3 output values for 2 blocks of depth 2; expected (2, 3)",
            ),
        ] {
            let found = message(outputs);
            assert!(found.contains(expected), "{found}");
        }
        // Drafted prefixes of any of K paths.
        let two = laws.blocks(1, 2, vec![0, 1, 2, 0]).unwrap();
        assert!(laws.read("mine", &[2, 0, 1], &two).is_ok());
        assert!(laws.read("mine", &[1, 0, -1], &two).is_err());
    }

    #[test]
    fn a_token_the_target_cannot_emit_is_named_not_refused() {
        let (mut target, draft) = random_tables(2);
        // After no token the target never emits token 1.
        target[..V].copy_from_slice(&[0.5, 0.0, 0.5]);
        let laws = TabledLaws::new(V, DEPTH, target, draft).unwrap();
        let blocks = laws.blocks(2, 1, vec![0, 0, 1, 1]).unwrap();
        let read = laws.read("mine", &[0, 2, -1, 1, -1, -1], &blocks).unwrap();
        let found = read.impossible.clone().unwrap();
        assert!(
            found.starts_with("token 1 at position 0 of output [1]"),
            "{found}"
        );
        // Its completion stays inside its own prefix.
        let sequences = laws.complete(&read, &mut seeded_stream(0, 0));
        assert_eq!(sequences[0] / V, 2);
        assert_eq!(sequences[1] / (V * V), 1);
    }

    #[test]
    fn tables_that_are_not_laws_are_refused() {
        let (target, draft) = random_tables(0);
        let short = TabledLaws::new(V, DEPTH, target[..V].to_vec(), draft.clone());
        assert!(short.unwrap_err().to_string().contains("expected 39"));
        let mut negative = target.clone();
        negative[V] = -0.5;
        let found = TabledLaws::new(V, DEPTH, negative, draft.clone()).unwrap_err();
        assert!(
            found
                .to_string()
                .contains("row 1 of the table is not a law")
        );
        let huge = TabledLaws::new(1000, 3, vec![], vec![]).unwrap_err();
        assert!(
            huge.to_string().contains("sequences of L + 1 tokens"),
            "{huge}"
        );
        let root = laws(0).with_root(vec![1.0, 0.0]).unwrap_err();
        assert!(root.to_string().contains("a root law of 2 values"));
    }
}
