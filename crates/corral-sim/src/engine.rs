//! The simulated clock and cluster.
//!
//! Time advances in rounds of `round_s` seconds (Gavel's mechanism: a job that arrives
//! during a round joins at the next boundary; when the cluster is idle the clock jumps to the
//! next arrival). At each boundary the policy says which jobs run on which GPU type (and,
//! for Corral's scheduler, on which nodes); the engine places the rest (a job that keeps its
//! type keeps its nodes; otherwise best fit on one node, else the emptiest nodes), then runs
//! the round: a job on type `t` makes `throughput(t)` steps per second and finishes at the
//! exact moment its last step completes (its GPUs then idle until the round ends).
//!
//! Preemption is honest: a job that was running and is not scheduled (preempted), or is
//! moved to other GPUs (migrated), loses the progress made since its last checkpoint
//! (every `checkpoint_s` of productive run time; 0: it checkpoints when stopped and loses
//! nothing) and pays `restart_s` of no progress when it runs again.

use crate::cluster::SimCluster;
use crate::job::SimJob;
use crate::round::{Assignment, Policy, RoundCtx};
pub use crate::round::{EngineConfig, JobProgress, Placement};

/// One sample per round.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub t: f64,
    /// GPUs allocated at the start of the round.
    pub allocated: u32,
    /// GPU-seconds of useful progress in the round / (GPUs x round).
    pub effective: f64,
    /// Jobs waiting (arrived, not done, not running).
    pub queued: u32,
    pub running: u32,
}

/// Everything a run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    pub policy: String,
    pub total_gpus: u32,
    pub states: Vec<JobProgress>,
    pub samples: Vec<Sample>,
    /// GPU-seconds allocated to jobs (including restart time and work later lost).
    pub allocated_gpu_s: f64,
    /// GPU-seconds of progress that was kept.
    pub productive_gpu_s: f64,
    pub rounds: u64,
}

/// Dense throughput matrix: `tput[job][type]`, 0 where the job cannot run.
pub fn throughput_matrix(jobs: &[SimJob], cluster: &SimCluster) -> Vec<Vec<f64>> {
    jobs.iter()
        .map(|j| {
            cluster
                .types
                .iter()
                .map(|t| {
                    if j.can_run_on(t) {
                        j.throughput.on(t)
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect()
}

/// Places `k` GPUs on nodes of type `t`: the fullest node that fits all of them, else the
/// emptiest nodes first. Updates `free`.
fn place(
    free: &mut [u32],
    cluster: &SimCluster,
    by_type: &[Vec<usize>],
    t: usize,
    k: u32,
) -> Option<Vec<(usize, u32)>> {
    let nodes = &by_type[t];
    let mut best: Option<usize> = None;
    let mut total = 0u64;
    for &n in nodes {
        total += u64::from(free[n]);
        if free[n] >= k && best.is_none_or(|b| free[n] < free[b]) {
            best = Some(n);
            if free[n] == k {
                break;
            }
        }
    }
    if let Some(b) = best {
        free[b] -= k;
        return Some(vec![(b, k)]);
    }
    if total < u64::from(k) {
        return None;
    }
    let mut order: Vec<usize> = nodes.iter().copied().filter(|&n| free[n] > 0).collect();
    order.sort_by(|&a, &b| free[b].cmp(&free[a]).then(a.cmp(&b)));
    let mut left = k;
    let mut out = Vec::new();
    for n in order {
        if left == 0 {
            break;
        }
        let take = free[n].min(left);
        free[n] -= take;
        left -= take;
        out.push((n, take));
    }
    debug_assert!(cluster.nodes.len() == free.len());
    Some(out)
}

/// Replays `jobs` (sorted by arrival) through `policy`. `progress` is called after each
/// round with the fraction of jobs done.
pub fn simulate(
    jobs: &[SimJob],
    cluster: &SimCluster,
    policy: &mut dyn Policy,
    cfg: &EngineConfig,
    progress: &mut dyn FnMut(f64),
) -> Result<SimResult, String> {
    if !(cfg.round_s > 0.0 && cfg.restart_s >= 0.0 && cfg.checkpoint_s >= 0.0) {
        return Err("round length must be > 0, restart cost and checkpoint interval >= 0".into());
    }
    let tput = throughput_matrix(jobs, cluster);
    let per_type = cluster.gpus_per_type();
    let ntypes = cluster.types.len();
    let mut by_type: Vec<Vec<usize>> = vec![Vec::new(); ntypes];
    for (i, n) in cluster.nodes.iter().enumerate() {
        by_type[n.gpu_type].push(i);
    }
    let mut states: Vec<JobProgress> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| JobProgress {
            held_s_on: vec![0.0; ntypes],
            unschedulable: !(0..ntypes).any(|t| tput[i][t] > 0.0 && per_type[t] >= j.min_gpus()),
            ..JobProgress::default()
        })
        .collect();
    policy.init(cluster, jobs, &tput, cfg)?;
    let total_gpus = cluster.total_gpus();
    let schedulable = states.iter().filter(|s| !s.unschedulable).count();
    let mut result = SimResult {
        policy: policy.name(),
        total_gpus,
        states: Vec::new(),
        samples: Vec::new(),
        allocated_gpu_s: 0.0,
        productive_gpu_s: 0.0,
        rounds: 0,
    };
    // Livelock guard: no sane schedule needs longer than running every job alone, one
    // after another, on its slowest usable type, ten times over.
    let serial: f64 = jobs
        .iter()
        .zip(&tput)
        .zip(&states)
        .filter(|(_, s)| !s.unschedulable)
        .map(|((j, row), _)| {
            let slow = row
                .iter()
                .copied()
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            j.steps / slow + j.restart_s.unwrap_or(cfg.restart_s) + j.start_s
        })
        .sum();
    let deadline = jobs.last().map_or(0.0, |j| j.arrival_s) + 10.0 * serial + 100.0 * cfg.round_s;
    let mut next_arrival = 0usize;
    let mut active: Vec<usize> = Vec::new();
    let mut done = 0usize;
    let mut now = jobs.first().map_or(0.0, |j| j.arrival_s);
    let mut changed = true;
    let mut idle_rounds = 0u32;
    let mut free = vec![0u32; cluster.nodes.len()];
    let mut finished_now: Vec<usize> = Vec::new();
    while done < schedulable {
        // Arrivals up to this boundary.
        while next_arrival < jobs.len() && jobs[next_arrival].arrival_s <= now {
            let j = next_arrival;
            next_arrival += 1;
            if states[j].unschedulable {
                continue;
            }
            active.push(j);
            changed = true;
            policy.on_arrival(j, &jobs[j], &tput[j]);
        }
        if active.is_empty() {
            match jobs.get(next_arrival) {
                Some(j) => {
                    now = now.max(j.arrival_s);
                    continue;
                }
                None => break,
            }
        }
        if now > deadline {
            return Err(format!(
                "policy {} made too little progress: {} of {schedulable} jobs done at t={now:.0} s \
                 (preemptions losing work faster than jobs checkpoint?)",
                result.policy, done
            ));
        }
        let assignments = {
            let ctx = RoundCtx {
                now,
                round_s: cfg.round_s,
                jobs,
                state: &states,
                active: &active,
                cluster,
                tput: &tput,
                changed,
            };
            policy.schedule(&ctx)
        };
        changed = false;
        // Placement.
        for (i, n) in cluster.nodes.iter().enumerate() {
            free[i] = n.gpus;
        }
        let mut new_place: Vec<Option<Placement>> = vec![None; 0];
        new_place.resize(active.len(), None);
        let pos_of = |active: &[usize], j: usize| active.binary_search(&j).ok();
        let mut later: Vec<&Assignment> = Vec::new();
        let mut seen = vec![false; active.len()];
        for a in &assignments {
            let Some(p) = pos_of(&active, a.job) else {
                continue;
            };
            if seen[p] || a.gpu_type >= ntypes || tput[a.job][a.gpu_type] <= 0.0 {
                continue;
            }
            seen[p] = true;
            if let Some(nodes) = &a.placement {
                let ok = jobs[a.job].runs_with(nodes.iter().map(|&(_, g)| g).sum::<u32>())
                    && nodes.iter().all(|&(n, g)| {
                        n < free.len() && cluster.nodes[n].gpu_type == a.gpu_type && free[n] >= g
                    });
                if !ok {
                    return Err(format!(
                        "policy {} gave job {} an invalid placement at t={now}",
                        result.policy, jobs[a.job].name
                    ));
                }
                for &(n, g) in nodes {
                    free[n] -= g;
                }
                new_place[p] = Some(Placement {
                    gpu_type: a.gpu_type,
                    nodes: nodes.clone(),
                });
            } else {
                later.push(a);
            }
        }
        // Jobs that keep their type keep their nodes where free.
        let mut fresh: Vec<&Assignment> = Vec::new();
        for a in later {
            let p = pos_of(&active, a.job).unwrap_or(0);
            match &states[a.job].current {
                Some(c)
                    if c.gpu_type == a.gpu_type && c.nodes.iter().all(|&(n, g)| free[n] >= g) =>
                {
                    for &(n, g) in &c.nodes {
                        free[n] -= g;
                    }
                    new_place[p] = Some(c.clone());
                }
                _ => fresh.push(a),
            }
        }
        fresh.sort_by_key(|a| std::cmp::Reverse(jobs[a.job].gpus));
        for a in fresh {
            let p = pos_of(&active, a.job).unwrap_or(0);
            if let Some(nodes) = place(&mut free, cluster, &by_type, a.gpu_type, jobs[a.job].gpus) {
                new_place[p] = Some(Placement {
                    gpu_type: a.gpu_type,
                    nodes,
                });
            }
        }
        // Run the round.
        let round_end = now + cfg.round_s;
        let mut allocated = 0u32;
        let mut running = 0u32;
        let mut productive_round = 0.0;
        let nactive = active.len() as f64;
        finished_now.clear();
        for (p, &j) in active.iter().enumerate() {
            let st = &mut states[j];
            st.contention_sum += nactive;
            st.active_rounds += 1;
            let new = new_place[p].take();
            // An elastic job runs with the GPUs of its placement (a resize is a restart).
            let size = |pl: &Placement| pl.nodes.iter().map(|&(_, g)| g).sum::<u32>();
            let speed = |pl: &Placement| {
                let t = pl.gpu_type;
                jobs[j].speed_with(&cluster.types[t], size(pl), tput[j][t])
            };
            if let Some(prev) = &st.current
                && new.as_ref() != Some(prev)
            {
                // Stopped or moved: lose work since the last checkpoint.
                if cfg.checkpoint_s > 0.0 {
                    let kept = (st.seg_run_s / cfg.checkpoint_s).floor() * cfg.checkpoint_s;
                    let lost_s = st.seg_run_s - kept;
                    let thr = speed(prev);
                    let gpus = f64::from(size(prev));
                    st.done_steps = (st.done_steps - lost_s * thr).max(0.0);
                    result.productive_gpu_s -= lost_s * gpus;
                    productive_round -= lost_s * gpus;
                }
                st.seg_run_s = 0.0;
                st.cost_left_s = 0.0;
                st.restart_pending = true;
                if new.is_some() {
                    st.migrations += 1;
                } else {
                    st.preemptions += 1;
                }
            }
            st.current = new;
            let Some(pl) = &st.current else { continue };
            let t = pl.gpu_type;
            let thr = speed(pl);
            let gpus = f64::from(size(pl));
            // A restart costs the job's own restart time where the trace gives one (Sia's
            // per-model checkpoint-restore), else the engine's; a first start costs the
            // job's `start_s` (0 unless the trace models it). Unpaid cost carries over to the
            // next round it runs (a cost longer than a round spans rounds).
            if st.restart_pending {
                st.restart_pending = false;
                if st.started_at.is_some() {
                    st.restarts += 1;
                    st.cost_left_s = jobs[j].restart_s.unwrap_or(cfg.restart_s);
                }
            }
            if st.started_at.is_none() {
                st.started_at = Some(now);
                st.cost_left_s = jobs[j].start_s;
            }
            let cost = st.cost_left_s.min(cfg.round_s);
            st.cost_left_s -= cost;
            running += 1;
            allocated += size(pl);
            let avail = cfg.round_s - cost;
            let need = (jobs[j].steps - st.done_steps).max(0.0) / thr;
            let (busy, prod) = if st.cost_left_s > 0.0 {
                (cfg.round_s, 0.0)
            } else if need <= avail {
                st.finished_at = Some(now + cost + need);
                finished_now.push(j);
                (cost + need, need)
            } else {
                (cfg.round_s, avail)
            };
            st.done_steps = (st.done_steps + prod * thr).min(jobs[j].steps);
            st.seg_run_s += prod;
            st.attained_gpu_s += busy * gpus;
            st.held_s_on[t] += busy;
            result.allocated_gpu_s += busy * gpus;
            result.productive_gpu_s += prod * gpus;
            productive_round += prod * gpus;
        }
        result.samples.push(Sample {
            t: now,
            allocated,
            effective: productive_round / (f64::from(total_gpus) * cfg.round_s),
            queued: active.len() as u32 - running,
            running,
        });
        result.rounds += 1;
        if running == 0 {
            idle_rounds += 1;
            if f64::from(idle_rounds) * cfg.round_s > 7.0 * 86_400.0
                && idle_rounds > 100
                && next_arrival >= jobs.len()
            {
                return Err(format!(
                    "policy {} runs nothing at t={now:.0} s with {} jobs waiting",
                    result.policy,
                    active.len()
                ));
            }
        } else {
            idle_rounds = 0;
        }
        if !finished_now.is_empty() {
            for &j in &finished_now {
                states[j].current = None;
                policy.on_finish(j);
            }
            done += finished_now.len();
            changed = true;
            active.retain(|j| states[*j].finished_at.is_none());
        }
        now = round_end;
        progress(done as f64 / schedulable.max(1) as f64);
    }
    result.states = states;
    Ok(result)
}
