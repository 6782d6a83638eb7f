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

use super::path::{laws_after as laws, push_corrections};
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

impl BlockVerifier for HierarchicalVerification<'_> {
    fn name(&self) -> &str {
        "hsd"
    }

    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.0.check(paths)?;
        let model = self.0.model;
        let x = &paths[0];
        let depth = x.len();
        // Joint probabilities of the prefixes, P_j and Q_j.
        let (mut joint_p, mut joint_q) = (vec![1.0], vec![1.0]);
        for (j, &token) in x.iter().enumerate() {
            let (p, q) = laws(model, &x[..j]);
            joint_p.push(joint_p[j] * p[token]);
            joint_q.push(joint_q[j] * q[token]);
        }
        let mut out = Vec::new();
        let accept = (joint_p[depth] / joint_q[depth]).min(1.0);
        if accept > 0.0 {
            push_corrections(&mut out, x, accept, laws(model, x).0);
        }
        let rejected = 1.0 - accept;
        if rejected <= 0.0 {
            return Ok(out);
        }
        // Per position j: the step-back probability and the law r_j+.
        let mut step_back = Vec::with_capacity(depth);
        let mut excess = Vec::with_capacity(depth);
        for j in 0..depth {
            let (p, q) = laws(model, &x[..j]);
            let scale = joint_p[j].min(joint_q[j]);
            let r: Vec<f64> = p
                .iter()
                .zip(q)
                .map(|(&p, &q)| scale * p - joint_q[j] * q)
                .collect();
            let plus: f64 = r.iter().map(|&v| v.max(0.0)).sum();
            let minus: f64 = r.iter().map(|&v| (-v).max(0.0)).sum();
            let denominator = plus.max(minus);
            let kept = if denominator > 0.0 {
                plus / denominator
            } else {
                0.0
            };
            let capped = joint_p[j + 1] >= joint_q[j + 1];
            step_back.push(if capped { 0.0 } else { 1.0 - kept });
            excess.push((r, plus));
        }
        let all_back: f64 = step_back.iter().product();
        let mut back_above = 1.0;
        for j in (0..depth).rev() {
            let mut stop = (1.0 - step_back[j]) * back_above;
            if j == depth - 1 {
                stop += all_back;
            }
            back_above *= step_back[j];
            if stop <= 0.0 {
                continue;
            }
            let (r, plus) = &excess[j];
            if *plus > 0.0 {
                let law: Vec<f64> = r.iter().map(|&v| v.max(0.0) / plus).collect();
                push_corrections(&mut out, &x[..j], rejected * stop, &law);
            } else {
                out.push((x[..=j].to_vec(), rejected * stop));
            }
        }
        Ok(out)
    }
}
