//! A stored Pipeline and the runs that name it (`spec.pipelineRef`): the run takes a copy of
//! the pipeline it names, from the same submission or from those the caller knows (the
//! namespace's stored ones), and records its version; what cannot be resolved is refused at
//! the reference's field, and a Pipeline's own mistakes at its own paths.

use corral_api::document::{Document, parse_documents};
use corral_api::pipeline::Pipeline;
use corral_api::validate::ValidationContext;

const PIPELINE: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: Pipeline
metadata: {name: train-eval}
spec:
  parameters:
    - {name: lrs, type: list, default: [0.1]}
    - {name: epochs, type: int}
  steps:
    - name: train
      withParam: lrs
      inputs: {epochs: params.epochs}
      task: {command: [sh, -c, "echo $CORRAL_ITEM $CORRAL_INPUT_EPOCHS"]}
    - name: report
      dependsOn: [train]
      task: {command: [sh, -c, "echo done"]}
"#;

const RUN: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: r1}
spec:
  pipelineRef: {name: train-eval}
  params: {epochs: 3, lrs: [0.1, 0.2]}
"#;

fn parsed(text: &str, ctx: &ValidationContext) -> Vec<Document> {
    parse_documents(text, ctx)
        .into_iter()
        .map(|r| match r {
            Ok(p) => p.document,
            Err(e) => panic!("{e}"),
        })
        .collect()
}

fn errors(text: &str, ctx: &ValidationContext) -> Vec<String> {
    parse_documents(text, ctx)
        .into_iter()
        .filter_map(Result::err)
        .flat_map(|e| e.errors.0)
        .map(|f| format!("{}: {}", f.path, f.message))
        .collect()
}

fn stored(generation: i64) -> Pipeline {
    let docs = parsed(PIPELINE, &ValidationContext::default());
    let Some(Document::Pipeline(p)) = docs.into_iter().next() else {
        panic!("not a Pipeline");
    };
    let mut p = *p;
    p.metadata.generation = Some(generation);
    p
}

fn with_stored(generation: i64) -> ValidationContext {
    ValidationContext {
        pipelines: vec![stored(generation)],
        ..ValidationContext::default()
    }
}

#[test]
fn a_pipeline_without_a_default_for_every_parameter_is_valid() {
    let docs = parsed(PIPELINE, &ValidationContext::default());
    assert!(matches!(&docs[0], Document::Pipeline(p) if p.spec.steps.len() == 2));
}

#[test]
fn a_run_copies_the_stored_pipeline_it_names_and_records_its_version() {
    let docs = parsed(RUN, &with_stored(4));
    let Document::PipelineRun(run) = &docs[0] else {
        panic!("not a run");
    };
    assert_eq!(run.spec.pipeline_spec, stored(4).spec_filled(&[0.1, 0.2]));
    let r = run
        .spec
        .pipeline_ref
        .as_ref()
        .map(|r| (r.name.as_str(), r.generation));
    assert_eq!(r, Some(("train-eval", Some(4))));
    // The run's parameters are checked against the pipeline's: a missing one is required.
    let e = errors(&RUN.replace("epochs: 3, ", ""), &with_stored(4));
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.params.epochs: is required")),
        "{e:?}"
    );
}

#[test]
fn a_run_may_name_a_pipeline_of_the_same_submission() {
    let text = format!("{PIPELINE}---{RUN}");
    let docs = parsed(&text, &ValidationContext::default());
    let Document::PipelineRun(run) = &docs[1] else {
        panic!("not a run");
    };
    // A new version has no generation until it is stored.
    assert_eq!(
        run.spec.pipeline_ref.as_ref().map(|r| r.generation),
        Some(None)
    );
    assert_eq!(run.spec.pipeline_spec.steps[0].with_items.len(), 2);
    // It replaces a stored one of the same name.
    let changed = text.replace("echo done", "echo changed");
    let docs = parsed(&changed, &with_stored(4));
    let Document::PipelineRun(run) = &docs[1] else {
        panic!("not a run");
    };
    let report = &run.spec.pipeline_spec.steps[1];
    let command = report.task.as_ref().map(|t| t.command.join(" "));
    assert_eq!(command.as_deref(), Some("sh -c echo changed"));
}

#[test]
fn what_cannot_be_resolved_is_refused_at_the_reference() {
    let at = |text: &str, ctx: &ValidationContext, path: &str, words: &str| {
        let e = errors(text, ctx);
        assert!(
            e.iter().any(|m| m.starts_with(path) && m.contains(words)),
            "{path} {words}: {e:?}"
        );
    };
    at(
        RUN,
        &ValidationContext::default(),
        "spec.pipelineRef.name",
        "no Pipeline `train-eval` in this namespace; there is none",
    );
    at(
        &RUN.replace("name: train-eval", "name: train-evl"),
        &with_stored(1),
        "spec.pipelineRef.name",
        "there are: train-eval",
    );
    at(
        &RUN.replace("{name: train-eval}", "{name: train-eval, generation: 2}"),
        &with_stored(3),
        "spec.pipelineRef.generation",
        "has no generation 2; it keeps 3 (the current one is 3",
    );
    // The version it names is accepted.
    let pinned = RUN.replace("{name: train-eval}", "{name: train-eval, generation: 3}");
    assert!(errors(&pinned, &with_stored(3)).is_empty());
    // A run read back (with its copy) and submitted again: the copy must be the pipeline's.
    let inline = RUN.replace(
        "  params:",
        "  pipelineSpec:\n    steps:\n      - {name: other, task: {command: [\"true\"]}}\n  params:",
    );
    at(
        &inline,
        &with_stored(3),
        "spec.pipelineSpec",
        "differs from the version of Pipeline `train-eval` that spec.pipelineRef names",
    );
}

#[test]
fn a_pipelines_mistakes_are_refused_at_its_own_paths() {
    let cycle = PIPELINE.replace(
        "      withParam: lrs",
        "      withParam: lrs\n      dependsOn: [report]",
    );
    let e = errors(&cycle, &ValidationContext::default());
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.steps") && m.contains("cycle")),
        "{e:?}"
    );
    assert!(e.iter().all(|m| !m.contains("pipelineSpec")), "{e:?}");
    let typo = PIPELINE.replace("params.epochs", "params.epoch");
    let e = errors(&typo, &ValidationContext::default());
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.steps[0].inputs.epochs")),
        "{e:?}"
    );
    let generated = PIPELINE.replace("{name: train-eval}", "{generateName: train-}");
    let e = errors(&generated, &ValidationContext::default());
    assert!(
        e.iter().any(|m| m.starts_with("metadata.generateName")),
        "{e:?}"
    );
}

trait Filled {
    fn spec_filled(&self, items: &[f64]) -> corral_api::pipeline::PipelineSpec;
}

impl Filled for Pipeline {
    /// The pipeline's spec as a run with these `lrs` runs it (the fan-out filled).
    fn spec_filled(&self, items: &[f64]) -> corral_api::pipeline::PipelineSpec {
        let mut spec = self.spec.clone();
        spec.steps[0].with_items = items.iter().map(|&x| serde_json::json!(x)).collect();
        spec
    }
}

/// Earlier versions are kept: a run may name one, and gets that version's steps; without a
/// generation it gets the current one.
#[test]
fn a_run_may_name_an_earlier_version() {
    let mut old = stored(1);
    if let Some(t) = old.spec.steps[1].task.as_mut() {
        t.command = vec!["sh".into(), "-c".into(), "echo first".into()];
    }
    let ctx = ValidationContext {
        pipelines: vec![old, stored(2)],
        ..ValidationContext::default()
    };
    let command = |text: &str| {
        let docs = parsed(text, &ctx);
        let Document::PipelineRun(run) = &docs[0] else {
            panic!("not a run");
        };
        let generation = run.spec.pipeline_ref.as_ref().and_then(|r| r.generation);
        let step = &run.spec.pipeline_spec.steps[1];
        (generation, step.task.as_ref().map(|t| t.command.join(" ")))
    };
    assert_eq!(
        command(&RUN.replace("{name: train-eval}", "{name: train-eval, generation: 1}")),
        (Some(1), Some("sh -c echo first".to_string()))
    );
    assert_eq!(command(RUN), (Some(2), Some("sh -c echo done".to_string())));
    let e = errors(
        &RUN.replace("{name: train-eval}", "{name: train-eval, generation: 5}"),
        &ctx,
    );
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.pipelineRef.generation")
                && m.contains("it keeps 1, 2 (the current one is 2")),
        "{e:?}"
    );
}
