//! Greedy multi-path block verification (GBV, Thomas & Pal): of K i.i.d.
//! draft paths, follow the greedy path (at each node the most preferred
//! next token among the paths through it) and verify it by block
//! verification against the law that path actually has.
//!
//! Preference is one strict total order per context, p/q descending then
//! token id ascending, used both to choose the child and to compute the
//! skewed law; the published reference breaks ties differently in the two
//! places and loses exactness (`docs/DESIGN.md` §6).
//!
//! The skewed law. Given that the greedy prefix u is shared by m of the K
//! paths, their next tokens are m i.i.d. draws from q(. | u), and the greedy
//! child is their maximum in the order: x with probability
//! F(x)^m - B(x)^m, where B(x) is the q-mass of tokens less preferred than x
//! and F(x) = B(x) + q(x). Written as q(x) Σ_(j<m) F^j B^(m-1-j), a sum of
//! non-negative terms, it has no cancellation when q(x) << F(x). The count
//! m is random: its law at the root is all at K, and after choosing x it
//! moves to j (the paths whose next token is x) with weight
//! Σ_(m>=j) π(m) C(m, j) q(x)^j B(x)^(m-j), again a sum of non-negative terms.

use mdsd_core::ContextModel;
use rand::RngCore;

use super::path::{BlockVerify, PathDraft};
use super::{Block, BlockLaw, BlockVerifier, PerContext};
use crate::VerifyError;

/// The preference order of one context.
struct Preference {
    /// Position of each token in ascending preference.
    rank: Vec<u32>,
    /// B(x): the draft mass of the tokens less preferred than x.
    below: Vec<f64>,
}

impl Preference {
    fn new(p: &[f64], q: &[f64]) -> Self {
        // Tokens with q = 0 are never drafted; any place in the order will do.
        let ratio = |x: usize| {
            if q[x] > 0.0 {
                p[x] / q[x]
            } else {
                f64::INFINITY
            }
        };
        let mut order: Vec<u32> = (0..p.len() as u32).collect();
        // Ascending preference: ascending ratio, and among equal ratios the
        // higher id first (the lower id is preferred).
        order.sort_unstable_by(|&a, &b| {
            ratio(a as usize)
                .total_cmp(&ratio(b as usize))
                .then(b.cmp(&a))
        });
        let mut rank = vec![0; p.len()];
        let mut below = vec![0.0; p.len()];
        let mut mass = 0.0;
        for (position, &x) in order.iter().enumerate() {
            rank[x as usize] = position as u32;
            below[x as usize] = mass;
            mass += q[x as usize];
        }
        Self { rank, below }
    }

    /// Σ_m π(m) Σ_(j<m) F^j B^(m-1-j) for token x (π over m = 1..=K): the
    /// skewed law at x divided by q(x).
    fn skew(&self, counts: &[f64], x: usize, q: f64) -> f64 {
        let b = self.below[x];
        let f = b + q;
        // s_m = Σ_(j<m) F^j B^(m-1-j) = F^(m-1) + B s_(m-1), s_1 = 1.
        let (mut s, mut f_power, mut total) = (0.0, 1.0, 0.0);
        for &pi in counts {
            s = f_power + b * s;
            f_power *= f;
            total += pi * s;
        }
        total
    }
}

/// GBV for K i.i.d. draft paths, K = the number of paths given.
pub struct GreedyBlockVerification<'m> {
    block: Block<'m>,
    preferences: PerContext<Preference>,
}

impl<'m> GreedyBlockVerification<'m> {
    pub fn new(model: &'m dyn ContextModel, depth: usize) -> Result<Self, VerifyError> {
        Ok(Self {
            block: Block::new(model, depth)?,
            preferences: PerContext::new(model),
        })
    }

    /// The preference order of a context, computed on first use.
    fn preference(&self, context: usize) -> &Preference {
        let model = self.block.model;
        self.preferences.get(context, || {
            Preference::new(model.target(context).probs(), model.draft(context).probs())
        })
    }

    /// The greedy path and its skewed draft law.
    fn greedy(&self, paths: &[Vec<usize>]) -> (Vec<usize>, SkewedDraft<'_>) {
        let k = paths.len();
        let mut alive: Vec<usize> = (0..k).collect();
        let mut path = Vec::with_capacity(self.block.depth);
        let mut counts = vec![0.0; k];
        counts[k - 1] = 1.0;
        let mut nodes = Vec::with_capacity(self.block.depth);
        while path.len() < self.block.depth {
            let d = path.len();
            let context = self.block.model.context(&path);
            let preference = self.preference(context);
            let x = alive
                .iter()
                .map(|&i| paths[i][d])
                .max_by_key(|&x| preference.rank[x])
                .expect("at least one path");
            alive.retain(|&i| paths[i][d] == x);
            let next = next_counts(
                &counts,
                self.block.model.draft(context).prob(x),
                preference.below[x],
            );
            nodes.push(SkewedNode {
                context,
                preference,
                counts: std::mem::replace(&mut counts, next),
            });
            path.push(x);
        }
        (
            path,
            SkewedDraft {
                model: self.block.model,
                nodes,
            },
        )
    }
}

/// The law of the number of paths through the child x: π'(j) ∝
/// Σ_(m>=j) π(m) C(m, j) q^j B^(m-j), normalised.
fn next_counts(counts: &[f64], q: f64, below: f64) -> Vec<f64> {
    let k = counts.len();
    let mut next = vec![0.0; k];
    for m in 1..=k {
        let mut binomial = 1.0;
        for j in 1..=m {
            // C(m, j) from C(m, j - 1).
            binomial *= (m - j + 1) as f64 / j as f64;
            next[j - 1] += counts[m - 1] * binomial * q.powi(j as i32) * below.powi((m - j) as i32);
        }
    }
    let total: f64 = next.iter().sum();
    next.iter_mut().for_each(|c| *c /= total);
    next
}

/// One node of the greedy path: its context and the law of the number of
/// paths through it (index m - 1).
struct SkewedNode<'a> {
    context: usize,
    preference: &'a Preference,
    counts: Vec<f64>,
}

/// The greedy path's own draft law, node by node.
struct SkewedDraft<'a> {
    model: &'a dyn ContextModel,
    nodes: Vec<SkewedNode<'a>>,
}

impl PathDraft for SkewedDraft<'_> {
    fn prob(&self, depth: usize, token: usize) -> f64 {
        let node = &self.nodes[depth];
        let q = self.model.draft(node.context).prob(token);
        q * node.preference.skew(&node.counts, token, q)
    }
    fn law(&self, depth: usize) -> impl Iterator<Item = f64> + '_ {
        let node = &self.nodes[depth];
        let q = self.model.draft(node.context).probs();
        q.iter()
            .enumerate()
            .map(move |(x, &qx)| qx * node.preference.skew(&node.counts, x, qx))
    }
}

impl BlockVerifier for GreedyBlockVerification<'_> {
    fn name(&self) -> &str {
        "gbv"
    }
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.block.check(paths)?;
        let (path, draft) = self.greedy(paths);
        Ok(BlockVerify::new(self.block.model, &path, draft).law())
    }
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        self.block.check(paths)?;
        let (path, draft) = self.greedy(paths);
        Ok(BlockVerify::new(self.block.model, &path, draft).sample(rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdsd_core::{ContextIndependent, Distribution};

    /// docs/TEST_VECTORS.md, block level: the skewed law of the toy for K = 2.
    #[test]
    fn skewed_laws_of_the_toy() {
        let law = |v: Vec<f64>| Distribution::from_probs(v).unwrap();
        let model = ContextIndependent::new(
            law(vec![1.0 / 3.0, 2.0 / 3.0]),
            law(vec![2.0 / 3.0, 1.0 / 3.0]),
        )
        .unwrap();
        let gbv = GreedyBlockVerification::new(&model, 2).unwrap();
        let close =
            |a: &[f64], b: [f64; 2]| (a[0] - b[0]).abs() < 1e-15 && (a[1] - b[1]).abs() < 1e-15;
        // Both paths start with token 1: the root law, then after token 1.
        let (path, draft) = gbv.greedy(&[vec![1, 0], vec![0, 0]]);
        assert_eq!(path, vec![1, 0]);
        assert!(close(
            &draft.law(0).collect::<Vec<_>>(),
            [4.0 / 9.0, 5.0 / 9.0]
        ));
        assert!(close(
            &draft.law(1).collect::<Vec<_>>(),
            [28.0 / 45.0, 17.0 / 45.0]
        ));
        let (path, draft) = gbv.greedy(&[vec![0, 0], vec![0, 1]]);
        assert_eq!(path, vec![0, 1]);
        assert!(close(
            &draft.law(1).collect::<Vec<_>>(),
            [4.0 / 9.0, 5.0 / 9.0]
        ));
    }
}
