//! Starting points: for large programs a small program over groups of
//! tokens by their ratio p / q, whose Newton system also gives the first
//! step from there (`Program::coarse_direction`); for the others (and the
//! coarsest group level) `model_start`, a clipped log-ratio model of the
//! weights.
//!
//! At a KKT point of either program of the enumeration-free solver,
//! `r_y = q_y g(theta_y)` with one increasing function g per program (the
//! integral of `potential::iid` with q_y factored out), so every free
//! theta_y solves `g(theta_y) = p_y / q_y`: the optimal weights are an
//! increasing function of the ratio alone. Tokens of nearly equal ratio thus
//! get nearly equal weights, and tokens of equal weight enter phi only
//! through their total q, so the program restricted to one weight per group
//! of ratios is the same kind of program over one token per group (draft
//! probability Σ q, target probability Σ p), of a few hundred tokens where
//! the vocabulary has 10^5. Its solution, interpolated in the ratio between
//! neighbouring groups, is within about the squared relative width of a
//! group of the optimum, where Newton converges in one or two steps.
//!
//! Drafts from n different laws (module `independent`) have `r_y = Σ_i
//! q_i(y) g_i(theta_y)`: a free theta_y solves `Σ_i s_i(y) g_i(theta_y) =
//! p_y / q(y)`, q = Σ_i q_i and s_i = q_i / q its shares, so the weights
//! are a function of the ratio p / q and the shares, and the groups are
//! cells of both: a ratio's group split by cells of each law's odds q_i /
//! q_n, of relative width 2^-ODDS_BITS. Odds, not shares in even steps:
//! on real rows the g_i differ by orders of magnitude where one law is
//! sharper than the other (a token the sharp law rarely drafts is
//! selected when it does), so a share of 0.004 and one of 0.02 put a
//! token's weight at opposite ends of the box; a relative step in each
//! odds moves each term s_i g_i by a bounded share of itself. Where the
//! cells of one ratio hold tokens of a span of shares, the grouped program
//! (one weight per cell) misplaces phi_i to first order, and Newton needs
//! more steps at the full vocabulary.
//!
//! Drafts without replacement have r_y = q_y g(theta_y) to first order in
//! q_y for the clocks' tail, whose tokens of one weight enter phi through
//! their total q to that order: their grouped program only starts Newton.
//! A token past `Groupable::most_token_mass` (an exact factor, whose r
//! saturates) is a group of its own, and the others' groups hold at most
//! `Groupable::most_group_mass`, a share of it, so that each is a tail
//! token whose first order is most of it.

use mdsd_core::powi_count;

use crate::budget::Budget;
use crate::error::ConvexError;
use crate::newton::{MAX_STEP_THETA, Potential, Program, Solved};
use crate::potential::iid::Selectable;
use crate::potential::independent::Independent;
use crate::potential::without_replacement::WithoutReplacement;
use crate::thresholds::GROUPED_START_FROM;
use crate::workspace::Workspace;
/// Each coarser level of groups keeps COARSENING bits of the ratio fewer
/// than the one it starts (the finest: `Groupable::GROUP_BITS`).
const COARSENING: u32 = 2;
/// A grouping pays only if it divides the tokens by at least this.
pub(crate) const SHRINK: usize = 2;
/// Mantissa bits of each law's odds against the last law, q_i / q_n, kept
/// in a group's key at the finest level (cells of half an octave); each
/// coarser level keeps fewer, down to whole octaves.
const ODDS_BITS: u32 = 1;
/// Odds are clamped to [2^-16, 2^16]: past them a law's share changes the
/// weights' equation by less than its own 2^-16.
const ODDS_FLOOR: f64 = 1.0 / 65536.0;
const ODDS_CEILING: f64 = 65536.0;
/// Most cells of a grouping's table (ratios x odds of each law): past it,
/// the odds' cells are wider.
const MOST_CELLS: usize = 1 << 20;
/// Most passes of `model_start`'s root search (see there).
const MODEL_START_PASSES: usize = 100;
/// The share of the program's tolerance its grouped program is solved to:
/// tighter than the program itself, so that the grouped residual does not
/// decide whether the interpolated start already meets the tolerance.
const GROUPED_TOLERANCE_SHARE: f64 = 1.0 / 16.0;
/// The share for the coarsest grouped program, the one that starts from
/// the model: the whole tolerance. Its solution, interpolated, is off for
/// the program it starts by the grouping's error, on real rows mostly
/// well above that tolerance, so that its own last Newton iteration, which
/// a 16th would often take, buys that program nothing (the counts of
/// iterations by level are in benches/README.md).
const COARSEST_TOLERANCE_SHARE: f64 = 1.0;
/// Drafts without replacement: the share of a tail token's most q
/// (`WithoutReplacement::most_tail_mass`, n q t_max = 1) that a group of
/// tail tokens holds at most. A group is one token of its total q in the
/// grouped program, right to first order in n q t: groups of the whole
/// reach leave Newton at the full vocabulary a step more on most real
/// rows, and finer ones than 1/16 cost more in the grouped programs than
/// they save (`benches/README.md`).
const TAIL_GROUP_SHARE: f64 = 1.0 / 16.0;
/// Drafts without replacement: the most Newton iterations of a grouped
/// program, which then hands back where it stands. Merged tokens saturate
/// lower than their members (a group is drafted at most once), so where p
/// nears that limit the grouped program's loss stalls above its
/// tolerance, though its weights start the finer level well; the cap is
/// above what the grouped programs that converge take on real rows
/// (`benches/README.md`).
const GROUPED_ITERATIONS_WOR: usize = 15;
/// Drafts without replacement: rounds of `refine_model_start`'s placement
/// of the exact tokens short of p, each a pass over the nodes in c on the
/// coarse grid; a third round moved the coarsest programs' iterations no
/// further on the shared rows (`benches/README.md`).
const HEAVY_PLACEMENT_ROUNDS: usize = 2;
/// Ratios are clamped to [2^-64, 2^64]: p = 0 joins the lowest group.
pub(crate) const RATIO_FLOOR: f64 = 5.421_010_862_427_522e-20;
pub(crate) const RATIO_CEILING: f64 = 1.844_674_407_370_955_2e19;

/// A potential whose program can be solved over groups of tokens: its
/// draft laws on the tokens, and the same potential over other tokens.
pub(crate) trait Groupable: Potential {
    /// Mantissa bits of the ratio kept in a group's key at the finest
    /// level: groups of relative width at most 2^-GROUP_BITS.
    const GROUP_BITS: u32;
    type Over<'b>: Groupable
    where
        Self: 'b;
    /// Each distinct draft law's q on the program's tokens (one for i.i.d.
    /// drafts).
    fn laws(&self) -> Vec<&[f64]>;
    /// Per law, its weight in the ratio's q = Σ counts_i q_i: the number
    /// of drafts drawn from it. One law needs no weight (a ratio's scale
    /// orders the groups alike) and takes 1.
    fn counts(&self) -> &[usize];
    /// This potential over tokens whose laws are `laws`.
    fn over<'b>(&'b self, laws: &'b [Vec<f64>]) -> Self::Over<'b>;
    /// P(S > 0), the total of r whatever theta.
    fn selected_mass(&self) -> f64;

    /// `model_start`'s weights improved where the potential knows where
    /// the model misses (`start` is in the box `bounds`, the program's
    /// target `p`): the model's own by default.
    fn refine_model_start(&self, _start: &mut [f64], _p: &[f64], _bounds: (f64, f64)) {}
    /// The most draft mass of a token that shares its group: past it a
    /// token is a group of its own. Where tokens of one weight enter phi
    /// through their total q alone (i.i.d. and independent drafts), no
    /// limit.
    fn most_token_mass(&self) -> f64 {
        f64::INFINITY
    }
    /// The most draft mass of a group of tokens (a token of its own aside).
    fn most_group_mass(&self) -> f64 {
        f64::INFINITY
    }
    /// The most Newton iterations of a grouped program, after which it
    /// hands back where it stands (it only starts another program).
    const GROUPED_ITERATIONS: usize = usize::MAX;
    /// Whether the model's start is compared with theta = 0
    /// (`Program::minimise_from_better`): where the model can be far off.
    const START_AGAINST_ZERO: bool = false;
}

impl Groupable for Selectable<'_> {
    /// Groups 4x narrower than at 6 bits leave the interpolated start
    /// close enough that Newton at the full vocabulary rarely takes a step
    /// from it, for grouped programs of a few thousand tokens, which cost
    /// less than the steps they save (`benches/README.md`).
    const GROUP_BITS: u32 = 8;
    type Over<'b>
        = Selectable<'b>
    where
        Self: 'b;

    fn laws(&self) -> Vec<&[f64]> {
        vec![self.q]
    }

    fn counts(&self) -> &[usize] {
        &[1]
    }

    fn over<'b>(&'b self, laws: &'b [Vec<f64>]) -> Selectable<'b> {
        Selectable {
            q: &laws[0],
            ..*self
        }
    }

    fn selected_mass(&self) -> f64 {
        let q: f64 = self.q.iter().sum();
        powi_count(self.base + q, self.n) - powi_count(self.base, self.n)
    }
}

impl Groupable for Independent<'_> {
    /// The groups are cells of the ratio and each law's odds: finer ratios
    /// multiply the cells, whose programs (Newton by conjugate gradients)
    /// then cost more than the steps they save at the full vocabulary.
    const GROUP_BITS: u32 = 6;
    type Over<'b>
        = Independent<'b>
    where
        Self: 'b;

    fn laws(&self) -> Vec<&[f64]> {
        self.q.iter().map(Vec::as_slice).collect()
    }

    fn counts(&self) -> &[usize] {
        self.counts
    }

    fn over<'b>(&'b self, laws: &'b [Vec<f64>]) -> Independent<'b> {
        Independent::new(laws, self.counts, self.base, self.flat)
    }

    fn selected_mass(&self) -> f64 {
        Independent::selected_mass(self)
    }
}

/// Drafts without replacement: a tail token (n q t_max <= 1, DESIGN §6b)
/// enters phi through the powers of its ρ = (e^(q t) - 1) z, which to
/// first order in q t are those of one token of the group's total q, so
/// the grouped program of tail tokens is the program to first order (r_y
/// = q_y g(theta_y) + O(q_y² t)). A token that may ring by the last node is
/// an exact factor, whose r saturates: merged into its cell, it would
/// carry its lighter neighbours' weight and they its own, so it is a group
/// of its own, and a cell's tail tokens are split into groups of at most
/// `TAIL_GROUP_SHARE` of the tail's reach, whose first order is most of
/// their r.
impl Groupable for WithoutReplacement<'_> {
    /// As i.i.d. drafts': the tail's weights follow the ratio as theirs do.
    const GROUP_BITS: u32 = 8;
    /// The model r_y = q_y g0 e^(theta_y) fails where every token is
    /// drafted (n = V: r is a softmax, not proportional to q), and Newton
    /// from saturated weights can stall where it converges from 0.
    const START_AGAINST_ZERO: bool = true;
    const GROUPED_ITERATIONS: usize = GROUPED_ITERATIONS_WOR;
    type Over<'b>
        = WithoutReplacement<'b>
    where
        Self: 'b;

    fn laws(&self) -> Vec<&[f64]> {
        vec![self.q()]
    }

    fn counts(&self) -> &[usize] {
        &[1]
    }

    fn over<'b>(&'b self, laws: &'b [Vec<f64>]) -> WithoutReplacement<'b> {
        self.with_selectable(&laws[0])
    }

    fn selected_mass(&self) -> f64 {
        WithoutReplacement::selected_mass(self)
    }

    /// The model's r_y = q_y g0 e^theta does not saturate: the target's
    /// likeliest token, an exact factor of P(y ∈ S; world) near its p,
    /// sits far below its weight, short by 0.17 to 0.54 of acceptance at
    /// the coarsest level of groups on the shared rows, and Newton closes
    /// about half of that distance an iteration (its r is concave in its
    /// weight there). The exact tokens short of p are placed at their own
    /// root with the others fixed (`place_short_head_tokens`), twice, the
    /// second time against the others' r as the first placement left it.
    fn refine_model_start(&self, start: &mut [f64], p: &[f64], (_, hi): (f64, f64)) {
        // The placement only raises weights, to at most `hi`: the start
        // stays in the box.
        for _ in 0..HEAVY_PLACEMENT_ROUNDS {
            if self.place_short_head_tokens(start, p, hi) == 0 {
                break;
            }
        }
    }

    fn most_token_mass(&self) -> f64 {
        self.most_tail_mass()
    }

    fn most_group_mass(&self) -> f64 {
        TAIL_GROUP_SHARE * self.most_tail_mass()
    }
}

/// Minimises `program`, from the solution of a grouped program when it is
/// large, itself solved the same way with coarser groups: each level
/// starts Newton close enough for one or two steps, and only the coarsest
/// starts from `model_start`.
pub(crate) fn minimise<P: Groupable>(
    program: &Program<P>,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<Solved, ConvexError> {
    minimise_from(program, Some(P::GROUP_BITS), budget, workspace)
}

fn minimise_from<P: Groupable>(
    program: &Program<P>,
    bits: Option<u32>,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<Solved, ConvexError> {
    // A side without tokens is solved at once, before its model would make
    // the potential's grids from the other side's tokens.
    if program.p.is_empty() {
        return program.minimise(Vec::new(), budget, workspace);
    }
    let warm = grouping_bits(bits, program.p.len())
        .and_then(|bits| from_groups(program, bits, budget, workspace));
    warm.unwrap_or_else(|| minimise_from_model(program, budget, workspace))
}

/// The bits of the groups a program of `size` tokens starts from, with
/// `bits` left to it: none where it is too small to group (it starts from
/// the model).
fn grouping_bits(bits: Option<u32>, size: usize) -> Option<u32> {
    bits.filter(|_| size >= GROUPED_START_FROM)
}

/// Minimises `program` from `model_start`, as the potential refines it
/// (`Groupable::refine_model_start`), against theta = 0 where the
/// potential asks (`Groupable::START_AGAINST_ZERO`).
fn minimise_from_model<P: Groupable>(
    program: &Program<P>,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Result<Solved, ConvexError> {
    let mut start = model_start(program);
    (program.potential).refine_model_start(&mut start, program.p, program.bounds);
    if P::START_AGAINST_ZERO {
        program.minimise_from_better(start, budget, workspace)
    } else {
        program.minimise(start, budget, workspace)
    }
}

/// A token's place among the groups of one level: its ratio p / q (q =
/// Σ_i q_i), the ratio's key (the top bits of its bit pattern, which for
/// positive floats increases with the value) and the index of its odds'
/// cells (`Odds`).
#[derive(Clone, Copy)]
struct Place {
    ratio: f64,
    mass: f64,
    key: u32,
    odds: u32,
}

/// Cells of the odds q_i / q_n of a token's laws: by the top bits of their
/// bit pattern past `shift` (which for positive floats increases with the
/// value, one octave per exponent), clamped to [ODDS_FLOOR, ODDS_CEILING]
/// (a NaN, 0 / 0 where a token has neither law, to the floor).
#[derive(Clone, Copy)]
struct Odds {
    shift: u32,
    first: usize,
    levels: usize,
}

impl Odds {
    fn new(shift: u32) -> Self {
        let key = |odds: f64| (odds.to_bits() >> shift) as usize;
        let first = key(ODDS_FLOOR);
        Self {
            shift,
            first,
            levels: key(ODDS_CEILING) - first + 1,
        }
    }

    fn level(&self, odds: f64) -> usize {
        let odds = if odds.is_nan() {
            ODDS_FLOOR
        } else {
            odds.clamp(ODDS_FLOOR, ODDS_CEILING)
        };
        (odds.to_bits() >> self.shift) as usize - self.first
    }
}

/// Minimises `program` from the solution of its program over groups with
/// `bits` mantissa bits of the ratio (and `bits - GROUP_BITS + ODDS_BITS`
/// of each law's odds), interpolated to every token, where the grouped
/// program's Newton step for the residual left there, spread over each
/// group's tokens, is the first step tried (`Program::coarse_direction`);
/// the iterations count those of the grouped programs (at every level).
/// `None` when grouping does not shrink the program or the grouped
/// program fails (Newton then starts from `model_start`).
fn from_groups<P: Groupable>(
    program: &Program<P>,
    bits: u32,
    budget: &Budget,
    workspace: &mut Workspace,
) -> Option<Result<Solved, ConvexError>> {
    let (laws, p) = (program.potential.laws(), program.p);
    let counts = program.potential.counts();
    let shift = 52 - bits;
    let most_ratios = ((RATIO_CEILING.to_bits() - RATIO_FLOOR.to_bits()) >> shift) as usize + 1;
    let mut odds = Odds::new(52 - bits.saturating_sub(P::GROUP_BITS - ODDS_BITS));
    // Saturating: past 10 or so laws, 64 levels to the power n - 1 would
    // wrap around to a small count of cells.
    let cells =
        |levels: usize| most_ratios.saturating_mul(levels.saturating_pow(laws.len() as u32 - 1));
    while odds.levels > 1 && cells(odds.levels) > MOST_CELLS {
        odds = Odds::new(odds.shift + 1);
    }
    let levels = if laws.len() > 1 { odds.levels } else { 1 };
    // Each token's place, and below its start, on the calling thread: a
    // pass this light costs less than waking the pool's other workers.
    let places: Vec<Place> = (0..p.len())
        .map(|y| {
            let mass = draft_mass(&laws, counts, y);
            let ratio = p[y] / mass;
            let mut cells = 0;
            let last = laws[laws.len() - 1][y];
            for law in &laws[..laws.len() - 1] {
                cells = cells * levels + odds.level(law[y] / last);
            }
            let key = (ratio.clamp(RATIO_FLOOR, RATIO_CEILING).to_bits() >> shift) as u32;
            Place {
                ratio,
                mass,
                key,
                odds: cells as u32,
            }
        })
        .collect();
    // Cells: the odds' index times the ratio keys present, plus the
    // ratio's key from the least present, so that the groups of one
    // odds cell follow each other in ratio order.
    let (first, last) = (places.iter()).fold((u32::MAX, 0), |(lo, hi), place| {
        (lo.min(place.key), hi.max(place.key))
    });
    let ratios = (last.saturating_sub(first) + 1) as usize;
    let count = ratios * levels.pow(laws.len() as u32 - 1);
    let cell = |place: &Place| place.odds as usize * ratios + (place.key - first) as usize;
    // Per cell one row of Σ p, then Σ q_i: a token's sums share a cache
    // line.
    let width = laws.len() + 1;
    let mut sums = vec![0.0; count * width];
    for (y, place) in places.iter().enumerate() {
        let row = &mut sums[cell(place) * width..][..width];
        row[0] += p[y];
        (row[1..].iter_mut().zip(&laws)).for_each(|(sum, law)| *sum += law[y]);
    }
    let occupied: Vec<usize> = (0..count)
        .filter(|&k| sums[k * width + 1..][..width - 1].iter().any(|&q| q > 0.0))
        .collect();
    let mut index = vec![u32::MAX; count];
    occupied
        .iter()
        .enumerate()
        .for_each(|(i, &k)| index[k] = i as u32);
    let cell_rows: Vec<&[f64]> = occupied
        .iter()
        .map(|&k| &sums[k * width..][..width])
        .collect();
    let groups = Groups::new(
        &cell_rows,
        &places,
        |place| index[cell(place)] as usize,
        (p, &laws, counts),
        (
            program.potential.most_token_mass(),
            program.potential.most_group_mass(),
        ),
    );
    if groups.cell.len() * SHRINK > p.len() {
        return None;
    }
    let grouped_laws: Vec<Vec<f64>> = (1..width)
        .map(|i| groups.rows().map(|row| row[i]).collect())
        .collect();
    let grouped_p: Vec<f64> = groups.rows().map(|row| row[0]).collect();
    let grouped_potential = program.potential.over(&grouped_laws);
    let grouped = Program {
        name: program.name,
        potential: &grouped_potential,
        p: &grouped_p,
        bounds: program.bounds,
        stop: program.stop,
        reach: MAX_STEP_THETA,
    };
    // Solved tighter than the program itself, so that its residual does not
    // decide whether the interpolated start already meets the tolerance;
    // the coarsest to the whole of it.
    let cap = P::GROUPED_ITERATIONS.min(budget.max_iterations);
    let coarser_bits = bits.checked_sub(COARSENING);
    let share = match grouping_bits(coarser_bits, grouped_p.len()) {
        Some(_) => GROUPED_TOLERANCE_SHARE,
        None => COARSEST_TOLERANCE_SHARE,
    };
    let solved = minimise_from(
        &grouped,
        coarser_bits,
        &budget
            .share(share)
            .with_max_iterations(cap)
            .keeping_at_cap(),
        workspace,
    )
    .ok()?;

    // A group's weight belongs to its mean ratio Σ p / Σ q; a token's is
    // interpolated linearly in the ratio towards the neighbouring group
    // of its odds cell on its side: per group, its ratio, its weight and
    // the slopes towards either neighbour (0 where there is none), so that
    // a token costs a lookup and a multiplication.
    let theta = groups.cell_weights(&solved.theta, counts);
    let centre: Vec<f64> = (cell_rows.iter())
        .map(|row| row[0] / row_mass(&row[1..], counts))
        .collect();
    let odds_cell = |i: usize| occupied[i] / ratios;
    let slope = |i: usize, neighbour: usize| -> f64 {
        if neighbour >= theta.len() || odds_cell(neighbour) != odds_cell(i) {
            return 0.0;
        }
        (theta[neighbour] - theta[i]) / (centre[neighbour] - centre[i])
    };
    let lines: Vec<(f64, f64, [f64; 2])> = (0..theta.len())
        .map(|i| {
            (
                centre[i],
                theta[i],
                [slope(i, i.wrapping_sub(1)), slope(i, i + 1)],
            )
        })
        .collect();
    let mut start = workspace.take(p.len());
    start.extend(places.iter().map(|place| {
        let (centre, theta, slopes) = lines[index[cell(place)] as usize];
        let offset = place.ratio - centre;
        theta + slopes[usize::from(offset >= 0.0)] * offset
    }));
    for &(y, group) in &groups.own {
        start[y] = solved.theta[group];
    }
    let group_of = |y: usize| {
        if groups.of_token.is_empty() {
            index[cell(&places[y])] as usize
        } else {
            groups.of_token[y] as usize
        }
    };
    let coarse = |gradient: &[f64], workspace: &mut Workspace| {
        let mut summed = vec![0.0; groups.cell.len()];
        (gradient.iter().enumerate()).for_each(|(y, g)| summed[group_of(y)] += g);
        let step = grouped.coarse_direction(&solved.theta, &summed, budget.max_gap, workspace);
        let mut direction = workspace.take(p.len());
        direction.extend((0..p.len()).map(|y| step[group_of(y)]));
        direction
    };
    let finer = program.minimise_near_coarse(start, coarse, budget, workspace);
    Some(finer.map(|mut finer| {
        finer.iterations += solved.iterations;
        finer
    }))
}

/// The ratio's q of token y: Σ_i counts_i q_i(y), the expected number of
/// drafts on y.
fn draft_mass(laws: &[&[f64]], counts: &[usize], y: usize) -> f64 {
    (laws.iter().zip(counts))
        .map(|(law, &count)| count as f64 * law[y])
        .sum()
}

/// The ratio's q of a group: its row of Σ q_i, weighted as `draft_mass`.
fn row_mass(laws: &[f64], counts: &[usize]) -> f64 {
    (laws.iter().zip(counts))
        .map(|(q, &count)| count as f64 * q)
        .sum()
}

/// The groups of one level: the occupied cells themselves where none
/// holds more than `Groupable::most_group_mass`, else each cell's tokens
/// in turn, a token past `Groupable::most_token_mass` a group of its own
/// and the others in groups of at most the group mass.
struct Groups {
    /// Per group, its row: Σ p then Σ q_i per law (`width` numbers).
    sums: Vec<f64>,
    width: usize,
    /// Per group, its cell (among the occupied cells, `cells` of them).
    cell: Vec<usize>,
    cells: usize,
    /// The tokens that are groups of their own, with their group.
    own: Vec<(usize, usize)>,
    /// Each token's group where the cells are split, else empty (a
    /// token's group is then its cell's).
    of_token: Vec<u32>,
}

impl Groups {
    fn new(
        cell_rows: &[&[f64]],
        places: &[Place],
        cell_of: impl Fn(&Place) -> usize,
        (p, laws, counts): (&[f64], &[&[f64]], &[usize]),
        (most_token_mass, most_mass): (f64, f64),
    ) -> Self {
        let (width, cells) = (laws.len() + 1, cell_rows.len());
        if (cell_rows.iter()).all(|row| row_mass(&row[1..], counts) <= most_mass) {
            return Self {
                sums: cell_rows.concat(),
                width,
                cell: (0..cells).collect(),
                cells,
                own: Vec::new(),
                of_token: Vec::new(),
            };
        }
        let mut groups = Self {
            sums: Vec::new(),
            width,
            cell: Vec::new(),
            cells,
            own: Vec::new(),
            of_token: Vec::with_capacity(places.len()),
        };
        // Per cell, its open group of light tokens and that group's mass.
        let mut open = vec![(usize::MAX, 0.0); cells];
        for (y, place) in places.iter().enumerate() {
            let cell = cell_of(place);
            let (group, held) = &mut open[cell];
            let alone = place.mass > most_token_mass;
            let group = if alone || *group == usize::MAX || *held + place.mass > most_mass {
                groups.sums.extend(std::iter::repeat_n(0.0, width));
                groups.cell.push(cell);
                let fresh = groups.cell.len() - 1;
                if alone {
                    groups.own.push((y, fresh));
                } else {
                    (*group, *held) = (fresh, 0.0);
                }
                fresh
            } else {
                *group
            };
            if !alone {
                *held += place.mass;
            }
            groups.of_token.push(group as u32);
            let row = &mut groups.sums[group * width..][..width];
            row[0] += p[y];
            (row[1..].iter_mut().zip(laws)).for_each(|(sum, law)| *sum += law[y]);
        }
        groups
    }

    /// Each group's row.
    fn rows(&self) -> impl Iterator<Item = &[f64]> {
        self.sums.chunks_exact(self.width)
    }

    /// Each cell's weight from its groups': its one group's where it has
    /// one, else their mean by draft mass over its groups of light tokens
    /// (a token of its own does not speak for its lighter neighbours), over
    /// all of them where it has no other.
    fn cell_weights(&self, theta: &[f64], counts: &[usize]) -> Vec<f64> {
        if self.cell.len() == self.cells {
            let mut weights = vec![0.0; self.cells];
            (self.cell.iter().zip(theta)).for_each(|(&cell, &theta)| weights[cell] = theta);
            return weights;
        }
        let mut own = vec![false; self.cell.len()];
        self.own.iter().for_each(|&(_, group)| own[group] = true);
        // Per cell: Σ mass x theta and Σ mass over light groups, then own.
        let mut sums = vec![[0.0; 4]; self.cells];
        for ((group, &cell), row) in self.cell.iter().enumerate().zip(self.rows()) {
            let mass = row_mass(&row[1..], counts);
            let at = 2 * usize::from(own[group]);
            sums[cell][at] += mass * theta[group];
            sums[cell][at + 1] += mass;
        }
        (sums.iter())
            .map(|s| if s[1] > 0.0 { s[0] / s[1] } else { s[2] / s[3] })
            .collect()
    }
}

/// A start from the model r_y = q_y g0 e^(theta_y) (the selection law of a
/// token of small q, whose weight scales its share; q = Σ_i q_i for
/// several laws), clipped to the box: theta_y = clamp(ln(p_y / (q_y
/// g0)), lo, hi), which makes r_y = p_y for the free tokens, with g0 such
/// that the model's r sums to the program's total, P(S > 0) (r is the law
/// of the selected token, whatever the weights). On real rows the optimum
/// follows it to a few hundredths in theta, except for the few tokens of
/// large q, whose r saturates, and it finds the tokens at the bound (a
/// prefix of the ratio order) at once, where from theta = 0 Newton frees
/// them a few at a time (`convex_grid` reports the iterations).
fn model_start<P: Groupable>(program: &Program<P>) -> Vec<f64> {
    let laws = program.potential.laws();
    let total = program.potential.selected_mass();
    match laws.as_slice() {
        [q] => log_ratio_start(q, program.p, program.bounds, total),
        _ => {
            let counts = program.potential.counts();
            let q: Vec<f64> = (0..program.p.len())
                .map(|y| draft_mass(&laws, counts, y))
                .collect();
            log_ratio_start(&q, program.p, program.bounds, total)
        }
    }
}

/// `model_start` for any draft scheme: the clipped log-ratio model whose r
/// sums to `total`, the program's P(S > 0) (for drafts without
/// replacement too, r_y of a token of small q is q_y times an increasing
/// function of its weight).
fn log_ratio_start(q: &[f64], p: &[f64], (lo, hi): (f64, f64), total: f64) -> Vec<f64> {
    // F(g0) = Σ_y clamp(p_y, g0 q_y e^lo, g0 q_y e^hi) is increasing and
    // piecewise linear in g0, between g0 e^lo Σ q and g0 e^hi Σ q: the root
    // lies in a bracket of width e^(hi - lo), where Newton on F lands on it
    // once it reaches the root's linear piece (a few passes over the tokens
    // where bisection to 1e-6 would take about 25), falling back to bisection in ln g0
    // when a step leaves the bracket, down to 1e-6 (Newton corrects the rest).
    let (low_factor, high_factor) = (lo.exp(), hi.exp());
    // F(g0) and its slope, the q e^lo or q e^hi of the clamped tokens.
    let model_total = |g0: f64| -> (f64, f64) {
        p.iter().zip(q).fold((0.0, 0.0), |(sum, slope), (&p, &q)| {
            let (least, most) = (g0 * q * low_factor, g0 * q * high_factor);
            let clamped = f64::from(u8::from(p <= least)) * low_factor
                + f64::from(u8::from(p >= most)) * high_factor;
            (sum + p.max(least).min(most), slope + clamped * q)
        })
    };
    let q_total: f64 = q.iter().sum();
    let (mut below, mut above) = (
        total / (high_factor * q_total),
        total / (low_factor * q_total),
    );
    // Geometric means as a product of roots: P(S > 0) of an inner program
    // can be as small as q^n (7e-207 at n = 559), where below * above
    // underflows to 0, and a mean of 0 would never move the bracket.
    let mean = |below: f64, above: f64| below.sqrt() * above.sqrt();
    let mut g0 = mean(below, above);
    // Each pass shrinks the bracket; bisection alone takes
    // log2(log(e^(hi - lo)) / 1e-6) passes, about 26 for the widest box,
    // and the cap keeps rounding from making that a loop.
    for _ in 0..MODEL_START_PASSES {
        if above <= below * (1.0 + 1e-6) {
            break;
        }
        let (value, slope) = model_total(g0);
        if (value - total).abs() <= 1e-14 * total {
            break;
        }
        if value < total {
            below = g0;
        } else {
            above = g0;
        }
        let newton = g0 + (total - value) / slope;
        g0 = if newton > below && newton < above {
            newton
        } else {
            mean(below, above)
        };
    }
    // p = 0 goes to the lower bound whatever g0: a P(S > 0) that underflows
    // (q(H)^n below 1e-308, from n = 841 at q(H) = 0.43) leaves g0 = 0,
    // where ln(0 / 0) would be NaN.
    p.iter()
        .zip(q)
        .map(|(&p, &q)| {
            if p > 0.0 {
                (p / (q * g0)).ln().clamp(lo, hi)
            } else {
                lo
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::newton::Stop;

    /// The model's r, clamp(p_y, g0 q_y e^lo, g0 q_y e^hi) at the start's
    /// g0, sums to P(S > 0) (to the bracket's relative 1e-6 in g0, which
    /// bounds the sum's relative error by the same), and the start lies in
    /// the box: inner side
    /// (theta >= 0, nothing else drafted) and outer side (theta <= 0, H*
    /// drafted but never selected).
    #[test]
    fn model_start_matches_the_selection_total() {
        let q: Vec<f64> = (1..=50).map(|i| (i % 9 + 1) as f64 / 500.0).collect();
        let shape: Vec<f64> = (1..=50).map(|i| ((i * 7) % 11) as f64).collect();
        // At the optimum r >= p on the inner side (r = p where free) and
        // r <= p on the outer side, so p's mass is below, or above, r's.
        for (bounds, base, n, share) in [((0.0, 40.0), 0.0, 4, 0.8), ((-40.0, 0.0), 0.3, 8, 1.25)] {
            let total = (base + q.iter().sum::<f64>()).powi(n as i32) - base.powi(n as i32);
            let scale = share * total / shape.iter().sum::<f64>();
            let p: Vec<f64> = shape.iter().map(|x| x * scale).collect();
            let side = Selectable { q: &q, base, n };
            let program = Program {
                name: "test",
                potential: &side,
                p: &p,
                bounds,
                stop: Stop::ProjectedGradient,
                reach: MAX_STEP_THETA,
            };
            let start = model_start(&program);
            assert!(start.iter().all(|t| (bounds.0..=bounds.1).contains(t)));
            // r_y = q_y g0 e^theta_y is p_y on a free token: g0 from one.
            let free = start
                .iter()
                .position(|&t| t > bounds.0 && t < bounds.1)
                .expect("a free token");
            let g0 = p[free] / (q[free] * start[free].exp());
            let model: f64 = start.iter().zip(&q).map(|(t, q)| q * g0 * t.exp()).sum();
            assert!((model - total).abs() <= 1e-6 * total, "{model} vs {total}");
        }
    }

    /// A program short of its tolerance at its iteration cap fails, and
    /// hands back where it stands (out of time, moved from its start) on a
    /// budget that keeps it, as a grouped program's does.
    #[test]
    fn a_program_at_its_cap_fails_or_is_kept() {
        let q: Vec<f64> = (1..=50).map(|i| (i % 9 + 1) as f64 / 255.0).collect();
        let p: Vec<f64> = (1..=50)
            .map(|i| ((i * 7) % 11 + 1) as f64 / 323.0)
            .collect();
        let side = Selectable {
            q: &q,
            base: 0.0,
            n: 4,
        };
        let program = test_program(&side, &p, (0.0, 40.0));
        let capped = Budget::default().with_max_gap(1e-12).with_max_iterations(1);
        let mut workspace = Workspace::new();
        let start = vec![0.0; p.len()];
        assert!(matches!(
            program.minimise(start.clone(), &capped, &mut workspace),
            Err(ConvexError::IterationCap { .. })
        ));
        let kept = program
            .minimise(start.clone(), &capped.keeping_at_cap(), &mut workspace)
            .unwrap();
        assert_eq!(kept.iterations, 1);
        assert!(kept.out_of_time);
        assert_ne!(kept.theta, start);
    }

    /// Both programs of drafts without replacement over 20000 tokens, four
    /// of them most of q (n = 4, H the tokens of least ratio holding half
    /// of q), with tokens heavy enough to ring by the last node (groups of
    /// their own): `assert_grouped_start_agrees`.
    #[test]
    fn drafts_without_replacement_start_from_groups() {
        let v = 20_000;
        // A few tokens of most of the mass, as on real rows, of low ratio
        // (0 and 4, in H) and high (1 and 5).
        let draft: Vec<f64> = (0..v)
            .map(|y| {
                logit(y, 0.618_033_988_7) + [7.0, 6.0, 0.0, 0.0, 5.0, 4.0].get(y).unwrap_or(&0.0)
            })
            .collect();
        let q = softmax(draft.clone());
        let p = softmax(
            (0..v)
                .map(|y| draft[y] - logit(y, 0.754_877_666_2) / 14.0)
                .collect(),
        );
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| (p[a] / q[a]).total_cmp(&(p[b] / q[b])));
        let mut in_h = vec![false; v];
        let mut held = 0.0;
        for &y in &order {
            if held >= 0.5 {
                break;
            }
            in_h[y] = true;
            held += q[y];
        }
        let side = |inner: bool| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
            let (mut own_q, mut own_p, mut other) = (Vec::new(), Vec::new(), Vec::new());
            for y in 0..v {
                if in_h[y] == inner {
                    own_q.push(q[y]);
                    own_p.push(p[y]);
                } else {
                    other.push(q[y]);
                }
            }
            (own_q, own_p, other)
        };
        for inner in [true, false] {
            let (own_q, own_p, other) = side(inner);
            let potential = if inner {
                WithoutReplacement::new(&own_q, &[], &other, 4)
            } else {
                WithoutReplacement::new(&own_q, &other, &[], 4)
            };
            let heaviest = own_q.iter().fold(0.0f64, |m, &q| m.max(q));
            assert!(
                heaviest > potential.most_token_mass(),
                "inner {inner}: {heaviest:e} vs {:e}",
                potential.most_token_mass()
            );
            let bounds = if inner { (0.0, 40.0) } else { (-40.0, 0.0) };
            let program = test_program(&potential, &own_p, bounds);
            assert_grouped_start_agrees(&program, &format!("inner {inner}"));
        }
    }

    /// Programs of drafts from two laws (one draft's logits at
    /// temperatures 0.7 and 1.3) and from three (a third at temperature 1,
    /// cut to its top 5000 tokens: odds of 0 and 0 / 0) over 20000 tokens,
    /// large enough to be grouped by ratio and odds:
    /// `assert_grouped_start_agrees`.
    #[test]
    fn independent_drafts_start_from_groups() {
        let v = 20_000;
        let draft: Vec<f64> = (0..v).map(|y| logit(y, 0.618_033_988_7)).collect();
        let sharp = softmax(draft.iter().map(|l| l / 0.7).collect());
        let flat = softmax(draft.iter().map(|l| l / 1.3).collect());
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| draft[b].total_cmp(&draft[a]));
        let mut top = vec![f64::NEG_INFINITY; v];
        order[..5000].iter().for_each(|&y| top[y] = draft[y]);
        let cut = softmax(top);
        // The target's logits the draft's within a nat (the shared rows'
        // draft is a smaller model of the same family).
        let p = softmax(
            (0..v)
                .map(|y| draft[y] - logit(y, 0.754_877_666_2) / 14.0)
                .collect(),
        );
        for laws in [vec![sharp.clone(), flat.clone()], vec![sharp, cut, flat]] {
            let base = vec![0.0; laws.len()];
            let ones = vec![1; laws.len()];
            let potential = Independent::new(&laws, &ones, &base, true);
            let program = test_program(&potential, &p, (0.0, 40.0));
            assert_grouped_start_agrees(&program, &format!("{} laws", laws.len()));
        }
    }

    /// Quasi-random logits (golden-ratio sequences) spread over 14 nats.
    fn logit(y: usize, spin: f64) -> f64 {
        -14.0 * (y as f64 * spin).fract()
    }

    fn softmax(x: Vec<f64>) -> Vec<f64> {
        let total: f64 = x.iter().map(|x| x.exp()).sum();
        x.iter().map(|x| x.exp() / total).collect()
    }

    fn test_program<'a, P: Potential>(
        potential: &'a P,
        p: &'a [f64],
        bounds: (f64, f64),
    ) -> Program<'a, P> {
        Program {
            name: "test",
            potential,
            p,
            bounds,
            stop: Stop::ProjectedGradient,
            reach: MAX_STEP_THETA,
        }
    }

    /// The grouped start is taken, and Newton from it meets the tolerance
    /// (the projected gradient's l1 norm) with the r that Newton reaches
    /// from the model's start (compared with theta = 0 where the potential
    /// asks), to twice the tolerance in l1 (each r is within it of p on
    /// the free tokens).
    fn assert_grouped_start_agrees<P: Groupable>(program: &Program<P>, case: &str) {
        let tolerance = 1e-8;
        let budget = Budget::default()
            .with_max_gap(tolerance)
            .with_max_iterations(100);
        let mut workspace = Workspace::new();
        let grouped = from_groups(program, P::GROUP_BITS, &budget, &mut workspace)
            .unwrap_or_else(|| panic!("{case}: no grouped start"))
            .unwrap();
        let direct = minimise_from_model(program, &budget, &mut workspace).unwrap();
        let apart: f64 = (grouped.marginal.iter().zip(&direct.marginal))
            .map(|(a, b)| (a - b).abs())
            .sum();
        assert!(apart <= 2.0 * tolerance, "{case}: r apart by {apart:e}");
    }
}
