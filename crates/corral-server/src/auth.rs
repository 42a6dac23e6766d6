//! API tokens per namespace.
//!
//! Tokens come from the cluster's `CorralConfig` (`tokens: [{token, namespace}]`). With no
//! token configured the API is open (it listens on loopback by default). With tokens, every
//! `/api/v1/` and `/metrics` request carries `Authorization: Bearer <token>`; a token with a namespace acts
//! in that namespace only, one without acts in all. A request for another namespace's jobs
//! is refused with 403 whether or not the job exists, so a token learns nothing about other
//! namespaces.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;

use crate::AppState;
use crate::error::ApiError;

/// What the caller may act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Every namespace (no tokens configured, or a token without a namespace).
    Everything,
    /// One namespace.
    Namespace(String),
}

impl Caller {
    /// Refuses a namespace the caller may not act in.
    pub fn check(&self, namespace: &str) -> Result<(), ApiError> {
        match self {
            Caller::Everything => Ok(()),
            Caller::Namespace(ns) if ns == namespace => Ok(()),
            Caller::Namespace(ns) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "this token acts in namespace {ns} only and may not read or change jobs of \
                     namespace {namespace}; use -n {ns}, or a token for {namespace}"
                ),
            )),
        }
    }

    /// Whether the caller may see a namespace's jobs.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Caller::Everything => true,
            Caller::Namespace(ns) => ns == namespace,
        }
    }

    /// The one namespace, for callers limited to one.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Caller::Everything => None,
            Caller::Namespace(ns) => Some(ns),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.file.settings.tokens.is_empty() {
            return Ok(Caller::Everything);
        }
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let Some(header) = header else {
            return Err(unauthorized(
                "this server requires an API token: pass --token or set CORRAL_TOKEN",
            ));
        };
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .unwrap_or_default();
        match state.file.token_scope(token) {
            Some(None) => Ok(Caller::Everything),
            Some(Some(ns)) => Ok(Caller::Namespace(ns.to_string())),
            None => Err(unauthorized(
                "the API token is not known to this server: check --token or CORRAL_TOKEN \
                 against the tokens in the server's configuration",
            )),
        }
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
}
