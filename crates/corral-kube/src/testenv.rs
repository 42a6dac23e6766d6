//! A real Kubernetes control plane for tests and benchmarks, envtest-style (as
//! controller-runtime's envtest): etcd + kube-apiserver (+ kube-controller-manager's garbage
//! collector) started from `KUBEBUILDER_ASSETS`, with RBAC, static tokens of three identities
//! (an admin, the operator's ServiceAccount, an unprivileged user) and an audit log of every
//! write of the operator's ServiceAccount. The one way to start it: the envtest suite
//! (tests/envtest.rs) and `corral bench operator` both call [`Env::start`].
//!
//! Beside the start: Corral's install as deployed ([`install_corral`]: deploy/crds.yaml and
//! deploy/rbac.yaml, server-side applied) and fake GPU nodes ([`gpu_node`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::Request;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

use crate::consts::{GPU_PRODUCT_LABEL, GPU_RESOURCE};

pub const ADMIN_TOKEN: &str = "envtest-admin-token";
pub const OPERATOR_TOKEN: &str = "envtest-operator-token";
pub const NOBODY_TOKEN: &str = "envtest-nobody-token";
/// Two more tokens of the operator's ServiceAccount, one per replica of the leadership case:
/// the same user (and so the same RBAC), told apart in the audit log by their uids.
pub const REPLICA_TOKENS: [(&str, &str); 2] = [
    ("envtest-replica-a-token", "replica-a"),
    ("envtest-replica-b-token", "replica-b"),
];
/// The operator's user name, as the audit log has it.
pub const OPERATOR_USER: &str = "system:serviceaccount:corral-system:corral-operator";
/// Every write of the operator's ServiceAccount, as the API server received it.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [\"system:serviceaccount:corral-system:corral-operator\"]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
";

pub struct Assets {
    etcd: PathBuf,
    apiserver: PathBuf,
    pub controller_manager: Option<PathBuf>,
}

/// The binaries, or why the suite cannot run.
pub fn assets() -> Result<Assets, String> {
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

/// A port to listen on, below Linux's ephemeral range (32768-60999): a port the kernel handed
/// out for `:0` may be taken, before the server binds it, as the local end of an outgoing
/// connection (kube-apiserver's own to etcd), and then the server cannot start.
pub fn free_port() -> Result<u16, String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
        ^ (u64::from(std::process::id()) << 20);
    for _ in 0..1_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mixed =
            (seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        // 10000-19999: apart from the embedded test clusters' replica ports (20000-31999,
        // tests/common/cluster.rs), which share a test binary with this (the dashboard's
        // browser tests): a kube-apiserver on a replica's port once made that replica
        // fail with `Address already in use`.
        let port = 10_000 + ((mixed >> 33) % 10_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free local port in 10000-19999".into())
}

/// The last lines of a child's log, for an error that must explain itself after the
/// directory holding the log is gone.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A running etcd + kube-apiserver (+ garbage collector); stopped and removed on drop.
pub struct Env {
    /// Its files: certificates, tokens, the logs (`kube-apiserver.log`, `etcd.log`,
    /// `audit.log`); removed on drop unless `ENVTEST_KEEP` is set.
    pub dir: PathBuf,
    /// etcd, kube-apiserver, then kube-controller-manager when it runs.
    children: Vec<Child>,
    pub url: String,
    /// `system:masters`.
    pub admin: Client,
    /// The operator's ServiceAccount (`OPERATOR_USER`), as deploy/rbac.yaml binds it.
    pub operator: Client,
    /// Authenticated, no rights.
    pub nobody: Client,
    /// Whether kube-controller-manager's garbage collector runs.
    pub gc: bool,
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

pub fn kubeconfig(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: envtest\n    user: u\n    namespace: default\ncurrent-context: c\n"
    )
}

pub async fn client_for(url: &str, token: &str) -> Result<Client, String> {
    let kc =
        Kubeconfig::from_yaml(&kubeconfig(url, token)).map_err(|e| format!("kubeconfig: {e}"))?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("client config: {e}"))?;
    Client::try_from(cfg).map_err(|e| format!("client: {e}"))
}

/// Starts `cmd` with its stdout and stderr in `log`.
pub fn spawn(cmd: &mut Command, log: &Path) -> Result<Child, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("start {cmd:?}: {e}"))
}

impl Env {
    /// Starts the cluster; a start that fails (a port taken after all, a server that exits)
    /// is tried again on fresh ports, twice, before the test gives up with the logs.
    pub async fn start(a: &Assets, prefix: &str) -> Result<Env, String> {
        let mut why = Vec::new();
        for attempt in 1..=3 {
            match Env::start_once(a, prefix, attempt).await {
                Ok(env) => return Ok(env),
                Err(e) => {
                    eprintln!("{prefix}: start {attempt} of 3 failed: {e}");
                    why.push(format!("start {attempt}: {e}"));
                }
            }
        }
        Err(why.join("\n\n"))
    }

    async fn start_once(a: &Assets, prefix: &str, attempt: u32) -> Result<Env, String> {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{attempt}", std::process::id()));
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
        let sa_groups =
            "\"system:serviceaccounts,system:serviceaccounts:corral-system,system:authenticated\"";
        let mut tokens = format!(
            "{ADMIN_TOKEN},envtest-admin,1,\"system:masters\"\n\
             {OPERATOR_TOKEN},{OPERATOR_USER},2,{sa_groups}\n\
             {NOBODY_TOKEN},nobody,3,\"system:authenticated\"\n"
        );
        for (token, uid) in REPLICA_TOKENS {
            tokens.push_str(&format!("{token},{OPERATOR_USER},{uid},{sa_groups}\n"));
        }
        std::fs::write(dir.join("tokens.csv"), tokens).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).map_err(|e| e.to_string())?;
        let (client_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let mut children = Vec::new();
        // etcd first: kube-apiserver is `children[APISERVER]`.
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
        )?);
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
                .arg(format!(
                    "--audit-policy-file={}",
                    dir.join("audit-policy.yaml").display()
                ))
                .arg(format!(
                    "--audit-log-path={}",
                    dir.join("audit.log").display()
                ))
                .arg("--audit-log-mode=blocking")
                // More flags, e.g. `--enable-admission-plugins=OwnerReferencesPermissionEnforcement`.
                .args(
                    std::env::var("ENVTEST_KUBE_APISERVER_FLAGS")
                        .unwrap_or_default()
                        .split_whitespace(),
                ),
            &dir.join("kube-apiserver.log"),
        )?);
        let url = format!("https://127.0.0.1:{api_port}");
        let admin = client_for(&url, ADMIN_TOKEN).await?;
        let mut env = Env {
            operator: client_for(&url, OPERATOR_TOKEN).await?,
            nobody: client_for(&url, NOBODY_TOKEN).await?,
            admin,
            url,
            dir,
            children,
            gc: false,
        };
        let mut exited = None;
        let mut ready = false;
        for _ in 0..240 {
            if let Ok((200, _)) = raw(&env.admin, "GET", "/readyz", None).await {
                ready = true;
                break;
            }
            // A server that has exited will not become ready: say why at once.
            if let Some((i, status)) = env
                .children
                .iter_mut()
                .enumerate()
                .find_map(|(i, c)| c.try_wait().ok().flatten().map(|s| (i, s)))
            {
                exited = Some(format!(
                    "{} exited ({status})",
                    ["etcd", "kube-apiserver"][i.min(1)]
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if !ready {
            return Err(format!(
                "{}; the last lines of kube-apiserver.log:\n{}\nand of etcd.log:\n{}",
                exited.unwrap_or_else(|| "kube-apiserver not ready after 120 s".into()),
                log_tail(&env.dir.join("kube-apiserver.log"), 25),
                log_tail(&env.dir.join("etcd.log"), 10),
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
                    .arg(format!("--secure-port={}", free_port()?))
                    .arg("--bind-address=127.0.0.1"),
                &env.dir.join("kube-controller-manager.log"),
            )?);
            env.gc = true;
        }
        Ok(env)
    }
}

/// One raw call: the status code and the body as the server sent it.
pub async fn raw(
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
        .map_err(|e| kube::Error::Service(Box::new(e)))?;
    let resp = client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap_or_default();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((code, value))
}

/// The shipped CRDs and the operator's RBAC, as `kubectl apply --server-side -f` of them.
const DEPLOY_CRDS: &str = include_str!("../../../deploy/crds.yaml");
const DEPLOY_RBAC: &str = include_str!("../../../deploy/rbac.yaml");

impl Env {
    /// kube-apiserver's process id (for its CPU time in /proc).
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.children.get(1).map(Child::id)
    }

    /// etcd's process id.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.children.first().map(Child::id)
    }
}

/// Applies one object as `kubectl apply --server-side` does (field manager `envtest`).
pub async fn apply_one(client: &Client, doc: &Value, dry_run: bool) -> Result<(), kube::Error> {
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

/// Applies every object of a multi-document YAML text.
pub async fn apply_yaml(client: &Client, what: &str, text: &str) -> Result<(), String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| format!("{what}: {e}"))?;
    for doc in docs.iter().filter(|d| !d.is_null()) {
        apply_one(client, doc, false)
            .await
            .map_err(|e| format!("{what}: apply {}: {e}", doc["metadata"]["name"]))?;
    }
    Ok(())
}

/// A namespace and its `default` ServiceAccount (the ServiceAccount admission plugin needs
/// it, and no controller-manager makes it).
pub async fn namespace(client: &Client, ns: &str) -> Result<(), String> {
    for doc in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "default", "namespace": ns}}),
    ] {
        apply_one(client, &doc, false)
            .await
            .map_err(|e| format!("namespace {ns}: {e}"))?;
    }
    Ok(())
}

/// Waits until the API server serves `group/version` `plural` (a CRD established).
pub async fn served(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<(), String> {
    let path = format!("/apis/{group}/{version}/{plural}");
    for _ in 0..100 {
        if let Ok((200, _)) = raw(client, "GET", &path, None).await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("{path} is not served after 20 s"))
}

/// Corral installed as deployed: the `corral-system` namespace, deploy/crds.yaml and
/// deploy/rbac.yaml (the operator's ServiceAccount and its rights), the kinds served.
pub async fn install_corral(client: &Client) -> Result<(), String> {
    namespace(client, "corral-system").await?;
    apply_yaml(client, "deploy/crds.yaml", DEPLOY_CRDS).await?;
    apply_yaml(client, "deploy/rbac.yaml", DEPLOY_RBAC).await?;
    for plural in ["trainingjobs", "queues", "nodepools", "servedmodels"] {
        served(client, "corral.dev", "v1alpha1", plural).await?;
    }
    Ok(())
}

/// The GPU type of the fake nodes ([`gpu_node`]).
pub const H100: &str = "NVIDIA-H100-80GB-HBM3";

/// A fake Ready node with `gpus` GPUs (`nvidia.com/gpu` capacity, the GPU product label),
/// without the not-ready taint that the TaintNodesByCondition admission plugin puts on every
/// new node (the node lifecycle controller, not run here, would lift it).
pub async fn gpu_node(client: &Client, name: &str, gpus: u32) -> Result<(), String> {
    ready_gpu_node(client, name, gpus).await?;
    lift_not_ready_taint(client, name).await
}

/// A fake node reporting Ready with `gpus` GPUs, still carrying the admission plugin's
/// not-ready taint ([`lift_not_ready_taint`] lifts it).
pub async fn ready_gpu_node(client: &Client, name: &str, gpus: u32) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            GPU_PRODUCT_LABEL: H100, "kubernetes.io/hostname": name}},
    }))
    .map_err(|e| format!("node {name}: {e}"))?;
    let fail = |what: &str, e: kube::Error| format!("node {name}: {what}: {e}");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .map_err(|e| fail("create", e))?;
    let cap =
        json!({"cpu": "64", "memory": "512Gi", "pods": "110", GPU_RESOURCE: gpus.to_string()});
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": cap, "allocatable": cap,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "envtest"}]}})),
        )
        .await
        .map_err(|e| fail("status", e))?;
    Ok(())
}

/// Lifts the node lifecycle controller's part: the not-ready taint of a Ready node.
pub async fn lift_not_ready_taint(client: &Client, name: &str) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .map_err(|e| format!("node {name}: lift the not-ready taint: {e}"))?;
    Ok(())
}

/// An S3 server for the artifact store's tests: moto's (`pip install 'moto[server]'`) on a
/// free loopback port, with one bucket; stopped when dropped.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT`.
    pub endpoint: String,
}

impl S3Server {
    /// Whether `moto_server` is installed.
    pub fn available() -> bool {
        Command::new("moto_server")
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts it and makes `bucket` (as an administrator would; moto takes the request
    /// unsigned).
    pub fn start(bucket: &str) -> Result<Self, String> {
        let port = free_port()?;
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("moto_server: {e}"))?;
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut conn = loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(c) => break c,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("moto_server did not listen on {port}: {e}")),
            }
        };
        use std::io::{Read, Write};
        write!(
            conn,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer)
            .map_err(|e| e.to_string())?;
        if !answer.starts_with("HTTP/1.1 200") {
            return Err(format!("making bucket {bucket}: {answer}"));
        }
        Ok(server)
    }

    /// The variables a client needs (as a namespace's Secret would hold them).
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT", self.endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
