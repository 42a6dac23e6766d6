//! The custom test harness shared by the process tests: the test binary is also the replica
//! shim, so the executor runs `<this binary> shim <replica dir>` for every replica.

use corral_local::executor::ShimCommand;

// Not every test binary that includes this module drives a cluster.
#[allow(dead_code)]
pub mod cluster;

/// Runs as the shim when the first argument is `shim`, else runs `tests` (libtest-mimic:
/// the usual filters and flags work; a panicking test fails).
pub fn main(tests: Vec<(&'static str, fn())>) -> std::process::ExitCode {
    let rest: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if rest.first().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(rest.into_iter().skip(1)));
    }
    let args = libtest_mimic::Arguments::from_args();
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            libtest_mimic::Trial::test(name, move || {
                test();
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// This test binary as the shim.
pub fn shim() -> ShimCommand {
    ShimCommand {
        program: std::env::current_exe().expect("the test binary"),
        args_prefix: vec!["shim".into()],
    }
}

/// Whether a test's prerequisite (`what`: cgroups, python3) is there. Under `CI=true` a
/// missing one fails the test, so CI cannot pass by skipping; elsewhere the test prints why
/// it is skipped and returns early.
#[allow(dead_code)] // not every test binary that includes this module needs it
pub fn prerequisite(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what}: required under CI=true (tests do not skip in CI)"
    );
    eprintln!("SKIPPED: {what} (outside CI; with CI=true this fails)");
    false
}

/// A temporary directory tenants' replicas may pass through (`0711`): as root, each
/// namespace's replicas run as a uid of their own and must reach their directories below
/// it (a plain temporary directory is `0700`, and the cluster refuses to open below one).
/// As root it is made under /var/tmp, not /tmp: a data directory under /tmp keeps replicas
/// on the machine's /tmp (no private /tmp per job), which the tenant tests assert.
#[allow(dead_code)]
pub fn reachable_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let var_tmp = std::path::Path::new("/var/tmp");
    let dir = if is_root() && var_tmp.is_dir() {
        tempfile::Builder::new()
            .prefix("corral-test")
            .tempdir_in(var_tmp)
            .expect("tempdir in /var/tmp")
    } else {
        tempfile::tempdir().expect("tempdir")
    };
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .expect("chmod the tempdir");
    dir
}

/// Whether this test runs as root (replicas then run under their namespaces' uids).
#[allow(dead_code)]
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether `python3` runs.
#[allow(dead_code)]
pub fn python3_available() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success())
}
