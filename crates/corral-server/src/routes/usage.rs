//! `GET /api/v1/usage`: the usage ledger in GPU-hours (and GPU-seconds, CPU-seconds) per
//! period, namespace, queue and GPU type, or per job; a namespace's token sees its own
//! namespace only.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use corral_core::control::accounting::{UsageBucket, UsageRow, period_bounds, usage_rows};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::ApiResult;

/// `?from=&to=` (RFC 3339 times or UTC dates; default: the start of this month to now),
/// `period=day|month` (default day), `by=queue|job` (default queue), `namespace=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    pub from: Option<String>,
    pub to: Option<String>,
    pub period: Option<String>,
    pub by: Option<String>,
    pub namespace: Option<String>,
}

/// The answer: the window, how it is summed, the rows, and the budgets of the queues.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    pub from: String,
    pub to: String,
    pub period: UsageBucket,
    /// `queue` or `job`.
    pub by: String,
    /// The namespace the report is limited to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub items: Vec<UsageRow>,
    /// Budgeted queues and where they stand in their current period.
    pub budgets: Vec<BudgetRow>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRow {
    pub queue: String,
    /// `day`, `week` or `month`.
    pub period: String,
    pub budget_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub renews_at: String,
    /// Whether the queue admits no new job until it renews.
    pub exhausted: bool,
}

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
    let ts: Option<Timestamp> = text.parse().ok().or_else(|| {
        text.parse::<jiff::civil::Date>()
            .ok()
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    });
    ts.and_then(|t| u64::try_from(t.as_millisecond()).ok())
        .ok_or_else(|| {
            field_error(
                field,
                text,
                "an RFC 3339 time (2026-11-01T00:00:00Z) or a date (2026-11-01), after 1970",
            )
        })
}

pub(super) fn time_text(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| ms.to_string(), |t| t.to_string())
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
    let bucket = match q.period.as_deref() {
        None | Some("day") => UsageBucket::Day,
        Some("month") => UsageBucket::Month,
        Some(other) => return Err(field_error("period", other, "day or month")),
    };
    let by_job = match q.by.as_deref() {
        None | Some("queue") => false,
        Some("job") => true,
        Some(other) => return Err(field_error("by", other, "queue or job")),
    };
    let now = Timestamp::now();
    let now_ms = u64::try_from(now.as_millisecond()).unwrap_or(0);
    let to = match &q.to {
        Some(t) => parse_time("to", t)?,
        None => now_ms,
    };
    let from = match &q.from {
        Some(t) => parse_time("from", t)?,
        None => period_bounds(corral_api::queue::BudgetPeriod::Month, now_ms).0,
    };
    if from >= to {
        return Err(field_error(
            "from",
            &time_text(from),
            &format!("a time before `to` ({})", time_text(to)),
        ));
    }
    let ns = namespace.clone();
    let (intervals, standings) = state
        .with_cluster(move |c| {
            c.usage(ns.as_deref(), from, to, now)
                .map(|i| (i, c.budget_standings(now)))
        })
        .await??;
    let items = usage_rows(intervals, from, to, bucket, by_job);
    // A namespace's token sees the budgets of the queues its namespace used; the queues
    // themselves are listed to every token (`/api/v1/queues`).
    let budgets = standings
        .into_iter()
        .map(|(queue, s)| BudgetRow {
            exhausted: s.exhausted(),
            queue,
            period: s.budget.period.as_str().to_string(),
            budget_gpu_hours: s.budget_gpu_seconds() / 3600.0,
            used_gpu_hours: s.used_gpu_seconds / 3600.0,
            renews_at: time_text(s.renews_at),
        })
        .collect();
    Ok(Json(UsageReport {
        from: time_text(from),
        to: time_text(to),
        period: bucket,
        by: if by_job { "job" } else { "queue" }.to_string(),
        namespace,
        items,
        budgets,
    })
    .into_response())
}
