//! Pipeline runs: list, get, describe (each step's phase and job, in DAG order), delete
//! (with its steps' jobs); stored Pipelines: list, get, delete (the runs made from one keep
//! their copy). Both are submitted as any document, on the submit routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use jiff::Timestamp;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;

fn run_not_found(namespace: &str, name: &str) -> ApiError {
    ApiError::not_found(format!(
        "PipelineRun {name} not found in namespace {namespace}; `corral get pipelineruns -n \
         {namespace}` lists them"
    ))
}

pub(super) async fn list_namespace(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
) -> ApiResult {
    caller.check(&namespace)?;
    let runs = state
        .with_cluster(move |c| c.pipeline_runs(Some(&namespace)))
        .await??;
    Ok(Json(json!({ "items": runs })).into_response())
}

pub(super) async fn list_all(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let only = caller.namespace().map(str::to_string);
    let runs = state
        .with_cluster(move |c| c.pipeline_runs(only.as_deref()))
        .await??;
    Ok(Json(json!({ "items": runs })).into_response())
}

pub(super) async fn get_run(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    match state
        .with_cluster(move |c| c.pipeline_run(&ns, &n))
        .await??
    {
        Some(run) => Ok(Json(run).into_response()),
        None => Err(run_not_found(&namespace, &name)),
    }
}

pub(super) async fn describe_run(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    match state
        .with_cluster(move |c| c.describe_pipeline_run(&ns, &n))
        .await??
    {
        Some(details) => Ok(Json(details).into_response()),
        None => Err(run_not_found(&namespace, &name)),
    }
}

pub(super) async fn delete_run(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    let deleted = state
        .with_cluster(move |c| c.delete_pipeline_run(&ns, &n, Timestamp::now()))
        .await??;
    state.wake();
    match deleted {
        Some(()) => Ok(Json(json!({
            "namespace": namespace,
            "name": name,
            "result": "deleted",
            "changed": true,
        }))
        .into_response()),
        None => Err(run_not_found(&namespace, &name)),
    }
}

fn pipeline_not_found(namespace: &str, name: &str) -> ApiError {
    ApiError::not_found(format!(
        "Pipeline {name} not found in namespace {namespace}; `corral get pipelines -n \
         {namespace}` lists them"
    ))
}

pub(super) async fn list_pipelines(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
) -> ApiResult {
    caller.check(&namespace)?;
    let items = state
        .with_cluster(move |c| c.pipelines(Some(&namespace)))
        .await??;
    Ok(Json(json!({ "items": items })).into_response())
}

pub(super) async fn list_all_pipelines(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let only = caller.namespace().map(str::to_string);
    let items = state
        .with_cluster(move |c| c.pipelines(only.as_deref()))
        .await??;
    Ok(Json(json!({ "items": items })).into_response())
}

pub(super) async fn get_pipeline(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    match state.with_cluster(move |c| c.pipeline(&ns, &n)).await?? {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(pipeline_not_found(&namespace, &name)),
    }
}

/// `GET .../pipelines/{name}/versions`: every kept version, oldest first.
pub(super) async fn pipeline_versions(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    let items = state
        .with_cluster(move |c| c.pipeline_versions(&ns, Some(&n)))
        .await??;
    if items.is_empty() {
        return Err(pipeline_not_found(&namespace, &name));
    }
    Ok(Json(json!({ "items": items })).into_response())
}

pub(super) async fn delete_pipeline(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> ApiResult {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    match state
        .with_cluster(move |c| c.delete_pipeline(&ns, &n))
        .await??
    {
        Some(()) => Ok(Json(json!({
            "namespace": namespace,
            "name": name,
            "result": "deleted",
            "changed": true,
        }))
        .into_response()),
        None => Err(pipeline_not_found(&namespace, &name)),
    }
}
