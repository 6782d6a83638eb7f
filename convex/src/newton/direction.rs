//! The direction of one Newton iteration: the potential's Newton step on
//! the free variables, with the safeguards that keep it a descent
//! direction where the Hessian's products cannot resolve it (the move
//! along 1 of flat potentials, saturating tokens, the log-ratio direction
//! after a line search that found no step).

use super::{ACTIVE_SET_WIDTH, Evaluation, MAX_STEP_THETA, Potential, Program};
use crate::workspace::Workspace;

/// The share of a program's tolerance that the quadratic model may leave
/// of the gradient after a Newton step (`Potential::direction`): the rest
/// is for the model's error and the held variables.
const MODEL_TOLERANCE_SHARE: f64 = 0.25;
/// The selected mass, in multiples of the program's tolerance, at most
/// which the variables held at the lower bound leave the move along 1 to
/// the mean's removal (`Program::along_ones`).
const UNSEEN_HELD_MASS: f64 = 1e-3;
/// The selected mass, in multiples of the program's tolerance, at most
/// which the move along 1 comes from a model of the held mass rather than
/// from the Newton system (`Program::along_ones`).
const MODELLED_HELD_MASS: f64 = 10.0;
/// The fall, in e-folds, of a variable's gap to its saturation limit
/// beyond which its step is lengthened (`Program::saturation_steps`): one
/// e-fold, where Newton's step, under one unit for a gap falling near
/// e-fold a unit, starts to crawl.
const SATURATION_LOG_FALL: f64 = 1.0;

/// How Newton's iteration takes a direction's component along 1 on the
/// free variables (`Program::along_ones`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum AlongOnes {
    /// From the Newton system.
    Newton,
    /// Not at all: the held variables' selected mass is below the
    /// tolerance's reach.
    Unseen,
    /// From a model of the held variables' selected mass (the value).
    Modelled(f64),
}

impl<P: Potential> Program<'_, P> {
    /// The variables within `ACTIVE_SET_WIDTH` of a bound that their
    /// gradient pushes against: they go to it and leave the Newton system
    /// (Bertsekas' ε-active set), since a Newton step for a variable a hair
    /// above its bound is cut by the projection for every step length,
    /// which stalls the line search.
    pub(super) fn active_set(&self, theta: &[f64], gradient: &[f64]) -> Vec<bool> {
        theta
            .iter()
            .zip(gradient)
            .map(|(&t, &g)| self.held(t, g, ACTIVE_SET_WIDTH))
            .collect()
    }

    /// The iteration's direction from theta: the potential's Newton
    /// direction (or, where `log_ratio` says the last line search found no
    /// step, `log_ratio_direction`) with its move along 1 and its
    /// saturating variables safeguarded, the `active` variables sent to
    /// their bound, and every component within the program's reach.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn direction(
        &self,
        theta: &[f64],
        at: &Evaluation<P::Hessian>,
        gradient: &[f64],
        active: &[bool],
        tolerance: f64,
        log_ratio: bool,
        workspace: &mut Workspace,
    ) -> Vec<f64> {
        let along = self.along_ones(theta, &at.marginal, active, tolerance);
        let flat = along != AlongOnes::Newton;
        // Where the Hessian is singular along 1 on the free variables,
        // the Newton system holds only without the gradient's mean
        // there: its part along 1 is the objective's slope along 1,
        // which `recentre` takes instead. Left in, it would ask the
        // solver for a step of size (mean) / (noise of the products
        // along 1), and conjugate gradients would stop on a curvature
        // of the wrong sign.
        let system_gradient = if flat {
            without_free_mean(gradient, active)
        } else {
            gradient.to_vec()
        };
        let mut direction = if log_ratio {
            log_ratio_direction(&at.marginal, self.p, active)
        } else {
            self.potential.direction(
                theta,
                at,
                &system_gradient,
                active,
                MODEL_TOLERANCE_SHARE * tolerance,
                workspace,
            )
        };
        if flat {
            self.recentre(theta, &mut direction, active);
        }
        if let AlongOnes::Modelled(held_mass) = along {
            let shift = self.held_mass_model_shift(held_mass, gradient, active);
            (direction.iter_mut().zip(active))
                .filter(|(_, held)| !**held)
                .for_each(|(d, _)| *d += shift);
        }
        self.saturation_steps(&at.marginal, active, &mut direction);
        self.bound_and_reach(theta, active, &mut direction);
        direction
    }

    /// Sends the `active` variables of a direction to their bound, and
    /// keeps every component within the program's reach.
    pub(super) fn bound_and_reach(&self, theta: &[f64], active: &[bool], direction: &mut [f64]) {
        let (lo, hi) = self.bounds;
        for ((d, &t), &a) in direction.iter_mut().zip(theta).zip(active) {
            if a {
                *d = if t - lo <= ACTIVE_SET_WIDTH {
                    lo - t
                } else {
                    hi - t
                };
            }
            *d = d.clamp(-self.reach, self.reach);
        }
    }

    /// Takes a multiple of 1 off the free variables of a direction, for a
    /// potential flat along 1 whose held variables (if any) are unseen or
    /// modelled (`along_ones`). The Newton system is then singular, or nearly, along
    /// 1 on the free variables, and the direction's
    /// component there is the rounding of Σ (r - p) amplified by the ridge
    /// (tens to hundreds in theta): it moves no r, and clipped by the reach
    /// or the box it wipes out the step that does, so the iteration would
    /// cycle short of its tolerance. Any multiple of 1 gives a
    /// Newton direction with the same r; the one taken off is the free
    /// components' mean, moved as little as needed to keep the full step
    /// inside the box.
    fn recentre(&self, theta: &[f64], direction: &mut [f64], held: &[bool]) {
        let (lo, hi) = self.bounds;
        let free = || {
            (theta.iter().zip(direction.iter()).zip(held))
                .filter(|(_, held)| !**held)
                .map(|(pair, _)| pair)
        };
        let (low, high) = free().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (t, d)| {
            (a.min(t + d), b.max(t + d))
        });
        let count = free().count() as f64;
        let mean = free().map(|(_, d)| d).sum::<f64>() / count;
        let (least, most) = (high - hi, low - lo);
        let shift = if least <= most {
            mean.clamp(least, most)
        } else {
            mean
        };
        (direction.iter_mut().zip(held))
            .filter(|(_, held)| !**held)
            .for_each(|(d, _)| *d -= shift);
    }

    /// How a direction's component along 1 on the free variables is taken,
    /// for a potential flat along 1 (on all variables). Moving the free
    /// variables along 1 moves selected mass only between them and the
    /// held ones. Where some variable is free and the held ones carry
    /// little selected mass:
    /// * at most UNSEEN_HELD_MASS x `tolerance` (none held included), with every
    ///   held variable at the lower bound (held there because its r
    ///   exceeds its p): the most such a move can do is take that mass
    ///   back, below the tolerance, and the potential is flat along 1 but
    ///   for it;
    /// * at most MODELLED_HELD_MASS x `tolerance`, or less held at the upper bound
    ///   (held there because its r falls short of its p, which such a move
    ///   can make up): the Hessian's curvature along 1 is about that
    ///   mass, within the noise of Hessian products by differences, where
    ///   Newton's step along 1 is set by that noise
    ///   (`convex/tests/schemes.rs`, `wor_held_mass_regressions`), so the
    ///   step along 1 comes from a model of the held mass instead
    ///   (`held_mass_model_shift`);
    /// * else Newton's.
    fn along_ones(&self, theta: &[f64], r: &[f64], held: &[bool], tolerance: f64) -> AlongOnes {
        if !self.potential.flat_along_ones() || !held.contains(&false) {
            return AlongOnes::Newton;
        }
        let lo = self.bounds.0;
        let mut held_mass = 0.0;
        let mut short = false;
        for ((&t, &r), &held) in theta.iter().zip(r).zip(held) {
            if held {
                short |= t > lo + ACTIVE_SET_WIDTH;
                held_mass += r;
            }
        }
        if held_mass <= UNSEEN_HELD_MASS * tolerance && !short {
            AlongOnes::Unseen
        } else if held_mass <= MODELLED_HELD_MASS * tolerance {
            AlongOnes::Modelled(held_mass)
        } else {
            AlongOnes::Newton
        }
    }

    /// The shift t of the free variables that moves the selected mass the
    /// free tokens lack, S = Σ_free (p - r), from the held ones, whose
    /// weights are small beside the free ones': their mass then falls
    /// like e^(-t), so e^(-t) = 1 - S / held mass (at most the reach, in
    /// either direction; the reach where S takes all of it).
    fn held_mass_model_shift(&self, held_mass: f64, gradient: &[f64], held: &[bool]) -> f64 {
        let lacking: f64 = (gradient.iter().zip(held))
            .filter(|(_, held)| !**held)
            .map(|(g, _)| -g)
            .sum();
        let left = 1.0 - lacking / held_mass;
        if left > 0.0 {
            (-left.ln()).clamp(-self.reach, self.reach)
        } else {
            self.reach
        }
    }

    /// Lengthens the direction of each free variable whose r must rise
    /// far toward its limit P (`Potential::saturation`) to the least step
    /// that can get it there. Its gap P - r_y = E[1{y ∈ S} A / (a_y + A)],
    /// A the other weights of the draft set, falls with theta_y at the
    /// log-rate κ = E[1{y ∈ S} a_y A / (a_y + A)²] / E[1{y ∈ S} A / (a_y +
    /// A)], a mean of a_y / (a_y + A) in (0, 1): at most e-fold a unit, so
    /// with the others fixed the gap P - p_y is reached no sooner than
    /// ln((P - r_y) / (P - p_y)), a step that cannot pass the optimum.
    /// Newton's step, (p_y - r_y) / (κ (P - r_y)), stays under 1 / κ: a
    /// variable whose p is near its limit crawls to it about one unit an
    /// iteration.
    /// The step is lengthened only where the gap must fall more than
    /// `SATURATION_LOG_FALL` e-folds: nearer, Newton converges on its own,
    /// and the other variables' moves, which the bound leaves out, make the
    /// longer step overshoot until the iteration cycles short of its
    /// tolerance. Where p_y is at or past the limit the variable heads for
    /// its upper bound.
    fn saturation_steps(&self, r: &[f64], held: &[bool], direction: &mut [f64]) {
        let Some(limit) = self.potential.saturation() else {
            return;
        };
        for (y, d) in direction.iter_mut().enumerate() {
            if held[y] || r[y] >= self.p[y] {
                continue;
            }
            let limit = limit(y);
            let (gap, wanted) = (limit - r[y], limit - self.p[y]);
            let least = if wanted > 0.0 {
                (gap / wanted).ln()
            } else {
                f64::INFINITY
            };
            if least > SATURATION_LOG_FALL {
                *d = d.max(least);
            }
        }
    }
}

/// `gradient` less its mean over the free (not `held`) variables there.
fn without_free_mean(gradient: &[f64], held: &[bool]) -> Vec<f64> {
    let free = held.iter().filter(|&&h| !h).count().max(1) as f64;
    let mean = (gradient.iter().zip(held))
        .filter(|(_, h)| !**h)
        .map(|(g, _)| g)
        .sum::<f64>()
        / free;
    (gradient.iter().zip(held))
        .map(|(&g, &h)| if h { g } else { g - mean })
        .collect()
}

/// The direction theta_y += ln(p_y / r_y) on the free tokens (0 on the
/// held ones; a token of r or p zero toward the side it must move,
/// clamped by the reach as every direction is): the fixed-point update of
/// a softmax, r_y ∝ e^(theta_y), taken after a line search that found no
/// step. Newton's direction comes from Hessian products that cannot
/// resolve a token whose r is far below the rounding of the others': its
/// curvature is below the noise of the products by differences, conjugate
/// gradients return a direction along that noise, and no step of it
/// lowers the objective (`convex/tests/schemes.rs`,
/// `wor_log_ratio_regression`); the log ratio moves such a token by what
/// its r lacks, at most the reach an iteration.
fn log_ratio_direction(r: &[f64], p: &[f64], held: &[bool]) -> Vec<f64> {
    (r.iter().zip(p).zip(held))
        .map(|((&r, &p), &held)| match (held, r > 0.0, p > 0.0) {
            (true, _, _) => 0.0,
            (false, true, true) => (p / r).ln(),
            (false, _, false) => -MAX_STEP_THETA,
            (false, false, true) => MAX_STEP_THETA,
        })
        .collect()
}
