//! Blocks on live models: the target and draft laws come from a model pair
//! (callbacks into Python, an inference server) in batches, for the
//! prefixes a drafted tree visits only, so that block efficiency is
//! measured on the paths a real draft model draws, conditioned on what it
//! drafted.
//!
//! A round of B blocks costs L + 1 batched calls of the draft model (one
//! per depth to draw the paths, one for the leaves) and one of the target
//! (every node of every tree), whatever K; [`CachedModel`] answers repeated
//! prefixes from memory. Every method verifies the same drafted trees with
//! the same random stream (common random numbers), so differences between
//! methods are measured with less noise than their own.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mdsd_core::{
    ContextModel, CoreError, Distribution, DraftSampler, DraftScheme, DraftShape, Instead, Method,
    Progress, Side,
};
use rand_chacha::ChaCha8Rng;

use super::harness::{BLOCK_REFERENCES, check_output_length, check_tree_size};
use super::{BlockReport, block_reference, check_block_output, exact_tree, prepare_tree_block};
use crate::VerifyError;
use crate::sampling::{goodness_of_fit, seeded_stream};

/// A model pair that gives next-token laws for batches of prefixes.
pub trait LiveModel {
    /// The vocabulary size V of both models.
    fn vocab_size(&self) -> usize;

    /// The laws of `side` after each of `prefixes` (token ids, the prompt
    /// included), in order: one call of the model.
    fn laws(
        &mut self,
        side: Side,
        prefixes: &[Vec<usize>],
    ) -> Result<Vec<Arc<Distribution>>, VerifyError>;
}

/// A [`LiveModel`] that remembers the laws it was given (up to a number
/// of vocabulary-sized entries, the oldest forgotten first), asks its model
/// only for the prefixes it has not seen, and counts the calls that reach
/// the model.
pub struct CachedModel<M> {
    model: M,
    cache: HashMap<(Side, Vec<usize>), Arc<Distribution>>,
    order: VecDeque<(Side, Vec<usize>)>,
    capacity: usize,
    calls: HashMap<Side, u64>,
}

impl<M: LiveModel> CachedModel<M> {
    /// Keeps at most `capacity` laws (each V f64: 1.2 MB at V = 151936).
    pub fn new(model: M, capacity: usize) -> Self {
        Self {
            model,
            cache: HashMap::new(),
            order: VecDeque::new(),
            capacity,
            calls: HashMap::new(),
        }
    }

    /// The calls that reached `side`'s model.
    pub fn calls(&self, side: Side) -> u64 {
        self.calls.get(&side).copied().unwrap_or(0)
    }

    pub fn model(&self) -> &M {
        &self.model
    }
}

impl<M: LiveModel> LiveModel for CachedModel<M> {
    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn laws(
        &mut self,
        side: Side,
        prefixes: &[Vec<usize>],
    ) -> Result<Vec<Arc<Distribution>>, VerifyError> {
        let mut missing: Vec<Vec<usize>> = Vec::new();
        let mut asked = HashSet::new();
        for prefix in prefixes {
            if !self.cache.contains_key(&(side, prefix.clone())) && asked.insert(prefix) {
                missing.push(prefix.clone());
            }
        }
        // Laws fetched now answer this call even past the capacity; they
        // enter the cache in the order asked.
        let mut laws = Vec::new();
        if !missing.is_empty() {
            laws = self.model.laws(side, &missing)?;
            *self.calls.entry(side).or_default() += 1;
            check_law_count(side, &missing, &laws, self.model.vocab_size())?;
        }
        let fresh: HashMap<&[usize], &Arc<Distribution>> =
            missing.iter().map(Vec::as_slice).zip(&laws).collect();
        let answer = prefixes
            .iter()
            .map(|prefix| match fresh.get(prefix.as_slice()) {
                Some(&law) => Arc::clone(law),
                None => Arc::clone(&self.cache[&(side, prefix.clone())]),
            })
            .collect();
        for (prefix, law) in missing.into_iter().zip(laws) {
            if self.capacity == 0 {
                break;
            }
            if self.order.len() == self.capacity
                && let Some(oldest) = self.order.pop_front()
            {
                self.cache.remove(&oldest);
            }
            self.order.push_back((side, prefix.clone()));
            self.cache.insert((side, prefix), law);
        }
        Ok(answer)
    }
}

/// A model's answer must hold one law of V entries per prefix.
fn check_law_count(
    side: Side,
    prefixes: &[Vec<usize>],
    laws: &[Arc<Distribution>],
    vocab_size: usize,
) -> Result<(), VerifyError> {
    if laws.len() != prefixes.len() {
        return Err(VerifyError::Model {
            side: side.name(),
            message: format!("{} laws for {} prefixes", laws.len(), prefixes.len()),
        });
    }
    match laws.iter().position(|law| law.len() != vocab_size) {
        Some(i) => Err(VerifyError::Model {
            side: side.name(),
            message: format!(
                "law {i} has {} entries for a vocabulary of {vocab_size}",
                laws[i].len()
            ),
        }),
        None => Ok(()),
    }
}

/// A context model over the prefixes a drafted tree visits (relative to
/// its prompt), with the laws fetched for them. A verifier that asks for a
/// prefix outside them gets a placeholder law and [`TreeModel::check`]
/// reports it, so that no number is made of a law never fetched.
struct TreeModel {
    vocab_size: usize,
    index: HashMap<Vec<usize>, usize>,
    targets: Vec<Arc<Distribution>>,
    drafts: Vec<Arc<Distribution>>,
    placeholder: Distribution,
    missed: AtomicBool,
}

impl TreeModel {
    /// `nodes[i]` has target law `targets[i]` and draft law `drafts[i]`.
    fn new(
        vocab_size: usize,
        nodes: Vec<Vec<usize>>,
        targets: Vec<Arc<Distribution>>,
        drafts: Vec<Arc<Distribution>>,
    ) -> Result<Self, VerifyError> {
        let index = nodes.into_iter().enumerate().map(|(i, n)| (n, i)).collect();
        Ok(Self {
            vocab_size,
            index,
            targets,
            drafts,
            placeholder: Distribution::from_probs(vec![1.0 / vocab_size as f64; vocab_size])?,
            missed: AtomicBool::new(false),
        })
    }

    /// Whether every prefix asked for was one the tree visits.
    fn check(&self, method: &str) -> Result<(), VerifyError> {
        if self.missed.load(Ordering::Relaxed) {
            return Err(VerifyError::Model {
                side: "tree",
                message: format!(
                    "{method} asked for the laws after a prefix outside the drafted tree"
                ),
            });
        }
        Ok(())
    }
}

impl ContextModel for TreeModel {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn context_count(&self) -> usize {
        self.targets.len() + 1
    }

    fn context(&self, prefix: &[usize]) -> usize {
        self.index.get(prefix).copied().unwrap_or_else(|| {
            self.missed.store(true, Ordering::Relaxed);
            self.targets.len()
        })
    }

    fn target(&self, context: usize) -> &Distribution {
        self.targets.get(context).map_or(&self.placeholder, |d| d)
    }

    fn draft(&self, context: usize) -> &Distribution {
        self.drafts.get(context).map_or(&self.placeholder, |d| d)
    }
}

/// What a sampled run on a live model measures and costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSettings {
    /// L, the tokens of each draft path.
    pub depth: usize,
    /// The draft tree of each block: K i.i.d. paths or a static tree.
    pub shape: DraftShape,
    /// Blocks drawn.
    pub samples: u64,
    pub seed: u64,
    /// Blocks drafted together: each depth of B trees is one call.
    pub batch: usize,
}

/// One report per method, and what the model pair was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveReport {
    pub methods: Vec<BlockReport>,
    /// Blocks drawn (each method verified every one).
    pub blocks: u64,
    /// Calls that reached each model (after the cache, where there is one).
    pub target_calls: u64,
    pub draft_calls: u64,
    /// Rounds of `batch` blocks: each costs at most L + 1 draft calls and
    /// one target call.
    pub rounds: u64,
}

/// Per method: the sums a sampled report is made of.
struct Tally {
    sum: f64,
    sum_squares: f64,
    tau_counts: Vec<u64>,
    first_tokens: HashMap<usize, u64>,
}

/// Sampled mode on a live model: `samples` blocks, block b drafted after
/// `prompts[b mod prompts.len()]`, a draft tree of the settings' shape
/// drawn from the draft model (K paths of L tokens, or a static tree), each
/// verified by every method on the same tree with the
/// same random stream. The first output token is tested (chi-square)
/// against the target's law after the first prompt, over the blocks
/// started from it. `progress` is told of each round of blocks as it is
/// done, and asked before each whether to stop.
pub fn sampled_live_blocks(
    model: &mut dyn LiveModel,
    prompts: &[Vec<usize>],
    methods: &[&str],
    settings: LiveSettings,
    progress: &dyn Progress,
) -> Result<LiveReport, VerifyError> {
    sampled_live_blocks_with(model, prompts, (methods, &[]), settings, progress)
}

/// The caller's own block sampler in a live run: called once a round with
/// every block of it, each its drafted tree (root-to-leaf paths in draw
/// order, the same trees the built-in methods verify) and the laws after
/// its prefixes.
pub trait RoundVerifier: Sync {
    /// The name in reports.
    fn name(&self) -> &str;
    /// One output per block: accepted drafted tokens, then one token.
    /// `round` counts the rounds from 0 (a seed for the sampler's own
    /// random numbers).
    fn sample_round(
        &self,
        blocks: &[RoundBlock<'_>],
        round: u64,
    ) -> Result<Vec<Vec<usize>>, VerifyError>;
}

/// One block of a round, as a [`RoundVerifier`] sees it.
pub struct RoundBlock<'a> {
    /// The laws after every prefix of the drafted tree.
    pub model: &'a dyn ContextModel,
    pub paths: &'a [Vec<usize>],
}

/// [`sampled_live_blocks`] with the caller's samplers beside the built-in
/// methods, on the same drafted trees: their reports follow the built-in
/// ones'.
pub fn sampled_live_blocks_with(
    model: &mut dyn LiveModel,
    prompts: &[Vec<usize>],
    (methods, custom): (&[&str], &[&dyn RoundVerifier]),
    settings: LiveSettings,
    progress: &dyn Progress,
) -> Result<LiveReport, VerifyError> {
    let LiveSettings {
        depth,
        shape,
        samples,
        seed,
        batch,
    } = settings;
    check_live(model, prompts, methods.len() + custom.len(), depth, &shape)?;
    if let Some(name) = methods.iter().find(|m| BLOCK_REFERENCES.contains(m)) {
        return Err(CoreError::setting(
            "methods",
            name,
            "verifiers in sampled mode (lp and bound are exact references: samples=None)",
        )
        .into());
    }
    if samples == 0 {
        return Err(CoreError::setting("samples", 0, "at least 1").into());
    }
    if batch == 0 {
        return Err(CoreError::setting("batch", 0, "at least 1").into());
    }
    let v = model.vocab_size();
    let mut tallies: Vec<Tally> = (0..methods.len() + custom.len())
        .map(|_| Tally {
            sum: 0.0,
            sum_squares: 0.0,
            tau_counts: vec![0; depth + 1],
            first_tokens: HashMap::new(),
        })
        .collect();
    let mut first_prompt_blocks = 0u64;
    let mut root: Option<Arc<Distribution>> = None;
    let mut rounds = 0u64;
    let (mut target_calls, mut draft_calls) = (0u64, 0u64);
    let mut start = 0u64;
    progress.start(samples);
    while start < samples {
        progress.check_stop()?;
        let count = (samples - start).min(batch as u64);
        let blocks: Vec<u64> = (start..start + count).collect();
        let prompt_of = |b: u64| &prompts[(b % prompts.len() as u64) as usize];
        // Block b draws its paths from stream 2b and verifies with 2b + 1.
        let mut draw: Vec<ChaCha8Rng> =
            blocks.iter().map(|&b| seeded_stream(seed, 2 * b)).collect();
        // Laws fetched this round, by absolute prefix.
        let mut draft_laws: HashMap<Vec<usize>, Arc<Distribution>> = HashMap::new();
        // Each tree as its partial paths (one per child slot), in draw order.
        let roots = match shape {
            DraftShape::Paths(k) => k,
            DraftShape::Tree { .. } => 1,
        };
        let mut trees: Vec<Vec<Vec<usize>>> = vec![vec![Vec::new(); roots]; blocks.len()];
        let absolute = |b: u64, relative: &[usize]| {
            let mut prefix = prompt_of(b).clone();
            prefix.extend_from_slice(relative);
            prefix
        };
        for _ in 0..=depth {
            let wanted: Vec<Vec<usize>> = unique(
                (blocks.iter().zip(&trees))
                    .flat_map(|(&b, tree)| tree.iter().map(move |path| absolute(b, path))),
            );
            let laws = model.laws(Side::Draft, &wanted)?;
            draft_calls += 1;
            check_law_count(Side::Draft, &wanted, &laws, v)?;
            draft_laws.extend(wanted.into_iter().zip(laws));
            let d = trees[0][0].len();
            if d == depth {
                break;
            }
            // One sampler per node, not per path through it.
            let mut samplers: HashMap<Vec<usize>, DraftSampler> = HashMap::new();
            for ((&b, tree), rng) in blocks.iter().zip(&mut trees).zip(&mut draw) {
                let mut grown = Vec::with_capacity(tree.len());
                for path in tree.drain(..) {
                    let prefix = absolute(b, &path);
                    let sampler = match samplers.entry(prefix) {
                        Entry::Occupied(entry) => entry.into_mut(),
                        Entry::Vacant(entry) => {
                            let q = &draft_laws[entry.key()];
                            let scheme = match shape.node_children(q, d)? {
                                Some(scheme) => scheme,
                                None => DraftScheme::iid(q.as_ref().clone(), 1)?,
                            };
                            entry.insert(DraftSampler::new(&scheme))
                        }
                    };
                    for child in sampler.sample(rng) {
                        let mut next = path.clone();
                        next.push(child);
                        grown.push(next);
                    }
                }
                *tree = grown;
            }
        }
        // Every node of every tree: the target's laws in one call.
        let nodes: Vec<Vec<Vec<usize>>> = trees.iter().map(|tree| tree_nodes(tree)).collect();
        let wanted: Vec<Vec<usize>> = unique(
            (blocks.iter().zip(&nodes))
                .flat_map(|(&b, nodes)| nodes.iter().map(move |node| absolute(b, node))),
        );
        let laws = model.laws(Side::Target, &wanted)?;
        target_calls += 1;
        check_law_count(Side::Target, &wanted, &laws, v)?;
        let target_laws: HashMap<Vec<usize>, Arc<Distribution>> =
            wanted.into_iter().zip(laws).collect();
        // Block 0 starts from the first prompt: its root is the law the
        // first output token is tested against.
        root.get_or_insert_with(|| Arc::clone(&target_laws[&prompts[0]]));
        let mut models = Vec::with_capacity(blocks.len());
        for (&b, nodes) in blocks.iter().zip(nodes) {
            let (targets, drafts): (Vec<_>, Vec<_>) = (nodes.iter())
                .map(|node| {
                    let prefix = absolute(b, node);
                    (
                        Arc::clone(&target_laws[&prefix]),
                        Arc::clone(&draft_laws[&prefix]),
                    )
                })
                .unzip();
            models.push(TreeModel::new(v, nodes, targets, drafts)?);
        }
        // Per method, one output per block of the round.
        let mut outputs: Vec<Vec<Vec<usize>>> = Vec::with_capacity(tallies.len());
        for method in methods {
            let mut out = Vec::with_capacity(blocks.len());
            for ((&b, tree), model) in blocks.iter().zip(&trees).zip(&models) {
                let verifier = prepare_tree_block(method, model, depth, &shape)?;
                let mut rng = seeded_stream(seed, 2 * b + 1);
                out.push(verifier.sample(tree, &mut rng)?);
                model.check(method)?;
            }
            outputs.push(out);
        }
        for custom in custom {
            let round_blocks: Vec<RoundBlock<'_>> = (models.iter().zip(&trees))
                .map(|(model, paths)| RoundBlock { model, paths })
                .collect();
            let out = custom.sample_round(&round_blocks, rounds)?;
            if out.len() != blocks.len() {
                return Err(VerifyError::Sampler {
                    name: custom.name().into(),
                    message: format!(
                        "{} outputs for a round of {} blocks",
                        out.len(),
                        blocks.len()
                    ),
                });
            }
            for ((tree, model), output) in trees.iter().zip(&models).zip(&out) {
                check_block_output(custom.name(), output, tree.iter().map(Vec::as_slice), v)?;
                model.check(custom.name())?;
            }
            outputs.push(out);
        }
        for (out, tally) in outputs.iter().zip(&mut tallies) {
            for (&b, out) in blocks.iter().zip(out) {
                mdsd_core::check_tokens(out, v)?;
                check_output_length(out, depth)?;
                let tau = (out.len() - 1) as f64;
                tally.sum += tau;
                tally.sum_squares += tau * tau;
                tally.tau_counts[out.len() - 1] += 1;
                if b % prompts.len() as u64 == 0 {
                    *tally.first_tokens.entry(out[0]).or_default() += 1;
                }
            }
        }
        first_prompt_blocks += blocks
            .iter()
            .filter(|&&b| b % prompts.len() as u64 == 0)
            .count() as u64;
        rounds += 1;
        start += count;
        progress.advance(count);
    }
    let root = root.expect("at least one round ran");
    let n = samples as f64;
    let names = (methods.iter().copied()).chain(custom.iter().map(|c| c.name()));
    let methods = (names.zip(tallies))
        .map(|(method, tally)| {
            let mean = tally.sum / n;
            let variance = (tally.sum_squares / n - mean * mean).max(0.0) * n / (n - 1.0).max(1.0);
            let fit = goodness_of_fit(&tally.first_tokens, root.probs(), first_prompt_blocks);
            BlockReport {
                name: method.to_string(),
                expected_accepted: mean,
                block_efficiency: mean + 1.0,
                max_law_error: None,
                samples: Some(samples),
                standard_error: Some((variance / n).sqrt()),
                first_token_p_value: Some(fit.p_value),
                tau_law: tally.tau_counts.iter().map(|&c| c as f64 / n).collect(),
            }
        })
        .collect();
    Ok(LiveReport {
        methods,
        blocks: samples,
        target_calls,
        draft_calls,
        rounds,
    })
}

/// Exact mode on a live model: the laws after every prefix of up to L
/// tokens following `prompt` (L + 1 batched calls of each model), then
/// every draft tree of `shape` enumerated as [`exact_tree`] does, for each
/// method. Refused past `limit` sequences or trees.
pub fn exact_live_blocks(
    model: &mut dyn LiveModel,
    prompt: &[usize],
    methods: &[&str],
    (depth, shape): (usize, &DraftShape),
    limit: usize,
) -> Result<Vec<BlockReport>, VerifyError> {
    check_live(
        model,
        std::slice::from_ref(&prompt.to_vec()),
        methods.len(),
        depth,
        shape,
    )?;
    let v = model.vocab_size();
    let sequences = mdsd_core::saturating_pow(v as u128, depth.saturating_add(1));
    if sequences > limit as u128 {
        return Err(mdsd_core::CoreError::TooLarge {
            what: "the set of output sequences",
            size: sequences,
            limit: limit as u128,
            instead: Instead(&[Method::Sampling]),
        }
        .into());
    }
    let mut nodes: Vec<Vec<usize>> = vec![Vec::new()];
    let mut level: Vec<Vec<usize>> = vec![Vec::new()];
    for _ in 0..depth {
        level = (level.iter())
            .flat_map(|node| {
                (0..v).map(move |y| {
                    let mut next = node.clone();
                    next.push(y);
                    next
                })
            })
            .collect();
        nodes.extend(level.iter().cloned());
    }
    let mut targets = Vec::with_capacity(nodes.len());
    let mut drafts = Vec::with_capacity(nodes.len());
    // One call per depth and model.
    for length in 0..=depth {
        let wanted: Vec<Vec<usize>> = (nodes.iter())
            .filter(|node| node.len() == length)
            .map(|node| [prompt, node].concat())
            .collect();
        for (side, laws) in [(Side::Target, &mut targets), (Side::Draft, &mut drafts)] {
            let fetched = model.laws(side, &wanted)?;
            check_law_count(side, &wanted, &fetched, v)?;
            laws.extend(fetched);
        }
    }
    let tree = TreeModel::new(v, nodes, targets, drafts)?;
    methods
        .iter()
        .map(|method| {
            if let Some(reference) = block_reference(method, &tree, depth, shape, limit) {
                return reference;
            }
            let verifier = prepare_tree_block(method, &tree, depth, shape)?;
            let report = exact_tree(&tree, verifier.as_ref(), depth, shape, limit)?;
            tree.check(method)?;
            Ok(BlockReport {
                name: method.to_string(),
                ..report
            })
        })
        .collect()
}

/// Refuses what no block can be drafted for: no prompt, no method, K or L
/// of 0, a tree of another depth, tokens of a prompt outside the
/// vocabulary.
fn check_live(
    model: &dyn LiveModel,
    prompts: &[Vec<usize>],
    methods: usize,
    depth: usize,
    shape: &DraftShape,
) -> Result<(), VerifyError> {
    let refused = |setting, expected| -> Result<(), VerifyError> {
        Err(CoreError::setting(setting, 0, expected).into())
    };
    if prompts.is_empty() {
        return refused(
            "prompts",
            "at least one prompt (an empty one starts from nothing)",
        );
    }
    if methods == 0 {
        return refused("methods", "at least one method");
    }
    if *shape == DraftShape::Paths(0) {
        return refused("paths", "at least 1");
    }
    if depth == 0 {
        return Err(CoreError::ZeroDepth.into());
    }
    shape.check_depth(depth)?;
    check_tree_size(shape.leaves(), depth)?;
    for prompt in prompts {
        mdsd_core::check_tokens(prompt, model.vocab_size())?;
    }
    Ok(())
}

/// The distinct prefixes, in first-seen order.
fn unique(prefixes: impl Iterator<Item = Vec<usize>>) -> Vec<Vec<usize>> {
    let mut seen = HashSet::new();
    prefixes.filter(|p| seen.insert(p.clone())).collect()
}

/// The prefixes of a tree's paths, of every length 0..=L, each once.
fn tree_nodes(tree: &[Vec<usize>]) -> Vec<Vec<usize>> {
    unique(
        tree.iter()
            .flat_map(|path| (0..=path.len()).map(|d| path[..d].to_vec())),
    )
}
