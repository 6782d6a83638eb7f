//! Row evaluation, what `mdsd eval` and Python's `mdsd.evaluate` compute:
//! alpha* of each draft scheme and n, and the acceptance of each verifier
//! (exact where it has a closed form, else sampled with a 99% interval),
//! on every row of an [`Input`] (a window at a time where the file
//! streams) or of rows in memory. A row that fails at some stage is
//! recorded with its stage and error and its values are NaN, unless the
//! request is strict. A stop ([`Progress`]), asked for before each window
//! and each row's problem, ends the evaluation with [`Error::is_stop`].

use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;

use std::ops::Range;

use crate::core::{Progress, Side};
use crate::error::{Error, SolveError};
use crate::input::{Input, InputReport};
use crate::logits::{Backend, Layout, LogitsError, Matrix, Pairs, RowSelection, builtin_sample};
use crate::verify::{VerifierKind, VerifyError};
use crate::{ConvexSolver, Distribution, DraftScheme, Problem, SchemeKind};

/// What to evaluate on every row.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    /// Numbers of drafts.
    pub ns: Vec<usize>,
    /// Draft schemes for alpha*.
    pub schemes: Vec<SchemeKind>,
    /// Verifiers to rate, each on the scheme it is rated on (`name` or
    /// `name@scheme`, [`verifier_scheme`]).
    pub verifiers: Vec<(VerifierKind, SchemeKind)>,
    /// Draws per row and n for sampled verifiers.
    pub samples: u64,
    /// Seed of the sampled verifiers: row r of the selection uses seed + r.
    pub seed: u64,
    /// Stop at the first row that fails.
    pub strict: bool,
}

impl EvalRequest {
    /// Refuses what would fail every row, before any is read: no n or
    /// n = 0, no draw, hub drafts, transforms that cannot apply, verifiers
    /// past their draft count.
    pub fn check(&self, input: &Input) -> Result<(), Error> {
        let usage = |m: String| Error::Usage(m);
        if self.ns.is_empty() || self.ns.contains(&0) {
            return Err(usage("--n takes numbers of drafts of at least 1".into()));
        }
        if self.schemes.is_empty() && self.verifiers.is_empty() {
            return Err(usage(
                "nothing to evaluate: name a draft scheme (--schemes) or a verifier (--verifiers)"
                    .into(),
            ));
        }
        if self.samples == 0 {
            return Err(Error::Setting {
                flag: "--samples",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        if self.schemes.contains(&SchemeKind::Hub) {
            return Err(usage(
                "--schemes hub: an evaluation draws iid, wor, greedy, argmax, top or independent \
                 drafts"
                    .into(),
            ));
        }
        input.check_transforms()?;
        if !self.verifiers.is_empty() {
            for &n in &self.ns {
                crate::verify::check_verifier_drafts(n)?;
            }
        }
        Ok(())
    }
}

/// An evaluation's results: per scheme and verifier a `rows x ns` matrix,
/// what was read, and the rows that failed (the first failure of each, in
/// row order).
pub struct Evaluation {
    pub input: InputReport,
    /// The data in a line: its source, rows and vocabulary.
    pub described: String,
    pub schemes: Vec<SchemeResult>,
    pub verifiers: Vec<VerifierResult>,
    pub failures: Vec<Failure>,
}

impl Evaluation {
    /// The stages (a scheme's or a verifier's column at one n) at which
    /// every row failed, each with the first row's error there: no number
    /// came out of them, and their mean is none.
    pub fn failed_stages(&self, ns: &[usize]) -> Vec<(String, String)> {
        let empty_columns = |m: &Matrix| -> Vec<usize> {
            (0..m.cols())
                .filter(|&j| m.rows() > 0 && m.iter_rows().all(|row| row[j].is_nan()))
                .collect()
        };
        // A stage's empty columns by their n: "wor (n = 1, 2)".
        let named = |stage: String, columns: Vec<usize>| {
            let ns: Vec<String> = (columns.iter())
                .map(|&j| ns.get(j).copied().unwrap_or(0).to_string())
                .collect();
            (!columns.is_empty()).then(|| (stage, format!("n = {}", ns.join(", "))))
        };
        let stages = (self.schemes.iter())
            .filter_map(|s| named(s.scheme.name().to_string(), empty_columns(&s.alpha)))
            .chain(
                (self.verifiers.iter())
                    .filter_map(|v| named(v.label(), empty_columns(&v.acceptance))),
            );
        stages
            .map(|(stage, at)| {
                let error = (self.failures.iter())
                    .find(|f| f.stage == stage)
                    .or(self.failures.first())
                    .map_or_else(String::new, |f| f.error.clone());
                (format!("{stage} ({at})"), error)
            })
            .collect()
    }
}

/// Evaluates the rows `input` selects (the built-in sample where it names
/// none), a window of about `WINDOW_BYTES` at a time: read from the file
/// where it streams, cut from memory otherwise. `progress` counts rows
/// when streamed, draws otherwise (the run starts it with its total), and
/// is asked before each window, each row's problem and each task of
/// sampled draws whether to stop. A file of top-k entries only is refused
/// with `LogitsError::TopKOnly`.
pub fn evaluate(
    input: &Input,
    request: &EvalRequest,
    backend: &dyn Backend,
    progress: &dyn Progress,
) -> Result<Evaluation, Error> {
    request.check(input)?;
    let failures = Failures::new(request.strict, input.first_row());
    let Some((reader, rows)) = input.streamed()? else {
        let pairs = if input.given() {
            input.read()?
        } else {
            input.select(builtin_sample()?)?
        };
        return evaluate_rows(&pairs, input, request, backend, progress, failures);
    };
    let cols = reader.shape().last().copied().unwrap_or(1);
    // Progress in rows: the windows are alike, so the ETA holds.
    progress.start(rows.len() as u64);
    let read = |window: Range<usize>| -> Result<Pairs, Error> {
        Ok(reader.read(rows.start + window.start..rows.start + window.end)?)
    };
    let (schemes, verifiers) = evaluate_windows(
        rows.len(),
        cols,
        &read,
        Windowed {
            input,
            request,
            backend,
            failures: &failures,
        },
        &StopOnly(progress),
        &|rows| progress.advance(rows),
    )?;
    Ok(Evaluation {
        input: input.streamed_report(&reader, &rows),
        described: format!("{} ({} rows, V = {})", reader.source(), rows.len(), cols),
        schemes,
        verifiers,
        failures: failures.into_first_per_row(),
    })
}

/// Evaluates rows in memory (`input` gives their transforms and draft
/// laws, and numbers them from its first row), a window at a time.
/// `progress` counts draws: a sampled verifier's row and n counts the
/// request's samples, each exact one as much, done at once.
pub fn evaluate_pairs(
    pairs: &Pairs,
    input: &Input,
    request: &EvalRequest,
    backend: &dyn Backend,
    progress: &dyn Progress,
) -> Result<Evaluation, Error> {
    request.check(input)?;
    let failures = Failures::new(request.strict, input.first_row());
    evaluate_rows(pairs, input, request, backend, progress, failures)
}

fn evaluate_rows(
    pairs: &Pairs,
    input: &Input,
    request: &EvalRequest,
    backend: &dyn Backend,
    progress: &dyn Progress,
    failures: Failures,
) -> Result<Evaluation, Error> {
    let units = (request.schemes.len() as u64).saturating_add(
        (request.verifiers.len() as u64).saturating_mul((request.ns.len() * pairs.rows()) as u64),
    );
    progress.start(units.saturating_mul(request.samples));
    let cut = |window: Range<usize>| -> Result<Pairs, Error> {
        Ok(pairs.select(RowSelection {
            first: window.start,
            count: Some(window.len()),
        })?)
    };
    let (schemes, verifiers) = evaluate_windows(
        pairs.rows(),
        pairs.target.cols(),
        &cut,
        Windowed {
            input,
            request,
            backend,
            failures: &failures,
        },
        progress,
        &|_| {},
    )?;
    Ok(Evaluation {
        input: input.report(pairs),
        described: describe(pairs),
        schemes,
        verifiers,
        failures: failures.into_first_per_row(),
    })
}

/// A run's stop requests without its counts: the windows of a streamed
/// file count rows, not the draws within them.
struct StopOnly<'a>(&'a dyn Progress);

impl Progress for StopOnly<'_> {
    fn stop_requested(&self) -> bool {
        self.0.stop_requested()
    }

    fn may_stop(&self) -> bool {
        self.0.may_stop()
    }
}

/// What every window of an evaluation shares.
#[derive(Clone, Copy)]
struct Windowed<'a> {
    input: &'a Input,
    request: &'a EvalRequest,
    backend: &'a dyn Backend,
    failures: &'a Failures,
}

/// The results of `rows` rows of `cols` entries, a window of about
/// `WINDOW_BYTES` and `WINDOW_WORK` at a time (`window(range)` gives its pairs),
/// joined in row order. `progress` is asked before each window whether to
/// stop, and passed down to each; `window_done(rows)` follows each.
fn evaluate_windows(
    rows: usize,
    cols: usize,
    window: &dyn Fn(Range<usize>) -> Result<Pairs, Error>,
    shared: Windowed,
    progress: &dyn Progress,
    window_done: &dyn Fn(u64),
) -> Result<(Vec<SchemeResult>, Vec<VerifierResult>), Error> {
    if rows == 0 {
        return Err(Error::Usage("no rows to evaluate".into()));
    }
    let Windowed {
        input,
        request,
        backend,
        failures,
    } = shared;
    // Bounded in memory, and in work where the caller may stop the run
    // (a stop waits for one window), with a row for every thread of the
    // pool however large a row.
    let cols = cols.max(1);
    let stages = (request.schemes.len() + request.verifiers.len()) * request.ns.len();
    let work = match progress.may_stop() {
        true => WINDOW_WORK / (cols * stages.max(1)),
        false => usize::MAX,
    };
    let size = (WINDOW_BYTES / (16 * cols))
        .min(work)
        .max(rayon::current_num_threads());
    let mut results: Option<(Vec<SchemeResult>, Vec<VerifierResult>)> = None;
    for start in (0..rows).step_by(size) {
        progress.check_stop().map_err(VerifyError::from)?;
        let end = rows.min(start + size);
        let pairs = window(start..end)?;
        check_draft_laws(&pairs, input, request)?;
        let window_failures = Failures {
            first_row: failures.first_row + start,
            ..failures.empty_like()
        };
        let done = evaluate_window(
            &pairs,
            input,
            request,
            backend,
            &window_failures,
            progress,
            start,
        )?;
        failures.absorb(window_failures);
        results = Some(match results {
            None => done,
            Some(before) => joined(before, done)?,
        });
        window_done((end - start) as u64);
    }
    Ok(results.expect("rows is at least 1"))
}

/// A row that could not be evaluated at some stage, and why.
#[derive(Debug, Clone)]
pub struct Failure {
    pub row: usize,
    pub stage: String,
    pub error: String,
}

/// Rows that fail: when strict the first ends the evaluation; otherwise
/// each is recorded and its values are NaN, which the means leave out. A
/// stop is no failure: it ends the evaluation, strict or not.
struct Failures {
    strict: bool,
    /// The number of the first row selected, for the rows recorded.
    first_row: usize,
    list: Mutex<Vec<Failure>>,
}

impl Failures {
    fn new(strict: bool, first_row: usize) -> Self {
        Self {
            strict,
            first_row,
            list: Mutex::new(Vec::new()),
        }
    }

    /// A `rows x width` matrix from per-row results, failed rows NaN.
    fn gather(
        &self,
        stage: &str,
        width: usize,
        rows: Vec<Result<Vec<f64>, Error>>,
    ) -> Result<Matrix, Error> {
        let mut values = Vec::with_capacity(rows.len());
        for (r, row) in rows.into_iter().enumerate() {
            match row {
                Ok(row) => values.push(row),
                Err(e) if self.strict || e.is_stop() => return Err(e),
                Err(e) => {
                    // The row is recorded here: a batch error's own row
                    // number (0 of a one-row batch) would mislead.
                    let error = match &e {
                        Error::Logits(inner) => match inner.as_ref() {
                            LogitsError::Bound { source, .. } => source.to_string(),
                            other => other.to_string(),
                        },
                        other => other.to_string(),
                    };
                    let failure = Failure {
                        row: self.first_row + r,
                        stage: stage.to_string(),
                        error,
                    };
                    self.list
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(failure);
                    values.push(vec![f64::NAN; width]);
                }
            }
        }
        Ok(Matrix::from_rows(&values)?)
    }

    /// A batch's result; where the batch failed (and not --strict), each
    /// of `rows` rows again alone by `one`, so that one bad row does not
    /// hide the others.
    fn batch_or_rows(
        &self,
        stage: &str,
        rows: usize,
        width: usize,
        batch: Result<Matrix, Error>,
        one: impl Fn(usize) -> Result<Vec<f64>, Error>,
    ) -> Result<Matrix, Error> {
        match batch {
            Ok(matrix) => Ok(matrix),
            Err(e) if self.strict || e.is_stop() => Err(e),
            // Row by row in turn: the backend batches, and need not be Sync.
            Err(_) => self.gather(stage, width, (0..rows).map(one).collect()),
        }
    }

    /// No failure yet, the same strictness, for a window's rows.
    fn empty_like(&self) -> Self {
        Self {
            strict: self.strict,
            first_row: self.first_row,
            list: Mutex::new(Vec::new()),
        }
    }

    /// Takes a window's failures in.
    fn absorb(&self, window: Failures) {
        let more = window
            .list
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (self.list.lock().unwrap_or_else(PoisonError::into_inner)).extend(more);
    }

    /// Every failure, one per row (its first), in row order.
    fn into_first_per_row(self) -> Vec<Failure> {
        let mut list = self
            .list
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        list.sort_by_key(|f| f.row);
        list.dedup_by_key(|f| f.row);
        list
    }
}

/// Row `r` of `m` as a matrix of its own.
fn single_row(m: &Matrix, r: usize) -> Result<Matrix, Error> {
    Ok(Matrix::new(1, m.cols(), m.row(r).to_vec())?)
}

/// alpha* of one scheme: `rows x ns`.
pub struct SchemeResult {
    pub scheme: SchemeKind,
    pub alpha: Matrix,
}

/// One verifier's acceptance: `rows x ns`.
pub struct VerifierResult {
    pub kind: VerifierKind,
    pub scheme: SchemeKind,
    /// "exact" (a closed form) or "sampled".
    pub method: &'static str,
    pub acceptance: Matrix,
    /// Per row and n, the Wilson 99% interval of a sampled acceptance
    /// (NaN where the acceptance is exact or the row failed).
    pub interval_low: Matrix,
    pub interval_high: Matrix,
}

impl VerifierResult {
    /// The verifier's name, with `@scheme` where it is rated on another
    /// scheme than its default ([`VerifierKind::rated_scheme`]).
    pub fn label(&self) -> String {
        match self.kind.rated_scheme() == Some(self.scheme) {
            true => self.kind.name().to_string(),
            false => format!("{}@{}", self.kind, self.scheme.name()),
        }
    }

    /// Whether the sampled mean of column `j` lies above the mean alpha* of
    /// its scheme (when that scheme was evaluated) by less than its 99%
    /// half-width: sampling noise, to be shown as such rather than as a
    /// verifier beating the optimum.
    pub fn above_alpha_within_interval(
        &self,
        j: usize,
        draws: u64,
        schemes: &[SchemeResult],
    ) -> bool {
        let Some(h) = self.mean_half_width(j, draws) else {
            return false;
        };
        let mean = column_mean(&self.acceptance, j);
        (schemes.iter().find(|s| s.scheme == self.scheme))
            .map(|s| column_mean(&s.alpha, j))
            .is_some_and(|alpha| mean > alpha && mean - h <= alpha)
    }

    /// The 99% half-width of the mean of column `j` over the rows that
    /// did not fail, where the acceptances are sampled: each row's
    /// variance a (1 - a) / draws, the rows independent, a normal interval
    /// of the mean. `None` for exact acceptances.
    pub fn mean_half_width(&self, j: usize, draws: u64) -> Option<f64> {
        if self.method != "sampled" {
            return None;
        }
        let values: Vec<f64> = (self.acceptance.iter_rows().map(|row| row[j]))
            .filter(|x| !x.is_nan())
            .collect();
        let variance: f64 = values.iter().map(|a| a * (1.0 - a) / draws as f64).sum();
        Some(crate::verify::Z_99 * variance.sqrt() / values.len() as f64)
    }
}

/// What rows of a streamed file a window of an evaluation holds, in bytes
/// of f64 of both sides: a file larger than memory passes in bounded
/// memory.
const WINDOW_BYTES: usize = 32 << 20;

/// How much work a window of a run that may be stopped holds at most, in
/// entries of a row times the stages (scheme or verifier, and n) each goes
/// through: at the tens of nanoseconds the closed forms and convex solves
/// cost per entry and stage, a window ends well within a second on two
/// threads, and a stop is heard within one.
const WINDOW_WORK: usize = 1 << 22;

/// Several draft laws serve independent drafts only: the other schemes
/// draw from the first draft row at the draft's own transform.
fn check_draft_laws(pairs: &Pairs, input: &Input, request: &EvalRequest) -> Result<(), Error> {
    let verifiers = &request.verifiers;
    let laws = input.draft_laws(1 + pairs.more_drafts.len())?.len();
    let independent = (request.schemes.iter())
        .chain(verifiers.iter().map(|(_, scheme)| scheme))
        .any(|&scheme| scheme == SchemeKind::Independent);
    if laws == 1 || independent {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{laws} draft laws (-q repeated, --draft-arrays, --draft-temperatures) serve independent \
         drafts only: add independent to --schemes or rate a verifier on it (`khisti@independent`)"
    )))
}

/// alpha* of every scheme and the rating of every verifier on the rows of
/// `pairs`, whose first is `offset` rows into the selection (the sampled
/// verifiers' seeds count from the selection's first row).
fn evaluate_window(
    pairs: &Pairs,
    input: &Input,
    request: &EvalRequest,
    backend: &dyn Backend,
    failures: &Failures,
    progress: &dyn Progress,
    offset: usize,
) -> Result<(Vec<SchemeResult>, Vec<VerifierResult>), Error> {
    let verifiers = &request.verifiers;
    let rows = pairs.rows();
    let distributions = |matrix: &Matrix, side| {
        let transform = input.transform(side);
        let batch = backend
            .distributions(matrix, pairs.values, &transform)
            .map_err(Error::from);
        failures.batch_or_rows("distribution", rows, matrix.cols(), batch, |r| {
            let one = backend.distributions(&single_row(matrix, r)?, pairs.values, &transform)?;
            Ok(one.row(0).to_vec())
        })
    };
    let target = distributions(&pairs.target, Side::Target)?;
    let draft = distributions(&pairs.draft, Side::Draft)?;
    let independent = (request.schemes.iter())
        .chain(verifiers.iter().map(|(_, scheme)| scheme))
        .any(|&scheme| scheme == SchemeKind::Independent);
    // The laws independent drafts take in turn, each row transformed.
    let laws = match independent {
        true => (input.draft_laws(1 + pairs.more_drafts.len())?.iter())
            .map(|&(model, transform)| {
                let rows = match model {
                    0 => &pairs.draft,
                    i => &pairs.more_drafts[i - 1],
                };
                let batch = backend.distributions(rows, pairs.values, &transform);
                failures.batch_or_rows(
                    "draft law",
                    pairs.rows(),
                    rows.cols(),
                    batch.map_err(Error::from),
                    |r| {
                        let one = backend.distributions(
                            &single_row(rows, r)?,
                            pairs.values,
                            &transform,
                        )?;
                        Ok(one.row(0).to_vec())
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?,
        false => Vec::new(),
    };
    // One convex solver for every row, on the process's workspaces: its
    // memory stays between solves, and between calls.
    let convex = ConvexSolver::default().with_shared_workspaces();
    let data = Rows {
        target: &target,
        draft: &draft,
        laws: &laws,
        offset,
    };
    let schemes = request
        .schemes
        .iter()
        .map(|&scheme| {
            let batched = |target: &Matrix, draft: &Matrix| -> Result<Matrix, Error> {
                Ok(match scheme {
                    SchemeKind::Iid => {
                        backend.optimal_acceptance_iid(target, draft, &request.ns)?
                    }
                    _ => backend.optimal_acceptance_wor(target, draft, &request.ns)?,
                })
            };
            let alpha = match scheme {
                SchemeKind::Iid | SchemeKind::WithoutReplacement => failures.batch_or_rows(
                    scheme.name(),
                    rows,
                    request.ns.len(),
                    batched(&target, &draft),
                    |r| {
                        let one = batched(&single_row(&target, r)?, &single_row(&draft, r)?)?;
                        Ok(one.row(0).to_vec())
                    },
                )?,
                _ => failures.gather(
                    scheme.name(),
                    request.ns.len(),
                    alpha_by_rows(
                        scheme,
                        data,
                        &request.ns,
                        &convex,
                        progress,
                        failures.first_row,
                    ),
                )?,
            };
            progress.advance(request.samples);
            Ok(SchemeResult { scheme, alpha })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let rated = verifiers
        .iter()
        .map(|&(kind, scheme)| {
            rate_verifier(kind, scheme, data, request, &convex, progress, failures)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((schemes, rated))
}

/// The results of two windows, the second's rows after the first's.
fn joined(
    (schemes, rated): (Vec<SchemeResult>, Vec<VerifierResult>),
    (more_schemes, more_rated): (Vec<SchemeResult>, Vec<VerifierResult>),
) -> Result<(Vec<SchemeResult>, Vec<VerifierResult>), Error> {
    let schemes = (schemes.into_iter().zip(more_schemes))
        .map(|(a, b)| {
            Ok(SchemeResult {
                scheme: a.scheme,
                alpha: a.alpha.stacked(&b.alpha)?,
            })
        })
        .collect::<Result<_, Error>>()?;
    let rated = (rated.into_iter().zip(more_rated))
        .map(|(a, b)| {
            Ok(VerifierResult {
                kind: a.kind,
                scheme: a.scheme,
                method: if a.method == "exact" && b.method == "exact" {
                    "exact"
                } else {
                    "sampled"
                },
                acceptance: a.acceptance.stacked(&b.acceptance)?,
                interval_low: a.interval_low.stacked(&b.interval_low)?,
                interval_high: a.interval_high.stacked(&b.interval_high)?,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok((schemes, rated))
}

/// A verifier and the scheme it is rated on (`name` or `name@scheme`), or
/// why mdsd eval cannot rate it.
pub fn verifier_scheme(spec: &str) -> Result<(VerifierKind, SchemeKind), Error> {
    let (kind, scheme) = VerifierKind::parse_rated(spec)?;
    if scheme == SchemeKind::Hub {
        return Err(Error::Usage(format!(
            "--verifiers {spec}: an evaluation does not draw hub drafts"
        )));
    }
    Ok((kind, scheme))
}

/// The transformed rows a verifier is rated on.
#[derive(Clone, Copy)]
struct Rows<'a> {
    target: &'a Matrix,
    draft: &'a Matrix,
    /// The draft laws independent drafts take in turn (empty unless some
    /// scheme or verifier is independent).
    laws: &'a [Matrix],
    /// How many rows into the selection the first is (sampled verifiers
    /// seed row r of the selection with seed + r).
    offset: usize,
}

impl Rows<'_> {
    /// Row `r`'s problem of `n` drafts of `scheme`, numbered `row` in
    /// errors: independent drafts from the laws in turn, the other schemes
    /// from the draft row.
    fn problem(
        &self,
        r: usize,
        scheme: SchemeKind,
        n: usize,
        row: usize,
    ) -> Result<Problem, Error> {
        let invalid = |source| Error::Invalid {
            what: format!("row {row}"),
            source,
        };
        let law = |m: &Matrix| Distribution::from_probs(m.row(r)).map_err(invalid);
        let p = law(self.target)?;
        let drafts = match scheme {
            SchemeKind::Independent => {
                let laws = self.laws.iter().map(law).collect::<Result<Vec<_>, _>>()?;
                DraftScheme::independent_cycled(&laws, n)
            }
            _ => DraftScheme::new(scheme, vec![law(self.draft)?], n),
        };
        drafts
            .and_then(|drafts| Problem::new(p, drafts))
            .map_err(invalid)
    }
}

/// alpha* row by row on rayon's pool (not a backend method: it is one
/// pass per row, no batched kernel to gain); rows numbered from
/// `first_row` in errors. Greedy, argmax and top drafts in closed form
/// (argmax drafts one token whatever n: the same value in every column);
/// independent drafts, which have no closed form at large V, by the upper
/// end of the convex solver's certified interval (`docs/DESIGN.md` §6b),
/// p(H) + 1 - q_1(H) ... q_n(H) for the H its solution reads off.
/// `progress` is asked before each row's problem whether to stop.
fn alpha_by_rows(
    scheme: SchemeKind,
    data: Rows,
    ns: &[usize],
    convex: &ConvexSolver,
    progress: &dyn Progress,
    first_row: usize,
) -> Vec<Result<Vec<f64>, Error>> {
    (0..data.target.rows())
        .into_par_iter()
        .map(|r| {
            let row = first_row + r;
            ns.iter()
                .map(|&n| {
                    progress.check_stop().map_err(VerifyError::from)?;
                    let n = scheme.fixed_n().unwrap_or(n);
                    let problem = data.problem(r, scheme, n, row)?;
                    match scheme {
                        SchemeKind::Independent => {
                            crate::verify::certified_alpha_star(&problem, convex)
                                .map(|alpha| alpha.alpha_star)
                                .map_err(|e| Error::Solve {
                                    row,
                                    instead: e.instead(),
                                    source: Box::new(e),
                                })
                        }
                        _ => crate::optimal_acceptance(&problem)
                            .map(|bound| bound.alpha_star)
                            .map_err(|e| e.at_row(row)),
                    }
                })
                .collect()
        })
        .collect()
}

/// A verifier's acceptance on every row and n: exact from its closed form
/// when it has one ([`VerifierKind::exact_acceptance`]), else the sampled
/// harness's estimate. `progress` is asked before each row's problem
/// whether to stop: one problem (an optimal-convex solve at a large
/// vocabulary) is the longest a stop waits.
fn rate_verifier(
    kind: VerifierKind,
    scheme: SchemeKind,
    data: Rows,
    request: &EvalRequest,
    convex: &ConvexSolver,
    progress: &dyn Progress,
    failures: &Failures,
) -> Result<VerifierResult, Error> {
    type Rated = (f64, Option<(f64, f64)>);
    let rows: Vec<Result<Vec<Rated>, Error>> = (0..data.target.rows())
        .into_par_iter()
        .map(|r| {
            let row = failures.first_row + r;
            request
                .ns
                .iter()
                .map(|&n| {
                    progress.check_stop().map_err(VerifyError::from)?;
                    let problem = data.problem(r, scheme, n, row)?;
                    let rating = kind.rate(
                        &problem,
                        convex,
                        request.samples,
                        request.seed.wrapping_add((data.offset + r) as u64),
                        progress,
                    )?;
                    let acceptance = (rating.acceptance, rating.interval);
                    Ok(acceptance)
                })
                .collect()
        })
        .collect();
    let exact = (rows.iter().flatten().flatten()).all(|(_, interval)| interval.is_none());
    let width = request.ns.len();
    let bounds = |end: fn((f64, f64)) -> f64| -> Result<Matrix, Error> {
        let values: Vec<Vec<f64>> = (rows.iter())
            .map(|row| match row {
                Ok(row) => (row.iter()).map(|(_, i)| i.map_or(f64::NAN, end)).collect(),
                Err(_) => vec![f64::NAN; width],
            })
            .collect();
        Ok(Matrix::from_rows(&values)?)
    };
    let (interval_low, interval_high) = (bounds(|i| i.0)?, bounds(|i| i.1)?);
    let acceptance = rows
        .into_iter()
        .map(|row| row.map(|row| row.iter().map(|&(a, _)| a).collect()))
        .collect();
    Ok(VerifierResult {
        kind,
        scheme,
        method: if exact { "exact" } else { "sampled" },
        acceptance: failures.gather(kind.name(), width, acceptance)?,
        interval_low,
        interval_high,
    })
}

/// The mean of column `j` over the rows that did not fail (NaN: none did
/// not, shown as null and "-").
pub fn column_mean(m: &Matrix, j: usize) -> f64 {
    let values: Vec<f64> = m
        .iter_rows()
        .map(|row| row[j])
        .filter(|x| !x.is_nan())
        .collect();
    values.iter().sum::<f64>() / values.len() as f64
}

fn describe(pairs: &Pairs) -> String {
    let layout = match pairs.layout {
        Layout::Dense => format!("V = {}", pairs.target.cols()),
        Layout::SparseWithTail { kept, .. } => format!("top-{kept} + tail"),
    };
    format!("{} ({} rows, {layout})", pairs.source, pairs.rows())
}
