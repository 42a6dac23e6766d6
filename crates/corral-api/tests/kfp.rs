//! Kubeflow Pipelines v2 compiled YAML (tests/fixtures/kfp/two_steps.yaml and sweep.yaml,
//! written by the `kfp` package from two_steps.py and sweep.py; corral-local's
//! containers_e2e compiles them again and runs them) becomes a PipelineRun; what Corral
//! cannot run yet is refused at its field.

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
    let step = |n: &str| step_named(spec, n);
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
    // An output parameter is an output like an artifact.
    let output_param = TWO_STEPS.replace(
        "    outputDefinitions:\n      artifacts:\n        report:",
        "    outputDefinitions:\n      parameters:\n        n: {parameterType: NUMBER_INTEGER}\n      artifacts:\n        report:",
    );
    let e = errors(&output_param);
    assert!(e.is_empty(), "{e:?}");
}

const SWEEP: &str = include_str!("fixtures/kfp/sweep.yaml");

/// The step of that name, which must be there.
fn step_named<'a>(
    spec: &'a corral_api::pipeline::PipelineSpec,
    name: &str,
) -> &'a corral_api::pipeline::StepSpec {
    spec.steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no step {name}"))
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

/// `dsl.ParallelFor` of one task over a list parameter (sweep.py, compiled by kfp): a fan-out
/// step named after the task, its item `$(CORRAL_ITEM)`; `dsl.Collected` of its output: the
/// report reads every iteration's model (`$(CORRAL_INPUT_MODELS)`, a JSON list).
#[test]
fn a_parallel_for_is_a_fan_out_and_collected_outputs_are_read_as_a_list() {
    let run = the_run(SWEEP);
    let spec = &run.spec.pipeline_spec;
    let names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["train", "report"]);
    let train = &spec.steps[0];
    assert_eq!(train.with_param.as_deref(), Some("lrs"));
    assert_eq!(train.with_items.len(), 3, "filled from the default");
    assert_eq!(train.parallelism, Some(2));
    assert_eq!(
        train.task.as_ref().expect("task").args,
        ["$(CORRAL_ITEM)", "$(CORRAL_OUTPUT_MODEL)/model"]
    );
    let report = &spec.steps[1];
    assert_eq!(
        report.depends_on,
        ["train"],
        "for-loop-1 is named by its step"
    );
    assert_eq!(report.inputs["models"], "steps.train.outputs.model");
    assert_eq!(
        report.task.as_ref().expect("task").args,
        ["$(CORRAL_INPUT_MODELS)", "$(CORRAL_OUTPUT_SUMMARY)/summary"]
    );
    // A constant list (`dsl.ParallelFor(["a", "b"])`): the step's withItems.
    let raw = SWEEP.replace(
        "          items:\n            inputParameter: pipelinechannel--lrs\n",
        "          items:\n            raw: '[\"a\", \"b\"]'\n",
    );
    let run = the_run(&raw);
    let train = &run.spec.pipeline_spec.steps[0];
    assert_eq!(train.with_param, None);
    assert_eq!(
        train.with_items,
        [serde_json::json!("a"), serde_json::json!("b")]
    );
}

#[test]
fn what_a_loop_cannot_be_yet_is_refused_at_its_field() {
    let at = |text: &str, path: &str, words: &str| {
        let e = errors(text);
        assert!(
            e.iter().any(|m| m.starts_with(path) && m.contains(words)),
            "{path} {words}: {e:?}"
        );
    };
    // Two tasks in the loop's body.
    let two = SWEEP.replace(
        "      tasks:\n        train:\n",
        "      tasks:\n        other:\n          componentRef: {name: comp-train}\n          taskInfo: {name: other}\n        train:\n",
    );
    at(
        &two,
        "components.comp-for-loop-1.dag.tasks",
        "a dsl.ParallelFor of 2 tasks is not supported yet",
    );
    // The list read as one path.
    let path = SWEEP.replace(
        "'{{$.inputs.artifacts[''models'']}}'",
        "'{{$.inputs.artifacts[''models''].path}}'",
    );
    at(
        &path,
        "deploymentSpec.executors.exec-report.container.args[0]",
        "a loop's outputs, a list",
    );
    let over_artifacts = SWEEP.replace(
        "        parameterIterator:\n",
        "        artifactIterator: {}\n        parameterIterator:\n",
    );
    at(
        &over_artifacts,
        "root.dag.tasks.for-loop-1.artifactIterator",
        "over artifacts is not supported yet",
    );
}

const FAN: &str = include_str!("fixtures/kfp/fan.yaml");

/// Output parameters (fan.py, compiled by kfp): `plan` writes a list and a tag; a
/// ParallelFor over the list is a fan-out over plan's output; each iteration reads the tag's
/// text as its value.
#[test]
fn output_parameters_are_outputs_read_as_values_and_a_loop_can_run_over_one() {
    let run = the_run(FAN);
    let spec = &run.spec.pipeline_spec;
    let step = |n: &str| step_named(spec, n);
    assert_eq!(spec.steps.len(), 2);
    let plan = step("plan");
    assert_eq!(plan.outputs, ["shards", "tag"]);
    assert_eq!(
        plan.task.as_ref().expect("task").args,
        ["$(CORRAL_OUTPUT_SHARDS)/shards", "$(CORRAL_OUTPUT_TAG)/tag"]
    );
    let work = step("work");
    assert_eq!(
        work.with_param.as_deref(),
        Some("steps.plan.outputs.shards")
    );
    assert_eq!(work.inputs["tag"], "steps.plan.outputs.tag.value");
    assert_eq!(work.depends_on, ["plan"]);
    assert_eq!(
        work.task.as_ref().expect("task").args,
        [
            "$(CORRAL_ITEM)",
            "$(CORRAL_INPUT_TAG)",
            "$(CORRAL_OUTPUT_OUT)/out"
        ]
    );
}

const COND: &str = include_str!("fixtures/kfp/cond.yaml");

/// `dsl.If` of the root DAG (cond.py, compiled by kfp): each task of the condition's DAG is a
/// step under its condition, on another task's output parameter or a pipeline parameter;
/// what a condition cannot be yet is refused at its field.
#[test]
fn a_condition_is_a_when_on_each_of_its_tasks() {
    let run = the_run(COND);
    let spec = &run.spec.pipeline_spec;
    let step = |n: &str| step_named(spec, n);
    let heads = step("record");
    assert_eq!(heads.depends_on, ["flip"]);
    assert_eq!(heads.when.len(), 1);
    assert_eq!(heads.when[0].value, "steps.flip.outputs.side.value");
    assert_eq!(heads.when[0].equals.as_deref(), Some("heads"));
    let slow = step("record-2");
    assert_eq!(slow.when[0].value, "params.mode");
    assert_eq!(slow.when[0].equals.as_deref(), Some("slow"));
    let unsupported = COND.replace(
        "condition: inputs.parameter_values['pipelinechannel--mode'] == 'slow'",
        "condition: inputs.parameter_values['pipelinechannel--mode'] > 'slow'",
    );
    let e = errors(&unsupported);
    assert!(
        e.iter().any(
            |m| m.starts_with("root.dag.tasks.condition-2.triggerPolicy.condition: ")
                && m.contains("compares numbers")
        ),
        "{e:?}"
    );
    let either = COND.replace(
        "condition: inputs.parameter_values['pipelinechannel--mode'] == 'slow'",
        "condition: inputs.parameter_values['pipelinechannel--mode'] == 'slow' || true",
    );
    let e = errors(&either);
    assert!(
        e.iter().any(
            |m| m.starts_with("root.dag.tasks.condition-2.triggerPolicy.condition: ")
                && m.contains("is not a literal")
        ),
        "{e:?}"
    );
}

const BRANCHES: &str = include_str!("fixtures/kfp/branches.yaml");

/// `dsl.If` / `dsl.Elif` / `dsl.Else` on a number (branches.py, compiled by kfp): each
/// branch's tasks are steps under its comparison and the earlier branches' negated; an
/// integer parameter compares as a number.
#[test]
fn if_elif_else_are_comparisons_and_the_earlier_branches_negated() {
    let run = the_run(BRANCHES);
    let spec = &run.spec.pipeline_spec;
    let value = "steps.score.outputs.value.value";
    let when = |n: &str| {
        let s = step_named(spec, n);
        assert_eq!(s.depends_on, ["score"], "{n}");
        assert!(s.when.iter().all(|w| w.value == value), "{n}: {:?}", s.when);
        s.when
            .iter()
            .map(|w| {
                (
                    w.greater_than,
                    w.less_than_or_equal,
                    w.equals.clone(),
                    w.not_equals.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(when("grade"), [(Some(0.5), None, None, None)]);
    assert_eq!(
        when("grade-2"),
        [(None, Some(0.5), None, None), (Some(0.2), None, None, None)]
    );
    assert_eq!(
        when("grade-3"),
        [(None, Some(0.5), None, None), (None, Some(0.2), None, None)]
    );
    let long = step_named(spec, "grade-4");
    assert_eq!(long.when.len(), 1);
    assert_eq!(long.when[0].value, "params.epochs");
    assert_eq!(long.when[0].greater_than_or_equal, Some(2.0));
}

const EXIT_HANDLER: &str = include_str!("fixtures/kfp/exit_handler.yaml");

/// `dsl.ExitHandler` (exit_handler.py, compiled by kfp): the tasks of its group are steps
/// as they are, and its exit task is the run's `onExit`, reading the run's final status
/// (`dsl.PipelineTaskFinalStatus`) from `$(CORRAL_RUN_STATUS)`.
#[test]
fn an_exit_handler_is_the_runs_on_exit_and_reads_its_final_status() {
    let run = the_run(EXIT_HANDLER);
    let spec = &run.spec.pipeline_spec;
    let names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["check", "produce"]);
    let check = step_named(spec, "check");
    assert_eq!(check.depends_on, ["produce"]);
    assert_eq!(check.inputs["fail"], "params.fail");
    assert_eq!(check.inputs["data"], "steps.produce.outputs.data");
    let exit = spec.on_exit.as_deref().expect("onExit");
    assert_eq!(exit.name, "report");
    assert!(exit.depends_on.is_empty(), "{exit:?}");
    assert_eq!(exit.outputs, ["note"]);
    let task = exit.task.as_ref().expect("task");
    assert_eq!(task.args[0], "$(CORRAL_RUN_STATUS)");
    assert_eq!(task.args[1], "$(CORRAL_OUTPUT_NOTE)/note");

    // An exit task that names something other than one group is refused at that field.
    let not_a_group = EXIT_HANDLER.replace(
        "        dependentTasks:\n        - exit-handler-1\n",
        "        dependentTasks:\n        - nowhere\n",
    );
    let e = errors(&not_a_group);
    assert!(
        e.iter()
            .any(|m| m.starts_with("root.dag.tasks.report.dependentTasks: ")
                && m.contains("`nowhere`")),
        "{e:?}"
    );
    // The final status is the exit task's to read, no other task's.
    let elsewhere = EXIT_HANDLER.replace(
        "              fail:\n                componentInputParameter: pipelinechannel--fail\n",
        "              fail:\n                taskFinalStatus:\n                  producerTask: exit-handler-1\n",
    );
    let e = errors(&elsewhere);
    assert!(
        e.iter().any(|m| m.starts_with(
            "components.comp-exit-handler-1.dag.tasks.check.inputs.parameters.fail: "
        )),
        "{e:?}"
    );
}

const EXIT_NESTED: &str = include_str!("fixtures/kfp/exit_nested.yaml");

/// An exit handler around a loop and a condition (exit_nested.py, compiled by kfp): its
/// group is hoisted, so the loop and the condition are steps as at the root, reading the
/// pipeline's parameters through the group's inputs.
#[test]
fn an_exit_handler_may_hold_loops_and_conditions() {
    let run = the_run(EXIT_NESTED);
    let spec = &run.spec.pipeline_spec;
    let mut names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["check", "produce", "say"]);
    let say = step_named(spec, "say");
    assert_eq!(say.with_param.as_deref(), Some("words"));
    assert_eq!(say.parallelism, Some(1));
    let check = step_named(spec, "check");
    assert_eq!(check.when.len(), 1);
    assert_eq!(check.when[0].value, "params.mode");
    assert_eq!(check.when[0].equals.as_deref(), Some("fast"));
    assert_eq!(check.inputs["data"], "steps.produce.outputs.data");
    assert_eq!(check.depends_on, ["produce"]);
    let exit = spec.on_exit.as_deref().expect("onExit");
    assert_eq!(exit.name, "report");
    // Where a hoisted task is written is where a message about it points.
    let bad = EXIT_NESTED.replace(
        "condition: inputs.parameter_values['pipelinechannel--mode'] == 'fast'",
        "condition: inputs.parameter_values['pipelinechannel--mode'] > 'fast'",
    );
    let e = errors(&bad);
    assert!(
        e.iter().any(|m| m.starts_with(
            "components.comp-exit-handler-1.dag.tasks.condition-3.triggerPolicy.condition: "
        )),
        "{e:?}"
    );
}

const NESTED: &str = include_str!("fixtures/kfp/nested_conditions.yaml");

/// Conditions inside conditions (nested_conditions.py, compiled by kfp): each inner task is
/// a step under every condition around it, an Else inside an If too.
#[test]
fn a_condition_inside_a_condition_is_under_both() {
    let run = the_run(NESTED);
    let spec = &run.spec.pipeline_spec;
    let conditions = |n: &str| {
        let s = step_named(spec, n);
        let mut c: Vec<String> = s
            .when
            .iter()
            .map(|w| {
                let cmp = match w.comparisons().first() {
                    Some(c) => format!("{c:?}"),
                    None => "none".into(),
                };
                format!("{} {cmp}", w.value)
            })
            .collect();
        c.sort();
        c
    };
    let full = "params.mode Equals(\"full\")";
    let score = "steps.score.outputs.value.value";
    assert_eq!(conditions("grade"), [full]);
    assert_eq!(
        conditions("grade-2"),
        [full.to_string(), format!("{score} GreaterThan(0.2)")]
    );
    assert_eq!(
        conditions("grade-3"),
        [
            full.to_string(),
            format!("{score} GreaterThan(0.2)"),
            format!("{score} LessThan(0.25)")
        ]
    );
    assert_eq!(
        conditions("grade-4"),
        [full.to_string(), format!("{score} GreaterThan(0.5)")]
    );
    assert_eq!(
        conditions("grade-5"),
        [full.to_string(), format!("{score} LessThanOrEqual(0.5)")]
    );
    for n in ["grade-2", "grade-3", "grade-4", "grade-5"] {
        assert_eq!(step_named(spec, n).depends_on, ["score"], "{n}");
    }
}

const LOOP_IN_CONDITION: &str = include_str!("fixtures/kfp/loop_in_condition.yaml");

/// A loop inside a condition is refused at the loop's component, not run once.
#[test]
fn a_loop_inside_a_condition_is_refused_at_the_loop() {
    let e = errors(LOOP_IN_CONDITION);
    assert!(
        e.iter().any(|m| m.starts_with("components.comp-for-loop-")
            && m.contains("a loop inside a loop or condition")),
        "{e:?}"
    );
}
