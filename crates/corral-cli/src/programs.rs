//! The programs installed beside `corral` that some of its verbs run in their own place:
//! `corral operator ARGS` runs `corral-operator`, `corral up ARGS` runs `corral-server`. Each
//! is a program of its own so that a long-running process maps only its own code: the
//! embedded server does not carry the operator's Kubernetes client nor the CLI's simulator,
//! benches and client, and its resident memory is mostly the pages of its program it touches.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// The operator's program.
pub const OPERATOR: &str = "corral-operator";
/// The embedded cluster's server.
pub const SERVER: &str = "corral-server";

/// `name` beside the running `corral` (how cargo builds and packages install them).
fn beside(name: &str) -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|p| p.is_file())
}

/// Where `corral-operator` is: beside the running `corral`, else on PATH.
pub fn find_operator() -> Option<PathBuf> {
    beside(OPERATOR).or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(OPERATOR))
                .find(|p| p.is_file())
        })
    })
}

/// Replaces this process with `corral-operator ARGS` (same pid, so a supervisor or a test
/// that signals `corral operator` signals the operator). Returns only on failure.
pub fn exec_operator(args: Vec<OsString>) -> ExitCode {
    let Some(program) = find_operator() else {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.display().to_string()))
            .unwrap_or_else(|| "the directory of corral".into());
        eprintln!(
            "error: `corral operator` runs the {OPERATOR} program, found neither in {beside} nor on PATH; \
             build it with `cargo build --release -p corral` (it builds both) or install it beside corral"
        );
        return ExitCode::FAILURE;
    };
    exec(&program, args)
}

/// How much older than `corral` a `corral-server` beside it may be and still count as the
/// same build: cargo links a package's programs one after the other.
const SAME_BUILD: Duration = Duration::from_secs(60);

/// `corral-server` beside the running `corral` when it comes from the same build; `None`
/// (run the server in this process) when there is none, or when it is older than `corral`
/// (`cargo run` builds only `corral`: its server would be stale code), which is said.
pub fn find_server() -> Option<PathBuf> {
    let server = beside(SERVER)?;
    let exe = std::env::current_exe().ok()?;
    if older_than(&server, &exe, SAME_BUILD) {
        eprintln!(
            "note: {} is older than {} (`cargo run` builds only corral); the server runs in \
             this process instead (`cargo build -p corral --bins` builds both)",
            server.display(),
            exe.display()
        );
        return None;
    }
    Some(server)
}

/// Whether `a` was modified more than `slack` before `b` (unknown times: no).
fn older_than(a: &Path, b: &Path, slack: Duration) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(a), modified(b)) {
        (Some(a), Some(b)) => b.duration_since(a).is_ok_and(|d| d > slack),
        _ => false,
    }
}

/// Replaces this process with `program ARGS`; returns only on failure, saying why.
pub fn exec(program: &Path, args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let err = Command::new(program).args(args).exec();
    eprintln!("error: cannot run {}: {err}", program.display());
    ExitCode::FAILURE
}

/// At most two malloc arenas for a long-running program's threads (the server, the
/// operator). glibc gives threads that allocate
/// at the same time arenas of their own (up to 8 per core) and gives little of their freed
/// memory back: after 20,000 jobs had run, `corral bench api` measured the server at
/// 50-65 MB with the default and 44-48 MB with two, at the same submission rate.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets one of the allocator's tunables; called before the server's threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_much_older_than_corral_is_another_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        std::fs::write(&old, b"").expect("write");
        std::fs::write(&new, b"").expect("write");
        let now = std::time::SystemTime::now();
        let set = |p: &Path, t| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .and_then(|f| f.set_modified(t))
                .expect("set mtime")
        };
        set(&new, now);
        set(&old, now - Duration::from_secs(600));
        assert!(older_than(&old, &new, SAME_BUILD));
        assert!(!older_than(&new, &old, SAME_BUILD), "newer is never stale");
        set(&old, now - Duration::from_secs(5));
        assert!(
            !older_than(&old, &new, SAME_BUILD),
            "linked in the same build"
        );
    }
}
