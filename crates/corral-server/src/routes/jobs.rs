//! One job or a namespace's jobs: list, get, describe, delete, suspend and resume.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use corral_core::control::Effect;
use jiff::Timestamp;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;
use super::list_body::job_rows;

pub(super) async fn list_namespace(
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

pub(super) async fn list_all(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let only = caller.namespace().map(str::to_string);
    let rows = state
        .with_cluster(move |c| c.list_rows(only.as_deref()))
        .await?;
    Ok(job_rows(&rows))
}

pub(super) async fn get_job(
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

pub(super) async fn describe_job(
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
    let change = state
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
    // `changed: false`: the job was so already (a second delete of a job being deleted).
    let changed = change == Effect::Made;
    Ok(Json(json!({
        "namespace": namespace,
        "name": name,
        "result": action,
        "changed": changed,
    }))
    .into_response())
}

pub(super) async fn delete_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    change(state, caller, namespace, name, "deleted").await
}

pub(super) async fn suspend_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    change(state, caller, namespace, name, "suspended").await
}

pub(super) async fn resume_job(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    change(state, caller, namespace, name, "resumed").await
}
