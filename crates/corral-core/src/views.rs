//! What users read of the cluster, in the shape every shell's read API sends it: a job's
//! summary (a line of `corral list`) and details (`corral describe`), queues, nodes and
//! their GPUs, replicas' resource use, and the usage report with the queues' budgets. Pure
//! data and the rules that make it from the control plane's record, so that the embedded
//! server and the operator answer alike.

use std::collections::BTreeMap;
use std::path::PathBuf;

use corral_api::PipelineRun;
use corral_api::TrainingJob;
use corral_api::pipeline::StepPhase;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::control::EventType;
use crate::control::accounting::{
    BudgetStanding, UsageBucket, UsageInterval, UsageRow, usage_rows,
};
use crate::lifecycle::JobState;
use crate::sched::Millis;

/// One line of `corral get jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `pytorch`, `tensorflow`, ...
    pub framework: String,
    pub queue: String,
    pub state: JobState,
    /// Replicas of the current attempt that are running (or finished successfully).
    pub replicas_ready: u32,
    pub replicas_total: u32,
    /// GPUs the whole job needs.
    pub gpus: u64,
    /// When the job was submitted (age = now - created).
    pub created: Timestamp,
    pub restarts: u32,
    pub preemptions: u32,
}

impl JobSummary {
    /// A job as `list` shows it, from its record alone: the same rule in every shell.
    /// `deleting`: deleted, its replicas still stopping.
    pub fn of(job: &TrainingJob, uid: &str, created: Timestamp, deleting: bool) -> JobSummary {
        // Defaults change none of the fields read here (counts, GPUs, queue, framework),
        // so the spec is read as stored rather than cloned and defaulted.
        let spec = &job.spec;
        let status = job.status.as_ref();
        JobSummary {
            namespace: job.metadata.namespace_or_default().to_string(),
            name: job.metadata.name.clone(),
            uid: uid.to_string(),
            framework: spec.framework.as_str().to_string(),
            queue: spec.queue_name().to_string(),
            state: if deleting {
                JobState::Deleting
            } else {
                crate::lifecycle::job_state(spec, status)
            },
            replicas_ready: status.map_or(0, ready_replicas),
            replicas_total: u32::try_from(replicas_total(spec)).unwrap_or(u32::MAX),
            gpus: spec.total_gpus(),
            created,
            restarts: status.map_or(0, |s| s.restart_count),
            preemptions: status.map_or(0, |s| s.preemption_count),
        }
    }
}

/// Replicas the job may run at once: an elastic job counts its role at its maximum, so that
/// `list` reads "1/3" for one worker of up to three.
fn replicas_total(spec: &corral_api::TrainingJobSpec) -> u64 {
    let total = spec.total_replicas();
    match crate::lifecycle::policy::elastic_role(spec) {
        Some(role) => {
            let count = spec.replicas.get(&role).map_or(0, |r| r.count);
            let (_, max) = crate::lifecycle::policy::elastic_bounds(spec);
            total - u64::from(count) + u64::from(max)
        }
        None => total,
    }
}

/// Replicas of the current incarnation running or done, as the status counts them
/// (`replicaStatuses`, Kubeflow's per-role active and succeeded counts).
pub fn ready_replicas(status: &corral_api::TrainingJobStatus) -> u32 {
    status.replica_statuses.values().fold(0u32, |n, r| {
        n.saturating_add(r.active).saturating_add(r.succeeded)
    })
}

/// One replica process, current or left over, as `corral describe` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaInfo {
    /// `<job>-<role>-<index>`.
    pub name: String,
    pub role: String,
    pub index: u32,
    /// `attempt.retry` of this incarnation.
    pub incarnation: String,
    /// `Running`, `Succeeded`, `Failed`, `Gone`, ...
    pub phase: String,
    pub exit_code: Option<i32>,
    /// Why it failed (`Error`, `OOMKilled`), if it did.
    pub reason: Option<String>,
    /// What the shim said when it could not run the command (a missing program or working
    /// directory, a cgroup it could not join), from the replica's exit file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub pid: Option<u32>,
    pub gpus: Vec<u32>,
    pub port: Option<u16>,
    /// Restarts of this replica alone in the current attempt (the job's restarts are in
    /// the summary).
    pub restarts: u32,
    pub started: Option<Timestamp>,
    pub log_path: Option<PathBuf>,
}

/// Something that happened to a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub time: Timestamp,
    pub namespace: String,
    pub job: String,
    #[serde(rename = "type")]
    pub type_: EventType,
    /// `Admitted`, `Started`, `Restarting`, `Preempted`, `Failed`, `Succeeded`, ...
    pub reason: String,
    pub message: String,
}

/// Where the scheduler placed an admitted job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionInfo {
    pub pool: String,
    pub gpu_type: Option<String>,
    pub admitted_at: Timestamp,
    pub placements: Vec<crate::sched::ReplicaPlacement>,
}

/// Everything `corral describe job` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDetails {
    pub summary: JobSummary,
    /// The job with its recorded status (conditions included).
    pub job: TrainingJob,
    pub admission: Option<AdmissionInfo>,
    pub replicas: Vec<ReplicaInfo>,
    /// Oldest first.
    pub events: Vec<Event>,
    /// Why the job is still waiting, in the scheduler's words.
    pub pending_reason: Option<String>,
}

/// A queue's usage in one pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuePoolUsage {
    pub pool: String,
    pub used: crate::sched::ResourceAmount,
    /// Nominal quota; `None` when the queue has none here.
    pub nominal: Option<QuotaLimits>,
    /// How far above nominal the queue may borrow; `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<QuotaLimits>,
}

/// A quota as clients read it: an unlimited resource is absent, never `2^64-1` (which
/// JavaScript clients cannot even represent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_milli: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

impl From<crate::sched::ResourceAmount> for QuotaLimits {
    fn from(a: crate::sched::ResourceAmount) -> Self {
        let limit = |v: u64| (v != u64::MAX).then_some(v);
        QuotaLimits {
            gpu: limit(a.gpu),
            cpu_milli: limit(a.cpu_milli),
            memory_bytes: limit(a.memory_bytes),
        }
    }
}

/// One line of `corral get queues`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    pub name: String,
    pub cohort: Option<String>,
    pub weight: u32,
    pub pending: u32,
    pub admitted: u32,
    pub usage: Vec<QueuePoolUsage>,
}

/// One GPU of a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuDevice {
    pub index: u32,
    pub name: String,
    pub memory_bytes: Option<u64>,
    /// `namespace/job` of the job placed on it, if any.
    pub used_by: Option<String>,
    /// What NVML reads now; all absent without NVML (never made up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_percent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_celsius: Option<u32>,
    /// Why NVML reports this GPU unhealthy (ECC, page retirement, a critical Xid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
}

/// One line of `corral get nodes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    pub name: String,
    pub pool: Option<String>,
    pub gpu_type: Option<String>,
    pub gpus: Vec<GpuDevice>,
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    /// What admitted jobs hold.
    pub cpu_milli_allocated: u64,
    pub memory_bytes_allocated: u64,
    pub extended: BTreeMap<String, u64>,
}

/// One line of `corral top`: a running replica's resource use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaUsageRow {
    pub namespace: String,
    pub job: String,
    pub replica: String,
    pub pid: Option<u32>,
    /// CPU time used so far, in seconds (rate: difference between two calls).
    pub cpu_seconds: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub gpus: Vec<u32>,
    /// Mean utilisation of its GPUs now (NVML); absent without NVML or GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_percent: Option<u32>,
    /// GPU memory its own processes hold (NVML's running compute processes, matched to the
    /// replica's cgroup or process group); absent without NVML or GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
}

/// The answer: the window, how it is summed, the rows, and the budgets of the queues.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    pub from: String,
    pub to: String,
    pub period: UsageBucket,
    /// `queue` or `job`.
    pub by: String,
    /// The namespace the report is limited to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub items: Vec<UsageRow>,
    /// Budgeted queues and where they stand in their current period.
    pub budgets: Vec<BudgetRow>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRow {
    pub queue: String,
    /// `day`, `week` or `month`.
    pub period: String,
    pub budget_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub renews_at: String,
    /// Whether the queue admits no new job until it renews.
    pub exhausted: bool,
}

/// The usage report of `intervals` over `[from, to)` (ms since the epoch): rows per
/// `bucket`, namespace, queue and GPU type (or per job), and where each budgeted queue
/// stands; what `GET /api/v1/usage` answers in every shell.
pub fn usage_report(
    intervals: Vec<UsageInterval>,
    standings: &BTreeMap<String, BudgetStanding>,
    from: Millis,
    to: Millis,
    bucket: UsageBucket,
    by_job: bool,
    namespace: Option<String>,
) -> UsageReport {
    let items = usage_rows(intervals, from, to, bucket, by_job);
    // A namespace's token sees the budgets of the queues its namespace used; the queues
    // themselves are listed to every token (`/api/v1/queues`).
    let budgets = standings
        .iter()
        .map(|(queue, s)| BudgetRow {
            exhausted: s.exhausted(),
            queue: queue.clone(),
            period: s.budget.period.as_str().to_string(),
            budget_gpu_hours: s.budget_gpu_seconds() / 3600.0,
            used_gpu_hours: s.used_gpu_seconds / 3600.0,
            renews_at: time_text(s.renews_at),
        })
        .collect();
    UsageReport {
        from: time_text(from),
        to: time_text(to),
        period: bucket,
        by: if by_job { "job" } else { "queue" }.to_string(),
        namespace,
        items,
        budgets,
    }
}

/// ms since the epoch as an RFC 3339 time.
pub fn time_text(ms: Millis) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| ms.to_string(), |t| t.to_string())
}

/// What the plane holds that a read API shows, taken at one time
/// ([`crate::control::ControlPlane::read_view`]).
#[derive(Clone, Debug, Default)]
pub struct PlaneView {
    pub at: Timestamp,
    /// Why each queued job waits, in the scheduler's words, by `namespace/name`.
    pub pending: BTreeMap<String, String>,
    /// Every admission held, by `namespace/name`.
    pub admissions: BTreeMap<String, AdmissionInfo>,
    pub queues: Vec<QueueInfo>,
    /// What each admission held so far, as if it closed at `at`.
    pub open_usage: Vec<UsageInterval>,
    pub budgets: BTreeMap<String, BudgetStanding>,
}

/// `GET /api/v1/usage`'s query: `from`, `to` (RFC 3339 times or UTC dates; default: the
/// start of this month to now), `period=day|month` (default day), `by=queue|job` (default
/// queue), `namespace`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    pub from: Option<String>,
    pub to: Option<String>,
    pub period: Option<String>,
    pub by: Option<String>,
    pub namespace: Option<String>,
}

/// The window and the sums a usage query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageWindow {
    pub from: Millis,
    pub to: Millis,
    pub bucket: UsageBucket,
    pub by_job: bool,
}

/// A query field that is not valid: its name, its value and what would be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryRefusal {
    pub field: String,
    pub value: String,
    pub valid: String,
}

impl UsageQuery {
    /// The window asked for at `now`, or the first field that is not valid (the same
    /// words in every shell).
    pub fn window(&self, now: Millis) -> Result<UsageWindow, QueryRefusal> {
        let refuse = |field: &str, value: &str, valid: &str| QueryRefusal {
            field: field.to_string(),
            value: value.to_string(),
            valid: valid.to_string(),
        };
        let bucket = match self.period.as_deref() {
            None | Some("day") => UsageBucket::Day,
            Some("month") => UsageBucket::Month,
            Some(other) => return Err(refuse("period", other, "day or month")),
        };
        let by_job = match self.by.as_deref() {
            None | Some("queue") => false,
            Some("job") => true,
            Some(other) => return Err(refuse("by", other, "queue or job")),
        };
        let time = |field: &str, text: &str| {
            parse_time(text).ok_or_else(|| refuse(field, text, TIME_FORMS))
        };
        let to = match &self.to {
            Some(t) => time("to", t)?,
            None => now,
        };
        let from = match &self.from {
            Some(t) => time("from", t)?,
            None => {
                crate::control::accounting::period_bounds(
                    corral_api::queue::BudgetPeriod::Month,
                    now,
                )
                .0
            }
        };
        if from >= to {
            return Err(refuse(
                "from",
                &time_text(from),
                &format!("a time before `to` ({})", time_text(to)),
            ));
        }
        Ok(UsageWindow {
            from,
            to,
            bucket,
            by_job,
        })
    }
}

/// What a time in a query may be.
pub const TIME_FORMS: &str =
    "an RFC 3339 time (2026-11-01T00:00:00Z) or a date (2026-11-01), after 1970";

/// An RFC 3339 time, or a date (its UTC midnight), as ms since the epoch.
pub fn parse_time(text: &str) -> Option<Millis> {
    let ts: Option<Timestamp> = text.parse().ok().or_else(|| {
        text.parse::<jiff::civil::Date>()
            .ok()
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    });
    ts.and_then(|t| u64::try_from(t.as_millisecond()).ok())
}

/// A replica's exit code and failure reason, as `corral describe` shows them: a failed one's
/// code and why, 0 for one that succeeded, nothing while it runs.
pub fn exit_of(p: &crate::lifecycle::ReplicaPhase) -> (Option<i32>, Option<String>) {
    use crate::lifecycle::ReplicaPhase;
    match p {
        ReplicaPhase::Failed { exit_code, reason } => (Some(*exit_code), Some(reason.to_string())),
        ReplicaPhase::Succeeded => (Some(0), None),
        _ => (None, None),
    }
}

/// A replica's phase in one word, as `corral describe` shows it.
pub fn phase_name(p: &crate::lifecycle::ReplicaPhase) -> &'static str {
    use crate::lifecycle::ReplicaPhase;
    match p {
        ReplicaPhase::Pending => "Pending",
        ReplicaPhase::Starting => "Starting",
        ReplicaPhase::Running => "Running",
        ReplicaPhase::Succeeded => "Succeeded",
        ReplicaPhase::Failed { .. } => "Failed",
        ReplicaPhase::Gone => "Gone",
    }
}

/// A run as `corral describe` shows it: the run, and each step in DAG order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRunDetails {
    pub run: PipelineRun,
    pub steps: Vec<StepRow>,
    pub events: Vec<Event>,
}

/// One step of a run: its phase, what it needs, its job and that job's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRow {
    pub name: String,
    pub phase: StepPhase,
    pub needs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Each step of `run` in DAG order with its phase, what it needs, its job and that job's
/// state (`job_state`: the state of a job of the run's namespace, by name).
pub fn run_steps(
    run: &corral_api::PipelineRun,
    mut job_state: impl FnMut(&str) -> Option<String>,
) -> Vec<StepRow> {
    let status = run.status.clone().unwrap_or_default();
    crate::control::pipeline::listing(run)
        .into_iter()
        .map(|(step, phase, needs)| {
            let st = status.steps.get(&step);
            let job = st.and_then(|s| s.job.clone());
            let job_state = job.as_deref().and_then(&mut job_state);
            StepRow {
                name: step,
                phase,
                needs,
                job,
                job_state,
                cached_from: st.and_then(|s| s.cached_from.clone()),
                message: st.and_then(|s| s.message.clone()),
            }
        })
        .collect()
}
