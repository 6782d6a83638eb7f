//! The tokens of one side and what their clocks determine on each grid,
//! from q alone: the nodes in t that carry P(world), the exact tokens and
//! the tail's c-free parts (`Clocks`), made once per grid and shared by
//! every evaluation.

use super::grids::{CLOCK_LEFT_NODES, Grid, clock_nodes};
use super::polynomials::{
    CLOCK_TAIL_MARGIN, EXTRA_TERMS, Series, absorb, add_power_sums, arrivals_below, clock,
    clock_series, extra_terms, head_cap, powers_of, tail_polynomials, tail_sums,
};
use std::sync::OnceLock;

use crate::potential::Side;

/// A token is in the tail when n q t <= TAIL_REACH at every node in t.
pub(super) const TAIL_REACH: f64 = 1.0;

/// The tokens of one side of a problem with drafts without replacement.
pub(crate) struct WithoutReplacement<'a> {
    /// q of the selectable tokens.
    pub(super) q: &'a [f64],
    /// q of the tokens drafted but never selected.
    pub(super) silent: &'a [f64],
    /// q of the tokens whose drafting leaves the program's world (the
    /// inner program's: all drafts in H).
    pub(super) excluded: &'a [f64],
    pub(super) n: usize,
    /// n q t_max above which a token is an exact factor (`TAIL_REACH`;
    /// the tests set 0, every token exact, to check the tail's series).
    pub(super) tail_reach: f64,
    /// The part of each grid that depends on q alone, made on first use.
    pub(super) clocks: [OnceLock<Clocks>; 2],
    /// P(y ∈ S; world) per selectable token (`inclusion`), made on first use.
    pub(super) inclusion: OnceLock<Vec<f64>>,
    /// The selectable tokens by ascending q (`selectable_by_q`), which
    /// both grids' passes read, made on first use.
    pub(super) sorted: OnceLock<Vec<(f64, Role)>>,
    /// The silent and excluded tokens and their part of each grid's pass
    /// (`OtherTokens`), made on first use, or those of the side whose
    /// tokens this side's groups are (`with_selectable`): every level of
    /// groups shares them.
    pub(super) others: OnceLock<OtherTokens>,
    pub(super) others_of_whole: Option<&'a OtherTokens>,
    /// The whole problem's tokens by ascending q, where the solver ranked
    /// them (`in_order`): both lists above are then read off it.
    pub(super) order: Option<(QOrder<'a>, Side)>,
}

/// A problem's tokens (slots) by ascending q, those of q = 0 left out, and
/// which are on H*: ranked once, beside the closed form that finds H*, so
/// that neither side's potential sorts its tokens (`in_order`).
#[derive(Clone, Copy)]
pub(crate) struct QOrder<'a> {
    pub(crate) slots: &'a [usize],
    pub(crate) q: &'a [f64],
    pub(crate) in_h: &'a [bool],
}

impl<'a> QOrder<'a> {
    /// The slots of q > 0 by ascending q.
    pub(crate) fn rank(q: &[f64]) -> Vec<usize> {
        let mut slots: Vec<usize> = (0..q.len()).filter(|&y| q[y] > 0.0).collect();
        slots.sort_unstable_by(|&x, &y| q[x].total_cmp(&q[y]));
        slots
    }
}

/// The role of a token on H* or not (`in_h`) on a side: the outer side's
/// tokens are those outside H*, H*'s drafted but never selected there; the
/// inner side's are H*'s, and drafting any other leaves its world.
fn role(side: Side, in_h: bool) -> Role {
    match (side, in_h) {
        (Side::Outer, false) | (Side::Inner, true) => Role::Selectable,
        (Side::Outer, true) => Role::Silent,
        (Side::Inner, false) => Role::Excluded,
    }
}

/// What a grid's evaluations share, made from q alone: the nodes in t
/// that carry P(world), the exact tokens and the tail's c-free parts.
pub(super) struct Clocks {
    /// Nodes and weights of the rule in t.
    pub(super) t: Vec<f64>,
    pub(super) weight: Vec<f64>,
    /// P(world) and P(S = 0 in it).
    pub(super) world: f64,
    pub(super) empty: f64,
    /// The selectable tokens whose clocks may ring by the last node (the
    /// head, by descending q), and the tail's, with each tail token's
    /// extra series terms.
    pub(super) head: Vec<usize>,
    pub(super) tail: Vec<usize>,
    pub(super) extra: Vec<usize>,
    /// Per node: how many head tokens are exact factors there (n q t above
    /// `tail_reach`, a prefix of the head; the others join the tail's
    /// series there), s and u of the head tokens (rows of
    /// `head.len()`), the exact silent and excluded tokens' `(U, M)`, and
    /// the survival e^(-t q) of the tail and the head tokens in it.
    pub(super) exact: Vec<usize>,
    pub(super) survival: Vec<f64>,
    pub(super) arrived: Vec<f64>,
    pub(super) background: Vec<(Vec<f64>, Vec<f64>)>,
    pub(super) tail_survival: Vec<f64>,
    /// Σ q^m over the silent tail, m <= n + EXTRA_TERMS.
    pub(super) silent_moments: Vec<f64>,
}

/// The silent and excluded tokens of a side by ascending q, and their
/// part of each grid's clock pass (`OthersOnGrid`): a program over groups
/// of the side's selectable tokens has the same others, whose part would
/// otherwise be summed again at every level, over most of the
/// vocabulary on the outer side (H*'s tokens are silent there).
pub(crate) struct OtherTokens {
    tokens: Vec<(f64, Role)>,
    /// The least q of the side whose tokens these are, its selectable
    /// ones included: the rule in t ends by it (`clock_nodes`), and a
    /// group's q is no less than its least token's, so every level of
    /// groups has these nodes.
    q_least: f64,
    n: usize,
    tail_reach: f64,
    on_grid: [OnceLock<OthersOnGrid>; 2],
}

/// A grid's nodes in t, before its pass keeps those that carry P(world),
/// and the other tokens' tail on each.
pub(super) struct OthersOnGrid {
    t: Vec<f64>,
    weight: Vec<f64>,
    tail: TailMoments,
}

/// Per node in t, the tail of a list of tokens by ascending q (those with
/// n q t <= `tail_reach`, a prefix): its length, Σ q^m over its tokens
/// drafted into the world (z = 1 there) and over its silent ones, and Σ q.
struct TailMoments {
    bound: Vec<usize>,
    open: Vec<Vec<f64>>,
    silent: Vec<Vec<f64>>,
    mass: Vec<f64>,
}

impl TailMoments {
    /// The tails of `tokens` (by ascending q) at the nodes `t`, each
    /// summed from the last node's, the shortest, by the tokens that join
    /// it: one pass of O(len) series terms.
    fn new(tokens: &[(f64, Role)], t: &[f64], n: usize, tail_reach: f64) -> Self {
        let terms = n + EXTRA_TERMS + 1;
        let in_tail = |q: f64, t: f64| n as f64 * q * t <= tail_reach;
        let bound: Vec<usize> = (t.iter())
            .map(|&t| tokens.partition_point(|&(q, _)| in_tail(q, t)))
            .collect();
        let (mut open, mut silent, mut mass) = (vec![0.0; terms], vec![0.0; terms], 0.0);
        let mut next = 0;
        let mut moments = Self {
            bound,
            open: vec![Vec::new(); t.len()],
            silent: vec![Vec::new(); t.len()],
            mass: vec![0.0; t.len()],
        };
        for j in (0..t.len()).rev() {
            let entering = &tokens[next..moments.bound[j].max(next)];
            mass += entering.iter().map(|&(q, _)| q).sum::<f64>();
            let of_role = |keep: fn(Role) -> bool| {
                (entering.iter())
                    .filter(move |&&(_, role)| keep(role))
                    .map(|&(q, _)| q)
            };
            add_power_sums(&mut open, of_role(|role| role != Role::Excluded));
            add_power_sums(&mut silent, of_role(|role| role == Role::Silent));
            next = next.max(moments.bound[j]);
            moments.open[j] = open.clone();
            moments.silent[j] = silent.clone();
            moments.mass[j] = mass;
        }
        moments
    }
}

impl OtherTokens {
    /// The other tokens' part of `grid`'s pass, on the nodes of the side's
    /// least q.
    fn on_grid(&self, grid: Grid) -> &OthersOnGrid {
        self.on_grid[grid.index()].get_or_init(|| self.on_nodes(grid, self.q_least))
    }

    /// The other tokens' part of `grid`'s pass on the nodes of `q_least`.
    fn on_nodes(&self, grid: Grid, q_least: f64) -> OthersOnGrid {
        let (t, weight) = clock_nodes(self.n, q_least, grid.steps(self.n).1, grid.clock_error());
        let tail = TailMoments::new(&self.tokens, &t, self.n, self.tail_reach);
        OthersOnGrid { t, weight, tail }
    }
}

/// How a token's drafting enters the world: selectable (z = e^(-a c)),
/// silent (z = 1) or excluded (z = 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Role {
    Selectable,
    Silent,
    Excluded,
}

impl<'a> WithoutReplacement<'a> {
    pub(crate) fn new(q: &'a [f64], silent: &'a [f64], excluded: &'a [f64], n: usize) -> Self {
        Self {
            q,
            silent,
            excluded,
            n,
            tail_reach: TAIL_REACH,
            clocks: [OnceLock::new(), OnceLock::new()],
            inclusion: OnceLock::new(),
            sorted: OnceLock::new(),
            others: OnceLock::new(),
            others_of_whole: None,
            order: None,
        }
    }

    /// The same potential, `side` of the problem whose tokens `order`
    /// ranks (its q, silent and excluded tokens are that side's, gathered
    /// from `order.q` in slot order).
    pub(crate) fn in_order(self, order: QOrder<'a>, side: Side) -> Self {
        Self {
            order: Some((order, side)),
            ..self
        }
    }

    /// q of the selectable tokens.
    pub(crate) fn q(&self) -> &[f64] {
        self.q
    }

    /// The same side with other selectable tokens (a program over groups
    /// of them), its silent and excluded tokens as they are, and their
    /// part of each grid's pass with them.
    pub(crate) fn with_selectable<'b>(&'b self, q: &'b [f64]) -> WithoutReplacement<'b> {
        WithoutReplacement {
            tail_reach: self.tail_reach,
            others_of_whole: Some(self.others()),
            ..WithoutReplacement::new(q, self.silent, self.excluded, self.n)
        }
    }

    /// The most q of a token in the tail on the fine grid.
    pub(crate) fn most_tail_mass(&self) -> f64 {
        let t_max = self.clocks(Grid::Fine).t.last().copied().unwrap_or(0.0);
        self.tail_reach / (self.n as f64 * t_max)
    }

    /// P(S > 0 in the world): the total of r, whatever theta.
    pub(crate) fn selected_mass(&self) -> f64 {
        let clocks = self.clocks(Grid::Fine);
        clocks.world - clocks.empty
    }

    pub(super) fn clocks(&self, grid: Grid) -> &Clocks {
        self.clocks[grid.index()].get_or_init(|| self.clock_pass(grid))
    }

    /// The selectable tokens by ascending q (of equal q in any order: a
    /// node's split at n q t = `tail_reach` keeps them together).
    pub(super) fn selectable_by_q(&self) -> &[(f64, Role)] {
        self.sorted.get_or_init(|| match self.order {
            Some(order) => of_order(order, |role| role == Role::Selectable),
            None => by_ascending_q(self.q.iter().map(|&q| (q, Role::Selectable))),
        })
    }

    /// The silent and excluded tokens with their roles, by ascending q,
    /// and their part of each grid's pass.
    pub(super) fn others(&self) -> &OtherTokens {
        self.others_of_whole.unwrap_or_else(|| {
            self.others.get_or_init(|| {
                let tokens = match self.order {
                    Some(order) => of_order(order, |role| role != Role::Selectable),
                    None => by_ascending_q(
                        (self.silent.iter().map(|&q| (q, Role::Silent)))
                            .chain(self.excluded.iter().map(|&q| (q, Role::Excluded))),
                    ),
                };
                let q_least = least(self.selectable_by_q()).min(least(&tokens));
                OtherTokens {
                    tokens,
                    q_least,
                    n: self.n,
                    tail_reach: self.tail_reach,
                    on_grid: [OnceLock::new(), OnceLock::new()],
                }
            })
        })
    }

    /// The silent and excluded tokens, by ascending q (`others`).
    #[cfg(test)]
    pub(super) fn other_tokens(&self) -> &[(f64, Role)] {
        &self.others().tokens
    }

    /// The nodes in t of `grid` that carry P(world), and the rest of
    /// `Clocks`. Each node splits the tokens at n q t = `tail_reach`; the
    /// tail's moments are the selectable tokens' (`TailMoments`) plus the
    /// others', which every level of groups shares (`OtherTokens`), so a
    /// pass costs O(selectable) series terms plus the exact tokens.
    pub(super) fn clock_pass(&self, grid: Grid) -> Clocks {
        let n = self.n;
        let series = clock_series(n);
        let others = self.others();
        // A level whose tokens are not groups of the side's (another
        // potential's) may have a smaller q, and its own nodes.
        let selectable = self.selectable_by_q();
        let own_nodes;
        let on_grid = if least(selectable) >= others.q_least {
            others.on_grid(grid)
        } else {
            own_nodes = others.on_nodes(grid, least(selectable));
            &own_nodes
        };
        let (all_t, all_weights) = (&on_grid.t, &on_grid.weight);
        let own = TailMoments::new(selectable, all_t, n, self.tail_reach);
        let tail = &on_grid.tail;
        let sum = |own: &[f64], theirs: &[f64]| -> Vec<f64> {
            own.iter().zip(theirs).map(|(a, b)| a + b).collect()
        };
        // [M]_(n-1) with z = 1 on the world's tokens (P(world)), and with
        // z = 0 on the selectable ones too (P(S = 0)), from the first node
        // on until what the nodes after it can carry is negligible
        // (`arrivals_below`).
        let mut densities = vec![(0.0, 0.0); all_t.len()];
        let mut world_so_far = 0.0;
        for (j, &t) in all_t.iter().enumerate() {
            let (own_head, their_head) =
                (&selectable[own.bound[j]..], &others.tokens[tail.bound[j]..]);
            if own_head.len() + their_head.len() > head_cap(n) {
                break;
            }
            let t_powers = powers_of(t);
            let mass = own.mass[j] + tail.mass[j];
            let survival = (-t * mass).exp();
            let tail_part = |sums: &[f64]| {
                let table: Vec<Series> = (0..=n)
                    .map(|k| std::array::from_fn(|e| sums.get(k + e).copied().unwrap_or(0.0)))
                    .collect();
                let (mut power, mut marked) = (vec![0.0; n], vec![0.0; n]);
                tail_sums(&series, (t, &t_powers), &table, &mut power, &mut marked);
                let (mut u, mut m) = (vec![0.0; n], vec![0.0; n]);
                tail_polynomials(&power, &marked, survival, &mut u, &mut m);
                (u, m)
            };
            let (mut world_u, mut world_m) = tail_part(&sum(&own.open[j], &tail.open[j]));
            let (mut empty_u, mut empty_m) = tail_part(&sum(&own.silent[j], &tail.silent[j]));
            // Each tail clock has rung by t with probability at least
            // q t (1 - q t / 2) >= q t (1 - 1 / 2n) (n q t <= `tail_reach`).
            let mut arrivals = t * mass * (1.0 - 0.5 / n as f64);
            for &(q, role) in own_head.iter().chain(their_head) {
                let (s, arrived) = clock(q, t);
                arrivals += arrived;
                let (world, empty) = match role {
                    Role::Selectable => (arrived, 0.0),
                    Role::Silent => (arrived, arrived),
                    Role::Excluded => (0.0, 0.0),
                };
                absorb(
                    &mut world_u,
                    &mut world_m,
                    s,
                    world,
                    if world > 0.0 { q * s } else { 0.0 },
                );
                absorb(
                    &mut empty_u,
                    &mut empty_m,
                    s,
                    empty,
                    if empty > 0.0 { q * s } else { 0.0 },
                );
            }
            densities[j] = (
                all_weights[j] * world_m[n - 1],
                all_weights[j] * empty_m[n - 1],
            );
            world_so_far += densities[j].0;
            if j >= CLOCK_LEFT_NODES
                && arrivals_below(arrivals, n)
                    <= CLOCK_TAIL_MARGIN * grid.clock_negligible() * world_so_far
            {
                break;
            }
        }
        let whole: f64 = densities.iter().map(|d| d.0).sum();
        let kept: Vec<usize> = (0..all_t.len())
            .filter(|&j| {
                // A node of the left end may weigh less than nothing.
                let share = densities[j].0.abs();
                share > 0.0 && share >= grid.clock_negligible() * whole
            })
            .collect();
        let t: Vec<f64> = kept.iter().map(|&j| all_t[j]).collect();
        let weight: Vec<f64> = kept.iter().map(|&j| all_weights[j]).collect();
        let world = kept.iter().map(|&j| densities[j].0).sum();
        let empty = kept.iter().map(|&j| densities[j].1).sum();
        // The others at the last kept node, whose n q t splits them in
        // `split` as it splits them there; with no node, all in the tail.
        let at_end = match kept.last() {
            Some(&j) => OthersAtEnd {
                exact: &others.tokens[tail.bound[j]..],
                mass: tail.mass[j],
                silent_moments: tail.silent[j].clone(),
            },
            None => OthersAtEnd::all_in_tail(&others.tokens, n),
        };
        self.split(t, weight, world, empty, at_end)
    }

    /// `Clocks` on the kept nodes: the tokens with n q t_max above
    /// `tail_reach` exact, the rest in the tail.
    pub(super) fn split(
        &self,
        t: Vec<f64>,
        weight: Vec<f64>,
        world: f64,
        empty: f64,
        others: OthersAtEnd,
    ) -> Clocks {
        let n = self.n;
        let t_max = t.last().copied().unwrap_or(0.0);
        let reach = |q: f64| n as f64 * q * t_max;
        let exact = |q: f64| reach(q) > self.tail_reach;
        let (mut head, tail): (Vec<usize>, Vec<usize>) =
            (0..self.q.len()).partition(|&y| exact(self.q[y]));
        head.sort_by(|&x, &y| self.q[y].total_cmp(&self.q[x]));
        let exact_at: Vec<usize> = (t.iter())
            .map(|&t| head.partition_point(|&y| n as f64 * self.q[y] * t > self.tail_reach))
            .collect();
        // q of the head tokens from x on, for the survival of those in the
        // tail's series.
        let mut head_after = vec![0.0; head.len() + 1];
        for x in (0..head.len()).rev() {
            head_after[x] = head_after[x + 1] + self.q[head[x]];
        }
        let extra = tail
            .iter()
            .map(|&y| extra_terms(reach(self.q[y])))
            .collect();
        let (survival, arrived) = t
            .iter()
            .flat_map(|&t| head.iter().map(move |&y| clock(self.q[y], t)))
            .unzip();
        // The exact silent and excluded tokens, found once for every node.
        let of_role = |wanted: Role| -> Vec<f64> {
            (others.exact.iter())
                .filter(|&&(_, role)| role == wanted)
                .map(|&(q, _)| q)
                .collect()
        };
        let (exact_silent, exact_excluded) = (of_role(Role::Silent), of_role(Role::Excluded));
        let tail_mass = tail.iter().map(|&y| self.q[y]).sum::<f64>() + others.mass;
        let background = (t.iter())
            .map(|&t| {
                let (mut u, mut m) = (vec![0.0; n], vec![0.0; n]);
                u[0] = 1.0;
                for &q in &exact_silent {
                    let (s, arrived) = clock(q, t);
                    absorb(&mut u, &mut m, s, arrived, q * s);
                }
                for &q in &exact_excluded {
                    absorb(&mut u, &mut m, (-q * t).exp(), 0.0, 0.0);
                }
                (u, m)
            })
            .collect();
        let tail_survival = (t.iter().zip(&exact_at))
            .map(|(&t, &exact)| (-t * (tail_mass + head_after[exact])).exp())
            .collect();
        Clocks {
            t,
            weight,
            world,
            empty,
            head,
            tail,
            extra,
            exact: exact_at,
            survival,
            arrived,
            background,
            tail_survival,
            silent_moments: others.silent_moments,
        }
    }
}

/// The silent and excluded tokens where the clocks' tail ends (the last
/// kept node in t): the exact ones, and the tail's Σ q and Σ q^m over its
/// silent tokens (m <= n + EXTRA_TERMS).
pub(super) struct OthersAtEnd<'t> {
    exact: &'t [(f64, Role)],
    mass: f64,
    silent_moments: Vec<f64>,
}

impl<'t> OthersAtEnd<'t> {
    /// Every one of `tokens` in the tail (a pass that keeps no node).
    fn all_in_tail(tokens: &'t [(f64, Role)], n: usize) -> Self {
        let mut silent_moments = vec![0.0; n + EXTRA_TERMS + 1];
        let silent = tokens.iter().filter(|&&(_, role)| role == Role::Silent);
        add_power_sums(&mut silent_moments, silent.map(|&(q, _)| q));
        Self {
            exact: &[],
            mass: tokens.iter().map(|&(q, _)| q).sum(),
            silent_moments,
        }
    }
}

/// The tokens of the problem's ranking (by ascending q) whose role on
/// `side` `keep` takes.
fn of_order((order, side): (QOrder, Side), keep: impl Fn(Role) -> bool) -> Vec<(f64, Role)> {
    (order.slots.iter())
        .map(|&slot| (order.q[slot], role(side, order.in_h[slot])))
        .filter(|&(_, role)| keep(role))
        .collect()
}

/// The least q of tokens of q > 0 by ascending q (infinite for none).
fn least(tokens: &[(f64, Role)]) -> f64 {
    tokens.first().map_or(f64::INFINITY, |&(q, _)| q)
}

/// The tokens of q > 0 among `tokens`, by ascending q.
fn by_ascending_q(tokens: impl Iterator<Item = (f64, Role)>) -> Vec<(f64, Role)> {
    let mut tokens: Vec<(f64, Role)> = tokens.filter(|&(q, _)| q > 0.0).collect();
    tokens.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    tokens
}
