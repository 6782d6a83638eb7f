//! Validated probability vectors and the sampling transforms applied to them.

use crate::CoreError;

/// How far from 1 the entries of a probability vector may sum before it is
/// rejected (`docs/DESIGN.md` §7). Inside this tolerance the vector is
/// renormalised. Rows read from files stored in 16-bit floats get the wider
/// tolerance their rounding needs (mdsd-logits' `FloatType::sum_tolerance`),
/// and are renormalised there.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// A probability vector over a vocabulary `0..len()`: every entry finite and
/// non-negative, summing to 1 (renormalised in f64 on construction).
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    probs: Vec<f64>,
}

/// A probability vector checked while it is read, chunk by chunk, in
/// order: for a pass that reads every entry for its own work, where a
/// separate checking pass would be a second read of the row from memory
/// (the `logits` benchmark measures the pass).
/// Iterating gives the chunks, [`CheckedChunks::CHUNK`] entries each (the
/// last may be shorter); [`CheckedChunks::finish`] reads whatever was not
/// read and gives what [`ProbabilityRow::new`] gives, row or error.
///
/// ```
/// use mdsd_core::{CheckedChunks, ProbabilityRow};
///
/// let probs = vec![0.5, 0.25, 0.25];
/// let mut chunks = CheckedChunks::new(&probs);
/// // The pass's own work on each chunk, here the largest entry.
/// let largest = chunks.by_ref().flatten().fold(0.0f64, |m, &v| m.max(v));
/// assert_eq!(largest, 0.5);
/// assert_eq!(chunks.finish()?, ProbabilityRow::new(&probs)?);
/// assert!(CheckedChunks::new(&[0.5, -0.1]).finish().is_err());
/// # Ok::<(), mdsd_core::CoreError>(())
/// ```
#[derive(Debug, Clone)]
pub struct CheckedChunks<'a> {
    probs: &'a [f64],
    /// Entries handed out, and entries checked (all but the last chunk).
    read: usize,
    checked: usize,
    /// LANES independent sums and least entries: one running sum would be
    /// a chain of V dependent additions, and this way the pass vectorises.
    sums: [f64; LANES],
    least: [f64; LANES],
}

const LANES: usize = 8;

impl<'a> CheckedChunks<'a> {
    /// Entries per chunk: 8 KiB of f64, so that a chunk of a target row
    /// and one of a draft row stay in L1 while a pass works on them.
    pub const CHUNK: usize = 1024;

    /// Nothing is read yet.
    pub fn new(probs: &'a [f64]) -> Self {
        Self {
            probs,
            read: 0,
            checked: 0,
            sums: [0.0; LANES],
            least: [f64::INFINITY; LANES],
        }
    }

    /// The row, or the first thing wrong with it (the checks of
    /// [`ProbabilityRow::new`]). Every entry is finite and non-negative
    /// exactly when the least is at least 0 and the sum is finite (a NaN or
    /// +inf makes the sum non-finite), barring a sum of finite entries that
    /// overflows; only then is the row searched for the offender.
    pub fn finish(self) -> Result<ProbabilityRow<'a>, CoreError> {
        self.finish_within(SUM_TOLERANCE)
    }

    /// [`CheckedChunks::finish`] with the sum allowed within `tolerance` of 1.
    pub fn finish_within(mut self, tolerance: f64) -> Result<ProbabilityRow<'a>, CoreError> {
        if self.probs.is_empty() {
            return Err(CoreError::Empty);
        }
        self.read = self.probs.len();
        self.check_read();
        let sum = self.sums.iter().sum::<f64>();
        let least = self.least.iter().fold(f64::INFINITY, |m, &v| v.min(m));
        if !(sum.is_finite() && least >= 0.0) {
            for (index, &value) in self.probs.iter().enumerate() {
                if !value.is_finite() {
                    return Err(CoreError::NonFinite { index, value });
                }
                if value < 0.0 {
                    return Err(CoreError::Negative { index, value });
                }
            }
        }
        if (sum - 1.0).abs() > tolerance {
            return Err(CoreError::BadSum { sum, tolerance });
        }
        Ok(ProbabilityRow {
            probs: self.probs,
            sum,
        })
    }

    /// Adds the entries handed out but not yet checked to the sums and
    /// least entries, branch-free. Chunks are multiples of LANES long, so
    /// entry i always lands in lane i % LANES, however the row is read.
    fn check_read(&mut self) {
        let chunk = &self.probs[self.checked..self.read];
        self.checked = self.read;
        // In locals: through `self` the lanes would live in memory, and the
        // loop would not vectorise.
        let (mut sums, mut least) = (self.sums, self.least);
        let mut add = |lane: usize, v: f64| {
            sums[lane] += v;
            // A select, not f64::min (whose NaN rule blocks minpd).
            least[lane] = if v < least[lane] { v } else { least[lane] };
        };
        let lanes = chunk.chunks_exact(LANES);
        let rest = lanes.remainder();
        for values in lanes {
            for (lane, &v) in values.iter().enumerate() {
                add(lane, v);
            }
        }
        for (lane, &v) in rest.iter().enumerate() {
            add(lane, v);
        }
        (self.sums, self.least) = (sums, least);
    }
}

impl<'a> Iterator for CheckedChunks<'a> {
    type Item = &'a [f64];

    /// Checks the chunk handed out before this one, which the caller has
    /// read by now: the first read of a chunk from memory is then the
    /// caller's, overlapped with its work, and the check reads it from L1.
    fn next(&mut self) -> Option<&'a [f64]> {
        self.check_read();
        let rest = &self.probs[self.read..];
        if rest.is_empty() {
            return None;
        }
        self.read += rest.len().min(Self::CHUNK);
        Some(&rest[..rest.len().min(Self::CHUNK)])
    }
}

/// A probability vector left in the caller's buffer: checked as
/// [`Distribution::from_probs`] checks, but neither copied nor
/// renormalised. It stands for `probs / sum`. For passes over many rows
/// at full vocabulary, where copying and dividing each row would cost as
/// much as the work done on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbabilityRow<'a> {
    probs: &'a [f64],
    sum: f64,
}

impl<'a> ProbabilityRow<'a> {
    /// Checks `probs` (finite, non-negative, sum within [`SUM_TOLERANCE`]
    /// of 1).
    pub fn new(probs: &'a [f64]) -> Result<Self, CoreError> {
        CheckedChunks::new(probs).finish()
    }

    /// [`ProbabilityRow::new`] with the sum allowed within `tolerance` of 1.
    pub fn within(probs: &'a [f64], tolerance: f64) -> Result<Self, CoreError> {
        CheckedChunks::new(probs).finish_within(tolerance)
    }

    /// The entries as given, before renormalisation.
    pub fn unnormalised(&self) -> &'a [f64] {
        self.probs
    }

    /// The entries' sum: the probabilities are `unnormalised() / sum()`.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The law the row stands for, renormalised into a copy (checked
    /// already: no second pass).
    pub fn to_distribution(&self) -> Distribution {
        Distribution {
            probs: self.probs.iter().map(|x| x / self.sum).collect(),
        }
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
        let sum = ProbabilityRow::new(&probs)?.sum();
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

    /// The entries, as the vector that held them (for reuse of its memory).
    pub fn into_probs(self) -> Vec<f64> {
        self.probs
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
        order.sort_unstable_by(|&a, &b| self.probs[b].total_cmp(&self.probs[a]).then(a.cmp(&b)));
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
        // The k first of the one order, by selection (O(V)) rather than by
        // sorting the vocabulary: at V = 151936 the sort is most of the cost.
        let descending =
            |&a: &usize, &b: &usize| self.probs[b].total_cmp(&self.probs[a]).then(a.cmp(&b));
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.select_nth_unstable_by(k - 1, descending);
        order.truncate(k);
        order.sort_unstable_by(descending);
        Ok(self.restricted_to(&order))
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

    /// The settings' own errors (a negative temperature, top-k 0, top-p
    /// outside (0, 1]) before any row: the transforms applied to a one-token
    /// law, which fails exactly where a setting is invalid.
    pub fn check(&self) -> Result<(), CoreError> {
        self.apply(&Distribution { probs: vec![1.0] }).map(drop)
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
