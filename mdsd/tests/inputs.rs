//! The command line on inputs as engines write them
//! (`logits/tests/fixtures/engines/`, written by numpy): leading axes,
//! `--vocab`, `--draft-vocab-map`, draft-only and target-only transforms
//! against numpy's reference, and `--row` in every command.

mod common;

use common::{json, mdsd};
use serde_json::Value;

fn fixture(name: &str) -> String {
    format!(
        "{}/../logits/tests/fixtures/engines/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn rows(document: &Value) -> Vec<Value> {
    document["rows"].as_array().unwrap().clone()
}

/// alpha* and H* of every row agree.
fn assert_same_bounds(got: &[Value], want: &[Value], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        let (a, b) = (
            g["alpha_star"].as_f64().unwrap(),
            w["alpha_star"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-12, "{what} row {r}: {a} vs {b}");
        // H* the same set: same size, ended by the same token at the same
        // ratio (to round-off: the two sides transform differently).
        let (gc, wc) = (&g["certificate"], &w["certificate"]);
        assert_eq!(gc["size"], wc["size"], "{what} row {r}");
        let (ge, we) = (&gc["ratio_prefix_end"], &wc["ratio_prefix_end"]);
        assert_eq!(ge["token"], we["token"], "{what} row {r}");
        if let (Some(gr), Some(wr)) = (ge["ratio"].as_f64(), we["ratio"].as_f64()) {
            assert!(
                (gr - wr).abs() <= 1e-12 * wr.abs(),
                "{what} row {r}: {gr} vs {wr}"
            );
        } else {
            assert_eq!(ge, we, "{what} row {r}");
        }
    }
}

#[test]
fn side_only_transforms_match_numpy() {
    let data = fixture("hf-logits.npz");
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--draft-top-k", "3"], "target.npy", "draft-top-k.npy"),
        (
            &["--draft-temperature", "0.6", "--draft-top-p", "0.8"],
            "target.npy",
            "draft-temperature-top-p.npy",
        ),
        (
            &["--target-top-k", "6", "--target-top-p", "0.9"],
            "target-top-k-top-p.npy",
            "draft.npy",
        ),
        (
            // The side's own flag replaces the shared one for that side.
            &[
                "--temperature",
                "0.3",
                "--target-temperature",
                "1.7",
                "--draft-temperature",
                "1",
            ],
            "target-temperature.npy",
            "draft.npy",
        ),
    ];
    for (flags, target, draft) in cases {
        for n in ["1", "3"] {
            let mut args = vec!["bound", "--data", &data, "-n", n, "--json"];
            args.extend(flags);
            let got = json(&args);
            let (p, q) = (fixture(target), fixture(draft));
            let want = json(&["bound", "-p", &p, "-q", &q, "-n", n, "--json"]);
            assert_same_bounds(&rows(&got), &rows(&want), &format!("{flags:?} n = {n}"));
        }
    }
}

#[test]
fn leading_axes_and_row_selections_are_reported() {
    let data = fixture("hf-logits.npz");
    let all = json(&["bound", "--data", &data, "-n", "2", "--json"]);
    assert_eq!(all["input"]["shape"], serde_json::json!([2, 4, 12]));
    assert_eq!(all["input"]["rows"], 8);
    let all = rows(&all);
    // --row R is that row; A..B a range; R with --rows N the N from R.
    let one = json(&["bound", "--data", &data, "-n", "2", "--row", "5", "--json"]);
    assert_eq!(one["input"]["first_row"], 5);
    assert_same_bounds(&[one], &all[5..6], "--row 5");
    let range = json(&[
        "bound", "--data", &data, "-n", "2", "--row", "2..6", "--json",
    ]);
    assert_same_bounds(&rows(&range), &all[2..6], "--row 2..6");
    let from = json(&[
        "bound", "--data", &data, "-n", "2", "--row", "6..", "--json",
    ]);
    assert_same_bounds(&rows(&from), &all[6..], "--row 6..");
    let counted = json(&[
        "bound", "--data", &data, "-n", "2", "--row", "1", "--rows", "3", "--json",
    ]);
    assert_same_bounds(&rows(&counted), &all[1..4], "--row 1 --rows 3");
    // The table numbers rows as the file does.
    let out = mdsd(&["bound", "--data", &data, "-n", "2", "--row", "6.."]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.lines().any(|l| l.trim_start().starts_with("7 ")),
        "{table}"
    );

    // compare takes one problem: --row picks it out of a many-row file.
    let compared = json(&[
        "compare",
        "--data",
        &data,
        "-n",
        "2",
        "--row",
        "5",
        "--json",
        "--verifiers",
        "specinfer",
    ]);
    let alpha = compared["alpha_star"].as_f64().unwrap();
    assert!((alpha - all[5]["alpha_star"].as_f64().unwrap()).abs() < 1e-9);
    for (args, message) in [
        (vec!["--row", "3..3"], "holds no row"),
        (vec!["--row", "x"], "is not a row R"),
        (vec!["--row", "2..4", "--rows", "2"], "is a range already"),
        (vec!["--row", "8"], "are not all among its 8 rows"),
    ] {
        let mut full = vec!["bound", "--data", &data, "-n", "2"];
        full.extend(args);
        let out = mdsd(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{full:?}: {stderr}");
        assert!(stderr.contains(message), "{full:?}: {stderr}");
    }
}

#[test]
fn vocab_cuts_report_the_mass_they_drop() {
    let padded = fixture("padded.npz");
    let heavy = fixture("padded-heavy.npz");
    let plain = rows(&json(&[
        "bound",
        "--data",
        &fixture("hf-logits.npz"),
        "-n",
        "4",
        "--json",
    ]));
    let cut = json(&[
        "bound", "--data", &padded, "-n", "4", "--vocab", "12", "--json",
    ]);
    assert_same_bounds(&rows(&cut), &plain, "--vocab 12 over -inf padding");
    assert_eq!(cut["input"]["vocabulary_cut"]["target_dropped"]["max"], 0.0);

    let out = mdsd(&["bound", "--data", &heavy, "-n", "4", "--vocab", "12"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--allow-truncation"), "{stderr}");
    let truncated = |json: bool| {
        let mut args = vec!["bound", "--data", &heavy, "-n", "4", "--vocab", "12"];
        args.push("--allow-truncation");
        if json {
            args.push("--json");
        }
        args
    };
    let out = mdsd(&truncated(false));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.starts_with("--vocab 12: probability beyond token 12 dropped"),
        "{table}"
    );
    let cut = json(&truncated(true));
    let dropped = cut["input"]["vocabulary_cut"]["target_dropped"]["max"]
        .as_f64()
        .unwrap();
    assert!(dropped > 1e-3, "{dropped}");
    // Renormalised to the kept tokens, the rows are the unpadded ones.
    assert_same_bounds(&rows(&cut), &plain, "--vocab 12 --allow-truncation");

    // A draft head over 5 target tokens, mapped: as the expanded rows.
    let expanded = rows(&json(&[
        "bound",
        "--data",
        &fixture("eagle-expanded.npz"),
        "-n",
        "2",
        "--json",
    ]));
    let map = fixture("d2t.npy");
    let mapped = json(&[
        "eval",
        "--data",
        &fixture("eagle.npz"),
        "--draft-vocab-map",
        &map,
        "--draft-vocab-map-offsets",
        "--n",
        "2",
        "--schemes",
        "iid",
        "--verifiers",
        "none",
        "--json",
    ]);
    let means: f64 = expanded
        .iter()
        .map(|r| r["alpha_star"].as_f64().unwrap())
        .sum::<f64>()
        / expanded.len() as f64;
    let got = mapped["aggregate"][0]["mean_alpha_star"].as_f64().unwrap();
    assert!((got - means).abs() < 1e-12, "{got} vs {means}");
}

/// A top-k file as an engine's logprobs give it: each side's top `k` ids
/// and log-probabilities of the 8 real rows of `data/`, written to `dir`.
fn write_top_k(dir: &std::path::Path, k: usize) -> String {
    use ndarray::Array2;
    use ndarray_npy::{NpzReader, NpzWriter};
    let data = format!(
        "{}/../data/qwen-coder-dense-8rows.npz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut npz = NpzReader::new(std::fs::File::open(data).unwrap()).unwrap();
    let path = dir.join("top_k.npz");
    let mut out = NpzWriter::new(std::fs::File::create(&path).unwrap());
    for side in ["p", "q"] {
        let rows: Array2<f32> = npz.by_name(&format!("{side}.npy")).unwrap();
        let (mut ids, mut logprobs) = (Vec::new(), Vec::new());
        for row in rows.rows() {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            for &id in &order[..k] {
                ids.push(id as i64);
                logprobs.push(f64::from(row[id]).ln() as f32);
            }
        }
        let shape = (rows.nrows(), k);
        out.add_array(
            format!("{side}_ids"),
            &Array2::from_shape_vec(shape, ids).unwrap(),
        )
        .unwrap();
        out.add_array(
            format!("{side}_logprobs"),
            &Array2::from_shape_vec(shape, logprobs).unwrap(),
        )
        .unwrap();
    }
    out.finish().unwrap();
    path.to_str().unwrap().to_string()
}

/// Rows of top-20 entries only (vLLM's default): `bound` and `eval` give
/// alpha* of iid drafts as an interval that holds the exact alpha* of the
/// full rows they were cut from, row by row and for every n; table, CSV
/// and plot carry both ends; other schemes are refused by `bound` and left
/// out, with a word, by `eval`.
#[test]
fn top_k_rows_give_intervals_that_hold_the_full_rows_alpha() {
    let dir = tempfile::tempdir().unwrap();
    let top_k = write_top_k(dir.path(), 20);
    let full = format!(
        "{}/../data/qwen-coder-dense-8rows.npz",
        env!("CARGO_MANIFEST_DIR")
    );
    for n in ["1", "2", "4", "8"] {
        let exact = json(&["bound", "--data", &full, "-n", n, "--json"]);
        let interval = json(&["bound", "--data", &top_k, "-n", n, "--json"]);
        assert_eq!(interval["input"]["top_k"]["target"], 20);
        for (r, (e, i)) in rows(&exact).iter().zip(&rows(&interval)).enumerate() {
            let alpha = e["alpha_star"].as_f64().unwrap();
            let ends = i["alpha_star_interval"].as_array().unwrap();
            let (lower, upper) = (ends[0].as_f64().unwrap(), ends[1].as_f64().unwrap());
            // The file holds float32 logprobs: the known mass moves by ~1e-7.
            assert!(
                lower - 1e-6 <= alpha && alpha <= upper + 1e-6 && lower <= upper,
                "n={n} row {r}: {alpha} outside [{lower}, {upper}]"
            );
        }
    }
    let table =
        String::from_utf8(mdsd(&["bound", "--data", &top_k, "-n", "2", "--row", "3"]).stdout)
            .unwrap();
    assert!(
        table.contains("alpha* lower") && table.contains("    3  "),
        "{table}"
    );
    let wor = mdsd(&["bound", "--data", &top_k, "-n", "2", "--scheme", "wor"]);
    assert_eq!(wor.status.code(), Some(2));
    assert!(
        String::from_utf8(wor.stderr)
            .unwrap()
            .contains("iid drafts only")
    );
    let out = dir.path().join("report");
    let report = mdsd(&["eval", "--data", &top_k, "--out", out.to_str().unwrap()]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let text = String::from_utf8(report.stdout).unwrap();
    assert!(
        text.contains("left out") && text.contains("scheme wor"),
        "{text}"
    );
    let csv = std::fs::read_to_string(out.join("alpha.csv")).unwrap();
    assert!(csv.starts_with("row,scheme,n,alpha_star_lower,alpha_star_upper\n"));
    assert_eq!(csv.lines().count(), 1 + 8 * 4);
    assert!(
        std::fs::read_to_string(out.join("acceptance.svg"))
            .unwrap()
            .contains("lower end")
    );
    // A transform needs whole rows.
    let transformed = mdsd(&["bound", "--data", &top_k, "-n", "2", "--temperature", "0.5"]);
    assert_eq!(transformed.status.code(), Some(2));
    assert!(
        String::from_utf8(transformed.stderr)
            .unwrap()
            .contains("need whole rows")
    );
}
