//! A PipelineRun is refused at parse time, with the path of the offending field, for a
//! cycle, a reference to a missing step or output, or a parameter of the wrong type.

use corral_api::document::{Document, parse_documents};
use corral_api::validate::ValidationContext;

const RUN: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: r1}
spec:
  params: {epochs: 3}
  pipelineSpec:
    parameters:
      - {name: epochs, type: int, default: 1}
    parallelism: 2
    steps:
      - name: data
        outputs: [dataset]
        task: {command: [python3, -c, "print(1)"]}
      - name: train
        inputs: {data: steps.data.outputs.dataset, epochs: params.epochs}
        outputs: [model]
        retries: 1
        job:
          framework: pytorch
          replicas:
            master: {template: {command: [python3, train.py]}}
            worker: {count: 1, template: {command: [python3, train.py]}}
"#;

fn errors(text: &str) -> Vec<String> {
    parse_documents(text, &ValidationContext::default())
        .into_iter()
        .filter_map(Result::err)
        .flat_map(|e| e.errors.0)
        .map(|f| format!("{}: {}", f.path, f.message))
        .collect()
}

#[test]
fn a_valid_run_parses() {
    let parsed = parse_documents(RUN, &ValidationContext::default());
    let Ok(p) = &parsed[0] else {
        panic!("{parsed:?}");
    };
    let Document::PipelineRun(run) = &p.document else {
        panic!("not a run");
    };
    assert_eq!(run.spec.pipeline_spec.steps.len(), 2);
    assert_eq!(run.spec.pipeline_spec.topological_order(), Some(vec![0, 1]));
}

#[test]
fn a_cycle_is_refused_naming_its_steps() {
    let text = RUN.replace(
        "outputs: [dataset]",
        "outputs: [dataset]\n        dependsOn: [train]",
    );
    let e = errors(&text);
    assert!(
        e.iter().any(|e| e.starts_with(
            "spec.pipelineSpec.steps[0]: steps data, train need each other in a cycle"
        )),
        "{e:?}"
    );
}

#[test]
fn a_missing_step_or_output_is_refused_at_its_input() {
    let e = errors(&RUN.replace("steps.data.outputs.dataset", "steps.dta.outputs.dataset"));
    assert!(
        e.iter().any(|e| e.starts_with(
            "spec.pipelineSpec.steps[1].inputs.data: there is no step `dta`; did you mean `data`?"
        )),
        "{e:?}"
    );
    let e = errors(&RUN.replace("steps.data.outputs.dataset", "steps.data.outputs.datasets"));
    assert!(
        e.iter().any(|e| e
            == "spec.pipelineSpec.steps[1].inputs.data: step `data` has no output `datasets`; \
                did you mean `dataset`? its outputs: dataset"),
        "{e:?}"
    );
}

#[test]
fn a_parameter_of_the_wrong_type_is_refused() {
    let e = errors(&RUN.replace("params: {epochs: 3}", "params: {epochs: \"three\"}"));
    assert!(
        e.iter().any(|e| e == "spec.params.epochs: `\"three\"` is not of type int (parameter `epochs`)"),
        "{e:?}"
    );
    let e = errors(&RUN.replace("params: {epochs: 3}", "params: {epoch: 3}"));
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.params.epoch: there is no parameter `epoch`")),
        "{e:?}"
    );
}

#[test]
fn generate_name_is_for_runs_only() {
    let with_prefix = RUN.replace("metadata: {name: r1}", "metadata: {generateName: r-}");
    assert_eq!(errors(&with_prefix), Vec::<String>::new());
    let both = RUN.replace(
        "metadata: {name: r1}",
        "metadata: {name: r1, generateName: r-}",
    );
    assert!(
        errors(&both)
            .iter()
            .any(|e| e.starts_with("metadata.generateName: give metadata.name or")),
        "{:?}",
        errors(&both)
    );
    let job = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, generateName: j-}\nspec: {framework: generic, replicas: {worker: {template: {command: [x]}}}}\n";
    assert!(
        errors(job)
            .iter()
            .any(|e| e.starts_with("metadata.generateName: is supported for PipelineRuns only")),
        "{:?}",
        errors(job)
    );
}

#[test]
fn a_step_job_that_could_not_run_is_refused_at_the_step() {
    let e = errors(&RUN.replace("master: {template", "chief: {template"));
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.pipelineSpec.steps[1].job.replicas.chief")),
        "{e:?}"
    );
}
