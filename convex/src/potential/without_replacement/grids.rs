//! The two grids of the potential's double integral, in c and in the
//! clocks' time t: their steps, errors and left ends (`docs/DESIGN.md`
//! §6b).

use crate::potential::nodes::left_end_from_power;

/// The rule in c starts at c a_max = x_0 (`nodes_from`) and sums its
/// infinite left end from its first LEFT_END_NODES nodes (`left_end`):
/// the integrands there are c g(c) with g analytic on the scale 1 / (n
/// a_max), so the left end's error is about (n a c)^4 at the fourth node
/// (c = e^(3h) c_lo, at most 4 c_lo on either grid) times the left end's
/// share of the integral, n a c_lo: 256 n^5 x_0^5, which `left_end_head`
/// sets to the grid's error in c (n at most 16: the start moves down by n
/// / 16 past that). The fine grid starts at x_0 = 8e-5 for n = 4 (the
/// error of a first-order left end takes 1e-9, 45 more nodes), the coarse
/// one at 1.1e-3. Each node costs a pass over the nodes in t and the
/// exact tokens.
pub(super) const LEFT_END_NODES: usize = 4;

/// The start x_0 = c_lo a_max of the rule in c whose left end's error is
/// about `error` (see `LEFT_END_NODES`).
pub(super) fn left_end_head(error: f64, n: usize) -> f64 {
    (error / (256.0 * (n.min(16) as f64).powi(5))).powf(0.2)
}
/// Step of the rule in ln t, as mdsd-bounds' clocks take it.
pub(super) const CLOCK_STEP: f64 = 0.25;
/// The integrands in t grow like t^(n-1) from 0: the rule starts where
/// the part it leaves out, below t^n / n!, is this small.
pub(super) const CLOCK_HEAD: f64 = 1e-16;
/// Or no lower than a floor, summing its infinite left end from its
/// first CLOCK_LEFT_NODES nodes (`left_end_from_power`, exact for t^(n-1)
/// g(t) with g a polynomial of degree below CLOCK_LEFT_NODES): the
/// clocks' rates sum to 1, so g's Taylor terms are at most about (2 t)^k
/// / k!, and its remainder at the sixth node t_5 = e^(5h) t_0 is below
/// (2 t_5)^6 of g, times the left end's share of the integral, about
/// t_0^n: `clock_floor` puts t_0 where that is a hundredth of the grid's
/// error in t (for n = 4, 7.8e-3 on the fine grid and 2.3e-2 on the
/// coarse one). Where t^n / n!
/// reaches `CLOCK_HEAD` below the floor (n <= 7 on the fine grid), the
/// rule leaves out ln(t_0 / t) / h nodes at its left end.
pub(super) const CLOCK_LEFT_NODES: usize = 6;
/// The rule ends at t = CLOCK_HORIZON / (least q), past which every clock
/// has rung but with probability e^-60.
pub(super) const CLOCK_HORIZON: f64 = 60.0;

/// The nodes in t whose contribution to P(world) is below its share
/// `Grid::clock_negligible` are left out: the selected mass they carry is
/// smaller still (at each time, the selected token's law sums to the
/// density of the world's n-th arrival), and which nodes go depends on q
/// alone, not on theta. The share is this much of the rule's relative
/// error in t: 1e-18 on the fine rule, 1e-10 on the coarse one, where
/// the rule starts at a floor set for its left end's error alone and its
/// first nodes carry far less (down to 1e-15 of P(world) on the shared
/// rows at top 1000, n = 4), so the coarse rule loses a few nodes at each
/// end (the schemes grid's figures: `git show 57461f7:benches/README.md`).
pub(super) const CLOCK_NEGLIGIBLE_OF_ERROR: f64 = 1e-4;

/// The quadrature of an evaluation: the fine one of r and the potential
/// (relative error 1e-15 in c, `FINE_SELECTION`, and about 1e-14 in t),
/// or a coarse one for the differences of r that stand for Hessian-vector
/// products (5e-10 in c, `COARSE_SELECTION`, and about 1e-6 in t,
/// `clock_step`). The Hessian's accuracy costs Newton's rate, never
/// exactness: the line search and the stop rule use the fine r. The coarse
/// rule's error must stay well below the differences' step
/// (`DIFFERENCE`): a rule of step ln 2 in c (7e-7) makes Newton stall
/// short of the tolerance on real rows near alpha* = 1 (the schemes
/// grid's figures: `git show 57461f7:benches/README.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Grid {
    Fine,
    Coarse,
}

impl Grid {
    /// The grid's place in the arrays that hold a value per grid.
    pub(super) fn index(self) -> usize {
        usize::from(self == Grid::Coarse)
    }

    /// The relative error the rule in t aims at.
    pub(super) fn clock_error(self) -> f64 {
        match self {
            Grid::Fine => FINE_CLOCKS,
            Grid::Coarse => COARSE_CLOCKS,
        }
    }

    /// The share of P(world) below which a node in t is left out
    /// (`CLOCK_NEGLIGIBLE_OF_ERROR`).
    pub(super) fn clock_negligible(self) -> f64 {
        CLOCK_NEGLIGIBLE_OF_ERROR * self.clock_error()
    }

    /// The relative error the rule in c aims at.
    pub(super) fn selection_error(self) -> f64 {
        match self {
            Grid::Fine => FINE_SELECTION,
            Grid::Coarse => COARSE_SELECTION,
        }
    }

    /// The steps in ln c and in ln t for n drafts.
    pub(super) fn steps(self, n: usize) -> (f64, f64) {
        let fine = clock_step(n, FINE_CLOCKS).min(CLOCK_STEP);
        match self {
            Grid::Fine => (selection_step(FINE_SELECTION), fine),
            Grid::Coarse => (
                selection_step(COARSE_SELECTION),
                (2.0 * fine).min(clock_step(n, COARSE_CLOCKS)),
            ),
        }
    }
}

/// The relative errors the fine and the coarse rule in t aim at.
pub(super) const FINE_CLOCKS: f64 = 1e-14;
pub(super) const COARSE_CLOCKS: f64 = 1e-6;
/// The relative errors the fine and the coarse rule in c aim at.
pub(super) const FINE_SELECTION: f64 = 1e-15;
pub(super) const COARSE_SELECTION: f64 = 5e-10;
/// The acceptance lost above which Newton's iteration evaluates on the
/// coarse grid (`Potential::rough_until`): above the coarse loss's
/// distance from the fine one, which the schemes grid measures on real
/// rows (benches/README.md), the coarse rule's steps are the fine one's.
pub(super) const ROUGH_UNTIL: f64 = 1e-6;

/// The step in ln c for a relative error near `error`: the integrands in
/// u = ln c are bounded in the strip |Im u| < π/2 (`docs/DESIGN.md` §6b),
/// so the rule's error is about e^(-π² / h).
pub(super) fn selection_step(error: f64) -> f64 {
    std::f64::consts::PI.powi(2) / -error.ln()
}

/// The step in ln t for n drafts that keeps the rule's relative error
/// near `error` (the fine rule's at most `CLOCK_STEP`). In u = ln t the integrands are
/// analytic in the strip |Im u| < π/2, where the n arrived clocks'
/// factors 1 - e^(-q t) grow beyond their real values, so the
/// trapezoidal rule's error is about C^n e^(-π² / h) (Trefethen &
/// Weideman, SIAM Review 2014), not the e^(-π² / h) of a bounded
/// integrand: with h = 1/4, on 303 clocks of rates from 0.3 down to 1e-8
/// (`clock_rule_holds_for_many_drafts`), P(S > 0) came out 3e-12 above 1
/// at n = 8, 7e-10 at n = 12 and 2e-8 at n = 16, C about 5.
pub(super) fn clock_step(n: usize, error: f64) -> f64 {
    let growth = n as f64 * 5f64.ln();
    std::f64::consts::PI.powi(2) / (growth - error.ln())
}

/// The floor of the rule in t of step `step` whose left end's error is a
/// hundredth of `error` (see `CLOCK_LEFT_NODES`).
pub(super) fn clock_floor(n: usize, step: f64, error: f64) -> f64 {
    let last = CLOCK_LEFT_NODES - 1;
    let growth = (2.0 * (last as f64 * step).exp()).powi(CLOCK_LEFT_NODES as i32);
    (1e-2 * error / growth).powf(1.0 / (CLOCK_LEFT_NODES + n) as f64)
}

/// The clocks' quadrature in t, of step `step` in ln t and relative error
/// near `error`: nodes and weights of ∫_0^∞ dt. It starts where t^n / n!
/// is `CLOCK_HEAD`, with the part below from the integrand's growth like
/// t^(n-1), unless that is below the floor (`clock_floor`): there it
/// starts at the floor and sums its left end from its first
/// `CLOCK_LEFT_NODES` nodes.
pub(super) fn clock_nodes(n: usize, q_least: f64, step: f64, error: f64) -> (Vec<f64>, Vec<f64>) {
    let factorial: f64 = (1..=n).map(|k| k as f64).product();
    let head = (CLOCK_HEAD * factorial).powf(1.0 / n as f64);
    let floor = clock_floor(n, step, error);
    let first = head.max(floor);
    let (lo, hi) = (first.ln(), (CLOCK_HORIZON / q_least).ln().max(first.ln()));
    let count = ((hi - lo) / step).ceil() as usize + 1;
    let t: Vec<f64> = (0..count).map(|j| (lo + j as f64 * step).exp()).collect();
    let mut w: Vec<f64> = t.iter().map(|t| step * t).collect();
    if head >= floor {
        // [0, first], where the integrand grows like t^(n-1): first / n of it.
        w[0] += first / n as f64;
    } else {
        let left = left_end_from_power(step, CLOCK_LEFT_NODES.min(count), n);
        w.iter_mut()
            .zip(&t)
            .zip(&left)
            .for_each(|((w, t), g)| *w += step * t * g);
    }
    (t, w)
}
