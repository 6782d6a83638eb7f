//! One max-flow network: source -> draft sets -> tokens -> sink, solved by
//! petgraph's Dinic's algorithm.

use petgraph::algo::dinics;
use petgraph::graph::{DiGraph, NodeIndex};

use mdsd_core::Accepted;

/// Capacities are rounded to this grid before the max flow. Dinic's
/// algorithm tests residual capacities for exact zero; on the grid every
/// capacity, flow, sum and difference is an integer multiple of 2^-50 below
/// 2^2, which f64 represents exactly, so the algorithm runs in exact
/// arithmetic and terminates. Rounding moves each capacity by at most
/// 2^-51 ≈ 4.4e-16, so the max flow by at most that times the number of
/// sets and tokens (1e-11 for 22k sets).
const GRID: f64 = (1u64 << 50) as f64;
/// Stands for the unbounded set -> token capacity: above any flow (<= 1).
const UNBOUNDED: f64 = 2.0;

fn on_grid(x: f64) -> f64 {
    (x * GRID).round() / GRID
}

/// A draft set's source capacity and the tokens it may send flow to.
pub(crate) struct SetArcs<'a> {
    pub prob: f64,
    pub tokens: &'a [usize],
}

/// The max flow value and the flow on each set -> token arc, per set in
/// input order. `sink[y]` caps the flow into token y.
///
/// petgraph's Dinic's algorithm has no warm start, and it pays a pass over
/// all nodes for every augmenting path; starting from zero it would find
/// about one path per draft set. So a greedy flow comes first (each set, in
/// turn, fills its tokens' remaining capacity), and Dinic's algorithm runs on
/// that flow's residual network: the same arcs with what capacity is left,
/// plus a token -> set arc carrying each greedy flow, along which an
/// augmenting path can take it back. Greedy amounts are minimums and
/// differences of grid values, so everything stays exact on the grid.
pub(crate) fn max_flow(sets: &[SetArcs], sink: &[f64]) -> (f64, Accepted) {
    let mut left: Vec<f64> = sink.iter().map(|&c| on_grid(c)).collect();
    let mut greedy: Accepted = Vec::with_capacity(sets.len());
    let mut greedy_total = 0.0;
    let mut source_left = Vec::with_capacity(sets.len());
    // Demand on each token from the sets not yet processed.
    let mut demand = vec![0.0; sink.len()];
    for set in sets {
        set.tokens.iter().for_each(|&y| demand[y] += set.prob);
    }
    let room = |y: usize, left: &[f64], demand: &[f64]| left[y] / demand[y].max(f64::MIN_POSITIVE);
    let mut by_room: Vec<usize> = Vec::new();
    for set in sets {
        let mut supply = on_grid(set.prob);
        // Fill first the token with the most capacity left per unit of
        // demand still to come: it is the least likely to be needed by
        // another set, so fewer augmenting paths have to undo the choice.
        by_room.clear();
        by_room.extend(0..set.tokens.len());
        by_room.sort_unstable_by(|&a, &b| {
            room(set.tokens[b], &left, &demand).total_cmp(&room(set.tokens[a], &left, &demand))
        });
        set.tokens.iter().for_each(|&y| demand[y] -= set.prob);
        let mut flows: Vec<(usize, f64)> = set.tokens.iter().map(|&y| (y, 0.0)).collect();
        for &i in &by_room {
            let y = set.tokens[i];
            let f = supply.min(left[y]);
            if f > 0.0 {
                supply -= f;
                left[y] -= f;
                greedy_total += f;
                flows[i].1 = f;
            }
        }
        source_left.push(supply);
        greedy.push(flows);
    }

    let mut graph = DiGraph::<(), f64, u32>::with_capacity(
        sets.len() + sink.len() + 2,
        sets.len() * 8 + sink.len(),
    );
    let source = graph.add_node(());
    let target = graph.add_node(());
    let token_nodes: Vec<NodeIndex> = left
        .iter()
        .map(|&cap| {
            let node = graph.add_node(());
            graph.add_edge(node, target, cap);
            node
        })
        .collect();
    // Per set and token: the forward arc's edge index, and the backward
    // arc's, where greedy flow can be taken back.
    let mut arcs: Vec<Vec<(usize, usize, Option<usize>)>> = Vec::with_capacity(sets.len());
    for (flows, &supply) in greedy.iter().zip(&source_left) {
        let node = graph.add_node(());
        graph.add_edge(source, node, supply);
        arcs.push(
            flows
                .iter()
                .map(|&(y, f)| {
                    let forward = graph.add_edge(node, token_nodes[y], UNBOUNDED).index();
                    let backward =
                        (f > 0.0).then(|| graph.add_edge(token_nodes[y], node, f).index());
                    (y, forward, backward)
                })
                .collect(),
        );
    }
    let (extra, flows) = dinics(&graph, source, target);
    let accepted = arcs
        .into_iter()
        .zip(greedy)
        .map(|(set, start)| {
            set.into_iter()
                .zip(start)
                .map(|((y, forward, backward), (_, f))| {
                    (y, f + flows[forward] - backward.map_or(0.0, |b| flows[b]))
                })
                .collect()
        })
        .collect();
    (greedy_total + extra, accepted)
}
