//! The audit trail of the API: every write (any request but GET, HEAD and OPTIONS under
//! `/api/`) is recorded with who made it, what, when and how it ended, in the store
//! (`corral_local::store::AuditLog`, capped), and `GET /api/v1/audit` reads it back for a
//! token of every namespace (`corral audit`).
//!
//! One thread writes the trail ([`AuditTrail`]): what waits when it comes round is committed
//! in one transaction, so a burst of writes costs one commit, not one each contending with
//! the cluster's own commits for the store's write lock.

use axum::Json;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use corral_local::store::{AUDIT_CAP, AuditEntry, AuditLog};
use serde::Deserialize;
use std::sync::{Mutex, mpsc};
use tokio::sync::oneshot;

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
    // Recorded before the answer leaves: whoever reads the trail next sees this write.
    if let Err(e) = state.audit.record(entry).await {
        eprintln!("warning: recording a write in the audit trail: {e}");
    }
    response
}

/// An entry waiting for the writer, and where its outcome goes.
type PendingEntry = (AuditEntry, oneshot::Sender<Result<(), String>>);

/// The audit trail: a writer thread that commits entries in batches, and a connection of
/// its own for reading it back.
pub struct AuditTrail {
    to_writer: mpsc::Sender<PendingEntry>,
    reader: Mutex<AuditLog>,
}

/// Entries committed in one transaction at most (a burst beyond it takes several).
const BATCH: usize = 1024;

impl AuditTrail {
    /// Starts the writer on `writer`; reads go through `reader`.
    pub fn start(writer: AuditLog, reader: AuditLog) -> Result<Self, String> {
        let (to_writer, from_requests) = mpsc::channel::<PendingEntry>();
        std::thread::Builder::new()
            .name("corral-audit".into())
            .spawn(move || {
                // Ends when the server's state (every sender) is gone.
                while let Ok(first) = from_requests.recv() {
                    let mut batch = vec![first];
                    while batch.len() < BATCH {
                        match from_requests.try_recv() {
                            Ok(p) => batch.push(p),
                            Err(_) => break,
                        }
                    }
                    let (entries, waiting): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
                    let outcome = writer.record_all(&entries).map_err(|e| e.to_string());
                    for w in waiting {
                        let _ = w.send(outcome.clone());
                    }
                }
            })
            .map_err(|e| format!("cannot start the audit trail's writer: {e}"))?;
        Ok(AuditTrail {
            to_writer,
            reader: Mutex::new(reader),
        })
    }

    /// Records `entry`; returns once it is committed.
    pub async fn record(&self, entry: AuditEntry) -> Result<(), String> {
        let (done, committed) = oneshot::channel();
        self.to_writer
            .send((entry, done))
            .map_err(|_| "the audit trail's writer has stopped".to_string())?;
        committed
            .await
            .map_err(|_| "the audit trail's writer has stopped".to_string())?
    }
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
            .reader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .recent(limit)
    })
    .await
    .map_err(|e| ApiError::internal(format!("reading the audit trail: {e}")))?
    .map_err(|e| ApiError::internal(format!("reading the audit trail: {e}")))?;
    Ok(Json(serde_json::json!({ "items": entries, "cap": AUDIT_CAP })).into_response())
}
