//! Scheduling policies. Each round the engine asks the policy which jobs run on which GPU
//! type; a policy may also give concrete nodes (Corral's scheduler does).

pub mod fifo;
pub mod gandiva;
pub mod gavel;
pub mod las;
pub mod sjf;

use crate::cluster::Cluster;
use crate::engine::{EngineConfig, JobState};
use crate::job::SimJob;

/// What a policy sees at a round boundary.
pub struct RoundCtx<'a> {
    /// Seconds since the start of the trace.
    pub now: f64,
    pub round_s: f64,
    pub jobs: &'a [SimJob],
    pub state: &'a [JobState],
    /// Jobs that arrived and are not done, in arrival order.
    pub active: &'a [usize],
    pub cluster: &'a Cluster,
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
        _cluster: &Cluster,
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

/// Policies by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Corral's scheduler core (corral-core `Scheduler`), unchanged.
    Corral,
    /// Gavel's FIFO: arrival order, random GPU type, never preempts.
    Fifo,
    /// Shortest job first (oracle durations), non-preemptive, fastest free type, backfill.
    Sjf,
    /// Tiresias-style discretized 2D least-attained-service (GPUs x time).
    Las,
    /// Gandiva: node packing with locality, migration to defragment, time-slicing when
    /// oversubscribed; heterogeneity-agnostic.
    Gandiva,
    /// Gavel's `max_min_fairness`: LAS by LP, heterogeneity-agnostic.
    MaxMinFairness,
    /// Gavel's `max_min_fairness_perf`: heterogeneity-aware max-min fairness by LP.
    Gavel,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Corral,
        PolicyKind::Fifo,
        PolicyKind::Sjf,
        PolicyKind::Las,
        PolicyKind::Gandiva,
        PolicyKind::MaxMinFairness,
        PolicyKind::Gavel,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Corral => "corral",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Sjf => "sjf",
            PolicyKind::Las => "las",
            PolicyKind::Gandiva => "gandiva",
            PolicyKind::MaxMinFairness => "max_min_fairness",
            PolicyKind::Gavel => "max_min_fairness_perf",
        }
    }

    /// A name or `all`; accepts a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<PolicyKind>, String> {
        let mut out = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p {
                "all" => out.extend(Self::ALL),
                "corral" => out.push(PolicyKind::Corral),
                "fifo" => out.push(PolicyKind::Fifo),
                "sjf" => out.push(PolicyKind::Sjf),
                "las" | "tiresias" => out.push(PolicyKind::Las),
                "max_min_fairness" | "gavel-las" => out.push(PolicyKind::MaxMinFairness),
                "max_min_fairness_perf" | "gavel" => out.push(PolicyKind::Gavel),
                "gandiva" => out.push(PolicyKind::Gandiva),
                _ => {
                    return Err(format!(
                        "unknown policy `{p}`: expected all, corral, fifo, sjf, las, gandiva, max_min_fairness or max_min_fairness_perf (gavel)"
                    ));
                }
            }
        }
        out.dedup();
        if out.is_empty() {
            return Err("no policy given".into());
        }
        Ok(out)
    }

    pub fn build(self, seed: u64) -> Box<dyn Policy> {
        match self {
            PolicyKind::Corral => Box::new(crate::corral_policy::CorralPolicy::default()),
            PolicyKind::Fifo => Box::new(fifo::Fifo::new(seed)),
            PolicyKind::Sjf => Box::new(sjf::Sjf),
            PolicyKind::Las => Box::new(las::Las::default()),
            PolicyKind::Gandiva => Box::new(gandiva::Gandiva::default()),
            PolicyKind::MaxMinFairness => Box::new(gavel::MaxMin::new(false, seed)),
            PolicyKind::Gavel => Box::new(gavel::MaxMin::new(true, seed)),
        }
    }
}

/// Free GPUs per type, for policies that decide at the level of types.
pub(crate) fn free_per_type(cluster: &Cluster) -> Vec<u32> {
    cluster.gpus_per_type()
}

/// The fastest type with at least `gpus` free where the job runs (ties: first type).
pub(crate) fn fastest_free(tput: &[f64], free: &[u32], gpus: u32) -> Option<usize> {
    let mut best: Option<usize> = None;
    for t in 0..free.len() {
        if tput[t] > 0.0 && free[t] >= gpus && best.is_none_or(|b| tput[t] > tput[b]) {
            best = Some(t);
        }
    }
    best
}
