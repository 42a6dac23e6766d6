//! API tokens per namespace.
//!
//! Tokens come from the cluster's `CorralConfig` (`tokens: [{token, namespace}]`). With no
//! token configured the API is open (it listens on loopback by default). With tokens, every
//! `/api/v1/` and `/metrics` request carries `Authorization: Bearer <token>`; a token with a namespace acts
//! in that namespace only, one without acts in all. A request for another namespace's jobs
//! is refused with 403 whether or not the job exists, so a token learns nothing about other
//! namespaces.
//!
//! A replica's token (`cj1.<namespace>.<job>.<mac>`, given to MPI launchers as
//! `CORRAL_TOKEN`) is accepted whether or not tokens are configured, and only by the exec
//! route, for its own job's replicas (`corral_core::control::decide_exec`); every other
//! route refuses it with 403.

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
    /// A replica's own token: exec into its job's replicas, nothing else. Verified by the
    /// cluster against the job it names.
    Job(corral_local::exec::JobToken),
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
            Caller::Job(_) => Err(replica_token_refused()),
        }
    }

    /// Who asks to exec, for the cluster's check.
    pub fn exec_auth(&self) -> corral_local::cluster::ExecAuth {
        use corral_local::cluster::ExecAuth;
        match self {
            Caller::Everything => ExecAuth::Anyone,
            Caller::Namespace(ns) => ExecAuth::Namespace(ns.clone()),
            Caller::Job(token) => ExecAuth::Job(token.clone()),
        }
    }

    /// Whether the caller may see a namespace's jobs.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Caller::Everything => true,
            Caller::Namespace(ns) => ns == namespace,
            Caller::Job(_) => false,
        }
    }

    /// The one namespace, for callers limited to one.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Caller::Everything => None,
            Caller::Namespace(ns) => Some(ns),
            Caller::Job(token) => Some(&token.namespace),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let bearer = header
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim);
        // A replica's token keeps its narrow scope even on an open API.
        if let Some(token) = bearer.and_then(corral_local::exec::JobToken::parse) {
            // Refused here for every route but exec (and whoami), so that no route can
            // forget to: a list would otherwise show the job's whole namespace.
            let path = parts.uri.path();
            if !(path.ends_with("/exec") || path == "/api/v1/whoami") {
                return Err(replica_token_refused());
            }
            return Ok(Caller::Job(token));
        }
        if state.file.settings.tokens.is_empty() {
            return Ok(Caller::Everything);
        }
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

fn replica_token_refused() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "Forbidden",
        "a replica's token (CORRAL_TOKEN of an MPI launcher) may only exec into the replicas \
         of its own job; use a user's token for anything else",
    )
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
}
