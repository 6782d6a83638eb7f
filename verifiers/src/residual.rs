//! The one step every rejection-based verifier repeats (DESIGN §6).

/// `(p - a)+` renormalised: the law to draw from once the mass `a` has been
/// given out by accepting drafts (a = q for one speculative-sampling step).
///
/// When every `p - a` rounds to <= 0, the true residual is below f64's
/// resolution and carries no more than rounding mass, so any law keeps the
/// output exact to rounding; p on its highest-p/a tokens is used, where the
/// residual concentrates as it vanishes.
pub(crate) fn residual(p: &[f64], a: &[f64]) -> Vec<f64> {
    let mut r: Vec<f64> = p.iter().zip(a).map(|(x, y)| (x - y).max(0.0)).collect();
    let total: f64 = r.iter().sum();
    if total > 0.0 {
        r.iter_mut().for_each(|x| *x /= total);
        return r;
    }
    let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::INFINITY };
    let best = p
        .iter()
        .zip(a)
        .filter(|(x, _)| **x > 0.0)
        .map(|(&x, &y)| ratio(x, y))
        .fold(0.0, f64::max);
    let mut r: Vec<f64> = p
        .iter()
        .zip(a)
        .map(|(&x, &y)| {
            if x > 0.0 && ratio(x, y) == best {
                x
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = r.iter().sum();
    r.iter_mut().for_each(|x| *x /= total);
    r
}

/// The probability of accepting a draft of token `x` drawn from q under
/// target p: min(1, p(x) / q(x)).
pub(crate) fn accept_prob(p: &[f64], q: &[f64], x: usize) -> f64 {
    if q[x] > 0.0 {
        (p[x] / q[x]).min(1.0)
    } else {
        0.0
    }
}

/// Σ min(p, q): the acceptance of one speculative-sampling step.
pub(crate) fn overlap(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(a, b)| a.min(*b)).sum()
}
