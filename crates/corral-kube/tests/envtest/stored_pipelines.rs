//! Stored Pipelines on the real API server: a PipelineRun that names a Pipeline
//! (`spec.pipelineRef`) is given a copy of it (`spec.pipelineSpec`, and its version in
//! `spec.pipelineRef.generation`) by the operator, with the rights deploy/rbac.yaml gives
//! it, and runs that copy though the Pipeline changes later; a run naming a Pipeline that
//! is not there fails, saying which are.

use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use corral_kube::pipelines::{self, PipelineConfig};

use crate::harness::Env;
use crate::manifests::{ar, namespace};
use crate::passes::{Operator, pass};
use crate::trainingjobs::job;

fn api(env: &Env, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.admin.clone(),
        ns,
        &ar("corral.dev", "v1alpha1", kind, plural),
    )
}

async fn passes(op: &Operator) {
    pass(op, Timestamp::now()).await;
    let cfg = PipelineConfig {
        artifacts: corral_kube::pipelines::ArtifactLocation::Claim("corral-artifacts".into()),
        tools_image: "ghcr.io/corral-dev/corral:test".into(),
    };
    let (_, report) = pipelines::apply::reconcile_once(op.applier(), &cfg, Timestamp::now())
        .await
        .expect("the operator may list runs and Pipelines");
    assert!(report.errors.is_empty(), "pipelines: {:?}", report.errors);
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

pub(crate) async fn stored_pipeline_runs(env: &Env, op: &Operator) {
    let ns = "stored-pipelines";
    namespace(env, ns).await;
    let pipelines = api(env, ns, "Pipeline", "pipelines");
    let runs = api(env, ns, "PipelineRun", "pipelineruns");
    let step = |command: &str| {
        json!({"steps": [{"name": "only", "task": {"image": "busybox:1.36",
               "command": ["sh", "-c", command], "resources": {"cpu": "1", "memory": "1Gi"}}}]})
    };
    pipelines
        .create(
            &PostParams::default(),
            &object(
                json!({"apiVersion": "corral.dev/v1alpha1", "kind": "Pipeline",
                           "metadata": {"name": "train", "namespace": ns},
                           "spec": step("echo v1")}),
            ),
        )
        .await
        .expect("the API server takes a Pipeline (its CRD's schema)");
    for (name, pipeline) in [("by-ref", "train"), ("missing", "nope")] {
        runs.create(
            &PostParams::default(),
            &object(
                json!({"apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
                           "metadata": {"name": name, "namespace": ns},
                           "spec": {"pipelineRef": {"name": pipeline}}}),
            ),
        )
        .await
        .expect("a run of a stored Pipeline");
    }
    passes(op).await;
    let run = serde_json::to_value(runs.get("by-ref").await.expect("run")).expect("json");
    assert_eq!(run["spec"]["pipelineRef"]["generation"], json!(1), "{run}");
    assert_eq!(run["spec"]["pipelineSpec"], step("echo v1"), "{run}");
    // The Pipeline changes; the run keeps the version it was given.
    pipelines
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": step("echo v2")})),
        )
        .await
        .expect("a new version of the Pipeline");
    passes(op).await;
    let made = job(env, ns, "by-ref-only")
        .await
        .expect("the step's job, from the run's copy");
    assert!(made.to_string().contains("echo v1"), "{made}");
    let run = serde_json::to_value(runs.get("by-ref").await.expect("run")).expect("json");
    assert_eq!(run["spec"]["pipelineRef"]["generation"], json!(1));
    // Each version seen is kept (Kubernetes keeps the current one only): a run made now
    // may still ask for version 1.
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::namespaced(env.admin.clone(), ns);
    let kept: Vec<(String, i64)> = revisions
        .list(&kube::api::ListParams::default().labels("corral.dev/pipeline=train"))
        .await
        .expect("revisions")
        .items
        .into_iter()
        .map(|r| (r.metadata.name.unwrap_or_default(), r.revision))
        .collect();
    assert_eq!(
        kept,
        [("train-g1".to_string(), 1), ("train-g2".to_string(), 2)]
    );
    runs.create(
        &PostParams::default(),
        &object(
            json!({"apiVersion": "corral.dev/v1alpha1", "kind": "PipelineRun",
                       "metadata": {"name": "older", "namespace": ns},
                       "spec": {"pipelineRef": {"name": "train", "generation": 1}}}),
        ),
    )
    .await
    .expect("a run of version 1");
    passes(op).await;
    let older = serde_json::to_value(runs.get("older").await.expect("run")).expect("json");
    assert_eq!(older["spec"]["pipelineSpec"], step("echo v1"), "{older}");
    let missing = serde_json::to_value(runs.get("missing").await.expect("run")).expect("json");
    assert_eq!(missing["status"]["phase"], "Failed", "{missing}");
    let message = missing["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("spec.pipelineRef.name") && message.contains("there are: train"),
        "{message}"
    );
    // Nothing of this namespace holds room for the tests after it.
    let jobs = api(env, ns, "TrainingJob", "trainingjobs");
    for (api, name) in [
        (&runs, "by-ref"),
        (&runs, "missing"),
        (&runs, "older"),
        (&jobs, "by-ref-only"),
        (&jobs, "older-only"),
    ] {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    pass(op, Timestamp::now()).await;
}
