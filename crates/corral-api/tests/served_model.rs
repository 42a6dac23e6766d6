//! ServedModel: the example parses with its defaults; bad input is refused with every error
//! at its field path; the replica job carries the model's resources, queue and priority.

use corral_api::document::{Document, parse_documents};
use corral_api::served_model::{
    PORT_ENV, ServedModel, replica_job, replica_job_name, serving_replica_of,
};
use corral_api::training_job::{Framework, RestartPolicy, Role};
use corral_api::validate::{NodeFacts, ValidationContext};

const EXAMPLE: &str = include_str!("../../../examples/serving/servedmodel.yaml");

fn parse_one(text: &str, ctx: &ValidationContext) -> Result<ServedModel, Vec<String>> {
    let mut docs = parse_documents(text, ctx);
    assert_eq!(docs.len(), 1);
    match docs.remove(0) {
        Ok(p) => match p.document {
            Document::ServedModel(m) => Ok(*m),
            other => panic!("not a ServedModel: {}", other.kind()),
        },
        Err(e) => Err(e.errors.iter().map(ToString::to_string).collect()),
    }
}

fn model(spec: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1\nkind: ServedModel\nmetadata: {{name: llm}}\nspec:\n{spec}"
    )
}

#[test]
fn the_example_parses_with_its_defaults() {
    let m = parse_one(EXAMPLE, &ValidationContext::default()).expect("example is valid");
    assert_eq!(m.spec.readiness.path, "/healthz");
    assert_eq!(m.spec.autoscaling.min_replicas, 0);
    assert!(m.spec.autoscaling.max_replicas() >= 1);
    // Defaults of what is left out.
    let m = parse_one(
        &model("  template: {command: [python3, server.py]}\n"),
        &ValidationContext::default(),
    )
    .expect("valid");
    let a = &m.spec.autoscaling;
    assert_eq!((a.min_replicas, a.max_replicas()), (1, 1));
    assert_eq!(a.stable_window_seconds, 60);
    assert_eq!(a.panic_window_seconds, 6);
    assert_eq!(m.spec.max_request_bytes(), 16 << 20);
}

#[test]
fn bad_input_names_every_field_at_once() {
    let errs = parse_one(
        &model(
            "  template: {}
  readiness: {path: healthz, periodSeconds: 0}
  maxRequestBytes: 0
  canaryTrafficPercent: 101
  autoscaling:
    minReplicas: 3
    maxReplicas: 2
    targetInFlight: 0
    stableWindowSeconds: 5
    panicWindowSeconds: 9
    panicThresholdPercent: 50
  resources: {gpu: 99}
",
        ),
        &ValidationContext::default(),
    )
    .expect_err("refused");
    let all = errs.join("\n");
    for path in [
        "spec.template:",
        "spec.readiness.path:",
        "spec.readiness.periodSeconds:",
        "spec.maxRequestBytes:",
        "spec.canaryTrafficPercent: 101 is more than 100",
        "spec.autoscaling.maxReplicas: 2 is less than minReplicas 3",
        "spec.autoscaling.targetInFlight:",
        "spec.autoscaling.stableWindowSeconds:",
        "spec.autoscaling.panicWindowSeconds:",
        "spec.autoscaling.panicThresholdPercent:",
        "spec.resources.gpu:",
    ] {
        assert!(all.contains(path), "missing `{path}` in:\n{all}");
    }
    assert!(
        !all.contains("spec.replicas"),
        "replica-job paths leaked:\n{all}"
    );
}

#[test]
fn against_a_cluster_unknown_queues_and_priority_classes_are_refused() {
    let ctx = ValidationContext {
        nodes: Some(vec![NodeFacts {
            gpu_type: Some("NVIDIA-H100-80GB-HBM3".into()),
            gpus: 2,
        }]),
        ..ValidationContext::default()
    };
    let errs = parse_one(
        &model(
            "  template: {command: [serve]}
  queue: nope
  priorityClass: urgent
",
        ),
        &ctx,
    )
    .expect_err("refused");
    let all = errs.join("\n");
    for path in ["spec.queue:", "spec.priorityClass:"] {
        assert!(all.contains(path), "missing `{path}` in:\n{all}");
    }
}

#[test]
fn a_name_too_long_for_its_replicas_hostnames_is_refused() {
    let long = "m".repeat(50);
    let text = format!(
        "apiVersion: corral.dev/v1alpha1\nkind: ServedModel\nmetadata: {{name: {long}}}\nspec:\n  template: {{command: [serve]}}\n"
    );
    let errs = parse_one(&text, &ValidationContext::default()).expect_err("refused");
    assert!(
        errs[0].starts_with("metadata.name: is too long"),
        "{errs:?}"
    );
}

#[test]
fn a_replica_job_carries_the_model_and_owns_port() {
    let mut m = parse_one(
        &model(
            "  template:
    command: [serve]
    env: [{name: PORT, value: '1'}, {name: MODEL, value: tiny}]
  queue: serving
  priorityClass: high
  resources: {gpu: 1, gpuTypes: [H100]}
",
        ),
        &ValidationContext::default(),
    )
    .expect("valid");
    m.metadata.namespace = Some("team".into());
    let job = replica_job(&m, 3);
    assert_eq!(job.metadata.name, replica_job_name("llm", 3));
    assert_eq!(job.metadata.namespace.as_deref(), Some("team"));
    assert_eq!(serving_replica_of(&job), Some(("llm", 3)));
    assert_eq!(job.spec.framework, Framework::Generic);
    assert_eq!(job.spec.queue.as_deref(), Some("serving"));
    assert_eq!(job.spec.priority_class.as_deref(), Some("high"));
    let r = &job.spec.replicas[&Role::Worker];
    assert_eq!(r.count, 1);
    assert_eq!(r.restart_policy, Some(RestartPolicy::Always));
    assert_eq!(r.resources.gpu, 1);
    let names: Vec<&str> = r.template.env.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["MODEL"], "{PORT_ENV} is the contract's");
}

#[test]
fn a_model_source_names_a_job_or_a_runs_step_output() {
    let refused = |source: &str, path: &str| {
        let text = model(&format!(
            "  template: {{command: [python3, server.py]}}\n  model: {source}\n"
        ));
        let e = parse_one(&text, &ValidationContext::default()).expect_err("refused");
        assert!(e.iter().any(|m| m.starts_with(path)), "{source}: {e:?}");
    };
    refused("{path: m.json}", "spec.model:");
    refused(
        "{trainingJob: t, pipelineRun: r, step: s, output: o}",
        "spec.model.pipelineRun",
    );
    refused("{pipelineRun: r, output: o}", "spec.model.step");
    refused("{pipelineRun: r, step: s}", "spec.model.output");
    refused("{trainingJob: t, step: s}", "spec.model.step");
    refused(
        "{pipelineRun: Not_A_Name, step: s, output: o}",
        "spec.model.pipelineRun",
    );
    for ok in [
        "{trainingJob: t, path: m.json}",
        "{pipelineRun: r, step: s, output: o, path: m.json}",
    ] {
        let text = model(&format!(
            "  template: {{command: [python3, server.py]}}\n  model: {ok}\n"
        ));
        parse_one(&text, &ValidationContext::default()).expect(ok);
    }
}
