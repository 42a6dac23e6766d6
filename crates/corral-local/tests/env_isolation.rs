//! Tenants are walled off from the server's environment: a replica sees the launch
//! contract's variables, its job's `env`, PATH, LANG, HOME and TMPDIR (its own; TMP and TEMP
//! the same, its job's scratch; as root also
//! USER and LOGNAME, its namespace's name), and what `passEnv` allows; nothing else of the
//! server's environment, such as a token or a key.
//! The variables are set at the start of `main`, before any thread exists.

mod common;

use std::time::{Duration, Instant};

use corral_local::cluster::JobState;
use corral_local::config::ClusterFileConfig;
use corral_local::{Cluster, ClusterConfig};
use jiff::Timestamp;

const SECRET: &str = "CORRAL_TEST_SERVER_SECRET";
const ALLOWED: &str = "CORRAL_TEST_ALLOWED";

fn a_replica_sees_no_server_variable_unless_allowed() {
    let dir = common::reachable_tempdir();
    let text =
        format!("kind: CorralConfig\nports: {{min: 32100, max: 32149}}\npassEnv: [{ALLOWED}]\n");
    let mut config = ClusterConfig::new(dir.path().join("data"));
    config.file = ClusterFileConfig::parse(&text).expect("config");
    config.shim = Some(common::shim());
    let mut now = Timestamp::from_second(1_800_000_000).expect("time");
    let (mut c, _) = Cluster::open(config, now).expect("open");
    let job = r#"apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: printenv}
spec:
  framework: pytorch
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      template:
        command: [/bin/sh, -c, 'env; test -d "$TMPDIR" && echo tmpdir-exists']
        env: [{name: OWN, value: mine}]
"#;
    c.submit(job, "default", now).expect("submit");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        now = now
            .checked_add(jiff::SignedDuration::from_secs(1))
            .expect("time");
        c.tick(now).expect("tick");
        let state = c.list(None).expect("list")[0].state;
        if state == JobState::Succeeded {
            break;
        }
        assert!(state != JobState::Failed, "the job failed");
        assert!(Instant::now() < deadline, "the job did not finish");
        std::thread::sleep(Duration::from_millis(25));
    }
    let log = c
        .log_path("default", "printenv", "worker-0")
        .expect("a log");
    let out = std::fs::read_to_string(log).expect("read log");
    let vars: Vec<&str> = out
        .lines()
        .filter(|l| l.contains('='))
        .filter_map(|l| l.split('=').next())
        .collect();
    assert!(!out.contains(SECRET), "the server's secret leaked:\n{out}");
    assert!(out.contains(&format!("{ALLOWED}=visible")), "{out}");
    assert!(out.contains("OWN=mine"), "{out}");
    assert!(
        out.contains("MASTER_ADDR=") && out.contains("RANK=0"),
        "{out}"
    );
    assert!(out.contains("tmpdir-exists"), "{out}");
    for v in ["PATH", "HOME", "LANG", "TMPDIR", "TMP", "TEMP"] {
        assert!(vars.contains(&v), "{v} missing:\n{out}");
    }
    // Programs read one or the other: all three name the job's scratch.
    let value = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
    };
    assert_eq!(value("TMP"), value("TMPDIR"), "{out}");
    assert_eq!(value("TEMP"), value("TMPDIR"), "{out}");
    // A tenant (the server runs as root) is told who it is, its namespace's name: never the
    // server's own USER.
    for line in out.lines() {
        if let Some(v) = line
            .strip_prefix("USER=")
            .or_else(|| line.strip_prefix("LOGNAME="))
        {
            assert_eq!(v, "corral-default", "{out}");
        }
    }
    // Nothing but the base, the contract, the job's own and what was allowed.
    let allowed_prefixes = [
        "PATH",
        "USER",
        "LOGNAME",
        "LANG",
        "HOME",
        "TMPDIR",
        "TMP",
        "TEMP",
        "OWN",
        ALLOWED,
        "MASTER_",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_",
        "GROUP_",
        "ROLE_",
        "PET_",
        "CORRAL_",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "PWD",
        "SHLVL",
        "NPROC",
        "NODE_RANK",
        "TORCHELASTIC",
        "PYTHONUNBUFFERED",
    ];
    for v in vars {
        assert!(
            allowed_prefixes.iter().any(|p| v.starts_with(p)) || v.is_empty(),
            "unexpected variable {v} in the replica:\n{out}"
        );
    }
}

fn main() -> std::process::ExitCode {
    // The shim runs as this binary too; only the test process sets the variables.
    if std::env::args().nth(1).as_deref() != Some("shim") {
        // SAFETY: no other thread exists yet.
        unsafe {
            std::env::set_var(SECRET, "hunter2");
            std::env::set_var(ALLOWED, "visible");
        }
    }
    common::main(vec![(
        "a_replica_sees_no_server_variable_unless_allowed",
        a_replica_sees_no_server_variable_unless_allowed,
    )])
}
