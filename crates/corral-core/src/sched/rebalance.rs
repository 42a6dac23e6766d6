//! Rebalancing: after the pass, running jobs move to faster pools that kept room.
//!
//! Heterogeneity awareness after admission: a job that started on a slow GPU type because
//! the fast one was full moves once the fast one has room that the pass left unused (no
//! pending job could take it), if it runs there at least
//! [`SchedulerConfig::rebalance_min_speedup`](super::SchedulerConfig::rebalance_min_speedup)
//! times faster. The largest speedups move first. A move is a preemption with reason
//! `Rebalance`; the job either stays admitted at its new placement (`move_in_place`, listed
//! in `CycleOutcome::moved`) or goes back to pending. Either way it moves only if it fits
//! there now (quota and placement), only if unprotected (not admitted in this cycle or
//! within `preemption_protection_ms`, which is also what stops a moved job from bouncing),
//! and at most `max_preemption_attempts` tries per cycle.
//!
//! With `move_in_place`, a job whose faster pool is full may also swap with a running job
//! there of no higher priority and as many GPUs that gains much less from that pool: A
//! moves from S to F and B from F to S when A's speedup F/S is at least
//! `rebalance_min_speedup` times B's. Each move or swap raises the product of the running
//! jobs' speeds by at least that factor, so moves cannot cycle.

use super::cycle::{CycleBudget, Scheduler};
use super::explain::PreemptionReason;
use super::model::Millis;
use super::outcome::{CycleOutcome, Preemption};
use super::placement::{enough_slots, place_gang};

/// A candidate move: speedup, service level, job slot, from pool, to pool.
type Move = (f64, u32, u32, u16, u16);

impl Scheduler {
    pub(crate) fn rebalance(
        &mut self,
        now: Millis,
        _budget: &mut CycleBudget,
        out: &mut CycleOutcome,
    ) {
        let min = self.config.rebalance_min_speedup;
        if min.is_nan() || min < 1.0 {
            return;
        }
        let room: Vec<u64> = self.index.pools.iter().map(|p| p.free_gpus).collect();
        let swaps = self.config.move_in_place;
        if !swaps && room.iter().all(|&f| f == 0) {
            return;
        }
        let mut moves: Vec<Move> = Vec::new();
        for (from, set) in self.running_by_pool.iter().enumerate() {
            let from = from as u16;
            for &(_, level, v) in set {
                let e = self.entry(v);
                let Some(cur) = e.speeds.iter().find(|s| s.0 == from).map(|s| s.1) else {
                    continue;
                };
                let mut best: Option<(f64, u16)> = None;
                for &(to, speed) in &e.speeds {
                    if to == from || (!swaps && room[to as usize] < e.total[0]) || speed <= 0.0 {
                        continue;
                    }
                    let gain = if cur > 0.0 { speed / cur } else { f64::MAX };
                    if gain >= min && gain > 1.0 && best.is_none_or(|b| gain > b.0) {
                        best = Some((gain, to));
                    }
                }
                if let Some((gain, to)) = best
                    && !self.protected(v, now)
                {
                    moves.push((gain, level, v, from, to));
                }
            }
        }
        if moves.is_empty() {
            return;
        }
        // Largest speedup first; then least service (it has the most left to gain).
        moves.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut tries = self.config.max_preemption_attempts;
        let scan = self.config.node_scan_limit as usize;
        for (gain, _, v, from, to) in moves {
            if tries == 0 {
                break;
            }
            let e = self.entry(v);
            let Some(q) = e.queue else { continue };
            if e.running.as_ref().is_none_or(|r| r.pool != from) {
                continue; // moved by an earlier swap
            }
            // An earlier move may have taken the room.
            if self.index.pools[to as usize].free_gpus < e.total[0]
                || !enough_slots(&self.index, to, &e.shape())
            {
                if swaps {
                    tries -= 1;
                    self.try_swap(v, from, to, gain, now, out);
                }
                continue;
            }
            tries -= 1;
            let Some(r) = self.release(v) else { continue };
            let e = self.entry(v);
            if self
                .quotas
                .check(q, to, e.total, &self.index.pools)
                .is_err()
            {
                self.restore(v, r);
                continue;
            }
            let Some(e) = self.jobs[v as usize].as_ref() else {
                continue;
            };
            let Some(allocs) = place_gang(&mut self.index, to, &e.shape(), scan) else {
                self.restore(v, r);
                continue;
            };
            out.preempted.push(Preemption {
                job: e.req.key.clone(),
                reason: PreemptionReason::Rebalance {
                    from_pool: self.index.pools[from as usize].name.clone(),
                    to_pool: self.index.pools[to as usize].name.clone(),
                    speedup: gain,
                    swapped_with: None,
                },
            });
            if self.config.move_in_place {
                let admission = self.admit(v, to, allocs, now);
                out.counters.pods_placed += admission.placements.len() as u64;
                out.moved.push(admission);
            } else {
                // Back to pending; the room stays free for the next cycle.
                for a in &allocs {
                    let pod = e.groups[a.group as usize].1.clone();
                    self.index.give(a.node, a.mask, &pod);
                }
                if let Some(e) = self.jobs[v as usize].as_mut() {
                    e.last_preempted_at = Some(now);
                }
            }
        }
    }

    /// Job `a` (in `from`) swaps with the running job of `to` that gains least from `to`
    /// over `from`, if `a` gains at least `rebalance_min_speedup` times more. Both must fit
    /// where they go; otherwise nothing changes.
    fn try_swap(
        &mut self,
        a: u32,
        from: u16,
        to: u16,
        gain_a: f64,
        now: Millis,
        out: &mut CycleOutcome,
    ) {
        let min = self.config.rebalance_min_speedup;
        let (pa, total_a) = {
            let e = self.entry(a);
            (e.req.priority, e.total)
        };
        let mut best: Option<(f64, u32)> = None;
        for &(_, _, b) in self.running_by_pool[to as usize]
            .range(..=(pa, u32::MAX, u32::MAX))
            .take(1024)
        {
            let eb = self.entry(b);
            if eb.total[0] != total_a[0] || self.protected(b, now) {
                continue;
            }
            let speed = |p: u16| eb.speeds.iter().find(|s| s.0 == p).map_or(0.0, |s| s.1);
            let (in_to, in_from) = (speed(to), speed(from));
            if in_from <= 0.0 {
                continue;
            }
            let gain_b = in_to / in_from;
            if gain_a >= min * gain_b && best.is_none_or(|x| gain_b < x.0) {
                best = Some((gain_b, b));
            }
        }
        let Some((gain_b, b)) = best else { return };
        let (Some(qa), Some(qb)) = (self.entry(a).queue, self.entry(b).queue) else {
            return;
        };
        let scan = self.config.node_scan_limit as usize;
        let Some(ra) = self.release(a) else { return };
        let Some(rb) = self.release(b) else {
            self.restore(a, ra);
            return;
        };
        let total_b = self.entry(b).total;
        let mut placed_a = None;
        let mut placed_b = None;
        if self
            .quotas
            .check(qa, to, total_a, &self.index.pools)
            .is_ok()
        {
            self.quotas.charge(qa, to, total_a);
            let quota_b = self
                .quotas
                .check(qb, from, total_b, &self.index.pools)
                .is_ok();
            self.quotas.refund(qa, to, total_a);
            if quota_b {
                let ea = self.jobs[a as usize].as_ref().expect("live job");
                placed_a = place_gang(&mut self.index, to, &ea.shape(), scan);
                if placed_a.is_some() {
                    let eb = self.jobs[b as usize].as_ref().expect("live job");
                    placed_b = place_gang(&mut self.index, from, &eb.shape(), scan);
                }
            }
        }
        let (Some(allocs_a), Some(allocs_b)) = (placed_a.clone(), placed_b) else {
            if let Some(allocs) = placed_a {
                let ea = self.entry(a);
                let pods: Vec<_> = allocs
                    .iter()
                    .map(|x| (x.node, x.mask, ea.groups[x.group as usize].1.clone()))
                    .collect();
                for (node, mask, pod) in pods {
                    self.index.give(node, mask, &pod);
                }
            }
            self.restore(b, rb);
            self.restore(a, ra);
            return;
        };
        let (name_from, name_to) = (
            self.index.pools[from as usize].name.clone(),
            self.index.pools[to as usize].name.clone(),
        );
        let (key_a, key_b) = (self.entry(a).req.key.clone(), self.entry(b).req.key.clone());
        out.preempted.push(Preemption {
            job: key_a.clone(),
            reason: PreemptionReason::Rebalance {
                from_pool: name_from.clone(),
                to_pool: name_to.clone(),
                speedup: gain_a,
                swapped_with: Some(key_b.clone()),
            },
        });
        out.preempted.push(Preemption {
            job: key_b,
            reason: PreemptionReason::Rebalance {
                from_pool: name_to,
                to_pool: name_from,
                speedup: 1.0 / gain_b,
                swapped_with: Some(key_a),
            },
        });
        for (slot, pool, allocs) in [(a, to, allocs_a), (b, from, allocs_b)] {
            let admission = self.admit(slot, pool, allocs, now);
            out.counters.pods_placed += admission.placements.len() as u64;
            out.moved.push(admission);
        }
    }
}
