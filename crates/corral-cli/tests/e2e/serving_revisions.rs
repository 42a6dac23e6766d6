//! Revisions of a served model end to end (examples/serving's model server, submitted with
//! its code, behind the real server's router): a change of the template is a new revision;
//! a 10/90 canary splits 2,000 requests within 5 points; under a bounded load on loopback,
//! a promotion, a rollout of a third revision and a killed replica lose no request; the old
//! revisions drain and go; `corral serve rollback` sends everything back. Waits are bounded
//! polls of the model's status.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{prerequisite, python3_available};
use super::{TestCluster, TestResult, check};

fn model(version: &str, canary: Option<u32>) -> String {
    let canary = canary.map_or(String::new(), |p| format!("  canaryTrafficPercent: {p}\n"));
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {{name: split}}
spec:
  template:
    command: [python3, model_server.py]
    env: [{{name: MODEL_VERSION, value: {version}}}]
  resources: {{cpu: 250m, memory: 64Mi}}
{canary}  autoscaling: {{minReplicas: 2, maxReplicas: 2, targetInFlight: 100}}
"
    )
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// `GET /predict` through the router: the status and the version that answered.
fn predict(agent: &ureq::Agent, url: &str) -> (u16, String) {
    match agent.get(url).call() {
        Ok(mut r) => {
            let status = r.status().as_u16();
            let body = r.body_mut().read_to_string().unwrap_or_default();
            let version = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["version"].as_str().map(str::to_string))
                .unwrap_or(body);
            (status, version)
        }
        Err(e) => (0, e.to_string()),
    }
}

fn status(c: &TestCluster) -> Result<Value, String> {
    let v = c
        .client(None)
        .served_model("default", "split")
        .map_err(|e| e.to_string())?;
    Ok(v["model"]["status"].clone())
}

fn revision<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s["revisions"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)
}

fn wait_until(
    c: &TestCluster,
    limit: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> TestResult {
    let start = Instant::now();
    loop {
        let s = status(c)?;
        if done(&s) {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("{what}: still {s} after {limit:?}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A bounded load on loopback: `clients` threads sending GETs one after another until
/// stopped; every answer that is not a 200 is counted.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    failed: Arc<std::sync::Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(url: String, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let threads = (0..clients)
            .map(|_| {
                let (stop, sent, failed, url) =
                    (stop.clone(), sent.clone(), failed.clone(), url.clone());
                std::thread::spawn(move || {
                    let agent = agent();
                    while !stop.load(Ordering::Relaxed) {
                        let (code, what) = predict(&agent, &url);
                        sent.fetch_add(1, Ordering::Relaxed);
                        if code != 200 {
                            failed
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(format!("{code} {what}"));
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            sent,
            failed,
            threads,
        }
    }

    /// Stops the load: requests sent and the failures.
    fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (self.sent.load(Ordering::Relaxed), failed)
    }
}

fn submit(c: &TestCluster, text: &str) -> Result<corral_local::cluster::SubmitResult, String> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serving");
    let up = corral_cli::code_archive::upload(text, &example).map_err(|e| e.to_string())?;
    let mut done = c
        .client(None)
        .submit_with_code("default", &up.boundary, &up.body)
        .map_err(|e| e.to_string())?;
    done.pop().ok_or_else(|| "nothing submitted".to_string())
}

pub(crate) fn revisions_split_roll_out_and_roll_back_without_losing_a_request() -> TestResult {
    if !prerequisite(python3_available(), "python3") {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let url = c.url("/serve/default/split/predict?x=1");
    let first = submit(&c, &model("v1", None))?;
    check(
        first.revision.as_deref() == Some("split-00001") && first.new_revision,
        format!("{first:?}"),
    )?;
    wait_until(&c, Duration::from_secs(60), "v1 ready", |s| {
        s["readyReplicas"].as_u64() >= Some(2)
    })?;
    // The same template again: no new revision.
    let same = submit(&c, &model("v1", None))?;
    check(
        same.revision.as_deref() == Some("split-00001") && !same.new_revision,
        format!("{same:?}"),
    )?;

    // A canary: v2 gets 10% once it is ready.
    let second = submit(&c, &model("v2", Some(10)))?;
    check(
        second.revision.as_deref() == Some("split-00002") && second.new_revision,
        format!("{second:?}"),
    )?;
    wait_until(&c, Duration::from_secs(60), "the canary split", |s| {
        revision(s, "split-00002")
            .is_some_and(|r| r["trafficPercent"] == 10 && r["readyReplicas"].as_u64() >= Some(2))
            && revision(s, "split-00001").is_some_and(|r| r["trafficPercent"] == 90)
    })?;
    let mut v2 = 0;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let agent = agent();
                (0..500).map(|_| predict(&agent, &url)).collect::<Vec<_>>()
            })
        })
        .collect();
    for t in threads {
        for (code, version) in t.join().map_err(|_| "a client thread panicked")? {
            check(
                code == 200,
                format!("a canary request answered {code} {version}"),
            )?;
            v2 += u32::from(version == "v2");
        }
    }
    eprintln!("canary: v2 answered {v2} of 2,000 requests (10% asked)");
    check(
        (100..=300).contains(&v2),
        format!("v2 answered {v2} of 2,000 requests; 10% +-5 points is 100..=300"),
    )?;
    // Each revision's own URL reaches that revision alone, whatever the split; the
    // status names it; a revision the model does not serve is a 404 naming those it does.
    let agent1 = agent();
    for (at, expected) in [
        ("split-00001", "v1"),
        ("stable", "v1"),
        ("split-00002", "v2"),
        ("latest", "v2"),
    ] {
        for _ in 0..5 {
            let (code, version) = predict(
                &agent1,
                &c.url(&format!("/serve/default/split@{at}/predict?x=1")),
            );
            check(
                code == 200 && version == expected,
                format!("split@{at} answered {code} {version}, not {expected}"),
            )?;
        }
    }
    let s = status(&c)?;
    check(
        revision(&s, "split-00002")
            .is_some_and(|r| r["url"] == "/serve/default/split@split-00002/"),
        format!("no URL of split-00002 in {s}"),
    )?;
    let (code, body) = predict(&agent1, &c.url("/serve/default/split@split-00009/predict"));
    check(
        code == 404 && body.contains("split-00001, split-00002, latest, stable"),
        format!("an unknown revision: {code} {body}"),
    )?;
    let metrics = agent()
        .get(c.url("/metrics"))
        .call()?
        .body_mut()
        .read_to_string()?;
    check(
        metrics.contains(
            "corral_serving_requests_total{namespace=\"default\",model=\"split\",revision=\"split-00002\",code=\"2xx\"}",
        ) && metrics.contains(
            "corral_serving_request_duration_seconds_count{namespace=\"default\",model=\"split\",revision=\"split-00001\"}",
        ),
        "no per-revision series on /metrics",
    )?;

    // Under load: promote v2 (the API), roll out v3 (no canary: 100% once ready), kill a
    // replica; no request fails.
    let load = Load::start(url.clone(), 4);
    c.client(None)
        .set_canary_percent("default", "split", None)
        .map_err(|e| e.to_string())?;
    wait_until(&c, Duration::from_secs(60), "v2 promoted, v1 gone", |s| {
        s["stableRevision"] == "split-00002" && revision(s, "split-00001").is_none()
    })?;
    let third = submit(&c, &model("v3", None))?;
    check(
        third.revision.as_deref() == Some("split-00003"),
        format!("{third:?}"),
    )?;
    wait_until(&c, Duration::from_secs(60), "v3 rolled out, v2 gone", |s| {
        s["stableRevision"] == "split-00003"
            && revision(s, "split-00002").is_none()
            && s["readyReplicas"].as_u64() >= Some(2)
    })?;
    let (code, version) = predict(&agent(), &url);
    check(code == 200 && version == "v3", format!("{code} {version}"))?;
    // A replica dies in the middle of a request: the router sends it to the other.
    let marks = tempfile::tempdir()?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(marks.path(), std::fs::Permissions::from_mode(0o777))?;
    }
    let once = marks.path().join("crash-once");
    let (code, version) = predict(
        &agent(),
        &c.url(&format!(
            "/serve/default/split/predict?x=1&exit={}",
            once.display()
        )),
    );
    check(once.exists(), "the replica was not killed")?;
    check(code == 200, format!("after a crash: {code} {version}"))?;
    wait_until(&c, Duration::from_secs(60), "both back", |s| {
        s["readyReplicas"].as_u64() >= Some(2)
    })?;
    let (sent, failed) = load.finish();
    eprintln!(
        "rollouts and a crash under load: {} of {sent} requests failed",
        failed.len()
    );
    check(sent > 0, "the load sent nothing")?;
    check(
        failed.is_empty(),
        format!(
            "{} of {sent} requests failed during the rollouts and the crash: {:?}",
            failed.len(),
            &failed[..failed.len().min(5)]
        ),
    )?;

    // A canary of v4 rolled back with the CLI: v3 takes everything, v4 drains and goes.
    submit(&c, &model("v4", Some(50)))?;
    wait_until(&c, Duration::from_secs(60), "v4 at 50%", |s| {
        revision(s, "split-00004").is_some_and(|r| r["trafficPercent"] == 50)
    })?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["serve", "rollback", "split", "--server", &c.url("")])
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    check(
        out.status.success() && said.contains("rolled back"),
        format!("{said}{}", String::from_utf8_lossy(&out.stderr)),
    )?;
    wait_until(&c, Duration::from_secs(60), "v4 drained", |s| {
        revision(s, "split-00004").is_some_and(|r| r["replicas"] == 0 && r["trafficPercent"] == 0)
            && revision(s, "split-00003").is_some_and(|r| r["trafficPercent"] == 100)
    })?;
    for _ in 0..20 {
        let (code, version) = predict(&agent(), &url);
        check(code == 200 && version == "v3", format!("{code} {version}"))?;
    }
    c.client(None).delete_served_model("default", "split")?;
    let start = Instant::now();
    while !c.client(None).list(Some("default"))?.is_empty() {
        check(
            start.elapsed() < Duration::from_secs(60),
            "replica jobs still there a minute after the delete",
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// KServe's InferenceService (examples/serving/inferenceservice.yaml) is accepted as it is
/// and served; a new canaryTrafficPercent and env make a canary of it.
pub(crate) fn an_inference_service_is_served_and_split() -> TestResult {
    if !prerequisite(python3_available(), "python3") {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serving");
    // At one replica at least, so that the canary below gets its own without load.
    let text = std::fs::read_to_string(example.join("inferenceservice.yaml"))?
        .replace("minReplicas: 0", "minReplicas: 1");
    let first = submit(&c, &text)?;
    check(
        first.kind.as_deref() == Some("ServedModel") && first.name == "tiny-kserve",
        format!("{first:?}"),
    )?;
    let url = c.url("/serve/default/tiny-kserve/predict?x=1");
    let (code, version) = predict(&agent(), &url);
    check(code == 200 && version == "v1", format!("{code} {version}"))?;
    // KServe's canary: a new container env and canaryTrafficPercent.
    let canary = text.replace("value: v1", "value: v2").replace(
        "    minReplicas: 1",
        "    canaryTrafficPercent: 50\n    minReplicas: 1",
    );
    let second = submit(&c, &canary)?;
    check(
        second.revision.as_deref() == Some("tiny-kserve-00002"),
        format!("{second:?}"),
    )?;
    let status = |c: &TestCluster| -> Result<Value, String> {
        let v = c
            .client(None)
            .served_model("default", "tiny-kserve")
            .map_err(|e| e.to_string())?;
        Ok(v["model"]["status"].clone())
    };
    let start = Instant::now();
    while !revision(&status(&c)?, "tiny-kserve-00002").is_some_and(|r| r["trafficPercent"] == 50) {
        check(
            start.elapsed() < Duration::from_secs(60),
            format!("no 50% canary: {}", status(&c)?),
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    // The status is written in the pass, the router's split installed right after it: on
    // a loaded machine a request may still meet the old split. Once v2 has answered, the
    // router has the new one, and any 100 requests in a row follow it exactly.
    let start = Instant::now();
    while predict(&agent(), &url).1 != "v2" {
        check(
            start.elapsed() < Duration::from_secs(30),
            "the router never sent a request to v2",
        )?;
    }
    let v2 = (0..100)
        .map(|_| predict(&agent(), &url))
        .filter(|(code, version)| *code == 200 && version == "v2")
        .count();
    check(v2 == 50, format!("v2 answered {v2} of 100 at 50%"))?;
    c.client(None)
        .delete_served_model("default", "tiny-kserve")?;
    let start = Instant::now();
    while !c.client(None).list(Some("default"))?.is_empty() {
        check(
            start.elapsed() < Duration::from_secs(60),
            "replica jobs still there a minute after the delete",
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
