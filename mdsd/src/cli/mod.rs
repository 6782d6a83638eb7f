//! The `mdsd` command line: `bound`, `solve`, `compare`, `eval` and `block`.

mod block;
mod eval;
mod input;
mod output;
mod report;
mod top_k;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mdsd::Error;
use mdsd::solving::SolveMethod;
use mdsd::verify::VerifierKind;
use mdsd::{ConvexSolver, CoreError, Formulation, Problem, SchemeKind, VerifyError};

use input::InputArgs;
use mdsd::input::InputReport;
use output::Report;
pub use output::{emit, say};

#[derive(Debug, Parser)]
#[command(
    name = "mdsd",
    version,
    about = "Optimal acceptance for multi-draft speculative sampling",
    long_about = "Computes the best acceptance any lossless verifier can reach with n draft \
                  tokens (alpha*), with the certificate set H* that proves it.",
    after_help = "Examples:
  mdsd eval                                     the built-in real sample: alpha* and verifiers
  mdsd eval --data rows.npz --out report        your rows: table, CSV, JSON and plots
  mdsd bound -p 0.5,0.3,0.2 -q 0.2,0.3,0.5 -n 2
  mdsd compare -p 0.5,0.3,0.2 -q 0.2,0.3,0.5 -n 2
  mdsd block --markov 7 --depth 2 --paths 2

Reference: docs/cli.md"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The command line's arguments, a negative number read as the value
    /// of any option that takes one: `--top-p -0.1` is then refused for its
    /// value, not taken for a flag `-0`.
    pub fn try_parse_args() -> Result<Self, clap::Error> {
        let mut command = negative_values(<Self as clap::CommandFactory>::command());
        let matches = command.try_get_matches_from_mut(std::env::args_os())?;
        <Self as clap::FromArgMatches>::from_arg_matches(&matches)
            .map_err(|e| e.format(&mut command))
    }
}

/// `command` and its subcommands with every option that takes a value
/// taking a negative number as one.
fn negative_values(command: clap::Command) -> clap::Command {
    let names: Vec<String> = (command.get_subcommands())
        .map(|sub| sub.get_name().to_string())
        .collect();
    let command = command.mut_args(|arg| match arg.get_action().takes_values() {
        true => arg.allow_negative_numbers(true),
        false => arg,
    });
    names.into_iter().fold(command, |command, name| {
        command.mut_subcommand(name, negative_values)
    })
}

#[derive(Debug, Subcommand)]
enum Command {
    /// alpha* in closed form (any vocabulary size), with its certificate H*.
    #[command(after_help = "Examples:
  mdsd bound -p 0.5,0.3,0.2 -q 0.2,0.3,0.5 -n 2
  mdsd bound --data rows.npz -n 4 --scheme wor --json
  mdsd bound -p p.npy -q q.npy --logits --temperature 0.8 -n 4")]
    Bound(ProblemArgs),
    /// alpha* by an exact solver, with its certificate H*.
    #[command(after_help = "Examples:
  mdsd solve -p 0.5,0.3,0.2 -q 0.2,0.3,0.5 -n 2 --method flow --plan plan.json
  mdsd solve --data rows.npz --row 3 -n 4 --method convex --max-gap 1e-9")]
    Solve(SolveArgs),
    /// Rate verifiers exactly: acceptance, distance of the output law from p,
    /// and alpha*.
    #[command(after_help = "Examples:
  mdsd compare -p 0.5,0.3,0.2 -q 0.2,0.3,0.5 -n 2
  mdsd compare --data rows.npz --row 5 -n 4 --samples 100000 --verifiers specinfer,optimal-convex")]
    Compare(CompareArgs),
    /// alpha* per draft scheme and n, and verifiers' acceptance, over the
    /// rows of a data file (default: a built-in real sample); table, JSON,
    /// CSV and plots.
    #[command(after_help = "Examples:
  mdsd eval
  mdsd eval --data rows.npz --n 2,4,8 --schemes iid,wor --out report
  mdsd eval --data rows.npz --verifiers optimal-convex@wor,khisti --samples 20000 --json")]
    Eval(eval::EvalArgs),
    /// Expected accepted draft tokens per block of L tokens with K draft
    /// paths: token by token, block verification, GBV, composed token-level
    /// verifiers and the K-path LP optimum, exactly or sampled.
    #[command(after_help = "Examples:
  mdsd block --markov 7 --depth 2 --paths 2 --methods token,bv,gbv,lp
  mdsd block -p 0.5,0.3,0.2 -q 0.2,0.3,0.5 --depth 3 --samples 100000")]
    Block(block::BlockArgs),
}

/// The problem of `bound`, `solve` and `compare`: inputs, scheme and n.
#[derive(Debug, Args)]
pub struct ProblemArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Number of drafts.
    #[arg(short = 'n', long = "num-drafts")]
    pub n: usize,
    /// Draft scheme: iid, wor (without replacement), independent, greedy
    /// (Hu et al.), hub (SpecHub's two drafts around argmax q; n = 2),
    /// argmax (the most likely draft token; n = 1), top (the n most likely).
    #[arg(long, default_value = "iid")]
    pub scheme: SchemeKind,
    /// Print exactly one JSON document.
    #[arg(long)]
    json: bool,
    /// How JSON gives H* (bound, solve): compact (its size, p(H*) and, for
    /// a prefix of the ascending-p/q order, the (p/q, token) that ends it)
    /// or full (the ids as well).
    #[arg(long, value_enum, default_value_t = CertificateArg::Compact)]
    certificate: CertificateArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CertificateArg {
    Compact,
    Full,
}

impl ProblemArgs {
    fn problems(&self) -> Result<(Vec<Problem>, InputReport), Error> {
        self.input.input().problems(self.scheme, self.n)
    }
}

#[derive(Debug, Args)]
struct SolveArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// The exact method.
    #[arg(long, value_enum)]
    method: MethodArg,
    /// Which LP to build (method lp).
    #[arg(long, value_enum, default_value_t = FormulationArg::Full)]
    formulation: FormulationArg,
    /// Refuse LPs with more variables than this (method lp).
    #[arg(long, default_value_t = mdsd::lp::DEFAULT_MAX_VARIABLES)]
    max_variables: usize,
    /// Solve the inner and outer networks of H* separately (method flow).
    #[arg(long)]
    decomposed: bool,
    /// Refuse flow networks with more draft sets than this (method flow).
    #[arg(long, default_value_t = mdsd::flow::DEFAULT_MAX_SETS)]
    max_sets: usize,
    /// Bound on alpha* - acceptance left to the solver (method convex).
    #[arg(long, default_value_t = mdsd::convex::DEFAULT_TOLERANCE, allow_hyphen_values = true)]
    max_gap: f64,
    /// Milliseconds a row's solve may take past its start rule (method
    /// convex): the rule reached by then, lossless, with its gap to alpha*.
    #[arg(long, allow_hyphen_values = true)]
    budget_ms: Option<f64>,
    /// Write the optimal plan pi(y | drafts) to FILE as JSON (methods lp, flow).
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// Comma-separated verifier names (default: every one that supports the scheme).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    verifiers: Vec<String>,
    #[command(flatten)]
    mode: Mode,
}

/// Exact enumeration or sampling, for `compare` and `block`.
#[derive(Debug, Args)]
pub struct Mode {
    /// Exact mode: enumerate every draft outcome (the default).
    #[arg(long, conflicts_with = "samples")]
    exact: bool,
    /// Sampling mode: this many draws (any vocabulary size), with a
    /// chi-square test of the output against p.
    #[arg(long, value_name = "N")]
    samples: Option<u64>,
    /// Seed of the sampling mode.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl Mode {
    /// `--samples 0` asks for no draw: a report of nothing.
    fn check(&self) -> Result<(), Error> {
        at_least_one("--samples", self.samples.unwrap_or(1))
    }
}

/// A progress bar on stderr when it is a terminal (indicatif draws nothing
/// otherwise) and stdout is not a JSON document.
pub(crate) fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} ({eta})") {
        bar.set_style(style);
    }
    bar
}

/// A progress bar as the library's runs report to it (the command line
/// stops on Ctrl-C as any process does, so it never asks a run to stop).
pub(crate) struct Shown<'a>(pub(crate) &'a ProgressBar);

impl mdsd::core::Progress for Shown<'_> {
    fn start(&self, total: u64) {
        self.0.set_length(total);
    }

    fn advance(&self, done: u64) {
        self.0.inc(done);
    }
}

/// A count the user gave that must be at least 1.
fn at_least_one(flag: &'static str, value: u64) -> Result<(), Error> {
    if value == 0 {
        return Err(Error::Setting {
            flag,
            value: "0".into(),
            expected: "at least 1",
        });
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MethodArg {
    /// The optimal-transport linear program (small vocabularies).
    Lp,
    /// Max flow over draft sets (polynomial in V for fixed n).
    Flow,
    /// The enumeration-free convex programs (iid drafts, any V): the
    /// acceptance its selection rule reaches, within --max-gap of alpha*.
    Convex,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormulationArg {
    /// Ordered draft tuples x tokens.
    Full,
    /// (draft set, token in the set) pairs.
    Relaxed,
}

/// Parses the command line and runs it.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Bound(args) => match solve(&args, &SolveMethod::ClosedForm, None) {
            // A file of top-k entries only: alpha* as an interval.
            Err(Error::Logits(e)) if matches!(*e, mdsd::logits::LogitsError::TopKOnly { .. }) => {
                top_k::bound(&args.input.input(), args.scheme, args.n, args.json)
            }
            other => other,
        },
        Command::Solve(solve_args) => {
            let method = match solve_args.method {
                MethodArg::Lp => SolveMethod::Lp {
                    formulation: match solve_args.formulation {
                        FormulationArg::Full => Formulation::Full,
                        FormulationArg::Relaxed => Formulation::Relaxed,
                    },
                    max_variables: solve_args.max_variables,
                },
                MethodArg::Flow => SolveMethod::Flow {
                    max_sets: solve_args.max_sets,
                    decomposed: solve_args.decomposed,
                },
                MethodArg::Convex => SolveMethod::Convex {
                    max_gap: solve_args.max_gap,
                    budget_ms: solve_args.budget_ms,
                },
            };
            if solve_args.plan.is_some() && method.plan_drafts().is_none() {
                return Err(Error::Usage(
                    "--plan writes the plans of --method lp and flow; the convex solver's \
                     verifier is a selection rule (see mdsd compare)"
                        .into(),
                ));
            }
            solve(&solve_args.problem, &method, solve_args.plan.as_deref())
        }
        Command::Compare(compare) => run_compare(&compare),
        Command::Eval(args) => eval::run(&args),
        Command::Block(args) => block::run(&args),
    }
}

/// Every row's problem by one method (`mdsd::solving`), reported as a
/// table or JSON; with `plan`, the solutions' plans written to that path.
fn solve(
    args: &ProblemArgs,
    method: &SolveMethod,
    plan: Option<&std::path::Path>,
) -> Result<(), Error> {
    let full = args.certificate == CertificateArg::Full;
    // Tables show the first ids, JSON all of them only when asked.
    let kept_ids = (!full).then_some(output::SHOWN_TOKENS);
    let solved = mdsd::solving::solve_rows(
        &args.input.input(),
        args.scheme,
        args.n,
        method,
        kept_ids,
        plan.is_some(),
    )?;
    let report = Report {
        input: &solved.input,
        scheme: args.scheme.name(),
        n: args.n,
        method: solved.method,
        rows: solved.rows.iter().map(|(summary, _)| summary).collect(),
        certificates: solved.rows.iter().map(|(_, c)| c.clone()).collect(),
        full_certificates: full,
    };
    if let (Some(path), Some(drafts_as)) = (plan, method.plan_drafts()) {
        let plans: Vec<&mdsd::Plan> = solved.plans.iter().collect();
        std::fs::write(path, output::plans_json(&report, drafts_as, &plans)).map_err(|e| {
            Error::Output {
                path: format!("the plan to {}", path.display()),
                message: e.to_string(),
            }
        })?;
    }
    if args.json {
        output::emit(&format!("{}\n", report.to_json()))?;
    } else {
        output::emit(&report.to_table())?;
    }
    Ok(())
}

/// An exact comparison refused for its size, as what rates a verifier at
/// that size: sampling, not another solver.
fn too_large_to_enumerate(error: VerifyError) -> Error {
    match &error {
        VerifyError::Invalid(CoreError::TooLarge {
            what, size, limit, ..
        }) => Error::Usage(format!(
            "exact mode enumerates {what}: {} of them here, above the limit of {}; mdsd compare \
             rates verifiers at any vocabulary size by sampling: add --samples N (for example \
             --samples 100000)",
            mdsd::core::Count(*size),
            mdsd::core::Count(*limit)
        )),
        _ => Error::from(error),
    }
}

fn run_compare(compare: &CompareArgs) -> Result<(), Error> {
    compare.mode.check()?;
    let args = &compare.problem;
    let (problems, input) = args.problems()?;
    let [problem] = problems.as_slice() else {
        return Err(Error::Usage(format!(
            "mdsd compare takes one problem, the inputs hold {} rows (choose one with --row R)",
            problems.len()
        )));
    };
    let scheme = problem.drafts().kind();
    let kinds: Vec<VerifierKind> = if compare.verifiers.is_empty() {
        VerifierKind::ALL
            .into_iter()
            .filter(|kind| kind.supports(scheme))
            .collect()
    } else {
        compare
            .verifiers
            .iter()
            .map(|name| name.parse())
            .collect::<Result<_, _>>()?
    };
    mdsd::verify::check_verifier_drafts(problem.drafts().n())?;
    let alpha = mdsd::verify::certified_alpha_star(problem, &ConvexSolver::default())?;
    // A verifier of the default set that cannot be built at this size (its
    // refusal names what scales instead) is left out and named; one the
    // user asked for is an error.
    let mut verifiers = Vec::with_capacity(kinds.len());
    let mut skipped = Vec::new();
    for kind in kinds {
        match kind.prepare(problem) {
            Ok(verifier) => verifiers.push(verifier),
            Err(e) if compare.verifiers.is_empty() && !e.instead().is_empty() => {
                skipped.push(output::Skipped {
                    verifier: kind.name(),
                    reason: e.to_string(),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    if verifiers.is_empty() {
        let reasons: Vec<String> = (skipped.iter())
            .map(|s| format!("{}: {}", s.verifier, s.reason))
            .collect();
        return Err(Error::Usage(format!(
            "no verifier can run on this problem ({})",
            reasons.join("; ")
        )));
    }
    let mut rows = Vec::with_capacity(verifiers.len());
    // Sampling can run long (--samples is the user's to choose): a bar
    // with its ETA on a terminal.
    let draws = compare.mode.samples.unwrap_or(0);
    let bar = progress_bar(
        draws.saturating_mul(verifiers.len() as u64),
        args.json || draws == 0,
    );
    for verifier in &verifiers {
        rows.push(match compare.mode.samples {
            Some(draws) => output::ComparedRow::from(&mdsd::verify::sampled_with_progress(
                problem,
                verifier.as_ref(),
                draws,
                compare.mode.seed,
                &|done| bar.inc(done),
            )?),
            None => output::ComparedRow::from(
                &mdsd::verify::exact(
                    problem,
                    verifier.as_ref(),
                    mdsd::core::DEFAULT_ENUMERATION_LIMIT,
                )
                .map_err(too_large_to_enumerate)?,
            ),
        });
    }
    bar.finish_and_clear();
    if args.json {
        output::emit(&format!(
            "{}\n",
            output::compare_json(&input, alpha, &rows, &skipped)
        ))?;
    } else {
        output::emit(&format!(
            "{}{}",
            input.note(),
            output::compare_table(args, alpha, compare.mode.samples, &rows, &skipped)
        ))?;
    }
    Ok(())
}
