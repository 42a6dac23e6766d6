//! What a person sees on each page, with real jobs on the real server.

use std::io::Read;
use std::time::{Duration, Instant};

use corral_local::cluster::JobState;

use super::driver::{self, Browser};
use super::{TestCluster, TestResult, check};

const GPUS: &str = "
apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 2, gpuType: FAKE-GPU}
";

const TOKENS: &str = "
apiVersion: corral.dev/v1alpha1
kind: CorralConfig
node: {gpus: 2, gpuType: FAKE-GPU}
tokens:
  - {token: token-a, namespace: team-a}
  - {token: token-b, namespace: team-b}
";

/// A job of `workers` replicas with `gpus` GPUs each that prints a numbered line every
/// 100 ms for five minutes, and reports each as its progress (of 3,000 steps).
fn printing_job(name: &str, workers: u32, gpus: u32) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: {workers}
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 64Mi, gpu: {gpus}}}
      template:
        command: [sh, -c, 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo step $i; printf \"{{\\\"step\\\":%d,\\\"totalSteps\\\":3000}}\" $i > $CORRAL_PROGRESS_FILE; sleep 0.1; done']
"
    )
}

/// A JavaScript string literal of `s`.
fn js_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The text of the first element matching `css`, or "".
fn text_of(css: &str) -> String {
    format!(
        "const e = document.querySelector({}); return e ? e.innerText : ''",
        js_str(css)
    )
}

fn wait_state(
    c: &TestCluster,
    ns: &str,
    name: &str,
    token: Option<&str>,
    done: impl Fn(JobState) -> bool,
) -> Result<JobState, libtest_mimic::Failed> {
    let client = c.client(token);
    let deadline = Instant::now() + driver::PATIENCE;
    loop {
        let state = client.describe(ns, name)?.summary.state;
        if done(state) {
            return Ok(state);
        }
        if Instant::now() > deadline {
            return Err(format!("{ns}/{name} is still {state}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn a_submitted_job_shows_its_replicas_and_a_live_log() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start(GPUS)?;
    let api = c.client(None);
    api.submit("default", &printing_job("train", 2, 1))?;
    let b = Browser::start()?;
    b.goto(&c.url("/#/jobs"))?;
    b.wait(
        "the submitted job in the jobs table",
        "return document.querySelector('[data-job=\"default/train\"]')",
    )?;
    b.screenshot("jobs")?;
    b.click("[data-job=\"default/train\"] a.job-link")?;
    b.wait(
        "the job's page",
        &format!(
            "return location.hash === {}",
            js_str("#/jobs/default/train")
        ),
    )?;
    // Its replicas, placed down to the node and the GPU index, as the API says.
    wait_state(&c, "default", "train", None, |s| s == JobState::Running)?;
    let details = api.describe("default", "train")?;
    let node = api
        .nodes()?
        .first()
        .map(|n| n.name.clone())
        .ok_or("no node")?;
    for r in &details.replicas {
        let row = format!("#replicas tr[data-replica=\"{}-{}\"]", r.role, r.index);
        let gpus: Vec<String> = r.gpus.iter().map(u32::to_string).collect();
        let shown = b.wait(
            &format!("replica {} with its node and GPUs", r.name),
            &format!(
                "const n = document.querySelector({node_css}); const g = document.querySelector({gpu_css});
                 return n && g && n.innerText === {node} && g.innerText === {gpus} ? g.innerText : ''",
                node_css = js_str(&format!("{row} td.node")),
                gpu_css = js_str(&format!("{row} td.gpus-held")),
                node = js_str(&node),
                gpus = js_str(&gpus.join(", ")),
            ),
        )?;
        check(!gpus.is_empty(), format!("{}: no GPU in the API", r.name))?;
        let _ = shown;
    }
    // A live log: lines arrive while the page is open.
    b.click("#log-worker-1")?;
    let lines = |b: &Browser| -> Result<usize, libtest_mimic::Failed> {
        let v = b.wait(
            "the replica's log",
            "const l = document.querySelector('#log'); return l && /step \\d+/.test(l.textContent) ? l.textContent : ''",
        )?;
        Ok(v.as_str().unwrap_or_default().lines().count())
    };
    let first = lines(&b)?;
    b.wait(
        "more log lines, without a reload",
        &format!(
            "const l = document.querySelector('#log'); return l && l.textContent.trim().split('\\n').length > {first}"
        ),
    )?;
    check(
        b.text()?.contains("Log of worker-1"),
        "the log shown is worker-1's",
    )?;
    // Its progress, as its replicas report it, on the page without a reload.
    let progress = b.wait(
        "the job's reported progress",
        "const p = document.querySelector('#progress'); return p && /step \\d+\\/3000/.test(p.innerText) ? p.innerText : ''",
    )?;
    check(
        progress.as_str().is_some_and(|p| p.contains('%')),
        format!("progress shows a percent: {progress}"),
    )?;
    b.screenshot("job")?;
    // The nodes page: which job holds which card.
    b.goto(&c.url("/#/nodes"))?;
    let held = b.wait(
        "the GPU map with the job on its cards",
        "return [...document.querySelectorAll('.gpu.used')].filter(g => g.innerText.includes('default/train')).length",
    )?;
    check(held == 2, format!("2 cards held by the job, not {held}"))?;
    b.screenshot("nodes")?;
    // The overview: GPUs by type and jobs by state.
    b.goto(&c.url("/#/"))?;
    b.wait(
        "GPUs by type",
        "const t = s => { const e = document.querySelector(s); return e ? e.innerText : '' };
         return t('#gpu-types').includes('FAKE-GPU') && t('#job-states').includes('Running')",
    )?;
    b.screenshot("overview")?;
    Ok(())
}

pub(super) fn a_waiting_job_shows_why_and_suspend_from_the_page_suspends() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start(GPUS)?;
    let api = c.client(None);
    api.submit("default", &printing_job("big", 1, 2))?;
    wait_state(&c, "default", "big", None, |s| s == JobState::Running)?;
    api.submit("default", &printing_job("waits", 1, 2))?;
    let deadline = Instant::now() + driver::PATIENCE;
    let reason = loop {
        if let Some(r) = api.describe("default", "waits")?.pending_reason {
            break r;
        }
        check(
            Instant::now() < deadline,
            "the second job never got a pending reason",
        )?;
        std::thread::sleep(Duration::from_millis(100));
    };
    let b = Browser::start()?;
    // The queues page lists it with the core's reason.
    b.goto(&c.url("/#/queues"))?;
    b.wait(
        "the waiting job and its reason on the queues page",
        &format!(
            "return [...document.querySelectorAll('table.waiting tr')].some(r => r.innerText.includes('default/waits') && r.innerText.includes({}))",
            js_str(&reason)
        ),
    )?;
    b.screenshot("queues")?;
    // Its own page says why it waits.
    b.goto(&c.url("/#/jobs/default/waits"))?;
    b.wait(
        "why the job waits",
        &format!(
            "const e = document.querySelector('#pending-reason'); return e && e.innerText.includes({})",
            js_str(&reason)
        ),
    )?;
    // Suspend the running job from its page, after confirming.
    b.goto(&c.url("/#/jobs/default/big"))?;
    b.wait(
        "the suspend button",
        "return document.querySelector('#suspend')",
    )?;
    b.click("#suspend")?;
    b.wait(
        "the confirmation",
        "const d = document.querySelector('#confirm'); return d && d.open",
    )?;
    b.screenshot("confirm")?;
    // Nothing happened before the confirmation.
    check(
        !api.describe("default", "big")?.job.spec.run_policy.suspend,
        "suspended before it was confirmed",
    )?;
    b.click("#confirm-yes")?;
    // Through the API: suspended.
    wait_state(&c, "default", "big", None, |s| s == JobState::Suspended)?;
    check(
        api.describe("default", "big")?.job.spec.run_policy.suspend,
        "spec.runPolicy.suspend is set",
    )?;
    // The page follows without a reload, and the waiting job gets the GPUs.
    b.wait(
        "the job shown suspended",
        "const s = document.querySelector('h1 .state'); return s && s.innerText === 'Suspended' && document.querySelector('#resume')",
    )?;
    b.screenshot("suspended")?;
    b.goto(&c.url("/#/jobs"))?;
    b.wait(
        "the waiting job running now",
        "const r = document.querySelector('[data-job=\"default/waits\"] .state'); return r && r.innerText === 'Running'",
    )?;
    Ok(())
}

pub(super) fn a_namespace_token_sees_only_its_namespace() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let c = TestCluster::start(TOKENS)?;
    let a = c.client(Some("token-a"));
    let bee = c.client(Some("token-b"));
    bee.submit("team-b", &printing_job("secret-job", 1, 1))?;
    // team-b's pipeline run and served model, for the runs and serving pages.
    bee.submit(
        "team-b",
        "apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: secret-run}
spec:
  pipelineSpec:
    steps:
      - {name: only, task: {command: ['true'], resources: {cpu: 10m, memory: 16Mi}}}
",
    )?;
    bee.submit(
        "team-b",
        "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {name: secret-model}
spec:
  template: {command: [sleep, '300']}
  resources: {cpu: 10m, memory: 16Mi}
",
    )?;
    a.submit("team-a", &printing_job("mine", 1, 1))?;
    wait_state(&c, "team-b", "secret-job", Some("token-b"), |s| {
        s == JobState::Running
    })?;
    let b = Browser::start()?;
    b.goto(&c.url("/"))?;
    b.wait("the token form", "return document.querySelector('#token')")?;
    b.screenshot("token")?;
    b.type_into("#token", "token-a")?;
    b.click("#token-submit")?;
    b.wait("the token's namespace", &text_of("#token-namespace"))?;
    check(
        b.js(&text_of("#token-namespace"))? == "team-a",
        "the page says it acts in team-a",
    )?;
    b.goto(&c.url("/#/jobs"))?;
    b.wait(
        "team-a's job",
        "return document.querySelector('[data-job=\"team-a/mine\"]')",
    )?;
    // A team-b job submitted while the page is open is not pushed to it either.
    bee.submit("team-b", &printing_job("later-secret", 1, 1))?;
    std::thread::sleep(Duration::from_secs(3));
    for page in [
        "/#/jobs",
        "/#/",
        "/#/queues",
        "/#/nodes",
        "/#/runs",
        "/#/serving",
        "/#/usage",
    ] {
        b.goto(&c.url(page))?;
        b.wait(
            &format!("{page} rendered"),
            "return document.querySelector('main h1')",
        )?;
        std::thread::sleep(Duration::from_millis(1500));
        let shown = b.js("return document.documentElement.outerHTML")?;
        let shown = shown.as_str().unwrap_or_default();
        check(
            !shown.contains("team-b") && !shown.contains("secret"),
            format!("{page} shows team-b's jobs to team-a's token"),
        )?;
        if page == "/#/nodes" {
            check(
                shown.contains("(another namespace)"),
                "the nodes page shows a card is taken, not by whom",
            )?;
            b.screenshot("nodes-team-a")?;
        }
    }
    // The push channel itself, read as the page reads it.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut stream = agent
        .get(c.url("/api/v1/watch?timeoutSeconds=2"))
        .header("Authorization", "Bearer token-a")
        .call()?;
    let mut text = String::new();
    stream.body_mut().as_reader().read_to_string(&mut text)?;
    check(
        text.contains("\"mine\"") && !text.contains("team-b") && !text.contains("secret"),
        format!("team-a's watch stream: {text}"),
    )?;
    Ok(())
}

/// Content types, caching and gzip, as a browser gets them.
pub(super) fn assets_are_typed_cached_and_gzipped() -> TestResult {
    let c = TestCluster::start("")?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get = |path: &str, gzip: bool| {
        let mut r = agent.get(c.url(path));
        if gzip {
            r = r.header("Accept-Encoding", "gzip");
        }
        r.call()
    };
    let header = |r: &ureq::http::Response<ureq::Body>, h: &str| {
        r.headers()
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let index = get("/", false)?;
    check(index.status() == 200, "GET / is 200")?;
    check(
        header(&index, "content-type").starts_with("text/html"),
        "/ is HTML",
    )?;
    check(
        header(&index, "cache-control") == "no-cache",
        "/ is revalidated",
    )?;
    let etag = header(&index, "etag");
    let again = agent
        .get(c.url("/"))
        .header("If-None-Match", &etag)
        .call()?;
    check(
        again.status() == 304,
        format!("If-None-Match: {}", again.status()),
    )?;
    let app = get("/ui/app.js", true)?;
    check(
        header(&app, "content-type").starts_with("text/javascript")
            && header(&app, "content-encoding") == "gzip",
        "app.js is JavaScript, gzipped",
    )?;
    let vendor = get("/ui/vendor/preact-10.29.8.module.js", false)?;
    check(
        header(&vendor, "cache-control").contains("immutable")
            && header(&vendor, "content-encoding").is_empty(),
        "a vendored file is cached for good, and plain without Accept-Encoding",
    )?;
    let css = get("/ui/style.css", false)?;
    check(header(&css, "content-type").starts_with("text/css"), "CSS")?;
    let missing = get("/ui/nope.js", false)?;
    check(missing.status() == 404, "an unknown asset is 404")?;
    Ok(())
}
