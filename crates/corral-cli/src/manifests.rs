//! `corral validate` and `corral convert`: commands over manifest files alone (no server).

use std::process::ExitCode;

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;

use crate::output::{Format, emit, print_values};
use crate::{explain, input};

/// Checks every document of `files` and explains each valid one; exit code 1 if anything
/// is invalid.
pub fn validate(files: &[String], quiet: bool) -> ExitCode {
    let ctx = ValidationContext::default();
    let mut failed = false;
    let mut report = String::new();
    // Documents of all files form one context, so a Queue may name a NodePool of another file.
    let mut loaded = Vec::new();
    for f in files {
        match input::read(f) {
            Ok(text) => loaded.push((f.as_str(), text)),
            Err(e) => {
                eprintln!("{f}: {e}");
                failed = true;
            }
        }
    }
    let all_text: Vec<&str> = loaded.iter().map(|(_, t)| t.as_str()).collect();
    let shared = input::shared_context(&all_text, &ctx);
    for (name, text) in &loaded {
        for result in parse_documents(text, &shared) {
            match result {
                Ok(parsed) => {
                    if !quiet {
                        report.push_str(&format!("{name}: {}\n", explain::summary(&parsed)));
                    }
                }
                Err(e) => {
                    failed = true;
                    eprintln!("{name}: {e}");
                }
            }
        }
    }
    let printed = emit(&report);
    if failed { ExitCode::FAILURE } else { printed }
}

/// Prints a file's jobs as Corral TrainingJobs (Kubeflow kinds converted), optionally
/// with every default filled in.
pub fn convert(file: &str, output: Format, with_defaults: bool) -> ExitCode {
    let text = match input::read(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = Vec::new();
    let mut failed = false;
    for result in parse_documents(&text, &ValidationContext::default()) {
        match result {
            Ok(parsed) => match parsed.document {
                Document::TrainingJob(mut job) => {
                    if with_defaults {
                        job.spec.apply_defaults();
                    }
                    out.push(Document::TrainingJob(job).to_value());
                }
                other => out.push(other.to_value()),
            },
            Err(e) => {
                failed = true;
                eprintln!("{file}: {e}");
            }
        }
    }
    if failed {
        return ExitCode::FAILURE;
    }
    print_values(&out, output)
}
