//! The K-path block LP (`docs/DESIGN.md` §6): the best expected number of accepted
//! draft tokens of any lossless verifier of K i.i.d. draft paths of L
//! tokens, for tiny instances.
//!
//! A verifier sees the draft tree, accepts one of its nodes u (a prefix of
//! some path, depth t in 0..=L) and appends a token y; the output, extended
//! by target samples, must have the target's law of length-(L+1)
//! sequences. With mass(u, y) summed over trees, that is, for every o,
//! Σ_t mass(o^t, o_(t+1)) / p(o^(t+1)) = 1. The objective is E[t].
//!
//! Variables are indexed by draft tree (the set of distinct paths) rather
//! than by ordered K-tuple of paths: tuples with the same set offer the same
//! nodes, so pooling them changes neither the feasible output laws nor the
//! optimum (split a pooled solution in proportion to the tuples' masses).
//! With K = 1 this is the single-path LP, whose optimum block verification
//! attains.

use std::collections::{BTreeMap, BTreeSet};

use mdsd_core::{ContextModel, check_depth, draft_paths, saturating_pow};

use crate::program::{LinearProgram, RowKind};
use crate::{LpBackend, LpError, LpSolver};

/// Most variables x rows of a block LP solved: the variable budget alone
/// lets through deep trees of few variables and many rows, and the
/// simplex's time grows faster than this product. The cap sits an order of
/// magnitude above the largest block LP the tests solve (figures in
/// `benches/README.md`).
const BLOCK_LP_WORK: u128 = 4_000_000;

/// The optimum of the K-path block LP.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockLpSolution {
    /// The largest E(tau) of a lossless verifier of K paths.
    pub expected_accepted: f64,
    pub backend: LpBackend,
    pub variables: usize,
    pub constraints: usize,
    /// The largest violation of the returned solution: a tree's mass, a
    /// negative mass, or |P(output = o) - p(o)| over sequences o.
    pub max_law_error: f64,
}

impl LpSolver {
    /// Solves the K-path block LP for `paths` i.i.d. draft paths of `depth`
    /// tokens. Refuses, naming what scales, when the ordered path tuples or
    /// the variables exceed the variable budget.
    pub fn solve_block(
        &self,
        model: &dyn ContextModel,
        depth: usize,
        paths: usize,
    ) -> Result<BlockLpSolution, LpError> {
        mdsd_core::Solve::check_settings(self)?;
        check_depth(model, depth)?;
        if paths == 0 {
            return Err(mdsd_core::CoreError::NoDrafts.into());
        }
        let v = model.vocab_size();
        let too_large = |size| LpError::BlockTooLarge {
            size,
            limit: self.max_variables,
        };
        let sequences = saturating_pow(v as u128, depth.saturating_add(1));
        if sequences > self.max_variables as u128 {
            return Err(too_large(sequences));
        }
        // One sequence at V = 1, but of `depth + 1` tokens.
        if depth as u128 >= self.max_variables as u128 {
            return Err(too_large(depth as u128 + 1));
        }
        let drafts = draft_paths(model, depth);
        let tuples = saturating_pow(drafts.len() as u128, paths);
        if tuples > self.max_variables as u128 {
            return Err(too_large(tuples));
        }
        let trees = draft_trees(&drafts, paths);

        // Output rows: one per length-(L+1) sequence with p(o) > 0, indexed
        // by the sequence read in base V.
        let sequences = sequences as usize;
        let target: Vec<f64> = (0..sequences)
            .map(|i| model.target_prob(&digits(i, v, depth + 1)))
            .collect();
        let mut output_rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); sequences];
        let mut lp = LinearProgram::default();
        let mut mass_rows = Vec::with_capacity(trees.len());
        for (tree, &prob) in &trees {
            let nodes: BTreeSet<&[usize]> = tree
                .iter()
                .flat_map(|&i| {
                    let path = &drafts[i].0;
                    (0..=depth).map(move |t| &path[..t])
                })
                .collect();
            let mut vars = Vec::new();
            for node in nodes {
                let p = model.target(model.context(node)).probs();
                for (y, &py) in p.iter().enumerate() {
                    let mut seq = node.to_vec();
                    seq.push(y);
                    let reach = model.target_prob(&seq);
                    if py == 0.0 || reach == 0.0 {
                        continue;
                    }
                    let k = lp.variables;
                    lp.variables += 1;
                    vars.push(k);
                    lp.objective.push((k, node.len() as f64));
                    // The outputs o that extend node + y: a block of V^(L-t) indices.
                    let span = v.pow((depth - node.len()) as u32);
                    let first = seq.iter().fold(0, |acc, &t| acc * v + t) * span;
                    for row in &mut output_rows[first..first + span] {
                        row.push((k, 1.0 / reach));
                    }
                }
            }
            mass_rows.push((vars.clone(), prob));
            lp.row(vars, RowKind::Equal, prob);
            if lp.variables > self.max_variables {
                return Err(too_large(lp.variables as u128));
            }
        }
        for (o, row) in output_rows.iter().enumerate() {
            if target[o] > 0.0 {
                lp.weighted_row(row.clone(), RowKind::Equal, 1.0);
            }
        }
        // The simplex's work grows with variables x rows, which the
        // variable budget alone does not bound (deep trees of few paths have
        // few variables and many rows).
        let work = (lp.variables as u128).saturating_mul(lp.rows.len() as u128);
        if work > BLOCK_LP_WORK {
            return Err(LpError::BlockTooLarge {
                size: work,
                limit: BLOCK_LP_WORK as usize,
            });
        }
        let x = self
            .run_with_backend(&lp)
            .map_err(|message| LpError::BlockSolver {
                backend: self.backend,
                message,
            })?;

        let mut max_law_error = x.iter().fold(0.0f64, |e, &xi| e.max(-xi));
        for (vars, prob) in &mass_rows {
            let total: f64 = vars.iter().map(|&k| x[k]).sum();
            max_law_error = max_law_error.max((total - prob).abs());
        }
        for (o, row) in output_rows.iter().enumerate() {
            let output = target[o] * row.iter().map(|&(k, c)| c * x[k]).sum::<f64>();
            max_law_error = max_law_error.max((output - target[o]).abs());
        }
        Ok(BlockLpSolution {
            expected_accepted: lp.value(&x),
            backend: self.backend,
            variables: lp.variables,
            constraints: lp.rows.len(),
            max_law_error,
        })
    }
}

/// The draft trees of `paths` i.i.d. draws from `drafts`: each set of
/// distinct path indices with the probability of the ordered tuples that
/// give it.
fn draft_trees(drafts: &[(Vec<usize>, f64)], paths: usize) -> BTreeMap<Vec<usize>, f64> {
    let mut trees: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
    let mut index = vec![0; paths];
    loop {
        let prob: f64 = index.iter().map(|&i| drafts[i].1).product();
        let set: BTreeSet<usize> = index.iter().copied().collect();
        *trees.entry(set.into_iter().collect()).or_default() += prob;
        match index.iter().rposition(|&i| i + 1 < drafts.len()) {
            Some(k) => {
                index[k] += 1;
                index[k + 1..].iter_mut().for_each(|i| *i = 0);
            }
            None => return trees,
        }
    }
}

/// The `length` base-`v` digits of `i`, most significant first.
fn digits(mut i: usize, v: usize, length: usize) -> Vec<usize> {
    let mut out = vec![0; length];
    for d in out.iter_mut().rev() {
        *d = i % v;
        i /= v;
    }
    out
}
