//! The routes. Every `/api/v1/` answer is JSON (logs: text); every error is an
//! [`ApiError`] body.

use std::path::PathBuf;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_api::training_job::Role;
use corral_local::cluster::{Cluster, JobState, NodeInfo};
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tower_http::limit::RequestBodyLimitLayer;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

type ApiResult = Result<Response, ApiError>;

/// Every route of the server.
pub fn router(state: AppState) -> Router {
    let limit = state.body_limit;
    let jobs = "/api/v1/namespaces/{namespace}/trainingjobs";
    let api = Router::new()
        .route(jobs, post(submit).get(list_namespace))
        .route(&format!("{jobs}/{{name}}"), get(get_job).delete(delete_job))
        .route(&format!("{jobs}/{{name}}/describe"), get(describe_job))
        .route(&format!("{jobs}/{{name}}/suspend"), post(suspend_job))
        .route(&format!("{jobs}/{{name}}/resume"), post(resume_job))
        .route(&format!("{jobs}/{{name}}/logs"), get(logs))
        .route("/api/v1/trainingjobs", get(list_all))
        .route("/api/v1/queues", get(queues))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/top", get(top))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .fallback(not_found);
    api.layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(middleware::from_fn_with_state(limit, json_errors))
        .with_state(state)
}

/// Turns the framework's own plain-text error answers (body too large, wrong method) into
/// the API's JSON error body.
async fn json_errors(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(limit).into_response(),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} is not allowed on {path}; /openapi.json lists the routes"),
        )
        .into_response(),
        _ => response,
    }
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {}; /openapi.json lists the routes",
        request.method(),
        request.uri().path()
    ))
}

fn check_name(field: &str, value: &str) -> Result<(), ApiError> {
    corral_api::validate::check_dns1123_label(value).map_err(|m| {
        let mut e = ApiError::bad_request(format!("{field} `{value}` is not valid: {m}"));
        e.body.fields.push(crate::error::FieldErrorBody {
            path: field.to_string(),
            message: m,
            document: None,
            object: None,
        });
        e
    })
}

/// A list response, `{"items": [...]}`, serialized straight from the rows (no
/// intermediate `Value`: a list of 10,000 jobs is 2.5 MB).
#[derive(serde::Serialize)]
struct Items<T> {
    items: Vec<T>,
}

fn items<T: serde::Serialize>(items: Vec<T>) -> Response {
    Json(Items { items }).into_response()
}

async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    caller.check(&namespace)?;
    check_name("namespace", &namespace)?;
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(state.body_limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })?;
    let text = String::from_utf8(body.to_vec()).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not UTF-8 text (byte {}): send YAML or JSON",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty: send one or more TrainingJob (or Kubeflow job) \
             documents as YAML or JSON",
        ));
    }
    // Parsing and validation need no lock: requests check their documents in parallel
    // and hold the cluster only to store them.
    let file = state.file();
    let ns = namespace.clone();
    let checked = tokio::task::spawn_blocking(move || Cluster::check_submission(&file, &text, &ns))
        .await
        .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))??;
    let submitted = state
        .with_cluster(move |c| c.submit_checked(checked, Timestamp::now()))
        .await??;
    state.wake();
    Ok((StatusCode::CREATED, Json(json!({ "items": submitted }))).into_response())
}

async fn list_namespace(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
) -> ApiResult {
    caller.check(&namespace)?;
    let jobs = state
        .with_cluster(move |c| c.list_shared(Some(&namespace)))
        .await?;
    Ok(items(jobs))
}

async fn list_all(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let only = caller.namespace().map(str::to_string);
    let jobs = state
        .with_cluster(move |c| c.list_shared(only.as_deref()))
        .await?;
    Ok(items(jobs))
}

async fn get_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    match state.with_cluster(move |c| c.get(&ns, &n)).await?? {
        Some(job) => Ok(Json(job).into_response()),
        None => Err(ApiError::job_not_found(&namespace, &name)),
    }
}

async fn describe_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    match state.with_cluster(move |c| c.describe(&ns, &n)).await?? {
        Some(details) => Ok(Json(details).into_response()),
        None => Err(ApiError::job_not_found(&namespace, &name)),
    }
}

/// Delete, suspend or resume.
async fn change(
    state: AppState,
    caller: Caller,
    namespace: String,
    name: String,
    action: &'static str,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    state
        .with_cluster(move |c| {
            let now = Timestamp::now();
            match action {
                "deleted" => c.delete(&ns, &n, now),
                "suspended" => c.suspend(&ns, &n, now),
                _ => c.resume(&ns, &n, now),
            }
        })
        .await??;
    state.wake();
    Ok(Json(json!({ "namespace": namespace, "name": name, "result": action })).into_response())
}

async fn delete_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    change(state, caller, namespace, name, "deleted").await
}

async fn suspend_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    change(state, caller, namespace, name, "suspended").await
}

async fn resume_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    change(state, caller, namespace, name, "resumed").await
}

async fn queues(State(state): State<AppState>, _caller: Caller) -> ApiResult {
    Ok(items(state.with_cluster(|c| c.queues()).await?))
}

async fn nodes(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let mut nodes: Vec<NodeInfo> = state.with_cluster(|c| c.nodes()).await?;
    // A namespace's token sees that a GPU is taken, not by whom.
    for gpu in nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()) {
        if let Some(user) = &gpu.used_by {
            let ns = user.split('/').next().unwrap_or_default();
            if !caller.allows(ns) {
                gpu.used_by = Some("(another namespace)".to_string());
            }
        }
    }
    Ok(items(nodes))
}

async fn top(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let rows = state.with_cluster(|c| c.top()).await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| caller.allows(&r.namespace))
        .collect();
    Ok(items(rows))
}

/// With tokens configured, Prometheus scrapes with one (`authorization: {credentials: ...}`
/// in its scrape config); a namespace's token gets the cluster-wide gauges (jobs by queue
/// and state, GPUs) and only its own namespace's per-replica series, which name jobs.
async fn metrics(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let (snapshot, rows) = state.with_cluster(|c| (c.metrics(), c.top())).await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| caller.allows(&r.namespace))
        .collect();
    let text = crate::metrics::render(&snapshot, &rows)
        .map_err(|e| ApiError::internal(format!("cannot encode metrics: {e}")))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        text,
    )
        .into_response())
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

/// `?replica=<job>-<role>-<i>|<role>-<i>`, or `?role=&index=`; `follow=true` streams until
/// the job ends.
#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    pub replica: Option<String>,
    pub role: Option<String>,
    pub index: Option<u32>,
    #[serde(default)]
    pub follow: bool,
}

/// The replica a log request means, as `<role>-<index>`, checked against the job's roles.
fn pick_replica(job: &corral_api::TrainingJob, q: &LogQuery) -> Result<String, ApiError> {
    let roles: Vec<String> = job
        .spec
        .replicas
        .iter()
        .filter(|(_, r)| r.count > 0)
        .map(|(role, r)| format!("{role}-0..{}", r.count.saturating_sub(1)))
        .collect();
    let bad = |what: String| {
        ApiError::bad_request(format!(
            "{what}; job {} has replicas {}",
            job.name(),
            roles.join(", ")
        ))
    };
    let (role, index) = if let Some(r) = &q.replica {
        let short = r
            .strip_prefix(job.name())
            .and_then(|s| s.strip_prefix('-'))
            .unwrap_or(r);
        let Some((role, index)) = short.rsplit_once('-') else {
            return Err(bad(format!(
                "`{r}` is not a replica name (`<role>-<index>`, e.g. `worker-0`)"
            )));
        };
        let index: u32 = index
            .parse()
            .map_err(|_| bad(format!("`{r}`: `{index}` is not a replica index")))?;
        (role.to_string(), index)
    } else if let Some(role) = &q.role {
        (role.clone(), q.index.unwrap_or(0))
    } else {
        let first = job
            .spec
            .replicas
            .iter()
            .find(|(_, r)| r.count > 0)
            .map(|(role, _)| role.as_str().to_string())
            .ok_or_else(|| bad("the job has no replicas".into()))?;
        (first, q.index.unwrap_or(0))
    };
    let parsed: Role = role
        .parse()
        .map_err(|_| bad(format!("the job has no role `{role}`")))?;
    let Some(spec) = job.spec.replicas.get(&parsed) else {
        return Err(bad(format!("the job has no role `{role}`")));
    };
    let max = job
        .spec
        .elastic
        .as_ref()
        .and_then(|e| e.max_replicas)
        .unwrap_or(spec.count)
        .max(spec.count);
    if index >= max {
        return Err(bad(format!("{role} has no replica {index}")));
    }
    Ok(format!("{role}-{index}"))
}

async fn logs(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult {
    caller.check(&namespace)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (ns, n) = (namespace.clone(), name.clone());
    let Some(job) = state.with_cluster(move |c| c.get(&ns, &n)).await?? else {
        return Err(ApiError::job_not_found(&namespace, &name));
    };
    let replica = pick_replica(&job, &query)?;
    let tail = LogTail {
        state: state.clone(),
        namespace: namespace.clone(),
        job: name.clone(),
        replica: replica.clone(),
        path: None,
        file: None,
        follow: query.follow,
        finished: false,
    };
    let first = tail.lookup_path().await?;
    if first.is_none() && !query.follow {
        return Err(ApiError::not_found(format!(
            "replica {name}-{replica} has not started yet, so it has no log; `corral logs {name} \
             --replica {replica} -f` waits for it"
        )));
    }
    let tail = LogTail {
        path: first,
        ..tail
    };
    let stream = futures_util::stream::unfold(tail, |mut t| async move {
        t.next_chunk().await.map(|chunk| (chunk, t))
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("{name}-{replica}")) {
        headers.insert("x-corral-replica", v);
    }
    Ok(response)
}

/// Reads a replica's log file, and with `follow` waits for more until the job ends.
struct LogTail {
    state: AppState,
    namespace: String,
    job: String,
    replica: String,
    path: Option<PathBuf>,
    file: Option<tokio::fs::File>,
    follow: bool,
    /// The job ended: read what is left, then stop.
    finished: bool,
}

const POLL: Duration = Duration::from_millis(200);

impl LogTail {
    async fn lookup_path(&self) -> Result<Option<PathBuf>, ApiError> {
        let (ns, job, replica) = (
            self.namespace.clone(),
            self.job.clone(),
            self.replica.clone(),
        );
        self.state
            .with_cluster(move |c| c.log_path(&ns, &job, &replica))
            .await
    }

    /// Whether the job is over (finished, or gone).
    async fn job_over(&self) -> bool {
        let (ns, job) = (self.namespace.clone(), self.job.clone());
        match self
            .state
            .with_cluster(move |c| c.describe(&ns, &job))
            .await
        {
            Ok(Ok(Some(d))) => {
                d.summary.state.is_finished() || d.summary.state == JobState::Suspended
            }
            _ => true,
        }
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            if self.file.is_none() {
                if self.path.is_none() {
                    self.path = self.lookup_path().await.ok().flatten();
                }
                if let Some(p) = &self.path {
                    match tokio::fs::File::open(p).await {
                        Ok(f) => self.file = Some(f),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
            if let Some(f) = &mut self.file {
                let mut buf = vec![0u8; 64 * 1024];
                match f.read(&mut buf).await {
                    Ok(0) => {}
                    Ok(n) => {
                        buf.truncate(n);
                        return Some(Ok(Bytes::from(buf)));
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
            // Nothing (more) to read.
            if !self.follow || self.finished {
                return None;
            }
            if self.job_over().await {
                // One more pass reads what was written before the end.
                self.finished = true;
                continue;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
