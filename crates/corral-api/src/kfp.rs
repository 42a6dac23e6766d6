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
//! What is refused, naming the field: executors that are not containers (importers,
//! resolvers), nested DAGs (`dsl.ParallelFor`, `dsl.If`, `dsl.ExitHandler`), output
//! parameters, list and struct parameters, and any other placeholder.

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
    let empty = Map::new();
    let tasks = doc
        .get("root")
        .and_then(|r| r.get("dag"))
        .and_then(|d| obj_at(d, "tasks"))
        .unwrap_or(&empty);
    if tasks.is_empty() {
        errors.push(FieldError::new("root.dag.tasks", "needs at least one task"));
    }
    let mut steps = Vec::new();
    for (task_name, task) in tasks {
        if let Some(step) = step(doc, task_name, task, &mut errors) {
            steps.push(step);
        }
    }
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
                on_exit: None,
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
        out.push(ParameterSpec {
            name: name.clone(),
            type_,
            default: def.get("defaultValue").cloned(),
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
}

fn step(doc: &Value, task_name: &str, task: &Value, errors: &mut Errors) -> Option<StepSpec> {
    let at = format!("root.dag.tasks.{task_name}");
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
            "conditions (dsl.If, dsl.Condition) are not supported yet",
        ));
    }
    if task.get("iteratorPolicy").is_some() || task.get("parameterIterator").is_some() {
        errors.push(FieldError::new(
            at.clone(),
            "dsl.ParallelFor is not supported yet (a PipelineRun step's withItems is)",
        ));
    }
    let Some(label) = str_at(component, "executorLabel") else {
        errors.push(FieldError::new(
            format!("components.{component_name}"),
            "a nested DAG (dsl.ParallelFor, dsl.If, dsl.ExitHandler, a pipeline used as a \
             component) is not supported yet: only container components are",
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
    if component
        .get("outputDefinitions")
        .and_then(|o| obj_at(o, "parameters"))
        .is_some_and(|p| !p.is_empty())
    {
        errors.push(FieldError::new(
            format!("components.{component_name}.outputDefinitions.parameters"),
            "output parameters are not supported yet: write an output artifact instead",
        ));
    }
    let mut inputs = BTreeMap::new();
    let mut seen: BTreeMap<String, Input> = BTreeMap::new();
    if let Some(params) = task.get("inputs").and_then(|i| obj_at(i, "parameters")) {
        for (name, p) in params {
            let path = format!("{at}.inputs.parameters.{name}");
            if let Some(from) = str_at(p, "componentInputParameter") {
                inputs.insert(name.clone(), format!("params.{from}"));
                seen.insert(name.clone(), Input::Param);
            } else if let Some(c) = p.get("runtimeValue").and_then(|r| r.get("constant")) {
                let text = match c {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                seen.insert(name.clone(), Input::Constant(text));
            } else {
                errors.push(FieldError::new(
                    path,
                    "only a pipeline parameter (componentInputParameter) or a constant is \
                     supported yet, not another task's output parameter",
                ));
            }
        }
    }
    if let Some(artifacts) = task.get("inputs").and_then(|i| obj_at(i, "artifacts")) {
        for (name, a) in artifacts {
            let from = a.get("taskOutputArtifact");
            let producer = from.and_then(|f| str_at(f, "producerTask"));
            let key = from.and_then(|f| str_at(f, "outputArtifactKey"));
            match (producer, key) {
                (Some(p), Some(k)) => {
                    inputs.insert(name.clone(), format!("steps.{p}.outputs.{k}"));
                    seen.insert(name.clone(), Input::Artifact(k.to_string()));
                }
                _ => errors.push(FieldError::new(
                    format!("{at}.inputs.artifacts.{name}"),
                    "only another task's output artifact (taskOutputArtifact) is supported yet",
                )),
            }
        }
    }
    let outputs: Vec<String> = component
        .get("outputDefinitions")
        .and_then(|o| obj_at(o, "artifacts"))
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default();
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
    let depends_on = task
        .get("dependentTasks")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
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
        .ok_or_else(unsupported)?;
    let (name, tail) = rest.split_once("']").ok_or_else(unsupported)?;
    let var = |prefix: &str| format!("$(CORRAL_{prefix}_{})", name.to_uppercase());
    match (section, tail) {
        ("param", "") => match inputs.get(name) {
            Some(Input::Param) => Ok(var("INPUT")),
            Some(Input::Constant(text)) => Ok(text.clone()),
            _ => Err(format!(
                "input parameter `{name}` is not among the task's inputs"
            )),
        },
        ("input", ".path" | ".uri") => match inputs.get(name) {
            Some(Input::Artifact(key)) => Ok(format!("{}/{key}", var("INPUT"))),
            _ => Err(format!(
                "input artifact `{name}` is not among the task's inputs"
            )),
        },
        ("output", ".path" | ".uri") if outputs.iter().any(|o| o == name) => {
            Ok(format!("{}/{name}", var("OUTPUT")))
        }
        ("output", ".path" | ".uri") => Err(format!(
            "output artifact `{name}` is not among the component's outputs"
        )),
        _ => Err(unsupported()),
    }
}
