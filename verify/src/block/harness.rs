//! Exact and sampled evaluation of block verifiers.

use std::collections::HashMap;

use mdsd_core::{
    ContextModel, CoreError, CumulativeDistribution, DraftSampler, DraftShape, Instead, Method,
    Progress, check_depth, saturating_pow,
};
use rand::Rng;
use rayon::prelude::*;

use super::{BlockVerifier, PerContext};
use crate::VerifyError;
use crate::sampling::{goodness_of_fit, seeded_stream};

/// What exact enumeration or sampling says about a block verifier.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockReport {
    pub name: String,
    /// E(tau), the expected number of accepted draft tokens.
    pub expected_accepted: f64,
    /// E(tau) + 1: tokens per target call.
    pub block_efficiency: f64,
    /// Exact mode: max over length-(L+1) sequences o of |P(output extended
    /// by target samples = o) - p(o)|, 0 for a lossless verifier.
    pub max_law_error: Option<f64>,
    /// Sampled mode: the number of blocks drawn.
    pub samples: Option<u64>,
    /// Sampled mode: the standard error of `expected_accepted`.
    pub standard_error: Option<f64>,
    /// Sampled mode: the chi-square p-value of the first output token
    /// against p(. | empty prefix) (small means lossy).
    pub first_token_p_value: Option<f64>,
    /// The law of tau: `tau_law[d]` = P(tau = d), d = 0..=L (exact, or the
    /// fraction of sampled blocks); what tree-budgeting methods such as
    /// Sequoia consume. Empty where a method gives E(tau) alone (the LP).
    pub tau_law: Vec<f64>,
}

impl BlockReport {
    /// The acceptance at each depth d = 1..=L: P(tau >= d | tau >= d - 1),
    /// from the law of tau (NaN where no block reached depth d - 1).
    pub fn depth_acceptance(&self) -> Vec<f64> {
        let mut reached: Vec<f64> = self
            .tau_law
            .iter()
            .rev()
            .scan(0.0, |tail, &p| {
                *tail += p;
                Some(*tail)
            })
            .collect();
        reached.reverse();
        // reached[d] = P(tau >= d).
        reached
            .windows(2)
            .map(|w| if w[0] > 0.0 { w[1] / w[0] } else { f64::NAN })
            .collect()
    }
}

/// Exact mode for K i.i.d. paths: [`exact_tree`] with [`DraftShape::Paths`].
pub fn exact_block(
    model: &dyn ContextModel,
    verifier: &dyn BlockVerifier,
    depth: usize,
    paths: usize,
    limit: usize,
) -> Result<BlockReport, VerifyError> {
    exact_tree(model, verifier, depth, &DraftShape::paths(paths)?, limit)
}

/// Exact mode: enumerates every draft tree of `shape` (ordered K-tuples of
/// paths, or static trees with their children in draw order; at most
/// `limit` trees, and at most `limit` sequences of length L + 1), mixes the
/// verifier's output laws, extends each output by the target's laws to
/// length L + 1 and compares with p.
pub fn exact_tree(
    model: &dyn ContextModel,
    verifier: &dyn BlockVerifier,
    depth: usize,
    shape: &DraftShape,
    limit: usize,
) -> Result<BlockReport, VerifyError> {
    check_depth(model, depth)?;
    let v = model.vocab_size() as u128;
    let too_large = |what, size| CoreError::TooLarge {
        what,
        size,
        limit: limit as u128,
        instead: Instead(&[Method::Sampling]),
    };
    let sequences = saturating_pow(v, depth.saturating_add(1));
    if sequences > limit as u128 {
        return Err(too_large("the set of output sequences", sequences).into());
    }
    // One token a sequence at V = 1, but each of `depth` tokens.
    if depth as u128 > limit as u128 {
        return Err(too_large("a draft path", depth as u128).into());
    }
    let trees = shape.enumerate(model, depth, limit)?;
    let mut outputs: HashMap<Vec<usize>, f64> = HashMap::new();
    let mut expected_accepted = 0.0;
    let mut tau_law = vec![0.0; depth + 1];
    for (tree, prob) in &trees {
        for (seq, w) in verifier.law(tree)? {
            mdsd_core::check_tokens(&seq, model.vocab_size())?;
            check_output_length(&seq, depth)?;
            expected_accepted += prob * w * (seq.len() - 1) as f64;
            tau_law[seq.len() - 1] += prob * w;
            *outputs.entry(seq).or_default() += prob * w;
        }
    }
    let mut law = vec![0.0; sequences as usize];
    for (seq, mass) in &outputs {
        extend(model, depth + 1, seq.clone(), *mass, &mut law);
    }
    let mut target = vec![0.0; sequences as usize];
    extend(model, depth + 1, Vec::new(), 1.0, &mut target);
    let max_law_error = law
        .iter()
        .zip(&target)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    Ok(BlockReport {
        name: verifier.name().to_string(),
        expected_accepted,
        block_efficiency: expected_accepted + 1.0,
        max_law_error: Some(max_law_error),
        samples: None,
        standard_error: None,
        first_token_p_value: None,
        tau_law,
    })
}

/// A block of depth L outputs its accepted drafts and one more token: 1 to
/// L + 1 tokens.
pub(crate) fn check_output_length(output: &[usize], depth: usize) -> Result<(), VerifyError> {
    if output.is_empty() || output.len() > depth + 1 {
        return Err(VerifyError::BlockOutputLength {
            most: depth + 1,
            found: output.len(),
        });
    }
    Ok(())
}

/// Adds `mass` times the target's law of the continuations of `seq` to
/// `length` tokens into `law`, indexed by the sequence read in base V.
fn extend(model: &dyn ContextModel, length: usize, seq: Vec<usize>, mass: f64, law: &mut [f64]) {
    if seq.len() == length {
        let v = model.vocab_size();
        law[seq.iter().fold(0, |acc, &t| acc * v + t)] += mass;
        return;
    }
    let p = model.target(model.context(&seq)).probs();
    for (y, &w) in p.iter().enumerate() {
        if w > 0.0 {
            let mut next = seq.clone();
            next.push(y);
            extend(model, length, next, mass * w, law);
        }
    }
}

/// Draws draft trees from a context model: K i.i.d. paths in O(L log V)
/// per path, static trees by their child scheme, with one prepared sampler
/// per context (and depth, for trees) built on first use.
pub struct TreeSampler<'m> {
    model: &'m dyn ContextModel,
    depth: usize,
    shape: DraftShape,
    cumulative: PerContext<CumulativeDistribution>,
    /// Static trees: the children's sampler per depth and context.
    children: Vec<PerContext<Result<DraftSampler, CoreError>>>,
}

impl<'m> TreeSampler<'m> {
    pub fn new(
        model: &'m dyn ContextModel,
        depth: usize,
        shape: &DraftShape,
    ) -> Result<Self, VerifyError> {
        check_depth(model, depth)?;
        shape.check_depth(depth)?;
        let children = match shape {
            DraftShape::Paths(_) => Vec::new(),
            DraftShape::Tree { .. } => (0..depth).map(|_| PerContext::new(model)).collect(),
        };
        Ok(Self {
            model,
            depth,
            shape: shape.clone(),
            cumulative: PerContext::new(model),
            children,
        })
    }

    /// One draft tree, as its root-to-leaf paths in draw order.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<Vec<Vec<usize>>, VerifyError> {
        let model = self.model;
        match self.shape {
            DraftShape::Paths(k) => Ok((0..k)
                .map(|_| {
                    let mut path = Vec::with_capacity(self.depth);
                    for _ in 0..self.depth {
                        let context = model.context(&path);
                        let law = self.cumulative.get(context, || {
                            CumulativeDistribution::new(model.draft(context).probs())
                        });
                        path.push(law.sample(rng));
                    }
                    path
                })
                .collect()),
            DraftShape::Tree { .. } => {
                let mut paths = Vec::new();
                self.subtree(&mut Vec::new(), &mut paths, rng)?;
                Ok(paths)
            }
        }
    }

    /// Appends the leaves below `prefix`, children in draw order.
    fn subtree<R: Rng + ?Sized>(
        &self,
        prefix: &mut Vec<usize>,
        paths: &mut Vec<Vec<usize>>,
        rng: &mut R,
    ) -> Result<(), VerifyError> {
        let d = prefix.len();
        if d == self.depth {
            paths.push(prefix.clone());
            return Ok(());
        }
        let context = self.model.context(prefix);
        let sampler = self.children[d].get(context, || {
            let scheme = self.shape.node_children(self.model.draft(context), d)?;
            Ok(DraftSampler::new(&scheme.expect("a static tree")))
        });
        let sampler = sampler.as_ref().map_err(|e| e.clone())?;
        for child in sampler.sample(rng) {
            prefix.push(child);
            self.subtree(prefix, paths, rng)?;
            prefix.pop();
        }
        Ok(())
    }
}

/// Blocks per parallel task; each task has its own RNG stream of the seed.
const CHUNK: u64 = 1 << 10;
/// Most tokens one sampled draft tree may hold (K paths of L tokens, 800 MB
/// of token ids): more cannot be drawn in the memory of a machine that
/// runs this.
pub const SAMPLED_TREE_LIMIT: u128 = 100_000_000;

/// [`CoreError::TooLarge`] past [`SAMPLED_TREE_LIMIT`] tokens in a tree.
pub(crate) fn check_tree_size(paths: u128, depth: usize) -> Result<(), CoreError> {
    let tree = paths.saturating_mul(depth as u128);
    if tree > SAMPLED_TREE_LIMIT {
        return Err(CoreError::TooLarge {
            what: "a draft tree (paths x depth tokens)",
            size: tree,
            limit: SAMPLED_TREE_LIMIT,
            instead: Instead(&[]),
        });
    }
    Ok(())
}

/// Sampled mode: `samples` seeded blocks of `paths` i.i.d. draft paths, in
/// parallel; the same seed gives the same report.
pub fn sampled_block(
    model: &dyn ContextModel,
    verifier: &dyn BlockVerifier,
    depth: usize,
    paths: usize,
    samples: u64,
    seed: u64,
) -> Result<BlockReport, VerifyError> {
    let shape = DraftShape::paths(paths)?;
    sampled_block_with_progress(model, verifier, (depth, &shape, samples, seed), &|_| {})
}

/// Sampled mode on draft trees of any shape, with its (depth, shape,
/// samples, seed) in one tuple, telling `progress` of each parallel task
/// of blocks as it completes (from any thread) and stopping when it asks
/// before a task.
pub fn sampled_block_with_progress(
    model: &dyn ContextModel,
    verifier: &dyn BlockVerifier,
    (depth, shape, samples, seed): (usize, &DraftShape, u64, u64),
    progress: &dyn Progress,
) -> Result<BlockReport, VerifyError> {
    if samples == 0 {
        return Err(VerifyError::DraftCount {
            expected: 1,
            found: 0,
        });
    }
    check_tree_size(shape.leaves(), depth)?;
    let sampler = TreeSampler::new(model, depth, shape)?;
    let chunks = samples.div_ceil(CHUNK);
    let (sum, sum_squares, first_tokens, tau_counts) = (0..chunks)
        .into_par_iter()
        .map(|chunk| {
            progress.check_stop()?;
            let mut rng = seeded_stream(seed, chunk);
            let (mut sum, mut sum_squares) = (0.0, 0.0);
            let mut first_tokens: HashMap<usize, u64> = HashMap::new();
            let mut tau_counts = vec![0u64; depth + 1];
            let task = CHUNK.min(samples - chunk * CHUNK);
            for _ in 0..task {
                let drafts = sampler.sample(&mut rng)?;
                let out = verifier.sample(&drafts, &mut rng)?;
                mdsd_core::check_tokens(&out, model.vocab_size())?;
                check_output_length(&out, depth)?;
                tau_counts[out.len() - 1] += 1;
                let tau = (out.len() - 1) as f64;
                sum += tau;
                sum_squares += tau * tau;
                *first_tokens.entry(out[0]).or_default() += 1;
            }
            progress.advance(task);
            Ok::<_, VerifyError>((sum, sum_squares, first_tokens, tau_counts))
        })
        .try_reduce(
            || (0.0, 0.0, HashMap::new(), vec![0u64; depth + 1]),
            |(a, b, mut c, mut d), (x, y, z, w)| {
                for (token, count) in z {
                    *c.entry(token).or_default() += count;
                }
                d.iter_mut().zip(w).for_each(|(d, w)| *d += w);
                Ok((a + x, b + y, c, d))
            },
        )?;
    let n = samples as f64;
    let mean = sum / n;
    let variance = (sum_squares / n - mean * mean).max(0.0) * n / (n - 1.0).max(1.0);
    let root = model.target(model.context(&[])).probs();
    let p_value = goodness_of_fit(&first_tokens, root, samples).p_value;
    Ok(BlockReport {
        name: verifier.name().to_string(),
        expected_accepted: mean,
        block_efficiency: mean + 1.0,
        max_law_error: None,
        samples: Some(samples),
        standard_error: Some((variance / n).sqrt()),
        first_token_p_value: Some(p_value),
        tau_law: tau_counts.iter().map(|&c| c as f64 / n).collect(),
    })
}

/// The names of the reference rows a block report may hold beside
/// verifiers: `lp` (the block LP's optimum over every lossless verifier of
/// the shape) and `bound` (the closed-form bound of K i.i.d. paths).
pub const BLOCK_REFERENCES: [&str; 2] = ["lp", "bound"];

/// A reference row by name ([`BLOCK_REFERENCES`]): E(tau) alone (no law of
/// tau), with the LP's largest violation as its law error; `None` for a
/// name that is not a reference. Refused where the LP is past its budget,
/// or the bound is asked of a tree.
pub fn block_reference(
    name: &str,
    model: &dyn ContextModel,
    depth: usize,
    shape: &DraftShape,
    limit: usize,
) -> Option<Result<BlockReport, VerifyError>> {
    let report = |expected_accepted: f64, max_law_error| BlockReport {
        name: name.to_string(),
        expected_accepted,
        block_efficiency: expected_accepted + 1.0,
        max_law_error,
        samples: None,
        standard_error: None,
        first_token_p_value: None,
        tau_law: Vec::new(),
    };
    Some(match name {
        "lp" => mdsd_lp::LpSolver::default()
            .solve_tree_block(model, depth, shape)
            .map(|lp| report(lp.expected_accepted, Some(lp.max_law_error)))
            .map_err(VerifyError::from),
        "bound" => match shape {
            DraftShape::Paths(k) => mdsd_bounds::block_upper_bound(model, depth, *k, limit)
                .map(|bound| report(bound.expected_accepted, None))
                .map_err(VerifyError::from),
            DraftShape::Tree { .. } => Err(VerifyError::ShapeNotSupported {
                method: "bound",
                shape: shape.describe(),
                reason: "the closed-form bound is for K i.i.d. paths; on trees use lp where it runs",
            }),
        },
        _ => return None,
    })
}
