//! The cluster under test as the suite uses it: etcd + kube-apiserver (+ the garbage
//! collector) started by [`corral_kube::testenv`] (the one way to start it, shared with
//! `corral bench operator`), the prerequisite checks (skip outside CI, fail under it) and the
//! error-path fixtures.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::{Value, json};

pub(crate) use corral_kube::testenv::{
    Env, OPERATOR_TOKEN, OPERATOR_USER, REPLICA_TOKENS, assets, kubeconfig, raw,
};

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the suite must run: under `CI=true` or `CORRAL_REQUIRE_ENVTEST=1`.
pub(crate) fn required() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
        || std::env::var("CORRAL_REQUIRE_ENVTEST").as_deref() == Ok("1")
}

/// Whether a prerequisite (`what`) is there. Under `CI=true` (or `CORRAL_REQUIRE_ENVTEST=1`)
/// a missing one fails the test, so CI cannot pass by skipping; elsewhere the test prints
/// why it is skipped (as `common::prerequisite` of the other crates' tests).
#[track_caller]
pub(crate) fn prerequisite(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    assert!(
        !required(),
        "{what}: required under CI=true or CORRAL_REQUIRE_ENVTEST=1 (tests do not skip in CI)"
    );
    eprintln!("envtest SKIPPED: {what} (outside CI; with CI=true this fails)");
    false
}

/// A port below the ephemeral range ([`corral_kube::testenv::free_port`]).
pub(crate) fn free_port() -> u16 {
    corral_kube::testenv::free_port().expect("a free port")
}

pub(crate) fn spawn(cmd: &mut Command, log: &Path) -> Child {
    corral_kube::testenv::spawn(cmd, log).expect("start")
}

/// Checks that the committed answer on an error path (tests/fixtures/real-api/NAME.json)
/// still says what the server says (code, kind, status, reason; all of a body that is no
/// Status); a missing one fails. With `UPDATE_FIXTURES=1` it captures the answer instead.
pub(crate) fn fixture(name: &str, code: u16, body: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real-api")
        .join(format!("{name}.json"));
    if std::env::var("UPDATE_FIXTURES").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("fixtures dir");
        let saved = json!({"code": code, "body": body});
        let text = serde_json::to_string_pretty(&saved).expect("json") + "\n";
        std::fs::write(&path, text).expect("write fixture");
        eprintln!("envtest: wrote {}", path.display());
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {}: {e}; run with UPDATE_FIXTURES=1 to capture it from the server, \
             and commit it (the server said {code}: {body})",
            path.display()
        )
    });
    let saved: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    assert_eq!(saved["code"], json!(code), "{name}");
    if !body.is_object() || !saved["body"].is_object() {
        // Not a Status (e.g. the text `404 page not found`): all of it.
        assert_eq!(&saved["body"], body, "{name}: body");
        return;
    }
    for k in ["kind", "status", "reason", "code"] {
        assert_eq!(saved["body"][k], body[k], "{name}: {k}");
    }
}

/// The `corral` CLI (`bin`) pointed at the operator's read API on `port` with `token`, as a
/// person runs it: whether it succeeded, and what it printed (stdout, then stderr).
pub(crate) fn corral_cli(
    bin: &Path,
    env: &Env,
    port: u16,
    token: &str,
    args: &[&str],
) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .env("CORRAL_SERVER", format!("http://127.0.0.1:{port}"))
        .env("CORRAL_TOKEN", token)
        .env("HOME", &env.dir)
        .output()
        .expect("run corral");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}
