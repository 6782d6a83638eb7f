//! Running the `mdsd` binary from the integration tests.

use std::process::{Command, Output};

use serde_json::Value;

pub fn mdsd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mdsd"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs a command that must succeed and print one JSON document.
pub fn json(args: &[&str]) -> Value {
    let out = mdsd(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is exactly one JSON document")
}
