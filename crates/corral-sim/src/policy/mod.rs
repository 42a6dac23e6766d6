//! Scheduling policies. Each round the engine asks the policy which jobs run on which GPU
//! type; a policy may also give concrete nodes (Corral's scheduler does).

pub mod fifo;
pub mod gandiva;
pub mod gavel;
pub mod las;
pub mod sjf;

use crate::cluster::SimCluster;
pub use crate::round::{Assignment, Policy, RoundCtx};

/// Policies by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Corral's production control plane (corral-core `ControlPlane`: scheduler, lifecycle,
    /// ledger), driven by a simulated executor.
    Corral,
    /// The same, with the jobs whose trace gives their speed at other sizes (Sia's
    /// profiles) submitted as elastic jobs that the scheduler sizes (not in `all`).
    CorralElastic,
    /// Gavel's FIFO: arrival order, random GPU type, never preempts.
    Fifo,
    /// Shortest job first (oracle durations), non-preemptive, fastest free type, backfill.
    Sjf,
    /// Tiresias-style discretized 2D least-attained-service (GPUs x time).
    Las,
    /// Gandiva as Gavel's simulator runs it (`gandiva`): the cluster time-shared equally
    /// among the jobs, heterogeneity-agnostic (Gavel's pairing of jobs on one GPU is not
    /// modelled).
    Gandiva,
    /// Gandiva as its paper describes its mechanisms (`gandiva_nodes`): node packing with
    /// locality, migration to defragment, suspend-resume time-slicing of at most two jobs
    /// per set of GPUs when oversubscribed; heterogeneity-agnostic.
    GandivaNodes,
    /// Gavel's `max_min_fairness`: LAS by LP, heterogeneity-agnostic.
    MaxMinFairness,
    /// Gavel's `max_min_fairness_perf`: heterogeneity-aware max-min fairness by LP.
    Gavel,
    /// Gavel's `max_sum_throughput_perf`: total throughput by LP (Sia's `gavel` baseline).
    MaxSumThroughput,
    /// Gavel's `fifo` as its code behaves (`fifo_gavel`; not in `all`): it over-commits the
    /// last GPU type and time-slices there, so it is not first-in-first-out (see
    /// [`gavel::Objective::FifoGavel`]). For comparison with Gavel's published numbers.
    FifoGavel,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 9] = [
        PolicyKind::Corral,
        PolicyKind::Fifo,
        PolicyKind::Sjf,
        PolicyKind::Las,
        PolicyKind::Gandiva,
        PolicyKind::GandivaNodes,
        PolicyKind::MaxMinFairness,
        PolicyKind::Gavel,
        PolicyKind::MaxSumThroughput,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Corral => "corral",
            PolicyKind::CorralElastic => "corral-elastic",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Sjf => "sjf",
            PolicyKind::Las => "las",
            PolicyKind::Gandiva => "gandiva",
            PolicyKind::GandivaNodes => "gandiva_nodes",
            PolicyKind::MaxMinFairness => "max_min_fairness",
            PolicyKind::Gavel => "max_min_fairness_perf",
            PolicyKind::MaxSumThroughput => "max_sum_throughput_perf",
            PolicyKind::FifoGavel => "fifo_gavel",
        }
    }

    /// A name or `all`; accepts a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<PolicyKind>, String> {
        let mut out = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p {
                "all" => out.extend(Self::ALL),
                "corral" => out.push(PolicyKind::Corral),
                "corral-elastic" => out.push(PolicyKind::CorralElastic),
                "fifo" => out.push(PolicyKind::Fifo),
                "sjf" => out.push(PolicyKind::Sjf),
                "las" | "tiresias" => out.push(PolicyKind::Las),
                "max_min_fairness" | "gavel-las" => out.push(PolicyKind::MaxMinFairness),
                "max_min_fairness_perf" | "gavel" => out.push(PolicyKind::Gavel),
                "gandiva" => out.push(PolicyKind::Gandiva),
                "gandiva_nodes" => out.push(PolicyKind::GandivaNodes),
                "fifo_gavel" => out.push(PolicyKind::FifoGavel),
                "max_sum_throughput_perf" | "max_sum_throughput" => {
                    out.push(PolicyKind::MaxSumThroughput)
                }
                _ => {
                    return Err(format!(
                        "unknown policy `{p}`: expected all, corral, corral-elastic, fifo, sjf, las, gandiva, gandiva_nodes, max_min_fairness, max_min_fairness_perf (gavel), max_sum_throughput_perf or fifo_gavel"
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
        self.build_with(seed, false, None)
    }

    /// As [`PolicyKind::build`]; `sia` builds the Gavel-style policies as Sia's simulator
    /// runs its `gavel` baseline (sia-simulator/gavel.py): the allocation recomputed at the
    /// first round boundary after a change (not at most every 1920 s) and one priority
    /// queue over all GPU types.
    /// `resize_dwell_seconds`: Corral's dwell between two resizes of an elastic job
    /// (`None`: the scheduler's default, 60 s), as `resizeDwellSeconds` embedded.
    pub fn build_with(
        self,
        seed: u64,
        sia: bool,
        resize_dwell_seconds: Option<u64>,
    ) -> Box<dyn Policy> {
        let realloc_min_s = sia.then_some(0.0);
        let gavel = |objective| {
            let mut p = gavel::MaxMin::with(objective, seed);
            if let Some(r) = realloc_min_s {
                p.realloc_min_s = r;
            }
            p.global_queue = sia;
            Box::new(p) as Box<dyn Policy>
        };
        let mut fifo = fifo::Fifo::new(seed);
        if let Some(r) = realloc_min_s {
            fifo.realloc_min_s = r;
        }
        let corral = |elastic: bool| {
            let mut p = crate::corral_policy::CorralPolicy::default();
            p.config = corral_core::control::ControlConfig::builder(
                corral_core::control::Platform::Processes,
            )
            .resize_dwell_seconds(resize_dwell_seconds)
            .build();
            p.elastic = elastic;
            Box::new(p) as Box<dyn Policy>
        };
        match self {
            PolicyKind::Corral => corral(false),
            PolicyKind::CorralElastic => corral(true),
            PolicyKind::Fifo => Box::new(fifo),
            PolicyKind::Sjf => Box::new(sjf::Sjf),
            PolicyKind::Las => Box::new(las::Las::new(seed)),
            PolicyKind::Gandiva => gavel(gavel::Objective::EqualShare),
            PolicyKind::GandivaNodes => Box::new(gandiva::Gandiva::default()),
            PolicyKind::MaxMinFairness => gavel(gavel::Objective::MaxMin),
            PolicyKind::Gavel => gavel(gavel::Objective::MaxMinPerf),
            PolicyKind::MaxSumThroughput => gavel(gavel::Objective::MaxSumThroughput),
            PolicyKind::FifoGavel => gavel(gavel::Objective::FifoGavel),
        }
    }
}

/// Free GPUs per type, for policies that decide at the level of types.
pub(crate) fn free_per_type(cluster: &SimCluster) -> Vec<u32> {
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
