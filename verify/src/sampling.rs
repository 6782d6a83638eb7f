//! Sampling mode: validation at any vocabulary size by drawing drafts and
//! outputs, a chi-square goodness-of-fit test of the output against p, and
//! the acceptance with a 99% interval.

use std::collections::HashMap;

use mdsd_core::{CoreError, DraftSampler, Problem};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use statrs::distribution::{ChiSquared, ContinuousCDF};

use crate::{Verifier, VerifyError};

/// Draws per parallel task; each task has its own RNG stream of the seed.
const CHUNK: u64 = 1 << 14;
/// Chi-square bins need at least this many expected draws.
const MIN_EXPECTED: f64 = 5.0;
/// The normal quantile of a two-sided 99% interval, which every 99%
/// interval mdsd reports uses.
pub const Z_99: f64 = 2.575_829_303_548_901;

/// What sampling says about a verifier.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledReport {
    pub name: String,
    pub draws: u64,
    /// Fraction of draws whose output is one of the drafts.
    pub acceptance: f64,
    /// Wilson 99% interval for the acceptance.
    pub acceptance_interval: (f64, f64),
    /// Pearson's statistic of the output counts against p, over tokens with
    /// expected count >= 5 (the others lumped into one bin).
    pub chi2: f64,
    pub degrees_of_freedom: usize,
    /// P(chi-square >= chi2) under p: small means the output is not p.
    pub chi2_p_value: f64,
}

/// Sampling mode: `draws` seeded draws of drafts and output, in parallel;
/// the same seed gives the same report.
pub fn sampled(
    problem: &Problem,
    verifier: &dyn Verifier,
    draws: u64,
    seed: u64,
) -> Result<SampledReport, VerifyError> {
    sampled_with_progress(problem, verifier, draws, seed, &|_| {})
}

/// [`sampled`], calling `progress(d)` (from any thread) as each parallel
/// task of d draws completes, for a progress bar.
pub fn sampled_with_progress(
    problem: &Problem,
    verifier: &dyn Verifier,
    draws: u64,
    seed: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<SampledReport, VerifyError> {
    if draws == 0 {
        return Err(CoreError::setting("draws", 0, "at least 1").into());
    }
    crate::check_draft_count(problem)?;
    let sampler = DraftSampler::new(problem.drafts());
    let chunks = draws.div_ceil(CHUNK);
    let (counts, accepted) = (0..chunks)
        .into_par_iter()
        .map(|chunk| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(chunk);
            let mut counts: HashMap<usize, u64> = HashMap::new();
            let mut accepted = 0u64;
            let task = CHUNK.min(draws - chunk * CHUNK);
            for _ in 0..task {
                let drafts = sampler.sample(&mut rng);
                let y = verifier.sample(&drafts, &mut rng)?;
                *counts.entry(y).or_default() += 1;
                accepted += u64::from(drafts.contains(&y));
            }
            progress(task);
            Ok::<_, VerifyError>((counts, accepted))
        })
        .try_reduce(
            || (HashMap::new(), 0),
            |(mut a, x), (b, y)| {
                for (token, count) in b {
                    *a.entry(token).or_default() += count;
                }
                Ok((a, x + y))
            },
        )?;
    let (chi2, degrees_of_freedom, chi2_p_value) =
        chi_square(&counts, problem.target().probs(), draws);
    let acceptance = accepted as f64 / draws as f64;
    Ok(SampledReport {
        name: verifier.name().to_string(),
        draws,
        acceptance,
        acceptance_interval: wilson_interval(acceptance, draws as f64, Z_99),
        chi2,
        degrees_of_freedom,
        chi2_p_value,
    })
}

/// Pearson's chi-square of `counts` against `draws` x p. Tokens with
/// expected count below 5 are lumped into one bin (merged into the smallest
/// bin if even that is below 5). An output of a token with p = 0 is an
/// infinite statistic and p-value 0.
pub(crate) fn chi_square(counts: &HashMap<usize, u64>, p: &[f64], draws: u64) -> (f64, usize, f64) {
    let n = draws as f64;
    if counts.keys().any(|&y| p[y] == 0.0) {
        return (f64::INFINITY, 0, 0.0);
    }
    let mut bins: Vec<(f64, f64)> = Vec::new();
    let (mut rest_observed, mut rest_expected) = (0.0, 0.0);
    for (y, &py) in p.iter().enumerate() {
        let observed = counts.get(&y).copied().unwrap_or(0) as f64;
        let expected = n * py;
        if expected >= MIN_EXPECTED {
            bins.push((observed, expected));
        } else {
            rest_observed += observed;
            rest_expected += expected;
        }
    }
    if rest_expected >= MIN_EXPECTED || bins.is_empty() {
        bins.push((rest_observed, rest_expected));
    } else if let Some(smallest) = bins.iter_mut().min_by(|a, b| a.1.total_cmp(&b.1)) {
        smallest.0 += rest_observed;
        smallest.1 += rest_expected;
    }
    let statistic: f64 = bins
        .iter()
        .filter(|b| b.1 > 0.0)
        .map(|(o, e)| (o - e) * (o - e) / e)
        .sum();
    let dof = bins.len().saturating_sub(1);
    let p_value = match ChiSquared::new(dof as f64) {
        Ok(distribution) if dof > 0 => distribution.sf(statistic),
        _ => 1.0,
    };
    (statistic, dof, p_value)
}

/// Wilson score interval for a proportion `phat` of `n` trials.
fn wilson_interval(phat: f64, n: f64, z: f64) -> (f64, f64) {
    let z2 = z * z;
    let center = (phat + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (phat * (1.0 - phat) / n + z2 / (4.0 * n * n)).sqrt();
    ((center - half).max(0.0), (center + half).min(1.0))
}
