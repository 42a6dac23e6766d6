//! `corral operator ARGS`: runs the `corral-operator` program (built and installed beside
//! `corral`) in this process's place. The operator is a program of its own so that the
//! embedded server does not carry its code; this keeps the habit `corral operator`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The program's file name.
pub const PROGRAM: &str = "corral-operator";

/// Where `corral-operator` is: beside the running `corral` (how cargo builds and packages
/// install them), else on PATH.
pub fn find() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(PROGRAM)))
        .filter(|p| p.is_file());
    beside.or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(PROGRAM))
                .find(|p| p.is_file())
        })
    })
}

/// Replaces this process with `corral-operator ARGS` (same pid, so a supervisor or a test
/// that signals `corral operator` signals the operator). Returns only on failure.
pub fn exec(args: Vec<OsString>) -> ExitCode {
    let Some(program) = find() else {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.display().to_string()))
            .unwrap_or_else(|| "the directory of corral".into());
        eprintln!(
            "error: `corral operator` runs the {PROGRAM} program, found neither in {beside} nor on PATH; \
             build it with `cargo build --release -p corral` (it builds both) or install it beside corral"
        );
        return ExitCode::FAILURE;
    };
    let err = Command::new(&program).args(args).exec();
    eprintln!("error: cannot run {}: {err}", program.display());
    ExitCode::FAILURE
}
