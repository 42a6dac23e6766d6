//! Gavel's LP policies, reimplemented: `max_min_fairness` (LAS: maximise the
//! minimum scale-factor-weighted share of GPU time, all GPU types equal),
//! `max_min_fairness_perf` (maximise the minimum effective throughput, normalised by the
//! job's throughput under the heterogeneity-agnostic allocation) and
//! `max_sum_throughput_perf` (maximise the sum of the jobs' throughputs, in steps per
//! second; Gavel's policies/max_sum_throughput.py, and what Sia's simulator runs as its
//! `gavel` baseline: sia-simulator/simulator_config.py `gavel_default_policy`). The allocation
//! `x[job][type]` (fraction of time) is an LP solved with `microlp` (pure Rust); it is
//! recomputed when jobs arrived or finished, at most every 1920 s (Gavel's default).
//!
//! Gavel's round mechanism: per GPU type, jobs are ranked by priority = allocation /
//! fraction of that type's time received since the last reset (never run: allocation x
//! 1e9), then deficit, then allocation; types are visited in order (fastest first for
//! `_perf`, shuffled each round with the seeded RNG otherwise) and jobs are taken greedily
//! while GPUs are left.

use std::collections::BTreeMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};

use super::{Assignment, Policy, RoundCtx};
use crate::cluster::SimCluster;
use crate::job::SimJob;
use crate::round::EngineConfig;
use corral_core::sched::workload::Rng;

/// What the LP optimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// `max_min_fairness`: heterogeneity-agnostic max-min share.
    MaxMin,
    /// `max_min_fairness_perf`: max-min normalised effective throughput.
    MaxMinPerf,
    /// `max_sum_throughput_perf`: total throughput.
    MaxSumThroughput,
    /// `gandiva` as Gavel implements it (policies/gandiva.py `_get_allocation`): the
    /// cluster's time split equally among the jobs, each type in proportion to its size,
    /// heterogeneity-agnostic. Gavel's version also pairs jobs of equal scale factor on one
    /// GPU when the jobs ask for more GPUs than exist, using measured co-location
    /// throughputs; this engine gives a GPU to one job at a time, so that packing is not
    /// modelled.
    EqualShare,
    /// `fifo` exactly as Gavel's code runs it (policy `fifo_gavel`, for comparison with
    /// Gavel's published numbers): scheduler/policies/fifo.py `FIFOPolicy.get_allocation`
    /// in its default mode draws a random index among the GPU types with room for the job
    /// but then allocates the job to `worker_type`, which still holds the last value of the
    /// loop over the types with any free GPU (the random index only decides which type is
    /// dropped from that list when one fills up). The last type (by name: v100 in Gavel's
    /// cluster) is over-committed, and the round mechanism time-slices the jobs allocated
    /// there; jobs without an allocation on a type never run there.
    FifoGavel,
}

pub struct MaxMin {
    objective: Objective,
    rng: Rng,
    alloc: BTreeMap<usize, Vec<f64>>,
    /// `held_s_on` of each job at the last reset.
    base: BTreeMap<usize, Vec<f64>>,
    last_reset: Option<f64>,
    dirty: bool,
    type_order: Vec<usize>,
    pub realloc_min_s: f64,
    /// LP solves that failed (the previous allocation was kept).
    pub solver_failures: u32,
    /// `FifoGavel`: job -> its one GPU type, kept until the job is done and the next
    /// recomputation has seen it done (Gavel's `_allocation`).
    fifo_alloc: BTreeMap<usize, usize>,
    fifo_done: std::collections::BTreeSet<usize>,
    /// One priority queue over all GPU types instead of one per type in turn (Sia's
    /// simulator's Gavel).
    pub global_queue: bool,
}

impl MaxMin {
    pub fn new(perf: bool, seed: u64) -> Self {
        Self::with(
            if perf {
                Objective::MaxMinPerf
            } else {
                Objective::MaxMin
            },
            seed,
        )
    }

    pub fn with(objective: Objective, seed: u64) -> Self {
        MaxMin {
            objective,
            rng: Rng::new(seed),
            alloc: BTreeMap::new(),
            base: BTreeMap::new(),
            last_reset: None,
            dirty: true,
            type_order: Vec::new(),
            realloc_min_s: 1920.0,
            solver_failures: 0,
            fifo_alloc: BTreeMap::new(),
            fifo_done: std::collections::BTreeSet::new(),
            global_queue: false,
        }
    }
}

/// Solves `max t` s.t. `t <= sum_w coef[j][w] x[j][w]` for every job, `sum_j gpus_j x[j][w]
/// <= n_w`, `sum_w x[j][w] <= 1`, `0 <= x <= 1`. Returns `x`.
pub fn max_min_lp(coef: &[Vec<f64>], gpus: &[u32], capacity: &[u32]) -> Option<Vec<Vec<f64>>> {
    let m = coef.len();
    let n = capacity.len();
    if m == 0 {
        return Some(Vec::new());
    }
    let mut p = Problem::new(OptimizationDirection::Maximize);
    let t = p.add_var(1.0, (0.0, f64::INFINITY));
    let x: Vec<Vec<_>> = (0..m)
        .map(|_| (0..n).map(|_| p.add_var(0.0, (0.0, 1.0))).collect())
        .collect();
    for j in 0..m {
        let mut e: Vec<_> = vec![(t, 1.0)];
        e.extend(
            (0..n)
                .filter(|&w| coef[j][w] != 0.0)
                .map(|w| (x[j][w], -coef[j][w])),
        );
        p.add_constraint(e.as_slice(), ComparisonOp::Le, 0.0);
        let row: Vec<_> = (0..n).map(|w| (x[j][w], 1.0)).collect();
        p.add_constraint(row.as_slice(), ComparisonOp::Le, 1.0);
    }
    solve_allocation(p, &x, gpus, capacity)
}

/// Solves `max sum_j sum_w coef[j][w] x[j][w]` s.t. `sum_j gpus_j x[j][w] <= n_w`,
/// `sum_w x[j][w] <= 1`, `0 <= x <= 1` (Gavel's `ThroughputSumWithPerf` without SLOs).
pub fn max_sum_lp(coef: &[Vec<f64>], gpus: &[u32], capacity: &[u32]) -> Option<Vec<Vec<f64>>> {
    let m = coef.len();
    let n = capacity.len();
    if m == 0 {
        return Some(Vec::new());
    }
    let mut p = Problem::new(OptimizationDirection::Maximize);
    let x: Vec<Vec<_>> = (0..m)
        .map(|j| {
            (0..n)
                .map(|w| {
                    // A type where the job cannot run gets no time.
                    let hi = if coef[j][w] > 0.0 { 1.0 } else { 0.0 };
                    p.add_var(coef[j][w].max(0.0), (0.0, hi))
                })
                .collect()
        })
        .collect();
    for row in &x {
        let r: Vec<_> = row.iter().map(|&v| (v, 1.0)).collect();
        p.add_constraint(r.as_slice(), ComparisonOp::Le, 1.0);
    }
    solve_allocation(p, &x, gpus, capacity)
}

/// What both LPs end with: no GPU type over-committed, then the solve; `x[j][w]`, clamped
/// to `[0, 1]`.
fn solve_allocation(
    mut p: Problem,
    x: &[Vec<Variable>],
    gpus: &[u32],
    capacity: &[u32],
) -> Option<Vec<Vec<f64>>> {
    for (w, &cap) in capacity.iter().enumerate() {
        let col: Vec<_> = x
            .iter()
            .zip(gpus)
            .map(|(row, &g)| (row[w], f64::from(g)))
            .collect();
        p.add_constraint(col.as_slice(), ComparisonOp::Le, f64::from(cap));
    }
    let sol = p.solve().ok()?.into_solution().ok()?;
    Some(
        x.iter()
            .map(|r| {
                r.iter()
                    .map(|&v| sol.var_value(v).clamp(0.0, 1.0))
                    .collect()
            })
            .collect(),
    )
}

impl MaxMin {
    /// Gavel's `FIFOPolicy.get_allocation` (mode `base`), line by line, quirk included.
    fn reallocate_fifo(&mut self, ctx: &RoundCtx) {
        let cap = ctx.cluster.gpus_per_type();
        let mut available: Vec<i64> = cap.iter().map(|&c| i64::from(c)).collect();
        let sf = |j: usize| i64::from(ctx.jobs[j].gpus);
        let mut queue: std::collections::VecDeque<usize> = ctx
            .active
            .iter()
            .copied()
            .filter(|j| !self.fifo_alloc.contains_key(j))
            .collect();
        let held: Vec<(usize, usize)> = self.fifo_alloc.iter().map(|(&j, &t)| (j, t)).collect();
        for (j, t) in held {
            if self.fifo_done.contains(&j) {
                // A finished job's GPUs go to the head of the queue if it fits there.
                if let Some(&head) = queue.front()
                    && sf(head) <= available[t]
                    && ctx.tput[head][t] > 0.0
                {
                    queue.pop_front();
                    self.fifo_alloc.insert(head, t);
                    available[t] -= sf(head);
                }
                self.fifo_alloc.remove(&j);
            } else {
                available[t] -= sf(j);
            }
        }
        self.fifo_done.clear();
        // Types with free GPUs, sorted by name (Python's sorted() of the type names).
        let mut types: Vec<usize> = (0..cap.len()).filter(|&t| available[t] > 0).collect();
        types.sort_by(|&a, &b| ctx.cluster.types[a].cmp(&ctx.cluster.types[b]));
        while !types.is_empty() {
            let Some(j) = queue.pop_front() else { break };
            let with_sf: Vec<usize> = (0..types.len())
                .filter(|&i| available[types[i]] >= sf(j))
                .collect();
            if with_sf.is_empty() {
                break;
            }
            let idx = self.rng.index(with_sf.len());
            // Gavel's `worker_type` here is the loop variable's last value.
            let Some(&t) = types.last() else { break };
            if ctx.tput[j][t] > 0.0 {
                self.fifo_alloc.insert(j, t);
                available[t] -= sf(j);
                if available[t] == 0 {
                    types.remove(with_sf[idx]);
                }
            }
        }
        let n = cap.len();
        let x: Vec<Vec<f64>> = ctx
            .active
            .iter()
            .map(|j| {
                let mut row = vec![0.0; n];
                if let Some(&t) = self.fifo_alloc.get(j) {
                    row[t] = 1.0;
                }
                row
            })
            .collect();
        self.set_alloc(ctx, x);
    }

    fn reallocate(&mut self, ctx: &RoundCtx) {
        if self.objective == Objective::FifoGavel {
            self.reallocate_fifo(ctx);
            return;
        }
        let cap = ctx.cluster.gpus_per_type();
        let n = cap.len();
        let jobs = ctx.active;
        let gpus: Vec<u32> = jobs.iter().map(|&j| ctx.jobs[j].gpus).collect();
        if self.objective == Objective::EqualShare {
            // x[i][w] = n_w / m / scale_factor_i, each row scaled down to sum to at most 1.
            let m = jobs.len() as f64;
            let x = gpus
                .iter()
                .map(|&g| {
                    let row: Vec<f64> = cap
                        .iter()
                        .map(|&c| f64::from(c) / m / f64::from(g.max(1)))
                        .collect();
                    let sum: f64 = row.iter().sum::<f64>().max(1.0);
                    row.into_iter().map(|v| v / sum).collect()
                })
                .collect();
            self.set_alloc(ctx, x);
            return;
        }
        if self.objective == Objective::MaxSumThroughput {
            // The LP has many optimal allocations whenever jobs tie; among them, prefer the
            // one that leaves running jobs where they are (a 0.1% bonus on a job's current
            // type), so that a re-solve after an arrival does not move jobs between types
            // for nothing (every move costs a restart).
            let coef: Vec<Vec<f64>> = jobs
                .iter()
                .map(|&j| {
                    let cur = ctx.state[j].current.as_ref().map(|p| p.gpu_type);
                    ctx.tput[j]
                        .iter()
                        .enumerate()
                        .map(|(w, &v)| if Some(w) == cur { v * 1.001 } else { v })
                        .collect()
                })
                .collect();
            match max_sum_lp(&coef, &gpus, &cap) {
                Some(x) => self.set_alloc(ctx, x),
                None => self.solver_failures += 1,
            }
            return;
        }
        // Heterogeneity-agnostic: every type has throughput 1 (as in Gavel, even where the
        // job cannot run).
        let coef: Vec<Vec<f64>> = gpus.iter().map(|&g| vec![f64::from(g); n]).collect();
        let Some(iso) = max_min_lp(&coef, &gpus, &cap) else {
            self.solver_failures += 1;
            return;
        };
        let x = if self.objective == Objective::MaxMinPerf {
            let coef: Vec<Vec<f64>> = jobs
                .iter()
                .enumerate()
                .map(|(i, &j)| {
                    let tp = &ctx.tput[j];
                    let iso_tp: f64 = (0..n).map(|w| tp[w] * iso[i][w]).sum();
                    let norm = if iso_tp > 0.0 { iso_tp } else { 1.0 };
                    (0..n).map(|w| tp[w] * f64::from(gpus[i]) / norm).collect()
                })
                .collect();
            match max_min_lp(&coef, &gpus, &cap) {
                Some(x) => x,
                None => {
                    self.solver_failures += 1;
                    return;
                }
            }
        } else {
            iso
        };
        self.set_alloc(ctx, x);
    }

    fn set_alloc(&mut self, ctx: &RoundCtx, x: Vec<Vec<f64>>) {
        self.alloc = ctx.active.iter().copied().zip(x).collect();
        self.base = ctx
            .active
            .iter()
            .map(|&j| (j, ctx.state[j].held_s_on.clone()))
            .collect();
    }
}

impl Policy for MaxMin {
    fn name(&self) -> String {
        match self.objective {
            Objective::MaxMin => "max_min_fairness",
            Objective::MaxMinPerf => "max_min_fairness_perf",
            Objective::MaxSumThroughput => "max_sum_throughput_perf",
            Objective::EqualShare => "gandiva",
            Objective::FifoGavel => "fifo_gavel",
        }
        .into()
    }

    fn init(
        &mut self,
        cluster: &SimCluster,
        _jobs: &[SimJob],
        tput: &[Vec<f64>],
        _cfg: &EngineConfig,
    ) -> Result<(), String> {
        // Fastest type first: by mean throughput over the trace's jobs (Gavel hard-codes
        // v100, p100, k80).
        let n = cluster.types.len();
        let mut mean = vec![0.0; n];
        for row in tput {
            let best = row.iter().copied().fold(0.0, f64::max);
            if best > 0.0 {
                for w in 0..n {
                    mean[w] += row[w] / best;
                }
            }
        }
        self.type_order = (0..n).collect();
        self.type_order
            .sort_by(|&a, &b| mean[b].total_cmp(&mean[a]).then(a.cmp(&b)));
        Ok(())
    }

    fn on_finish(&mut self, job: usize) {
        self.alloc.remove(&job);
        self.base.remove(&job);
        if self.fifo_alloc.contains_key(&job) {
            self.fifo_done.insert(job);
        }
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        self.dirty |= ctx.changed;
        let due = self
            .last_reset
            .is_none_or(|t| ctx.now - t >= self.realloc_min_s - 1e-9);
        if self.dirty && due {
            self.dirty = false;
            self.last_reset = Some(ctx.now);
            self.reallocate(ctx);
        }
        let n = ctx.cluster.types.len();
        let mut order = self.type_order.clone();
        if matches!(
            self.objective,
            Objective::MaxMin | Objective::EqualShare | Objective::FifoGavel
        ) {
            self.rng.shuffle(&mut order);
        }
        let since = self.last_reset.map_or(0.0, |t| ctx.now - t);
        // Time each job received on each type since the reset, and the type's total.
        let received = |j: usize, w: usize| -> f64 {
            let held = ctx.state[j].held_s_on[w];
            held - self.base.get(&j).map_or(0.0, |b| b[w])
        };
        let mut worker_time = vec![0.0; n];
        for &j in ctx.active {
            for (w, wt) in worker_time.iter_mut().enumerate() {
                *wt += received(j, w) * f64::from(ctx.jobs[j].gpus);
            }
        }
        let mut left = ctx.cluster.gpus_per_type();
        let mut scheduled = vec![false; ctx.jobs.len()];
        let mut out = Vec::new();
        // A job still restoring from a checkpoint keeps its GPUs (Sia's simulator:
        // simulator_config.preserve_ckpt_allocs). Otherwise a restore longer than a round
        // (Sia's imagenet: 250 s; rounds of 60 s) is cut off by the next round's
        // time-slicing every time, and the job never progresses.
        for &j in ctx.active {
            if let Some(p) = ctx.state[j]
                .current
                .as_ref()
                .filter(|_| ctx.state[j].restoring())
            {
                let g = ctx.jobs[j].gpus;
                if left[p.gpu_type] >= g {
                    left[p.gpu_type] -= g;
                    scheduled[j] = true;
                    out.push(Assignment::on(j, p.gpu_type));
                }
            }
        }
        // Entries (priority, deficit, allocation, job, type): per type, in the type order,
        // each type's jobs by priority (Gavel); or, with `global_queue`, one queue over all
        // types (Sia's simulator's Gavel, gavel.py schedule_jobs_on_workers_helper), so that
        // a job's own allocated type comes before GPUs left over elsewhere.
        let mut queue: Vec<(f64, f64, f64, usize, usize)> = Vec::new();
        for &w in &order {
            let mut entries: Vec<(f64, f64, f64, usize, usize)> = ctx
                .active
                .iter()
                .map(|&j| {
                    let x = self.alloc.get(&j).map_or(0.0, |a| a[w]);
                    let r = received(j, w);
                    let frac = if worker_time[w] > 0.0 {
                        r * f64::from(ctx.jobs[j].gpus) / worker_time[w]
                    } else {
                        0.0
                    };
                    let prio = if frac > 0.0 { x / frac } else { x * 1e9 };
                    let deficit = x * since - r;
                    (prio, deficit, x, j, w)
                })
                .collect();
            let by_priority = |a: &(f64, f64, f64, usize, usize),
                               b: &(f64, f64, f64, usize, usize)| {
                b.0.total_cmp(&a.0)
                    .then(b.1.total_cmp(&a.1))
                    .then(b.2.total_cmp(&a.2))
                    .then(a.3.cmp(&b.3))
            };
            entries.sort_by(by_priority);
            queue.extend(entries);
            if self.global_queue {
                // Stable: ties keep the type order.
                queue.sort_by(by_priority);
            }
        }
        for (_, _, _, j, w) in queue {
            if left[w] == 0 {
                continue;
            }
            let g = ctx.jobs[j].gpus;
            if scheduled[j] || ctx.tput[j][w] <= 0.0 || g > left[w] {
                continue;
            }
            // Gavel: "For FIFO jobs, don't schedule jobs with 0 priority".
            if self.objective == Objective::FifoGavel
                && self.alloc.get(&j).is_none_or(|a| a[w] <= 0.0)
            {
                continue;
            }
            left[w] -= g;
            scheduled[j] = true;
            out.push(Assignment::on(j, w));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_sum_gives_each_type_to_the_job_fastest_there_relative_to_capacity() {
        // One k80 and one v100 (1 GPU each). Job A: 1 step/s on k80, 4 on v100; job B: 2
        // and 3. Sum of throughputs: A on v100 + B on k80 = 4 + 2 = 6 beats A on k80 + B on
        // v100 = 1 + 3 = 4 and any split of time.
        let x = max_sum_lp(&[vec![1.0, 4.0], vec![2.0, 3.0]], &[1, 1], &[1, 1]).unwrap();
        let want = [[0.0, 1.0], [1.0, 0.0]];
        for j in 0..2 {
            for w in 0..2 {
                assert!((x[j][w] - want[j][w]).abs() < 1e-6, "{x:?}");
            }
        }
        // A type where a job cannot run (throughput 0) gets it no time.
        let x = max_sum_lp(&[vec![0.0, 1.0]], &[1], &[1, 1]).unwrap();
        assert!(x[0][0].abs() < 1e-9, "{x:?}");
    }

    #[test]
    fn lp_splits_evenly() {
        // Two 1-GPU jobs, one GPU: each gets half the time.
        let x = max_min_lp(&[vec![1.0], vec![1.0]], &[1, 1], &[1]).unwrap();
        assert!(
            (x[0][0] - 0.5).abs() < 1e-6 && (x[1][0] - 0.5).abs() < 1e-6,
            "{x:?}"
        );
    }
}
