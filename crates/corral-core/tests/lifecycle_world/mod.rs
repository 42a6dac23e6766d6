//! A fake shell for the lifecycle tests: it keeps the replicas it was told to start, applies
//! actions, stores the status the way a store would (serialized and read back), and lets a
//! test move replicas between phases and the clock forward.

// Each test file that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use corral_api::training_job::{
    ConditionStatus, ConditionType, Framework, ReplicaSpec, ReplicaTemplate, RestartPolicy, Role,
    TrainingJob, TrainingJobSpec, TrainingJobStatus,
};
use corral_core::lifecycle::{
    Action, AdmissionState, FailureReason, Incarnation, ObservedReplica, Reconciled, ReplicaId,
    ReplicaPhase, reconcile,
};
use corral_core::sched::{Admission, ReplicaPlacement};
use jiff::Timestamp;

pub const T0: i64 = 1_700_000_000;

pub fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(T0 + secs).expect("valid timestamp")
}

pub fn id(role: Role, index: u32) -> ReplicaId {
    ReplicaId::new(role, index)
}

pub fn inc(attempt: u32, retry: u32) -> Incarnation {
    Incarnation { attempt, retry }
}

pub fn failed(exit_code: i32, reason: FailureReason) -> ReplicaPhase {
    ReplicaPhase::Failed { exit_code, reason }
}

pub fn error(exit_code: i32) -> ReplicaPhase {
    failed(exit_code, FailureReason::Error)
}

/// A job of `framework` with `(role, count, restart policy)` replica groups.
pub fn job(framework: Framework, roles: &[(Role, u32, Option<RestartPolicy>)]) -> TrainingJob {
    let replicas = roles
        .iter()
        .map(|&(role, count, restart_policy)| {
            (
                role,
                Box::new(ReplicaSpec {
                    count,
                    resources: Default::default(),
                    template: ReplicaTemplate {
                        command: vec!["train".to_string()],
                        ..Default::default()
                    },
                    restart_policy,
                }),
            )
        })
        .collect();
    let spec = TrainingJobSpec {
        framework,
        replicas,
        run_policy: Default::default(),
        success_policy: None,
        queue: None,
        priority_class: None,
        elastic: None,
        nproc_per_node: None,
        mpi: None,
        port: None,
    };
    TrainingJob::new("j", spec)
}

pub fn pytorch(workers: u32) -> TrainingJob {
    job(
        Framework::PyTorch,
        &[(Role::Master, 1, None), (Role::Worker, workers, None)],
    )
}

/// An admission placing every replica of the job (one GPU each, on node-<role>-<index>).
pub fn admit_all(job: &TrainingJob) -> AdmissionState {
    let mut placements = Vec::new();
    for (role, r) in &job.spec.replicas {
        for index in 0..r.count {
            placements.push(placement(*role, index));
        }
    }
    AdmissionState::Admitted(admission(placements))
}

/// The scheduler's admission of job `j` with these placements.
pub fn admission(placements: Vec<ReplicaPlacement>) -> Admission {
    Admission {
        job: "j".to_string(),
        pool: "default".to_string(),
        gpu_type: None,
        placements,
    }
}

pub fn placement(role: Role, index: u32) -> ReplicaPlacement {
    ReplicaPlacement {
        role: role.as_str().to_string(),
        index,
        node: format!("node-{role}-{index}"),
        gpu_indices: vec![index],
    }
}

pub fn preempted(grace_secs: u64) -> AdmissionState {
    AdmissionState::Preempted {
        grace_period: Duration::from_secs(grace_secs),
        message: "preempted by team-b/urgent".to_string(),
    }
}

pub struct World {
    pub job: TrainingJob,
    pub replicas: BTreeMap<(ReplicaId, Incarnation), ReplicaPhase>,
    pub admission: AdmissionState,
    pub now: Timestamp,
    /// Extra observations reported once, on the next reconcile only (late or duplicated
    /// events).
    pub extra: Vec<ObservedReplica>,
}

impl World {
    pub fn new(job: TrainingJob) -> Self {
        World {
            job,
            replicas: BTreeMap::new(),
            admission: AdmissionState::Waiting,
            now: ts(0),
            extra: Vec::new(),
        }
    }

    pub fn status(&self) -> TrainingJobStatus {
        self.job.status.clone().unwrap_or_default()
    }

    pub fn observed(&self) -> Vec<ObservedReplica> {
        let mut out: Vec<_> = self
            .replicas
            .iter()
            .map(|((id, inc), p)| ObservedReplica::new(*id, *inc, *p))
            .collect();
        out.extend(self.extra.iter().copied());
        out
    }

    /// One reconcile; the status goes through the store (JSON) as a real shell's would.
    pub fn reconcile(&mut self) -> Reconciled {
        let observed = self.observed();
        self.extra.clear();
        let r = reconcile(&self.job, &observed, &self.admission, self.now);
        let stored = serde_json::to_string(&r.status).expect("status serializes");
        let back: TrainingJobStatus = serde_json::from_str(&stored).expect("status parses");
        assert_eq!(back, r.status, "status survives the store");
        self.job.status = Some(back);
        r
    }

    /// Applies actions as an obliging shell: starts create Pending replicas, stops with
    /// delete remove them, stops without delete leave them exited by SIGTERM.
    pub fn apply(&mut self, r: &Reconciled) {
        for a in &r.actions {
            match a {
                Action::Start {
                    replica,
                    incarnation,
                    ..
                } => {
                    self.replicas
                        .insert((*replica, *incarnation), ReplicaPhase::Pending);
                }
                Action::Stop {
                    replica,
                    incarnation,
                    delete,
                    ..
                } => {
                    if *delete {
                        self.replicas.remove(&(*replica, *incarnation));
                    } else if let Some(p) = self.replicas.get_mut(&(*replica, *incarnation))
                        && p.is_active()
                    {
                        *p = error(143);
                    }
                }
                Action::Requeue | Action::Release | Action::DeleteJob => {}
            }
        }
    }

    pub fn tick(&mut self) -> Reconciled {
        let r = self.reconcile();
        self.apply(&r);
        r
    }

    pub fn advance(&mut self, secs: i64) {
        self.now = ts((self.now.as_second() - T0) + secs);
    }

    /// Sets the phase of the newest incarnation of a replica.
    pub fn set(&mut self, replica: ReplicaId, phase: ReplicaPhase) {
        let key = self
            .replicas
            .keys()
            .filter(|(i, _)| *i == replica)
            .max()
            .copied()
            .unwrap_or_else(|| panic!("no replica {replica}"));
        self.replicas.insert(key, phase);
    }

    pub fn all(&mut self, phase: ReplicaPhase) {
        for p in self.replicas.values_mut() {
            *p = phase;
        }
    }

    /// Admits, starts and runs every replica.
    pub fn run_all(&mut self) {
        self.admission = admit_all(&self.job);
        self.tick();
        self.all(ReplicaPhase::Running);
        let r = self.tick();
        assert!(self.cond(ConditionType::Running), "running: {r:?}");
    }

    pub fn cond(&self, t: ConditionType) -> bool {
        self.status()
            .conditions
            .iter()
            .any(|c| c.type_ == t && c.status == ConditionStatus::True)
    }

    pub fn reason(&self, t: ConditionType) -> String {
        self.status()
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.reason.clone())
            .unwrap_or_default()
    }
}

pub fn starts(r: &Reconciled) -> Vec<(ReplicaId, Incarnation)> {
    r.actions
        .iter()
        .filter_map(|a| match a {
            Action::Start {
                replica,
                incarnation,
                ..
            } => Some((*replica, *incarnation)),
            _ => None,
        })
        .collect()
}

pub fn stops(
    r: &Reconciled,
) -> Vec<(
    ReplicaId,
    Incarnation,
    bool,
    corral_core::lifecycle::StopReason,
)> {
    r.actions
        .iter()
        .filter_map(|a| match a {
            Action::Stop {
                replica,
                incarnation,
                delete,
                reason,
                ..
            } => Some((*replica, *incarnation, *delete, *reason)),
            _ => None,
        })
        .collect()
}

pub fn has(r: &Reconciled, action: &Action) -> bool {
    r.actions.contains(action)
}
