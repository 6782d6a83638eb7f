//! Sampling mode: validation at any vocabulary size by drawing drafts and
//! outputs, a chi-square goodness-of-fit test of the output against p, and
//! the acceptance with a 99% interval.

use std::collections::HashMap;

use mdsd_core::{CoreError, DraftSampler, Problem, Progress};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use statrs::distribution::{ChiSquared, ContinuousCDF};

use crate::{Verifier, VerifyError};

/// The random source of stream `stream` of `seed`. The harnesses and the
/// batches give each chunk or row a stream of its own, so that a seed gives
/// the same draws whatever pool runs them and however many threads it has.
pub fn seeded_stream(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// One output token for each of `rows` rows, the shape of a decoding
/// step: row b's drafts written by `drafts_of(b, ids)` into an empty
/// buffer (so that a caller reads them where they are, and refuses a row
/// it cannot read there: inside the loop, where a stop is heard), verified by
/// `verifier_of(b)`, drawing from stream b of `seed` ([`seeded_stream`]),
/// on rayon's pool; the caller is asked between rows whether to stop, and
/// an error names its row.
pub fn sample_rows<'a>(
    rows: usize,
    verifier_of: impl Sync + Fn(usize) -> &'a dyn Verifier,
    drafts_of: impl Fn(usize, &mut Vec<usize>) -> Result<(), VerifyError> + Sync,
    seed: u64,
    progress: &dyn Progress,
) -> Result<Vec<usize>, VerifyError> {
    (0..rows)
        .into_par_iter()
        .map_init(Vec::new, |ids, row| {
            progress.check_stop()?;
            ids.clear();
            drafts_of(row, ids).map_err(|e| e.at_row(row))?;
            let mut rng = seeded_stream(seed, row as u64);
            (verifier_of(row).sample(ids, &mut rng)).map_err(|e| e.at_row(row))
        })
        .collect()
}

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
    /// The smallest total variation between the binned output law and p
    /// that the test at level [`LEVEL`] detects with 99% power at this
    /// many draws: what a pass rules out.
    pub detectable_tv: f64,
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

/// [`sampled`], telling `progress` of each parallel task of draws as it
/// completes (from any thread) and stopping with [`CoreError::Stopped`]
/// when it asks before a task.
pub fn sampled_with_progress(
    problem: &Problem,
    verifier: &dyn Verifier,
    draws: u64,
    seed: u64,
    progress: &dyn Progress,
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
            progress.check_stop()?;
            let mut rng = seeded_stream(seed, chunk);
            let mut counts: HashMap<usize, u64> = HashMap::new();
            let mut accepted = 0u64;
            let task = CHUNK.min(draws - chunk * CHUNK);
            for _ in 0..task {
                let drafts = sampler.sample(&mut rng);
                let y = verifier.sample(&drafts, &mut rng)?;
                *counts.entry(y).or_default() += 1;
                accepted += u64::from(drafts.contains(&y));
            }
            progress.advance(task);
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
    let fit = goodness_of_fit(&counts, problem.target().probs(), draws);
    let acceptance = accepted as f64 / draws as f64;
    Ok(SampledReport {
        name: verifier.name().to_string(),
        draws,
        acceptance,
        acceptance_interval: wilson_interval(acceptance, draws as f64, Z_99),
        chi2: fit.statistic,
        degrees_of_freedom: fit.degrees_of_freedom,
        chi2_p_value: fit.p_value,
        detectable_tv: detectable_tv(fit.degrees_of_freedom, draws, LEVEL, POWER),
    })
}

/// Pearson's chi-square test of output counts against p.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GoodnessOfFit {
    pub statistic: f64,
    pub degrees_of_freedom: usize,
    /// P(chi-square >= statistic) under p: small means the output is not p.
    pub p_value: f64,
}

/// Pearson's chi-square of `counts` against `draws` x p. Tokens with
/// expected count below 5 are lumped into one bin (merged into the smallest
/// bin if even that is below 5). An output of a token with p = 0 is an
/// infinite statistic and p-value 0.
pub fn goodness_of_fit(counts: &HashMap<usize, u64>, p: &[f64], draws: u64) -> GoodnessOfFit {
    let n = draws as f64;
    if counts.keys().any(|&y| p.get(y).is_none_or(|&py| py == 0.0)) {
        return GoodnessOfFit {
            statistic: f64::INFINITY,
            degrees_of_freedom: 0,
            p_value: 0.0,
        };
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
    let degrees_of_freedom = bins.len().saturating_sub(1);
    let p_value = match ChiSquared::new(degrees_of_freedom as f64) {
        Ok(distribution) if degrees_of_freedom > 0 => distribution.sf(statistic),
        _ => 1.0,
    };
    GoodnessOfFit {
        statistic,
        degrees_of_freedom,
        p_value,
    }
}

/// The level at which a sampled report's `detectable_tv` is computed (a
/// p-value below it is a failure).
pub const LEVEL: f64 = 0.01;
/// The power at which a sampled report's `detectable_tv` is computed.
pub const POWER: f64 = 0.99;

/// The smallest total variation distance d between p and an output law
/// (both binned as the test bins them) that a chi-square test with
/// `degrees_of_freedom` at `level` detects with probability at least
/// `power` from `draws` draws, whatever the law at that distance.
///
/// Under an output law p', Pearson's statistic is approximately noncentral
/// chi-square with noncentrality draws x chi2(p' || p); among laws at total
/// variation d the divergence chi2(p' || p) = sum (p' - p)^2 / p is at
/// least 4 d^2 (Cauchy-Schwarz: (sum |p' - p|)^2 <= chi2(p' || p) x sum p,
/// equal when p' moves d between two halves of p's mass). So d =
/// sqrt(lambda / (4 draws)) where lambda is the noncentrality at which the
/// power is reached, found by bisection. One when no distance is
/// detectable.
pub fn detectable_tv(degrees_of_freedom: usize, draws: u64, level: f64, power: f64) -> f64 {
    let k = degrees_of_freedom as f64;
    let Ok(central) = ChiSquared::new(k) else {
        return 1.0;
    };
    let critical = central.inverse_cdf(1.0 - level);
    // The noncentrality detected with this power depends on k only; a
    // distance of 1 needs only chi2(p' || p) >= 4, so past 4 draws it is
    // out of reach. Bracket it by doubling: the sum over the Poisson
    // mixture costs the square root of lambda, so starting at 4 draws
    // would cost that many terms for a value near k.
    let most = 4.0 * draws as f64;
    let (mut low, mut high) = (0.0, most.min(1.0));
    while noncentral_chi_square_sf(k, high, critical) < power {
        if high >= most {
            return 1.0;
        }
        (low, high) = (high, (2.0 * high).min(most));
    }
    for _ in 0..60 {
        let middle = 0.5 * (low + high);
        if noncentral_chi_square_sf(k, middle, critical) >= power {
            high = middle;
        } else {
            low = middle;
        }
    }
    (high / (4.0 * draws as f64)).sqrt().min(1.0)
}

/// The fewest draws at which the chi-square test over `cells` outcomes
/// (`cells - 1` degrees of freedom, every expected count assumed at least
/// the pooling threshold) detects a total variation of `tv` with `power`
/// at `level`: the inverse of [`detectable_tv`], by bisection over the
/// draws. `None` when even 2^62 draws do not reach it (tv too small to
/// represent).
pub fn samples_needed(tv: f64, cells: usize, level: f64, power: f64) -> Option<u64> {
    let degrees_of_freedom = cells.saturating_sub(1).max(1);
    let detects = |draws: u64| detectable_tv(degrees_of_freedom, draws, level, power) <= tv;
    let mut high = 1u64;
    while !detects(high) {
        if high >= 1 << 62 {
            return None;
        }
        high *= 2;
    }
    let mut low = high / 2;
    // detects(low) is false (or low = 0): the answer is in (low, high].
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if detects(middle) {
            high = middle;
        } else {
            low = middle;
        }
    }
    Some(high)
}

/// P(X > x) for X noncentral chi-square with k degrees of freedom and
/// noncentrality lambda, by its Poisson mixture of central laws (Johnson,
/// Kotz & Balakrishnan, Continuous Univariate Distributions 2, eq. 29.2):
/// sum over j of Poisson(j; lambda / 2) x P(chi2_{k + 2j} > x), over the
/// j within 12 standard deviations of lambda / 2, which hold all but a
/// negligible part of the Poisson mass. statrs has the central law only.
fn noncentral_chi_square_sf(k: f64, lambda: f64, x: f64) -> f64 {
    let mean = 0.5 * lambda;
    let spread = 12.0 * mean.sqrt() + 12.0;
    let first = (mean - spread).max(0.0).floor() as u64;
    let last = (mean + spread).ceil() as u64;
    (first..=last)
        .map(|j| {
            let j = j as f64;
            let weight = if mean > 0.0 {
                (j * mean.ln() - mean - statrs::function::gamma::ln_gamma(j + 1.0)).exp()
            } else if j == 0.0 {
                1.0
            } else {
                0.0
            };
            weight * ChiSquared::new(k + 2.0 * j).map_or(0.0, |law| law.sf(x))
        })
        .sum()
}

/// Wilson score interval for a proportion `phat` of `n` trials, with `z`
/// the normal quantile of its confidence (Wilson 1927, JASA 22).
pub fn wilson_interval(phat: f64, n: f64, z: f64) -> (f64, f64) {
    let z2 = z * z;
    let center = (phat + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (phat * (1.0 - phat) / n + z2 / (4.0 * n * n)).sqrt();
    ((center - half).max(0.0), (center + half).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With one degree of freedom the statistic is the square of a normal
    /// with mean sqrt(lambda): 99% power at level 0.01 needs sqrt(lambda) =
    /// z_0.995 + z_0.99 exactly, which the Poisson mixture must reproduce
    /// within 0.5%.
    #[test]
    fn detectable_tv_matches_the_normal_case_at_one_degree_of_freedom() {
        let (z_level, z_power) = (2.575_829_303_548_901, 2.326_347_874_040_841);
        let draws = 10_000;
        let lambda = (z_level + z_power) * (z_level + z_power);
        let exact = (lambda / (4.0 * draws as f64)).sqrt();
        let approximate = detectable_tv(1, draws, 0.01, 0.99);
        assert!(
            (approximate / exact - 1.0).abs() < 0.005,
            "{approximate} vs {exact}"
        );
    }

    /// More draws detect smaller distances (as 1 / sqrt(draws) at fixed
    /// bins), more bins larger ones; nothing is detectable from one draw.
    /// The draws needed for a distance detect it, and one fewer do not.
    #[test]
    fn samples_needed_inverts_detectable_tv() {
        for (tv, cells) in [(0.01, 7776), (0.05, 36), (0.2, 2)] {
            let n = samples_needed(tv, cells, LEVEL, POWER).unwrap();
            assert!(detectable_tv(cells - 1, n, LEVEL, POWER) <= tv);
            assert!(detectable_tv(cells - 1, n - 1, LEVEL, POWER) > tv);
        }
    }

    #[test]
    fn detectable_tv_shrinks_with_draws_and_grows_with_bins() {
        let tv = |k, draws| detectable_tv(k, draws, LEVEL, POWER);
        assert!((tv(50, 400_000) / tv(50, 100_000) - 0.5).abs() < 1e-6);
        assert!(tv(5000, 100_000) > tv(50, 100_000));
        assert_eq!(tv(10, 1), 1.0);
    }

    /// The scaling holds out to draws no run reaches in one call, and the
    /// bracket costs what the detected noncentrality costs, not what the
    /// draws would (a bracket from 4 draws summed 10^7 Poisson terms per
    /// step at 10^12 draws).
    #[test]
    fn detectable_tv_at_huge_draws_scales_as_one_over_root_draws() {
        let tv = |draws| detectable_tv(999, draws, LEVEL, POWER);
        let (small, huge) = (tv(1_000_000), tv(1_000_000_000_000));
        assert!(
            (huge * 1000.0 / small - 1.0).abs() < 1e-9,
            "{huge} vs {small}"
        );
        assert!(tv(u64::MAX) > 0.0);
    }

    /// The simulated power of the test at the reported distance, against
    /// the least detectable law at that distance (half of p's mass moved
    /// to the other half), is at least 99% within sampling error.
    #[test]
    fn detectable_tv_is_detected_in_simulation() {
        use rand::Rng;
        let v = 40;
        let p = vec![1.0 / v as f64; v];
        let draws = 20_000u64;
        let tv = detectable_tv(v - 1, draws, LEVEL, POWER);
        let shifted: Vec<f64> = (0..v)
            .map(|i| {
                p[i] * if i < v / 2 {
                    1.0 + 2.0 * tv
                } else {
                    1.0 - 2.0 * tv
                }
            })
            .collect();
        let sampler = mdsd_core::CumulativeDistribution::new(&shifted);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let trials = 400;
        let detected = (0..trials)
            .filter(|_| {
                let mut counts = HashMap::new();
                for _ in 0..draws {
                    *counts.entry(sampler.sample(&mut rng)).or_insert(0u64) += 1;
                }
                let _ = rng.random::<u8>();
                goodness_of_fit(&counts, &p, draws).p_value < LEVEL
            })
            .count();
        // 99% power leaves ~4 misses in 400; 12 is over 4 standard deviations.
        assert!(detected >= trials - 12, "{detected} of {trials}");
    }
}
