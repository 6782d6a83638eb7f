//! The two output forms: one JSON document, or a readable table.

use mdsd::verify::{CertifiedAlpha, ExactReport, SampledReport};
use mdsd::{Plan, Status, Summary};
use serde_json::json;

use mdsd::Error;
use mdsd::input::InputReport;
use mdsd::solving::CompactCertificate;

use super::ProblemArgs;

/// One line to standard error, ignoring a stderr that cannot take it
/// (full or closed): the exit code still says what happened.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Writes `text` to standard output. A reader that has gone (`mdsd ... |
/// head`) is no error: what is left has nowhere to go, and the command
/// ends quietly. A standard output closed from the start (`>&-`) is one:
/// the output would be lost without a word.
pub fn emit(text: &str) -> Result<(), Error> {
    use std::io::Write;
    if stdout_closed_at_start() {
        return Err(Error::Output {
            path: "standard output".into(),
            message: "it was closed when mdsd started (`>&-`), so the output would be lost: \
                      redirect it (`> FILE`, or `> /dev/null` to discard it)"
                .into(),
        });
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Output {
            path: "standard output".into(),
            message: e.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The solutions of one command: every row's summary, and what its JSON
/// says of each H*.
pub struct Report<'a> {
    pub input: &'a InputReport,
    pub scheme: &'a str,
    pub n: usize,
    pub method: &'a str,
    pub rows: Vec<&'a Summary>,
    pub certificates: Vec<CompactCertificate>,
    /// `--certificate full`: the ids of H* as well.
    pub full_certificates: bool,
}

/// Whether a solve of this status was iterative: its acceptance may fall
/// short of alpha*.
fn iterative(status: Status) -> bool {
    matches!(status, Status::Converged { .. } | Status::TimeLimit)
}

/// Certificates longer than this are elided in tables (JSON has them whole).
pub const SHOWN_TOKENS: usize = 8;

impl Report<'_> {
    /// One row as JSON: `alpha_star`, `acceptance`, `gap`, `certificate` (a
    /// compact certificate, null when none verified), `status`, `iterations`, `elapsed_ms`,
    /// with the scheme, n and method.
    fn row_json(&self, summary: &Summary, certificate: &CompactCertificate) -> serde_json::Value {
        let certificate = match summary.status {
            Status::CertificateUnverified => serde_json::Value::Null,
            _ => {
                let mut compact = json!({
                    "size": certificate.size,
                    "p_mass": certificate.p_mass,
                    "ratio_prefix_end": certificate
                        .ratio_prefix_end
                        .map(|(ratio, token)| json!({ "ratio": ratio, "token": token })),
                });
                if self.full_certificates {
                    compact["tokens"] = json!(summary.certificate);
                }
                compact
            }
        };
        // Independent drafts have no closed form: an iterative solve
        // brackets alpha*, and the document says which end is which.
        let interval = (self.scheme == "independent" && iterative(summary.status)).then(|| {
            json!({
                "lower": summary.acceptance,
                "upper": summary.alpha_star,
                "lower_is": "the acceptance the optimal-convex verifier reaches",
                "upper_is": "p(H) + 1 - q_1(H)...q_n(H) for the certificate H",
            })
        });
        let mut row = json!({
            "alpha_star": summary.alpha_star,
            "acceptance": summary.acceptance,
            "gap": summary.gap(),
            "certificate": certificate,
            "status": summary.status.name(),
            "iterations": summary.iterations,
            "elapsed_ms": summary.elapsed.as_secs_f64() * 1e3,
            "scheme": self.scheme,
            "n": self.n,
            "method": self.method,
        });
        if let Some(interval) = interval {
            row["alpha_star_interval"] = interval;
        }
        row
    }

    /// One problem: the row object with `input`; several:
    /// `{"input": ..., "rows": [...]}`.
    pub fn to_json(&self) -> String {
        let mut rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .zip(&self.certificates)
            .map(|(r, c)| self.row_json(r, c))
            .collect();
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
        let iterative = self.rows.iter().any(|r| iterative(r.status));
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
                    let size = self.certificates[i].size;
                    let more = if size > SHOWN_TOKENS { ", ..." } else { "" };
                    (size.to_string(), format!("{{{}{more}}}", shown.join(", ")))
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
        if iterative && self.scheme == "independent" {
            // No closed form gives alpha* for independent drafts: the convex
            // solver brackets it.
            out += "independent drafts: alpha* lies between the acceptance (the rule's: a lossless verifier reaches it) and the alpha* column (the cut p(H*) + 1 - q_1(H*)...q_n(H*) of the H* shown, an upper bound)\n";
        }
        let stopped = self
            .rows
            .iter()
            .filter(|r| r.status == Status::TimeLimit)
            .count();
        if stopped > 0 {
            out += &format!(
                "{stopped} of {} rows stopped at --budget-ms: their rules are as lossless, their acceptance further from alpha*\n",
                self.rows.len()
            );
        }
        out
    }
}

/// The plans as one JSON document: per problem, `drafts` (its draft
/// outcomes, ordered tuples or sets as `drafts_as` says), `probs` (Q of
/// each) and `conditional` (the dense law pi(. | drafts) of each), the keys
/// of Python's `Solution.plan`; several problems as `{"rows": [...]}`.
pub fn plans_json(report: &Report, drafts_as: &str, plans: &[&Plan]) -> String {
    let documents: Vec<serde_json::Value> = report
        .rows
        .iter()
        .zip(plans)
        .map(|(row, plan)| {
            let law = plan.law();
            let conditional: Vec<&[f64]> = (0..law.len()).map(|i| plan.conditional(i)).collect();
            json!({
                "scheme": report.scheme,
                "n": report.n,
                "method": report.method,
                "alpha_star": row.alpha_star,
                "vocab_size": plan.vocab_size(),
                "drafts_as": drafts_as,
                "drafts": law.outcomes,
                "probs": law.probs,
                "conditional": conditional,
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
    /// The 99% interval of a sampled acceptance.
    interval: Option<(f64, f64)>,
    max_marginal_error: Option<f64>,
    chi2_p_value: Option<f64>,
    /// What a sampled pass rules out: a total variation from p this large.
    detectable_tv: Option<f64>,
}

impl From<&ExactReport> for ComparedRow {
    fn from(r: &ExactReport) -> Self {
        Self {
            name: r.name.clone(),
            acceptance: r.acceptance,
            interval: None,
            max_marginal_error: Some(r.max_marginal_error.max(r.max_law_error)),
            chi2_p_value: None,
            detectable_tv: None,
        }
    }
}

impl From<&SampledReport> for ComparedRow {
    fn from(r: &SampledReport) -> Self {
        Self {
            name: r.name.clone(),
            acceptance: r.acceptance,
            interval: Some(r.acceptance_interval),
            max_marginal_error: None,
            chi2_p_value: Some(r.chi2_p_value),
            detectable_tv: Some(r.detectable_tv),
        }
    }
}

/// `mdsd compare --json`: what was read, alpha* and one entry per
/// verifier.
/// A verifier of the default set left out of a report, and why.
pub struct Skipped {
    pub verifier: &'static str,
    pub reason: String,
}

pub fn compare_json(
    input: &InputReport,
    alpha: CertifiedAlpha,
    rows: &[ComparedRow],
    skipped: &[Skipped],
) -> String {
    let verifiers: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "acceptance": r.acceptance,
                "acceptance_interval_99": r.interval.map(|(lo, hi)| [lo, hi]),
                "max_marginal_error": r.max_marginal_error,
                "chi2_p_value": r.chi2_p_value,
                "detectable_tv": r.detectable_tv,
            })
        })
        .collect();
    let skipped: Vec<serde_json::Value> = skipped
        .iter()
        .map(|s| json!({ "verifier": s.verifier, "reason": s.reason }))
        .collect();
    json!({
        "input": input.to_json(),
        "alpha_star": alpha.alpha_star,
        "alpha_star_interval": alpha.lower.map(|lower| [lower, alpha.alpha_star]),
        "verifiers": verifiers,
        "skipped": skipped,
    })
    .to_string()
}

/// `mdsd compare`: a table of verifiers against alpha*.
pub fn compare_table(
    args: &ProblemArgs,
    alpha: CertifiedAlpha,
    samples: Option<u64>,
    rows: &[ComparedRow],
    skipped: &[Skipped],
) -> String {
    let mode = match samples {
        Some(draws) => format!("{draws} draws"),
        None => "exact enumeration".into(),
    };
    let alpha_star = alpha.alpha_star;
    let shown = match alpha.lower {
        None => format!("alpha* = {alpha_star:.12}"),
        // Gaps are measured from the upper end.
        Some(lower) => format!(
            "alpha* in [{lower:.12}, {alpha_star:.12}] (the convex solver's certified interval; \
             gaps from its upper end)"
        ),
    };
    let mut out = format!(
        "scheme {}, n = {}, {mode}; {shown}\n{:<14}  {:>14}  {:>25}  {:>15}  {:>14}  {:>12}\n",
        args.scheme.name(),
        args.n,
        "verifier",
        "acceptance",
        "99% interval",
        "gap to alpha*",
        "max |out - p|",
        "chi2 p"
    );
    let cell = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3e}"));
    let mut within = false;
    for r in rows {
        let interval = r
            .interval
            .map_or("-".to_string(), |(lo, hi)| format!("[{lo:.6}, {hi:.6}]"));
        // A sampled acceptance above alpha* whose interval holds alpha* is
        // noise, not a verifier beating the optimum: marked, not bare.
        let noise = r.interval.is_some_and(|(lo, hi)| {
            r.acceptance > alpha_star && lo <= alpha_star && alpha_star <= hi
        });
        within |= noise;
        let gap = format!(
            "{:.3e}{}",
            alpha_star - r.acceptance,
            if noise { " *" } else { "" }
        );
        out += &format!(
            "{:<14}  {:>14.12}  {:>25}  {:>15}  {:>14}  {:>12}\n",
            r.name,
            r.acceptance,
            interval,
            gap,
            cell(r.max_marginal_error),
            cell(r.chi2_p_value)
        );
    }
    if let Some(tv) = rows.iter().filter_map(|r| r.detectable_tv).reduce(f64::max) {
        out += &format!(
            "a chi2 p-value above {} rules out (with {:.0}% power) an output law at total variation {tv:.2e} or more from p, binned as the test bins it\n",
            mdsd::verify::LEVEL,
            100.0 * mdsd::verify::POWER
        );
    }
    if within {
        out += "* above alpha* by less than the sampling error: alpha* lies in the 99% interval\n";
    }
    for s in skipped {
        out += &format!("skipped {} at this size: {}\n", s.verifier, s.reason);
    }
    out
}

/// Whether the process started with its standard output closed. Rust's
/// runtime opens /dev/null in place of a closed standard descriptor
/// before `main`, read-write; a shell's `> /dev/null` opens it write-only.
/// So a read-write /dev/null on descriptor 1 is one the runtime opened.
#[cfg(unix)]
fn stdout_closed_at_start() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: F_GETFL reads descriptor 1's status flags; nothing changes.
    let flags = unsafe { libc::fcntl(1, libc::F_GETFL) };
    if flags < 0 || flags & libc::O_ACCMODE != libc::O_RDWR {
        return false;
    }
    let stdout = std::io::stdout();
    let Ok(descriptor) = stdout.as_fd().try_clone_to_owned() else {
        return false;
    };
    let opened = std::fs::File::from(descriptor).metadata();
    let null = std::fs::metadata("/dev/null");
    matches!((opened, null), (Ok(a), Ok(b)) if a.dev() == b.dev() && a.ino() == b.ino())
}

#[cfg(not(unix))]
fn stdout_closed_at_start() -> bool {
    false
}
