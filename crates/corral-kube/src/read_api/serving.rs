//! Served models in the operator's read API, as `corral up` answers them: the list, one
//! model with its replicas (`corral get servedmodels`, `corral describe servedmodel`,
//! the dashboard's Serving page), and the router at `/serve/<namespace>/<model>/...`.
//!
//! A request to a model is allowed where the caller's token may do the request's verb on
//! `servedmodels/proxy` in that namespace (as `services/proxy` for a Service: GET is `get`,
//! POST `create`, ...); the cluster's RBAC decides, the router never widens it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use corral_api::served_model::{serving_replica_of, serving_revision_of};

use super::access::{Refusal, Target};
use super::{ReadApi, answer, items};

pub(super) async fn list_all(State(api): State<Arc<ReadApi>>, headers: HeaderMap) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let snap = api.snapshot()?;
        let spaces = super::snapshot::namespaces_of(&snap.served_models);
        let visible = api.access.visible(&caller, spaces).await?;
        Ok(items(snap.served_models(|ns| {
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
        Ok(items(snap.served_models(|ns| ns == namespace)))
    })
    .await
}

/// The model with its status and its replicas (job, revision, state, in rotation,
/// requests under way), as embedded.
pub(super) async fn get(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    answer(async move {
        let snap = api.in_namespace(&headers, &namespace).await?;
        let Some(model) = snap
            .served_models(|ns| ns == namespace)
            .into_iter()
            .find(|m| m.metadata.name == name)
        else {
            return Err(not_found(&namespace, &name));
        };
        let rotation = api.router().replicas(&format!("{namespace}/{name}"));
        let mut jobs: Vec<_> = snap
            .world
            .jobs
            .iter()
            .filter(|j| j.metadata.namespace_or_default() == namespace)
            .filter(|j| serving_replica_of(j).is_some_and(|(m, _)| m == name))
            .collect();
        jobs.sort_by_key(|j| serving_replica_of(j).map(|(_, i)| i));
        let replicas: Vec<_> = jobs
            .iter()
            .map(|j| {
                let seen = rotation.iter().find(|r| r.name == j.metadata.name);
                json!({
                    "job": j.metadata.name,
                    // The job's own label: known before the router reaches the replica.
                    "revision": serving_revision_of(j),
                    "state": j.status.as_ref().and_then(|s| s.phase),
                    "ready": seen.is_some_and(|r| r.ready),
                    "outstanding": seen.map_or(0, |r| r.outstanding),
                })
            })
            .collect();
        let mut model = model.clone();
        // In rotation now (the status is the last pass's).
        if let Some(s) = model.status.as_mut() {
            let ready = rotation.iter().filter(|r| r.ready).count();
            s.ready_replicas = u32::try_from(ready).unwrap_or(u32::MAX);
        }
        Ok(axum::Json(json!({"model": model, "replicas": replicas})).into_response())
    })
    .await
}

fn not_found(namespace: &str, name: &str) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "ServedModel {name} not found in namespace {namespace}; `corral get servedmodels \
             -n {namespace}` lists them"
        ),
    )
}

/// `ANY /serve/{namespace}/{model}/{*path}`: the request to one of the model's replicas.
pub(super) async fn serve_path(
    State(api): State<Arc<ReadApi>>,
    Path((namespace, model, _rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    serve(api, namespace, model, req).await
}

/// `ANY /serve/{namespace}/{model}`: the replicas' `/`.
pub(super) async fn serve_root(
    State(api): State<Arc<ReadApi>>,
    Path((namespace, model)): Path<(String, String)>,
    req: Request,
) -> Response {
    serve(api, namespace, model, req).await
}

/// The RBAC verb of a request through a proxy, as the API server maps `services/proxy`.
fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    }
}

async fn serve(api: Arc<ReadApi>, namespace: String, model: String, req: Request) -> Response {
    // The body is not shared across tasks: only what the check reads is held over it.
    let (headers, verb) = (req.headers().clone(), verb(req.method()));
    let allowed = async {
        let caller = api.caller(&headers).await?;
        if !api
            .access
            .may(&caller, verb, Target::ServedModelProxy, &namespace)
            .await?
        {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "{} may not {verb} servedmodels/proxy in namespace {namespace}",
                    caller.name()
                ),
            ));
        }
        api.snapshot().map(|_| ())
    };
    if let Err(r) = allowed.await {
        return super::refused(r);
    }
    let req = req.map(Body::new);
    api.router().serve(&namespace, &model, req).await
}
