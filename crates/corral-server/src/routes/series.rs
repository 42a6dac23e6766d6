//! `GET /api/v1/series`: the history store's time series (see [`crate::history`]), for
//! charts; a namespace's token sees its own replicas' series and the cluster's GPUs.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::history::{KINDS, MAX_SAMPLES, RETENTION_MINUTES, Series};

use super::ApiResult;
use super::usage::{field_error, parse_time, time_text};

/// `?kind=gpu|replica|gpus` (required), `from=&to=` (RFC 3339 or dates; default: the last
/// hour), `namespace=` and `job=` (replicas only: one namespace, one job of it).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeriesQuery {
    pub kind: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub namespace: Option<String>,
    pub job: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesReport {
    pub kind: String,
    pub from: String,
    pub to: String,
    /// Seconds between samples (one a minute).
    pub step_seconds: u32,
    pub retention_minutes: i64,
    pub max_samples: i64,
    pub series: Vec<Series>,
}

pub(super) async fn series(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<SeriesQuery>, QueryRejection>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let kinds: Vec<&str> = KINDS.iter().map(|(k, _)| *k).collect();
    let valid_kinds = kinds.join(", ");
    let kind = match q.kind.as_deref() {
        Some(k) if kinds.contains(&k) => k.to_string(),
        Some(k) => return Err(field_error("kind", k, &valid_kinds)),
        None => return Err(field_error("kind", "", &valid_kinds)),
    };
    let replicas = kind == "replica";
    if !replicas && (q.namespace.is_some() || q.job.is_some()) {
        return Err(field_error(
            if q.job.is_some() { "job" } else { "namespace" },
            q.job.as_deref().or(q.namespace.as_deref()).unwrap_or(""),
            "nothing: only replica series belong to a namespace",
        ));
    }
    let namespace = match (&q.namespace, caller.namespace()) {
        (Some(ns), _) => {
            super::check_name("namespace", ns)?;
            caller.check(ns)?;
            Some(ns.clone())
        }
        (None, Some(own)) if replicas => Some(own.to_string()),
        // The cluster's own series (GPUs), or every namespace's replicas for a caller
        // that sees every namespace.
        _ => None,
    };
    let prefix = match (&q.job, &namespace) {
        (Some(job), Some(ns)) => {
            super::check_name("job", job)?;
            Some(format!("{ns}/{job}/"))
        }
        (Some(job), None) => {
            return Err(field_error(
                "job",
                job,
                "a job name together with `namespace`",
            ));
        }
        (None, _) => None,
    };
    let now_ms = u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0);
    let to = match &q.to {
        Some(t) => parse_time("to", t)?,
        None => now_ms,
    };
    let from = match &q.from {
        Some(t) => parse_time("from", t)?,
        None => to.saturating_sub(3_600_000),
    };
    if from > to {
        return Err(field_error(
            "from",
            &time_text(from),
            &format!("a time before `to` ({})", time_text(to)),
        ));
    }
    let Some(history) = state.history() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "this server keeps no history: its history store could not be opened (see the \
             server's start-up warnings)",
        ));
    };
    let minute = |ms: u64| i64::try_from(ms / 60_000).unwrap_or(i64::MAX);
    let (from_minute, to_minute) = (minute(from), minute(to));
    let k = kind.clone();
    let series = tokio::task::spawn_blocking(move || {
        history.series(
            &k,
            from_minute,
            to_minute,
            namespace.as_deref(),
            prefix.as_deref(),
        )
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(ApiError::internal)?;
    Ok(Json(SeriesReport {
        kind,
        from: time_text(from),
        to: time_text(to),
        step_seconds: 60,
        retention_minutes: RETENTION_MINUTES,
        max_samples: MAX_SAMPLES,
        series,
    })
    .into_response())
}
