//! The usage ledger, a queue budget and the history store through the real programs:
//! `corral up` as a process of its own (so that it can be killed with SIGKILL), real
//! replica processes on two pretend GPUs, `corral usage` and the API.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use corral_server::routes::UsageReport;

use super::*;

const CLUSTER: &str = "apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 2, gpuType: FAKE-GPU}
tokens:
  - {token: token-a, namespace: team-a}
  - {token: token-b, namespace: team-b}
  - {token: token-admin}
---
apiVersion: corral.dev/v1alpha1
kind: NodePool
metadata: {name: fake}
spec: {gpuType: FAKE-GPU}
---
apiVersion: corral.dev/v1alpha1
kind: Queue
metadata: {name: default}
spec:
  namespaces: [team-a]
  quotas: [{nodePool: fake, gpu: 2}]
---
apiVersion: corral.dev/v1alpha1
kind: Queue
metadata: {name: capped}
spec:
  namespaces: [team-b]
  quotas: [{nodePool: fake, gpu: 2}]
  budget: {gpuHours: 1m, period: day}
";

/// The admin token of [`admin_dir`]'s configuration.
pub(super) const ADMIN_TOKEN: &str = "t-admin";

/// A directory for `corral up` that tenants may pass through (0711), with a `corral.yaml`
/// readable by the server alone that declares one admin token, [`ADMIN_TOKEN`].
pub(super) fn admin_dir() -> Result<tempfile::TempDir, Failed> {
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    let config = dir.path().join("corral.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: corral.dev/v1alpha1\nkind: CorralConfig\ntokens: [{{token: {ADMIN_TOKEN}}}]\n"
        ),
    )?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600))?;
    Ok(dir)
}

/// A port on loopback nobody listens on now.
pub(super) fn free_port() -> Result<u16, Failed> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `corral up` in a process of its own; SIGKILLed when dropped.
pub(super) struct UpProcess {
    child: std::process::Child,
    url: String,
}

impl UpProcess {
    pub(super) fn start(dir: &Path, port: u16) -> Result<UpProcess, Failed> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))?;
        let child = Command::new(env!("CARGO_BIN_EXE_corral"))
            .arg("up")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--config")
            .arg(dir.join("corral.yaml"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let up = UpProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let client = up.client("token-admin");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !client.healthy() {
            check(
                Instant::now() < deadline,
                "corral up did not answer in 30 s",
            )?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(up)
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    pub(super) fn client(&self, token: &str) -> Client {
        Client::new(&self.url, Some(token))
    }

    /// `kill -9`.
    pub(super) fn kill(mut self) -> Result<(), Failed> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// `corral usage ...` with a token; its standard output.
    fn cli(&self, token: &str, args: &[&str]) -> Result<String, Failed> {
        let out = Command::new(env!("CARGO_BIN_EXE_corral"))
            .arg("usage")
            .args(args)
            .args(["--server", &self.url, "--token", token])
            .env_remove("CORRAL_TOKEN")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        check(
            out.status.success(),
            format!(
                "corral usage {args:?} failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
        Ok(text)
    }
}

impl Drop for UpProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gpu_job(name: &str, queue: &str, gpus: u32, seconds: u32) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  queue: {queue}
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi, gpu: {gpus}}}
      template: {{command: [sleep, '{seconds}']}}
"
    )
}

/// GPU-seconds of one job in a report by job.
fn job_gpu_seconds(r: &UsageReport, job: &str) -> f64 {
    r.items
        .iter()
        .filter(|i| i.job.as_deref() == Some(job))
        .map(|i| i.gpu_seconds)
        .sum()
}

fn by_job(client: &Client, namespace: Option<&str>) -> Result<UsageReport, Failed> {
    let mut params = vec![("by", "job"), ("from", "2000-01-01")];
    if let Some(ns) = namespace {
        params.push(("namespace", ns));
    }
    Ok(client.usage(&params)?)
}

/// The seconds the job ran: from its status's start time to its completion time.
fn run_time(client: &Client, ns: &str, name: &str) -> Result<f64, Failed> {
    let d = client.describe(ns, name)?;
    let status = d.job.status.ok_or("no status")?;
    let start = status.start_time.ok_or("no startTime")?;
    let end = status.completion_time.ok_or("no completionTime")?;
    Ok(end.duration_since(start).as_secs_f64())
}

pub(super) fn usage_is_counted_kept_through_kill_9_and_walled_off() -> TestResult {
    let dir = tempfile::tempdir()?;
    // As root, replicas run as their namespace's uid: they must pass through to the data
    // directory below (corral up refuses one they cannot reach).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    std::fs::write(dir.path().join("corral.yaml"), CLUSTER)?;
    // It holds tokens: readable by the server alone, or corral up refuses to start.
    std::fs::set_permissions(
        dir.path().join("corral.yaml"),
        std::fs::Permissions::from_mode(0o600),
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let up = UpProcess::start(dir.path(), port)?;
    let (a, b, admin) = (
        up.client("token-a"),
        up.client("token-b"),
        up.client("token-admin"),
    );

    // A finished job's GPU-seconds are its GPUs times the time it held them: from its
    // admission to the end of its replica, which slept 2 s; its run time as its status
    // says (start to completion) within a second.
    a.submit("team-a", &gpu_job("trainer", "default", 2, 2))?;
    let state = wait_for_state(&a, "team-a", "trainer", Duration::from_secs(60), |s| {
        s.is_finished()
    })?;
    check(
        state == JobState::Succeeded,
        format!("trainer ended {state}"),
    )?;
    let held = run_time(&a, "team-a", "trainer")?;
    let report = by_job(&a, None)?;
    let trainer = job_gpu_seconds(&report, "team-a/trainer");
    check(
        trainer >= 2.0 * 2.0 && (trainer - 2.0 * held).abs() <= 2.0 * 1.0,
        format!("trainer: {trainer} GPU-seconds for {held} s held on 2 GPUs: {report:?}"),
    )?;
    check(
        report
            .items
            .iter()
            .all(|i| i.namespace == "team-a" && i.gpu_type == "FAKE-GPU" && i.queue == "default"),
        format!("team-a's report: {report:?}"),
    )?;
    let cpu: f64 = report.items.iter().map(|i| i.cpu_seconds).sum();
    check(
        (cpu - trainer / 2.0 * 0.1).abs() < 0.01,
        format!("CPU-seconds: {cpu}"),
    )?;

    // Team B's budget is a thousandth of a GPU-hour a day (3.6 GPU-seconds): a 2-GPU job
    // of 3 s spends it; the next job waits, and says why.
    b.submit("team-b", &gpu_job("spender", "capped", 2, 3))?;
    wait_for_state(&b, "team-b", "spender", Duration::from_secs(60), |s| {
        s.is_finished()
    })?;
    b.submit("team-b", &gpu_job("blocked", "capped", 1, 1))?;
    std::thread::sleep(Duration::from_millis(800));
    let d = b.describe("team-b", "blocked")?;
    let reason = d.pending_reason.clone().unwrap_or_default();
    check(
        d.summary.state == JobState::Queued
            && reason.contains("queue capped is over its budget")
            && reason.contains("of its 0.001 GPU-hours this day"),
        format!("blocked: {} {reason:?}", d.summary.state),
    )?;
    let report = by_job(&b, None)?;
    let budget = report
        .budgets
        .iter()
        .find(|r| r.queue == "capped")
        .ok_or("no budget row")?;
    check(
        budget.exhausted && budget.period == "day",
        format!("{budget:?}"),
    )?;

    // A namespace's token never sees another namespace's usage.
    check(
        report.items.iter().all(|i| i.namespace == "team-b")
            && job_gpu_seconds(&report, "team-a/trainer") == 0.0,
        format!("team-b sees: {report:?}"),
    )?;
    let (status, body) = raw(
        "GET",
        &format!("{}/api/v1/usage?namespace=team-a", up.url),
        Some("token-b"),
        None,
    )?;
    check(
        status == 403,
        format!("team-b asking for team-a: {status} {body}"),
    )?;
    let (status, body) = raw(
        "GET",
        &format!("{}/api/v1/usage?period=year", up.url),
        Some("token-b"),
        None,
    )?;
    check(
        status == 400 && body.contains("period") && body.contains("day or month"),
        format!("a bad period: {status} {body}"),
    )?;
    let csv = up.cli(
        "token-b",
        &["-o", "csv", "--by", "job", "--from", "2000-01-01"],
    )?;
    check(
        csv.starts_with("period,namespace,queue,job,gpuType,gpuSeconds,gpuHours,cpuSeconds\n")
            && csv.contains("team-b/spender")
            && !csv.contains("team-a"),
        format!("CSV for team-b:\n{csv}"),
    )?;
    let table = up.cli("token-admin", &["--from", "2000-01-01"])?;
    check(
        table.contains("team-a") && table.contains("team-b") && table.contains("capped"),
        format!("the admin's table:\n{table}"),
    )?;

    // The ledger survives kill -9: what closed is read back as it was, what was open goes
    // on counting (the replica ran on while the server was down), and a deleted job's
    // usage stays.
    a.submit("team-a", &gpu_job("runner", "default", 1, 600))?;
    wait_for_state(&a, "team-a", "runner", Duration::from_secs(30), |s| {
        s == JobState::Running
    })?;
    std::thread::sleep(Duration::from_secs(1));
    let before = by_job(&admin, None)?;
    let runner_before = job_gpu_seconds(&before, "team-a/runner");
    check(runner_before > 0.0, format!("runner: {before:?}"))?;
    up.kill()?;
    std::thread::sleep(Duration::from_secs(2));
    let up = UpProcess::start(dir.path(), port)?;
    let admin = up.client("token-admin");
    let after = by_job(&admin, None)?;
    for job in ["team-a/trainer", "team-b/spender"] {
        check(
            job_gpu_seconds(&after, job) == job_gpu_seconds(&before, job),
            format!("{job} changed across the restart: {before:?} / {after:?}"),
        )?;
    }
    let runner_after = job_gpu_seconds(&after, "team-a/runner");
    check(
        runner_after >= runner_before + 2.0,
        format!("runner: {runner_before} then {runner_after} GPU-seconds"),
    )?;
    let a = up.client("token-a");
    a.delete("team-a", "trainer")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.describe("team-a", "trainer").is_ok() {
        check(Instant::now() < deadline, "trainer was not deleted")?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let deleted = by_job(&a, None)?;
    check(
        job_gpu_seconds(&deleted, "team-a/trainer") == trainer,
        format!("the deleted trainer's usage: {deleted:?}"),
    )?;
    // A month's report sums the same.
    let month = a.usage(&[("period", "month"), ("from", "2000-01-01")])?;
    let month_total: f64 = month.items.iter().map(|i| i.gpu_seconds).sum();
    let day_total: f64 = deleted.items.iter().map(|i| i.gpu_seconds).sum();
    check(
        (month_total - day_total).abs() < 2.0,
        format!("month {month_total} vs days {day_total}"),
    )?;

    // The history store answers for charts, walled off the same way.
    let series = |token: &str, query: &str| -> Result<(u16, Value), Failed> {
        let (status, body) = raw(
            "GET",
            &format!("{}/api/v1/series?{query}", up.url),
            Some(token),
            None,
        )?;
        Ok((status, json(&body)?))
    };
    let (status, gpus) = series("token-a", "kind=gpu")?;
    check(
        status == 200 && gpus["series"].as_array().is_some_and(|s| s.len() == 2),
        format!("GPU series: {status} {gpus}"),
    )?;
    let (status, _) = series("token-a", "kind=replica&namespace=team-b")?;
    check(
        status == 403,
        format!("team-a reading team-b's replicas: {status}"),
    )?;
    let (status, mine) = series("token-a", "kind=replica")?;
    check(
        status == 200
            && mine["series"].as_array().is_some_and(|s| {
                s.iter()
                    .all(|x| x["key"].as_str().is_some_and(|k| k.starts_with("team-a/")))
            }),
        format!("team-a's replicas: {status} {mine}"),
    )?;
    let (status, body) = series("token-a", "kind=nope")?;
    check(status == 400, format!("a bad kind: {status} {body}"))?;
    // The runner's replica outlived one server; it must not outlive the test.
    a.delete("team-a", "runner")?;
    let deadline = Instant::now() + Duration::from_secs(40);
    while a.describe("team-a", "runner").is_ok() {
        check(Instant::now() < deadline, "runner was not deleted")?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
