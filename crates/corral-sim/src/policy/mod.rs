//! Scheduling policies. Each round the engine asks the policy which jobs run on which GPU
//! type; a policy may also give concrete nodes (Corral's scheduler does).

pub mod fifo;
pub mod gandiva;
pub mod gavel;
pub mod las;
pub mod sjf;

use crate::cluster::Cluster;
pub use crate::round::{Assignment, Policy, RoundCtx};

/// Policies by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Corral's production control plane (corral-core `ControlPlane`: scheduler, lifecycle,
    /// ledger), driven by a simulated executor.
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
