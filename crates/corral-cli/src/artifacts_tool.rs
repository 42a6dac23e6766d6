//! `corral artifacts`: what the Kubernetes operator runs in the pods it makes around a
//! pipeline's steps, whose artifacts are on a volume only pods mount: make a step's output
//! directories before it starts, and report hashes and texts of artifacts back through the
//! pod's termination message (`corral_api::artifacts_report`). Hidden: not for people.

use std::path::PathBuf;
use std::process::ExitCode;

use corral_api::artifacts_report::ArtifactsReport;

#[derive(Clone, Debug, clap::Subcommand)]
pub enum ArtifactsCommand {
    /// Make each output directory, writable by the step.
    Prepare {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Report each path's content hash.
    Hash {
        #[arg(long, default_value = "/dev/termination-log")]
        message_file: PathBuf,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Report each path's text, as a condition reads it.
    Read {
        #[arg(long, default_value = "/dev/termination-log")]
        message_file: PathBuf,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

pub fn run(what: &ArtifactsCommand) -> ExitCode {
    let (report, file) = match what {
        ArtifactsCommand::Prepare { dirs } => {
            return match corral_local::artifacts::prepare_for_pod(dirs) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: making the output directories: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        ArtifactsCommand::Hash {
            message_file,
            paths,
        } => (
            corral_local::artifacts::report_hashes(paths).map_err(|e| format!("hashing {e}")),
            message_file,
        ),
        ArtifactsCommand::Read {
            message_file,
            paths,
        } => (corral_local::artifacts::report_texts(paths), message_file),
    };
    let message = report.and_then(|r: ArtifactsReport| r.to_message());
    match message {
        Ok(m) => {
            println!("{m}");
            if let Err(e) = std::fs::write(file, &m) {
                eprintln!("error: writing {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The operator shows the failed pod's message: say why there.
            let _ = std::fs::write(file, &e);
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
