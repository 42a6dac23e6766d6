//! Served models in `corral up`: the router on the API's port under
//! `/serve/<namespace>/<model>/...` (a revision's own: `<model>@<revision>`; the
//! namespace's token, as every API call), the
//! `servedmodels` API, the serving pass of the control loop (the router's observations to
//! the cluster, the replicas' addresses back to the router) and the router's series on
//! `/metrics`.

use std::net::{Ipv4Addr, SocketAddr};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use corral_local::cluster::ServingEndpoint;
use corral_router::{ModelTarget, ReplicaTarget};
use jiff::Timestamp;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// One serving pass: the router's load and readiness to the cluster, which scales the
/// models' replica jobs; where the replicas listen back to the router.
pub(crate) async fn serving_pass(state: &AppState) {
    let router = state.router.clone();
    let observed = router.observations();
    let passed = state
        .with_cluster(move |c| c.serve_pass(Timestamp::now(), &observed))
        .await;
    let Ok((endpoints, errors)) = passed else {
        return;
    };
    for e in &errors {
        eprintln!("corral: {e}");
    }
    apply(&router, endpoints);
}

fn apply(router: &corral_router::Router, endpoints: Vec<ServingEndpoint>) {
    router.serve_only(
        endpoints
            .into_iter()
            .map(|e| {
                let replicas = e
                    .replicas
                    .into_iter()
                    .map(|r| ReplicaTarget {
                        name: r.name,
                        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, r.port)),
                        revision: r.revision,
                        draining: r.draining,
                    })
                    .collect();
                let target = ModelTarget {
                    replicas,
                    traffic: e.traffic,
                    readiness_path: e.readiness_path,
                    probe_period: e.probe_period,
                    failure_threshold: e.failure_threshold,
                    max_request_bytes: e.max_request_bytes,
                    aliases: e.aliases,
                };
                (e.key, target)
            })
            .collect(),
    );
}

/// `ANY /serve/{namespace}/{model}/{*path}`: the request to one of the model's replicas.
pub(crate) async fn serve_path(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, model, _rest)): Path<(String, String, String)>,
    req: Request,
) -> Result<Response, ApiError> {
    serve(state, caller, namespace, model, req).await
}

/// `ANY /serve/{namespace}/{model}`: the replicas' `/`.
pub(crate) async fn serve_root(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, model)): Path<(String, String)>,
    req: Request,
) -> Result<Response, ApiError> {
    serve(state, caller, namespace, model, req).await
}

async fn serve(
    state: AppState,
    caller: Caller,
    namespace: String,
    model: String,
    req: Request,
) -> Result<Response, ApiError> {
    caller.check(&namespace)?;
    let req = req.map(Body::new);
    Ok(state.router.serve(&namespace, &model, req).await)
}

/// `GET /api/v1/namespaces/{namespace}/servedmodels`.
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
) -> Result<Response, ApiError> {
    caller.check(&namespace)?;
    let mut models = state
        .with_cluster(move |c| c.served_models(Some(&namespace)))
        .await?;
    for m in &mut models {
        in_rotation_now(&state.router, m);
    }
    Ok(Json(json!({ "items": models })).into_response())
}

/// `GET /api/v1/servedmodels`: every namespace's the caller may see (the dashboard's list).
pub(crate) async fn list_all(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let only = caller.namespace().map(str::to_string);
    let mut models = state
        .with_cluster(move |c| c.served_models(only.as_deref()))
        .await?;
    for m in &mut models {
        in_rotation_now(&state.router, m);
    }
    Ok(Json(json!({ "items": models })).into_response())
}

/// `GET /api/v1/namespaces/{namespace}/servedmodels/{name}`: the model with its status and
/// its replicas (job, state, in rotation).
pub(crate) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    let (model, rows) = state
        .with_cluster(move |c| (c.served_model(&ns, &n), c.serving_replicas(&ns, &n)))
        .await?;
    let Some(mut model) = model else {
        return Err(not_found(&namespace, &name));
    };
    in_rotation_now(&state.router, &mut model);
    let rotation = state.router.replicas(&format!("{namespace}/{name}"));
    let replicas: Vec<_> = rows
        .iter()
        .map(|row| {
            let seen = rotation.iter().find(|r| r.name == row.name());
            json!({
                "job": row.name(),
                "revision": seen.map(|r| r.revision.as_str()),
                "state": row.state(),
                "ready": seen.is_some_and(|r| r.ready),
                "outstanding": seen.map_or(0, |r| r.outstanding),
            })
        })
        .collect();
    Ok(Json(json!({ "model": model, "replicas": replicas })).into_response())
}

/// `DELETE /api/v1/namespaces/{namespace}/servedmodels/{name}`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    caller.check(&namespace)?;
    let (ns, n) = (namespace.clone(), name.clone());
    let deleted = state
        .with_cluster(move |c| c.delete_served_model(&ns, &n, Timestamp::now()))
        .await?;
    match deleted {
        Ok(_) => {}
        Err(corral_local::cluster::ClusterError::NotFound { .. }) => {
            return Err(not_found(&namespace, &name));
        }
        Err(e) => return Err(e.into()),
    }
    state.router.remove_model(&format!("{namespace}/{name}"));
    state.wake();
    Ok(Json(json!({
        "namespace": namespace,
        "name": name,
        "result": "deleted",
        "changed": true,
    }))
    .into_response())
}

/// The body of `POST .../servedmodels/{name}/traffic`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TrafficChange {
    /// The latest revision's percent; null promotes it (every request once it is ready),
    /// 0 rolls back to the stable revision.
    canary_traffic_percent: Option<u32>,
}

/// `POST /api/v1/namespaces/{namespace}/servedmodels/{name}/traffic`: sets
/// `spec.canaryTrafficPercent` (`corral serve canary|promote|rollback`); answers the model.
pub(crate) async fn set_traffic(
    State(state): State<AppState>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    caller.check(&namespace)?;
    let change: TrafficChange = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"canaryTrafficPercent\": 0-100 or null}}: {e}"
        ))
    })?;
    let (ns, n) = (namespace.clone(), name.clone());
    let set = state
        .with_cluster(move |c| c.set_canary_percent(&ns, &n, change.canary_traffic_percent))
        .await?;
    let model = match set {
        Ok(m) => m,
        Err(corral_local::cluster::ClusterError::NotFound { .. }) => {
            return Err(not_found(&namespace, &name));
        }
        Err(e) => return Err(e.into()),
    };
    crate::serving::serving_pass(&state).await;
    state.wake();
    Ok(Json(json!({ "model": model })).into_response())
}

/// The status's ready count as the router sees it now (the status is as of the last pass,
/// up to one control-loop period old).
fn in_rotation_now(router: &corral_router::Router, model: &mut corral_api::ServedModel) {
    let key = format!(
        "{}/{}",
        model.metadata.namespace_or_default(),
        model.metadata.name
    );
    let ready = router.replicas(&key).iter().filter(|r| r.ready).count();
    if let Some(status) = model.status.as_mut() {
        status.ready_replicas = u32::try_from(ready).unwrap_or(u32::MAX);
    }
}

fn not_found(namespace: &str, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("ServedModel {name} not found in namespace {namespace}"),
    )
}
