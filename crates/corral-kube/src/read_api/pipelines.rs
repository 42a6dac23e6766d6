//! Stored Pipelines in the operator's read API: list and get, as embedded (`corral get
//! pipelines`, `corral describe pipeline/NAME`), from the Pipelines the leader's last pass
//! saw. Kubernetes keeps a Pipeline's current version only: there is no `versions` path,
//! and the CLI shows the current one alone.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::access::Refusal;
use super::{ReadApi, answer, items};

pub(super) async fn list_all(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let snap = api.snapshot()?;
        let spaces = super::snapshot::namespaces_of(&snap.pipelines);
        let visible = api.access.visible(&caller, spaces).await?;
        Ok(items(snap.pipelines(|ns| {
            visible.as_ref().is_none_or(|v| v.iter().any(|x| x == ns))
        })))
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
        Ok(items(snap.pipelines(|ns| ns == namespace)))
    })
    .await
}

pub(super) async fn get(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        let found = snap
            .pipelines(|ns| ns == namespace)
            .into_iter()
            .find(|p| p.metadata.name == name);
        let Some(p) = found else {
            return Err(Refusal::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!(
                    "Pipeline {name} not found in namespace {namespace}; `corral get pipelines \
                     -n {namespace}` lists them"
                ),
            ));
        };
        Ok(axum::Json(p).into_response())
    })
    .await
}
