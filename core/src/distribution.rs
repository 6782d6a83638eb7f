//! Validated probability vectors and the sampling transforms applied to them.

use crate::CoreError;

/// How far from 1 the entries of a probability vector may sum before it is
/// rejected (DESIGN §7). Inside this tolerance the vector is renormalised.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// A probability vector over a vocabulary `0..len()`: every entry finite and
/// non-negative, summing to 1 (renormalised in f64 on construction).
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    probs: Vec<f64>,
}

/// The sum and the least entry, in one branch-free pass that vectorises:
/// LANES independent accumulators (a single running sum is a chain of V
/// dependent additions, which at V = 151936 costs more than the rest of
/// validation). Every entry is finite and non-negative exactly when the
/// least is at least 0 and the sum is finite (a NaN or +inf makes the sum
/// non-finite), barring a sum of finite entries that overflows.
fn sum_and_least(values: &[f64]) -> (f64, f64) {
    const LANES: usize = 8;
    let mut sums = [0.0; LANES];
    let mut least = [f64::INFINITY; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for lane in 0..LANES {
            let v = chunk[lane];
            sums[lane] += v;
            // A select, not f64::min (whose NaN rule blocks minpd).
            least[lane] = if v < least[lane] { v } else { least[lane] };
        }
    }
    let sum = sums.iter().sum::<f64>() + rest.iter().sum::<f64>();
    let least = least
        .iter()
        .chain(rest)
        .fold(f64::INFINITY, |m, &v| if v < m { v } else { m });
    (sum, least)
}

/// The sum of `probs` once it is checked: non-empty, every entry finite
/// and non-negative (the first offender named), the sum within
/// [`SUM_TOLERANCE`] of 1.
fn checked_sum(probs: &[f64]) -> Result<f64, CoreError> {
    if probs.is_empty() {
        return Err(CoreError::Empty);
    }
    let (sum, least) = sum_and_least(probs);
    if !(sum.is_finite() && least >= 0.0) {
        for (index, &value) in probs.iter().enumerate() {
            if !value.is_finite() {
                return Err(CoreError::NonFinite { index, value });
            }
            if value < 0.0 {
                return Err(CoreError::Negative { index, value });
            }
        }
    }
    if (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(CoreError::BadSum {
            sum,
            tolerance: SUM_TOLERANCE,
        });
    }
    Ok(sum)
}

/// A probability vector left in the caller's buffer: checked as
/// [`Distribution::from_probs`] checks, but neither copied nor
/// renormalised. It stands for `probs / sum`. For passes over many rows
/// at full vocabulary, where copying and dividing each row cost as much
/// as the work done on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbabilityRow<'a> {
    probs: &'a [f64],
    sum: f64,
}

impl<'a> ProbabilityRow<'a> {
    /// Checks `probs` (finite, non-negative, sum within [`SUM_TOLERANCE`]
    /// of 1).
    pub fn new(probs: &'a [f64]) -> Result<Self, CoreError> {
        Ok(Self {
            sum: checked_sum(probs)?,
            probs,
        })
    }

    /// The entries as given, before renormalisation.
    pub fn unnormalised(&self) -> &'a [f64] {
        self.probs
    }

    /// The entries' sum: the probabilities are `unnormalised() / sum()`.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn len(&self) -> usize {
        self.probs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.probs.is_empty()
    }
}

impl<'a> From<&'a Distribution> for ProbabilityRow<'a> {
    fn from(distribution: &'a Distribution) -> Self {
        Self {
            probs: distribution.probs(),
            sum: 1.0,
        }
    }
}

impl Distribution {
    /// Validates `probs` (finite, non-negative, sum within [`SUM_TOLERANCE`]
    /// of 1) and renormalises it.
    pub fn from_probs(probs: impl Into<Vec<f64>>) -> Result<Self, CoreError> {
        let mut probs = probs.into();
        let sum = checked_sum(&probs)?;
        probs.iter_mut().for_each(|x| *x /= sum);
        Ok(Self { probs })
    }

    /// The softmax of `logits / temperature`; temperature 0 gives the argmax
    /// (lowest index among ties) with probability 1. Logits may be `-inf`
    /// (masked tokens) but not NaN or `+inf`.
    pub fn from_logits(logits: &[f64], temperature: f64) -> Result<Self, CoreError> {
        if !temperature.is_finite() || temperature < 0.0 {
            return Err(CoreError::InvalidTemperature(temperature));
        }
        if logits.is_empty() {
            return Err(CoreError::Empty);
        }
        let mut max = f64::NEG_INFINITY;
        let mut argmax = None;
        for (index, &value) in logits.iter().enumerate() {
            if value.is_nan() || value == f64::INFINITY {
                return Err(CoreError::BadLogit { index, value });
            }
            if value > max {
                max = value;
                argmax = Some(index);
            }
        }
        let argmax = argmax.ok_or(CoreError::NoFiniteLogit)?;
        let probs = if temperature == 0.0 {
            let mut one_hot = vec![0.0; logits.len()];
            one_hot[argmax] = 1.0;
            one_hot
        } else {
            // Shift by the max so the largest exponent is 0: no overflow, and
            // the sum is at least 1 so no underflow to 0/0.
            let weights: Vec<f64> = logits
                .iter()
                .map(|&l| ((l - max) / temperature).exp())
                .collect();
            let total: f64 = weights.iter().sum();
            weights.into_iter().map(|w| w / total).collect()
        };
        Ok(Self { probs })
    }

    /// The entries, summing to 1.
    pub fn probs(&self) -> &[f64] {
        &self.probs
    }

    /// The vocabulary size.
    pub fn len(&self) -> usize {
        self.probs.len()
    }

    /// Always false: a distribution has at least one token.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Probability of one token.
    pub fn prob(&self, token: usize) -> f64 {
        self.probs[token]
    }

    /// Number of tokens with positive probability.
    pub fn support_size(&self) -> usize {
        self.probs.iter().filter(|&&x| x > 0.0).count()
    }

    /// Total variation distance `½ Σ |p - q|`.
    pub fn total_variation(&self, other: &Distribution) -> Result<f64, CoreError> {
        check_same_len(self.len(), other, "the second distribution")?;
        Ok(0.5
            * self
                .probs
                .iter()
                .zip(&other.probs)
                .map(|(a, b)| (a - b).abs())
                .sum::<f64>())
    }

    /// Token ids ordered by descending probability, ties by ascending id: the
    /// one order used for "most likely" everywhere (top-k, top-p, greedy drafts).
    pub fn tokens_by_descending_prob(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by(|&a, &b| self.probs[b].total_cmp(&self.probs[a]).then(a.cmp(&b)));
        order
    }

    /// Keeps the `k` most likely tokens and renormalises.
    pub fn top_k(&self, k: usize) -> Result<Self, CoreError> {
        if k == 0 {
            return Err(CoreError::InvalidTopK);
        }
        if k >= self.len() {
            return Ok(self.clone());
        }
        let order = self.tokens_by_descending_prob();
        Ok(self.restricted_to(&order[..k]))
    }

    /// Keeps the smallest set of most likely tokens whose mass reaches
    /// `top_p` (nucleus sampling), and renormalises.
    pub fn top_p(&self, top_p: f64) -> Result<Self, CoreError> {
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(CoreError::InvalidTopP(top_p));
        }
        let order = self.tokens_by_descending_prob();
        let mut mass = 0.0;
        let mut kept = 0;
        for &token in &order {
            kept += 1;
            mass += self.probs[token];
            if mass >= top_p {
                break;
            }
        }
        Ok(self.restricted_to(&order[..kept]))
    }

    /// `p^(1/T)` renormalised (the softmax of `log p / T`); `T = 0` is argmax.
    pub fn with_temperature(&self, temperature: f64) -> Result<Self, CoreError> {
        let logits: Vec<f64> = self.probs.iter().map(|p| p.ln()).collect();
        Self::from_logits(&logits, temperature)
    }

    fn restricted_to(&self, kept: &[usize]) -> Self {
        let mut probs = vec![0.0; self.len()];
        let total: f64 = kept.iter().map(|&t| self.probs[t]).sum();
        for &t in kept {
            probs[t] = self.probs[t] / total;
        }
        Self { probs }
    }
}

/// Checks that `other` has `expected` tokens, naming it as `what` otherwise.
pub(crate) fn check_same_len(
    expected: usize,
    other: &Distribution,
    what: &str,
) -> Result<(), CoreError> {
    if other.len() == expected {
        Ok(())
    } else {
        Err(CoreError::LengthMismatch {
            what: what.to_string(),
            expected,
            found: other.len(),
        })
    }
}

/// The sampling transforms a user applies to both target and draft before
/// drafting: temperature, then top-k, then top-p (the order of common
/// inference stacks). Fields left `None` are not applied.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Transform {
    pub temperature: Option<f64>,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
}

impl Transform {
    /// True when no transform is set.
    pub fn is_identity(&self) -> bool {
        *self == Self::default()
    }

    /// Applies the transforms to a probability vector.
    pub fn apply(&self, dist: &Distribution) -> Result<Distribution, CoreError> {
        let mut out = match self.temperature {
            Some(t) => dist.with_temperature(t)?,
            None => dist.clone(),
        };
        if let Some(k) = self.top_k {
            out = out.top_k(k)?;
        }
        if let Some(p) = self.top_p {
            out = out.top_p(p)?;
        }
        Ok(out)
    }

    /// Softmax of `logits` at the transform's temperature (1 when unset),
    /// then top-k and top-p.
    pub fn apply_to_logits(&self, logits: &[f64]) -> Result<Distribution, CoreError> {
        let base = Distribution::from_logits(logits, self.temperature.unwrap_or(1.0))?;
        Transform {
            temperature: None,
            ..*self
        }
        .apply(&base)
    }
}
