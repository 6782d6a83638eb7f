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
//! Variables are indexed by the set of nodes a drawn tree offers rather
//! than by ordered K-tuple of paths (or drawn static tree): draws with the
//! same set offer the same nodes, so pooling them changes neither the
//! feasible output laws nor the optimum (split a pooled solution in
//! proportion to the draws' masses).
//! With K = 1 this is the single-path LP, whose optimum block verification
//! attains.

use std::collections::{BTreeMap, BTreeSet};

use mdsd_core::{ContextModel, DraftShape, check_depth, saturating_pow};

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
        self.solve_tree_block(model, depth, &DraftShape::paths(paths)?)
    }

    /// The block LP over draft trees of any shape: K i.i.d. paths, or static
    /// trees (the verifier sees the tree, so a node drawn twice is offered
    /// once). Refuses past the variable budget as [`LpSolver::solve_block`].
    pub fn solve_tree_block(
        &self,
        model: &dyn ContextModel,
        depth: usize,
        shape: &DraftShape,
    ) -> Result<BlockLpSolution, LpError> {
        mdsd_core::Solve::check_settings(self)?;
        check_depth(model, depth)?;
        shape.check_depth(depth)?;
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
        let trees = node_sets(shape.enumerate(model, depth, self.max_variables)?, depth);

        // Output rows: one per length-(L+1) sequence with p(o) > 0, indexed
        // by the sequence read in base V.
        let sequences = sequences as usize;
        let target: Vec<f64> = (0..sequences)
            .map(|i| model.target_prob(&digits(i, v, depth + 1)))
            .collect();
        let mut output_rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); sequences];
        let mut lp = LinearProgram::default();
        let mut mass_rows = Vec::with_capacity(trees.len());
        for (nodes, &prob) in &trees {
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

/// The drawn trees pooled by the set of nodes they offer (every prefix of
/// every path, the root included), with their total probability.
fn node_sets(
    trees: Vec<(Vec<Vec<usize>>, f64)>,
    depth: usize,
) -> BTreeMap<BTreeSet<Vec<usize>>, f64> {
    let mut sets: BTreeMap<BTreeSet<Vec<usize>>, f64> = BTreeMap::new();
    for (paths, prob) in trees {
        let nodes = paths
            .iter()
            .flat_map(|path| (0..=depth).map(move |t| path[..t].to_vec()))
            .collect();
        *sets.entry(nodes).or_default() += prob;
    }
    sets
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
