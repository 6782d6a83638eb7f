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

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::newton::{MAX_STEP_THETA, Program, Solved, Stop};
use crate::potential::iid::Selectable;
use crate::ratio_groups::{self, Groupable, RATIO_CEILING, RATIO_FLOOR, SHRINK};
use crate::thresholds::{GROUPED_START_FROM, TOKENS_PER_TASK};
use crate::workspace::Workspace;
use rayon::prelude::*;

/// Mantissa bits of the ratio kept in a group's key, tried in turn: the
/// coarser groups make grouped programs several times smaller, and their
/// edges fit the slack on most sides; the finer ones where they do not
/// (figures in `benches/README.md`).
const GROUP_RULE_BITS: [u32; 2] = [6, 8];
/// Newton iterations a rule's grouped program may take before the next
/// width is tried: where the edges fit, the grouped programs stop within
/// a few; where they barely do not, a program crawls toward an optimum
/// just past its tolerance, and the cap bounds what that width costs.
const GROUP_RULE_ITERATIONS: usize = 20;
/// Tokens of at least this draft probability are groups of their own: at
/// most 10^4 of them, and a few hundred on real rows, which hold most of
/// the mass.
const OWN_GROUP_FROM: f64 = 1e-4;

/// Minimises an i.i.d. side's `program` by a rule constant on groups of
/// ratio where it is large enough to group and the groups' edges fit its
/// total; otherwise (and where the grouped program fails) as
/// `ratio_groups::minimise` does.
pub(crate) fn minimise(
    program: &Program<Selectable>,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<Solved, ConvexError> {
    if program.p.len() >= GROUPED_START_FROM {
        let budget = budget.with_max_iterations(budget.max_iterations.min(GROUP_RULE_ITERATIONS));
        // r sums to P(S > 0) whatever theta: once for every width.
        let total = program.potential.selected_mass();
        for bits in GROUP_RULE_BITS {
            if let Some(solved) = constant_on_groups(program, bits, total, &budget, workspace) {
                return Ok(solved);
            }
        }
    }
    ratio_groups::minimise(program, budget, workspace)
}

/// The groups of a side: per token, its group; per group, its q and its
/// edge target.
struct Groups {
    /// A ratio's key: its top bits from `shift` on.
    shift: u32,
    /// Per cell of ratio keys, its group (u32::MAX where empty).
    index: Vec<u32>,
    first_key: u64,
    /// The tokens of groups of their own, ascending.
    own: Vec<usize>,
    /// Groups of cells first, then one per token of its own, in token
    /// order.
    q: Vec<f64>,
    target: Vec<f64>,
    cells: usize,
}

impl Groups {
    /// p / q, clamped to [RATIO_FLOOR, RATIO_CEILING] (a program's
    /// tokens have q > 0: the solver keeps the draft's support).
    #[inline]
    fn ratio(p: f64, q: f64) -> f64 {
        (p / q).clamp(RATIO_FLOOR, RATIO_CEILING)
    }

    #[inline]
    fn cell(shift: u32, first_key: u64, ratio: f64) -> usize {
        ((ratio.to_bits() >> shift) - first_key) as usize
    }

    /// The groups of `bits` mantissa bits of the tokens of q and p, with
    /// the least ratio of each group as its edge where `least`, else the
    /// greatest.
    fn new(q: &[f64], p: &[f64], bits: u32, least: bool) -> Self {
        let shift = 52 - bits;
        let first_key = RATIO_FLOOR.to_bits() >> shift;
        let count = ((RATIO_CEILING.to_bits() >> shift) - first_key + 1) as usize;
        let unset = if least { f64::INFINITY } else { 0.0 };
        // Per cell: Σ q and the edge ratio, side by side.
        let mut sums = vec![[0.0, unset]; count];
        let mut own = Vec::new();
        for (y, (&q, &p)) in q.iter().zip(p).enumerate() {
            if q >= OWN_GROUP_FROM {
                own.push(y);
                continue;
            }
            let ratio = Self::ratio(p, q);
            let cell = &mut sums[Self::cell(shift, first_key, ratio)];
            cell[0] += q;
            cell[1] = if least {
                cell[1].min(ratio)
            } else {
                cell[1].max(ratio)
            };
        }
        let occupied: Vec<usize> = (0..count).filter(|&k| sums[k][0] > 0.0).collect();
        let mut index = vec![u32::MAX; count];
        (occupied.iter().enumerate()).for_each(|(i, &k)| index[k] = i as u32);
        let group_q = (occupied.iter().map(|&k| sums[k][0])).chain(own.iter().map(|&y| q[y]));
        let target =
            (occupied.iter().map(|&k| sums[k][0] * sums[k][1])).chain(own.iter().map(|&y| p[y]));
        Self {
            shift,
            index,
            first_key,
            q: group_q.collect(),
            target: target.collect(),
            cells: occupied.len(),
            own,
        }
    }

    /// Token y's group, from its q and p.
    #[inline]
    fn of_token(&self, y: usize, q: f64, p: f64) -> usize {
        if q >= OWN_GROUP_FROM {
            // A search among the few tokens of their own groups.
            self.cells + self.own.partition_point(|&x| x < y)
        } else {
            self.index[Self::cell(self.shift, self.first_key, Self::ratio(p, q))] as usize
        }
    }
}

/// The side's solution by a rule constant on its groups of `bits`
/// mantissa bits of the ratio, where r sums to `total`: `None` where
/// grouping does not shrink the program, the edges ask for more than the
/// side's total, or the grouped program fails.
fn constant_on_groups(
    program: &Program<Selectable>,
    bits: u32,
    total: f64,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Option<Solved> {
    let (q, p) = (program.potential.q, program.p);
    let outer = match program.stop {
        Stop::Excess => true,
        Stop::Shortfall => false,
        Stop::ProjectedGradient => return None,
    };
    let groups = Groups::new(q, p, bits, outer);
    if groups.q.len() * SHRINK > p.len() {
        return None;
    }
    // Edges below r's total (outer) or above it (inner) leave no rule on
    // the right side of them all.
    let edges: f64 = groups.target.iter().sum();
    if (outer && edges < total) || (!outer && edges > total) {
        return None;
    }
    let potential = Selectable {
        q: &groups.q,
        ..*program.potential
    };
    let grouped = Program {
        name: program.name,
        potential: &potential,
        p: &groups.target,
        bounds: program.bounds,
        stop: program.stop,
        reach: MAX_STEP_THETA,
    };
    // The grouped program's residual bounds the side's (module
    // documentation): it takes the side's whole tolerance.
    let solved = ratio_groups::minimise(&grouped, budget, workspace).ok()?;
    let per_q: Vec<f64> = (solved.marginal.iter().zip(&groups.q))
        .map(|(r, q)| r / q)
        .collect();
    let (mut theta, mut marginal) = (workspace.take(p.len()), workspace.take(p.len()));
    (q.par_iter().zip(p.par_iter()).enumerate())
        .with_min_len(TOKENS_PER_TASK)
        .map(|(y, (&qy, &py))| {
            let group = groups.of_token(y, qy, py);
            (solved.theta[group], qy * per_q[group])
        })
        .unzip_into_vecs(&mut theta, &mut marginal);
    for vector in [solved.theta, solved.marginal] {
        workspace.give(vector);
    }
    Some(Solved {
        theta,
        marginal,
        iterations: solved.iterations,
        out_of_time: solved.out_of_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newton::Potential;
    use crate::thresholds::THETA_LIMIT;

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

    /// The outer and inner programs of an i.i.d. problem (H* of the
    /// closed form), as the solver makes them: each side's q, p, base and
    /// bounds.
    fn sides(p: &[f64], q: &[f64], n: usize) -> [(Vec<f64>, Vec<f64>, f64, Stop); 2] {
        let (target, draft) = (
            mdsd_core::Distribution::from_probs(p.to_vec()).unwrap(),
            mdsd_core::Distribution::from_probs(q.to_vec()).unwrap(),
        );
        let bound =
            mdsd_bounds::optimal_acceptance_iid(&target, &draft, n, Default::default()).unwrap();
        let mut in_h = vec![false; p.len()];
        bound.certificate.iter().for_each(|&y| in_h[y] = true);
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
        let bounds = match stop {
            Stop::Excess => (-THETA_LIMIT, 0.0),
            _ => (0.0, THETA_LIMIT),
        };
        Program {
            name: "test",
            potential: side,
            p,
            bounds,
            stop,
            reach: MAX_STEP_THETA,
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
            for bits in GROUP_RULE_BITS {
                let mut workspace = Workspace::new();
                let total = side.selected_mass();
                let Some(solved) =
                    constant_on_groups(&program, bits, total, &budget, &mut workspace)
                else {
                    continue;
                };
                taken.push(bits);
                let evaluated = side.evaluate(&solved.theta, &mut workspace);
                for (y, (a, b)) in (solved.marginal.iter().zip(&evaluated.marginal)).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-12 * b,
                        "{bits} bits, n {n}, {stop:?}, token {y}: r {a} against {b}"
                    );
                }
                let lost: f64 = (solved.marginal.iter().zip(&side_p))
                    .map(|(r, p)| match stop {
                        Stop::Excess => (r - p).max(0.0),
                        _ => (p - r).max(0.0),
                    })
                    .sum();
                assert!(
                    lost <= tolerance,
                    "{bits} bits, n {n}, {stop:?}: lost {lost:e}"
                );
            }
        }
        taken
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
        for bits in GROUP_RULE_BITS {
            let total = side.selected_mass();
            assert!(constant_on_groups(&program, bits, total, &budget, &mut workspace).is_none());
        }
        let solved = minimise(&program, &budget, &mut workspace).unwrap();
        let lost: f64 = (solved.marginal.iter().zip(&p))
            .map(|(r, p)| (p - r).max(0.0))
            .sum();
        assert!(lost <= 1e-8, "lost {lost:e}");
    }
}
