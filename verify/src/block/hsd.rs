//! Hierarchical Speculative Decoding (HSD; Zhou et al., "Overcoming Joint
//! Intractability with Lossless Hierarchical Speculative Decoding", arXiv
//! 2601.05724), as its authors' reference code verifies one draft path
//! (`algorithm_clean.py`, `_speculative_sampling` with `HSD=True`, in
//! github.com/ZhouYuxuanYX/Hierarchical-Speculative-Decoding). The paper's
//! text was not reachable from here; the rule below is the code's.
//!
//! With P_j = p(x_1..x_j) and Q_j = q(x_1..x_j) the joint probabilities of
//! the path's first j tokens (P_0 = Q_0 = 1):
//! * the whole path is accepted with probability min(1, P_L / Q_L), then a
//!   token from p(. | x);
//! * else, from j = L - 1 down, the verifier steps back past position j
//!   with probability s_j = 1 - S+_j / S-_j, where r_j(y) = min(P_j, Q_j)
//!   p(y | x^j) - Q_j q(y | x^j) and S±_j are the sums of its positive and
//!   negative parts; s_j = 0 where P_(j+1) >= Q_(j+1) (the "cap"). It stops
//!   at the first j it does not step back past (at L - 1 if it steps back
//!   past all, the code's argmax of an all-false mask) and outputs x^j and a
//!   token from r_j+ / S+_j, or, where S+_j = 0, x^(j+1) alone.
//!
//! This is block verification with the weight w_j = min(1, P_j / Q_j) in
//! place of the running w_j = min(1, w_(j-1) p / q) <= it: the code accepts
//! more than block verification, which is optimal among lossless
//! verifiers of one path, so it cannot be lossless. The exact law shows the
//! loss (`docs/blocks.md`); with the running weight, no cap and no quirk it
//! is block verification itself, so there is no separate corrected variant.

use mdsd_core::{ContextModel, sample_index, sample_index_of_total};
use rand::RngCore;

use super::path::{laws_after as laws, push_corrections, uniform};
use super::{Block, BlockLaw, BlockVerifier};
use crate::VerifyError;

/// HSD of the first draft path, as its reference code verifies it.
pub struct HierarchicalVerification<'m>(Block<'m>);

impl<'m> HierarchicalVerification<'m> {
    pub fn new(block: Block<'m>) -> Result<Self, VerifyError> {
        block.first_path_drawn("hsd")?;
        Ok(Self(block))
    }
}

/// One path's joint probabilities and, per position, what the rule reads.
struct HsdPath<'a> {
    model: &'a dyn ContextModel,
    path: &'a [usize],
    /// P_j and Q_j, j = 0..=L.
    joint_p: Vec<f64>,
    joint_q: Vec<f64>,
}

impl<'a> HsdPath<'a> {
    fn new(model: &'a dyn ContextModel, path: &'a [usize]) -> Self {
        let (mut joint_p, mut joint_q) = (vec![1.0], vec![1.0]);
        for (j, &token) in path.iter().enumerate() {
            let (p, q) = laws(model, &path[..j]);
            joint_p.push(joint_p[j] * p[token]);
            joint_q.push(joint_q[j] * q[token]);
        }
        Self {
            model,
            path,
            joint_p,
            joint_q,
        }
    }

    /// min(1, P_L / Q_L): the whole path accepted.
    fn accept(&self) -> f64 {
        let depth = self.path.len();
        (self.joint_p[depth] / self.joint_q[depth]).min(1.0)
    }

    /// r_j(y) = min(P_j, Q_j) p(y | x^j) - Q_j q(y | x^j), token by token.
    fn excess(&self, j: usize) -> impl Iterator<Item = f64> + 'a {
        let (p, q) = laws(self.model, &self.path[..j]);
        let (scale, draft) = (self.joint_p[j].min(self.joint_q[j]), self.joint_q[j]);
        p.iter().zip(q).map(move |(&p, &q)| scale * p - draft * q)
    }

    /// (s_j, S+_j): the probability of stepping back past position j, and
    /// the mass of r_j+.
    fn step_back(&self, j: usize) -> (f64, f64) {
        let (plus, minus) = self.excess(j).fold((0.0, 0.0), |(plus, minus), r| {
            if r > 0.0 {
                (plus + r, minus)
            } else {
                (plus, minus - r)
            }
        });
        let denominator = f64::max(plus, minus);
        let kept = if denominator > 0.0 {
            plus / denominator
        } else {
            0.0
        };
        let capped = self.joint_p[j + 1] >= self.joint_q[j + 1];
        (if capped { 0.0 } else { 1.0 - kept }, plus)
    }

    /// The output when the rule stops at position j (S+_j given): x^j and a
    /// token of r_j+ / S+_j, or x^(j+1) alone where S+_j = 0.
    fn stop_law(&self, j: usize, plus: f64) -> Option<Vec<f64>> {
        (plus > 0.0).then(|| self.excess(j).map(|r| r.max(0.0) / plus).collect())
    }
}

impl BlockVerifier for HierarchicalVerification<'_> {
    fn name(&self) -> &str {
        "hsd"
    }

    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.0.check(paths)?;
        let model = self.0.model;
        let x = &paths[0];
        let depth = x.len();
        let path = HsdPath::new(model, x);
        let mut out = Vec::new();
        let accept = path.accept();
        if accept > 0.0 {
            push_corrections(&mut out, x, accept, laws(model, x).0);
        }
        let rejected = 1.0 - accept;
        if rejected <= 0.0 {
            return Ok(out);
        }
        let steps: Vec<(f64, f64)> = (0..depth).map(|j| path.step_back(j)).collect();
        let all_back: f64 = steps.iter().map(|s| s.0).product();
        let mut back_above = 1.0;
        for j in (0..depth).rev() {
            let (step_back, plus) = steps[j];
            let mut stop = (1.0 - step_back) * back_above;
            if j == depth - 1 {
                stop += all_back;
            }
            back_above *= step_back;
            if stop <= 0.0 {
                continue;
            }
            match path.stop_law(j, plus) {
                Some(law) => push_corrections(&mut out, &x[..j], rejected * stop, &law),
                None => out.push((x[..=j].to_vec(), rejected * stop)),
            }
        }
        Ok(out)
    }

    /// Draws the output with the reference code's coins, storing nothing
    /// of size V: the stop is the deepest position not stepped back past.
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        self.0.check(paths)?;
        let model = self.0.model;
        let x = &paths[0];
        let depth = x.len();
        let path = HsdPath::new(model, x);
        let mut out;
        if uniform(rng) < path.accept() {
            out = x.clone();
            out.push(sample_index(laws(model, x).0, rng));
            return Ok(out);
        }
        let (stop, plus) = (0..depth)
            .rev()
            .map(|j| (j, path.step_back(j)))
            .find(|&(_, (step_back, _))| uniform(rng) >= step_back)
            .map_or_else(
                || (depth - 1, path.step_back(depth - 1).1),
                |(j, s)| (j, s.1),
            );
        out = x[..stop].to_vec();
        if plus > 0.0 {
            let weights = path.excess(stop).map(|r| r.max(0.0));
            out.push(sample_index_of_total(weights, plus, rng));
        } else {
            out.push(x[stop]);
        }
        Ok(out)
    }
}
