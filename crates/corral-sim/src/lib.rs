//! `corral-sim`: replays real GPU-cluster traces through scheduling policies - Corral's own
//! control plane and faithful baselines - on a simulated clock and cluster.
//!
//! Deterministic: no wall clock, no threads, no hash-map iteration order in decisions; the
//! only randomness is a seeded RNG (Gavel's FIFO picks a random GPU type). Timing and
//! progress bars live in the CLI.
//!
//! Layout: [`trace`] parses traces into [`SimJob`]s, [`cluster`] builds the simulated
//! cluster, [`engine`] advances a round-based clock (job progress in steps, restart cost and
//! checkpoint loss on preemption), [`round`] is what the engine and a policy exchange at a
//! round boundary, [`policy`] holds the policies ([`corral_policy`] is the simulated
//! executor around corral-core's control plane), [`metrics`] and [`report`] summarise.
//! Dependencies form a tree: `engine`, `policy` and `corral_policy` depend on `round`,
//! never on each other (`policy` names `corral_policy` only to build it).

pub mod cluster;
pub mod corral_policy;
pub mod engine;
pub mod fragmentation;
pub mod job;
pub mod metrics;
pub mod policy;
pub mod report;
pub mod round;
pub mod trace;

pub use cluster::{ClusterSpec, SimCluster};
pub use engine::{SimResult, simulate};
pub use job::{SimJob, Throughput};
pub use metrics::PolicyMetrics;
pub use policy::PolicyKind;
pub use round::{EngineConfig, Policy};

/// Runs one policy and summarises it.
pub fn run_policy(
    jobs: &[SimJob],
    cluster: &SimCluster,
    policy: &mut dyn Policy,
    cfg: &EngineConfig,
    progress: &mut dyn FnMut(f64),
) -> Result<(SimResult, PolicyMetrics), String> {
    let r = simulate(jobs, cluster, policy, cfg, progress)?;
    let m = metrics::summarize(jobs, cluster, &r);
    Ok((r, m))
}
