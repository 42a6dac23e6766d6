//! A fake shell around the bare plane: it applies the plane's actions to replicas that exist
//! only here, persists its changes as a store would and records every step. By default a
//! replica starts and stops at once; a test can make a job's starts fail (the platform
//! cannot start its program), make a job slow to stop (it ignores the request and ends only
//! when killed after its grace period), tell the plane the room left on the node, and turn
//! GPUs unhealthy.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use corral_api::TrainingJob;
use corral_core::control::{Change, ControlPlane, Room, StartFailure, Step};
use corral_core::lifecycle::{
    Action, FailureReason, Incarnation, JobState, ObservedReplica, ReplicaId, ReplicaPhase,
    job_state,
};
use jiff::Timestamp;

/// The node of `plane_world::cluster`.
pub const NODE: &str = "node-a";

/// A replica incarnation that exists in the shell.
#[derive(Clone, Debug)]
pub struct Replica {
    pub phase: ReplicaPhase,
    pub gpus: Vec<u32>,
    /// A slow stop under way: when it is killed (seconds), and whether its record goes.
    pub killed_at: Option<(i64, bool)>,
}

pub struct FakeShell {
    pub plane: ControlPlane,
    pub now: i64,
    /// Replica incarnations by job.
    pub live: BTreeMap<String, BTreeMap<(ReplicaId, Incarnation), Replica>>,
    pub log: Vec<Step>,
    /// Stops sent: (job, grace period).
    pub stops: Vec<(String, Duration)>,
    /// Jobs as a shell stores them (spec and the last persisted status): what is left of
    /// a job the plane retired.
    pub stored: BTreeMap<String, TrainingJob>,
    /// Jobs whose starts the platform cannot make.
    pub cannot_start: BTreeSet<String>,
    /// Jobs whose replicas end only when killed, a grace period after the stop.
    pub slow_to_stop: BTreeSet<String>,
    /// GPUs of the node, when the shell tells the plane the room left on it before each
    /// step (a real shell does; `None`: it does not, and stops are instant anyway).
    pub room_of: Option<u32>,
    /// Whether two running replicas ever shared a GPU.
    pub shared_a_gpu: bool,
    /// Jobs whose starts are held back, for the test to carry out or fail.
    pub held: Vec<String>,
    /// The starts held back, in order, as the plane asked them.
    pub asked: Vec<(String, Action)>,
}

impl FakeShell {
    pub fn new(plane: ControlPlane) -> Self {
        FakeShell {
            plane,
            now: 1_000_000,
            live: BTreeMap::new(),
            log: Vec::new(),
            stops: Vec::new(),
            stored: BTreeMap::new(),
            cannot_start: BTreeSet::new(),
            slow_to_stop: BTreeSet::new(),
            room_of: None,
            shared_a_gpu: false,
            held: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// Persists a step's changes, as a shell's store would.
    pub fn persist(&mut self, step: &Step) {
        for c in &step.changes {
            match c {
                Change::Status { job, status } => {
                    let known = self
                        .plane
                        .job(job)
                        .or_else(|| self.stored.get(job))
                        .cloned();
                    if let Some(mut j) = known {
                        j.status = Some(status.clone());
                        self.stored.insert(job.clone(), j);
                    }
                }
                Change::Removed { job } => {
                    self.stored.remove(job);
                }
                Change::Retired { job } => {
                    assert!(
                        self.plane.job(job).is_none(),
                        "{job} retired yet still held"
                    );
                    assert!(self.stored.contains_key(job), "{job} retired unrecorded");
                }
                Change::Admission { .. } | Change::Deleting { .. } => {}
            }
        }
    }

    /// The job: from the plane while it holds it, else as stored (once retired).
    pub fn job(&self, key: &str) -> Option<TrainingJob> {
        match self.plane.job(key) {
            Some(j) => Some(j.clone()),
            None if self.plane.is_retired(key) => self.stored.get(key).cloned(),
            None => None,
        }
    }

    pub fn ts(&self) -> Timestamp {
        Timestamp::from_second(self.now).expect("valid time")
    }

    /// Time passes; then steps until the plane asks for nothing more (bounded).
    pub fn run(&mut self, seconds: i64) {
        self.now += seconds;
        self.kill_due();
        self.observe_room();
        let mut step = self.plane.step(self.ts());
        for _ in 0..20 {
            self.persist(&step);
            let actions = step.actions.clone();
            self.log.push(step);
            let mut changed = false;
            for a in actions {
                changed |= self.apply(&a.job, a.action);
            }
            // A stop already under way is asked again while the replica runs on: nothing
            // new, as in a real shell.
            if !changed {
                return;
            }
            self.observe_room();
            step = self.plane.step(self.ts());
        }
        panic!("the plane did not settle: {:?}", self.log.last());
    }

    /// Slow stops whose grace period is over end (SIGKILL).
    fn kill_due(&mut self) {
        let now = self.now;
        let mut ended = Vec::new();
        for (job, replicas) in &mut self.live {
            for (&(id, inc), r) in replicas.iter_mut() {
                if let Some((at, delete)) = r.killed_at
                    && at <= now
                {
                    r.killed_at = None;
                    r.phase = ReplicaPhase::Failed {
                        exit_code: 137,
                        reason: FailureReason::Error,
                    };
                    ended.push((job.clone(), id, inc, r.phase, delete));
                }
            }
        }
        for (job, id, inc, phase, delete) in ended {
            if delete {
                if let Some(l) = self.live.get_mut(&job) {
                    l.remove(&(id, inc));
                }
                self.plane.forget_replica(&job, id, inc);
            } else {
                self.plane
                    .observe(&job, ObservedReplica::new(id, inc, phase));
            }
        }
    }

    /// The room left on the node: its GPUs less those of every running replica.
    fn observe_room(&mut self) {
        let Some(gpus) = self.room_of else {
            return;
        };
        let mut free: BTreeSet<u32> = (0..gpus).collect();
        for r in self.live.values().flat_map(|l| l.values()) {
            if r.phase == ReplicaPhase::Running {
                for g in &r.gpus {
                    free.remove(g);
                }
            }
        }
        self.plane
            .observe_room(BTreeMap::from([(NODE.to_string(), Room::gpus_only(free))]));
    }

    /// GPU indices held by running replicas, with repeats.
    fn gpus_in_use(&self) -> Vec<u32> {
        self.live
            .values()
            .flat_map(|l| l.values())
            .filter(|r| r.phase == ReplicaPhase::Running)
            .flat_map(|r| r.gpus.iter().copied())
            .collect()
    }

    /// Carries out one action; whether it changed anything.
    pub fn apply(&mut self, job: &str, action: Action) -> bool {
        match action {
            Action::Start {
                replica,
                incarnation,
                placement,
            } => {
                if self.held.iter().any(|h| h == job) {
                    // Asked again until the test says how it went: nothing new.
                    let asked = (
                        job.to_string(),
                        Action::Start {
                            replica,
                            incarnation,
                            placement,
                        },
                    );
                    if self.asked.contains(&asked) {
                        return false;
                    }
                    self.asked.push(asked);
                    return true;
                }
                if self.cannot_start.contains(job) {
                    self.plane.start_failed(
                        job,
                        StartFailure {
                            replica,
                            incarnation,
                            exit_code: 127,
                            message: "train: command not found".into(),
                        },
                    );
                    return true;
                }
                let replica_state = Replica {
                    phase: ReplicaPhase::Running,
                    gpus: placement.gpu_indices.clone(),
                    killed_at: None,
                };
                self.live
                    .entry(job.to_string())
                    .or_default()
                    .insert((replica, incarnation), replica_state);
                let mut in_use = self.gpus_in_use();
                let all = in_use.len();
                in_use.sort_unstable();
                in_use.dedup();
                self.shared_a_gpu |= in_use.len() != all;
                self.plane.observe(
                    job,
                    ObservedReplica::new(replica, incarnation, ReplicaPhase::Running),
                );
                true
            }
            Action::Stop {
                replica,
                incarnation,
                grace_period,
                delete,
                ..
            } => {
                let slow = self.slow_to_stop.contains(job);
                let now = self.now;
                let live = self.live.entry(job.to_string()).or_default();
                if let Some(r) = live.get(&(replica, incarnation))
                    && r.killed_at.is_some()
                {
                    return false;
                }
                self.stops.push((job.to_string(), grace_period));
                if slow
                    && let Some(r) = live.get_mut(&(replica, incarnation))
                    && r.phase == ReplicaPhase::Running
                {
                    // Ignores SIGTERM: ends when killed, a grace period from now.
                    let kill = now + i64::try_from(grace_period.as_secs()).unwrap_or(i64::MAX);
                    r.killed_at = Some((kill, delete));
                    return true;
                }
                if delete {
                    live.remove(&(replica, incarnation));
                    self.plane.forget_replica(job, replica, incarnation);
                } else {
                    let phase = ReplicaPhase::Failed {
                        exit_code: 143,
                        reason: FailureReason::Error,
                    };
                    if let Some(r) = live.get_mut(&(replica, incarnation)) {
                        r.phase = phase;
                    }
                    self.plane
                        .observe(job, ObservedReplica::new(replica, incarnation, phase));
                }
                true
            }
            other => panic!("the plane handles {other:?} itself"),
        }
    }

    /// The starts held back: job, replica, incarnation.
    pub fn asked_starts(&self) -> Vec<(String, ReplicaId, Incarnation)> {
        self.asked
            .iter()
            .filter_map(|(j, a)| match a {
                Action::Start {
                    replica,
                    incarnation,
                    ..
                } => Some((j.clone(), *replica, *incarnation)),
                _ => None,
            })
            .collect()
    }

    /// Carries out the `i`-th start held back (and holds back no more).
    pub fn carry_out(&mut self, i: usize) {
        let (job, action) = self.asked[i].clone();
        self.held.clear();
        self.apply(&job, action);
    }

    /// The platform could not start the held start of `job` asked last.
    pub fn fail_last_start(&mut self, job: &str, message: &str) -> (ReplicaId, Incarnation) {
        let (replica, incarnation) = self
            .asked
            .iter()
            .rev()
            .find_map(|(j, a)| match a {
                Action::Start {
                    replica,
                    incarnation,
                    ..
                } if j == job => Some((*replica, *incarnation)),
                _ => None,
            })
            .expect("a start was asked");
        self.plane.start_failed(
            job,
            StartFailure {
                replica,
                incarnation,
                exit_code: 0,
                message: message.to_string(),
            },
        );
        (replica, incarnation)
    }

    /// The job's status as the plane holds it.
    pub fn status(&self, key: &str) -> corral_api::TrainingJobStatus {
        self.plane
            .job(key)
            .and_then(|j| j.status.clone())
            .expect("status")
    }

    /// How long the job's start back-off has left.
    pub fn backoff_left(&self, key: &str) -> Duration {
        let until = self.status(key).backoff_until.expect("backoffUntil");
        Duration::try_from(self.ts().duration_until(until)).expect("in the future")
    }

    /// A running replica's phase changes (it failed, it succeeded).
    pub fn end(&mut self, job: &str, id: ReplicaId, inc: Incarnation, phase: ReplicaPhase) {
        if let Some(r) = self
            .live
            .entry(job.to_string())
            .or_default()
            .get_mut(&(id, inc))
        {
            r.phase = phase;
        }
        self.plane
            .observe(job, ObservedReplica::new(id, inc, phase));
    }

    /// The running incarnations of a job's replicas.
    pub fn running_replicas(&self, key: &str) -> Vec<(ReplicaId, Incarnation)> {
        self.live.get(key).map_or_else(Vec::new, |l| {
            l.iter()
                .filter(|(_, r)| r.phase == ReplicaPhase::Running)
                .map(|(k, _)| *k)
                .collect()
        })
    }

    /// The GPUs of a running replica.
    pub fn gpus_of(&self, key: &str, index: u32) -> Vec<u32> {
        self.live
            .get(key)
            .and_then(|l| {
                l.iter()
                    .find(|((id, _), r)| id.index == index && r.phase == ReplicaPhase::Running)
                    .map(|(_, r)| r.gpus.clone())
            })
            .unwrap_or_default()
    }

    pub fn state(&self, key: &str) -> JobState {
        let job = self.job(key).expect("job exists");
        job_state(&job.spec, job.status.as_ref())
    }

    pub fn events(&self, key: &str) -> Vec<&'static str> {
        self.log
            .iter()
            .flat_map(|s| &s.events)
            .filter(|e| e.job == key)
            .map(|e| e.reason)
            .collect()
    }

    pub fn running(&self, key: &str) -> usize {
        self.running_replicas(key).len()
    }

    /// Changes of one kind for a job, over the whole log.
    pub fn admission_changes(&self, key: &str) -> Vec<bool> {
        self.log
            .iter()
            .flat_map(|s| &s.changes)
            .filter_map(|c| match c {
                Change::Admission { job, admission } if job == key => Some(admission.is_some()),
                _ => None,
            })
            .collect()
    }
}
