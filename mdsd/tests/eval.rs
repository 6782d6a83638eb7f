//! `mdsd eval` end to end: the built-in sample's report, files in --out,
//! agreement with per-row `mdsd bound`, and one-line errors.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use common::{json, mdsd};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// mean_alpha of (scheme, n) in an eval document.
fn mean_alpha(doc: &Value, scheme: &str, n: u64) -> f64 {
    doc["aggregate"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["scheme"] == scheme && e["n"] == n)
        .unwrap_or_else(|| panic!("no {scheme} n = {n} in {doc}"))["mean_alpha_star"]
        .as_f64()
        .unwrap()
}

/// The mean of per-row alpha from `mdsd bound --json`.
fn bound_mean(p: &str, q: &str, scheme: &str, n: u64) -> f64 {
    let n_arg = n.to_string();
    let doc = json(&[
        "bound", "-p", p, "-q", q, "-n", &n_arg, "--scheme", scheme, "--json",
    ]);
    let rows = doc["rows"].as_array().unwrap();
    rows.iter()
        .map(|r| r["alpha_star"].as_f64().unwrap())
        .sum::<f64>()
        / rows.len() as f64
}

#[test]
fn the_builtin_sample_report_has_the_documented_shape() {
    let doc = json(&["eval", "--json"]);
    assert_eq!(doc["input"]["rows"], 32);
    let aggregate = doc["aggregate"].as_array().unwrap();
    assert_eq!(
        aggregate.len(),
        5 * 4,
        "iid, wor, greedy, argmax, top x n = 1, 2, 4, 8"
    );
    for scheme in ["iid", "wor", "greedy", "argmax", "top"] {
        let means: Vec<f64> = [1, 2, 4, 8]
            .iter()
            .map(|&n| mean_alpha(&doc, scheme, n))
            .collect();
        assert!(
            means.windows(2).all(|w| w[0] <= w[1]),
            "{scheme}: {means:?}"
        );
        assert!(means.iter().all(|&a| (0.0..=1.0).contains(&a)));
    }
    // At n = 1 every scheme is one draft: 1 - TV.
    assert!((mean_alpha(&doc, "iid", 1) - mean_alpha(&doc, "wor", 1)).abs() < 1e-12);
    let verifiers = doc["verifiers"].as_array().unwrap();
    assert_eq!(verifiers.len(), 2 * 4);
    for v in verifiers {
        let n = v["n"].as_u64().unwrap();
        let acceptance = v["mean_acceptance"].as_f64().unwrap();
        let alpha = mean_alpha(&doc, "iid", n);
        // No verifier beats alpha*; the convex one reaches it (tolerance 1e-7 per row).
        assert!(acceptance <= alpha + 1e-9, "{v}");
        if v["name"] == "optimal-convex" {
            assert!(alpha - acceptance <= 1e-7, "{v}");
        }
    }
}

#[test]
fn the_table_and_the_out_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("report");
    let out = mdsd(&[
        "eval",
        "--n",
        "1,2",
        "--rows",
        "4",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("mean alpha*") && table.contains("specinfer (iid, exact)"),
        "{table}"
    );
    let png = std::fs::read(out_dir.join("acceptance.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(out_dir.join("acceptance.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("alpha* iid"));
    let csv = std::fs::read_to_string(out_dir.join("alpha.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 5 * 4 * 2,
        "header + schemes x rows x n"
    );
    let csv = std::fs::read_to_string(out_dir.join("verifiers.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 4 * 2);
    assert!(
        csv.starts_with(
            "row,verifier,scheme,n,acceptance,method,interval_99_low,interval_99_high\n"
        )
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("eval.json")).unwrap()).unwrap();
    assert_eq!(doc["input"]["rows"], 4);
}

#[test]
fn aggregate_matches_per_row_bound_on_a_data_file() {
    let dir = repository().join("logits/tests/fixtures/npy-f64");
    let (p, q) = (dir.join("p_target.npy"), dir.join("q_draft.npy"));
    let (p, q) = (p.to_str().unwrap(), q.to_str().unwrap());
    let doc = json(&[
        "eval",
        "--data",
        dir.to_str().unwrap(),
        "--n",
        "2,3",
        "--verifiers",
        "none",
        "--json",
    ]);
    assert_eq!(doc["input"]["rows"], 3);
    for (scheme, n) in [("iid", 2), ("iid", 3), ("wor", 2), ("greedy", 3)] {
        let want = bound_mean(p, q, scheme, n);
        assert!(
            (mean_alpha(&doc, scheme, n) - want).abs() < 1e-12,
            "{scheme} n = {n}"
        );
    }
}

/// The same on `../shared/data`'s 64 full-vocabulary rows, when present.
#[test]
fn aggregate_matches_per_row_bound_on_shared_data() {
    let dense = repository().join("../shared/data/qwen-coder/dense");
    if !dense.exists() {
        eprintln!("skipped: {} not found", dense.display());
        return;
    }
    let (p, q) = (dense.join("p_target.npy"), dense.join("q_draft.npy"));
    let (p, q) = (p.to_str().unwrap(), q.to_str().unwrap());
    let doc = json(&[
        "eval",
        "--data",
        dense.to_str().unwrap(),
        "--n",
        "2,4",
        "--schemes",
        "iid,greedy",
        "--verifiers",
        "none",
        "--json",
    ]);
    assert_eq!(doc["input"]["rows"], 64);
    for (scheme, n) in [("iid", 2), ("iid", 4), ("greedy", 4)] {
        let want = bound_mean(p, q, scheme, n);
        assert!(
            (mean_alpha(&doc, scheme, n) - want).abs() < 1e-12,
            "{scheme} n = {n}"
        );
    }
}

#[test]
fn bad_arguments_give_one_line_errors() {
    for (args, needle) in [
        (vec!["eval", "--schemes", "hub"], "--schemes hub"),
        (vec!["eval", "--n", "0"], "--n"),
        (vec!["eval", "--data", "no/such.npz"], "no/such.npz"),
        (vec!["eval", "--verifiers", "nonesuch"], "nonesuch"),
        (vec!["eval", "--temperature", "-1"], "temperature"),
    ] {
        let out = mdsd(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `--backend gpu` gives the CPU's numbers; without a usable adapter (here
/// forced by asking wgpu for GL only, which has no f64) it warns and runs
/// on the CPU.
#[test]
fn gpu_backend_matches_the_cpu_or_falls_back_with_a_warning() {
    let args = ["eval", "--json", "--rows", "6", "--schemes", "iid,wor"];
    let cpu = json(&args);
    let gpu = json(&[&args[..], &["--backend", "gpu"]].concat());
    if std::env::var("MDSD_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        assert_eq!(gpu["settings"]["backend"], "gpu");
    }
    for scheme in ["iid", "wor"] {
        for n in [1, 2, 4, 8] {
            let (a, b) = (mean_alpha(&cpu, scheme, n), mean_alpha(&gpu, scheme, n));
            assert!((a - b).abs() <= 1e-12, "{scheme} n = {n}: cpu {a} gpu {b}");
        }
    }

    let out = Command::new(env!("CARGO_BIN_EXE_mdsd"))
        .args([&args[..], &["--backend", "gpu"]].concat())
        .env("WGPU_BACKEND", "gl")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: GPU backend unavailable")
            && stderr.contains("running on the CPU"),
        "{stderr}"
    );
    let fallback: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fallback["settings"]["backend"], "cpu");
    assert_eq!(fallback["aggregate"], cpu["aggregate"]);
}

/// Deterministic drafts: argmax is one draft whatever n, top at n = 1 is
/// argmax, and the deterministic verifier reaches top's alpha* = p(S).
#[test]
fn argmax_and_top_drafts_beside_sampled_ones() {
    let doc = json(&[
        "eval",
        "--json",
        "--rows",
        "8",
        "--schemes",
        "argmax,top,iid,wor",
        "--verifiers",
        "deterministic",
    ]);
    let argmax = mean_alpha(&doc, "argmax", 1);
    for n in [2, 4, 8] {
        assert_eq!(mean_alpha(&doc, "argmax", n), argmax);
    }
    assert!((mean_alpha(&doc, "top", 1) - argmax).abs() < 1e-12);
    for (j, n) in [1u64, 2, 4, 8].into_iter().enumerate() {
        let rated = &doc["verifiers"][j];
        assert_eq!(
            (rated["name"].as_str(), rated["n"].as_u64()),
            (Some("deterministic"), Some(n))
        );
        assert_eq!(rated["scheme"], "top");
        let top = mean_alpha(&doc, "top", n);
        assert!((rated["mean_acceptance"].as_f64().unwrap() - top).abs() < 1e-12);
    }
}

/// One bad row does not end an eval: it is reported with its stage and
/// left out of that stage's means; --strict stops at it. Where every row
/// failed at a stage (wor here), the report is whole but for it,
/// and the exit code is 2, naming the stage.
#[test]
fn a_failing_row_is_reported_and_the_others_go_on() {
    let args = [
        "eval",
        "--json",
        "--rows",
        "3",
        "--temperature",
        "0",
        "--schemes",
        "iid,wor",
        "--n",
        "1,2",
    ];
    let out = mdsd(&args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("every row failed at wor (n = 1, 2)"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["failed_rows"], 3);
    for failure in doc["failures"].as_array().unwrap() {
        assert_eq!(failure["stage"], "wor");
        assert!(
            failure["error"]
                .as_str()
                .unwrap()
                .contains("needs at least 2 tokens"),
            "{failure}"
        );
    }
    // At temperature 0 both sides are one-hot: iid alpha* is 1 or 0 per row.
    let iid = mean_alpha(&doc, "iid", 2);
    assert!((0.0..=1.0).contains(&iid), "{iid}");
    let wor = doc["aggregate"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["scheme"] == "wor")
        .unwrap();
    assert!(wor["mean_alpha_star"].is_null(), "{wor}");

    let mut strict = args.to_vec();
    strict.push("--strict");
    let out = mdsd(&strict);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs at least 2 tokens"));
}

/// eval.json names what it was made from and with (data hash, rows,
/// schemes, n, transforms, verifiers, draws, seed, version), holds every
/// row's values, and gives each sampled figure its 99% interval.
#[test]
fn eval_json_records_settings_per_row_values_and_intervals() {
    let doc = json(&[
        "eval",
        "--rows",
        "3",
        "--n",
        "1,2",
        "--verifiers",
        "specinfer,khisti",
        "--samples",
        "4000",
        "--seed",
        "7",
        "--draft-top-k",
        "50",
        "--json",
    ]);
    let settings = &doc["settings"];
    let hash = settings["data_sha256"].as_str().unwrap();
    assert!(
        hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{hash}"
    );
    assert_eq!(settings["rows"], 3);
    assert_eq!(settings["n"], serde_json::json!([1, 2]));
    assert_eq!(settings["samples"], 4000);
    assert_eq!(settings["seed"], 7);
    assert_eq!(settings["transforms"]["draft"]["top_k"], 50);
    assert!(settings["transforms"]["target"]["top_k"].is_null());
    assert_eq!(
        settings["verifiers"],
        serde_json::json!(["specinfer", "khisti"])
    );
    assert!(settings["mdsd_version"].as_str().is_some());
    let per_row = doc["per_row"].as_array().unwrap();
    assert_eq!(per_row.len(), 3);
    // The means are the means of the rows' values.
    for (j, n) in [1u64, 2].iter().enumerate() {
        let mean: f64 = per_row
            .iter()
            .map(|r| r["alpha_star"]["wor"][j].as_f64().unwrap())
            .sum::<f64>()
            / 3.0;
        assert!((mean - mean_alpha(&doc, "wor", *n)).abs() < 1e-12);
    }
    for r in per_row {
        for (name, sampled) in [("specinfer", false), ("khisti", true)] {
            for value in r["verifiers"][name].as_array().unwrap() {
                let a = value["acceptance"].as_f64().unwrap();
                if sampled {
                    let i = value["interval_99"].as_array().unwrap();
                    let (lo, hi) = (i[0].as_f64().unwrap(), i[1].as_f64().unwrap());
                    assert!(lo <= a && a <= hi && hi - lo < 0.1, "{value}");
                } else {
                    assert!(value["interval_99"].is_null(), "{value}");
                }
            }
        }
    }
    for v in doc["verifiers"].as_array().unwrap() {
        let mean = v["mean_acceptance"].as_f64().unwrap();
        // A sampled mean above alpha* within its interval is flagged so.
        let alpha = mean_alpha(&doc, "iid", v["n"].as_u64().unwrap());
        let flagged = v["above_alpha_star_within_interval"].as_bool().unwrap();
        let within = v["mean_acceptance_interval_99"]
            .as_array()
            .is_some_and(|i| mean > alpha && i[0].as_f64().unwrap() <= alpha);
        assert_eq!(flagged, within, "{v}");
        match v["method"].as_str().unwrap() {
            "sampled" => {
                let i = v["mean_acceptance_interval_99"].as_array().unwrap();
                assert!(
                    i[0].as_f64().unwrap() <= mean && mean <= i[1].as_f64().unwrap(),
                    "{v}"
                );
            }
            _ => assert!(v["mean_acceptance_interval_99"].is_null(), "{v}"),
        }
    }
    // The same data hashes the same; another selection of it too (the
    // hash is of the file, the rows are in `rows`).
    let again = json(&[
        "eval",
        "--rows",
        "2",
        "--n",
        "1",
        "--verifiers",
        "none",
        "--json",
    ]);
    assert_eq!(again["settings"]["data_sha256"], settings["data_sha256"]);
}

/// A `.npy` file of float16 logits `[rows, cols]`, written a row at a
/// time (the test's own memory stays small), each entry a cheap hash of
/// its place and `salt` spread over about [-6, 6].
fn write_f16_logits(path: &Path, rows: usize, cols: usize, salt: u64) {
    use std::io::Write;
    let mut header =
        format!("{{'descr': '<f2', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    file.write_all(b"\x93NUMPY\x01\x00").unwrap();
    file.write_all(&(header.len() as u16).to_le_bytes())
        .unwrap();
    file.write_all(header.as_bytes()).unwrap();
    let mut row = Vec::with_capacity(cols * 2);
    for r in 0..rows {
        row.clear();
        for c in 0..cols {
            let mut x = (r as u64 * cols as u64 + c as u64) ^ salt;
            x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x ^= x >> 29;
            let logit = (x % 12_000) as f32 / 1000.0 - 6.0;
            row.extend_from_slice(&half::f16::from_f32(logit).to_le_bytes());
        }
        file.write_all(&row).unwrap();
    }
}

/// `mdsd eval` and `mdsd bound` stream rows from disk, from `--data` and
/// from `-p`/`-q` given as `.npy` files: a dataset of 262 MB (4000 rows of
/// float16 logits at V = 16384, both sides) is evaluated under an address
/// space capped at 200 MB, and its rows agree with `mdsd bound` on them.
/// (One malloc arena, so that the cap measures what is used rather than
/// what each thread's arena reserves.)
#[test]
fn eval_streams_a_dataset_larger_than_its_memory_cap() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: the cap is set with the shell's ulimit -v");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (4000, 16384);
    write_f16_logits(&dir.path().join("p_target.npy"), rows, cols, 1);
    write_f16_logits(&dir.path().join("q_draft.npy"), rows, cols, 2);
    let data = dir.path().to_str().unwrap();
    let bytes: u64 = ["p_target.npy", "q_draft.npy"]
        .iter()
        .map(|f| std::fs::metadata(dir.path().join(f)).unwrap().len())
        .sum();
    let cap_kb = 200_000;
    assert!(bytes > cap_kb * 1024, "the data must not fit under the cap");
    let capped_from = |command: &str, input: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {cap_kb} && exec \"$0\" {command} {input} --logits --json"
            ))
            .arg(env!("CARGO_BIN_EXE_mdsd"))
            .arg(data)
            .env("MALLOC_ARENA_MAX", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command} under a {cap_kb} KB cap: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let capped = |command: &str| capped_from(command, "--data \"$1\"");
    // bound streams too, from --data and from -p/-q files.
    let from_data = capped("bound -n 2");
    assert_eq!(from_data["rows"].as_array().unwrap().len(), rows);
    let from_arguments = capped_from("bound -n 2", "-p \"$1/p_target.npy\" -q \"$1/q_draft.npy\"");
    let alphas = |doc: &Value| -> Vec<f64> {
        (doc["rows"].as_array().unwrap().iter())
            .map(|row| row["alpha_star"].as_f64().unwrap())
            .collect()
    };
    assert_eq!(alphas(&from_arguments), alphas(&from_data));
    let doc = capped("eval --schemes iid --verifiers none --n 1,4");
    assert_eq!(doc["input"]["rows"], rows);
    let per_row = doc["per_row"].as_array().unwrap();
    assert_eq!(per_row.len(), rows);
    for first in [0, 1999, 3997] {
        let bound = json(&[
            "bound",
            "--data",
            data,
            "--logits",
            "-n",
            "4",
            "--row",
            &first.to_string(),
            "--rows",
            "3",
            "--json",
        ]);
        for (k, row) in bound["rows"].as_array().unwrap().iter().enumerate() {
            let want = row["alpha_star"].as_f64().unwrap();
            let got = per_row[first + k]["alpha_star"]["iid"][1].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-12,
                "row {}: {got} vs {want}",
                first + k
            );
        }
    }
}

/// Independent drafts in `mdsd eval`: the draft at two temperatures taken
/// in turn, alpha* per row as `mdsd bound` finds it (exactly, at this V)
/// within the convex interval's tolerance, and verifiers rated on named
/// schemes, each at most alpha* and optimal-convex at it.
#[test]
fn independent_drafts_and_verifiers_on_named_schemes() {
    let dir = tempfile::tempdir().unwrap();
    let rows = |values: [[f64; 5]; 3], name: &str| {
        let array = ndarray::Array2::from_shape_fn((3, 5), |(r, c)| values[r][c]);
        let path = dir.path().join(name);
        ndarray_npy::write_npy(&path, &array).unwrap();
    };
    rows(
        [
            [0.4, 0.3, 0.15, 0.1, 0.05],
            [0.05, 0.1, 0.2, 0.25, 0.4],
            [0.2, 0.2, 0.2, 0.2, 0.2],
        ],
        "p_target.npy",
    );
    rows(
        [
            [0.1, 0.2, 0.3, 0.35, 0.05],
            [0.3, 0.3, 0.2, 0.1, 0.1],
            [0.5, 0.2, 0.15, 0.1, 0.05],
        ],
        "q_draft.npy",
    );
    let data = dir.path().to_str().unwrap();
    let laws = ["--draft-temperatures", "0.5,2"];
    let doc = json(
        &[
            &[
                "eval", "--data", data, "--schemes", "wor,independent", "--n", "2,3", "--json",
                "--verifiers",
                "optimal-convex@independent,specinfer@independent,optimal-convex@wor,khisti@independent",
                "--samples", "2000",
            ],
            &laws[..],
        ]
        .concat(),
    );
    for (r, row) in doc["per_row"].as_array().unwrap().iter().enumerate() {
        for (j, n) in ["2", "3"].into_iter().enumerate() {
            let row_arg = r.to_string();
            let bound = |scheme: &str, extra: &[&str]| {
                let args = [
                    &[
                        "bound", "--data", data, "--row", &row_arg, "-n", n, "--json",
                    ],
                    &["--scheme", scheme][..],
                    extra,
                ]
                .concat();
                json(&args)["alpha_star"].as_f64().unwrap()
            };
            let independent = bound("independent", &laws);
            let wor = bound("wor", &[]);
            let alpha = row["alpha_star"]["independent"][j].as_f64().unwrap();
            assert!(
                (alpha - independent).abs() <= 1e-6,
                "row {r} n {n}: {alpha} {independent}"
            );
            let acceptance = |name: &str| row["verifiers"][name][j]["acceptance"].as_f64().unwrap();
            let optimal = acceptance("optimal-convex@independent");
            assert!(
                independent - 1e-6 <= optimal && optimal <= independent + 1e-12,
                "row {r} n {n}: {optimal} {independent}"
            );
            assert!(acceptance("specinfer@independent") <= independent + 1e-12);
            let optimal_wor = acceptance("optimal-convex@wor");
            assert!(wor - 1e-6 <= optimal_wor && optimal_wor <= wor + 1e-12);
            let khisti = &row["verifiers"]["khisti@independent"][j]["interval_99"];
            assert!(
                khisti[0].as_f64().unwrap() <= independent + 1e-12,
                "{khisti}"
            );
        }
    }
    for (args, needle) in [
        (
            vec!["eval", "--data", data, "--draft-temperatures", "0.5,2"],
            "serve independent drafts only",
        ),
        (
            vec!["eval", "--data", data, "--verifiers", "rrs-wor@iid"],
            "rrs-wor",
        ),
        (
            vec!["eval", "--data", data, "--verifiers", "specinfer@nonesuch"],
            "nonesuch",
        ),
    ] {
        let out = mdsd(&args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}
