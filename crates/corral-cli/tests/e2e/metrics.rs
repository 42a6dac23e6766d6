//! `/metrics` in both exposition formats, checked by promtool and stable in order.

use super::*;

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
pub(super) fn metrics_pass_promtool_in_both_formats() -> TestResult {
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
