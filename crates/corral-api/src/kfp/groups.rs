//! The root DAG's groups whose tasks run as steps of their own: a `dsl.If` (each task under
//! its condition) and a `dsl.ExitHandler` (its group hoisted into the root DAG, so that a
//! loop or a condition inside it is one of the root DAG; the task it names runs as the
//! run's exit handler, `PipelineSpec::on_exit`).

use serde_json::Value;

use super::{Dag, Errors, Scope, parameter_input, step, str_at};
use crate::pipeline::{StepSpec, WhenCondition};
use crate::validate::FieldError;

/// A condition of the root DAG, whose DAG's tasks are steps of the run.
pub(super) struct Group<'a> {
    pub task_name: String,
    pub task: &'a Value,
    /// Where its DAG's tasks are, and them.
    pub at: String,
    pub tasks: Vec<(String, &'a Value)>,
    /// The `dsl.If`'s condition, on each of its steps: all of these hold.
    pub when: Vec<WhenCondition>,
}

/// The tasks of a group's DAG (a component with a `dag`), and where they are.
fn group_tasks<'a>(doc: &'a Value, task: &Value) -> Option<(String, Vec<(String, &'a Value)>)> {
    let component_name = task
        .get("componentRef")
        .and_then(|c| str_at(c, "name"))
        .unwrap_or("");
    let body = doc
        .get("components")
        .and_then(|c| c.get(component_name))
        .and_then(|c| c.get("dag"))
        .and_then(|d| d.get("tasks"))
        .and_then(Value::as_object)
        .filter(|b| !b.is_empty())?;
    Some((
        format!("components.{component_name}.dag.tasks"),
        body.iter().map(|(n, t)| (n.clone(), t)).collect(),
    ))
}

/// A condition of the root DAG (see [`super::condition`]), each input it reads bound to a
/// pipeline parameter or another task's output parameter; anything else is refused at its
/// field.
pub(super) fn parse_condition<'a>(
    doc: &'a Value,
    task_name: &str,
    task: &'a Value,
    errors: &mut Errors,
) -> Option<Group<'a>> {
    let at = task_at(task_name, task);
    let text = task
        .get("triggerPolicy")
        .and_then(|t| str_at(t, "condition"))
        .unwrap_or("");
    let refuse = |errors: &mut Errors, why: &str| {
        errors.push(FieldError::new(
            format!("{at}.triggerPolicy.condition"),
            format!("`{text}`: {why}"),
        ));
    };
    let clauses = match super::condition::parse(text) {
        Ok(c) => c,
        Err(why) => {
            refuse(errors, &why);
            return None;
        }
    };
    let mut when = Vec::new();
    for clause in clauses {
        let bound = task
            .get("inputs")
            .and_then(|i| i.get("parameters"))
            .and_then(|p| p.get(&clause.input));
        let reference = bound
            .and_then(|b| parameter_input(b, &Scope::Root))
            .and_then(|(r, _)| r);
        let Some(value) = reference else {
            refuse(
                errors,
                &format!(
                    "`{}` is neither a pipeline parameter nor another task's output parameter",
                    clause.input
                ),
            );
            return None;
        };
        when.push(WhenCondition {
            value,
            ..clause.when
        });
    }
    let Some((tasks_at, tasks)) = group_tasks(doc, task) else {
        refuse(errors, "its DAG has no tasks");
        return None;
    };
    Some(Group {
        task_name: task_name.to_string(),
        task,
        at: tasks_at,
        tasks,
        when,
    })
}

/// A condition's steps: each of its tasks, under its condition.
pub(super) fn group_steps(doc: &Value, g: &Group, dag: &Dag, errors: &mut Errors) -> Vec<StepSpec> {
    let scope = Scope::Inside {
        task: g.task,
        item_input: None,
    };
    let mut out = Vec::new();
    for (name, task) in &g.tasks {
        let at = format!("{}.{name}", g.at);
        if let Some(mut step) = step(doc, &at, name, task, &scope, dag, errors) {
            step.when.extend(g.when.iter().cloned());
            out.push(step);
        }
    }
    out
}

/// Whether a task of the root DAG is a `dsl.ExitHandler`'s exit task: it runs once the
/// tasks it depends on have completed, whatever their outcome.
pub(super) fn is_exit_task(task: &Value) -> bool {
    task.get("triggerPolicy").is_some_and(|t| {
        str_at(t, "strategy") == Some("ALL_UPSTREAM_TASKS_COMPLETED")
            && t.get("condition").is_none()
    })
}

/// Marks a task hoisted out of an exit handler's group with where its DAG is written, for
/// the paths of messages about it.
const HOISTED_FROM: &str = "corral.dev/hoistedFrom";

/// Where a task of the root DAG is written: `root.dag.tasks.<name>`, or, for one hoisted out
/// of an exit handler's group, in that group's component.
pub(super) fn task_at(name: &str, task: &Value) -> String {
    match str_at(task, HOISTED_FROM) {
        Some(at) => format!("{at}.{name}"),
        None => format!("root.dag.tasks.{name}"),
    }
}

/// A `dsl.ExitHandler`'s group, hoisted: its tasks become tasks of the root DAG, reading
/// what the group was given (its inputs' bindings in the root DAG) and waiting for what it
/// waited for, so that a loop or a condition inside it is one of the root DAG as any. The
/// exit task stays, and becomes the run's exit handler. `None`: no exit handler (or one
/// refused, in `errors`).
pub(super) fn hoist_exit_group(doc: &Value, errors: &mut Errors) -> Option<Value> {
    let tasks = doc.get("root")?.get("dag")?.get("tasks")?.as_object()?;
    let exits: Vec<(&String, &Value)> = tasks.iter().filter(|(_, t)| is_exit_task(t)).collect();
    for (name, _) in exits.iter().skip(1) {
        errors.push(FieldError::new(
            format!("root.dag.tasks.{name}"),
            "a second dsl.ExitHandler: a run has one exit handler (onExit)",
        ));
    }
    let (exit_name, exit) = exits.first()?;
    let at = format!("root.dag.tasks.{exit_name}.dependentTasks");
    let upstream: Vec<&str> = exit
        .get("dependentTasks")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let [group_name] = upstream[..] else {
        errors.push(FieldError::new(
            at,
            "an exit task waits for exactly one group (the dsl.ExitHandler's); it names \
             none or several",
        ));
        return None;
    };
    let found = tasks
        .get(group_name)
        .and_then(|group| Some((group, group_tasks(doc, group)?)));
    let Some((group, (tasks_at, body))) = found else {
        errors.push(FieldError::new(
            at,
            format!("`{group_name}` is not a group of the root DAG with tasks"),
        ));
        return None;
    };
    let mut root = tasks.clone();
    hoist(
        &mut root,
        group_name,
        group,
        &tasks_at,
        body,
        Some(exit_name),
        errors,
    );
    with_root_tasks(doc.clone(), root)
}

/// The exit task as the run's exit handler: what it reads of the group's outcome
/// (`dsl.PipelineTaskFinalStatus`) is the run's final status; it waits for nothing (an exit
/// handler runs once every other step has ended).
pub(super) fn exit_step(
    doc: &Value,
    name: &str,
    task: &Value,
    dag: &Dag,
    errors: &mut Errors,
) -> Option<StepSpec> {
    let mut task = task.clone();
    if let Some(t) = task.as_object_mut() {
        t.remove("triggerPolicy");
        t.remove("dependentTasks");
    }
    let at = task_at(name, &task);
    let mut step = step(doc, &at, name, &task, &Scope::Exit, dag, errors)?;
    step.depends_on.clear();
    Some(step)
}

/// Replaces group `group_name` of the root DAG's tasks `root` by its tasks `body` (written
/// at `tasks_at`): each reads what the group was given (its inputs' bindings in the root
/// DAG) and waits for what it waited for, and whatever waited for the group (but `keep`)
/// waits for its tasks.
fn hoist(
    root: &mut serde_json::Map<String, Value>,
    group_name: &str,
    group: &Value,
    tasks_at: &str,
    body: Vec<(String, &Value)>,
    keep: Option<&str>,
    errors: &mut Errors,
) {
    let bound = |kind: &str, input: &str| -> Option<Value> {
        group.get("inputs")?.get(kind)?.get(input).cloned()
    };
    let waits: Vec<Value> = group
        .get("dependentTasks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    root.remove(group_name);
    let hoisted: Vec<String> = body.iter().map(|(n, _)| n.clone()).collect();
    for (name, task) in body {
        if root.contains_key(&name) {
            errors.push(FieldError::new(
                format!("{tasks_at}.{name}"),
                format!(
                    "names a task of the root DAG too; the tasks of `{group_name}` become \
                     tasks of the run"
                ),
            ));
            continue;
        }
        let mut task = task.clone();
        let Some(t) = task.as_object_mut() else {
            continue;
        };
        for (kind, from) in [
            ("parameters", "componentInputParameter"),
            ("artifacts", "componentInputArtifact"),
        ] {
            let inputs = t
                .get_mut("inputs")
                .and_then(|i| i.get_mut(kind))
                .and_then(Value::as_object_mut);
            for binding in inputs.into_iter().flat_map(|i| i.values_mut()) {
                let through = str_at(binding, from).and_then(|input| bound(kind, input));
                if let Some(b) = through {
                    *binding = b;
                }
            }
        }
        if !waits.is_empty() {
            let deps = t
                .entry("dependentTasks")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Some(d) = deps.as_array_mut() {
                d.extend(waits.iter().cloned());
            }
        }
        t.insert(
            HOISTED_FROM.to_string(),
            Value::String(tasks_at.to_string()),
        );
        root.insert(name, task);
    }
    for (name, task) in root.iter_mut() {
        if Some(name.as_str()) == keep {
            continue;
        }
        if let Some(deps) = task.get_mut("dependentTasks").and_then(Value::as_array_mut)
            && deps.iter().any(|d| d.as_str() == Some(group_name))
        {
            deps.retain(|d| d.as_str() != Some(group_name));
            deps.extend(hoisted.iter().map(|h| Value::String(h.clone())));
        }
    }
}

/// `dsl.If` / `dsl.Elif` / `dsl.Else` of the root DAG: the compiler's `condition-branches`
/// group (a DAG of conditions, each a later one's negating the earlier ones'), hoisted so
/// that each of its conditions is one of the root DAG. `None`: there is none.
pub(super) fn hoist_branches(doc: &Value, errors: &mut Errors) -> Option<Value> {
    let tasks = doc.get("root")?.get("dag")?.get("tasks")?.as_object()?;
    let branches: Vec<(&String, &Value)> =
        tasks.iter().filter(|(_, t)| is_branches(doc, t)).collect();
    if branches.is_empty() {
        return None;
    }
    let mut root = tasks.clone();
    for (name, group) in branches {
        if let Some((tasks_at, body)) = group_tasks(doc, group) {
            hoist(&mut root, name, group, &tasks_at, body, None, errors);
        }
    }
    with_root_tasks(doc.clone(), root)
}

/// Whether `task` (of a DAG) is a group: its component has a DAG of its own.
fn is_group(doc: &Value, task: &Value) -> bool {
    group_tasks(doc, task).is_some()
}

/// Whether `task` is the compiler's group of `dsl.If`/`Elif`/`Else` branches: neither a
/// condition nor a loop itself, a DAG of conditions only.
fn is_branches(doc: &Value, task: &Value) -> bool {
    let plain = [
        "triggerPolicy",
        "parameterIterator",
        "iteratorPolicy",
        "artifactIterator",
    ]
    .iter()
    .all(|k| task.get(k).is_none());
    plain
        && group_tasks(doc, task).is_some_and(|(_, body)| {
            body.iter().all(|(_, b)| {
                b.get("triggerPolicy")
                    .and_then(|p| p.get("condition"))
                    .is_some()
            })
        })
}

/// A `dsl.If` inside a `dsl.If` (at any depth; `dsl.Elif`/`dsl.Else` inside one too): each
/// inner condition becomes a condition of the root DAG, under its own condition and the
/// outer one's (`outer && inner`, the outer's inputs taken along as `<outer>--<input>`),
/// reading what the outer was given and waiting for what it waited for. The outer keeps
/// its other tasks (and goes when it has none). `None`: there is no such nesting.
pub(super) fn hoist_nested_conditions(doc: &Value, errors: &mut Errors) -> Option<Value> {
    let mut out = doc.clone();
    let mut changed = false;
    // Each pass lifts one level of one condition; the bound stops a malformed document.
    for _ in 0..256 {
        let root_tasks = out
            .get("root")?
            .get("dag")?
            .get("tasks")?
            .as_object()?
            .clone();
        let found = root_tasks.iter().find_map(|(name, task)| {
            let cond = task.get("triggerPolicy")?.get("condition")?.as_str()?;
            let (at, body) = group_tasks(&out, task)?;
            body.iter()
                .any(|(_, t)| is_group(&out, t))
                .then(|| (name.clone(), task.clone(), cond.to_string(), at))
        });
        let Some((outer_name, outer, outer_cond, at)) = found else {
            break;
        };
        changed = true;
        let component = outer
            .get("componentRef")
            .and_then(|c| str_at(c, "name"))
            .unwrap_or("")
            .to_string();
        let mut inner_tasks = out
            .get("components")
            .and_then(|c| c.get(&component))
            .and_then(|c| c.get("dag"))
            .and_then(|d| d.get("tasks"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        // An Elif/Else group inside: its conditions become tasks of the outer's DAG first.
        let branches: Vec<(String, Value)> = inner_tasks
            .iter()
            .filter(|(_, t)| is_branches(&out, t))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        for (name, group) in &branches {
            if let Some((group_at, body)) = group_tasks(&out, group) {
                let body: Vec<(String, Value)> =
                    body.into_iter().map(|(n, t)| (n, t.clone())).collect();
                let body = body.iter().map(|(n, t)| (n.clone(), t)).collect();
                hoist(&mut inner_tasks, name, group, &group_at, body, None, errors);
            }
        }
        let lifted: Vec<(String, Value)> = inner_tasks
            .iter()
            .filter(|(_, t)| t.get("triggerPolicy").is_some() && is_group(&out, t))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        for (name, _) in &lifted {
            inner_tasks.remove(name);
        }
        // Lifted through the outer as a group: its bindings and its waits.
        let mut staged = serde_json::Map::new();
        staged.insert(outer_name.clone(), outer.clone());
        let body = lifted.iter().map(|(n, t)| (n.clone(), t)).collect();
        hoist(&mut staged, &outer_name, &outer, &at, body, None, errors);
        let outer_inputs = outer
            .get("inputs")
            .and_then(|i| i.get("parameters"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut renamed = outer_cond.clone();
        for input in outer_inputs.keys() {
            renamed = renamed.replace(
                &format!("['{input}']"),
                &format!("['{outer_name}--{input}']"),
            );
        }
        let mut root = root_tasks.clone();
        for (name, mut task) in staged {
            let Some(t) = task.as_object_mut() else {
                continue;
            };
            let own = t
                .get("triggerPolicy")
                .and_then(|p| str_at(p, "condition"))
                .unwrap_or("")
                .to_string();
            if let Some(p) = t.get_mut("triggerPolicy").and_then(Value::as_object_mut) {
                p.insert(
                    "condition".into(),
                    Value::String(format!("{renamed} && {own}")),
                );
            }
            let params = t
                .entry("inputs")
                .or_insert_with(|| Value::Object(serde_json::Map::new()))
                .as_object_mut()
                .map(|i| {
                    i.entry("parameters")
                        .or_insert_with(|| Value::Object(serde_json::Map::new()))
                });
            if let Some(Value::Object(params)) = params {
                for (input, binding) in &outer_inputs {
                    params.insert(format!("{outer_name}--{input}"), binding.clone());
                }
            }
            if root.contains_key(&name) {
                errors.push(FieldError::new(
                    format!("{at}.{name}"),
                    "names a task of the root DAG too; a condition inside a condition \
                     becomes one of the root DAG",
                ));
                return None;
            }
            root.insert(name, task);
        }
        if inner_tasks.is_empty() {
            root.remove(&outer_name);
        }
        if let Some(dag) = out
            .get_mut("components")
            .and_then(|c| c.get_mut(&component))
            .and_then(|c| c.get_mut("dag"))
            .and_then(Value::as_object_mut)
        {
            dag.insert("tasks".into(), Value::Object(inner_tasks));
        }
        out = with_root_tasks(out, root)?;
    }
    changed.then_some(out)
}

/// `doc` with `root` as its root DAG's tasks.
fn with_root_tasks(mut doc: Value, root: serde_json::Map<String, Value>) -> Option<Value> {
    let slot = doc
        .get_mut("root")
        .and_then(|r| r.get_mut("dag"))
        .and_then(|d| d.get_mut("tasks"))?;
    *slot = Value::Object(root);
    Some(doc)
}
