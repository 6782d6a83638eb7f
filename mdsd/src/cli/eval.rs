//! `mdsd eval`: alpha* per draft scheme and n, and the acceptance of chosen
//! verifiers, over the rows of a data file or the built-in sample; a table
//! or one JSON document, and with `--out` CSV, JSON and plots.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use mdsd::logits::{
    Backend, CpuBackend, Layout, LogitsError, Matrix, Pairs, WgpuBackend, builtin_sample,
};
use mdsd::verify::VerifierKind;
use mdsd::{ConvexSolver, Distribution, DraftScheme, Problem, SchemeKind};
use rayon::prelude::*;
use serde_json::json;
use std::sync::{Mutex, PoisonError};

use super::input::{InputArgs, InputReport};
use super::report::ReportFolder;
use super::{CliError, SolveError, at_least_one, output, progress_bar};
use mdsd::core::Side;

pub(super) mod plot;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The rows to evaluate (-p/-q or --data); with neither, the built-in
    /// sample: 32 real rows of Qwen2.5-Coder 1.5B / 0.5B.
    #[command(flatten)]
    input: InputArgs,
    /// Numbers of drafts.
    #[arg(long = "n", value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    ns: Vec<usize>,
    /// Draft schemes for alpha*: iid, wor (without replacement), greedy,
    /// the deterministic drafts engines use: argmax (one draft, the most
    /// likely draft token, whatever n) and top (the n most likely), and
    /// independent (drafts from the draft laws of -q repeated,
    /// --draft-arrays or --draft-temperatures, taken in turn; alpha* is
    /// the upper end of the convex solver's certified interval, whose
    /// lower end optimal-convex@independent reaches).
    #[arg(
        long,
        value_delimiter = ',',
        default_values = ["iid", "wor", "greedy", "argmax", "top"]
    )]
    schemes: Vec<SchemeKind>,
    /// Verifiers to rate, each on the first of iid, wor, greedy, top it
    /// supports, or on the scheme named after `@` (`optimal-convex@wor`,
    /// `khisti@independent`): exact acceptance where it has a closed form
    /// (nss, naive, specinfer, kseq, deterministic, optimal-convex),
    /// sampled otherwise. `none` for no verifier.
    #[arg(long, value_delimiter = ',', default_values = ["specinfer", "optimal-convex"])]
    verifiers: Vec<String>,
    /// Draws per row and n for sampled verifiers.
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Seed of the sampled verifiers (row r uses seed + r).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where the batched work runs.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    backend: BackendArg,
    /// Write eval.json, CSV tables and acceptance.png / .svg here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print exactly one JSON document.
    #[arg(long)]
    json: bool,
    /// Stop at the first row that fails (by default a failing row is
    /// reported, left out of the means, and the others go on).
    #[arg(long)]
    strict: bool,
}

/// A row that could not be evaluated at some stage, and why.
struct Failure {
    row: usize,
    stage: String,
    error: String,
}

/// Rows that fail: with --strict the first ends the command; otherwise
/// each is recorded and its values are NaN, which the means leave out.
struct Failures {
    strict: bool,
    /// The number of the first row selected, for the rows recorded.
    first_row: usize,
    list: Mutex<Vec<Failure>>,
}

impl Failures {
    /// A `rows x width` matrix from per-row results, failed rows NaN.
    fn gather(
        &self,
        stage: &str,
        width: usize,
        rows: Vec<Result<Vec<f64>, CliError>>,
    ) -> Result<Matrix, CliError> {
        let mut values = Vec::with_capacity(rows.len());
        for (r, row) in rows.into_iter().enumerate() {
            match row {
                Ok(row) => values.push(row),
                Err(e) if self.strict => return Err(e),
                Err(e) => {
                    // The row is recorded here: a batch error's own row
                    // number (0 of a one-row batch) would mislead.
                    let error = match &e {
                        CliError::Logits(inner) => match inner.as_ref() {
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
        batch: Result<Matrix, CliError>,
        one: impl Fn(usize) -> Result<Vec<f64>, CliError>,
    ) -> Result<Matrix, CliError> {
        match batch {
            Ok(matrix) => Ok(matrix),
            Err(e) if self.strict => Err(e),
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

/// The table's last lines where rows failed: how many, and each one's
/// first error (empty when none failed).
fn failures_note(failures: &[Failure]) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n{} row(s) failed; their values where they failed are left out of the means (--strict stops at the first):\n",
        failures.len()
    );
    for f in failures {
        out += &format!("  row {} ({}): {}\n", f.row, f.stage, f.error);
    }
    out
}

/// A value in tables to 6 decimals; "-" for a failed row's NaN.
fn shown(value: f64) -> String {
    if value.is_nan() {
        "-".into()
    } else {
        format!("{value:.6}")
    }
}

/// Row `r` of `m` as a matrix of its own.
fn single_row(m: &Matrix, r: usize) -> Result<Matrix, CliError> {
    Ok(Matrix::new(1, m.cols(), m.row(r).to_vec())?)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// rayon over rows.
    Cpu,
    /// WGSL compute shaders through wgpu (Vulkan, DX12; f64 needed): falls
    /// back to the CPU, with a warning, when no such adapter is found.
    Gpu,
}

/// The backend `--backend` asks for, or the CPU when the GPU cannot run.
fn backend(choice: BackendArg) -> Box<dyn Backend> {
    match choice {
        BackendArg::Cpu => Box::new(CpuBackend),
        BackendArg::Gpu => match WgpuBackend::new() {
            Ok(gpu) => Box::new(gpu),
            Err(e) => {
                eprintln!("warning: {e}; running on the CPU instead");
                Box::new(CpuBackend)
            }
        },
    }
}

/// alpha* of one scheme: `rows x ns`.
struct SchemeResult {
    scheme: SchemeKind,
    alpha: Matrix,
}

/// One verifier's acceptance: `rows x ns`.
struct VerifierResult {
    kind: VerifierKind,
    scheme: SchemeKind,
    method: &'static str,
    acceptance: Matrix,
    /// Per row and n, the Wilson 99% interval of a sampled acceptance
    /// (NaN where the acceptance is exact or the row failed).
    interval_low: Matrix,
    interval_high: Matrix,
}

impl VerifierResult {
    /// The verifier's name, with `@scheme` where it is rated on another
    /// scheme than its default ([`VerifierKind::rated_scheme`]).
    fn label(&self) -> String {
        match self.kind.rated_scheme() == Some(self.scheme) {
            true => self.kind.name().to_string(),
            false => format!("{}@{}", self.kind, self.scheme.name()),
        }
    }

    /// Whether the sampled mean of column `j` lies above the mean alpha* of
    /// its scheme (when that scheme was evaluated) by less than its 99%
    /// half-width: sampling noise, to be shown as such rather than as a
    /// verifier beating the optimum.
    fn above_alpha_within_interval(&self, j: usize, draws: u64, schemes: &[SchemeResult]) -> bool {
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
    fn mean_half_width(&self, j: usize, draws: u64) -> Option<f64> {
        if self.method != "sampled" {
            return None;
        }
        let values: Vec<f64> = (self.acceptance.iter_rows().map(|row| row[j]))
            .filter(|x| !x.is_nan())
            .collect();
        let variance: f64 = values.iter().map(|a| a * (1.0 - a) / draws as f64).sum();
        Some(mdsd::verify::Z_99 * variance.sqrt() / values.len() as f64)
    }
}

pub fn run(args: &EvalArgs) -> Result<(), CliError> {
    let usage = |m: String| CliError::Usage(m);
    if args.ns.is_empty() || args.ns.contains(&0) {
        return Err(usage("--n takes numbers of drafts of at least 1".into()));
    }
    at_least_one("--samples", args.samples)?;
    if args.schemes.contains(&SchemeKind::Hub) {
        return Err(usage(
            "--schemes hub: mdsd eval draws iid, wor, greedy, argmax, top or independent drafts"
                .into(),
        ));
    }
    let verifiers: Vec<(VerifierKind, SchemeKind)> = args
        .verifiers
        .iter()
        .filter(|name| name.as_str() != "none")
        .map(|spec| verifier_scheme(spec))
        .collect::<Result<_, CliError>>()?;

    // Settings that fail every row are refused before any: a row that
    // fails alone is reported and the others go on.
    for side in [Side::Target, Side::Draft] {
        (args.input.transform(side).check()).map_err(|source| CliError::Invalid {
            what: format!("the {}'s transform", side.name()),
            source,
        })?;
    }
    if !verifiers.is_empty() {
        for &n in &args.ns {
            mdsd::verify::check_verifier_drafts(n)?;
        }
    }
    let backend = backend(args.backend);
    let failures = Failures {
        strict: args.strict,
        first_row: args.input.first_row(),
        list: Mutex::new(Vec::new()),
    };
    // Rows of --data that can be streamed go through in windows of
    // WINDOW_BYTES, in bounded memory; other inputs at once.
    let streamed = match args.input.streamed() {
        Err(CliError::Logits(e)) if matches!(*e, LogitsError::TopKOnly { .. }) => {
            return super::top_k::eval(&super::top_k::EvalRequest {
                input: &args.input,
                ns: &args.ns,
                schemes: &args.schemes,
                verifiers: &args.verifiers,
                out: args.out.as_deref(),
                json: args.json,
            });
        }
        streamed => streamed?,
    };
    let (schemes, verifier_results, input, described) = match streamed {
        Some((reader, rows)) => {
            let cols = reader.shape().last().copied().unwrap_or(1).max(1);
            let window = (WINDOW_BYTES / (16 * cols)).max(rayon::current_num_threads());
            // Progress in rows: the windows are alike, so the ETA holds.
            let progress = progress_bar(rows.len() as u64, args.json);
            let quiet = progress_bar(0, true);
            let mut results: Option<(Vec<SchemeResult>, Vec<VerifierResult>)> = None;
            for start in rows.clone().step_by(window) {
                let end = rows.end.min(start + window);
                let pairs = reader.read(start..end)?;
                check_draft_laws(&pairs, args, &verifiers)?;
                let window_failures = Failures {
                    first_row: start,
                    ..failures.empty_like()
                };
                let done = evaluate(
                    &pairs,
                    args,
                    &verifiers,
                    backend.as_ref(),
                    &window_failures,
                    &quiet,
                    start - rows.start,
                )?;
                failures.absorb(window_failures);
                results = Some(match results {
                    None => done,
                    Some(before) => joined(before, done)?,
                });
                progress.inc((end - start) as u64);
            }
            progress.finish_and_clear();
            let (schemes, rated) = results.expect("at least one row is selected");
            let input = args.input.streamed_report(&reader, &rows);
            let described = format!("{} ({} rows, V = {})", reader.source(), rows.len(), cols);
            (schemes, rated, input, described)
        }
        None => {
            let pairs = if args.input.given() {
                args.input.read()?
            } else {
                args.input.select(builtin_sample()?)?
            };
            check_draft_laws(&pairs, args, &verifiers)?;
            // Progress in draws: a sampled verifier's row and n counts
            // --samples (a bar step per task of draws, for an ETA that
            // --samples 10^12 can use), and each exact one counts as much,
            // done at once.
            let units = (args.schemes.len() as u64).saturating_add(
                (verifiers.len() as u64).saturating_mul((args.ns.len() * pairs.rows()) as u64),
            );
            let progress = progress_bar(units.saturating_mul(args.samples), args.json);
            let (schemes, rated) = evaluate(
                &pairs,
                args,
                &verifiers,
                backend.as_ref(),
                &failures,
                &progress,
                0,
            )?;
            progress.finish_and_clear();
            (schemes, rated, args.input.report(&pairs), describe(&pairs))
        }
    };
    let failures = failures.into_first_per_row();
    let settings = Settings {
        args,
        data_sha256: args.input.data_sha256()?,
        backend: backend.name(),
    };
    let document = report_json(
        &settings,
        &input,
        &args.ns,
        &schemes,
        &verifier_results,
        &failures,
    );
    if args.json {
        output::emit(&format!("{document}\n"))?;
    } else {
        output::emit(&report_table(
            &described,
            &input,
            &args.ns,
            &schemes,
            &verifier_results,
            args.samples,
        ))?;
        output::emit(&failures_note(&failures))?;
    }
    if let Some(dir) = &args.out {
        write_outputs(
            dir,
            &settings,
            &input,
            &args.ns,
            &schemes,
            &verifier_results,
            &document,
        )?;
        if !args.json {
            output::emit(&format!("wrote {}\n", dir.display()))?;
        }
    }
    Ok(())
}

/// What `--data` rows a window of `mdsd eval` holds, as f64 of both
/// sides: 32 MB, so that a file larger than memory passes in bounded
/// memory.
const WINDOW_BYTES: usize = 32 << 20;

/// Several draft laws serve independent drafts only: the other schemes
/// draw from the first draft row at the draft's own transform.
fn check_draft_laws(
    pairs: &Pairs,
    args: &EvalArgs,
    verifiers: &[(VerifierKind, SchemeKind)],
) -> Result<(), CliError> {
    let laws = args.input.draft_laws(1 + pairs.more_drafts.len())?.len();
    let independent = (args.schemes.iter())
        .chain(verifiers.iter().map(|(_, scheme)| scheme))
        .any(|&scheme| scheme == SchemeKind::Independent);
    if laws == 1 || independent {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "{laws} draft laws (-q repeated, --draft-arrays, --draft-temperatures) serve independent \
         drafts only: add independent to --schemes or rate a verifier on it (`khisti@independent`)"
    )))
}

/// alpha* of every scheme and the rating of every verifier on the rows of
/// `pairs`, whose first is `offset` rows into the selection (the sampled
/// verifiers' seeds count from the selection's first row).
fn evaluate(
    pairs: &Pairs,
    args: &EvalArgs,
    verifiers: &[(VerifierKind, SchemeKind)],
    backend: &dyn Backend,
    failures: &Failures,
    progress: &ProgressBar,
    offset: usize,
) -> Result<(Vec<SchemeResult>, Vec<VerifierResult>), CliError> {
    let rows = pairs.rows();
    let distributions = |matrix: &Matrix, side| {
        let transform = args.input.transform(side);
        let batch = backend
            .distributions(matrix, pairs.values, &transform)
            .map_err(CliError::from);
        failures.batch_or_rows("distribution", rows, matrix.cols(), batch, |r| {
            let one = backend.distributions(&single_row(matrix, r)?, pairs.values, &transform)?;
            Ok(one.row(0).to_vec())
        })
    };
    let target = distributions(&pairs.target, Side::Target)?;
    let draft = distributions(&pairs.draft, Side::Draft)?;
    let independent = (args.schemes.iter())
        .chain(verifiers.iter().map(|(_, scheme)| scheme))
        .any(|&scheme| scheme == SchemeKind::Independent);
    // The laws independent drafts take in turn, each row transformed.
    let laws = match independent {
        true => (args.input.draft_laws(1 + pairs.more_drafts.len())?.iter())
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
                    batch.map_err(CliError::from),
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
    // One convex solver for every row: it keeps its memory between solves.
    let convex = ConvexSolver::default();
    let data = Rows {
        target: &target,
        draft: &draft,
        laws: &laws,
        offset,
    };
    let schemes = args
        .schemes
        .iter()
        .map(|&scheme| {
            let batched = |target: &Matrix, draft: &Matrix| -> Result<Matrix, CliError> {
                Ok(match scheme {
                    SchemeKind::Iid => backend.optimal_acceptance_iid(target, draft, &args.ns)?,
                    _ => backend.optimal_acceptance_wor(target, draft, &args.ns)?,
                })
            };
            let alpha = match scheme {
                SchemeKind::Iid | SchemeKind::WithoutReplacement => failures.batch_or_rows(
                    scheme.name(),
                    rows,
                    args.ns.len(),
                    batched(&target, &draft),
                    |r| {
                        let one = batched(&single_row(&target, r)?, &single_row(&draft, r)?)?;
                        Ok(one.row(0).to_vec())
                    },
                )?,
                _ => failures.gather(
                    scheme.name(),
                    args.ns.len(),
                    alpha_by_rows(scheme, data, &args.ns, &convex, failures.first_row),
                )?,
            };
            progress.inc(args.samples);
            Ok(SchemeResult { scheme, alpha })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let rated = verifiers
        .iter()
        .map(|&(kind, scheme)| rate_verifier(kind, scheme, data, args, &convex, progress, failures))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((schemes, rated))
}

/// The results of two windows, the second's rows after the first's.
fn joined(
    (schemes, rated): (Vec<SchemeResult>, Vec<VerifierResult>),
    (more_schemes, more_rated): (Vec<SchemeResult>, Vec<VerifierResult>),
) -> Result<(Vec<SchemeResult>, Vec<VerifierResult>), CliError> {
    let schemes = (schemes.into_iter().zip(more_schemes))
        .map(|(a, b)| {
            Ok(SchemeResult {
                scheme: a.scheme,
                alpha: a.alpha.stacked(&b.alpha)?,
            })
        })
        .collect::<Result<_, CliError>>()?;
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
        .collect::<Result<_, CliError>>()?;
    Ok((schemes, rated))
}

/// A verifier and the scheme it is rated on (`name` or `name@scheme`), or
/// why mdsd eval cannot rate it.
fn verifier_scheme(spec: &str) -> Result<(VerifierKind, SchemeKind), CliError> {
    let (kind, scheme) = VerifierKind::parse_rated(spec)?;
    if scheme == SchemeKind::Hub {
        return Err(CliError::Usage(format!(
            "--verifiers {spec}: mdsd eval does not draw hub drafts"
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
    ) -> Result<Problem, CliError> {
        let invalid = |source| CliError::Invalid {
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
fn alpha_by_rows(
    scheme: SchemeKind,
    data: Rows,
    ns: &[usize],
    convex: &ConvexSolver,
    first_row: usize,
) -> Vec<Result<Vec<f64>, CliError>> {
    (0..data.target.rows())
        .into_par_iter()
        .map(|r| {
            let row = first_row + r;
            ns.iter()
                .map(|&n| {
                    let n = scheme.fixed_n().unwrap_or(n);
                    let problem = data.problem(r, scheme, n, row)?;
                    match scheme {
                        SchemeKind::Independent => {
                            mdsd::verify::certified_alpha_star(&problem, convex)
                                .map(|alpha| alpha.alpha_star)
                                .map_err(|e| CliError::Solve {
                                    row,
                                    instead: e.instead(),
                                    source: Box::new(e),
                                })
                        }
                        _ => mdsd::optimal_acceptance(&problem)
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
/// harness's estimate.
fn rate_verifier(
    kind: VerifierKind,
    scheme: SchemeKind,
    data: Rows,
    args: &EvalArgs,
    convex: &ConvexSolver,
    progress: &ProgressBar,
    failures: &Failures,
) -> Result<VerifierResult, CliError> {
    type Rated = (f64, Option<(f64, f64)>);
    let rows: Vec<Result<Vec<Rated>, CliError>> = (0..data.target.rows())
        .into_par_iter()
        .map(|r| {
            let row = failures.first_row + r;
            args.ns
                .iter()
                .map(|&n| {
                    let problem = data.problem(r, scheme, n, row)?;
                    let rating = kind.rate(
                        &problem,
                        convex,
                        args.samples,
                        args.seed.wrapping_add((data.offset + r) as u64),
                        &|done| progress.inc(done),
                    )?;
                    let acceptance = (rating.acceptance, rating.interval);
                    Ok(acceptance)
                })
                .collect()
        })
        .collect();
    let exact = (rows.iter().flatten().flatten()).all(|(_, interval)| interval.is_none());
    let width = args.ns.len();
    let bounds = |end: fn((f64, f64)) -> f64| -> Result<Matrix, CliError> {
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
fn column_mean(m: &Matrix, j: usize) -> f64 {
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

/// A JSON number, or null for NaN (a failed row; an exact acceptance's
/// interval).
fn number(x: f64) -> serde_json::Value {
    if x.is_nan() {
        serde_json::Value::Null
    } else {
        json!(x)
    }
}

/// The settings a report was made with, so that a figure in a paper can be
/// traced to its data (by hash) and remade.
struct Settings<'a> {
    args: &'a EvalArgs,
    data_sha256: String,
    backend: &'a str,
}

impl Settings<'_> {
    /// A plot's title: the data, the rows, and the settings that change
    /// the numbers (transforms per side, draws of sampled verifiers).
    fn title(&self, input: &InputReport) -> String {
        let args = self.args;
        let transform = |side: Side| {
            let t = args.input.transform(side);
            let mut parts = Vec::new();
            if let Some(x) = t.temperature {
                parts.push(format!("T={x}"));
            }
            if let Some(k) = t.top_k {
                parts.push(format!("top-k={k}"));
            }
            if let Some(x) = t.top_p {
                parts.push(format!("top-p={x}"));
            }
            if parts.is_empty() {
                "as given".to_string()
            } else {
                parts.join(" ")
            }
        };
        format!(
            "{}, rows {}..{}; target {}, draft {}; {} draws per sampled point",
            input.source,
            input.first_row,
            input.first_row + input.rows,
            transform(Side::Target),
            transform(Side::Draft),
            args.samples
        )
    }

    fn to_json(&self, input: &InputReport) -> serde_json::Value {
        let args = self.args;
        let transform = |side| {
            let t = args.input.transform(side);
            json!({"temperature": t.temperature, "top_k": t.top_k, "top_p": t.top_p})
        };
        json!({
            "data": input.source,
            "data_sha256": self.data_sha256,
            "first_row": input.first_row,
            "rows": input.rows,
            "schemes": args.schemes.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "n": args.ns,
            "transforms": {"target": transform(Side::Target), "draft": transform(Side::Draft)},
            "verifiers": args.verifiers,
            "samples": args.samples,
            "seed": args.seed,
            "backend": self.backend,
            "mdsd_version": env!("CARGO_PKG_VERSION"),
        })
    }
}

/// The whole report as one document: settings, means (with the 99%
/// interval of sampled ones), and every row's values under the keys every
/// command uses (`alpha_star`, `acceptance`).
fn report_json(
    settings: &Settings,
    input: &InputReport,
    ns: &[usize],
    schemes: &[SchemeResult],
    verifiers: &[VerifierResult],
    failures: &[Failure],
) -> serde_json::Value {
    let samples = settings.args.samples;
    let aggregate: Vec<_> = schemes
        .iter()
        .flat_map(|s| {
            ns.iter().enumerate().map(move |(j, &n)| {
                json!({"scheme": s.scheme.name(), "n": n, "mean_alpha_star": number(column_mean(&s.alpha, j))})
            })
        })
        .collect();
    let rated: Vec<_> = verifiers
        .iter()
        .flat_map(|v| {
            ns.iter().enumerate().map(move |(j, &n)| {
                let mean = column_mean(&v.acceptance, j);
                json!({
                    "name": v.kind.name(),
                    "scheme": v.scheme.name(),
                    "n": n,
                    "mean_acceptance": number(mean),
                    "mean_acceptance_interval_99": v
                        .mean_half_width(j, samples)
                        .map(|h| [mean - h, mean + h]),
                    "above_alpha_star_within_interval": v.above_alpha_within_interval(j, samples, schemes),
                    "method": v.method,
                })
            })
        })
        .collect();
    let per_row: Vec<_> = (0..input.rows)
        .map(|r| {
            let alpha_star: serde_json::Map<String, serde_json::Value> = (schemes.iter())
                .map(|s| (s.scheme.name().to_string(), json!(s.alpha.row(r).iter().map(|&x| number(x)).collect::<Vec<_>>())))
                .collect();
            let acceptance: serde_json::Map<String, serde_json::Value> = (verifiers.iter())
                .map(|v| {
                    let values: Vec<_> = (0..ns.len())
                        .map(|j| {
                            let (lo, hi) = (v.interval_low.row(r)[j], v.interval_high.row(r)[j]);
                            json!({
                                "acceptance": number(v.acceptance.row(r)[j]),
                                "interval_99": if lo.is_nan() { serde_json::Value::Null } else { json!([lo, hi]) },
                            })
                        })
                        .collect();
                    (v.label(), json!(values))
                })
                .collect();
            json!({"row": input.first_row + r, "alpha_star": alpha_star, "verifiers": acceptance})
        })
        .collect();
    json!({
        "settings": settings.to_json(input),
        "input": input.to_json(),
        "aggregate": aggregate,
        "verifiers": rated,
        "per_row": per_row,
        "failed_rows": failures.len(),
        "failures": failures
            .iter()
            .map(|f| json!({"row": f.row, "stage": f.stage, "error": f.error}))
            .collect::<Vec<_>>(),
    })
}

fn report_table(
    described: &str,
    input: &InputReport,
    ns: &[usize],
    schemes: &[SchemeResult],
    verifiers: &[VerifierResult],
    samples: u64,
) -> String {
    use std::fmt::Write;
    // A column of means: a space, the value in 8, then the noise mark or
    // a space, so that a mark never touches the next column.
    let cell = |text: &str, mark: bool| format!(" {text:>8}{}", if mark { '*' } else { ' ' });
    let mut out = String::new();
    let header: String = ns.iter().map(|n| cell(&format!("n={n}"), false)).collect();
    let _ = writeln!(out, "{described}");
    out += &input.note();
    let _ = writeln!(out, "\nalpha* per row");
    let _ = write!(out, "{:>5}", "row");
    // Per-row columns as wide as their headers, at least 12.
    let column = |s: &SchemeResult, n: usize| format!("{} n={n}", s.scheme.name());
    let widths: Vec<usize> = (schemes.iter())
        .flat_map(|s| ns.iter().map(move |&n| (column(s, n).len() + 2).max(12)))
        .collect();
    let headers = schemes
        .iter()
        .flat_map(|s| ns.iter().map(move |&n| column(s, n)));
    for (name, width) in headers.zip(&widths) {
        let _ = write!(out, "{name:>width$}");
    }
    out.push('\n');
    for r in 0..input.rows {
        let _ = write!(out, "{:>5}", input.first_row + r);
        let values = schemes.iter().flat_map(|s| s.alpha.row(r));
        for (a, width) in values.zip(&widths) {
            let _ = write!(out, "{:>width$}", shown(*a));
        }
        out.push('\n');
    }
    let labels: Vec<String> = (verifiers.iter())
        .map(|v| format!("{} ({}, {})", v.kind, v.scheme.name(), v.method))
        .collect();
    let width = (labels.iter().map(String::len).max().unwrap_or(0) + 1).max(28);
    let _ = writeln!(out, "\n{:<width$}{header}", "mean alpha*");
    for s in schemes {
        let means: String = (0..ns.len())
            .map(|j| cell(&shown(column_mean(&s.alpha, j)), false))
            .collect();
        let _ = writeln!(out, "{:<width$}{means}", s.scheme.name());
    }
    if schemes.iter().any(|s| s.scheme == SchemeKind::Independent) {
        let _ = writeln!(
            out,
            "independent: the upper end of the certified interval, whose lower end \
             optimal-convex@independent reaches"
        );
    }
    if !verifiers.is_empty() {
        let _ = writeln!(out, "\n{:<width$}{header}", "mean acceptance");
        let mut noise = false;
        for (v, label) in verifiers.iter().zip(&labels) {
            let means: String = (0..ns.len())
                .map(|j| {
                    let mark = v.above_alpha_within_interval(j, samples, schemes);
                    noise |= mark;
                    cell(&shown(column_mean(&v.acceptance, j)), mark)
                })
                .collect();
            let _ = writeln!(out, "{label:<width$}{means}");
            if v.method == "sampled" {
                let widths: String = (0..ns.len())
                    .map(|j| {
                        let h = v.mean_half_width(j, samples).unwrap_or(f64::NAN);
                        let text = if h.is_nan() {
                            "-".into()
                        } else {
                            format!("±{h:.1e}")
                        };
                        cell(&text, false)
                    })
                    .collect();
                let _ = writeln!(out, "{:<width$}{widths}", "  99% interval of the mean");
            }
        }
        if noise {
            let _ = writeln!(
                out,
                "* above mean alpha* by less than the sampling error: alpha* lies in the 99% interval"
            );
        }
    }
    // The cells' room for a mark leaves no space at the ends of lines.
    out.lines()
        .map(|line| line.trim_end().to_string() + "\n")
        .collect()
}

/// `eval.json`, `alpha.csv` and `verifiers.csv` (rows numbered from
/// `first_row`, as in the file) and the plots.
fn write_outputs(
    dir: &Path,
    settings: &Settings,
    input: &InputReport,
    ns: &[usize],
    schemes: &[SchemeResult],
    verifiers: &[VerifierResult],
    document: &serde_json::Value,
) -> Result<(), CliError> {
    let folder = ReportFolder::create(dir)?;
    let write = |name: &str, text: String| folder.write(name, text);
    write("eval.json", format!("{document:#}\n"))?;
    let mut alpha = String::from("row,scheme,n,alpha_star\n");
    for s in schemes {
        for r in 0..input.rows {
            for (j, n) in ns.iter().enumerate() {
                alpha += &format!(
                    "{},{},{n},{:.12}\n",
                    input.first_row + r,
                    s.scheme.name(),
                    s.alpha.row(r)[j]
                );
            }
        }
    }
    write("alpha.csv", alpha)?;
    let mut rated =
        String::from("row,verifier,scheme,n,acceptance,method,interval_99_low,interval_99_high\n");
    // Exact acceptances have no interval: empty cells.
    let cell = |x: f64| {
        if x.is_nan() {
            String::new()
        } else {
            format!("{x:.12}")
        }
    };
    for v in verifiers {
        for r in 0..input.rows {
            for (j, n) in ns.iter().enumerate() {
                rated += &format!(
                    "{},{},{},{n},{:.12},{},{},{}\n",
                    input.first_row + r,
                    v.kind,
                    v.scheme.name(),
                    v.acceptance.row(r)[j],
                    v.method,
                    cell(v.interval_low.row(r)[j]),
                    cell(v.interval_high.row(r)[j]),
                );
            }
        }
    }
    write("verifiers.csv", rated)?;
    let mut series: Vec<plot::Series> = schemes
        .iter()
        .map(|s| plot::Series {
            label: format!("alpha* {}", s.scheme.name()),
            points: means(ns, &s.alpha),
            dashed: false,
            half_widths: None,
        })
        .collect();
    series.extend(verifiers.iter().map(|v| plot::Series {
        label: format!("{} ({}, {})", v.kind, v.scheme.name(), v.method),
        points: means(ns, &v.acceptance),
        dashed: true,
        half_widths: (v.method == "sampled").then(|| {
            (0..ns.len())
                .map(|j| {
                    v.mean_half_width(j, settings.args.samples)
                        .unwrap_or(f64::NAN)
                })
                .collect()
        }),
    }));
    let title = settings.title(input);
    folder.plots(&title, &series)?;
    Ok(())
}

fn means(ns: &[usize], m: &Matrix) -> Vec<(f64, f64)> {
    ns.iter()
        .enumerate()
        .map(|(j, &n)| (n as f64, column_mean(m, j)))
        .collect()
}
