//! Printing results: YAML or JSON documents, and stdout that may be a closed pipe.

use std::process::ExitCode;

use clap::ValueEnum;
use serde_json::Value;

/// How documents are printed (`-o yaml|json`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// Prints documents as YAML (`---` between them) or JSON (several: a `kind: List`).
pub fn print_values(values: &[Value], format: Format) -> ExitCode {
    let mut text = String::new();
    match format {
        Format::Json => {
            let v = if values.len() == 1 {
                values[0].clone()
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "List", "items": values})
            };
            match serde_json::to_string_pretty(&v) {
                Ok(s) => {
                    text.push_str(&s);
                    text.push('\n');
                }
                Err(e) => {
                    eprintln!("cannot print JSON: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        Format::Yaml => {
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    text.push_str("---\n");
                }
                match serde_saphyr::to_string(v) {
                    Ok(s) => text.push_str(&s),
                    Err(e) => {
                        eprintln!("cannot print YAML: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    emit(&text)
}

/// Writes to stdout. A reader that went away (`corral crd | head`) ends the output quietly,
/// as every Unix tool does, instead of a panic.
pub fn emit(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `1 GPU`, `2 GPUs`, `0 GPUs`: a count with its noun, in the number it needs.
pub fn plural(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
