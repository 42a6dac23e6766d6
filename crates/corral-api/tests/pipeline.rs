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

const FAN_OUT: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: r2}
spec:
  pipelineSpec:
    steps:
      - name: shard
        withItems: [a, b, 3]
        parallelism: 2
        outputs: [part]
        task: {command: [sh, -c, "echo $CORRAL_ITEM"]}
      - name: merge
        dependsOn: [shard]
        task: {command: ["true"]}
"#;

#[test]
fn a_fan_out_parses_and_expands_into_its_iterations() {
    let parsed = parse_documents(FAN_OUT, &ValidationContext::default());
    let Ok(p) = &parsed[0] else {
        panic!("{parsed:?}");
    };
    let Document::PipelineRun(run) = &p.document else {
        panic!("not a run");
    };
    let spec = run.spec.pipeline_spec.expanded();
    let names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["shard-0", "shard-1", "shard-2", "merge"]);
    assert_eq!(spec.steps[3].depends_on, ["shard-0", "shard-1", "shard-2"]);
    let item = |i: usize| {
        let env = &spec.steps[i].task.as_ref().expect("task").env;
        env.iter()
            .find(|e| e.name == "CORRAL_ITEM")
            .and_then(|e| e.value.clone())
    };
    assert_eq!(item(0).as_deref(), Some("a"));
    assert_eq!(
        item(2).as_deref(),
        Some("3"),
        "a non-string item as JSON text"
    );
    assert_eq!(run.spec.pipeline_spec.step_count(), 4);
}

#[test]
fn a_step_reading_a_fan_outs_output_needs_every_iteration() {
    let reads = FAN_OUT.replace(
        "dependsOn: [shard]",
        "inputs: {parts: steps.shard.outputs.part}",
    );
    let parsed = parse_documents(&reads, &ValidationContext::default());
    let Ok(p) = &parsed[0] else {
        panic!("{parsed:?}");
    };
    let Document::PipelineRun(run) = &p.document else {
        panic!("not a run");
    };
    let spec = run.spec.pipeline_spec.expanded();
    assert_eq!(spec.steps[3].depends_on, ["shard-0", "shard-1", "shard-2"]);
    let order: Vec<&str> = spec
        .topological_order()
        .unwrap_or_default()
        .into_iter()
        .map(|i| spec.steps[i].name.as_str())
        .collect();
    assert_eq!(order.last(), Some(&"merge"));
    let iterations: Vec<&str> = spec
        .iterations_of("shard")
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(iterations, ["shard-0", "shard-1", "shard-2"]);
}

#[test]
fn fan_out_mistakes_are_refused_at_their_fields() {
    // A condition compares one value, and a fan-out has one per item.
    let reads = FAN_OUT.replace(
        "dependsOn: [shard]",
        "when: [{value: steps.shard.outputs.part, equals: x}]",
    );
    let e = errors(&reads);
    assert!(
        e.iter().any(
            |m| m.starts_with("spec.pipelineSpec.steps[1].when[0].value: ")
                && m.contains("fan-out step `shard`")
        ),
        "{e:?}"
    );
    let bound_alone = FAN_OUT.replace(
        "dependsOn: [shard]",
        "dependsOn: [shard]\n        parallelism: 2",
    );
    let e = errors(&bound_alone);
    assert!(
        e.iter().any(
            |m| m.starts_with("spec.pipelineSpec.steps[1].parallelism: ")
                && m.contains("withItems")
        ),
        "{e:?}"
    );
    let taken = FAN_OUT.replace("name: merge", "name: shard-1");
    let e = errors(&taken);
    assert!(
        e.iter()
            .any(|m| m.starts_with("spec.pipelineSpec.steps[0].name: ") && m.contains("`shard-1`")),
        "{e:?}"
    );
    let zero = FAN_OUT.replace("parallelism: 2", "parallelism: 0");
    assert!(
        errors(&zero)
            .iter()
            .any(|m| m.starts_with("spec.pipelineSpec.steps[0].parallelism: ")),
        "{:?}",
        errors(&zero)
    );
    let too_many = FAN_OUT.replace(
        "withItems: [a, b, 3]",
        &format!("withItems: [{}]", vec!["x"; 1001].join(", ")),
    );
    assert!(
        errors(&too_many)
            .iter()
            .any(|m| m.starts_with("spec.pipelineSpec.steps[0].withItems: ") && m.contains("1000")),
        "{:?}",
        errors(&too_many)
    );
}

/// A fan-out over a list parameter: the run's value (else the default) gives the items.
const OVER_PARAM: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: sweep}
spec:
  params: {lrs: [0.1, 0.01, 0.001]}
  pipelineSpec:
    parameters:
      - {name: lrs, type: list, default: [0.5]}
      - {name: tag, type: string, default: a}
    steps:
      - name: train
        withParam: lrs
        task: {command: [sh, -c, "echo $CORRAL_ITEM"]}
"#;

/// `text` is refused with a message at `path` that says `words`.
fn refused_at(text: &str, path: &str, words: &str) {
    let e = errors(text);
    assert!(
        e.iter().any(|m| m.starts_with(path) && m.contains(words)),
        "{path} {words}: {e:?}"
    );
}

fn the_run(text: &str) -> corral_api::PipelineRun {
    let parsed = parse_documents(text, &ValidationContext::default());
    let Ok(p) = &parsed[0] else {
        panic!("{parsed:?}");
    };
    let Document::PipelineRun(run) = &p.document else {
        panic!("not a run");
    };
    (**run).clone()
}

#[test]
fn a_fan_out_over_a_list_parameter_takes_the_runs_value() {
    let run = the_run(OVER_PARAM);
    let step = &run.spec.pipeline_spec.steps[0];
    assert_eq!(
        step.with_items,
        serde_json::json!([0.1, 0.01, 0.001])
            .as_array()
            .cloned()
            .unwrap_or_default()
    );
    assert_eq!(step.with_param.as_deref(), Some("lrs"));
    let names: Vec<String> = run
        .spec
        .pipeline_spec
        .expanded()
        .steps
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(names, ["train-0", "train-1", "train-2"]);
    // Without a value in the run: the default.
    let run = the_run(&OVER_PARAM.replace("  params: {lrs: [0.1, 0.01, 0.001]}\n", ""));
    assert_eq!(
        run.spec.pipeline_spec.steps[0].with_items,
        vec![serde_json::json!(0.5)]
    );
}

#[test]
fn fan_out_over_a_parameter_mistakes_are_refused_at_their_fields() {
    let at = refused_at;
    at(
        &OVER_PARAM.replace("withParam: lrs", "withParam: lr"),
        "spec.pipelineSpec.steps[0].withParam: ",
        "lrs",
    );
    at(
        &OVER_PARAM.replace("withParam: lrs", "withParam: tag"),
        "spec.pipelineSpec.steps[0].withParam: ",
        "of type string",
    );
    at(
        &OVER_PARAM.replace("[0.1, 0.01, 0.001]", "[]"),
        "spec.pipelineSpec.steps[0].withParam: ",
        "empty list",
    );
    // Said once, at withParam: not again as a parallelism without a fan-out.
    let e = errors(
        &OVER_PARAM
            .replace("[0.1, 0.01, 0.001]", "[]")
            .replace("withParam: lrs", "withParam: lrs\n        parallelism: 2"),
    );
    assert_eq!(e.len(), 1, "{e:?}");
    at(
        &OVER_PARAM.replace("withParam: lrs", "withParam: lrs\n        withItems: [x]"),
        "spec.pipelineSpec.steps[0].withItems: ",
        "not both",
    );
    at(
        &OVER_PARAM.replace("{lrs: [0.1, 0.01, 0.001]}", "{lrs: 0.1}"),
        "spec.params.lrs: ",
        "not of type list",
    );
}

/// A fan-out over an earlier step's output (`withParam: steps.<step>.outputs.<output>`): the
/// step needs the one it reads; what it names must exist and be one list.
#[test]
fn a_fan_out_over_a_steps_output_is_checked_at_its_field() {
    const OVER_OUTPUT: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: dyn}
spec:
  pipelineSpec:
    steps:
      - name: plan
        outputs: [shards]
        task: {command: [sh, -c, "echo '[1, 2]' > $CORRAL_OUTPUT_SHARDS/list.json"]}
      - name: shard
        withParam: steps.plan.outputs.shards
        task: {command: [sh, -c, "echo $CORRAL_ITEM"]}
"#;
    let run = the_run(OVER_OUTPUT);
    let shard = &run.spec.pipeline_spec.steps[1];
    assert_eq!(shard.needs(), ["plan"]);
    assert!(shard.with_items.is_empty(), "its items come when plan ends");
    let at = refused_at;
    at(
        &OVER_OUTPUT.replace("steps.plan.outputs.shards", "steps.plam.outputs.shards"),
        "spec.pipelineSpec.steps[1].withParam",
        "plam",
    );
    at(
        &OVER_OUTPUT.replace("steps.plan.outputs.shards", "steps.plan.outputs.shard"),
        "spec.pipelineSpec.steps[1].withParam",
        "has no output `shard`",
    );
    at(
        &OVER_OUTPUT.replace(
            "        withParam: steps.plan.outputs.shards",
            "        withParam: steps.plan.outputs.shards\n        withItems: [1]",
        ),
        "spec.pipelineSpec.steps[1].withItems",
        "not both",
    );
    at(
        &OVER_OUTPUT.replace(
            "        outputs: [shards]",
            "        outputs: [shards]\n        withItems: [a, b]",
        ),
        "spec.pipelineSpec.steps[1].withParam",
        "is a fan-out",
    );
}

/// `steps.<step>.outputs.<output>.value`: the text of that output's one file, as a value; the
/// reader needs the step; not of a fan-out (one file per item), nor in the exit handler.
#[test]
fn a_value_read_from_an_output_is_checked_at_its_field() {
    const VALUE: &str = r#"
apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: val}
spec:
  pipelineSpec:
    steps:
      - name: make
        outputs: [n]
        task: {command: [sh, -c, "echo 3 > $CORRAL_OUTPUT_N/n"]}
      - name: use
        inputs: {n: steps.make.outputs.n.value}
        task: {command: [sh, -c, "test $CORRAL_INPUT_N = 3"]}
"#;
    let run = the_run(VALUE);
    assert_eq!(run.spec.pipeline_spec.steps[1].needs(), ["make"]);
    let at = refused_at;
    at(
        &VALUE.replace("outputs.n.value", "outputs.m.value"),
        "spec.pipelineSpec.steps[1].inputs.n",
        "has no output `m`",
    );
    at(
        &VALUE.replace(
            "        outputs: [n]",
            "        outputs: [n]\n        withItems: [1, 2]",
        ),
        "spec.pipelineSpec.steps[1].inputs.n",
        "fan-out step `make`",
    );
    at(
        &VALUE.replace(
            "    steps:",
            "    onExit: {name: bye, inputs: {n: steps.make.outputs.n.value}, task: {command: ['true']}}\n    steps:",
        ),
        "spec.pipelineSpec.onExit.inputs.n",
        "by path",
    );
}
