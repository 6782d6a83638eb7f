//! Draft schemes (`docs/DESIGN.md` §3): how the n draft tokens are drawn, their exact
//! law over ordered tuples and over sets, and seeded sampling.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use rand::Rng;

use crate::distribution::check_same_len;
use crate::{CoreError, Distribution, Instead, Method, saturating_pow};

/// Default cap on the number of ordered draft tuples an exact enumeration
/// may produce.
pub const DEFAULT_ENUMERATION_LIMIT: usize = 1_000_000;

/// The most entries (n x V) the laws of n independent drafts may hold:
/// 2^27 f64, 1 GiB, as a dense plan may.
pub const INDEPENDENT_LAW_ENTRY_LIMIT: u128 = 1 << 27;

/// The ways of drawing drafts, by their command-line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemeKind {
    /// n independent draws from one draft q.
    Iid,
    /// n draws without replacement from q (sequential, each proportional to q
    /// among tokens not yet drawn; equivalently Gumbel-top-n).
    WithoutReplacement,
    /// x_i ~ q_i from n different draft models.
    Independent,
    /// Hu et al.: the n-1 most likely tokens of q plus one token drawn from q
    /// restricted to the rest.
    Greedy,
    /// SpecHub (Sun et al. 2024, §4): two drafts, the first x1 ~ q; the
    /// second is the hub a = argmax q when x1 != a, and is drawn from q
    /// restricted to the other tokens when x1 = a. Every draft set is {a, x}
    /// with P = q(x) / (1 - q(a)): the set law of greedy with n = 2.
    Hub,
    /// One draft, the most likely draft token (vLLM's and TensorRT-LLM's
    /// draft models): the deterministic set {argmax q}.
    Argmax,
    /// The n most likely draft tokens, distinct (EAGLE's and SGLang's
    /// top-k tree children): a deterministic set S. Its alpha* is p(S),
    /// reached by accepting x in S with probability p(x) (`docs/DESIGN.md` §3).
    Top,
}

impl SchemeKind {
    /// Every scheme, in the order used in tables.
    pub const ALL: [SchemeKind; 7] = [
        SchemeKind::Iid,
        SchemeKind::WithoutReplacement,
        SchemeKind::Independent,
        SchemeKind::Greedy,
        SchemeKind::Hub,
        SchemeKind::Argmax,
        SchemeKind::Top,
    ];

    /// The scheme's name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            SchemeKind::Iid => "iid",
            SchemeKind::WithoutReplacement => "wor",
            SchemeKind::Independent => "independent",
            SchemeKind::Greedy => "greedy",
            SchemeKind::Hub => "hub",
            SchemeKind::Argmax => "argmax",
            SchemeKind::Top => "top",
        }
    }

    /// The number of drafts, where the scheme fixes it (hub: 2, argmax: 1).
    pub fn fixed_n(self) -> Option<usize> {
        match self {
            SchemeKind::Hub => Some(2),
            SchemeKind::Argmax => Some(1),
            _ => None,
        }
    }

    /// Whether the drafts are always distinct tokens, which needs n tokens
    /// of positive draft probability.
    pub fn draws_distinct(self) -> bool {
        matches!(
            self,
            SchemeKind::WithoutReplacement
                | SchemeKind::Greedy
                | SchemeKind::Hub
                | SchemeKind::Argmax
                | SchemeKind::Top
        )
    }

    /// Whether the draft set is a function of q, drawn without chance
    /// (argmax, top): its law is one outcome of probability 1.
    pub fn is_deterministic(self) -> bool {
        matches!(self, SchemeKind::Argmax | SchemeKind::Top)
    }
}

impl fmt::Display for SchemeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SchemeKind {
    type Err = CoreError;

    fn from_str(s: &str) -> Result<Self, CoreError> {
        SchemeKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| CoreError::UnknownScheme(s.to_string()))
    }
}

/// An exact law over draft outcomes: ordered tuples (from
/// [`DraftScheme::tuple_law`]) or sorted token sets (from
/// [`DraftScheme::set_law`]). Only outcomes of positive probability are listed.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftLaw {
    pub outcomes: Vec<Vec<usize>>,
    pub probs: Vec<f64>,
}

impl DraftLaw {
    /// Number of outcomes.
    pub fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// True when there is no outcome.
    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
    }

    /// Outcomes with their probabilities.
    pub fn iter(&self) -> impl Iterator<Item = (&[usize], f64)> {
        self.outcomes
            .iter()
            .map(Vec::as_slice)
            .zip(self.probs.iter().copied())
    }
}

/// A draft scheme together with its draft distribution(s) and the number of
/// drafts n. Constructed only through validating constructors.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftScheme {
    kind: SchemeKind,
    n: usize,
    /// One distribution, or n for [`SchemeKind::Independent`].
    drafts: Vec<Distribution>,
    /// The tokens in every draft set: greedy's n-1 most likely tokens (most
    /// likely first), the hub, or all n drafts of argmax and top (most
    /// likely first); empty for the other schemes.
    fixed_tokens: Vec<usize>,
}

impl DraftScheme {
    /// n i.i.d. drafts from `q`.
    pub fn iid(q: Distribution, n: usize) -> Result<Self, CoreError> {
        Self::new(SchemeKind::Iid, vec![q], n)
    }

    /// n drafts from `q` without replacement; `q` needs n tokens of positive
    /// probability.
    pub fn without_replacement(q: Distribution, n: usize) -> Result<Self, CoreError> {
        Self::new(SchemeKind::WithoutReplacement, vec![q], n)
    }

    /// Hu et al.'s greedy drafts; `q` needs n tokens of positive probability.
    pub fn greedy(q: Distribution, n: usize) -> Result<Self, CoreError> {
        Self::new(SchemeKind::Greedy, vec![q], n)
    }

    /// SpecHub's two drafts around the hub argmax q; `q` needs 2 tokens of
    /// positive probability.
    pub fn hub(q: Distribution) -> Result<Self, CoreError> {
        Self::new(SchemeKind::Hub, vec![q], 2)
    }

    /// One draft from each of `qs` (n = `qs.len()`).
    pub fn independent(qs: Vec<Distribution>) -> Result<Self, CoreError> {
        let n = qs.len();
        Self::new(SchemeKind::Independent, qs, n)
    }

    /// n independent drafts from m <= n draft laws taken in turn, draft i
    /// from `laws[i mod m]`: one draft model at two temperatures gives
    /// n = 4 drafts at 0.7, 1.3, 0.7, 1.3.
    pub fn independent_cycled(laws: &[Distribution], n: usize) -> Result<Self, CoreError> {
        if laws.is_empty() || laws.len() > n {
            return Err(CoreError::DraftCountMismatch {
                scheme: SchemeKind::Independent.name(),
                needed: n,
                expected: n,
                found: laws.len(),
            });
        }
        // n laws of V entries each are held: refused before anything is
        // allocated past what a plan may hold.
        let entries = (n as u128).saturating_mul(laws[0].len() as u128);
        if entries > INDEPENDENT_LAW_ENTRY_LIMIT {
            return Err(CoreError::TooLarge {
                what: "the independent drafts' laws (n x vocabulary entries)",
                size: entries,
                limit: INDEPENDENT_LAW_ENTRY_LIMIT,
                instead: Instead(&[]),
            });
        }
        let drafts = (0..n).map(|i| laws[i % laws.len()].clone()).collect();
        Self::new(SchemeKind::Independent, drafts, n)
    }

    /// The general constructor: `drafts` holds one distribution, or n of them
    /// for [`SchemeKind::Independent`], all over one vocabulary.
    pub fn new(kind: SchemeKind, drafts: Vec<Distribution>, n: usize) -> Result<Self, CoreError> {
        if n == 0 {
            return Err(CoreError::NoDrafts);
        }
        if let Some(required) = kind.fixed_n().filter(|&required| required != n) {
            return Err(CoreError::FixedDraftCount {
                scheme: kind.name(),
                required,
                found: n,
            });
        }
        let expected = if kind == SchemeKind::Independent {
            n
        } else {
            1
        };
        if drafts.len() != expected {
            return Err(CoreError::DraftCountMismatch {
                scheme: kind.name(),
                needed: n,
                expected,
                found: drafts.len(),
            });
        }
        let vocab_size = drafts[0].len();
        for (i, q) in drafts.iter().enumerate().skip(1) {
            check_same_len(vocab_size, q, &format!("draft distribution {i}"))?;
        }
        let available = drafts[0].support_size();
        if kind.draws_distinct() && available < n {
            return Err(CoreError::NotEnoughSupport {
                scheme: kind.name(),
                needed: n,
                available,
            });
        }
        let fixed_tokens = match kind {
            SchemeKind::Greedy => drafts[0].tokens_by_descending_prob()[..n - 1].to_vec(),
            SchemeKind::Argmax | SchemeKind::Top => {
                drafts[0].tokens_by_descending_prob()[..n].to_vec()
            }
            // The most likely token, the smallest id among ties (as in the sort).
            SchemeKind::Hub => {
                let q = drafts[0].probs();
                let hub = (1..q.len()).fold(0, |best, t| if q[t] > q[best] { t } else { best });
                vec![hub]
            }
            _ => Vec::new(),
        };
        Ok(Self {
            kind,
            n,
            drafts,
            fixed_tokens,
        })
    }

    pub fn kind(&self) -> SchemeKind {
        self.kind
    }

    /// Number of drafts.
    pub fn n(&self) -> usize {
        self.n
    }

    pub fn vocab_size(&self) -> usize {
        self.drafts[0].len()
    }

    /// The draft distributions: one, or n for independent drafts.
    pub fn drafts(&self) -> &[Distribution] {
        &self.drafts
    }

    /// The law of draft `i`'s token when it is drawn at random: `q_i` for
    /// independent drafts, `q` otherwise.
    fn draft_for(&self, i: usize) -> &Distribution {
        if self.kind == SchemeKind::Independent {
            &self.drafts[i]
        } else {
            &self.drafts[0]
        }
    }

    /// The tokens in every draft set: greedy's n-1 most likely tokens, the
    /// hub, or every draft of argmax and top (empty for the other schemes).
    pub fn fixed_tokens(&self) -> &[usize] {
        &self.fixed_tokens
    }

    /// For greedy and hub drafts, the law of the one draft-set token outside
    /// [`Self::fixed_tokens`]: q restricted to the other tokens and
    /// renormalised (q' in `docs/DESIGN.md` §3). Zero on the fixed tokens.
    pub fn free_token_law(&self) -> Vec<f64> {
        let q = self.drafts[0].probs();
        let mut rest = q.to_vec();
        for &t in &self.fixed_tokens {
            rest[t] = 0.0;
        }
        // Sum the remaining tokens directly rather than 1 - q(top): no cancellation.
        let total: f64 = rest.iter().sum();
        rest.iter_mut().for_each(|x| *x /= total);
        rest
    }

    /// Number of ordered draft tuples of positive probability, without
    /// enumerating them (saturates at `u128::MAX`).
    pub fn tuple_count(&self) -> u128 {
        let support = |q: &Distribution| q.support_size() as u128;
        match self.kind {
            SchemeKind::Iid => saturating_pow(support(&self.drafts[0]), self.n),
            SchemeKind::Independent => self
                .drafts
                .iter()
                .fold(1u128, |acc, q| acc.saturating_mul(support(q))),
            SchemeKind::WithoutReplacement => {
                let s = support(&self.drafts[0]);
                (0..self.n as u128).fold(1u128, |acc, i| acc.saturating_mul(s - i))
            }
            SchemeKind::Greedy => self.free_token_count(),
            // (hub, x) and (x, hub) for each x.
            SchemeKind::Hub => 2 * self.free_token_count(),
            SchemeKind::Argmax | SchemeKind::Top => 1,
        }
    }

    fn free_token_count(&self) -> u128 {
        let rest = self.free_token_law();
        rest.iter().filter(|&&x| x > 0.0).count() as u128
    }

    fn check_enumeration_size(&self, limit: usize) -> Result<(), CoreError> {
        let size = self.tuple_count();
        if size > limit as u128 {
            return Err(CoreError::TooLarge {
                what: "the exact draft law (ordered draft tuples)",
                size,
                limit: limit as u128,
                instead: Instead(&[Method::ClosedForm, Method::MaxFlow, Method::Convex]),
            });
        }
        Ok(())
    }

    /// An upper bound on the number of draft sets of positive probability,
    /// without enumerating them: exact for iid and without replacement.
    pub fn set_count_bound(&self) -> u128 {
        let union = (0..self.vocab_size())
            .filter(|&t| self.drafts.iter().any(|q| q.prob(t) > 0.0))
            .count() as u128;
        // Sets hold at most `union` tokens: C(union, k) = 0 past it.
        let sets_up_to = |max_size: usize| {
            (1..=(max_size as u128).min(union))
                .fold(0u128, |acc, k| acc.saturating_add(binomial(union, k)))
        };
        match self.kind {
            SchemeKind::Iid | SchemeKind::Independent => self.tuple_count().min(sets_up_to(self.n)),
            SchemeKind::WithoutReplacement => binomial(union, self.n as u128),
            SchemeKind::Greedy | SchemeKind::Hub => self.free_token_count(),
            SchemeKind::Argmax | SchemeKind::Top => 1,
        }
    }

    /// The exact law over ordered draft tuples, refusing more than `limit`
    /// tuples with [`CoreError::TooLarge`].
    pub fn tuple_law(&self, limit: usize) -> Result<DraftLaw, CoreError> {
        let mut law = DraftLaw {
            outcomes: Vec::new(),
            probs: Vec::new(),
        };
        self.for_each_tuple(limit, &mut |tuple, prob| {
            law.outcomes.push(tuple.to_vec());
            law.probs.push(prob);
        })?;
        Ok(law)
    }

    /// The exact law of the draft *set* (tuples collapsed to their sorted,
    /// de-duplicated token sets), outcomes in lexicographic order. `limit`
    /// caps the ordered tuples visited on the way; only sets are stored.
    pub fn set_law(&self, limit: usize) -> Result<DraftLaw, CoreError> {
        let mut sets: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
        self.for_each_tuple(limit, &mut |tuple, prob| {
            *sets.entry(token_set(tuple)).or_insert(0.0) += prob;
        })?;
        let (outcomes, probs) = sets.into_iter().unzip();
        Ok(DraftLaw { outcomes, probs })
    }

    /// Calls `visit` on every ordered tuple of positive probability.
    fn for_each_tuple(
        &self,
        limit: usize,
        visit: &mut dyn FnMut(&[usize], f64),
    ) -> Result<(), CoreError> {
        self.check_enumeration_size(limit)?;
        if self.kind.is_deterministic() {
            visit(&self.fixed_tokens, 1.0);
            return Ok(());
        }
        if self.kind == SchemeKind::Greedy {
            let mut tuple = self.fixed_tokens.clone();
            tuple.push(0);
            for (token, &prob) in self.free_token_law().iter().enumerate() {
                if prob > 0.0 {
                    tuple[self.n - 1] = token;
                    visit(&tuple, prob);
                }
            }
            return Ok(());
        }
        if self.kind == SchemeKind::Hub {
            let hub = self.fixed_tokens[0];
            let q = self.drafts[0].probs();
            for (token, &prob) in self.free_token_law().iter().enumerate() {
                if prob > 0.0 {
                    visit(&[hub, token], q[hub] * prob);
                    visit(&[token, hub], q[token]);
                }
            }
            return Ok(());
        }
        // Each draw's tokens of positive probability, found once: a draft
        // truncated to its top k is a vector over the whole vocabulary,
        // which every step of the enumeration would scan.
        let support = |i: usize| -> Vec<usize> {
            let q = self.draft_for(i).probs();
            (0..q.len()).filter(|&t| q[t] > 0.0).collect()
        };
        let supports: Vec<Vec<usize>> = if self.kind == SchemeKind::Independent {
            (0..self.n).map(support).collect()
        } else {
            vec![support(0)]
        };
        let mut prefix = Vec::with_capacity(self.n);
        self.extend_tuples(&mut prefix, 1.0, &supports, visit);
        Ok(())
    }

    /// Depth-first enumeration of the tuples extending `prefix`, whose
    /// probability so far is `prob`; `supports` holds each draw's tokens of
    /// positive probability (one list where every draw has the same law).
    fn extend_tuples(
        &self,
        prefix: &mut Vec<usize>,
        prob: f64,
        supports: &[Vec<usize>],
        visit: &mut dyn FnMut(&[usize], f64),
    ) {
        if prefix.len() == self.n {
            visit(prefix, prob);
            return;
        }
        let q = self.draft_for(prefix.len()).probs();
        let support = &supports[prefix.len().min(supports.len() - 1)];
        let without_replacement = self.kind == SchemeKind::WithoutReplacement;
        // Without replacement the next draw is proportional to q among tokens
        // not drawn yet; their mass is summed directly (`docs/DESIGN.md` §3), never
        // taken as 1 - q(drawn), which cancels.
        let remaining = if without_replacement {
            (support.iter())
                .filter(|t| !prefix.contains(t))
                .map(|&t| q[t])
                .sum()
        } else {
            1.0
        };
        for &token in support {
            if without_replacement && prefix.contains(&token) {
                continue;
            }
            prefix.push(token);
            self.extend_tuples(prefix, prob * q[token] / remaining, supports, visit);
            prefix.pop();
        }
    }

    /// Draws one ordered draft tuple.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        match self.kind {
            SchemeKind::Iid | SchemeKind::Independent => (0..self.n)
                .map(|i| sample_index(self.draft_for(i).probs(), rng))
                .collect(),
            SchemeKind::WithoutReplacement => {
                let mut weights = self.drafts[0].probs().to_vec();
                (0..self.n)
                    .map(|_| {
                        let token = sample_index(&weights, rng);
                        weights[token] = 0.0;
                        token
                    })
                    .collect()
            }
            SchemeKind::Greedy => {
                let mut tuple = self.fixed_tokens.clone();
                tuple.push(sample_index(&self.free_token_law(), rng));
                tuple
            }
            SchemeKind::Hub => {
                let hub = self.fixed_tokens[0];
                match sample_index(self.drafts[0].probs(), rng) {
                    first if first == hub => vec![hub, sample_index(&self.free_token_law(), rng)],
                    first => vec![first, hub],
                }
            }
            SchemeKind::Argmax | SchemeKind::Top => self.fixed_tokens.clone(),
        }
    }
}

/// A discrete law prepared for repeated sampling in O(log V): cumulative
/// sums and a binary search, with the weights kept as given (a weight far
/// below the running total is lost in its difference of sums).
#[derive(Debug, Clone, PartialEq)]
pub struct CumulativeDistribution {
    weights: Vec<f64>,
    cumulative: Vec<f64>,
}

/// Below this share of the total, the mass left after excluding tokens is
/// summed directly: as a difference of totals it would have lost all but
/// `f64::EPSILON / REMAINING_SHARE` of its relative precision.
const REMAINING_SHARE: f64 = 1e-6;

impl CumulativeDistribution {
    /// From non-negative weights, not all zero.
    pub fn new(weights: &[f64]) -> Self {
        let mut total = 0.0;
        let cumulative = weights
            .iter()
            .map(|&w| {
                total += w;
                total
            })
            .collect();
        Self {
            weights: weights.to_vec(),
            cumulative,
        }
    }

    /// Draws an index with probability proportional to its weight; never
    /// one of weight zero.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        self.sample_excluding(&[], rng)
    }

    /// Draws an index in `range` with probability proportional to its
    /// weight: where indices are sequences read in base V, the sequences
    /// that extend a prefix fill one range, so this completes the prefix
    /// with one draw. A range of zero weight gives its first index.
    pub fn sample_in<R: Rng + ?Sized>(&self, range: Range<usize>, rng: &mut R) -> usize {
        let start = |i: usize| if i > 0 { self.cumulative[i - 1] } else { 0.0 };
        let (below, top) = (start(range.start), start(range.end));
        if top <= below {
            return range.start;
        }
        let u = below + rng.random::<f64>() * (top - below);
        // The first index whose running total exceeds u has positive weight.
        let index = range.start + self.cumulative[range.clone()].partition_point(|&c| c <= u);
        if index < range.end && self.weights[index] > 0.0 {
            return index;
        }
        // Rounding left u at the top of the range.
        let weights = self.weights[range.clone()].iter().copied();
        range.start + sample_index_of_total(weights, top - below, rng)
    }

    /// Draws an index with probability proportional to its weight among the
    /// indices not in `excluded` (distinct, ascending), of which one at
    /// least has positive weight. A uniform point of the remaining mass is
    /// carried past each excluded interval, so this is O(|excluded| + log
    /// V) however much mass is excluded; where that mass is nearly all of
    /// it, or rounding lands on an excluded index, the draw is made over
    /// the weights themselves in O(V).
    pub fn sample_excluding<R: Rng + ?Sized>(&self, excluded: &[usize], rng: &mut R) -> usize {
        let total = *self.cumulative.last().expect("at least one weight");
        // Intervals of the running totals, as the binary search sees them.
        let start = |i: usize| if i > 0 { self.cumulative[i - 1] } else { 0.0 };
        let removed: f64 = excluded
            .iter()
            .map(|&i| self.cumulative[i] - start(i))
            .sum();
        let remaining = total - removed;
        if remaining > REMAINING_SHARE * total {
            let mut u = rng.random::<f64>() * remaining;
            for &i in excluded {
                if u >= start(i) {
                    u += self.cumulative[i] - start(i);
                }
            }
            // The first index whose running total exceeds u has positive weight.
            let index = self
                .cumulative
                .partition_point(|&c| c <= u)
                .min(self.cumulative.len() - 1);
            if excluded.binary_search(&index).is_err() && self.weights[index] > 0.0 {
                return index;
            }
        }
        let kept = |i: usize, w: f64| match excluded.binary_search(&i) {
            Ok(_) => 0.0,
            Err(_) => w,
        };
        let weights = self.weights.iter().enumerate().map(|(i, &w)| kept(i, w));
        let remaining: f64 = weights.clone().sum();
        sample_index_of_total(weights, remaining, rng)
    }
}

/// A draft scheme prepared for repeated sampling: O(n log V) per draw
/// instead of [`DraftScheme::sample`]'s O(n V).
#[derive(Debug, Clone)]
pub struct DraftSampler {
    kind: SchemeKind,
    n: usize,
    laws: Vec<CumulativeDistribution>,
    fixed_tokens: Vec<usize>,
}

impl DraftSampler {
    pub fn new(drafts: &DraftScheme) -> Self {
        let laws = match drafts.kind {
            SchemeKind::Greedy => vec![CumulativeDistribution::new(&drafts.free_token_law())],
            SchemeKind::Argmax | SchemeKind::Top => Vec::new(),
            SchemeKind::Hub => vec![
                CumulativeDistribution::new(drafts.drafts[0].probs()),
                CumulativeDistribution::new(&drafts.free_token_law()),
            ],
            _ => drafts
                .drafts
                .iter()
                .map(|q| CumulativeDistribution::new(q.probs()))
                .collect(),
        };
        Self {
            kind: drafts.kind,
            n: drafts.n,
            laws,
            fixed_tokens: drafts.fixed_tokens.clone(),
        }
    }

    /// Draws one ordered draft tuple, with the law of [`DraftScheme::sample`].
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        match self.kind {
            SchemeKind::Iid => (0..self.n).map(|_| self.laws[0].sample(rng)).collect(),
            SchemeKind::Independent => self.laws.iter().map(|law| law.sample(rng)).collect(),
            SchemeKind::WithoutReplacement => {
                // Each draw is from q restricted to the tokens not drawn yet.
                let mut tuple: Vec<usize> = Vec::with_capacity(self.n);
                let mut drawn: Vec<usize> = Vec::with_capacity(self.n);
                for _ in 0..self.n {
                    let token = self.laws[0].sample_excluding(&drawn, rng);
                    tuple.push(token);
                    drawn.insert(drawn.partition_point(|&d| d < token), token);
                }
                tuple
            }
            SchemeKind::Greedy => {
                let mut tuple = self.fixed_tokens.clone();
                tuple.push(self.laws[0].sample(rng));
                tuple
            }
            SchemeKind::Hub => {
                let hub = self.fixed_tokens[0];
                match self.laws[0].sample(rng) {
                    first if first == hub => vec![hub, self.laws[1].sample(rng)],
                    first => vec![first, hub],
                }
            }
            SchemeKind::Argmax | SchemeKind::Top => self.fixed_tokens.clone(),
        }
    }
}

/// C(n, k), saturating.
fn binomial(n: u128, k: u128) -> u128 {
    if k > n {
        return 0;
    }
    (0..k.min(n - k)).fold(1u128, |acc, i| acc.saturating_mul(n - i) / (i + 1))
}

/// The sorted, de-duplicated set of tokens in a draft tuple.
pub fn token_set(tuple: &[usize]) -> Vec<usize> {
    let mut set = tuple.to_vec();
    set.sort_unstable();
    set.dedup();
    set
}

/// Draws an index with probability proportional to `weights` (non-negative,
/// not all zero). Never returns an index of zero weight.
pub fn sample_index<R: Rng + ?Sized>(weights: &[f64], rng: &mut R) -> usize {
    let total: f64 = weights.iter().sum();
    sample_index_of_total(weights.iter().copied(), total, rng)
}

/// [`sample_index`] for weights produced on the fly whose sum `total`
/// (positive) is known: one pass, nothing stored.
pub fn sample_index_of_total<R: Rng + ?Sized>(
    weights: impl IntoIterator<Item = f64>,
    total: f64,
    rng: &mut R,
) -> usize {
    let mut u = rng.random::<f64>() * total;
    let mut last_positive = 0;
    for (i, w) in weights.into_iter().enumerate() {
        if w > 0.0 {
            if u < w {
                return i;
            }
            u -= w;
            last_positive = i;
        }
    }
    // Rounding left u just above the last weight.
    last_positive
}
