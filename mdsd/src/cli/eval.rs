//! `mdsd eval`: alpha* per draft scheme and n, and the acceptance of chosen
//! verifiers, over the rows of a data file or the built-in sample; a table
//! or one JSON document, and with `--out` CSV, JSON and plots.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use mdsd::logits::{Backend, CpuBackend, Layout, Matrix, Pairs, WgpuBackend, builtin_sample};
use mdsd::verify::VerifierKind;
use mdsd::{ConvexSolver, Distribution, DraftScheme, Problem, SchemeKind};
use rayon::prelude::*;
use serde_json::json;

use super::input::InputArgs;
use super::{CliError, SolveError, at_least_one, progress_bar};

mod plot;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The rows to evaluate (-p/-q or --data); with neither, the built-in
    /// sample: 32 real rows of Qwen2.5-Coder 1.5B / 0.5B.
    #[command(flatten)]
    input: InputArgs,
    /// Numbers of drafts.
    #[arg(long = "n", value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    ns: Vec<usize>,
    /// Draft schemes for alpha*: iid, wor (without replacement), greedy.
    #[arg(long, value_delimiter = ',', default_values = ["iid", "wor", "greedy"])]
    schemes: Vec<SchemeKind>,
    /// Verifiers to rate, each on the first of iid, wor, greedy it supports:
    /// exact acceptance where it has a closed form (nss, naive, specinfer,
    /// kseq, optimal-convex), sampled otherwise. `none` for no verifier.
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
}

pub fn run(args: &EvalArgs) -> Result<(), CliError> {
    let usage = |m: String| CliError::Usage(m);
    if args.ns.is_empty() || args.ns.contains(&0) {
        return Err(usage("--n takes numbers of drafts of at least 1".into()));
    }
    at_least_one("--samples", args.samples)?;
    if let Some(bad) = args.schemes.iter().find(|s| {
        !matches!(
            s,
            SchemeKind::Iid | SchemeKind::WithoutReplacement | SchemeKind::Greedy
        )
    }) {
        return Err(usage(format!(
            "--schemes {bad}: mdsd eval draws iid, wor or greedy drafts from one draft row"
        )));
    }
    let verifiers: Vec<(VerifierKind, SchemeKind)> = args
        .verifiers
        .iter()
        .filter(|name| name.as_str() != "none")
        .map(|name| {
            let kind: VerifierKind = name.parse()?;
            verifier_scheme(kind).map(|scheme| (kind, scheme))
        })
        .collect::<Result<_, CliError>>()?;

    let pairs = if args.input.given() {
        args.input.read()?
    } else {
        args.input.select(builtin_sample()?)?
    };
    if !pairs.more_drafts.is_empty() {
        return Err(usage(
            "mdsd eval draws every scheme from one draft row: give -q once".into(),
        ));
    }
    let backend = backend(args.backend);
    let transform = args.input.transform();
    let target = backend.distributions(&pairs.target, pairs.values, &transform)?;
    let draft = backend.distributions(&pairs.draft, pairs.values, &transform)?;

    // Progress in draws: a sampled verifier's row and n counts --samples
    // (a bar step per task of draws, for an ETA that --samples 10^12 can
    // use), and each exact one counts as much, done at once.
    let rows = pairs.rows();
    let units = (args.schemes.len() as u64)
        .saturating_add((verifiers.len() as u64).saturating_mul((args.ns.len() * rows) as u64));
    let progress = progress_bar(units.saturating_mul(args.samples), args.json);
    let schemes = args
        .schemes
        .iter()
        .map(|&scheme| {
            let alpha = match scheme {
                SchemeKind::Iid => backend.optimal_acceptance_iid(&target, &draft, &args.ns)?,
                SchemeKind::WithoutReplacement => {
                    backend.optimal_acceptance_wor(&target, &draft, &args.ns)?
                }
                _ => greedy_alpha(&target, &draft, &args.ns)?,
            };
            progress.inc(args.samples);
            Ok(SchemeResult { scheme, alpha })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    // One convex solver for every row: it keeps its memory between solves.
    let convex = ConvexSolver::default();
    let verifier_results = verifiers
        .iter()
        .map(|&(kind, scheme)| {
            let rows = Rows {
                target: &target,
                draft: &draft,
            };
            rate_verifier(kind, scheme, rows, args, &convex, &progress)
        })
        .collect::<Result<Vec<_>, _>>()?;
    progress.finish_and_clear();

    let document = report_json(
        &pairs,
        backend.name(),
        &args.ns,
        &schemes,
        &verifier_results,
    );
    if args.json {
        println!("{document}");
    } else {
        print!(
            "{}",
            report_table(&pairs, &args.ns, &schemes, &verifier_results)
        );
    }
    if let Some(dir) = &args.out {
        write_outputs(
            dir,
            &pairs,
            &args.ns,
            &schemes,
            &verifier_results,
            &document,
        )?;
        if !args.json {
            println!("wrote {}", dir.display());
        }
    }
    Ok(())
}

/// The scheme a verifier is rated on: the first of iid, wor, greedy it
/// supports.
fn verifier_scheme(kind: VerifierKind) -> Result<SchemeKind, CliError> {
    [
        SchemeKind::Iid,
        SchemeKind::WithoutReplacement,
        SchemeKind::Greedy,
    ]
    .into_iter()
    .find(|&scheme| kind.supports(scheme))
    .ok_or_else(|| {
        CliError::Usage(format!(
            "verifier {kind} runs on none of iid, wor, greedy drafts, which mdsd eval draws"
        ))
    })
}

/// The transformed rows a verifier is rated on.
#[derive(Clone, Copy)]
struct Rows<'a> {
    target: &'a Matrix,
    draft: &'a Matrix,
}

fn problem(
    p: &[f64],
    q: &[f64],
    scheme: SchemeKind,
    n: usize,
    row: usize,
) -> Result<Problem, CliError> {
    let invalid = |source| CliError::Invalid {
        what: format!("row {row}"),
        source,
    };
    let p = Distribution::from_probs(p).map_err(invalid)?;
    let q = Distribution::from_probs(q).map_err(invalid)?;
    DraftScheme::new(scheme, vec![q], n)
        .and_then(|drafts| Problem::new(p, drafts))
        .map_err(invalid)
}

/// Greedy drafting's alpha* in closed form, rows on rayon's pool (not a
/// backend method: it is one pass per row, no batched kernel to gain).
fn greedy_alpha(target: &Matrix, draft: &Matrix, ns: &[usize]) -> Result<Matrix, CliError> {
    let rows = (0..target.rows())
        .into_par_iter()
        .map(|r| {
            ns.iter()
                .map(|&n| {
                    let problem = problem(target.row(r), draft.row(r), SchemeKind::Greedy, n, r)?;
                    mdsd::optimal_acceptance(&problem)
                        .map(|bound| bound.alpha_star)
                        .map_err(|e| e.at_row(r))
                })
                .collect::<Result<Vec<f64>, CliError>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Matrix::from_rows(&rows)?)
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
) -> Result<VerifierResult, CliError> {
    let rows = (0..data.target.rows())
        .into_par_iter()
        .map(|r| {
            args.ns
                .iter()
                .map(|&n| {
                    let problem = problem(data.target.row(r), data.draft.row(r), scheme, n, r)?;
                    let acceptance = match kind.exact_acceptance(&problem, convex) {
                        Some(acceptance) => {
                            progress.inc(args.samples);
                            (acceptance?, true)
                        }
                        None => {
                            let verifier = kind.prepare(&problem)?;
                            let report = mdsd::verify::sampled_with_progress(
                                &problem,
                                verifier.as_ref(),
                                args.samples,
                                args.seed.wrapping_add(r as u64),
                                &|done| progress.inc(done),
                            )?;
                            (report.acceptance, false)
                        }
                    };
                    Ok(acceptance)
                })
                .collect::<Result<Vec<(f64, bool)>, CliError>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let exact = rows.iter().flatten().all(|&(_, exact)| exact);
    let acceptance: Vec<Vec<f64>> = rows
        .iter()
        .map(|row| row.iter().map(|&(a, _)| a).collect())
        .collect();
    Ok(VerifierResult {
        kind,
        scheme,
        method: if exact { "exact" } else { "sampled" },
        acceptance: Matrix::from_rows(&acceptance)?,
    })
}

fn column_mean(m: &Matrix, j: usize) -> f64 {
    m.iter_rows().map(|row| row[j]).sum::<f64>() / m.rows().max(1) as f64
}

fn describe(pairs: &Pairs) -> String {
    let layout = match pairs.layout {
        Layout::Dense => format!("V = {}", pairs.target.cols()),
        Layout::SparseWithTail { kept, .. } => format!("top-{kept} + tail"),
    };
    format!("{} ({} rows, {layout})", pairs.source, pairs.rows())
}

fn report_json(
    pairs: &Pairs,
    backend: &str,
    ns: &[usize],
    schemes: &[SchemeResult],
    verifiers: &[VerifierResult],
) -> serde_json::Value {
    let aggregate: Vec<_> = schemes
        .iter()
        .flat_map(|s| {
            ns.iter().enumerate().map(move |(j, &n)| {
                json!({"scheme": s.scheme.name(), "n": n, "mean_alpha_star": column_mean(&s.alpha, j)})
            })
        })
        .collect();
    let rated: Vec<_> = verifiers
        .iter()
        .flat_map(|v| {
            ns.iter().enumerate().map(move |(j, &n)| {
                json!({
                    "name": v.kind.name(),
                    "scheme": v.scheme.name(),
                    "n": n,
                    "mean_acceptance": column_mean(&v.acceptance, j),
                    "method": v.method,
                })
            })
        })
        .collect();
    json!({
        "source": pairs.source,
        "backend": backend,
        "rows": pairs.rows(),
        "aggregate": aggregate,
        "verifiers": rated,
    })
}

fn report_table(
    pairs: &Pairs,
    ns: &[usize],
    schemes: &[SchemeResult],
    verifiers: &[VerifierResult],
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let header: String = ns
        .iter()
        .map(|n| format!("{:>9}", format!("n={n}")))
        .collect();
    let _ = writeln!(out, "{}", describe(pairs));
    let _ = writeln!(out, "\nalpha* per row");
    let _ = write!(out, "{:>5}", "row");
    for s in schemes {
        for n in ns {
            let _ = write!(out, "{:>12}", format!("{} n={n}", s.scheme.name()));
        }
    }
    out.push('\n');
    for r in 0..pairs.rows() {
        let _ = write!(out, "{r:>5}");
        for s in schemes {
            for a in s.alpha.row(r) {
                let _ = write!(out, "{a:>12.6}");
            }
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\nmean alpha*                 {header}");
    for s in schemes {
        let means: String = (0..ns.len())
            .map(|j| format!("{:>9.6}", column_mean(&s.alpha, j)))
            .collect();
        let _ = writeln!(out, "{:<28}{means}", s.scheme.name());
    }
    if !verifiers.is_empty() {
        let _ = writeln!(out, "\nmean acceptance             {header}");
        for v in verifiers {
            let means: String = (0..ns.len())
                .map(|j| format!("{:>9.6}", column_mean(&v.acceptance, j)))
                .collect();
            let label = format!("{} ({}, {})", v.kind, v.scheme.name(), v.method);
            let _ = writeln!(out, "{label:<28}{means}");
        }
    }
    out
}

fn write_outputs(
    dir: &Path,
    pairs: &Pairs,
    ns: &[usize],
    schemes: &[SchemeResult],
    verifiers: &[VerifierResult],
    document: &serde_json::Value,
) -> Result<(), CliError> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| CliError::Output {
            path: format!("the report file {}", path.display()),
            message: e.to_string(),
        })
    };
    std::fs::create_dir_all(dir).map_err(|e| CliError::Output {
        path: format!("the report folder {}", dir.display()),
        message: e.to_string(),
    })?;
    write("eval.json", format!("{document:#}\n"))?;
    let mut alpha = String::from("row,scheme,n,alpha_star\n");
    for s in schemes {
        for r in 0..pairs.rows() {
            for (j, n) in ns.iter().enumerate() {
                alpha += &format!("{r},{},{n},{:.12}\n", s.scheme.name(), s.alpha.row(r)[j]);
            }
        }
    }
    write("alpha.csv", alpha)?;
    let mut rated = String::from("row,verifier,scheme,n,acceptance,method\n");
    for v in verifiers {
        for r in 0..pairs.rows() {
            for (j, n) in ns.iter().enumerate() {
                rated += &format!(
                    "{r},{},{},{n},{:.12},{}\n",
                    v.kind,
                    v.scheme.name(),
                    v.acceptance.row(r)[j],
                    v.method
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
        })
        .collect();
    series.extend(verifiers.iter().map(|v| plot::Series {
        label: format!("{} ({})", v.kind, v.scheme.name()),
        points: means(ns, &v.acceptance),
        dashed: true,
    }));
    let title = format!("Mean acceptance over {} rows", pairs.rows());
    for name in ["acceptance.png", "acceptance.svg"] {
        let path = dir.join(name);
        plot::draw(&path, &title, &series).map_err(|message| CliError::Output {
            path: format!("the plot {}", path.display()),
            message,
        })?;
    }
    Ok(())
}

fn means(ns: &[usize], m: &Matrix) -> Vec<(f64, f64)> {
    ns.iter()
        .enumerate()
        .map(|(j, &n)| (n as f64, column_mean(m, j)))
        .collect()
}
