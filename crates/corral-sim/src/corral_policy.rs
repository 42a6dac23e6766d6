//! Corral's policy in the simulator: the production control plane
//! ([`corral_core::control::ControlPlane`]: scheduler, lifecycle, ledger of attained service,
//! pending reasons, events) driven by a simulated executor, the simulator's third shell
//! beside the embedded cluster and the Kubernetes operator. Every call into corral-core is
//! in this file.
//!
//! The simulated cluster becomes a `ClusterSnapshot` (one node per simulated node, a pool
//! per GPU type, one queue per team with unlimited quota in every pool, so that ordering is
//! the core's: priority, then the queue with the lowest dominant share, then least attained
//! service, then submit time). A job becomes a `TrainingJob` in namespace `sim`: one
//! `worker` role of `gpus` one-GPU replicas restricted to the GPU types where it makes
//! progress, in its team's queue, submitted with its measured throughput per GPU type as a
//! scheduling hint (the core scores pools by it and weighs attained service by it).
//!
//! The executor runs replicas on the simulated clock: a start takes effect at once, a stop
//! too (the grace period is part of the engine's restart cost), and a replica exits with
//! success when the engine says the job's work is done. Each round it reports what
//! finished, steps the plane once (one scheduler cycle: the round is the scheduling
//! interval, as in Gavel's mechanism) and then applies the plane's actions, reports the
//! replicas' new phases and settles the plane until it asks for nothing more (bounded), the
//! way a production shell applies and observes between ticks: a preempted job is back in
//! its queue for the next round's cycle, and a moved job starts on its new placement within
//! the same round. Finished jobs are deleted once the plane has released them. A job runs
//! in a round when it holds an admission and every replica of it runs where that admission
//! placed it; the engine charges restart cost and checkpoint loss when that changes. The
//! executor never feeds the scheduler anything a production shell does not: attained
//! service comes from the plane's own ledger.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use corral_api::TrainingJob;
use corral_api::training_job::{
    ElasticPolicy, Framework, ReplicaSpec, ReplicaTemplate, Resources, RestartPolicy, Role,
    TrainingJobSpec,
};
use corral_core::control::{
    Change, ControlConfig, ControlPlane, HeldAdmission, JobRecord, SchedulingHints, Settling, Step,
};
use corral_core::lifecycle::{
    Action, FailureReason, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase,
};
use corral_core::sched::{
    ClusterSnapshot, Node, PoolQuota, QueueConfig, ReplicaPlacement, ResourceAmount,
};
use jiff::Timestamp;

use crate::cluster::SimCluster;
use crate::job::SimJob;
use crate::round::{Assignment, EngineConfig, Policy, RoundCtx};

/// The namespace of every simulated job.
const NAMESPACE: &str = "sim";

/// What the executor runs of one job: replica incarnations that run, with their placement.
type Live = BTreeMap<(ReplicaId, Incarnation), ReplicaPlacement>;

#[derive(Default)]
pub struct CorralPolicy {
    plane: Option<ControlPlane>,
    node_index: HashMap<String, usize>,
    type_index: HashMap<String, usize>,
    types: Vec<String>,
    /// Admissions as the plane announced them ([`Change::Admission`]), by job.
    admissions: HashMap<usize, HeldAdmission>,
    /// Running replicas by job.
    live: HashMap<usize, Live>,
    /// Jobs whose work is done, until the plane has released their admission (then they
    /// are deleted, so that finished jobs cost the plane nothing).
    finished: Vec<usize>,
    /// Jobs whose admission or replicas changed this round.
    touched: BTreeSet<usize>,
    /// What runs: job -> (GPU type, (node, GPUs)).
    running: BTreeMap<usize, (usize, Vec<(usize, u32)>)>,
    /// Submissions the plane refused (they never run).
    pub rejected: Vec<(usize, String)>,
    /// Events the plane reported, counted by reason (`Admitted`, `Preempted`, ...).
    pub events: BTreeMap<&'static str, u64>,
    /// Plane steps and settles taken, and cycles after which the plane had still not
    /// settled (the bound hit).
    pub steps: u64,
    pub unsettled_cycles: u64,
    /// Scheduler cycles per round (`ControlPlane::step`), 0 counting as 1. One, the
    /// default: the plane decides once per round, as in Gavel's round-based mechanism.
    /// More: further cycles at the same instant while the previous one acted, as a shell
    /// that ticks much faster than the round would run them (a preempted job is then
    /// re-admitted elsewhere, or preempts in turn, within the round).
    pub cycles_per_round: u32,
    /// The control plane's settings: the defaults, as a cluster with no configuration runs
    /// (the plane always moves jobs in place).
    pub config: ControlConfig,
    /// Jobs whose trace gives their speed at other sizes ([`SimJob::elastic`]) are submitted
    /// as elastic PyTorch jobs (`minReplicas..maxReplicas`) that the scheduler sizes: the
    /// `corral-elastic` row.
    pub elastic: bool,
}

fn job_name(job: usize) -> String {
    format!("job-{job}")
}

fn key(job: usize) -> String {
    format!("{NAMESPACE}/{}", job_name(job))
}

fn parse_key(k: &str) -> Option<usize> {
    k.strip_prefix(NAMESPACE)?
        .strip_prefix("/job-")?
        .parse()
        .ok()
}

fn ms(s: f64) -> u64 {
    (s.max(0.0) * 1000.0).round() as u64
}

/// The simulated clock as the plane sees it: `s` seconds since the start of the trace are
/// `s` seconds since the Unix epoch.
fn timestamp(s: f64) -> Timestamp {
    i64::try_from(ms(s))
        .ok()
        .and_then(|m| Timestamp::from_millisecond(m).ok())
        .unwrap_or(Timestamp::MAX)
}

/// The TrainingJob a trace's job becomes: `gpus` one-GPU workers on the types in `types`;
/// with `elastic`, an elastic PyTorch job of its size range (its count the minimum).
fn training_job(job: usize, spec: &SimJob, types: Vec<String>, elastic: bool) -> TrainingJob {
    let range = spec.elastic.as_ref().filter(|_| elastic);
    let worker = ReplicaSpec {
        count: range.map_or(spec.gpus, |e| e.min),
        resources: Resources {
            gpu: 1,
            gpu_types: types,
            ..Resources::default()
        },
        template: ReplicaTemplate {
            command: vec!["train".to_string()],
            ..ReplicaTemplate::default()
        },
        // A simulated replica exits only when the job's work is done or Corral stops it.
        restart_policy: Some(RestartPolicy::Never),
    };
    let mut tj = TrainingJob::new(
        &job_name(job),
        TrainingJobSpec {
            framework: if range.is_some() {
                Framework::PyTorch
            } else {
                Framework::Generic
            },
            replicas: BTreeMap::from([(Role::Worker, Box::new(worker))]),
            run_policy: Default::default(),
            success_policy: None,
            queue: Some(spec.queue.clone()),
            priority_class: None,
            elastic: range.map(|e| ElasticPolicy {
                min_replicas: Some(e.min),
                max_replicas: Some(e.max),
                ..ElasticPolicy::default()
            }),
            nproc_per_node: None,
            mpi: None,
            port: None,
        },
    );
    tj.metadata.namespace = Some(NAMESPACE.to_string());
    tj
}

impl CorralPolicy {
    /// The plane, once [`Policy::init`] has built it.
    pub fn plane(&self) -> Option<&ControlPlane> {
        self.plane.as_ref()
    }

    /// Records what a step asks to persist and counts its events.
    fn record(&mut self, step: &Step) {
        for c in &step.changes {
            match c {
                Change::Admission { job, admission } => {
                    let Some(j) = parse_key(job) else { continue };
                    match admission {
                        Some(a) => self.admissions.insert(j, a.clone()),
                        None => self.admissions.remove(&j),
                    };
                    self.touched.insert(j);
                }
                Change::Removed { job } => {
                    if let Some(j) = parse_key(job) {
                        self.admissions.remove(&j);
                        self.live.remove(&j);
                        self.touched.insert(j);
                    }
                }
                Change::Status { .. } | Change::Deleting { .. } | Change::Retired { .. } => {}
            }
        }
        for e in &step.events {
            *self.events.entry(e.reason).or_default() += 1;
        }
    }

    /// Records a step and carries out its actions. Returns whether there were any.
    fn carry_out(&mut self, plane: &mut ControlPlane, step: Step) -> bool {
        self.steps += 1;
        self.record(&step);
        let acted = !step.actions.is_empty();
        for a in step.actions {
            if let Some(j) = parse_key(&a.job) {
                self.touched.insert(j);
            }
            Self::apply(plane, &mut self.live, &a.job, a.action);
        }
        acted
    }

    /// Carries out one start or stop at once and reports the replica's new phase.
    fn apply(plane: &mut ControlPlane, live: &mut HashMap<usize, Live>, job: &str, action: Action) {
        let Some(j) = parse_key(job) else { return };
        match action {
            Action::Start {
                replica,
                incarnation,
                placement,
            } => {
                live.entry(j)
                    .or_default()
                    .insert((replica, incarnation), placement);
                plane.observe(
                    job,
                    ObservedReplica::new(replica, incarnation, ReplicaPhase::Running),
                );
            }
            Action::Stop {
                replica,
                incarnation,
                delete,
                ..
            } => {
                if let Some(l) = live.get_mut(&j) {
                    l.remove(&(replica, incarnation));
                }
                if delete {
                    plane.forget_replica(job, replica, incarnation);
                } else {
                    // SIGTERM: the replica checkpoints within its grace period and exits.
                    let phase = ReplicaPhase::Failed {
                        exit_code: 143,
                        reason: FailureReason::Error,
                    };
                    plane.observe(job, ObservedReplica::new(replica, incarnation, phase));
                }
            }
            // The plane handles requeue, release and deletion itself.
            Action::Requeue | Action::Release | Action::DeleteJob => {}
        }
    }

    /// Where a job runs now: it holds an admission and every replica runs where the
    /// admission placed it.
    fn runs(&self, j: usize) -> Option<(usize, Vec<(usize, u32)>)> {
        let a = &self.admissions.get(&j)?.admission;
        let live = self.live.get(&j)?;
        if live.len() != a.placements.len() || !live.values().all(|p| a.placements.contains(p)) {
            return None;
        }
        let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
        for p in &a.placements {
            let n = *self.node_index.get(&p.node)?;
            *per_node.entry(n).or_default() += p.gpu_indices.len() as u32;
        }
        let ty = match a.gpu_type.as_ref() {
            Some(t) => *self.type_index.get(t)?,
            None => return None,
        };
        Some((ty, per_node.into_iter().collect()))
    }
}

impl Policy for CorralPolicy {
    fn name(&self) -> String {
        if self.elastic {
            "corral-elastic".into()
        } else {
            "corral".into()
        }
    }

    fn init(
        &mut self,
        cluster: &SimCluster,
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
                namespaces: Vec::new(),
                quotas: quotas.clone(),
            })
            .collect();
        let snapshot = ClusterSnapshot {
            nodes,
            pools: Vec::new(),
            queues,
            running: Vec::new(),
        };
        let plane = ControlPlane::new(snapshot, self.config.clone())
            .map_err(|e| format!("corral control plane: {e}"))?;
        self.plane = Some(plane);
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
        let Some(plane) = self.plane.as_mut() else {
            return;
        };
        let throughput: BTreeMap<String, f64> = self
            .types
            .iter()
            .zip(tput)
            .filter(|(_, v)| **v > 0.0)
            .map(|(t, v)| (t.clone(), *v))
            .collect();
        let allowed = throughput.keys().cloned().collect();
        let record = JobRecord {
            job: training_job(job, spec, allowed, self.elastic),
            uid: format!("sim-{job}"),
            submitted: ms(spec.arrival_s),
            hints: SchedulingHints {
                throughput,
                ..SchedulingHints::default()
            },
        };
        if let Err(e) = plane.submit(record) {
            self.rejected.push((job, e.to_string()));
        }
    }

    fn on_finish(&mut self, job: usize) {
        let Some(plane) = self.plane.as_mut() else {
            return;
        };
        // Every replica exits 0: the job's work is done.
        let k = key(job);
        if let Some(live) = self.live.remove(&job) {
            for (replica, incarnation) in live.into_keys() {
                plane.observe(
                    &k,
                    ObservedReplica::new(replica, incarnation, ReplicaPhase::Succeeded),
                );
            }
        }
        self.running.remove(&job);
        self.finished.push(job);
        self.touched.insert(job);
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        let Some(mut plane) = self.plane.take() else {
            return Vec::new();
        };
        let now = timestamp(ctx.now);
        for _ in 0..self.cycles_per_round.max(1) {
            let step = plane.step(now);
            let mut acted = !step.actions.is_empty();
            // Apply, report, settle by the plane's rule: stopped replicas hand a
            // preempted job back to its queue, a moved job starts on its new placement.
            let mut settling = Settling::default();
            let mut asked = !step.is_empty();
            let mut last = self.carry_out(&mut plane, step);
            while settling.again(asked, last) {
                let step = plane.settle(now);
                acted |= !step.actions.is_empty();
                asked = !step.is_empty();
                last = self.carry_out(&mut plane, step);
            }
            if settling.cut_short() {
                self.unsettled_cycles += 1;
            }
            if !acted {
                break;
            }
        }
        // Finished jobs the plane has released are deleted (removed in the next step).
        let admissions = &self.admissions;
        self.finished.retain(|&j| {
            if admissions.contains_key(&j) {
                return true;
            }
            // A job the plane no longer knows is gone already.
            let _ = plane.delete(&key(j));
            false
        });
        self.plane = Some(plane);
        for j in std::mem::take(&mut self.touched) {
            match self.runs(j) {
                Some(r) => self.running.insert(j, r),
                None => self.running.remove(&j),
            };
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
