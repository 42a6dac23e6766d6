//! `corral doctor`: what this machine offers the embedded cluster and what Corral will do
//! with it (corral-local's `doctor` examines; this prints).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use corral_local::ClusterFileConfig;

use crate::output::Format;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The data directory `corral up` would use (default as `corral up`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The cluster configuration `corral up` would read (cgroupRoot, containers, ports,
    /// node overrides).
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// `json` or `yaml` for the whole report; table (default) prints one line per finding.
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

/// The report of this machine for `args`.
pub fn report(args: &DoctorArgs) -> Result<corral_local::doctor::Report, String> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::up::default_data_dir);
    let file = match &args.config {
        Some(path) => {
            ClusterFileConfig::load(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => ClusterFileConfig::default(),
    };
    Ok(corral_local::doctor::examine(&data_dir, &file.settings)
        .with_findings(corral_local::doctor::pool_findings(&file)))
}

/// `corral doctor`: exits 0 whether findings are OK or WARN (a WARN is advice, and a
/// CPU-only machine is fine); 1 only when the configuration cannot be read.
pub fn run(args: &DoctorArgs) -> ExitCode {
    let report = match report(args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match args.output {
        None => {
            let warns = report.warnings().len();
            let tail = match warns {
                0 => "all OK".to_string(),
                1 => "1 warning, with its fix above".to_string(),
                n => format!("{n} warnings, each with its fix above"),
            };
            crate::output::emit(&format!("{}{}; {tail}\n", report.text(), report.one_line()))
        }
        Some(format) => match serde_json::to_value(&report) {
            Ok(value) => crate::output::print_values(&[value], format),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
