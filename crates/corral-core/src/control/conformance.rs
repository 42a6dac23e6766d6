//! The conformance scenario: one story every shell runs through its own machinery (the
//! embedded cluster with real processes, the operator against an API server, a fake shell
//! around the bare plane), so that a test in each shell can show it reaches the same job
//! states, admissions and events after every step.
//!
//! One node with 4 GPUs; priority classes `low` < `mid` < `high`; a grace period of 2 s;
//! no preemption protection. The story: three jobs arrive (alpha fits, bravo waits, colossal
//! can never fit), a worker of alpha fails and its gang restarts, delta (high) preempts
//! alpha, is suspended (alpha runs again), resumed (it preempts alpha again) and deleted
//! (alpha runs), alpha succeeds (bravo runs at last), the rest are deleted. Every choice
//! is made by priority, never by how much service a job attained, so that shells whose
//! clocks run differently reach the same states.

use std::collections::BTreeMap;

use corral_api::{JobPriorityClass, TrainingJob};
use serde_json::json;

use super::events::event_reason;
use crate::lifecycle::JobState;

/// Namespace of the scenario's jobs.
pub const NAMESPACE: &str = "conformance";
/// GPUs of the scenario's one node.
pub const NODE_GPUS: u32 = 4;
/// The grace period the cluster is configured with.
pub const GRACE_SECONDS: u64 = 2;

/// What happens next in the story.
#[derive(Clone, Debug, PartialEq)]
pub enum ScenarioStep {
    /// Submit these jobs (by name, see [`job`]).
    Submit(Vec<&'static str>),
    /// The replica `worker-<index>` of the job's current incarnation exits with code 1.
    FailWorker(&'static str, u32),
    /// Every replica of the job exits 0.
    Finish(&'static str),
    Suspend(&'static str),
    Resume(&'static str),
    Delete(&'static str),
}

/// The story, step by step.
pub fn steps() -> Vec<ScenarioStep> {
    use ScenarioStep::*;
    vec![
        Submit(vec!["alpha", "bravo", "colossal"]),
        FailWorker("alpha", 1),
        Submit(vec!["delta"]),
        Suspend("delta"),
        Resume("delta"),
        Delete("delta"),
        Finish("alpha"),
        Delete("bravo"),
        Delete("colossal"),
    ]
}

/// Workers, GPUs per worker and priority class of each job of the story.
fn shape(name: &str) -> Option<(u32, u32, &'static str)> {
    match name {
        "alpha" => Some((2, 1, "mid")),
        "bravo" => Some((4, 1, "low")),
        "colossal" => Some((1, 8, "low")),
        "delta" => Some((4, 1, "high")),
        _ => None,
    }
}

/// The story's job `name` (PyTorch, `OnFailure`), whose workers run `command`.
pub fn job(name: &str, command: &[String]) -> Option<TrainingJob> {
    let (workers, gpus, class) = shape(name)?;
    serde_json::from_value(json!({
        "apiVersion": "corral.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "framework": "pytorch",
            "priorityClass": class,
            "replicas": {"worker": {
                "count": workers,
                "restartPolicy": "OnFailure",
                "resources": {"gpu": gpus, "cpu": "100m", "memory": "64Mi"},
                "template": {"command": command},
            }},
            "runPolicy": {"backoffLimit": 5},
        },
    }))
    .ok()
}

/// The story's priority classes.
pub fn priority_classes() -> Vec<JobPriorityClass> {
    [("low", 10), ("mid", 100), ("high", 1000)]
        .into_iter()
        .filter_map(|(name, value)| {
            serde_json::from_value(json!({
                "apiVersion": "corral.dev/v1alpha1",
                "kind": "JobPriorityClass",
                "metadata": {"name": name},
                "spec": {"value": value},
            }))
            .ok()
        })
        .collect()
}

/// One job after a step has settled: its state (`None`: gone), whether it holds an
/// admission, and the reasons of the control plane's events since the last step (sorted,
/// each once: how many `Pending` events a wait produces depends on how often the shell
/// looked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    pub state: Option<JobState>,
    pub admitted: bool,
    pub events: Vec<&'static str>,
}

impl JobOutcome {
    /// A job's outcome from what a shell shows: its state, whether it holds an admission,
    /// and the reasons of the events it recorded since the previous step (the control
    /// plane's, sorted, each once).
    pub fn new<'a>(
        state: Option<JobState>,
        admitted: bool,
        reasons: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut events: Vec<&'static str> = reasons.into_iter().filter_map(plane_reason).collect();
        events.sort_unstable();
        events.dedup();
        JobOutcome {
            state,
            admitted,
            events,
        }
    }
}

/// Every job of the story after each step, by name.
pub type Trace = Vec<BTreeMap<String, JobOutcome>>;

/// The event reasons a trace records: the control plane's (shells add their own).
pub fn plane_reason(reason: &str) -> Option<&'static str> {
    event_reason::ALL.iter().copied().find(|r| *r == reason)
}

/// The trace every shell must produce.
pub fn expected() -> Trace {
    use JobState::*;
    let o = |state: Option<JobState>, admitted: bool, events: &[&'static str]| {
        let mut events = events.to_vec();
        events.sort_unstable();
        JobOutcome {
            state,
            admitted,
            events,
        }
    };
    let step = |entries: Vec<(&str, JobOutcome)>| -> BTreeMap<String, JobOutcome> {
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    };
    vec![
        // Three arrive: alpha fits, bravo waits for 4 GPUs, colossal never fits.
        step(vec![
            ("alpha", o(Some(Running), true, &["Admitted", "Running"])),
            ("bravo", o(Some(Queued), false, &["Pending"])),
            (
                "colossal",
                o(Some(Queued), false, &["Pending", "Unschedulable"]),
            ),
        ]),
        // A worker of alpha fails: the gang restarts after its back-off.
        step(vec![
            ("alpha", o(Some(Running), true, &["Restarting", "Running"])),
            ("bravo", o(Some(Queued), false, &[])),
            ("colossal", o(Some(Queued), false, &[])),
        ]),
        // delta (high) preempts alpha (mid).
        step(vec![
            (
                "alpha",
                o(Some(Queued), false, &["Preempted", "Requeued", "Pending"]),
            ),
            ("bravo", o(Some(Queued), false, &[])),
            ("colossal", o(Some(Queued), false, &[])),
            ("delta", o(Some(Running), true, &["Admitted", "Running"])),
        ]),
        // delta suspended: alpha (mid) runs again before bravo (low).
        step(vec![
            ("alpha", o(Some(Running), true, &["Admitted", "Running"])),
            ("bravo", o(Some(Queued), false, &[])),
            ("colossal", o(Some(Queued), false, &[])),
            ("delta", o(Some(Suspended), false, &["Suspended"])),
        ]),
        // delta resumed: it preempts alpha again.
        step(vec![
            (
                "alpha",
                o(Some(Queued), false, &["Preempted", "Requeued", "Pending"]),
            ),
            ("bravo", o(Some(Queued), false, &[])),
            ("colossal", o(Some(Queued), false, &[])),
            (
                "delta",
                o(Some(Running), true, &["Resumed", "Admitted", "Running"]),
            ),
        ]),
        // delta deleted: alpha runs.
        step(vec![
            ("alpha", o(Some(Running), true, &["Admitted", "Running"])),
            ("bravo", o(Some(Queued), false, &[])),
            ("colossal", o(Some(Queued), false, &[])),
            ("delta", o(None, false, &[])),
        ]),
        // alpha succeeds: bravo runs at last.
        step(vec![
            ("alpha", o(Some(Succeeded), false, &["Succeeded"])),
            ("bravo", o(Some(Running), true, &["Admitted", "Running"])),
            ("colossal", o(Some(Queued), false, &[])),
            ("delta", o(None, false, &[])),
        ]),
        step(vec![
            ("alpha", o(Some(Succeeded), false, &[])),
            ("bravo", o(None, false, &[])),
            ("colossal", o(Some(Queued), false, &[])),
            ("delta", o(None, false, &[])),
        ]),
        step(vec![
            ("alpha", o(Some(Succeeded), false, &[])),
            ("bravo", o(None, false, &[])),
            ("colossal", o(None, false, &[])),
            ("delta", o(None, false, &[])),
        ]),
    ]
}
