//! The potentials of the selection rule, one per draft scheme, side by
//! side: each a convex function of the weights theta whose gradient is the
//! selected token's law r (`docs/DESIGN.md` §5, §6b), with its own Newton
//! direction.
//!
//! * `nodes`: the quadrature in c that every potential's integrals share.
//! * `iid`: n i.i.d. drafts (integrals per token, buckets of theta, the
//!   Hessian by Woodbury), and `Sums`, the node sums that independent
//!   drafts take the same way.
//! * `independent`: drafts from different laws (a product of the drafts'
//!   transforms), Newton directions by conjugate gradients.
//! * `without_replacement`: the exponential clocks' double integral.

pub(crate) mod iid;
pub(crate) mod independent;
pub(crate) mod nodes;
pub(crate) mod without_replacement;

/// Which of a problem's two programs: over the tokens outside H* or over
/// H*'s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Side {
    Outer,
    Inner,
}
