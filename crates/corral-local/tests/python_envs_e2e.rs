//! Python environments on the embedded cluster, end to end with uv and PyPI: two jobs that
//! need conflicting versions of one package both succeed, each with its own; a set asked
//! for by two jobs at once is built once; a set that does not resolve fails its job with
//! uv's message and no retry.
//!
//! Needs uv (`pip install uv`; .ci/run installs it), python3 and PyPI.

mod common;

use std::time::Duration;

use common::cluster::{Harness, Waits, log_of, state};
use corral_local::cluster::JobState;

const WAITS: Waits = Waits {
    deadline: Duration::from_secs(180),
    pause: Duration::from_millis(50),
};

fn uv_present() -> bool {
    let uv = std::process::Command::new("uv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    common::prerequisite(uv, "uv is not installed (pip install uv)")
        && common::prerequisite(common::python3_available(), "python3 is not installed")
}

fn py_job(name: &str, policy: &str, requirement: &str) -> String {
    py_job_for(name, policy, requirement, "")
}

/// `version` is a `version: ...` line of `template.python`, or nothing.
fn py_job_for(name: &str, policy: &str, requirement: &str, version: &str) -> String {
    format!(
        r#"apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  runPolicy: {{backoffLimit: 3}}
  replicas:
    worker:
      count: 1
      restartPolicy: {policy}
      template:
        command: [python, -c, 'import six, sys; print("six", six.__version__, sys.prefix)']
        python:
          requirements: ["{requirement}"]
          {version}
"#
    )
}

fn conflicting_versions_run_side_by_side_and_one_set_is_built_once() {
    if !uv_present() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32400, "");
    let text = [
        py_job("old", "Never", "six==1.15.0"),
        // A version request: uv matches it among the interpreters the tenant may run.
        py_job_for("new", "Never", "six==1.16.0", "version: \"3\""),
        py_job("old-too", "Never", "six==1.15.0"),
    ]
    .join("---\n");
    c.submit(&text, "default", h.now).expect("submit");
    h.until(&mut c, "all succeed", |c| {
        ["old", "new", "old-too"]
            .iter()
            .all(|j| state(c, j) == Some(JobState::Succeeded))
    });
    let old = log_of(&c, "old", "old-worker-0");
    let new = log_of(&c, "new", "new-worker-0");
    let old_too = log_of(&c, "old-too", "old-too-worker-0");
    assert!(old.contains("six 1.15.0"), "{old}");
    assert!(old_too.contains("six 1.15.0"), "{old_too}");
    assert!(new.contains("six 1.16.0"), "{new}");
    let builds = [&old, &old_too]
        .iter()
        .filter(|l| l.contains("corral: building python environment"))
        .count();
    assert_eq!(builds, 1, "one build for one set:\n{old}\n---\n{old_too}");
    assert!(
        old.contains("(cached)") || old_too.contains("(cached)"),
        "the other reused it"
    );
    // As root the namespace's environments are in a directory of its own (`t<uid>`).
    let python = h.config.data_dir.join("python");
    let tenant_dirs: Vec<_> = std::fs::read_dir(&python)
        .expect("python dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('t'))
        })
        .collect();
    let envs_dir = if common::is_root() {
        assert_eq!(
            tenant_dirs.len(),
            1,
            "one namespace, one directory: {tenant_dirs:?}"
        );
        tenant_dirs[0].clone()
    } else {
        assert!(
            tenant_dirs.is_empty(),
            "no tenant directories without root: {tenant_dirs:?}"
        );
        python
    };
    let envs = std::fs::read_dir(&envs_dir)
        .expect("environments dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("corral-spec.txt").is_file())
        .count();
    assert_eq!(envs, 2, "one environment per distinct set");
    let d = c
        .describe("default", "new")
        .expect("describe")
        .expect("job");
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == "Started" && e.message.contains("python environment")),
        "describe names the environment: {:#?}",
        d.events
    );
}

fn a_set_that_does_not_resolve_fails_the_job_with_uvs_message_and_no_retry() {
    if !uv_present() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32450, "");
    c.submit(
        &py_job("broken", "OnFailure", "six==0.0.1"),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "failed", |c| {
        state(c, "broken") == Some(JobState::Failed)
    });
    let d = c
        .describe("default", "broken")
        .expect("describe")
        .expect("job");
    let r = &d.replicas[0];
    assert_eq!(r.reason.as_deref(), Some("SetupFailed"), "{r:#?}");
    assert_eq!(r.restarts, 0, "no retry: {r:#?}");
    let message = r.message.clone().unwrap_or_default();
    assert!(
        message.contains("six==0.0.1"),
        "uv's own message: {message}"
    );
    assert!(log_of(&c, "broken", "broken-worker-0").contains("No solution found"));
}

fn a_requirements_file_in_the_code_snapshot_makes_the_environment() {
    if !uv_present() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32550, "");
    let stage = |c: &corral_local::Cluster, h: &Harness, pin: &str| {
        let src = h.path(&format!("src-{pin}"));
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::write(
            src.join("requirements.txt"),
            format!("# pinned\nsix=={pin}\n"),
        )
        .expect("write");
        let tar = h.path(&format!("code-{pin}.tar.gz"));
        let made = std::process::Command::new("tar")
            .arg("-czf")
            .arg(&tar)
            .arg("-C")
            .arg(&src)
            .arg("requirements.txt")
            .status()
            .expect("tar");
        assert!(made.success());
        let staged = c.code_store().incoming_path(".d").expect("staging");
        corral_local::code::unpack(std::fs::File::open(&tar).expect("open"), &staged, 1 << 20)
            .expect("unpack");
        staged
    };
    let job = |name: &str| {
        format!(
            r#"apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      template:
        command: [python, -c, 'import six; print("six", six.__version__)']
        python: {{requirementsFile: requirements.txt}}
"#
        )
    };
    // Without a snapshot the file is nowhere: refused at submit.
    let e = c
        .submit(&job("nofile"), "default", h.now)
        .expect_err("refused");
    assert!(format!("{e}").contains("python.requirementsFile"), "{e}");
    for (name, pin) in [("first", "1.15.0"), ("second", "1.16.0")] {
        let staged = stage(&c, &h, pin);
        let checked =
            corral_local::Cluster::check_submission(&c.submit_context(), &job(name), "default")
                .expect("valid")
                .with_code(
                    "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                );
        c.submit_checked_with_code(checked, Some(&staged), h.now)
            .expect("submit");
    }
    h.until(&mut c, "both succeed", |c| {
        state(c, "first") == Some(JobState::Succeeded)
            && state(c, "second") == Some(JobState::Succeeded)
    });
    // The same file name, another content: another environment.
    let first = log_of(&c, "first", "first-worker-0");
    let second = log_of(&c, "second", "second-worker-0");
    assert!(first.contains("six 1.15.0"), "{first}");
    assert!(second.contains("six 1.16.0"), "{second}");
}

fn main() -> std::process::ExitCode {
    common::main(vec![
        (
            "a_requirements_file_in_the_code_snapshot_makes_the_environment",
            a_requirements_file_in_the_code_snapshot_makes_the_environment,
        ),
        (
            "conflicting_versions_run_side_by_side_and_one_set_is_built_once",
            conflicting_versions_run_side_by_side_and_one_set_is_built_once,
        ),
        (
            "a_set_that_does_not_resolve_fails_the_job_with_uvs_message_and_no_retry",
            a_set_that_does_not_resolve_fails_the_job_with_uvs_message_and_no_retry,
        ),
    ])
}
