//! The state machine: recorded status + spec + observed replicas + scheduler decision + now
//! -> new status + actions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use corral_api::training_job::{
    CleanPodPolicy, ConditionStatus, ConditionType, ReplicaStatus, Role, TrainingJob,
    TrainingJobSpec, TrainingJobStatus,
};
use jiff::Timestamp;

use super::action::{Action, StopReason};
use super::conditions::{self, reason};
use super::observe::{
    AdmissionState, FailureReason, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase,
};
use super::policy::{self, DEFAULT_GRACE_PERIOD, Exit, RestartScope};
use crate::sched::{Admission, ReplicaPlacement};

/// The outcome of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconciled {
    /// The job's new status. The shell persists it *before* applying `actions`: if it
    /// crashes in between, the next reconcile from the stored status issues the same
    /// actions again (they are idempotent) and counts nothing twice.
    pub status: TrainingJobStatus,
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// Reconcile again after this long even if nothing is observed to change (restart
    /// back-off, activeDeadlineSeconds, ttlSecondsAfterFinished).
    pub requeue_after: Option<Duration>,
}

/// Runs the lifecycle state machine once. Pure: the same inputs give the same outputs.
///
/// `observed` lists every replica incarnation the shell knows of, in any order, duplicates
/// allowed (the most advanced phase of an incarnation wins). `admission` is the scheduler's
/// current decision for this job.
pub fn reconcile(
    job: &TrainingJob,
    observed: &[ObservedReplica],
    admission: &AdmissionState,
    now: Timestamp,
) -> Reconciled {
    reconcile_with(job, observed, admission, DEFAULT_GRACE_PERIOD, now)
}

/// [`reconcile`] with the grace period that every stop of this job gets (suspend, restart,
/// scale-down, delete; a preemption carries its own): the control plane passes the job's
/// own (`terminationGracePeriodSeconds`) or the cluster's setting, see
/// [`crate::control::grace_period`].
pub fn reconcile_with(
    job: &TrainingJob,
    observed: &[ObservedReplica],
    admission: &AdmissionState,
    grace_period: Duration,
    now: Timestamp,
) -> Reconciled {
    let mut spec = job.spec.clone();
    // Idempotent; decisions must not depend on whether the caller defaulted the spec.
    spec.apply_defaults();
    let mut r = Reconciler {
        job: job.name().to_string(),
        queue: spec.queue_name().to_string(),
        spec,
        status: job.status.clone().unwrap_or_default(),
        instances: merge(observed),
        now,
        actions: Vec::new(),
        stopped: BTreeSet::new(),
        requeue_after: None,
        grace_period,
    };
    r.run(admission);
    let mut status = r.status;
    status.phase = Some(super::job_state(&job.spec, Some(&status)));
    // What the job holds: its admission's GPUs until it is terminal, released or requeued.
    status.gpus = match admission {
        AdmissionState::Admitted(a) if !conditions::is_terminal(&status) => a
            .placements
            .iter()
            .map(|p| u32::try_from(p.gpu_indices.len()).unwrap_or(u32::MAX))
            .fold(0u32, u32::saturating_add),
        _ => 0,
    };
    Reconciled {
        status,
        actions: r.actions,
        requeue_after: r.requeue_after,
    }
}

/// The platform refused to create replica `replica` of the job for good: an invalid pod
/// template (422), a write it forbids (403), a malformed request (400), a name held by an
/// object Corral does not own (409). Every retry would be refused the same way while the job
/// holds its GPUs, so the job fails with the platform's words; the next [`reconcile`] of the
/// terminal job stops whatever runs and releases the admission.
pub fn fail_rejected_launch(
    status: &mut TrainingJobStatus,
    replica: &str,
    message: &str,
    now: Timestamp,
) {
    let msg = format!("the platform refused to create replica {replica}: {message}");
    conditions::set(
        status,
        ConditionType::Failed,
        ConditionStatus::True,
        reason::LAUNCH_REJECTED,
        msg.clone(),
        now,
    );
    conditions::clear(
        status,
        ConditionType::Running,
        reason::LAUNCH_REJECTED,
        msg.clone(),
        now,
    );
    conditions::clear(
        status,
        ConditionType::Restarting,
        reason::LAUNCH_REJECTED,
        msg,
        now,
    );
    status.backoff_until = None;
    if status.completion_time.is_none() {
        status.completion_time = Some(now);
    }
}

/// The platform could not start replica `replica` of the job, in its own words `message` (an
/// image it cannot pull, a command that does not exist, no port left): a start that cannot
/// succeed now, and not the program's failure. Decided here for every shell: the job's
/// current incarnations become stale (a new attempt), the start failure is counted in
/// `status.startFailures` (durable; never against backoffLimit), and the job waits out a
/// back-off (10 s doubling to 5 min, `status.backoffUntil`) with the `Queued` condition's
/// reason `StartBackOff` (state `BackOff`). The next [`reconcile`] stops its other replicas,
/// gives its admission back once none runs (its GPUs go to jobs that can run) and, after the
/// back-off, puts it back in its queue.
pub fn back_off_failed_start(
    status: &mut TrainingJobStatus,
    replica: &str,
    message: &str,
    now: Timestamp,
) {
    let failures = status.start_failures.saturating_add(1);
    status.start_failures = failures;
    status.attempt = status.attempt.saturating_add(1);
    status.replica_retries.clear();
    let wait = policy::start_backoff(failures);
    status.backoff_until = Some(add(now, wait));
    let times = match failures {
        1 => "once".to_string(),
        n => format!("{n} times in a row"),
    };
    let msg = format!(
        "replica {replica} could not start: {message}; the job gives its resources back and \
         re-enters its queue in {}s (starts failed {times}; not counted against backoffLimit)",
        wait.as_secs()
    );
    conditions::set(
        status,
        ConditionType::Queued,
        ConditionStatus::True,
        reason::START_BACK_OFF,
        msg.clone(),
        now,
    );
    conditions::clear(
        status,
        ConditionType::Running,
        reason::START_BACK_OFF,
        msg.clone(),
        now,
    );
    conditions::clear(
        status,
        ConditionType::Restarting,
        reason::START_BACK_OFF,
        msg,
        now,
    );
}

/// Observations merged per incarnation, the most advanced phase winning: a replica only moves
/// forward, so an older duplicate cannot undo a newer event.
fn merge(observed: &[ObservedReplica]) -> BTreeMap<(ReplicaId, Incarnation), ReplicaPhase> {
    let mut out: BTreeMap<(ReplicaId, Incarnation), ReplicaPhase> = BTreeMap::new();
    for o in observed {
        out.entry((o.id, o.incarnation))
            .and_modify(|p| {
                if o.phase.progress() > p.progress() {
                    *p = o.phase;
                }
            })
            .or_insert(o.phase);
    }
    out
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// Time from `now` until `t`, or zero when `t` has passed.
fn until(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(now.duration_until(t)).unwrap_or(Duration::ZERO)
}

fn describe(job: &str, spec: &TrainingJobSpec, id: ReplicaId, phase: ReplicaPhase) -> String {
    let name = id.name(job);
    match phase {
        // The limit it hit, so that the fix (more memory, or a smaller batch) is plain.
        ReplicaPhase::Failed {
            exit_code,
            reason: reason @ FailureReason::OomKilled,
        } => {
            let role = id.role;
            let limit = spec
                .replicas
                .get(&role)
                .and_then(|r| r.resources.memory.as_ref());
            match limit {
                Some(limit) => format!(
                    "replica {name} failed with exit code {exit_code} ({reason}): it used all \
                     of its memory limit, {limit} (spec.replicas.{role}.resources.memory)"
                ),
                None => format!(
                    "replica {name} failed with exit code {exit_code} ({reason}): it ran out \
                     of memory"
                ),
            }
        }
        ReplicaPhase::Failed { exit_code, reason } => {
            format!("replica {name} failed with exit code {exit_code} ({reason})")
        }
        ReplicaPhase::Gone => format!("replica {name} vanished"),
        ReplicaPhase::Succeeded => format!("replica {name} exited 0 (restartPolicy Always)"),
        _ => format!("replica {name} is {phase:?}"),
    }
}

struct Reconciler {
    job: String,
    queue: String,
    spec: TrainingJobSpec,
    status: TrainingJobStatus,
    instances: BTreeMap<(ReplicaId, Incarnation), ReplicaPhase>,
    now: Timestamp,
    actions: Vec<Action>,
    /// Stops issued this round, so that no incarnation gets two.
    stopped: BTreeSet<(ReplicaId, Incarnation)>,
    requeue_after: Option<Duration>,
    /// How long a stopped replica gets between SIGTERM and SIGKILL.
    grace_period: Duration,
}

impl Reconciler {
    fn run(&mut self, admission: &AdmissionState) {
        // A terminal job is final: nothing that arrives late restarts it (kubeflow/trainer#3737).
        if conditions::is_terminal(&self.status) {
            self.terminal();
            return;
        }
        if self.deadline_passed() {
            let secs = self.spec.run_policy.active_deadline_seconds.unwrap_or(0);
            self.fail(
                reason::DEADLINE_EXCEEDED,
                format!("job ran longer than activeDeadlineSeconds ({secs}s)"),
            );
            return;
        }
        if self.spec.run_policy.suspend {
            self.suspend();
            self.update_replica_statuses();
            return;
        }
        if conditions::is_true(&self.status, ConditionType::Suspended) {
            self.resume();
        }
        if super::is_backing_off(&self.status) {
            let holds = !matches!(admission, AdmissionState::Waiting);
            self.wait_out_start_back_off(holds);
            self.update_replica_statuses();
            return;
        }
        match admission {
            AdmissionState::Preempted {
                grace_period,
                message,
            } => {
                if self.is(ConditionType::Admitted) {
                    self.preempt(*grace_period, message);
                } else {
                    self.wait(*grace_period);
                }
            }
            AdmissionState::Waiting => {
                if self.is(ConditionType::Admitted) {
                    self.preempt(self.grace_period, "the scheduler withdrew the admission");
                } else {
                    self.wait(self.grace_period);
                }
            }
            AdmissionState::Admitted(a) => self.run_admitted(a),
        }
        self.update_replica_statuses();
    }

    fn is(&self, t: ConditionType) -> bool {
        conditions::is_true(&self.status, t)
    }

    fn set(&mut self, t: ConditionType, reason: &str, message: String) {
        conditions::set(
            &mut self.status,
            t,
            ConditionStatus::True,
            reason,
            message,
            self.now,
        );
    }

    fn clear(&mut self, t: ConditionType, reason: &str, message: String) {
        conditions::clear(&mut self.status, t, reason, message, self.now);
    }

    fn requeue(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }

    /// The incarnation the job currently expects of a replica.
    fn current(&self, id: ReplicaId) -> Incarnation {
        super::observe::current_incarnation(&self.status, id)
    }

    fn current_phase(&self, id: ReplicaId) -> Option<ReplicaPhase> {
        self.instances.get(&(id, self.current(id))).copied()
    }

    /// Current incarnations of every replica the shell reports (desired or not).
    fn current_instances(&self) -> Vec<(ReplicaId, Incarnation, ReplicaPhase)> {
        self.instances
            .iter()
            .filter(|((id, inc), _)| *inc == self.current(*id))
            .map(|((id, inc), p)| (*id, *inc, *p))
            .collect()
    }

    fn any_active(&self) -> bool {
        self.instances.values().any(|p| p.is_active())
    }

    /// No incarnation of the replica holds its name (Kubernetes cannot create a pod whose
    /// name is taken; locally the name is the process's identity).
    fn name_free(&self, id: ReplicaId) -> bool {
        self.instances
            .iter()
            .all(|((i, _), p)| *i != id || *p == ReplicaPhase::Gone)
    }

    fn stop(
        &mut self,
        id: ReplicaId,
        inc: Incarnation,
        grace_period: Duration,
        delete: bool,
        reason: StopReason,
    ) {
        if self.stopped.insert((id, inc)) {
            self.actions.push(Action::Stop {
                replica: id,
                incarnation: inc,
                grace_period,
                delete,
                reason,
            });
        }
    }

    /// Stops (and deletes) every incarnation of every replica that still exists.
    fn stop_all(&mut self, grace: Duration, reason: StopReason) {
        let all: Vec<_> = self
            .instances
            .iter()
            .filter(|(_, p)| **p != ReplicaPhase::Gone)
            .map(|(k, _)| *k)
            .collect();
        for (id, inc) in all {
            self.stop(id, inc, grace, true, reason);
        }
    }

    /// Stops and deletes incarnations that are no longer current.
    fn stop_stale(&mut self, grace: Duration) {
        let stale: Vec<_> = self
            .instances
            .iter()
            .filter(|((id, inc), p)| **p != ReplicaPhase::Gone && *inc != self.current(*id))
            .map(|(k, _)| *k)
            .collect();
        for (id, inc) in stale {
            self.stop(id, inc, grace, true, StopReason::Stale);
        }
    }

    fn deadline_passed(&mut self) -> bool {
        let (Some(secs), Some(start)) = (
            self.spec.run_policy.active_deadline_seconds,
            self.status.start_time,
        ) else {
            return false;
        };
        if self.spec.run_policy.suspend {
            return false;
        }
        let deadline = add(start, Duration::from_secs(secs));
        if self.now >= deadline {
            return true;
        }
        self.requeue(until(self.now, deadline));
        false
    }

    /// Waiting in the queue: nothing runs without an admission.
    fn wait(&mut self, grace: Duration) {
        if !self.is(ConditionType::Queued) {
            let msg = format!("waiting for admission in queue {}", self.queue);
            self.set(ConditionType::Queued, reason::QUEUED, msg);
        }
        let active: Vec<_> = self
            .instances
            .iter()
            .filter(|(_, p)| p.is_active())
            .map(|(k, _)| *k)
            .collect();
        for (id, inc) in active {
            self.stop(id, inc, grace, true, StopReason::Stale);
        }
    }

    /// The grace period of a stop that began when `began` turned true: none once the job has
    /// saved a checkpoint since (nothing is gained by waiting out the rest; the stop is sent
    /// again without one).
    fn until_checkpointed(&self, began: ConditionType, grace: Duration) -> Duration {
        let since = conditions::get(&self.status, began).map(|c| c.last_transition_time);
        if since.is_some_and(|t| super::checkpointed_since(&self.status, t)) {
            Duration::ZERO
        } else {
            grace
        }
    }

    /// The scheduler took the admission back, or a replica was preempted: not a failure.
    /// Every replica stops with the grace period; once none is left, the job returns to its
    /// queue with its restart history.
    fn preempt(&mut self, grace: Duration, message: &str) {
        // Queued is False while the job holds an admission; True here means this preemption
        // was already counted on an earlier reconcile.
        if !self.is(ConditionType::Queued) {
            self.status.preemption_count = self.status.preemption_count.saturating_add(1);
            self.new_attempt();
            self.status.start_time = None;
            self.set(
                ConditionType::Queued,
                reason::PREEMPTED,
                message.to_string(),
            );
            self.clear(
                ConditionType::Running,
                reason::PREEMPTED,
                message.to_string(),
            );
            self.clear(
                ConditionType::Restarting,
                reason::PREEMPTED,
                message.to_string(),
            );
        }
        let grace = self.until_checkpointed(ConditionType::Queued, grace);
        self.stop_all(grace, StopReason::Preempted);
        if !self.any_active() {
            let msg = "all replicas stopped; back in the queue".to_string();
            self.clear(ConditionType::Admitted, reason::PREEMPTED, msg);
            self.actions.push(Action::Requeue);
        }
    }

    /// Makes every replica's current incarnation stale: the next launch is a new attempt.
    fn new_attempt(&mut self) {
        self.status.attempt = self.status.attempt.saturating_add(1);
        self.status.replica_retries.clear();
        self.status.backoff_until = None;
    }

    fn suspend(&mut self) {
        if super::is_backing_off(&self.status) {
            // The suspend ends the back-off: a resume goes back to the queue at once.
            self.status.backoff_until = None;
        }
        if !self.is(ConditionType::Suspended) {
            let msg = "runPolicy.suspend is set".to_string();
            self.set(ConditionType::Suspended, reason::SUSPENDED, msg.clone());
            self.clear(ConditionType::Running, reason::SUSPENDED, msg.clone());
            self.clear(ConditionType::Restarting, reason::SUSPENDED, msg);
            if self.is(ConditionType::Admitted) {
                self.new_attempt();
            }
            // The deadline clock stops while suspended (as Kubernetes Jobs do).
            self.status.start_time = None;
        }
        let grace = self.until_checkpointed(ConditionType::Suspended, self.grace_period);
        self.stop_all(grace, StopReason::Suspended);
        if !self.any_active()
            && (self.is(ConditionType::Admitted) || self.is(ConditionType::Queued))
        {
            let msg = "suspended: all replicas stopped".to_string();
            self.clear(ConditionType::Admitted, reason::SUSPENDED, msg.clone());
            self.clear(ConditionType::Queued, reason::SUSPENDED, msg);
            self.actions.push(Action::Release);
        }
    }

    fn resume(&mut self) {
        let msg = "runPolicy.suspend was cleared".to_string();
        conditions::set(
            &mut self.status,
            ConditionType::Suspended,
            ConditionStatus::False,
            reason::RESUMED,
            msg,
            self.now,
        );
        let msg = format!("resumed; waiting for admission in queue {}", self.queue);
        self.set(ConditionType::Queued, reason::RESUMED, msg);
        self.actions.push(Action::Requeue);
    }

    /// A start the platform could not make ([`back_off_failed_start`]): every replica
    /// stops; once none runs the admission goes back (`holds`: the scheduler still gives
    /// the job one), and once the back-off has passed the job re-enters its queue.
    fn wait_out_start_back_off(&mut self, holds: bool) {
        self.stop_all(self.grace_period, StopReason::StartBackOff);
        if self.any_active() {
            return;
        }
        if self.is(ConditionType::Admitted) {
            let msg = "all replicas stopped; the admission is given back during the start \
                       back-off"
                .to_string();
            self.clear(ConditionType::Admitted, reason::START_BACK_OFF, msg);
            self.actions.push(Action::Release);
        } else if holds {
            self.actions.push(Action::Release);
        }
        match self.status.backoff_until {
            Some(t) if self.now < t => self.requeue(until(self.now, t)),
            _ => {
                self.status.backoff_until = None;
                let msg = format!(
                    "the start back-off is over; waiting for admission in queue {}",
                    self.queue
                );
                self.set(ConditionType::Queued, reason::QUEUED, msg);
                self.actions.push(Action::Requeue);
            }
        }
    }

    /// A start counts as made once a replica of the job has shown that its program ran
    /// (it ended any other way than a start failure), or the job has been Running for
    /// [`policy::START_PROVEN_AFTER`]: then the count of start failures resets.
    fn reset_start_failures(&mut self, current: &BTreeMap<ReplicaId, ReplicaPhase>) {
        if self.status.start_failures == 0 {
            return;
        }
        let ran = current.values().any(|p| {
            matches!(
                p,
                ReplicaPhase::Succeeded
                    | ReplicaPhase::Failed {
                        reason: FailureReason::Error
                            | FailureReason::OomKilled
                            | FailureReason::DeadlineExceeded,
                        ..
                    }
            )
        });
        let running_since = conditions::get(&self.status, ConditionType::Running)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| c.last_transition_time);
        let proven = match running_since {
            Some(t) => {
                let at = add(t, policy::START_PROVEN_AFTER);
                if self.now < at {
                    self.requeue(until(self.now, at));
                    false
                } else {
                    true
                }
            }
            None => false,
        };
        if ran || proven {
            self.status.start_failures = 0;
        }
    }

    fn run_admitted(&mut self, admission: &Admission) {
        if super::is_preempting(&self.status) {
            // A preemption is under way (a replica was preempted); finish it before the job
            // may run again.
            let msg = conditions::get(&self.status, ConditionType::Queued)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            self.preempt(self.grace_period, &msg);
            return;
        }
        let desired = match policy::desired(&self.spec, admission) {
            Ok(d) => d,
            Err(msg) => {
                if !self.is(ConditionType::Admitted) {
                    self.set(ConditionType::Queued, reason::PLACEMENT_INCOMPLETE, msg);
                    self.wait(self.grace_period);
                } else {
                    // Keep what runs; start nothing until the scheduler sends a usable
                    // admission.
                    self.set(ConditionType::Admitted, reason::PLACEMENT_INCOMPLETE, msg);
                    self.stop_stale(self.grace_period);
                }
                return;
            }
        };
        if !self.is(ConditionType::Admitted) || self.admitted_reason_is_incomplete() {
            let msg = match desired.len() {
                1 => "admitted with a placement for its replica".to_string(),
                n => format!("admitted with a placement for {n} replicas"),
            };
            self.set(ConditionType::Admitted, reason::ADMITTED, msg.clone());
            conditions::set(
                &mut self.status,
                ConditionType::Queued,
                ConditionStatus::False,
                reason::ADMITTED,
                msg,
                self.now,
            );
            if self.status.start_time.is_none() {
                self.status.start_time = Some(self.now);
            }
            // activeDeadlineSeconds counts from here.
            let _ = self.deadline_passed();
        }

        // Current incarnations the job no longer wants (an elastic job shrank).
        for (id, inc, phase) in self.current_instances() {
            if !desired.contains_key(&id) && phase != ReplicaPhase::Gone {
                self.stop(id, inc, self.grace_period, true, StopReason::ScaleDown);
            }
        }

        let mut current: BTreeMap<ReplicaId, ReplicaPhase> = desired
            .keys()
            .filter_map(|id| self.current_phase(*id).map(|p| (*id, p)))
            .collect();
        // A replica the job saw running in this attempt (Running: every replica was up) that
        // is no longer observed was removed from outside (a pod deleted, drained, evicted):
        // it vanished, and restarts by the job's policy like any lost replica, counted and
        // announced, as Kubeflow's and JobSet's operators restart a gang that lost a pod.
        // Never re-created silently in the same incarnation while the rest of the gang runs
        // without it. (An elastic role's members come and go with the admission.)
        if self.is(ConditionType::Running) && !self.is(ConditionType::Restarting) {
            let elastic = policy::elastic_role(&self.spec);
            for id in desired.keys() {
                if Some(id.role) != elastic && self.name_free(*id) {
                    current.entry(*id).or_insert(ReplicaPhase::Gone);
                }
            }
        }

        if policy::succeeded(&self.spec, &desired, &current) {
            self.update_replica_statuses();
            let msg = format!("job {} succeeded", self.job);
            self.set(ConditionType::Succeeded, reason::SUCCEEDED, msg.clone());
            self.finish_conditions(reason::SUCCEEDED, msg);
            self.terminal();
            return;
        }

        // A start the platform could not make: the job backs off out of its queue. (A shell
        // that has the platform's words hands them to the plane, which records the back-off
        // before this sees it.)
        if let Some((id, exit_code)) = current.iter().find_map(|(id, p)| match p {
            ReplicaPhase::Failed {
                exit_code,
                reason: FailureReason::StartFailed,
            } => Some((*id, *exit_code)),
            _ => None,
        }) {
            let words = format!("the platform gave no reason (exit code {exit_code})");
            back_off_failed_start(&mut self.status, &id.name(&self.job), &words, self.now);
            self.wait_out_start_back_off(true);
            return;
        }
        self.reset_start_failures(&current);

        if let Some((id, _)) = current.iter().find(|(_, p)| {
            matches!(
                p,
                ReplicaPhase::Failed {
                    reason: FailureReason::Preempted,
                    ..
                }
            )
        }) {
            let msg = format!("replica {} was preempted", id.name(&self.job));
            self.preempt(self.grace_period, &msg);
            return;
        }

        let mut retry = Vec::new();
        for (&id, &phase) in &current {
            match policy::classify_exit(self.spec.restart_policy(id.role), phase) {
                // Handled above.
                Exit::Done | Exit::BackOff => {}
                Exit::Retry => retry.push((id, phase)),
                Exit::Permanent => {
                    self.update_replica_statuses();
                    let msg = describe(&self.job, &self.spec, id, phase);
                    self.fail(reason::REPLICA_FAILED, msg);
                    return;
                }
            }
        }
        if !retry.is_empty() && !self.restart(&retry) {
            return;
        }

        self.stop_stale(self.grace_period);
        self.start_missing(&desired);

        let all_up = desired.keys().all(|id| {
            matches!(
                self.current_phase(*id),
                Some(ReplicaPhase::Running | ReplicaPhase::Succeeded)
            )
        }) && desired
            .keys()
            .any(|id| self.current_phase(*id) == Some(ReplicaPhase::Running));
        if all_up {
            let msg = match desired.len() {
                1 => "its replica is running".to_string(),
                n => format!("all {n} replicas are running"),
            };
            self.set(ConditionType::Running, reason::RUNNING, msg.clone());
            self.clear(ConditionType::Restarting, reason::RUNNING, msg);
        }
    }

    fn admitted_reason_is_incomplete(&self) -> bool {
        conditions::get(&self.status, ConditionType::Admitted)
            .is_some_and(|c| c.reason == reason::PLACEMENT_INCOMPLETE)
    }

    /// Restarts after retryable exits, counting every restart durably in status. Returns
    /// false when backoffLimit is exhausted and the job failed instead.
    fn restart(&mut self, retry: &[(ReplicaId, ReplicaPhase)]) -> bool {
        let scope = policy::restart_scope(&self.spec);
        let needed = match scope {
            RestartScope::Gang => 1,
            RestartScope::Replica => u32::try_from(retry.len()).unwrap_or(u32::MAX),
        };
        let what = retry
            .iter()
            .map(|(id, phase)| describe(&self.job, &self.spec, *id, *phase))
            .collect::<Vec<_>>()
            .join("; ");
        let done = self.status.restart_count;
        if let Some(limit) = self.spec.run_policy.backoff_limit
            && done.saturating_add(needed) > limit
        {
            self.update_replica_statuses();
            let msg = format!("{what}; the job has restarted {done} times (backoffLimit {limit})");
            self.fail(reason::BACKOFF_LIMIT_EXCEEDED, msg);
            return false;
        }
        let count = done.saturating_add(needed);
        self.status.restart_count = count;
        match scope {
            RestartScope::Gang => {
                for (id, inc, phase) in self.current_instances() {
                    if phase != ReplicaPhase::Gone {
                        self.stop(id, inc, self.grace_period, true, StopReason::GangRestart);
                    }
                }
                self.new_attempt();
            }
            RestartScope::Replica => {
                for &(id, phase) in retry {
                    if phase != ReplicaPhase::Gone {
                        let inc = self.current(id);
                        self.stop(id, inc, self.grace_period, true, StopReason::Restart);
                    }
                    let n = self.status.replica_retries.entry(id.key()).or_insert(0);
                    *n = n.saturating_add(1);
                }
            }
        }
        let wait = policy::backoff(count);
        self.status.backoff_until = Some(add(self.now, wait));
        let limit = self
            .spec
            .run_policy
            .backoff_limit
            .map_or(String::new(), |l| format!(" of {l}"));
        let scope_word = match scope {
            RestartScope::Gang => "the whole gang",
            RestartScope::Replica => "the replica",
        };
        let msg = format!(
            "restart {count}{limit} ({scope_word}, after {}s back-off): {what}",
            wait.as_secs()
        );
        self.set(ConditionType::Restarting, reason::RESTARTING, msg.clone());
        self.clear(ConditionType::Running, reason::RESTARTING, msg);
        true
    }

    fn start_missing(&mut self, desired: &BTreeMap<ReplicaId, ReplicaPlacement>) {
        if let Some(t) = self.status.backoff_until {
            if self.now < t {
                self.requeue(until(self.now, t));
                return;
            }
            self.status.backoff_until = None;
        }
        let wait_for_workers = policy::launcher_waits_for_workers(&self.spec);
        let workers_ready = desired
            .keys()
            .filter(|id| id.role == Role::Worker)
            .all(|id| self.current_phase(*id) == Some(ReplicaPhase::Running));
        for (&id, placement) in desired {
            if self
                .current_phase(id)
                .is_some_and(|p| p != ReplicaPhase::Gone)
                || !self.name_free(id)
            {
                continue;
            }
            if wait_for_workers && id.role == Role::Launcher && !workers_ready {
                continue;
            }
            self.actions.push(Action::Start {
                replica: id,
                incarnation: self.current(id),
                placement: placement.clone(),
            });
        }
    }

    /// Running and Restarting end when the job finishes.
    fn finish_conditions(&mut self, reason: &str, msg: String) {
        self.clear(ConditionType::Running, reason, msg.clone());
        self.clear(ConditionType::Restarting, reason, msg);
        self.status.backoff_until = None;
        if self.status.completion_time.is_none() {
            self.status.completion_time = Some(self.now);
        }
    }

    fn fail(&mut self, reason: &str, msg: String) {
        self.set(ConditionType::Failed, reason, msg.clone());
        self.finish_conditions(reason, msg);
        self.terminal();
    }

    /// A finished job: stop what still runs, clean up per cleanPodPolicy, release the
    /// admission once nothing runs, and delete the job after its TTL. Never starts anything.
    fn terminal(&mut self) {
        let succeeded = self.is(ConditionType::Succeeded);
        let policy = self
            .spec
            .run_policy
            .clean_pod_policy
            .unwrap_or(CleanPodPolicy::None);
        let all: Vec<_> = self.instances.iter().map(|(k, p)| (*k, *p)).collect();
        for ((id, inc), phase) in all {
            if phase.is_active() {
                // Remaining replicas (e.g. parameter servers) always stop, so their GPUs
                // return to the pool; cleanPodPolicy only decides whether records stay.
                let reason = if succeeded {
                    StopReason::JobSucceeded
                } else {
                    StopReason::JobFailed
                };
                let delete = policy != CleanPodPolicy::None;
                self.stop(id, inc, self.grace_period, delete, reason);
            } else if phase.is_finished() && policy == CleanPodPolicy::All {
                self.stop(id, inc, self.grace_period, true, StopReason::Cleanup);
            }
        }
        if !self.any_active()
            && (self.is(ConditionType::Admitted) || self.is(ConditionType::Queued))
        {
            let msg = "job finished; all replicas stopped".to_string();
            self.clear(ConditionType::Admitted, reason::FINISHED, msg.clone());
            self.clear(ConditionType::Queued, reason::FINISHED, msg);
            self.actions.push(Action::Release);
        }
        if let (Some(ttl), Some(done)) = (
            self.spec.run_policy.ttl_seconds_after_finished,
            self.status.completion_time,
        ) {
            let at = add(done, Duration::from_secs(ttl));
            if self.now >= at {
                self.actions.push(Action::DeleteJob);
            } else {
                self.requeue(until(self.now, at));
            }
        }
    }

    /// Per-role counts of the current incarnations (what Kubeflow reports as
    /// replicaStatuses).
    fn update_replica_statuses(&mut self) {
        let mut out: BTreeMap<Role, ReplicaStatus> = self
            .spec
            .replicas
            .keys()
            .map(|r| (*r, ReplicaStatus::default()))
            .collect();
        for (id, _, phase) in self.current_instances() {
            let s = out.entry(id.role).or_default();
            match phase {
                p if p.is_active() => s.active += 1,
                ReplicaPhase::Succeeded => s.succeeded += 1,
                ReplicaPhase::Failed { .. } | ReplicaPhase::Gone => s.failed += 1,
                _ => {}
            }
        }
        self.status.replica_statuses = out;
    }
}
