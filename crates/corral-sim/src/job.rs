//! A job as the simulator sees it.

use std::collections::BTreeMap;

/// How fast a job runs, in steps per second for the whole gang.
#[derive(Clone, Debug, PartialEq)]
pub enum Throughput {
    /// The same on every GPU type (traces without GPU types: Philly).
    Uniform(f64),
    /// Measured per GPU type (Gavel's matrix, Sia's profiles). A type missing here, or with
    /// 0.0, cannot run the job.
    PerType(BTreeMap<String, f64>),
}

impl Throughput {
    pub fn on(&self, gpu_type: &str) -> f64 {
        match self {
            Throughput::Uniform(v) => *v,
            Throughput::PerType(m) => m.get(gpu_type).copied().unwrap_or(0.0),
        }
    }
}

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    /// Position in the trace (jobs are numbered by arrival order after sorting).
    pub id: usize,
    pub name: String,
    /// Seconds from the start of the trace.
    pub arrival_s: f64,
    /// GPUs the job holds at once (a gang of one GPU per replica, all of one type).
    pub gpus: u32,
    /// Work to do, in steps.
    pub steps: f64,
    pub throughput: Throughput,
    /// Model/job type, e.g. `ResNet-18 (batch size 64)`; for co-location (Gandiva).
    pub job_type: String,
    /// The team's queue.
    pub queue: String,
    /// GPU types the job may use; empty: any.
    pub allowed_types: Vec<String>,
    /// The job's own restart cost in seconds (Sia's per-model checkpoint-restore time); None:
    /// the engine's `restart_s`.
    pub restart_s: Option<f64>,
    /// Seconds of no progress when the job first starts (Sia's simulator charges the model's
    /// restore time on the first allocation too); 0 for traces that do not model it.
    pub start_s: f64,
}

impl SimJob {
    /// Whether the job can make progress on `gpu_type`.
    pub fn can_run_on(&self, gpu_type: &str) -> bool {
        (self.allowed_types.is_empty() || self.allowed_types.iter().any(|t| t == gpu_type))
            && self.throughput.on(gpu_type) > 0.0
    }
}
