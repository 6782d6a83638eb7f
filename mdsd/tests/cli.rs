//! The `mdsd` binary end to end: inputs, JSON shape, agreement with the
//! library, and one-line errors for bad input.

mod common;

use std::path::{Path, PathBuf};

use mdsd::{
    Distribution, DraftScheme, IidAlgorithm, LpSolver, Problem, SchemeKind, Solve,
    optimal_acceptance,
};
use ndarray::{Array2, arr0, array};
use ndarray_npy::{NpzReader, WriteNpyExt};
use serde_json::Value;

use common::{json, mdsd};

fn write_npy<A: WriteNpyExt>(dir: &Path, name: &str, array: &A) -> String {
    let path = dir.join(name);
    array
        .write_npy(std::fs::File::create(&path).unwrap())
        .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn readme_example_json_shape() {
    let doc = json(&[
        "bound",
        "-p",
        "0.5,0.3,0.2",
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--json",
    ]);
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 11);
    for key in [
        "alpha_star",
        "acceptance",
        "gap",
        "status",
        "scheme",
        "n",
        "method",
        "certificate",
        "iterations",
        "elapsed_ms",
        "input",
    ] {
        assert!(keys.contains(&key), "missing {key}");
    }
    assert!((doc["alpha_star"].as_f64().unwrap() - 0.86).abs() < 1e-12);
    assert_eq!(doc["scheme"], "iid");
    assert_eq!(doc["n"], 2);
    assert_eq!(doc["method"], "bound");
    assert_eq!(doc["certificate"]["size"], 2);
    assert!((doc["certificate"]["p_mass"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(
        doc["certificate"]["ratio_prefix_end"],
        serde_json::json!({"ratio": 1.0, "token": 1})
    );
    assert!(doc["certificate"].get("tokens").is_none(), "{doc}");
}

/// The compact certificate of a full-vocabulary row is checkable: the
/// tokens whose (p/q, id) is at most its pair are exactly the ids
/// `--certificate full` lists, and they hold the p(H*) it states.
#[test]
fn compact_certificate_defines_the_full_one() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/qwen-coder-dense-8rows.npz");
    let path = data.to_str().unwrap();
    let base = ["bound", "--data", path, "--rows", "3", "-n", "4", "--json"];
    let compact = json(&base);
    let full = json(&[&base[..], &["--certificate", "full"]].concat());
    let pairs = mdsd::logits::read_pairs(&data, &Default::default()).unwrap();
    let law = |row: &[f64]| match pairs.values {
        mdsd::logits::Values::Logits => Distribution::from_logits(row, 1.0).unwrap(),
        mdsd::logits::Values::Probabilities => Distribution::from_probs(row.to_vec()).unwrap(),
    };
    for (r, (c, f)) in compact["rows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(full["rows"].as_array().unwrap())
        .enumerate()
    {
        let (c, f) = (&c["certificate"], &f["certificate"]);
        let tokens: Vec<usize> = f["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(
            c["size"].as_u64().unwrap() as usize,
            tokens.len(),
            "row {r}"
        );
        let end = &c["ratio_prefix_end"];
        let (ratio, token) = (
            end["ratio"].as_f64().unwrap(),
            end["token"].as_u64().unwrap() as usize,
        );
        let (p, q) = (law(pairs.target.row(r)), law(pairs.draft.row(r)));
        let defined: Vec<usize> = (0..p.len())
            .filter(|&y| {
                let ratio_y = if q.prob(y) > 0.0 {
                    p.prob(y) / q.prob(y)
                } else {
                    f64::INFINITY
                };
                (ratio_y, y) <= (ratio, token)
            })
            .collect();
        assert_eq!(defined, tokens, "row {r}");
        let p_mass: f64 = tokens.iter().map(|&y| p.prob(y)).sum();
        assert!(
            (c["p_mass"].as_f64().unwrap() - p_mass).abs() < 1e-12,
            "row {r}"
        );
    }
}

#[test]
fn table_output_names_alpha_and_certificate() {
    let out = mdsd(&["bound", "-p", "0.5,0.3,0.2", "-q", "0.2,0.3,0.5", "-n", "2"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("0.860000000000") && text.contains("{1, 2}"),
        "{text}"
    );
}

#[test]
fn solve_lp_equals_bound_for_every_scheme() {
    for scheme in ["iid", "wor", "greedy"] {
        let common = [
            "-p",
            "0.4,0.3,0.2,0.1",
            "-q",
            "0.1,0.2,0.3,0.4",
            "-n",
            "3",
            "--scheme",
            scheme,
            "--json",
        ];
        let bound = json(&[&["bound"], &common[..]].concat());
        for formulation in ["full", "relaxed"] {
            let lp = json(
                &[
                    &["solve", "--method", "lp", "--formulation", formulation],
                    &common[..],
                ]
                .concat(),
            );
            let (a, b) = (
                bound["alpha_star"].as_f64().unwrap(),
                lp["alpha_star"].as_f64().unwrap(),
            );
            assert!(
                (a - b).abs() < 1e-9,
                "{scheme} {formulation}: bound {a} lp {b}"
            );
            assert_eq!(lp["method"], "lp");
        }
    }
    let independent = [
        "-p",
        "0.4,0.3,0.2,0.1",
        "-q",
        "0.1,0.2,0.3,0.4",
        "-q",
        "0.25,0.25,0.25,0.25",
        "-n",
        "2",
        "--scheme",
        "independent",
        "--json",
    ];
    let bound = json(&[&["bound"], &independent[..]].concat());
    let lp = json(&[&["solve", "--method", "lp"], &independent[..]].concat());
    assert!(
        (bound["alpha_star"].as_f64().unwrap() - lp["alpha_star"].as_f64().unwrap()).abs() < 1e-9
    );
}

#[test]
fn npy_and_json_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p: Array2<f64> = array![[0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.1, 0.1, 0.8]];
    let q: Array2<f32> = array![[0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]];
    let p_path = write_npy(dir.path(), "p.npy", &p);
    let q_path = write_npy(dir.path(), "q.npy", &q);
    let json_path = dir.path().join("p.json");
    std::fs::write(
        &json_path,
        serde_json::to_string(&p.outer_iter().map(|r| r.to_vec()).collect::<Vec<_>>()).unwrap(),
    )
    .unwrap();
    for p_arg in [p_path.as_str(), json_path.to_str().unwrap()] {
        let doc = json(&[
            "bound", "-p", p_arg, "-q", &q_path, "-n", "2", "--scheme", "wor", "--json",
        ]);
        let rows = doc["rows"]
            .as_array()
            .expect("several rows give {\"rows\": [...]}");
        assert_eq!(rows.len(), 3);
        for (r, row) in rows.iter().enumerate() {
            let target = Distribution::from_probs(p.row(r).to_vec()).unwrap();
            let draft = Distribution::from_probs(
                q.row(r).iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
            )
            .unwrap();
            let problem =
                Problem::new(target, DraftScheme::without_replacement(draft, 2).unwrap()).unwrap();
            let expected = optimal_acceptance(&problem).unwrap();
            assert!((row["alpha_star"].as_f64().unwrap() - expected.alpha_star).abs() < 1e-12);
            assert_eq!(row["scheme"], "wor");
        }
    }
    // One shared draft row is broadcast over three target rows.
    let doc = json(&[
        "bound",
        "-p",
        &p_path,
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--json",
    ]);
    assert_eq!(doc["rows"].as_array().unwrap().len(), 3);
}

#[test]
fn real_rows_at_full_vocabulary_match_the_library() {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/qwen-coder-dense-8rows.npz");
    let mut npz = NpzReader::new(std::fs::File::open(fixture).unwrap()).unwrap();
    let p: Array2<f32> = npz.by_name("p.npy").unwrap();
    let q: Array2<f32> = npz.by_name("q.npy").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p_path = write_npy(
        dir.path(),
        "p.npy",
        &p.slice(ndarray::s![..2, ..]).to_owned(),
    );
    let q_path = write_npy(
        dir.path(),
        "q.npy",
        &q.slice(ndarray::s![..2, ..]).to_owned(),
    );
    let doc = json(&["bound", "-p", &p_path, "-q", &q_path, "-n", "4", "--json"]);
    for (r, row) in doc["rows"].as_array().unwrap().iter().enumerate() {
        let to_dist = |a: &Array2<f32>| {
            Distribution::from_probs(a.row(r).iter().map(|&x| f64::from(x)).collect::<Vec<_>>())
                .unwrap()
        };
        let expected =
            mdsd::bounds::optimal_acceptance_iid(&to_dist(&p), &to_dist(&q), 4, IidAlgorithm::Sort)
                .unwrap();
        assert!((row["alpha_star"].as_f64().unwrap() - expected.alpha_star).abs() < 1e-12);
        assert_eq!(
            row["certificate"]["size"].as_u64().unwrap() as usize,
            expected.certificate.len()
        );
    }
}

#[test]
fn logits_and_transforms() {
    let logits = [2.0f64, 1.0, 0.0, -1.0];
    let draft_logits = [0.0f64, 1.0, 2.0, 0.5];
    let join = |x: &[f64]| x.iter().map(f64::to_string).collect::<Vec<_>>().join(",");
    let doc = json(&[
        "bound",
        "-p",
        &join(&logits),
        "-q",
        &join(&draft_logits),
        "-n",
        "2",
        "--logits",
        "--temperature",
        "0.7",
        "--top-k",
        "3",
        "--json",
    ]);
    let transform = mdsd::Transform {
        temperature: Some(0.7),
        top_k: Some(3),
        top_p: None,
    };
    let problem = Problem::new(
        transform.apply_to_logits(&logits).unwrap(),
        DraftScheme::new(
            SchemeKind::Iid,
            vec![transform.apply_to_logits(&draft_logits).unwrap()],
            2,
        )
        .unwrap(),
    )
    .unwrap();
    let expected = optimal_acceptance(&problem).unwrap();
    let lp = LpSolver::default().solve(&problem).unwrap();
    assert!((doc["alpha_star"].as_f64().unwrap() - expected.alpha_star).abs() < 1e-12);
    assert!((lp.summary.alpha_star - expected.alpha_star).abs() < 1e-9);
}

#[test]
fn bad_input_gives_one_line_and_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.npy");
    std::fs::write(&garbage, b"not an npy file").unwrap();
    let scalar = write_npy(dir.path(), "scalar.npy", &arr0(0.5));
    let not_array = dir.path().join("object.json");
    std::fs::write(&not_array, "{\"p\": 1}").unwrap();
    let two_rows = write_npy(dir.path(), "two.npy", &array![[0.5, 0.5], [0.5, 0.5]]);
    let three_rows = write_npy(
        dir.path(),
        "three.npy",
        &array![[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]],
    );
    let q = "0.2,0.3,0.5";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["bound", "-p", garbage.to_str().unwrap(), "-q", q, "-n", "2"],
            "garbage.npy",
        ),
        (
            vec!["bound", "-p", "missing.npy", "-q", q, "-n", "2"],
            "cannot read missing.npy",
        ),
        (
            vec!["bound", "-p", &scalar, "-q", q, "-n", "2"],
            "has shape []",
        ),
        (
            vec![
                "bound",
                "-p",
                not_array.to_str().unwrap(),
                "-q",
                q,
                "-n",
                "2",
            ],
            "must hold an array",
        ),
        (
            vec!["bound", "-p", "0.5,nan,0.5", "-q", q, "-n", "2"],
            "entry 1 is NaN",
        ),
        (
            vec!["bound", "-p", "0.5,inf,0.5", "-q", q, "-n", "2"],
            "entry 1 is inf",
        ),
        (
            vec!["bound", "-p", "0.5,-0.1,0.6", "-q", q, "-n", "2"],
            "entry 1 is -0.1, which is negative",
        ),
        (
            vec!["bound", "-p", "0.5,0.3,0.3", "-q", q, "-n", "2"],
            "sum to 1.1",
        ),
        (
            vec!["bound", "-p", "0.5,0.5", "-q", q, "-n", "2"],
            "the target has 2 tokens per row but the draft has 3",
        ),
        (
            vec!["bound", "-p", "0.5,0.3,0.2", "-q", q, "-n", "0"],
            "n must be at least 1",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-n",
                "2",
                "--scheme",
                "magic",
            ],
            "unknown draft scheme",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-n",
                "4",
                "--scheme",
                "wor",
            ],
            "needs at least 4 tokens",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-q",
                q,
                "-q",
                q,
                "-n",
                "2",
                "--scheme",
                "independent",
            ],
            "each of its 3 draft laws at least once: n = 2 is too few",
        ),
        (
            vec!["bound", "-p", "0.5,0.3,0.2", "-q", q, "-q", q, "-n", "2"],
            "several (-q repeated, --draft-arrays, --draft-temperatures) only with --scheme independent",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-q",
                q,
                "-n",
                "2",
                "--scheme",
                "independent",
                "--draft-temperatures",
                "0.7,1.3",
            ],
            "--draft-temperatures sets the laws of one draft row, but 2 were read",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-n",
                "2",
                "--draft-temperatures",
                "0.7,1.3",
            ],
            "--scheme iid drafts from one draft law (got 2)",
        ),
        (
            vec!["bound", "-p", &two_rows, "-q", &three_rows, "-n", "2"],
            "the target has 2 rows but the draft has 3",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-n",
                "2",
                "--top-p",
                "1.5",
            ],
            "top-p 1.5",
        ),
        (
            vec![
                "bound",
                "-p",
                "0.5,0.3,0.2",
                "-q",
                q,
                "-n",
                "2",
                "--temperature",
                "-1",
            ],
            "temperature -1",
        ),
        (
            vec![
                "solve",
                "--method",
                "lp",
                "-p",
                "0.25,0.25,0.25,0.25",
                "-q",
                "0.25,0.25,0.25,0.25",
                "-n",
                "9",
            ],
            "above the budget",
        ),
        (
            vec![
                "solve", "--method", "simplex", "-p", "0.5,0.5", "-q", "0.5,0.5", "-n", "1",
            ],
            "invalid value 'simplex'",
        ),
    ];
    for (args, expected) in cases {
        let out = mdsd(&args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{args:?}: stderr is not one line: {stderr}"
        );
        assert!(stderr.starts_with("error"), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: {stderr:?} does not mention {expected:?}"
        );
    }
}

#[test]
fn solve_flow_matches_bound_and_writes_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.json");
    for (scheme, qs) in [
        ("iid", vec!["0.1,0.2,0.3,0.4"]),
        ("wor", vec!["0.1,0.2,0.3,0.4"]),
        ("greedy", vec!["0.1,0.2,0.3,0.4"]),
        ("independent", vec!["0.1,0.2,0.3,0.4", "0.7,0.1,0.1,0.1"]),
    ] {
        let mut common = vec![
            "-p",
            "0.4,0.3,0.2,0.1",
            "-n",
            "2",
            "--scheme",
            scheme,
            "--json",
        ];
        for q in &qs {
            common.extend(["-q", q]);
        }
        let bound = json(&[&["bound"], &common[..]].concat());
        for extra in [&[][..], &["--decomposed"][..]] {
            let args = [
                &[
                    "solve",
                    "--method",
                    "flow",
                    "--plan",
                    plan_path.to_str().unwrap(),
                ],
                extra,
                &common[..],
            ]
            .concat();
            let flow = json(&args);
            let (a, b) = (
                bound["alpha_star"].as_f64().unwrap(),
                flow["alpha_star"].as_f64().unwrap(),
            );
            assert!((a - b).abs() < 1e-9, "{scheme}: bound {a} flow {b}");
            assert_eq!(flow["method"], "flow");
            let plan: Value =
                serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
            assert_eq!(plan["drafts_as"], "sets");
            // The plan's output law is p.
            let mut marginal = [0.0; 4];
            let probs = plan["probs"].as_array().unwrap();
            let conditional = plan["conditional"].as_array().unwrap();
            assert_eq!(plan["drafts"].as_array().unwrap().len(), probs.len());
            for (prob, row) in probs.iter().zip(conditional) {
                let prob = prob.as_f64().unwrap();
                for (m, pi) in marginal.iter_mut().zip(row.as_array().unwrap()) {
                    *m += prob * pi.as_f64().unwrap();
                }
            }
            for (m, p) in marginal.iter().zip([0.4, 0.3, 0.2, 0.1]) {
                assert!((m - p).abs() < 1e-9, "{scheme}: marginal {marginal:?}");
            }
        }
    }
    let out = mdsd(&[
        "solve",
        "--method",
        "flow",
        "--max-sets",
        "10",
        "-p",
        &vec!["0.05"; 20].join(","),
        "-q",
        &vec!["0.05"; 20].join(","),
        "-n",
        "3",
    ]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        !out.status.success()
            && stderr.lines().count() == 1
            && stderr.contains("above the budget of 10"),
        "{stderr}"
    );
}

#[test]
fn compare_rates_verifiers_exactly() {
    let doc = json(&[
        "compare",
        "-p",
        "0.5,0.3,0.2",
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--json",
    ]);
    assert!((doc["alpha_star"].as_f64().unwrap() - 0.86).abs() < 1e-12);
    let verifiers = doc["verifiers"].as_array().unwrap();
    let names: Vec<&str> = verifiers
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "nss",
            "naive",
            "specinfer",
            "kseq",
            "khisti",
            "optimal-flow",
            "optimal-convex"
        ]
    );
    for v in verifiers {
        assert_eq!(v.as_object().unwrap().len(), 6);
        assert!(v["max_marginal_error"].as_f64().unwrap() < 1e-12, "{v}");
        assert!(v["chi2_p_value"].is_null());
        assert!(v["detectable_tv"].is_null(), "exact: no power figure");
        assert!(v["acceptance_interval_99"].is_null(), "exact: no interval");
    }
    assert_eq!(doc["skipped"], serde_json::json!([]));
    let by_name = |name: &str| {
        verifiers.iter().find(|v| v["name"] == name).unwrap()["acceptance"]
            .as_f64()
            .unwrap()
    };
    assert!((by_name("specinfer") - 0.76).abs() < 1e-12);
    assert!((by_name("kseq") - 0.79135528726).abs() < 1e-10);
    assert!((by_name("optimal-flow") - 0.86).abs() < 1e-9);
    // Two drafts, every token in the truncation: Khisti et al.'s LP reaches alpha*.
    assert!((by_name("khisti") - 0.86).abs() < 1e-6);
    assert!((by_name("optimal-convex") - 0.86).abs() < 1e-6);
    assert!((by_name("optimal-convex") - 0.86).abs() < 1e-6);

    let doc = json(&[
        "compare",
        "-p",
        "0.5,0.3,0.2",
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--scheme",
        "wor",
        "--verifiers",
        "rrs-wor",
        "--json",
    ]);
    assert!((doc["verifiers"][0]["acceptance"].as_f64().unwrap() - 0.82).abs() < 1e-12);

    // SpecHub on its own hub drafts reaches their alpha*: p(hub) + Σ min(p, q').
    let doc = json(&[
        "compare",
        "-p",
        "0.5,0.3,0.2",
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--scheme",
        "hub",
        "--verifiers",
        "spechub",
        "--json",
    ]);
    assert!((doc["alpha_star"].as_f64().unwrap() - 0.9).abs() < 1e-12);
    assert!((doc["verifiers"][0]["acceptance"].as_f64().unwrap() - 0.9).abs() < 1e-12);

    for (args, expected) in [
        (
            vec![
                "compare",
                "-p",
                "0.5,0.5",
                "-q",
                "0.5,0.5",
                "-n",
                "2",
                "--verifiers",
                "rrs-wor",
            ],
            "does not support iid",
        ),
        (
            vec![
                "compare",
                "-p",
                "0.5,0.5",
                "-q",
                "0.5,0.5",
                "-n",
                "2",
                "--verifiers",
                "magic",
            ],
            "unknown verifier",
        ),
    ] {
        let out = mdsd(&args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            !out.status.success() && stderr.lines().count() == 1 && stderr.contains(expected),
            "{stderr}"
        );
    }
}

#[test]
fn compare_in_sampling_mode() {
    let args = [
        "compare",
        "-p",
        "0.5,0.3,0.2",
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--samples",
        "100000",
        "--seed",
        "9",
        "--json",
    ];
    let doc = json(&args);
    for v in doc["verifiers"].as_array().unwrap() {
        assert!(v["max_marginal_error"].is_null());
        let p_value = v["chi2_p_value"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p_value));
        // Two degrees of freedom and 10^5 draws: a pass rules out a total
        // variation of about sqrt(26 / 4e5) = 0.008 (99% power, level 0.01).
        let tv = v["detectable_tv"].as_f64().unwrap();
        assert!(0.005 < tv && tv < 0.012, "{v}");
    }
    let specinfer = doc["verifiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "specinfer")
        .unwrap();
    assert!((specinfer["acceptance"].as_f64().unwrap() - 0.76).abs() < 0.01);
    assert_eq!(doc, json(&args), "the same seed gives the same report");
}

#[test]
fn solve_convex_reports_its_run() {
    let doc = json(&[
        "solve",
        "--method",
        "convex",
        "-p",
        "0.5,0.3,0.2",
        "-q",
        "0.2,0.3,0.5",
        "-n",
        "2",
        "--max-gap",
        "1e-9",
        "--json",
    ]);
    let acceptance = doc["acceptance"].as_f64().unwrap();
    assert!((0.86 - 1e-9..=0.86 + 1e-12).contains(&acceptance), "{doc}");
    assert!((doc["alpha_star"].as_f64().unwrap() - 0.86).abs() < 1e-12);
    assert_eq!(doc["method"], "convex");
    assert_eq!(doc["certificate"]["size"], 2);
    assert_eq!(doc["status"], "converged");
    assert!(doc["iterations"].as_u64().is_some());
    assert!(doc["elapsed_ms"].as_f64().unwrap() >= 0.0);
    for (args, expected) in [
        (
            vec![
                "solve", "--method", "convex", "-p", "0.5,0.5", "-q", "0.5,0.5", "-n", "2",
                "--scheme", "greedy",
            ],
            "not greedy",
        ),
        (
            vec![
                "solve",
                "--method",
                "convex",
                "-p",
                "0.5,0.5",
                "-q",
                "0.5,0.5",
                "-n",
                "2",
                "--max-gap",
                "-1",
            ],
            "--max-gap -1 is invalid",
        ),
        (
            vec![
                "solve",
                "--method",
                "convex",
                "-p",
                "0.5,0.5",
                "-q",
                "0.5,0.5",
                "-n",
                "2",
                "--budget-ms",
                "nan",
            ],
            "--budget-ms NaN is invalid",
        ),
        (
            vec![
                "solve", "--method", "convex", "-p", "0.5,0.5", "-q", "0.5,0.5", "-n", "2",
                "--plan", "x.json",
            ],
            "--plan writes the plans",
        ),
    ] {
        let out = mdsd(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}

/// Sampling at full vocabulary with the default verifiers: a verifier that
/// cannot be built at this size (optimal-flow's dense plan would take
/// 184 GB for greedy drafts) is named as skipped with its reason, the
/// others run, each with a 99% interval around its sampled acceptance.
#[test]
fn compare_samples_at_full_vocabulary_skip_what_cannot_run() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/qwen-coder-dense-8rows.npz");
    let data = data.to_str().unwrap();
    let compare = |scheme, draws| {
        [
            "compare",
            "--data",
            data,
            "--row",
            "0",
            "-n",
            "2",
            "--scheme",
            scheme,
            "--samples",
            draws,
        ]
    };
    for scheme in ["iid", "greedy", "hub"] {
        let args = compare(scheme, "2000");
        let doc = json(&[&args[..], &["--json"]].concat());
        let skipped = doc["skipped"].as_array().unwrap();
        assert!(
            skipped.iter().any(|s| s["verifier"] == "optimal-flow"
                && s["reason"].as_str().unwrap().contains("above the")),
            "{scheme}: {doc}"
        );
        let verifiers = doc["verifiers"].as_array().unwrap();
        assert!(verifiers.len() >= 2, "{scheme}: {doc}");
        for v in verifiers {
            let interval = v["acceptance_interval_99"].as_array().unwrap();
            let (lo, hi) = (interval[0].as_f64().unwrap(), interval[1].as_f64().unwrap());
            let acceptance = v["acceptance"].as_f64().unwrap();
            assert!(lo <= acceptance && acceptance <= hi, "{scheme}: {v}");
        }
        let table = mdsd(&args);
        assert!(table.status.success());
        let text = String::from_utf8(table.stdout).unwrap();
        assert!(text.contains("skipped optimal-flow at this size"), "{text}");
        assert!(text.contains("99% interval"), "{text}");
    }
    // Asked for by name, it is an error naming what scales instead.
    let out = mdsd(
        &[
            &compare("greedy", "100")[..],
            &["--verifiers", "optimal-flow"],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("dense plan") && stderr.contains("convex"),
        "{stderr}"
    );
}

/// `solve --method convex` beyond i.i.d. drafts: without replacement its
/// acceptance is within the tolerance of the closed form's alpha*; for
/// independent drafts it brackets max flow's alpha* between the
/// acceptance and the cut of the certificate, and the table says which
/// end is which.
#[test]
fn solve_convex_on_wor_and_independent_drafts() {
    let base = [
        "-p",
        "0.4,0.3,0.2,0.1",
        "-q",
        "0.1,0.2,0.3,0.4",
        "-n",
        "2",
        "--json",
    ];
    let wor = json(
        &[
            &["solve", "--method", "convex", "--scheme", "wor"],
            &base[..],
        ]
        .concat(),
    );
    let closed = json(&[&["bound", "--scheme", "wor"], &base[..]].concat());
    let (acceptance, alpha) = (
        wor["acceptance"].as_f64().unwrap(),
        closed["alpha_star"].as_f64().unwrap(),
    );
    assert!(
        alpha - 1e-7 <= acceptance && acceptance <= alpha + 1e-12,
        "{wor}"
    );
    let independent = [
        "--scheme",
        "independent",
        "-p",
        "0.4,0.3,0.2,0.1",
        "-q",
        "0.1,0.2,0.3,0.4",
        "-q",
        "0.25,0.25,0.4,0.1",
        "-n",
        "2",
    ];
    let convex = json(&[&["solve", "--method", "convex", "--json"], &independent[..]].concat());
    let flow = json(&[&["solve", "--method", "flow", "--json"], &independent[..]].concat());
    let exact = flow["alpha_star"].as_f64().unwrap();
    let (low, high) = (
        convex["acceptance"].as_f64().unwrap(),
        convex["alpha_star"].as_f64().unwrap(),
    );
    assert!(
        low <= exact + 1e-12 && exact <= high + 1e-12 && high - low <= 1e-7,
        "{convex}"
    );
    let table = mdsd(&[&["solve", "--method", "convex"], &independent[..]].concat());
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("alpha* lies between the acceptance"),
        "{text}"
    );
}

/// Independent drafts from draft laws taken in turn: two -q for n = 4 is
/// the four -q they stand for; --draft-temperatures is -q repeated with
/// the tempered rows; --draft-arrays reads named arrays of a data file.
#[test]
fn independent_drafts_from_laws_in_turn() {
    let p = "0.4,0.3,0.2,0.1";
    let (a, b) = ("0.1,0.2,0.3,0.4", "0.25,0.25,0.4,0.1");
    let alpha = |args: &[&str]| {
        let doc = json(
            &[
                &["bound", "--scheme", "independent", "--json", "-p", p],
                args,
            ]
            .concat(),
        );
        doc["alpha_star"].as_f64().unwrap()
    };
    let cycled = alpha(&["-q", a, "-q", b, "-n", "4"]);
    let spelled = alpha(&["-q", a, "-q", b, "-q", a, "-q", b, "-n", "4"]);
    assert!((cycled - spelled).abs() <= 1e-15, "{cycled} {spelled}");

    // q at temperature T: q^(1/T), renormalised.
    let tempered = |t: f64| {
        let q: Vec<f64> = a
            .split(',')
            .map(|x| x.parse::<f64>().unwrap().powf(1.0 / t))
            .collect();
        let sum: f64 = q.iter().sum();
        q.iter()
            .map(|x| (x / sum).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let (cold, hot) = (tempered(0.5), tempered(2.0));
    let by_temperatures = alpha(&["-q", a, "--draft-temperatures", "0.5,2", "-n", "2"]);
    let by_rows = alpha(&["-q", &cold, "-q", &hot, "-n", "2"]);
    assert!(
        (by_temperatures - by_rows).abs() <= 1e-12,
        "{by_temperatures} {by_rows}"
    );

    let dir = tempfile::tempdir().unwrap();
    let row = |text: &str| -> Array2<f32> {
        let values: Vec<f32> = text.split(',').map(|x| x.parse().unwrap()).collect();
        Array2::from_shape_vec((1, values.len()), values).unwrap()
    };
    write_npy(dir.path(), "p_target.npy", &row(p));
    write_npy(dir.path(), "q_draft.npy", &row(a));
    write_npy(dir.path(), "q_other.npy", &row(b));
    let data = dir.path().to_str().unwrap();
    let by_arrays = json(&[
        "bound",
        "--data",
        data,
        "--draft-arrays",
        "q_draft,q_other",
        "--scheme",
        "independent",
        "-n",
        "4",
        "--json",
    ]);
    let by_arrays = by_arrays["alpha_star"].as_f64().unwrap();
    assert!((by_arrays - cycled).abs() <= 1e-6, "{by_arrays} {cycled}");
    let out = mdsd(&[
        "bound",
        "--data",
        data,
        "--draft-arrays",
        "q_draft,q_none",
        "-n",
        "2",
    ]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success() && err.contains("q_none"), "{err}");
}

/// At full vocabulary no closed form or flow network takes independent
/// drafts: `bound` and `compare` answer with the convex solver's certified
/// interval (width <= 1e-6 on a real row), saying which end is which, and
/// `solve --method convex` gives the same.
#[test]
fn independent_drafts_at_full_vocabulary_give_a_certified_interval() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/qwen-coder-dense-8rows.npz");
    let data = data.to_str().unwrap();
    let problem = [
        "--data",
        data,
        "--row",
        "1",
        "--scheme",
        "independent",
        "-n",
        "2",
        "--draft-temperatures",
        "0.7,1.3",
        "--json",
    ];
    let bound = json(&[&["bound"], &problem[..]].concat());
    let interval = &bound["alpha_star_interval"];
    let (lower, upper) = (
        interval["lower"].as_f64().unwrap(),
        interval["upper"].as_f64().unwrap(),
    );
    assert_eq!(bound["method"], "convex", "{bound}");
    assert!(lower <= upper && upper - lower <= 1e-6, "{bound}");
    assert_eq!(bound["alpha_star"].as_f64().unwrap(), upper);
    assert_eq!(bound["acceptance"].as_f64().unwrap(), lower);
    let solve = json(&[&["solve", "--method", "convex"], &problem[..]].concat());
    assert_eq!(solve["alpha_star"], bound["alpha_star"], "{solve}");

    let compare = json(
        &[
            &[
                "compare",
                "--samples",
                "20000",
                "--verifiers",
                "optimal-convex",
            ],
            &problem[..],
        ]
        .concat(),
    );
    let ends = compare["alpha_star_interval"].as_array().unwrap();
    assert_eq!(ends[0].as_f64().unwrap(), lower, "{compare}");
    assert_eq!(ends[1].as_f64().unwrap(), upper, "{compare}");
    let rated = &compare["verifiers"][0];
    let (lo, hi) = (
        rated["acceptance_interval_99"][0].as_f64().unwrap(),
        rated["acceptance_interval_99"][1].as_f64().unwrap(),
    );
    assert!(lo <= lower && upper <= hi, "{compare}");
}

/// A negative number is the value of the option before it, in either
/// spelling, and is then refused for what it is (never taken for a flag
/// `-0` or `-3`); a transform is refused by the flag that set it, not by
/// the rows it would have applied to.
#[test]
fn negative_values_are_read_as_values_and_refused_by_name() {
    let pair = ["-p", "0.5,0.3,0.2", "-q", "0.2,0.3,0.5"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["bound", "-n", "2", "--top-p", "-0.1"],
            "--top-p -0.1 is invalid",
        ),
        (
            &["bound", "-n", "2", "--top-p=-0.1"],
            "--top-p -0.1 is invalid",
        ),
        (
            &["bound", "-n", "2", "--draft-top-p", "-0.5"],
            "--draft-top-p -0.5 is invalid",
        ),
        (
            &["eval", "--n", "2", "--target-top-p", "2"],
            "--target-top-p 2 is invalid",
        ),
        (
            &["solve", "-n", "2", "--method", "lp", "--top-k", "0"],
            "--top-k 0 is invalid",
        ),
        (&["bound", "-n", "2", "--top-k", "-3"], "'-3' for '--top-k"),
        (&["bound", "-n", "-2"], "'-2' for '--num-drafts"),
        (
            &["bound", "-n", "2", "--temperature", "-1"],
            "temperature -1",
        ),
        (
            &["compare", "-n", "2", "--samples", "-5"],
            "'-5' for '--samples",
        ),
        (
            &["solve", "-n", "2", "--method", "convex", "--max-gap", "-1"],
            "--max-gap -1",
        ),
        (
            &["solve", "-n", "2", "--method", "convex", "--max-gap", "2"],
            "--max-gap 2",
        ),
        (
            &[
                "solve",
                "-n",
                "2",
                "--method",
                "convex",
                "--budget-ms",
                "-1",
            ],
            "--budget-ms -1",
        ),
    ];
    for (args, named) in cases {
        let (command, rest) = args.split_first().unwrap();
        let mut all = vec![*command];
        all.extend(pair);
        all.extend(rest);
        let out = mdsd(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
        assert!(stderr.contains(named), "{all:?}: {stderr}");
        assert!(!stderr.contains("unexpected argument"), "{all:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{all:?}: {stderr}");
    }
}
