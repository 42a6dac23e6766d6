//! The routes. Every `/api/v1/` answer is JSON (logs: text); every error is an
//! [`ApiError`] body.
//!
//! - `submit`: `POST .../trainingjobs` and `.../submissions` (jobs with a code snapshot).
//! - `jobs`: listing, reading, deleting, suspending and resuming jobs.
//! - `cluster`: queues, nodes, `top` and `/metrics`.
//! - `logs`: a replica's log, whole, tailed or followed across incarnations.
//! - `exec`: a command inside a running replica, its output streamed back in frames.
//! - `watch`: changes (jobs, pending reasons, events) pushed as server-sent events.
//! - `series`: the history store's time series, for charts.
//! - `usage`: the usage ledger (GPU-hours per period, namespace, queue, GPU type, job).
//! - `pipelines`: pipeline runs (list, get, describe, delete) and stored pipelines (list,
//!   get, their kept versions, delete).
//! - `list_body`: the `{"items": [...]}` body every list answers with.
//!
//! The dashboard's page and assets (`/`, `/ui/...`) are `crate::dashboard`'s.

mod cluster;
pub mod exec;
mod jobs;
mod list_body;
mod logs;
mod pipelines;
mod series;
mod submit;
mod usage;
mod watch;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::json;
use tower_http::limit::RequestBodyLimitLayer;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use cluster::{metrics, nodes, queues, top};
use jobs::{delete_job, describe_job, get_job, list_all, list_namespace, resume_job, suspend_job};
pub use logs::LogQuery;
use logs::logs;
pub use series::{SeriesQuery, SeriesReport};
pub use submit::SubmitQuery;
use submit::{submit, submit_with_code};
pub use usage::{BudgetRow, UsageQuery, UsageReport};

type ApiResult = Result<Response, ApiError>;

/// Every route of the server.
pub fn router(state: AppState) -> Router {
    let limit = state.body_limit;
    let jobs = "/api/v1/namespaces/{namespace}/trainingjobs";
    let runs = "/api/v1/namespaces/{namespace}/pipelineruns";
    let api = Router::new()
        .route(jobs, post(submit).get(list_namespace))
        .route(&format!("{jobs}/{{name}}"), get(get_job).delete(delete_job))
        .route(&format!("{jobs}/{{name}}/describe"), get(describe_job))
        .route(&format!("{jobs}/{{name}}/suspend"), post(suspend_job))
        .route(&format!("{jobs}/{{name}}/resume"), post(resume_job))
        .route(&format!("{jobs}/{{name}}/logs"), get(logs))
        .route(
            &format!("{jobs}/{{name}}/replicas/{{replica}}/exec"),
            post(exec::exec),
        )
        .route(
            "/api/v1/namespaces/{namespace}/servedmodels",
            get(crate::serving::list),
        )
        .route(
            "/api/v1/namespaces/{namespace}/servedmodels/{name}",
            get(crate::serving::get).delete(crate::serving::delete),
        )
        .route(
            "/api/v1/namespaces/{namespace}/servedmodels/{name}/traffic",
            post(crate::serving::set_traffic),
        )
        .route("/api/v1/trainingjobs", get(list_all))
        .route(runs, post(submit).get(pipelines::list_namespace))
        .route(
            &format!("{runs}/{{name}}"),
            get(pipelines::get_run).delete(pipelines::delete_run),
        )
        .route(
            &format!("{runs}/{{name}}/describe"),
            get(pipelines::describe_run),
        )
        .route("/api/v1/pipelineruns", get(pipelines::list_all))
        .route(
            "/api/v1/namespaces/{namespace}/pipelines",
            post(submit).get(pipelines::list_pipelines),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pipelines/{name}",
            get(pipelines::get_pipeline).delete(pipelines::delete_pipeline),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pipelines/{name}/versions",
            get(pipelines::pipeline_versions),
        )
        .route("/api/v1/pipelines", get(pipelines::list_all_pipelines))
        .route("/api/v1/servedmodels", get(crate::serving::list_all))
        .route("/api/v1/queues", get(queues))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/top", get(top))
        .route("/api/v1/usage", get(usage::usage))
        .route("/api/v1/series", get(series::series))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/audit", get(crate::audit::list))
        .route("/api/v1/watch", get(watch::watch))
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
    // Model traffic: each model's own body limit (the router's), no audit entry per
    // inference request, and the replica's answers as they are.
    let serve = Router::new()
        .route(
            "/serve/{namespace}/{model}",
            any(crate::serving::serve_root),
        )
        .route(
            "/serve/{namespace}/{model}/{*path}",
            any(crate::serving::serve_path),
        )
        .layer(DefaultBodyLimit::disable());
    api.merge(code)
        .merge(corral_dashboard::router())
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(limit, json_errors))
        // Outermost: it records the answer as the client gets it.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::audit::record,
        ))
        .merge(serve)
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
