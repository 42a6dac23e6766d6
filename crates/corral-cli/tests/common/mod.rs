//! What the CLI's test binaries share.

pub mod bad_manifests;
pub mod cluster;

/// Whether a test's prerequisite (`what`, e.g. python3) is there. Under `CI=true` a missing
/// one fails the test, so CI cannot pass by skipping; elsewhere the test prints why it is
/// skipped and returns early.
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

/// Whether `python3` runs.
pub fn python3_available() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success())
}
