//! The audit trail of the API: every write (any request but GET, HEAD and OPTIONS under
//! `/api/`) is recorded with who made it, what, when and how it ended, in the store
//! (`corral_local::store::AuditLog`, capped), and `GET /api/v1/audit` reads it back for a
//! token of every namespace (`corral audit`).

use axum::Json;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use corral_local::store::{AUDIT_CAP, AuditEntry};
use serde::Deserialize;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};

/// Records every write that passes through it, after its answer is made.
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    if matches!(method, Method::GET | Method::HEAD | Method::OPTIONS) || !path.starts_with("/api/")
    {
        return next.run(request).await;
    }
    let target = request
        .uri()
        .path_and_query()
        .map_or(path, |p| p.as_str().to_string());
    let (who, scope) = identify(&state, request.headers());
    let response = next.run(request).await;
    let status = response.status();
    let outcome = match response.extensions().get::<ErrorBody>() {
        Some(e) => format!("{}: {}", e.code, e.message),
        None if status.is_success() => "ok".into(),
        None => status.to_string(),
    };
    let entry = AuditEntry {
        seq: 0,
        at_ms: jiff::Timestamp::now().as_millisecond().max(0) as u64,
        who,
        scope,
        action: method.to_string(),
        target,
        status: status.as_u16(),
        outcome,
    };
    let audit = std::sync::Arc::clone(&state.audit);
    // Recorded before the answer leaves: whoever reads the trail next sees this write.
    let written = tokio::task::spawn_blocking(move || {
        audit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(&entry)
    })
    .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("warning: recording a write in the audit trail: {e}"),
        Err(e) => eprintln!("warning: recording a write in the audit trail: {e}"),
    }
    response
}

/// Who made a request: the token's name and namespace (`*`: every one); never the token.
fn identify(state: &AppState, headers: &HeaderMap) -> (String, String) {
    if state.file.settings.tokens.is_empty() {
        return ("anonymous".into(), "*".into());
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim);
    match token {
        None => ("no token".into(), "-".into()),
        Some(t) => state
            .file
            .token_identity(t)
            .unwrap_or_else(|| ("unknown token".into(), "-".into())),
    }
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    /// The newest entries to return (default 100, at most the cap).
    pub limit: Option<usize>,
}

/// `GET /api/v1/audit`: the newest entries, oldest first; a token of every namespace only.
pub async fn list(
    caller: Caller,
    State(state): State<AppState>,
    Query(q): Query<AuditQuery>,
) -> Result<Response, ApiError> {
    if let Some(ns) = caller.namespace() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "the audit trail is for a token of every namespace (an admin token); this one \
                 acts in namespace {ns} only"
            ),
        ));
    }
    let limit = q.limit.unwrap_or(100).clamp(1, AUDIT_CAP as usize);
    let audit = std::sync::Arc::clone(&state.audit);
    let entries = tokio::task::spawn_blocking(move || {
        audit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recent(limit)
    })
    .await
    .map_err(|e| ApiError::internal(format!("reading the audit trail: {e}")))?
    .map_err(|e| ApiError::internal(format!("reading the audit trail: {e}")))?;
    Ok(Json(serde_json::json!({ "items": entries, "cap": AUDIT_CAP })).into_response())
}
