//! ARCHITECTURE.md's invariants that a test can check by reading the source:
//! - a shell decides nothing about a job's state: it does not read a job's conditions
//!   (`conditions::is_true`, `ConditionType::...`); the core's predicates and the plane's
//!   answers say what a job is doing. The one exception is the Kubeflow status format,
//!   which restates Corral's conditions in Kubeflow's words;
//! - corral-core does no I/O and reads no clock;
//! - no source file, tests included, grows past 1,000 lines.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Lines of code (comments left out) of every `.rs` file under the crates' `dir`.
fn code_lines(crates: &[&str], dir: &str) -> Vec<(String, usize, String)> {
    let mut files = Vec::new();
    for c in crates {
        rust_files(&repo().join("crates").join(c).join(dir), &mut files);
    }
    assert!(!files.is_empty(), "no sources under {crates:?}/{dir}");
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("source");
        let name = f.strip_prefix(repo()).unwrap_or(&f).display().to_string();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") {
                out.push((name.clone(), i + 1, line.to_string()));
            }
        }
    }
    out
}

#[test]
fn shells_do_not_read_a_jobs_conditions() {
    let shells = [
        "corral-local",
        "corral-kube",
        "corral-sim",
        "corral-server",
        "corral-cli",
    ];
    let offending: Vec<String> = code_lines(&shells, "src")
        .into_iter()
        .filter(|(file, _, _)| !file.ends_with("corral-kube/src/kubeflow/status.rs"))
        .filter(|(_, _, line)| {
            line.contains("conditions::is_true") || line.contains("ConditionType::")
        })
        .map(|(file, n, line)| format!("{file}:{n}: {}", line.trim()))
        .collect();
    assert!(
        offending.is_empty(),
        "a shell reads a job's conditions; ask the core (lifecycle::job_state, is_preempting, \
         ControlPlane::is_pending, waiting_reason) instead:\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_core_does_no_io_and_reads_no_clock() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::process",
        "std::thread",
        "SystemTime",
        "Instant::now",
        "Timestamp::now",
        "std::env::var",
    ];
    let offending: Vec<String> = code_lines(&["corral-core"], "src")
        .into_iter()
        .filter(|(_, _, line)| forbidden.iter().any(|f| line.contains(f)))
        .map(|(file, n, line)| format!("{file}:{n}: {}", line.trim()))
        .collect();
    assert!(
        offending.is_empty(),
        "I/O or a clock in corral-core:\n{}",
        offending.join("\n")
    );
}

#[test]
fn no_source_file_grows_past_1000_lines() {
    let crates = [
        "corral-api",
        "corral-core",
        "corral-local",
        "corral-server",
        "corral-kube",
        "corral-sim",
        "corral-cli",
    ];
    let mut files = Vec::new();
    for c in crates {
        for dir in ["src", "tests", "benches"] {
            rust_files(&repo().join("crates").join(c).join(dir), &mut files);
        }
    }
    assert!(files.len() > 50, "the sources are found: {}", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            (n > 1000).then(|| {
                format!(
                    "{} ({n} lines)",
                    f.strip_prefix(repo()).unwrap_or(f).display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by what they hold:\n{}",
        long.join("\n")
    );
}
