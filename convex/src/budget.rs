//! [`Budget`]: how far an iterative solve goes, checked once by the solver
//! that owns it and passed down by reference to every program it runs (as
//! clarabel passes its settings).

use std::time::{Duration, Instant};

use mdsd_core::CoreError;

use crate::error::ConvexError;

/// Default bound on the acceptance lost to the solver, alpha* - acceptance.
pub const DEFAULT_TOLERANCE: f64 = 1e-7;
/// Default cap on iterations of each of the two programs.
pub const DEFAULT_MAX_ITERATIONS: usize = 100;

/// A solve's target gap, iteration cap and time limit.
///
/// A rule of any weights is lossless (`docs/DESIGN.md` §5), so a solve
/// stopped early loses acceptance, never exactness: a time limit returns
/// the rule of the iterate reached, its acceptance certified within
/// alpha* - acceptance of alpha* ([`Status::TimeLimit`](mdsd_core::Status)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Bound on the acceptance lost, alpha* - acceptance, where the solve
    /// runs to the end (for Global Resolution, on each program's projected
    /// gradient, l1).
    pub max_gap: f64,
    /// Cap on the Newton iterations of each program.
    pub max_iterations: usize,
    /// Wall time after which no program starts another Newton iteration:
    /// the closed form's alpha* and H*, and one evaluation of each program
    /// at its start, come first whatever the limit (zero gives the start
    /// rule), and an iteration under way finishes.
    pub time_limit: Option<Duration>,
    /// When the time limit runs out, from the solve's start (`started`).
    deadline: Option<Instant>,
    /// Whether a program at its iteration cap hands back where it stands
    /// (`keeping_at_cap`) instead of failing.
    keep_at_cap: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_gap: DEFAULT_TOLERANCE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            time_limit: None,
            deadline: None,
            keep_at_cap: false,
        }
    }
}

impl Budget {
    /// The budget with this target gap.
    pub fn with_max_gap(self, max_gap: f64) -> Self {
        Self { max_gap, ..self }
    }

    /// The budget with this cap on each program's Newton iterations.
    pub fn with_max_iterations(self, max_iterations: usize) -> Self {
        Self {
            max_iterations,
            ..self
        }
    }

    /// The budget with this time limit per solve (`None`: none).
    pub fn with_time_limit(self, time_limit: Option<Duration>) -> Self {
        Self { time_limit, ..self }
    }

    /// The budget with a time limit of `milliseconds` (the `budget_ms` of
    /// the command line and Python), refused unless finite and >= 0.
    pub fn with_budget_ms(self, milliseconds: f64) -> Result<Self, ConvexError> {
        if !(milliseconds.is_finite() && milliseconds >= 0.0) {
            return Err(CoreError::setting(
                "budget_ms",
                milliseconds,
                "finite and >= 0: the milliseconds a solve may take past its start rule",
            )
            .into());
        }
        // A limit past Duration's range is none.
        let limit = Duration::try_from_secs_f64(milliseconds / 1e3).ok();
        Ok(self.with_time_limit(limit))
    }

    /// Refuses a target gap that is not in (0, 1), or no iterations.
    pub fn check(&self) -> Result<(), ConvexError> {
        // The acceptance the solution may lose: an acceptance is in [0, 1],
        // so a gap of 1 or more asks for nothing.
        if !(self.max_gap > 0.0 && self.max_gap < 1.0) {
            return Err(CoreError::setting(
                "max_gap",
                self.max_gap,
                "in (0, 1): the acceptance the solution may lose, alpha* - acceptance",
            )
            .into());
        }
        if self.max_iterations == 0 {
            return Err(CoreError::setting("max_iterations", 0, "at least 1").into());
        }
        Ok(())
    }

    /// The budget with `share` of the target gap: what one of several
    /// programs gets where their losses add up.
    pub(crate) fn share(self, share: f64) -> Self {
        Self {
            max_gap: share * self.max_gap,
            ..self
        }
    }

    /// The budget of a solve that starts at `start`: its time limit runs
    /// from there.
    pub(crate) fn started(self, start: Instant) -> Self {
        Self {
            // A limit past the clock's range is none.
            deadline: self.time_limit.and_then(|limit| start.checked_add(limit)),
            ..self
        }
    }

    /// The budget of a program that only starts another (a grouped
    /// program): at its iteration cap it hands back where it stands, as
    /// out of time, instead of failing.
    pub(crate) fn keeping_at_cap(self) -> Self {
        Self {
            keep_at_cap: true,
            ..self
        }
    }

    /// Whether a program at its iteration cap hands back where it stands.
    pub(crate) fn keeps_at_cap(&self) -> bool {
        self.keep_at_cap
    }

    /// Whether the solve's time limit has run out.
    pub(crate) fn out_of_time(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
    }

    /// The most drafts the programs take at this target gap
    /// ([`resolvable_drafts`]).
    pub fn resolvable_drafts(&self) -> usize {
        resolvable_drafts(self.max_gap)
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
