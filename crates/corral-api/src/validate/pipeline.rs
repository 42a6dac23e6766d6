//! A PipelineRun as written: its steps form a DAG (no cycle, every reference to a step,
//! output or parameter exists), its parameters have their declared types, and each step's
//! job is a valid TrainingJob of the cluster (checked as [`step_job`] builds it).

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};

use super::names::check_meta;
use super::{ValidationContext, ValidationErrors, check_dns1035_label, unknown_name};
use crate::pipeline::{
    GENERATED_SUFFIX_LEN, ParameterType, Pipeline, PipelineRun, PipelineRunSpec, Reference,
    StepSpec, iteration_name, step_job, step_job_name,
};
use crate::training_job::TrainingJob;
use crate::validate::validate_training_job;

const STEPS: &str = "spec.pipelineSpec.steps";

/// Names of parameters, inputs and outputs: they become environment variable names.
fn check_identifier(path: &str, name: &str, errs: &mut ValidationErrors) {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        errs.push(
            path,
            format!(
                "`{name}` is not a valid name: lowercase letters, digits and `_`, starting \
                 with a letter or `_` (it becomes an environment variable's name)"
            ),
        );
    }
}

pub fn validate_pipeline_run(
    run: &PipelineRun,
    ctx: &ValidationContext,
) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    // With `generateName`, the longest name the server may give it stands for the name.
    let mut meta = run.metadata.clone();
    match (meta.name.is_empty(), meta.generate_name.take()) {
        (true, Some(prefix)) => {
            meta.name = format!("{prefix}{}", "x".repeat(GENERATED_SUFFIX_LEN));
            if let Err(e) = check_dns1035_label(&meta.name) {
                errs.push(
                    "metadata.generateName",
                    format!("with the 5 characters the server appends: {e}"),
                );
            }
        }
        (false, Some(_)) => errs.push(
            "metadata.generateName",
            "give metadata.name or metadata.generateName, not both",
        ),
        _ => {}
    }
    if errs.is_empty() {
        check_meta(&meta, true, &mut errs);
    }
    let run = &PipelineRun {
        metadata: meta,
        ..run.clone()
    };
    let spec = &run.spec.pipeline_spec;
    check_parameters(run, &mut errs);
    if spec.parallelism == Some(0) {
        errs.push(
            "spec.pipelineSpec.parallelism",
            "must be at least 1 (leave it out for no bound)",
        );
    }
    if spec.steps.is_empty() {
        errs.push(STEPS, "needs at least one step");
    }
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, step) in spec.steps.iter().enumerate() {
        let path = format!("{STEPS}[{i}].name");
        if index.insert(step.name.as_str(), i).is_some() {
            errs.push(&path, format!("`{}` names two steps", step.name));
        }
        if let Err(e) = check_dns1035_label(&step.name) {
            errs.push(&path, e);
        } else if !run.metadata.name.is_empty()
            && let Err(e) = check_dns1035_label(&step_job_name(&run.metadata.name, &step.name))
        {
            errs.push(&path, format!("the step's job `<run>-<step>`: {e}"));
        }
    }
    let params: BTreeSet<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
    for (i, step) in spec.steps.iter().enumerate() {
        let path = format!("{STEPS}[{i}]");
        check_step(run, &path, step, &index, &params, ctx, &mut errs);
    }
    if let Some(exit) = &spec.on_exit {
        let path = "spec.pipelineSpec.onExit";
        if index.contains_key(exit.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!(
                    "`{}` names a step too; give the exit handler a name of its own",
                    exit.name
                ),
            );
        }
        if let Err(e) = check_dns1035_label(&exit.name) {
            errs.push(format!("{path}.name"), e);
        } else if !run.metadata.name.is_empty()
            && let Err(e) = check_dns1035_label(&step_job_name(&run.metadata.name, &exit.name))
        {
            errs.push(
                format!("{path}.name"),
                format!("the exit handler's job `<run>-<name>`: {e}"),
            );
        }
        if !exit.depends_on.is_empty() {
            errs.push(
                format!("{path}.dependsOn"),
                "the exit handler runs after every step; remove dependsOn",
            );
        }
        for (k, r) in &exit.inputs {
            if matches!(Reference::parse(r), Ok(Reference::Value { .. })) {
                errs.push(
                    format!("{path}.inputs.{k}"),
                    "the exit handler reads artifacts by path; read `steps.<step>.outputs.<output>`",
                );
            }
        }
        if exit.cache.as_ref().is_some_and(|c| c.enabled) {
            errs.push(
                format!("{path}.cache"),
                "the exit handler always runs; remove cache",
            );
        }
        check_step(run, path, exit, &index, &params, ctx, &mut errs);
    }
    check_fan_outs(run, &index, &mut errs);
    if errs.is_empty() {
        check_acyclic(&spec.steps, &index, &mut errs);
    }
    errs.into_result()
}

/// A stored Pipeline: its DAG checked as a run of it would be (named as the pipeline,
/// with no parameter given: one without a default is for each run to give), its errors
/// at the Pipeline's own paths (`spec.steps[0]...`).
pub fn validate_pipeline(p: &Pipeline, ctx: &ValidationContext) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    if p.metadata.generate_name.is_some() {
        errs.push(
            "metadata.generateName",
            "a Pipeline is named by its runs: give metadata.name",
        );
    }
    let mut run = PipelineRun {
        api_version: p.api_version.clone(),
        kind: "PipelineRun".into(),
        metadata: crate::meta::ObjectMeta {
            generate_name: None,
            ..p.metadata.clone()
        },
        spec: PipelineRunSpec {
            pipeline_spec: p.spec.clone(),
            pipeline_ref: None,
            params: Default::default(),
        },
        status: None,
    };
    // Each parameter without a default as a run would give it (so that the checks that
    // follow a missing value, a cycle's among them, still run), and a fan-out over a
    // parameter filled as a run's is.
    for param in p.spec.parameters.iter().filter(|p| p.default.is_none()) {
        let placeholder = match param.type_ {
            ParameterType::String => serde_json::json!(""),
            ParameterType::Int | ParameterType::Float => serde_json::json!(0),
            ParameterType::Bool => serde_json::json!(false),
            ParameterType::List => serde_json::json!([""]),
        };
        run.spec.params.insert(param.name.clone(), placeholder);
    }
    run.spec.fill_param_items();
    if let Err(e) = validate_pipeline_run(&run, ctx) {
        for f in e.0 {
            if f.path.starts_with("spec.params.") {
                continue;
            }
            let path = match f.path.strip_prefix("spec.pipelineSpec") {
                Some(rest) => format!("spec{rest}"),
                None => f.path,
            };
            errs.push(path, f.message);
        }
    }
    errs.into_result()
}

/// Iterations of one fan-out step at most: each is a job of its own.
pub const MAX_ITEMS: usize = 1000;

/// `withParam`: a declared `list` parameter whose value (the run's, else its default) has
/// items, and no `withItems` of the step's own besides (the items were filled from it at
/// submit: [`crate::pipeline::PipelineRunSpec::fill_param_items`]).
fn check_with_param(
    run: &PipelineRun,
    step: &StepSpec,
    name: &str,
    path: &str,
    errs: &mut ValidationErrors,
) {
    let spec = &run.spec.pipeline_spec;
    let Some(param) = spec.parameters.iter().find(|p| p.name == name) else {
        let known: Vec<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
        errs.push(
            format!("{path}.withParam"),
            unknown_name("parameter", name, &known),
        );
        return;
    };
    if param.type_ != ParameterType::List {
        errs.push(
            format!("{path}.withParam"),
            format!(
                "parameter `{name}` is of type {}; a fan-out iterates over a list parameter",
                param.type_.as_str()
            ),
        );
        return;
    }
    match run.spec.params.get(name).or(param.default.as_ref()) {
        Some(serde_json::Value::Array(items)) if items.is_empty() => errs.push(
            format!("{path}.withParam"),
            format!("parameter `{name}` is an empty list; a fan-out needs at least one item"),
        ),
        Some(serde_json::Value::Array(items)) if *items != step.with_items => errs.push(
            format!("{path}.withItems"),
            "give withItems or withParam, not both",
        ),
        // A missing or mistyped value is said at spec.params.
        _ => {}
    }
}

/// `withItems` and a step's `parallelism`: a bounded list, iteration names that are free
/// and valid, and no condition on a fan-out step's outputs (which iteration's would it be?).
fn check_fan_outs(run: &PipelineRun, index: &BTreeMap<&str, usize>, errs: &mut ValidationErrors) {
    let spec = &run.spec.pipeline_spec;
    let params: BTreeSet<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
    for (i, step) in spec.steps.iter().enumerate() {
        let path = format!("{STEPS}[{i}]");
        if let Some(name) = &step.with_param {
            match step.fan_out_source() {
                // Over an earlier step's output: read once that step has ended.
                Some((source, _)) => {
                    let at = format!("{path}.withParam");
                    check_reference(&at, name, &step.name, &spec.steps, index, &params, errs);
                    if index
                        .get(source.as_str())
                        .is_some_and(|&j| !spec.steps[j].with_items.is_empty())
                    {
                        errs.push(
                            at,
                            format!(
                                "step `{source}` is a fan-out, with one output per item; a \
                                 fan-out iterates over one list"
                            ),
                        );
                    }
                    if !step.with_items.is_empty() {
                        errs.push(
                            format!("{path}.withItems"),
                            "give withItems or withParam, not both",
                        );
                    }
                }
                None => check_with_param(run, step, name, &path, errs),
            }
        }
        if step.with_items.is_empty() {
            // A fan-out over a parameter without items is said at withParam, once.
            if step.parallelism.is_some() && step.with_param.is_none() {
                errs.push(
                    format!("{path}.parallelism"),
                    "only a fan-out step (withItems) takes parallelism; the run's bound is \
                     spec.pipelineSpec.parallelism",
                );
            }
            continue;
        }
        if step.with_items.len() > MAX_ITEMS {
            errs.push(
                format!("{path}.withItems"),
                format!(
                    "has {} items; at most {MAX_ITEMS} (each item is a job of its own)",
                    step.with_items.len()
                ),
            );
            continue;
        }
        if step.parallelism == Some(0) {
            errs.push(
                format!("{path}.parallelism"),
                "must be at least 1 (leave it out for no bound)",
            );
        }
        for n in 0..step.with_items.len() {
            let name = iteration_name(&step.name, n);
            if index.contains_key(name.as_str()) {
                errs.push(
                    format!("{path}.name"),
                    format!("its iteration {n} would be named `{name}`, the name of another step"),
                );
            }
        }
        let last = iteration_name(&step.name, step.with_items.len() - 1);
        if !run.metadata.name.is_empty()
            && let Err(e) = check_dns1035_label(&step_job_name(&run.metadata.name, &last))
        {
            errs.push(
                format!("{path}.name"),
                format!("the job of its last iteration `<run>-<step>-<index>`: {e}"),
            );
        }
    }
    if spec
        .on_exit
        .as_ref()
        .is_some_and(|e| !e.with_items.is_empty() || e.with_param.is_some())
    {
        errs.push(
            "spec.pipelineSpec.onExit.withItems",
            "the exit handler runs once; remove withItems (withParam)",
        );
    }
    let fan_out = |name: &str| {
        index.get(name).is_some_and(|&j| {
            !spec.steps[j].with_items.is_empty() || spec.steps[j].with_param.is_some()
        })
    };
    let readers = spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("{STEPS}[{i}]"), s))
        .chain(
            spec.on_exit
                .as_deref()
                .map(|s| ("spec.pipelineSpec.onExit".to_string(), s)),
        );
    // An input may read a fan-out's outputs (collected); a condition, or a value, is one.
    for (path, step) in readers {
        let values = step
            .inputs
            .iter()
            .map(|(k, r)| (format!("{path}.inputs.{k}"), r))
            .filter(|(_, r)| matches!(Reference::parse(r), Ok(Reference::Value { .. })));
        let refs = step
            .when
            .iter()
            .enumerate()
            .map(|(w, c)| (format!("{path}.when[{w}].value"), &c.value))
            .chain(values);
        for (at, r) in refs {
            let read = Reference::parse(r).ok();
            if let Some(s) = read.as_ref().and_then(Reference::step)
                && fan_out(s)
            {
                errs.push(
                    at,
                    format!(
                        "`{r}` reads an output of fan-out step `{s}`, which has one per item, \
                         as one value; read them as an input by path (a JSON list of the \
                         iterations' directories) and decide in the step"
                    ),
                );
            }
        }
    }
}

fn check_parameters(run: &PipelineRun, errs: &mut ValidationErrors) {
    let spec = &run.spec.pipeline_spec;
    let mut seen = BTreeSet::new();
    for (i, p) in spec.parameters.iter().enumerate() {
        let path = format!("spec.pipelineSpec.parameters[{i}]");
        check_identifier(&format!("{path}.name"), &p.name, errs);
        if !seen.insert(p.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!("`{}` is declared twice", p.name),
            );
        }
        if let Some(d) = &p.default
            && !p.type_.admits(d)
        {
            errs.push(
                format!("{path}.default"),
                format!("`{d}` is not of type {}", p.type_.as_str()),
            );
        }
        match run.spec.params.get(&p.name) {
            Some(v) if !p.type_.admits(v) => errs.push(
                format!("spec.params.{}", p.name),
                format!(
                    "`{v}` is not of type {} (parameter `{}`)",
                    p.type_.as_str(),
                    p.name
                ),
            ),
            None if p.default.is_none() => errs.push(
                format!("spec.params.{}", p.name),
                format!("is required: parameter `{}` has no default", p.name),
            ),
            _ => {}
        }
    }
    let known: Vec<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
    for name in run.spec.params.keys() {
        if !known.contains(&name.as_str()) {
            errs.push(
                format!("spec.params.{name}"),
                unknown_name("parameter", name, &known),
            );
        }
    }
}

fn check_reference(
    path: &str,
    text: &str,
    me: &str,
    steps: &[StepSpec],
    index: &BTreeMap<&str, usize>,
    params: &BTreeSet<&str>,
    errs: &mut ValidationErrors,
) {
    match Reference::parse(text) {
        Err(e) => errs.push(path, e),
        Ok(Reference::Param(p)) => {
            if !params.contains(p.as_str()) {
                let known: Vec<&str> = params.iter().copied().collect();
                errs.push(path, unknown_name("parameter", &p, &known));
            }
        }
        Ok(Reference::Artifact { step, output } | Reference::Value { step, output }) => {
            match index.get(step.as_str()) {
                None => {
                    let known: Vec<&str> = index.keys().copied().collect();
                    errs.push(path, unknown_name("step", &step, &known));
                }
                Some(_) if step == me => errs.push(path, "a step cannot read its own outputs"),
                Some(&j) => {
                    let outs: Vec<&str> = steps[j].outputs.iter().map(String::as_str).collect();
                    if !outs.contains(&output.as_str()) {
                        let hint = crate::suggest::did_you_mean(&output, outs.iter().copied())
                            .map(|m| format!("did you mean `{m}`? "))
                            .unwrap_or_default();
                        let known = if outs.is_empty() {
                            "it has none".to_string()
                        } else {
                            format!("its outputs: {}", outs.join(", "))
                        };
                        errs.push(
                            path,
                            format!("step `{step}` has no output `{output}`; {hint}{known}"),
                        );
                    }
                }
            }
        }
    }
}

fn check_step(
    run: &PipelineRun,
    path: &str,
    step: &StepSpec,
    index: &BTreeMap<&str, usize>,
    params: &BTreeSet<&str>,
    ctx: &ValidationContext,
    errs: &mut ValidationErrors,
) {
    let steps = &run.spec.pipeline_spec.steps;
    let body = match (&step.job, &step.task) {
        (Some(_), None) => "job",
        (None, Some(_)) => "task",
        (Some(_), Some(_)) => {
            errs.push(path, "has both `job` and `task`; give one");
            return;
        }
        (None, None) => {
            errs.push(
                path,
                "needs `job` (a TrainingJob spec) or `task` (one replica: command, image or python)",
            );
            return;
        }
    };
    for (j, d) in step.depends_on.iter().enumerate() {
        let p = format!("{path}.dependsOn[{j}]");
        if d == &step.name {
            errs.push(&p, "a step cannot depend on itself");
        } else if !index.contains_key(d.as_str()) {
            let known: Vec<&str> = index.keys().copied().collect();
            errs.push(&p, unknown_name("step", d, &known));
        }
    }
    for (name, r) in &step.inputs {
        check_identifier(&format!("{path}.inputs.{name}"), name, errs);
        check_reference(
            &format!("{path}.inputs.{name}"),
            r,
            &step.name,
            steps,
            index,
            params,
            errs,
        );
    }
    let mut outs = BTreeSet::new();
    for (j, o) in step.outputs.iter().enumerate() {
        check_identifier(&format!("{path}.outputs[{j}]"), o, errs);
        if !outs.insert(o) {
            errs.push(
                format!("{path}.outputs[{j}]"),
                format!("`{o}` is named twice"),
            );
        }
    }
    for (j, w) in step.when.iter().enumerate() {
        let p = format!("{path}.when[{j}]");
        check_reference(
            &format!("{p}.value"),
            &w.value,
            &step.name,
            steps,
            index,
            params,
            errs,
        );
        let comparisons = w.comparisons();
        if comparisons.len() != 1 {
            errs.push(
                &p,
                format!("needs exactly one of {}", crate::pipeline::COMPARISONS),
            );
        }
        for (field, bound) in [
            ("greaterThan", w.greater_than),
            ("greaterThanOrEqual", w.greater_than_or_equal),
            ("lessThan", w.less_than),
            ("lessThanOrEqual", w.less_than_or_equal),
        ] {
            if bound.is_some_and(|b| !b.is_finite()) {
                errs.push(format!("{p}.{field}"), "must be a finite number");
            }
        }
    }
    if let Some(c) = &step.cache
        && c.key.as_ref().is_some_and(String::is_empty)
    {
        errs.push(
            format!("{path}.cache.key"),
            "must not be empty (leave it out for the computed key)",
        );
    }
    // The job exactly as it will be submitted, so that nothing the run stores is refused
    // later. Its errors are reported at the step's field.
    if run.metadata.name.is_empty() || check_dns1035_label(&step.name).is_err() {
        return;
    }
    let job: TrainingJob = step_job(&run.metadata, step);
    if let Err(job_errs) = validate_training_job(&job, ctx) {
        for e in job_errs.0 {
            if e.path.starts_with("metadata") {
                continue;
            }
            let field = e.path.strip_prefix("spec").unwrap_or(&e.path);
            let field = match body {
                "task" => task_field(field),
                _ => field.to_string(),
            };
            errs.push(format!("{path}.{body}{field}"), e.message);
        }
    }
}

/// A task's field for a field of the generic job it becomes (`.replicas.worker.template.command`
/// -> `.command`).
fn task_field(job_field: &str) -> String {
    let rest = job_field
        .strip_prefix(".replicas.worker")
        .unwrap_or(job_field);
    rest.strip_prefix(".template").unwrap_or(rest).to_string()
}

/// No cycle through `dependsOn`, inputs and conditions; a cycle is named step by step.
fn check_acyclic(steps: &[StepSpec], index: &BTreeMap<&str, usize>, errs: &mut ValidationErrors) {
    let mut graph: DiGraph<usize, ()> = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..steps.len()).map(|i| graph.add_node(i)).collect();
    for (i, step) in steps.iter().enumerate() {
        for need in step.needs() {
            if let Some(&j) = index.get(need.as_str()) {
                graph.add_edge(nodes[j], nodes[i], ());
            }
        }
    }
    for scc in tarjan_scc(&graph) {
        if scc.len() < 2 {
            continue;
        }
        let mut members: Vec<usize> = scc.iter().map(|n| graph[*n]).collect();
        members.sort();
        let names: Vec<&str> = members.iter().map(|&i| steps[i].name.as_str()).collect();
        errs.push(
            format!("{STEPS}[{}]", members[0]),
            format!(
                "steps {} need each other in a cycle; a pipeline is a DAG",
                names.join(", ")
            ),
        );
    }
}
