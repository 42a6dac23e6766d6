//! A ServedModel as written: its autoscaling bounds and windows, its readiness check, and
//! everything its replicas share with a TrainingJob (resources, GPU types, queue, priority
//! class, template), checked by validating the replica job it becomes, with paths mapped
//! back to where the user wrote them.

use crate::served_model::{ServedModel, replica_job};

use super::names::{check_dns1035_label, check_meta};
use super::{MAX_DNS_LABEL, ValidationContext, ValidationErrors, validate_training_job};

/// More replicas than this for one model is a typo, not a deployment.
pub const MAX_SERVING_REPLICAS: u32 = 1_000;
/// The longest stable window Knative accepts (one hour); the shortest is 6 s.
const STABLE_WINDOW_SECONDS: std::ops::RangeInclusive<u32> = 6..=3600;
/// A request body limit above this (4 GiB) is no limit.
const MAX_REQUEST_BYTES: u64 = 4 << 30;

/// Validates a ServedModel as written (before defaults).
pub fn validate_served_model(
    model: &ServedModel,
    ctx: &ValidationContext,
) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    check_meta(&model.metadata, true, &mut errs);
    let spec = &model.spec;
    let a = &spec.autoscaling;
    let max = a.max_replicas();

    if a.min_replicas > MAX_SERVING_REPLICAS {
        errs.push(
            "spec.autoscaling.minReplicas",
            format!("{} is more than {MAX_SERVING_REPLICAS}", a.min_replicas),
        );
    }
    match a.max_replicas {
        Some(0) => errs.push(
            "spec.autoscaling.maxReplicas",
            "must be at least 1; use minReplicas: 0 to let the model scale to zero",
        ),
        Some(m) if m < a.min_replicas => errs.push(
            "spec.autoscaling.maxReplicas",
            format!("{m} is less than minReplicas {}", a.min_replicas),
        ),
        Some(m) if m > MAX_SERVING_REPLICAS => errs.push(
            "spec.autoscaling.maxReplicas",
            format!("{m} is more than {MAX_SERVING_REPLICAS}"),
        ),
        _ => {}
    }
    if a.target_in_flight == 0 {
        errs.push(
            "spec.autoscaling.targetInFlight",
            "must be at least 1 (in-flight requests one replica should carry on average)",
        );
    }
    if !STABLE_WINDOW_SECONDS.contains(&a.stable_window_seconds) {
        errs.push(
            "spec.autoscaling.stableWindowSeconds",
            format!(
                "{} is outside {}..={} seconds",
                a.stable_window_seconds,
                STABLE_WINDOW_SECONDS.start(),
                STABLE_WINDOW_SECONDS.end()
            ),
        );
    }
    if a.panic_window_seconds == 0 || a.panic_window_seconds > a.stable_window_seconds {
        errs.push(
            "spec.autoscaling.panicWindowSeconds",
            format!(
                "{} must be at least 1 and at most the stable window ({} s)",
                a.panic_window_seconds, a.stable_window_seconds
            ),
        );
    }
    if !(101..=1000).contains(&a.panic_threshold_percent) {
        errs.push(
            "spec.autoscaling.panicThresholdPercent",
            format!(
                "{} is outside 101..=1000 (percent of the current replicas' target)",
                a.panic_threshold_percent
            ),
        );
    }
    if a.min_replicas == 0 && a.scale_to_zero_after_seconds == 0 {
        errs.push(
            "spec.autoscaling.scaleToZeroAfterSeconds",
            "must be at least 1: a model at zero replicas holds every request for a cold start",
        );
    }

    let r = &spec.readiness;
    if !r.path.starts_with('/') || r.path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        errs.push(
            "spec.readiness.path",
            format!(
                "`{}` must be a URL path starting with `/`, e.g. `/healthz`",
                r.path
            ),
        );
    }
    if r.period_seconds == 0 || r.period_seconds > 300 {
        errs.push("spec.readiness.periodSeconds", "must be 1-300");
    }
    if r.failure_threshold == 0 || r.failure_threshold > 100 {
        errs.push("spec.readiness.failureThreshold", "must be 1-100");
    }
    if let Some(b) = spec.max_request_bytes
        && (b == 0 || b > MAX_REQUEST_BYTES)
    {
        errs.push(
            "spec.maxRequestBytes",
            format!("{b} must be 1 to {MAX_REQUEST_BYTES} (4 GiB)"),
        );
    }
    if let Some(p) = spec.canary_traffic_percent
        && p > 100
    {
        errs.push(
            "spec.canaryTrafficPercent",
            format!("{p} is more than 100 (percent of requests for the latest revision)"),
        );
    }
    if spec.template.command.is_empty() && spec.template.image.is_none() {
        errs.push(
            "spec.template",
            "needs a `command` (the model server to run, listening on $PORT) or an `image`",
        );
    }

    if let Some(source) = &spec.model {
        match (&source.pipeline_run, source.training_job.is_empty()) {
            (None, true) => errs.push(
                "spec.model",
                "name a `trainingJob`, or a `pipelineRun` with its `step` and `output`",
            ),
            (Some(_), false) => errs.push(
                "spec.model.pipelineRun",
                "give trainingJob or pipelineRun, not both",
            ),
            (None, false) => {
                if let Err(e) = check_dns1035_label(&source.training_job) {
                    errs.push(
                        "spec.model.trainingJob",
                        format!("`{}` is not a TrainingJob name: {e}", source.training_job),
                    );
                }
                for (field, given) in [("step", &source.step), ("output", &source.output)] {
                    if given.is_some() {
                        errs.push(
                            format!("spec.model.{field}"),
                            "is for a pipelineRun's step; a trainingJob's model is its output \
                             directory (spec.model.path)",
                        );
                    }
                }
            }
            (Some(run), true) => {
                if let Err(e) = check_dns1035_label(run) {
                    errs.push(
                        "spec.model.pipelineRun",
                        format!("`{run}` is not a PipelineRun name: {e}"),
                    );
                }
                for (field, given) in [("step", &source.step), ("output", &source.output)] {
                    if given.as_deref().is_none_or(str::is_empty) {
                        errs.push(
                            format!("spec.model.{field}"),
                            "is required with pipelineRun: the step and the name of the \
                             output that holds the model",
                        );
                    }
                }
            }
        }
        if let Some(path) = &source.path
            && let Err(e) = check_output_path(path)
        {
            errs.push("spec.model.path", e);
        }
    }

    // Replica hostnames are `<model>-serving-<index>-worker-0`: they must fit one DNS label.
    let name = &model.metadata.name;
    let name_ok = !name.is_empty() && check_dns1035_label(name).is_ok();
    if name_ok {
        let longest = replica_job(model, max.saturating_sub(1)).metadata.name + "-worker-0";
        if longest.len() > MAX_DNS_LABEL {
            errs.push(
                "metadata.name",
                format!(
                    "is too long: replica hostname `{longest}` has {} characters and a \
                     hostname holds {MAX_DNS_LABEL}; use a name of at most {} characters",
                    longest.len(),
                    MAX_DNS_LABEL - (longest.len() - name.len())
                ),
            );
        }
    }
    if name_ok && let Err(replica_errs) = validate_training_job(&replica_job(model, 0), ctx) {
        for e in replica_errs.0 {
            // The name was checked above in the model's own terms.
            if e.path == "metadata.name" {
                continue;
            }
            let path = e
                .path
                .replacen("spec.replicas.worker.resources", "spec.resources", 1)
                .replacen("spec.replicas.worker.template", "spec.template", 1)
                .replacen("spec.replicas.worker", "spec", 1);
            if !errs
                .0
                .iter()
                .any(|x| x.path == path && x.message == e.message)
            {
                errs.push(path, e.message);
            }
        }
    }
    errs.into_result()
}

/// A path inside a job's output directory: relative, and never out of it.
fn check_output_path(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if path.is_empty() || p.is_absolute() {
        return Err(format!(
            "`{path}` must be a path relative to the job's output directory, e.g. `model.json`"
        ));
    }
    if p.components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
        || path.contains('\0')
    {
        return Err(format!(
            "`{path}` must stay inside the job's output directory: no `..` or `.` parts"
        ));
    }
    Ok(())
}
