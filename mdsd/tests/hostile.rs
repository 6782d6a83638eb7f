//! Inputs that crashed the binary, ran away with memory or time, or
//! returned a number for a request of nothing: each now fails at once with
//! one line. Every case runs under a memory cap and a time limit of its own
//! (`ulimit -v`, `timeout`), so that a regression fails here instead of
//! hanging the suite or the machine.

use std::process::Command;

/// Virtual memory cap of each run, in KiB (the binary itself maps far less).
const MEMORY_KIB: u64 = 4_000_000;
/// Seconds each run may take.
const SECONDS: u64 = 20;

/// Runs the binary with `args` under the caps; returns (exit code, stderr).
fn capped(args: &[&str]) -> (i32, String) {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "ulimit -v {MEMORY_KIB}; exec timeout {SECONDS} '{}' {}",
        env!("CARGO_BIN_EXE_mdsd"),
        quoted.join(" ")
    );
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.code().unwrap_or(-1), stderr)
}

/// The run ended by itself with a one-line error naming `needle`.
fn refused(args: &[&str], needle: &str) {
    let (code, stderr) = capped(args);
    assert_ne!(code, 124, "{args:?} ran past {SECONDS} s");
    assert!(code == 1 || code == 2, "{args:?}: exit {code}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("error"), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: {stderr:?} lacks {needle:?}"
    );
}

const P2: [&str; 4] = ["-p", "0.5,0.5", "-q", "0.5,0.5"];

fn with_pair(args: &[&'static str]) -> Vec<&'static str> {
    let mut all = args.to_vec();
    all.extend(P2);
    all
}

/// Counts past 2^32 wrapped in the size checks and past 2^64 looped or
/// asked for impossible allocations; they are refused with a size shown
/// as a power of two.
#[test]
fn huge_draft_and_path_counts_are_refused() {
    for n in ["4294967296", "4294967297", "18446744073709551615"] {
        refused(
            &with_pair(&["solve", "--method", "lp", "-n", n]),
            ">= 2^128",
        );
        refused(
            &with_pair(&["solve", "--method", "flow", "-n", n]),
            ">= 2^128",
        );
        refused(&with_pair(&["compare", "-n", n]), "draft tuple");
        refused(
            &with_pair(&["compare", "-n", n, "--samples", "10"]),
            "draft tuple",
        );
    }
    refused(
        &with_pair(&["block", "--depth", "2", "--paths", "4294967296"]),
        ">= 2^128",
    );
    refused(
        &with_pair(&[
            "block",
            "--depth",
            "18446744073709551615",
            "--samples",
            "10",
        ]),
        "draft tree",
    );
    refused(
        &with_pair(&[
            "block",
            "--depth",
            "2",
            "--paths",
            "18446744073709551615",
            "--samples",
            "10",
        ]),
        "draft tree",
    );
    refused(
        &["block", "-p", "1", "-q", "1", "--depth", "4294967295"],
        "draft path",
    );
    refused(
        &["eval", "--n", "18446744073709551615", "--schemes", "iid"],
        "draft tuple",
    );
}

/// The convex programs cost O(1) in n: a million drafts end in well under
/// the time limit (with a solution or a typed error, not a runaway).
#[test]
fn convex_programs_do_not_grow_with_n() {
    for n in ["100000", "1000000"] {
        let (code, stderr) = capped(&[
            "solve",
            "--method",
            "convex",
            "-n",
            n,
            "-p",
            "0.5,0.3,0.2",
            "-q",
            "0.2,0.3,0.5",
        ]);
        assert_ne!(code, 124, "n = {n} ran past {SECONDS} s");
        assert!(code == 0 || code == 1, "n = {n}: exit {code}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Requests of nothing return no number.
#[test]
fn zero_size_requests_are_refused() {
    refused(
        &with_pair(&["compare", "-n", "2", "--samples", "0"]),
        "--samples 0",
    );
    refused(&["eval", "--rows", "0"], "--rows 0");
    refused(
        &["eval", "--verifiers", "khisti", "--samples", "0"],
        "--samples 0",
    );
    refused(
        &with_pair(&["block", "--depth", "1", "--paths", "0"]),
        "--paths 0",
    );
    refused(
        &with_pair(&["block", "--depth", "1", "--samples", "0"]),
        "--samples 0",
    );
}
