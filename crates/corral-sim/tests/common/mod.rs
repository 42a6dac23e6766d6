//! What the trace tests share: finding the real traces in ../shared/traces (beside the
//! repository).

use std::path::PathBuf;

/// `rel` under ../shared/traces, if it is there. Under `CI=true` a missing one fails the
/// test, so CI cannot pass by skipping; elsewhere the test prints that it is skipped and
/// returns early on `None`.
pub fn shared_trace(rel: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(rel);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} is missing: required under CI=true (tests do not skip in CI)",
        path.display()
    );
    eprintln!(
        "SKIPPED: {} is missing (outside CI; with CI=true this fails)",
        path.display()
    );
    None
}
