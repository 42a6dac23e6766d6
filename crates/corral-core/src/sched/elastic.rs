//! Elastic sizing: an elastic job (torchrun `--nnodes=min:max`) runs with between `min` and
//! `max` replicas of its elastic group, and the scheduler moves it within that range.
//!
//! - **Admission** takes the gang at `min` (the size quota and placement must allow, like
//!   any gang); at the end of the same cycle the job grows as far as free room allows, so it
//!   starts at the largest size that fits, after every pending job had its chance.
//! - **Growth** (end of each cycle): running elastic jobs take free room, one replica at a
//!   time, up to `max`. Room that reserved nodes hold for blocked gangs is not free, and a
//!   job grows only within its queue's nominal quota (borrowed room would be reclaimed by
//!   preempting the whole job). Each replica goes to the job it speeds up the most relative
//!   to its own speed now (Sia weighs each job's goodput against its own, not samples of
//!   one model against another's): without speeds per size, the smallest job (a second
//!   replica doubles a job, a ninth adds an eighth). Among jobs of one size, the highest
//!   throughput per GPU first (Gavel/Sia style: a GPU goes where it buys the most), as the
//!   job itself last reported it while running ([`Scheduler::set_measured_throughput`],
//!   from its progress reports' `samplesPerSecond`), else as its speeds say at its current
//!   size and pool (`JobRequest::throughput`, the simulator's profiles); jobs with neither
//!   after those, by arrival.
//! - **Shrink** (before any preemption): a pending job that does not fit takes replicas
//!   from running elastic jobs of equal or lower priority in the pool, down to their `min`,
//!   lowest priority first, then the least throughput per GPU, then the youngest; only if
//!   that makes it fit, else nothing is shrunk and preemption is tried as before.
//! - The replica removed is always the highest index: replica 0, which hosts the
//!   rendezvous, is never removed, and a job's replicas are always `0..size`.
//! - No oscillation: a job is resized at most once per `resize_dwell_ms` (its admission
//!   counts as a resize) and at most once per cycle.
//!
//! Every resize is one [`Resize`] in the cycle's outcome (old size, new size, reason).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::cycle::{CycleBudget, Scheduler};
use super::index::{NO_POOL, PodRequest};
use super::model::{ElasticRange, JobRequest, Millis, SchedError};
use super::outcome::{Admission, CycleOutcome, ReplicaPlacement, Resize, ResizeReason};
use super::placement::Alloc;
use super::quota::Amount;

/// What the scheduler keeps of an elastic job.
#[derive(Clone, Debug)]
pub(crate) struct ElasticState {
    /// The elastic group (index into the job's groups).
    pub group: u16,
    pub min: u32,
    pub max: u32,
    /// When the job was last admitted or resized (the dwell counts from here), and in
    /// which cycle.
    pub resized_at: Millis,
    pub resized_cycle: u64,
    /// What the job last reported of its throughput while it ran: samples a second over
    /// the GPUs it held then.
    pub measured: Option<(f64, u64)>,
}

/// The request as a pending job is admitted: its elastic group at `min`.
pub(crate) fn at_min(mut req: JobRequest) -> JobRequest {
    if let Some(ElasticRange { role, min, .. }) = &req.elastic
        && let Some(g) = req.groups.iter_mut().find(|g| g.role == *role)
    {
        g.count = *min;
    }
    req
}

/// The request of a running job at the size its placements say.
pub(crate) fn at_placed(mut req: JobRequest, placements: &[super::ReplicaPlacement]) -> JobRequest {
    if let Some(ElasticRange { role, .. }) = &req.elastic {
        let placed = placements.iter().filter(|p| p.role == *role).count();
        if let Some(g) = req.groups.iter_mut().find(|g| g.role == *role) {
            g.count = u32::try_from(placed).unwrap_or(u32::MAX);
        }
    }
    req
}

/// Checks a request's elastic range against its groups: the role exists, `1 <= min <=
/// max`, and the group's count lies in the range.
pub(crate) fn state_of(req: &JobRequest) -> Result<Option<ElasticState>, SchedError> {
    let Some(range) = &req.elastic else {
        return Ok(None);
    };
    let invalid = |message: String| SchedError::InvalidQuantity {
        job: req.key.clone(),
        what: "elastic".into(),
        message,
    };
    let Some(group) = req.groups.iter().position(|g| g.role == range.role) else {
        let roles: Vec<&str> = req.groups.iter().map(|g| g.role.as_str()).collect();
        return Err(invalid(format!(
            "role `{}` is not one of the job's roles ({})",
            range.role,
            roles.join(", ")
        )));
    };
    if range.min == 0 || range.min > range.max {
        return Err(invalid(format!(
            "range {}..={} must have 1 <= min <= max",
            range.min, range.max
        )));
    }
    let count = req.groups[group].count;
    if count < range.min || count > range.max {
        return Err(invalid(format!(
            "{count} {} replicas are outside the range {}..={}",
            range.role, range.min, range.max
        )));
    }
    Ok(Some(ElasticState {
        group: group as u16,
        min: range.min,
        max: range.max,
        resized_at: 0,
        resized_cycle: 0,
        measured: None,
    }))
}

/// GPUs, milli-CPUs and bytes of memory of `count` replicas like `pod`.
fn amount(pod: &PodRequest, count: u32) -> Amount {
    let c = u64::from(count);
    [
        u64::from(pod.gpu).saturating_mul(c),
        pod.cpu.saturating_mul(c),
        pod.mem.saturating_mul(c),
    ]
}

/// For each distinct per-replica GPU count g > 0, how many g-sized slots the groups need;
/// and every replica's GPUs.
pub(crate) fn gpu_slots(groups: &[(u32, PodRequest)]) -> (Vec<u32>, Vec<(u32, u64)>) {
    let mut pods_gpus = Vec::new();
    for (count, pod) in groups {
        for _ in 0..*count {
            pods_gpus.push(pod.gpu);
        }
    }
    let mut distinct: Vec<u32> = pods_gpus.iter().copied().filter(|&g| g > 0).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let slots = distinct
        .iter()
        .map(|&g| (g, pods_gpus.iter().map(|&p| u64::from(p / g)).sum()))
        .collect();
    (pods_gpus, slots)
}

impl Scheduler {
    /// Whether the elastic job in `slot` may change size now (dwell passed, not yet
    /// resized in this cycle).
    fn may_resize(&self, slot: u32, now: Millis) -> bool {
        self.entry(slot).elastic.as_ref().is_some_and(|s| {
            s.resized_cycle != self.cycle_no
                && now >= s.resized_at.saturating_add(self.config.resize_dwell_ms)
        })
    }

    /// The current size of an elastic job (replicas of its elastic group).
    pub fn elastic_size(&self, key: &str) -> Option<u32> {
        let slot = *self.by_key.get(key)?;
        let e = self.entry(slot);
        let s = e.elastic.as_ref()?;
        Some(e.groups[s.group as usize].0)
    }

    pub(crate) fn mark_resized(&mut self, slot: u32, now: Millis) {
        let cycle = self.cycle_no;
        if let Some(s) = self.jobs[slot as usize]
            .as_mut()
            .and_then(|e| e.elastic.as_mut())
        {
            s.resized_at = now;
            s.resized_cycle = cycle;
        }
    }

    /// Sets the size of an elastic job's group; its totals and slots follow, and a running
    /// job's queue is charged the difference.
    fn set_size(&mut self, slot: u32, size: u32) {
        let e = self.entry(slot);
        let Some(s) = &e.elastic else { return };
        let g = s.group as usize;
        let (old, pod) = (e.groups[g].0, e.groups[g].1.clone());
        let charged = match (&e.running, e.queue) {
            (Some(r), Some(q)) if r.pool != NO_POOL => Some((q, r.pool)),
            _ => None,
        };
        let (before, after) = (amount(&pod, old), amount(&pod, size));
        if let Some((q, pool)) = charged {
            self.quotas.refund(q, pool, before);
            self.quotas.charge(q, pool, after);
        }
        let Some(e) = self.jobs[slot as usize].as_mut() else {
            return;
        };
        e.groups[g].0 = size;
        e.req.groups[g].count = size;
        for r in 0..3 {
            e.total[r] = e.total[r]
                .saturating_sub(before[r])
                .saturating_add(after[r]);
        }
        let (pods_gpus, slots) = gpu_slots(&e.groups);
        e.pods_gpus = pods_gpus;
        e.gpu_slots = slots;
    }

    /// Places one more replica of a running elastic job in its pool, near replica 0, if
    /// its queue's nominal quota and some node's free room allow.
    fn grow_one(&mut self, slot: u32) -> bool {
        let e = self.entry(slot);
        let (Some(s), Some(r), Some(q)) = (&e.elastic, &e.running, e.queue) else {
            return false;
        };
        let g = s.group as usize;
        let (size, pod) = (e.groups[g].0, &e.groups[g].1);
        if size >= s.max || r.pool == NO_POOL {
            return false;
        }
        let pool = r.pool;
        let one = amount(pod, 1);
        if self.quotas.check(q, pool, one, &self.index.pools).is_err()
            || !self.quotas.within_nominal(q, pool, one)
        {
            return false;
        }
        let domain = r
            .allocs
            .iter()
            .find(|a| a.group == s.group && a.index == 0)
            .map(|a| self.index.nodes[a.node as usize].domain);
        let scan = self.config.node_scan_limit as usize;
        let Some((node, _)) = self
            .index
            .find_node(pool, pod, domain, &e.shape().filter, scan)
        else {
            return false;
        };
        let pod = pod.clone();
        let mask = self.index.take(node, &pod);
        let alloc = Alloc {
            group: g as u16,
            index: size,
            node,
            mask,
        };
        if let Some(r) = self.jobs[slot as usize]
            .as_mut()
            .and_then(|e| e.running.as_mut())
        {
            r.allocs.push(alloc);
        }
        self.set_size(slot, size + 1);
        true
    }

    /// Removes the highest-indexed replica of a running elastic job above its minimum
    /// (never replica 0) and frees its room. Returns what it held, to undo.
    fn shrink_one(&mut self, slot: u32) -> Option<Alloc> {
        let e = self.entry(slot);
        let s = e.elastic.as_ref()?;
        let g = s.group;
        let size = e.groups[g as usize].0;
        if size <= s.min || size <= 1 {
            return None;
        }
        let pod = e.groups[g as usize].1.clone();
        let r = self.jobs[slot as usize].as_mut()?.running.as_mut()?;
        let at = r
            .allocs
            .iter()
            .position(|a| a.group == g && a.index == size - 1)?;
        let alloc = r.allocs.remove(at);
        self.index.give(alloc.node, alloc.mask, &pod);
        self.set_size(slot, size - 1);
        Some(alloc)
    }

    /// Puts back a replica [`Self::shrink_one`] removed (nothing else changed meanwhile).
    fn unshrink(&mut self, slot: u32, alloc: Alloc) {
        let e = self.entry(slot);
        let pod = e.groups[alloc.group as usize].1.clone();
        let size = e.groups[alloc.group as usize].0;
        // Cannot fail: the job held exactly this room a moment ago.
        let _ = self.index.take_exact(alloc.node, alloc.mask, &pod);
        if let Some(r) = self.jobs[slot as usize]
            .as_mut()
            .and_then(|e| e.running.as_mut())
        {
            r.allocs.push(alloc);
        }
        self.set_size(slot, size + 1);
    }

    /// A running elastic job reported `samples_per_second` (its progress, summed over its
    /// replicas as its script counts them): its growth and shrink order follow it from now
    /// on. Returns whether it was taken (a running elastic job, a positive finite rate).
    pub fn set_measured_throughput(&mut self, key: &str, samples_per_second: f64) -> bool {
        let Some(&slot) = self.by_key.get(key) else {
            return false;
        };
        if !(samples_per_second.is_finite() && samples_per_second > 0.0) {
            return false;
        }
        let e = self.entry_mut(slot);
        let gpus = e.total[0];
        match (&mut e.elastic, &e.running) {
            (Some(state), Some(_)) if gpus > 0 => {
                state.measured = Some((samples_per_second, gpus));
                true
            }
            _ => false,
        }
    }

    /// The job's throughput per GPU where it runs now: as it reported it, else as its
    /// speeds say (`None`: neither).
    fn throughput_per_gpu(&self, slot: u32) -> Option<f64> {
        let e = self.entry(slot);
        if let Some((rate, gpus)) = e.elastic.as_ref().and_then(|s| s.measured) {
            return Some(rate / gpus.max(1) as f64);
        }
        if e.req.throughput.is_empty() {
            return None;
        }
        let pool = e.running.as_ref()?.pool;
        let speed = e.speeds.iter().find(|(p, _)| *p == pool).map(|p| p.1)?;
        Some(speed / e.total[0].max(1) as f64)
    }

    /// Growth order: measured throughput per GPU, highest first; unmeasured after, by
    /// arrival.
    fn growth_rank(&self, slot: u32) -> (bool, Reverse<u64>, Millis, String) {
        let e = self.entry(slot);
        let t = self.throughput_per_gpu(slot);
        (
            t.is_none(),
            Reverse(t.unwrap_or(0.0).to_bits()),
            e.req.submit_time,
            e.req.key.clone(),
        )
    }

    /// The admission a running job holds now, replicas in group order then index.
    pub(crate) fn admission_of(&self, slot: u32) -> Option<Admission> {
        let e = self.entry(slot);
        let r = e.running.as_ref()?;
        let mut allocs: Vec<&Alloc> = r.allocs.iter().collect();
        allocs.sort_by_key(|a| (a.group, a.index));
        let placements = allocs
            .iter()
            .map(|a| ReplicaPlacement {
                role: e.req.groups[a.group as usize].role.clone(),
                index: a.index,
                node: self.index.nodes[a.node as usize].name.clone(),
                gpu_indices: (0..64).filter(|b| a.mask & (1 << b) != 0).collect(),
            })
            .collect();
        let p = self.index.pools.get(r.pool as usize)?;
        Some(Admission {
            job: e.req.key.clone(),
            pool: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            placements,
        })
    }

    /// End of a cycle: running elastic jobs grow into the room no pending job took. A job
    /// admitted in this cycle grows as part of its admission (its admission in `out`
    /// changes; no resize); others grow once their dwell has passed.
    pub(crate) fn grow_elastic(&mut self, now: Millis, out: &mut CycleOutcome) {
        if self.elastic_jobs.is_empty() {
            return;
        }
        let admitted_now: BTreeMap<String, usize> = out
            .admitted
            .iter()
            .enumerate()
            .filter(|(_, a)| {
                self.by_key
                    .get(&a.job)
                    .is_some_and(|&s| self.entry(s).elastic.is_some())
            })
            .map(|(i, a)| (a.job.clone(), i))
            .collect();
        let mut candidates: Vec<u32> = self
            .elastic_jobs
            .iter()
            .copied()
            .filter(|&slot| {
                let e = self.entry(slot);
                let room_to_grow = e
                    .elastic
                    .as_ref()
                    .is_some_and(|s| e.groups[s.group as usize].0 < s.max);
                room_to_grow
                    && e.running.is_some()
                    && (admitted_now.contains_key(&e.req.key) || self.may_resize(slot, now))
            })
            .collect();
        candidates.sort_by_cached_key(|&slot| self.growth_rank(slot));
        let from_sizes: BTreeMap<u32, u32> = candidates
            .iter()
            .filter_map(|&s| Some((s, self.elastic_size(&self.entry(s).req.key)?)))
            .collect();
        // One replica at a time, each to the job it speeds up the most relative to its
        // speed now: with speeds unknown per size, the smallest (a second replica doubles
        // a job, a ninth adds an eighth), as Sia weighs goodput relative to each job's own;
        // among equal sizes, the growth rank.
        let mut open: Vec<(u32, u32)> = candidates
            .iter()
            .map(|&slot| (slot, from_sizes.get(&slot).copied().unwrap_or(0)))
            .collect();
        while let Some(i) = open
            .iter()
            .enumerate()
            .min_by_key(|(i, (_, size))| (*size, *i))
            .map(|(i, _)| i)
        {
            if self.grow_one(open[i].0) {
                open[i].1 += 1;
            } else {
                open.remove(i);
            }
        }
        for slot in candidates {
            let Some(&from) = from_sizes.get(&slot) else {
                continue;
            };
            let e = self.entry(slot);
            let to = e.groups[e.elastic.as_ref().map_or(0, |s| s.group as usize)].0;
            if to == from {
                continue;
            }
            let Some(admission) = self.admission_of(slot) else {
                continue;
            };
            out.counters.pods_placed += u64::from(to - from);
            match admitted_now.get(&admission.job) {
                Some(&i) => out.admitted[i] = admission,
                None => {
                    let role = e.req.groups[e.elastic.as_ref().map_or(0, |s| s.group as usize)]
                        .role
                        .clone();
                    self.mark_resized(slot, now);
                    out.resized.push(Resize {
                        admission,
                        role,
                        from,
                        to,
                        reason: ResizeReason::Grew,
                    });
                }
            }
        }
    }

    /// End of a cycle: each resize carries the job's admission as the cycle leaves it (a
    /// job shrunk mid-pass may have moved since, or grown); a job preempted after its
    /// shrink holds nothing, and its resize is dropped.
    pub(crate) fn settle_resizes(&self, out: &mut CycleOutcome) {
        if out.resized.is_empty() {
            return;
        }
        let preempted: std::collections::BTreeSet<&str> = out
            .preempted
            .iter()
            .map(|p| p.job.as_str())
            .filter(|j| !out.moved.iter().any(|m| m.job == *j))
            .collect();
        let mut resized = std::mem::take(&mut out.resized);
        resized.retain_mut(|r| {
            if preempted.contains(r.admission.job.as_str()) {
                return false;
            }
            let now = self
                .by_key
                .get(&r.admission.job)
                .and_then(|&slot| self.admission_of(slot));
            match now {
                Some(a) => {
                    r.admission = a;
                    true
                }
                None => false,
            }
        });
        out.resized = resized;
    }

    /// Makes room for pending job `slot` in `pool` by shrinking running elastic jobs of
    /// equal or lower priority toward their minimum, and places it. On success the job's
    /// placement and the resizes; on failure nothing changed.
    pub(crate) fn shrink_for(
        &mut self,
        slot: u32,
        pool: u16,
        now: Millis,
        budget: &CycleBudget,
    ) -> Option<(Vec<Alloc>, Vec<Resize>)> {
        if !budget.may_resize || self.elastic_jobs.is_empty() {
            return None;
        }
        let e = self.entry(slot);
        let (q, priority, total, key) = (e.queue?, e.req.priority, e.total, e.req.key.clone());
        let mut victims: Vec<u32> = self
            .elastic_jobs
            .iter()
            .copied()
            .filter(|&v| {
                let ve = self.entry(v);
                v != slot
                    && ve.req.priority <= priority
                    && ve.running.as_ref().is_some_and(|r| r.pool == pool)
                    && ve
                        .elastic
                        .as_ref()
                        .is_some_and(|s| ve.groups[s.group as usize].0 > s.min.max(1))
                    && self.may_resize(v, now)
            })
            .collect();
        if victims.is_empty() {
            return None;
        }
        // Lowest priority first, then the least throughput per GPU (the reverse of growth
        // order), then the youngest.
        victims.sort_by_cached_key(|&v| {
            let e = self.entry(v);
            let t = self.throughput_per_gpu(v);
            (
                e.req.priority,
                t.is_some(),
                t.unwrap_or(0.0).to_bits(),
                Reverse(e.req.submit_time),
                Reverse(e.req.key.clone()),
            )
        });
        let mut shrunk: Vec<(u32, u32, Vec<Alloc>)> = Vec::new();
        let mut placed = None;
        'victims: for v in victims {
            let from = self
                .entry(v)
                .elastic
                .as_ref()
                .map_or(0, |s| self.entry(v).groups[s.group as usize].0);
            shrunk.push((v, from, Vec::new()));
            while let Some(a) = self.shrink_one(v) {
                if let Some(last) = shrunk.last_mut() {
                    last.2.push(a);
                }
                if let Some(allocs) = self.place_waiting(slot, q, pool, total) {
                    placed = Some(allocs);
                    break 'victims;
                }
            }
        }
        let Some(allocs) = placed else {
            for (v, _, removed) in shrunk.into_iter().rev() {
                for a in removed.into_iter().rev() {
                    self.unshrink(v, a);
                }
            }
            return None;
        };
        let mut resizes = Vec::new();
        for (v, from, removed) in shrunk {
            if removed.is_empty() {
                continue;
            }
            self.mark_resized(v, now);
            let Some(admission) = self.admission_of(v) else {
                continue;
            };
            let e = self.entry(v);
            let role = e.elastic.as_ref().map_or(String::new(), |s| {
                e.req.groups[s.group as usize].role.clone()
            });
            resizes.push(Resize {
                admission,
                role,
                from,
                to: from - removed.len() as u32,
                reason: ResizeReason::ShrankFor {
                    job: key.clone(),
                    priority,
                },
            });
        }
        Some((allocs, resizes))
    }
}
