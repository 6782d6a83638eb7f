//! ARCHITECTURE.md stays a true map: under 250 lines of short bullets, every path it names
//! exists (in the crate whose section names it), and every code name it
//! puts in backticks occurs in the workspace's Rust sources.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file and folder of the checkout, relative to its root, without
/// build output and version control.
fn paths(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name == "target" || name == ".git" {
            continue;
        }
        let relative = path
            .strip_prefix(base)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if path.is_dir() {
            out.push(format!("{relative}/"));
            paths(&path, base, out);
        } else {
            out.push(relative);
        }
    }
}

/// The text of every Rust and Python source of the workspace.
fn sources(all: &[String]) -> String {
    all.iter()
        .filter(|p| p.ends_with(".rs") || p.ends_with(".py"))
        .map(|p| std::fs::read_to_string(root().join(p)).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The spans between backticks, outside fenced code blocks.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (number, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let parts: Vec<&str> = line.split('`').collect();
        for span in parts.iter().skip(1).step_by(2) {
            spans.push((number, span.to_string()));
        }
    }
    spans
}

fn is_path(span: &str) -> bool {
    span.contains('/') && !span.contains(' ') && !span.starts_with('-')
        || [".rs", ".md", ".wgsl", ".py", ".toml"]
            .iter()
            .any(|ext| span.ends_with(ext))
}

fn is_code_name(span: &str) -> bool {
    span.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && span.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
}

#[test]
fn architecture_names_only_what_exists() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    assert!(text.lines().count() < 250, "ARCHITECTURE.md is too long");
    let mut all = Vec::new();
    paths(&root(), &root(), &mut all);
    let source = sources(&all);
    let lines: Vec<&str> = text.lines().collect();
    let mut checked = 0;
    for (number, span) in code_spans(&text) {
        // The crate folder whose section the line is in (`### `core/` ...`).
        let section = lines[..=number]
            .iter()
            .rev()
            .find(|l| l.starts_with("## ") || l.starts_with("### "))
            .and_then(|l| l.strip_prefix("### `"))
            .and_then(|l| l.split('`').next());
        if is_path(&span) {
            let within = section.unwrap_or("");
            let found = all.iter().any(|p| {
                p.starts_with(within)
                    && (p == &span || p.ends_with(&format!("/{span}")) || p == &format!("{span}/"))
            });
            assert!(found, "line {}: path `{span}` does not exist", number + 1);
            checked += 1;
        } else if is_code_name(&span) {
            for segment in span.split("::").filter(|s| !s.is_empty()) {
                assert!(
                    source.contains(segment),
                    "line {}: `{span}` names {segment}, which no source holds",
                    number + 1
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} names checked");
}

/// Each bullet of ARCHITECTURE.md stays short enough to read at a glance.
#[test]
fn architecture_bullets_are_short() {
    const MOST_CHARACTERS: usize = 300;
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut bullet = String::new();
    let check = |bullet: &str| {
        let words = bullet.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.chars().count() <= MOST_CHARACTERS,
            "a bullet of {} characters: {words}",
            words.chars().count()
        );
    };
    for line in text.lines() {
        if line.starts_with("* ") || line.trim().is_empty() || line.starts_with('#') {
            check(&bullet);
            bullet.clear();
        }
        if line.starts_with("* ") || (!bullet.is_empty() && line.starts_with("  ")) {
            bullet.push_str(line);
            bullet.push(' ');
        }
    }
    check(&bullet);
}
