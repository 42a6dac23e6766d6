//! Writing a remote command's result to stdout, and its failure to stderr.

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use super::common_args::Output;

/// Prints a failure and returns exit code 1.
pub(crate) fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

/// Writes to stdout; a reader that went away ends the output quietly.
pub(crate) fn out(text: &str) -> ExitCode {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(&format!("cannot write output: {e}")),
    }
}

pub(crate) fn structured<T: Serialize>(value: &T, output: Output) -> Result<String, String> {
    match output {
        Output::Yaml => serde_saphyr::to_string(value).map_err(|e| e.to_string()),
        _ => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
    }
}

pub(crate) fn print_structured<T: Serialize>(value: &T, output: Output) -> ExitCode {
    match structured(value, output) {
        Ok(s) => out(&s),
        Err(e) => fail(&format!("cannot print: {e}")),
    }
}
