//! `mdsd block` end to end: the docs/TEST_VECTORS.md toy in its documented JSON
//! shape, agreement with the library on Markov models and on rows of
//! a data file, and one-line errors.

mod common;

use mdsd::core::{ContextModel, MarkovModel, PositionalRows};
use mdsd::logits::{ReadOptions, read_pairs};
use mdsd::verify::block::{exact_block, prepare_block, sampled_block};
use serde_json::Value;

use common::{json, mdsd};

fn method<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {doc}"))
}

const TOY: [&str; 4] = [
    "-p",
    "0.3333333333333333,0.6666666666666667",
    "-q",
    "0.6666666666666667,0.3333333333333333",
];

#[test]
fn toy_json_has_the_test_vector_values() {
    let mut args = vec!["block"];
    args.extend(TOY);
    args.extend([
        "--depth",
        "2",
        "--paths",
        "2",
        "--methods",
        "token,bv,gbv,lp",
        "--json",
    ]);
    let doc = json(&args);
    let expected = [
        ("token", 10.0 / 9.0),
        ("bv", 11.0 / 9.0),
        ("gbv", 131.0 / 81.0),
        ("lp", 131.0 / 81.0),
    ];
    assert!(doc["note"].is_null(), "-p/-q laws need no note");
    for (name, want) in expected {
        let m = method(&doc, name);
        let got = m["expected_accepted"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "{name}: {got} vs {want}");
        assert!((m["block_efficiency"].as_f64().unwrap() - got - 1.0).abs() < 1e-12);
        assert!(m["max_law_error"].as_f64().unwrap() < 1e-12);
    }
    let table = mdsd(&args[..args.len() - 1]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("exact enumeration") && text.contains("gbv"),
        "{text}"
    );
}

#[test]
fn markov_matches_the_library_and_sampling_has_no_law_error() {
    let doc = json(&[
        "block",
        "--markov",
        "4",
        "--markov-vocab",
        "3",
        "--depth",
        "2",
        "--paths",
        "2",
        "--methods",
        "gbv,specinfer",
        "--json",
    ]);
    let model = MarkovModel::random(3, 1, 4).unwrap();
    for name in ["gbv", "specinfer"] {
        let verifier = prepare_block(name, &model, 2).unwrap();
        let report = exact_block(&model, verifier.as_ref(), 2, 2, 1_000_000).unwrap();
        let got = method(&doc, name)["expected_accepted"].as_f64().unwrap();
        assert!((got - report.expected_accepted).abs() < 1e-12, "{name}");
    }
    let sampled = json(&[
        "block",
        "--markov",
        "4",
        "--depth",
        "2",
        "--paths",
        "2",
        "--samples",
        "2000",
        "--json",
    ]);
    assert!(method(&sampled, "gbv")["max_law_error"].is_null());
}

/// --data with --positional uses rows --row..=--row+L, one per position:
/// the same number as the library on those rows (sampling with one seed
/// is reproducible; V = 1025 is past exact enumeration).
#[test]
fn data_rows_as_positional_laws() {
    let data = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../logits/data/qwen-coder-sparse-32rows.safetensors"
    );
    let pairs = read_pairs(data, &ReadOptions::default()).unwrap();
    let model: PositionalRows = pairs.context_model(3..6, &Default::default()).unwrap();
    assert_eq!((model.context_count(), model.vocab_size()), (3, 1025));
    let args = [
        "block",
        "--data",
        data,
        "--row",
        "3",
        "--positional",
        "--depth",
        "2",
        "--paths",
        "3",
    ];
    let sampling = [
        "--methods",
        "gbv",
        "--samples",
        "3000",
        "--seed",
        "7",
        "--json",
    ];
    let doc = json(&[&args[..], &sampling[..]].concat());
    let verifier = prepare_block("gbv", &model, 2).unwrap();
    let report = sampled_block(&model, verifier.as_ref(), 2, 3, 3000, 7).unwrap();
    let got = method(&doc, "gbv")["expected_accepted"].as_f64().unwrap();
    assert_eq!(got, report.expected_accepted);
    // The rows are a context model, not the models on their own drafts:
    // said in JSON and under the table.
    assert!(
        doc["note"]
            .as_str()
            .unwrap()
            .contains("not conditioned on the drafted prefix")
    );
    let gbv = method(&doc, "gbv");
    assert_eq!(gbv["tau_law"].as_array().unwrap().len(), 3);
    assert_eq!(gbv["depth_acceptance"].as_array().unwrap().len(), 2);
    let se = gbv["standard_error"].as_f64().unwrap();
    let interval = gbv["expected_accepted_interval_99"].as_array().unwrap();
    let half = (interval[1].as_f64().unwrap() - interval[0].as_f64().unwrap()) / 2.0;
    assert!(
        se > 0.0 && (half - 2.575_829_303_548_901 * se).abs() < 1e-12,
        "{gbv}"
    );
    let table = mdsd(&[&args[..], &sampling[..sampling.len() - 1]].concat());
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("P(tau = d)") && text.contains("not conditioned"),
        "{text}"
    );
    let exact = mdsd(&args);
    assert!(
        String::from_utf8(exact.stderr)
            .unwrap()
            .contains("--samples")
    );
}

#[test]
fn bad_input_gives_one_line_and_nonzero_exit() {
    let cases: [(&[&str], &str); 5] = [
        (&["block", "--depth", "2"], "needs -p and -q"),
        (
            &["block", "-p", "0.5,0.5", "-q", "0.5,0.5", "--depth", "0"],
            "depth of at least 1",
        ),
        (
            &[
                "block",
                "-p",
                "0.5,0.5",
                "-q",
                "0.2,0.3,0.5",
                "--depth",
                "1",
            ],
            "the draft has 3",
        ),
        (
            &[
                "block",
                "-p",
                "0.5,0.5",
                "-q",
                "0.5,0.5",
                "--depth",
                "1",
                "--methods",
                "spechub",
            ],
            "does not support iid",
        ),
        (
            &[
                "block",
                "--markov",
                "1",
                "--markov-vocab",
                "40",
                "--depth",
                "4",
                "--paths",
                "2",
            ],
            "--samples",
        ),
    ];
    for (args, needle) in cases {
        let out = mdsd(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}
