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
    /// Every token with its role by ascending q (`tokens`), which both
    /// grids' passes read, made on first use.
    pub(super) sorted: OnceLock<Vec<(f64, Role)>>,
    /// The silent and excluded tokens by ascending q, made on first use,
    /// or those of the side whose tokens this side's groups are
    /// (`with_selectable`): every level of groups shares them.
    pub(super) others: OnceLock<Vec<(f64, Role)>>,
    pub(super) others_of_whole: Option<&'a [(f64, Role)]>,
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
    /// of them), its silent and excluded tokens as they are.
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

    pub(super) fn q_least(&self) -> f64 {
        (self.q.iter().chain(self.silent).chain(self.excluded))
            .filter(|&&q| q > 0.0)
            .fold(f64::INFINITY, |m, &q| m.min(q))
    }

    pub(super) fn clocks(&self, grid: Grid) -> &Clocks {
        let index = (grid == Grid::Coarse) as usize;
        self.clocks[index].get_or_init(|| self.clock_pass(grid))
    }

    /// Every token with its q and role, by ascending q (of equal q in any
    /// order: a node's split at n q t = `tail_reach` keeps them together).
    pub(super) fn tokens(&self) -> &[(f64, Role)] {
        self.sorted.get_or_init(|| {
            if let Some((order, side)) = self.order {
                return (order.slots.iter())
                    .map(|&slot| (order.q[slot], role(side, order.in_h[slot])))
                    .collect();
            }
            let selectable = by_ascending_q(self.q.iter().map(|&q| (q, Role::Selectable)));
            let others = self.others();
            let mut tokens = Vec::with_capacity(selectable.len() + others.len());
            let (mut a, mut b) = (selectable.iter().peekable(), others.iter().peekable());
            while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
                tokens.push(if x.0 <= y.0 {
                    *a.next().unwrap()
                } else {
                    *b.next().unwrap()
                });
            }
            tokens.extend(a.chain(b));
            tokens
        })
    }

    /// The silent and excluded tokens with their roles, by ascending q.
    pub(super) fn others(&self) -> &[(f64, Role)] {
        self.others_of_whole.unwrap_or_else(|| {
            self.others.get_or_init(|| {
                // In the problem's order, the non-selectable of all the
                // tokens, which the clock passes read anyway.
                if self.order.is_some() {
                    return (self.tokens().iter())
                        .filter(|&&(_, role)| role != Role::Selectable)
                        .copied()
                        .collect();
                }
                by_ascending_q(
                    (self.silent.iter().map(|&q| (q, Role::Silent)))
                        .chain(self.excluded.iter().map(|&q| (q, Role::Excluded))),
                )
            })
        })
    }

    /// The nodes in t of `grid` that carry P(world), and the rest of
    /// `Clocks`. Each node splits the tokens at n q t = `tail_reach` (the
    /// tail's moments summed from the least q up, node by node from the
    /// last), so a pass costs O(V) series terms plus the exact tokens.
    pub(super) fn clock_pass(&self, grid: Grid) -> Clocks {
        let n = self.n;
        let series = clock_series(n);
        let (all_t, all_weights) =
            clock_nodes(n, self.q_least(), grid.steps(n).1, grid.clock_error());
        let tokens = self.tokens();
        let terms = n + EXTRA_TERMS + 1;
        let in_tail = |q: f64, t: f64| n as f64 * q * t <= self.tail_reach;
        let bound: Vec<usize> = (all_t.iter())
            .map(|&t| tokens.partition_point(|&(q, _)| in_tail(q, t)))
            .collect();
        // Per node, the tail's Σ q^m over tokens drafted into the world
        // (z = 1 there) and over the silent ones, and its q(tail).
        let (mut open, mut silent, mut mass) = (vec![0.0; terms], vec![0.0; terms], 0.0);
        let mut next = 0;
        let mut moments = vec![(Vec::new(), Vec::new(), 0.0); all_t.len()];
        for j in (0..all_t.len()).rev() {
            let entering = &tokens[next..bound[j].max(next)];
            mass += entering.iter().map(|&(q, _)| q).sum::<f64>();
            let of_role = |keep: fn(Role) -> bool| {
                (entering.iter())
                    .filter(move |&&(_, role)| keep(role))
                    .map(|&(q, _)| q)
            };
            add_power_sums(&mut open, of_role(|role| role != Role::Excluded));
            add_power_sums(&mut silent, of_role(|role| role == Role::Silent));
            next = next.max(bound[j]);
            moments[j] = (open.clone(), silent.clone(), mass);
        }
        // [M]_(n-1) with z = 1 on the world's tokens (P(world)), and with
        // z = 0 on the selectable ones too (P(S = 0)), from the first node
        // on until what the nodes after it can carry is negligible
        // (`arrivals_below`).
        let mut densities = vec![(0.0, 0.0); all_t.len()];
        let mut world_so_far = 0.0;
        for (j, &t) in all_t.iter().enumerate() {
            let head = &tokens[bound[j]..];
            if head.len() > head_cap(n) {
                break;
            }
            let t_powers = powers_of(t);
            let survival = (-t * moments[j].2).exp();
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
            let (mut world_u, mut world_m) = tail_part(&moments[j].0);
            let (mut empty_u, mut empty_m) = tail_part(&moments[j].1);
            // Each tail clock has rung by t with probability at least
            // q t (1 - q t / 2) >= q t (1 - 1 / 2n) (n q t <= `tail_reach`).
            let mut arrivals = t * moments[j].2 * (1.0 - 0.5 / n as f64);
            for &(q, role) in head {
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
        self.split(t, weight, world, empty)
    }

    /// `Clocks` on the kept nodes: the tokens with n q t_max above
    /// `tail_reach` exact, the rest in the tail.
    pub(super) fn split(&self, t: Vec<f64>, weight: Vec<f64>, world: f64, empty: f64) -> Clocks {
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
        let (exact_silent, tail_silent): (Vec<f64>, Vec<f64>) =
            self.silent.iter().partition(|&&q| exact(q));
        let (exact_excluded, tail_excluded): (Vec<f64>, Vec<f64>) =
            self.excluded.iter().partition(|&&q| exact(q));
        let tail_mass: f64 = (tail.iter().map(|&y| self.q[y]))
            .chain(tail_silent.iter().chain(&tail_excluded).copied())
            .sum();
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
        let mut silent_moments = vec![0.0; n + EXTRA_TERMS + 1];
        add_power_sums(&mut silent_moments, tail_silent);
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
            silent_moments,
        }
    }
}

/// The tokens of q > 0 among `tokens`, by ascending q.
fn by_ascending_q(tokens: impl Iterator<Item = (f64, Role)>) -> Vec<(f64, Role)> {
    let mut tokens: Vec<(f64, Role)> = tokens.filter(|&(q, _)| q > 0.0).collect();
    tokens.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    tokens
}
