//! Random instances for the cross-checks: small vocabularies, flat or peaked
//! (Dirichlet(0.1)) distributions, with zeros.

#![allow(dead_code)]

use mdsd_core::{Distribution, DraftScheme, SchemeKind};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, Gamma};

/// A probability vector of length `v`: Dirichlet(`concentration`) with each
/// entry zeroed with probability `zero_rate`, keeping at least `min_support`
/// positive entries.
pub fn random_distribution(
    rng: &mut ChaCha8Rng,
    v: usize,
    concentration: f64,
    zero_rate: f64,
    min_support: usize,
) -> Distribution {
    let gamma = Gamma::new(concentration, 1.0).unwrap();
    let mut w: Vec<f64> = (0..v).map(|_| gamma.sample(rng).max(1e-300)).collect();
    let mut zeros: Vec<usize> = (0..v).filter(|_| rng.random::<f64>() < zero_rate).collect();
    zeros.truncate(v - min_support.max(1));
    for z in zeros {
        w[z] = 0.0;
    }
    let total: f64 = w.iter().sum();
    Distribution::from_probs(w.into_iter().map(|x| x / total).collect::<Vec<_>>()).unwrap()
}

/// A random target and draft scheme of the given kind.
#[derive(Debug, Clone)]
pub struct Instance {
    pub p: Distribution,
    pub drafts: DraftScheme,
}

/// Instances with V in 2..=`max_v`, n in 1..=`max_n`, flat (Dirichlet(1))
/// or peaked (Dirichlet(0.1)) distributions, and zeros in p and q.
pub fn instances(kind: SchemeKind, max_v: usize, max_n: usize) -> impl Strategy<Value = Instance> {
    (
        2..=max_v,
        1..=max_n,
        any::<u64>(),
        prop::bool::ANY,
        0.0..0.4f64,
    )
        .prop_map(move |(v, n, seed, peaked, zero_rate)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let concentration = if peaked { 0.1 } else { 1.0 };
            let needs_distinct = kind.draws_distinct();
            let n = kind
                .fixed_n()
                .unwrap_or(if needs_distinct { n.min(v) } else { n });
            let min_support = if needs_distinct { n } else { 1 };
            let p = random_distribution(&mut rng, v, concentration, zero_rate, 1);
            let count = if kind == SchemeKind::Independent {
                n
            } else {
                1
            };
            let qs = (0..count)
                .map(|_| random_distribution(&mut rng, v, concentration, zero_rate, min_support))
                .collect();
            Instance {
                p,
                drafts: DraftScheme::new(kind, qs, n).unwrap(),
            }
        })
}
