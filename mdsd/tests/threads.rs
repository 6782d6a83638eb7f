//! Results do not depend on the machine's number of threads: every command
//! on the shipped data gives the same bits with RAYON_NUM_THREADS = 1, 2
//! and 7 (parallel sums are added in a fixed order, sampled draws come from
//! per-task streams). Only the measured times differ.

use std::process::Command;

use serde_json::Value;

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../data/qwen-coder-dense-8rows.npz"
);

/// Pool sizes compared: one thread, this machine's two, and more threads
/// than cores (the splits of a pool follow its size, not the machine's).
const THREADS: [&str; 3] = ["1", "2", "7"];

/// The command's JSON document with the pool at `threads`, times removed.
fn run(args: &[&str], threads: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mdsd"))
        .args(args)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut value: Value = serde_json::from_slice(&out.stdout).unwrap();
    without_times(&mut value);
    value
}

/// Drops every `elapsed_ms`: the one field that measures the machine.
fn without_times(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("elapsed_ms");
            map.values_mut().for_each(without_times);
        }
        Value::Array(items) => items.iter_mut().for_each(without_times),
        _ => {}
    }
}

#[test]
fn every_command_gives_the_same_bits_on_any_number_of_threads() {
    let commands: &[&[&str]] = &[
        &["bound", "--data", DATA, "-n", "4", "--json"],
        &[
            "bound", "--data", DATA, "-n", "3", "--scheme", "wor", "--json",
        ],
        &[
            "solve", "--data", DATA, "--row", "2", "-n", "4", "--method", "convex", "--json",
        ],
        &[
            "solve", "--data", DATA, "--row", "5", "-n", "3", "--method", "convex", "--scheme",
            "wor", "--json",
        ],
        &[
            "solve",
            "--data",
            DATA,
            "--row",
            "1",
            "-n",
            "2",
            "--method",
            "convex",
            "--scheme",
            "independent",
            "--json",
        ],
        &[
            "compare", "--data", DATA, "--row", "3", "-n", "2", "--top-k", "8", "--json",
        ],
        &[
            "compare",
            "--data",
            DATA,
            "--row",
            "4",
            "-n",
            "2",
            "--samples",
            "20000",
            "--json",
        ],
        &[
            "eval",
            "--data",
            DATA,
            "--json",
            "--schemes",
            "iid,wor,independent",
            "--verifiers",
            "specinfer,optimal-convex,optimal-convex@wor,optimal-convex@independent,khisti,kseq",
            "--samples",
            "4000",
            "--n",
            "2,4",
        ],
        &["eval", "--data", DATA, "--json", "--temperature", "0.7"],
        &[
            "block",
            "--data",
            DATA,
            "--depth",
            "2",
            "--paths",
            "2",
            "--samples",
            "2000",
            "--json",
        ],
    ];
    for args in commands {
        let one = run(args, THREADS[0]);
        for threads in &THREADS[1..] {
            assert_eq!(
                run(args, threads),
                one,
                "{args:?}: RAYON_NUM_THREADS={threads} differs from 1"
            );
        }
    }
}
