//! [`Budget`]: how far an iterative solve goes, checked once by the solver
//! that owns it and passed down by reference to every program it runs (as
//! clarabel passes its settings).

use mdsd_core::CoreError;

use crate::error::ConvexError;

/// Default bound on the acceptance lost to the solver, alpha* - acceptance.
pub const DEFAULT_TOLERANCE: f64 = 1e-7;
/// Default cap on iterations of each of the two programs.
pub const DEFAULT_MAX_ITERATIONS: usize = 100;

/// A solve's tolerance and iteration cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Bound on the acceptance lost, alpha* - acceptance (for Global
    /// Resolution, on each program's projected gradient, l1).
    pub tolerance: f64,
    /// Cap on the Newton iterations of each program.
    pub max_iterations: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            tolerance: DEFAULT_TOLERANCE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
        }
    }
}

impl Budget {
    /// Refuses a tolerance that is not positive and finite, or no iterations.
    pub fn check(&self) -> Result<(), ConvexError> {
        // The acceptance the solution may lose: an acceptance is in [0, 1],
        // so a tolerance of 1 or more asks for nothing.
        if !(self.tolerance > 0.0 && self.tolerance < 1.0) {
            return Err(CoreError::setting(
                "tolerance",
                self.tolerance,
                "in (0, 1): the acceptance the solution may lose",
            )
            .into());
        }
        if self.max_iterations == 0 {
            return Err(CoreError::setting("max_iterations", 0, "at least 1").into());
        }
        Ok(())
    }

    /// The budget with `share` of the tolerance: what one of several
    /// programs gets where their losses add up.
    pub(crate) fn share(self, share: f64) -> Self {
        Self {
            tolerance: share * self.tolerance,
            ..self
        }
    }

    /// The most drafts the programs take at this tolerance
    /// ([`resolvable_drafts`]).
    pub fn resolvable_drafts(&self) -> usize {
        resolvable_drafts(self.tolerance)
    }
}

/// The most drafts the programs take at `tolerance`. phi(c) is computed to
/// a few units of rounding, so phi(c)^(n-1) carries a relative rounding of
/// order n ε, and so does the acceptance of the rule built on it: on rows
/// of 2 to 4 tokens from 10^7 to 10^12 drafts the acceptance lost grows as
/// n x 1.1e-16 = n ε / 2 (`convex/tests/convex.rs`). Up to tolerance /
/// (2 ε) drafts that is at most a quarter of the tolerance (2.2e8 drafts
/// at the default 1e-7).
pub fn resolvable_drafts(tolerance: f64) -> usize {
    // Saturating float-to-integer conversion: a huge tolerance allows any n.
    (tolerance / (2.0 * f64::EPSILON)) as usize
}
