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
use corral_local::cluster::{Cluster, JobState, NodeInfo, ReplicaLog, SubmitResult, SummaryRow};
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
        .route("/api/v1/whoami", get(whoami))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(limit));
    // A submission with code is as large as its snapshot: it checks its own limit while
    // it streams.
    let code = Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/submissions",
            post(submit_with_code),
        )
        .layer(DefaultBodyLimit::disable());
    api.merge(code)
        .fallback(not_found)
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

/// Bytes reserved per listed row before serializing (a job summary is about 250).
const ITEM_BYTES_HINT: usize = 256;

/// A list of jobs: the rows' JSON, made when each job last changed, joined. The same
/// bytes as [`items`] of their summaries, without serializing every job again.
fn job_rows(rows: &[SummaryRow]) -> Response {
    const OPEN: &str = "{\"items\":[";
    const CLOSE: &str = "]}";
    // Each row's text is checked as UTF-8 when taken: once, not again for the length.
    let texts: Vec<&str> = rows.iter().map(SummaryRow::json).collect();
    let len = OPEN.len() + CLOSE.len() + texts.iter().map(|t| t.len() + 1).sum::<usize>();
    let mut body = String::with_capacity(len);
    body.push_str(OPEN);
    for (i, text) in texts.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(text);
    }
    body.push_str(CLOSE);
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from(body),
    )
        .into_response()
}

fn items<T: serde::Serialize>(items: Vec<T>) -> Response {
    // Into a buffer sized for the rows up front: `Json` writes into a small `BytesMut`
    // that grows by copying, one `put_slice` per token, which was half of a 10,000-job
    // list's time.
    let mut body = Vec::with_capacity(16 + items.len() * ITEM_BYTES_HINT);
    match serde_json::to_writer(&mut body, &Items { items }) {
        Ok(()) => (
            [(header::CONTENT_TYPE, "application/json")],
            axum::body::Body::from(body),
        )
            .into_response(),
        Err(e) => ApiError::internal(format!("cannot serialize the list: {e}")).into_response(),
    }
}

/// `?dryRun=All`: check as a submit would, store nothing (as `kubectl --dry-run=server`).
#[derive(Debug, Default, Deserialize)]
pub struct SubmitQuery {
    #[serde(rename = "dryRun")]
    pub dry_run: Option<String>,
}

/// Submissions up to this size are parsed and validated on the request's own task.
const INLINE_CHECK_BYTES: usize = 8 * 1024;

async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
    query: Result<Query<SubmitQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    caller.check(&namespace)?;
    check_name("namespace", &namespace)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let dry_run = match query.dry_run.as_deref() {
        None => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun `{other}` is not valid; use `All` (check everything, store nothing) or leave it out"
            )));
        }
    };
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
    let ctx = state.submit_context();
    let ns = namespace.clone();
    // A small submission (one job is about 1 KB) is checked right here, which costs less
    // than handing it to another thread; a large one on the blocking pool.
    let checked = if text.len() <= INLINE_CHECK_BYTES {
        Cluster::check_submission(&ctx, &text, &ns)?
    } else {
        tokio::task::spawn_blocking(move || Cluster::check_submission(&ctx, &text, &ns))
            .await
            .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))??
    };
    if dry_run {
        let items: Vec<SubmitResult> = checked
            .jobs()
            .iter()
            .zip(checked.warnings())
            .map(|((job, converted_from), warnings)| SubmitResult {
                namespace: namespace.clone(),
                name: job.metadata.name.clone(),
                uid: String::new(),
                converted_from: converted_from.clone(),
                warnings: warnings.clone(),
            })
            .collect();
        return Ok(submitted_response(StatusCode::OK, items));
    }
    let submitted = state.submit(checked).await??;
    state.wake();
    Ok(submitted_response(StatusCode::CREATED, submitted))
}

/// The answer to a submission: the jobs, and every warning twice, in the body (`warnings`,
/// each naming its job) and as an HTTP `Warning: 299` header, which is what kubectl prints.
fn submitted_response(status: StatusCode, items: Vec<SubmitResult>) -> Response {
    let warnings: Vec<String> = items
        .iter()
        .flat_map(|r| {
            r.warnings
                .iter()
                .map(move |w| format!("TrainingJob {}: {w}", r.name))
        })
        .collect();
    let mut response = (
        status,
        Json(json!({ "items": items, "warnings": warnings })),
    )
        .into_response();
    for w in &warnings {
        // RFC 7234 warn-text is a quoted string of visible ASCII.
        let text: String = w
            .chars()
            .map(|c| match c {
                '"' | '\\' => '\'',
                c if c.is_ascii_graphic() || c == ' ' => c,
                _ => '?',
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// Files of one submission with code, removed when the request ends whatever happened (a
/// submission that succeeded has moved its snapshot away).
struct Staged(Vec<PathBuf>);

impl Drop for Staged {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = corral_local::code::remove_tree(p);
        }
    }
}

fn code_too_large(max: u64, what: String) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PayloadTooLarge",
        format!(
            "the code snapshot {what} is larger than this server's limit of {max} bytes \
             ({} MiB; codeSnapshots.maxBytes in the server's corral.yaml): leave out what the \
             job need not ship (.gitignore it)",
            max / (1024 * 1024)
        ),
    )
}

/// Reads one small part whole, refusing more than `cap` bytes.
async fn read_part(
    mut field: axum::extract::multipart::Field<'_>,
    cap: usize,
    what: &str,
) -> Result<String, ApiError> {
    let mut out = Vec::new();
    while let Some(chunk) = field
        .chunk()
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the `{what}` part: {e}")))?
    {
        out.extend_from_slice(&chunk);
        if out.len() > cap {
            return Err(ApiError::too_large(cap));
        }
    }
    String::from_utf8(out)
        .map_err(|_| ApiError::bad_request(format!("the `{what}` part is not UTF-8 text")))
}

/// `POST /api/v1/namespaces/{namespace}/submissions`: jobs with a code snapshot, one
/// multipart/form-data request with the parts `manifest` (what `trainingjobs` takes),
/// `digest` (`sha256:<hex>` of the archive) and `code` (the tar.gz archive, streamed to
/// disk). All or nothing: a refused submission leaves no job and no snapshot.
async fn submit_with_code(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
    headers: axum::http::HeaderMap,
    multipart: Result<axum::extract::Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult {
    use sha2::Digest;
    use tokio::io::AsyncWriteExt;

    caller.check(&namespace)?;
    check_name("namespace", &namespace)?;
    let max = state.code_max_bytes;
    // The whole request may hold the manifest and the archive; a larger one is refused
    // before it is read (a client that sent `Expect: 100-continue` has not sent it yet).
    let allowed = max.saturating_add(state.body_limit as u64);
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = length
        && len > allowed
    {
        return Err(code_too_large(max, format!("upload ({len} bytes)")));
    }
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "send multipart/form-data with the parts manifest, digest and code: {e}"
        ))
    })?;
    let mut staged = Staged(Vec::new());
    let (mut manifest, mut digest, mut archive) = (None, None, None);
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the request: {e}")))?
    {
        match field.name().unwrap_or_default() {
            "manifest" => manifest = Some(read_part(field, state.body_limit, "manifest").await?),
            "digest" => digest = Some(read_part(field, 128, "digest").await?),
            "code" => {
                let path = state
                    .code
                    .incoming_path(".tar.gz")
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                staged.0.push(path.clone());
                let mut file = tokio::fs::File::create(&path)
                    .await
                    .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                let mut hash = sha2::Sha256::new();
                let mut size: u64 = 0;
                while let Some(chunk) = field.chunk().await.map_err(|e| {
                    ApiError::bad_request(format!("cannot read the `code` part: {e}"))
                })? {
                    size += chunk.len() as u64;
                    if size > max {
                        return Err(code_too_large(max, format!("archive (over {max} bytes)")));
                    }
                    hash.update(&chunk);
                    file.write_all(&chunk)
                        .await
                        .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                }
                file.flush()
                    .await
                    .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                archive = Some((path, corral_local::code::format_digest(hash)));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown part `{other}`: send manifest, digest and code"
                )));
            }
        }
    }
    let missing = |part: &str| ApiError::bad_request(format!("the `{part}` part is missing"));
    let text = manifest.ok_or_else(|| missing("manifest"))?;
    let claimed = digest.ok_or_else(|| missing("digest"))?;
    let (archive, got) = archive.ok_or_else(|| missing("code"))?;
    let claimed = claimed.trim();
    if !corral_local::code::is_digest(claimed) {
        return Err(ApiError::bad_request(format!(
            "digest `{claimed}` is not valid: write sha256:<64 lowercase hex digits>"
        )));
    }
    if claimed != got {
        return Err(ApiError::bad_request(format!(
            "the code archive's digest is {got}, not {claimed} as sent: it changed in transit; \
             submit again"
        )));
    }
    let ctx = state.submit_context();
    let ns = namespace.clone();
    let checked = tokio::task::spawn_blocking(move || Cluster::check_submission(&ctx, &text, &ns))
        .await
        .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))??;
    let checked = checked.with_code(claimed);
    let tree = state
        .code
        .incoming_path(".d")
        .map_err(|e| ApiError::internal(e.to_string()))?;
    staged.0.push(tree.clone());
    let unpack_to = tree.clone();
    let unpacked = tokio::task::spawn_blocking(move || {
        use corral_local::code::{CodeError, unpack};
        let file = std::fs::File::open(&archive).map_err(|source| CodeError::Io {
            context: archive.display().to_string(),
            source,
        })?;
        let r = unpack(std::io::BufReader::new(file), &unpack_to, max);
        let _ = std::fs::remove_file(&archive);
        r
    })
    .await
    .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))?;
    match unpacked {
        Ok(_) => {}
        Err(corral_local::code::CodeError::TooLarge { .. }) => {
            return Err(code_too_large(max, "(its files)".into()));
        }
        Err(e @ corral_local::code::CodeError::Invalid(_)) => {
            return Err(ApiError::bad_request(e.to_string()));
        }
        Err(e) => return Err(ApiError::internal(e.to_string())),
    }
    let submitted = state
        .with_cluster(move |c| c.submit_checked_with_code(checked, Some(&tree), Timestamp::now()))
        .await??;
    drop(staged);
    state.wake();
    Ok(submitted_response(StatusCode::CREATED, submitted))
}

async fn list_namespace(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
) -> ApiResult {
    caller.check(&namespace)?;
    let rows = state
        .with_cluster(move |c| c.list_rows(Some(&namespace)))
        .await?;
    Ok(job_rows(&rows))
}

async fn list_all(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let only = caller.namespace().map(str::to_string);
    let rows = state
        .with_cluster(move |c| c.list_rows(only.as_deref()))
        .await?;
    Ok(job_rows(&rows))
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
async fn metrics(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
) -> ApiResult {
    let format = crate::metrics::Format::negotiate(
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
    );
    let (snapshot, queues, rows) = state
        .with_cluster(|c| (c.metrics(), c.queues(), c.top()))
        .await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| caller.allows(&r.namespace))
        .collect();
    let text = crate::metrics::render(&snapshot, &queues, &rows, format);
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        text,
    )
        .into_response())
}

/// The namespace the caller's token acts in (none: every namespace), so that a client
/// defaults to it as kubectl defaults to its context's namespace.
async fn whoami(caller: Caller) -> Response {
    Json(json!({ "namespace": caller.namespace() })).into_response()
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

/// `?replica=<job>-<role>-<i>|<role>-<i>`, or `?role=&index=`; `follow=true` streams until
/// the job ends, into each new incarnation of the replica; `previous=true`: the incarnation
/// before the current one; `tail=N`: only the last N lines; `sinceSeconds=N`: only those
/// that arrived in the last N seconds; `timestamps=true`: each line with its time.
#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    pub replica: Option<String>,
    pub role: Option<String>,
    pub index: Option<u32>,
    #[serde(default)]
    pub follow: bool,
    #[serde(default)]
    pub previous: bool,
    pub tail: Option<u64>,
    /// Prefix each line with the time it arrived (RFC 3339, UTC).
    #[serde(default)]
    pub timestamps: bool,
    /// Only lines that arrived in the last N seconds.
    #[serde(rename = "sinceSeconds")]
    pub since_seconds: Option<u64>,
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
    if query.previous && query.follow {
        return Err(ApiError::bad_request(
            "`previous` and `follow` do not go together: a previous incarnation has ended"
                .to_string(),
        ));
    }
    let (ns, n) = (namespace.clone(), name.clone());
    let Some(job) = state.with_cluster(move |c| c.get(&ns, &n)).await?? else {
        return Err(ApiError::job_not_found(&namespace, &name));
    };
    let replica = pick_replica(&job, &query)?;
    let full = format!("{name}-{replica}");
    let tail = LogTail {
        state: state.clone(),
        namespace: namespace.clone(),
        job: name.clone(),
        replica: replica.clone(),
        follow: query.follow,
        tail: query.tail,
        view: LogView::of(&query),
        at_line_start: true,
        shown: None,
        file: None,
        queued: Vec::new(),
        finished: false,
    };
    let logs = tail.incarnations().await?;
    let mut response = if query.follow {
        let stream = futures_util::stream::unfold(tail, |mut t| async move {
            t.next_chunk().await.map(|chunk| (chunk, t))
        });
        Body::from_stream(stream).into_response()
    } else {
        let picked = if query.previous {
            let Some(log) = logs.len().checked_sub(2).and_then(|i| logs.get(i)) else {
                return Err(ApiError::not_found(match logs.len() {
                    0 => format!("replica {full} has not started yet, so it has no log"),
                    _ => format!("replica {full} has run once, so it has no previous incarnation"),
                }));
            };
            log
        } else {
            let Some(log) = logs.last() else {
                return Err(ApiError::not_found(format!(
                    "replica {full} has not started yet, so it has no log; `corral logs \
                     {name} {replica} -f` waits for it"
                )));
            };
            log
        };
        let path = picked.path.clone();
        let view = LogView::of(&query);
        let text = tokio::task::spawn_blocking(move || view.read(&path))
            .await
            .map_err(|e| ApiError::internal(format!("reading the log: {e}")))?
            .map_err(|e| ApiError::internal(format!("reading the log of {full}: {e}")))?;
        Body::from(last_lines(text, query.tail)).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&full) {
        headers.insert("x-corral-replica", v);
    }
    Ok(response)
}

/// How lines are shown: with their times, and from when on.
#[derive(Clone, Copy, Debug)]
struct LogView {
    timestamps: bool,
    /// Unix milliseconds: lines that arrived earlier are left out.
    since_ms: Option<i64>,
}

impl LogView {
    fn of(q: &LogQuery) -> Self {
        LogView {
            timestamps: q.timestamps,
            since_ms: q.since_seconds.map(|s| {
                Timestamp::now()
                    .as_millisecond()
                    .saturating_sub(i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000))
            }),
        }
    }

    /// A whole incarnation's log (the rotated segment, then the current one), as shown.
    fn read(self, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
        self.read_counted(path).map(|(text, _)| text)
    }

    /// `read`, and how many bytes of the log it went through.
    fn read_counted(self, path: &std::path::Path) -> std::io::Result<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let mut read = 0u64;
        for line in corral_local::executor::log_times::timed_lines(path)? {
            read += line.text.len() as u64;
            let ms = line.unix_ms.and_then(|m| i64::try_from(m).ok());
            // A line of unknown time is kept: it may be recent.
            if let (Some(since), Some(ms)) = (self.since_ms, ms)
                && ms < since
            {
                continue;
            }
            if self.timestamps {
                out.extend(stamp(ms).as_bytes());
            }
            out.extend(line.text);
        }
        Ok((out, read))
    }

    /// Output read live: each line that starts in `chunk` gets the time of reading (within
    /// one poll of its arrival).
    fn live(self, chunk: &[u8], at_line_start: &mut bool) -> Vec<u8> {
        if !self.timestamps {
            return chunk.to_vec();
        }
        let now = stamp(Some(Timestamp::now().as_millisecond()));
        let mut out = Vec::with_capacity(chunk.len() + 32);
        for b in chunk {
            if *at_line_start {
                out.extend(now.as_bytes());
            }
            out.push(*b);
            *at_line_start = *b == b'\n';
        }
        out
    }
}

/// `2026-11-23T13:00:00.123Z ` (kubectl's form); `-` when the time is unknown.
fn stamp(ms: Option<i64>) -> String {
    match ms.and_then(|m| Timestamp::from_millisecond(m).ok()) {
        Some(t) => format!("{} ", t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")),
        None => "- ".to_string(),
    }
}

/// The last `n` lines of `text` (a last line without its newline counts), or all of it.
fn last_lines(text: Vec<u8>, n: Option<u64>) -> Vec<u8> {
    let Some(n) = n else {
        return text;
    };
    if n == 0 {
        return Vec::new();
    }
    let body = text.strip_suffix(b"\n").unwrap_or(&text);
    let mut seen = 0u64;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return text[i + 1..].to_vec();
            }
        }
    }
    text
}

/// The line that introduces an incarnation in a followed log, so that a reader sees where
/// one ended and the next began.
fn incarnation_mark(replica: &str, ordinal: usize, log: &ReplicaLog) -> String {
    let started = log
        .started
        .map(|t| format!(", started {}", t.round(jiff::Unit::Second).unwrap_or(t)))
        .unwrap_or_default();
    let restarts = match ordinal {
        1 => "first run".to_string(),
        2 => "after 1 restart".to_string(),
        n => format!("after {} restarts", n - 1),
    };
    format!("==> {replica}: incarnation {ordinal} ({restarts}{started}) <==\n")
}

/// Follows a replica's log: its current incarnation, then every later one as it starts,
/// until the job ends.
struct LogTail {
    state: AppState,
    namespace: String,
    job: String,
    replica: String,
    follow: bool,
    /// Lines of the first incarnation shown to start from the end of (`--tail`).
    tail: Option<u64>,
    view: LogView,
    /// Whether the next byte read live starts a line (for timestamps).
    at_line_start: bool,
    /// 0-based position of the incarnation being read, among the replica's incarnations.
    shown: Option<usize>,
    file: Option<tokio::fs::File>,
    /// What to send before reading on (a mark, the start of an incarnation).
    queued: Vec<Bytes>,
    /// The job ended: read what is left, then stop.
    finished: bool,
}

const POLL: Duration = Duration::from_millis(200);

impl LogTail {
    async fn incarnations(&self) -> Result<Vec<ReplicaLog>, ApiError> {
        let (ns, job, replica) = (
            self.namespace.clone(),
            self.job.clone(),
            self.replica.clone(),
        );
        self.state
            .with_cluster(move |c| c.replica_logs(&ns, &job, &replica))
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

    /// Moves on to incarnation `i` of `logs`: queues its mark and what it has written so far
    /// (only the last `tail` lines of the first one shown), and keeps its file open at the
    /// end of what was queued.
    async fn open(&mut self, logs: &[ReplicaLog], i: usize) -> Result<(), std::io::Error> {
        let log = &logs[i];
        let full = format!("{}-{}", self.job, self.replica);
        self.queued
            .push(Bytes::from(incarnation_mark(&full, i + 1, log)));
        let mut rotated = log.path.as_os_str().to_owned();
        rotated.push(".1");
        let rotated = PathBuf::from(rotated);
        let text = if self.view.timestamps || self.view.since_ms.is_some() {
            let (path, view) = (log.path.clone(), self.view);
            let (text, read) = tokio::task::spawn_blocking(move || view.read_counted(&path))
                .await
                .map_err(std::io::Error::other)??;
            // Live reading goes on after what the history covered of the current segment.
            let before = tokio::fs::metadata(&rotated).await.map_or(0, |m| m.len());
            match tokio::fs::File::open(&log.path).await {
                Ok(mut f) => {
                    use tokio::io::AsyncSeekExt;
                    f.seek(std::io::SeekFrom::Start(read.saturating_sub(before)))
                        .await?;
                    self.file = Some(f);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.file = None,
                Err(e) => return Err(e),
            }
            text
        } else {
            let mut text = match tokio::fs::read(&rotated).await {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e),
            };
            match tokio::fs::File::open(&log.path).await {
                Ok(mut f) => {
                    f.read_to_end(&mut text).await?;
                    self.file = Some(f);
                }
                // Launched, not yet writing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.file = None,
                Err(e) => return Err(e),
            }
            text
        };
        self.at_line_start = text.last().is_none_or(|b| *b == b'\n');
        let text = if self.shown.is_none() {
            last_lines(text, self.tail)
        } else {
            text
        };
        if !text.is_empty() {
            self.queued.push(Bytes::from(text));
        }
        self.shown = Some(i);
        Ok(())
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            if !self.queued.is_empty() {
                return Some(Ok(self.queued.remove(0)));
            }
            if let Some(f) = &mut self.file {
                let mut buf = vec![0u8; 64 * 1024];
                match f.read(&mut buf).await {
                    Ok(0) => {}
                    Ok(n) => {
                        buf.truncate(n);
                        let shown = self.view.live(&buf, &mut self.at_line_start);
                        return Some(Ok(Bytes::from(shown)));
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
            // Nothing more in this incarnation's file: a later incarnation, if one started,
            // or the file of this one, if it was not there yet.
            let logs = self.incarnations().await.unwrap_or_default();
            let next = match self.shown {
                // The current one first: following shows what runs now, then what follows.
                None => logs.len().checked_sub(1),
                Some(i) if i + 1 < logs.len() => Some(i + 1),
                Some(i) if self.file.is_none() && i < logs.len() => Some(i),
                Some(_) => None,
            };
            if let Some(i) = next {
                if self.shown == Some(i) {
                    // Reopen the file that has appeared since; its mark went out already.
                    match tokio::fs::File::open(&logs[i].path).await {
                        Ok(f) => self.file = Some(f),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Some(Err(e)),
                    }
                    if self.file.is_some() {
                        continue;
                    }
                } else {
                    if let Err(e) = self.open(&logs, i).await {
                        return Some(Err(e));
                    }
                    continue;
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use corral_local::cluster::JobSummary;

    fn summary(name: &str, queue: &str) -> JobSummary {
        JobSummary {
            namespace: "team-a".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            framework: "pytorch".into(),
            queue: queue.into(),
            state: JobState::Running,
            replicas_ready: 3,
            replicas_total: 4,
            gpus: 8,
            created: Timestamp::from_millisecond(1_795_000_000_123).expect("in range"),
            restarts: 1,
            preemptions: 2,
        }
    }

    async fn body_of(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    }

    /// The joined rows are byte for byte what serializing the summaries gives, so the
    /// API's format does not depend on which path made it.
    #[tokio::test]
    async fn joined_rows_are_the_serialized_list() {
        for summaries in [
            vec![],
            vec![summary("one", "default")],
            vec![summary("a", "q\"uoted\\"), summary("b", "ünï\ncode")],
        ] {
            let rows: Vec<SummaryRow> = summaries.iter().map(SummaryRow::new).collect();
            let joined = body_of(job_rows(&rows)).await;
            let serialized = body_of(items(summaries.clone())).await;
            assert_eq!(joined, serialized);
            let parsed: serde_json::Value = serde_json::from_str(&joined).expect("JSON");
            assert_eq!(
                parsed["items"].as_array().map(Vec::len),
                Some(summaries.len())
            );
        }
    }
}
