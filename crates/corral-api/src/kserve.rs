//! KServe's `InferenceService` (serving.kserve.io/v1beta1) with a custom-container
//! predictor, accepted as it is and converted into a [`ServedModel`], as Kubeflow's job
//! manifests become TrainingJobs (`kubeflow`): the predictor's container (the one named
//! `kserve-container`, or the only one) is the template and its requests the resources;
//! `minReplicas`, `maxReplicas`, `scaleTarget` (with `scaleMetric: concurrency`) the
//! autoscaling; `canaryTrafficPercent` the split between revisions, with KServe's meaning;
//! the container's `readinessProbe.httpGet` the readiness check. What KServe does and
//! Corral does not is an error naming the field (a model-format predictor, a transformer)
//! or a warning when the model still serves (`containerConcurrency`, `timeout`).
//!
//! The model server listens on `$PORT`: KServe (through Knative) sets it too, to the
//! container's port, so a server that reads it runs unchanged on both.

use serde_json::{Map, Value};

use crate::meta::Object;
use crate::served_model::{Autoscaling, Readiness, ServedModel, ServedModelSpec};
use crate::validate::{FieldError, ValidationErrors};

pub const KIND: &str = "InferenceService";
/// The API group; v1beta1 is the version converted.
pub const GROUP: &str = "serving.kserve.io/";
const VERSION: &str = "serving.kserve.io/v1beta1";

/// The predictor's container KServe looks for among several.
const CONTAINER: &str = "kserve-container";

/// KServe's model-format predictors: they need KServe's serving runtimes.
const MODEL_FORMATS: &[&str] = &[
    "model",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "lightgbm",
    "paddle",
    "pmml",
];

/// Predictor fields that are the component's, not the pod's.
const COMPONENT_FIELDS: &[&str] = &[
    "minReplicas",
    "maxReplicas",
    "scaleTarget",
    "scaleMetric",
    "canaryTrafficPercent",
    "containerConcurrency",
    "timeout",
    "logger",
    "batcher",
    "deploymentStrategy",
    "annotations",
    "labels",
];

fn u32_at(errs: &mut ValidationErrors, path: &str, v: &Value) -> Option<u32> {
    let n = v.as_u64().and_then(|n| u32::try_from(n).ok());
    if n.is_none() {
        errs.push(path, "must be a whole number, zero or more");
    }
    n
}

/// Converts an InferenceService into a ServedModel, with what it asks that Corral accepts
/// but does not honour, or says what cannot be converted.
pub fn convert_with_warnings(
    raw: &Value,
) -> Result<(ServedModel, Vec<FieldError>), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let mut warnings = Vec::new();
    let api_version = raw.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api_version != VERSION {
        errs.push(
            "apiVersion",
            format!("`{api_version}`: Corral converts InferenceService {VERSION}"),
        );
    }
    let empty = Map::new();
    let spec = match raw.get("spec") {
        Some(Value::Object(s)) => s,
        _ => {
            errs.push("spec", "is required: a mapping with a `predictor`");
            &empty
        }
    };
    for k in spec.keys().filter(|k| *k != "predictor") {
        errs.push(
            format!("spec.{k}"),
            "Corral serves the predictor only (no transformer or explainer)",
        );
    }
    let predictor = match spec.get("predictor") {
        Some(Value::Object(p)) => p.clone(),
        _ => {
            errs.push(
                "spec.predictor",
                "is required: a custom-container predictor (`containers`)",
            );
            Map::new()
        }
    };
    for f in MODEL_FORMATS.iter().filter(|f| predictor.contains_key(**f)) {
        errs.push(
            format!("spec.predictor.{f}"),
            "a model-format predictor needs KServe's serving runtimes; Corral runs a \
             custom-container predictor: give `spec.predictor.containers` with the model server",
        );
    }
    let mut autoscaling = Autoscaling::default();
    let at = |f: &str| format!("spec.predictor.{f}");
    if let Some(v) = predictor.get("minReplicas") {
        autoscaling.min_replicas = u32_at(&mut errs, &at("minReplicas"), v).unwrap_or(1);
    }
    if let Some(v) = predictor.get("maxReplicas") {
        // KServe's 0 is "no bound"; Corral's bound is then its own default.
        autoscaling.max_replicas = u32_at(&mut errs, &at("maxReplicas"), v).filter(|n| *n > 0);
    }
    match predictor.get("scaleMetric").map(|v| (v, v.as_str())) {
        None | Some((_, Some("concurrency"))) => {}
        Some((v, _)) => errs.push(
            at("scaleMetric"),
            format!("{v}: Corral scales on requests in flight (`concurrency`) only"),
        ),
    }
    if let Some(v) = predictor.get("scaleTarget") {
        autoscaling.target_in_flight = u32_at(&mut errs, &at("scaleTarget"), v).unwrap_or(4);
    }
    let canary_traffic_percent = predictor
        .get("canaryTrafficPercent")
        .and_then(|v| u32_at(&mut errs, &at("canaryTrafficPercent"), v));
    for f in ["containerConcurrency", "timeout"] {
        if predictor.contains_key(f) {
            warnings.push(FieldError::new(
                at(f),
                "accepted but not honoured: Corral's router neither caps a replica's \
                 concurrency nor times a request out",
            ));
        }
    }
    for f in ["logger", "batcher", "deploymentStrategy"] {
        if predictor.contains_key(f) {
            errs.push(at(f), "Corral's router has no such feature");
        }
    }

    // The pod: the containers and the pod fields beside them.
    let pod: Map<String, Value> = predictor
        .iter()
        .filter(|(k, _)| {
            !COMPONENT_FIELDS.contains(&k.as_str()) && !MODEL_FORMATS.contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut readiness = Readiness::default();
    let containers = pod.get("containers").and_then(Value::as_array);
    let main = containers.and_then(|cs| {
        cs.iter()
            .find(|c| c.get("name").and_then(Value::as_str) == Some(CONTAINER))
            .or_else(|| (cs.len() == 1).then(|| &cs[0]))
    });
    if let Some(probe) = main.and_then(|c| c.get("readinessProbe")) {
        if let Some(path) = probe.pointer("/httpGet/path").and_then(Value::as_str) {
            readiness.path = path.to_string();
        }
        if let Some(n) = probe.get("periodSeconds").and_then(Value::as_u64) {
            readiness.period_seconds = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(n) = probe.get("failureThreshold").and_then(Value::as_u64) {
            readiness.failure_threshold = u32::try_from(n).unwrap_or(u32::MAX);
        }
    }
    let (mut metadata, replica, pod_errs, pod_warnings) = crate::kubeflow::convert_pod(
        raw.get("metadata"),
        "spec.predictor",
        &Value::Object(pod),
        CONTAINER,
    );
    errs.0.extend(pod_errs.0);
    warnings.extend(pod_warnings);
    let replica = match replica {
        Some(r) => r,
        None if errs.0.is_empty() => {
            errs.push(
                "spec.predictor.containers",
                "needs the model server's container",
            );
            return Err(errs);
        }
        None => return Err(errs),
    };
    if !errs.0.is_empty() {
        return Err(errs);
    }
    let name = std::mem::take(&mut metadata.name);
    let mut model: ServedModel = Object::new(
        &name,
        ServedModelSpec {
            template: replica.template,
            resources: replica.resources,
            readiness,
            autoscaling,
            queue: None,
            priority_class: None,
            max_request_bytes: None,
            canary_traffic_percent,
            model: None,
        },
    );
    metadata.name = name;
    model.metadata = metadata;
    Ok((model, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn isvc(predictor: &str) -> Value {
        serde_saphyr::from_str(&format!(
            "apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {{name: llm, namespace: team, annotations: {{a: b}}}}
spec:
  predictor:
{predictor}"
        ))
        .expect("yaml")
    }

    #[test]
    fn a_custom_container_predictor_becomes_a_served_model() {
        let (m, warnings) = convert_with_warnings(&isvc(
            "    minReplicas: 0
    maxReplicas: 3
    scaleTarget: 8
    scaleMetric: concurrency
    canaryTrafficPercent: 10
    containerConcurrency: 4
    containers:
      - name: kserve-container
        image: ghcr.io/acme/llm:2
        command: [python3, serve.py]
        env: [{name: MODEL, value: llm}]
        resources:
          requests: {cpu: '2', memory: 8Gi, nvidia.com/gpu: '1'}
          limits: {nvidia.com/gpu: '1'}
        readinessProbe: {httpGet: {path: /v2/health/ready}, periodSeconds: 2}
",
        ))
        .expect("converts");
        assert_eq!(m.kind, "ServedModel");
        assert_eq!(m.metadata.name, "llm");
        assert_eq!(m.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(m.spec.template.image.as_deref(), Some("ghcr.io/acme/llm:2"));
        assert_eq!(m.spec.template.command, vec!["python3", "serve.py"]);
        assert_eq!(m.spec.resources.gpu, 1);
        let a = &m.spec.autoscaling;
        assert_eq!(
            (a.min_replicas, a.max_replicas, a.target_in_flight),
            (0, Some(3), 8)
        );
        assert_eq!(m.spec.canary_traffic_percent, Some(10));
        assert_eq!(m.spec.readiness.path, "/v2/health/ready");
        assert_eq!(m.spec.readiness.period_seconds, 2);
        assert!(
            warnings
                .iter()
                .any(|w| w.path == "spec.predictor.containerConcurrency"),
            "{warnings:?}"
        );
    }

    #[test]
    fn what_kserve_does_and_corral_does_not_is_named() {
        let errs = convert_with_warnings(&isvc(
            "    scaleMetric: rps
    sklearn: {storageUri: 'gs://bucket/model'}
    minReplicas: -1
",
        ))
        .expect_err("refused")
        .0;
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        for p in [
            "spec.predictor.scaleMetric",
            "spec.predictor.sklearn",
            "spec.predictor.minReplicas",
        ] {
            assert!(paths.contains(&p), "missing {p} in {errs:?}");
        }
    }
}
