//! Tokens grouped into buckets of theta: from `BUCKETED_FROM` tokens the
//! node sums of both the evaluation (module `integrals`) and the Newton
//! direction (module `hessian`) cost per bucket, not per token, through
//! Taylor series in each token's offset from its bucket's centre.

use rayon::prelude::*;

use crate::numeric::{merged_in_order, small_expm1};
use crate::potential::nodes::{NEGLIGIBLE, STEP};
use crate::thresholds::TOKENS_PER_TASK;
use crate::workspace::Workspace;

/// Width of a bucket in theta: tokens sit within 1/64 of the centre, so
/// |δ| = |a / a_b - 1| <= e^(1/64) - 1 < 0.0158.
const BUCKET: f64 = 1.0 / 32.0;
/// Taylor terms in δ of e^(-a c) = e^(-x) e^(-x δ), x = a_b c: the
/// remainder is below q (x |δ|)^ORDER / ORDER! e^(-x (1 - |δ|)), at most
/// q |δ|^ORDER (ORDER / e)^ORDER / ORDER! < 1e-17 q over all x, and a
/// relative 1e-17 of r_y (the kernel weighs nodes by e^(-x)).
pub(crate) const ORDER: usize = 9;

/// Tokens grouped by theta into buckets of width `BUCKET` around centres
/// a_b, each token with its offset δ = a / a_b - 1: the node sums of both
/// the evaluation and the Newton direction cost per bucket, not per token,
/// through Taylor series in δ.
pub(crate) struct Assignment {
    /// Per token: its slot and δ.
    pub slot: Vec<u32>,
    pub delta: Vec<f64>,
    /// Per slot: a_b.
    pub centre: Vec<f64>,
    /// The slots that hold a token, ascending.
    occupied: Vec<usize>,
}

/// e^(-a_b c_k) for each occupied slot b of an assignment and each node k
/// from the first while a_b c_k <= NEGLIGIBLE: the exponentials that all
/// transforms and smooths of the assignment, and of its restrictions, at
/// the same nodes share (e^(-2 a c) is the square). An evaluation of
/// drafts from n laws makes 2n such sums, and each product of its Newton
/// direction 2n more: computed once, the exponential leaves each pair of
/// bucket and node a polynomial's worth of work.
pub(crate) struct Decays {
    /// Per slot, where its decays start in `values`; they end where the
    /// next slot's start.
    start: Vec<usize>,
    values: Vec<f64>,
}

impl Decays {
    fn of(&self, slot: usize) -> &[f64] {
        &self.values[self.start[slot]..self.start[slot + 1]]
    }
}

impl Assignment {
    pub fn new(theta: &[f64], workspace: &mut Workspace) -> Self {
        Self::with_width(theta, BUCKET, workspace)
    }

    /// The assignment to buckets of width `width` in theta (`new`'s are
    /// `BUCKET` wide): |δ| <= e^(width / 2) - 1, which sets the Taylor
    /// terms a sum over the buckets needs.
    pub fn with_width(theta: &[f64], width: f64, workspace: &mut Workspace) -> Self {
        // floor(t / width) by truncation of a positive number (|theta| <=
        // THETA_LIMIT < OFFSET width): `f64::floor` is a libm call on
        // baseline x86-64, one per token. The widths are powers of two,
        // so a product by the inverse is the quotient, without a division
        // per token.
        const OFFSET: f64 = 4096.0;
        let per_width = width.recip();
        let number = |t: f64| (t * per_width + OFFSET) as i64 - OFFSET as i64;
        let (first, last) = theta.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| {
            (lo.min(number(t)), hi.max(number(t)))
        });
        let slots = (last - first + 1).max(0) as usize;
        let centre_theta = |slot: usize| (first + slot as i64) as f64 * width + 0.5 * width;
        let v = theta.len();
        let (mut slot, mut delta) = (vec![0u32; v], workspace.filled(v, 0.0));
        slot.par_chunks_mut(TOKENS_PER_TASK)
            .zip(delta.par_chunks_mut(TOKENS_PER_TASK))
            .zip(theta.par_chunks(TOKENS_PER_TASK))
            .for_each(|((slot, delta), theta)| {
                for ((s, d), &t) in slot.iter_mut().zip(delta.iter_mut()).zip(theta) {
                    let k = (number(t) - first) as usize;
                    *s = k as u32;
                    *d = small_expm1(t - centre_theta(k));
                }
            });
        let centre = (0..slots).map(|s| centre_theta(s).exp()).collect();
        let occupied = occupied_slots(&slot, slots);
        Self {
            slot,
            delta,
            centre,
            occupied,
        }
    }

    /// The assignment of the tokens `tokens` alone (in that order), on the
    /// same buckets.
    pub fn restrict(&self, tokens: &[usize]) -> Self {
        let slot: Vec<u32> = tokens.iter().map(|&y| self.slot[y]).collect();
        let delta = tokens.iter().map(|&y| self.delta[y]).collect();
        let occupied = occupied_slots(&slot, self.centre.len());
        Self {
            slot,
            delta,
            centre: self.centre.clone(),
            occupied,
        }
    }

    /// The slots that hold a token, ascending.
    pub fn occupied(&self) -> &[usize] {
        &self.occupied
    }

    /// The decays of the occupied slots at the nodes `c` (ascending).
    pub fn decays(&self, c: &[f64]) -> Decays {
        decays(&self.occupied, &self.centre, c)
    }

    /// a_y = e^(theta_y) = a_b (1 + δ_y).
    pub fn weight(&self, y: usize) -> f64 {
        self.centre[self.slot[y] as usize] * (1.0 + self.delta[y])
    }

    /// `Σ_y w_y δ_y^j (-1)^j / j!` for j < ORDER, per slot: the
    /// coefficients of e^(-a c) = e^(-x) Σ_j x^j (-δ)^j / j! summed over a
    /// bucket's tokens.
    fn series_moments(&self, w: impl Fn(usize) -> f64 + Sync) -> Vec<[f64; ORDER]> {
        let mut moments = self.moments::<ORDER>(w);
        for row in &mut moments {
            let mut factor = 1.0;
            for (j, entry) in row.iter_mut().enumerate() {
                if j > 0 {
                    factor *= -1.0 / j as f64;
                }
                *entry *= factor;
            }
        }
        moments
    }

    /// `Σ_y w_y e^(-a_y c_k)` at every node, or `Σ_y w_y (e^(-a_y c_k) -
    /// 1)` when `minus_one` (without the cancellation of the difference:
    /// per bucket, expm1(-x) Σ w plus e^(-x) times the series' terms in
    /// δ), for weights of either sign.
    pub fn transform(
        &self,
        w: impl Fn(usize) -> f64 + Sync,
        c: &[f64],
        decays: &Decays,
        minus_one: bool,
    ) -> Vec<f64> {
        let moments = self.series_moments(w);
        transform_moments(&self.occupied, &self.centre, &moments, c, decays, minus_one)
    }

    /// Per token y, `Σ_k kernel_k e^(-m a_y c_k)` (m = `multiplier`, 1 or
    /// 2) plus the rule's infinite left end, where the kernel grows like
    /// c^`growth` and e^(-m a c) = 1: node sums per bucket, a polynomial in
    /// δ per token.
    pub fn smooth(
        &self,
        c: &[f64],
        kernel: &[f64],
        decays: &Decays,
        multiplier: i32,
        growth: i32,
    ) -> Vec<f64> {
        let tables = bucket_tables(
            &self.occupied,
            &self.centre,
            c,
            kernel,
            decays,
            multiplier,
            growth,
        );
        let mut index = vec![usize::MAX; self.centre.len()];
        (self.occupied.iter().enumerate()).for_each(|(i, &s)| index[s] = i);
        (self.slot.par_iter().zip(self.delta.par_iter()))
            .with_min_len(TOKENS_PER_TASK)
            .map(|(&s, &d)| {
                let table = &tables[index[s as usize]];
                table.iter().rev().fold(0.0, |acc, t| acc * d + t)
            })
            .collect()
    }

    /// `Σ_(y in slot) w_y δ_y^j` for j < J, per slot.
    pub fn moments<const J: usize>(&self, w: impl Fn(usize) -> f64 + Sync) -> Vec<[f64; J]> {
        let slots = self.centre.len();
        let tokens = self.slot.len();
        let partials = (0..tokens.div_ceil(TOKENS_PER_TASK))
            .into_par_iter()
            .map(|task| {
                let mut sums = vec![[0.0; J]; slots];
                for y in task * TOKENS_PER_TASK..tokens.min((task + 1) * TOKENS_PER_TASK) {
                    let mut power = w(y);
                    for entry in sums[self.slot[y] as usize].iter_mut() {
                        *entry += power;
                        power *= self.delta[y];
                    }
                }
                sums
            });
        merged_in_order(partials, |sums, other| {
            for (x, y) in sums.iter_mut().zip(&other) {
                x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
            }
        })
        .unwrap_or_else(|| vec![[0.0; J]; slots])
    }
}

/// The evaluation's buckets: e^(-a c) = e^(-x) Σ_j (-x δ)^j / j! (x =
/// a_b c), so phi needs per bucket only the moments Σ q δ^j, and r_y is a
/// polynomial in δ_y whose coefficients are node sums per bucket. At full
/// vocabulary (10^5 tokens in a few hundred buckets) an evaluation then
/// costs a few multiplications per token instead of a few exponentials
/// and a pass over the nodes.
pub(crate) struct Buckets {
    pub(crate) tokens: Assignment,
    /// Per slot: Σ q δ^j (-1)^j / j! (all zero for empty slots).
    moments: Vec<[f64; ORDER]>,
}

impl Buckets {
    pub(crate) fn new(q: &[f64], theta: &[f64], workspace: &mut Workspace) -> Self {
        let tokens = Assignment::new(theta, workspace);
        let moments = tokens.series_moments(|y| q[y]);
        Self { tokens, moments }
    }

    /// The occupied slots, for the per-bucket node sums.
    fn occupied(&self) -> Vec<usize> {
        (0..self.moments.len())
            .filter(|&s| self.moments[s][0] > 0.0)
            .collect()
    }

    /// phi(c_k) - base = Σ_b e^(-x) Σ_j x^j moments_(b,j), x = a_b c_k,
    /// over nodes with x <= NEGLIGIBLE (the rest is below e^-60 q).
    pub(crate) fn drafted(&self, c: &[f64], decays: &Decays) -> Vec<f64> {
        transform_moments(
            &self.occupied(),
            &self.tokens.centre,
            &self.moments,
            c,
            decays,
            false,
        )
    }

    /// The decays of the occupied slots at the nodes `c`, which `drafted`
    /// and `marginal` share.
    pub(crate) fn decays(&self, c: &[f64]) -> Decays {
        decays(&self.occupied(), &self.tokens.centre, c)
    }

    /// r_y = n q_y a_y Σ_j δ_y^j T_(b,j) with T_(b,j) = (-1)^j / j! Σ_k
    /// kernel_k x^j e^(-x) (plus the rule's infinite left end, where the
    /// kernel is ∝ c and e^(-x) = 1).
    pub(crate) fn marginal(
        &self,
        q: &[f64],
        n: usize,
        c: &[f64],
        kernel: &[f64],
        decays: &Decays,
        workspace: &mut Workspace,
    ) -> Vec<f64> {
        let occupied = self.occupied();
        let tables = bucket_tables(&occupied, &self.tokens.centre, c, kernel, decays, 1, 1);
        let mut index = vec![usize::MAX; self.moments.len()];
        occupied.iter().enumerate().for_each(|(i, &s)| index[s] = i);
        let scale = n as f64;
        let tokens = &self.tokens;
        let mut marginal = workspace.take(q.len());
        q.par_iter()
            .zip(tokens.slot.par_iter().zip(tokens.delta.par_iter()))
            .with_min_len(TOKENS_PER_TASK)
            .map(|(&qy, (&s, &d))| {
                let table = &tables[index[s as usize]];
                let weight = scale * qy * tokens.centre[s as usize] * (1.0 + d);
                weight * table.iter().rev().fold(0.0, |acc, t| acc * d + t)
            })
            .collect_into_vec(&mut marginal);
        marginal
    }
}

/// The slots among `slots` that some token's `slot` names, ascending.
fn occupied_slots(slot: &[u32], slots: usize) -> Vec<usize> {
    let mut filled = vec![false; slots];
    slot.iter().for_each(|&s| filled[s as usize] = true);
    (0..slots).filter(|&s| filled[s]).collect()
}

/// The decays (`Decays`) of the `occupied` slots of centres `centre` at
/// the ascending nodes `c`.
fn decays(occupied: &[usize], centre: &[f64], c: &[f64]) -> Decays {
    let mut start = vec![0; centre.len() + 1];
    for &s in occupied {
        start[s + 1] = c.partition_point(|&ck| centre[s] * ck <= NEGLIGIBLE);
    }
    for s in 0..centre.len() {
        start[s + 1] += start[s];
    }
    let mut values = vec![0.0; start[centre.len()]];
    let mut rows: Vec<(usize, &mut [f64])> = Vec::with_capacity(occupied.len());
    let mut rest = values.as_mut_slice();
    for &s in occupied {
        let (row, after) = rest.split_at_mut(start[s + 1] - start[s]);
        rows.push((s, row));
        rest = after;
    }
    rows.par_iter_mut().for_each(|(s, row)| {
        (row.iter_mut().zip(c)).for_each(|(value, &ck)| *value = (-centre[*s] * ck).exp());
    });
    Decays { start, values }
}

/// `Σ_b e^(-x) Σ_j x^j moments_(b,j)` (x = a_b c_k) at every node, over
/// the `occupied` slots and nodes with x <= NEGLIGIBLE (the rest is below
/// e^-60 of the weights), or with e^(-x) - 1 for the term j = 0 when
/// `minus_one` (the transform of w (e^(-a c) - 1)), where the nodes past
/// NEGLIGIBLE add -Σ w.
fn transform_moments(
    occupied: &[usize],
    centre: &[f64],
    moments: &[[f64; ORDER]],
    c: &[f64],
    decays: &Decays,
    minus_one: bool,
) -> Vec<f64> {
    let partials = occupied.par_chunks(SLOTS_PER_TASK).map(|slots| {
        let mut sums = vec![0.0; c.len()];
        for &s in slots {
            let coefficients = &moments[s];
            let decay = decays.of(s);
            for ((sum, &ck), &e) in sums.iter_mut().zip(c).zip(decay) {
                let x = centre[s] * ck;
                // Σ_(j>=1) x^j moments_j, apart from the term j = 0.
                let tail = x * (coefficients[1..].iter().rev()).fold(0.0, |acc, m| acc * x + m);
                *sum += if minus_one {
                    // e^(-x) - 1 from e^(-x) would lose x's digits to
                    // the difference where x is small.
                    let shifted = if x < 1.0 { (-x).exp_m1() } else { e - 1.0 };
                    shifted * coefficients[0] + e * tail
                } else {
                    e * (coefficients[0] + tail)
                };
            }
            if minus_one {
                (sums[decay.len()..].iter_mut()).for_each(|sum| *sum -= coefficients[0]);
            }
        }
        sums
    });
    merged_in_order(partials, |sums, other| {
        sums.iter_mut().zip(&other).for_each(|(x, y)| *x += y);
    })
    .unwrap_or_else(|| vec![0.0; c.len()])
}

/// Occupied buckets a task of the transform sums: each costs a pass over
/// the nodes.
const SLOTS_PER_TASK: usize = 16;

/// Per occupied slot, `T_j = (-1)^j / j! Σ_k kernel_k X^j e^(-X)`, X = m
/// a_b c_k (m = `multiplier`, e^(-X) the decay to the m-th power), plus
/// the rule's infinite left end, where the kernel grows like c^`growth`
/// and e^(-X) = 1: then `Σ_k kernel_k e^(-m a c_k) = Σ_j δ^j T_j` for a
/// token of the bucket (e^(-m a c) = e^(-X) e^(-X δ)).
fn bucket_tables(
    occupied: &[usize],
    centre: &[f64],
    c: &[f64],
    kernel: &[f64],
    decays: &Decays,
    multiplier: i32,
    growth: i32,
) -> Vec<[f64; ORDER]> {
    occupied
        .par_iter()
        .map(|&s| {
            let decay = decays.of(s);
            let centre = f64::from(multiplier) * centre[s];
            let mut table = [0.0; ORDER];
            let x0 = centre * c[0];
            let mut power = kernel[0];
            for (j, entry) in table.iter_mut().enumerate() {
                let shrink = (-((j as i32 + growth) as f64) * STEP).exp();
                *entry = power * shrink / (1.0 - shrink);
                power *= x0;
            }
            for (k, (&ck, &e)) in c.iter().zip(decay).enumerate() {
                let x = centre * ck;
                if x > NEGLIGIBLE {
                    break;
                }
                let mut power = kernel[k] * e.powi(multiplier);
                for entry in table.iter_mut() {
                    *entry += power;
                    power *= x;
                }
            }
            let mut factor = 1.0;
            for (j, entry) in table.iter_mut().enumerate() {
                if j > 0 {
                    factor *= -1.0 / j as f64;
                }
                *entry *= factor;
            }
            table
        })
        .collect()
}
