//! The `mdsd` command-line tool; see `mdsd --help`.

mod cli;

use std::process::ExitCode;

use clap::error::ErrorKind;

/// Every error exits with this code, after one line on stderr.
const FAILED: u8 = 2;

/// A line on stderr; a stderr that cannot take it (`2>/dev/full`, closed)
/// loses the line, not the exit code (`eprintln!` would panic).
macro_rules! say {
    ($($arg:tt)*) => {
        cli::say(&format!($($arg)*))
    };
}

/// Keeps freed memory for reuse. Commands pass rows through in windows of
/// a few MB; glibc, by default, gives each freed window back to the kernel
/// (blocks above its mmap threshold are unmapped, the heap's top trimmed)
/// and the next window faults the same pages in afresh, zeroed: work
/// that grows with the file, not with the rows solved (the figures are in
/// benches/README.md). Raising both
/// thresholds to glibc's ceiling for the mmap one (32 MB on 64-bit) keeps
/// the pages; the peak is unchanged, as every window is the same size.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    // glibc's malloc.h: M_TRIM_THRESHOLD = -1, M_MMAP_THRESHOLD = -3.
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    const KEPT: i32 = 32 << 20;
    // SAFETY: mallopt only sets two of the allocator's parameters; it is
    // called before any other thread exists.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, KEPT);
        mallopt(M_TRIM_THRESHOLD, KEPT);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}

fn main() -> ExitCode {
    keep_freed_memory();
    let parsed = match cli::Cli::try_parse_args() {
        Ok(parsed) => parsed,
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            say!(
                "error: mdsd needs a command: bound, solve, compare, eval or block \
                 (`mdsd --help` describes them)"
            );
            return ExitCode::from(FAILED);
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version, through the commands' own output (a
            // reader that has gone ends it quietly; `print!` would panic).
            return match cli::emit(&e.to_string()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    say!("error: {e}");
                    ExitCode::from(FAILED)
                }
            };
        }
        Err(e) => {
            // clap's message spans several lines (what is wrong, the missing
            // names, the usage line): one line keeps every error one line.
            let text = e.to_string();
            let mut line = String::new();
            for part in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                if !line.is_empty() {
                    line.push_str(if line.ends_with(':') { " " } else { "; " });
                }
                line.push_str(part);
            }
            say!("{line}");
            return ExitCode::from(FAILED);
        }
    };
    match cli::run(parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Where an instance was refused, the commands that scale.
            let instead = e.instead();
            if instead.is_empty() {
                say!("error: {e}");
            } else {
                say!("error: {e} ({})", instead.join(", "));
            }
            ExitCode::from(FAILED)
        }
    }
}
