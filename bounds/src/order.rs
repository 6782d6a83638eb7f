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
/// Only the drafted tokens are sorted (`drafted_ratio_order`): those of q
/// = 0 share the key +inf and come in id order already (a draft truncated
/// to its top k leaves nearly all of the vocabulary there), so they are
/// merged in, among the drafted ratios that overflow to +inf too.
pub fn ascending_ratio_order(p: &[f64], q: &[f64]) -> Vec<usize> {
    let (drafted, _) = drafted_ratio_order(p, q);
    let mut undrafted = (0..q.len()).filter(|&token| q[token] <= 0.0).peekable();
    let mut order = Vec::with_capacity(q.len());
    for token in drafted {
        let key = ratio_key(ratio(p[token], q[token]), token);
        while let Some(before) = undrafted.next_if(|&t| ratio_key(f64::INFINITY, t) < key) {
            order.push(before);
        }
        order.push(token);
    }
    order.extend(undrafted);
    order
}

/// The drafted tokens (q > 0) by ascending (p/q, id), and the p of the
/// others, summed in the same pass over the vocabulary. A set that adds
/// undrafted tokens to one of drafted tokens only adds their p to it, so
/// the searches of optimal prefixes need no more than this.
pub(crate) fn drafted_ratio_order(p: &[f64], q: &[f64]) -> (Vec<usize>, f64) {
    let mut undrafted_mass = 0.0;
    let mut drafted: Vec<u128> = Vec::new();
    for (token, (&a, &b)) in p.iter().zip(q).enumerate() {
        if b > 0.0 {
            drafted.push(ratio_key(ratio(a, b), token));
        } else {
            undrafted_mass += a;
        }
    }
    drafted.sort_unstable();
    // The low 64 bits are the token.
    let order = drafted.into_iter().map(|key| key as u64 as usize).collect();
    (order, undrafted_mass)
}

/// Where H is a prefix of [`ascending_ratio_order`], its last token and
/// that token's p/q: H is then exactly the tokens y whose (p(y)/q(y), y) is
/// at most (ratio, token), pairs compared first by ratio, then by id, q = 0
/// counting as +inf. That pair certifies H in two numbers; `None` when H is
/// empty or not such a prefix. One pass, no sort: H is a prefix iff its
/// largest key is below the smallest key outside it.
pub fn ratio_prefix_end(p: &[f64], q: &[f64], in_h: &[bool]) -> Option<(f64, usize)> {
    // One pass in token order: the greatest (ratio, id) inside, whose id
    // is the last seen at its ratio, and the least outside, the first seen.
    let (mut last_in, mut first_out) = (None::<(f64, usize)>, None::<(f64, usize)>);
    for (token, ((&a, &b), &inside)) in p.iter().zip(q).zip(in_h).enumerate() {
        let r = ratio(a, b).abs();
        if inside {
            if last_in.is_none_or(|(best, _)| r >= best) {
                last_in = Some((r, token));
            }
        } else if first_out.is_none_or(|(least, _)| r < least) {
            first_out = Some((r, token));
        }
    }
    let (r, token) = last_in?;
    match first_out {
        Some((least, first)) if (least, first) < (r, token) => None,
        _ => Some((ratio(p[token], q[token]), token)),
    }
}
/// Mass of `p` and of `q` outside each prefix `order[..k]`, k = 0..=V,
/// summed directly from the end (never as 1 - the mass inside), from
/// `p_beyond`, the p of the tokens that `order` leaves out.
pub(crate) fn masses_after(
    p: &[f64],
    q: &[f64],
    order: &[usize],
    p_beyond: f64,
) -> (Vec<f64>, Vec<f64>) {
    let v = order.len();
    let mut p_out = vec![0.0; v + 1];
    p_out[v] = p_beyond;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The order with the undrafted tokens merged in is the sort of
        /// every token's (ratio, id), with zeros, ties and ratios that
        /// overflow to +inf.
        #[test]
        fn order_is_the_full_sort(
            entries in prop::collection::vec((0u8..4, 0u8..4), 0..40)
        ) {
            let value = |x: u8| [0.0, 0.25, 0.5, 1e-320][x as usize];
            let p: Vec<f64> = entries.iter().map(|e| value(e.0)).collect();
            let q: Vec<f64> = entries.iter().map(|e| value(e.1)).collect();
            let mut keys: Vec<u128> = (0..p.len())
                .map(|t| ratio_key(ratio(p[t], q[t]), t))
                .collect();
            keys.sort_unstable();
            let sorted: Vec<usize> = keys.into_iter().map(|k| k as u64 as usize).collect();
            prop_assert_eq!(ascending_ratio_order(&p, &q), sorted);
        }
    }

    /// The pair that ends a prefix, ties by id, q = 0 last; none for a set
    /// that is no prefix.
    #[test]
    fn prefix_ends() {
        let p = [0.1, 0.2, 0.3, 0.4];
        let q = [0.2, 0.2, 0.6, 0.0];
        // Ratios 0.5, 1, 0.5, inf: the order is 0, 2, 1, 3.
        let set = |ids: &[usize]| (0..4).map(|t| ids.contains(&t)).collect::<Vec<_>>();
        assert_eq!(ratio_prefix_end(&p, &q, &set(&[0])), Some((0.5, 0)));
        assert_eq!(ratio_prefix_end(&p, &q, &set(&[0, 2])), Some((0.5, 2)));
        assert_eq!(ratio_prefix_end(&p, &q, &set(&[0, 1, 2])), Some((1.0, 1)));
        assert_eq!(
            ratio_prefix_end(&p, &q, &set(&[0, 1, 2, 3])),
            Some((f64::INFINITY, 3))
        );
        // Token 2 ties token 0 but comes after it: {2} is no prefix.
        assert_eq!(ratio_prefix_end(&p, &q, &set(&[2])), None);
        assert_eq!(ratio_prefix_end(&p, &q, &set(&[0, 1])), None);
        assert_eq!(ratio_prefix_end(&p, &q, &set(&[])), None);
        // A drafted ratio that overflows to +inf keeps its place by id
        // among the undrafted tokens.
        let (p_inf, q_inf) = ([0.5, 0.1, 0.4, 0.0], [0.0, 0.1, 1e-320, 0.0]);
        assert_eq!(ascending_ratio_order(&p_inf, &q_inf), vec![1, 0, 2, 3]);
        // Every prefix of the order ends at its last token.
        let order = ascending_ratio_order(&p, &q);
        for k in 1..=4 {
            let end = ratio_prefix_end(&p, &q, &set(&order[..k])).unwrap();
            assert_eq!(end.1, order[k - 1]);
        }
    }
}
