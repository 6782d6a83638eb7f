//! Every console example in README.md and docs/ runs as written and prints
//! what the page shows (trycmd: a line `...` stands for any lines, `[..]`
//! for any text within a line, and `? failed` for a refusal). The commands
//! run as a reader in the checkout's root types them: in a folder of their
//! own where `data/` is the checkout's, so that what an example writes
//! (`--plan plan.json`, `--out report`) lands there and not in the checkout.

use std::path::PathBuf;

#[test]
fn console_examples_in_the_docs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap();
    let folder = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root.join("data"), folder.path().join("data")).unwrap();
    // trycmd runs a Markdown page's commands in the test's working
    // directory.
    std::env::set_current_dir(folder.path()).unwrap();
    trycmd::TestCases::new()
        .register_bin("mdsd", PathBuf::from(env!("CARGO_BIN_EXE_mdsd")))
        .case(root.join("README.md"))
        .case(root.join("docs/*.md"));
}
