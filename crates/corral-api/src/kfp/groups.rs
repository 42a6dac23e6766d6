//! The root DAG's groups whose tasks run as steps of their own: a `dsl.If` (each task under
//! its condition) and a `dsl.ExitHandler` (its tasks as they are; the task it names runs as
//! the run's exit handler, `PipelineSpec::on_exit`).

use serde_json::Value;

use super::{Dag, Errors, Scope, parameter_input, step, str_at};
use crate::pipeline::{StepSpec, WhenCondition};
use crate::validate::FieldError;

/// A group of the root DAG whose DAG's tasks are steps of the run.
pub(super) struct Group<'a> {
    pub task_name: String,
    pub task: &'a Value,
    /// Where its DAG's tasks are, and them.
    pub at: String,
    pub tasks: Vec<(String, &'a Value)>,
    /// A `dsl.If`'s condition, on each of its steps; none for an exit handler's group.
    pub when: Option<WhenCondition>,
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

/// A condition of the root DAG: `inputs.parameter_values['<input>'] == '<value>'` (or `!=`;
/// a number or boolean without quotes), the input bound to a pipeline parameter or another
/// task's output parameter; anything else is refused at its field.
pub(super) fn parse_condition<'a>(
    doc: &'a Value,
    task_name: &str,
    task: &'a Value,
    errors: &mut Errors,
) -> Option<Group<'a>> {
    let at = format!("root.dag.tasks.{task_name}");
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
    let parsed = ["==", "!="].iter().find_map(|op| {
        let (left, right) = text.split_once(op)?;
        let input = left
            .trim()
            .strip_prefix("inputs.parameter_values['")?
            .strip_suffix("']")?;
        let right = right.trim();
        let literal = right
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
            .unwrap_or(right);
        Some((input, *op, literal.to_string()))
    });
    let Some((input, op, literal)) = parsed else {
        refuse(
            errors,
            "only `inputs.parameter_values['<input>'] == <value>` (or `!=`) is supported yet",
        );
        return None;
    };
    let bound = task
        .get("inputs")
        .and_then(|i| i.get("parameters"))
        .and_then(|p| p.get(input));
    let reference = bound
        .and_then(|b| parameter_input(b, &Scope::Root))
        .and_then(|(r, _)| r);
    let Some(value) = reference else {
        refuse(
            errors,
            "the condition reads neither a pipeline parameter nor another task's output \
             parameter",
        );
        return None;
    };
    let Some((tasks_at, tasks)) = group_tasks(doc, task) else {
        refuse(errors, "its DAG has no tasks");
        return None;
    };
    let (equals, not_equals) = if op == "==" {
        (Some(literal), None)
    } else {
        (None, Some(literal))
    };
    Some(Group {
        task_name: task_name.to_string(),
        task,
        at: tasks_at,
        tasks,
        when: Some(WhenCondition {
            value,
            equals,
            not_equals,
        }),
    })
}

/// A group's steps: each of its tasks, under its condition where it has one.
pub(super) fn group_steps(doc: &Value, g: &Group, dag: &Dag, errors: &mut Errors) -> Vec<StepSpec> {
    let scope = Scope::Inside {
        task: g.task,
        item_input: None,
    };
    let mut out = Vec::new();
    for (name, task) in &g.tasks {
        let at = format!("{}.{name}", g.at);
        if let Some(mut step) = step(doc, &at, name, task, &scope, dag, errors) {
            step.when.extend(g.when.clone());
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

/// The group an exit task waits for (the `dsl.ExitHandler`'s DAG), refused at its field
/// when it is not one group of the root DAG.
pub(super) fn parse_exit_group<'a>(
    doc: &'a Value,
    tasks: &'a serde_json::Map<String, Value>,
    exit_name: &str,
    exit: &Value,
    errors: &mut Errors,
) -> Option<Group<'a>> {
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
        .get_key_value(group_name)
        .and_then(|(name, task)| Some((name, task, group_tasks(doc, task)?)));
    let Some((name, task, (tasks_at, body))) = found else {
        errors.push(FieldError::new(
            at,
            format!("`{group_name}` is not a group of the root DAG with tasks"),
        ));
        return None;
    };
    Some(Group {
        task_name: name.clone(),
        task,
        at: tasks_at,
        tasks: body,
        when: None,
    })
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
    let at = format!("root.dag.tasks.{name}");
    let mut step = step(doc, &at, name, &task, &Scope::Exit, dag, errors)?;
    step.depends_on.clear();
    Some(step)
}
