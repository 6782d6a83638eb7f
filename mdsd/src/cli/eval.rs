//! `mdsd eval`: alpha* per draft scheme and n, and the acceptance of chosen
//! verifiers, over the rows of a data file or the built-in sample; a table
//! or one JSON document, and with `--out` CSV, JSON and plots.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use mdsd::core::Side;
use mdsd::evaluation::{
    EvalRequest, Evaluation, Failure, SchemeResult, VerifierResult, column_mean, evaluate,
    verifier_scheme,
};
use mdsd::input::InputReport;
use mdsd::logits::{Backend, CpuBackend, LogitsError, Matrix, WgpuBackend};
use mdsd::verify::VerifierKind;
use mdsd::{Error, SchemeKind};
use serde_json::json;

use super::input::InputArgs;
use super::report::ReportFolder;
use super::{Shown, output, progress_bar};

pub(super) mod plot;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The rows to evaluate (-p/-q or --data); with neither, the built-in
    /// sample: 32 real rows of Qwen2.5-Coder 1.5B / 0.5B.
    #[command(flatten)]
    input: InputArgs,
    /// Numbers of drafts.
    #[arg(long = "n", value_delimiter = ',', num_args = 1.., default_value = "1,2,4,8")]
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
        num_args = 1..,
        default_value = "iid,wor,greedy,argmax,top"
    )]
    schemes: Vec<SchemeKind>,
    /// Verifiers to rate, each on the first of iid, wor, greedy, top it
    /// supports, or on the scheme named after `@` (`optimal-convex@wor`,
    /// `khisti@independent`): exact acceptance where it has a closed form
    /// (nss, naive, specinfer, kseq, deterministic, optimal-convex),
    /// sampled otherwise. `none` for no verifier.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 1..,
        default_value = "specinfer,optimal-convex"
    )]
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
                output::say(&format!("warning: {e}; running on the CPU instead"));
                Box::new(CpuBackend)
            }
        },
    }
}

pub fn run(args: &EvalArgs) -> Result<(), Error> {
    let verifiers: Vec<(VerifierKind, SchemeKind)> = args
        .verifiers
        .iter()
        .filter(|name| name.as_str() != "none")
        .map(|spec| verifier_scheme(spec))
        .collect::<Result<_, Error>>()?;
    let request = EvalRequest {
        ns: args.ns.clone(),
        schemes: args.schemes.clone(),
        verifiers,
        samples: args.samples,
        seed: args.seed,
        strict: args.strict,
    };
    let input = args.input.input();
    let backend = backend(args.backend);
    let progress = progress_bar(0, args.json);
    let evaluation = match evaluate(&input, &request, backend.as_ref(), &Shown(&progress)) {
        Err(Error::Logits(e)) if matches!(*e, LogitsError::TopKOnly { .. }) => {
            return super::top_k::eval(&super::top_k::EvalRequest {
                input: &input,
                ns: &args.ns,
                schemes: &args.schemes,
                verifiers: &args.verifiers,
                out: args.out.as_deref(),
                json: args.json,
            });
        }
        evaluation => evaluation?,
    };
    progress.finish_and_clear();
    let failed_stages = evaluation.failed_stages(&args.ns);
    let Evaluation {
        input: report,
        described,
        schemes,
        verifiers: verifier_results,
        failures,
    } = evaluation;
    let settings = Settings {
        args,
        data_sha256: input.data_sha256()?,
        backend: backend.name(),
    };
    let document = report_json(
        &settings,
        &report,
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
            &report,
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
            &report,
            &args.ns,
            &schemes,
            &verifier_results,
            &document,
        )?;
        if !args.json {
            output::emit(&format!("wrote {}\n", dir.display()))?;
        }
    }
    // A stage at which every row failed gave no number: the report keeps
    // what the others computed, and the exit code says it is not whole.
    if let Some((stage, error)) = failed_stages.first() {
        return Err(Error::Usage(format!(
            "every row failed at {stage}: {error} (the report shows what the other stages \
             computed)"
        )));
    }
    Ok(())
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
    /// The plot's title: the data, the rows, the transforms, and where a
    /// verifier was `sampled`, the draws per point.
    fn title(&self, input: &InputReport, sampled: bool) -> String {
        let args = self.args;
        let transform = |side: Side| {
            let t = args.input.input().transform(side);
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
        let rows = match input.rows {
            1 => format!("row {}", input.first_row),
            rows => format!("rows {} to {}", input.first_row, input.first_row + rows - 1),
        };
        let draws = if sampled {
            format!("; {} draws per sampled point", args.samples)
        } else {
            String::new()
        };
        format!(
            "{}, {rows}; target {}, draft {}{draws}",
            input.source,
            transform(Side::Target),
            transform(Side::Draft),
        )
    }

    fn to_json(&self, input: &InputReport) -> serde_json::Value {
        let args = self.args;
        let transform = |side| {
            let t = args.input.input().transform(side);
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

/// The most rows whose alpha* the table lists one by one.
const ROWS_SHOWN: usize = 8;

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
    // Per row, one line per scheme with a column per n: as wide as the
    // means below, however many schemes. Past `ROWS_SHOWN` rows the table
    // would be the whole output: those rows are in --json and --out.
    if input.rows <= ROWS_SHOWN {
        let _ = writeln!(out, "\nalpha* per row{:>16}{header}", "");
        for r in 0..input.rows {
            for s in schemes {
                let values: String = (s.alpha.row(r).iter())
                    .map(|&a| cell(&shown(a), false))
                    .collect();
                let _ = writeln!(
                    out,
                    "{:>6}  {:<22}{values}",
                    input.first_row + r,
                    s.scheme.name()
                );
            }
        }
    } else {
        let _ = writeln!(
            out,
            "\nalpha* per row: {} rows, in --json and in --out's alpha.csv",
            input.rows
        );
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
) -> Result<(), Error> {
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
    let sampled = verifiers.iter().any(|v| v.method == "sampled");
    let title = settings.title(input, sampled);
    folder.plots(&title, &series)?;
    Ok(())
}

fn means(ns: &[usize], m: &Matrix) -> Vec<(f64, f64)> {
    ns.iter()
        .enumerate()
        .map(|(j, &n)| (n as f64, column_mean(m, j)))
        .collect()
}
