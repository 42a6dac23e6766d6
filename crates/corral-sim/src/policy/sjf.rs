//! Shortest job first: among waiting jobs, the one with the shortest run time on its
//! fastest GPU type (oracle durations from the trace) starts first, on the fastest type
//! with enough free GPUs; jobs that do not fit are skipped (backfill). Never preempts.

use super::{Assignment, Policy, RoundCtx, fastest_free, free_per_type};

pub struct Sjf;

impl Policy for Sjf {
    fn name(&self) -> String {
        "sjf".into()
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        let mut free = free_per_type(ctx.cluster);
        let mut out = Vec::new();
        let mut waiting = Vec::new();
        for &j in ctx.active {
            match &ctx.state[j].current {
                Some(p) => {
                    free[p.gpu_type] = free[p.gpu_type].saturating_sub(ctx.jobs[j].gpus);
                    out.push(Assignment::on(j, p.gpu_type));
                }
                None => {
                    let best = ctx.tput[j].iter().copied().fold(0.0, f64::max);
                    let left = (ctx.jobs[j].steps - ctx.state[j].done_steps).max(0.0);
                    waiting.push((left / best, j));
                }
            }
        }
        waiting.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, j) in waiting {
            if let Some(t) = fastest_free(&ctx.tput[j], &free, ctx.jobs[j].gpus) {
                free[t] -= ctx.jobs[j].gpus;
                out.push(Assignment::on(j, t));
            }
        }
        out
    }
}
