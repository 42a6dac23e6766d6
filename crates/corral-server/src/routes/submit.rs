//! Submissions: manifests as the request body, or with a code snapshot as a multipart
//! upload streamed to disk; a dry run checks them and stores nothing.

use std::path::PathBuf;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_local::cluster::{Cluster, SubmitResult};
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

use super::{ApiResult, check_name};

/// `?dryRun=All`: check as a submit would, store nothing (as `kubectl --dry-run=server`).
#[derive(Debug, Default, Deserialize)]
pub struct SubmitQuery {
    #[serde(rename = "dryRun")]
    pub dry_run: Option<String>,
}

/// Submissions up to this size are parsed and validated on the request's own task.
const INLINE_CHECK_BYTES: usize = 8 * 1024;

pub(super) async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
    query: Result<Query<SubmitQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    caller.check(&namespace)?;
    check_name("namespace", &namespace)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let dry_run = match query.dry_run.as_deref() {
        None => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun `{other}` is not valid; use `All` (check everything, store nothing) or leave it out"
            )));
        }
    };
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(state.body_limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })?;
    let text = String::from_utf8(body.to_vec()).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not UTF-8 text (byte {}): send YAML or JSON",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty: send one or more TrainingJob (or Kubeflow job) \
             documents as YAML or JSON",
        ));
    }
    if corral_local::cluster::has_served_models(&text) {
        let ns = namespace.clone();
        let submitted = state
            .with_cluster(move |c| c.submit_served_models(&text, &ns, dry_run))
            .await??;
        if dry_run {
            return Ok(submitted_response(StatusCode::OK, submitted));
        }
        // Routed before the answer: a request right after the submit is held, not a 404.
        crate::serving::serving_pass(&state).await;
        state.wake();
        return Ok(submitted_response(StatusCode::CREATED, submitted));
    }
    // Parsing and validation need no lock: requests check their documents in parallel
    // and hold the cluster only to store them.
    let ctx = state.submit_context_for(&namespace, &text).await?;
    let ns = namespace.clone();
    // A small submission (one job is about 1 KB) is checked right here, which costs less
    // than handing it to another thread; a large one on the blocking pool.
    let checked = if text.len() <= INLINE_CHECK_BYTES {
        Cluster::check_submission(&ctx, &text, &ns)?
    } else {
        tokio::task::spawn_blocking(move || Cluster::check_submission(&ctx, &text, &ns))
            .await
            .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))??
    };
    if dry_run {
        let items: Vec<SubmitResult> = checked
            .jobs()
            .iter()
            .zip(checked.warnings())
            .map(|((job, converted_from), warnings)| SubmitResult {
                namespace: namespace.clone(),
                name: job.metadata.name.clone(),
                uid: String::new(),
                converted_from: converted_from.clone(),
                warnings: warnings.clone(),
                kind: None,
                revision: None,
                new_revision: false,
            })
            .chain(checked.runs().iter().map(|run| SubmitResult {
                namespace: namespace.clone(),
                name: run.metadata.name.clone(),
                uid: String::new(),
                converted_from: None,
                kind: Some("PipelineRun".into()),
                revision: None,
                new_revision: false,
                warnings: Vec::new(),
            }))
            .chain(checked.pipelines().iter().map(|p| SubmitResult {
                namespace: namespace.clone(),
                name: p.metadata.name.clone(),
                uid: String::new(),
                converted_from: None,
                kind: Some("Pipeline".into()),
                revision: None,
                new_revision: false,
                warnings: Vec::new(),
            }))
            .collect();
        return Ok(submitted_response(StatusCode::OK, items));
    }
    let submitted = state.submit(checked).await??;
    state.wake();
    Ok(submitted_response(StatusCode::CREATED, submitted))
}

/// The answer to a submission: the jobs, and every warning twice, in the body (`warnings`,
/// each naming its job) and as an HTTP `Warning: 299` header, which is what kubectl prints.
fn submitted_response(status: StatusCode, items: Vec<SubmitResult>) -> Response {
    let warnings: Vec<String> = items
        .iter()
        .flat_map(|r| {
            r.warnings
                .iter()
                .map(move |w| format!("TrainingJob {}: {w}", r.name))
        })
        .collect();
    let mut response = (
        status,
        Json(json!({ "items": items, "warnings": warnings })),
    )
        .into_response();
    for w in &warnings {
        // RFC 7234 warn-text is a quoted string of visible ASCII.
        let text: String = w
            .chars()
            .map(|c| match c {
                '"' | '\\' => '\'',
                c if c.is_ascii_graphic() || c == ' ' => c,
                _ => '?',
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// Files of one submission with code, removed when the request ends whatever happened (a
/// submission that succeeded has moved its snapshot away).
struct Staged(Vec<PathBuf>);

impl Drop for Staged {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = corral_local::code::remove_tree(p);
        }
    }
}

fn code_too_large(max: u64, what: String) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PayloadTooLarge",
        format!(
            "the code snapshot {what} is larger than this server's limit of {max} bytes \
             ({} MiB; codeSnapshots.maxBytes in the server's corral.yaml): leave out what the \
             job need not ship (.gitignore it)",
            max / (1024 * 1024)
        ),
    )
}

/// Reads one small part whole, refusing more than `cap` bytes.
async fn read_part(
    mut field: axum::extract::multipart::Field<'_>,
    cap: usize,
    what: &str,
) -> Result<String, ApiError> {
    let mut out = Vec::new();
    while let Some(chunk) = field
        .chunk()
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the `{what}` part: {e}")))?
    {
        out.extend_from_slice(&chunk);
        if out.len() > cap {
            return Err(ApiError::too_large(cap));
        }
    }
    String::from_utf8(out)
        .map_err(|_| ApiError::bad_request(format!("the `{what}` part is not UTF-8 text")))
}

/// `POST /api/v1/namespaces/{namespace}/submissions`: jobs with a code snapshot, one
/// multipart/form-data request with the parts `manifest` (what `trainingjobs` takes),
/// `digest` (`sha256:<hex>` of the archive) and `code` (the tar.gz archive, streamed to
/// disk). All or nothing: a refused submission leaves no job and no snapshot.
pub(super) async fn submit_with_code(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
    headers: axum::http::HeaderMap,
    multipart: Result<axum::extract::Multipart, axum::extract::multipart::MultipartRejection>,
) -> ApiResult {
    use sha2::Digest;
    use tokio::io::AsyncWriteExt;

    caller.check(&namespace)?;
    check_name("namespace", &namespace)?;
    let max = state.code_max_bytes;
    // The whole request may hold the manifest and the archive; a larger one is refused
    // before it is read (a client that sent `Expect: 100-continue` has not sent it yet).
    let allowed = max.saturating_add(state.body_limit as u64);
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = length
        && len > allowed
    {
        return Err(code_too_large(max, format!("upload ({len} bytes)")));
    }
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "send multipart/form-data with the parts manifest, digest and code: {e}"
        ))
    })?;
    let mut staged = Staged(Vec::new());
    let (mut manifest, mut digest, mut archive) = (None, None, None);
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the request: {e}")))?
    {
        match field.name().unwrap_or_default() {
            "manifest" => manifest = Some(read_part(field, state.body_limit, "manifest").await?),
            "digest" => digest = Some(read_part(field, 128, "digest").await?),
            "code" => {
                let path = state
                    .code
                    .incoming_path(".tar.gz")
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                staged.0.push(path.clone());
                let mut file = tokio::fs::File::create(&path)
                    .await
                    .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                let mut hash = sha2::Sha256::new();
                let mut size: u64 = 0;
                while let Some(chunk) = field.chunk().await.map_err(|e| {
                    ApiError::bad_request(format!("cannot read the `code` part: {e}"))
                })? {
                    size += chunk.len() as u64;
                    if size > max {
                        return Err(code_too_large(max, format!("archive (over {max} bytes)")));
                    }
                    hash.update(&chunk);
                    file.write_all(&chunk)
                        .await
                        .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                }
                file.flush()
                    .await
                    .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
                archive = Some((path, corral_local::code::format_digest(hash)));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown part `{other}`: send manifest, digest and code"
                )));
            }
        }
    }
    let missing = |part: &str| ApiError::bad_request(format!("the `{part}` part is missing"));
    let text = manifest.ok_or_else(|| missing("manifest"))?;
    let claimed = digest.ok_or_else(|| missing("digest"))?;
    let (archive, got) = archive.ok_or_else(|| missing("code"))?;
    let claimed = claimed.trim();
    if !corral_local::code::is_digest(claimed) {
        return Err(ApiError::bad_request(format!(
            "digest `{claimed}` is not valid: write sha256:<64 lowercase hex digits>"
        )));
    }
    if claimed != got {
        return Err(ApiError::bad_request(format!(
            "the code archive's digest is {got}, not {claimed} as sent: it changed in transit; \
             submit again"
        )));
    }
    let served = corral_local::cluster::has_served_models(&text);
    let ctx = state.submit_context_for(&namespace, &text).await?;
    let ns = namespace.clone();
    let (manifest, ns_code) = (text.clone(), namespace.clone());
    let checked = tokio::task::spawn_blocking(move || {
        if served {
            // Checked with the code in place, below.
            return Ok(None);
        }
        Cluster::check_submission(&ctx, &text, &ns).map(Some)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))??;
    let checked = checked.map(|c| c.with_code(claimed));
    let tree = state
        .code
        .incoming_path(".d")
        .map_err(|e| ApiError::internal(e.to_string()))?;
    staged.0.push(tree.clone());
    let unpack_to = tree.clone();
    let unpacked = tokio::task::spawn_blocking(move || {
        use corral_local::code::{CodeError, unpack};
        let file = std::fs::File::open(&archive).map_err(|source| CodeError::Io {
            context: archive.display().to_string(),
            source,
        })?;
        let r = unpack(std::io::BufReader::new(file), &unpack_to, max);
        let _ = std::fs::remove_file(&archive);
        r
    })
    .await
    .map_err(|e| ApiError::internal(format!("the request handler failed: {e}")))?;
    match unpacked {
        Ok(_) => {}
        Err(corral_local::code::CodeError::TooLarge { .. }) => {
            return Err(code_too_large(max, "(its files)".into()));
        }
        Err(e @ corral_local::code::CodeError::Invalid(_)) => {
            return Err(ApiError::bad_request(e.to_string()));
        }
        Err(e) => return Err(ApiError::internal(e.to_string())),
    }
    let digest = claimed.to_string();
    let submitted = state
        .with_cluster(move |c| match checked {
            Some(checked) => c.submit_checked_with_code(checked, Some(&tree), Timestamp::now()),
            None => {
                c.submit_served_models_with_code(&manifest, &ns_code, Some((&tree, &digest)), false)
            }
        })
        .await??;
    drop(staged);
    if served {
        crate::serving::serving_pass(&state).await;
    }
    state.wake();
    Ok(submitted_response(StatusCode::CREATED, submitted))
}
