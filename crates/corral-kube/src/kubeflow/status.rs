//! A TrainingJob's status in Kubeflow's format (`kubeflow.org/v1` JobStatus, also
//! MPIJob v2beta1's): conditions `Created`, `Running`, `Restarting`, `Succeeded`, `Failed`,
//! `Suspended` with reasons `<Kind><Type>` as Kubeflow's operator words them;
//! `replicaStatuses` by the manifest's replica type (`active`, `succeeded`, `failed`);
//! `startTime` and `completionTime`. Kubeflow's SDK (`is_job_succeeded`, `wait_for_job_conditions`)
//! and `kubectl get pytorchjobs` (state column: the last condition) read exactly these.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use corral_api::training_job::{ConditionStatus, ConditionType, TrainingJob};

use super::KubeflowJob;

fn condition(kind: &str, type_: &str, status: bool, message: String, at: Timestamp) -> Value {
    let reason = format!("{kind}{type_}");
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastUpdateTime": at.to_string(),
        "lastTransitionTime": at.to_string(),
    })
}

/// The Kubeflow status of `job`, made from the TrainingJob `tj` it was converted into.
/// `now` stamps a `Created` condition when the TrainingJob has no creation time.
pub fn kubeflow_status(job: &KubeflowJob, tj: &TrainingJob, now: Timestamp) -> Value {
    let kind = job.kind.kind;
    let name = job.name();
    let status = tj.status.clone().unwrap_or_default();
    let created_at = tj.metadata.creation_timestamp.unwrap_or(now);
    let cond = |t: ConditionType| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t && c.status == ConditionStatus::True)
    };
    // Created: the message says why it waits while it waits (Kubeflow has no Queued).
    let created_msg = match cond(ConditionType::Queued) {
        Some(q) if !q.message.is_empty() => {
            format!("{kind} {name} is created; queued: {}", q.message)
        }
        _ => format!("{kind} {name} is created."),
    };
    let mut conditions = vec![condition(kind, "Created", true, created_msg, created_at)];
    let finished = cond(ConditionType::Succeeded).or(cond(ConditionType::Failed));
    // Kubeflow keeps `Running` once it was, False after the job finished.
    let running = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Running);
    if let Some(r) = running {
        conditions.push(condition(
            kind,
            "Running",
            r.status == ConditionStatus::True && finished.is_none(),
            format!("{kind} {name} is running."),
            finished.map_or(r.last_transition_time, |f| f.last_transition_time),
        ));
    }
    if let Some(r) = cond(ConditionType::Restarting) {
        conditions.push(condition(
            kind,
            "Restarting",
            true,
            if r.message.is_empty() {
                format!("{kind} {name} is restarting.")
            } else {
                r.message.clone()
            },
            r.last_transition_time,
        ));
    }
    if let Some(s) = cond(ConditionType::Suspended) {
        conditions.push(condition(
            kind,
            "Suspended",
            true,
            format!("{kind} {name} is suspended."),
            s.last_transition_time,
        ));
    }
    if let Some(s) = cond(ConditionType::Succeeded) {
        conditions.push(condition(
            kind,
            "Succeeded",
            true,
            format!("{kind} {name} successfully completed."),
            s.last_transition_time,
        ));
    }
    if let Some(f) = cond(ConditionType::Failed) {
        conditions.push(condition(
            kind,
            "Failed",
            true,
            if f.message.is_empty() {
                format!("{kind} {name} has failed.")
            } else {
                f.message.clone()
            },
            f.last_transition_time,
        ));
    }
    // Every replica type of the manifest, zeros included (Kubeflow lists them all).
    let mut replicas = Map::new();
    for role in tj.spec.replicas.keys() {
        let r = status
            .replica_statuses
            .get(role)
            .cloned()
            .unwrap_or_default();
        replicas.insert(
            job.replica_type_of(*role),
            json!({"active": r.active, "succeeded": r.succeeded, "failed": r.failed}),
        );
    }
    let mut out = json!({"conditions": conditions, "replicaStatuses": replicas});
    if let Some(t) = status.start_time {
        out["startTime"] = json!(t.to_string());
    }
    if let Some(t) = status.completion_time {
        out["completionTime"] = json!(t.to_string());
    }
    out
}

/// The status of a Kubeflow job Corral cannot run (its manifest does not convert).
pub fn invalid_status(job: &KubeflowJob, message: &str, now: Timestamp) -> Value {
    let kind = job.kind.kind;
    let mut failed = condition(kind, "Failed", true, message.to_string(), now);
    failed["reason"] = json!("InvalidSpec");
    json!({
        "conditions": [
            condition(kind, "Created", true, format!("{kind} {} is created.", job.name()), now),
            failed,
        ],
        "replicaStatuses": {},
    })
}

/// Whether a written status says the same as `want`, timestamps of unchanged conditions
/// aside (so that a pass does not rewrite it).
pub fn same_status(have: Option<&Value>, want: &Value) -> bool {
    let Some(have) = have else {
        return false;
    };
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(cs) = v.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.remove("lastUpdateTime");
                    o.remove("lastTransitionTime");
                }
            }
        }
        v
    };
    strip(have) == strip(want)
}
