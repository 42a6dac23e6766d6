//! End-to-end tests: the real server in-process on an ephemeral port with a temporary data
//! directory, real replica processes, the blocking API client the CLI uses, and the CLI's
//! remote, up and quickstart code (from the `corral_cli` library).
//!
//! A custom harness (libtest-mimic), because the executor starts every replica under the
//! shim `<current executable> shim <dir>`: invoked that way, this binary is the shim.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use corral_cli::{doctor, manifests, plan, quickstart, remote, up};
use corral_local::cluster::JobState;
use corral_local::{ClusterConfig, ClusterFileConfig};
use corral_server::api_client::{Client, LogRequest};
use corral_server::{Server, ServerOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

type TestResult = Result<(), Failed>;

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let _program = argv.next();
    let rest: Vec<_> = argv.collect();
    if rest.first().is_some_and(|a| a == "shim") {
        std::process::exit(corral_local::shim::run(rest.into_iter().skip(1)));
    }
    let args = Arguments::from_args();
    let tests = vec![
        Trial::test(
            "quickstart_job_with_4_replicas_succeeds",
            quickstart_job_with_4_replicas_succeeds,
        ),
        Trial::test("tokens_keep_namespaces_apart", tokens_keep_namespaces_apart),
        Trial::test(
            "malformed_input_is_400_with_field_paths",
            malformed_input_is_400_with_field_paths,
        ),
        Trial::test("huge_body_is_413_with_json", huge_body_is_413_with_json),
        Trial::test(
            "metrics_pass_promtool_in_both_formats",
            metrics_pass_promtool_in_both_formats,
        ),
        Trial::test("openapi_lists_every_route", openapi_lists_every_route),
        Trial::test(
            "logs_follow_every_incarnation",
            logs_follow_every_incarnation,
        ),
        Trial::test(
            "validate_and_submit_agree_on_bad_manifests",
            validate_and_submit_agree_on_bad_manifests,
        ),
        Trial::test(
            "delete_all_and_selector_ask_first",
            delete_all_and_selector_ask_first,
        ),
        Trial::test(
            "suspend_resume_delete_and_views",
            suspend_resume_delete_and_views,
        ),
        Trial::test(
            "unknown_job_and_route_are_json_404",
            unknown_job_and_route_are_json_404,
        ),
        Trial::test("cli_tables_and_up_options", cli_tables_and_up_options),
        Trial::test(
            "concurrent_submissions_are_each_stored_once",
            concurrent_submissions_are_each_stored_once,
        ),
        Trial::test(
            "gpu_type_names_capacity_warnings_doctor_and_plan",
            gpu_type_names_capacity_warnings_doctor_and_plan,
        ),
        Trial::test("api_bench_smoke", api_bench_smoke),
        Trial::test(
            "what_kubernetes_accepts_but_is_not_honoured_is_a_warning",
            what_kubernetes_accepts_but_is_not_honoured_is_a_warning,
        ),
        Trial::test(
            "code_snapshots_run_as_submitted_and_go_with_the_job",
            code_snapshots_run_as_submitted_and_go_with_the_job,
        ),
        Trial::test(
            "the_servers_environment_stays_out_of_replicas",
            the_servers_environment_stays_out_of_replicas,
        ),
    ];
    libtest_mimic::run(&args, tests).exit_code()
}

fn check(cond: bool, what: impl Into<String>) -> TestResult {
    if cond {
        Ok(())
    } else {
        Err(what.into().into())
    }
}

/// A server on a free port with a temporary data directory.
struct TestCluster {
    server: Server,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    fn start(config_yaml: &str) -> Result<TestCluster, Failed> {
        let dir = tempfile::tempdir()?;
        let mut cluster = ClusterConfig::new(dir.path().join("data"));
        cluster.file = ClusterFileConfig::parse(config_yaml).map_err(|e| e.to_string())?;
        let mut options = ServerOptions::new(cluster);
        options.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        options.tick_interval = Duration::from_millis(100);
        let server = Server::start(options)?;
        Ok(TestCluster { server, _dir: dir })
    }

    fn client(&self, token: Option<&str>) -> Client {
        Client::new(&self.server.url(), token)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// `<data>/code`: the code snapshots.
    fn code_dir(&self) -> PathBuf {
        self._dir.path().join("data/code")
    }
}

/// A raw HTTP call: status and body.
fn raw(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<(u16, String), Failed> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let auth = token.map(|t| format!("Bearer {t}"));
    let response = match (method, body) {
        ("POST", Some(b)) => {
            let mut r = agent.post(url).header("Content-Type", "application/yaml");
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send(b)
        }
        ("POST", None) => {
            let mut r = agent.post(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send_empty()
        }
        ("DELETE", _) => {
            let mut r = agent.delete(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
        _ => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
    };
    let mut response = response?;
    let status = response.status().as_u16();
    let mut text = String::new();
    response.body_mut().as_reader().read_to_string(&mut text)?;
    Ok((status, text))
}

/// Sends only the request line and headers of a POST that announces `length` bytes, and
/// reads the answer (a server must refuse before reading such a body).
fn raw_headers_only(
    addr: std::net::SocketAddr,
    path: &str,
    length: usize,
) -> Result<(u16, String), Failed> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/yaml\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or(format!("no status in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn json(text: &str) -> Result<Value, Failed> {
    serde_json::from_str(text).map_err(|e| format!("not JSON ({e}): {text}").into())
}

fn error_code(text: &str) -> String {
    json(text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/code")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn wait_for_state(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    done: impl Fn(JobState) -> bool,
) -> Result<JobState, Failed> {
    let deadline = Instant::now() + timeout;
    loop {
        let d = client.describe(ns, name)?;
        if done(d.summary.state) {
            return Ok(d.summary.state);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "job {ns}/{name} is still {} after {timeout:?}:\n{}",
                d.summary.state,
                remote::describe_text(&d)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn quickstart_job(name: &str, workers: u32, dir: &Path) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: pytorch
  replicas:
    worker:
      count: {workers}
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi}}
      template:
        command: [python3, train.py]
        workingDir: {dir:?}
        env: [{{name: QUICKSTART_STEPS, value: \"120\"}}]
  runPolicy: {{backoffLimit: 0}}
",
        dir = dir.display().to_string()
    )
}

/// A job that never starts (suspended), for tests that need one stored.
fn parked_job(name: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [sleep, \"30\"]}}
  runPolicy: {{suspend: true}}
"
    )
}

fn quickstart_job_with_4_replicas_succeeds() -> TestResult {
    // The replicas run the quickstart's train.py.
    if !common::prerequisite(common::python3_available(), "python3 is not installed") {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("train.py"), quickstart::TRAIN_PY)?;
    let client = c.client(None);
    let submitted = client.submit("default", &quickstart_job("qs", 4, work.path()))?;
    check(
        submitted.len() == 1 && submitted[0].name == "qs",
        format!("{submitted:?}"),
    )?;

    // Following the log of rank 0 streams until the job ends.
    let mut followed = Vec::new();
    let follow = LogRequest {
        replica: Some("worker-0".into()),
        follow: true,
        ..LogRequest::default()
    };
    client.logs("default", "qs", &follow, &mut followed)?;

    let state = wait_for_state(
        &client,
        "default",
        "qs",
        Duration::from_secs(120),
        JobState::is_finished,
    )?;
    let d = client.describe("default", "qs")?;
    check(
        state == JobState::Succeeded,
        format!("the job {state}:\n{}", remote::describe_text(&d)),
    )?;
    check(d.summary.replicas_total == 4, format!("{:?}", d.summary))?;

    let followed = String::from_utf8_lossy(&followed);
    check(
        followed.contains("RESULT ok"),
        format!("the followed log has no RESULT ok line:\n{followed}"),
    )?;
    let mut buf = Vec::new();
    client.logs(
        "default",
        "qs",
        &LogRequest {
            role: Some("worker".into()),
            index: Some(3),
            ..LogRequest::default()
        },
        &mut buf,
    )?;
    let log3 = String::from_utf8_lossy(&buf);
    check(
        log3.contains("[rank 3] done"),
        format!("worker-3 log:\n{log3}"),
    )?;

    let metrics = client.metrics()?;
    check(
        metrics.contains("corral_jobs{queue=\"default\",state=\"Succeeded\"} 1"),
        format!("metrics:\n{metrics}"),
    )?;
    Ok(())
}

const TOKENS: &str = "
apiVersion: corral.dev/v1alpha1
kind: CorralConfig
tokens:
  - {token: token-a, namespace: team-a}
  - {token: token-b, namespace: team-b}
  - {token: token-admin}
";

fn tokens_keep_namespaces_apart() -> TestResult {
    let c = TestCluster::start(TOKENS)?;
    let b = c.client(Some("token-b"));
    b.submit("team-b", &parked_job("secret"))?;
    let a = c.client(Some("token-a"));
    a.submit("team-a", &parked_job("mine"))?;
    // With no -n, the CLI works in the token's namespace.
    let given = remote::NamespaceArgs::default();
    check(
        given.given().is_some() || given.resolve(&a) == "team-a",
        "the token's namespace is the default one",
    )?;

    // Team A cannot read, list, describe, log, suspend or delete team B's jobs, and cannot tell
    // an existing job from a missing one.
    let job = c.url("/api/v1/namespaces/team-b/trainingjobs/secret");
    let missing = c.url("/api/v1/namespaces/team-b/trainingjobs/no-such-job");
    for (method, url) in [
        ("GET", job.clone()),
        ("GET", format!("{job}/describe")),
        ("GET", format!("{job}/logs")),
        ("POST", format!("{job}/suspend")),
        ("DELETE", job.clone()),
        ("GET", c.url("/api/v1/namespaces/team-b/trainingjobs")),
    ] {
        let (status, body) = raw(method, &url, Some("token-a"), None)?;
        check(
            status == 403 && error_code(&body) == "Forbidden",
            format!("{method} {url}: {status} {body}"),
        )?;
        let other = url.replace("/secret", "/no-such-job");
        if other != url {
            let (s2, body2) = raw(method, &other, Some("token-a"), None)?;
            check(
                s2 == status && body2 == body,
                format!("{method}: existing and missing jobs differ: {body} / {body2}"),
            )?;
        }
    }
    let _ = missing;
    let (status, body) = raw(
        "POST",
        &c.url("/api/v1/namespaces/team-b/trainingjobs"),
        Some("token-a"),
        Some(parked_job("sneaky").as_bytes()),
    )?;
    check(
        status == 403,
        format!("submit into team-b with token-a: {status} {body}"),
    )?;

    // A document naming another namespace, sent to one's own, is refused too.
    let smuggled = parked_job("smuggled").replace(
        "metadata: {name: smuggled}",
        "metadata: {name: smuggled, namespace: team-b}",
    );
    let err = a
        .submit("team-a", &smuggled)
        .err()
        .ok_or("a job for team-b was accepted from token-a")?;
    check(
        err.status() == Some(400) || err.status() == Some(403),
        format!("{err}"),
    )?;

    // Listing everything shows only one's own namespace.
    let all = a.list(None)?;
    check(
        all.iter().all(|j| j.namespace == "team-a") && all.len() == 1,
        format!("{all:?}"),
    )?;
    // B and the admin token see B's job; B's job is still there.
    check(
        b.get("team-b", "secret").is_ok(),
        "team-b cannot read its own job",
    )?;
    let admin = c.client(Some("token-admin"));
    check(
        admin.list(None)?.len() == 2,
        "the admin token does not see both jobs",
    )?;
    check(
        b.list(Some("team-b"))?.len() == 1,
        "team-b's job disappeared",
    )?;

    // /metrics: a token is needed, and per-replica series (which name jobs) are shown to
    // their namespace's token and the admin token only.
    b.submit(
        "team-b",
        &parked_job("busy").replace("  runPolicy: {suspend: true}\n", ""),
    )?;
    wait_for_state(&b, "team-b", "busy", Duration::from_secs(30), |s| {
        s == JobState::Running
    })?;
    let busy = "job=\"busy\"";
    let (status, body) = raw("GET", &c.url("/metrics"), None, None)?;
    check(
        status == 401,
        format!("/metrics without a token: {status} {body}"),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = raw("GET", &c.url("/metrics"), Some("token-b"), None)?;
        check(status == 200, format!("/metrics with token-b: {status}"))?;
        if text.contains(busy) {
            break;
        }
        check(
            Instant::now() < deadline,
            format!("team-b's replica is not in /metrics for token-b:\n{text}"),
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, text) = raw("GET", &c.url("/metrics"), Some("token-a"), None)?;
    check(
        status == 200 && !text.contains(busy) && text.contains("corral_jobs{"),
        format!("/metrics for token-a shows team-b's job or no cluster gauges:\n{text}"),
    )?;
    let (_, text) = raw("GET", &c.url("/metrics"), Some("token-admin"), None)?;
    check(
        text.contains(busy),
        "the admin token does not see team-b's replica",
    )?;
    b.delete("team-b", "busy")?;

    // No token, or an unknown one: 401.
    let (status, body) = raw(
        "GET",
        &c.url("/api/v1/namespaces/team-a/trainingjobs"),
        None,
        None,
    )?;
    check(
        status == 401 && error_code(&body) == "Unauthorized",
        format!("{status} {body}"),
    )?;
    let (status, _) = raw(
        "GET",
        &c.url("/api/v1/namespaces/team-a/trainingjobs"),
        Some("nope"),
        None,
    )?;
    check(status == 401, format!("unknown token: {status}"))?;
    // The CLI shows the problem and the fix.
    let err = c
        .client(None)
        .list(Some("team-a"))
        .err()
        .ok_or("listing without a token worked")?;
    check(err.to_string().contains("--token"), err.to_string())?;
    Ok(())
}

fn malformed_input_is_400_with_field_paths() -> TestResult {
    let c = TestCluster::start("")?;
    let url = c.url("/api/v1/namespaces/default/trainingjobs");
    let typo = "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: typo}
spec:
  framework: pytorch
  replicas:
    wokrer:
      count: 2
      template: {command: [python3, x.py]}
";
    let (status, body) = raw("POST", &url, None, Some(typo.as_bytes()))?;
    check(status == 400, format!("{status} {body}"))?;
    let v = json(&body)?;
    check(
        v.pointer("/error/code") == Some(&Value::from("Invalid")),
        body.clone(),
    )?;
    let fields = v
        .pointer("/error/fields")
        .and_then(Value::as_array)
        .ok_or("no fields")?;
    check(
        fields.iter().any(|f| {
            f.get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| p.starts_with("spec.replicas"))
        }),
        format!("no spec.replicas field error: {body}"),
    )?;
    // The client prints `path: message` lines.
    let err = c
        .client(None)
        .submit("default", typo)
        .err()
        .ok_or("accepted")?;
    check(
        err.to_string()
            .lines()
            .any(|l| l.trim_start().starts_with("spec.replicas")),
        err.to_string(),
    )?;

    for bad in [
        "spec: [unclosed",
        "",
        "kind: TrainingJob\n",
        "\u{0}\u{1}binary",
    ] {
        let (status, body) = raw("POST", &url, None, Some(bad.as_bytes()))?;
        check(
            status == 400 && error_code(&body) == "Invalid",
            format!("{bad:?}: {status} {body}"),
        )?;
    }
    let (status, body) = raw("POST", &url, None, Some(&[0xff, 0xfe, 0x00]))?;
    check(status == 400, format!("not UTF-8: {status} {body}"))?;
    let (status, body) = raw(
        "GET",
        &c.url("/api/v1/namespaces/Not_A_Label/trainingjobs"),
        None,
        None,
    )?;
    check(status == 200 || status == 400, format!("{status} {body}"))?;
    Ok(())
}

fn huge_body_is_413_with_json() -> TestResult {
    let c = TestCluster::start("")?;
    let mut huge = String::from("# padding\n");
    while huge.len() <= corral_server::DEFAULT_BODY_LIMIT + 1024 {
        huge.push_str("# aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
    }
    // Announced by Content-Length: refused before the body is read.
    let (status, body) = raw_headers_only(
        c.server.addr(),
        "/api/v1/namespaces/default/trainingjobs",
        huge.len(),
    )?;
    check(status == 413, format!("{status} {body}"))?;
    check(error_code(&body) == "PayloadTooLarge", body.clone())?;
    let err = c
        .client(None)
        .submit("default", &huge)
        .err()
        .ok_or("accepted")?;
    check(
        err.status() == Some(413) && err.to_string().contains("larger than"),
        err.to_string(),
    )?;
    Ok(())
}

/// A GET with an `Accept` header: the response's content type and body.
fn scrape(url: &str, accept: &str) -> Result<(String, String), Failed> {
    let mut response = ureq::get(url).header("Accept", accept).call()?;
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut text = String::new();
    response.body_mut().as_reader().read_to_string(&mut text)?;
    Ok((content_type, text))
}

/// The series of an exposition without their values: what must come in the same order on
/// every scrape.
fn series_order(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_string()))
        .collect()
}

const METRICS_CLUSTER: &str = "apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 2, gpuType: FAKE-GPU}
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
  cohort: research
  quotas:
    - {nodePool: fake, gpu: 2, cpu: '4', borrowingLimit: {gpu: 1}}
---
apiVersion: corral.dev/v1alpha1
kind: Queue
metadata: {name: team-b}
spec:
  cohort: research
  namespaces: [team-b]
  quotas:
    - {nodePool: fake, gpu: 0}
";

/// A live server with queues, a node with GPUs, a running and a suspended job: its
/// /metrics in both formats, checked by promtool, in the same order on every scrape.
fn metrics_pass_promtool_in_both_formats() -> TestResult {
    let c = TestCluster::start(METRICS_CLUSTER)?;
    let client = c.client(None);
    client.submit("default", &parked_job("parked"))?;
    client.submit(
        "default",
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: sleeper}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      resources: {cpu: 100m, memory: 64Mi, gpu: 1}
      template: {command: [sleep, '60']}
",
    )?;
    wait_for_state(&client, "default", "parked", Duration::from_secs(10), |s| {
        s == JobState::Suspended
    })?;
    wait_for_state(
        &client,
        "default",
        "sleeper",
        Duration::from_secs(20),
        |s| s == JobState::Running,
    )?;
    // The metrics are as of the last tick.
    std::thread::sleep(Duration::from_millis(300));

    let url = c.url("/metrics");
    let (content_type, text) = scrape(&url, "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")?;
    check(
        content_type.starts_with("text/plain; version=0.0.4"),
        format!("text scrape answered {content_type}"),
    )?;
    for needle in [
        "# TYPE corral_jobs gauge",
        "corral_jobs{queue=\"default\",state=\"Suspended\"} 1",
        "corral_jobs{queue=\"default\",state=\"Running\"} 1",
        "corral_queue_gpus_in_use{queue=\"default\"} 1",
        "# TYPE corral_jobs_submitted_total counter",
        "corral_jobs_submitted_total 2",
        "corral_queue_nominal_quota{queue=\"default\",pool=\"fake\",resource=\"gpu\"} 2",
        "corral_queue_nominal_quota{queue=\"default\",pool=\"fake\",resource=\"cpu\"} 4",
        "corral_queue_borrowing_limit{queue=\"default\",pool=\"fake\",resource=\"gpu\"} 1",
        "corral_queue_resource_usage{queue=\"default\",pool=\"fake\",resource=\"gpu\"} 1",
        "corral_queue_nominal_quota{queue=\"team-b\",pool=\"fake\",resource=\"gpu\"} 0",
        "corral_gpus 2",
        "corral_replica_gpus{namespace=\"default\",job=\"sleeper\",replica=\"sleeper-worker-0\"} 1",
    ] {
        check(
            text.contains(needle),
            format!("no `{needle}` in /metrics:\n{text}"),
        )?;
    }
    check(!text.contains("# EOF"), "the text format has no # EOF")?;
    // Two scrapes: the same series in the same order (values may move).
    let (_, again) = scrape(&url, "text/plain")?;
    check(
        series_order(&text) == series_order(&again),
        format!("the series moved between two scrapes:\n{text}\n---\n{again}"),
    )?;

    // What Prometheus 2.x sends: OpenMetrics preferred.
    let (om_type, om) = scrape(
        &url,
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    )?;
    check(
        om_type.starts_with("application/openmetrics-text; version=1.0.0"),
        format!("OpenMetrics scrape answered {om_type}"),
    )?;
    check(
        om.ends_with("# EOF\n"),
        format!("no # EOF at the end:\n{om}"),
    )?;
    check(
        om.contains("# TYPE corral_jobs_submitted counter\ncorral_jobs_submitted_total 2\n"),
        format!("OpenMetrics counter family:\n{om}"),
    )?;
    // Every OpenMetrics sample belongs to the family declared just before it.
    let mut family = String::new();
    let mut counter = false;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            family = parts.next().unwrap_or_default().to_string();
            counter = parts.next() == Some("counter");
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let want = if counter {
                format!("{family}_total")
            } else {
                family.clone()
            };
            check(name == want, format!("sample {line} in family {family}"))?;
        }
    }
    check(
        series_order(&om) == series_order(&text),
        "both formats list the same series in the same order",
    )?;

    let Some((code, said)) = corral_server::metrics::promtool_check(&text)? else {
        let required = std::env::var("CORRAL_REQUIRE_PROMTOOL").as_deref() == Ok("1");
        check(
            !required,
            "promtool is not installed (apt-get install prometheus); CORRAL_REQUIRE_PROMTOOL=1 requires it",
        )?;
        common::prerequisite(
            false,
            "promtool is not installed (apt-get install prometheus)",
        );
        return Ok(());
    };
    check(
        code == 0,
        format!("promtool check metrics exited {code}: {said}\n{text}"),
    )?;
    Ok(())
}

/// A replica that fails twice and succeeds on its third run: `logs -f` started at submit
/// shows all three runs in order, each introduced by its mark; `--previous` shows the
/// second; `--tail 1` the last line of the third.
fn logs_follow_every_incarnation() -> TestResult {
    let c = TestCluster::start("")?;
    let client = c.client(None);
    let dir = tempfile::tempdir()?;
    let job = format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: thrice}}
spec:
  framework: generic
  runPolicy: {{backoffLimit: 2}}
  replicas:
    worker:
      count: 1
      restartPolicy: OnFailure
      resources: {{cpu: 100m, memory: 64Mi}}
      template:
        workingDir: {dir:?}
        command: [sh, -c, 'n=$(( $(cat n 2>/dev/null || echo 0) + 1 )); echo $n > n; echo \"run $n starts\"; sleep 1; echo \"run $n ends\"; test $n -ge 3']
",
        dir = dir.path().display().to_string()
    );
    client.submit("default", &job)?;
    let mut followed = Vec::new();
    let follow = LogRequest {
        replica: Some("thrice-worker-0".into()),
        follow: true,
        ..LogRequest::default()
    };
    client.logs("default", "thrice", &follow, &mut followed)?;
    let followed = String::from_utf8_lossy(&followed).into_owned();
    let state = wait_for_state(&client, "default", "thrice", Duration::from_secs(60), |s| {
        s.is_finished()
    })?;
    check(
        state == JobState::Succeeded,
        format!("{state}:\n{followed}"),
    )?;
    let d = client.describe("default", "thrice")?;
    check(
        d.replicas.iter().map(|r| r.restarts).collect::<Vec<_>>() == [2],
        format!(
            "RESTARTS after two restarts:\n{}",
            remote::describe_text(&d)
        ),
    )?;
    let mut at = 0;
    for needle in [
        "==> thrice-worker-0: incarnation 1 (first run",
        "run 1 starts\nrun 1 ends\n",
        "==> thrice-worker-0: incarnation 2 (after 1 restart",
        "run 2 starts\nrun 2 ends\n",
        "==> thrice-worker-0: incarnation 3 (after 2 restarts",
        "run 3 starts\nrun 3 ends\n",
    ] {
        let Some(i) = followed[at..].find(needle) else {
            return Err(
                format!("no `{needle}` after byte {at} of the followed log:\n{followed}").into(),
            );
        };
        at += i + needle.len();
    }

    let mut previous = Vec::new();
    let request = LogRequest {
        previous: true,
        ..LogRequest::default()
    };
    client.logs("default", "thrice", &request, &mut previous)?;
    check(
        previous == b"run 2 starts\nrun 2 ends\n",
        format!("--previous: {:?}", String::from_utf8_lossy(&previous)),
    )?;
    let mut tail = Vec::new();
    let request = LogRequest {
        replica: Some("worker-0".into()),
        tail: Some(1),
        ..LogRequest::default()
    };
    client.logs("default", "thrice", &request, &mut tail)?;
    check(
        tail == b"run 3 ends\n",
        format!("--tail 1: {:?}", String::from_utf8_lossy(&tail)),
    )?;
    let mut stamped = Vec::new();
    let request = LogRequest {
        timestamps: true,
        ..LogRequest::default()
    };
    client.logs("default", "thrice", &request, &mut stamped)?;
    let stamped = String::from_utf8_lossy(&stamped).into_owned();
    let lines: Vec<&str> = stamped.lines().collect();
    check(
        lines.len() == 2
            && lines.iter().all(|l| {
                l.split_once(' ')
                    .is_some_and(|(t, _)| t.parse::<jiff::Timestamp>().is_ok())
            })
            && lines[1].ends_with(" run 3 ends"),
        format!("--timestamps: {stamped:?}"),
    )?;
    // Nothing arrived in the last second of a job that ended before it.
    std::thread::sleep(Duration::from_millis(1100));
    let mut recent = Vec::new();
    let request = LogRequest {
        since_seconds: Some(1),
        ..LogRequest::default()
    };
    client.logs("default", "thrice", &request, &mut recent)?;
    check(
        recent.is_empty(),
        format!("--since 1s: {:?}", String::from_utf8_lossy(&recent)),
    )?;
    Ok(())
}

/// Every manifest of the shared table: `submit` refuses it with every problem at once, each
/// with its field path; `validate` against the same server prints exactly what `submit`
/// prints; neither stores anything. Offline, `validate` says which checks it could not run.
fn validate_and_submit_agree_on_bad_manifests() -> TestResult {
    use common::bad_manifests::{CASES, CLUSTER};
    use corral_server::api_client::ClientError;
    let c = TestCluster::start(CLUSTER)?;
    let client = c.client(None);
    let dir = tempfile::tempdir()?;
    let ns = remote::NamespaceArgs::default();
    let mut messages = String::new();
    for case in CASES {
        let file = dir
            .path()
            .join(format!("{}.yaml", case.name.replace(' ', "-")));
        std::fs::write(&file, case.yaml)?;
        let file = file.display().to_string();

        let err = match client.submit("default", case.yaml) {
            Ok(r) => return Err(format!("{}: submit accepted it: {r:?}", case.name).into()),
            Err(e) => e,
        };
        let ClientError::Api { status, error } = &err else {
            return Err(format!("{}: {err}", case.name).into());
        };
        check(*status == 400, format!("{}: status {status}", case.name))?;
        messages.push_str(&format!("## {}\n{err}\n\n", case.name));
        let mut got: Vec<String> = error
            .fields
            .iter()
            .map(|f| match f.document {
                Some(d) if case.paths.iter().any(|p| p.contains(':')) => format!("{d}:{}", f.path),
                _ => f.path.clone(),
            })
            .collect();
        got.sort();
        let mut want: Vec<String> = case.paths.iter().map(|p| p.to_string()).collect();
        want.sort();
        check(
            got == want,
            format!("{}: submit named {got:?}, not {want:?}:\n{err}", case.name),
        )?;

        let report =
            manifests::validate_report(std::slice::from_ref(&file), true, Some(&client), &ns);
        check(report.failed, format!("{}: validate passed it", case.name))?;
        check(
            report.err == format!("{file}: {err}\n"),
            format!(
                "{}: validate and submit differ:\nvalidate: {}\nsubmit:   {file}: {err}",
                case.name, report.err
            ),
        )?;
    }
    check(
        client.list(Some("default"))?.is_empty(),
        "a refused submission stored nothing",
    )?;
    insta::assert_snapshot!("bad_manifests", messages);

    // Offline: what the files alone show, and a note on what could not be checked.
    let file = dir.path().join("offline.yaml");
    std::fs::write(&file, CASES[0].yaml)?;
    let report = manifests::validate_report(&[file.display().to_string()], false, None, &ns);
    check(!report.failed, format!("offline: {report:?}"))?;
    check(
        report.err.contains("note: checked offline (--offline), so these checks did not run: that the priority class and queue exist"),
        format!("offline note: {}", report.err),
    )?;
    Ok(())
}

/// `delete --all` and `-l` act on what matches, and ask before more than one job goes: with
/// no terminal to ask on, nothing is deleted unless `--yes` is given.
fn delete_all_and_selector_ask_first() -> TestResult {
    let c = TestCluster::start("")?;
    let client = c.client(None);
    for (name, team) in [("a1", "nlp"), ("a2", "nlp"), ("b1", "vision")] {
        let job = parked_job(name).replace(
            &format!("metadata: {{name: {name}}}"),
            &format!("metadata: {{name: {name}, labels: {{team: {team}}}}}"),
        );
        client.submit("default", &job)?;
    }
    let args = |all: bool, selector: Option<&str>, yes: bool| remote::JobArgs {
        names: Vec::new(),
        all,
        selector: selector.map(str::to_string),
        yes,
        namespace: remote::NamespaceArgs::default(),
        conn: remote::ConnArgs {
            server: Some(c.server.url()),
            token: None,
        },
    };
    let names = |client: &Client| -> Result<Vec<String>, Failed> {
        Ok(client
            .list(Some("default"))?
            .into_iter()
            .filter(|j| j.state != JobState::Deleting)
            .map(|j| j.name)
            .collect())
    };
    let asked = std::cell::RefCell::new(Vec::new());
    let say = |answer: bool| {
        let asked = &asked;
        move |q: &str| {
            asked.borrow_mut().push(q.to_string());
            Ok(answer)
        }
    };
    // Two would go: the user is asked, says no, none goes.
    let code = remote::delete_with(&args(false, Some("team=nlp"), false), &say(false));
    check(code != ExitCode::SUCCESS, "deleted against the answer")?;
    check(
        asked.borrow().as_slice() == ["delete 2 jobs in namespace default: a1, a2?"],
        format!("asked {:?}", asked.borrow()),
    )?;
    check(names(&client)? == ["a1", "a2", "b1"], "nothing was deleted")?;
    // One matches: no question.
    let code = remote::delete_with(&args(false, Some("team!=nlp"), false), &say(false));
    check(code == ExitCode::SUCCESS, "one job needs no confirmation")?;
    check(asked.borrow().len() == 1, "not asked for one job")?;
    check(names(&client)? == ["a1", "a2"], "b1 was deleted")?;
    // A job still stopping after its delete (it ignores SIGTERM for 10 s; the default grace
    // is 30 s) is on its way out: bulk verbs pass it by rather than fail on it (suspending
    // it is a conflict). CI once failed here: `--all` listed b1 while it went.
    let stubborn = parked_job("c1")
        .replace("  runPolicy: {suspend: true}\n", "")
        .replace(
            "template: {command: [sleep, \"30\"]}",
            "template: {command: [sh, -c, \"trap '' TERM; sleep 10\"]}",
        );
    client.submit("default", &stubborn)?;
    wait_for_state(&client, "default", "c1", Duration::from_secs(20), |s| {
        s == JobState::Running
    })?;
    client.delete("default", "c1")?;
    let state = client.describe("default", "c1")?.summary.state;
    check(state == JobState::Deleting, format!("c1 is {state}"))?;
    let code = remote::run_suspend(&args(true, None, true));
    check(
        code == ExitCode::SUCCESS,
        "suspend --all passes the job being deleted",
    )?;
    let code = remote::delete_with(&args(true, None, true), &say(false));
    check(code == ExitCode::SUCCESS, "--all --yes")?;
    check(names(&client)?.is_empty(), "all were deleted")?;
    Ok(())
}

fn openapi_lists_every_route() -> TestResult {
    let c = TestCluster::start("")?;
    let (status, body) = raw("GET", &c.url("/openapi.json"), None, None)?;
    check(status == 200, format!("{status}"))?;
    let doc = json(&body)?;
    check(
        doc.get("openapi")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("3.")),
        "not OpenAPI 3",
    )?;
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .ok_or("no paths")?;
    let mut documented = 0;
    for (path, ops) in paths {
        for method in ops.as_object().ok_or("bad path item")?.keys() {
            documented += 1;
            check(
                corral_server::openapi::ROUTES.contains(&(method.as_str(), path.as_str())),
                format!("{method} {path} is documented but not in ROUTES"),
            )?;
        }
    }
    check(
        documented == corral_server::openapi::ROUTES.len(),
        "ROUTES and the document differ",
    )?;
    // Every route is served (no fallback 404 "no route", no 405).
    for (method, path) in corral_server::openapi::ROUTES {
        let url = c.url(
            &path
                .replace("{namespace}", "default")
                .replace("{name}", "nothing"),
        );
        let body = (*method == "post").then_some(&b"x: 1"[..]);
        let (status, text) = raw(&method.to_uppercase(), &url, None, body)?;
        check(
            status != 405 && !text.contains("no route"),
            format!("{method} {path}: {status} {text}"),
        )?;
    }
    // Every $ref resolves.
    let text = body.as_str();
    for part in text.split("\"$ref\":\"#/").skip(1) {
        let target = part.split('"').next().unwrap_or_default();
        check(
            doc.pointer(&format!("/{target}")).is_some(),
            format!("dangling $ref {target}"),
        )?;
    }
    // Every integer has a documented range.
    fn unranged(v: &Value, at: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if m.get("type").and_then(Value::as_str) == Some("integer")
                    && !(m.contains_key("minimum") && m.contains_key("maximum"))
                {
                    out.push(at.to_string());
                }
                for (k, c) in m {
                    unranged(c, &format!("{at}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    unranged(c, &format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut missing = Vec::new();
    unranged(&doc, "", &mut missing);
    check(
        missing.is_empty(),
        format!("integers without minimum and maximum: {missing:?}"),
    )?;
    let quota = doc.pointer("/components/schemas/QuotaLimits/description");
    check(
        quota
            .and_then(Value::as_str)
            .is_some_and(|d| d.contains("absent is unlimited")),
        "unlimited quotas are absent values",
    )?;
    // A schema linter: openapi-spec-validator (pip), as CI installs it.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, &body)?;
    let lint = std::process::Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&path)
        .output();
    let lint = match lint {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") => None,
        Ok(o) => Some(o),
        Err(_) => None,
    };
    let Some(lint) = lint else {
        let required = std::env::var("CORRAL_REQUIRE_OPENAPI_LINT").as_deref() == Ok("1");
        check(
            !required,
            "openapi-spec-validator is not installed (pip install openapi-spec-validator)",
        )?;
        common::prerequisite(
            false,
            "openapi-spec-validator is not installed (pip install openapi-spec-validator)",
        );
        return Ok(());
    };
    check(
        lint.status.success(),
        format!(
            "openapi-spec-validator: {}{}",
            String::from_utf8_lossy(&lint.stdout),
            String::from_utf8_lossy(&lint.stderr)
        ),
    )?;
    Ok(())
}

fn suspend_resume_delete_and_views() -> TestResult {
    let c = TestCluster::start("")?;
    let client = c.client(None);
    client.submit("default", &parked_job("p1"))?;
    wait_for_state(&client, "default", "p1", Duration::from_secs(10), |s| {
        s == JobState::Suspended
    })?;
    let err = client
        .submit("default", &parked_job("p1"))
        .err()
        .ok_or("submitted twice")?;
    check(err.status() == Some(409), err.to_string())?;

    client.resume("default", "p1")?;
    wait_for_state(&client, "default", "p1", Duration::from_secs(20), |s| {
        matches!(s, JobState::Running | JobState::Succeeded)
    })?;
    client.suspend("default", "p1")?;
    wait_for_state(&client, "default", "p1", Duration::from_secs(20), |s| {
        s == JobState::Suspended
    })?;

    let jobs = client.list(Some("default"))?;
    check(jobs.len() == 1 && jobs[0].name == "p1", format!("{jobs:?}"))?;
    let obj = client.get("default", "p1")?;
    check(
        obj.get("kind") == Some(&Value::from("TrainingJob")),
        obj.to_string(),
    )?;
    check(!client.nodes()?.is_empty(), "no nodes")?;
    check(
        client.queues()?.iter().any(|q| q.name == "default"),
        "no default queue",
    )?;
    let _ = client.top()?;

    client.delete("default", "p1")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.describe("default", "p1") {
            Err(e) if e.status() == Some(404) => break,
            Ok(d) if Instant::now() > deadline => {
                return Err(format!(
                    "the deleted job is still there: {}, replicas {:?}",
                    d.summary.state, d.replicas
                )
                .into());
            }
            _ if Instant::now() > deadline => return Err("the deleted job is still there".into()),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    Ok(())
}

/// Concurrent requests are stored together (one transaction per burst): each submission
/// still stands alone. Eight clients submit 40 names each, every name twice, and one
/// submission of two documents whose second is taken: every name is stored once, each
/// duplicate gets 409, and the refused two-document submission stores neither.
fn concurrent_submissions_are_each_stored_once() -> TestResult {
    let c = TestCluster::start("")?;
    let client = c.client(None);
    client.submit("burst", &parked_job("taken"))?;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                for i in 0..40 {
                    // Threads 2k and 2k + 1 submit the same names, so that duplicates race.
                    let name = format!("j-{}-{i}", t / 2);
                    outcomes.push((name.clone(), client.submit("burst", &parked_job(&name))));
                }
                let both = format!(
                    "{}---\n{}",
                    parked_job(&format!("pair-{t}")),
                    parked_job("taken")
                );
                outcomes.push((format!("pair-{t}"), client.submit("burst", &both)));
                outcomes
            })
        })
        .collect();
    let mut accepted = BTreeMap::<String, usize>::new();
    let mut conflicts = 0;
    for t in threads {
        for (name, outcome) in t.join().map_err(|_| "a client thread panicked")? {
            match outcome {
                Ok(items) => {
                    check(items.len() == 1, format!("{name}: {items:?}"))?;
                    *accepted.entry(name).or_default() += 1;
                }
                Err(e) if e.status() == Some(409) => conflicts += 1,
                Err(e) => return Err(format!("{name}: {e}").into()),
            }
        }
    }
    check(
        accepted.values().all(|n| *n == 1),
        format!("a name was accepted twice: {accepted:?}"),
    )?;
    check(
        !accepted.keys().any(|n| n.starts_with("pair-")),
        "a submission with a taken name was stored in part",
    )?;
    // 8 threads x 40 submissions of 4 x 40 distinct names, plus 8 refused pairs.
    check(
        accepted.len() == 160,
        format!("{} names accepted", accepted.len()),
    )?;
    check(conflicts == 168, format!("{conflicts} conflicts"))?;
    let stored: BTreeSet<String> = client
        .list(Some("burst"))?
        .into_iter()
        .map(|s| s.name)
        .collect();
    let expected: BTreeSet<String> = accepted
        .into_keys()
        .chain(std::iter::once("taken".to_string()))
        .collect();
    check(stored == expected, format!("stored {} names", stored.len()))?;
    Ok(())
}

fn unknown_job_and_route_are_json_404() -> TestResult {
    let c = TestCluster::start("")?;
    let (status, body) = raw(
        "GET",
        &c.url("/api/v1/namespaces/default/trainingjobs/ghost"),
        None,
        None,
    )?;
    check(
        status == 404 && error_code(&body) == "NotFound",
        format!("{status} {body}"),
    )?;
    let (status, body) = raw("GET", &c.url("/api/v1/nothing"), None, None)?;
    check(
        status == 404 && error_code(&body) == "NotFound",
        format!("{status} {body}"),
    )?;
    let (status, body) = raw("DELETE", &c.url("/api/v1/queues"), None, None)?;
    check(
        status == 405 && error_code(&body) == "MethodNotAllowed",
        format!("{status} {body}"),
    )?;
    let (status, body) = raw("GET", &c.url("/healthz"), None, None)?;
    check(status == 200, format!("{status} {body}"))?;
    let err = Client::new("http://127.0.0.1:1", None)
        .list(None)
        .err()
        .ok_or("connected to port 1")?;
    check(err.to_string().contains("corral up"), err.to_string())?;
    Ok(())
}

fn cli_tables_and_up_options() -> TestResult {
    let t = remote::table(
        &["NAME", "STATE"],
        &[
            vec!["a-long-name".into(), "Running".into()],
            vec!["b".into(), "Queued".into()],
        ],
    );
    check(
        t == "NAME          STATE\na-long-name   Running\nb             Queued\n",
        t.clone(),
    )?;
    check(remote::bytes(1536) == "1.5Ki", remote::bytes(1536))?;
    let log =
        "[rank 0] step 1/300 loss 5.5\n[rank 0] step 50/300 loss 0.1\nRESULT ok weights=[2.000]\n";
    let (step, result) = quickstart::progress_of(log);
    check(step == Some((50, 300)), format!("{step:?}"))?;
    check(
        result.as_deref() == Some("RESULT ok weights=[2.000]"),
        format!("{result:?}"),
    )?;
    let text = quickstart::job_yaml(4, "python3", Path::new("/tmp/x y"));
    let parsed = corral_api::document::parse_documents(
        &text,
        &corral_api::validate::ValidationContext::default(),
    );
    check(
        parsed.len() == 1 && parsed.iter().all(Result::is_ok),
        format!("{parsed:?}"),
    )?;
    let args = up::UpArgs {
        data_dir: Some(tempfile::tempdir()?.path().join("d")),
        config: None,
        listen: "0.0.0.0:7443".parse()?,
        tick_ms: 200,
    };
    let err = up::options(&args)
        .err()
        .ok_or("listening on 0.0.0.0 without tokens was allowed")?;
    check(err.contains("tokens"), err)?;
    Ok(())
}

fn gpu_job(name: &str, gpus: u32, types: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi, gpu: {gpus}, gpuTypes: [{types}]}}
      template: {{command: [sleep, \"30\"]}}
"
    )
}

/// Issue 16 on a machine shaped like the one it was found on: one GPU that the node
/// override spells as NVML does. Jobs asking for the product label or the alias run; an
/// A100 job is refused saying what exists; a 2-GPU replica is accepted with a warning that
/// says so; `corral doctor` reports every area and who holds the data directory; `corral
/// plan` sees this machine as `corral up` does.
fn gpu_type_names_capacity_warnings_doctor_and_plan() -> TestResult {
    let c = TestCluster::start(
        "kind: CorralConfig\nnode: {gpus: 1, gpuType: NVIDIA H100 80GB HBM3, cpu: \"4\", memory: 8Gi}\n",
    )?;
    let client = c.client(None);
    let nodes = client.nodes()?;
    check(
        nodes[0].gpu_type.as_deref() == Some("NVIDIA-H100-80GB-HBM3"),
        format!("the node's type is canonical: {:?}", nodes[0].gpu_type),
    )?;

    let err = client
        .submit("default", &gpu_job("a100", 1, "A100"))
        .err()
        .ok_or("an A100 job on an H100 machine was accepted")?
        .to_string();
    check(
        err.contains("this cluster has GPU type NVIDIA-H100-80GB-HBM3 (1 per node)"),
        format!("the refusal says what exists: {err}"),
    )?;

    let dir = tempfile::tempdir()?;
    let ns = remote::NamespaceArgs::default();
    let two = dir.path().join("two.yaml");
    std::fs::write(&two, gpu_job("two", 2, "H100"))?;
    let report = manifests::validate_report(&[two.display().to_string()], true, Some(&client), &ns);
    check(
        !report.failed,
        format!("a 2-GPU replica is valid: {report:?}"),
    )?;
    check(
        report.err.contains("warning:")
            && report.err.contains("spec.replicas.worker.resources.gpu: 2 GPUs in one replica, but this cluster has GPU type NVIDIA-H100-80GB-HBM3 (1 per node)"),
        format!("validate warns at once: {}", report.err),
    )?;

    for (name, types) in [("by-label", "NVIDIA-H100-80GB-HBM3"), ("by-alias", "h100")] {
        client.submit("default", &gpu_job(name, 1, types))?;
    }
    wait_for_state(
        &client,
        "default",
        "by-label",
        Duration::from_secs(20),
        |s| s == JobState::Running,
    )?;
    client.delete("default", "by-label")?;
    wait_for_state(
        &client,
        "default",
        "by-alias",
        Duration::from_secs(20),
        |s| s == JobState::Running,
    )?;

    // The server holds its data directory: doctor says who, with the fix.
    let data = c._dir.path().join("data");
    let r = doctor::report(&doctor::DoctorArgs {
        data_dir: Some(data.clone()),
        config: None,
        output: None,
    })?;
    for area in ["gpu", "cgroups", "containers", "ports", "data"] {
        check(
            r.findings.iter().any(|f| f.area == area),
            format!("doctor reports {area}: {}", r.text()),
        )?;
    }
    let held = r
        .findings
        .iter()
        .find(|f| f.area == "data")
        .ok_or("no data finding")?;
    check(
        held.what.contains(&format!("(pid {})", std::process::id())) && held.fix.is_some(),
        format!("doctor names the holder: {held:?}"),
    )?;
    let json = serde_json::to_value(&r)?;
    check(json["allOk"].is_boolean(), format!("{json}"))?;
    check(
        r.text().lines().all(|l| {
            l.starts_with("OK ") || l.starts_with("WARN") || l.trim_start().starts_with("fix:")
        }),
        r.text(),
    )?;

    // plan with no pools: this machine, from the embedded shell's inventory.
    let job = dir.path().join("cpu.yaml");
    std::fs::write(
        &job,
        parked_job("cpu-only").replace("  runPolicy: {suspend: true}\n", ""),
    )?;
    let out = plan::run(&plan::PlanArgs {
        files: &[job.display().to_string()],
        config: None,
        nodes: &[],
        default_nodes: 1,
        node_cpu: 8,
        node_memory_gib: 16,
    })?;
    let inv = corral_local::inventory::inventory();
    let want = if inv.gpus.is_empty() {
        "no GPUs".to_string()
    } else {
        format!("{} x {}", inv.gpus.len(), inv.gpus[0].gpu_type)
    };
    check(
        out.contains(&format!("this machine: {} CPUs", inv.cpus)) && out.contains(&want),
        format!("plan sees this machine as up does ({want}):\n{out}"),
    )?;
    Ok(())
}

fn api_bench_smoke() -> TestResult {
    let options = corral_server::api_bench::ApiBenchOptions {
        server_program: PathBuf::from(env!("CARGO_BIN_EXE_corral")),
        startup_jobs: 1,
        ratio_pairs: 3,
        startup_replicas: 2,
        throughput: false,
        rate: 100,
        duration: Duration::from_millis(500),
        clients: 2,
        list_jobs: 60,
        history_jobs: 3,
    };
    let v = corral_server::api_bench::api_bench(&options)?;
    for (pointer, want) in [
        ("/submit/lost", 0),
        ("/submit/failed", 0),
        ("/list/jobs", 60),
        ("/list_small_namespace/jobs", 10),
        ("/history/jobs", 3),
        ("/startup_with_history/jobs", 3),
        ("/startup_idle_alongside/jobs", 3),
    ] {
        check(
            v.pointer(pointer) == Some(&Value::from(want)),
            v.to_string(),
        )?;
    }
    // The server is a process of its own, measured alone.
    let rss = v
        .pointer("/idle_rss_mb")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    check(rss > 0.0, v.to_string())?;
    let interval: Vec<f64> = v
        .pointer("/startup_history_ratio_90_percent_interval")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    check(
        interval.len() == 2 && 0.0 < interval[0] && interval[0] <= interval[1],
        format!("the history ratio comes with its interval: {v}"),
    )?;
    Ok(())
}

/// Entries of `dir` (none when it does not exist), sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn code_job(name: &str, script: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  runPolicy: {{backoffLimit: 0}}
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi}}
      template: {{command: [/bin/sh, {script}]}}
"
    )
}

fn code_snapshots_run_as_submitted_and_go_with_the_job() -> TestResult {
    const LIMIT: u64 = 64 * 1024;
    let c = TestCluster::start(&format!(
        "kind: CorralConfig\ncodeSnapshots: {{maxBytes: {LIMIT}}}\n"
    ))?;
    let client = c.client(None);
    let work = tempfile::tempdir()?;
    let w = work.path();
    // The job waits until the test has edited the code, then reads it.
    std::fs::write(
        w.join("run.sh"),
        "while [ ! -e \"$HOME/go\" ]; do sleep 0.1; done\n\
         echo \"message=$(cat msg.txt) cwd=$(pwd)\"\n\
         . ./lib/more.sh\n\
         if [ -e secret.txt ]; then echo secret-present; else echo secret-absent; fi\n\
         if echo x > written.txt 2>/dev/null; then echo wrote; else echo read-only; fi\n",
    )?;
    std::fs::create_dir_all(w.join("lib"))?;
    std::fs::write(w.join("lib/more.sh"), "echo more=$(cat msg.txt)\n")?;
    std::fs::write(w.join("msg.txt"), "original\n")?;
    std::fs::write(w.join("secret.txt"), "do not ship\n")?;
    std::fs::write(w.join(".gitignore"), "secret.txt\n")?;

    let up = corral_cli::code_archive::upload(&code_job("snap", "run.sh"), w)?;
    let submitted = client.submit_with_code("default", &up.boundary, &up.body)?;
    check(submitted.len() == 1, format!("{submitted:?}"))?;
    let uid = submitted[0].uid.clone();
    let copy = c.code_dir().join(&uid);
    check(
        entries(&copy) == vec![".gitignore", "lib", "msg.txt", "run.sh"],
        format!("the job's copy holds {:?}", entries(&copy)),
    )?;
    // Edited after submit: the job must not see it.
    std::fs::write(w.join("msg.txt"), "edited\n")?;
    std::fs::write(w.join("lib/more.sh"), "echo more=edited-script\n")?;
    wait_for_state(&client, "default", "snap", Duration::from_secs(60), |s| {
        s == JobState::Running
    })?;
    let d = client.describe("default", "snap")?;
    let replica_dir = d.replicas[0]
        .log_path
        .as_ref()
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
        .ok_or("no log path")?;
    std::fs::write(replica_dir.join("go"), "")?;
    let state = wait_for_state(
        &client,
        "default",
        "snap",
        Duration::from_secs(60),
        JobState::is_finished,
    )?;
    let mut log = Vec::new();
    client.logs("default", "snap", &LogRequest::default(), &mut log)?;
    let log = String::from_utf8_lossy(&log).into_owned();
    check(state == JobState::Succeeded, format!("{state}: {log}"))?;
    check(
        log.contains(&format!("message=original cwd={}", copy.display())),
        format!("runs from its snapshot, as submitted: {log}"),
    )?;
    check(log.contains("more=original"), log.clone())?;
    check(log.contains("secret-absent"), format!(".gitignored: {log}"))?;
    // The copy is read-only by its modes, which root writes through.
    if !running_as_root() {
        check(log.contains("read-only"), log.clone())?;
    }
    let job = client.get("default", "snap")?;
    check(
        job.pointer("/metadata/annotations/corral.dev~1code")
            .and_then(Value::as_str)
            == Some(up.digest.as_str()),
        format!("the digest annotation: {job}"),
    )?;

    // Delete removes the copy.
    client.delete("default", "snap")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while copy.exists() {
        check(Instant::now() < deadline, "the snapshot outlived its job")?;
        std::thread::sleep(Duration::from_millis(100));
    }

    // A manifest may not claim a snapshot of its own.
    let claimed = code_job("claims", "run.sh").replace(
        "metadata: {name: claims}",
        "metadata: {name: claims, annotations: {corral.dev/code: 'sha256:00'}}",
    );
    let err = client
        .submit("default", &claimed)
        .err()
        .ok_or("a manifest set the code annotation")?;
    check(err.to_string().contains("corral.dev/code"), err.to_string())?;

    // Refused submissions leave nothing behind: an invalid manifest...
    let bad = corral_cli::code_archive::upload(&code_job("bad-", "run.sh"), w)?;
    let err = client
        .submit_with_code("default", &bad.boundary, &bad.body)
        .err()
        .ok_or("an invalid manifest was accepted")?;
    check(err.status() == Some(400), err.to_string())?;
    // ...and a snapshot over the limit, refused with the limit named.
    let mut noise = Vec::with_capacity(2 * LIMIT as usize);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2 * LIMIT {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.push(x as u8);
    }
    std::fs::write(w.join("weights.bin"), &noise)?;
    let big = corral_cli::code_archive::upload(&code_job("big", "run.sh"), w)?;
    let err = client
        .submit_with_code("default", &big.boundary, &big.body)
        .err()
        .ok_or("a snapshot over the limit was accepted")?;
    check(
        err.status() == Some(413) && err.to_string().contains(&LIMIT.to_string()),
        err.to_string(),
    )?;
    // Small archive, many bytes of files: refused while unpacking.
    std::fs::write(w.join("weights.bin"), vec![0u8; 2 * LIMIT as usize])?;
    let zeros = corral_cli::code_archive::upload(&code_job("zeros", "run.sh"), w)?;
    let err = client
        .submit_with_code("default", &zeros.boundary, &zeros.body)
        .err()
        .ok_or("a snapshot with too many bytes of files was accepted")?;
    check(
        err.status() == Some(413) && err.to_string().contains(&LIMIT.to_string()),
        err.to_string(),
    )?;
    check(
        client.list(Some("default"))?.is_empty(),
        "no job was stored",
    )?;
    let left: Vec<String> = entries(&c.code_dir())
        .into_iter()
        .filter(|e| e != ".incoming")
        .collect();
    check(left.is_empty(), format!("snapshots left: {left:?}"))?;
    let incoming = entries(&c.code_dir().join(".incoming"));
    check(incoming.is_empty(), format!("uploads left: {incoming:?}"))?;
    Ok(())
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

fn what_kubernetes_accepts_but_is_not_honoured_is_a_warning() -> TestResult {
    let c = TestCluster::start("")?;
    // Kubeflow's own shape: tolerations, a node selector, a volume, a gang minimum.
    let manifest = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: tolerated}
spec:
  runPolicy:
    suspend: true
    schedulingPolicy: {scheduleTimeoutSeconds: 60}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          tolerations: [{key: gpu, operator: Exists}]
          nodeSelector: {disk: ssd}
          volumes: [{name: data, emptyDir: {}}]
          containers:
            - name: pytorch
              image: busybox
              command: [sleep, '1']
              ports: [{name: pytorchjob-port, containerPort: 23456}]
";
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(c.url("/api/v1/namespaces/default/trainingjobs"))
        .header("Content-Type", "application/yaml")
        .send(manifest)?;
    let status = response.status().as_u16();
    let headers: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let body = json(&response.body_mut().read_to_string()?)?;
    check(status == 201, format!("{status}: {body}"))?;
    let warnings: Vec<String> = body["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for path in [
        "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
        "spec.replicas.master.template.podTemplate.spec.tolerations",
        "spec.replicas.master.template.podTemplate.spec.nodeSelector",
        "spec.replicas.master.template.podTemplate.spec.volumes",
    ] {
        check(
            warnings
                .iter()
                .any(|w| w.starts_with("TrainingJob tolerated: ") && w.contains(path)),
            format!("no warning for {path}: {warnings:?}"),
        )?;
    }
    // The container's port is Corral's to choose: not worth a warning.
    check(
        !warnings.iter().any(|w| w.contains("ports")),
        format!("{warnings:?}"),
    )?;
    check(
        headers.len() == warnings.len() && headers.iter().all(|h| h.starts_with("299 - \"")),
        format!("Warning headers: {headers:?}"),
    )?;
    let d = c.client(None).describe("default", "tolerated")?;
    let events = d
        .events
        .iter()
        .filter(|e| {
            e.reason == "FieldIgnored" && e.type_ == corral_core::control::EventType::Warning
        })
        .count();
    check(events == warnings.len(), format!("{:#?}", d.events))?;
    // A dry run (`corral validate` against the server) says the same.
    let dry = c.client(None).submit_dry_run(
        "default",
        &manifest.replace("name: tolerated", "name: tolerated-too"),
    )?;
    check(
        dry.len() == 1 && dry[0].warnings.len() == warnings.len(),
        format!("{dry:?}"),
    )?;
    Ok(())
}

/// Kills the `corral up` child on every way out of a test.
struct ChildServer(std::process::Child);

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real programs: `corral up` started with a secret and an allowed variable in its
/// environment (as an operator's shell would hold a cloud key), a job submitted with
/// `corral submit` into a tenant's namespace prints its environment, `corral logs` reads
/// it back. The secret must not reach the replica; the allowed variable (`passEnv`) must.
fn the_servers_environment_stays_out_of_replicas() -> TestResult {
    const SECRET_VALUE: &str = "s3cr3t-e2e-value-9f2c";
    let corral = PathBuf::from(env!("CARGO_BIN_EXE_corral"));
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("corral.yaml");
    std::fs::write(
        &config,
        "apiVersion: corral.dev/v1alpha1\nkind: CorralConfig\n\
         passEnv: [CORRAL_E2E_ALLOWED]\n",
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.path().join("server.log"))?;
    let server = ChildServer(
        std::process::Command::new(&corral)
            .arg("up")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("CORRAL_E2E_CLOUD_KEY", SECRET_VALUE)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
            .env("CORRAL_E2E_ALLOWED", "visible")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
    );
    let client = Client::new(&url, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client.healthy() {
        check(
            Instant::now() < deadline,
            "corral up did not answer in 30 s",
        )?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let job = dir.path().join("printenv.yaml");
    std::fs::write(
        &job,
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: printenv}
spec:
  framework: pytorch
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {cpu: 100m, memory: 64Mi}
      template:
        command: [/bin/sh, -c, 'env; echo END-OF-ENV']
        env: [{name: OWN, value: mine}]
",
    )?;
    let cli = |args: &[&str]| -> Result<String, Failed> {
        let out = std::process::Command::new(&corral)
            .args(args)
            .args(["-n", "team-b", "--server", &url])
            .env_remove("CORRAL_TOKEN")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        check(
            out.status.success(),
            format!(
                "corral {args:?} failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
        Ok(text)
    };
    cli(&["submit", &job.display().to_string()])?;
    let state = wait_for_state(
        &client,
        "team-b",
        "printenv",
        Duration::from_secs(60),
        |s| s.is_finished(),
    )?;
    check(
        state == JobState::Succeeded,
        format!("the job ended {state}"),
    )?;
    let out = cli(&["logs", "printenv"])?;
    check(out.contains("END-OF-ENV"), format!("no output:\n{out}"))?;
    check(
        !out.contains(SECRET_VALUE),
        format!("the server's secret reached the replica:\n{out}"),
    )?;
    let vars: BTreeMap<&str, &str> = out.lines().filter_map(|l| l.split_once('=')).collect();
    check(
        vars.get("CORRAL_E2E_ALLOWED") == Some(&"visible"),
        format!("the passEnv variable is missing:\n{out}"),
    )?;
    check(
        vars.get("OWN") == Some(&"mine"),
        format!("the job's env:\n{out}"),
    )?;
    check(
        vars.contains_key("RANK"),
        format!("the contract's env:\n{out}"),
    )?;
    let tmpdir = vars.get("TMPDIR").copied().unwrap_or_default();
    check(
        tmpdir.starts_with(&dir.path().join("data").display().to_string()),
        format!("TMPDIR {tmpdir:?} is not the replica's own"),
    )?;
    drop(server);
    Ok(())
}
