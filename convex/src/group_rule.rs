//! The i.i.d. programs at the full vocabulary solved by a rule constant
//! on groups of tokens by ratio p / q (`docs/DESIGN.md` §5, "Rules
//! constant on groups").
//!
//! Either side's acceptance is reached by any theta that puts r on the
//! right side of p at every token: the outer side's r sums to P(S > 0)
//! whatever theta, so r <= p there accepts all of it, and the inner
//! side's acceptance is p(H*) wherever r >= p. Tokens of one weight enter
//! phi only through their total q, and each gets r_y = q_y r_g / q_g
//! from its group's r_g: the program over one token per group is exact
//! for a rule constant on the groups, not an approximation of it. Its
//! target is each group's edge, q_g times the least ratio of its tokens
//! (outer) or the greatest (inner), so that at its stop r_g <= q_g
//! min_y p_y / q_y, hence r_y <= p_y for every token of the group, up to
//! the program's own residual (and r_y >= p_y on the inner side): the
//! acceptance lost at the full vocabulary is at most the grouped
//! program's, and no evaluation at the full vocabulary is needed, only
//! one pass that writes each token's theta and r.
//!
//! The edges cost the slack between the two sides' totals and p's,
//! q(H*)^n - p(H*) = 1 - alpha*, which on real rows can be 1e-4 of the
//! inner side's mass: groups 2^-6 wide in ratio are tried first, then
//! 2^-8, and tokens of large q are groups of their own (a group that
//! merges them would also saturate below its tokens' own limits, r_g <
//! P(draft in g), which is concave in q_g). Where the edges still ask for
//! more than the side's total, or the grouped program fails, the side is
//! solved as before (`ratio_groups::minimise`).
//!
//! A solve builds both sides at once (`both_sides`): the tokens' cells
//! need no side, so they are made beside the closed form (`coarse_cells`);
//! H* being a set of least ratios, each cell is then one side's group but
//! those between the least ratio outside H* and the greatest on it, which
//! are summed again side by side; and one pass writes the rule.

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::newton::{Program, Solved, Stop};
use crate::numeric::{SUM_CHUNK, chunk_sum, join_from};
use crate::potential::iid::Selectable;
use crate::ratio_groups::{self, Groupable, RATIO_CEILING, RATIO_FLOOR, SHRINK};
use crate::selection_rule::accepted;
use crate::thresholds::{GROUPED_START_FROM, TOKENS_PER_TASK};
use crate::workspace::Workspace;
use rayon::prelude::*;

/// Mantissa bits of the ratio kept in a group's key: the coarser groups
/// make grouped programs several times smaller, and their edges fit the
/// slack on most sides; the finer ones where they do not (figures in
/// `benches/README.md`).
const COARSE_BITS: u32 = 6;
const FINE_BITS: u32 = 8;
/// Newton iterations a rule's grouped program may take before the next
/// width is tried: where the edges fit, the grouped programs stop within
/// a few (their counts on the shared rows are in `benches/README.md`);
/// where they barely do not, a program crawls toward an optimum just past
/// its tolerance, and the cap bounds what that width costs.
const GROUP_RULE_ITERATIONS: usize = 10;
/// Tokens of at least this draft probability are groups of their own: at
/// most 10^4 of them, and a few hundred on real rows, which hold most of
/// the mass.
const OWN_GROUP_FROM: f64 = 1e-4;

/// The sides of a program, as `Groups` numbers them: outside H* (edges
/// at the least ratio) and on H* (the greatest).
const OUTER: usize = 0;
const INNER: usize = 1;

/// The cells of the coarser width of an i.i.d. problem's tokens, for
/// `both_sides`, where its support is large enough to group: they need
/// no side, so the solver makes them beside the closed form that finds
/// H*.
pub(crate) fn coarse_cells(p: &[f64], q: &[f64], workspace: &mut Workspace) -> Option<Cells> {
    (p.len() >= GROUPED_START_FROM).then(|| Cells::new(q, p, COARSE_BITS, workspace))
}

/// The rule of `both_sides`: theta and r on every token, and per side
/// (outer, inner) its grouped program's iterations and whether the time
/// limit stopped it, or `None` where the side has no rule on groups and
/// holds zeros, for the caller to solve by `minimise` and write over.
pub(crate) struct BothSides {
    pub theta: Vec<f64>,
    pub marginal: Vec<f64>,
    pub solved: [Option<(usize, bool)>; 2],
    /// The acceptance Σ min(p, r) where both sides have their rule (the
    /// bits of `SelectionRule::acceptance`), else `None`.
    pub acceptance: Option<f64>,
}

/// Both sides of an i.i.d. problem, each by a rule constant on its groups
/// of the coarser width (`cells`, from `coarse_cells`) where it is large
/// enough to group and the groups' edges fit its total: token y is on H*
/// where `in_h[y]`, whose draft mass is `q_h`.
pub(crate) fn both_sides(
    cells: Option<Cells>,
    (p, q): (&[f64], &[f64]),
    in_h: &[bool],
    q_h: f64,
    n: usize,
    budget: &Budget,
    workspace: &mut Workspace,
) -> BothSides {
    let inside = in_h.iter().filter(|&&inside| inside).count();
    let sizes = [p.len() - inside, inside];
    let cells = match cells {
        Some(cells) if sizes.iter().any(|&size| size >= GROUPED_START_FROM) => cells,
        cells => {
            if let Some(cells) = cells {
                cells.give(workspace);
            }
            return BothSides {
                theta: vec![0.0; p.len()],
                marginal: vec![0.0; p.len()],
                solved: [None, None],
                acceptance: None,
            };
        }
    };
    let groups = Groups::new(&cells, q, p, Sides::ByCertificate(in_h));
    let rule_of = |side: usize, base: f64, workspace: &mut Workspace| {
        if sizes[side] < GROUPED_START_FROM {
            return None;
        }
        let range = groups.of_side(side);
        let potential = Selectable {
            q: &groups.q[range.clone()],
            base,
            n,
        };
        let edges = &groups.target[range];
        grouped_rule(&potential, edges, side, sizes[side], budget, workspace)
    };
    // The two grouped programs, side by side: the inner one's vectors, of
    // a few thousand groups, are smaller than a workspace keeps.
    let (outer, inner) = join_from(
        p.len(),
        || rule_of(OUTER, q_h, workspace),
        || rule_of(INNER, 0.0, &mut Workspace::new()),
    );
    let per_group = groups.per_group([outer.as_ref(), inner.as_ref()]);
    let (mut theta, mut marginal) = (Vec::new(), Vec::new());
    let side_of = |y: usize| usize::from(in_h[y]);
    let acceptance = groups.write(
        &cells,
        (q, p),
        side_of,
        &per_group,
        (&mut theta, &mut marginal),
    );
    cells.give(workspace);
    let solved = [outer, inner].map(|rule| rule.map(|rule| (rule.iterations, rule.out_of_time)));
    BothSides {
        theta,
        marginal,
        acceptance: solved.iter().all(Option::is_some).then_some(acceptance),
        solved,
    }
}

/// Minimises an i.i.d. side's `program` by a rule constant on groups of
/// the finer width where it is large enough to group and the groups'
/// edges fit its total (`both_sides` tries the coarser one); otherwise
/// (and where the grouped program fails) as `ratio_groups::minimise`
/// does.
pub(crate) fn minimise(
    program: &Program<Selectable>,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<Solved, ConvexError> {
    let side = match program.stop {
        Stop::Excess => Some(OUTER),
        Stop::Shortfall => Some(INNER),
        Stop::ProjectedGradient => None,
    };
    if let Some(side) = side.filter(|_| program.p.len() >= GROUPED_START_FROM)
        && let Some(solved) = constant_on_groups(program, side, FINE_BITS, budget, workspace)
    {
        return Ok(solved);
    }
    ratio_groups::minimise(program, budget, workspace)
}

/// Per token, its cell of ratio keys; per cell, the sums that its groups
/// need: one pass over the tokens, which needs no side. Its vectors come
/// from a workspace and go back to it (`give`).
pub(crate) struct Cells {
    /// Per token, its cell; the tokens of groups of their own
    /// (`OWN_GROUP_FROM`) are in the last cell, which holds no other.
    of_token: Vec<u32>,
    /// Per cell, three entries: Σ q, the least ratio and the greatest.
    sums: Vec<f64>,
    /// The tokens of groups of their own, ascending.
    own: Vec<usize>,
}

impl Cells {
    /// p / q, clamped to [RATIO_FLOOR, RATIO_CEILING] (a program's
    /// tokens have q > 0: the solver keeps the draft's support).
    #[inline]
    fn ratio(p: f64, q: f64) -> f64 {
        (p / q).clamp(RATIO_FLOOR, RATIO_CEILING)
    }

    /// The cells of `bits` mantissa bits of the tokens of q and p: a
    /// ratio's cell is its key, the top bits of its bit pattern (which
    /// increases with a positive float's value), less the floor's.
    fn new(q: &[f64], p: &[f64], bits: u32, workspace: &mut Workspace) -> Self {
        let shift = 52 - bits;
        let first_key = RATIO_FLOOR.to_bits() >> shift;
        let own_cell = ((RATIO_CEILING.to_bits() >> shift) - first_key + 1) as u32;
        // The cells first, a pass without branches that vectorises.
        let mut of_token = workspace.take_cells(q.len());
        of_token.extend((q.iter().zip(p)).map(|(&q, &p)| {
            let cell = ((Self::ratio(p, q).to_bits() >> shift) - first_key) as u32;
            if q >= OWN_GROUP_FROM { own_cell } else { cell }
        }));
        // Then the sums, even and odd tokens apart: the tail's tokens
        // often share a cell with the one before, and one table would
        // chain each update on that token's.
        let entries = 3 * (own_cell as usize + 1);
        // From a range, whose length the vector knows, not a cycle's.
        let unset = (0..entries).map(|i| if i % 3 == 1 { f64::INFINITY } else { 0.0 });
        let mut halves = [workspace.take(entries), workspace.take(entries)];
        halves
            .iter_mut()
            .for_each(|half| half.extend(unset.clone()));
        for (y, ((&cell, &q), &p)) in of_token.iter().zip(q).zip(p).enumerate() {
            let ratio = Self::ratio(p, q);
            let sum = &mut halves[y % 2][3 * cell as usize..][..3];
            sum[0] += q;
            sum[1] = sum[1].min(ratio);
            sum[2] = sum[2].max(ratio);
        }
        let [mut sums, odd] = halves;
        for (sum, odd) in sums.chunks_exact_mut(3).zip(odd.chunks_exact(3)) {
            sum[0] += odd[0];
            sum[1] = sum[1].min(odd[1]);
            sum[2] = sum[2].max(odd[2]);
        }
        workspace.give(odd);
        let own = (q.iter().enumerate())
            .filter(|&(_, &q)| q >= OWN_GROUP_FROM)
            .map(|(y, _)| y)
            .collect();
        Self {
            of_token,
            sums,
            own,
        }
    }

    /// The number of cells.
    fn count(&self) -> usize {
        self.sums.len() / 3
    }

    /// Σ q, the least ratio and the greatest of `cell`'s tokens.
    fn sum(&self, cell: usize) -> [f64; 3] {
        [
            self.sums[3 * cell],
            self.sums[3 * cell + 1],
            self.sums[3 * cell + 2],
        ]
    }

    /// The cell of the tokens of groups of their own.
    fn own_cell(&self) -> usize {
        self.count() - 1
    }

    /// Gives the vectors back to `workspace`.
    fn give(self, workspace: &mut Workspace) {
        workspace.give(self.sums);
        workspace.give_cells(self.of_token);
    }
}

/// Which side each token of a program is on.
enum Sides<'a> {
    /// All on one.
    One(usize),
    /// On H* where `in_h[y]`.
    ByCertificate(&'a [bool]),
}

/// The groups of one or both sides, from their tokens' cells: per token
/// and side, its group; per group, its q and its edge target.
struct Groups {
    /// Per cell and side (entry 2 cell + side), its group (u32::MAX where
    /// the side has no token of the cell).
    index: Vec<u32>,
    /// Per side, the tokens of groups of their own, ascending.
    own: [Vec<usize>; 2],
    /// Per side, the first of its groups of one token.
    first_own: [usize; 2],
    own_cell: u32,
    /// The outer side's groups, then the inner side's; each side's groups
    /// of cells first, then one per token of its own, in token order.
    q: Vec<f64>,
    target: Vec<f64>,
}

impl Groups {
    /// The groups of the tokens of q and p in `cells`, each on its side:
    /// edges at the least ratio of each group outside H*, at the greatest
    /// on H*. A cell whose tokens are all on one side is one group as it
    /// is; the others (those holding the closed form's cut) are summed
    /// again side by side, from their tokens.
    fn new(cells: &Cells, q: &[f64], p: &[f64], sides: Sides) -> Self {
        let count = cells.count();
        // Per cell and side: Σ q and the edge ratio.
        let mut split = vec![[0.0, f64::NAN]; 2 * count];
        let mut own: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        match sides {
            Sides::One(side) => {
                for cell in 0..count - 1 {
                    let sum = cells.sum(cell);
                    let edge = if side == OUTER { sum[1] } else { sum[2] };
                    split[2 * cell + side] = [sum[0], edge];
                }
                own[side] = cells.own.clone();
            }
            Sides::ByCertificate(in_h) => {
                // The cells that may hold both sides' tokens: from the
                // least cell outside H* to the greatest on it (at most the
                // cell of the closed form's cut, H* being the tokens of
                // the least ratios; all of them were it not). Below them
                // a cell holds no token outside H*, above them none on it.
                let own_cell = cells.own_cell() as u32;
                let (mut least_outer, mut greatest_inner) = (u32::MAX, 0);
                // Masks, not branches: the side follows no pattern along
                // the vocabulary.
                for (&cell, &h) in cells.of_token.iter().zip(in_h) {
                    let (inner, counted) = (u32::from(h), u32::from(cell != own_cell));
                    least_outer = least_outer.min(cell | (inner | (1 - counted)).wrapping_neg());
                    greatest_inner = greatest_inner.max(cell & (inner & counted).wrapping_neg());
                }
                let mixed = least_outer as usize..=greatest_inner as usize;
                for cell in 0..count - 1 {
                    let sum = cells.sum(cell);
                    if mixed.contains(&cell) {
                        split[2 * cell] = [0.0, f64::INFINITY];
                        split[2 * cell + 1] = [0.0, 0.0];
                    } else if cell < least_outer as usize {
                        split[2 * cell + INNER] = [sum[0], sum[2]];
                    } else {
                        split[2 * cell + OUTER] = [sum[0], sum[1]];
                    }
                }
                // Those cells' tokens, side by side (a test per token
                // that is almost never taken).
                let (first, width) = (least_outer, greatest_inner.wrapping_sub(least_outer));
                let tokens = if mixed.is_empty() {
                    &[][..]
                } else {
                    &cells.of_token[..]
                };
                for (y, &cell) in tokens.iter().enumerate() {
                    // One unsigned comparison (the own cell lies past the range).
                    if cell.wrapping_sub(first) > width {
                        continue;
                    }
                    let side = usize::from(in_h[y]);
                    let ratio = Cells::ratio(p[y], q[y]);
                    let entry = &mut split[2 * cell as usize + side];
                    entry[0] += q[y];
                    entry[1] = match side {
                        OUTER => entry[1].min(ratio),
                        _ => entry[1].max(ratio),
                    };
                }
                for &y in &cells.own {
                    own[usize::from(in_h[y])].push(y);
                }
            }
        }
        let mut groups = Self {
            index: vec![u32::MAX; 2 * count],
            own,
            first_own: [0; 2],
            own_cell: cells.own_cell() as u32,
            q: Vec::new(),
            target: Vec::new(),
        };
        for side in [OUTER, INNER] {
            for cell in 0..count - 1 {
                let [sum, edge] = split[2 * cell + side];
                if sum > 0.0 {
                    groups.index[2 * cell + side] = groups.q.len() as u32;
                    groups.q.push(sum);
                    groups.target.push(sum * edge);
                }
            }
            groups.first_own[side] = groups.q.len();
            groups.q.extend(groups.own[side].iter().map(|&y| q[y]));
            groups.target.extend(groups.own[side].iter().map(|&y| p[y]));
        }
        groups
    }

    /// The groups of `side`.
    fn of_side(&self, side: usize) -> std::ops::Range<usize> {
        let outer_end = self.first_own[OUTER] + self.own[OUTER].len();
        match side {
            OUTER => 0..outer_end,
            _ => outer_end..self.q.len(),
        }
    }

    /// Per group, its theta and r / q from its side's solution over the
    /// groups (`rules`: outer, inner); zero for a side without one.
    fn per_group(&self, rules: [Option<&Solved>; 2]) -> (Vec<f64>, Vec<f64>) {
        let (mut theta, mut per_q) = (vec![0.0; self.q.len()], vec![0.0; self.q.len()]);
        for (side, rule) in [OUTER, INNER].into_iter().zip(rules) {
            let Some(rule) = rule else { continue };
            for (k, g) in self.of_side(side).enumerate() {
                theta[g] = rule.theta[k];
                per_q[g] = rule.marginal[k] / self.q[g];
            }
        }
        (theta, per_q)
    }

    /// Writes each token's theta and r = q_y r_g / q_g from its group
    /// (`per_group`), by its cell in `cells` and its side `side_of(y)`,
    /// into `theta` and `marginal` (emptied first), and returns the
    /// acceptance of that r against p, Σ min(p, r), summed in the same
    /// pass while r is in cache (a pass of its own would read r and p
    /// again). Fixed pieces of tokens on the pool, each a plain loop over
    /// memory not zeroed first (a fill would be a serial pass of its own);
    /// the sum in the chunks of `sum_of_pairs`, added in the order that
    /// function adds them: the bits of `SelectionRule::acceptance`, on any
    /// pool.
    fn write(
        &self,
        cells: &Cells,
        (q, p): (&[f64], &[f64]),
        side_of: impl Fn(usize) -> usize + Sync,
        (group_theta, per_q): &(Vec<f64>, Vec<f64>),
        (theta, marginal): (&mut Vec<f64>, &mut Vec<f64>),
    ) -> f64 {
        const { assert!(TOKENS_PER_TASK % SUM_CHUNK == 0) };
        // Per cell and side, its group's theta and r / q: one load per
        // token, not the group's index and then its values.
        let by_cell: Vec<[f64; 2]> = (self.index.iter())
            .map(|&g| match g {
                u32::MAX => [0.0; 2],
                g => [group_theta[g as usize], per_q[g as usize]],
            })
            .collect();
        let tokens = q.len();
        for vector in [&mut *theta, &mut *marginal] {
            vector.clear();
            vector.reserve_exact(tokens);
        }
        let (theta_out, marginal_out) = (
            &mut theta.spare_capacity_mut()[..tokens],
            &mut marginal.spare_capacity_mut()[..tokens],
        );
        let pieces = (theta_out.par_chunks_mut(TOKENS_PER_TASK))
            .zip(marginal_out.par_chunks_mut(TOKENS_PER_TASK))
            .enumerate()
            .map(|(k, (theta, marginal))| {
                let first = k * TOKENS_PER_TASK;
                let chunks = (theta.chunks_mut(SUM_CHUNK))
                    .zip(marginal.chunks_mut(SUM_CHUNK))
                    .enumerate();
                let sums = chunks.map(|(c, (theta, marginal))| {
                    let start = first + c * SUM_CHUNK;
                    let of_token = &cells.of_token[start..start + theta.len()];
                    let terms = (theta.iter_mut().zip(marginal.iter_mut()))
                        .zip(of_token.iter().zip(&q[start..]).zip(&p[start..]))
                        .enumerate()
                        .map(|(i, ((t, r), ((&cell, &qy), &py)))| {
                            let y = start + i;
                            let side = side_of(y);
                            let [group_t, group_per_q] = if cell == self.own_cell {
                                let group = self.of_token(y, cell, side);
                                [group_theta[group], per_q[group]]
                            } else {
                                by_cell[2 * cell as usize + side]
                            };
                            let ry = qy * group_per_q;
                            t.write(group_t);
                            r.write(ry);
                            accepted(py, ry)
                        });
                    chunk_sum(terms)
                });
                sums.collect::<Vec<f64>>()
            })
            .collect::<Vec<_>>();
        // SAFETY: the pieces above cover the first `tokens` entries of
        // both vectors' capacity (reserved above), and each piece wrote
        // every entry of its chunks.
        unsafe {
            theta.set_len(tokens);
            marginal.set_len(tokens);
        }
        pieces.into_iter().flatten().sum()
    }

    /// The group of token y, of cell `cell`, on `side`.
    #[inline]
    fn of_token(&self, y: usize, cell: u32, side: usize) -> usize {
        if cell == self.own_cell {
            // A search among the few tokens of their own groups.
            self.first_own[side] + self.own[side].partition_point(|&x| x < y)
        } else {
            self.index[2 * cell as usize + side] as usize
        }
    }
}

/// The solution of a side's program over its groups (`potential`, whose
/// targets are the groups' `edges`), for a side of `size` tokens: `None`
/// where grouping does not shrink the program, the edges ask for more
/// than the side's total, or the grouped program fails.
fn grouped_rule(
    potential: &Selectable,
    edges: &[f64],
    side: usize,
    size: usize,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Option<Solved> {
    if edges.len() * SHRINK > size {
        return None;
    }
    // Edges below r's total (outer) or above it (inner) leave no rule on
    // the right side of them all. r sums to P(S > 0) whatever theta, the
    // same over the groups as over their tokens.
    let (total, sum): (f64, f64) = (potential.selected_mass(), edges.iter().sum());
    let grouped = match side {
        OUTER if sum >= total => Program::outer(potential, edges),
        INNER if sum <= total => Program::inner(potential, edges),
        _ => return None,
    };
    // The grouped program's residual bounds the side's (module
    // documentation): it takes the side's whole tolerance.
    let budget = budget.with_max_iterations(budget.max_iterations.min(GROUP_RULE_ITERATIONS));
    ratio_groups::minimise(&grouped, &budget, workspace).ok()
}

/// The side's solution by a rule constant on its groups of `bits`
/// mantissa bits of the ratio (`grouped_rule`), on its tokens.
fn constant_on_groups(
    program: &Program<Selectable>,
    side: usize,
    bits: u32,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Option<Solved> {
    let (q, p) = (program.potential.q, program.p);
    let cells = Cells::new(q, p, bits, workspace);
    let groups = Groups::new(&cells, q, p, Sides::One(side));
    let range = groups.of_side(side);
    let potential = Selectable {
        q: &groups.q[range.clone()],
        ..*program.potential
    };
    let solved = grouped_rule(
        &potential,
        &groups.target[range.clone()],
        side,
        p.len(),
        budget,
        workspace,
    )?;
    let rules = match side {
        OUTER => [Some(&solved), None],
        _ => [None, Some(&solved)],
    };
    let per_group = groups.per_group(rules);
    let (mut theta, mut marginal) = (workspace.take(p.len()), workspace.take(p.len()));
    groups.write(
        &cells,
        (q, p),
        |_| side,
        &per_group,
        (&mut theta, &mut marginal),
    );
    cells.give(workspace);
    let (iterations, out_of_time) = (solved.iterations, solved.out_of_time);
    for vector in [solved.theta, solved.marginal] {
        workspace.give(vector);
    }
    Some(Solved {
        theta,
        marginal,
        iterations,
        out_of_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newton::Potential;
    use crate::numeric::sum_of_pairs;

    /// Softmax of quasi-random logits (golden-ratio sequences) spread over
    /// 14 nats: `v` tokens, the draft's and a target within 3 nats of it.
    fn laws(v: usize) -> (Vec<f64>, Vec<f64>) {
        let logit = |y: usize, spin: f64| -14.0 * (y as f64 * spin).fract();
        let softmax = |x: Vec<f64>| {
            let total: f64 = x.iter().map(|x| x.exp()).sum();
            x.iter().map(|x| x.exp() / total).collect::<Vec<f64>>()
        };
        let q = softmax((0..v).map(|y| logit(y, 0.618_033_988_7)).collect());
        let p = softmax(
            (0..v)
                .map(|y| q[y].ln() - 3.0 * logit(y, 0.754_877_666_2) / 14.0)
                .collect(),
        );
        (p, q)
    }

    /// Whether each token is in H* of the closed form for n i.i.d. drafts.
    fn in_certificate(p: &[f64], q: &[f64], n: usize) -> Vec<bool> {
        let (target, draft) = (
            mdsd_core::Distribution::from_probs(p.to_vec()).unwrap(),
            mdsd_core::Distribution::from_probs(q.to_vec()).unwrap(),
        );
        let bound =
            mdsd_bounds::optimal_acceptance_iid(&target, &draft, n, Default::default()).unwrap();
        let mut in_h = vec![false; p.len()];
        bound.certificate.iter().for_each(|&y| in_h[y] = true);
        in_h
    }

    /// The outer and inner programs of an i.i.d. problem (H* of the
    /// closed form), as the solver makes them: each side's q, p, base and
    /// bounds.
    fn sides(p: &[f64], q: &[f64], n: usize) -> [(Vec<f64>, Vec<f64>, f64, Stop); 2] {
        let in_h = in_certificate(p, q, n);
        let side = |inside: bool| -> (Vec<f64>, Vec<f64>) {
            (0..p.len())
                .filter(|&y| in_h[y] == inside)
                .map(|y| (q[y], p[y]))
                .unzip()
        };
        let ((outer_q, outer_p), (inner_q, inner_p)) = (side(false), side(true));
        let q_h = inner_q.iter().sum();
        [
            (outer_q, outer_p, q_h, Stop::Excess),
            (inner_q, inner_p, 0.0, Stop::Shortfall),
        ]
    }

    fn program<'a>(side: &'a Selectable, p: &'a [f64], stop: Stop) -> Program<'a, Selectable<'a>> {
        match stop {
            Stop::Excess => Program::outer(side, p),
            _ => Program::inner(side, p),
        }
    }

    /// A side's rule constant on groups of each width, where one is
    /// taken, has the r that the potential's own evaluation at its theta
    /// gives (token by token through buckets of theta, not groups), to
    /// 1e-12 relative, and loses no more than the tolerance (Σ (r - p)+
    /// outside H*, Σ (p - r)+ on it); returns the widths taken.
    fn check_sides(p: &[f64], q: &[f64], n: usize, tolerance: f64) -> Vec<u32> {
        let budget = Budget::default().with_max_gap(tolerance);
        let mut taken = Vec::new();
        for (side_q, side_p, base, stop) in sides(p, q, n) {
            let side = Selectable {
                q: &side_q,
                base,
                n,
            };
            let program = program(&side, &side_p, stop);
            let side_index = if stop == Stop::Excess { OUTER } else { INNER };
            for bits in [COARSE_BITS, FINE_BITS] {
                let mut workspace = Workspace::new();
                let Some(solved) =
                    constant_on_groups(&program, side_index, bits, &budget, &mut workspace)
                else {
                    continue;
                };
                taken.push(bits);
                let label = format!("{bits} bits, n {n}, {stop:?}");
                assert_exact(
                    &program,
                    (&solved.theta, &solved.marginal),
                    tolerance,
                    &label,
                );
            }
        }
        taken
    }

    /// That a side's rule (theta and r on its tokens) is exact, its r the
    /// one the potential's own evaluation at its theta gives (token by
    /// token through buckets of theta, not groups), to 1e-12 relative,
    /// and loses no more than `tolerance` (Σ (r - p)+ outside H*, Σ (p -
    /// r)+ on it).
    fn assert_exact(
        program: &Program<Selectable>,
        (theta, r): (&[f64], &[f64]),
        tolerance: f64,
        label: &str,
    ) {
        let evaluated = program.potential.evaluate(theta, &mut Workspace::new());
        for (y, (a, b)) in (r.iter().zip(&evaluated.marginal)).enumerate() {
            assert!(
                (a - b).abs() <= 1e-12 * b,
                "{label}, token {y}: r {a} against {b}"
            );
        }
        let lost: f64 = (r.iter().zip(program.p))
            .map(|(r, p)| match program.stop {
                Stop::Excess => (r - p).max(0.0),
                _ => (p - r).max(0.0),
            })
            .sum();
        assert!(lost <= tolerance, "{label}: lost {lost:e}");
    }

    /// Both sides of two real rows (V = 151936), n = 2 and 4: the finest
    /// width takes every side, and each rule taken is exact
    /// (`check_sides`).
    #[test]
    fn the_rule_constant_on_groups_is_exact() {
        for (p, q) in mdsd_benches::real_rows().into_iter().take(2) {
            for n in [2, 4] {
                let taken = check_sides(p.probs(), q.probs(), n, 1e-8);
                assert_eq!(taken.iter().filter(|&&bits| bits == 8).count(), 2, "n {n}");
            }
        }
    }

    /// Quasi-random laws of 40000 tokens, the target within 3 nats of the
    /// draft, n = 2, 8 and 32: each rule taken is exact, and some are taken.
    #[test]
    fn rules_on_groups_of_generic_laws_are_exact() {
        let (p, q) = laws(40_000);
        let mut taken = 0;
        for n in [2, 8, 32] {
            taken += check_sides(&p, &q, n, 1e-8).len();
        }
        assert!(taken > 0);
    }

    /// Both sides in one pass (`both_sides`) give, on each side they
    /// take, an exact rule (`assert_exact`), that of the side's own
    /// program at the coarser width (the same groups, their sums in
    /// another order: as many iterations, theta within 1e-9), and zeros
    /// on a side they leave; on two real rows (n = 2, 4, where they take
    /// both) and on quasi-random laws (n = 2, 8, 32).
    #[test]
    fn both_sides_at_once_are_each_side_alone() {
        let mut rows: Vec<(Vec<f64>, Vec<f64>)> = (mdsd_benches::real_rows().into_iter())
            .take(2)
            .map(|(p, q)| (p.probs().to_vec(), q.probs().to_vec()))
            .collect();
        rows.push(laws(40_000));
        let budget = Budget::default().with_max_gap(1e-8);
        let mut taken = 0;
        for (row, (p, q)) in rows.iter().enumerate() {
            for n in [2, 4, 8, 32] {
                let [outer, inner] = sides(p, q, n);
                let in_h = in_certificate(p, q, n);
                let mut workspace = Workspace::new();
                let cells = coarse_cells(p, q, &mut workspace);
                let both = both_sides(cells, (p, q), &in_h, outer.2, n, &budget, &mut workspace);
                // The acceptance of the write pass is the rule's own, bit
                // for bit, where both sides are grouped.
                let own = sum_of_pairs(p, &both.marginal, accepted);
                let grouped = both.solved.iter().all(Option::is_some);
                assert_eq!(
                    both.acceptance.map(f64::to_bits),
                    grouped.then_some(own.to_bits()),
                    "row {row}, n {n}"
                );
                for (index, (side_q, side_p, base, stop)) in
                    [(OUTER, outer.clone()), (INNER, inner.clone())]
                {
                    let potential = Selectable {
                        q: &side_q,
                        base,
                        n,
                    };
                    let program = program(&potential, &side_p, stop);
                    // A side too small to group is not grouped.
                    let alone = (side_p.len() >= GROUPED_START_FROM)
                        .then(|| {
                            constant_on_groups(
                                &program,
                                index,
                                COARSE_BITS,
                                &budget,
                                &mut workspace,
                            )
                        })
                        .flatten();
                    let on_side = (0..p.len()).filter(|&y| usize::from(in_h[y]) == index);
                    let written: (Vec<f64>, Vec<f64>) =
                        on_side.map(|y| (both.theta[y], both.marginal[y])).unzip();
                    match (both.solved[index], alone) {
                        (Some((iterations, _)), Some(alone)) => {
                            taken += 1;
                            let label = format!("row {row}, n {n}, side {index}");
                            assert_exact(&program, (&written.0, &written.1), 1e-8, &label);
                            assert_eq!(iterations, alone.iterations, "{label}");
                            let apart = (written.0.iter().zip(&alone.theta))
                                .map(|(a, b)| (a - b).abs())
                                .fold(0.0, f64::max);
                            assert!(apart <= 1e-9, "{label}: theta {apart:e} apart");
                        }
                        (None, None) => {
                            assert!(written.0.iter().chain(&written.1).all(|&x| x == 0.0));
                        }
                        (both, alone) => panic!(
                            "row {row}, n {n}, side {index}: {both:?} at once, {} alone",
                            alone.is_some()
                        ),
                    }
                }
            }
        }
        assert!(taken >= 8, "{taken} sides taken");
    }

    /// Both sides' rule and its acceptance, written in pieces on the pool,
    /// are the same bits on a pool of 1, 2 and 3 threads (a real row,
    /// both of whose sides are grouped).
    #[test]
    fn the_written_rule_does_not_depend_on_the_pool() {
        let (target, draft) = mdsd_benches::real_rows().swap_remove(0);
        let (p, q) = (target.probs().to_vec(), draft.probs().to_vec());
        let n = 4;
        let [outer, _] = sides(&p, &q, n);
        let in_h = in_certificate(&p, &q, n);
        let budget = Budget::default();
        let written: Vec<(Vec<u64>, Option<u64>)> = [1, 2, 3]
            .map(|threads| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let mut workspace = Workspace::new();
                    let cells = coarse_cells(&p, &q, &mut workspace);
                    let both =
                        both_sides(cells, (&p, &q), &in_h, outer.2, n, &budget, &mut workspace);
                    let bits = (both.theta.iter().chain(&both.marginal))
                        .map(|x| x.to_bits())
                        .collect();
                    (bits, both.acceptance.map(f64::to_bits))
                })
            })
            .into();
        assert!(written[0].1.is_some(), "both sides grouped");
        assert!(written.iter().all(|w| *w == written[0]));
    }

    /// The groups of both sides from a certificate that is no set of
    /// least ratios (a quasi-random third of the tokens, so that every
    /// cell holds both sides): each side's groups are those of its own
    /// tokens alone, the same q and edges to 1e-15 relative (sums in
    /// another order), group for group, tokens of their own included.
    #[test]
    fn groups_of_any_certificate_are_each_sides_own() {
        let (p, q) = laws(20_000);
        let in_h: Vec<bool> = (0..p.len()).map(|y| (y * 7919) % 3 == 0).collect();
        let mut workspace = Workspace::new();
        let cells = Cells::new(&q, &p, COARSE_BITS, &mut workspace);
        let both = Groups::new(&cells, &q, &p, Sides::ByCertificate(&in_h));
        for side in [OUTER, INNER] {
            let (side_q, side_p): (Vec<f64>, Vec<f64>) = (0..p.len())
                .filter(|&y| usize::from(in_h[y]) == side)
                .map(|y| (q[y], p[y]))
                .unzip();
            let alone_cells = Cells::new(&side_q, &side_p, COARSE_BITS, &mut workspace);
            let alone = Groups::new(&alone_cells, &side_q, &side_p, Sides::One(side));
            assert!(
                !alone.own[side].is_empty(),
                "side {side}: no token of its own"
            );
            let (at_once, by_itself) = (both.of_side(side), alone.of_side(side));
            assert_eq!(at_once.len(), by_itself.len(), "side {side}");
            for (a, b) in at_once.zip(by_itself) {
                for (x, y) in [(both.q[a], alone.q[b]), (both.target[a], alone.target[b])] {
                    assert!(
                        (x - y).abs() <= 1e-15 * y,
                        "side {side}, group {b}: {x} against {y}"
                    );
                }
            }
        }
    }

    /// An inner side with no slack (p is the r of some weights, so p's
    /// total is the side's): the groups' edges ask for more than it, the
    /// rule on groups is refused, and the side is solved token by token
    /// from the grouped start all the same.
    #[test]
    fn edges_past_the_total_fall_back() {
        let (_, q) = laws(20_000);
        let n = 4;
        let side = Selectable {
            q: &q,
            base: 0.0,
            n,
        };
        let theta: Vec<f64> = (0..q.len()).map(|y| (y % 7) as f64 * 0.5).collect();
        let p = side.evaluate(&theta, &mut Workspace::new()).marginal;
        let program = program(&side, &p, Stop::Shortfall);
        let budget = Budget::default().with_max_gap(1e-8);
        let mut workspace = Workspace::new();
        for bits in [COARSE_BITS, FINE_BITS] {
            assert!(constant_on_groups(&program, INNER, bits, &budget, &mut workspace).is_none());
        }
        let solved = minimise(&program, &budget, &mut workspace).unwrap();
        let lost: f64 = (solved.marginal.iter().zip(&p))
            .map(|(r, p)| (p - r).max(0.0))
            .sum();
        assert!(lost <= 1e-8, "lost {lost:e}");
    }
}
