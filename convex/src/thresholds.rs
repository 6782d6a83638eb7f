//! The sizes and bounds at which the solver changes how it works, one name
//! per meaning. Each was chosen on the `convex_grid` benchmark (real rows,
//! top 10 to full vocabulary); `benches/README.md` holds the figures.

/// Programs of at least this many tokens evaluate r, phi and the rows of
/// the Hessian's factor through buckets of theta (module
/// `potential::iid::buckets`), whose node sums cost per bucket; below, tokens
/// rarely share a bucket and go one by one. Bucketed passes run on rayon's
/// pool, so this is at least [`PARALLEL_FROM`].
pub(crate) const BUCKETED_FROM: usize = 8192;

/// Supports of at least this many tokens are solved on rayon's pool, one
/// hand-off for the whole solve; smaller ones make no parallel call and
/// run on the calling thread, where a hand-off to a worker and the wait
/// for it would be a measurable share of the solve.
pub(crate) const PARALLEL_FROM: usize = 8192;

/// Tokens per parallel task.
pub(crate) const TOKENS_PER_TASK: usize = 4096;

/// Programs of at least this many tokens start from a program over groups
/// of tokens by ratio p / q (module `ratio_groups`); smaller ones from the
/// clipped log-ratio model, where the nested programs would cost more than
/// the Newton iterations they save.
pub(crate) const GROUPED_START_FROM: usize = 4096;

/// Vectors of at least this many numbers are kept in a [`Workspace`]
/// between solves; the allocator's bins serve smaller ones without page
/// faults.
///
/// [`Workspace`]: crate::Workspace
pub(crate) const KEPT_FROM: usize = 8192;

/// theta stays within ±THETA_LIMIT in every program of both methods:
/// weights of e^-40 change r by less than 1e-17 of q.
pub(crate) const THETA_LIMIT: f64 = 40.0;
