//! A served model end to end: examples/serving (a Python standard-library model server,
//! submitted with its code) behind the router of the real server. The first request waits
//! for the cold start and succeeds; a streamed answer arrives chunk by chunk; a bounded
//! load scales the model up; a replica killed mid-request loses no idempotent request; a
//! scale-down cuts no stream (the replica drains first); after the idle period the model is
//! back at zero; the router's series are on /metrics. Waits are
//! bounded polls of the model's status, never sleeps that a slow machine could outrun.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{prerequisite, python3_available};
use super::{TestCluster, TestResult, check};

const MODEL: &str = "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {name: tiny}
spec:
  template: {command: [python3, model_server.py]}
  resources: {cpu: 100m, memory: 64Mi}
  maxRequestBytes: 1024
  autoscaling:
    minReplicas: 0
    maxReplicas: 3
    targetInFlight: 2
    stableWindowSeconds: 6
    panicWindowSeconds: 2
    scaleToZeroAfterSeconds: 2
";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// `GET` through the router: status and body.
fn get(c: &TestCluster, path: &str) -> Result<(u16, String), String> {
    let mut r = agent()
        .get(c.url(&format!("/serve/default/tiny{path}")))
        .call()
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, body))
}

fn status(c: &TestCluster) -> Result<Value, String> {
    let v = c
        .client(None)
        .served_model("default", "tiny")
        .map_err(|e| e.to_string())?;
    Ok(v["model"]["status"].clone())
}

/// Polls the model's status until `done` holds, for at most `limit`.
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

pub(crate) fn a_served_model_scales_streams_and_survives_a_crash() -> TestResult {
    if !prerequisite(python3_available(), "python3") {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serving");
    // A dry run (`corral validate` against the server) checks and stores nothing.
    let checked = c.client(None).submit_dry_run("default", MODEL)?;
    check(checked.len() == 1, format!("{checked:?}"))?;
    check(
        c.client(None).served_models("default")?.is_empty(),
        "a dry run stored the model",
    )?;
    let bad = c.client(None).submit(
        "default",
        &MODEL.replace("maxReplicas: 3", "maxReplicas: 0"),
    );
    check(
        bad.as_ref()
            .is_err_and(|e| e.to_string().contains("spec.autoscaling.maxReplicas")),
        format!("{bad:?}"),
    )?;
    let up = corral_cli::code_archive::upload(MODEL, &example)?;
    let submitted = c
        .client(None)
        .submit_with_code("default", &up.boundary, &up.body)?;
    check(
        submitted.len() == 1 && submitted[0].kind.as_deref() == Some("ServedModel"),
        format!("{submitted:?}"),
    )?;
    // Cold start, right after the submit: the request waits for the first replica and
    // succeeds.
    let (code, body) = get(&c, "/predict?x=1,2,3")?;
    check(code == 200, format!("cold start: {code} {body}"))?;
    let answer: Value = serde_json::from_str(&body)?;
    check(
        answer["y"] == 2.5,
        format!("2*1 - 2 + 0.5*3 + 1 = 2.5, got {body}"),
    )?;

    // Streaming: each event is read before the server may send the next (a gate file).
    let gates = tempfile::tempdir()?;
    // Replicas run as their namespace's uid: they look for the gates and leave the crash
    // marker here.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(gates.path(), std::fs::Permissions::from_mode(0o777))?;
    }
    let gate = gates.path().join("gate");
    let mut r = agent()
        .get(c.url(&format!(
            "/serve/default/tiny/stream?n=3&gate={}",
            gate.display()
        )))
        .call()?;
    check(r.status().as_u16() == 200, "stream status")?;
    let mut reader = r.body_mut().as_reader();
    let mut got = String::new();
    for i in 0..3 {
        let mut buf = [0u8; 256];
        while got.matches("\n\n").count() <= i {
            let n = reader.read(&mut buf)?;
            check(n > 0, format!("the stream ended after {got:?}"))?;
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        check(
            got.contains(&format!("\"token\": {i}")),
            format!("event {i} in {got:?}"),
        )?;
        // Only now may the server send the next event.
        std::fs::write(format!("{}.{}", gate.display(), i + 1), "")?;
    }

    // A bounded load: 12 requests of 3 s each, 2 in flight per replica is the target.
    let load: Vec<_> = (0..12)
        .map(|_| {
            let url = c.url("/serve/default/tiny/predict?x=1&sleep_ms=3000");
            std::thread::spawn(move || {
                agent()
                    .get(&url)
                    .call()
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            })
        })
        .collect();
    wait_until(&c, Duration::from_secs(30), "scaled up", |s| {
        s["desiredReplicas"].as_u64() >= Some(2) && s["replicas"].as_u64() >= Some(2)
    })?;
    for t in load {
        let code = t.join().map_err(|_| "a load thread panicked")?;
        check(code == 200, format!("a request under load answered {code}"))?;
    }

    // A replica dies in the middle of a GET: the router sends it to another (or to the
    // same one once it has restarted), and the client sees only the answer.
    wait_until(&c, Duration::from_secs(30), "two ready", |s| {
        s["readyReplicas"].as_u64() >= Some(2)
    })?;
    let once = gates.path().join("crash-once");
    let (code, body) = get(&c, &format!("/predict?x=4&exit={}", once.display()))?;
    check(once.exists(), "the replica was not killed")?;
    check(code == 200, format!("after a crash: {code} {body}"))?;

    // A scale-down drops no request: two streams held open (one on each of two replicas),
    // 2 in flight asks for one replica; the replica scaled away leaves rotation and keeps
    // running until its stream has ended.
    wait_until(&c, Duration::from_secs(30), "two ready", |s| {
        s["readyReplicas"].as_u64() >= Some(2)
    })?;
    let mut streams = Vec::new();
    for k in 0..2 {
        let gate = gates.path().join(format!("held-{k}"));
        let mut r = agent()
            .get(c.url(&format!(
                "/serve/default/tiny/stream?n=3&gate={}",
                gate.display()
            )))
            .call()?
            .into_body()
            .into_reader();
        let mut got = String::new();
        let mut buf = [0u8; 256];
        while !got.contains("\n\n") {
            let n = r.read(&mut buf)?;
            check(n > 0, format!("stream {k} ended at once: {got:?}"))?;
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        streams.push((gate, r, got));
    }
    let replicas_then: Vec<String> = streams
        .iter()
        .filter_map(|(_, _, got)| got.split("\"replica\": ").nth(1).map(str::to_string))
        .collect();
    wait_until(&c, Duration::from_secs(40), "scaled down to one", |s| {
        s["desiredReplicas"] == 1 && s["replicas"] == 1
    })?;
    for (k, (gate, mut r, mut got)) in streams.into_iter().enumerate() {
        std::fs::write(format!("{}.1", gate.display()), "")?;
        std::fs::write(format!("{}.2", gate.display()), "")?;
        let mut rest = String::new();
        r.read_to_string(&mut rest)?;
        got.push_str(&rest);
        check(
            got.contains("\"token\": 2"),
            format!("stream {k} (of {replicas_then:?}) was cut by the scale-down: {got:?}"),
        )?;
    }

    // Idle: back to zero replicas, and the next request is a cold start again.
    wait_until(&c, Duration::from_secs(60), "scaled to zero", |s| {
        s["replicas"] == 0
    })?;
    let (code, body) = get(&c, "/predict?x=0")?;
    check(code == 200, format!("second cold start: {code} {body}"))?;

    // The router's series, per model.
    let metrics = agent()
        .get(c.url("/metrics"))
        .call()?
        .body_mut()
        .read_to_string()?;
    check(
        metrics.contains(
            "corral_serving_requests_total{namespace=\"default\",model=\"tiny\",revision=\"tiny-00001\",code=\"2xx\"}",
        ),
        "no serving series on /metrics",
    )?;
    // Over the limit: 413 with the limit in words.
    let mut r = agent()
        .post(c.url("/serve/default/tiny/predict"))
        .send(vec![b'x'; 2048])?;
    check(r.status().as_u16() == 413, format!("{}", r.status()))?;
    let body = r.body_mut().read_to_string()?;
    check(body.contains("maxRequestBytes"), body)?;

    // Deleted: its replicas go, and the router answers 404.
    c.client(None).delete_served_model("default", "tiny")?;
    let (code, _) = get(&c, "/predict?x=1")?;
    check(code == 404, format!("after delete: {code}"))?;
    // Its replica jobs stop and go (nothing keeps running after the test).
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
