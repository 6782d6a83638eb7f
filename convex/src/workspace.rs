//! Vectors of a large program's size, kept between solves in an explicit
//! [`Workspace`] that the caller may hold (as clarabel keeps its
//! factorisation memory inside its solver).
//!
//! A full-vocabulary solve makes a dozen vectors of 10^5 numbers that live
//! only while it runs (the programs' q and p, starts, marginals, trial
//! points, the lumped and bucketed copies of an evaluation). glibc's malloc
//! hands a freed heap top of more than a few MB back to the kernel, so
//! without a workspace each solve faults all of them in afresh; with one,
//! they are written again, not faulted in again (the `convex_grid`
//! benchmark at full vocabulary measures it). Vectors below
//! `KEPT_FROM` numbers come from the allocator as usual, whose bins serve
//! them without faults. At most `KEPT` vectors stay, so that a workspace
//! holds at most KEPT times the largest program's size.
//!
//! Own code: allocation-pool crates (`object-pool`, `lifeguard`) hand out
//! guards of one fixed shape; these vectors change length with every
//! program and move between functions as plain `Vec`s.

use std::sync::Mutex;

use crate::thresholds::KEPT_FROM;

/// Vectors kept by one workspace.
const KEPT: usize = 16;

/// Reusable memory for solves of [`ConvexSolver`](crate::solver::ConvexSolver):
/// hold one and pass it to [`ConvexSolver::solve_with`](crate::solver::ConvexSolver::solve_with) to keep a
/// program's vectors between solves. Every method leaves it as it found
/// it apart from the vectors it keeps; it holds no results.
#[derive(Debug, Default)]
pub struct Workspace {
    free: Vec<Vec<f64>>,
    /// The p and q of the problem on the draft's support: they live through
    /// a whole solve, so they are kept apart from the vectors the programs
    /// take and give (among which they would push out the ones a program
    /// needs next).
    problem: (Vec<f64>, Vec<f64>),
    /// The tokens' cells of a program over groups of them (`group_rule`).
    cells: Vec<u32>,
    /// The workspace of a program solved beside this one's, on the pool's
    /// other thread (the two sides of drafts without replacement, each
    /// over up to the whole vocabulary): kept here, so that its vectors
    /// are not faulted in afresh at every solve either.
    beside: Option<Box<Workspace>>,
}

impl Workspace {
    /// An empty workspace; it grows to at most 16 vectors of the largest
    /// program solved with it, with the restricted problem's p and q and
    /// one token's cell each (`u32`), and for drafts without replacement
    /// one such workspace more, for the side solved beside.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty vector with room for `capacity` numbers: the smallest kept
    /// one that has it, else a new one.
    pub(crate) fn take(&mut self, capacity: usize) -> Vec<f64> {
        if capacity < KEPT_FROM {
            return Vec::with_capacity(capacity);
        }
        let best = (0..self.free.len())
            .filter(|&i| self.free[i].capacity() >= capacity)
            .min_by_key(|&i| self.free[i].capacity());
        best.map_or_else(
            || Vec::with_capacity(capacity),
            |i| self.free.swap_remove(i),
        )
    }

    /// Empty vectors with room for `capacity` numbers for the restricted
    /// problem's p and q.
    pub(crate) fn take_problem(&mut self, capacity: usize) -> (Vec<f64>, Vec<f64>) {
        let (mut p, mut q) = std::mem::take(&mut self.problem);
        for vector in [&mut p, &mut q] {
            vector.clear();
            vector.reserve(capacity);
        }
        (p, q)
    }

    /// Keeps the restricted problem's vectors for the next solve.
    pub(crate) fn give_problem(&mut self, p: Vec<f64>, q: Vec<f64>) {
        self.problem = (p, q);
    }

    /// The workspace for a program solved beside this one's; given back
    /// with [`Self::give_beside`] for the next solve.
    pub(crate) fn take_beside(&mut self) -> Workspace {
        self.beside.take().map(|beside| *beside).unwrap_or_default()
    }

    /// Keeps the workspace of the program solved beside this one's.
    pub(crate) fn give_beside(&mut self, beside: Workspace) {
        self.beside = Some(Box::new(beside));
    }

    /// An empty vector of cells with room for `capacity` tokens.
    pub(crate) fn take_cells(&mut self, capacity: usize) -> Vec<u32> {
        let mut cells = std::mem::take(&mut self.cells);
        cells.clear();
        cells.reserve(capacity);
        cells
    }

    /// Keeps the vector of cells for the next solve.
    pub(crate) fn give_cells(&mut self, cells: Vec<u32>) {
        self.cells = cells;
    }

    /// `take(len)` filled with `value`.
    pub(crate) fn filled(&mut self, len: usize, value: f64) -> Vec<f64> {
        let mut vector = self.take(len);
        vector.resize(len, value);
        vector
    }

    /// `x` on `tokens`, in their order.
    pub(crate) fn gather(&mut self, tokens: &[usize], x: &[f64]) -> Vec<f64> {
        let mut gathered = self.take(tokens.len());
        gathered.extend(tokens.iter().map(|&y| x[y]));
        gathered
    }

    /// Keeps a vector for later `take`s, dropping the smallest kept one
    /// when there are more than `KEPT`.
    pub(crate) fn give(&mut self, mut vector: Vec<f64>) {
        if vector.capacity() < KEPT_FROM {
            return;
        }
        vector.clear();
        self.free.push(vector);
        if self.free.len() > KEPT {
            let smallest = (0..self.free.len())
                .min_by_key(|&i| self.free[i].capacity())
                .expect("more than KEPT vectors");
            self.free.swap_remove(smallest);
        }
    }
}

/// The workspaces of a solver shared by reference: each solve takes one
/// (a new one when all are in use) and gives it back, so that solves on
/// several threads never wait for each other and repeated solves reuse
/// memory. It keeps at most `most` workspaces (one per solve that ran at
/// once, up to that); a workspace given back past them is dropped.
#[derive(Debug)]
pub(crate) struct WorkspacePool {
    free: Mutex<Vec<Workspace>>,
    most: usize,
}

impl Default for WorkspacePool {
    fn default() -> Self {
        Self::keeping(usize::MAX)
    }
}

impl WorkspacePool {
    /// A pool that keeps at most `most` workspaces.
    pub(crate) fn keeping(most: usize) -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            most,
        }
    }

    /// Runs `solve` with a workspace of the pool.
    pub(crate) fn with<T>(&self, solve: impl FnOnce(&mut Workspace) -> T) -> T {
        // A poisoned lock only means a solve panicked while taking or
        // giving; the list itself is still consistent.
        let free = || self.free.lock().unwrap_or_else(|e| e.into_inner());
        let mut workspace = free().pop().unwrap_or_default();
        let out = solve(&mut workspace);
        let mut free = free();
        if free.len() < self.most {
            free.push(workspace);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_vectors_come_back_empty_and_large_enough() {
        let mut workspace = Workspace::new();
        let mut vector = workspace.take(2 * KEPT_FROM);
        vector.extend((0..2 * KEPT_FROM).map(|i| i as f64));
        let address = vector.as_ptr();
        workspace.give(vector);
        // A smaller request gets the same memory back, emptied.
        let again = workspace.take(KEPT_FROM);
        assert_eq!(again.as_ptr(), address);
        assert!(again.is_empty() && again.capacity() >= 2 * KEPT_FROM);
        // A larger one gets a new vector.
        workspace.give(again);
        assert!(workspace.take(4 * KEPT_FROM).capacity() >= 4 * KEPT_FROM);
        assert_eq!(workspace.filled(KEPT_FROM, 1.5), vec![1.5; KEPT_FROM]);
    }

    #[test]
    fn the_workspace_beside_keeps_its_vectors() {
        let mut workspace = Workspace::new();
        let mut beside = workspace.take_beside();
        let vector = beside.take(2 * KEPT_FROM);
        let address = vector.as_ptr();
        beside.give(vector);
        workspace.give_beside(beside);
        // The next solve's side beside gets the same memory back.
        let mut again = workspace.take_beside();
        let kept = again.take(KEPT_FROM);
        assert_eq!(kept.as_ptr(), address);
        assert!(workspace.beside.is_none());
    }

    #[test]
    fn at_most_kept_vectors_stay() {
        let mut workspace = Workspace::new();
        for i in 0..2 * KEPT {
            workspace.give(Vec::with_capacity(KEPT_FROM + i));
        }
        assert_eq!(workspace.free.len(), KEPT);
        // The largest stay.
        assert!(
            workspace
                .free
                .iter()
                .all(|v| v.capacity() >= KEPT_FROM + KEPT)
        );
    }

    /// A pool keeping one workspace holds one, however many solves ran
    /// at once.
    #[test]
    fn a_pool_keeps_at_most_its_count() {
        let pool = WorkspacePool::keeping(1);
        pool.with(|_| pool.with(|_| pool.with(|_| ())));
        assert_eq!(pool.free.lock().unwrap().len(), 1);
        let unbounded = WorkspacePool::default();
        unbounded.with(|_| unbounded.with(|_| ()));
        assert_eq!(unbounded.free.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_pool_reuses_its_workspaces() {
        let pool = WorkspacePool::default();
        let address = pool.with(|workspace| {
            let vector = workspace.take(KEPT_FROM);
            let address = vector.as_ptr();
            workspace.give(vector);
            address
        });
        let again = pool.with(|workspace| {
            let vector = workspace.take(KEPT_FROM);
            vector.as_ptr()
        });
        assert_eq!(again, address);
    }
}
