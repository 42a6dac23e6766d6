//! Served models in `corral up`: the router on the API's port under
//! `/serve/<namespace>/<model>/...` (a revision's own: `<model>@<revision>`; the
//! namespace's token, as every API call), the
//! `servedmodels` API, the serving pass of the control loop (the router's observations to
//! the cluster, the replicas' addresses back to the router) and the router's series on
//! `/metrics`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use corral_local::cluster::{ServingEndpoint, ServingObservation};
use corral_router::{LATENCY_BUCKETS, ModelTarget, ReplicaTarget, STATUS_CLASSES};
use jiff::Timestamp;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// One serving pass: the router's load and readiness to the cluster, which scales the
/// models' replica jobs; where the replicas listen back to the router.
pub(crate) async fn serving_pass(state: &AppState) {
    let router = state.router.clone();
    let mut observed = BTreeMap::new();
    for key in router.keys() {
        let load = router.take_load(&key).unwrap_or_default();
        let replicas = router.replicas(&key);
        let mut in_flight_by_revision: BTreeMap<String, u32> = BTreeMap::new();
        let mut outstanding = BTreeMap::new();
        for r in &replicas {
            *in_flight_by_revision.entry(r.revision.clone()).or_default() += r.outstanding;
            outstanding.insert(r.name.clone(), r.outstanding);
        }
        let ready: BTreeSet<String> = replicas
            .into_iter()
            .filter(|r| r.ready)
            .map(|r| r.name)
            .collect();
        observed.insert(
            key,
            ServingObservation {
                in_flight: load.in_flight,
                arrived: load.arrived,
                ready,
                in_flight_by_revision,
                outstanding,
            },
        );
    }
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
    let served: BTreeSet<String> = endpoints.iter().map(|e| e.key.clone()).collect();
    for key in router.keys() {
        if !served.contains(&key) {
            router.remove_model(&key);
        }
    }
    for e in endpoints {
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
        router.set_model(
            &e.key,
            ModelTarget {
                replicas,
                traffic: e.traffic,
                readiness_path: e.readiness_path,
                probe_period: e.probe_period,
                failure_threshold: e.failure_threshold,
                max_request_bytes: e.max_request_bytes,
                aliases: e.aliases,
            },
        );
    }
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
    // `<model>@<revision>`: that revision's own URL (names are DNS labels: no `@`).
    let prefix = format!("/serve/{namespace}/{model}");
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let rest = path_and_query.strip_prefix(&prefix).unwrap_or("/");
    let rest = if rest.is_empty() || rest.starts_with('?') {
        format!("/{rest}")
    } else {
        rest.to_string()
    };
    let req = req.map(Body::new);
    Ok(match model.split_once('@') {
        Some((model, revision)) => {
            let key = format!("{namespace}/{model}");
            state
                .router
                .handle_revision(&key, revision, &rest, req)
                .await
        }
        None => {
            let key = format!("{namespace}/{model}");
            state.router.handle(&key, &rest, req).await
        }
    })
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

/// The router's series for the models `allows` admits (a namespace's token: its own), by
/// model and revision (`revision=""`: requests no revision took, e.g. refused before).
/// Counters are announced by their family name, which OpenMetrics writes without `_total`.
pub(crate) fn metrics_text(
    router: &corral_router::Router,
    allows: impl Fn(&str) -> bool,
    openmetrics: bool,
) -> String {
    let stats: Vec<_> = router
        .stats()
        .into_iter()
        .filter(|m| allows(m.key.split('/').next().unwrap_or_default()))
        .collect();
    let mut out = String::new();
    if stats.is_empty() {
        return out;
    }
    let family = |name: &str| {
        if openmetrics {
            name.trim_end_matches("_total").to_string()
        } else {
            name.to_string()
        }
    };
    let model_labels = |k: &str| {
        let (ns, model) = k.split_once('/').unwrap_or((k, ""));
        format!("namespace=\"{ns}\",model=\"{model}\"")
    };
    let revisions: Vec<(String, &corral_router::StatsSnapshot)> = stats
        .iter()
        .flat_map(|m| {
            m.revisions
                .iter()
                .map(|(r, s)| (format!("{},revision=\"{r}\"", model_labels(&m.key)), s))
        })
        .collect();
    let requests = family("corral_serving_requests_total");
    let _ = writeln!(
        out,
        "# HELP {requests} Requests answered through the router, by revision and status class.\n# TYPE {requests} counter"
    );
    for (l, s) in &revisions {
        for (class, n) in STATUS_CLASSES.iter().zip(s.by_class) {
            let _ = writeln!(
                out,
                "corral_serving_requests_total{{{l},code=\"{class}\"}} {n}"
            );
        }
    }
    out.push_str("# HELP corral_serving_request_duration_seconds Time from a request's arrival to its response head (cold starts included), by revision.\n# TYPE corral_serving_request_duration_seconds histogram\n");
    for (l, s) in &revisions {
        for (le, n) in LATENCY_BUCKETS.iter().zip(s.buckets) {
            let _ = writeln!(
                out,
                "corral_serving_request_duration_seconds_bucket{{{l},le=\"{le}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "corral_serving_request_duration_seconds_bucket{{{l},le=\"+Inf\"}} {}\ncorral_serving_request_duration_seconds_sum{{{l}}} {}\ncorral_serving_request_duration_seconds_count{{{l}}} {}",
            s.count, s.sum_seconds, s.count
        );
    }
    let _ = writeln!(
        out,
        "# HELP corral_serving_in_flight_requests Requests being answered or held for a cold start.\n# TYPE corral_serving_in_flight_requests gauge"
    );
    for m in &stats {
        let _ = writeln!(
            out,
            "corral_serving_in_flight_requests{{{}}} {}",
            model_labels(&m.key),
            m.in_flight
        );
    }
    for (name, help, value) in [
        (
            "corral_serving_ready_replicas",
            "Replicas in the router's rotation, by revision.",
            (|s: &corral_router::StatsSnapshot| s.ready_replicas as u64) as fn(&_) -> u64,
        ),
        (
            "corral_serving_retries_total",
            "Requests sent again to another replica after one failed, by revision.",
            |s| s.retries,
        ),
    ] {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let f = family(name);
        let _ = writeln!(out, "# HELP {f} {help}\n# TYPE {f} {kind}");
        for (l, s) in &revisions {
            let _ = writeln!(out, "{name}{{{l}}} {}", value(s));
        }
    }
    out
}
