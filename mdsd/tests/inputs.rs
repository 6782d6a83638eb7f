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
