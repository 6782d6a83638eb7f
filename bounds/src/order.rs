//! The ascending-p/q order that the optimal sets of DESIGN §3 are prefixes of.

/// p/q, with q = 0 last (+inf), whatever p is.
pub(crate) fn ratio(p: f64, q: f64) -> f64 {
    if q > 0.0 { p / q } else { f64::INFINITY }
}

/// Token ids by ascending p/q, ties by ascending id: one strict total order.
pub(crate) fn ascending_ratio_order(p: &[f64], q: &[f64]) -> Vec<usize> {
    let ratios: Vec<f64> = p.iter().zip(q).map(|(&a, &b)| ratio(a, b)).collect();
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_unstable_by(|&a, &b| ratios[a].total_cmp(&ratios[b]).then(a.cmp(&b)));
    order
}
