//! `GET /api/v1/usage`: the usage ledger in GPU-hours (and GPU-seconds, CPU-seconds) per
//! period, namespace, queue and GPU type, or per job; a namespace's token sees its own
//! namespace only.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
pub(super) use corral_core::views::time_text;
use corral_core::views::usage_report;
pub use corral_core::views::{BudgetRow, UsageReport};
use jiff::Timestamp;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;

pub use corral_core::views::UsageQuery;

pub(super) fn field_error(field: &str, value: &str, valid: &str) -> ApiError {
    let message = format!("`{value}` is not valid; use {valid}");
    let mut e = ApiError::bad_request(format!("{field}: {message}"));
    e.body.fields.push(crate::error::FieldErrorBody {
        path: field.to_string(),
        message,
        document: None,
        object: None,
    });
    e
}

/// An RFC 3339 time, or a date (its UTC midnight).
pub(super) fn parse_time(field: &str, text: &str) -> Result<u64, ApiError> {
    corral_core::views::parse_time(text)
        .ok_or_else(|| field_error(field, text, corral_core::views::TIME_FORMS))
}

pub(super) async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let namespace = match (&q.namespace, caller.namespace()) {
        (Some(ns), _) => {
            super::check_name("namespace", ns)?;
            caller.check(ns)?;
            Some(ns.clone())
        }
        (None, Some(own)) => Some(own.to_string()),
        (None, None) => {
            // Everything (no namespace), or a replica's token, which check refuses.
            caller.check("")?;
            None
        }
    };
    let now = Timestamp::now();
    let now_ms = u64::try_from(now.as_millisecond()).unwrap_or(0);
    let w = q
        .window(now_ms)
        .map_err(|r| field_error(&r.field, &r.value, &r.valid))?;
    let (from, to) = (w.from, w.to);
    let ns = namespace.clone();
    let (intervals, standings) = state
        .with_cluster(move |c| {
            c.usage(ns.as_deref(), from, to, now)
                .map(|i| (i, c.budget_standings(now)))
        })
        .await??;
    Ok(Json(usage_report(
        intervals, &standings, from, to, w.bucket, w.by_job, namespace,
    ))
    .into_response())
}
