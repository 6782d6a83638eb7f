//! Verifiers of one draft path: speculative sampling token by token, and
//! block verification (Sun et al., "Block verification accelerates
//! speculative decoding", Algorithm 2), whose core GBV reuses with its own
//! draft law.

use mdsd_core::{ContextModel, sample_index, sample_index_of_total};
use rand::RngCore;

use super::{Block, BlockLaw, BlockVerifier};
use crate::VerifyError;
use crate::laws::{accept_prob, residual};

/// The draft law a path is verified against, node by node.
pub(crate) trait PathDraft {
    /// The probability of `token` at the node of depth `depth`.
    fn prob(&self, depth: usize, token: usize) -> f64;
    /// The whole law at the node of depth `depth`, token by token (GBV
    /// computes it on the fly: nothing of size V is stored per block).
    fn law(&self, depth: usize) -> impl Iterator<Item = f64> + '_;
}

/// The model's own draft law along a path (plain block verification).
struct ModelDraft<'a> {
    model: &'a dyn ContextModel,
    path: &'a [usize],
}

impl PathDraft for ModelDraft<'_> {
    fn prob(&self, depth: usize, token: usize) -> f64 {
        self.probs(depth)[token]
    }
    fn law(&self, depth: usize) -> impl Iterator<Item = f64> + '_ {
        self.probs(depth).iter().copied()
    }
}

impl ModelDraft<'_> {
    fn probs(&self, depth: usize) -> &[f64] {
        self.model
            .draft(self.model.context(&self.path[..depth]))
            .probs()
    }
}

/// Block verification of `path` against the draft law `draft`: the weights
/// w_d = min(w_(d-1) p(x_d) / q(x_d), 1), w_0 = 1, and from them the
/// probability h_d of stopping at depth d given no stop deeper, tried from
/// d = L down: h_L = w_L, and for d < L h_d = S_d / (S_d + 1 - w_d) with
/// S_d = Σ_x (w_d p(x | x^d) - q(x | x^d))+ (h_d = 1 when w_d = 1). The
/// correction after stopping at tau < L is drawn from
/// (w_tau p - q)+ / S_tau, after tau = L from p.
pub(crate) struct BlockVerify<'a, D> {
    model: &'a dyn ContextModel,
    path: &'a [usize],
    draft: D,
    weights: Vec<f64>,
}

impl<'a, D: PathDraft> BlockVerify<'a, D> {
    pub(crate) fn new(model: &'a dyn ContextModel, path: &'a [usize], draft: D) -> Self {
        let mut weights = vec![1.0];
        for (d, &x) in path.iter().enumerate() {
            let p = model.target(model.context(&path[..d])).prob(x);
            let w = weights[d] * p / draft.prob(d, x);
            weights.push(w.min(1.0));
        }
        Self {
            model,
            path,
            draft,
            weights,
        }
    }

    fn target(&self, depth: usize) -> &'a [f64] {
        self.model
            .target(self.model.context(&self.path[..depth]))
            .probs()
    }

    /// h_d, the probability of stopping at depth d >= 1 given no stop deeper.
    fn stop_prob(&self, depth: usize) -> f64 {
        let w = self.weights[depth];
        if depth == self.path.len() {
            return w;
        }
        if w >= 1.0 {
            return 1.0;
        }
        let s = self.excess(depth);
        s / (s + 1.0 - w)
    }

    /// The weights (w_d p(x) - q(x))+ of the correction after stopping at
    /// depth d < L, token by token.
    fn excess_weights(&self, depth: usize) -> impl Iterator<Item = f64> + '_ {
        let w = self.weights[depth];
        self.target(depth)
            .iter()
            .zip(self.draft.law(depth))
            .map(move |(p, q)| (w * p - q).max(0.0))
    }

    /// S_d = Σ_x (w_d p(x) - q(x))+.
    fn excess(&self, depth: usize) -> f64 {
        self.excess_weights(depth).sum()
    }

    /// The law of the correction token after stopping at `depth`.
    fn correction(&self, depth: usize) -> Vec<f64> {
        let p = self.target(depth);
        if depth == self.path.len() {
            return p.to_vec();
        }
        // (w p - q)+ / S = (p - q / w)+ renormalised; w > 0 wherever a stop
        // has positive probability (w_0 = 1, and h_d = 0 once w_d = 0).
        let w = self.weights[depth];
        let scaled: Vec<f64> = self.draft.law(depth).map(|q| q / w).collect();
        residual(p, &scaled)
    }

    /// The exact law of the output: P(tau = d) = h_d Π_(j > d) (1 - h_j).
    pub(crate) fn law(&self) -> BlockLaw {
        let mut out = Vec::new();
        let mut no_stop_deeper = 1.0;
        for depth in (0..=self.path.len()).rev() {
            let h = if depth == 0 {
                1.0
            } else {
                self.stop_prob(depth)
            };
            let mass = no_stop_deeper * h;
            if mass > 0.0 {
                push_corrections(&mut out, &self.path[..depth], mass, &self.correction(depth));
            }
            no_stop_deeper *= 1.0 - h;
            if no_stop_deeper <= 0.0 {
                break;
            }
        }
        out
    }

    /// Draws the output, computing h_d only down to the depth it stops at,
    /// and the correction in one pass over (w p - q)+ (two when S must be
    /// summed first), storing nothing of size V.
    pub(crate) fn sample(&self, rng: &mut dyn RngCore) -> Vec<usize> {
        let depth = (1..=self.path.len())
            .rev()
            .find(|&d| uniform(rng) < self.stop_prob(d))
            .unwrap_or(0);
        let y = if depth == self.path.len() {
            sample_index(self.target(depth), rng)
        } else {
            match self.excess(depth) {
                s if s > 0.0 => sample_index_of_total(self.excess_weights(depth), s, rng),
                // Below f64's resolution: the law's own fallback.
                _ => sample_index(&self.correction(depth), rng),
            }
        };
        let mut out = self.path[..depth].to_vec();
        out.push(y);
        out
    }
}

/// The target's and the draft's laws after `prefix`.
pub(crate) fn laws_after<'a>(
    model: &'a dyn ContextModel,
    prefix: &[usize],
) -> (&'a [f64], &'a [f64]) {
    let context = model.context(prefix);
    (model.target(context).probs(), model.draft(context).probs())
}

/// A uniform draw in [0, 1).
pub(crate) fn uniform(rng: &mut dyn RngCore) -> f64 {
    use rand::Rng;
    rng.random::<f64>()
}

/// Appends `accepted + [y]` with probability `mass * law[y]` for every y.
pub(crate) fn push_corrections(out: &mut BlockLaw, accepted: &[usize], mass: f64, law: &[f64]) {
    for (y, &r) in law.iter().enumerate() {
        if r > 0.0 {
            let mut seq = accepted.to_vec();
            seq.push(y);
            out.push((seq, mass * r));
        }
    }
}

/// Block verification of the first draft path (Sun et al.): the optimal
/// verifier of one path, E(tau) equal to the single-path LP's optimum.
pub struct BlockVerification<'m>(Block<'m>);

impl<'m> BlockVerification<'m> {
    pub fn new(block: Block<'m>) -> Result<Self, VerifyError> {
        block.first_path_drawn("bv")?;
        Ok(Self(block))
    }

    fn verify<'a>(&'a self, path: &'a [usize]) -> BlockVerify<'a, ModelDraft<'a>> {
        let model = self.0.model;
        BlockVerify::new(model, path, ModelDraft { model, path })
    }
}

impl BlockVerifier for BlockVerification<'_> {
    fn name(&self) -> &str {
        "bv"
    }
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.0.check(paths)?;
        Ok(self.verify(&paths[0]).law())
    }
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        self.0.check(paths)?;
        Ok(self.verify(&paths[0]).sample(rng))
    }
}

/// Speculative sampling token by token along the first draft path: accept
/// x_d with probability min(1, p/q), else stop with a token from
/// (p - q)+; after all L, a token from p.
pub struct TokenByToken<'m>(Block<'m>);

impl<'m> TokenByToken<'m> {
    pub fn new(block: Block<'m>) -> Result<Self, VerifyError> {
        block.first_path_drawn("token")?;
        Ok(Self(block))
    }

    fn laws(&self, prefix: &[usize]) -> (&'m [f64], &'m [f64]) {
        laws_after(self.0.model, prefix)
    }
}

impl BlockVerifier for TokenByToken<'_> {
    fn name(&self) -> &str {
        "token"
    }
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.0.check(paths)?;
        let path = &paths[0];
        let mut out = Vec::new();
        let mut reach = 1.0;
        for (d, &x) in path.iter().enumerate() {
            let (p, q) = self.laws(&path[..d]);
            let accept = accept_prob(p, q, x);
            if accept < 1.0 {
                push_corrections(
                    &mut out,
                    &path[..d],
                    reach * (1.0 - accept),
                    &residual(p, q),
                );
            }
            reach *= accept;
            if reach == 0.0 {
                return Ok(out);
            }
        }
        push_corrections(&mut out, path, reach, self.laws(path).0);
        Ok(out)
    }
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        self.0.check(paths)?;
        let path = &paths[0];
        for (d, &x) in path.iter().enumerate() {
            let (p, q) = self.laws(&path[..d]);
            if uniform(rng) >= accept_prob(p, q, x) {
                let mut out = path[..d].to_vec();
                out.push(sample_index(&residual(p, q), rng));
                return Ok(out);
            }
        }
        let mut out = path.clone();
        out.push(sample_index(self.laws(path).0, rng));
        Ok(out)
    }
}
