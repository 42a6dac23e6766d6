//! Every framework's example, run as written: `examples/<framework>/*.yaml` submitted with
//! the code snapshot of its directory (what `corral submit FILE --code DIR` sends) to the
//! real server, replicas under the real shim, each in the Python environment the job asks
//! for, built by uv from PyPI (`tensorflow-cpu`, `torch`, `jax`, `xgboost-cpu`). Each test
//! asserts the job's own `RESULT ok` line and its final state; the failure tests make a rank
//! crash mid-allreduce (PyTorch DDP) or a parameter server die mid-training (TensorFlow).
//!
//! All jobs go to one cluster, so one uv cache and one environment per requirements file
//! serve them all; its data directory is kept under the target directory between runs (only
//! its `python/`, the environments; the store starts empty), so a second run builds nothing.
//! The scheduler queues the jobs by the node's CPU, so tests wait in its queue, not on each
//! other's CPUs. Needs uv and PyPI; under `CI=true` a missing uv fails the tests.
//!
//! A custom harness (libtest-mimic), because the executor starts every replica under the
//! shim `<current executable> shim <dir>`: invoked that way, this binary is the shim.

#[allow(dead_code)] // of what the CLI's test binaries share, this one uses `prerequisite`
mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_api::training_job::ConditionType;
use corral_cli::{code_archive, remote};
use corral_local::cluster::JobState;
use corral_local::{ClusterConfig, ClusterFileConfig};
use corral_server::api_client::{Client, LogRequest};
use corral_server::{Server, ServerOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{Value, json};

type TestResult = Result<(), Failed>;
/// A test: its name and its body, run against the one cluster.
type Case = (&'static str, fn(&Shared) -> TestResult);

/// From submit to a final state, queueing behind the other examples included (the first
/// job of a set also waits for its environment: ~2 GB of wheels for torch).
const DEADLINE: Duration = Duration::from_secs(1200);

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let _program = argv.next();
    let rest: Vec<_> = argv.collect();
    if rest.first().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(rest.into_iter().skip(1)));
    }
    let args = Arguments::from_args();
    let cases: Vec<Case> = vec![
        ("tensorflow_parameter_server_example", tensorflow_ps),
        (
            "tensorflow_multiworker_mirrored_example",
            tensorflow_multiworker,
        ),
        ("xgboost_example", xgboost),
        ("jax_example", jax),
        ("pytorch_ddp_example", pytorch_ddp),
        ("pytorch_elastic_example", pytorch_elastic),
        (
            "pytorch_rank_crash_restarts_the_gang_then_succeeds",
            pytorch_crash_restarts_the_gang,
        ),
        (
            "pytorch_rank_crash_without_backoff_fails_with_the_replicas_reason",
            pytorch_crash_fails_without_backoff,
        ),
        (
            "tensorflow_killed_ps_is_restarted_and_the_job_succeeds",
            tensorflow_killed_ps,
        ),
    ];
    // Started only when a selected test runs (the cluster is cheap; the wheels are not).
    let shared: Arc<std::sync::OnceLock<Result<Shared, String>>> = Arc::default();
    let tests = cases
        .into_iter()
        .map(|(name, case)| {
            let shared = Arc::clone(&shared);
            Trial::test(name, move || {
                if !uv_present() {
                    return Ok(());
                }
                let s = shared.get_or_init(Shared::start).as_ref()?;
                case(s)
            })
        })
        .collect();
    let code = libtest_mimic::run(&args, tests).exit_code();
    // Stops the server: its replicas are stopped and the store is closed.
    drop(shared);
    code
}

fn uv_present() -> bool {
    let uv = std::process::Command::new("uv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    common::prerequisite(uv, "uv is not installed (pip install uv)")
}

/// The one cluster every test submits to.
struct Shared {
    server: Server,
    /// Marker files of the failure tests, which replicas write.
    scratch: tempfile::TempDir,
}

impl Shared {
    fn start() -> Result<Shared, String> {
        let data = Path::new(env!("CARGO_TARGET_TMPDIR")).join("frameworks-data");
        clear_all_but_python(&data)?;
        let mut cluster = ClusterConfig::new(data);
        // Kills of a gang's survivors and of stale replicas do not wait the default 30 s.
        cluster.file = ClusterFileConfig::parse("kind: CorralConfig\ngracePeriodSeconds: 2\n")
            .map_err(|e| e.to_string())?;
        let mut options = ServerOptions::new(cluster);
        options.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        options.tick_interval = Duration::from_millis(100);
        let server = Server::start(options).map_err(|e| e.to_string())?;
        // Beside the data directory, not under /tmp: as root each job has a /tmp of its own,
        // where the test would not see the markers. Replicas run as their namespace's uid
        // there: they write their markers here as in /tmp (sticky and open to all).
        let scratch =
            tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o1777))
            .map_err(|e| e.to_string())?;
        Ok(Shared { server, scratch })
    }

    fn client(&self) -> Client {
        Client::new(&self.server.url(), None)
    }

    fn marker(&self, name: &str) -> String {
        self.scratch.path().join(name).display().to_string()
    }
}

/// Empties a kept data directory of everything but the Python environments (and uv's
/// cache inside them), so that the store starts empty and no wheel is fetched twice.
fn clear_all_but_python(data: &Path) -> Result<(), String> {
    let entries = match std::fs::read_dir(data) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", data.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        if entry.file_name() == "python" {
            continue;
        }
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn example_dir(framework: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(framework)
}

/// The manifest `file` of `examples/<framework>/` as a JSON object, to be changed by a test.
fn manifest(framework: &str, file: &str) -> Result<Value, Failed> {
    let path = example_dir(framework).join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Renames the job, adds `env` to every replica's template and sets `backoffLimit`.
fn variant(mut job: Value, name: &str, env: &[(&str, &str)], backoff: Option<u32>) -> Value {
    job["metadata"]["name"] = json!(name);
    if let Some(limit) = backoff {
        job["spec"]["runPolicy"]["backoffLimit"] = json!(limit);
    }
    if let Some(replicas) = job["spec"]["replicas"].as_object_mut() {
        for replica in replicas.values_mut() {
            let template = &mut replica["template"];
            if !template["env"].is_array() {
                template["env"] = json!([]);
            }
            if let Some(vars) = template["env"].as_array_mut() {
                for (k, v) in env {
                    vars.push(json!({"name": k, "value": v}));
                }
            }
        }
    }
    job
}

/// Submits `job` with the snapshot of `examples/<framework>/` and waits for a final state.
fn run(s: &Shared, framework: &str, job: &Value) -> Result<(String, JobState), Failed> {
    let name = job["metadata"]["name"]
        .as_str()
        .ok_or("the manifest names no job")?
        .to_string();
    let up = code_archive::upload(&job.to_string(), &example_dir(framework))?;
    let client = s.client();
    let started = Instant::now();
    client.submit_with_code("default", &up.boundary, &up.body)?;
    loop {
        let d = client.describe("default", &name)?;
        if d.summary.state.is_finished() {
            eprintln!(
                "frameworks: {name} {} {:.1}s after submit ({} restarts)",
                d.summary.state,
                started.elapsed().as_secs_f64(),
                d.summary.restarts
            );
            return Ok((name, d.summary.state));
        }
        if started.elapsed() > DEADLINE {
            return Err(format!(
                "{name} is still {} after {DEADLINE:?}:\n{}",
                d.summary.state,
                remote::describe_text(&d)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The current log of `replica` (`role-index`); `previous`: the incarnation before it.
fn log(s: &Shared, job: &str, replica: &str, previous: bool) -> Result<String, Failed> {
    let mut out = Vec::new();
    let request = LogRequest {
        replica: Some(replica.into()),
        previous,
        ..LogRequest::default()
    };
    s.client().logs("default", job, &request, &mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn check(cond: bool, what: impl Into<String>) -> TestResult {
    if cond {
        Ok(())
    } else {
        Err(what.into().into())
    }
}

/// The job succeeded and `replica`'s log has the script's own `RESULT ok` line.
fn succeeded_with_result(s: &Shared, job: &str, state: JobState, replica: &str) -> TestResult {
    let d = s.client().describe("default", job)?;
    check(
        state == JobState::Succeeded,
        format!("{job} {state}:\n{}", remote::describe_text(&d)),
    )?;
    let text = log(s, job, replica, false)?;
    let line = text.lines().find(|l| l.starts_with("RESULT "));
    check(
        line.is_some_and(|l| l.starts_with("RESULT ok ")),
        format!("{job}: {replica}'s log has no `RESULT ok` line:\n{text}"),
    )?;
    eprintln!("frameworks: {job}: {}", line.unwrap_or_default());
    Ok(())
}

fn tensorflow_ps(s: &Shared) -> TestResult {
    let (job, state) = run(s, "tensorflow", &manifest("tensorflow", "job.yaml")?)?;
    succeeded_with_result(s, &job, state, "chief-0")?;
    let text = log(s, &job, "chief-0", false)?;
    // The variables really live on the two parameter servers.
    check(
        text.contains("/job:ps/replica:0/task:0") && text.contains("/job:ps/replica:0/task:1"),
        format!("the chief placed no variable on each ps:\n{text}"),
    )
}

fn tensorflow_multiworker(s: &Shared) -> TestResult {
    let (job, state) = run(
        s,
        "tensorflow",
        &manifest("tensorflow", "multiworker.yaml")?,
    )?;
    succeeded_with_result(s, &job, state, "worker-0")?;
    check(
        log(s, &job, "worker-1", false)?.contains("2 workers in sync"),
        "worker 1 trained in the same collective",
    )
}

fn xgboost(s: &Shared) -> TestResult {
    let (job, state) = run(s, "xgboost", &manifest("xgboost", "job.yaml")?)?;
    succeeded_with_result(s, &job, state, "master-0")?;
    check(
        log(s, &job, "worker-1", false)?.contains("[rank 2] world size 3"),
        "worker 1 joined the collective as rank 2",
    )
}

fn jax(s: &Shared) -> TestResult {
    let (job, state) = run(s, "jax", &manifest("jax", "job.yaml")?)?;
    succeeded_with_result(s, &job, state, "worker-0")?;
    check(
        log(s, &job, "worker-0", false)?.contains("world_size=2"),
        "two JAX processes",
    )
}

fn pytorch_ddp(s: &Shared) -> TestResult {
    let (job, state) = run(s, "pytorch", &manifest("pytorch", "job.yaml")?)?;
    succeeded_with_result(s, &job, state, "master-0")?;
    check(
        log(s, &job, "master-0", false)?.contains("world_size=2"),
        "two DDP ranks",
    )
}

fn pytorch_elastic(s: &Shared) -> TestResult {
    let (job, state) = run(s, "pytorch", &manifest("pytorch", "elastic.yaml")?)?;
    // The rendezvous, not Corral, decides which worker gets rank 0; the scheduler grows the
    // job to 3 workers where the node has room (docs/elastic.md).
    let with_result = ["worker-0", "worker-1", "worker-2"]
        .into_iter()
        .find(|r| log(s, &job, r, false).is_ok_and(|t| t.contains("RESULT ")))
        .ok_or("no worker printed a RESULT line")?;
    succeeded_with_result(s, &job, state, with_result)
}

/// Worker 0 (rank 1) exits halfway through training, once: the master's allreduce fails
/// with it, the whole gang restarts (restartPolicy OnFailure, backoffLimit 2) and the second
/// attempt trains through.
fn pytorch_crash_restarts_the_gang(s: &Shared) -> TestResult {
    let marker = s.marker("ddp-crash-once");
    let job = variant(
        manifest("pytorch", "job.yaml")?,
        "pytorch-crash",
        &[("CRASH_ONCE_FILE", &marker)],
        None,
    );
    let (job, state) = run(s, "pytorch", &job)?;
    succeeded_with_result(s, &job, state, "master-0")?;
    let d = s.client().describe("default", &job)?;
    check(
        d.summary.restarts == 1,
        format!("one gang restart:\n{}", remote::describe_text(&d)),
    )?;
    let first = log(s, &job, "worker-0", true)?;
    check(
        first.contains("crashing mid-training"),
        format!("the first attempt of worker 0 crashed:\n{first}"),
    )
}

/// The same crash with backoffLimit 0: the job fails, and says which replica failed how.
fn pytorch_crash_fails_without_backoff(s: &Shared) -> TestResult {
    let marker = s.marker("ddp-crash-no-backoff");
    let job = variant(
        manifest("pytorch", "job.yaml")?,
        "pytorch-crash-fail",
        &[("CRASH_ONCE_FILE", &marker)],
        Some(0),
    );
    let (job, state) = run(s, "pytorch", &job)?;
    let d = s.client().describe("default", &job)?;
    check(
        state == JobState::Failed,
        format!("{job} {state}:\n{}", remote::describe_text(&d)),
    )?;
    let status = d.job.status.as_ref().ok_or("no status")?;
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Failed)
        .ok_or("no Failed condition")?;
    check(
        failed.reason == "BackoffLimitExceeded"
            && failed.message.contains("failed with exit code")
            && failed.message.contains("(backoffLimit 0)"),
        format!("the reason names the failed replica: {failed:?}"),
    )?;
    let crashed = log(s, &job, "worker-0", false)?;
    check(
        crashed.contains("crashing mid-training"),
        format!("worker 0 crashed:\n{crashed}"),
    )
}

/// Parameter server 0 is killed (SIGKILL) after the first 100 steps: the chief's next steps
/// fail (TensorFlow does not retry a parameter server's), the chief exits, Corral restarts
/// the ps and the chief by their restartPolicy (each alone), and the job then succeeds.
fn tensorflow_killed_ps(s: &Shared) -> TestResult {
    let marker = s.marker("tf-kill-ps-once");
    let job = variant(
        manifest("tensorflow", "job.yaml")?,
        "tf-ps-killed",
        &[("KILL_PS_ONCE", &marker)],
        None,
    );
    let (job, state) = run(s, "tensorflow", &job)?;
    succeeded_with_result(s, &job, state, "chief-0")?;
    let killed = log(s, &job, "ps-0", true)?;
    check(
        killed.contains("killed (KILL_PS_ONCE)"),
        format!("ps 0's first incarnation was killed:\n{killed}"),
    )?;
    let d = s.client().describe("default", &job)?;
    check(
        d.summary.restarts >= 2,
        format!(
            "the ps and the chief restarted:\n{}",
            remote::describe_text(&d)
        ),
    )
}
