//! What the engine and a policy exchange at a round boundary: the engine's settings, the
//! state it keeps per job (which policies read), what a policy sees ([`RoundCtx`]) and what
//! it answers ([`Assignment`]), and the [`Policy`] trait itself.
//!
//! The engine ([`crate::engine`]) and every policy ([`crate::policy`],
//! [`crate::corral_policy`]) depend on this module and on nothing of each other.

use crate::cluster::SimCluster;
use crate::job::SimJob;

/// Simulation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub round_s: f64,
    /// Seconds of no progress when a preempted or migrated job starts again (a job's own
    /// [`crate::SimJob::restart_s`] replaces it).
    pub restart_s: f64,
    /// Productive seconds between checkpoints; 0 (default) = the job checkpoints when it is
    /// stopped (Corral's SIGTERM grace period, part of `restart_s`) and loses nothing.
    pub checkpoint_s: f64,
    /// Seed for policies that draw random numbers.
    pub seed: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            round_s: 360.0,
            restart_s: 30.0,
            checkpoint_s: 0.0,
            seed: 0,
        }
    }
}

/// Where a job runs: its GPU type and `(node index, GPUs)` per node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub gpu_type: usize,
    pub nodes: Vec<(usize, u32)>,
}

/// What the engine tracks for one job; policies read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobProgress {
    pub done_steps: f64,
    /// GPU-seconds held so far (attained service, for LAS).
    pub attained_gpu_s: f64,
    /// Seconds held per GPU type (parallel to [`SimCluster::types`]).
    pub held_s_on: Vec<f64>,
    /// Placement in the last round (None: not running).
    pub current: Option<Placement>,
    pub started_at: Option<f64>,
    pub finished_at: Option<f64>,
    /// Productive seconds since the job last (re)started, for checkpoint loss (engine
    /// bookkeeping).
    pub(crate) seg_run_s: f64,
    /// The job was stopped or moved and pays the restart cost when it runs next (engine
    /// bookkeeping).
    pub(crate) restart_pending: bool,
    /// Restart or start-up seconds still to pay before the job progresses (engine
    /// bookkeeping).
    pub(crate) cost_left_s: f64,
    pub preemptions: u32,
    pub migrations: u32,
    pub restarts: u32,
    /// Sum over rounds the job was active of the number of active jobs, and that count
    /// (for finish-time fairness).
    pub contention_sum: f64,
    pub active_rounds: u32,
    /// The job can run on no GPU type of the cluster (too many GPUs, no throughput).
    pub unschedulable: bool,
}

impl JobProgress {
    /// The job is running and still paying its restart or start-up cost (it made no
    /// progress yet since it was placed).
    pub fn restoring(&self) -> bool {
        self.current.is_some() && self.cost_left_s > 0.0
    }
}

/// What a policy sees at a round boundary.
pub struct RoundCtx<'a> {
    /// Seconds since the start of the trace.
    pub now: f64,
    pub round_s: f64,
    pub jobs: &'a [SimJob],
    pub state: &'a [JobProgress],
    /// Jobs that arrived and are not done, in arrival order.
    pub active: &'a [usize],
    pub cluster: &'a SimCluster,
    /// `tput[job][type]` in steps/s, 0 where the job cannot run.
    pub tput: &'a [Vec<f64>],
    /// A job arrived or finished since the last round.
    pub changed: bool,
}

/// Run `job` on `gpu_type` this round; `placement` gives `(node index, GPUs)` or leaves
/// the choice of nodes to the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub job: usize,
    pub gpu_type: usize,
    pub placement: Option<Vec<(usize, u32)>>,
}

impl Assignment {
    pub fn on(job: usize, gpu_type: usize) -> Self {
        Assignment {
            job,
            gpu_type,
            placement: None,
        }
    }
}

/// A scheduling policy.
pub trait Policy {
    fn name(&self) -> String;
    fn init(
        &mut self,
        _cluster: &SimCluster,
        _jobs: &[SimJob],
        _tput: &[Vec<f64>],
        _cfg: &EngineConfig,
    ) -> Result<(), String> {
        Ok(())
    }
    fn on_arrival(&mut self, _job: usize, _spec: &SimJob, _tput: &[f64]) {}
    fn on_finish(&mut self, _job: usize) {}
    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment>;
}
