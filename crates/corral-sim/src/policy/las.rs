//! Tiresias-style discretized two-dimensional least-attained-service (2D-LAS): a job's
//! attained service is GPUs x time held. Jobs sit in priority queues by attained service
//! (thresholds in GPU-seconds); the lowest queue goes first, FIFO within a queue, and
//! running jobs are preempted when higher-priority jobs need their GPUs. Like Tiresias it
//! ignores GPU heterogeneity: a running job keeps its type, a new one takes the type with
//! the most free GPUs (ties broken at random with the seeded RNG: a fixed tie-break would
//! be a hidden preference for one type; on Gavel's dev trace "first type" sent a long
//! ResNet-18 job to a K80, 11.6x slower than a V100, where it ran alone for 1,627 h).
//!
//! Starvation guard (Tiresias, NSDI 2019, section 4.2): a waiting job that has waited at
//! least [`Las::promote_knob`] times the time it has run goes back to the highest-priority
//! queue (its attained service counts from the promotion). Without it LAS starves long
//! jobs without bound: on Gavel's dev trace a job waited until hour 2,172.

use std::collections::BTreeMap;

use super::{Assignment, Policy, RoundCtx, free_per_type};
use corral_core::sched::workload::Rng;

pub struct Las {
    /// Queue thresholds in GPU-seconds of attained service.
    pub thresholds: Vec<f64>,
    /// Promote a waiting job once it has waited this many times the seconds it has run
    /// (Tiresias' PROMOTEKNOB); `f64::INFINITY` turns the guard off.
    pub promote_knob: f64,
    /// Attained service at the last promotion, per job.
    base: BTreeMap<usize, f64>,
    /// When each job last ran (or arrived), for its waiting time.
    last_ran: BTreeMap<usize, f64>,
    /// Jobs promoted so far.
    pub promotions: u64,
    rng: Rng,
}

impl Default for Las {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Las {
    pub fn new(seed: u64) -> Self {
        Las {
            rng: Rng::new(seed),
            thresholds: vec![3600.0, 36_000.0],
            promote_knob: 1.0,
            base: BTreeMap::new(),
            last_ran: BTreeMap::new(),
            promotions: 0,
        }
    }
}

impl Policy for Las {
    fn name(&self) -> String {
        "las".into()
    }

    fn on_finish(&mut self, job: usize) {
        self.base.remove(&job);
        self.last_ran.remove(&job);
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        let mut order: Vec<(usize, usize)> = Vec::with_capacity(ctx.active.len());
        for &j in ctx.active {
            let st = &ctx.state[j];
            let attained = st.attained_gpu_s;
            let last = *self
                .last_ran
                .entry(j)
                .or_insert(ctx.jobs[j].arrival_s.max(0.0));
            if st.current.is_some() {
                self.last_ran.insert(j, ctx.now);
            } else {
                // Seconds run since the last promotion (GPU-seconds / GPUs).
                let base = self.base.get(&j).copied().unwrap_or(0.0);
                let run_s = (attained - base) / f64::from(ctx.jobs[j].gpus.max(1));
                if run_s > 0.0 && ctx.now - last >= self.promote_knob * run_s {
                    self.base.insert(j, attained);
                    self.last_ran.insert(j, ctx.now);
                    self.promotions += 1;
                }
            }
            let a = attained - self.base.get(&j).copied().unwrap_or(0.0);
            order.push((self.thresholds.iter().filter(|&&t| a >= t).count(), j));
        }
        order.sort_unstable();
        let mut free = free_per_type(ctx.cluster);
        let mut out = Vec::new();
        for (_, j) in order {
            let g = ctx.jobs[j].gpus;
            let t = match &ctx.state[j].current {
                Some(p) if free[p.gpu_type] >= g => Some(p.gpu_type),
                _ => {
                    let fits = || (0..free.len()).filter(|&t| free[t] >= g && ctx.tput[j][t] > 0.0);
                    let most = fits().map(|t| free[t]).max();
                    let ties: Vec<usize> = fits().filter(|&t| Some(free[t]) == most).collect();
                    match ties.len() {
                        0 => None,
                        1 => Some(ties[0]),
                        n => Some(ties[self.rng.index(n)]),
                    }
                }
            };
            if let Some(t) = t {
                free[t] -= g;
                out.push(Assignment::on(j, t));
            }
        }
        out
    }
}
