//! The node sums over a program's tokens that the selection integrals of
//! drafts from several laws (module `independent`) are made of, taken
//! either way the i.i.d. evaluation takes them: through buckets of theta
//! (module `buckets`) from `BUCKETED_FROM` tokens, where tokens share a
//! bucket by the hundred and a sum costs per bucket, and token by token
//! below (module `integrals`: squaring chains and series moments), where
//! buckets hold about one token each and a bucket's node sums would cost
//! more than its tokens'.

use std::sync::Arc;

use super::buckets::{Assignment, Decays};
use super::integrals::{NodeLogs, WeightedToken, moments, transform_by_token};
use crate::thresholds::BUCKETED_FROM;
use crate::workspace::Workspace;

/// A program's tokens at the weights a = e^theta, ready for node sums at
/// the nodes they were made for.
pub(crate) struct Sums(Ways);

/// How a `Sums` takes its node sums.
enum Ways {
    /// Buckets of theta, with the decays e^(-a_b c_k) of their centres,
    /// which the sums of a restriction share.
    Buckets(Assignment, Arc<Decays>),
    /// One by one.
    Tokens(Vec<WeightedToken>),
}

impl Sums {
    /// The tokens of weights e^`theta` for sums at the ascending nodes `c`.
    pub fn new(theta: &[f64], c: &[f64], workspace: &mut Workspace) -> Self {
        Self::taken(theta, c, theta.len() >= BUCKETED_FROM, workspace)
    }

    /// `new`, through buckets when `bucketed`.
    fn taken(theta: &[f64], c: &[f64], bucketed: bool, workspace: &mut Workspace) -> Self {
        if bucketed {
            let tokens = Assignment::new(theta, workspace);
            let decays = Arc::new(tokens.decays(c));
            Self(Ways::Buckets(tokens, decays))
        } else {
            let logs = NodeLogs::new(c);
            let tokens = (theta.iter())
                .map(|&t| WeightedToken::new(t, c, logs))
                .collect();
            Self(Ways::Tokens(tokens))
        }
    }

    /// a_y = e^(theta_y).
    pub fn weight(&self, y: usize) -> f64 {
        match &self.0 {
            Ways::Buckets(tokens, _) => tokens.weight(y),
            Ways::Tokens(tokens) => tokens[y].a,
        }
    }

    /// The tokens `tokens` alone (in that order), for sums at the same
    /// nodes.
    pub fn restrict(&self, tokens: &[usize]) -> Self {
        match &self.0 {
            Ways::Buckets(assignment, decays) => Self(Ways::Buckets(
                assignment.restrict(tokens),
                Arc::clone(decays),
            )),
            Ways::Tokens(all) => Self(Ways::Tokens(tokens.iter().map(|&y| all[y]).collect())),
        }
    }

    /// `Σ_y w_y e^(-a_y c_k)` at every node, or `Σ_y w_y (e^(-a_y c_k) -
    /// 1)` when `minus_one` (free of the difference's cancellation), for
    /// weights of either sign.
    pub fn transform(
        &self,
        w: impl Fn(usize) -> f64 + Sync,
        c: &[f64],
        minus_one: bool,
    ) -> Vec<f64> {
        match &self.0 {
            Ways::Buckets(tokens, decays) => tokens.transform(w, c, decays, minus_one),
            Ways::Tokens(tokens) => transform_by_token(tokens, w, c, minus_one),
        }
    }

    /// Per token y, `Σ_k kernel_k e^(-m a_y c_k)` (m = `multiplier`, 1 or
    /// 2) plus the rule's infinite left end, where the kernel grows like
    /// c^`growth` and e^(-m a c) = 1.
    pub fn smooth(&self, c: &[f64], kernel: &[f64], multiplier: i32, growth: i32) -> Vec<f64> {
        match &self.0 {
            Ways::Buckets(tokens, decays) => tokens.smooth(c, kernel, decays, multiplier, growth),
            Ways::Tokens(tokens) => {
                let shifted;
                let kernel = match multiplier {
                    1 => kernel,
                    _ => {
                        shifted = doubled(kernel, c, growth);
                        &shifted
                    }
                };
                let moments = moments(kernel, c, growth);
                (tokens.iter())
                    .map(|token| token.smooth(kernel, &moments))
                    .collect()
            }
        }
    }
}

/// The kernel κ' with `Σ_k κ'_k e^(-a c_k) = Σ_k κ_k e^(-2 a c_k)` for
/// every a, so that a token's own squaring chains and series take the sum
/// at twice its weight: c_(k+3) = 2 c_k, so κ'_k = κ_(k-3), and below the
/// fourth node κ' follows the kernel's growth like c^`growth` left of the
/// first node (κ_0 (c_k / 2 c_0)^growth), the model the rule's infinite
/// left end sums. The last three nodes of κ drop out: they sit at 2 a c >=
/// a c_hi, past which the rule itself leaves out every term.
fn doubled(kernel: &[f64], c: &[f64], growth: i32) -> Vec<f64> {
    (0..c.len())
        .map(|k| match k.checked_sub(3) {
            Some(earlier) => kernel[earlier],
            None => kernel[0] * (c[k] / (2.0 * c[0])).powi(growth),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::potential::nodes::nodes;

    /// Both ways give the same sums: 3000 tokens over weights e^-8..e^8,
    /// ten or so a bucket, transforms of weights of both signs (with and
    /// without the 1 taken off) and smooths of kernels growing like c and
    /// c² at the left end, at the token's weight and twice it, to 1e-12
    /// relative (of Σ |w| for a transform, of the sum for a smooth).
    #[test]
    fn buckets_and_tokens_agree() {
        let v = 3000;
        let theta: Vec<f64> = (0..v)
            .map(|y| 16.0 * (y as f64 * 0.618_033_988_749_895).fract() - 8.0)
            .collect();
        let w: Vec<f64> = (0..v)
            .map(|y| (y as f64 * 0.414_213_562_373_095).fract() - 0.3)
            .collect();
        let c = nodes(&theta, 2);
        let mut workspace = Workspace::new();
        let buckets = Sums::taken(&theta, &c, true, &mut workspace);
        let tokens = Sums::taken(&theta, &c, false, &mut workspace);
        let scale: f64 = w.iter().map(|w| w.abs()).sum();
        for minus_one in [false, true] {
            let (x, y) = (
                buckets.transform(|y| w[y], &c, minus_one),
                tokens.transform(|y| w[y], &c, minus_one),
            );
            for (k, (x, y)) in x.iter().zip(&y).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-12 * scale,
                    "transform (minus one {minus_one}) at node {k}: {x} vs {y}"
                );
            }
        }
        for growth in [1, 2] {
            let kernel: Vec<f64> = (c.iter())
                .map(|&ck| ck.powi(growth) / (1.0 + ck).powi(3))
                .collect();
            for multiplier in [1, 2] {
                let (x, y) = (
                    buckets.smooth(&c, &kernel, multiplier, growth),
                    tokens.smooth(&c, &kernel, multiplier, growth),
                );
                for (token, (x, y)) in x.iter().zip(&y).enumerate() {
                    assert!(
                        (x - y).abs() <= 1e-12 * y.abs(),
                        "smooth (growth {growth}, multiplier {multiplier}) of token {token}: {x} vs {y}"
                    );
                }
            }
        }
        let part = [5, 17, 2999];
        let (x, y) = (buckets.restrict(&part), tokens.restrict(&part));
        for (i, &token) in part.iter().enumerate() {
            assert_eq!(x.weight(i), buckets.weight(token));
            assert!((x.weight(i) - y.weight(i)).abs() <= 1e-14 * y.weight(i));
        }
    }
}
