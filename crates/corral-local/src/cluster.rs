//! The embedded cluster: one owner of the store, the executor and the control plane.
//!
//! [`Cluster`] is plain synchronous code. The server wraps it (a `Mutex` driven by one task
//! that calls [`Cluster::tick`] every few hundred milliseconds, at once when a replica
//! exits, and request handlers that call the other methods). Every method takes `now` where
//! time matters: the cluster never reads the clock itself, so tests drive it with a clock of
//! their own.
//!
//! One [`Cluster::tick`] is one pass of the control loop:
//! 1. observe: poll the executor for replica processes that changed, into the store and
//!    the control plane (`corral_core::control`);
//! 2. step: the control plane reconciles, schedules and reconciles again, and says what to
//!    persist, what to start and stop, and what happened;
//! 3. persist, then act: statuses, admissions (with ports) and deletions are written
//!    *before* replicas start (ports, env contract, files) or stop; events are recorded;
//! 4. settle: starts are observations too, so the plane settles again in the same pass.
//!
//! Crash safety: everything a restart needs is in the store (`data_dir/corral.db`): jobs
//! with their status, admissions, replica process records (pid + start time) and ports.
//! [`Cluster::open`] re-adopts the replicas that survived, rebuilds the control plane from
//! the stored jobs and admissions and carries on; no job disappears, no replica runs twice.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::config::ClusterFileConfig;

mod act;
mod artifact_gc;
mod commands;
mod engine;
mod exec;
mod node;
mod pipelines;
mod progress;
mod recovery;
mod replicas;
mod revisions;
mod serving;
mod shutdown;
mod stored_pipelines;
mod submission;
mod views;

pub use shutdown::RunningReplica;

/// How to open the embedded cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Where the store (`corral.db`), replica logs and working files live.
    pub data_dir: PathBuf,
    /// What `corral.yaml` declares (pools, queues, priority classes, settings).
    pub file: ClusterFileConfig,
    /// The program the executor runs each replica under. `None`: the executor's default
    /// ([`ShimCommand::current_exe`]).
    pub shim: Option<crate::executor::ShimCommand>,
    /// Host address replicas are told to reach each other at.
    pub host_address: String,
    /// Whether replicas get cgroups (limits, OOM detection) when the machine allows.
    pub cgroup: crate::executor::CgroupMode,
    /// The MPI launcher's rsh agent, a command line mpirun runs as `<agent> <replica>
    /// <command>` (`corral rsh`, see `corral_core::launch::LaunchOptions::mpi_rsh_agent`).
    /// `None`: this executable's `rsh` subcommand.
    pub exec_agent: Option<String>,
}

impl ClusterConfig {
    /// A configuration with nothing declared: one node (this machine), a `default` queue
    /// with unlimited quota.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ClusterConfig {
            data_dir: data_dir.into(),
            file: ClusterFileConfig::default(),
            shim: None,
            host_address: "127.0.0.1".to_string(),
            cgroup: crate::executor::CgroupMode::Auto,
            exec_agent: None,
        }
    }
}

/// Why a request was refused or an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Submitted documents did not parse or validate; nothing was stored.
    #[error("{}", format_invalid(.0))]
    Invalid(Vec<DocumentProblem>),
    #[error("TrainingJob {namespace}/{name} already exists")]
    AlreadyExists { namespace: String, name: String },
    #[error("TrainingJob {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    /// The request is valid but not now (e.g. resuming a finished job).
    #[error("{0}")]
    Conflict(String),
    #[error("store: {0}")]
    Store(String),
    #[error("executor: {0}")]
    Executor(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("scheduler: {0}")]
    Scheduler(String),
}

fn format_invalid(problems: &[DocumentProblem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One field that is wrong, and what would be valid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldProblem {
    /// `spec.replicas.worker.resources.gpu`; empty for the document as a whole.
    pub path: String,
    pub message: String,
}

/// Everything wrong with one submitted document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentProblem {
    /// 1-based position in the submitted text (0: the text as a whole).
    pub index: usize,
    /// `TrainingJob mnist`, when known.
    pub what: Option<String>,
    pub errors: Vec<FieldProblem>,
}

impl From<&corral_api::document::DocumentError> for DocumentProblem {
    /// A document that did not parse or validate, as the API reports it.
    fn from(e: &corral_api::document::DocumentError) -> Self {
        DocumentProblem {
            index: e.index,
            what: e.what.clone(),
            errors: e
                .errors
                .iter()
                .map(|f| FieldProblem {
                    path: f.path.clone(),
                    message: f.message.clone(),
                })
                .collect(),
        }
    }
}

impl std::fmt::Display for DocumentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.what, self.index) {
            (Some(w), i) => write!(f, "document {i} ({w}):")?,
            (None, 0) => write!(f, "input:")?,
            (None, i) => write!(f, "document {i}:")?,
        }
        for e in &self.errors {
            if e.path.is_empty() {
                write!(f, "\n  {}", e.message)?;
            } else {
                write!(f, "\n  {}: {}", e.path, e.message)?;
            }
        }
        Ok(())
    }
}

/// A job accepted by [`Cluster::submit`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitResult {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The Kubeflow kind it was converted from (`PyTorchJob`), if any.
    pub converted_from: Option<String>,
    /// What it asks that this cluster accepts but does not honour (`path: message`); each
    /// is also a Warning event of the job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The kind accepted when it is not a TrainingJob (`PipelineRun`, `ServedModel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A served model's revision after this submission (`<model>-00002`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The submission made that revision (a new model, or what its replicas run changed);
    /// false: the model's other fields changed, or nothing did.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_revision: bool,
}

/// Where a job is in its life, in one word: the lifecycle's definition, shared by every shell.
pub use corral_core::lifecycle::JobState;

/// A job's row in `list`: its summary as JSON text, made once each time the summary
/// changes, so that a list response joins the rows' text rather than serializing every
/// job again (that was most of a 10,000-job list's time on the server). Beside it, only
/// what the cluster reads of every row: its key (namespace and name, the rows' order), a
/// uid by name, and the queue and state for the metrics.
///
/// All of it is one byte string: its own allocation while the job lives (the row is
/// remade at each change), a slice of a shared block once the job is retired
/// ([`SummaryRow::packed`]), so that a finished job's row holds no small allocation of its
/// own (see [`corral_core::packed`]). Rows are ordered, compared and looked up by their key
/// ([`SummaryRow::key_of`]).
#[derive(Clone, Debug)]
pub struct SummaryRow {
    /// `namespace NUL name`, uid, queue, then the JSON.
    text: bytes::Bytes,
    /// Where the namespace, the name, the uid and the queue end in `text`.
    ends: [usize; 4],
    state: JobState,
}

/// Bytes reserved for a row's JSON (a summary is about 250).
const JSON_BYTES_HINT: usize = 320;

impl SummaryRow {
    pub fn new(summary: &JobSummary) -> Self {
        let namespace_end = summary.namespace.len();
        let name_end = namespace_end + 1 + summary.name.len();
        let uid_end = name_end + summary.uid.len();
        let queue_end = uid_end + summary.queue.len();
        // One allocation: the JSON is written after the key, uid and queue.
        let mut text = Vec::with_capacity(queue_end + JSON_BYTES_HINT);
        for part in [
            &summary.namespace,
            "\0",
            &summary.name,
            &summary.uid,
            &summary.queue,
        ] {
            text.extend_from_slice(part.as_bytes());
        }
        serde_json::to_writer(&mut text, summary)
            .expect("a JobSummary (strings, numbers, a timestamp) always serializes");
        SummaryRow {
            text: text.into(),
            ends: [namespace_end, name_end, uid_end, queue_end],
            state: summary.state,
        }
    }

    /// The same row, its text copied into `packer`'s current block: what a retired job
    /// keeps.
    pub fn packed(&self, packer: &mut corral_core::packed::Packer) -> Self {
        SummaryRow {
            text: packer.pack(&[&self.text]),
            ends: self.ends,
            state: self.state,
        }
    }

    /// The key a row of `namespace`/`name` is found by. NUL, below every character a
    /// name may have, keeps the rows in (namespace, name) order and one namespace's rows
    /// together.
    pub fn key_of(namespace: &str, name: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(namespace.len() + 1 + name.len());
        key.extend_from_slice(namespace.as_bytes());
        key.push(0);
        key.extend_from_slice(name.as_bytes());
        key
    }

    /// The keys of `namespace`'s rows lie in `[start, end)`.
    pub fn namespace_range(namespace: &str) -> (Vec<u8>, Vec<u8>) {
        let start = Self::key_of(namespace, "");
        let mut end = start.clone();
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        (start, end)
    }

    fn key(&self) -> &[u8] {
        &self.text[..self.ends[1]]
    }

    fn part(&self, start: usize, end: usize) -> &str {
        std::str::from_utf8(&self.text[start..end])
            .expect("a row is made of whole strings and cut at their ends")
    }

    pub fn namespace(&self) -> &str {
        self.part(0, self.ends[0])
    }

    pub fn name(&self) -> &str {
        self.part(self.ends[0] + 1, self.ends[1])
    }

    pub fn uid(&self) -> &str {
        self.part(self.ends[1], self.ends[2])
    }

    pub fn queue(&self) -> &str {
        self.part(self.ends[2], self.ends[3])
    }

    pub fn state(&self) -> JobState {
        self.state
    }

    /// The [`JobSummary`] as the API sends it: compact serde_json.
    pub fn json(&self) -> &str {
        self.part(self.ends[3], self.text.len())
    }

    /// The summary the text was made from.
    pub fn summary(&self) -> Result<JobSummary, ClusterError> {
        serde_json::from_str(self.json())
            .map_err(|e| ClusterError::Store(format!("a cached job summary does not parse: {e}")))
    }
}

impl PartialEq for SummaryRow {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for SummaryRow {}

impl PartialOrd for SummaryRow {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SummaryRow {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }
}

/// Rows in a set are found by [`SummaryRow::key_of`], without making a row.
impl std::borrow::Borrow<[u8]> for SummaryRow {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

/// Normal or Warning, as Kubernetes events: the control plane's type.
pub use corral_core::control::EventType;

/// One incarnation's output log of a replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaLog {
    /// `attempt.retry`, as the replica's `incarnation` in `describe`.
    pub incarnation: String,
    /// When it was launched.
    pub started: Option<Timestamp>,
    /// The current segment (`<path>.1` holds the one before, once the log rotated).
    pub path: PathBuf,
}

/// What one pass of the control loop did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TickReport {
    /// `namespace/name` of jobs admitted in this pass.
    pub admitted: Vec<String>,
    pub preempted: Vec<String>,
    /// Replica names started / stopped.
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    /// Jobs that reached Succeeded or Failed in this pass.
    pub finished: Vec<String>,
    /// Jobs removed from the store.
    pub deleted: Vec<String>,
    /// Problems that did not stop the pass (a replica that could not start, ...).
    pub errors: Vec<String>,
    /// Pipeline artifacts removed in this pass (their runs gone, nothing holding them,
    /// older than the retention).
    pub artifacts_removed: Vec<String>,
    /// Tick again within this long even if nothing happens (back-off, deadlines, TTL).
    pub next_tick_in: Option<Duration>,
}

/// Gauges and counters for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSnapshot {
    /// Jobs by (queue, state).
    pub jobs: BTreeMap<String, BTreeMap<String, u64>>,
    /// GPUs in use by admitted jobs, by queue.
    pub queue_gpus_used: BTreeMap<String, u64>,
    pub gpus_total: u64,
    pub gpus_allocated: u64,
    pub running_replicas: u64,
    /// Counters since this process opened the cluster.
    pub jobs_submitted_total: u64,
    pub admissions_total: u64,
    pub preemptions_total: u64,
    pub replica_starts_total: u64,
    pub restarts_total: u64,
    pub jobs_succeeded_total: u64,
    pub jobs_failed_total: u64,
    pub ticks_total: u64,
    /// Duration of the last scheduling cycle, in seconds.
    pub last_cycle_seconds: f64,
    /// Duration of the last tick, in seconds.
    pub last_tick_seconds: f64,
    /// This machine's name (the `Hostname` label of the GPU series).
    #[serde(default)]
    pub hostname: String,
    /// Every GPU now (NVML); empty without NVML.
    #[serde(default)]
    pub gpu_samples: Vec<crate::gpu::GpuSample>,
}

pub use corral_core::views::{
    AdmissionInfo, Event, GpuDevice, JobDetails, JobSummary, NodeInfo, QueueInfo, QueuePoolUsage,
    QuotaLimits, ReplicaInfo, ReplicaUsageRow,
};
pub use engine::Cluster;
pub use exec::{ExecAuth, ExecError};
pub use node::{build_cluster, control_config, local_node, unhealthy_gpus, validation_context};
pub use pipelines::{PipelineRunDetails, StepRow};
pub use progress::JobProgressRow;
pub use serving::{
    EndpointReplica, ServingEndpoint, ServingObservation, has_served_models, serving_path,
};
pub use submission::{CheckedSubmission, SubmitContext, names_stored_pipelines};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::ops::Bound;

    fn row(namespace: &str, name: &str) -> SummaryRow {
        SummaryRow::new(&JobSummary {
            namespace: namespace.into(),
            name: name.into(),
            uid: format!("uid-{namespace}-{name}"),
            framework: "pytorch".into(),
            queue: format!("queue-{name}"),
            state: JobState::Succeeded,
            replicas_ready: 0,
            replicas_total: 2,
            gpus: 1,
            created: Timestamp::UNIX_EPOCH,
            restarts: 0,
            preemptions: 0,
        })
    }

    fn namespace_of(rows: &BTreeSet<SummaryRow>, namespace: &str) -> Vec<String> {
        let (start, end) = SummaryRow::namespace_range(namespace);
        rows.range::<[u8], _>((
            Bound::Included(start.as_slice()),
            Bound::Excluded(end.as_slice()),
        ))
        .map(|r| r.name().to_string())
        .collect()
    }

    #[test]
    fn a_row_gives_back_its_parts_packed_or_not() {
        let mut packer = corral_core::packed::Packer::default();
        let live = row("team-a", "resnet");
        let packed = live.packed(&mut packer);
        for r in [&live, &packed] {
            assert_eq!(r.namespace(), "team-a");
            assert_eq!(r.name(), "resnet");
            assert_eq!(r.uid(), "uid-team-a-resnet");
            assert_eq!(r.queue(), "queue-resnet");
            assert_eq!(r.state(), JobState::Succeeded);
            assert_eq!(
                r.summary().expect("parses").name,
                "resnet",
                "the JSON is the summary's"
            );
        }
        assert_eq!(live.json(), packed.json());
    }

    proptest! {
        /// Rows are in (namespace, name) order, as the list promises, although the key is
        /// one byte string; a namespace's range holds its rows and no other, even where
        /// one namespace is a prefix of another (`a` and `a-b`).
        #[test]
        fn rows_are_in_namespace_then_name_order_and_a_namespace_is_its_range(
            keys in proptest::collection::btree_set(
                ("[a-c][a-c-]{0,3}", "[a-c0-9][a-c0-9.-]{0,5}"),
                0..40,
            ),
        ) {
            let rows: BTreeSet<SummaryRow> = keys.iter().map(|(ns, n)| row(ns, n)).collect();
            let in_set: Vec<(String, String)> = rows
                .iter()
                .map(|r| (r.namespace().to_string(), r.name().to_string()))
                .collect();
            let expected: Vec<(String, String)> = keys.iter().cloned().collect();
            prop_assert_eq!(in_set, expected);
            for ns in keys.iter().map(|(ns, _)| ns) {
                let names: Vec<String> = keys
                    .iter()
                    .filter(|(n, _)| n == ns)
                    .map(|(_, name)| name.clone())
                    .collect();
                prop_assert_eq!(namespace_of(&rows, ns), names);
            }
            for (ns, name) in &keys {
                let found = rows.get(SummaryRow::key_of(ns, name).as_slice());
                let uid = format!("uid-{ns}-{name}");
                prop_assert_eq!(found.map(SummaryRow::uid), Some(uid.as_str()));
            }
        }
    }
}
