//! The one shape every solver has: settings in a value, [`Solve::solve`] on
//! a [`Problem`], and a solution that reports a [`Summary`] (as argmin's
//! solvers share one `Solver` trait and good_lp's backends one model).

use std::fmt;
use std::time::Duration;

use crate::{Plan, Problem};

/// A method that solves problems: the closed form (mdsd-bounds), the LP
/// (mdsd-lp), max flow (mdsd-flow), the convex programs (mdsd-convex).
/// Settings live in the implementing value and are checked by
/// [`Solve::check_settings`] before any work.
pub trait Solve {
    /// What a solve returns: a summary, and whatever else the method builds
    /// (a plan, a selection rule).
    type Solution: Solution;
    /// Why a solve fails; bad settings arrive as the crate's invalid-input
    /// variant.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The method's name in reports and on the command line (`mdsd solve
    /// --method NAME`).
    fn name(&self) -> &'static str;

    /// The settings' own check, named by setting and value.
    fn check_settings(&self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Solves one problem.
    fn solve(&self, problem: &Problem) -> Result<Self::Solution, Self::Error>;
}

/// What every solution reports.
pub trait Solution {
    /// alpha*, H*, the acceptance reached, how the solve ended and what it cost.
    fn summary(&self) -> &Summary;

    /// The verifier as an explicit conditional law, for the methods that
    /// build one (LP, max flow).
    fn plan(&self) -> Option<&Plan> {
        None
    }
}

/// One solve, as every method reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// alpha*: the optimal acceptance of the problem.
    pub alpha_star: f64,
    /// The acceptance of the verifier the solution describes: alpha* for
    /// the exact methods, within the tolerance of it for iterative ones.
    /// For the convex solver's selection rule it is the selected token's,
    /// Σ min(p, r): P(output among the drafts) at the optimum, a lower
    /// bound of it short of the optimum (a rejected selection's residual
    /// draw may land on another draft).
    pub acceptance: f64,
    /// H*, ascending token ids, with `alpha* = p(H*) + 1 - Q(all drafts in
    /// H*)`; empty when [`Status::CertificateUnverified`].
    pub certificate: Vec<usize>,
    pub status: Status,
    /// Iterations of an iterative method (0 for the others).
    pub iterations: usize,
    /// Wall-clock time of the solve.
    pub elapsed: Duration,
}

impl Summary {
    /// The summary of an exact method: the acceptance is alpha*, and the
    /// certificate, when given, reproduced it.
    pub fn exact(alpha_star: f64, certificate: Option<Vec<usize>>, elapsed: Duration) -> Self {
        let status = match certificate {
            Some(_) => Status::Optimal,
            None => Status::CertificateUnverified,
        };
        Self {
            alpha_star,
            acceptance: alpha_star,
            certificate: certificate.unwrap_or_default(),
            status,
            iterations: 0,
            elapsed,
        }
    }

    /// alpha* - acceptance: how far the solution's verifier is from the
    /// optimum (0 for the exact methods; for independent drafts, whose
    /// `alpha_star` is the upper end of a certified interval, a bound).
    pub fn gap(&self) -> f64 {
        (self.alpha_star - self.acceptance).max(0.0)
    }
}

impl Solution for Summary {
    fn summary(&self) -> &Summary {
        self
    }
}

/// How a solve ended. Failures are errors, not statuses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Exact: alpha* is the optimum, reached by the solution, and the
    /// certificate reproduces it.
    Optimal,
    /// Exact value and plan, but no certificate reproduced the value to the
    /// method's tolerance (solver round-off); the certificate is empty.
    CertificateUnverified,
    /// An iterative method stopped with `alpha* - acceptance <= tolerance`.
    Converged { tolerance: f64 },
    /// An iterative method stopped by its time limit before its tolerance:
    /// the solution's verifier is as exact as a converged one's, and its
    /// acceptance is `alpha* - gap` ([`Summary::gap`]).
    TimeLimit,
}

impl Status {
    /// The status's name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Status::Optimal => "optimal",
            Status::CertificateUnverified => "certificate-unverified",
            Status::Converged { .. } => "converged",
            Status::TimeLimit => "time-limit",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
