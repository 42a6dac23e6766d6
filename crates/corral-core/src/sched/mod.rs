//! The scheduler core: which job runs now, on which GPU type, which nodes and which GPUs.
//!
//! Pure and deterministic: no I/O, no clock (`now` is an argument, in milliseconds since
//! the Unix epoch, see [`Millis`]), no threads, and no decision depends on hash-map
//! iteration order (hash maps serve lookups only; order comes from vectors and B-trees).
//! The embedded cluster, the Kubernetes operator and the simulator call it unchanged.
//!
//! # Pipeline
//! A [`Scheduler`] keeps free capacity, queue usage, running and pending jobs between
//! cycles. [`Scheduler::cycle`] takes pending jobs in order of priority, then the queue
//! with the lowest weighted dominant resource share, then submit time, and for each job
//! runs kube-scheduler's framework steps over the job's candidate pools (GPU types):
//! 1. **filter**: pools that can never hold the job (type constraints, node size, pool
//!    size, selectors/taints) are dropped once, when the job is submitted;
//! 2. **score**: the remaining pools are ordered by the job's throughput there (measured,
//!    e.g. Gavel's matrix, or the configured type speed; within 5% counts as equal), so
//!    higher-priority jobs, which go first, get the faster cards and jobs that gain nothing
//!    from them leave them to others; then pools where the job would strand GPUs (leave
//!    free GPUs without the CPU or memory to use them) go last; then pools that jobs with
//!    fewer allowed pools want least go first (scarce-type protection); then the pool
//!    where the job's largest replica fits best: fewest GPUs stranded, no whole node
//!    broken, fewest free GPUs left (see `index::NodeFit`);
//! 3. **reserve**: the queue's quota (with borrowing) must allow the job ("may"), and
//!    every replica must get a node and GPU indices ("can") - all or nothing;
//! 4. **permit**: if not, preemption may make room (see [`preempt`]); if still not, a
//!    blocked gang gets nodes reserved so that backfill cannot starve it, and the job
//!    stays pending with a reason in words ([`PendingReason`]).
//!
//! 5. **rebalance**: after the pass, running jobs move to pools that kept room where
//!    they run at least `rebalance_min_speedup` times faster (see [`rebalance`]).
//!
//! Within one priority, pending jobs go by least attained service first (Tiresias'
//! discretized 2D-LAS): the shell reports each job's service in GPU-seconds
//! ([`Scheduler::set_attained_service`]); jobs in a lower service level go first (within
//! a level, less service first) and may preempt running jobs of the same priority in a
//! higher level (levels are the hysteresis that keeps equals from preempting each other). Jobs the shell reports no
//! service for are all in level 0, ordered as before by queue share and submit time.
//!
//! [`Scheduler::try_admit`] decides one new job at once against the current state.
//!
//! # Invariants
//! - No node is ever over-committed in GPUs, CPU, memory or extended resources.
//! - A gang is admitted whole, with a concrete placement of every replica, or not at all.
//! - A queue never exceeds nominal quota plus borrowing limit, and a cohort never lends
//!   more than its members' lendable quota.
//! - Nothing is preempted unless the preemptor then fits; victims have strictly lower
//!   priority, or borrow quota the preemptor's queue reclaims within its nominal quota,
//!   or have the same priority and a higher attained-service level (taken from another
//!   queue only where that queue borrows or has no finite nominal quota); a rebalanced job
//!   moves only if it fits where it goes; recently admitted (or moved) jobs are protected.
//! - Reserved nodes take no new work in the cycle that reserved them, and reservations
//!   are remade every cycle from the highest-ranked blocked gangs.

mod cycle;
pub mod elastic;
pub(crate) mod explain;
mod fit;
mod from_api;
mod index;
mod model;
mod outcome;
mod placement;
mod pools;
pub mod preempt;
mod quota;
pub mod rebalance;
pub mod taint;
pub mod workload;

pub use cycle::Scheduler;
pub use explain::{
    Blocker, Misfit, Needs, PendingReason, PreemptionReason, QuotaResource, ResourceShort,
    Shortfall, TaintBlock, cpu_text,
};
pub use fit::ClusterFit;
pub use from_api::{known_gpu_speed, known_gpu_speeds, priority_of};
pub use model::{
    ClusterSnapshot, ElasticRange, JobRequest, Millis, Node, NodeAllocation, NodePoolConfig,
    PoolQuota, QueueConfig, ReplicaGroup, ResourceAmount, RunningJob, SchedError, SchedulerConfig,
};
pub use outcome::{
    Admission, CycleCounters, CycleOutcome, Decision, PendingJob, Preemption, ReplicaPlacement,
    Resize, ResizeReason,
};
pub use pools::{pool_of, pools_without_nodes};
pub use taint::{
    JobTolerations, Taint, TaintEffect, Toleration, TolerationOperator, common_tolerations,
};

/// One cycle from a snapshot: builds a [`Scheduler`], submits `pending` and runs
/// [`Scheduler::cycle`]. For shells that keep no scheduler between cycles.
pub fn schedule(
    snapshot: &ClusterSnapshot,
    pending: &[JobRequest],
    config: SchedulerConfig,
    now: Millis,
) -> Result<CycleOutcome, SchedError> {
    let mut scheduler = Scheduler::new(snapshot, config)?;
    for job in pending {
        scheduler.submit(job.clone())?;
    }
    Ok(scheduler.cycle(now))
}
