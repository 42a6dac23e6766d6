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
    /// The job's speed at other sizes, where the trace knows it (Sia's profiles): a policy
    /// that sizes jobs (`corral-elastic`) may run it with `min..=max` GPUs.
    pub elastic: Option<Elastic>,
}

/// Sizes a job can run at and its speed at each.
#[derive(Clone, Debug, PartialEq)]
pub struct Elastic {
    pub min: u32,
    pub max: u32,
    /// Steps per second of the whole job with `g` GPUs at `speeds[g - 1]`, by GPU type.
    pub speeds: Vec<BTreeMap<String, f64>>,
}

impl SimJob {
    /// Whether the job can run with `gpus` GPUs: its own count, or a size of its range.
    pub fn runs_with(&self, gpus: u32) -> bool {
        gpus == self.gpus
            || self
                .elastic
                .as_ref()
                .is_some_and(|e| e.min <= gpus && gpus <= e.max)
    }

    /// Steps per second with `gpus` GPUs on `gpu_type`; `at_request` is its speed with its
    /// own count there.
    pub fn speed_with(&self, gpu_type: &str, gpus: u32, at_request: f64) -> f64 {
        match &self.elastic {
            Some(e) if gpus != self.gpus => e
                .speeds
                .get((gpus as usize).wrapping_sub(1))
                .and_then(|m| m.get(gpu_type))
                .copied()
                .unwrap_or(0.0),
            _ => at_request,
        }
    }

    /// The fewest GPUs the job can run with.
    pub fn min_gpus(&self) -> u32 {
        self.elastic
            .as_ref()
            .map_or(self.gpus, |e| e.min.min(self.gpus))
    }

    /// Whether the job can make progress on `gpu_type`.
    pub fn can_run_on(&self, gpu_type: &str) -> bool {
        (self.allowed_types.is_empty() || self.allowed_types.iter().any(|t| t == gpu_type))
            && self.throughput.on(gpu_type) > 0.0
    }
}
