//! Tiresias-style discretized two-dimensional least-attained-service (2D-LAS): a job's
//! attained service is GPUs x time held. Jobs sit in priority queues by attained service
//! (thresholds in GPU-seconds); the lowest queue goes first, FIFO within a queue, and
//! running jobs are preempted when higher-priority jobs need their GPUs. Like Tiresias it
//! ignores GPU heterogeneity: a running job keeps its type, a new one takes the type with
//! the most free GPUs. Not modelled: Tiresias' starvation guard (promotion after a long
//! wait).

use super::{Assignment, Policy, RoundCtx, free_per_type};

pub struct Las {
    /// Queue thresholds in GPU-seconds of attained service.
    pub thresholds: Vec<f64>,
}

impl Default for Las {
    fn default() -> Self {
        Las {
            thresholds: vec![3600.0, 36_000.0],
        }
    }
}

impl Policy for Las {
    fn name(&self) -> String {
        "las".into()
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        let mut order: Vec<(usize, usize)> = ctx
            .active
            .iter()
            .map(|&j| {
                let a = ctx.state[j].attained_gpu_s;
                (self.thresholds.iter().filter(|&&t| a >= t).count(), j)
            })
            .collect();
        order.sort_unstable();
        let mut free = free_per_type(ctx.cluster);
        let mut out = Vec::new();
        for (_, j) in order {
            let g = ctx.jobs[j].gpus;
            let t = match &ctx.state[j].current {
                Some(p) if free[p.gpu_type] >= g => Some(p.gpu_type),
                _ => (0..free.len())
                    .filter(|&t| free[t] >= g && ctx.tput[j][t] > 0.0)
                    .max_by(|&a, &b| free[a].cmp(&free[b]).then(b.cmp(&a))),
            };
            if let Some(t) = t {
                free[t] -= g;
                out.push(Assignment::on(j, t));
            }
        }
        out
    }
}
