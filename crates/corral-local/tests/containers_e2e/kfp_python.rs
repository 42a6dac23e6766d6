//! The `kfp` package for the tests that compile pipelines with it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `kfp` package (pinned: the committed IR is what this version writes) in a uv
/// environment of its own, made once and kept in the temporary directory between runs.
/// Made by one test at a time: tests run in parallel, and a second `uv venv` of the same
/// directory while the first makes it fails (seen on a clean CI machine).
pub fn kfp_python() -> Option<PathBuf> {
    static MADE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    MADE.get_or_init(make_kfp_python).clone()
}

fn make_kfp_python() -> Option<PathBuf> {
    const KFP: &str = "kfp==2.17.3";
    let venv = std::env::temp_dir().join("corral-test-kfp-2.17.3");
    let python = venv.join("bin/python");
    let works = |p: &Path| {
        Command::new(p)
            .args(["-c", "import kfp"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works(&python) {
        return Some(python);
    }
    // One left half-made by an interrupted run is made again.
    let made = Command::new("uv")
        .args(["venv", "-q", "--clear"])
        .arg(&venv)
        .status();
    let installed = made.is_ok_and(|s| s.success())
        && Command::new("uv")
            .args(["pip", "install", "-q", "--python"])
            .arg(&python)
            .arg(KFP)
            .status()
            .is_ok_and(|s| s.success());
    (installed && works(&python)).then_some(python)
}
