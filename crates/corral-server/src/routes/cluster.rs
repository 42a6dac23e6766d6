//! What the cluster holds beyond jobs: queues, nodes, per-replica usage (`top`) and the
//! Prometheus metrics, each filtered to what the caller's token may see.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use corral_local::cluster::NodeInfo;

use crate::AppState;
use crate::auth::Caller;

use super::ApiResult;
use super::list_body::items;

pub(super) async fn queues(State(state): State<AppState>, _caller: Caller) -> ApiResult {
    Ok(items(state.with_cluster(|c| c.queues()).await?))
}

pub(super) async fn nodes(State(state): State<AppState>, caller: Caller) -> ApiResult {
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

pub(super) async fn top(State(state): State<AppState>, caller: Caller) -> ApiResult {
    let rows = state.with_cluster(|c| c.top()).await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| caller.allows(&r.namespace))
        .collect();
    Ok(items(rows))
}

/// With tokens configured, Prometheus scrapes with one (`authorization: {credentials: ...}`
/// in its scrape config); a namespace's token gets the cluster-wide gauges (jobs by queue
/// and state, GPUs) and only its own namespace's per-replica and per-job series, which name
/// jobs.
pub(super) async fn metrics(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
) -> ApiResult {
    let format = crate::metrics::Format::negotiate(
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
    );
    let (snapshot, queues, rows, progress) = state
        .with_cluster(|c| (c.metrics(), c.queues(), c.top(), c.progress_rows()))
        .await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| caller.allows(&r.namespace))
        .collect();
    let progress: Vec<_> = progress
        .into_iter()
        .filter(|p| caller.allows(&p.namespace))
        .collect();
    let mut text = crate::metrics::render(&snapshot, &queues, &rows, &progress, format);
    let serving = corral_router::metrics_text(
        &state.router,
        |ns| caller.allows(ns),
        format == crate::metrics::Format::OpenMetrics,
    );
    // OpenMetrics ends with `# EOF`: the router's series go before it.
    let at = text.rfind("# EOF").unwrap_or(text.len());
    text.insert_str(at, &serving);
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        text,
    )
        .into_response())
}
