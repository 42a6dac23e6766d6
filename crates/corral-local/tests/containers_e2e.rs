//! Replicas with an `image` on the embedded cluster, end to end with podman: they run in a
//! container of the image (its files, entrypoint and working directory), with the launch
//! contract's env, host networking and a memory limit; a server killed and reopened
//! re-adopts a running container; `exec` enters a container replica; delete leaves no
//! container; without a runtime the
//! documented policy holds (a Warning event, or a refusal at submit). A pipeline that the
//! `kfp` package compiles (Kubeflow Pipelines v2 IR, two container components passing an
//! artifact) runs as it is, its steps in containers that see their artifacts.
//!
//! Needs podman (with runc) and busybox-static: `apt-get install -y podman runc
//! busybox-static` (.ci/run does). The test image is made locally (`podman import` of
//! busybox plus a marker file): there is no registry.

mod common;
#[path = "containers_e2e/kfp_python.rs"]
mod kfp_python;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::cluster::{Harness, Waits, log_of, state};
use corral_local::ClusterError;
use corral_local::cluster::JobState;

const WAITS: Waits = Waits {
    deadline: Duration::from_secs(90),
    pause: Duration::from_millis(50),
};
const IMAGE: &str = "localhost/corral-test-busybox:1";
const MARKER: &str = "only-in-the-image-7f3a";

/// Names of the containers this cluster's run directory labelled (running or not).
fn containers_of(run_dir: &Path) -> Vec<String> {
    let out = Command::new("podman")
        .args(["ps", "-a", "--format", "{{.Names}}", "--filter"])
        .arg(format!("label=corral.dev/run-dir={}", run_dir.display()))
        .output()
        .expect("podman ps");
    assert!(out.status.success(), "podman ps failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .filter(|l| !l.is_empty())
        .collect()
}

/// The test image, made once per run: busybox and a marker file, working directory /app,
/// CMD that prints the marker and the working directory. `None` without podman or busybox.
fn image() -> Option<&'static str> {
    static MADE: OnceLock<Result<(), String>> = OnceLock::new();
    let made = MADE.get_or_init(|| {
        let podman = Command::new("podman")
            .arg("info")
            .output()
            .map_err(|e| format!("podman: {e}"))?;
        if !podman.status.success() {
            return Err("podman info failed".into());
        }
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .ok_or("busybox not found")?;
        let root = tempfile::tempdir().map_err(|e| e.to_string())?;
        let r = root.path();
        // The image's `/` as images have it: a tenant's uid (as root, replicas run as their
        // namespace's) must pass it. A temporary directory is 0700.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(r.join("bin")).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(r.join("app")).map_err(|e| e.to_string())?;
        std::fs::copy(busybox, r.join("bin/busybox")).map_err(|e| e.to_string())?;
        for tool in [
            "sh", "cat", "echo", "sleep", "dd", "pwd", "env", "head", "id",
        ] {
            std::os::unix::fs::symlink("busybox", r.join("bin").join(tool))
                .map_err(|e| e.to_string())?;
        }
        std::fs::write(r.join("app/marker"), format!("{MARKER}\n")).map_err(|e| e.to_string())?;
        let tar = r.join("../rootfs.tar");
        let tarred = Command::new("tar")
            .arg("-C")
            .arg(r)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .map_err(|e| format!("tar: {e}"))?;
        if !tarred.success() {
            return Err("tar failed".into());
        }
        let imported = Command::new("podman")
            .args([
                "import",
                "--change",
                "WORKDIR /app",
                "--change",
                r#"CMD ["/bin/sh", "-c", "cat marker; echo cwd=$(pwd) rank=$RANK"]"#,
            ])
            .arg(&tar)
            .arg(IMAGE)
            .output()
            .map_err(|e| format!("podman import: {e}"))?;
        let _ = std::fs::remove_file(&tar);
        if !imported.status.success() {
            return Err(format!(
                "podman import: {}",
                String::from_utf8_lossy(&imported.stderr)
            ));
        }
        Ok(())
    });
    match made {
        Ok(()) => Some(IMAGE),
        Err(why) => {
            let what = format!(
                "podman and busybox-static ({why}; apt-get install -y podman runc busybox-static)"
            );
            common::prerequisite(false, &what);
            None
        }
    }
}

fn image_job(name: &str, extra: &str, template: &str) -> String {
    format!(
        r#"apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: pytorch
  runPolicy: {{backoffLimit: 0}}
  replicas:
    worker:
      count: 2
      restartPolicy: Never
{extra}      template:
        image: {IMAGE}
{template}"#
    )
}

fn a_training_job_runs_in_its_image_with_the_contract_env() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32100, "");
    // The first job runs the image's own CMD in its working directory (no command, no
    // args); the second overrides the entrypoint.
    c.submit(&image_job("plain", "", ""), "default", h.now)
        .expect("submit");
    let script = "cat /app/marker; echo rank=$RANK world=$WORLD_SIZE port=$MASTER_PORT addr=$MASTER_ADDR home=$HOME cwd=$(pwd) uid=$(id -u)";
    c.submit(
        &image_job(
            "override",
            "",
            &format!("        command: [/bin/sh, -c]\n        args: ['{script}']\n"),
        ),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "both succeed", |c| {
        state(c, "plain") == Some(JobState::Succeeded)
            && state(c, "override") == Some(JobState::Succeeded)
    });
    let plain = log_of(&c, "plain", "plain-worker-1");
    assert!(plain.contains(MARKER), "the image's file: {plain}");
    assert!(
        plain.contains("cwd=/app rank=1"),
        "image CMD and WORKDIR: {plain}"
    );
    let o = log_of(&c, "override", "override-worker-0");
    assert!(o.contains(MARKER), "{o}");
    assert!(o.contains("rank=0 world=2 port="), "contract env: {o}");
    assert!(o.contains("addr=127.0.0.1"), "host address: {o}");
    // Nothing of the host's environment: HOME is the runtime's default, not the replica
    // directory a host process gets: `/` for root in the container, the working directory
    // for a uid the image has no account of (as root, the namespace's, `--user`).
    assert!(o.contains("home=/ ") || o.contains("home=/app "), "{o}");
    // As root, the container runs as its namespace's uid, as a host replica would.
    assert_eq!(o.contains("uid=0"), !common::is_root(), "{o}");
    let d = c
        .describe("default", "override")
        .expect("describe")
        .expect("job");
    let port = d.replicas[0].port.expect("a port");
    assert!(o.contains(&format!("port={port}")), "{o}");
    assert!(
        containers_of(&h.run_dir()).is_empty(),
        "ended containers are removed"
    );
    // A relative working directory means nothing inside an image.
    let e = c
        .submit(
            &image_job("relative", "", "        workingDir: src\n"),
            "default",
            h.now,
        )
        .expect_err("refused");
    assert!(format!("{e:?}").contains("template.workingDir"), "{e:?}");
}

/// An image that cannot be pulled (podman's client exits 125 before the container ran) is
/// a start that cannot succeed, not a failure of the program: the job backs off out of its
/// queue with podman's own words instead of failing (backoffLimit 0) or restarting, and
/// leaves no container behind.
fn an_image_that_cannot_be_pulled_backs_off_with_the_runtime_words() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32650, "");
    let missing = "localhost/corral-no-such-image:1";
    c.submit(
        &image_job("nopull", "", "").replace(IMAGE, missing),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "back-off", |c| {
        state(c, "nopull") == Some(JobState::BackOff)
    });
    let d = c
        .describe("default", "nopull")
        .expect("describe")
        .expect("job");
    let status = d.job.status.clone().expect("status");
    assert_eq!(status.start_failures, 1);
    assert_eq!(status.restart_count, 0);
    assert_eq!(status.blocked_by, ["StartBackOff"]);
    let queued = status
        .conditions
        .iter()
        .find(|c| c.type_ == corral_api::training_job::ConditionType::Queued)
        .expect("Queued");
    assert_eq!(queued.reason, "StartBackOff");
    // podman's last words, not "exit code 125 (Error)".
    assert!(
        queued.message.contains("Error") && queued.message.contains("corral-no-such-image"),
        "{}",
        queued.message
    );
    assert!(
        !queued.message.contains("exit code 125"),
        "{}",
        queued.message
    );
    assert!(
        d.events.iter().any(|e| e.reason == "StartBackOff"),
        "{:?}",
        d.events
    );
    assert!(
        !d.events
            .iter()
            .any(|e| e.reason == "Failed" || e.reason == "Restarting"),
        "{:?}",
        d.events
    );
    // The admission goes back once nothing of the job runs (the pass after its replicas
    // are seen ended), well within the 10 s back-off.
    let run_dir = h.run_dir();
    h.until(&mut c, "the admission given back, no container left", |c| {
        let released = c
            .describe("default", "nopull")
            .ok()
            .flatten()
            .is_some_and(|d| {
                d.admission.is_none() && state(c, "nopull") == Some(JobState::BackOff)
            });
        released && containers_of(&run_dir).is_empty()
    });
    c.delete("default", "nopull", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| {
        c.list(None).expect("list").is_empty()
    });
}

fn a_kubeflow_pytorchjob_with_an_image_runs_in_a_container() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32150, "");
    let manifest = format!(
        r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: kf}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: {IMAGE}
              command: [/bin/sh, -c, 'cat marker; echo rank=$RANK world=$WORLD_SIZE']
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              image: {IMAGE}
              command: [/bin/sh, -c, 'cat marker; echo rank=$RANK world=$WORLD_SIZE']
"#
    );
    c.submit(&manifest, "default", h.now).expect("submit");
    h.until(&mut c, "succeeded", |c| {
        state(c, "kf") == Some(JobState::Succeeded)
    });
    let log = log_of(&c, "kf", "kf-worker-0");
    assert!(log.contains(MARKER), "{log}");
    assert!(log.contains("rank=1 world=2"), "{log}");
}

fn the_memory_limit_kills_the_hog_alone() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32200, "");
    // The hog asks for 256 MiB in one buffer with a limit of 64 MiB; its neighbour,
    // in another job, sleeps and then succeeds.
    let hog = "exec dd if=/dev/zero of=/dev/null bs=256M count=1";
    c.submit(
        &format!(
            r#"apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: hog}}
spec:
  framework: generic
  runPolicy: {{backoffLimit: 0}}
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{memory: 64Mi}}
      template:
        image: {IMAGE}
        command: [/bin/sh, -c, '{hog}']
---
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: calm}}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{memory: 64Mi}}
      template:
        image: {IMAGE}
        command: [/bin/sh, -c, 'sleep 3; echo calm done']
"#
        ),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "hog failed, calm succeeded", |c| {
        state(c, "hog") == Some(JobState::Failed) && state(c, "calm") == Some(JobState::Succeeded)
    });
    let d = c
        .describe("default", "hog")
        .expect("describe")
        .expect("job");
    // SIGKILLed by the kernel, and said so as a host replica's OOM kill is (podman 4.3 with
    // runc on cgroup v1 does not report it: the replica's cgroup, the container's parent,
    // does).
    assert_eq!(d.replicas[0].exit_code, Some(137), "{:#?}", d.replicas);
    assert_eq!(
        d.replicas[0].reason.as_deref(),
        Some("OOMKilled"),
        "{:#?}",
        d.replicas
    );
    assert!(log_of(&c, "calm", "calm-worker-0").contains("calm done"));
    let calm = c
        .describe("default", "calm")
        .expect("describe")
        .expect("job");
    assert_ne!(
        calm.replicas[0].reason.as_deref(),
        Some("OOMKilled"),
        "{:#?}",
        calm.replicas
    );
}

fn a_killed_server_readopts_the_running_container_and_delete_removes_it() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32250, "");
    // PID 1 of a container ignores SIGTERM unless it traps it: delete has to kill.
    c.submit(
        &image_job("survivor", "", "        command: [sleep, '300']\n"),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "running", |c| {
        state(c, "survivor") == Some(JobState::Running)
    });
    let run_dir = h.run_dir();
    let deadline = Instant::now() + WAITS.deadline;
    let before = loop {
        let names = containers_of(&run_dir);
        if names.len() == 2 {
            break names;
        }
        assert!(Instant::now() < deadline, "containers: {names:?}");
        std::thread::sleep(Duration::from_millis(100));
    };

    // kill -9 of the server: no cleanup at all.
    drop(c);
    let mut c = h.open();
    assert_eq!(state(&c, "survivor"), Some(JobState::Running));
    for _ in 0..5 {
        let r = h.tick(&mut c);
        assert!(r.started.is_empty(), "nothing starts twice: {r:?}");
    }
    assert_eq!(containers_of(&run_dir), before, "the same containers");

    c.delete("default", "survivor", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "survivor").is_none());
    let deadline = Instant::now() + WAITS.deadline;
    loop {
        let left = containers_of(&run_dir);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "containers left: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(matches!(
        c.delete("default", "survivor", h.now),
        Err(ClusterError::NotFound { .. })
    ));
}

fn without_a_runtime_the_image_is_not_used_and_an_event_says_so_or_it_is_refused() {
    let (mut h, mut c) = Harness::new(WAITS, 32300, "containers: {runtime: none}\n");
    c.submit(
        &image_job(
            "hosted",
            "",
            "        command: [/bin/sh, -c, 'echo on the host']\n",
        ),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "succeeded", |c| {
        state(c, "hosted") == Some(JobState::Succeeded)
    });
    let d = c
        .describe("default", "hosted")
        .expect("describe")
        .expect("job");
    let warning = d
        .events
        .iter()
        .find(|e| e.reason == "ImageNotUsed")
        .expect("an ImageNotUsed event");
    assert!(warning.message.contains(IMAGE), "{}", warning.message);
    assert!(log_of(&c, "hosted", "hosted-worker-0").contains("on the host"));
    // The image's entrypoint cannot run on the host.
    let e = c
        .submit(&image_job("entry", "", ""), "default", h.now)
        .expect_err("refused");
    assert!(e.to_string().contains("command"), "{e}");

    let (h2, mut c2) = Harness::new(
        WAITS,
        32350,
        "containers: {runtime: none, withoutRuntime: reject}\n",
    );
    let e = c2
        .submit(
            &image_job("refused", "", "        command: [echo, hi]\n"),
            "default",
            h2.now,
        )
        .expect_err("refused");
    let text = format!("{e:?}");
    assert!(text.contains("template.image"), "{text}");
    assert!(c2.list(None).expect("list").is_empty());
}

fn top_shows_the_container_and_its_code_snapshot_is_mounted_read_only() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32500, "");
    // A snapshot, staged as the server stages an upload (see corral_local::code).
    let src = h.path("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("msg.txt"), "from-the-snapshot\n").expect("write");
    let tar = h.path("code.tar.gz");
    let made = Command::new("tar")
        .arg("-czf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .arg("msg.txt")
        .status()
        .expect("tar");
    assert!(made.success());
    let store = c.code_store();
    let staged = store.incoming_path(".d").expect("staging");
    corral_local::code::unpack(std::fs::File::open(&tar).expect("open"), &staged, 1 << 20)
        .expect("unpack");
    // The hog of memory and CPU holds 16 MiB and spins until stopped.
    let script = "cat msg.txt; pwd; if echo x > w 2>/dev/null; then echo writable; else echo read-only; fi; \
                  dd if=/dev/zero bs=16M count=1 | sleep 300 & while :; do :; done";
    let checked = corral_local::Cluster::check_submission(
        &c.submit_context(),
        &image_job(
            "busy",
            "      resources: {memory: 256Mi, cpu: 200m}\n",
            &format!("        command: [/bin/sh, -c, '{script}']\n"),
        ),
        "default",
    )
    .expect("valid")
    .with_code("sha256:0000000000000000000000000000000000000000000000000000000000000000");
    let uid = c
        .submit_checked_with_code(checked, Some(&staged), h.now)
        .expect("submit")[0]
        .uid
        .clone();
    assert!(!staged.exists(), "the staged snapshot moved to the job");
    h.until(&mut c, "running", |c| {
        state(c, "busy") == Some(JobState::Running)
    });
    let deadline = Instant::now() + WAITS.deadline;
    let row = loop {
        let rows = c.top();
        let row = rows
            .into_iter()
            .find(|r| r.replica == "busy-worker-0" && r.memory_bytes.unwrap_or(0) > 16 << 20);
        if let Some(r) = row
            && r.cpu_seconds.unwrap_or(0.0) > 0.2
        {
            break r;
        }
        assert!(Instant::now() < deadline, "top: {:?}", c.top());
        std::thread::sleep(Duration::from_millis(200));
    };
    // The container's, not its runtime client's (podman's client holds tens of MiB but
    // spends little CPU while it waits).
    assert!(row.memory_bytes.unwrap_or(0) < 200 << 20, "{row:?}");
    // The container's output reaches the log through the runtime's client, which may
    // pass it on after the spinning has begun.
    let log = loop {
        let log = log_of(&c, "busy", "busy-worker-0");
        if log.contains("read-only") || log.contains("writable") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(log.contains("from-the-snapshot"), "{log}");
    assert!(log.contains("/workspace"), "working directory: {log}");
    assert!(log.contains("read-only"), "{log}");
    c.delete("default", "busy", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "busy").is_none());
    assert!(
        !store.job_dir(&uid).exists(),
        "the snapshot goes with the job"
    );
}

/// A compiled KFP fixture (`<fixture>.py` in corral-api's tests/fixtures/kfp): kfp compiles
/// it to exactly the committed `<fixture>.yaml` (the converter's unit tests read that), then
/// again for this machine's image, submitted as kfp wrote it and run to its end (the
/// harness returned keeps the cluster's directory). `None` where containers or kfp are
/// missing (and not required).
fn run_compiled_kfp(
    fixture: &str,
    port: u16,
) -> Option<(
    Harness,
    corral_local::Cluster,
    String,
    corral_api::pipeline::PipelineRunStatus,
)> {
    image()?;
    let Some(python) = kfp_python::kfp_python() else {
        common::prerequisite(
            false,
            "uv and the kfp package from PyPI (uv pip install kfp)",
        );
        return None;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corral-api/tests/fixtures/kfp");
    let tmp = tempfile::tempdir().expect("tempdir");
    let compile = |out: &Path, image: &str| {
        let status = Command::new(&python)
            .arg(fixtures.join(format!("{fixture}.py")))
            .arg(out)
            .env("KFP_TEST_IMAGE", image)
            .status()
            .expect("python");
        assert!(status.success(), "kfp did not compile {fixture}.py");
        std::fs::read_to_string(out).expect("compiled")
    };
    let without_version = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("sdkVersion:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let fresh = compile(&tmp.path().join("fresh.yaml"), "busybox");
    let committed =
        std::fs::read_to_string(fixtures.join(format!("{fixture}.yaml"))).expect("fixture");
    assert_eq!(
        without_version(&fresh),
        without_version(&committed),
        "kfp compiles {fixture}.py differently from the committed {fixture}.yaml: run \
         `python3 {fixture}.py` there"
    );
    let text = compile(&tmp.path().join("local.yaml"), IMAGE);
    let (mut h, mut c) = Harness::new(WAITS, port, "");
    c.submit(&text, "default", h.now).expect("submit");
    let runs = c.pipeline_runs(Some("default")).expect("runs");
    let name = runs
        .first()
        .map(|r| r.metadata.name.clone())
        .expect("a run");
    h.until(&mut c, "the run ended", |c| {
        c.pipeline_run("default", &name)
            .ok()
            .flatten()
            .and_then(|r| r.status)
            .is_some_and(|s| s.phase.is_finished())
    });
    let run = c
        .pipeline_run("default", &name)
        .expect("read")
        .expect("the run");
    Some((h, c, name, run.status.expect("status")))
}

fn a_pipeline_compiled_by_kfp_runs_as_it_is_in_containers() {
    let Some((_h, c, name, status)) = run_compiled_kfp("two_steps", 32350) else {
        return;
    };
    assert!(name.starts_with("two-steps-"), "{name}");
    let consume = log_of(
        &c,
        &format!("{name}-consume"),
        &format!("{name}-consume-worker-0"),
    );
    assert_eq!(
        status.phase,
        corral_api::pipeline::RunPhase::Succeeded,
        "{status:?}\n{consume}"
    );
    // consume read what produce wrote (its greeting parameter) and counted its bytes.
    assert!(consume.contains("hello from produce"), "{consume}");
    let report = &status.steps["consume"].outputs["report"];
    let count = std::fs::read_to_string(Path::new(&report.path).join("report")).expect("report");
    assert_eq!(count.trim(), "19", "{report:?}");
}

/// A `dsl.ParallelFor` over a list parameter (at most 2 at a time) and a report reading
/// every iteration's model (`dsl.Collected`), as kfp compiled them.
fn a_kfp_parallel_for_runs_once_per_item_and_its_outputs_are_collected() {
    let Some((_h, c, name, status)) = run_compiled_kfp("sweep", 32400) else {
        return;
    };
    let report = log_of(
        &c,
        &format!("{name}-report"),
        &format!("{name}-report-worker-0"),
    );
    assert_eq!(
        status.phase,
        corral_api::pipeline::RunPhase::Succeeded,
        "{status:?}\n{report}"
    );
    let mut steps: Vec<&str> = status.steps.keys().map(String::as_str).collect();
    steps.sort();
    assert_eq!(steps, ["report", "train-0", "train-1", "train-2"]);
    // The report read the three models, in item order.
    let summary = &status.steps["report"].outputs["summary"];
    let text = std::fs::read_to_string(Path::new(&summary.path).join("summary")).expect("summary");
    assert_eq!(
        text.trim(),
        "model lr=0.1\nmodel lr=0.2\nmodel lr=0.3",
        "{report}"
    );
}

/// Output parameters and a `dsl.ParallelFor` over one (fan.py, as kfp compiled it): `plan`
/// writes the list and a tag; `work` runs once per item, each reading the tag's text.
fn a_kfp_loop_over_an_output_parameter_runs_once_per_item() {
    let Some((_h, _c, _name, status)) = run_compiled_kfp("fan", 32600) else {
        return;
    };
    assert_eq!(
        status.phase,
        corral_api::pipeline::RunPhase::Succeeded,
        "{status:?}"
    );
    let out = |i: usize| {
        let a = &status.steps[&format!("work-{i}")].outputs["out"];
        std::fs::read_to_string(Path::new(&a.path).join("out")).expect("out")
    };
    assert_eq!(
        [out(0), out(1), out(2)].map(|t| t.trim().to_string()),
        ["v1 a", "v1 b", "v1 c"]
    );
}

/// `dsl.If` (cond.py, as kfp compiled it): the condition on flip's output holds and its task
/// runs; the one on the pipeline parameter does not, and its task is skipped with why.
fn kfp_conditions_run_or_skip_their_tasks() {
    let Some((_h, _c, _name, status)) = run_compiled_kfp("cond", 32750) else {
        return;
    };
    assert_eq!(
        status.phase,
        corral_api::pipeline::RunPhase::Succeeded,
        "{status:?}"
    );
    let heads = &status.steps["record"];
    assert_eq!(heads.phase, corral_api::pipeline::StepPhase::Succeeded);
    let note =
        std::fs::read_to_string(Path::new(&heads.outputs["note"].path).join("note")).expect("note");
    assert_eq!(note.trim(), "heads");
    let slow = &status.steps["record-2"];
    assert_eq!(slow.phase, corral_api::pipeline::StepPhase::Skipped);
    assert!(
        slow.message
            .as_deref()
            .is_some_and(|m| m.contains("`fast`, not `slow`")),
        "{slow:?}"
    );
}

/// `dsl.If` / `dsl.Elif` / `dsl.Else` on a number (branches.py, as kfp compiled it): score
/// writes 0.3, so the Elif's task runs and the If's and the Else's are skipped, with why;
/// and conditions inside conditions (nested_conditions.py) run where all around them hold.
fn kfp_if_elif_else_runs_the_branch_that_holds() {
    use corral_api::pipeline::{RunPhase, StepPhase::*};
    for (fixture, port, ran, skipped) in [
        (
            "branches",
            32900,
            &["grade-2", "grade-4"][..],
            &["grade", "grade-3"][..],
        ),
        (
            "nested_conditions",
            32950,
            &["grade", "grade-2", "grade-5"],
            &["grade-3", "grade-4"],
        ),
    ] {
        let Some((_h, _c, _name, status)) = run_compiled_kfp(fixture, port) else {
            return;
        };
        assert_eq!(status.phase, RunPhase::Succeeded, "{status:?}");
        let phase = |s: &str| status.steps[s].phase;
        assert!(ran.iter().all(|s| phase(s) == Succeeded), "{status:?}");
        assert!(skipped.iter().all(|s| phase(s) == Skipped), "{status:?}");
    }
}

/// `dsl.ExitHandler` (exit_handler.py, as kfp compiled it): `check` fails, the exit task
/// runs anyway and writes the final status it was given (`dsl.PipelineTaskFinalStatus`),
/// and the run fails with the step's reason.
fn a_kfp_exit_handler_runs_after_a_failure_with_the_final_status() {
    let Some((_h, _c, _name, status)) = run_compiled_kfp("exit_handler", 32800) else {
        return;
    };
    use corral_api::pipeline::{RunPhase, StepPhase};
    assert_eq!(status.phase, RunPhase::Failed, "{status:?}");
    assert_eq!(status.steps["produce"].phase, StepPhase::Succeeded);
    assert_eq!(status.steps["check"].phase, StepPhase::Failed);
    let report = &status.steps["report"];
    assert_eq!(report.phase, StepPhase::Succeeded, "{report:?}");
    let note = std::fs::read_to_string(Path::new(&report.outputs["note"].path).join("note"))
        .expect("the exit task's note");
    let told: serde_json::Value = serde_json::from_str(note.trim()).expect("JSON");
    assert_eq!(told["state"], "FAILED", "{note}");
    assert!(
        told["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("step check failed")),
        "{note}"
    );
}

/// A `dsl.ExitHandler` around a `dsl.ParallelFor` and a `dsl.If` (exit_nested.py, as kfp
/// compiled it): every task runs, the loop once per word, and the exit task is told the run
/// succeeded.
fn a_kfp_exit_handler_around_a_loop_and_a_condition_runs_them() {
    let Some((_h, _c, _name, status)) = run_compiled_kfp("exit_nested", 32850) else {
        return;
    };
    use corral_api::pipeline::{RunPhase, StepPhase};
    assert_eq!(status.phase, RunPhase::Succeeded, "{status:?}");
    let mut steps: Vec<&str> = status.steps.keys().map(String::as_str).collect();
    steps.sort();
    assert_eq!(steps, ["check", "produce", "report", "say-0", "say-1"]);
    for (step, s) in &status.steps {
        assert_eq!(s.phase, StepPhase::Succeeded, "{step}: {status:?}");
    }
    let said = std::fs::read_to_string(
        Path::new(&status.steps["say-1"].outputs["said"].path).join("said"),
    )
    .expect("the second word");
    assert_eq!(said.trim(), "two");
    let note = std::fs::read_to_string(
        Path::new(&status.steps["report"].outputs["note"].path).join("note"),
    )
    .expect("the exit task's note");
    let told: serde_json::Value = serde_json::from_str(note.trim()).expect("JSON");
    assert_eq!(told["state"], "SUCCEEDED", "{note}");
}

/// `corral exec` (and the MPI launcher's rsh agent) into a replica that runs in a container:
/// the runtime's `exec` enters it, so the command sees the image's files, the replica's
/// working directory, contract env and user, and its input.
fn exec_enters_a_container_replica() {
    if image().is_none() {
        return;
    }
    let (mut h, mut c) = Harness::new(WAITS, 32700, "");
    c.submit(
        &image_job("entered", "", "        command: [sleep, '300']\n"),
        "default",
        h.now,
    )
    .expect("submit");
    h.until(&mut c, "running", |c| {
        state(c, "entered") == Some(JobState::Running)
    });
    let auth = corral_local::cluster::ExecAuth::Anyone;
    let run = |c: &corral_local::Cluster, argv: &[&str], stdin: Option<&str>| {
        let context = c
            .exec_context(&auth, "default", "entered", "worker-1")
            .expect("the running container replica is entered");
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let mut child = context
            .command(&argv, stdin.is_some())
            .expect("command")
            .spawn()
            .expect("spawn");
        if let Some(text) = stdin {
            use std::io::Write;
            let mut input = child.stdin.take().expect("stdin");
            input.write_all(text.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // The container may still be starting right after the job runs: the runtime says so.
    let deadline = Instant::now() + WAITS.deadline;
    let (code, out, err) = loop {
        let r = run(
            &c,
            &["sh", "-c", "cat marker; echo cwd=$(pwd) rank=$RANK"],
            None,
        );
        if r.0 == Some(0) || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code, Some(0), "exec: {out}{err}");
    assert!(out.contains(MARKER), "the image's files: {out}");
    assert!(
        out.contains("cwd=/app rank=1"),
        "its working directory and env: {out}"
    );
    let (code, out, _) = run(&c, &["cat"], Some("to the replica\n"));
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "to the replica\n"),
        "stdin passes"
    );
    let (code, _, _) = run(&c, &["sh", "-c", "exit 7"], None);
    assert_eq!(code, Some(7), "the command's exit code comes back");
    // Runtime options after the command are the command's, not the runtime's.
    let (code, out, _) = run(&c, &["echo", "--help"], None);
    assert_eq!((code, out.trim()), (Some(0), "--help"));

    c.delete("default", "entered", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "entered").is_none());
    assert!(
        c.exec_context(&auth, "default", "entered", "worker-1")
            .is_err(),
        "a deleted job's replica is not entered"
    );
}

fn main() -> std::process::ExitCode {
    common::main(vec![
        (
            "top_shows_the_container_and_its_code_snapshot_is_mounted_read_only",
            top_shows_the_container_and_its_code_snapshot_is_mounted_read_only,
        ),
        (
            "a_training_job_runs_in_its_image_with_the_contract_env",
            a_training_job_runs_in_its_image_with_the_contract_env,
        ),
        (
            "a_kubeflow_pytorchjob_with_an_image_runs_in_a_container",
            a_kubeflow_pytorchjob_with_an_image_runs_in_a_container,
        ),
        (
            "an_image_that_cannot_be_pulled_backs_off_with_the_runtime_words",
            an_image_that_cannot_be_pulled_backs_off_with_the_runtime_words,
        ),
        (
            "a_pipeline_compiled_by_kfp_runs_as_it_is_in_containers",
            a_pipeline_compiled_by_kfp_runs_as_it_is_in_containers,
        ),
        (
            "a_kfp_parallel_for_runs_once_per_item_and_its_outputs_are_collected",
            a_kfp_parallel_for_runs_once_per_item_and_its_outputs_are_collected,
        ),
        (
            "a_kfp_loop_over_an_output_parameter_runs_once_per_item",
            a_kfp_loop_over_an_output_parameter_runs_once_per_item,
        ),
        (
            "kfp_conditions_run_or_skip_their_tasks",
            kfp_conditions_run_or_skip_their_tasks,
        ),
        (
            "kfp_if_elif_else_runs_the_branch_that_holds",
            kfp_if_elif_else_runs_the_branch_that_holds,
        ),
        (
            "a_kfp_exit_handler_runs_after_a_failure_with_the_final_status",
            a_kfp_exit_handler_runs_after_a_failure_with_the_final_status,
        ),
        (
            "a_kfp_exit_handler_around_a_loop_and_a_condition_runs_them",
            a_kfp_exit_handler_around_a_loop_and_a_condition_runs_them,
        ),
        (
            "the_memory_limit_kills_the_hog_alone",
            the_memory_limit_kills_the_hog_alone,
        ),
        (
            "a_killed_server_readopts_the_running_container_and_delete_removes_it",
            a_killed_server_readopts_the_running_container_and_delete_removes_it,
        ),
        (
            "exec_enters_a_container_replica",
            exec_enters_a_container_replica,
        ),
        (
            "without_a_runtime_the_image_is_not_used_and_an_event_says_so_or_it_is_refused",
            without_a_runtime_the_image_is_not_used_and_an_event_says_so_or_it_is_refused,
        ),
    ])
}
