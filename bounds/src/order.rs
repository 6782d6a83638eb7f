//! The ascending-p/q order that the optimal sets of `docs/DESIGN.md` §3 are prefixes of.

/// p/q, with q = 0 last (+inf), whatever p is.
pub(crate) fn ratio(p: f64, q: f64) -> f64 {
    if q > 0.0 { p / q } else { f64::INFINITY }
}

/// (ratio, token) packed into one integer that orders as the pair: one
/// branch-free comparison instead of a lookup and two. Ratios are
/// non-negative (or +inf), whose bit patterns order as their values;
/// `abs` makes the -0.0 of a p = -0.0 entry (valid input) the +0.0 it
/// equals.
pub(crate) fn ratio_key(ratio: f64, token: usize) -> u128 {
    (u128::from(ratio.abs().to_bits()) << 64) | token as u128
}

/// Token ids by ascending p/q, ties by ascending id: one strict total order.
pub fn ascending_ratio_order(p: &[f64], q: &[f64]) -> Vec<usize> {
    let mut keys: Vec<u128> = (p.iter().zip(q).enumerate())
        .map(|(token, (&a, &b))| ratio_key(ratio(a, b), token))
        .collect();
    keys.sort_unstable();
    // The low 64 bits are the token.
    keys.into_iter().map(|key| key as u64 as usize).collect()
}

/// Where H is a prefix of [`ascending_ratio_order`], its last token and
/// that token's p/q: H is then exactly the tokens y whose (p(y)/q(y), y) is
/// at most (ratio, token), pairs compared first by ratio, then by id, q = 0
/// counting as +inf. That pair certifies H in two numbers; `None` when H is
/// empty or not such a prefix. One pass, no sort: H is a prefix iff its
/// largest key is below the smallest key outside it.
pub fn ratio_prefix_end(p: &[f64], q: &[f64], in_h: &[bool]) -> Option<(f64, usize)> {
    let (mut last_in, mut first_out) = (None::<u128>, u128::MAX);
    for (token, ((&a, &b), &inside)) in p.iter().zip(q).zip(in_h).enumerate() {
        let key = ratio_key(ratio(a, b), token);
        if inside {
            last_in = Some(last_in.map_or(key, |k| k.max(key)));
        } else {
            first_out = first_out.min(key);
        }
    }
    let last_in = last_in.filter(|&k| k < first_out)?;
    let token = last_in as u64 as usize;
    Some((ratio(p[token], q[token]), token))
}

/// Mass of `p` and of `q` outside each prefix `order[..k]`, k = 0..=V,
/// summed directly from the end (never as 1 - the mass inside).
pub(crate) fn masses_after(p: &[f64], q: &[f64], order: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let v = order.len();
    let mut p_out = vec![0.0; v + 1];
    let mut q_out = vec![0.0; v + 1];
    for k in (0..v).rev() {
        p_out[k] = p_out[k + 1] + p[order[k]];
        q_out[k] = q_out[k + 1] + q[order[k]];
    }
    (p_out, q_out)
}

/// `(Σ x inside H, Σ x outside H)` for H given by its indicator, each summed
/// directly.
pub(crate) fn split_mass(x: &[f64], in_set: &[bool]) -> (f64, f64) {
    x.iter()
        .zip(in_set)
        .fold((0.0, 0.0), |(inside, outside), (&v, &i)| {
            if i {
                (inside + v, outside)
            } else {
                (inside, outside + v)
            }
        })
}
