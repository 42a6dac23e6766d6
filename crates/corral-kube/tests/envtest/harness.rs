//! The cluster under test: etcd + kube-apiserver (+ kube-controller-manager's garbage
//! collector) started from the assets, the clients of its three identities, raw calls, the
//! prerequisite checks (skip outside CI, fail under it) and the error-path fixtures.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::Request;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

pub(crate) const ADMIN_TOKEN: &str = "envtest-admin-token";
pub(crate) const OPERATOR_TOKEN: &str = "envtest-operator-token";
pub(crate) const NOBODY_TOKEN: &str = "envtest-nobody-token";
/// Two more tokens of the operator's ServiceAccount, one per replica of the leadership case:
/// the same user (and so the same RBAC), told apart in the audit log by their uids.
pub(crate) const REPLICA_TOKENS: [(&str, &str); 2] = [
    ("envtest-replica-a-token", "replica-a"),
    ("envtest-replica-b-token", "replica-b"),
];
/// The operator's user name, as the audit log has it.
pub(crate) const OPERATOR_USER: &str = "system:serviceaccount:corral-system:corral-operator";
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

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the suite must run: under `CI=true` or `CORRAL_REQUIRE_ENVTEST=1`.
pub(crate) fn required() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
        || std::env::var("CORRAL_REQUIRE_ENVTEST").as_deref() == Ok("1")
}

/// Whether a prerequisite (`what`) is there. Under `CI=true` (or `CORRAL_REQUIRE_ENVTEST=1`)
/// a missing one fails the test, so CI cannot pass by skipping; elsewhere the test prints
/// why it is skipped (as `common::prerequisite` of the other crates' tests).
#[track_caller]
pub(crate) fn prerequisite(present: bool, what: &str) -> bool {
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

pub(crate) struct Assets {
    etcd: PathBuf,
    apiserver: PathBuf,
    pub(crate) controller_manager: Option<PathBuf>,
}

/// The binaries, or why the suite cannot run.
pub(crate) fn assets() -> Result<Assets, String> {
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
pub(crate) fn free_port() -> u16 {
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
        let port = 20_000 + ((mixed >> 33) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free local port in 20000-31999")
}

/// The last lines of a child's log, for an error that must explain itself after the
/// directory holding the log is gone.
fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A running etcd + kube-apiserver (+ garbage collector); stopped and removed on drop.
pub(crate) struct Env {
    pub(crate) dir: PathBuf,
    children: Vec<Child>,
    pub(crate) url: String,
    pub(crate) admin: Client,
    pub(crate) operator: Client,
    pub(crate) nobody: Client,
    pub(crate) gc: bool,
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

pub(crate) fn kubeconfig(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: envtest\n    user: u\n    namespace: default\ncurrent-context: c\n"
    )
}

pub(crate) async fn client_for(url: &str, token: &str) -> Client {
    let kc = Kubeconfig::from_yaml(&kubeconfig(url, token)).expect("kubeconfig");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("client config");
    Client::try_from(cfg).expect("client")
}

pub(crate) fn spawn(cmd: &mut Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    cmd.stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"))
}

impl Env {
    /// Starts the cluster; a start that fails (a port taken after all, a server that exits)
    /// is tried again on fresh ports, twice, before the test gives up with the logs.
    pub(crate) async fn start(a: &Assets) -> Result<Env, String> {
        let mut why = Vec::new();
        for attempt in 1..=3 {
            match Env::start_once(a, attempt).await {
                Ok(env) => return Ok(env),
                Err(e) => {
                    eprintln!("envtest: start {attempt} of 3 failed: {e}");
                    why.push(format!("start {attempt}: {e}"));
                }
            }
        }
        Err(why.join("\n\n"))
    }

    async fn start_once(a: &Assets, attempt: u32) -> Result<Env, String> {
        let dir =
            std::env::temp_dir().join(format!("corral-envtest-{}-{attempt}", std::process::id()));
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
        ));
        let url = format!("https://127.0.0.1:{api_port}");
        let admin = client_for(&url, ADMIN_TOKEN).await;
        let mut env = Env {
            operator: client_for(&url, OPERATOR_TOKEN).await,
            nobody: client_for(&url, NOBODY_TOKEN).await,
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
pub(crate) async fn raw(
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

/// Checks that the committed answer on an error path (tests/fixtures/real-api/NAME.json)
/// still says what the server says (code, kind, status, reason; all of a body that is no
/// Status); a missing one fails. With `UPDATE_FIXTURES=1` it captures the answer instead.
pub(crate) fn fixture(name: &str, code: u16, body: &Value) {
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
