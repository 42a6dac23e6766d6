//! Kubeflow Pipelines v2 compiled YAML (the PipelineSpec IR that `kfp.compiler` writes) as a
//! PipelineRun, as Kubeflow job manifests become TrainingJobs: accepted as it is, each
//! submit a new run named after `pipelineInfo.name`.
//!
//! What maps: the root DAG's tasks become steps (`dependentTasks` -> `dependsOn`), each
//! running its component's container executor (image, command, args, env, CPU, memory and
//! accelerators); the pipeline's input parameters become the run's parameters; a task's
//! input parameter is a pipeline parameter (`componentInputParameter`) or a constant; an
//! input artifact is another task's output artifact (`taskOutputArtifact`); a task with
//! caching off is never cached. The IR's placeholders in command and args become what the
//! step is given: `{{$.inputs.parameters['p']}}` the value, `{{$.inputs.artifacts['a'].path}}`
//! and `{{$.outputs.artifacts['a'].path}}` a file named after the producer's output inside
//! the artifact's directory, written as `$(CORRAL_OUTPUT_A)/a`, which the step's creation
//! expands (`corral_core::control::pipeline::step_job_with_artifacts`).
//!
//! An output parameter is an output like an artifact: a directory with the value's file
//! (`{{$.outputs.parameters['p'].output_file}}` is `$(CORRAL_OUTPUT_P)/p`), and a task that
//! reads it (`taskOutputParameter`) gets the file's text as its value
//! (`steps.<task>.outputs.<p>.value`).
//!
//! A `dsl.ParallelFor` of one task is a fan-out step named after that task: over a pipeline
//! parameter, another task's output parameter (`withParam`) or a constant list
//! (`withItems`), with its `parallelism`; the
//! task's input that is the loop's item is `$(CORRAL_ITEM)`, and a later task reading the
//! loop's output (`dsl.Collected`) reads every iteration's, collected in item order:
//! `{{$.inputs.artifacts['a']}}` is a JSON list of the artifacts' directories, each holding
//! the file its producer wrote (named after the producer's output), where Kubeflow passes a
//! JSON list of artifact objects.
//!
//! A `dsl.If` of the root DAG: each task of its DAG is a step of its own under its
//! condition (`when`): comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`) of a pipeline
//! parameter or another task's output parameter with a literal, joined by `&&`, negated by
//! `!()` (see [`condition`]). `dsl.Elif` and `dsl.Else` come as a group of such conditions
//! (`condition-branches-N`), hoisted into the root DAG as an exit handler's group is. A
//! condition inside a condition (at any depth) is hoisted too, under both.
//!
//! A `dsl.ExitHandler` of the root DAG: its group is hoisted into the root DAG (its tasks,
//! loops and conditions are taken as the root's), and its exit task is the run's exit
//! handler (`onExit`), which runs once every other step has
//! ended, whatever the outcome; its `dsl.PipelineTaskFinalStatus` input is the run's final
//! status as Kubeflow writes it (`{"state": "SUCCEEDED" | "FAILED", "error": {...}, ...}`,
//! `$(CORRAL_RUN_STATUS)`). One exit handler a pipeline, as `onExit` is one step; tasks
//! outside its group end before it runs too.
//!
//! What is refused, naming the field: executors that are not containers (importers,
//! resolvers), other nested DAGs (a loop of several tasks, a loop in a condition or a
//! condition in a loop, a loop over artifacts, a pipeline used as a component), other conditions (`||`, two inputs
//! compared), a loop's output parameters, struct parameters, and any other placeholder.

mod condition;
mod groups;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::pipeline::{
    CachePolicy, ParameterSpec, ParameterType, PipelineRun, PipelineRunSpec, PipelineSpec,
    StepSpec, TaskSpec,
};
use crate::quantity::Quantity;
use crate::training_job::{EnvVar, Resources};
use crate::validate::FieldError;

/// How a converted document is named in messages.
pub const WHAT: &str = "KFP PipelineSpec";

/// Whether a document is a compiled KFP pipeline: no kind, and the IR's own sections.
pub fn is_pipeline_spec(doc: &Map<String, Value>) -> bool {
    !doc.contains_key("kind")
        && doc.contains_key("pipelineInfo")
        && doc.contains_key("root")
        && doc.contains_key("deploymentSpec")
}

type Errors = Vec<FieldError>;

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn obj_at<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

/// The run a compiled pipeline is.
pub fn convert(doc: &Value) -> Result<PipelineRun, Errors> {
    let mut errors = Vec::new();
    let name = doc
        .get("pipelineInfo")
        .and_then(|p| str_at(p, "name"))
        .unwrap_or("");
    if name.is_empty() {
        errors.push(FieldError::new("pipelineInfo.name", "is required"));
    }
    let parameters = pipeline_parameters(doc, &mut errors);
    let hoisted = groups::hoist_exit_group(doc, &mut errors);
    let doc = hoisted.as_ref().unwrap_or(doc);
    let branched = groups::hoist_branches(doc, &mut errors);
    let doc = branched.as_ref().unwrap_or(doc);
    let flattened = groups::hoist_nested_conditions(doc, &mut errors);
    let doc = flattened.as_ref().unwrap_or(doc);
    let empty = Map::new();
    let tasks = doc
        .get("root")
        .and_then(|r| r.get("dag"))
        .and_then(|d| obj_at(d, "tasks"))
        .unwrap_or(&empty);
    if tasks.is_empty() {
        errors.push(FieldError::new("root.dag.tasks", "needs at least one task"));
    }
    // Groups first: the tasks after them read their outputs, and name them.
    let mut dag = Dag {
        loops: BTreeMap::new(),
        groups: BTreeMap::new(),
    };
    let mut groups = Vec::new();
    let mut exit: Option<(&String, &Value)> = None;
    for (task_name, task) in tasks {
        let iterates = ["parameterIterator", "iteratorPolicy", "artifactIterator"]
            .iter()
            .any(|k| task.get(k).is_some());
        if iterates {
            if let Some(l) = parse_loop(doc, task_name, task, &mut errors) {
                dag.loops.insert(task_name.clone(), l);
            }
        } else if groups::is_exit_task(task) {
            // The first (hoist_exit_group refused the others).
            exit = exit.or(Some((task_name, task)));
        } else if task.get("triggerPolicy").is_some()
            && let Some(c) = groups::parse_condition(doc, task_name, task, &mut errors)
        {
            groups.push(c);
        }
    }
    for g in &groups {
        let names = g.tasks.iter().map(|(n, _)| n.clone()).collect();
        dag.groups.insert(g.task_name.clone(), names);
    }
    let grouped = dag
        .loops
        .values()
        .map(|l| (&l.task_name, l.body_name.clone()))
        .chain(
            groups
                .iter()
                .flat_map(|c| c.tasks.iter().map(|(n, _)| (&c.task_name, n.clone()))),
        );
    for (group, name) in grouped {
        if tasks.contains_key(&name) {
            errors.push(FieldError::new(
                format!("root.dag.tasks.{name}"),
                format!(
                    "names a task of the root DAG and a task of `{group}`; a group's task \
                     becomes a step of that name"
                ),
            ));
        }
    }
    let mut steps = Vec::new();
    for (task_name, task) in tasks {
        if let Some(l) = dag.loops.get(task_name) {
            steps.extend(loop_step(doc, l, &dag, &mut errors));
            continue;
        }
        if let Some(g) = groups.iter().find(|g| &g.task_name == task_name) {
            steps.extend(groups::group_steps(doc, g, &dag, &mut errors));
            continue;
        }
        if exit.is_some_and(|(name, _)| name == task_name) {
            continue;
        }
        steps.extend(step(
            doc,
            &groups::task_at(task_name, task),
            task_name,
            task,
            &Scope::Root,
            &dag,
            &mut errors,
        ));
    }
    let on_exit = exit
        .and_then(|(name, task)| groups::exit_step(doc, name, task, &dag, &mut errors))
        .map(Box::new);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut run = PipelineRun::new(
        "",
        PipelineRunSpec {
            pipeline_spec: PipelineSpec {
                parameters,
                steps,
                parallelism: None,
                on_exit,
            },
            pipeline_ref: None,
            params: BTreeMap::new(),
        },
    );
    run.metadata.generate_name = Some(format!("{}-", dns_label(name)));
    Ok(run)
}

/// A KFP name as a Kubernetes name: lower case, `-` for anything else.
fn dns_label(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    mapped.trim_matches('-').to_string()
}

fn pipeline_parameters(doc: &Value, errors: &mut Errors) -> Vec<ParameterSpec> {
    let Some(defs) = doc
        .get("root")
        .and_then(|r| r.get("inputDefinitions"))
        .and_then(|d| obj_at(d, "parameters"))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, def) in defs {
        let path = format!("root.inputDefinitions.parameters.{name}");
        let type_ = match str_at(def, "parameterType") {
            Some("STRING") => ParameterType::String,
            Some("NUMBER_INTEGER") => ParameterType::Int,
            Some("NUMBER_DOUBLE") => ParameterType::Float,
            Some("BOOLEAN") => ParameterType::Bool,
            Some("LIST") => ParameterType::List,
            other => {
                errors.push(FieldError::new(
                    format!("{path}.parameterType"),
                    format!(
                        "{} is not supported yet; STRING, NUMBER_INTEGER, NUMBER_DOUBLE, BOOLEAN and LIST are",
                        other.unwrap_or("(none)")
                    ),
                ));
                continue;
            }
        };
        // The IR keeps numbers as protobuf's doubles: an integer's default is `3.0`.
        let default = def.get("defaultValue").map(|d| match d.as_f64() {
            Some(f)
                if type_ == ParameterType::Int
                    && f.fract() == 0.0
                    && f.abs() < 9_007_199_254_740_992.0 =>
            {
                Value::from(f as i64)
            }
            _ => d.clone(),
        });
        out.push(ParameterSpec {
            name: name.clone(),
            type_,
            default,
        });
    }
    out
}

/// What a task's input is, for its placeholders.
enum Input {
    /// A pipeline parameter: the step's input of the same name reads it.
    Param,
    /// A constant, written into the command where it is named.
    Constant(String),
    /// Another task's output artifact: its output key (the file's name in the directory).
    Artifact(String),
    /// A loop's output: every iteration's artifact, collected (a JSON list of directories).
    Collected,
    /// The loop's item, in a loop's task.
    Item,
    /// The run's final status, in the exit task (`dsl.PipelineTaskFinalStatus`).
    FinalStatus,
}

/// A `dsl.ParallelFor` over one container task (see the module docs).
struct Loop<'a> {
    /// The root DAG's task that iterates (`for-loop-1`), whose inputs its body reads.
    task_name: String,
    task: &'a Value,
    /// Where the body is in the document, its name (the fan-out step's) and the task.
    body_at: String,
    body_name: String,
    body: &'a Value,
    /// The body's input that is the item.
    item_input: String,
    items: Items,
    parallelism: Option<u32>,
    /// The loop's outputs: its key -> the body's output key.
    outputs: BTreeMap<String, String>,
}

enum Items {
    /// A pipeline parameter (a list).
    Param(String),
    /// Another task's output parameter (a list): `(task, output)`.
    Output(String, String),
    Raw(Vec<Value>),
}

/// Where a task's `componentInput...` come from: the pipeline, or the loop it is in.
enum Scope<'a> {
    Root,
    /// The exit task: of the root DAG, and it may read the run's final status.
    Exit,
    /// A task of a loop's or a condition's DAG: what it reads comes through that group's
    /// task of the root DAG; in a loop, one of its inputs is the item.
    Inside {
        task: &'a Value,
        item_input: Option<&'a str>,
    },
}

/// The root DAG's groups: loops, and conditions and exit handlers whose tasks run as steps
/// of their own.
struct Dag<'a> {
    loops: BTreeMap<String, Loop<'a>>,
    /// A group's task of the root DAG -> the steps of its DAG's tasks.
    groups: BTreeMap<String, Vec<String>>,
}

impl Dag<'_> {
    /// The steps a task of the root DAG runs as: a loop as its task's step, a condition or
    /// an exit handler's group as its tasks' steps, any other as itself.
    fn steps_of(&self, task: &str) -> Vec<String> {
        if let Some(l) = self.loops.get(task) {
            return vec![l.body_name.clone()];
        }
        self.groups
            .get(task)
            .cloned()
            .unwrap_or_else(|| vec![task.to_string()])
    }
}

/// A loop of the root DAG (see [`Loop`]); what it cannot be is refused at its field.
fn parse_loop<'a>(
    doc: &'a Value,
    task_name: &str,
    task: &'a Value,
    errors: &mut Errors,
) -> Option<Loop<'a>> {
    let at = groups::task_at(task_name, task);
    if task.get("artifactIterator").is_some() {
        errors.push(FieldError::new(
            format!("{at}.artifactIterator"),
            "a dsl.ParallelFor over artifacts is not supported yet; over a list parameter \
             or a constant list is",
        ));
        return None;
    }
    let component_name = task
        .get("componentRef")
        .and_then(|c| str_at(c, "name"))
        .unwrap_or("");
    let component = doc.get("components").and_then(|c| c.get(component_name))?;
    let body = component.get("dag").and_then(|d| obj_at(d, "tasks"));
    let count = body.map_or(0, Map::len);
    let Some((body_name, body_task)) = body.and_then(|b| b.iter().next()).filter(|_| count == 1)
    else {
        errors.push(FieldError::new(
            format!("components.{component_name}.dag.tasks"),
            format!(
                "a dsl.ParallelFor of {count} tasks is not supported yet: one task per loop \
                 is (it runs once per item, as a step's withItems)"
            ),
        ));
        return None;
    };
    let iterator = task.get("parameterIterator");
    let item_input = iterator.and_then(|i| str_at(i, "itemInput")).unwrap_or("");
    let items = iterator.and_then(|i| i.get("items"));
    let items = match (
        items.and_then(|i| str_at(i, "inputParameter")),
        items.and_then(|i| str_at(i, "raw")),
    ) {
        (Some(input), _) => {
            let bound = task
                .get("inputs")
                .and_then(|i| i.get("parameters"))
                .and_then(|p| p.get(input));
            let output = bound.and_then(|b| b.get("taskOutputParameter"));
            match (
                bound.and_then(|b| str_at(b, "componentInputParameter")),
                output.and_then(|o| str_at(o, "producerTask")),
                output.and_then(|o| str_at(o, "outputParameterKey")),
            ) {
                (Some(param), _, _) => Items::Param(param.to_string()),
                (None, Some(task), Some(key)) => Items::Output(task.to_string(), key.to_string()),
                _ => {
                    errors.push(FieldError::new(
                        format!("{at}.inputs.parameters.{input}"),
                        "a loop over a pipeline parameter, another task's output parameter or \
                         a constant list is supported, not this",
                    ));
                    return None;
                }
            }
        }
        (None, Some(raw)) => match serde_json::from_str::<Vec<Value>>(raw) {
            Ok(list) => Items::Raw(list),
            Err(e) => {
                errors.push(FieldError::new(
                    format!("{at}.parameterIterator.items.raw"),
                    format!("is not a JSON list: {e}"),
                ));
                return None;
            }
        },
        (None, None) => {
            errors.push(FieldError::new(
                format!("{at}.parameterIterator.items"),
                "needs inputParameter or raw",
            ));
            return None;
        }
    };
    let parallelism = task
        .get("iteratorPolicy")
        .and_then(|p| p.get("parallelismLimit"))
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let mut outputs = BTreeMap::new();
    let selectors = component
        .get("dag")
        .and_then(|d| d.get("outputs"))
        .and_then(|o| obj_at(o, "artifacts"));
    for (key, sel) in selectors.into_iter().flatten() {
        let first = sel
            .get("artifactSelectors")
            .and_then(Value::as_array)
            .and_then(|a| a.first());
        if let Some(out) = first.and_then(|f| str_at(f, "outputArtifactKey")) {
            outputs.insert(key.clone(), out.to_string());
        }
    }
    Some(Loop {
        task_name: task_name.to_string(),
        task,
        body_at: format!("components.{component_name}.dag.tasks.{body_name}"),
        body_name: body_name.clone(),
        body: body_task,
        item_input: item_input.to_string(),
        items,
        parallelism,
        outputs,
    })
}

/// A loop's step: its task, once per item.
fn loop_step(doc: &Value, l: &Loop, dag: &Dag, errors: &mut Errors) -> Option<StepSpec> {
    let mut step = step(
        doc,
        &l.body_at,
        &l.body_name,
        l.body,
        &Scope::Inside {
            task: l.task,
            item_input: Some(&l.item_input),
        },
        dag,
        errors,
    )?;
    match &l.items {
        Items::Param(p) => step.with_param = Some(p.clone()),
        Items::Output(task, key) => step.with_param = Some(format!("steps.{task}.outputs.{key}")),
        Items::Raw(items) => step.with_items = items.clone(),
    }
    step.parallelism = l.parallelism;
    Some(step)
}

/// A task's `dependentTasks`, a loop named by its step.
fn dependencies(task: &Value, dag: &Dag) -> Vec<String> {
    task.get("dependentTasks")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .flat_map(|t| dag.steps_of(t))
                .collect()
        })
        .unwrap_or_default()
}

/// A parameter input of a task: a pipeline parameter, a constant, another task's output
/// parameter (the text of that output's file), or (in a loop) the item.
fn parameter_input(p: &Value, scope: &Scope) -> Option<(Option<String>, Input)> {
    if let Some(from) = p.get("taskOutputParameter") {
        let task = str_at(from, "producerTask")?;
        let key = str_at(from, "outputParameterKey")?;
        return Some((
            Some(format!("steps.{task}.outputs.{key}.value")),
            Input::Param,
        ));
    }
    if let Some(c) = p.get("runtimeValue").and_then(|r| r.get("constant")) {
        let text = match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        return Some((None, Input::Constant(text)));
    }
    if matches!(scope, Scope::Exit) && p.get("taskFinalStatus").is_some() {
        return Some((None, Input::FinalStatus));
    }
    let from = str_at(p, "componentInputParameter")?;
    match scope {
        Scope::Root | Scope::Exit => Some((Some(format!("params.{from}")), Input::Param)),
        Scope::Inside {
            item_input: Some(item),
            ..
        } if from == *item => Some((None, Input::Item)),
        // Through the group's own inputs, as the root DAG binds them.
        Scope::Inside { task, .. } => {
            let bound = task.get("inputs")?.get("parameters")?.get(from)?;
            parameter_input(bound, &Scope::Root)
        }
    }
}

/// An artifact input of a task: another task's output (a loop's: collected), or (in a
/// loop) one the loop was given.
fn artifact_input(a: &Value, scope: &Scope, dag: &Dag) -> Option<(String, Input)> {
    if let Some(from) = a.get("taskOutputArtifact") {
        let producer = str_at(from, "producerTask")?;
        let key = str_at(from, "outputArtifactKey")?;
        return Some(match dag.loops.get(producer) {
            Some(l) => {
                let out = l.outputs.get(key)?;
                (
                    format!("steps.{}.outputs.{out}", l.body_name),
                    Input::Collected,
                )
            }
            None => (
                format!("steps.{producer}.outputs.{key}"),
                Input::Artifact(key.to_string()),
            ),
        });
    }
    let Scope::Inside { task, .. } = scope else {
        return None;
    };
    let from = str_at(a, "componentInputArtifact")?;
    let bound = task.get("inputs")?.get("artifacts")?.get(from)?;
    artifact_input(bound, &Scope::Root, dag)
}

fn step(
    doc: &Value,
    at: &str,
    task_name: &str,
    task: &Value,
    scope: &Scope,
    dag: &Dag,
    errors: &mut Errors,
) -> Option<StepSpec> {
    let at = at.to_string();
    let before = errors.len();
    let component_name = task
        .get("componentRef")
        .and_then(|c| str_at(c, "name"))
        .unwrap_or("");
    let Some(component) = doc.get("components").and_then(|c| c.get(component_name)) else {
        errors.push(FieldError::new(
            format!("{at}.componentRef.name"),
            format!("`{component_name}` is not in components"),
        ));
        return None;
    };
    if task.get("triggerPolicy").is_some() {
        errors.push(FieldError::new(
            format!("{at}.triggerPolicy"),
            "a condition (dsl.If) inside a loop or a condition is not supported yet; one \
             of the root DAG is",
        ));
    }
    let Some(label) = str_at(component, "executorLabel") else {
        errors.push(FieldError::new(
            format!("components.{component_name}"),
            "a nested DAG (a pipeline used as a component, a loop inside a loop or \
             condition, or a condition inside a loop) is not supported yet: container \
             components, and dsl.ParallelFor of one, dsl.If/Elif/Else (at any depth) and \
             dsl.ExitHandler of the root DAG (loops and conditions inside the exit handler \
             too) are",
        ));
        return None;
    };
    let executor_at = format!("deploymentSpec.executors.{label}");
    let Some(container) = doc
        .get("deploymentSpec")
        .and_then(|d| d.get("executors"))
        .and_then(|e| e.get(label))
        .and_then(|e| e.get("container"))
    else {
        errors.push(FieldError::new(
            executor_at,
            "only container executors run on Corral (not importers or resolvers)",
        ));
        return None;
    };
    let mut inputs = BTreeMap::new();
    let mut seen: BTreeMap<String, Input> = BTreeMap::new();
    if let Some(params) = task.get("inputs").and_then(|i| obj_at(i, "parameters")) {
        for (name, p) in params {
            match parameter_input(p, scope) {
                Some((reference, input)) => {
                    if let Some(r) = reference {
                        inputs.insert(name.clone(), r);
                    }
                    seen.insert(name.clone(), input);
                }
                None => errors.push(FieldError::new(
                    format!("{at}.inputs.parameters.{name}"),
                    "only a pipeline parameter (componentInputParameter), a constant or a \
                     loop's item is supported yet, not another task's output parameter",
                )),
            }
        }
    }
    if let Some(artifacts) = task.get("inputs").and_then(|i| obj_at(i, "artifacts")) {
        for (name, a) in artifacts {
            match artifact_input(a, scope, dag) {
                Some((reference, input)) => {
                    inputs.insert(name.clone(), reference);
                    seen.insert(name.clone(), input);
                }
                None => errors.push(FieldError::new(
                    format!("{at}.inputs.artifacts.{name}"),
                    "only another task's output artifact (taskOutputArtifact) is supported yet",
                )),
            }
        }
    }
    // Output artifacts and output parameters alike: a directory each, the parameter's value
    // a file in it (`{{$.outputs.parameters['p'].output_file}}`) that readers read.
    let outputs: Vec<String> = ["artifacts", "parameters"]
        .iter()
        .filter_map(|k| {
            component
                .get("outputDefinitions")
                .and_then(|o| obj_at(o, k))
        })
        .flat_map(|a| a.keys().cloned())
        .collect();
    let words = |key: &str| -> Vec<String> {
        container
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|w| match w {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut resolve = |key: &str| -> Vec<String> {
        words(key)
            .iter()
            .enumerate()
            .map(|(i, w)| {
                placeholders(w, &seen, &outputs).unwrap_or_else(|e| {
                    errors.push(FieldError::new(
                        format!("{executor_at}.container.{key}[{i}]"),
                        e,
                    ));
                    w.clone()
                })
            })
            .collect()
    };
    let command = resolve("command");
    let args = resolve("args");
    let env = container
        .get("env")
        .and_then(Value::as_array)
        .map(|vars| {
            vars.iter()
                .filter_map(|v| Some(EnvVar::literal(str_at(v, "name")?, str_at(v, "value")?)))
                .collect()
        })
        .unwrap_or_default();
    let resources = resources(container, &executor_at, errors);
    if errors.len() > before {
        return None;
    }
    let cached = task
        .get("cachingOptions")
        .and_then(|c| c.get("enableCache"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let mut depends_on = dependencies(task, dag);
    if let Scope::Inside { task: group, .. } = scope {
        depends_on.extend(dependencies(group, dag));
    }
    Some(StepSpec {
        name: task_name.to_string(),
        depends_on,
        inputs,
        outputs,
        when: Vec::new(),
        retries: 0,
        cache: (!cached).then_some(CachePolicy {
            enabled: false,
            key: None,
        }),
        job: None,
        task: Some(TaskSpec {
            image: str_at(container, "image").map(str::to_string),
            command,
            args,
            env,
            resources,
            ..TaskSpec::default()
        }),
        with_items: Vec::new(),
        with_param: None,
        parallelism: None,
        iteration_of: None,
    })
}

/// KFP's resource fields (`resourceCpuLimit`, `resourceMemoryLimit`, `accelerator`) as a
/// step's resources: the limit where given, else the request.
fn resources(container: &Value, at: &str, errors: &mut Errors) -> Resources {
    let mut r = Resources::default();
    let Some(res) = container.get("resources") else {
        return r;
    };
    let quantity = |keys: [&str; 2], errors: &mut Errors| {
        let (key, text) = keys.iter().find_map(|k| str_at(res, k).map(|t| (*k, t)))?;
        // KFP writes memory in decimal units with a trailing B too ("2GB").
        let text = text.strip_suffix('B').unwrap_or(text);
        Quantity::parse(text)
            .map_err(|e| {
                errors.push(FieldError::new(
                    format!("{at}.container.resources.{key}"),
                    e.to_string(),
                ))
            })
            .ok()
    };
    r.cpu = quantity(["resourceCpuLimit", "resourceCpuRequest"], errors);
    r.memory = quantity(["resourceMemoryLimit", "resourceMemoryRequest"], errors);
    if let Some(acc) = res.get("accelerator") {
        let count = str_at(acc, "resourceCount")
            .or_else(|| str_at(acc, "count"))
            .map(str::parse::<u32>);
        match count {
            Some(Ok(n)) => r.gpu = n,
            Some(Err(_)) | None => errors.push(FieldError::new(
                format!("{at}.container.resources.accelerator"),
                "needs resourceCount, a whole number of GPUs",
            )),
        }
    }
    r
}

/// One word of a command with the IR's placeholders replaced (see the module docs).
fn placeholders(
    word: &str,
    inputs: &BTreeMap<String, Input>,
    outputs: &[String],
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = word;
    while let Some(start) = rest.find("{{$") {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find("}}") else {
            return Err(format!("`{word}`: a placeholder without its closing }}}}"));
        };
        let inner = &rest[start + 2..start + len];
        out.push_str(&placeholder(inner, inputs, outputs)?);
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn placeholder(
    inner: &str,
    inputs: &BTreeMap<String, Input>,
    outputs: &[String],
) -> Result<String, String> {
    let unsupported = || {
        format!(
            "the placeholder {{{{{inner}}}}} is not supported yet; input parameters and the \
             paths of input and output artifacts are"
        )
    };
    let (section, rest) = inner
        .strip_prefix("$.inputs.parameters['")
        .map(|r| ("param", r))
        .or_else(|| {
            inner
                .strip_prefix("$.inputs.artifacts['")
                .map(|r| ("input", r))
        })
        .or_else(|| {
            inner
                .strip_prefix("$.outputs.artifacts['")
                .map(|r| ("output", r))
        })
        .or_else(|| {
            inner
                .strip_prefix("$.outputs.parameters['")
                .map(|r| ("output-param", r))
        })
        .ok_or_else(unsupported)?;
    let (name, tail) = rest.split_once("']").ok_or_else(unsupported)?;
    let var = |prefix: &str| format!("$(CORRAL_{prefix}_{})", name.to_uppercase());
    match (section, tail) {
        ("param", "") => match inputs.get(name) {
            Some(Input::Param) => Ok(var("INPUT")),
            Some(Input::Item) => Ok(format!("$({})", crate::pipeline::ITEM_ENV)),
            Some(Input::Constant(text)) => Ok(text.clone()),
            Some(Input::FinalStatus) => Ok(format!("$({})", crate::pipeline::RUN_STATUS_ENV)),
            _ => Err(format!(
                "input parameter `{name}` is not among the task's inputs"
            )),
        },
        ("input", ".path" | ".uri") => match inputs.get(name) {
            Some(Input::Artifact(key)) => Ok(format!("{}/{key}", var("INPUT"))),
            Some(Input::Collected) => Err(format!(
                "input artifact `{name}` is a loop's outputs, a list: write \
                 {{{{$.inputs.artifacts['{name}']}}}} (a JSON list of their directories)"
            )),
            _ => Err(format!(
                "input artifact `{name}` is not among the task's inputs"
            )),
        },
        ("input", "") => match inputs.get(name) {
            Some(Input::Collected) => Ok(var("INPUT")),
            _ => Err(unsupported()),
        },
        ("output", ".path" | ".uri") if outputs.iter().any(|o| o == name) => {
            Ok(format!("{}/{name}", var("OUTPUT")))
        }
        ("output", ".path" | ".uri") => Err(format!(
            "output artifact `{name}` is not among the component's outputs"
        )),
        ("output-param", ".output_file") if outputs.iter().any(|o| o == name) => {
            Ok(format!("{}/{name}", var("OUTPUT")))
        }
        _ => Err(unsupported()),
    }
}
