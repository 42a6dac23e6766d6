//! The validating admission webhook: `POST /validate/trainingjobs` over HTTPS, so that
//! `kubectl apply` of a TrainingJob (or a PipelineRun, [`check_run`], a stored Pipeline,
//! [`check_pipeline`], or a ServedModel, [`check_served_model`], sent to the same path) that cannot run as written fails at once with the
//! words `corral submit` gives for the same document, instead of being stored and held
//! `Invalid` by the operator (issue 31, item 8).
//!
//! A job is checked as the embedded shell checks a submit ([`corral_api::parse_documents`]
//! with a [`ValidationContext`]: `requires_image`, as on Kubernetes; no nodes, since nodes
//! come and go, so a job no node can hold now is admitted and shown Unschedulable) and as
//! the operator would build it ([`crate::build`]: pods, Service, launch files, node
//! selector and tolerations), so that what `plan::translate` would reject is refused here.
//!
//! Only a CREATE, and an UPDATE that changes `spec`, is checked: a status update, a
//! metadata-only update (the operator's own annotations, finalizers) and a delete are
//! always allowed, so that a job stored before the webhook existed can still be run,
//! finished and removed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use serde_json::Value;
use tokio::sync::watch;

use corral_api::document::parse_documents;
use corral_api::training_job::TrainingJob;
use corral_api::validate::{FieldError, ValidationContext};
use corral_core::lifecycle::{Incarnation, ReplicaId};
use corral_core::sched::ReplicaPlacement;

use crate::build::{self, BuildError, BuildOptions};

/// Where the API server sends reviews of TrainingJobs (deploy/webhook.yaml).
pub const PATH: &str = "/validate/trainingjobs";
/// File names in `--webhook-cert-dir`, as cert-manager and `kubernetes.io/tls` Secrets
/// lay them out.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";
/// How often the certificate files are looked at again: cert-manager renews them in place
/// (the Secret volume is updated), and a restart must not be needed.
const RELOAD_EVERY: Duration = Duration::from_secs(60);
/// Largest review read: a TrainingJob is a few KiB; the API server limits objects to 3 MiB
/// and sends the old object with an update.
const MAX_BODY: usize = 8 << 20;

/// What the webhook checks a job against: the context of a submit on Kubernetes.
fn validation_context() -> ValidationContext {
    ValidationContext {
        requires_image: true,
        ..ValidationContext::default()
    }
}

/// One TrainingJob checked: every field that is wrong (empty: valid), and the warnings a
/// submit would show (what Corral accepts but does not honour).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// `TrainingJob mnist`, as the embedded shell names the document.
    pub what: String,
    pub errors: Vec<FieldError>,
    pub warnings: Vec<FieldError>,
}

impl Verdict {
    /// The refusal as `corral submit` prints it for the same document: a headline, then
    /// one `path: message` line per field.
    pub fn message(&self) -> String {
        let n = self.errors.len();
        let mut s = format!(
            "{} is invalid: {n} {}",
            self.what,
            if n == 1 { "error" } else { "errors" }
        );
        for e in &self.errors {
            s.push_str("\n  ");
            s.push_str(&e.to_string());
        }
        s
    }
}

/// Checks a TrainingJob as the API server holds it (JSON): validation, then the build.
pub fn check(object: &Value, opts: &BuildOptions) -> Verdict {
    let doc = as_written(object);
    let mut verdict = parsed(&doc, "TrainingJob");
    // The operator decodes stored jobs without defaults (dynamic_objects::decode): so here.
    if let Ok(job) = serde_json::from_value::<TrainingJob>(doc) {
        for e in build_errors(&job, opts) {
            // One message per field: validation's words win where both speak.
            if !verdict.errors.iter().any(|v| v.path == e.path) {
                verdict.errors.push(e);
            }
        }
    }
    verdict
}

/// Checks a PipelineRun as the API server holds it: as a submit parses it, with what the
/// operator cannot run ([`crate::pipelines::check`]) in the operator's words.
pub fn check_run(object: &Value) -> Verdict {
    use corral_api::pipeline::PipelineRunSpec;
    let doc = as_written(object);
    // A run of a stored Pipeline not yet given its copy: the operator gives it (and checks
    // it then, ending the run Failed with why where it cannot run).
    // A spec that does not decode is reported by the parse below.
    let unresolved = doc
        .get("spec")
        .and_then(|s| serde_json::from_value::<PipelineRunSpec>(s.clone()).ok())
        .is_some_and(|s| s.awaits_copy());
    if unresolved {
        return Verdict {
            what: format!("PipelineRun {}", name_of(&doc))
                .trim_end()
                .to_string(),
            ..Verdict::default()
        };
    }
    // Given its copy: the copy is what runs (the Pipeline may have changed since).
    let mut doc = doc;
    if let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("pipelineRef");
    }
    parsed(&doc, "PipelineRun")
}

/// Checks a stored Pipeline as `corral submit` checks one (images required, as on
/// Kubernetes): a run of it would run its copy, so what it could never run is refused here.
pub fn check_pipeline(object: &Value) -> Verdict {
    parsed(&as_written(object), "Pipeline")
}

/// Checks a ServedModel as `corral submit` checks one, and each replica as the TrainingJob
/// it becomes on Kubernetes (an image, a pod the operator can build), in the model's own
/// field paths. The operator gives the same words in `status.message` where no webhook
/// refused the model.
pub fn check_served_model(object: &Value, opts: &BuildOptions) -> Verdict {
    use corral_api::served_model::{ServedModel, replica_job};
    let doc = as_written(object);
    let mut verdict = parsed(&doc, "ServedModel");
    let Ok(model) = serde_json::from_value::<ServedModel>(doc) else {
        return verdict;
    };
    if model
        .spec
        .model
        .as_ref()
        .is_some_and(|m| m.pipeline_run.is_none())
    {
        verdict.errors.push(FieldError::new(
            "spec.model.trainingJob",
            "serving a TrainingJob's output is embedded only for now; on Kubernetes serve a \
             pipeline step's artifact (spec.model.pipelineRun, step, output), or put the model \
             in the image",
        ));
    }
    let job = replica_job(&model, 0);
    let job_doc = serde_json::to_value(&job).unwrap_or(Value::Null);
    let replica = parsed(&job_doc, "TrainingJob")
        .errors
        .into_iter()
        .chain(build_errors(&job, opts));
    for mut e in replica {
        let Some(rest) = e.path.strip_prefix("spec.replicas.worker.") else {
            continue;
        };
        e.path = format!("spec.{rest}");
        if !verdict.errors.iter().any(|v| v.path == e.path) {
            verdict.errors.push(e);
        }
    }
    verdict
}

/// Checks a KServe InferenceService (`--kserve`) as `corral submit` checks one: the
/// converter's errors in the InferenceService's field paths, then the ServedModel it
/// becomes as [`check_served_model`] checks it. The operator gives the converter's words in
/// the InferenceService's `Ready` condition where no webhook refused it.
pub fn check_inference_service(object: &Value, opts: &BuildOptions) -> Verdict {
    let doc = as_written(object);
    let what = format!("InferenceService {}", name_of(&doc))
        .trim_end()
        .to_string();
    match corral_api::kserve::convert_with_warnings(&doc) {
        Err(errors) => Verdict {
            what,
            errors: errors.0,
            warnings: Vec::new(),
        },
        Ok((model, warnings)) => {
            let model = serde_json::to_value(&model).unwrap_or(Value::Null);
            let mut verdict = check_served_model(&model, opts);
            verdict.what = what;
            verdict.warnings.extend(warnings);
            verdict
        }
    }
}

fn name_of(doc: &Value) -> &str {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A document as the embedded shell's parser reads it (JSON is YAML, and this is the text
/// `corral submit` reads): its errors and warnings, and an error unless it is a `kind`.
fn parsed(doc: &Value, kind: &str) -> Verdict {
    let mut verdict = Verdict {
        what: format!("{kind} {}", name_of(doc)).trim_end().to_string(),
        ..Verdict::default()
    };
    for r in parse_documents(&doc.to_string(), &validation_context()) {
        match r {
            Err(e) => {
                if let Some(w) = e.what {
                    verdict.what = w;
                }
                verdict.errors.extend(e.errors.0);
            }
            Ok(p) => {
                verdict.warnings.extend(p.warnings);
                if p.document.kind() != kind {
                    verdict.errors.push(FieldError::new(
                        "kind",
                        format!(
                            "this webhook reviews {kind}s here, not {}",
                            p.document.kind()
                        ),
                    ));
                }
            }
        }
    }
    verdict
}

/// The document as its author wrote it: the metadata Corral reads (the rest is the API
/// server's: managedFields, finalizers, ownerReferences, ...), no status (the operator's).
fn as_written(object: &Value) -> Value {
    const KEPT: [&str; 8] = [
        "name",
        "namespace",
        "labels",
        "annotations",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
    ];
    let mut doc = object.clone();
    if let Some(o) = doc.as_object_mut() {
        o.remove("status");
        if let Some(Value::Object(meta)) = o.get_mut("metadata") {
            meta.retain(|k, v| KEPT.contains(&k.as_str()) && !v.is_null());
        }
    }
    doc
}

/// What [`crate::plan`] would refuse when it builds the job's objects (events
/// `InvalidPodTemplate`, `InvalidName`, `InvalidLaunch`, `Invalid`), as field errors.
fn build_errors(job: &TrainingJob, opts: &BuildOptions) -> Vec<FieldError> {
    let mut job = job.clone();
    // Built for real only once stored; the owner reference needs some uid.
    job.metadata.uid.get_or_insert_with(|| "review".to_string());
    let mut out = Vec::new();
    let mut push = |e: FieldError| {
        if !out.contains(&e) {
            out.push(e);
        }
    };
    for (role, spec) in &job.spec.replicas {
        // The first and the last replica: the longest name is the last one's.
        for index in [0, spec.count.saturating_sub(1)] {
            if spec.count == 0 {
                break;
            }
            let replica = ReplicaId::new(*role, index);
            let placement = ReplicaPlacement {
                role: role.to_string(),
                index,
                node: "review".into(),
                gpu_indices: Vec::new(),
            };
            if let Err(e) =
                build::build_pod(&job, replica, Incarnation::default(), &placement, opts)
            {
                let at = format!("spec.replicas.{role}.template.podTemplate");
                if let Some(f) = field_error(e, &at) {
                    push(f);
                }
            }
        }
    }
    let service = build::build_service(&job).err();
    let launch = build::build_config_map(&job, opts).err();
    for e in service.into_iter().chain(launch) {
        if let Some(f) = field_error(e, "spec") {
            push(f);
        }
    }
    if let Err(e) = crate::observe::job_constraints(&job) {
        // Its errors read `<path>: <what is wrong>`.
        push(match e.split_once(": ") {
            Some((path, message)) if path.starts_with("spec.") => FieldError::new(path, message),
            _ => FieldError::new("spec", e),
        });
    }
    out
}

/// A build error as the field it is about; `None` for what validation reports itself.
fn field_error(e: BuildError, template_path: &str) -> Option<FieldError> {
    match e {
        // `spec.replicas.<role>.template.image` (validation, `requires_image`).
        BuildError::NoImage(_) | BuildError::NoUid => None,
        BuildError::InvalidName(m) => Some(FieldError::new("metadata.name", m)),
        BuildError::Launch(m) => Some(FieldError::new("spec", format!("launch contract: {m}"))),
        BuildError::PodTemplate(m) => Some(FieldError::new(template_path, m)),
    }
}

/// Why a request body is not a review the webhook can answer (a 400).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

/// Answers one AdmissionReview (admission.k8s.io/v1): the review to send back, or why the
/// body is not one.
pub fn review(
    body: &[u8],
    opts: &BuildOptions,
) -> Result<AdmissionReview<DynamicObject>, Malformed> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)
        .map_err(|e| Malformed(format!("not an AdmissionReview: {e}")))?;
    let req: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|_| Malformed("the AdmissionReview has no request".into()))?;
    let allow = AdmissionResponse::from(&req);
    let checked = matches!(req.operation, Operation::Create | Operation::Update)
        && req.sub_resource.is_none()
        && matches!(
            req.kind.kind.as_str(),
            "TrainingJob" | "PipelineRun" | "Pipeline" | "ServedModel" | "InferenceService"
        );
    if !checked {
        return Ok(allow.into_review());
    }
    let object = req
        .object
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| Malformed(format!("request.object: {e}")))?
        .ok_or_else(|| {
            Malformed(format!(
                "a {:?} review without request.object",
                req.operation
            ))
        })?;
    if object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Ok(allow.into_review());
    }
    if req.operation == Operation::Update
        && let Some(old) = &req.old_object
        && serde_json::to_value(old)
            .ok()
            .and_then(|o| o.get("spec").cloned())
            == object.get("spec").cloned()
    {
        // Status, annotations, labels, finalizers: nothing to run differently.
        return Ok(allow.into_review());
    }
    let verdict = match req.kind.kind.as_str() {
        "PipelineRun" => check_run(&object),
        "Pipeline" => check_pipeline(&object),
        "ServedModel" => check_served_model(&object, opts),
        "InferenceService" => check_inference_service(&object, opts),
        _ => check(&object, opts),
    };
    let mut resp = allow;
    if !verdict.warnings.is_empty() {
        resp.warnings = Some(verdict.warnings.iter().map(ToString::to_string).collect());
    }
    if verdict.errors.is_empty() {
        return Ok(resp.into_review());
    }
    let mut resp = resp.deny(verdict.message());
    // As the API server's own validation answers: 422 Invalid, a cause per field.
    resp.result.code = 422;
    resp.result.reason = "Invalid".into();
    resp.result.details = Some(StatusDetails {
        name: req.name.clone(),
        group: req.kind.group.clone(),
        kind: req.kind.kind.clone(),
        causes: verdict
            .errors
            .iter()
            .map(|e| StatusCause {
                reason: "FieldValueInvalid".into(),
                message: e.message.clone(),
                field: e.path.clone(),
            })
            .collect(),
        uid: String::new(),
        retry_after_seconds: 0,
    });
    Ok(resp.into_review())
}

/// The HTTP answer to a body: 200 with the review, or 400 saying why not.
pub fn answer(body: &[u8], opts: &BuildOptions) -> Response {
    match review(body, opts).and_then(|r| {
        serde_json::to_vec(&r).map_err(|e| Malformed(format!("cannot encode the review: {e}")))
    }) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(Malformed(why)) => {
            tracing::warn!("webhook: refused a request: {why}");
            (StatusCode::BAD_REQUEST, why).into_response()
        }
    }
}

/// The webhook's routes (HTTPS is the listener's).
pub fn router(opts: BuildOptions) -> Router {
    Router::new()
        .route(
            PATH,
            post(move |body: Bytes| {
                let opts = opts.clone();
                async move { answer(&body, &opts) }
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
}

/// The TLS settings from `dir`'s tls.crt and tls.key.
pub async fn tls_config(dir: &Path) -> std::io::Result<RustlsConfig> {
    RustlsConfig::from_pem_file(dir.join(CERT_FILE), dir.join(KEY_FILE))
        .await
        .map_err(|e| with_path(e, dir))
}

fn with_path(e: std::io::Error, dir: &Path) -> std::io::Error {
    std::io::Error::new(
        e.kind(),
        format!(
            "webhook certificate {}/{{{CERT_FILE},{KEY_FILE}}}: {e}",
            dir.display()
        ),
    )
}

fn modified(dir: &Path) -> Option<(SystemTime, SystemTime)> {
    let m = |f: &str| {
        std::fs::metadata(dir.join(f))
            .and_then(|m| m.modified())
            .ok()
    };
    Some((m(CERT_FILE)?, m(KEY_FILE)?))
}

/// Serves the webhook on `listener` with the certificate in `cert_dir` (read again when
/// its files change) until `stop` turns true. Tests pass a listener on port 0.
pub async fn serve(
    listener: std::net::TcpListener,
    cert_dir: PathBuf,
    opts: BuildOptions,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let tls = tls_config(&cert_dir).await?;
    let handle = axum_server::Handle::new();
    {
        let (tls, handle, mut stop) = (tls.clone(), handle.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = modified(&cert_dir);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(RELOAD_EVERY) => {}
                    _ = stop.wait_for(|s| *s) => {
                        handle.graceful_shutdown(Some(Duration::from_secs(5)));
                        return;
                    }
                }
                let now = modified(&cert_dir);
                if now != seen {
                    let reloaded = tls
                        .reload_from_pem_file(cert_dir.join(CERT_FILE), cert_dir.join(KEY_FILE))
                        .await;
                    match reloaded {
                        Ok(()) => tracing::info!("webhook: certificate reloaded"),
                        // The old one serves until a good pair is there.
                        Err(e) => tracing::warn!("{}", with_path(e, &cert_dir)),
                    }
                    seen = now;
                }
            }
        });
    }
    if *stop.borrow() {
        return Ok(());
    }
    axum_server::from_tcp_rustls(listener, tls)?
        .handle(handle)
        .serve(router(opts).into_make_service())
        .await
}

/// `--webhook-listen` bound (so that a port in use fails the start, not later).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(addr)
}

#[cfg(test)]
#[path = "webhook_tests.rs"]
mod tests;
