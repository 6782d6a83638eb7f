//! The `mdsd` command-line tool; see `mdsd --help`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let parsed = match cli::Cli::try_parse() {
        Ok(parsed) => parsed,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message spans several lines; the first says what is wrong.
            let text = e.to_string();
            eprintln!(
                "{}",
                text.lines().next().unwrap_or("error: invalid arguments")
            );
            return ExitCode::from(2);
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
            ExitCode::FAILURE
        }
    }
}
