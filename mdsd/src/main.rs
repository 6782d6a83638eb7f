//! The `mdsd` command-line tool; see `mdsd --help`.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

/// Every error exits with this code, after one line on stderr.
const FAILED: u8 = 2;

fn main() -> ExitCode {
    let parsed = match cli::Cli::try_parse() {
        Ok(parsed) => parsed,
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!(
                "error: mdsd needs a command: bound, solve, compare, eval or block \
                 (`mdsd --help` describes them)"
            );
            return ExitCode::from(FAILED);
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            print!("{e}");
            return ExitCode::SUCCESS;
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
            eprintln!("{line}");
            return ExitCode::from(FAILED);
        }
    };
    match cli::run(parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Where an instance was refused, the commands that scale.
            let instead = e.instead();
            if instead.is_empty() {
                eprintln!("error: {e}");
            } else {
                eprintln!("error: {e} ({})", instead.join(", "));
            }
            ExitCode::from(FAILED)
        }
    }
}
