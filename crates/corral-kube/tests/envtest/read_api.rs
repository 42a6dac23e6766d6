//! The running operator's read API: the CLI's read verbs against a Kubernetes install, each
//! caller seeing what the cluster's RBAC lets it list, nothing of another namespace.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::harness::Env;
use crate::manifests::{ar, namespace};

/// `GET path` on the operator's listener: the status and the body.
async fn get(port: u16, path: &str, token: Option<&str>) -> (u16, Value) {
    let (status, body) = request(port, "GET", path, token).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// `method path` on the operator's listener: the status and the body as text.
async fn request(port: u16, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    http(port, method, path, token, "").await
}

/// `method path` with a JSON `body` (none when empty) on the operator's listener, over a
/// connection of its own: the status and the body as text.
pub(crate) async fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the operator");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: operator\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.expect("send");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.expect("answer");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// The first `jobs` event of the operator's watch stream, as JSON.
async fn first_watch_event(port: u16, token: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the operator");
    let req = format!(
        "GET /api/v1/watch HTTP/1.1\r\nHost: operator\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    conn.write_all(req.as_bytes()).await.expect("send");
    let mut seen = String::new();
    let mut buf = [0u8; 8192];
    let read = async {
        loop {
            let n = conn.read(&mut buf).await.expect("read");
            if n == 0 {
                return Value::Null;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            let Some(at) = seen.find("event: jobs") else {
                continue;
            };
            let block = &seen[at..];
            if !block.contains("\n\n") {
                continue;
            }
            let data = block
                .lines()
                .find(|l| l.starts_with("data:"))
                .unwrap_or_default();
            return serde_json::from_str(data.trim_start_matches("data:").trim())
                .unwrap_or(Value::Null);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or(Value::Null)
}

fn jobs_of(env: &Env, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "TrainingJob", "trainingjobs"),
    )
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            format!(
                "{}/{}",
                j["namespace"].as_str().unwrap_or(""),
                j["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// A service account of `ns` allowed to list, get and patch TrainingJobs there (a Role;
/// not to delete them, nor to read pods' logs), and a token for it.
async fn reader(env: &Env, ns: &str) -> String {
    token_of(
        env,
        ns,
        "reader",
        json!([{"apiGroups": ["corral.dev"], "resources": ["trainingjobs"],
                "verbs": ["get", "list", "patch"]}]),
    )
    .await
}

/// A service account `name` of `ns` bound to a Role of these `rules` (of the same name),
/// and a token for it.
pub(crate) async fn token_of(env: &Env, ns: &str, name: &str, rules: Value) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(env.admin.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa"),
    )
    .await
    .expect("service account");
    for (kind, plural, body) in [
        (
            "Role",
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name, "namespace": ns}, "rules": rules}),
        ),
        (
            "RoleBinding",
            "rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        ),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(
            env.admin.clone(),
            ns,
            &ar("rbac.authorization.k8s.io", "v1", kind, plural),
        );
        api.create(
            &PostParams::default(),
            &serde_json::from_value(body).expect(kind),
        )
        .await
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    sas.create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .map(|s| s.token)
        .expect("a token")
}

/// `ns` holds finished and running jobs of the operator binary case; another namespace gets
/// a job of its own; a reader of `ns` lists, describes and reads the usage of `ns` only,
/// through the HTTP API and through the `corral` CLI.
pub(crate) async fn live_read_api(
    env: &Env,
    ns: &str,
    port: u16,
    bin: &std::ffi::OsStr,
    log: &dyn Fn() -> String,
) {
    let other = "rb-other";
    namespace(env, other).await;
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        env.admin.clone(),
        other,
        &ar("corral.dev", "v1alpha1", "TrainingJob", "trainingjobs"),
    );
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "secret-project", "namespace": other},
            "spec": {"framework": "generic", "replicas": {"worker": {"count": 1,
                "resources": {"cpu": "1", "memory": "1Gi", "gpu": 1},
                "template": {"image": "busybox:1.36", "command": ["sleep", "600"]}}}},
        }))
        .expect("job"),
    )
    .await
    .expect("create job");
    let token = reader(env, ns).await;

    // The leader answers once a pass has seen the other namespace's job admitted.
    let mut all = Value::Null;
    for _ in 0..120 {
        let (code, nodes) = get(port, "/api/v1/nodes", Some(&token)).await;
        let hidden = nodes.to_string().contains("(another namespace)");
        if code == 200 && hidden {
            all = get(port, "/api/v1/trainingjobs", Some(&token)).await.1;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let listed = names(&all);
    assert!(
        listed.contains(&format!("{ns}/reporter")) && listed.contains(&format!("{ns}/live")),
        "{all}; operator log:\n{}",
        log()
    );
    assert!(
        listed.iter().all(|n| n.starts_with(&format!("{ns}/"))),
        "another namespace's job listed: {listed:?}"
    );
    let (code, _) = get(port, "/api/v1/trainingjobs", None).await;
    assert_eq!(code, 401, "no token");
    let (code, refused) = get(
        port,
        &format!("/api/v1/namespaces/{other}/trainingjobs"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 403, "{refused}");
    let (code, _) = get(
        port,
        &format!("/api/v1/namespaces/{other}/trainingjobs/secret-project/describe"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 403);
    let (code, who) = get(port, "/api/v1/whoami", Some(&token)).await;
    assert_eq!((code, who["namespace"].clone()), (200, json!(ns)), "{who}");

    // describe: the finished PyTorch job, its admission gone; its Events.
    let (code, d) = get(
        port,
        &format!("/api/v1/namespaces/{ns}/trainingjobs/live/describe"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["summary"]["state"], json!("Succeeded"), "{d}");
    assert_eq!(d["job"]["metadata"]["name"], json!("live"));
    let (code, missing) = get(
        port,
        &format!("/api/v1/namespaces/{ns}/trainingjobs/nope/describe"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 404, "{missing}");

    // Usage: the finished job's GPU time is in the ledger; nothing of the other namespace.
    let (code, usage) = get(port, "/api/v1/usage?by=job", Some(&token)).await;
    assert_eq!(code, 200, "{usage}");
    let rows = usage["items"].as_array().cloned().unwrap_or_default();
    let live_gpu_s: f64 = rows
        .iter()
        .filter(|r| r["job"] == json!(format!("{ns}/live")))
        .filter_map(|r| r["gpuSeconds"].as_f64())
        .sum();
    assert!(live_gpu_s > 0.0, "{usage}");
    assert!(
        rows.iter().all(|r| r["namespace"] == json!(ns)),
        "another namespace's usage: {usage}"
    );
    let (code, bad) = get(port, "/api/v1/usage?period=year", Some(&token)).await;
    assert_eq!(code, 400, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("period") && m.contains("day or month")),
        "{bad}"
    );
    let (code, queues) = get(port, "/api/v1/queues", Some(&token)).await;
    assert_eq!(code, 200, "{queues}");
    assert!(queues["items"].as_array().is_some_and(|q| !q.is_empty()));

    // Pipeline runs: the one the operator binary case ran, each step with its job's state.
    let (code, runs) = get(
        port,
        &format!("/api/v1/namespaces/{ns}/pipelineruns"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 200, "{runs}");
    assert!(runs.to_string().contains("live-run"), "{runs}");
    let (code, d) = get(
        port,
        &format!("/api/v1/namespaces/{ns}/pipelineruns/live-run/describe"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["steps"][0]["name"], json!("only"), "{d}");
    assert_eq!(d["steps"][0]["phase"], json!("Succeeded"), "{d}");
    assert_eq!(d["steps"][0]["jobState"], json!("Succeeded"), "{d}");
    let (code, _) = get(
        port,
        &format!("/api/v1/namespaces/{other}/pipelineruns"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 403);

    // Stored Pipelines, as the watch holds them (the pass after the write publishes them).
    Api::<DynamicObject>::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", "Pipeline", "pipelines"),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "Pipeline",
            "metadata": {"name": "kept", "namespace": ns},
            "spec": {"steps": [{"name": "only",
                     "task": {"image": "busybox:1.36", "command": ["true"]}}]},
        }))
        .expect("pipeline"),
    )
    .await
    .expect("create a Pipeline");
    let path = format!("/api/v1/namespaces/{ns}/pipelines");
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = get(port, &path, Some(&token)).await.1;
        if listed.to_string().contains("kept") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(listed.to_string().contains("kept"), "{listed}");
    let (code, _) = get(
        port,
        &format!("/api/v1/namespaces/{other}/pipelines"),
        Some(&token),
    )
    .await;
    assert_eq!(code, 403);

    // What it does not do, it says.
    let (code, body) = request(
        port,
        "POST",
        &format!("/api/v1/namespaces/{ns}/trainingjobs"),
        Some(&token),
    )
    .await;
    assert!(
        code == 405 && body.contains("kubectl apply"),
        "{code} {body}"
    );
    let (code, body) = request(port, "GET", "/api/v1/nope", Some(&token)).await;
    assert!(
        code == 404 && body.contains("/api/v1/usage"),
        "{code} {body}"
    );

    // The CLI's read verbs, pointed at the operator.
    let corral = |args: &[&str]| crate::harness::corral_cli(bin.as_ref(), env, port, &token, args);
    let (ok, text) = corral(&["list"]);
    assert!(
        ok && text.contains("reporter") && text.contains("live"),
        "{text}"
    );
    assert!(!text.contains("secret-project"), "{text}");
    let (ok, text) = corral(&["describe", "live"]);
    assert!(ok && text.contains("Succeeded"), "{text}");
    let (ok, text) = corral(&["describe", "pipelinerun", "live-run"]);
    assert!(
        ok && text.contains("only") && text.contains("Succeeded"),
        "{text}"
    );
    let (ok, text) = corral(&["get", "pipelines"]);
    assert!(ok && text.contains("kept"), "{text}");
    let (ok, text) = corral(&["describe", "pipeline/kept"]);
    assert!(ok && text.contains("only"), "{text}");
    let (ok, text) = corral(&["usage", "--by", "job"]);
    assert!(
        ok && text.contains("live") && !text.contains("secret-project"),
        "{text}"
    );
    let (ok, text) = corral(&["list", "-n", other]);
    let refused = !ok && (text.contains("403") || text.contains("may not list"));

    // The dashboard, served by the operator, and its push channel.
    let (code, page) = request(port, "GET", "/", None).await;
    assert!(code == 200 && page.contains("<script"), "{code} {page}");
    let pushed = first_watch_event(port, &token).await;
    assert_eq!(pushed["reset"], json!(true), "{pushed}");
    let pushed_names: Vec<String> = pushed["upsert"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            format!(
                "{}/{}",
                j["namespace"].as_str().unwrap_or(""),
                j["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(pushed_names.contains(&format!("{ns}/live")), "{pushed}");
    assert!(
        pushed_names
            .iter()
            .all(|n| n.starts_with(&format!("{ns}/"))),
        "another namespace's job pushed: {pushed}"
    );
    // What the reader may not do itself, the operator does not do for it.
    let (code, body) = request(
        port,
        "GET",
        &format!("/api/v1/namespaces/{ns}/trainingjobs/live/logs?replica=live-master-0&tail=10"),
        Some(&token),
    )
    .await;
    assert!(code == 403 && body.contains("pods/log"), "{code} {body}");
    let (code, body) = request(
        port,
        "DELETE",
        &format!("/api/v1/namespaces/{ns}/trainingjobs/live"),
        Some(&token),
    )
    .await;
    assert!(
        code == 403 && body.contains("may not delete"),
        "{code} {body}"
    );
    assert!(
        jobs_of(env, ns)
            .get_opt("live")
            .await
            .expect("get")
            .is_some(),
        "not deleted"
    );
    // What it may: resume the suspended reporter, suspend it again.
    for (action, suspended) in [("resume", false), ("suspend", true)] {
        let (code, body) = request(
            port,
            "POST",
            &format!("/api/v1/namespaces/{ns}/trainingjobs/reporter/{action}"),
            Some(&token),
        )
        .await;
        assert_eq!(code, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(answer["changed"], json!(true), "{body}");
        let j = jobs_of(env, ns).get("reporter").await.expect("reporter");
        assert_eq!(
            j.data["spec"]["runPolicy"]["suspend"]
                .as_bool()
                .unwrap_or(false),
            suspended
        );
    }
    // Done: the other namespace's job gives its GPU back for the cases after this one.
    jobs.delete("secret-project", &Default::default())
        .await
        .expect("delete");
    for _ in 0..120 {
        crate::kubelet::kubelet_reap(env, other).await;
        if crate::kubelet::pods(env, other).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        crate::kubelet::pods(env, other).await.is_empty(),
        "{}",
        log()
    );
    assert!(refused, "{text}");
}
