//! Gavel's FIFO (`fifo`): jobs in arrival order; the job at the head of the queue goes to a
//! randomly chosen GPU type with enough free GPUs (heterogeneity-agnostic) and stays there
//! until it finishes; if the head does not fit, nothing behind it starts. As in Gavel, the
//! allocation is recomputed only when jobs arrived or finished, at most every 1920 s.

use std::collections::BTreeMap;

use super::{Assignment, Policy, RoundCtx, free_per_type};
use corral_core::sched::workload::Rng;

pub struct Fifo {
    rng: Rng,
    alloc: BTreeMap<usize, usize>,
    last_reset: Option<f64>,
    dirty: bool,
    /// Gavel's `minimum_time_between_allocation_resets`.
    pub realloc_min_s: f64,
}

impl Fifo {
    pub fn new(seed: u64) -> Self {
        Fifo {
            rng: Rng::new(seed),
            alloc: BTreeMap::new(),
            last_reset: None,
            dirty: true,
            realloc_min_s: 1920.0,
        }
    }
}

impl Policy for Fifo {
    fn name(&self) -> String {
        "fifo".into()
    }

    fn on_finish(&mut self, job: usize) {
        self.alloc.remove(&job);
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        self.dirty |= ctx.changed;
        let due = self
            .last_reset
            .is_none_or(|t| ctx.now - t >= self.realloc_min_s - 1e-9);
        if self.dirty && due {
            self.dirty = false;
            self.last_reset = Some(ctx.now);
            let mut free = free_per_type(ctx.cluster);
            for (&j, &t) in &self.alloc {
                free[t] = free[t].saturating_sub(ctx.jobs[j].gpus);
            }
            for &j in ctx.active {
                if self.alloc.contains_key(&j) {
                    continue;
                }
                let g = ctx.jobs[j].gpus;
                let fits: Vec<usize> = (0..free.len())
                    .filter(|&t| free[t] >= g && ctx.tput[j][t] > 0.0)
                    .collect();
                if fits.is_empty() {
                    break;
                }
                let t = fits[self.rng.index(fits.len())];
                free[t] -= g;
                self.alloc.insert(j, t);
            }
        }
        self.alloc
            .iter()
            .map(|(&j, &t)| Assignment::on(j, t))
            .collect()
    }
}
