//! Elastic sizing live: a PyTorch job with `elastic: {minReplicas: 1, maxReplicas: 3}` on a
//! machine of 3 (pretend) GPUs is admitted at the 1 GPU left, grows to 3 workers when the
//! job beside it ends, shrinks to 1 when a higher-priority job arrives (no gang preempted,
//! worker 0 never restarted), and succeeds with its result.
//!
//! The workers are a standard-library stand-in for torchrun's elastic agent (torch itself
//! runs in the frameworks suite): each reads the launch env (`PET_NNODES=1:3`,
//! `PET_RDZV_ENDPOINT`), beats into a shared directory, and worker 0 reports the group
//! sizes it saw.

use super::*;

const CONFIG: &str = "apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 3}
resizeDwellSeconds: 1
gracePeriodSeconds: 5
---
apiVersion: corral.dev/v1alpha1
kind: JobPriorityClass
metadata: {name: high}
spec: {value: 100}
---
apiVersion: corral.dev/v1alpha1
kind: JobPriorityClass
metadata: {name: low}
spec: {value: 0}
";

/// The stand-in worker: beats every 0.1 s, counts the workers beating within the last
/// second, leaves (removing its beat) on SIGTERM, and ends when `stop` appears; worker 0
/// prints the sizes it saw.
const WORKER: &str = r#"
import os, pathlib, signal, sys, time
d = pathlib.Path(os.environ["ELASTIC_DIR"])
me = os.environ["CORRAL_REPLICA"]
lo, hi = (int(x) for x in os.environ["PET_NNODES"].split(":"))
rdzv = os.environ["PET_RDZV_ENDPOINT"]
beat = d / f"beat-{me}"
left = False
def leave(*_):
    global left
    left = True
signal.signal(signal.SIGTERM, leave)
def age(p):
    try:
        return time.time() - float(p.read_text())
    except (OSError, ValueError):
        return 99.0
seen = set()
while not (d / "stop").exists() and not left:
    beat.write_text(str(time.time()))
    size = sum(1 for p in d.glob("beat-*") if age(p) < 1.0)
    seen.add(size)
    time.sleep(0.1)
beat.unlink(missing_ok=True)
if left:
    print(f"{me} left the group", flush=True)
    sys.exit(0)
if me.endswith("-worker-0"):
    ok = lo == 1 and hi == 3 and min(seen) >= lo and max(seen) <= hi
    print(f"RESULT {'ok' if ok else 'bad'} smallest={min(seen)} largest={max(seen)} nnodes={lo}:{hi} rdzv={rdzv}", flush=True)
    sys.exit(0 if ok else 1)
"#;

fn waiting_job(name: &str, class: &str, gpus: u32, stop: &Path) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  priorityClass: {class}
  replicas:
    worker:
      count: 1
      resources: {{gpu: {gpus}, cpu: 100m, memory: 64Mi}}
      template: {{command: [sh, -c, 'while [ ! -e {stop} ]; do sleep 0.1; done']}}
",
        stop = stop.display()
    )
}

fn elastic_job(dir: &Path) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: el}}
spec:
  framework: pytorch
  priorityClass: low
  elastic: {{minReplicas: 1, maxReplicas: 3, rdzvBackend: c10d}}
  replicas:
    worker:
      count: 1
      restartPolicy: OnFailure
      resources: {{gpu: 1, cpu: 100m, memory: 64Mi}}
      template:
        workingDir: {dir:?}
        command: [python3, worker.py]
        env: [{{name: ELASTIC_DIR, value: {dir:?}}}]
",
        dir = dir.display().to_string()
    )
}

/// Waits until `done` holds of the job's details.
fn wait_for(
    client: &Client,
    name: &str,
    what: &str,
    done: impl Fn(&corral_local::cluster::JobDetails) -> bool,
) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = client.describe("default", name)?;
        if done(&d) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name}: not {what} after 60 s:\n{}",
                remote::describe_text(&d)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Workers the job holds an admission for, and of those, running now.
fn size(d: &corral_local::cluster::JobDetails) -> (usize, usize) {
    let admitted = d.admission.as_ref().map_or(0, |a| a.placements.len());
    let running = d.replicas.iter().filter(|r| r.phase == "Running").count();
    (admitted, running)
}

fn resized(d: &corral_local::cluster::JobDetails) -> Vec<String> {
    d.events
        .iter()
        .filter(|e| e.reason == "Resized")
        .map(|e| e.message.clone())
        .collect()
}

pub(super) fn an_elastic_job_grows_shrinks_and_finishes() -> TestResult {
    if !common::prerequisite(common::python3_available(), "python3") {
        return Ok(());
    }
    let c = TestCluster::start(CONFIG)?;
    let client = c.client(None);
    let dir = tempfile::tempdir()?;
    {
        // As root the replicas run as the namespace's uid, which must write here.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
    }
    std::fs::write(dir.path().join("worker.py"), WORKER)?;
    let stop = |name: &str| dir.path().join(format!("stop-{name}"));

    client.submit("default", &waiting_job("beside", "low", 2, &stop("beside")))?;
    wait_for_state(&client, "default", "beside", Duration::from_secs(60), |s| {
        s == JobState::Running
    })?;
    client.submit("default", &elastic_job(dir.path()))?;
    wait_for(&client, "el", "running with 1 worker", |d| {
        d.summary.state == JobState::Running && size(d) == (1, 1)
    })?;
    let pid0 = |d: &corral_local::cluster::JobDetails| {
        d.replicas.iter().find(|r| r.index == 0).and_then(|r| r.pid)
    };
    let rendezvous_pid = pid0(&client.describe("default", "el")?);

    // The job beside ends: el grows into its 2 GPUs, in one resize.
    std::fs::write(stop("beside"), "")?;
    wait_for(&client, "el", "grown to 3 workers", |d| size(d) == (3, 3))?;
    let d = client.describe("default", "el")?;
    check(
        resized(&d) == ["grew from 1 to 3 worker replicas into free GPUs"],
        format!("one Resized event:\n{}", remote::describe_text(&d)),
    )?;
    check(
        remote::describe_text(&d).contains("Elastic:     3 workers (range 1..3)")
            && d.summary.replicas_total == 3,
        remote::describe_text(&d),
    )?;

    // A higher-priority job of 2 GPUs: el shrinks to 1; nothing is preempted.
    client.submit(
        "default",
        &waiting_job("urgent", "high", 2, &stop("urgent")),
    )?;
    wait_for_state(&client, "default", "urgent", Duration::from_secs(60), |s| {
        s == JobState::Running
    })?;
    wait_for(&client, "el", "shrunk to 1 worker", |d| size(d) == (1, 1))?;
    let d = client.describe("default", "el")?;
    check(
        resized(&d).get(1).map(String::as_str)
            == Some(
                "shrank from 3 to 1 worker replicas to make room for default/urgent (priority 100)",
            ),
        format!("the shrink's event:\n{}", remote::describe_text(&d)),
    )?;
    check(
        rendezvous_pid.is_some() && pid0(&d) == rendezvous_pid,
        format!(
            "worker 0 (the rendezvous) ran on:\n{}",
            remote::describe_text(&d)
        ),
    )?;
    for job in ["el", "beside", "urgent"] {
        let d = client.describe("default", job)?;
        check(
            d.events.iter().all(|e| e.reason != "Preempted") && d.summary.preemptions == 0,
            format!("{job} was preempted:\n{}", remote::describe_text(&d)),
        )?;
    }

    // urgent ends; el finishes with its result.
    std::fs::write(stop("urgent"), "")?;
    wait_for_state(&client, "default", "urgent", Duration::from_secs(60), |s| {
        s.is_finished()
    })?;
    std::fs::write(dir.path().join("stop"), "")?;
    let state = wait_for_state(&client, "default", "el", Duration::from_secs(60), |s| {
        s.is_finished()
    })?;
    let mut log = Vec::new();
    let request = LogRequest {
        replica: Some("el-worker-0".into()),
        ..LogRequest::default()
    };
    client.logs("default", "el", &request, &mut log)?;
    let log = String::from_utf8_lossy(&log);
    check(
        state == JobState::Succeeded && log.contains("RESULT ok smallest=1 largest=3 nnodes=1:3"),
        format!("{state}; worker 0 said:\n{log}"),
    )
}
