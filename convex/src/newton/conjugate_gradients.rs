//! Inexact Newton directions by preconditioned conjugate gradients, for
//! the potentials whose Hessian is known only through products (drafts
//! from several laws, drafts without replacement).

/// Conjugate-gradient iterations per Newton direction.
const CG_MAX_ITERATIONS: usize = 50;
/// The least relative residual at which conjugate gradients stop.
const CG_MIN_RELATIVE_RESIDUAL: f64 = 1e-10;
/// The largest relative residual at which they stop: far from the optimum
/// the Newton system is solved this roughly.
const FORCING_MAX_RELATIVE_RESIDUAL: f64 = 0.3;
/// The power of the gradient's norm that sets the relative residual at
/// which conjugate gradients stop (the forcing term). Each product costs
/// an evaluation of r, as the line search's trial point does, and Newton's
/// steps far from the optimum are limited by the potential's curvature
/// changing along them more than by the solve, so a rough solve costs
/// fewer products for the same iterations (`benches/README.md`, the
/// schemes grid).
const FORCING_POWER: f64 = 0.25;
/// The share of r that the held variables must carry for the
/// preconditioner's term along 1 on the free ones (`free_mode`): about the
/// relative error of Hessian products by differences.
const HELD_MODE_MIN_MASS_SHARE: f64 = 1e-6;
/// Ridge added to the Hessian's diagonal, relative to its scale: the
/// potentials are flat along theta + t·1, where the Hessian is singular.
const RIDGE_RELATIVE: f64 = 1e-12;

/// Newton's direction on the free variables (not `held`) of a potential
/// whose Hessian is known through products `hessian_times(v)` (v zero on
/// the held variables) and an estimate of its `diagonal`: preconditioned
/// conjugate gradients from zero, the preconditioner Jacobi's plus, where
/// the held variables carry selected mass, the inverse of the curvature
/// along 1 on the free ones (`free_mode`). Each step lowers the quadratic
/// model, so an early stop still gives a descent direction. The scale of
/// the ridge is that of r, which bounds the Hessian's entries: where the
/// Hessian vanishes (one draft: r = q whatever theta) the direction is the
/// gradient over the ridge, which the iteration clips. The iteration
/// stops at the forcing term's relative residual, or where the residual,
/// the gradient that the quadratic model predicts after the step, is
/// within `enough` in l1 norm: the program's stop rule needs no more.
pub(crate) fn newton_by_conjugate_gradients(
    hessian_times: impl Fn(&[f64]) -> Vec<f64>,
    diagonal: &[f64],
    marginal: &[f64],
    gradient: &[f64],
    held: &[bool],
    enough: f64,
) -> Vec<f64> {
    let size = gradient.len();
    let free = |y: usize| !held[y];
    let scale = (diagonal.iter().fold(0.0f64, |m, &d| m.max(d.abs())))
        .max(marginal.iter().sum::<f64>())
        .max(f64::MIN_POSITIVE);
    let ridge = RIDGE_RELATIVE * scale;
    let preconditioner: Vec<f64> = (0..size)
        .map(|y| {
            if free(y) {
                1.0 / (diagonal[y].max(0.0) + ridge)
            } else {
                0.0
            }
        })
        .collect();
    let product = |v: &[f64]| -> Vec<f64> {
        let mut out = hessian_times(v);
        for (y, o) in out.iter_mut().enumerate() {
            *o = if free(y) { *o + ridge * v[y] } else { 0.0 };
        }
        out
    };
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(x, y)| x * y).sum::<f64>();
    let mut d = vec![0.0; size];
    let mut residual: Vec<f64> = (0..size)
        .map(|y| if free(y) { -gradient[y] } else { 0.0 })
        .collect();
    let start = dot(&residual, &residual).sqrt();
    // Inexact Newton (Eisenstat & Walker, SIAM J. Sci. Comput. 1996): far
    // from the optimum a rough solve of the Newton system does as well, and
    // the forcing term |g|^FORCING_POWER tightens as the gradient falls,
    // which keeps the convergence superlinear (of order 1 + FORCING_POWER).
    let forcing = start
        .powf(FORCING_POWER)
        .clamp(CG_MIN_RELATIVE_RESIDUAL, FORCING_MAX_RELATIVE_RESIDUAL);
    let free_mode = free_mode(marginal, held);
    let precondition = |residual: &[f64]| -> Vec<f64> {
        let along = free_mode
            * (0..size)
                .filter(|&y| free(y))
                .map(|y| residual[y])
                .sum::<f64>();
        (0..size)
            .map(|y| {
                if free(y) {
                    residual[y] * preconditioner[y] + along
                } else {
                    0.0
                }
            })
            .collect()
    };
    let mut z = precondition(&residual);
    let mut search = z.clone();
    let mut rz = dot(&residual, &z);
    for _ in 0..CG_MAX_ITERATIONS {
        let hs = product(&search);
        let curvature = dot(&search, &hs);
        if curvature <= 0.0 {
            break;
        }
        let step = rz / curvature;
        d.iter_mut().zip(&search).for_each(|(d, s)| *d += step * s);
        residual
            .iter_mut()
            .zip(&hs)
            .for_each(|(r, h)| *r -= step * h);
        if dot(&residual, &residual).sqrt() <= forcing * start
            || residual.iter().map(|r| r.abs()).sum::<f64>() <= enough
        {
            break;
        }
        z = precondition(&residual);
        let rz_next = dot(&residual, &z);
        search = z
            .iter()
            .zip(&search)
            .map(|(z, s)| z + rz_next / rz * s)
            .collect();
        rz = rz_next;
    }
    if d.iter().all(|&x| x == 0.0) {
        // No curvature found: the preconditioned gradient.
        return (0..size)
            .map(|y| -gradient[y] * preconditioner[y])
            .collect();
    }
    d
}

/// The preconditioner's weight of 1 on the free variables: raising them
/// together only trades selected mass with the held ones, a curvature
/// about the held variables' r (for one draft set the Hessian is diag(π) -
/// ππ^T, and 1_F^T H 1_F = π(F) π(held)), which the diagonal misses, as
/// Jacobi's preconditioner then does: its inverse, 1 / r(held), adds
/// (Σ_F z) / r(held) to every free entry, a positive rank-one term. None where the
/// held mass is below `HELD_MODE_MIN_MASS_SHARE` of r's: the products by
/// differences do not resolve the mode's curvature there, and the program
/// takes that step from its own model (`Program::along_ones`).
fn free_mode(marginal: &[f64], held: &[bool]) -> f64 {
    let total: f64 = marginal.iter().sum();
    let held_mass: f64 = (marginal.iter().zip(held))
        .filter(|(_, held)| **held)
        .map(|(r, _)| r)
        .sum();
    if held_mass > HELD_MODE_MIN_MASS_SHARE * total {
        held_mass.recip()
    } else {
        0.0
    }
}
