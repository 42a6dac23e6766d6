//! PipelineRuns in the operator's read API: list, get and describe (each step in DAG order
//! with its job's state, and the run's Events), as embedded, from the runs the leader's
//! last pass left; what the dashboard's runs page and `corral describe pipelinerun` read.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::access::Refusal;
use super::{ReadApi, answer, items};

fn run_not_found(namespace: &str, name: &str) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "PipelineRun {name} not found in namespace {namespace}; `corral get pipelineruns -n \
             {namespace}` lists them"
        ),
    )
}

pub(super) async fn list_all(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let snap = api.snapshot()?;
        let spaces = super::snapshot::namespaces_of(&snap.runs);
        let visible = api.access.visible(&caller, spaces).await?;
        let runs = snap.runs(|ns| visible.as_ref().is_none_or(|v| v.iter().any(|x| x == ns)));
        Ok(items(runs))
    })
    .await
}

pub(super) async fn list_namespace(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path(namespace): Path<String>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        Ok(items(snap.runs(|ns| ns == namespace)))
    })
    .await
}

pub(super) async fn get_run(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        let run = snap
            .run(&namespace, &name)
            .ok_or_else(|| run_not_found(&namespace, &name))?;
        Ok(axum::Json(run).into_response())
    })
    .await
}

pub(super) async fn describe_run(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        if snap.run(&namespace, &name).is_none() {
            return Err(run_not_found(&namespace, &name));
        }
        let events = api.events("PipelineRun", &namespace, &name).await;
        let details = snap
            .run_details(&namespace, &name, events)
            .ok_or_else(|| run_not_found(&namespace, &name))?;
        Ok(axum::Json(details).into_response())
    })
    .await
}
