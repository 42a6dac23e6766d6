//! `corral validate` and `corral convert`: commands over manifest files (`validate` asks a
//! reachable server to check jobs as `submit` would).

use std::process::ExitCode;

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;

use clap::Args;
use corral_server::api_client::{Client, ClientError};

use crate::output::{Format, emit, print_values};
use crate::remote::{self, ConnArgs, NamespaceArgs};
use crate::{document_summary, input};

/// `corral validate FILE...`
#[derive(Args, Debug)]
pub struct ValidateArgs {
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,
    /// Print only errors.
    #[arg(short, long)]
    pub quiet: bool,
    /// Check the files alone, even when a server is reachable.
    #[arg(long)]
    pub offline: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// What `validate` found: lines for stdout (explanations), lines for stderr (errors and
/// notes), and whether anything was invalid.
#[derive(Debug, Default)]
pub struct ValidateReport {
    pub out: String,
    pub err: String,
    pub failed: bool,
}

/// Checks every document of `files` and explains each valid one; exit code 1 if anything
/// is invalid.
pub fn validate(args: &ValidateArgs) -> ExitCode {
    let client = (!args.offline).then(|| args.conn.client());
    let report = validate_report(&args.files, args.quiet, client.as_ref(), &args.namespace);
    eprint!("{}", report.err);
    let printed = emit(&report.out);
    if report.failed {
        ExitCode::FAILURE
    } else {
        printed
    }
}

/// The checks of `corral validate`. A file that holds only jobs is checked by the server
/// when one answers (a dry-run submit: the very checks, and errors, of `corral submit`,
/// against the cluster's priority classes, queues and nodes); otherwise offline, and the
/// report says which checks could not run.
pub fn validate_report(
    files: &[String],
    quiet: bool,
    client: Option<&Client>,
    namespace: &NamespaceArgs,
) -> ValidateReport {
    let ctx = ValidationContext::default();
    let mut report = ValidateReport::default();
    // Documents of all files form one context, so a Queue may name a NodePool of another file.
    let mut loaded = Vec::new();
    for f in files {
        match input::read(f) {
            Ok(text) => loaded.push((f.as_str(), text)),
            Err(e) => {
                report.err.push_str(&format!("{f}: {e}\n"));
                report.failed = true;
            }
        }
    }
    let all_text: Vec<&str> = loaded.iter().map(|(_, t)| t.as_str()).collect();
    let shared = input::shared_context(&all_text, &ctx);
    let mut server_down: Option<String> = None;
    let mut offline_jobs = false;
    for (name, text) in &loaded {
        let parsed = parse_documents(text, &shared);
        let only_jobs = parsed.iter().all(|r| {
            r.as_ref().is_err()
                || matches!(r, Ok(p) if matches!(p.document, Document::TrainingJob(_)))
        });
        let mut checked_by_server = false;
        if only_jobs
            && server_down.is_none()
            && let Some(client) = client
        {
            let ns = namespace
                .given()
                .or_else(|| remote::declared_namespace(text))
                .or_else(|| client.token_namespace().ok().flatten())
                .unwrap_or_else(|| "default".to_string());
            match client.submit_dry_run(&ns, text) {
                Ok(results) => {
                    checked_by_server = true;
                    // What the server accepts but does not honour: what `submit` prints.
                    for r in &results {
                        for w in &r.warnings {
                            report.err.push_str(&format!(
                                "{name}: warning: TrainingJob {}: {w}\n",
                                r.name
                            ));
                        }
                    }
                }
                Err(ClientError::Connect { server, .. }) => server_down = Some(server),
                Err(e) => {
                    // Exactly what `corral submit` prints for this file.
                    report.err.push_str(&format!("{name}: {e}\n"));
                    report.failed = true;
                    continue;
                }
            }
        }
        for result in parsed {
            match result {
                Ok(parsed) => {
                    let is_job = matches!(parsed.document, Document::TrainingJob(_));
                    if is_job && !checked_by_server {
                        offline_jobs = true;
                    }
                    // A job's warnings come from the server when it checked the file (its
                    // own included); those of other kinds (a deprecated kind) from here.
                    if !(is_job && checked_by_server) {
                        for w in &parsed.warnings {
                            report.err.push_str(&format!(
                                "{name}: warning: {} {}: {}: {}\n",
                                parsed.document.kind(),
                                parsed.document.name(),
                                w.path,
                                w.message
                            ));
                        }
                    }
                    if !quiet {
                        report
                            .out
                            .push_str(&format!("{name}: {}\n", document_summary::summary(&parsed)));
                    }
                }
                Err(e) if !checked_by_server => {
                    report.failed = true;
                    report.err.push_str(&format!("{name}: {e}\n"));
                }
                Err(_) => {}
            }
        }
    }
    if offline_jobs && !quiet {
        let why = match (&server_down, client) {
            (Some(server), _) => format!("no Corral server answers at {server}"),
            (None, None) => "--offline".to_string(),
            (None, Some(_)) => "those files also declare cluster objects".to_string(),
        };
        report.err.push_str(&format!(
            "note: checked offline ({why}), so these checks did not run: {}; `corral submit` runs them\n",
            ValidationContext::CLUSTER_CHECKS
        ));
    }
    report
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
