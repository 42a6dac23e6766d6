//! The one adapter between the simulator and corral-core's scheduler. Every call into
//! `corral_core::sched` is in this file, so that changes to the core's API touch only it.
//!
//! The simulated cluster becomes a `ClusterSnapshot` (one node per simulated node, a pool
//! per GPU type, one queue per team with unlimited quota in every pool, so that ordering is
//! the core's: priority, then the queue with the lowest dominant share, then submit time).
//! A job is a gang of `gpus` one-GPU replicas with its measured throughput per GPU type
//! (the core scores pools by it). At each round boundary the adapter reports every active
//! job's attained service (GPU-seconds held per type, weighted by the job's throughput
//! there relative to its fastest type) and calls `cycle(now)`; it applies admissions,
//! preemptions and moves (rebalancing, which the engine charges as migrations) exactly as
//! the core decides, and calls `finish` when a job completes.

use std::collections::{BTreeMap, HashMap};

use corral_core::sched::{
    ClusterSnapshot, JobRequest, Node, PoolQuota, QueueConfig, ReplicaGroup, ResourceAmount,
    Scheduler, SchedulerConfig,
};

use crate::cluster::Cluster;
use crate::engine::EngineConfig;
use crate::job::SimJob;
use crate::policy::{Assignment, Policy, RoundCtx};

pub struct CorralPolicy {
    sched: Option<Scheduler>,
    node_index: HashMap<String, usize>,
    type_index: HashMap<String, usize>,
    types: Vec<String>,
    /// Running jobs: job -> (type, (node, GPUs)).
    running: BTreeMap<usize, (usize, Vec<(usize, u32)>)>,
    /// Submissions the core refused (they never run).
    pub rejected: Vec<(usize, String)>,
    /// The core's settings: by default the core's defaults with in-place moves (the
    /// engine restarts a moved job on its new GPUs and charges it as a migration).
    pub config: SchedulerConfig,
}

impl Default for CorralPolicy {
    fn default() -> Self {
        CorralPolicy {
            sched: None,
            node_index: HashMap::new(),
            type_index: HashMap::new(),
            types: Vec::new(),
            running: BTreeMap::new(),
            rejected: Vec::new(),
            config: SchedulerConfig {
                move_in_place: true,
                ..SchedulerConfig::default()
            },
        }
    }
}

fn key(job: usize) -> String {
    format!("sim/{job}")
}

fn parse_key(k: &str) -> Option<usize> {
    k.strip_prefix("sim/")?.parse().ok()
}

fn ms(s: f64) -> u64 {
    (s.max(0.0) * 1000.0).round() as u64
}

impl Policy for CorralPolicy {
    fn name(&self) -> String {
        "corral".into()
    }

    fn init(
        &mut self,
        cluster: &Cluster,
        jobs: &[SimJob],
        _tput: &[Vec<f64>],
        _cfg: &EngineConfig,
    ) -> Result<(), String> {
        let nodes: Vec<Node> = cluster
            .nodes
            .iter()
            .map(|n| {
                Node::new(
                    n.name.clone(),
                    Some(cluster.types[n.gpu_type].clone()),
                    n.gpus,
                    256_000,
                    2 << 40,
                )
            })
            .collect();
        let mut teams: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
        teams.sort_unstable();
        teams.dedup();
        let quotas: BTreeMap<String, PoolQuota> = cluster
            .types
            .iter()
            .map(|t| {
                (
                    t.clone(),
                    PoolQuota {
                        nominal: ResourceAmount::UNLIMITED,
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                )
            })
            .collect();
        let queues = teams
            .iter()
            .map(|t| QueueConfig {
                name: (*t).to_string(),
                cohort: None,
                weight: 1,
                quotas: quotas.clone(),
            })
            .collect();
        let snapshot = ClusterSnapshot {
            nodes,
            pools: Vec::new(),
            queues,
            running: Vec::new(),
        };
        let sched = Scheduler::new(&snapshot, self.config.clone())
            .map_err(|e| format!("corral scheduler: {e}"))?;
        self.sched = Some(sched);
        self.node_index = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        self.types = cluster.types.clone();
        self.type_index = cluster
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        Ok(())
    }

    fn on_arrival(&mut self, job: usize, spec: &SimJob, tput: &[f64]) {
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        let allowed: Vec<String> = self
            .types
            .iter()
            .zip(tput)
            .filter(|(_, v)| **v > 0.0)
            .map(|(t, _)| t.clone())
            .collect();
        let throughput = self
            .types
            .iter()
            .zip(tput)
            .filter(|(_, v)| **v > 0.0)
            .map(|(t, v)| (t.clone(), *v))
            .collect();
        let req = JobRequest {
            key: key(job),
            queue: spec.queue.clone(),
            priority: 0,
            submit_time: ms(spec.arrival_s),
            groups: vec![ReplicaGroup {
                role: "worker".into(),
                count: spec.gpus,
                cpu_milli: 0,
                memory_bytes: 0,
                gpu: 1,
                allowed_gpu_types: allowed,
                extended: BTreeMap::new(),
            }],
            throughput,
            preemptible: true,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
        };
        if let Err(e) = sched.submit(req) {
            self.rejected.push((job, e.to_string()));
        }
    }

    fn on_finish(&mut self, job: usize) {
        self.running.remove(&job);
        if let Some(s) = self.sched.as_mut() {
            s.finish(&key(job));
        }
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        let Some(sched) = self.sched.as_mut() else {
            return Vec::new();
        };
        for &j in ctx.active {
            let best = ctx.tput[j].iter().copied().fold(0.0f64, f64::max);
            if best <= 0.0 {
                continue;
            }
            let st = &ctx.state[j];
            let weighted: f64 = st
                .held_s_on
                .iter()
                .zip(&ctx.tput[j])
                .map(|(s, v)| s * v / best)
                .sum();
            sched.set_attained_service(&key(j), weighted * f64::from(ctx.jobs[j].gpus));
        }
        let out = sched.cycle(ms(ctx.now));
        for p in &out.preempted {
            if let Some(j) = parse_key(&p.job) {
                self.running.remove(&j);
            }
        }
        for a in out.admitted.iter().chain(&out.moved) {
            let Some(j) = parse_key(&a.job) else { continue };
            let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
            let mut ty = a
                .gpu_type
                .as_ref()
                .and_then(|t| self.type_index.get(t).copied());
            for r in &a.placements {
                if let Some(&n) = self.node_index.get(&r.node) {
                    *per_node.entry(n).or_default() += r.gpu_indices.len() as u32;
                    if ty.is_none() {
                        ty = Some(ctx.cluster.nodes[n].gpu_type);
                    }
                }
            }
            if let Some(t) = ty {
                self.running.insert(j, (t, per_node.into_iter().collect()));
            }
        }
        self.running
            .iter()
            .map(|(&j, (t, nodes))| Assignment {
                job: j,
                gpu_type: *t,
                placement: Some(nodes.clone()),
            })
            .collect()
    }
}
