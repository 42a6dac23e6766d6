//! The wall below the API, as root (issue 33): a replica of namespace team-a runs as a uid
//! of its own and tries what a curious tenant would: the server's environment
//! (`/proc/<server>/environ`), team-b's log and run directory, the configuration with
//! every token, the store, what team-b wrote in `/tmp` and `/dev/shm` (by name, and where
//! they really are), and a signal to team-b's replica. Every attempt must be denied; what
//! is its own (its directory, its HOME, its job's `/tmp` and `/dev/shm`) stays open to it,
//! and team-b's two replicas share their `/dev/shm`. The test process is the server here: it
//! holds the cluster and its environment carries a secret. Its data directory is outside
//! `/tmp` (under the target directory), as on a server: one under `/tmp` would keep the
//! replicas on the machine's `/tmp`.
//!
//! Needs root: elsewhere it is skipped with a word, and under `CI=true` it fails.

mod common;

use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;

use common::cluster::{Harness, Waits};
use corral_local::cluster::JobState;

const SECRET: &str = "CORRAL_TEST_SERVER_SECRET";

fn waits() -> Waits {
    Waits {
        deadline: std::time::Duration::from_secs(60),
        pause: std::time::Duration::from_millis(50),
    }
}

fn job(name: &str, count: u32, script: &str, env: &[(&str, String)]) -> String {
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{{name: {k}, value: '{v}'}}"))
        .collect();
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: {count}
      restartPolicy: Never
      template:
        command: [/bin/sh, -c, '{script}']
        env: [{}]
",
        env.join(", ")
    )
}

fn state_in(c: &corral_local::Cluster, ns: &str, name: &str) -> Option<JobState> {
    c.list(Some(ns))
        .expect("list")
        .into_iter()
        .find(|j| j.name == name)
        .map(|j| j.state)
}

fn a_team_a_replica_cannot_reach_the_server_or_team_b() {
    if !common::prerequisite(common::is_root(), "root (replicas run under tenant uids)") {
        return;
    }
    let (mut h, mut c) = Harness::new(waits(), 32300, "");
    assert!(c.tenancy().isolated(), "{}", c.tenancy().describe());
    // The configuration as `corral up` requires it: the server's alone.
    let config = h.path("corral.yaml");
    std::fs::write(
        &config,
        "kind: CorralConfig\ntokens: [{token: t0p-secret}]\n",
    )
    .expect("write");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    // team-b: two replicas that write in /tmp and /dev/shm, see each other's shared
    // memory, say their pid and wait.
    let b = job(
        "holder",
        2,
        "echo b-secret > /tmp/b-tmp-$$; echo b-secret > /dev/shm/b-shm-$$; \
         until [ $(ls /dev/shm | grep -c b-shm-) -ge 2 ]; do sleep 0.1; done; \
         echo SHM-SHARED; echo PID=$$; exec sleep 300",
        &[],
    );
    c.submit(&b, "team-b", h.now).expect("submit team-b");
    let mut b_pid = None;
    let b_log = |c: &corral_local::Cluster, replica: &str| {
        c.log_path("team-b", "holder", replica)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    h.until(&mut c, "team-b's replicas to share /dev/shm", |c| {
        b_pid = b_log(c, "worker-0")
            .lines()
            .find_map(|l| l.strip_prefix("PID="))
            .map(|p| p.trim().to_string());
        b_pid.is_some() && b_log(c, "worker-1").contains("SHM-SHARED")
    });
    let b_pid = b_pid.expect("team-b's pid");
    let b_log = c
        .log_path("team-b", "holder", "worker-0")
        .expect("team-b's log");
    let b_dir = b_log
        .parent()
        .expect("team-b's run directory")
        .to_path_buf();
    let data = h.config.data_dir.clone();
    // Where team-b's /tmp and /dev/shm really are, on the machine.
    let b_scratch = job_dir(&data.join("replicas").join(".scratch"), "team-b%2Fholder.")
        .expect("team-b's scratch directory");
    let b_shm = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("corral-"))
        .find_map(|e| job_dir(&e.path(), "team-b%2Fholder."))
        .expect("team-b's shared memory directory");
    assert!(
        std::fs::read_dir(&b_shm).expect("b's shm").count() == 2,
        "team-b's shared memory is not where its replicas wrote"
    );

    // team-a: every attempt, then what is its own.
    let script = "check() { what=$1; shift; if \"$@\" >/dev/null 2>&1; then echo ALLOWED:$what; \
                  else echo DENIED:$what; fi; }; \
                  check environ cat /proc/$SERVER_PID/environ; \
                  check b-log cat $B_LOG; \
                  check b-dir ls $B_DIR; \
                  check config cat $CONFIG; \
                  check store cat $STORE; \
                  check data-dir ls $DATA; \
                  check signal kill -0 $B_PID; \
                  check kill-b kill -TERM $B_PID; \
                  check b-tmp sh -c \"cat /tmp/b-tmp-*\"; \
                  check b-shm sh -c \"cat /dev/shm/b-shm-*\"; \
                  check b-scratch ls $B_SCRATCH; \
                  check b-shm-dir ls $B_SHM; \
                  check own-dir ls $CORRAL_OWN_DIR; \
                  check home touch $HOME/mine; \
                  check own-tmp touch /tmp/a-mine; \
                  check tmp-is-tmpdir test -e $TMPDIR/a-mine; \
                  check own-shm touch /dev/shm/a-mine; \
                  echo USER=$USER LOGNAME=$LOGNAME; \
                  echo UID=$(id -u) GID=$(id -g) GROUPS=$(id -G)";
    let a = job(
        "curious",
        1,
        script,
        &[
            ("SERVER_PID", std::process::id().to_string()),
            ("B_LOG", b_log.display().to_string()),
            ("B_DIR", b_dir.display().to_string()),
            ("CONFIG", config.display().to_string()),
            ("STORE", data.join("corral.db").display().to_string()),
            ("DATA", data.display().to_string()),
            ("B_PID", b_pid.clone()),
            ("B_SCRATCH", b_scratch.display().to_string()),
            ("B_SHM", b_shm.display().to_string()),
        ],
    )
    .replace("$CORRAL_OWN_DIR", "$(dirname $HOME)");
    c.submit(&a, "team-a", h.now).expect("submit team-a");
    h.until(&mut c, "team-a's replica to finish", |c| {
        matches!(
            state_in(c, "team-a", "curious"),
            Some(JobState::Succeeded | JobState::Failed)
        )
    });
    let a_log_path = c
        .log_path("team-a", "curious", "worker-0")
        .expect("team-a's log");
    let out = std::fs::read_to_string(&a_log_path).expect("team-a's log");
    eprintln!("team-a's replica said:\n{out}");
    for what in [
        "environ",
        "b-log",
        "b-dir",
        "config",
        "store",
        "data-dir",
        "signal",
        "kill-b",
        "b-tmp",
        "b-shm",
        "b-scratch",
        "b-shm-dir",
    ] {
        assert!(
            out.contains(&format!("DENIED:{what}")),
            "team-a's replica was not denied {what}:\n{out}"
        );
    }
    for what in ["own-dir", "home", "own-tmp", "tmp-is-tmpdir", "own-shm"] {
        assert!(
            out.contains(&format!("ALLOWED:{what}")),
            "team-a's replica could not use its own {what}:\n{out}"
        );
    }
    // Who it is, for programs that ask (its uid has no account): its namespace's name.
    assert!(
        out.contains("USER=corral-team-a LOGNAME=corral-team-a"),
        "team-a's replica has no USER/LOGNAME of its own:\n{out}"
    );
    // Its identity: neither root's nor team-b's, no supplementary groups.
    let uid_line = out
        .lines()
        .find(|l| l.starts_with("UID="))
        .expect("a UID line");
    let a_uid: u32 = uid_line
        .split_whitespace()
        .next()
        .and_then(|f| f.strip_prefix("UID="))
        .and_then(|v| v.parse().ok())
        .expect("a uid");
    assert_ne!(a_uid, 0, "{uid_line}");
    assert!(uid_line.ends_with(&format!("GROUPS={a_uid}")), "{uid_line}");
    let b_meta = std::fs::metadata(&b_dir).expect("team-b's dir");
    assert_ne!(b_meta.gid(), a_uid, "team-a and team-b share a group");
    assert_eq!(b_meta.uid(), 0, "the run directory is the server's");
    assert_eq!(b_meta.mode() & 0o7777, 0o750, "team-b's run directory");
    assert_eq!(
        std::fs::metadata(&data).expect("data").mode() & 0o7777,
        0o711,
        "the data directory"
    );
    assert_eq!(
        std::fs::metadata(data.join("corral.db"))
            .expect("store")
            .mode()
            & 0o777,
        0o600,
        "the store"
    );
    // team-b's replica is untouched by the signal.
    assert_eq!(state_in(&c, "team-b", "holder"), Some(JobState::Running));
    c.delete("team-b", "holder", h.now).expect("delete");
    h.until(&mut c, "team-b's replica to stop", |c| {
        state_in(c, "team-b", "holder").is_none()
    });
    // Its scratch went with it.
    assert!(!b_scratch.exists(), "{} is left", b_scratch.display());
    assert!(!b_shm.exists(), "{} is left", b_shm.display());
}

/// A program that exists but that the namespace's uid may not reach backs off with the
/// directory in its way and the command that opens it, not a bare "permission denied".
fn a_program_out_of_the_tenants_reach_says_what_is_in_the_way() {
    if !common::prerequisite(common::is_root(), "root (replicas run under tenant uids)") {
        return;
    }
    let (mut h, mut c) = Harness::new(waits(), 32350, "");
    // root's own tools: a directory only root may pass.
    let closed = h.path("root-only");
    std::fs::create_dir_all(&closed).expect("mkdir");
    let program = closed.join("train.sh");
    std::fs::write(&program, "#!/bin/sh\necho trained\n").expect("write");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let text = job("unreachable", 1, "x", &[])
        .replace("[/bin/sh, -c, 'x']", &format!("[{}]", program.display()));
    c.submit(&text, "team-a", h.now).expect("submit");
    h.until(&mut c, "the job to back off", |c| {
        state_in(c, "team-a", "unreachable") == Some(JobState::BackOff)
    });
    let d = c
        .describe("team-a", "unreachable")
        .expect("describe")
        .expect("job");
    let queued = d
        .job
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == corral_api::training_job::ConditionType::Queued)
        .expect("Queued");
    let fix = format!("chmod o+x {}", closed.display());
    assert!(
        queued.message.contains("its namespace's user") && queued.message.contains(&fix),
        "{}",
        queued.message
    );
}

/// The directory in `parent` whose name starts with `prefix`, if any.
fn job_dir(parent: &std::path::Path, prefix: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir(parent)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
}

fn main() -> std::process::ExitCode {
    // The shim runs as this binary too; only the test process (the server) has the secret.
    if std::env::args().nth(1).as_deref() != Some("shim") {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var(SECRET, "hunter2") };
        // The data directory outside /tmp, as on a server (see the module's comment).
        // SAFETY: as above.
        unsafe { std::env::set_var("TMPDIR", env!("CARGO_TARGET_TMPDIR")) };
    }
    common::main(vec![
        (
            "a_team_a_replica_cannot_reach_the_server_or_team_b",
            a_team_a_replica_cannot_reach_the_server_or_team_b,
        ),
        (
            "a_program_out_of_the_tenants_reach_says_what_is_in_the_way",
            a_program_out_of_the_tenants_reach_says_what_is_in_the_way,
        ),
    ])
}
