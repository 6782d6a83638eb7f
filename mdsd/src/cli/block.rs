//! `mdsd block`: expected accepted draft tokens of block-level verifiers
//! (token by token, block verification, GBV, Traversal Verification, HSD,
//! composed token-level verifiers) on K i.i.d. paths or static trees, the
//! block LP optimum and the closed-form bound, exactly or by sampling.

use clap::Args;
use mdsd::core::{
    ContextIndependent, ContextModel, DEFAULT_ENUMERATION_LIMIT, DraftShape, MarkovModel,
    PositionalRows, SchemeKind,
};
use mdsd::verify::block::{
    BlockReport, block_reference, exact_tree, prepare_tree_block, sampled_block_with_progress,
};
use serde_json::json;

use super::input::InputArgs;
use super::{Mode, at_least_one, output, progress_bar};
use mdsd::Error;
use mdsd::input::Role;

#[derive(Debug, Args)]
pub struct BlockArgs {
    /// The laws: -p/-q (one row: the same law at every position; several
    /// rows: row d after d tokens) or --data (row --row as the law at every
    /// position, or with --positional rows --row..=--row+L).
    #[command(flatten)]
    input: InputArgs,
    /// A random Markov context model from this seed instead of -p/-q.
    #[arg(long, value_name = "SEED", conflicts_with_all = ["target", "drafts", "data"])]
    markov: Option<u64>,
    /// Vocabulary size of --markov.
    #[arg(long, value_name = "V", default_value_t = 3, requires = "markov")]
    markov_vocab: usize,
    /// Tokens of context of --markov.
    #[arg(long, default_value_t = 1)]
    order: usize,
    /// Use L + 1 consecutive rows of --data, one per position.
    #[arg(long, requires = "data")]
    positional: bool,
    /// Draft path length L (with --tree, its number of depths).
    #[arg(long, value_name = "L", required_unless_present = "tree")]
    depth: Option<usize>,
    /// Number K of i.i.d. draft paths.
    #[arg(long, value_name = "K", default_value_t = 1)]
    paths: usize,
    /// A static draft tree instead of --paths: the children of every node
    /// at each depth, comma-separated (4,2,2,1); its length is the depth.
    #[arg(
        long,
        value_name = "B,...",
        value_delimiter = ',',
        conflicts_with = "paths"
    )]
    tree: Option<Vec<usize>>,
    /// How the children of a --tree node are drawn: iid, wor (without
    /// replacement) or top (the draft's top-k, as EAGLE expands).
    #[arg(long, value_name = "SCHEME", default_value = "wor", requires = "tree")]
    children: String,
    /// Comma-separated methods: token, bv, gbv, traversal, hsd, lp (the
    /// block LP optimum, tiny instances), bound (the closed-form upper
    /// bound of K i.i.d. paths) and token-level verifiers (specinfer,
    /// rrs-wor, optimal-convex, deterministic, ...) composed over the tree.
    #[arg(long, value_delimiter = ',', num_args = 1.., default_value = "token,bv,gbv")]
    methods: Vec<String>,
    #[command(flatten)]
    mode: Mode,
    /// Print exactly one JSON document.
    #[arg(long)]
    json: bool,
}

/// The depth and the shape of the draft trees from --depth, --paths,
/// --tree and --children.
fn shape(args: &BlockArgs) -> Result<(usize, DraftShape), Error> {
    let invalid = |flag: &str| {
        let what = flag.to_string();
        move |source| Error::Invalid { what, source }
    };
    let Some(branching) = &args.tree else {
        at_least_one("--paths", args.paths as u64)?;
        let depth = args
            .depth
            .ok_or_else(|| Error::Usage("mdsd block needs --depth L (or --tree)".into()))?;
        return Ok((depth, DraftShape::Paths(args.paths)));
    };
    let children: SchemeKind = args.children.parse().map_err(invalid("--children"))?;
    let shape = DraftShape::tree(branching.clone(), children).map_err(invalid("--tree"))?;
    let depth = args.depth.unwrap_or(branching.len());
    shape.check_depth(depth).map_err(invalid("--tree"))?;
    Ok((depth, shape))
}

pub fn run(args: &BlockArgs) -> Result<(), Error> {
    args.mode.check()?;
    let (depth, shape) = self::shape(args)?;
    let model = context_model(args, depth)?;
    let model = model.as_ref();
    let mut reports = Vec::with_capacity(args.methods.len());
    // Sampling can run long (--samples is the user's to choose): a bar
    // with its ETA on a terminal.
    let samples = args.mode.samples.unwrap_or(0);
    let total = samples.saturating_mul(args.methods.len() as u64);
    let bar = progress_bar(total, args.json || samples == 0);
    for name in &args.methods {
        if let Some(reference) =
            block_reference(name, model, depth, &shape, DEFAULT_ENUMERATION_LIMIT)
        {
            reports.push(reference?);
            continue;
        }
        let verifier = prepare_tree_block(name, model, depth, &shape)?;
        reports.push(match args.mode.samples {
            Some(samples) => sampled_block_with_progress(
                model,
                verifier.as_ref(),
                (depth, &shape, samples, args.mode.seed),
                &|done| bar.inc(done),
            )?,
            None => exact_tree(
                model,
                verifier.as_ref(),
                depth,
                &shape,
                DEFAULT_ENUMERATION_LIMIT,
            )?,
        });
    }
    bar.finish_and_clear();
    let note = args.input.input().is_data().then_some(UNCONDITIONED);
    if args.json {
        output::emit(&format!("{}\n", to_json(&reports, note)))?;
    } else {
        let table = to_table(args, (depth, &shape), model.vocab_size(), &reports);
        output::emit(&format!(
            "{table}{}",
            note.map_or(String::new(), |n| format!("note: {n}\n"))
        ))?;
    }
    Ok(())
}

/// What --data rows are and are not, said wherever they are used.
const UNCONDITIONED: &str = "--data rows are next-token laws recorded along the text, not \
     conditioned on the drafted prefix: row d is the law after the text's d tokens, whatever \
     the draft proposed, so these figures are those of a context model, not of the two models \
     on their own drafts (that needs live models)";

/// The context model from -p/-q, --markov or --data.
fn context_model(args: &BlockArgs, depth: usize) -> Result<Box<dyn ContextModel>, Error> {
    let invalid = |what: &str| {
        let what = what.to_string();
        move |source| Error::Invalid { what, source }
    };
    if let Some(seed) = args.markov {
        let model = MarkovModel::random(args.markov_vocab, args.order, seed)
            .map_err(invalid("--markov"))?;
        return Ok(Box::new(model));
    }
    if !args.input.input().given() {
        return Err(Error::Usage(
            "mdsd block needs -p and -q, --markov SEED or --data FILE".into(),
        ));
    }
    if args.input.input().rows.is_some() || args.input.input().row.is_some_and(|row| row.is_range())
    {
        return Err(Error::Usage(
            "mdsd block takes one row (--row R), or L + 1 rows with --positional; \
             --rows does not apply"
                .into(),
        ));
    }
    let mut pairs = args.input.input().read_all()?;
    // A data file holds many steps: its row --row is the law at every
    // position, or with --positional rows --row..=--row+L one per position.
    // Rows of -p/-q are positions already.
    if args.input.input().is_data() {
        let count = if args.positional { depth + 1 } else { 1 };
        pairs = pairs.select(mdsd::logits::RowSelection {
            first: args.input.input().first_row(),
            count: Some(count),
        })?;
    }
    let laws = |role: Role| {
        (0..pairs.rows())
            .map(|row| args.input.input().distribution(&pairs, role, row))
            .collect::<Result<Vec<_>, Error>>()
    };
    let (mut targets, mut drafts) = (laws(Role::Target)?, laws(Role::Draft(0))?);
    if targets.len() == 1 {
        let model =
            ContextIndependent::new(targets.remove(0), drafts.remove(0)).map_err(invalid("-q"))?;
        return Ok(Box::new(model));
    }
    Ok(Box::new(
        PositionalRows::new(targets, drafts).map_err(invalid("-p/-q rows"))?,
    ))
}

/// `{"methods": [{"name", "expected_accepted", "block_efficiency",
/// "max_law_error", "samples", "standard_error", "first_token_p_value",
/// "tau_law", "depth_acceptance"}], "note"}`: the law of tau is P(tau = d)
/// for d = 0..=L, the acceptance at depth d is P(tau >= d | tau >= d - 1).
fn to_json(reports: &[BlockReport], note: Option<&str>) -> String {
    let finite = |x: f64| {
        if x.is_finite() {
            json!(x)
        } else {
            serde_json::Value::Null
        }
    };
    let methods: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "expected_accepted": r.expected_accepted,
                "block_efficiency": r.block_efficiency,
                "max_law_error": r.max_law_error,
                "samples": r.samples,
                "standard_error": r.standard_error,
                "expected_accepted_interval_99": r.standard_error.map(|se| {
                    [r.expected_accepted - mdsd::verify::Z_99 * se, r.expected_accepted + mdsd::verify::Z_99 * se]
                }),
                "first_token_p_value": r.first_token_p_value,
                "tau_law": r.tau_law,
                "depth_acceptance": r.depth_acceptance().into_iter().map(finite).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "methods": methods, "note": note }).to_string()
}

fn to_table(
    args: &BlockArgs,
    (depth, shape): (usize, &DraftShape),
    vocab_size: usize,
    reports: &[BlockReport],
) -> String {
    // Exact rows check the output's law (its largest error), sampled rows
    // the first token's law (Pearson's chi-square p-value).
    let (mode, check) = match args.mode.samples {
        Some(n) => (format!("{n} sampled blocks per method"), "p-value"),
        None => ("exact enumeration".into(), "law error"),
    };
    let mut out = format!(
        "V = {vocab_size}, depth L = {depth}, {}, {mode}\n{:<14}  {:>16}  {:>16}  {:>12}  {:>14}\n",
        shape.describe(),
        "method",
        "E[accepted]",
        "block eff.",
        "std. error",
        check
    );
    let cell = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3e}"));
    let sampled = reports.iter().any(|r| r.standard_error.is_some());
    for r in reports {
        let check = r.max_law_error.or(r.first_token_p_value);
        out += &format!(
            "{:<14}  {:>16.12}  {:>16.12}  {:>12}  {:>14}\n",
            r.name,
            r.expected_accepted,
            r.block_efficiency,
            cell(r.standard_error),
            cell(check)
        );
    }
    if sampled {
        out += &format!(
            "99% interval of a sampled E[accepted]: ± {:.3} standard errors; p-value: Pearson's \
             chi-square of the first output token against the target\n",
            mdsd::verify::Z_99
        );
    }
    // The law of tau and the acceptance per depth, for tree budgeting.
    let depths: String = (0..=depth)
        .map(|d| format!("{:>9}", format!("d={d}")))
        .collect();
    out += &format!("\n{:<24}{depths}\n", "P(tau = d)");
    let shown = |x: f64| {
        if x.is_finite() {
            format!("{x:>9.6}")
        } else {
            format!("{:>9}", "-")
        }
    };
    for r in reports.iter().filter(|r| !r.tau_law.is_empty()) {
        let law: String = r.tau_law.iter().map(|&x| shown(x)).collect();
        out += &format!("{:<24}{law}\n", r.name);
    }
    out += &format!("\n{:<24}{}\n", "P(tau >= d | tau >= d-1)", &depths[9..]);
    for r in reports.iter().filter(|r| !r.tau_law.is_empty()) {
        let acceptance: String = r.depth_acceptance().into_iter().map(shown).collect();
        out += &format!("{:<24}{acceptance}\n", r.name);
    }
    out
}
