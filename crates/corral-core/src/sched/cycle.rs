//! The scheduler: state kept between cycles, the full pass, and the single-job fast path.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use corral_api::gpu_type;

use super::elastic::{self, ElasticState};
use super::explain::{Blocker, Needs, PendingReason, TaintBlock};
use super::fit::{self, Gang, Judgement};
use super::index::{ClusterIndex, NO_POOL, NodeFilter, PodRequest};
use super::model::{ClusterSnapshot, JobRequest, Millis, RunningJob, SchedError, SchedulerConfig};
use super::outcome::{Admission, CycleOutcome, Decision, PendingJob, ReplicaPlacement};
use super::placement::{Alloc, GangShape, enough_slots, place_gang};
use super::quota::{Amount, Quotas};
use super::taint::Toleration;

// Why a job waits (capacity, protected victims) and what the scheduler holds now.
mod blocked;
mod holdings;

pub(crate) struct RunningState {
    pub pool: u16,
    pub allocs: Vec<Alloc>,
    pub admitted_at: Millis,
    /// The cycle that admitted the job; such a job is never a victim in that cycle.
    pub cycle: u64,
}

pub(crate) struct JobEntry {
    pub req: JobRequest,
    /// What every role of the job with replicas tolerates.
    pub tolerations: Vec<Toleration>,
    pub queue: Option<u32>,
    /// (count, per-replica request), parallel to `req.groups`.
    pub groups: Vec<(u32, PodRequest)>,
    pub order: Vec<u16>,
    pub gpu_slots: Vec<(u32, u64)>,
    pub pods_gpus: Vec<u32>,
    pub total: Amount,
    /// Candidate pools with the job's speed band there (higher is faster).
    pub pools: Vec<(u16, u32)>,
    /// Candidate pools with the job's speed there (throughput or type speed; 0: unknown).
    pub speeds: Vec<(u16, f64)>,
    /// Attained service in GPU-seconds, as the shell last said, and its level.
    pub service: f64,
    pub level: u32,
    /// Demand this job puts on each of its pools in milli-GPUs, when it can use only some
    /// of the cluster's GPU pools (its GPUs spread evenly over them); 0 otherwise.
    pub pinned_milli: u64,
    /// Why the pools left out of `pools` can never hold the job.
    pub static_blockers: Vec<Blocker>,
    pub needs: Needs,
    pub running: Option<RunningState>,
    pub last_preempted_at: Option<Millis>,
    /// The elastic range and last resize of an elastic job (see [`elastic`]).
    pub elastic: Option<ElasticState>,
}

impl JobEntry {
    pub fn shape(&self) -> GangShape<'_> {
        GangShape {
            groups: &self.groups,
            order: &self.order,
            gpu_slots: &self.gpu_slots,
            filter: NodeFilter {
                selector: &self.req.node_selector,
                tolerations: &self.tolerations,
            },
        }
    }
}

/// A pending job's reason names protected victims found among this many lower-priority
/// running jobs of each of its first few pools: enough for the message, cheap for a cycle
/// of 100,000 pending jobs.
const PROTECTED_VICTIMS_EXAMINED: usize = 16;
const PROTECTED_POOLS_EXAMINED: usize = 2;

/// Replicas one job may have in all (the API allows far fewer per role).
pub const MAX_REPLICAS_PER_JOB: u64 = 1_000_000;
/// The scheduler core. It holds the cluster's free capacity, queue usage, running and
/// pending jobs between cycles, so that a full pass and a single new job are both cheap.
/// Shells apply its decisions and tell it what changed (`submit`, `finish`).
pub struct Scheduler {
    pub(crate) config: SchedulerConfig,
    pub(crate) index: ClusterIndex,
    pub(crate) quotas: Quotas,
    pub(crate) jobs: Vec<Option<JobEntry>>,
    free_slots: Vec<u32>,
    pub(crate) by_key: HashMap<String, u32>,
    /// Preemptible running jobs per pool by (priority, service level, slot).
    pub(crate) running_by_pool: Vec<BTreeSet<(i32, u32, u32)>>,
    /// Per pool and number of candidate pools n, the milli-GPUs that known jobs (pending or
    /// running) able to use only n of the GPU pools want there: jobs with more choice leave
    /// such pools to them.
    pinned_milli: Vec<Vec<u64>>,
    /// GPU pools with schedulable GPUs: a job with fewer candidate pools is pinned.
    gpu_pools: usize,
    pub(crate) cycle_no: u64,
    /// Queues over their budget (by queue index), with the blocker their jobs wait on.
    over_budget: HashMap<u32, Blocker>,
    /// Slots of elastic jobs (pending or running), for growth and shrink.
    pub(crate) elastic_jobs: BTreeSet<u32>,
}

/// Per-cycle bookkeeping.
pub(crate) struct CycleBudget {
    pub preemption_searches_left: u32,
    pub reservations_left: Vec<u32>,
    /// Whether elastic jobs may be shrunk for pending ones (a full cycle, whose outcome
    /// carries resizes).
    pub may_resize: bool,
}

impl Scheduler {
    /// Builds the scheduler from a snapshot (nodes, pools, queues and running jobs).
    pub fn new(snapshot: &ClusterSnapshot, config: SchedulerConfig) -> Result<Self, SchedError> {
        let index = ClusterIndex::new(snapshot)?;
        let quotas = Quotas::new(&snapshot.queues, &index.pools, index.cluster_total);
        let pools = index.pools.len();
        let gpu_pools = index
            .pools
            .iter()
            .filter(|p| p.gpu_type.is_some() && p.total_gpus > 0)
            .count();
        let mut s = Scheduler {
            config,
            index,
            quotas,
            jobs: Vec::new(),
            free_slots: Vec::new(),
            by_key: HashMap::new(),
            running_by_pool: vec![BTreeSet::new(); pools],
            pinned_milli: vec![vec![0; gpu_pools]; pools],
            gpu_pools,
            cycle_no: 0,
            over_budget: HashMap::new(),
            elastic_jobs: BTreeSet::new(),
        };
        for r in &snapshot.running {
            s.add_running(r)?;
        }
        Ok(s)
    }

    fn add_running(&mut self, r: &RunningJob) -> Result<(), SchedError> {
        let slot = self.insert_entry(elastic::at_placed(r.request.clone(), &r.placements))?;
        // A job admitted before its queue stopped admitting its namespace still spends the
        // queue's quota while it runs (it is not admitted again once it stops).
        if self.entry(slot).queue.is_none()
            && let Some(&q) = self.quotas.by_name.get(&r.request.queue)
        {
            self.entry_mut(slot).queue = Some(q);
        }
        let mut allocs = Vec::with_capacity(r.placements.len());
        let mut pool = NO_POOL;
        let mut failure = None;
        for p in &r.placements {
            let Some(&node) = self.index.node_by_name.get(&p.node) else {
                failure = Some(SchedError::UnknownNode {
                    job: r.request.key.clone(),
                    node: p.node.clone(),
                });
                break;
            };
            let entry = self.entry(slot);
            let group = entry.req.groups.iter().position(|g| g.role == p.role);
            let Some(group) = group else {
                failure = Some(SchedError::Overcommitted {
                    job: r.request.key.clone(),
                    node: p.node.clone(),
                });
                break;
            };
            let mask = p
                .gpu_indices
                .iter()
                .filter(|&&g| g < 64)
                .fold(0u64, |m, &g| m | (1 << g));
            let pod = entry.groups[group].1.clone();
            if !self.index.take_exact(node, mask, &pod) {
                failure = Some(SchedError::Overcommitted {
                    job: r.request.key.clone(),
                    node: p.node.clone(),
                });
                break;
            }
            if pool == NO_POOL {
                pool = self.index.nodes[node as usize].pool;
            }
            allocs.push(Alloc {
                group: group as u16,
                index: p.index,
                node,
                mask,
            });
        }
        if let Some(e) = failure {
            for a in &allocs {
                let pod = self.entry(slot).groups[a.group as usize].1.clone();
                self.index.give(a.node, a.mask, &pod);
            }
            self.remove_entry(slot);
            return Err(e);
        }
        self.mark_running(slot, pool, allocs, r.admitted_at);
        Ok(())
    }

    pub(crate) fn entry(&self, slot: u32) -> &JobEntry {
        self.jobs[slot as usize]
            .as_ref()
            .expect("slot of a live job")
    }

    pub(crate) fn entry_mut(&mut self, slot: u32) -> &mut JobEntry {
        self.jobs[slot as usize]
            .as_mut()
            .expect("slot of a live job")
    }

    /// Adds a pending job. It is considered from the next cycle (or by [`try_admit`]).
    pub fn submit(&mut self, job: JobRequest) -> Result<(), SchedError> {
        self.insert_entry(elastic::at_min(job)).map(|_| ())
    }

    /// Why `job` could never be admitted on this cluster, even empty (what its reason
    /// would say, Unschedulable), judged as a waiting job is; `None` when it could.
    pub fn never_fits(&self, job: &JobRequest) -> Option<PendingReason> {
        fit::never_fits(&self.index, &self.quotas, job)
    }

    /// Sets the service a job has received so far, in GPU-seconds (weighted by the speed
    /// of the types it ran on, where the shell knows it). Within one priority, jobs with
    /// less service go first, by levels (see [`SchedulerConfig::service_quantum_gpu_s`]).
    /// A job the shell never reports has 0. Returns whether the job is known.
    pub fn set_attained_service(&mut self, key: &str, gpu_seconds: f64) -> bool {
        let Some(&slot) = self.by_key.get(key) else {
            return false;
        };
        let service = if gpu_seconds.is_finite() && gpu_seconds > 0.0 {
            gpu_seconds
        } else {
            0.0
        };
        let level = self.service_level(service);
        let e = self.entry_mut(slot);
        e.service = service;
        let old = std::mem::replace(&mut e.level, level);
        if old != level
            && let Some(r) = &e.running
            && r.pool != NO_POOL
            && e.req.preemptible
        {
            let (pool, priority) = (r.pool as usize, e.req.priority);
            self.running_by_pool[pool].remove(&(priority, old, slot));
            self.running_by_pool[pool].insert((priority, level, slot));
        }
        true
    }

    /// The least-attained-service level of `service` GPU-seconds.
    pub(crate) fn service_level(&self, service: f64) -> u32 {
        let q = self.config.service_quantum_gpu_s;
        if !(q > 0.0 && service >= q) {
            return 0;
        }
        let r = self.config.service_level_ratio;
        if r.is_nan() || r <= 1.0 {
            return 1;
        }
        let above = ((service / q).ln() / r.ln()).floor();
        1 + above.clamp(0.0, 1e6) as u32
    }

    /// The GPUs of `node` that are unhealthy now (an observation while the cluster runs):
    /// they get no new replica until they heal; a job running on one keeps it. Returns
    /// false for a node the scheduler does not know.
    pub fn set_unhealthy_gpus(&mut self, node: &str, gpus: &[u32]) -> bool {
        let Some(&n) = self.index.node_by_name.get(node) else {
            return false;
        };
        let mask = gpus
            .iter()
            .filter(|g| **g < 64)
            .fold(0u64, |m, g| m | (1u64 << g));
        self.index.set_unhealthy(n, mask);
        true
    }

    /// Whether a queue is over its budget now ([`Blocker::OverBudget`], `None`: not over):
    /// its pending jobs wait with that blocker and are not tried. Returns false for a
    /// queue the scheduler does not know.
    pub fn set_over_budget(&mut self, queue: &str, blocker: Option<Blocker>) -> bool {
        let Some(&q) = self.quotas.by_name.get(queue) else {
            return false;
        };
        match blocker {
            Some(b) => self.over_budget.insert(q, b),
            None => self.over_budget.remove(&q),
        };
        true
    }

    /// Forgets a job that finished or was deleted, freeing what it held. Returns whether it
    /// was known.
    pub fn finish(&mut self, key: &str) -> bool {
        let Some(&slot) = self.by_key.get(key) else {
            return false;
        };
        self.release(slot);
        self.remove_entry(slot);
        true
    }

    fn remove_entry(&mut self, slot: u32) {
        if let Some(e) = self.jobs[slot as usize].take() {
            if e.pinned_milli > 0 {
                for &(pi, _) in &e.pools {
                    self.pinned_milli[pi as usize][e.pools.len()] -= e.pinned_milli;
                }
            }
            self.by_key.remove(&e.req.key);
            self.elastic_jobs.remove(&slot);
            self.free_slots.push(slot);
        }
    }

    fn insert_entry(&mut self, req: JobRequest) -> Result<u32, SchedError> {
        if self.by_key.contains_key(&req.key) {
            return Err(SchedError::DuplicateJob(req.key));
        }
        if req.groups.iter().all(|g| g.count == 0) {
            return Err(SchedError::EmptyJob(req.key));
        }
        // The scheduler keeps one entry per replica: a count no cluster could hold must not
        // make it allocate gigabytes.
        let replicas = req.total_replicas();
        if replicas > MAX_REPLICAS_PER_JOB {
            return Err(SchedError::InvalidQuantity {
                job: req.key,
                what: "replicas".into(),
                message: format!("{replicas} in all; at most {MAX_REPLICAS_PER_JOB} per job"),
            });
        }
        let elastic = elastic::state_of(&req)?;
        let mut entry = self.prepare(req);
        entry.elastic = elastic;
        if entry.total[0] > 0 && !entry.pools.is_empty() && entry.pools.len() < self.gpu_pools {
            entry.pinned_milli = entry.total[0].saturating_mul(1000) / entry.pools.len() as u64;
            for &(pi, _) in &entry.pools {
                self.pinned_milli[pi as usize][entry.pools.len()] += entry.pinned_milli;
            }
        }
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.jobs[s as usize] = Some(entry);
                s
            }
            None => {
                self.jobs.push(Some(entry));
                self.jobs.len() as u32 - 1
            }
        };
        self.by_key.insert(self.entry(slot).req.key.clone(), slot);
        if self.entry(slot).elastic.is_some() {
            self.elastic_jobs.insert(slot);
        }
        Ok(slot)
    }

    /// Works out once per job what every cycle needs: requests per replica, candidate pools
    /// and the job's speed on each, and what can never work.
    fn prepare(&mut self, req: JobRequest) -> JobEntry {
        let index = &mut self.index;
        let gang = Gang::new(&req, |name| index.ext_id(name));
        let Judgement {
            queue,
            tolerations,
            allowed,
            pools,
            blockers: static_blockers,
        } = fit::judge(&self.index, &self.quotas, &req, &gang, &[]);
        let needs = gang.needs(allowed.unwrap_or_default());
        let Gang {
            groups,
            order,
            total,
            ..
        } = gang;
        let (pods_gpus, gpu_slots) = elastic::gpu_slots(&groups);
        let existing: Vec<&str> = self
            .index
            .pools
            .iter()
            .filter_map(|p| p.gpu_type.as_deref())
            .collect();
        let mut pools: Vec<(u16, f64)> = pools
            .into_iter()
            .map(|pi| {
                let speed = match &self.index.pools[pi as usize].gpu_type {
                    None => 1.0,
                    Some(t) if !req.throughput.is_empty() => req
                        .throughput
                        .get(t)
                        .or_else(|| {
                            req.throughput
                                .iter()
                                .find(|(k, _)| gpu_type::selects(k, t, existing.iter().copied()))
                                .map(|(_, v)| v)
                        })
                        .copied()
                        .unwrap_or(0.0),
                    Some(t) => self.config.gpu_type_speed.get(t).copied().unwrap_or(1.0),
                };
                (
                    pi,
                    if speed.is_finite() && speed > 0.0 {
                        speed
                    } else {
                        0.0
                    },
                )
            })
            .collect();
        // CPU-only jobs go to CPU pools first.
        if total[0] == 0 {
            pools.sort_by_key(|&(pi, _)| (self.index.pools[pi as usize].gpu_type.is_some(), pi));
        }
        // Speeds within 5% of each other count as equal, so that such jobs spread over the
        // less loaded type and leave the faster cards to jobs that gain from them.
        let best = pools.iter().map(|p| p.1).fold(0.0f64, f64::max);
        let speeds = pools.clone();
        let pools = pools
            .into_iter()
            .map(|(pi, s)| {
                let band = if best > 0.0 {
                    (s / best * 20.0).round() as u32
                } else {
                    0
                };
                (pi, band)
            })
            .collect();
        JobEntry {
            req,
            tolerations,
            queue,
            groups,
            order,
            gpu_slots,
            pods_gpus,
            total,
            pools,
            speeds,
            pinned_milli: 0,
            service: 0.0,
            level: 0,
            static_blockers,
            needs,
            running: None,
            last_preempted_at: None,
            elastic: None,
        }
    }

    /// One full pass over every pending job: in order of priority, then service level,
    /// then the queue with the lowest weighted dominant share, then submit time; then
    /// running jobs move to faster pools that kept room (rebalancing).
    pub fn cycle(&mut self, now: Millis) -> CycleOutcome {
        self.cycle_sliced(now, None)
    }

    /// A cycle that stops admitting once it has placed `slice` replicas (at least one; `None`: no
    /// limit), for a shell that writes each admission through a rate-bound API and must end
    /// its pass in time. The jobs it did not reach keep their place and their last reason
    /// (counted in `deferred`); nothing is rebalanced or grown in such a cycle, so the next
    /// one takes up exactly where this one stopped. A gang is never cut: the job that
    /// crosses the limit is admitted whole.
    pub fn cycle_sliced(&mut self, now: Millis, slice: Option<u32>) -> CycleOutcome {
        self.cycle_no += 1;
        self.index.clear_reservations();
        let mut out = CycleOutcome::default();
        let mut budget = CycleBudget {
            preemption_searches_left: self.config.max_preemption_attempts,
            reservations_left: vec![self.config.reservations_per_pool; self.index.pools.len()],
            may_resize: true,
        };
        let mut per_queue: Vec<Vec<u32>> = vec![Vec::new(); self.quotas.queues.len()];
        for (slot, e) in self.jobs.iter().enumerate() {
            let Some(e) = e else { continue };
            if e.running.is_some() {
                continue;
            }
            match e.queue {
                Some(q) => per_queue[q as usize].push(slot as u32),
                None => {
                    out.counters.attempts += 1;
                    out.pending.push(PendingJob {
                        job: e.req.key.clone(),
                        reason: PendingReason {
                            needs: e.needs.clone(),
                            blockers: e.static_blockers.clone(),
                        },
                    });
                }
            }
        }
        for list in &mut per_queue {
            list.sort_by(|&a, &b| {
                let (a, b) = (self.entry(a), self.entry(b));
                (
                    Reverse(a.req.priority),
                    a.level,
                    a.service.to_bits(),
                    a.req.submit_time,
                    &a.req.key,
                )
                    .cmp(&(
                        Reverse(b.req.priority),
                        b.level,
                        b.service.to_bits(),
                        b.req.submit_time,
                        &b.req.key,
                    ))
            });
        }
        let mut cursor = vec![0usize; per_queue.len()];
        let head_key = |s: &Self, q: usize, slot: u32| {
            let e = s.entry(slot);
            let req = &e.req;
            Reverse((
                -i64::from(req.priority),
                e.level,
                e.service.to_bits(),
                s.quotas.dominant_share(q as u32),
                req.submit_time,
                q,
            ))
        };
        let mut heap = BinaryHeap::new();
        for (q, list) in per_queue.iter().enumerate() {
            if let Some(&slot) = list.first() {
                heap.push(head_key(self, q, slot));
            }
        }
        let mut placed = 0u64;
        // A slice of none would admit nothing and defer everything for ever: one at least.
        let limit = slice.map(|l| u64::from(l.max(1)));
        while let Some(Reverse((_, _, _, _, _, q))) = heap.pop() {
            if limit.is_some_and(|l| placed >= l) {
                // The rest waits for the next cycle, in the same order.
                out.counters.deferred = (cursor[q]..per_queue[q].len()).len() as u64
                    + heap
                        .iter()
                        .map(|Reverse(k)| (cursor[k.5]..per_queue[k.5].len()).len() as u64)
                        .sum::<u64>();
                break;
            }
            let slot = per_queue[q][cursor[q]];
            cursor[q] += 1;
            let before = out.admitted.len();
            self.attempt(slot, now, &mut budget, &mut out);
            placed += out.admitted[before..]
                .iter()
                .map(|a| a.placements.len() as u64)
                .sum::<u64>();
            if let Some(&next) = per_queue[q].get(cursor[q]) {
                heap.push(head_key(self, q, next));
            }
        }
        if out.counters.deferred == 0 {
            self.rebalance(now, &mut budget, &mut out);
            self.grow_elastic(now, &mut out);
        }
        self.settle_resizes(&mut out);
        out.counters.admitted = out.admitted.len() as u64;
        out.counters.preempted = out.preempted.len() as u64;
        out.counters.pending = out.pending.len() as u64;
        out
    }

    /// The fast path for one new job: decided at once against the current state, keeping
    /// the reservations of the last cycle (so it cannot delay a blocked gang). It may
    /// preempt, under the same rules as a cycle.
    pub fn try_admit(&mut self, job: JobRequest, now: Millis) -> Result<Decision, SchedError> {
        let slot = self.insert_entry(elastic::at_min(job))?;
        let mut budget = CycleBudget {
            preemption_searches_left: 1,
            reservations_left: vec![0; self.index.pools.len()],
            may_resize: false,
        };
        let mut out = CycleOutcome::default();
        self.attempt(slot, now, &mut budget, &mut out);
        Ok(match (out.admitted.pop(), out.pending.pop()) {
            (Some(admission), _) => Decision::Admitted {
                admission,
                preempted: out.preempted,
            },
            (None, Some(p)) => Decision::Pending { reason: p.reason },
            (None, None) => Decision::Pending {
                reason: PendingReason {
                    needs: self.entry(slot).needs.clone(),
                    blockers: vec![Blocker::AwaitingCycle],
                },
            },
        })
    }

    /// Tries to admit one pending job: filter (static blockers), score (pool order),
    /// reserve (quota + placement), else preemption, else a node reservation for it.
    fn attempt(
        &mut self,
        slot: u32,
        now: Millis,
        budget: &mut CycleBudget,
        out: &mut CycleOutcome,
    ) {
        out.counters.attempts += 1;
        let e = self.entry(slot);
        let Some(q) = e.queue else {
            out.pending.push(PendingJob {
                job: e.req.key.clone(),
                reason: PendingReason {
                    needs: e.needs.clone(),
                    blockers: e.static_blockers.clone(),
                },
            });
            return;
        };
        if let Some(b) = self.over_budget.get(&q) {
            out.pending.push(PendingJob {
                job: e.req.key.clone(),
                reason: PendingReason {
                    needs: e.needs.clone(),
                    blockers: vec![b.clone()],
                },
            });
            return;
        }
        let mut candidates: Vec<(u16, u32)> = e.pools.clone();
        // Within one speed band: pools where the job's largest replica would strand GPUs
        // (or has no room) last, since stranded GPUs are lost to every job; then the pool
        // least wanted by jobs with less choice; then the best fit (see `NodeFit`).
        let (_, pod) = &e.groups[e.order[0] as usize];
        let filter = e.shape().filter;
        let scan = self.config.node_scan_limit as usize;
        let free: u64 = self.index.pools.iter().map(|p| p.free_gpus).sum();
        let used = self.index.cluster_total[0].saturating_sub(free) + e.total[0];
        candidates.sort_by_cached_key(|&(pi, band)| {
            let fit = self
                .index
                .find_node(pi, pod, None, &filter, scan)
                .map(|(_, fit)| fit);
            (
                Reverse(band),
                fit.is_none_or(|f| f.stranded > 0),
                self.pinned_level(e, pi, used),
                fit.is_none(),
                fit,
                Reverse(self.index.pools[pi as usize].free_gpus),
                pi,
            )
        });
        let mut blockers: Vec<Blocker> = Vec::new();
        // The first pool where quota allows the job but room is missing: where it would
        // get a reservation.
        let mut capacity_blocked: Option<u16> = None;
        for &(pool, _) in &candidates {
            // Field-level borrow so that the index can be borrowed mutably beside it.
            let Some(e) = self.jobs[slot as usize].as_ref() else {
                return;
            };
            // What the pool's healthy GPUs could never hold now is not tried.
            if let Some(b) = self.too_few_healthy_gpus(pool, e) {
                blockers.push(b);
                continue;
            }
            let quota = self.quotas.check(q, pool, e.total, &self.index.pools);
            let shape = e.shape();
            let room = enough_slots(&self.index, pool, &shape);
            if quota.is_ok() && room {
                let placed = place_gang(
                    &mut self.index,
                    pool,
                    &shape,
                    self.config.node_scan_limit as usize,
                );
                if let Some(allocs) = placed {
                    let admission = self.admit(slot, pool, allocs, now);
                    out.counters.pods_placed += admission.placements.len() as u64;
                    out.admitted.push(admission);
                    return;
                }
            }
            let e = self.entry(slot);
            if !room || quota.is_ok() {
                blockers.push(self.capacity_blocker(pool, e));
                if quota.is_ok() && capacity_blocked.is_none() {
                    capacity_blocked = Some(pool);
                }
            }
            if let Err(b) = quota {
                blockers.push(*b);
            }
        }
        // Shrinking elastic jobs comes before preempting any whole gang.
        for &(pool, _) in &candidates {
            if let Some((allocs, resizes)) = self.shrink_for(slot, pool, now, budget) {
                let admission = self.admit(slot, pool, allocs, now);
                out.counters.pods_placed += admission.placements.len() as u64;
                out.admitted.push(admission);
                out.resized.extend(resizes);
                return;
            }
        }
        if budget.preemption_searches_left > 0 {
            for &(pool, _) in &candidates {
                if budget.preemption_searches_left == 0 || !self.may_preempt_in(slot, pool, now) {
                    continue;
                }
                budget.preemption_searches_left -= 1;
                out.counters.preemption_searches += 1;
                if let Some((allocs, victims)) = self.preempt_for(slot, pool, now) {
                    let admission = self.admit(slot, pool, allocs, now);
                    out.counters.pods_placed += admission.placements.len() as u64;
                    out.admitted.push(admission);
                    out.preempted.extend(victims);
                    return;
                }
            }
        }
        for &(pool, _) in candidates.iter().take(PROTECTED_POOLS_EXAMINED) {
            if let Some((jobs, until)) = self.protected_victims(slot, pool, now) {
                let pool = self.index.pools[pool as usize].name.clone();
                blockers.push(Blocker::Protected { pool, jobs, until });
            }
        }
        if let Some(pool) = capacity_blocked
            && budget.reservations_left[pool as usize] > 0
        {
            let e = self.entry(slot);
            let shape = e.shape();
            let plan = self
                .index
                .reservation_plan(pool, &e.groups, &e.order, &shape.filter);
            if let Some((nodes, witness)) = plan {
                if nodes.iter().all(|&n| self.index.node_is_empty(n)) {
                    // The reserved nodes have drained: place by the plan, which the
                    // tightest-fit heuristic missed.
                    let allocs = self.take_plan(slot, &witness);
                    let admission = self.admit(slot, pool, allocs, now);
                    out.counters.pods_placed += admission.placements.len() as u64;
                    out.admitted.push(admission);
                    return;
                }
                let key = e.req.key.clone();
                self.index.reserve_nodes(pool, &key, nodes);
                budget.reservations_left[pool as usize] -= 1;
                out.counters.reservations += 1;
            }
        }
        let e = self.entry(slot);
        let mut all = e.static_blockers.clone();
        all.extend(blockers);
        out.pending.push(PendingJob {
            job: e.req.key.clone(),
            reason: PendingReason {
                needs: e.needs.clone(),
                blockers: all,
            },
        });
    }

    fn take_plan(&mut self, slot: u32, plan: &[(u16, u32)]) -> Vec<Alloc> {
        let mut next_index = vec![0u32; self.entry(slot).groups.len()];
        let mut allocs = Vec::with_capacity(plan.len());
        for &(group, node) in plan {
            let pod = self.entry(slot).groups[group as usize].1.clone();
            let mask = self.index.take(node, &pod);
            allocs.push(Alloc {
                group,
                index: next_index[group as usize],
                node,
                mask,
            });
            next_index[group as usize] += 1;
        }
        allocs
    }

    pub(crate) fn admit(
        &mut self,
        slot: u32,
        pool: u16,
        allocs: Vec<Alloc>,
        now: Millis,
    ) -> Admission {
        let mut placements: Vec<ReplicaPlacement> = {
            let e = self.entry(slot);
            allocs
                .iter()
                .map(|a| ReplicaPlacement {
                    role: e.req.groups[a.group as usize].role.clone(),
                    index: a.index,
                    node: self.index.nodes[a.node as usize].name.clone(),
                    gpu_indices: (0..64).filter(|b| a.mask & (1 << b) != 0).collect(),
                })
                .collect()
        };
        let group_of = |role: &str| {
            self.entry(slot)
                .req
                .groups
                .iter()
                .position(|g| g.role == role)
                .unwrap_or(usize::MAX)
        };
        placements.sort_by_key(|p| (group_of(&p.role), p.index));
        self.mark_running(slot, pool, allocs, now);
        let p = &self.index.pools[pool as usize];
        Admission {
            job: self.entry(slot).req.key.clone(),
            pool: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            placements,
        }
    }

    /// Records a job as running and charges its queue (snapshot jobs and admissions).
    fn mark_running(&mut self, slot: u32, pool: u16, allocs: Vec<Alloc>, now: Millis) {
        let cycle = self.cycle_no;
        self.mark_resized(slot, now);
        self.reinstate(
            slot,
            RunningState {
                pool,
                allocs,
                admitted_at: now,
                cycle,
            },
        );
    }

    /// Marks a job running with capacity already taken in the index; charges its queue.
    pub(crate) fn reinstate(&mut self, slot: u32, r: RunningState) {
        let pool = r.pool;
        let e = self.entry_mut(slot);
        e.running = Some(r);
        let (preemptible, priority, level, q, total) =
            (e.req.preemptible, e.req.priority, e.level, e.queue, e.total);
        if pool != NO_POOL {
            if preemptible {
                self.running_by_pool[pool as usize].insert((priority, level, slot));
            }
            if let Some(q) = q {
                self.quotas.charge(q, pool, total);
            }
        }
    }

    /// Frees everything a running job holds (capacity and quota); it becomes pending.
    pub(crate) fn release(&mut self, slot: u32) -> Option<RunningState> {
        let e = self.jobs[slot as usize].as_mut()?;
        let running = e.running.take()?;
        let (q, total, priority, level) = (e.queue, e.total, e.req.priority, e.level);
        for a in &running.allocs {
            let pod = &self.entry(slot).groups[a.group as usize].1;
            let pod = pod.clone();
            self.index.give(a.node, a.mask, &pod);
        }
        if running.pool != NO_POOL {
            if let Some(q) = q {
                self.quotas.refund(q, running.pool, total);
            }
            self.running_by_pool[running.pool as usize].remove(&(priority, level, slot));
        }
        Some(running)
    }
}
