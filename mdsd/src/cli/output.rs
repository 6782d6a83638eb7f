//! The two output forms: one JSON document, or a readable table.

use mdsd::verify::{ExactReport, SampledReport};
use mdsd::{Bound, ConvexSolution, FlowSolution, LpSolution, Plan};
use serde_json::json;

use super::ProblemArgs;
use serde::Serialize;

/// One solved problem. The certificate is `None` only when an exact
/// solver's min cut did not verify (JSON `null`).
#[derive(Debug)]
pub struct Solved {
    pub alpha: f64,
    pub certificate: Option<Vec<usize>>,
    /// The convex solver's run, for `--method convex`.
    pub run: Option<SolverRun>,
}

/// How an iterative solver ran (JSON fields of `--method convex`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SolverRun {
    pub success: bool,
    pub iterations: usize,
    pub setup_ms: f64,
}

impl Solved {
    /// A convex solution: its acceptance, H*, and the run.
    pub fn from_convex(solution: &ConvexSolution, setup_ms: f64) -> Self {
        Self {
            alpha: solution.alpha,
            certificate: Some(solution.certificate.clone()),
            run: Some(SolverRun {
                success: true,
                iterations: solution.iterations,
                setup_ms,
            }),
        }
    }
}

impl From<Bound> for Solved {
    fn from(bound: Bound) -> Self {
        Self {
            alpha: bound.alpha,
            certificate: Some(bound.certificate),
            run: None,
        }
    }
}

impl From<&LpSolution> for Solved {
    fn from(solution: &LpSolution) -> Self {
        Self {
            alpha: solution.alpha,
            certificate: solution.certificate.clone(),
            run: None,
        }
    }
}

impl From<&FlowSolution> for Solved {
    fn from(solution: &FlowSolution) -> Self {
        Self {
            alpha: solution.alpha,
            certificate: Some(solution.certificate.clone()),
            run: None,
        }
    }
}

/// The plans as one JSON document: per problem, its draft outcomes (ordered
/// tuples or sets, as `drafts_as` says) with Q and the dense law pi(. | drafts);
/// several problems as `{"rows": [...]}`.
pub fn plans_json(
    args: &ProblemArgs,
    method: &str,
    drafts_as: &str,
    rows: &[Solved],
    plans: &[Plan],
) -> String {
    let documents: Vec<serde_json::Value> = rows
        .iter()
        .zip(plans)
        .map(|(row, plan)| {
            let outcomes: Vec<serde_json::Value> = plan
                .law()
                .iter()
                .enumerate()
                .map(|(i, (drafts, prob))| json!({"drafts": drafts, "prob": prob, "pi": plan.conditional(i)}))
                .collect();
            json!({
                "scheme": args.scheme.name(),
                "n": args.n,
                "method": method,
                "alpha": row.alpha,
                "vocab_size": plan.vocab_size(),
                "drafts_as": drafts_as,
                "outcomes": outcomes,
            })
        })
        .collect();
    match documents.as_slice() {
        [one] => one.to_string(),
        _ => json!({ "rows": documents }).to_string(),
    }
}

#[derive(Debug, Serialize)]
struct JsonRow<'a> {
    alpha: f64,
    scheme: &'a str,
    n: usize,
    method: &'a str,
    certificate: Option<&'a [usize]>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    run: Option<SolverRun>,
}

pub struct Report<'a> {
    pub scheme: &'a str,
    pub n: usize,
    pub method: &'a str,
    pub rows: Vec<Solved>,
}

/// Certificates longer than this are elided in tables (JSON has them whole).
const SHOWN_TOKENS: usize = 8;

impl Report<'_> {
    /// One problem: the row object; several: `{"rows": [...]}`.
    pub fn to_json(&self) -> String {
        let rows: Vec<JsonRow> = self
            .rows
            .iter()
            .map(|r| JsonRow {
                alpha: r.alpha,
                scheme: self.scheme,
                n: self.n,
                method: self.method,
                certificate: r.certificate.as_deref(),
                run: r.run,
            })
            .collect();
        let document = match rows.as_slice() {
            [one] => serde_json::to_value(one),
            _ => serde_json::to_value(json!({ "rows": rows })),
        };
        document.map(|d| d.to_string()).unwrap_or_default()
    }

    pub fn to_table(&self) -> String {
        let mut out = format!(
            "scheme {}, n = {}, method {}\n{:>5}  {:>16}  {:>8}  H*\n",
            self.scheme, self.n, self.method, "row", "alpha*", "|H*|"
        );
        for (i, row) in self.rows.iter().enumerate() {
            let (size, tokens) = match &row.certificate {
                Some(tokens) => {
                    let shown: Vec<String> = tokens
                        .iter()
                        .take(SHOWN_TOKENS)
                        .map(usize::to_string)
                        .collect();
                    let more = if tokens.len() > SHOWN_TOKENS {
                        ", ..."
                    } else {
                        ""
                    };
                    (
                        tokens.len().to_string(),
                        format!("{{{}{more}}}", shown.join(", ")),
                    )
                }
                None => ("-".into(), "(min cut did not verify)".into()),
            };
            out += &format!("{i:>5}  {:>16.12}  {size:>8}  {tokens}\n", row.alpha);
        }
        out
    }
}

/// One verifier's line in `mdsd compare`: exact mode has the marginal
/// error and no p-value, sampling mode the reverse.
pub struct ComparedRow {
    name: String,
    acceptance: f64,
    max_marginal_error: Option<f64>,
    chi2_p_value: Option<f64>,
}

impl From<&ExactReport> for ComparedRow {
    fn from(r: &ExactReport) -> Self {
        Self {
            name: r.name.clone(),
            acceptance: r.acceptance,
            max_marginal_error: Some(r.max_marginal_error.max(r.max_law_error)),
            chi2_p_value: None,
        }
    }
}

impl From<&SampledReport> for ComparedRow {
    fn from(r: &SampledReport) -> Self {
        Self {
            name: r.name.clone(),
            acceptance: r.acceptance,
            max_marginal_error: None,
            chi2_p_value: Some(r.chi2_p_value),
        }
    }
}

/// `mdsd compare --json`: alpha* and one entry per verifier.
pub fn compare_json(alpha_star: f64, rows: &[ComparedRow]) -> String {
    let verifiers: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "acceptance": r.acceptance,
                "max_marginal_error": r.max_marginal_error,
                "chi2_p_value": r.chi2_p_value,
            })
        })
        .collect();
    json!({ "alpha_star": alpha_star, "verifiers": verifiers }).to_string()
}

/// `mdsd compare`: a table of verifiers against alpha*.
pub fn compare_table(
    args: &ProblemArgs,
    alpha_star: f64,
    samples: Option<u64>,
    rows: &[ComparedRow],
) -> String {
    let mode = match samples {
        Some(draws) => format!("{draws} draws"),
        None => "exact enumeration".into(),
    };
    let mut out = format!(
        "scheme {}, n = {}, {mode}; alpha* = {alpha_star:.12}\n{:<14}  {:>14}  {:>14}  {:>14}  {:>12}\n",
        args.scheme.name(),
        args.n,
        "verifier",
        "acceptance",
        "gap to alpha*",
        "max |out - p|",
        "chi2 p"
    );
    let cell = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3e}"));
    for r in rows {
        out += &format!(
            "{:<14}  {:>14.12}  {:>14.3e}  {:>14}  {:>12}\n",
            r.name,
            r.acceptance,
            alpha_star - r.acceptance,
            cell(r.max_marginal_error),
            cell(r.chi2_p_value)
        );
    }
    out
}
