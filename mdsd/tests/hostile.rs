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
    assert_eq!(code, 2, "{args:?}: {stderr}");
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
        // Independent drafts hold n laws: refused before they are made.
        for command in ["bound", "compare"] {
            refused(
                &with_pair(&[command, "--scheme", "independent", "-n", n]),
                "independent drafts' laws",
            );
        }
        refused(
            &with_pair(&["compare", "-n", n, "--samples", "10"]),
            "draft tuple",
        );
    }
    refused(
        &with_pair(&["block", "--depth", "2", "--paths", "4294967296"]),
        "the set of a draft tree's paths has 4294967296 elements, above the limit",
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
/// the time limit, with a solution; past what they resolve, a refusal.
#[test]
fn convex_programs_do_not_grow_with_n() {
    let (p, q) = ("0.5,0.3,0.2", "0.2,0.3,0.5");
    // A token of p = 0 leaves an inner program whose P(S > 0) = q^n is near
    // underflow (n = 559), where the start's root search must still end; at
    // n = 5000 the same row's outer program, with that token held at the
    // lower bound, must not cycle along 1 short of its tolerance.
    let (held_p, held_q) = (
        "0.37712593086661106,0.3191738540306743,0,0.30370021510271467",
        "0.14207774940300127,0.09953359081689368,0.42781225234977244,0.3305764074303326",
    );
    let solved = [
        ("100000", p, q),
        ("1000000", p, q),
        ("559", held_p, held_q),
        ("5000", held_p, held_q),
    ];
    let solve = |n, p, q| ["solve", "--method", "convex", "-n", n, "-p", p, "-q", q];
    for (n, p, q) in solved {
        let (code, stderr) = capped(&solve(n, p, q));
        assert_ne!(code, 124, "n = {n} ran past {SECONDS} s");
        assert_eq!(code, 0, "n = {n}: {stderr}");
    }
    // Past what the programs resolve (n ε against the tolerance): refused
    // at once, naming the closed form.
    refused(
        &solve("1000000000", p, q),
        "so they take up to 225179981 drafts; use the closed form (`mdsd bound`)",
    );
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

mod random_arguments {
    use proptest::prelude::*;

    use super::{SECONDS, capped};

    /// Integers a careless or hostile user types.
    const COUNTS: [&str; 10] = [
        "0",
        "1",
        "2",
        "3",
        "-1",
        "4294967296",
        "18446744073709551615",
        "99999999999999999999",
        "1e9",
        "x",
    ];
    /// Numbers for real-valued flags.
    const REALS: [&str; 8] = ["0", "0.5", "1", "-1", "nan", "inf", "1e300", "1e-300"];
    /// Inputs, good and bad.
    const INPUTS: [&str; 8] = [
        "0.5,0.3,0.2",
        "0.2,0.3,0.5",
        "1",
        "0.5,-0.1,0.6",
        "0.5,x",
        "",
        "no/such.npy",
        "0.25,0.25,0.25,0.25",
    ];

    fn flag() -> impl Strategy<Value = Vec<String>> {
        let count = |name: &'static str| {
            prop::sample::select(&COUNTS[..]).prop_map(move |v| vec![name.into(), v.into()])
        };
        let real = |name: &'static str| {
            prop::sample::select(&REALS[..]).prop_map(move |v| vec![name.into(), v.into()])
        };
        let input = |name: &'static str| {
            prop::sample::select(&INPUTS[..]).prop_map(move |v| vec![name.into(), v.into()])
        };
        prop_oneof![
            count("-n"),
            count("--depth"),
            count("--paths"),
            count("--samples"),
            count("--row"),
            count("--rows"),
            count("--top-k"),
            count("--max-variables"),
            count("--max-sets"),
            count("--vocab"),
            count("--markov-vocab"),
            count("--seed"),
            real("--temperature"),
            real("--top-p"),
            real("--tol"),
            input("-p"),
            input("-q"),
            prop::sample::select(&["iid", "wor", "independent", "greedy", "hub", "bogus"][..])
                .prop_map(|s| vec!["--scheme".into(), s.into()]),
            prop::sample::select(&["lp", "flow", "convex", "simplex"][..])
                .prop_map(|m| vec!["--method".into(), m.into()]),
            prop::sample::select(&["--json", "--logits", "--exact", "--decomposed"][..])
                .prop_map(|f| vec![f.into()]),
        ]
    }

    fn command() -> impl Strategy<Value = Vec<String>> {
        let name =
            prop::sample::select(&["bound", "solve", "compare", "eval", "block", "nope"][..]);
        (name, prop::collection::vec(flag(), 0..7)).prop_map(|(name, flags)| {
            let mut args = vec![name.to_string()];
            // eval on the built-in sample, one row: a run in well under a second.
            if name == "eval" {
                args.extend(["--rows".into(), "1".into(), "--row".into(), "0".into()]);
            }
            args.extend(flags.into_iter().flatten());
            args
        })
    }

    proptest! {
        // 48 cases in the suite; `HOSTILE_CASES=2000` for a longer hunt.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("HOSTILE_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48),
            ..ProptestConfig::default()
        })]

        /// Any argument vector ends by itself, exit 0 or 2, with at most one
        /// line on stderr and no panic.
        #[test]
        fn any_arguments_end_cleanly(args in command()) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, stderr) = capped(&args);
            prop_assert_ne!(code, 124, "{:?} ran past {} s", args, SECONDS);
            prop_assert!(code == 0 || code == 2, "{:?}: exit {}: {}", args, code, stderr);
            prop_assert!(!stderr.contains("panicked"), "{:?}: {}", args, stderr);
            prop_assert!(stderr.trim_end().lines().count() <= 1, "{:?}: {}", args, stderr);
        }
    }
}

/// A `.npy` file of float64 rows `[rows, 3]`, as numpy writes it.
fn npy(rows: &[[f64; 3]]) -> Vec<u8> {
    let header = format!(
        "{{'descr': '<f8', 'fortran_order': False, 'shape': ({}, 3), }}",
        rows.len()
    );
    let padded = format!("{header:<width$}\n", width = 64 - 10 - 1);
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((padded.len() as u16).to_le_bytes());
    bytes.extend(padded.as_bytes());
    bytes.extend(rows.iter().flatten().flat_map(|x| x.to_le_bytes()));
    bytes
}

/// Errors say what is wrong where a user can find it: the usage line, the
/// truncated file's sizes, the entry and value, short numbers; and paths
/// need not be UTF-8.
#[test]
fn messages_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let full = npy(&[[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]]);
    let truncated = dir.path().join("truncated.npy");
    std::fs::write(&truncated, &full[..full.len() - 10]).unwrap();
    let empty = dir.path().join("empty.npy");
    std::fs::write(&empty, b"").unwrap();
    let (truncated, empty) = (truncated.to_str().unwrap(), empty.to_str().unwrap());
    refused(
        &["bound", "-p", truncated, "-q", "0.5,0.3,0.2", "-n", "2"],
        "truncated: its shape [2, 3] of float64 needs 48 bytes of data, it holds 38",
    );
    refused(
        &["bound", "-p", empty, "-q", "0.5,0.3,0.2", "-n", "2"],
        "the file is empty",
    );
    refused(&["block", "--markov", "1"], "Usage: mdsd block");
    refused(&[], "needs a command");
    refused(
        &[
            "bound",
            "-p",
            "0.5,-0.1,0.6",
            "-q",
            "0.2,0.3,0.5",
            "-n",
            "2",
        ],
        "entry 1 is -0.1, which is negative",
    );
    refused(
        &["bound", "-p", "1e300,1", "-q", "0.5,0.5", "-n", "2"],
        "sum to 1.000000e300",
    );
    // One tolerance for every reader: a float64 row summing to 1.005 is
    // refused by eval's data reader as by -p, with its sum.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let off = npy(&[[0.505, 0.3, 0.2], [0.2, 0.3, 0.5]]);
    std::fs::write(data.join("p_target.npy"), &off).unwrap();
    std::fs::write(data.join("q_draft.npy"), &full).unwrap();
    let data = data.to_str().unwrap();
    refused(
        &["eval", "--data", data, "--probabilities", "--n", "2"],
        "row 0 sums to 1.005, which is not within 1.0e-6 of 1, the tolerance for float64 rows",
    );
    refused(
        &[
            "bound",
            "-p",
            "0.505,0.3,0.2",
            "-q",
            "0.2,0.3,0.5",
            "-n",
            "2",
        ],
        "the entries sum to 1.005, which is not within 1.0e-6 of 1",
    );

    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"p\xff.npy");
        let path = dir.path().join(name);
        std::fs::write(&path, &full).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdsd"))
            .arg("bound")
            .arg("-p")
            .arg(&path)
            .args(["-q", "0.5,0.3,0.2", "-n", "2", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The block LP's budget bounds its work (variables x rows), not only its
/// variables: V = 3, L = 3, K = 3 ran for minutes.
#[test]
fn block_lp_work_is_bounded() {
    refused(
        &[
            "block",
            "--markov",
            "1",
            "--depth",
            "3",
            "--paths",
            "3",
            "--methods",
            "lp",
        ],
        "variables x rows",
    );
}

/// A reader that stops early (`mdsd bound ... --json | head`) ends the
/// command quietly: exit 0, nothing on stderr.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let data = format!(
        "{}/../data/qwen-coder-dense-8rows.npz",
        env!("CARGO_MANIFEST_DIR")
    );
    // Certificates of full-vocabulary rows: megabytes, more than a pipe holds.
    let mut child = Command::new(env!("CARGO_BIN_EXE_mdsd"))
        .args(["bound", "--data", &data, "-n", "4", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}

/// Help into a pipe whose reader has gone (`mdsd solve --help | head -1`)
/// ends quietly, as every command's output does, instead of a panic on
/// the failed write.
#[test]
fn help_into_a_closed_pipe_ends_quietly() {
    use std::process::Stdio;
    for args in [&["solve", "--help"][..], &["--version"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mdsd"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes before the binary has started writing.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// An error written to a stderr that cannot take it (`2>/dev/full`) is
/// lost, not a panic: the exit code still says 2. So is a warning.
#[test]
fn a_full_stderr_keeps_the_exit_code() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    for args in [
        vec!["bound", "-p", "0.5,0.5", "-q", "0.5", "-n", "2"],
        vec!["bound", "-n", "2"],
        vec!["nonsense"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mdsd"))
            .args(&args)
            .stderr(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {:?}", out.status);
    }
}

/// Output to a standard output closed from the start (`>&-`) would be lost
/// without a word: the command says so and exits 2. `> /dev/null`, which
/// discards output on purpose, is no error.
#[test]
fn a_closed_stdout_is_an_error_and_dev_null_is_not() {
    let run = |redirect: &str| {
        let script = format!(
            "exec '{}' bound -p 0.5,0.5 -q 0.2,0.8 -n 2 {redirect}",
            env!("CARGO_BIN_EXE_mdsd")
        );
        Command::new("sh").arg("-c").arg(script).output().unwrap()
    };
    let closed = run(">&-");
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("closed when mdsd started"), "{stderr}");
    let discarded = run("> /dev/null");
    assert_eq!(discarded.status.code(), Some(0));
    assert!(discarded.stderr.is_empty());
}

/// What is not a regular file is refused by what it is, at once: a FIFO
/// (which blocks its reader for ever) as `-p`, as a `.json`, as a draft
/// vocabulary map or inside a `--data` folder, and a device (`/dev/zero`,
/// which never ends) as `--data` or behind a `.npy` link.
#[test]
fn pipes_and_devices_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = |name: &str| {
        let path = dir.path().join(name);
        let made = Command::new("mkfifo").arg(&path).status();
        made.is_ok_and(|s| s.success())
            .then(|| path.to_str().unwrap().to_string())
    };
    let (Some(npy), Some(json), Some(map)) = (fifo("p.npy"), fifo("p.json"), fifo("map.npy"))
    else {
        eprintln!("skipped: no mkfifo on this system");
        return;
    };
    let folder = dir.path().join("rows");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("q_draft.npy"), npy_bytes()).unwrap();
    let inside = Command::new("mkfifo")
        .arg(folder.join("p_target.npy"))
        .status()
        .unwrap();
    assert!(inside.success());
    let zero = dir.path().join("zero.npy");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let q = "0.2,0.3,0.5";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["bound", "-p", &npy, "-q", q, "-n", "2"], "FIFO"),
        (vec!["bound", "-p", &json, "-q", q, "-n", "2"], "FIFO"),
        (
            vec![
                "bound",
                "-p",
                q,
                "-q",
                q,
                "-n",
                "2",
                "--draft-vocab-map",
                &map,
            ],
            "FIFO",
        ),
        (
            vec!["bound", "--data", folder.to_str().unwrap(), "-n", "2"],
            "FIFO",
        ),
        (vec!["bound", "--data", "/dev/zero", "-n", "2"], "a device"),
        (
            vec!["bound", "-p", zero.to_str().unwrap(), "-q", q, "-n", "2"],
            "a device",
        ),
        (vec!["eval", "--data", zero.to_str().unwrap()], "a device"),
    ];
    for (args, kind) in cases {
        refused(&args, kind);
        refused(&args, "not a regular file");
    }
}

/// A one-row float64 `.npy` of three probabilities.
fn npy_bytes() -> Vec<u8> {
    npy(&[[0.2, 0.3, 0.5]])
}

/// An `.npy` header whose length field claims more than the file holds
/// (a v2 header of 0xFFFFFFFF bytes asked for 4 GB before any check) is
/// refused naming both sizes, as `-p` and inside a `--data` folder.
#[test]
fn npy_header_lengths_are_checked_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(b"{}");
    let lone = dir.path().join("p.npy");
    std::fs::write(&lone, &bytes).unwrap();
    let folder = dir.path().join("rows");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("p_target.npy"), &bytes).unwrap();
    std::fs::write(folder.join("q_draft.npy"), &bytes).unwrap();
    for args in [
        vec![
            "bound",
            "-p",
            lone.to_str().unwrap(),
            "-q",
            "0.5,0.5",
            "-n",
            "2",
        ],
        vec!["bound", "--data", folder.to_str().unwrap(), "-n", "2"],
    ] {
        refused(&args, "its header claims 4294967295 bytes");
    }
}
