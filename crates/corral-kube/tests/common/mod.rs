//! A small in-memory API server behind kube's tower-test mock: the operator's client talks
//! to it through the real kube `Client` (real URLs, verbs, bodies, content types), and it
//! keeps objects the way the API server does for the calls Corral makes (list, create with
//! 409 on a taken name, merge patch and server-side apply with resourceVersion
//! preconditions, the binding subresource, delete with UID preconditions and grace).

#![allow(dead_code)]

pub mod passes;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

#[derive(Default)]
pub struct State {
    /// (collection path without namespace, e.g. "api/v1/pods", namespace, name) -> object.
    pub objects: BTreeMap<(String, String, String), Value>,
    pub rv: u64,
    /// Every request as `VERB path`.
    pub log: Vec<String>,
    pub events: Vec<Value>,
    /// Pod creations left before creates start failing with 500 (a crash of the operator
    /// in the middle of a gang).
    pub pod_creates_left: Option<usize>,
    /// Deleted pods stay, terminating, until `finish_terminating` (as kubelets do).
    pub graceful_deletes: bool,
    pub next_uid: u64,
    /// Every pod create is answered with this Status (e.g. 403 Forbidden).
    pub refuse_pod_creates: Option<Value>,
    /// Every request is answered 401 (an invalid token).
    pub unauthorized: bool,
    /// Collections the server does not serve (a CRD not installed): 404.
    pub unserved: Vec<String>,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    pub state: Arc<Mutex<State>>,
    /// The operator's planner across this fake's passes ([`passes::kept_pass`]).
    pub planner: Arc<Mutex<Option<corral_kube::plan::Planner>>>,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

const KINDS: &[(&str, &str, &str)] = &[
    ("api/v1/pods", "v1", "Pod"),
    ("api/v1/nodes", "v1", "Node"),
    ("api/v1/services", "v1", "Service"),
    ("api/v1/configmaps", "v1", "ConfigMap"),
    ("api/v1/secrets", "v1", "Secret"),
    (
        "apis/corral.dev/v1alpha1/trainingjobs",
        "corral.dev/v1alpha1",
        "TrainingJob",
    ),
    (
        "apis/corral.dev/v1alpha1/queues",
        "corral.dev/v1alpha1",
        "Queue",
    ),
    (
        "apis/corral.dev/v1alpha1/nodepools",
        "corral.dev/v1alpha1",
        "NodePool",
    ),
    (
        "apis/corral.dev/v1alpha1/jobpriorityclasses",
        "corral.dev/v1alpha1",
        "JobPriorityClass",
    ),
    (
        "apis/corral.dev/v1alpha1/priorityclasses",
        "corral.dev/v1alpha1",
        "PriorityClass",
    ),
    ("apis/events.k8s.io/v1/events", "events.k8s.io/v1", "Event"),
    ("apis/kubeflow.org/v1/tfjobs", "kubeflow.org/v1", "TFJob"),
    (
        "apis/kubeflow.org/v1/pytorchjobs",
        "kubeflow.org/v1",
        "PyTorchJob",
    ),
    (
        "apis/kubeflow.org/v1/xgboostjobs",
        "kubeflow.org/v1",
        "XGBoostJob",
    ),
    ("apis/kubeflow.org/v1/jaxjobs", "kubeflow.org/v1", "JAXJob"),
    (
        "apis/kubeflow.org/v2beta1/mpijobs",
        "kubeflow.org/v2beta1",
        "MPIJob",
    ),
];

/// The API server's validation of what Corral's tests put in pod templates: a toleration
/// operator other than Equal or Exists is refused with the server's 422 Status (the shape
/// and words of kube-apiserver's `field.NotSupported`, as in apimachinery's StatusError).
fn invalid_pod(pod: &Value) -> Option<Value> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let tolerations = pod["spec"]["tolerations"].as_array()?;
    let (i, op) = tolerations.iter().enumerate().find_map(|(i, t)| {
        let op = t["operator"].as_str()?;
        (op != "Equal" && op != "Exists").then_some((i, op))
    })?;
    let field = format!("spec.tolerations[{i}].operator");
    let detail = format!("Unsupported value: \"{op}\": supported values: \"Equal\", \"Exists\"");
    Some(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Pod \"{name}\" is invalid: {field}: {detail}"),
        "reason": "Invalid",
        "details": {"name": name, "kind": "Pod",
                    "causes": [{"reason": "FieldValueNotSupported", "message": detail, "field": field}]},
        "code": 422,
    }))
}

fn kind_of(collection: &str) -> (&'static str, &'static str) {
    KINDS
        .iter()
        .find(|(c, _, _)| *c == collection)
        .map(|(_, a, k)| (*a, *k))
        .unwrap_or(("v1", "Unknown"))
}

/// Splits `/api/v1/namespaces/ns/pods/name/sub` into (collection, ns, name, sub).
fn route(path: &str) -> (String, String, Option<String>, Option<String>) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let prefix_len = if parts.first() == Some(&"api") { 2 } else { 3 };
    let prefix = parts[..prefix_len.min(parts.len())].join("/");
    let mut rest = &parts[prefix_len.min(parts.len())..];
    let mut ns = String::new();
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        ns = rest[1].to_string();
        rest = &rest[2..];
    }
    let resource = rest.first().copied().unwrap_or("");
    (
        format!("{prefix}/{resource}"),
        ns,
        rest.get(1).map(|s| s.to_string()),
        rest.get(2).map(|s| s.to_string()),
    )
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl FakeApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// A kube Client whose every request this fake answers.
    pub fn client(&self) -> Client {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let me = self.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (parts, body) = req.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let (code, value) = me.handle(&parts.method, &parts.uri, &bytes);
                let resp = Response::builder()
                    .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&value).unwrap_or_default()))
                    .expect("response");
                send.send_response(resp);
            }
        });
        Client::new(svc, "default")
    }

    pub fn insert(&self, collection: &str, obj: Value) {
        let mut s = self.state.lock().expect("lock");
        s.rv += 1;
        s.next_uid += 1;
        let rv = s.rv.to_string();
        let uid = format!("uid-{}", s.next_uid);
        let mut obj = obj;
        let (api_version, kind) = kind_of(collection);
        obj["apiVersion"] = json!(api_version);
        obj["kind"] = json!(kind);
        obj["metadata"]["resourceVersion"] = json!(rv);
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(uid);
        }
        if obj["metadata"]["creationTimestamp"].is_null() {
            obj["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        s.objects.insert((collection.to_string(), ns, name), obj);
    }

    pub fn get(&self, collection: &str, ns: &str, name: &str) -> Option<Value> {
        let s = self.state.lock().expect("lock");
        s.objects
            .get(&(collection.to_string(), ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn list(&self, collection: &str) -> Vec<Value> {
        let s = self.state.lock().expect("lock");
        s.objects
            .iter()
            .filter(|((c, _, _), _)| c == collection)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Edits an object as a kubelet or a user would (bumps its resourceVersion).
    pub fn update(&self, collection: &str, ns: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut s = self.state.lock().expect("lock");
        s.rv += 1;
        let rv = s.rv.to_string();
        if let Some(o) =
            s.objects
                .get_mut(&(collection.to_string(), ns.to_string(), name.to_string()))
        {
            f(o);
            o["metadata"]["resourceVersion"] = json!(rv);
        }
    }

    /// Removes an object at once, as `kubectl delete --force --grace-period=0` or an
    /// eviction whose grace period ran out would.
    pub fn remove(&self, collection: &str, ns: &str, name: &str) {
        let mut s = self.state.lock().expect("lock");
        s.rv += 1;
        s.objects
            .remove(&(collection.to_string(), ns.to_string(), name.to_string()));
    }

    /// Removes pods that were deleted gracefully (their grace period ran out).
    pub fn finish_terminating(&self) {
        let mut s = self.state.lock().expect("lock");
        s.objects
            .retain(|_, o| o["metadata"]["deletionTimestamp"].is_null());
    }

    pub fn log(&self) -> Vec<String> {
        self.state.lock().expect("lock").log.clone()
    }

    pub fn clear_log(&self) {
        self.state.lock().expect("lock").log.clear();
    }

    fn handle(&self, method: &Method, uri: &http::Uri, body: &[u8]) -> (u16, Value) {
        let path = uri.path().to_string();
        let query = uri.query().unwrap_or("").to_string();
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let mut s = self.state.lock().expect("lock");
        s.log.push(format!("{method} {path}"));
        let (collection, ns, name, sub) = route(&path);
        // kube-apiserver's bodies for a bad token and for a resource it does not serve.
        if s.unauthorized {
            return (401, status(401, "Unauthorized", "Unauthorized"));
        }
        if s.unserved.contains(&collection) {
            return (
                404,
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            );
        }
        let key = (
            collection.clone(),
            ns.clone(),
            name.clone().unwrap_or_default(),
        );
        match (method.clone(), name, sub.as_deref()) {
            (Method::GET, None, None) => {
                let selector = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("labelSelector="))
                    .map(|s| s.replace("%2F", "/"));
                let items: Vec<Value> = s
                    .objects
                    .iter()
                    .filter(|((c, n, _), _)| *c == collection && (ns.is_empty() || *n == ns))
                    .filter(|(_, o)| {
                        selector
                            .as_ref()
                            .is_none_or(|l| !o["metadata"]["labels"][l.as_str()].is_null())
                    })
                    .map(|(_, v)| v.clone())
                    .collect();
                let (api_version, kind) = kind_of(&collection);
                (
                    200,
                    json!({"apiVersion": api_version, "kind": format!("{kind}List"),
                             "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
                )
            }
            (Method::GET, Some(_), None) => match s.objects.get(&key) {
                Some(o) => (200, o.clone()),
                None => (404, status(404, "NotFound", "not found")),
            },
            (Method::POST, None, None) => {
                if collection == "apis/events.k8s.io/v1/events" {
                    s.events.push(body.clone());
                    return (201, body);
                }
                let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
                let key = (collection.clone(), ns.clone(), name);
                if s.objects.contains_key(&key) {
                    // kube-apiserver's words: `<resource> "<name>" already exists`.
                    let resource = collection.rsplit('/').next().unwrap_or("");
                    let name = &key.2;
                    let mut body = status(
                        409,
                        "AlreadyExists",
                        &format!("{resource} \"{name}\" already exists"),
                    );
                    body["details"] = json!({"name": name, "kind": resource});
                    return (409, body);
                }
                if collection == "api/v1/pods" {
                    if let Some(refusal) = &s.refuse_pod_creates {
                        let code = refusal["code"].as_u64().unwrap_or(500) as u16;
                        return (code, refusal.clone());
                    }
                    if let Some(invalid) = invalid_pod(&body) {
                        return (422, invalid);
                    }
                    match s.pod_creates_left {
                        Some(0) => return (500, status(500, "InternalError", "injected crash")),
                        Some(n) => s.pod_creates_left = Some(n - 1),
                        None => {}
                    }
                }
                s.rv += 1;
                s.next_uid += 1;
                let mut obj = body;
                obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                obj["metadata"]["uid"] = json!(format!("uid-{}", s.next_uid));
                obj["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
                if collection == "api/v1/pods" {
                    obj["status"] = json!({"phase": "Pending"});
                }
                s.objects.insert(key, obj.clone());
                (201, obj)
            }
            (Method::POST, Some(_), Some("binding")) => {
                let rv = s.rv + 1;
                let Some(pod) = s.objects.get_mut(&key) else {
                    return (404, status(404, "NotFound", "pod not found"));
                };
                if !pod["spec"]["nodeName"].is_null() {
                    return (
                        409,
                        status(409, "Conflict", "pod is already assigned to a node"),
                    );
                }
                pod["spec"]["nodeName"] = body["target"]["name"].clone();
                pod["metadata"]["resourceVersion"] = json!(rv.to_string());
                s.rv = rv;
                (
                    201,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
                )
            }
            (Method::PATCH, Some(name), sub) => {
                if collection == "apis/events.k8s.io/v1/events" {
                    return (200, body);
                }
                let rv = s.rv + 1;
                let exists = s.objects.contains_key(&key);
                if !exists {
                    // Server-side apply (a body with its kind) creates; a merge patch 404s.
                    if sub.is_some()
                        || (collection.starts_with("apis/corral.dev") && body["kind"].is_null())
                    {
                        return (404, status(404, "NotFound", "not found"));
                    }
                    // Server-side apply creates.
                    let mut obj = body;
                    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
                    obj["metadata"]["namespace"] = json!(ns);
                    obj["metadata"]["name"] = json!(name);
                    s.next_uid += 1;
                    obj["metadata"]["uid"] = json!(format!("uid-{}", s.next_uid));
                    s.rv = rv;
                    s.objects.insert(key, obj.clone());
                    return (201, obj);
                }
                let Some(obj) = s.objects.get_mut(&key) else {
                    return (404, status(404, "NotFound", "not found"));
                };
                if let Some(want) = body["metadata"]["resourceVersion"].as_str()
                    && obj["metadata"]["resourceVersion"].as_str() != Some(want)
                {
                    return (409, status(409, "Conflict", "the object has been modified"));
                }
                match sub {
                    Some("status") => {
                        // Corral owns every status field it applies: what it omits goes.
                        obj["status"] = body["status"].clone();
                    }
                    _ => {
                        let mut patch = body.clone();
                        if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove("resourceVersion");
                        }
                        merge(obj, &patch);
                    }
                }
                obj["metadata"]["resourceVersion"] = json!(rv.to_string());
                let out = obj.clone();
                s.rv = rv;
                (200, out)
            }
            (Method::DELETE, Some(_), None) => {
                let graceful = s.graceful_deletes && collection == "api/v1/pods";
                let rv = s.rv + 1;
                let Some(obj) = s.objects.get_mut(&key) else {
                    return (404, status(404, "NotFound", "not found"));
                };
                if let Some(uid) = body["preconditions"]["uid"].as_str()
                    && obj["metadata"]["uid"].as_str() != Some(uid)
                {
                    return (409, status(409, "Conflict", "precondition failed: uid"));
                }
                let out = obj.clone();
                if graceful {
                    obj["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
                    obj["metadata"]["deletionGracePeriodSeconds"] =
                        body["gracePeriodSeconds"].clone();
                    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
                    s.rv = rv;
                } else {
                    s.objects.remove(&key);
                    // Owner references: deleting a job collects what it owns.
                    if collection.ends_with("trainingjobs") {
                        let uid = out["metadata"]["uid"].clone();
                        s.objects.retain(|_, o| {
                            !o["metadata"]["ownerReferences"]
                                .as_array()
                                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
                        });
                    }
                }
                (200, out)
            }
            _ => (
                405,
                status(405, "MethodNotAllowed", "not supported by the fake"),
            ),
        }
    }
}

/// A ready node with 8 H100 GPUs, 64 CPUs and 512 GiB, as the device plugin reports it.
pub fn h100_node(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}
