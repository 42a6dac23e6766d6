//! Preemption: make room for a job by stopping admitted work, under rules that prevent
//! loops.
//!
//! - Victims are lower-priority jobs first, then (when the preemptor's queue stays within
//!   its nominal quota) jobs of queues that borrow in the pool, most over fair share first,
//!   then jobs of the same priority in a higher least-attained-service level than the
//!   preemptor (Tiresias' demotion), highest level first; within each class the youngest
//!   first. A same-priority victim of another queue is taken only when its queue borrows
//!   in the pool or has no finite nominal quota there (no guarantee is broken).
//! - A victim is never protected work: not preemptible, admitted in this cycle, or admitted
//!   less than `preemption_protection_ms` ago.
//! - Nothing is preempted unless the preemptor then fits (placement and quota).
//! - After the preemptor is placed, victims it did not need are given back (the fewest
//!   victims).
//! - A preemptor outranks its victims strictly by priority, reclaims its own nominal
//!   quota, or has strictly less attained service (a lower level); its victims cannot
//!   preempt it back before it has received as much service (and its protection ends).

use std::cmp::Reverse;

use super::cycle::Scheduler;
use super::explain::PreemptionReason;
use super::model::Millis;
use super::outcome::Preemption;
use super::placement::{Alloc, enough_slots, place_gang};

impl Scheduler {
    pub(crate) fn protected(&self, slot: u32, now: Millis) -> bool {
        let e = self.entry(slot);
        match &e.running {
            None => true,
            Some(r) => {
                !e.req.preemptible
                    || r.cycle == self.cycle_no
                    || now.saturating_sub(r.admitted_at) < self.config.preemption_protection_ms
            }
        }
    }

    /// Cheap test whether a victim search in `pool` could find anyone.
    pub(crate) fn may_preempt_in(&self, slot: u32, pool: u16, now: Millis) -> bool {
        let e = self.entry(slot);
        let Some(q) = e.queue else { return false };
        let running = &self.running_by_pool[pool as usize];
        // Some lower-priority job that is not protected (jobs of this cycle are).
        let lower = running
            .range(..(e.req.priority, 0, 0))
            .take(64)
            .any(|&(_, _, v)| !self.protected(v, now));
        lower
            || self.reclaim_possible(q, pool, e.total)
            || running
                .range((e.req.priority, e.level + 1, 0)..=(e.req.priority, u32::MAX, u32::MAX))
                .rev()
                .take(64)
                .any(|&(_, _, v)| !self.protected(v, now) && self.service_victim_ok(q, v, pool))
    }

    /// Whether a same-priority job with more service may yield to a job of queue `q`.
    fn service_victim_ok(&self, q: u32, victim: u32, pool: u16) -> bool {
        let Some(vq) = self.entry(victim).queue else {
            return false;
        };
        vq == q || self.quotas.is_borrowing(vq, pool) || self.quotas.nominal_unlimited(vq, pool)
    }

    fn reclaim_possible(&self, q: u32, pool: u16, total: [u64; 3]) -> bool {
        self.quotas.within_nominal(q, pool, total)
            && (0..self.quotas.queues.len() as u32).any(|o| {
                o != q && self.quotas.same_cohort(q, o) && self.quotas.is_borrowing(o, pool)
            })
    }

    /// Finds victims whose removal lets the job fit in `pool`, and places it. On success
    /// the victims are released and pending again; on failure nothing changed.
    pub(crate) fn preempt_for(
        &mut self,
        slot: u32,
        pool: u16,
        now: Millis,
    ) -> Option<(Vec<Alloc>, Vec<Preemption>)> {
        let (q, priority, level, service, total, key) = {
            let e = self.entry(slot);
            (
                e.queue?,
                e.req.priority,
                e.level,
                e.service,
                e.total,
                e.req.key.clone(),
            )
        };
        let reclaim = self.reclaim_possible(q, pool, total);
        // (class, order key, victim slot): class 0 = lower priority, 1 = borrower,
        // 2 = same priority with more attained service.
        // Youngest: latest admitted, then latest submitted.
        type Candidate = (u8, i64, u64, Reverse<Millis>, Reverse<Millis>, u32);
        let mut candidates: Vec<Candidate> = Vec::new();
        for &(vp, vl, v) in
            self.running_by_pool[pool as usize].range(..=(priority, u32::MAX, u32::MAX))
        {
            if v == slot || self.protected(v, now) {
                continue;
            }
            let ve = self.entry(v);
            let admitted_at = ve.running.as_ref().map_or(0, |r| r.admitted_at);
            let submitted = ve.req.submit_time;
            let Some(vq) = ve.queue else { continue };
            if vp < priority {
                candidates.push((
                    0,
                    i64::from(vp),
                    0,
                    Reverse(admitted_at),
                    Reverse(submitted),
                    v,
                ));
            } else if reclaim
                && vq != q
                && self.quotas.same_cohort(q, vq)
                && self.quotas.is_borrowing(vq, pool)
            {
                let share = self.quotas.dominant_share(vq);
                candidates.push((
                    1,
                    0,
                    u64::MAX - share,
                    Reverse(admitted_at),
                    Reverse(submitted),
                    v,
                ));
            } else if vl > level && self.service_victim_ok(q, v, pool) {
                candidates.push((
                    2,
                    -i64::from(vl),
                    0,
                    Reverse(admitted_at),
                    Reverse(submitted),
                    v,
                ));
            }
        }
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_unstable();
        let mut released = Vec::new();
        let mut placed = None;
        for &(class, _, _, _, _, v) in &candidates {
            // A borrower is only a victim while its queue still borrows.
            if class == 1 {
                let vq = self.entry(v).queue;
                if !vq.is_some_and(|vq| self.quotas.is_borrowing(vq, pool)) {
                    continue;
                }
            }
            if let Some(r) = self.release(v) {
                released.push((class, v, r));
            }
            if let Some(allocs) = self.place_waiting(slot, q, pool, total) {
                placed = Some(allocs);
                break;
            }
        }
        let Some(allocs) = placed else {
            for (_, v, r) in released.into_iter().rev() {
                self.restore(v, r);
            }
            return None;
        };
        // Charge the preemptor while victims try to come back, so that quota checks see it.
        self.quotas.charge(q, pool, total);
        let mut victims = Vec::new();
        for (class, v, r) in released.into_iter().rev() {
            if self.try_restore(v, r).is_err() {
                let ve = self.jobs[v as usize].as_mut()?;
                ve.last_preempted_at = Some(now);
                let reason = if class == 0 {
                    PreemptionReason::LowerPriority {
                        preemptor: key.clone(),
                        preemptor_priority: priority,
                        victim_priority: ve.req.priority,
                    }
                } else if class == 2 {
                    PreemptionReason::AttainedService {
                        preemptor: key.clone(),
                        preemptor_service: service,
                        victim_service: ve.service,
                    }
                } else {
                    PreemptionReason::Reclaim {
                        preemptor: key.clone(),
                        queue: self.quotas.queues[q as usize].name.clone(),
                        pool: self.index.pools[pool as usize].name.clone(),
                    }
                };
                victims.push(Preemption {
                    job: ve.req.key.clone(),
                    reason,
                });
            }
        }
        self.quotas.refund(q, pool, total);
        victims.reverse();
        Some((allocs, victims))
    }

    /// Puts a released job back exactly where it was (nothing else changed meanwhile).
    /// The waiting job's gang placed now, if its queue's quota and the pool's room allow it
    /// (after victims were released or shrunk); `None` while it does not fit.
    pub(crate) fn place_waiting(
        &mut self,
        slot: u32,
        q: u32,
        pool: u16,
        total: [u64; 3],
    ) -> Option<Vec<Alloc>> {
        let e = self.entry(slot);
        if self
            .quotas
            .check(q, pool, total, &self.index.pools)
            .is_err()
            || !enough_slots(&self.index, pool, &e.shape())
        {
            return None;
        }
        let scan = self.config.node_scan_limit as usize;
        let e = self.jobs[slot as usize].as_ref()?;
        place_gang(&mut self.index, pool, &e.shape(), scan)
    }

    pub(crate) fn restore(&mut self, slot: u32, r: super::cycle::RunningState) {
        for a in &r.allocs {
            let pod = self.entry(slot).groups[a.group as usize].1.clone();
            // Cannot fail: this job held exactly this room a moment ago.
            let _ = self.index.take_exact(a.node, a.mask, &pod);
        }
        self.reinstate(slot, r);
    }

    /// Puts a released job back where it was if its GPUs and quota are still free.
    fn try_restore(
        &mut self,
        slot: u32,
        r: super::cycle::RunningState,
    ) -> Result<(), super::cycle::RunningState> {
        let (q, total) = {
            let e = self.entry(slot);
            (e.queue, e.total)
        };
        if let Some(q) = q
            && self
                .quotas
                .check(q, r.pool, total, &self.index.pools)
                .is_err()
        {
            return Err(r);
        }
        let mut taken = 0;
        for a in &r.allocs {
            let pod = self.entry(slot).groups[a.group as usize].1.clone();
            if !self.index.take_exact(a.node, a.mask, &pod) {
                break;
            }
            taken += 1;
        }
        if taken < r.allocs.len() {
            for a in &r.allocs[..taken] {
                let pod = self.entry(slot).groups[a.group as usize].1.clone();
                self.index.give(a.node, a.mask, &pod);
            }
            return Err(r);
        }
        self.reinstate(slot, r);
        Ok(())
    }
}
