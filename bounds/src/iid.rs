//! i.i.d. drafts: alpha* = 1 + min_k (P_k - S_k^n) over prefixes of the
//! ascending-p/q order (DESIGN §3), by a full sort or by bucket selection.

use crate::objective;
use crate::order::{ascending_ratio_order, ratio};

/// How [`crate::optimal_acceptance_iid`] finds the optimal prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IidAlgorithm {
    /// Sort all tokens by p/q: O(V log V). The reference.
    Sort,
    /// Bucket the ratios by their binary exponent and sort only the buckets
    /// that can hold the optimum: expected O(V).
    #[default]
    Selection,
}

/// `alpha - 1 = p(H) - q(H)^n` for a set with masses `p_in`, `q_in` inside and
/// `p_out`, `q_out` outside, all four summed directly. `1 - q(H)^n` is only
/// needed when `q(H)^n > 1/2`, and then `-expm1(n log1p(-q_out))` keeps it
/// accurate (DESIGN §3, "near 1").
pub(crate) fn iid_objective(p_in: f64, p_out: f64, q_in: f64, q_out: f64, n: i32) -> f64 {
    let all_in = q_in.powi(n);
    let not_all_in = if all_in > 0.5 {
        -(f64::from(n) * (-q_out).ln_1p()).exp_m1()
    } else {
        1.0 - all_in
    };
    objective(p_in, p_out, all_in, not_all_in)
}

/// The optimal prefix value (alpha - 1) and the tokens of the prefix.
pub(crate) fn iid_by_sort(p: &[f64], q: &[f64], n: i32) -> (f64, Vec<usize>) {
    let order = ascending_ratio_order(p, q);
    let v = order.len();
    // Suffix sums along the order: the mass outside each prefix, summed directly.
    let mut p_out = vec![0.0; v + 1];
    let mut q_out = vec![0.0; v + 1];
    for k in (0..v).rev() {
        p_out[k] = p_out[k + 1] + p[order[k]];
        q_out[k] = q_out[k + 1] + q[order[k]];
    }
    let (mut p_in, mut q_in) = (0.0, 0.0);
    let (mut best, mut best_len) = (0.0, 0);
    for k in 1..=v {
        p_in += p[order[k - 1]];
        q_in += q[order[k - 1]];
        let value = iid_objective(p_in, p_out[k], q_in, q_out[k], n);
        if value < best {
            best = value;
            best_len = k;
        }
    }
    let mut certificate = order[..best_len].to_vec();
    certificate.sort_unstable();
    (best, certificate)
}

// Bucket layout: ratio 0, ratios below 2^MIN_EXP, 2^SUB_BITS buckets per
// binary exponent in [MIN_EXP, MAX_EXP], ratios of 2^(MAX_EXP+1) and more,
// and infinite ratios (q = 0). Bucket index is non-decreasing in the ratio,
// so every bucket boundary is a prefix boundary of the sorted order.
const SUB_BITS: u32 = 5;
const MIN_EXP: i32 = -64;
const MAX_EXP: i32 = 63;
const FINITE_BUCKETS: usize = ((MAX_EXP - MIN_EXP + 1) as usize) << SUB_BITS;
const BUCKETS: usize = FINITE_BUCKETS + 4;

fn bucket_of(r: f64) -> usize {
    if r == 0.0 {
        return 0;
    }
    if r == f64::INFINITY {
        return BUCKETS - 1;
    }
    let bits = r.to_bits();
    let exp = ((bits >> 52) as i32) - 1023;
    if exp < MIN_EXP {
        1
    } else if exp > MAX_EXP {
        BUCKETS - 2
    } else {
        let mantissa_top = (bits >> (52 - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1);
        2 + (((exp - MIN_EXP) as usize) << SUB_BITS) + mantissa_top
    }
}

/// Where the best prefix ends.
#[derive(Clone, Copy)]
enum Boundary {
    Empty,
    /// After every token of buckets `0..=b`.
    BucketEnd(usize),
    /// After buckets `0..b` and the first `len` tokens of bucket `b` in sorted order.
    Inside(usize, usize),
}

/// Bucket selection. Pass 1 sums p, q and the least ratio per bucket; the
/// objective at every bucket end is then exact. Inside a bucket with least
/// ratio a, p(prefix) >= P0 + a x for x = q added, so the objective is at
/// least P0 + a x - (S0 + x)^n, concave in x: its minimum over the bucket is
/// at an end. Only buckets whose bound beats the best bucket end are sorted
/// (usually one or two), which makes the whole expected O(V).
pub(crate) fn iid_by_selection(p: &[f64], q: &[f64], n: i32) -> (f64, Vec<usize>) {
    let mut keys: Vec<u16> = Vec::with_capacity(p.len());
    let mut bucket_p = vec![0.0; BUCKETS];
    let mut bucket_q = vec![0.0; BUCKETS];
    let mut bucket_min = vec![f64::INFINITY; BUCKETS];
    for (&pi, &qi) in p.iter().zip(q) {
        let r = ratio(pi, qi);
        let b = bucket_of(r);
        keys.push(b as u16);
        bucket_p[b] += pi;
        bucket_q[b] += qi;
        bucket_min[b] = bucket_min[b].min(r);
    }
    // Mass strictly after each bucket, summed directly.
    let mut p_after = vec![0.0; BUCKETS];
    let mut q_after = vec![0.0; BUCKETS];
    for b in (0..BUCKETS - 1).rev() {
        p_after[b] = p_after[b + 1] + bucket_p[b + 1];
        q_after[b] = q_after[b + 1] + bucket_q[b + 1];
    }

    let mut p_before = vec![0.0; BUCKETS];
    let mut q_before = vec![0.0; BUCKETS];
    let mut end_value = vec![0.0; BUCKETS];
    let (mut best, mut boundary) = (0.0, Boundary::Empty);
    let (mut p_in, mut q_in) = (0.0, 0.0);
    for b in 0..BUCKETS {
        p_before[b] = p_in;
        q_before[b] = q_in;
        p_in += bucket_p[b];
        q_in += bucket_q[b];
        end_value[b] = iid_objective(p_in, p_after[b], q_in, q_after[b], n);
        if end_value[b] < best {
            best = end_value[b];
            boundary = Boundary::BucketEnd(b);
        }
    }

    let mut candidate = vec![false; BUCKETS];
    let mut start_value: f64 = 0.0;
    for b in 0..BUCKETS {
        let a = bucket_min[b];
        if bucket_q[b] > 0.0 && a.is_finite() {
            let slack = (bucket_p[b] - a * bucket_q[b]).max(0.0);
            let lower_bound = start_value.min(end_value[b] - slack);
            candidate[b] = lower_bound < best;
        }
        start_value = end_value[b];
    }

    let mut inside: Vec<(usize, f64, usize)> = keys
        .iter()
        .enumerate()
        .filter(|&(_, &k)| candidate[k as usize])
        .map(|(t, &k)| (k as usize, ratio(p[t], q[t]), t))
        .collect();
    inside.sort_unstable_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)).then(x.2.cmp(&y.2)));
    for group in inside.chunk_by(|x, y| x.0 == y.0) {
        let b = group[0].0;
        // Suffix sums inside the bucket, plus everything after it.
        let mut p_out = vec![p_after[b]; group.len() + 1];
        let mut q_out = vec![q_after[b]; group.len() + 1];
        for j in (0..group.len()).rev() {
            p_out[j] = p_out[j + 1] + p[group[j].2];
            q_out[j] = q_out[j + 1] + q[group[j].2];
        }
        let (mut p_in, mut q_in) = (p_before[b], q_before[b]);
        for j in 1..group.len() {
            p_in += p[group[j - 1].2];
            q_in += q[group[j - 1].2];
            let value = iid_objective(p_in, p_out[j], q_in, q_out[j], n);
            if value < best {
                best = value;
                boundary = Boundary::Inside(b, j);
            }
        }
    }
    let certificate = match boundary {
        Boundary::Empty => Vec::new(),
        Boundary::BucketEnd(b) => certificate_with(&keys, b + 1, &[]),
        Boundary::Inside(b, len) => {
            let start = inside.partition_point(|x| x.0 < b);
            certificate_with(&keys, b, &inside[start..start + len])
        }
    };
    (best, certificate)
}

/// Tokens of buckets `0..end`, plus `extra` tokens, in ascending id order.
fn certificate_with(keys: &[u16], end: usize, extra: &[(usize, f64, usize)]) -> Vec<usize> {
    let mut tokens: Vec<usize> = keys
        .iter()
        .enumerate()
        .filter(|&(_, &k)| (k as usize) < end)
        .map(|(t, _)| t)
        .collect();
    tokens.extend(extra.iter().map(|x| x.2));
    tokens.sort_unstable();
    tokens
}
