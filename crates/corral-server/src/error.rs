//! The API's error body, `{"error": {"code", "message", "fields": [{"path", "message"}]}}`,
//! and how cluster errors map onto HTTP statuses.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use corral_local::cluster::ClusterError;
use serde::{Deserialize, Serialize};

/// One field that is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldErrorBody {
    /// `spec.replicas.worker.count`; empty for the document (or input) as a whole.
    pub path: String,
    pub message: String,
    /// 1-based document in the submitted text, when the input held several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<usize>,
    /// `TrainingJob mnist`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

/// The `error` member of an error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// `Invalid`, `NotFound`, `AlreadyExists`, `Conflict`, `Unauthorized`, `Forbidden`,
    /// `PayloadTooLarge`, `UnsupportedMediaType`, `Internal`.
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldErrorBody>,
}

/// `{"error": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

/// An error response.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code: code.to_string(),
                message: message.into(),
                fields: Vec::new(),
            },
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Invalid", message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", what)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!(
                "the request body is larger than the server accepts ({} KiB); a TrainingJob is a \
                 few KiB: submit fewer documents at once, or move data out of the spec",
                limit / 1024
            ),
        )
    }

    pub fn job_not_found(namespace: &str, name: &str) -> Self {
        Self::not_found(format!(
            "TrainingJob {name} not found in namespace {namespace} (`corral list -n {namespace}` \
             shows its jobs)"
        ))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The body also rides along as an extension, for the audit trail's outcome.
        let mut response = (
            self.status,
            Json(ErrorEnvelope {
                error: self.body.clone(),
            }),
        )
            .into_response();
        response.extensions_mut().insert(self.body);
        response
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Invalid(problems) => {
                let several = problems.len() > 1;
                let mut fields = Vec::new();
                for p in &problems {
                    for f in &p.errors {
                        fields.push(FieldErrorBody {
                            path: f.path.clone(),
                            message: f.message.clone(),
                            document: (several || p.index > 1).then_some(p.index),
                            object: p.what.clone(),
                        });
                    }
                }
                let n = fields.len();
                let message = match problems.as_slice() {
                    [one] => match &one.what {
                        // A run named at submit (generateName) has no name yet.
                        Some(w) => format!("{} is invalid: {n} {}", w.trim_end(), plural(n)),
                        None => format!("the input is invalid: {n} {}", plural(n)),
                    },
                    _ => format!(
                        "{} documents are invalid: {n} {}; nothing was submitted",
                        problems.len(),
                        plural(n)
                    ),
                };
                ApiError {
                    status: StatusCode::BAD_REQUEST,
                    body: ErrorBody {
                        code: "Invalid".into(),
                        message,
                        fields,
                    },
                }
            }
            ClusterError::AlreadyExists { namespace, name } => ApiError::new(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!(
                    "TrainingJob {name} already exists in namespace {namespace}: choose another \
                     metadata.name, or `corral delete {name} -n {namespace}` first"
                ),
            ),
            ClusterError::NotFound { namespace, name } => {
                ApiError::job_not_found(&namespace, &name)
            }
            ClusterError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "Conflict", m),
            other => ApiError::internal(other.to_string()),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "error" } else { "errors" }
}
