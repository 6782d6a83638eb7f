//! The `mdsd` command line: `bound`, `solve`, `compare`, `eval` and `block`.

mod block;
mod eval;
mod input;
mod output;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mdsd::{
    BoundError, ConvexError, ConvexSolver, CoreError, Distribution, DraftScheme, FlowError,
    FlowSolver, Formulation, LpError, LpSolver, Plan, Problem, SchemeKind, Transform, VerifyError,
    optimal_acceptance_batch,
};
use thiserror::Error;

use output::{Report, Solved};

#[derive(Debug, Parser)]
#[command(
    name = "mdsd",
    version,
    about = "Optimal acceptance for multi-draft speculative sampling",
    long_about = "Computes the best acceptance any lossless verifier can reach with n draft \
                  tokens (alpha*), with the certificate set H* that proves it."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// alpha* in closed form (any vocabulary size), with its certificate H*.
    Bound(ProblemArgs),
    /// alpha* by an exact solver, with its certificate H*.
    Solve {
        #[command(flatten)]
        problem: ProblemArgs,
        /// The exact method.
        #[arg(long, value_enum)]
        method: Method,
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
        /// Bound on alpha* - alpha left to the solver (method convex).
        #[arg(long, default_value_t = mdsd::convex::DEFAULT_TOLERANCE, allow_hyphen_values = true)]
        tol: f64,
        /// Write the optimal plan pi(y | drafts) to FILE as JSON (methods lp, flow).
        #[arg(long, value_name = "FILE")]
        plan: Option<PathBuf>,
    },
    /// Rate verifiers exactly: acceptance, distance of the output law from p,
    /// and alpha*.
    Compare(CompareArgs),
    /// alpha* per draft scheme and n, and verifiers' acceptance, over the
    /// rows of a data file (default: a built-in real sample); table, JSON,
    /// CSV and plots.
    Eval(eval::EvalArgs),
    /// Expected accepted draft tokens per block of L tokens with K draft
    /// paths: token by token, block verification, GBV, composed token-level
    /// verifiers and the K-path LP optimum, exactly or sampled.
    Block(block::BlockArgs),
}

#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    problem: ProblemArgs,
    /// Comma-separated verifier names (default: every one that supports the scheme).
    #[arg(long, value_delimiter = ',')]
    verifiers: Vec<String>,
    /// Exact mode: enumerate the draft law (the default).
    #[arg(long, conflicts_with = "samples")]
    exact: bool,
    /// Sampling mode: this many draws per verifier, chi-square test of the
    /// output against p (any vocabulary size).
    #[arg(long, value_name = "N")]
    samples: Option<u64>,
    /// Seed of the sampling mode.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Method {
    /// The optimal-transport linear program (small vocabularies).
    Lp,
    /// Max flow over draft sets (polynomial in V for fixed n).
    Flow,
    /// The enumeration-free convex programs (iid drafts, any V): the
    /// acceptance its selection rule reaches, within --tol of alpha*.
    Convex,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormulationArg {
    /// Ordered draft tuples x tokens.
    Full,
    /// (draft set, token in the set) pairs.
    Relaxed,
}

#[derive(Debug, Args)]
pub struct ProblemArgs {
    /// Target distribution: `0.5,0.3,0.2`, a .npy file (1-D, or 2-D with one
    /// problem per row) or a .json file (array, or array of arrays).
    #[arg(
        short = 'p',
        long = "target",
        value_name = "P",
        allow_hyphen_values = true
    )]
    target: String,
    /// Draft distribution, same forms as -p; repeat once per draft model with
    /// --scheme independent.
    #[arg(
        short = 'q',
        long = "draft",
        value_name = "Q",
        required = true,
        allow_hyphen_values = true
    )]
    drafts: Vec<String>,
    /// Number of drafts.
    #[arg(short = 'n', long = "num-drafts")]
    pub n: usize,
    /// Draft scheme: iid, wor (without replacement), independent, greedy
    /// (Hu et al.), hub (SpecHub's two drafts around argmax q; n = 2).
    #[arg(long, default_value = "iid")]
    pub scheme: SchemeKind,
    /// Inputs are logits, not probabilities.
    #[arg(long)]
    logits: bool,
    /// Temperature applied to target and drafts (0 = argmax).
    #[arg(long, allow_hyphen_values = true)]
    temperature: Option<f64>,
    /// Keep the k most likely tokens of target and drafts.
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the smallest most-likely set of mass >= p of target and drafts.
    #[arg(long)]
    top_p: Option<f64>,
    /// Print exactly one JSON document.
    #[arg(long)]
    json: bool,
}

/// Everything that can go wrong, one line each.
#[derive(Debug, Error)]
pub enum CliError {
    #[error("{arg}: {message}")]
    Input { arg: String, message: String },
    #[error("{what}: {source}")]
    Invalid { what: String, source: CoreError },
    #[error("{0}")]
    Usage(String),
    #[error("row {row}: {source}")]
    Bound { row: usize, source: BoundError },
    #[error("row {row}: {source}")]
    Lp { row: usize, source: LpError },
    #[error("row {row}: {source}")]
    Flow { row: usize, source: FlowError },
    #[error("row {row}: {source}")]
    Convex { row: usize, source: ConvexError },
    #[error("{0}")]
    BlockLp(LpError),
    #[error("cannot write the plan to {path}: {message}")]
    Output { path: String, message: String },
    #[error("{0}")]
    Verify(#[from] VerifyError),
    #[error("{0}")]
    Logits(#[from] mdsd::logits::LogitsError),
}

/// Parses the command line and runs it.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Bound(args) => {
            let problems = build_problems(&args)?;
            let rows = optimal_acceptance_batch(&problems)
                .into_iter()
                .enumerate()
                .map(|(row, result)| {
                    result
                        .map(Solved::from)
                        .map_err(|source| CliError::Bound { row, source })
                })
                .collect::<Result<Vec<_>, _>>()?;
            print(&args, "bound", rows)
        }
        Command::Solve {
            problem: args,
            method,
            formulation,
            max_variables,
            decomposed,
            max_sets,
            tol,
            plan,
        } => {
            if method == Method::Convex && plan.is_some() {
                return Err(CliError::Usage(
                    "--plan writes the plans of --method lp and flow; the convex \
                     solver's verifier is a selection rule (see mdsd compare)"
                        .into(),
                ));
            }
            if !(tol > 0.0 && tol.is_finite()) {
                return Err(CliError::Usage(format!(
                    "--tol {tol} is invalid: it must be a positive number"
                )));
            }
            let convex = ConvexSolver::default().with_tolerance(tol);
            let problems = build_problems(&args)?;
            let lp = LpSolver::default()
                .with_formulation(match formulation {
                    FormulationArg::Full => Formulation::Full,
                    FormulationArg::Relaxed => Formulation::Relaxed,
                })
                .with_max_variables(max_variables);
            let flow = FlowSolver::default()
                .with_max_sets(max_sets)
                .with_decomposition(decomposed);
            let solved = problems
                .iter()
                .enumerate()
                .map(|(row, problem)| match method {
                    Method::Lp => lp
                        .solve(problem)
                        .map(|s| (Solved::from(&s), Some(s.plan)))
                        .map_err(|source| CliError::Lp { row, source }),
                    Method::Flow => flow
                        .solve(problem)
                        .map(|s| (Solved::from(&s), Some(s.plan)))
                        .map_err(|source| CliError::Flow { row, source }),
                    Method::Convex => {
                        let start = Instant::now();
                        convex
                            .solve(problem)
                            .map(|s| {
                                let ms = start.elapsed().as_secs_f64() * 1e3;
                                (Solved::from_convex(&s, ms), None)
                            })
                            .map_err(|source| CliError::Convex { row, source })
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            let (rows, plans): (Vec<Solved>, Vec<Option<Plan>>) = solved.into_iter().unzip();
            let plans: Vec<Plan> = plans.into_iter().flatten().collect();
            let name = match method {
                Method::Lp => "lp",
                Method::Flow => "flow",
                Method::Convex => "convex",
            };
            if let Some(path) = plan {
                // Only the full LP's plan is over ordered tuples.
                let drafts_as = if method == Method::Lp && lp.formulation == Formulation::Full {
                    "tuples"
                } else {
                    "sets"
                };
                let document = output::plans_json(&args, name, drafts_as, &rows, &plans);
                std::fs::write(&path, document).map_err(|e| CliError::Output {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
            }
            print(&args, name, rows)
        }
        Command::Compare(compare) => run_compare(&compare),
        Command::Eval(args) => eval::run(&args),
        Command::Block(args) => block::run(&args),
    }
}

fn run_compare(compare: &CompareArgs) -> Result<(), CliError> {
    let args = &compare.problem;
    let problems = build_problems(args)?;
    let [problem] = problems.as_slice() else {
        return Err(CliError::Usage(format!(
            "mdsd compare takes one problem, the inputs hold {} rows",
            problems.len()
        )));
    };
    let scheme = problem.drafts().kind();
    let names: Vec<String> = if compare.verifiers.is_empty() {
        mdsd::verify::verifier_names()
            .filter(|name| mdsd::verify::supports(name, scheme).unwrap_or(false))
            .map(String::from)
            .collect()
    } else {
        compare.verifiers.clone()
    };
    let alpha_star = mdsd::verify::alpha_star(problem)?;
    let mut rows = Vec::with_capacity(names.len());
    for name in &names {
        let verifier = mdsd::verify::prepare(name, problem)?;
        rows.push(match compare.samples {
            Some(draws) => output::ComparedRow::from(&mdsd::verify::sampled(
                problem,
                verifier.as_ref(),
                draws,
                compare.seed,
            )?),
            None => output::ComparedRow::from(&mdsd::verify::exact(
                problem,
                verifier.as_ref(),
                mdsd::core::DEFAULT_ENUMERATION_LIMIT,
            )?),
        });
    }
    if args.json {
        println!("{}", output::compare_json(alpha_star, &rows));
    } else {
        print!(
            "{}",
            output::compare_table(args, alpha_star, compare.samples, &rows)
        );
    }
    Ok(())
}

fn print(args: &ProblemArgs, method: &str, rows: Vec<Solved>) -> Result<(), CliError> {
    let report = Report {
        scheme: args.scheme.name(),
        n: args.n,
        method,
        rows,
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

fn build_problems(args: &ProblemArgs) -> Result<Vec<Problem>, CliError> {
    let transform = Transform {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    let independent = args.scheme == SchemeKind::Independent;
    if independent && args.drafts.len() != args.n {
        return Err(CliError::Usage(format!(
            "--scheme independent takes -q once per draft model: got {} -q for n = {}",
            args.drafts.len(),
            args.n
        )));
    }
    if !independent && args.drafts.len() != 1 {
        return Err(CliError::Usage(format!(
            "--scheme {} takes one -q (got {}); repeat -q only with --scheme independent",
            args.scheme,
            args.drafts.len()
        )));
    }
    let targets = input::read_rows("-p", &args.target)?;
    let drafts = args
        .drafts
        .iter()
        .map(|spec| input::read_rows("-q", spec))
        .collect::<Result<Vec<_>, _>>()?;
    let rows = std::iter::once(targets.len())
        .chain(drafts.iter().map(Vec::len))
        .max()
        .unwrap_or(1);
    let pick = |source: &[Vec<f64>], name: &str, row: usize| -> Result<Vec<f64>, CliError> {
        match source.len() {
            1 => Ok(source[0].clone()),
            len if len == rows => Ok(source[row].clone()),
            len => Err(CliError::Usage(format!(
                "{name} has {len} rows but another input has {rows}; give equal row counts or one row to share"
            ))),
        }
    };
    let to_distribution = |values: Vec<f64>, what: String| -> Result<Distribution, CliError> {
        let dist = if args.logits {
            transform.apply_to_logits(&values)
        } else {
            Distribution::from_probs(values).and_then(|d| transform.apply(&d))
        };
        dist.map_err(|source| CliError::Invalid { what, source })
    };
    let label = |name: &str, row: usize| {
        if rows > 1 {
            format!("{name} row {row}")
        } else {
            name.to_string()
        }
    };
    (0..rows)
        .map(|row| {
            let p = to_distribution(pick(&targets, "-p", row)?, label("-p", row))?;
            let qs = drafts
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let name = if independent {
                        format!("-q #{}", i + 1)
                    } else {
                        "-q".into()
                    };
                    to_distribution(pick(d, &name, row)?, label(&name, row))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let invalid = |source| CliError::Invalid {
                what: label("problem", row),
                source,
            };
            let scheme = DraftScheme::new(args.scheme, qs, args.n).map_err(invalid)?;
            Problem::new(p, scheme).map_err(invalid)
        })
        .collect()
}
