//! The operator against a real kube-apiserver and etcd, envtest-style (as controller-runtime's
//! envtest): the binaries come from `KUBEBUILDER_ASSETS` (a directory holding `etcd` and
//! `kube-apiserver`, and optionally `kube-controller-manager` for garbage collection) or
//! from `TEST_ASSET_ETCD`, `TEST_ASSET_KUBE_APISERVER` and
//! `TEST_ASSET_KUBE_CONTROLLER_MANAGER`. Without them the test says it was skipped and why;
//! under `CI=true` (or `CORRAL_REQUIRE_ENVTEST=1`) it fails instead, and then needs
//! kube-controller-manager and `CORRAL_OPERATOR_BIN` too, so CI cannot pass by skipping.
//!
//! The server runs with RBAC and static tokens: an admin (`system:masters`), the operator's
//! ServiceAccount `corral-system/corral-operator` (bound by `deploy/rbac.yaml` and
//! `deploy/kubeflow-rbac.yaml` as applied) and an unprivileged user. The operator's passes run
//! in-process with the ServiceAccount's identity; nodes are Node objects with GPU labels and
//! capacity, and the kubelet is this test (it patches pod status and removes deleted pods).
//!
//! `KUBEFLOW_TRAINING_OPERATOR_CRDS` may name a directory with Kubeflow training operator's
//! own `pytorchjobs.yaml` CRD: the alongside case then runs on it (else on Corral's).
//! `tests/fixtures/real-api/*.json` hold the server's answers on the error paths; each run
//! checks them against the server, and a missing one fails the test. Only
//! `UPDATE_FIXTURES=1` writes them (captures them anew).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::kubeflow::{self, Mode};
use corral_kube::operator::reconcile_once;
use corral_kube::plan::PlanConfig;
use http::Request;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, Config};
use serde_json::{Value, json};

const ADMIN_TOKEN: &str = "envtest-admin-token";
const OPERATOR_TOKEN: &str = "envtest-operator-token";
const NOBODY_TOKEN: &str = "envtest-nobody-token";
const H100: &str = "NVIDIA-H100-80GB-HBM3";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the suite must run: under `CI=true` or `CORRAL_REQUIRE_ENVTEST=1`.
fn required() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
        || std::env::var("CORRAL_REQUIRE_ENVTEST").as_deref() == Ok("1")
}

/// Whether a prerequisite (`what`) is there. Under `CI=true` (or `CORRAL_REQUIRE_ENVTEST=1`)
/// a missing one fails the test, so CI cannot pass by skipping; elsewhere the test prints
/// why it is skipped (as `common::prerequisite` of the other crates' tests).
#[track_caller]
fn prerequisite(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    assert!(
        !required(),
        "{what}: required under CI=true or CORRAL_REQUIRE_ENVTEST=1 (tests do not skip in CI)"
    );
    eprintln!("envtest SKIPPED: {what} (outside CI; with CI=true this fails)");
    false
}

struct Assets {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: Option<PathBuf>,
}

/// The binaries, or why the suite cannot run.
fn assets() -> Result<Assets, String> {
    let from_dir = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from);
    let pick = |var: &str, name: &str| -> Option<PathBuf> {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| from_dir.as_ref().map(|d| d.join(name)))
            .filter(|p| p.is_file())
    };
    let etcd = pick("TEST_ASSET_ETCD", "etcd");
    let apiserver = pick("TEST_ASSET_KUBE_APISERVER", "kube-apiserver");
    match (etcd, apiserver) {
        (Some(etcd), Some(apiserver)) => Ok(Assets {
            etcd,
            apiserver,
            controller_manager: pick(
                "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
                "kube-controller-manager",
            ),
        }),
        _ => Err(
            "no etcd and kube-apiserver binaries: set KUBEBUILDER_ASSETS to a directory holding \
             both, or TEST_ASSET_ETCD and TEST_ASSET_KUBE_APISERVER"
                .into(),
        ),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

/// A running etcd + kube-apiserver (+ garbage collector); stopped and removed on drop.
struct Env {
    dir: PathBuf,
    children: Vec<Child>,
    url: String,
    admin: Client,
    operator: Client,
    nobody: Client,
    gc: bool,
}

impl Drop for Env {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::env::var_os("ENVTEST_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn kubeconfig(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: envtest\n    user: u\n    namespace: default\ncurrent-context: c\n"
    )
}

async fn client_for(url: &str, token: &str) -> Client {
    let kc = Kubeconfig::from_yaml(&kubeconfig(url, token)).expect("kubeconfig");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("client config");
    Client::try_from(cfg).expect("client")
}

fn spawn(cmd: &mut Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    cmd.stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"))
}

impl Env {
    async fn start(a: &Assets) -> Result<Env, String> {
        let dir = std::env::temp_dir().join(format!("corral-envtest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("certs")).map_err(|e| e.to_string())?;
        let key = dir.join("sa.key");
        let made = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048")
            .stderr(Stdio::null())
            .status();
        if !made.is_ok_and(|s| s.success()) {
            return Err("openssl is needed to make the service-account signing key".into());
        }
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},envtest-admin,1,\"system:masters\"\n\
                 {OPERATOR_TOKEN},system:serviceaccount:corral-system:corral-operator,2,\"system:serviceaccounts,system:serviceaccounts:corral-system,system:authenticated\"\n\
                 {NOBODY_TOKEN},nobody,3,\"system:authenticated\"\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        let (client_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let mut children = Vec::new();
        children.push(spawn(
            Command::new(&a.etcd)
                .arg("--name=envtest")
                .arg(format!("--data-dir={}", dir.join("etcd").display()))
                .arg(format!(
                    "--listen-client-urls=http://127.0.0.1:{client_port}"
                ))
                .arg(format!(
                    "--advertise-client-urls=http://127.0.0.1:{client_port}"
                ))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
                ))
                .arg(format!(
                    "--initial-cluster=envtest=http://127.0.0.1:{peer_port}"
                )),
            &dir.join("etcd.log"),
        ));
        children.push(spawn(
            Command::new(&a.apiserver)
                .arg(format!("--etcd-servers=http://127.0.0.1:{client_port}"))
                .arg(format!("--secure-port={api_port}"))
                .arg("--bind-address=127.0.0.1")
                .arg(format!("--cert-dir={}", dir.join("certs").display()))
                .arg(format!(
                    "--token-auth-file={}",
                    dir.join("tokens.csv").display()
                ))
                .arg("--authorization-mode=RBAC")
                .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
                .arg(format!("--service-account-key-file={}", key.display()))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    key.display()
                ))
                .arg("--service-cluster-ip-range=10.96.0.0/16")
                .arg("--allow-privileged=true")
                // More flags, e.g. `--enable-admission-plugins=OwnerReferencesPermissionEnforcement`.
                .args(
                    std::env::var("ENVTEST_KUBE_APISERVER_FLAGS")
                        .unwrap_or_default()
                        .split_whitespace(),
                ),
            &dir.join("kube-apiserver.log"),
        ));
        let url = format!("https://127.0.0.1:{api_port}");
        let admin = client_for(&url, ADMIN_TOKEN).await;
        let mut ready = false;
        for _ in 0..240 {
            if let Ok((200, _)) = raw(&admin, "GET", "/readyz", None).await {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut env = Env {
            operator: client_for(&url, OPERATOR_TOKEN).await,
            nobody: client_for(&url, NOBODY_TOKEN).await,
            admin,
            url,
            dir,
            children,
            gc: false,
        };
        if !ready {
            return Err(format!(
                "kube-apiserver not ready after 120 s; see {}",
                env.dir.join("kube-apiserver.log").display()
            ));
        }
        if let Some(kcm) = &a.controller_manager {
            let kc = env.dir.join("admin.kubeconfig");
            std::fs::write(&kc, kubeconfig(&env.url, ADMIN_TOKEN)).map_err(|e| e.to_string())?;
            env.children.push(spawn(
                Command::new(kcm)
                    .arg(format!("--kubeconfig={}", kc.display()))
                    .arg("--controllers=garbagecollector")
                    .arg("--leader-elect=false")
                    .arg(format!("--secure-port={}", free_port()))
                    .arg("--bind-address=127.0.0.1"),
                &env.dir.join("kube-controller-manager.log"),
            ));
            env.gc = true;
        }
        Ok(env)
    }
}

/// One raw call: the status code and the body as the server sent it.
async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), kube::Error> {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(
            body.map(|b| serde_json::to_vec(&b).unwrap_or_default())
                .unwrap_or_default(),
        ))
        .expect("request");
    let resp = client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap_or_default();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((code, value))
}

/// Applies every object of a multi-document YAML file (server-side apply, as `kubectl apply
/// --server-side`).
async fn apply_file(client: &Client, path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("yaml");
    apply_all(client, docs.into_iter().filter(|d| !d.is_null()).collect()).await;
}

async fn apply_all(client: &Client, docs: Vec<Value>) {
    for doc in docs {
        apply_one(client, &doc, false)
            .await
            .unwrap_or_else(|e| panic!("apply {}: {e}", doc["metadata"]["name"]));
    }
}

async fn apply_one(client: &Client, doc: &Value, dry_run: bool) -> Result<(), kube::Error> {
    let (group, version) = match doc["apiVersion"].as_str().unwrap_or("").split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap_or("").to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap_or(""));
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    };
    let mut pp = PatchParams::apply("envtest").force();
    pp.dry_run = dry_run;
    api.patch(
        doc["metadata"]["name"].as_str().unwrap_or(""),
        &pp,
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
}

async fn namespace(env: &Env, ns: &str) {
    apply_all(
        &env.admin,
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            // The ServiceAccount admission plugin needs it (no controller-manager makes it).
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": ns}}),
        ],
    )
    .await;
}

/// Waits until the API server serves `group/version` `plural` (a CRD established).
async fn served(client: &Client, group: &str, version: &str, plural: &str) {
    let path = format!("/apis/{group}/{version}/{plural}");
    for _ in 0..100 {
        if let Ok((200, _)) = raw(client, "GET", &path, None).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{path} is not served");
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn training_jobs() -> ApiResource {
    ar("corral.dev", "v1alpha1", "TrainingJob", "trainingjobs")
}

struct Operator {
    applier: Applier,
    recorder: Recorder,
}

fn operator(env: &Env) -> Operator {
    let reporter = Reporter {
        controller: "corral".into(),
        instance: Some("envtest".into()),
    };
    Operator {
        applier: Applier::new(
            env.operator.clone(),
            Some(Recorder::new(env.operator.clone(), reporter.clone())),
            RateLimiter::unlimited(),
        ),
        recorder: Recorder::new(env.operator.clone(), reporter),
    }
}

/// One operator pass with the ServiceAccount's identity; every write must succeed.
async fn pass(op: &Operator, now: Timestamp) {
    let (_, report) = reconcile_once(&op.applier, &PlanConfig::default(), now)
        .await
        .expect("the operator's lists are allowed");
    assert!(
        report.errors.is_empty(),
        "apply errors: {:?}",
        report.errors
    );
}

async fn kubeflow_pass(op: &Operator, mode: Mode, now: Timestamp) -> usize {
    let (actions, report) =
        kubeflow::apply::reconcile_once(&op.applier.client, Some(&op.recorder), mode, now)
            .await
            .expect("the integration's lists are allowed");
    assert!(
        report.errors.is_empty(),
        "kubeflow apply errors: {:?}",
        report.errors
    );
    actions.len()
}

async fn gpu_node(env: &Env, name: &str) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.admin.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "nvidia.com/gpu.product": H100, "kubernetes.io/hostname": name}},
            }))
            .expect("node"),
        )
        .await
        .expect("create node");
    let cap = json!({"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"});
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": cap, "allocatable": cap,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "envtest"}]}})),
        )
        .await
        .expect("node status");
    // The TaintNodesByCondition admission plugin taints a new node not-ready; the node
    // lifecycle controller (not run here) lifts it once the node reports Ready.
    let node = nodes.get(name).await.expect("node");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/not-ready"),
        "{taints:?}"
    );
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .expect("lift the not-ready taint");
}

/// The kubelet's part: a pod's phase (and its container's exit code).
async fn kubelet_phase(env: &Env, ns: &str, pod: &str, phase: &str, exit: Option<i32>) {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut status = json!({"phase": phase});
    let container = pods
        .get(pod)
        .await
        .expect("pod")
        .spec
        .expect("spec")
        .containers[0]
        .name
        .clone();
    let state = match (phase, exit) {
        ("Running", _) => json!({"running": {"startedAt": Timestamp::now().to_string()}}),
        (_, code) => json!({"terminated": {"exitCode": code.unwrap_or(0),
            "reason": if code.unwrap_or(0) == 0 { "Completed" } else { "Error" }}}),
    };
    status["containerStatuses"] = json!([{"name": container, "ready": phase == "Running",
        "restartCount": 0, "image": "x", "imageID": "", "state": state}]);
    pods.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("kubelet status of {ns}/{pod}: {e}"));
}

/// The kubelet's part: pods being deleted are gone once their containers stopped.
async fn kubelet_reap(env: &Env, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    for p in pods.list(&ListParams::default()).await.expect("pods").items {
        if p.metadata.deletion_timestamp.is_some() {
            let name = p.metadata.name.unwrap_or_default();
            let _ = pods
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        }
    }
}

async fn pods(env: &Env, ns: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    let mut items = api.list(&ListParams::default()).await.expect("pods").items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    items
}

async fn job(env: &Env, ns: &str, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());
    api.get_opt(name)
        .await
        .expect("get job")
        .map(|o| serde_json::to_value(o).expect("json"))
}

fn condition(job: &Value, ty: &str) -> Option<String> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == json!(ty))?["status"]
        .as_str()
        .map(str::to_string)
}

fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

async fn submit(env: &Env, doc: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        doc["metadata"]["namespace"].as_str().expect("namespace"),
        &training_jobs(),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(doc).expect("object"),
    )
    .await
    .expect("submit");
}

fn training_job(
    ns: &str,
    name: &str,
    framework: &str,
    replicas: Value,
    run_policy: Value,
) -> Value {
    json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"framework": framework, "replicas": replicas, "runPolicy": run_policy},
    })
}

fn replica(count: u32, gpu: u32) -> Value {
    json!({"count": count, "resources": {"cpu": "1", "memory": "1Gi", "gpu": gpu},
           "template": {"image": "busybox:1.36", "command": ["sh", "-c", "true"]}})
}

/// Checks that the committed answer on an error path (tests/fixtures/real-api/NAME.json)
/// still says what the server says (code, kind, status, reason; all of a body that is no
/// Status); a missing one fails. With `UPDATE_FIXTURES=1` it captures the answer instead.
fn fixture(name: &str, code: u16, body: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real-api")
        .join(format!("{name}.json"));
    if std::env::var("UPDATE_FIXTURES").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("fixtures dir");
        let saved = json!({"code": code, "body": body});
        let text = serde_json::to_string_pretty(&saved).expect("json") + "\n";
        std::fs::write(&path, text).expect("write fixture");
        eprintln!("envtest: wrote {}", path.display());
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {}: {e}; run with UPDATE_FIXTURES=1 to capture it from the server, \
             and commit it (the server said {code}: {body})",
            path.display()
        )
    });
    let saved: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    assert_eq!(saved["code"], json!(code), "{name}");
    if !body.is_object() || !saved["body"].is_object() {
        // Not a Status (e.g. the text `404 page not found`): all of it.
        assert_eq!(&saved["body"], body, "{name}: body");
        return;
    }
    for k in ["kind", "status", "reason", "code"] {
        assert_eq!(saved["body"][k], body[k], "{name}: {k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envtest() {
    let assets = match assets() {
        Ok(a) => a,
        Err(why) => {
            prerequisite(false, &why);
            return;
        }
    };
    // Without it the garbage collector's checks do not run: fine on a laptop, not in CI.
    assert!(
        assets.controller_manager.is_some() || !required(),
        "no kube-controller-manager binary: put it in KUBEBUILDER_ASSETS or set \
         TEST_ASSET_KUBE_CONTROLLER_MANAGER; required under CI=true or CORRAL_REQUIRE_ENVTEST=1"
    );
    let env = match Env::start(&assets).await {
        Ok(e) => e,
        Err(why) => panic!("envtest could not start its API server: {why}"),
    };
    eprintln!(
        "envtest: kube-apiserver at {} (garbage collector: {})",
        env.url, env.gc
    );

    error_paths_before_crds(&env).await;
    install(&env).await;
    error_paths(&env).await;
    for n in ["gpu-1", "gpu-2"] {
        gpu_node(&env, n).await;
    }
    let op = operator(&env);
    eprintln!("envtest: crd_output_dry_runs");
    crd_output_dry_runs(&env).await;
    eprintln!("envtest: pytorch_gang");
    pytorch_gang(&env, &op).await;
    eprintln!("envtest: mpi_hostfile_and_ttl");
    mpi_hostfile_and_ttl(&env, &op).await;
    eprintln!("envtest: suspend_resume");
    suspend_resume(&env, &op).await;
    eprintln!("envtest: kubeflow_served");
    kubeflow_served(&env, &op).await;
    eprintln!("envtest: operator_binary");
    operator_binary(&env).await;
    eprintln!("envtest: kubeflow_alongside");
    kubeflow_alongside(&env, &op).await;
    eprintln!("envtest: defects_on_the_real_server");
    defects_on_the_real_server(&env, &op).await;
}

/// One operator pass that may report errors (a write the server refuses is the point).
async fn pass_allowing_errors(op: &Operator, now: Timestamp) -> Vec<String> {
    let (_, report) = reconcile_once(&op.applier, &PlanConfig::default(), now)
        .await
        .expect("the operator's lists are allowed");
    report.errors.iter().map(|e| e.to_string()).collect()
}

/// Issue 19's defects, on the real server: a job without an image is refused by the CRD,
/// a pod template the server rejects fails the job and frees its GPUs, a pod deleted from
/// outside restarts the gang (counted), and a queue's namespaces are enforced.
async fn defects_on_the_real_server(env: &Env, op: &Operator) {
    let ns = "defects";
    namespace(env, ns).await;

    // #4: no image: the CRD refuses the object, naming the field.
    let mut no_image = training_job(
        ns,
        "no-image",
        "pytorch",
        json!({"worker": replica(1, 1)}),
        json!({}),
    );
    no_image["spec"]["replicas"]["worker"]["template"]
        .as_object_mut()
        .expect("template")
        .remove("image");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());
    let err = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(no_image).expect("object"),
        )
        .await
        .expect_err("a job without an image was accepted");
    let text = err.to_string();
    assert!(text.contains("image"), "{text}");

    // #3: a pod template the server refuses (422) fails the job with the server's message
    // and releases its admission, instead of retrying every pass holding GPUs.
    let mut bad = training_job(
        ns,
        "bad-toleration",
        "pytorch",
        json!({"worker": replica(1, 8)}),
        json!({}),
    );
    bad["spec"]["replicas"]["worker"]["template"]["podTemplate"] = json!({
        "spec": {"tolerations": [{"key": "k", "operator": "Sometimes", "value": "v"}]}
    });
    submit(env, bad).await;
    let now = Timestamp::now();
    let mut failed = None;
    let mut t = now;
    for _ in 0..6 {
        let _ = pass_allowing_errors(op, t).await;
        kubelet_reap(env, ns).await;
        let j = job(env, ns, "bad-toleration").await.expect("job");
        if condition(&j, "Failed").as_deref() == Some("True") {
            failed = Some(j);
            break;
        }
        t += SignedDuration::from_secs(1);
    }
    let j = failed.expect("the rejected job did not fail");
    let status = j["status"].to_string();
    assert!(
        status.contains("Sometimes") || status.contains("operator"),
        "{status}"
    );
    assert!(
        j["metadata"]["annotations"]
            .get("corral.dev/admission")
            .is_none()
            || pods(env, ns).await.is_empty(),
        "the failed job still holds its admission: {j}"
    );

    // #8: a running gang loses a pod to `kubectl delete pod`: the gang restarts, counted.
    submit(
        env,
        training_job(
            ns,
            "evicted",
            "pytorch",
            json!({"master": replica(1, 1), "worker": replica(1, 1)}),
            json!({"backoffLimit": 3}),
        ),
    )
    .await;
    t += SignedDuration::from_secs(1);
    pass(op, t).await;
    for p in ["evicted-master-0", "evicted-worker-0"] {
        kubelet_phase(env, ns, p, "Running", None).await;
    }
    t += SignedDuration::from_secs(1);
    pass(op, t).await;
    let pod_api: Api<Pod> = Api::namespaced(env.admin.clone(), ns);
    pod_api
        .delete("evicted-worker-0", &Default::default())
        .await
        .expect("delete pod");
    kubelet_reap(env, ns).await;
    let mut restarted = None;
    for _ in 0..20 {
        t += SignedDuration::from_secs(15);
        let _ = pass_allowing_errors(op, t).await;
        kubelet_reap(env, ns).await;
        let j = job(env, ns, "evicted").await.expect("job");
        if j["status"]["restartCount"] == json!(1) {
            restarted = Some(j);
            break;
        }
    }
    let j = restarted.expect("the lost pod did not restart the gang");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("evicted"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        reasons.iter().any(|r| r == "Restarting"),
        "{reasons:?}; {}",
        j["status"]
    );

    // #5: a queue that lists namespaces admits no other namespace's job.
    let queues: Api<DynamicObject> = Api::all_with(
        env.admin.clone(),
        &ar("corral.dev", "v1alpha1", "Queue", "queues"),
    );
    queues
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "corral.dev/v1alpha1", "kind": "Queue",
                "metadata": {"name": "team-vision"},
                "spec": {"namespaces": ["vision"]},
            }))
            .expect("queue"),
        )
        .await
        .expect("create queue");
    let mut foreign = training_job(
        ns,
        "foreign",
        "pytorch",
        json!({"worker": replica(1, 1)}),
        json!({}),
    );
    foreign["spec"]["queue"] = json!("team-vision");
    submit(env, foreign).await;
    t += SignedDuration::from_secs(1);
    let _ = pass_allowing_errors(op, t).await;
    let j = job(env, ns, "foreign").await.expect("job");
    assert_ne!(
        condition(&j, "Admitted").as_deref(),
        Some("True"),
        "a job of {ns} was admitted to team-vision: {}",
        j["status"]
    );
    let status = j["status"].to_string();
    assert!(
        status.contains("team-vision") && status.contains("vision"),
        "the reason names the queue and its namespaces: {status}"
    );
}

async fn error_paths_before_crds(env: &Env) {
    let (code, body) = raw(
        &env.admin,
        "GET",
        "/apis/corral.dev/v1alpha1/namespaces/default/trainingjobs",
        None,
    )
    .await
    .expect("call");
    assert_eq!(code, 404, "{body}");
    fixture("crd-missing-404", code, &body);
}

async fn install(env: &Env) {
    namespace(env, "corral-system").await;
    apply_file(&env.admin, &repo_root().join("deploy/crds.yaml")).await;
    apply_file(&env.admin, &repo_root().join("deploy/rbac.yaml")).await;
    for plural in ["trainingjobs", "queues", "nodepools"] {
        served(&env.admin, "corral.dev", "v1alpha1", plural).await;
    }
    // Kubeflow's kinds as Corral serves them, and the RBAC of the integration; the
    // training operator's own PyTorchJob CRD when given (the alongside case runs on it).
    let real = std::env::var_os("KUBEFLOW_TRAINING_OPERATOR_CRDS").map(PathBuf::from);
    let text = std::fs::read_to_string(repo_root().join("deploy/kubeflow-crds.yaml"))
        .expect("deploy/kubeflow-crds.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("yaml");
    let docs = docs
        .into_iter()
        .filter(|d| !d.is_null())
        .filter(|d| real.is_none() || d["metadata"]["name"] != json!("pytorchjobs.kubeflow.org"))
        .collect();
    apply_all(&env.admin, docs).await;
    if let Some(dir) = &real {
        apply_file(&env.admin, &dir.join("pytorchjobs.yaml")).await;
        eprintln!("envtest: PyTorchJob CRD of Kubeflow's training operator installed");
    }
    apply_file(&env.admin, &repo_root().join("deploy/kubeflow-rbac.yaml")).await;
    // A kind the group does not serve (an operator newer than its CRDs). kube-apiserver
    // v1.36.2 answers it, as a group that is not there at all, with the text `404 page not
    // found`, not a Status (see the fixture).
    let (code, body) = raw(
        &env.admin,
        "GET",
        "/apis/corral.dev/v1alpha1/namespaces/default/nosuchkinds",
        None,
    )
    .await
    .expect("call");
    assert_eq!(code, 404, "{body}");
    fixture("crd-kind-missing-404", code, &body);
    for k in &kubeflow::KINDS {
        served(&env.admin, kubeflow::GROUP, k.version, k.plural).await;
    }
}

async fn error_paths(env: &Env) {
    namespace(env, "fixtures").await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "taken", "namespace": "fixtures"},
        "spec": {"schedulerName": "corral", "containers": [{"name": "c", "image": "busybox"}]}});
    let path = "/api/v1/namespaces/fixtures/pods";
    let (code, _) = raw(&env.admin, "POST", path, Some(pod.clone()))
        .await
        .expect("call");
    assert_eq!(code, 201);
    let (code, body) = raw(&env.admin, "POST", path, Some(pod.clone()))
        .await
        .expect("call");
    assert_eq!(code, 409, "{body}");
    fixture("pod-already-exists-409", code, &body);

    let mut invalid = pod.clone();
    invalid["metadata"]["name"] = json!("invalid");
    invalid["spec"]["tolerations"] =
        json!([{"key": "nvidia.com/gpu", "operator": "Sometimes", "effect": "NoSchedule"}]);
    let (code, body) = raw(&env.admin, "POST", path, Some(invalid))
        .await
        .expect("call");
    assert_eq!(code, 422, "{body}");
    fixture("pod-invalid-toleration-422", code, &body);

    let mut other = pod;
    other["metadata"]["name"] = json!("forbidden");
    let (code, body) = raw(&env.nobody, "POST", path, Some(other))
        .await
        .expect("call");
    assert_eq!(code, 403, "{body}");
    fixture("pod-create-forbidden-403", code, &body);

    // What the operator may not do by its RBAC: delete a namespace.
    let (code, body) = raw(&env.operator, "DELETE", "/api/v1/namespaces/fixtures", None)
        .await
        .expect("call");
    assert_eq!(code, 403, "{body}");
}

/// `corral crd` output is accepted by the server as is (server-side dry run).
async fn crd_output_dry_runs(env: &Env) {
    for crd in corral_api::crd::all_crds()
        .into_iter()
        .chain(kubeflow::crds::all_crds())
    {
        apply_one(&env.admin, &crd, true)
            .await
            .unwrap_or_else(|e| panic!("dry run of {}: {e}", crd["metadata"]["name"]));
    }
}

async fn pytorch_gang(env: &Env, op: &Operator) {
    let ns = "ml";
    namespace(env, ns).await;
    submit(
        env,
        training_job(
            ns,
            "ddp",
            "pytorch",
            json!({"master": replica(1, 8), "worker": replica(1, 8)}),
            json!({"backoffLimit": 3}),
        ),
    )
    .await;
    let now = Timestamp::now();
    pass(op, now).await;
    let ps = pods(env, ns).await;
    assert_eq!(
        ps.len(),
        2,
        "one pod per replica; job: {}",
        job(env, ns, "ddp").await.unwrap_or_default()
    );
    let mut nodes = Vec::new();
    for p in &ps {
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.scheduler_name.as_deref(), Some("corral"));
        nodes.push(spec.node_name.clone().expect("bound through pods/binding"));
        assert_eq!(env_of(p, "WORLD_SIZE").as_deref(), Some("2"));
        let master = env_of(p, "MASTER_ADDR").expect("MASTER_ADDR");
        assert!(master.starts_with("ddp-master-0.ddp.ml.svc"), "{master}");
    }
    nodes.sort();
    assert_eq!(
        nodes,
        ["gpu-1", "gpu-2"],
        "8 GPUs each: one replica per node"
    );
    let worker = ps
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("ddp-worker-0"))
        .expect("worker");
    assert_eq!(env_of(worker, "RANK").as_deref(), Some("1"));
    let svc: Api<Service> = Api::namespaced(env.admin.clone(), ns);
    let svc = svc.get("ddp").await.expect("headless Service");
    assert_eq!(svc.spec.and_then(|s| s.cluster_ip).as_deref(), Some("None"));
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(
        condition(&j, "Admitted").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("ddp"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.contains(&"Admitted".to_string()), "{reasons:?}");

    for p in ["ddp-master-0", "ddp-worker-0"] {
        kubelet_phase(env, ns, p, "Running", None).await;
    }
    pass(op, now + SignedDuration::from_secs(1)).await;
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(j["status"]["phase"], json!("Running"), "{}", j["status"]);

    // A failed worker restarts the gang: both pods go, new ones come, the restart is counted.
    let old: Vec<String> = ps.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    kubelet_phase(env, ns, "ddp-worker-0", "Failed", Some(1)).await;
    let mut t = now + SignedDuration::from_secs(2);
    let mut restarted = false;
    for _ in 0..20 {
        pass(op, t).await;
        kubelet_reap(env, ns).await;
        let fresh = pods(env, ns).await;
        if fresh.len() == 2
            && fresh.iter().all(|p| {
                p.metadata.uid.as_ref().is_some_and(|u| !old.contains(u))
                    && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
            })
        {
            restarted = true;
            break;
        }
        t += SignedDuration::from_secs(15);
    }
    assert!(
        restarted,
        "the gang was not restarted: {:?}",
        pods(env, ns).await
    );
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(j["status"]["restartCount"], json!(1), "{}", j["status"]);

    for p in ["ddp-master-0", "ddp-worker-0"] {
        kubelet_phase(env, ns, p, "Succeeded", Some(0)).await;
    }
    pass(op, t + SignedDuration::from_secs(1)).await;
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(
        condition(&j, "Succeeded").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
}

async fn mpi_hostfile_and_ttl(env: &Env, op: &Operator) {
    let ns = "mpi";
    namespace(env, ns).await;
    submit(
        env,
        training_job(
            ns,
            "allreduce",
            "mpi",
            json!({"launcher": replica(1, 0), "worker": replica(2, 1)}),
            json!({"ttlSecondsAfterFinished": 60}),
        ),
    )
    .await;
    let now = Timestamp::now();
    pass(op, now).await;
    assert_eq!(pods(env, ns).await.len(), 3);
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), ns);
    let cm = cms.get("allreduce-launch").await.expect("launch ConfigMap");
    let hostfile = cm
        .data
        .unwrap_or_default()
        .into_values()
        .find(|v| v.contains("slots="))
        .expect("a hostfile");
    assert!(
        hostfile.contains("allreduce-worker-0.allreduce.mpi.svc"),
        "{hostfile}"
    );
    assert!(
        hostfile.contains("allreduce-worker-1.allreduce.mpi.svc"),
        "{hostfile}"
    );
    // Issue 19 #11: the ssh key Secret as Kubeflow's MPI operator makes it, created with
    // the deployed RBAC and mounted in launcher and workers.
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), ns);
    let secret = secrets.get("allreduce-ssh").await.expect("ssh Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/ssh-auth"));
    let keys: Vec<String> = secret.data.unwrap_or_default().into_keys().collect();
    assert!(
        keys.contains(&"ssh-privatekey".to_string()) && keys.contains(&"ssh-publickey".to_string()),
        "{keys:?}"
    );
    for p in pods(env, ns).await {
        let spec = p.spec.expect("spec");
        let mounted = spec.volumes.unwrap_or_default().iter().any(|v| {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some("allreduce-ssh"))
        });
        assert!(
            mounted,
            "{:?} does not mount the ssh Secret",
            p.metadata.name
        );
    }

    for p in [
        "allreduce-launcher-0",
        "allreduce-worker-0",
        "allreduce-worker-1",
    ] {
        kubelet_phase(env, ns, p, "Running", None).await;
    }
    pass(op, now + SignedDuration::from_secs(1)).await;
    kubelet_phase(env, ns, "allreduce-launcher-0", "Succeeded", Some(0)).await;
    pass(op, now + SignedDuration::from_secs(2)).await;
    kubelet_reap(env, ns).await;
    let j = job(env, ns, "allreduce").await.expect("job");
    assert_eq!(
        condition(&j, "Succeeded").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
    // Within its TTL it stays; after, the operator deletes it.
    pass(op, now + SignedDuration::from_secs(30)).await;
    assert!(
        job(env, ns, "allreduce").await.is_some(),
        "deleted before its TTL"
    );
    pass(op, now + SignedDuration::from_secs(120)).await;
    assert!(
        job(env, ns, "allreduce").await.is_none(),
        "not deleted after its TTL"
    );
    if env.gc {
        // Owned objects go with it (the garbage collector of kube-controller-manager; up to
        // a minute on a loaded machine).
        let mut gone = false;
        for _ in 0..200 {
            kubelet_reap(env, ns).await;
            if pods(env, ns).await.is_empty()
                && cms
                    .get_opt("allreduce-launch")
                    .await
                    .ok()
                    .flatten()
                    .is_none()
            {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            gone,
            "pods and ConfigMap of a deleted job were not collected"
        );
    }
}

async fn suspend_resume(env: &Env, op: &Operator) {
    let ns = "sus";
    namespace(env, ns).await;
    submit(
        env,
        training_job(
            ns,
            "nap",
            "generic",
            json!({"worker": replica(1, 1)}),
            json!({}),
        ),
    )
    .await;
    let now = Timestamp::now();
    pass(op, now).await;
    assert_eq!(pods(env, ns).await.len(), 1);
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());
    let set = |v: bool| json!({"spec": {"runPolicy": {"suspend": v}}});
    api.patch("nap", &PatchParams::default(), &Patch::Merge(set(true)))
        .await
        .expect("suspend");
    pass(op, now + SignedDuration::from_secs(1)).await;
    kubelet_reap(env, ns).await;
    pass(op, now + SignedDuration::from_secs(2)).await;
    assert!(
        pods(env, ns).await.is_empty(),
        "a suspended job runs nothing"
    );
    let j = job(env, ns, "nap").await.expect("job");
    assert_eq!(
        condition(&j, "Suspended").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
    api.patch("nap", &PatchParams::default(), &Patch::Merge(set(false)))
        .await
        .expect("resume");
    pass(op, now + SignedDuration::from_secs(3)).await;
    assert_eq!(pods(env, ns).await.len(), 1, "resumed");
    // Done with it: its GPU is free for the next cases.
    api.delete("nap", &DeleteParams::default())
        .await
        .expect("delete");
    pass(op, now + SignedDuration::from_secs(4)).await;
    kubelet_reap(env, ns).await;
}

async fn kubeflow_served(env: &Env, op: &Operator) {
    let ns = "kf-serve";
    namespace(env, ns).await;
    let jax = ar("kubeflow.org", "v1", "JAXJob", "jaxjobs");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &jax);
    let container = json!({"name": "jax", "image": "ghcr.io/jax/jax:0.4",
        "command": ["python", "train.py"], "resources": {"limits": {"nvidia.com/gpu": 1}}});
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "JAXJob",
            "metadata": {"name": "jx", "namespace": ns},
            "spec": {"runPolicy": {"ttlSecondsAfterFinished": 60},
            "jaxReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container]}}}}},
        }))
        .expect("JAXJob"),
    )
    .await
    .expect("kubectl apply of a JAXJob works");
    let now = Timestamp::now();
    kubeflow_pass(op, Mode::Serve, now).await;
    let tj = job(env, ns, "jx").await.expect("owned TrainingJob");
    assert_eq!(
        tj["metadata"]["ownerReferences"][0]["kind"],
        json!("JAXJob")
    );
    pass(op, now + SignedDuration::from_secs(1)).await;
    let ps = pods(env, ns).await;
    assert_eq!(ps.len(), 2);
    for p in &ps {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Running",
            None,
        )
        .await;
    }
    pass(op, now + SignedDuration::from_secs(2)).await;
    kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(3)).await;
    let kf = api.get("jx").await.expect("JAXJob");
    let kf = serde_json::to_value(kf).expect("json");
    assert_eq!(
        kf["status"]["replicaStatuses"]["Worker"]["active"],
        json!(2),
        "{}",
        kf["status"]
    );
    // `kubectl get jaxjobs`: the server's table, State column from the last condition.
    let (code, table) = raw_table(
        env,
        &format!("/apis/kubeflow.org/v1/namespaces/{ns}/jaxjobs"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(table["rows"][0]["cells"][1], json!("Running"), "{table}");

    for p in &ps {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Succeeded",
            Some(0),
        )
        .await;
    }
    pass(op, now + SignedDuration::from_secs(4)).await;
    kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(5)).await;
    let (_, table) = raw_table(
        env,
        &format!("/apis/kubeflow.org/v1/namespaces/{ns}/jaxjobs"),
    )
    .await;
    assert_eq!(table["rows"][0]["cells"][1], json!("Succeeded"), "{table}");
    // Nothing more to write.
    assert_eq!(
        kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(6)).await,
        0
    );
    // After its TTL: the TrainingJob, then the JAXJob, go; nothing runs again.
    pass(op, now + SignedDuration::from_secs(200)).await;
    assert!(
        job(env, ns, "jx").await.is_none(),
        "TrainingJob deleted after its TTL"
    );
    kubeflow_pass(op, Mode::Serve, now + SignedDuration::from_secs(201)).await;
    assert!(
        api.get_opt("jx").await.expect("get").is_none(),
        "JAXJob deleted after its TTL"
    );
    assert!(job(env, ns, "jx").await.is_none(), "not run again");
}

async fn raw_table(env: &Env, path: &str) -> (u16, Value) {
    let req = Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(kube::client::Body::empty())
        .expect("request");
    let resp = env.admin.send(req).await.expect("table");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn kubeflow_alongside(env: &Env, op: &Operator) {
    let ns = "kf-along";
    namespace(env, ns).await;
    let pt = ar("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &pt);
    let replica = |n: u32| {
        json!({"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.5.1",
            "command": ["python", "train.py"], "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}})
    };
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "big", "namespace": ns, "labels": {"corral.dev/queue": "default"}},
            "spec": {"runPolicy": {"suspend": false},
                     "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}},
        }))
        .expect("PyTorchJob"),
    )
    .await
    .expect("create PyTorchJob");
    let now = Timestamp::now();
    kubeflow_pass(op, Mode::Alongside, now).await;
    let kf = serde_json::to_value(api.get("big").await.expect("job")).expect("json");
    assert_eq!(
        kf["spec"]["runPolicy"]["suspend"],
        json!(true),
        "suspended until admitted"
    );
    let w = job(env, ns, "big").await.expect("workload");
    assert_eq!(
        w["metadata"]["annotations"]["corral.dev/runner"],
        json!("kubeflow.org")
    );

    pass(op, now + SignedDuration::from_secs(1)).await;
    assert!(
        pods(env, ns).await.is_empty(),
        "Corral makes no pods of a Kubeflow-run job"
    );
    let w = job(env, ns, "big").await.expect("workload");
    let admission: Value = serde_json::from_str(
        w["metadata"]["annotations"]["corral.dev/admission"]
            .as_str()
            .unwrap_or_else(|| panic!("not admitted: {}", w["status"])),
    )
    .expect("json");
    kubeflow_pass(op, Mode::Alongside, now + SignedDuration::from_secs(2)).await;
    let kf = serde_json::to_value(api.get("big").await.expect("job")).expect("json");
    assert_eq!(
        kf["spec"]["runPolicy"]["suspend"],
        json!(false),
        "unsuspended once admitted"
    );
    for (rtype, role) in [("Master", "master"), ("Worker", "worker")] {
        let node = admission["placements"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["role"] == json!(role)))
            .expect("placement")["node"]
            .clone();
        let terms = &kf["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(
            terms[0]["matchExpressions"][0]["values"],
            json!([node]),
            "{rtype}: {terms}"
        );
    }
    assert_eq!(
        kubeflow_pass(op, Mode::Alongside, now + SignedDuration::from_secs(3)).await,
        0
    );

    // Kubeflow's operator reports it finished: the workload goes, the GPUs are free.
    api.patch_status(
        "big",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"conditions": [{"type": "Succeeded", "status": "True",
            "reason": "PyTorchJobSucceeded", "message": "done",
            "lastUpdateTime": Timestamp::now().to_string(),
            "lastTransitionTime": Timestamp::now().to_string()}]}}),
        ),
    )
    .await
    .expect("status as Kubeflow's operator writes it");
    kubeflow_pass(op, Mode::Alongside, now + SignedDuration::from_secs(4)).await;
    assert!(job(env, ns, "big").await.is_none(), "workload deleted");
}

/// The operator binary as deployed: leader election, watches, `--kubeflow serve`, with the
/// ServiceAccount's identity. `CORRAL_OPERATOR_BIN` names it (e.g. target/debug/corral).
async fn operator_binary(env: &Env) {
    let Some(bin) = std::env::var_os("CORRAL_OPERATOR_BIN") else {
        prerequisite(
            false,
            "operator binary case: set CORRAL_OPERATOR_BIN (e.g. target/release/corral)",
        );
        return;
    };
    let ns = "kf-bin";
    namespace(env, ns).await;
    let kc = env.dir.join("operator.kubeconfig");
    std::fs::write(&kc, kubeconfig(&env.url, OPERATOR_TOKEN)).expect("kubeconfig");
    let port = free_port();
    let mut child = spawn(
        Command::new(bin)
            .args(["operator", "--kubeflow", "serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args([
                "--lease-namespace",
                "corral-system",
                "--identity",
                "envtest-op",
            ])
            .env("KUBECONFIG", &kc)
            .env("RUST_LOG", "info"),
        &env.dir.join("operator.log"),
    );
    let pt = ar("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs");
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &pt);
    let replica = json!({"replicas": 1, "template": {"spec": {"containers": [{
        "name": "pytorch", "image": "pytorch/pytorch:2.5.1", "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}});
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "live", "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
        }))
        .expect("PyTorchJob"),
    )
    .await
    .expect("create PyTorchJob");
    // Watches wake the operator: the job is converted, admitted and its pods bound.
    let mut bound = Vec::new();
    for _ in 0..120 {
        bound = pods(env, ns)
            .await
            .into_iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .collect();
        if bound.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = || std::fs::read_to_string(env.dir.join("operator.log")).unwrap_or_default();
    assert_eq!(bound.len(), 2, "operator log:\n{}", log());
    for p in &bound {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Running",
            None,
        )
        .await;
    }
    let mut running = false;
    for _ in 0..120 {
        let kf = serde_json::to_value(api.get("live").await.expect("job")).expect("json");
        if kf["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == json!("Running") && c["status"] == json!("True"))
        }) {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(running, "no Running condition; operator log:\n{}", log());
    let lease: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin.clone(), "corral-system");
    let holder = lease
        .get("corral-operator")
        .await
        .expect("Lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("envtest-op"));
    // Done: free its GPUs, stop the operator as Kubernetes does (SIGTERM).
    for p in &bound {
        kubelet_phase(
            env,
            ns,
            p.metadata.name.as_deref().unwrap_or(""),
            "Succeeded",
            Some(0),
        )
        .await;
    }
    let mut succeeded = false;
    for _ in 0..120 {
        let kf = serde_json::to_value(api.get("live").await.expect("job")).expect("json");
        if kf["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == json!("Succeeded") && c["status"] == json!("True"))
        }) {
            succeeded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        succeeded,
        "no Succeeded condition; operator log:\n{}",
        log()
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let stopped = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        child.try_wait().ok().flatten().is_some()
    });
    if !stopped {
        let _ = child.kill();
    }
    let _ = child.wait();
    assert!(stopped, "the operator did not stop on SIGTERM");
}
