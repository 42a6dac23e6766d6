//! The operator's read API: what `corral up` answers for `list`, `get`, `describe`,
//! `queues`, `nodes` and `usage`, the same paths and the same JSON (`corral_core::views`),
//! answered by the leader from the world and plane of its last pass ([`snapshot`]), behind
//! the cluster's own authentication and RBAC ([`access`]). So the CLI's read verbs work
//! against a Kubernetes install (`corral --server <the operator's Service> --token ...`).
//! Creating and changing jobs stays `kubectl`'s; the dashboard's suspend, resume and delete
//! are done where the caller may do them itself ([`actions`]).
//!
//! A standby answers 503 (it keeps no plane); the Service's endpoints are every replica,
//! so a client retries, or reaches the leader through `kubectl port-forward` to its pod.

pub mod access;
mod actions;
mod pipelines;
mod runs;
mod serving;
pub mod snapshot;
mod watch;

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use corral_core::views::{Event, UsageQuery, usage_report};
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

use access::{Access, Caller, Refusal};
pub use snapshot::Snapshot;

/// What the read API answers from, and whom it asks who may see what.
pub struct ReadApi {
    client: Client,
    access: Access,
    latest: RwLock<Option<Arc<Snapshot>>>,
    /// Counts the passes published: the watch streams look again at each.
    passes: tokio::sync::watch::Sender<u64>,
    /// The served models' router (`/serve/...`), fed by the leader's serving pass.
    router: corral_router::Router,
}

impl ReadApi {
    pub fn new(client: Client) -> Self {
        ReadApi {
            access: Access::new(client.clone()),
            client,
            latest: RwLock::new(None),
            passes: tokio::sync::watch::Sender::new(0),
            router: corral_router::Router::new(corral_router::RouterConfig::default()),
        }
    }

    /// The router the leader's serving pass feeds and `/serve/...` goes through.
    pub fn router(&self) -> &corral_router::Router {
        &self.router
    }

    /// The leader's last pass: answered from now on.
    pub fn publish(&self, snapshot: Snapshot) {
        if let Ok(mut l) = self.latest.write() {
            *l = Some(Arc::new(snapshot));
        }
        self.passes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// This replica no longer leads: it has nothing to answer from.
    pub fn follow(&self) {
        if let Ok(mut l) = self.latest.write() {
            *l = None;
        }
    }

    fn snapshot(&self) -> Result<Arc<Snapshot>, Refusal> {
        self.latest
            .read()
            .ok()
            .and_then(|l| l.clone())
            .ok_or_else(|| {
                Refusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Unavailable",
                    "this operator replica is not the leader (or has not passed yet): ask again, \
                 or port-forward to the leader's pod",
                )
            })
    }

    /// The snapshot to answer from, for a caller who may list `namespace`'s jobs.
    async fn in_namespace(
        &self,
        headers: &HeaderMap,
        namespace: &str,
    ) -> Result<Arc<Snapshot>, Refusal> {
        let caller = self.caller(headers).await?;
        self.access.check(&caller, namespace).await?;
        self.snapshot()
    }

    async fn caller(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        self.access.caller(crate::progress::bearer(headers)).await
    }

    /// The Events of a `kind` object, oldest first, as `describe` shows them (empty when
    /// the operator may not read them).
    async fn events(&self, kind: &str, namespace: &str, name: &str) -> Vec<Event> {
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), namespace);
        let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
        let Ok(list) = api.list(&ListParams::default().fields(&selector)).await else {
            return Vec::new();
        };
        let mut out: Vec<Event> = list
            .items
            .into_iter()
            .map(|e| Event {
                time: e
                    .last_timestamp
                    .or(e.first_timestamp)
                    .map(|t| t.0.to_string())
                    .or_else(|| e.event_time.map(|t| t.0.to_string()))
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
                namespace: namespace.to_string(),
                job: name.to_string(),
                type_: if e.type_.as_deref() == Some("Warning") {
                    corral_core::control::EventType::Warning
                } else {
                    corral_core::control::EventType::Normal
                },
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            })
            .collect();
        out.sort_by_key(|e| e.time);
        out
    }
}

fn refused(r: Refusal) -> Response {
    let body = json!({"error": {"code": r.code, "message": r.message}});
    (r.status, axum::Json(body)).into_response()
}

fn items<T: serde::Serialize>(items: Vec<T>) -> Response {
    axum::Json(json!({ "items": items })).into_response()
}

fn not_found(namespace: &str, name: &str) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "TrainingJob {name} not found in namespace {namespace} (`corral list -n {namespace}` \
             shows its jobs)"
        ),
    )
}

type Answer = Result<Response, Refusal>;

async fn answer(f: impl std::future::Future<Output = Answer>) -> Response {
    f.await.unwrap_or_else(refused)
}

async fn list_all(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let snap = api.snapshot()?;
        let visible = api.access.visible(&caller, snap.namespaces()).await?;
        Ok(items(snap.summaries(|ns| {
            visible.as_ref().is_none_or(|v| v.iter().any(|x| x == ns))
        })))
    })
    .await
}

async fn list_namespace(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path(namespace): Path<String>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        Ok(items(snap.summaries(|ns| ns == namespace)))
    })
    .await
}

async fn get_job(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        let job = snap
            .job(&namespace, &name)
            .ok_or_else(|| not_found(&namespace, &name))?;
        Ok(axum::Json(job).into_response())
    })
    .await
}

async fn describe_job(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        if snap.job(&namespace, &name).is_none() {
            return Err(not_found(&namespace, &name));
        }
        let events = api.events("TrainingJob", &namespace, &name).await;
        let details = snap
            .details(&namespace, &name, events)
            .ok_or_else(|| not_found(&namespace, &name))?;
        Ok(axum::Json(details).into_response())
    })
    .await
}

async fn queues(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        // Every caller the cluster knows sees the queues, as embedded every token does.
        api.caller(&headers).await?;
        Ok(items(api.snapshot()?.plane.queues.clone()))
    })
    .await
}

async fn nodes(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let snap = api.snapshot()?;
        let visible = api.access.visible(&caller, snap.namespaces()).await?;
        let mut nodes = snap.nodes();
        // A caller sees that a GPU is taken, not by whom, outside its namespaces.
        for gpu in nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()) {
            if let (Some(user), Some(v)) = (&gpu.used_by, &visible) {
                let ns = user.split('/').next().unwrap_or_default();
                if !v.iter().any(|x| x == ns) {
                    gpu.used_by = Some("(another namespace)".to_string());
                }
            }
        }
        Ok(items(nodes))
    })
    .await
}

async fn usage(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    query: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let Query(q) =
            query.map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "Invalid", e.body_text()))?;
        let snap = api.snapshot()?;
        let now = crate::ledger::millis(snap.plane.at);
        let w = q.window(now).map_err(|r| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                "Invalid",
                format!("{}: `{}` is not valid; use {}", r.field, r.value, r.valid),
            )
        })?;
        let intervals = match &q.namespace {
            Some(ns) => {
                api.access.check(&caller, ns).await?;
                snap.usage(Some(ns), w.from, w.to)
            }
            None => {
                let all = snap.usage(None, w.from, w.to);
                let mut spaces: Vec<String> =
                    all.iter().map(|i| i.namespace().to_string()).collect();
                spaces.sort();
                spaces.dedup();
                match api.access.visible(&caller, spaces).await? {
                    None => all,
                    Some(v) => all
                        .into_iter()
                        .filter(|i| v.iter().any(|x| x == i.namespace()))
                        .collect(),
                }
            }
        };
        let report = usage_report(
            intervals,
            &snap.plane.budgets,
            w.from,
            w.to,
            w.bucket,
            w.by_job,
            q.namespace.clone(),
        );
        Ok(axum::Json(report).into_response())
    })
    .await
}

async fn whoami(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        // A service account acts in its own namespace, as a namespace's token does
        // embedded; a person names one (`-n`) or sees what RBAC lets them.
        let namespace = caller
            .name()
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(ns, _)| ns.to_string());
        Ok(axum::Json(json!({"namespace": namespace, "user": caller.name()})).into_response())
    })
    .await
}

/// The read API's routes, for the operator's listener.
pub fn routes(api: Arc<ReadApi>) -> Router {
    let jobs = "/api/v1/namespaces/{namespace}/trainingjobs";
    Router::new()
        .route("/api/v1/trainingjobs", get(list_all))
        .route(jobs, get(list_namespace))
        .route(
            &format!("{jobs}/{{name}}"),
            get(get_job).delete(actions::delete),
        )
        .route(&format!("{jobs}/{{name}}/describe"), get(describe_job))
        .route(&format!("{jobs}/{{name}}/logs"), get(actions::logs))
        .route(&format!("{jobs}/{{name}}/suspend"), post(actions::suspend))
        .route(&format!("{jobs}/{{name}}/resume"), post(actions::resume))
        .route("/api/v1/watch", get(watch::watch))
        .route("/api/v1/pipelineruns", get(runs::list_all))
        .route(
            "/api/v1/namespaces/{namespace}/pipelineruns",
            get(runs::list_namespace),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pipelineruns/{name}",
            get(runs::get_run),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pipelineruns/{name}/describe",
            get(runs::describe_run),
        )
        .route("/api/v1/pipelines", get(pipelines::list_all))
        .route(
            "/api/v1/namespaces/{namespace}/pipelines",
            get(pipelines::list_namespace),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pipelines/{name}",
            get(pipelines::get),
        )
        .route("/api/v1/servedmodels", get(serving::list_all))
        .route(
            "/api/v1/namespaces/{namespace}/servedmodels",
            get(serving::list_namespace),
        )
        .route(
            "/api/v1/namespaces/{namespace}/servedmodels/{name}",
            get(serving::get),
        )
        .route("/serve/{namespace}/{model}", any(serving::serve_root))
        .route(
            "/serve/{namespace}/{model}/{*path}",
            any(serving::serve_path),
        )
        .route("/api/v1/series", get(series))
        .route("/api/v1/queues", get(queues))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/usage", get(usage))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/top", get(top))
        .with_state(api)
        .merge(corral_dashboard::router())
        .method_not_allowed_fallback(read_only)
        .fallback(unknown)
}

/// A write the API server takes, not the operator.
async fn read_only() -> Response {
    refused(Refusal::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the operator's API reads; jobs, runs, models and queues are written to the API \
         server: `kubectl apply -f job.yaml` (`corral convert` for Kubeflow manifests); the \
         dashboard's suspend, resume and delete are the writes it takes",
    ))
}

/// What the operator does not serve, and what it does.
async fn unknown(uri: axum::http::Uri) -> Response {
    refused(Refusal::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "the operator serves no {}; it serves the dashboard (/), /api/v1/trainingjobs, \
             /api/v1/namespaces/NS/trainingjobs[/NAME[/describe|/logs]], \
             /api/v1/pipelineruns, /api/v1/pipelines, /api/v1/servedmodels, \
             /serve/NS/MODEL/..., /api/v1/queues, /api/v1/nodes, \
             /api/v1/usage, /api/v1/watch, /api/v1/whoami, /metrics and /progress",
            uri.path()
        ),
    ))
}

/// `corral top` measures replicas' processes, which the operator does not run.
async fn top() -> Response {
    refused(Refusal::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the operator does not measure replicas' processes: `kubectl top pods -n NS -l \
         corral.dev/job-name=JOB` (metrics-server) shows their CPU and memory, and the \
         DCGM exporter their GPUs (deploy/grafana/)",
    ))
}

/// The charts' history: kept by the embedded server, not by the operator (Prometheus keeps
/// it on Kubernetes, deploy/grafana/).
async fn series() -> Response {
    refused(Refusal::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the operator keeps no history for charts: Prometheus does (deploy/grafana/ has a          dashboard on the same metric names)",
    ))
}
