//! `mdsd bound` and `mdsd eval` on rows that hold only each side's top k
//! entries (vLLM's logprobs): alpha* of i.i.d. drafts as an interval per
//! row and n (`mdsd::bounds::optimal_acceptance_iid_interval`), in table,
//! JSON, CSV and plot.

use std::path::Path;

use mdsd::SchemeKind;
use mdsd::bounds::{AlphaInterval, optimal_acceptance_iid_interval};
use mdsd::logits::TopKRows;
use rayon::prelude::*;
use serde_json::json;

use super::eval::plot;
use super::output;
use super::report::ReportFolder;
use mdsd::Error;
use mdsd::input::Input;

/// Why only i.i.d. drafts: the interval's proof rests on alpha* depending
/// on a set H only through p(H) and q(H) (`mdsd_bounds::top_k`).
fn check_scheme(scheme: SchemeKind) -> Result<(), Error> {
    if scheme == SchemeKind::Iid {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "--scheme {scheme}: rows of top-k entries give alpha* intervals for iid drafts only \
         (the bounds rest on Q(H) = q(H)^n)"
    )))
}

/// Every row's intervals for `ns`, in parallel; a bad row is named.
fn intervals(
    rows: &TopKRows,
    first_row: usize,
    ns: &[usize],
) -> Result<Vec<Vec<AlphaInterval>>, Error> {
    rows.rows
        .par_iter()
        .enumerate()
        .map(|(r, row)| {
            optimal_acceptance_iid_interval(&row.target, &row.draft, ns).map_err(|e| Error::Solve {
                row: first_row + r,
                source: Box::new(e),
                instead: &[],
            })
        })
        .collect()
}

/// What was read, as every command's JSON gives it under `input`.
fn input_json(rows: &TopKRows, first_row: usize) -> serde_json::Value {
    json!({
        "source": rows.source,
        "first_row": first_row,
        "rows": rows.rows.len(),
        "top_k": {"target": rows.kept.0, "draft": rows.kept.1},
    })
}

fn interval_json(i: &AlphaInterval) -> serde_json::Value {
    json!([i.lower, i.upper])
}

/// The line every table starts with: what the numbers are.
fn note(rows: &TopKRows) -> String {
    format!(
        "{}: top-{} target and top-{} draft entries only; alpha* lies in [lower, upper] for \
         every completion of the rows\n",
        rows.source, rows.kept.0, rows.kept.1
    )
}

/// `mdsd bound` on top-k rows.
pub fn bound(input: &Input, scheme: SchemeKind, n: usize, json: bool) -> Result<(), Error> {
    check_scheme(scheme)?;
    let rows = input.read_top_k()?;
    let first_row = input.first_row();
    let found = intervals(&rows, first_row, &[n])?;
    if json {
        let per_row: Vec<_> = found
            .iter()
            .map(|i| json!({"alpha_star_interval": interval_json(&i[0]), "scheme": "iid", "n": n, "method": "top-k interval"}))
            .collect();
        let document = json!({"input": input_json(&rows, first_row), "rows": per_row});
        return output::emit(&format!("{document}\n"));
    }
    let mut out = format!(
        "{}scheme iid, n = {n}, method top-k interval\n{:>5}  {:>16}  {:>16}\n",
        note(&rows),
        "row",
        "alpha* lower",
        "alpha* upper"
    );
    for (r, i) in found.iter().enumerate() {
        out += &format!(
            "{:>5}  {:>16.12}  {:>16.12}\n",
            first_row + r,
            i[0].lower,
            i[0].upper
        );
    }
    output::emit(&out)
}

/// What `mdsd eval` asks of top-k rows.
pub struct EvalRequest<'a> {
    pub input: &'a Input,
    pub ns: &'a [usize],
    pub schemes: &'a [SchemeKind],
    pub verifiers: &'a [String],
    pub out: Option<&'a Path>,
    pub json: bool,
}

/// `mdsd eval` on top-k rows: per row and n the iid interval, the means of
/// both ends, `alpha.csv` with both ends and a plot whose bars span the
/// mean interval.
pub fn eval(request: &EvalRequest) -> Result<(), Error> {
    // The other schemes and every verifier need whole rows: left out, and
    // said so (the defaults include them).
    if !request.schemes.contains(&SchemeKind::Iid) {
        check_scheme(request.schemes[0])?;
    }
    let skipped: Vec<String> = (request.schemes.iter())
        .filter(|&&s| s != SchemeKind::Iid)
        .map(|s| format!("scheme {s}"))
        .chain(
            (request.verifiers.iter())
                .filter(|v| v.as_str() != "none")
                .map(|v| format!("verifier {v}")),
        )
        .collect();
    let rows = request.input.read_top_k()?;
    let first_row = request.input.first_row();
    let ns = request.ns;
    let found = intervals(&rows, first_row, ns)?;
    let count = found.len() as f64;
    let means: Vec<AlphaInterval> = (0..ns.len())
        .map(|j| AlphaInterval {
            lower: found.iter().map(|i| i[j].lower).sum::<f64>() / count,
            upper: found.iter().map(|i| i[j].upper).sum::<f64>() / count,
        })
        .collect();
    let document = json!({
        "settings": {"data": rows.source, "first_row": first_row, "rows": found.len(), "schemes": ["iid"], "n": ns, "mdsd_version": env!("CARGO_PKG_VERSION")},
        "input": input_json(&rows, first_row),
        "aggregate": ns.iter().zip(&means).map(|(&n, m)| json!({"scheme": "iid", "n": n, "mean_alpha_star_interval": interval_json(m)})).collect::<Vec<_>>(),
        "skipped": skipped,
        "per_row": found.iter().enumerate().map(|(r, i)| json!({"row": first_row + r, "alpha_star_interval": {"iid": i.iter().map(interval_json).collect::<Vec<_>>()}})).collect::<Vec<_>>(),
    });
    if request.json {
        output::emit(&format!("{document}\n"))?;
    } else {
        let header: String = ns
            .iter()
            .map(|n| format!("{:>21}", format!("n={n}")))
            .collect();
        let mut out = format!("{}\nalpha* interval per row (iid){header}\n", note(&rows));
        let cell =
            |i: &AlphaInterval| format!("{:>21}", format!("[{:.6}, {:.6}]", i.lower, i.upper));
        for (r, i) in found.iter().enumerate() {
            let cells: String = i.iter().map(cell).collect();
            out += &format!("{:<29}{cells}\n", first_row + r);
        }
        let cells: String = means.iter().map(cell).collect();
        out += &format!("{:<29}{cells}\n", "mean");
        if !skipped.is_empty() {
            out += &format!(
                "left out (they need whole rows, not top-k entries): {}\n",
                skipped.join(", ")
            );
        }
        output::emit(&out)?;
    }
    if let Some(dir) = request.out {
        write_outputs(dir, &rows, first_row, ns, &found, &means, &document)?;
        if !request.json {
            output::emit(&format!("wrote {}\n", dir.display()))?;
        }
    }
    Ok(())
}

fn write_outputs(
    dir: &Path,
    rows: &TopKRows,
    first_row: usize,
    ns: &[usize],
    found: &[Vec<AlphaInterval>],
    means: &[AlphaInterval],
    document: &serde_json::Value,
) -> Result<(), Error> {
    let folder = ReportFolder::create(dir)?;
    let write = |name: &str, text: String| folder.write(name, text);
    write("eval.json", format!("{document:#}\n"))?;
    let mut csv = String::from("row,scheme,n,alpha_star_lower,alpha_star_upper\n");
    for (r, i) in found.iter().enumerate() {
        for (n, i) in ns.iter().zip(i) {
            csv += &format!(
                "{},iid,{n},{:.12},{:.12}\n",
                first_row + r,
                i.lower,
                i.upper
            );
        }
    }
    write("alpha.csv", csv)?;
    // The mean interval's two ends, each a line: no value between them is
    // singled out.
    let end = |label: &str, at: fn(&AlphaInterval) -> f64| plot::Series {
        label: label.into(),
        points: ns
            .iter()
            .zip(means)
            .map(|(&n, m)| (n as f64, at(m)))
            .collect(),
        dashed: false,
        half_widths: None,
    };
    let series = [
        end("alpha* iid, upper end (unknowns merged)", |m| m.upper),
        end("alpha* iid, lower end (worst completion)", |m| m.lower),
    ];
    let title = format!(
        "{}, rows {}..{}; top-{} / top-{} entries: alpha* intervals",
        rows.source,
        first_row,
        first_row + found.len(),
        rows.kept.0,
        rows.kept.1
    );
    folder.plots(&title, &series)?;
    Ok(())
}
