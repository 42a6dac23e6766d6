//! The conformance scenario: one story every shell runs through its own machinery (the
//! embedded cluster with real processes, the operator against an API server, a fake shell
//! around the bare plane), so that a test in each shell can show it reaches the same job
//! states, admissions and events after every step.
//!
//! One node with 4 GPUs; priority classes `low` < `mid` < `high`; a grace period of 2 s;
//! no preemption protection. The story: two jobs arrive (alpha fits, bravo waits), a worker
//! of alpha fails and its gang restarts, delta (high) preempts alpha, is suspended (alpha
//! runs again), resumed (it preempts alpha again) and deleted (alpha runs), alpha succeeds
//! (bravo runs at last), bravo is deleted. Then the platform misbehaves: echo's program
//! cannot start (it backs off and gives its GPUs to foxtrot, which could run); foxtrot is
//! preempted by golf but is slow to exit (golf's replicas wait for its GPUs); a GPU under
//! golf turns unhealthy (golf runs on, foxtrot can no longer fit the node); the GPU heals
//! (foxtrot runs). Every choice is made by priority, never by how much service a job
//! attained, so that shells whose clocks run differently reach the same states.
//!
//! What no node could ever hold is not in the story: a cluster of fixed nodes (embedded,
//! simulated) refuses it at submit, while on Kubernetes, where nodes come and go, it waits
//! as Unschedulable; each shell's own tests hold that.

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
    /// The GPU under the job's `worker-0` turns unhealthy (embedded: NVML says so; on
    /// Kubernetes the device plugin lowers the node's allocatable `nvidia.com/gpu` by one).
    GpuTurnsUnhealthy(&'static str),
    /// Every GPU is healthy again.
    GpusHeal,
}

/// The story, step by step.
pub fn steps() -> Vec<ScenarioStep> {
    use ScenarioStep::*;
    vec![
        Submit(vec!["alpha", "bravo"]),
        FailWorker("alpha", 1),
        Submit(vec!["delta"]),
        Suspend("delta"),
        Resume("delta"),
        Delete("delta"),
        Finish("alpha"),
        Delete("bravo"),
        Submit(vec!["echo", "foxtrot"]),
        Delete("echo"),
        Submit(vec!["golf"]),
        GpuTurnsUnhealthy("golf"),
        Finish("golf"),
        GpusHeal,
        Delete("foxtrot"),
    ]
}

/// Whether the job's program can never start: embedded, its command does not exist; on
/// Kubernetes, its image cannot be pulled; the bare plane is told `start_failed`.
pub fn cannot_start(name: &str) -> bool {
    name == "echo"
}

/// Whether the job's replicas ignore the request to stop and end only when killed once the
/// grace period is over ([`GRACE_SECONDS`]).
pub fn slow_to_stop(name: &str) -> bool {
    name == "foxtrot"
}

/// Workers, GPUs per worker and priority class of each job of the story.
fn shape(name: &str) -> Option<(u32, u32, &'static str)> {
    match name {
        "alpha" => Some((2, 1, "mid")),
        "bravo" => Some((4, 1, "low")),
        "delta" => Some((4, 1, "high")),
        "echo" => Some((2, 1, "low")),
        "foxtrot" => Some((4, 1, "low")),
        "golf" => Some((2, 1, "high")),
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

/// What each step changed: a job is kept in a step when it is new, its state or admission
/// differs from the step before, or it had events. A shell's full trace (every submitted
/// job after every step) goes through this before it is compared with [`expected`], which
/// lists only changes so that a reader sees what each step did.
pub fn changes(trace: &Trace) -> Trace {
    let mut last: BTreeMap<String, JobOutcome> = BTreeMap::new();
    trace
        .iter()
        .map(|step| {
            let changed = step
                .iter()
                .filter(|(name, now)| {
                    !now.events.is_empty()
                        || last
                            .get(*name)
                            .is_none_or(|b| (b.state, b.admitted) != (now.state, now.admitted))
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            last = step.clone();
            changed
        })
        .collect()
}

/// The differences between a shell's trace and [`expected`], one line per step that
/// differs (empty: the same).
pub fn differences(trace: &Trace) -> Vec<String> {
    let got = changes(trace);
    let want = expected();
    let all = steps();
    let mut out: Vec<String> = (0..got.len().max(want.len()))
        .filter(|i| got.get(*i) != want.get(*i))
        .map(|i| {
            format!(
                "after step {i} ({:?}):\n  got:  {:?}\n  want: {:?}",
                all.get(i),
                got.get(i),
                want.get(i)
            )
        })
        .collect();
    if got.len() != want.len() {
        out.push(format!("{} steps, expected {}", got.len(), want.len()));
    }
    out
}

/// What every shell's trace must come to (see [`changes`]): after each step, the jobs it
/// changed.
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
    let preempted = ["Preempted", "Requeued", "Pending"];
    let runs = ["Admitted", "Running"];
    vec![
        // Two arrive: alpha fits, bravo waits for 4 GPUs.
        step(vec![
            ("alpha", o(Some(Running), true, &runs)),
            ("bravo", o(Some(Queued), false, &["Pending"])),
        ]),
        // A worker of alpha fails: the gang restarts after its back-off.
        step(vec![(
            "alpha",
            o(Some(Running), true, &["Restarting", "Running"]),
        )]),
        // delta (high) preempts alpha (mid).
        step(vec![
            ("alpha", o(Some(Queued), false, &preempted)),
            ("delta", o(Some(Running), true, &runs)),
        ]),
        // delta suspended: alpha (mid) runs again before bravo (low).
        step(vec![
            ("alpha", o(Some(Running), true, &runs)),
            ("delta", o(Some(Suspended), false, &["Suspended"])),
        ]),
        // delta resumed: it preempts alpha again.
        step(vec![
            ("alpha", o(Some(Queued), false, &preempted)),
            (
                "delta",
                o(Some(Running), true, &["Resumed", "Admitted", "Running"]),
            ),
        ]),
        // delta deleted: alpha runs.
        step(vec![
            ("alpha", o(Some(Running), true, &runs)),
            ("delta", o(None, false, &[])),
        ]),
        // alpha succeeds: bravo runs at last.
        step(vec![
            ("alpha", o(Some(Succeeded), false, &["Succeeded"])),
            ("bravo", o(Some(Running), true, &runs)),
        ]),
        step(vec![("bravo", o(None, false, &[]))]),
        // echo is admitted first but its program cannot start: it backs off and gives its
        // GPUs back, foxtrot (which could run) runs; after the back-off echo waits behind it.
        step(vec![
            (
                "echo",
                o(
                    Some(Queued),
                    false,
                    &["Admitted", "StartBackOff", "Pending"],
                ),
            ),
            (
                "foxtrot",
                o(Some(Running), true, &["Pending", "Admitted", "Running"]),
            ),
        ]),
        step(vec![("echo", o(None, false, &[]))]),
        // golf (high) preempts foxtrot, which is slow to exit: golf's replicas wait for its
        // GPUs (each shell checks that they never ran at once), then run.
        step(vec![
            ("foxtrot", o(Some(Queued), false, &preempted)),
            ("golf", o(Some(Running), true, &runs)),
        ]),
        // A GPU under golf turns unhealthy: golf runs on; the node has 3 good GPUs left, so
        // foxtrot (4) can no longer fit it.
        step(vec![(
            "foxtrot",
            o(Some(Queued), false, &["Pending", "Unschedulable"]),
        )]),
        // golf succeeds; foxtrot still cannot fit.
        step(vec![("golf", o(Some(Succeeded), false, &["Succeeded"]))]),
        // The GPU heals: foxtrot runs.
        step(vec![("foxtrot", o(Some(Running), true, &runs))]),
        step(vec![("foxtrot", o(None, false, &[]))]),
    ]
}
