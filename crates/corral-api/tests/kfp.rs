//! Kubeflow Pipelines v2 compiled YAML (tests/fixtures/kfp/two_steps.yaml, written by the
//! `kfp` package from two_steps.py; corral-local's containers_e2e compiles it again and
//! runs it) becomes a PipelineRun; what Corral cannot run yet is refused at its field.

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;

const TWO_STEPS: &str = include_str!("fixtures/kfp/two_steps.yaml");

fn errors(text: &str) -> Vec<String> {
    parse_documents(text, &ValidationContext::default())
        .into_iter()
        .filter_map(Result::err)
        .flat_map(|e| e.errors.0)
        .map(|f| format!("{}: {}", f.path, f.message))
        .collect()
}

#[test]
fn a_compiled_pipeline_is_a_run_of_its_tasks() {
    let parsed = parse_documents(TWO_STEPS, &ValidationContext::default());
    let Ok(p) = &parsed[0] else {
        panic!("{parsed:?}");
    };
    assert_eq!(p.converted_from.as_deref(), Some("KFP PipelineSpec"));
    let Document::PipelineRun(run) = &p.document else {
        panic!("not a run");
    };
    assert_eq!(run.metadata.generate_name.as_deref(), Some("two-steps-"));
    let spec = &run.spec.pipeline_spec;
    assert_eq!(spec.parameters.len(), 1);
    assert_eq!(spec.parameters[0].name, "greeting");
    assert_eq!(spec.parameters[0].default, Some(serde_json::json!("hello")));
    let step = |n: &str| {
        spec.steps
            .iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("no step {n}"))
    };
    let produce = step("produce");
    let task = produce.task.as_ref().expect("task");
    assert_eq!(task.image.as_deref(), Some("busybox"));
    assert_eq!(
        task.args,
        ["$(CORRAL_INPUT_GREETING)", "$(CORRAL_OUTPUT_DATA)/data"]
    );
    assert_eq!(produce.inputs["greeting"], "params.greeting");
    assert_eq!(produce.outputs, ["data"]);
    let consume = step("consume");
    assert_eq!(consume.depends_on, ["produce"]);
    assert_eq!(consume.inputs["data"], "steps.produce.outputs.data");
    assert_eq!(
        consume.task.as_ref().expect("task").args,
        [
            "$(CORRAL_INPUT_DATA)/data",
            "$(CORRAL_OUTPUT_REPORT)/report"
        ]
    );
}

#[test]
fn what_cannot_run_yet_is_refused_at_its_field() {
    let nested = TWO_STEPS.replace(
        "  comp-consume:\n    executorLabel: exec-consume\n",
        "  comp-consume:\n    dag: {tasks: {}}\n",
    );
    let e = errors(&nested);
    assert!(
        e.iter()
            .any(|m| m.starts_with("components.comp-consume: ") && m.contains("nested DAG")),
        "{e:?}"
    );
    let placeholder = TWO_STEPS.replace(
        "'{{$.outputs.artifacts[''report''].path}}'",
        "'{{$.pipeline_job_name}}'",
    );
    let e = errors(&placeholder);
    assert!(
        e.iter().any(|m| m
            .starts_with("deploymentSpec.executors.exec-consume.container.args[1]: ")
            && m.contains("{{$.pipeline_job_name}}")),
        "{e:?}"
    );
    let output_param = TWO_STEPS.replace(
        "    outputDefinitions:\n      artifacts:\n        report:",
        "    outputDefinitions:\n      parameters:\n        n: {parameterType: NUMBER_INTEGER}\n      artifacts:\n        report:",
    );
    let e = errors(&output_param);
    assert!(
        e.iter()
            .any(|m| m.starts_with("components.comp-consume.outputDefinitions.parameters: ")),
        "{e:?}"
    );
}
