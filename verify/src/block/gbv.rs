//! Greedy multi-path block verification (GBV, Thomas & Pal): of K i.i.d.
//! draft paths, follow the greedy path and verify it by block verification
//! against the law that path actually has (`docs/DESIGN.md` §6).
//!
//! The greedy child at a node is the reference's: the drafted child of
//! largest clamped ratio min(1, p/q) (its token-level acceptance), ties to
//! the earliest path. Every child with p >= q ("certain") has clamped
//! ratio 1, so among them the earliest path's child wins.
//!
//! The skewed law. Given that the greedy prefix u is shared by m of the K
//! paths, their next tokens X_1..X_m are i.i.d. from q(. | u), in path
//! order. With B the draft mass of the uncertain tokens (p < q):
//! * a certain x is chosen when X_i = x is the first certain draw:
//!   Σ_i B^(i-1) q(x) = q(x) Σ_(j<m) B^j;
//! * an uncertain x is chosen when no draw is certain, the largest ratio
//!   drawn is x's, and x is the earliest draw of its ratio group G (the
//!   uncertain tokens of x's ratio; by exchangeability each of G with
//!   probability q(x) / q(G)): with L the mass of lower ratios and F = L +
//!   q(G), q(x) / q(G) (F^m - L^m) = q(x) Σ_(j<m) F^j L^(m-1-j).
//!
//! Both are q(x) Σ_(j<m) F^j L^(m-1-j), a sum of non-negative terms, with
//! (F, L) = (total mass, B) for certain tokens. The count m is random: at
//! the root all at K; after choosing x it moves to the number j of paths
//! whose next token is x (`next_counts`).

use mdsd_core::{ContextModel, CoreError, DraftShape, Instead};
use rand::RngCore;

use super::path::{BlockVerify, PathDraft};
use super::{Block, BlockLaw, BlockVerifier, PerContext};
use crate::VerifyError;

/// Most draft paths GBV takes: the law of the number of paths through a
/// node costs O(K^2) a node (O(K^3) at exact ties of ratio).
pub const GBV_MAX_PATHS: usize = 1024;

/// The choice rule of one context and what its skewed law needs.
struct Preference {
    /// min(1, p / q) of each drafted token (0 where q = 0).
    clamped: Vec<f64>,
    /// p >= q (and q > 0): clamped ratio 1.
    certain: Vec<bool>,
    /// L: for an uncertain token the draft mass of the lower ratios; for a
    /// certain one B, the mass of every uncertain token.
    below: Vec<f64>,
    /// F: L plus the mass of the token's ratio group (uncertain), or the
    /// total mass (certain).
    upto: Vec<f64>,
}

impl Preference {
    fn new(p: &[f64], q: &[f64]) -> Self {
        let v = p.len();
        let certain: Vec<bool> = (0..v).map(|x| q[x] > 0.0 && p[x] >= q[x]).collect();
        let clamped = (0..v)
            .map(|x| {
                if q[x] > 0.0 {
                    (p[x] / q[x]).min(1.0)
                } else {
                    0.0
                }
            })
            .collect();
        // Uncertain drafted tokens by ascending ratio, in groups of equal ratio.
        let mut uncertain: Vec<usize> = (0..v).filter(|&x| q[x] > 0.0 && !certain[x]).collect();
        let ratio = |x: usize| p[x] / q[x];
        uncertain.sort_unstable_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
        let (mut below, mut upto) = (vec![0.0; v], vec![0.0; v]);
        let mut mass = 0.0;
        let mut start = 0;
        while start < uncertain.len() {
            let end = start
                + uncertain[start..]
                    .iter()
                    .take_while(|&&x| ratio(x) == ratio(uncertain[start]))
                    .count();
            let group: f64 = uncertain[start..end].iter().map(|&x| q[x]).sum();
            for &x in &uncertain[start..end] {
                (below[x], upto[x]) = (mass, mass + group);
            }
            mass += group;
            start = end;
        }
        let total = mass + (0..v).filter(|&x| certain[x]).map(|x| q[x]).sum::<f64>();
        for x in (0..v).filter(|&x| certain[x]) {
            (below[x], upto[x]) = (mass, total);
        }
        Self {
            clamped,
            certain,
            below,
            upto,
        }
    }

    /// Σ_m π(m) Σ_(j<m) F^j L^(m-1-j) for token x (π over m = 1..=K): the
    /// skewed law at x divided by q(x).
    fn skew(&self, counts: &[f64], x: usize) -> f64 {
        let (b, f) = (self.below[x], self.upto[x]);
        // s_m = Σ_(j<m) F^j L^(m-1-j) = F^(m-1) + L s_(m-1), s_1 = 1.
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
    /// GBV reads K i.i.d. paths: its skewed law is that of the greedy path
    /// among them.
    pub fn new(block: Block<'m>) -> Result<Self, VerifyError> {
        if !matches!(block.shape, DraftShape::Paths(_)) {
            return Err(VerifyError::ShapeNotSupported {
                method: "gbv",
                shape: block.shape.describe(),
                reason: "its skewed draft law is that of the greedy path among K i.i.d. paths",
            });
        }
        let preferences = PerContext::new(block.model);
        Ok(Self { block, preferences })
    }

    /// The paths' check, and GBV's own cap on their number.
    fn check(&self, paths: &[Vec<usize>]) -> Result<(), VerifyError> {
        self.block.check(paths)?;
        if paths.len() > GBV_MAX_PATHS {
            return Err(CoreError::TooLarge {
                what: "GBV's draft paths",
                size: paths.len() as u128,
                limit: GBV_MAX_PATHS as u128,
                instead: Instead(&[]),
            }
            .into());
        }
        Ok(())
    }

    /// The choice rule of a context, computed on first use.
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
            // The largest clamped ratio, ties to the earliest path: a later
            // path takes over only with a strictly larger one.
            let mut x = paths[alive[0]][d];
            for &i in &alive[1..] {
                if preference.clamped[paths[i][d]] > preference.clamped[x] {
                    x = paths[i][d];
                }
            }
            alive.retain(|&i| paths[i][d] == x);
            let next = next_counts(
                &counts,
                self.block.model.draft(context).prob(x),
                preference,
                x,
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

/// The law of the number j of paths through the chosen child x, from the
/// law π of the number m through its parent, normalised.
/// * x certain: the first certain draw is X_i = x (probability B^(i-1)
///   q), and j - 1 of the m - i draws after it are x; with t = m - i,
///   P(j | m) = q Σ_t B^(m-1-t) C(t, j-1) q^(j-1) (T - q)^(t-j+1), T the
///   total mass. Summed over m first, w_t = Σ_(m>t) π(m) B^(m-1-t)
///   (w_t = π(t+1) + B w_(t+1)), it costs O(K^2).
/// * x uncertain, in a ratio group of other mass r, lower mass L: j draws
///   are x, k others of the group, the rest lower, and the group's first
///   draw is x: Σ_k C(m, j+k) C(j+k-1, k) q^j r^k L^(m-j-k) (one term, k =
///   0, when x's ratio is its own).
fn next_counts(counts: &[f64], q: f64, preference: &Preference, x: usize) -> Vec<f64> {
    let k = counts.len();
    let (below, upto) = (preference.below[x], preference.upto[x]);
    let mut next = vec![0.0; k];
    if preference.certain[x] {
        let rest = (upto - q).max(0.0);
        let mut weight = vec![0.0; k + 1];
        for t in (0..k).rev() {
            weight[t] = counts[t] + below * weight[t + 1];
        }
        for (t, &w) in weight.iter().enumerate().take(k) {
            if rest == 0.0 {
                // x is the only drafted token: every path continues with it.
                next[t] += w * q.powi(t as i32 + 1);
                continue;
            }
            // C(t, j - 1) q^j rest^(t - j + 1) for j = 1..=t + 1.
            let mut term = q * rest.powi(t as i32);
            for j in 1..=t + 1 {
                next[j - 1] += w * term;
                if j <= t {
                    term *= (t + 1 - j) as f64 / j as f64 * q / rest;
                }
            }
        }
    } else {
        let others = (upto - below - q).max(0.0);
        for (m, &pi) in (1..=k).zip(counts) {
            if pi == 0.0 {
                continue;
            }
            for j in 1..=m {
                let kept = if others > 0.0 { m - j } else { 0 };
                let term: f64 = (0..=kept)
                    .map(|o| {
                        binomial(m, j + o)
                            * binomial(j + o - 1, o)
                            * q.powi(j as i32)
                            * others.powi(o as i32)
                            * below.powi((m - j - o) as i32)
                    })
                    .sum();
                next[j - 1] += pi * term;
            }
        }
    }
    let total: f64 = next.iter().sum();
    next.iter_mut().for_each(|c| *c /= total);
    next
}

/// C(n, k) in floating point.
fn binomial(n: usize, k: usize) -> f64 {
    (0..k.min(n - k)).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64)
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
        q * node.preference.skew(&node.counts, token)
    }
    fn law(&self, depth: usize) -> impl Iterator<Item = f64> + '_ {
        let node = &self.nodes[depth];
        let q = self.model.draft(node.context).probs();
        q.iter()
            .enumerate()
            .map(move |(x, &qx)| qx * node.preference.skew(&node.counts, x))
    }
}

impl BlockVerifier for GreedyBlockVerification<'_> {
    fn name(&self) -> &str {
        "gbv"
    }
    fn law(&self, paths: &[Vec<usize>]) -> Result<BlockLaw, VerifyError> {
        self.check(paths)?;
        let (path, draft) = self.greedy(paths);
        Ok(BlockVerify::new(self.block.model, &path, draft).law())
    }
    fn sample(
        &self,
        paths: &[Vec<usize>],
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, VerifyError> {
        self.check(paths)?;
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
        let block = Block::new(&model, 2, &DraftShape::Paths(2)).unwrap();
        let gbv = GreedyBlockVerification::new(block).unwrap();
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
