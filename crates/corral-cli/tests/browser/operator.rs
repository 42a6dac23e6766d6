//! The dashboard as the operator serves it, in real Chromium: a real kube-apiserver
//! (`corral_kube::testenv`, as the operator's envtest suite), the operator binary as
//! deployed (`CORRAL_OPERATOR_BIN`), and a token of a service account that RBAC lets list
//! one namespace's TrainingJobs: the page shows that namespace's jobs and why one waits, its
//! served model with its revision and replica, a suspend from the page suspends it, and
//! nothing of another namespace appears.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use corral_kube::testenv::{self, Env, OPERATOR_TOKEN};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use super::driver::{self, Browser};
use super::{TestResult, check};

/// Where the kube binaries and the operator are, or why the test cannot run (a failure
/// under CI, a skip elsewhere).
fn prerequisites() -> Result<Option<(testenv::Assets, String)>, String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let assets = match testenv::assets() {
        Ok(a) => a,
        Err(why) if ci => return Err(why),
        Err(why) => {
            eprintln!("skipped: the operator's dashboard needs a kube-apiserver: {why}");
            return Ok(None);
        }
    };
    match std::env::var("CORRAL_OPERATOR_BIN") {
        Ok(bin) => Ok(Some((assets, bin))),
        Err(_) if ci => Err("CORRAL_OPERATOR_BIN is not set (the corral binary)".into()),
        Err(_) => {
            eprintln!("skipped: set CORRAL_OPERATOR_BIN to the corral binary");
            Ok(None)
        }
    }
}

fn training_job(ns: &str, name: &str, gpus: u32) -> Value {
    json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"framework": "generic", "replicas": {"worker": {"count": 1,
            "resources": {"cpu": "1", "memory": "1Gi", "gpu": gpus},
            "template": {"image": "busybox:1.36", "command": ["sleep", "600"]}}}},
    })
}

fn dynamic(
    env: &Env,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(env.admin.clone(), ns, &ar)
}

/// The cluster: Corral installed, one node of 4 GPUs, a job of team-a and one of team-b
/// (a GPU each); a token of team-a's `viewer` (list, get, patch TrainingJobs).
async fn setup(env: &Env) -> Result<String, String> {
    testenv::install_corral(&env.admin).await?;
    testenv::gpu_node(&env.admin, "gpu-1", 4).await?;
    for ns in ["team-a", "team-b"] {
        testenv::namespace(&env.admin, ns).await?;
    }
    let tj = |ns| {
        dynamic(
            env,
            ns,
            "corral.dev",
            "v1alpha1",
            "TrainingJob",
            "trainingjobs",
        )
    };
    for (ns, name, gpus) in [("team-b", "secret-job", 1), ("team-a", "mine", 1)] {
        let job =
            serde_json::from_value(training_job(ns, name, gpus)).map_err(|e| e.to_string())?;
        tj(ns)
            .create(&PostParams::default(), &job)
            .await
            .map_err(|e| format!("{ns}/{name}: {e}"))?;
    }
    // A served model in each namespace (their replicas wait for a kubelet: none here).
    for (ns, name) in [("team-b", "secret-model"), ("team-a", "model-a")] {
        let model = serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "ServedModel",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"image": "models/tiny:1", "command": ["python3", "serve.py"]},
                     "resources": {"cpu": "100m", "memory": "64Mi"}},
        }))
        .map_err(|e| e.to_string())?;
        dynamic(
            env,
            ns,
            "corral.dev",
            "v1alpha1",
            "ServedModel",
            "servedmodels",
        )
        .create(&PostParams::default(), &model)
        .await
        .map_err(|e| format!("{ns}/{name}: {e}"))?;
    }
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.admin.clone(), "team-a");
    let sa = serde_json::from_value(json!({"metadata": {"name": "viewer"}}))
        .map_err(|e| e.to_string())?;
    sas.create(&PostParams::default(), &sa)
        .await
        .map_err(|e| e.to_string())?;
    let rbac = "rbac.authorization.k8s.io";
    for (kind, plural, body) in [
        (
            "Role",
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "viewer", "namespace": "team-a"},
            "rules": [{"apiGroups": ["corral.dev"], "resources": ["trainingjobs"],
                       "verbs": ["get", "list", "patch"]}]}),
        ),
        (
            "RoleBinding",
            "rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding", "metadata": {"name": "viewer", "namespace": "team-a"},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "team-a"}]}),
        ),
    ] {
        let obj = serde_json::from_value(body).map_err(|e| e.to_string())?;
        dynamic(env, "team-a", rbac, "v1", kind, plural)
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| format!("{kind}: {e}"))?;
    }
    let request = k8s_openapi::api::authentication::v1::TokenRequest {
        spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    sas.create_token_request("viewer", &PostParams::default(), &request)
        .await
        .map_err(|e| e.to_string())?
        .status
        .map(|s| s.token)
        .ok_or_else(|| "no token".to_string())
}

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` of the operator with `token`: the status and the JSON.
fn get(url: &str, token: &str) -> (u16, Value) {
    match ureq::get(url)
        .header("Authorization", &format!("Bearer {token}"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
    {
        Ok(mut r) => (
            r.status().as_u16(),
            r.body_mut().read_json().unwrap_or(Value::Null),
        ),
        Err(_) => (0, Value::Null),
    }
}

pub(super) fn the_operator_serves_the_dashboard_walled_by_rbac() -> TestResult {
    if !driver::available() {
        return Ok(());
    }
    let Some((assets, bin)) = prerequisites()? else {
        return Ok(());
    };
    let rt = tokio::runtime::Runtime::new()?;
    let env = rt.block_on(Env::start(&assets, "corral-browser-operator"))?;
    let token = rt.block_on(setup(&env))?;
    let kc = env.dir.join("operator.kubeconfig");
    std::fs::write(&kc, testenv::kubeconfig(&env.url, OPERATOR_TOKEN))?;
    let port = testenv::free_port()?;
    let log = env.dir.join("operator.log");
    let _operator = Operator(testenv::spawn(
        Command::new(&bin)
            .args(["operator", "--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--lease-namespace",
                "corral-system",
                "--identity",
                "browser",
            ])
            .env("KUBECONFIG", &kc),
        &log,
    )?);
    let base = format!("http://127.0.0.1:{port}");
    // Both jobs admitted (team-b's card shows as taken by another namespace), then a job of
    // team-a that cannot fit.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, nodes) = get(&format!("{base}/api/v1/nodes"), &token);
        let text = nodes.to_string();
        if text.contains("(another namespace)") && text.contains("team-a/mine") {
            break;
        }
        check(
            Instant::now() < deadline,
            format!(
                "the operator never admitted both jobs ({text}); its log:\n{}",
                testenv::log_tail(&log, 30)
            ),
        )?;
        std::thread::sleep(Duration::from_millis(500));
    }
    let waits = serde_json::from_value(training_job("team-a", "waits", 4))?;
    rt.block_on(
        dynamic(
            &env,
            "team-a",
            "corral.dev",
            "v1alpha1",
            "TrainingJob",
            "trainingjobs",
        )
        .create(&PostParams::default(), &waits),
    )?;
    let reason = loop {
        let (code, d) = get(
            &format!("{base}/api/v1/namespaces/team-a/trainingjobs/waits/describe"),
            &token,
        );
        if let (200, Some(r)) = (code, d["pendingReason"].as_str()) {
            break r.to_string();
        }
        check(
            Instant::now() < deadline,
            format!(
                "the operator never said why team-a/waits waits; its log:\n{}",
                testenv::log_tail(&log, 30)
            ),
        )?;
        std::thread::sleep(Duration::from_millis(500));
    };
    let b = Browser::start()?;
    b.goto(&format!("{base}/"))?;
    b.wait("the token form", "return document.querySelector('#token')")?;
    b.type_into("#token", &token)?;
    b.click("#token-submit")?;
    b.wait(
        "the token's namespace",
        "const e = document.querySelector('#token-namespace'); return e && e.innerText === 'team-a'",
    )?;
    b.goto(&format!("{base}/#/jobs"))?;
    b.wait(
        "team-a's jobs, pushed",
        "return document.querySelector('[data-job=\"team-a/mine\"]') && document.querySelector('[data-job=\"team-a/waits\"]')",
    )?;
    b.screenshot("operator-jobs")?;
    for page in [
        "/#/jobs",
        "/#/",
        "/#/queues",
        "/#/nodes",
        "/#/usage",
        "/#/serving",
    ] {
        b.goto(&format!("{base}{page}"))?;
        b.wait(
            &format!("{page} rendered"),
            "return document.querySelector('main h1')",
        )?;
        std::thread::sleep(Duration::from_millis(1500));
        let shown = b.js("return document.documentElement.outerHTML")?;
        let shown = shown.as_str().unwrap_or_default();
        check(
            !shown.contains("team-b") && !shown.contains("secret"),
            format!("{page} shows team-b's jobs to team-a's viewer"),
        )?;
        if page == "/#/nodes" {
            check(
                shown.contains("(another namespace)"),
                "the nodes page shows a card is taken, not by whom",
            )?;
            b.screenshot("operator-nodes")?;
        }
    }
    // Its served model: listed, and its page shows its revision and its replica's job.
    b.goto(&format!("{base}/#/serving"))?;
    b.wait(
        "team-a's model on the serving page",
        "return document.querySelector('#models a[href=\"#/serving/team-a/model-a\"]')",
    )?;
    b.click("#models a[href=\"#/serving/team-a/model-a\"]")?;
    b.wait(
        "its revision and its replica",
        "return document.querySelector('#revisions tr[data-revision=\"model-a-00001\"]')
           && [...document.querySelectorAll('#model-replicas tbody tr')]
                .some(r => r.innerText.includes('model-a-serving-0')
                           && r.innerText.includes('model-a-00001'))",
    )?;
    b.screenshot("operator-served-model")?;
    // The waiting job's page says why, in the scheduler's words.
    b.goto(&format!("{base}/#/jobs/team-a/waits"))?;
    b.wait(
        "why the job waits",
        &format!(
            "const e = document.querySelector('#pending-reason'); return e && e.innerText.includes({})",
            serde_json::to_string(&reason).unwrap_or_default()
        ),
    )?;
    // Suspend the running job from its page: the API server holds it suspended.
    b.goto(&format!("{base}/#/jobs/team-a/mine"))?;
    b.wait(
        "the suspend button",
        "return document.querySelector('#suspend')",
    )?;
    b.click("#suspend")?;
    b.wait(
        "the confirmation",
        "const d = document.querySelector('#confirm'); return d && d.open",
    )?;
    b.click("#confirm-yes")?;
    let jobs = dynamic(
        &env,
        "team-a",
        "corral.dev",
        "v1alpha1",
        "TrainingJob",
        "trainingjobs",
    );
    let deadline = Instant::now() + driver::PATIENCE;
    loop {
        let j = rt.block_on(jobs.get("mine"))?;
        if j.data["spec"]["runPolicy"]["suspend"] == json!(true) {
            break;
        }
        check(Instant::now() < deadline, "not suspended from the page")?;
        std::thread::sleep(Duration::from_millis(200));
    }
    b.wait(
        "the job shown suspended",
        "const s = document.querySelector('h1 .state'); return s && s.innerText === 'Suspended'",
    )?;
    b.screenshot("operator-suspended")?;
    Ok(())
}
