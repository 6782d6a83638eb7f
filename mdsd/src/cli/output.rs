//! The two output forms: one JSON document, or a readable table.

use mdsd::verify::{ExactReport, SampledReport};
use mdsd::{Plan, Status, Summary};
use serde_json::json;

use super::input::InputReport;
use super::{CliError, ProblemArgs};

/// Writes `text` to standard output. A reader that has gone (`mdsd ... |
/// head`) is no error: what is left has nowhere to go, and the command
/// ends quietly.
pub fn emit(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Output {
            path: "standard output".into(),
            message: e.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The solutions of one command: every row's summary.
pub struct Report<'a> {
    pub input: &'a InputReport,
    pub scheme: &'a str,
    pub n: usize,
    pub method: &'a str,
    pub rows: Vec<&'a Summary>,
}

/// Certificates longer than this are elided in tables (JSON has them whole).
const SHOWN_TOKENS: usize = 8;

impl Report<'_> {
    /// One row as JSON: `alpha_star`, `acceptance`, `certificate` (null
    /// when no certificate verified), `status`, `iterations`, `elapsed_ms`,
    /// with the scheme, n and method.
    fn row_json(&self, summary: &Summary) -> serde_json::Value {
        let certificate = match summary.status {
            Status::CertificateUnverified => serde_json::Value::Null,
            _ => json!(summary.certificate),
        };
        json!({
            "alpha_star": summary.alpha_star,
            "acceptance": summary.acceptance,
            "certificate": certificate,
            "status": summary.status.name(),
            "iterations": summary.iterations,
            "elapsed_ms": summary.elapsed.as_secs_f64() * 1e3,
            "scheme": self.scheme,
            "n": self.n,
            "method": self.method,
        })
    }

    /// One problem: the row object with `input`; several:
    /// `{"input": ..., "rows": [...]}`.
    pub fn to_json(&self) -> String {
        let mut rows: Vec<serde_json::Value> = self.rows.iter().map(|r| self.row_json(r)).collect();
        let input = self.input.to_json();
        match rows.as_mut_slice() {
            [one] => {
                one["input"] = input;
                one.to_string()
            }
            _ => json!({ "input": input, "rows": rows }).to_string(),
        }
    }

    /// A line per row: alpha*, the acceptance reached where an iterative
    /// method stopped short of it, and H*.
    pub fn to_table(&self) -> String {
        let iterative = self
            .rows
            .iter()
            .any(|r| matches!(r.status, Status::Converged { .. }));
        let acceptance = if iterative {
            format!("  {:>16}", "acceptance")
        } else {
            String::new()
        };
        let mut out = format!(
            "{}scheme {}, n = {}, method {}\n{:>5}  {:>16}{acceptance}  {:>8}  H*\n",
            self.input.note(),
            self.scheme,
            self.n,
            self.method,
            "row",
            "alpha*",
            "|H*|"
        );
        for (i, row) in self.rows.iter().enumerate() {
            let (size, tokens) = match row.status {
                Status::CertificateUnverified => {
                    ("-".into(), "(min cut did not verify)".to_string())
                }
                _ => {
                    let shown: Vec<String> = row
                        .certificate
                        .iter()
                        .take(SHOWN_TOKENS)
                        .map(usize::to_string)
                        .collect();
                    let more = if row.certificate.len() > SHOWN_TOKENS {
                        ", ..."
                    } else {
                        ""
                    };
                    (
                        row.certificate.len().to_string(),
                        format!("{{{}{more}}}", shown.join(", ")),
                    )
                }
            };
            let acceptance = if iterative {
                format!("  {:>16.12}", row.acceptance)
            } else {
                String::new()
            };
            out += &format!(
                "{:>5}  {:>16.12}{acceptance}  {size:>8}  {tokens}\n",
                self.input.first_row + i,
                row.alpha_star
            );
        }
        out
    }
}

/// The plans as one JSON document: per problem, its draft outcomes (ordered
/// tuples or sets, as `drafts_as` says) with Q and the dense law
/// pi(. | drafts); several problems as `{"rows": [...]}`.
pub fn plans_json(report: &Report, drafts_as: &str, plans: &[&Plan]) -> String {
    let documents: Vec<serde_json::Value> = report
        .rows
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
                "scheme": report.scheme,
                "n": report.n,
                "method": report.method,
                "alpha_star": row.alpha_star,
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

/// `mdsd compare --json`: what was read, alpha* and one entry per
/// verifier.
pub fn compare_json(input: &InputReport, alpha_star: f64, rows: &[ComparedRow]) -> String {
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
    json!({ "input": input.to_json(), "alpha_star": alpha_star, "verifiers": verifiers })
        .to_string()
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
