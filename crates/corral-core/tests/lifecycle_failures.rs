//! Table-driven tests of failures in the job lifecycle (`corral_core::lifecycle`): restart
//! policy x exit, gang restarts with backoff, backoff limits, late and duplicated events,
//! replay after a controller crash, preemption versus failure, and deadlines during
//! restarts. A fake shell (`lifecycle_world::World`) applies the actions and stores the
//! status as JSON between reconciles, as a real store would.

use std::time::Duration;

use corral_api::training_job::{ConditionType, Framework, RestartPolicy, Role};
use corral_core::lifecycle::{
    Action, AdmissionState, FailureReason, ObservedReplica, ReplicaPhase, StopReason, reconcile,
};

mod lifecycle_world;

use lifecycle_world::*;

/// Restart policy x exit: (policy, phase of worker 1, restarted?, failed reason).
#[test]
fn restart_policy_table() {
    use RestartPolicy::*;
    let cases: Vec<(RestartPolicy, ReplicaPhase, Option<&str>)> = vec![
        (Never, error(1), Some("ReplicaFailed")),
        (Never, error(137), Some("ReplicaFailed")),
        (
            Never,
            failed(137, FailureReason::Evicted),
            Some("ReplicaFailed"),
        ),
        (OnFailure, error(1), None),
        (OnFailure, failed(137, FailureReason::OomKilled), None),
        (Always, error(2), None),
        (Always, ReplicaPhase::Succeeded, None),
        (OnFailure, ReplicaPhase::Succeeded, Some("keeps running")),
        (ExitCode, error(1), Some("ReplicaFailed")),
        (ExitCode, error(127), Some("ReplicaFailed")),
        (ExitCode, error(128), None),
        (ExitCode, error(143), None),
        (ExitCode, failed(137, FailureReason::OomKilled), None),
        (ExitCode, failed(1, FailureReason::NodeLost), None),
        (ExitCode, failed(1, FailureReason::Evicted), None),
        (
            OnFailure,
            failed(1, FailureReason::DeadlineExceeded),
            Some("ReplicaFailed"),
        ),
        (Never, ReplicaPhase::Gone, None),
    ];
    for (policy, phase, outcome) in cases {
        let name = format!("{policy:?} {phase:?}");
        let mut w = World::new(job(Framework::Jax, &[(Role::Worker, 2, Some(policy))]));
        w.run_all();
        if phase == ReplicaPhase::Gone {
            w.replicas.retain(|(i, _), _| *i != id(Role::Worker, 1));
            w.extra
                .push(ObservedReplica::new(id(Role::Worker, 1), inc(0, 0), phase));
        } else {
            w.set(id(Role::Worker, 1), phase);
        }
        let r = w.tick();
        match outcome {
            Some("keeps running") => {
                assert!(r.actions.is_empty(), "{name}: {r:?}");
                assert_eq!(w.status().restart_count, 0, "{name}");
            }
            Some(reason) => {
                assert!(w.cond(ConditionType::Failed), "{name}: {r:?}");
                assert_eq!(w.reason(ConditionType::Failed), reason, "{name}");
                assert_eq!(w.status().restart_count, 0, "{name}");
                assert!(starts(&r).is_empty(), "{name}");
            }
            None => {
                assert!(!w.cond(ConditionType::Failed), "{name}: {r:?}");
                assert!(w.cond(ConditionType::Restarting), "{name}");
                assert_eq!(w.status().restart_count, 1, "{name}");
            }
        }
    }
}

#[test]
fn allreduce_failure_restarts_the_whole_gang_after_backoff() {
    let mut w = World::new(pytorch(2));
    w.run_all();
    w.set(id(Role::Worker, 1), error(1));
    let r = w.tick();
    let st = w.status();
    assert_eq!(st.restart_count, 1);
    assert_eq!(st.attempt, 1);
    assert_eq!(st.backoff_until, Some(ts(10)));
    assert!(w.cond(ConditionType::Restarting));
    assert!(!w.cond(ConditionType::Running));
    let s = stops(&r);
    assert_eq!(s.len(), 3, "{r:?}");
    assert!(
        s.iter()
            .all(|s| s.1 == inc(0, 0) && s.2 && s.3 == StopReason::GangRestart)
    );
    assert!(starts(&r).is_empty());
    // Stopped; back-off still running: wait, and say for how long.
    let r = w.tick();
    assert!(r.actions.is_empty(), "{r:?}");
    assert_eq!(r.requeue_after, Some(Duration::from_secs(10)));
    w.advance(10);
    let r = w.tick();
    assert_eq!(
        starts(&r),
        vec![
            (id(Role::Master, 0), inc(1, 0)),
            (id(Role::Worker, 0), inc(1, 0)),
            (id(Role::Worker, 1), inc(1, 0)),
        ]
    );
    assert_eq!(w.status().backoff_until, None);
    w.all(ReplicaPhase::Running);
    w.tick();
    assert!(w.cond(ConditionType::Running));
    assert!(!w.cond(ConditionType::Restarting));
    assert_eq!(w.status().restart_count, 1);
}

#[test]
fn parameter_server_job_restarts_the_single_replica() {
    let mut w = World::new(job(
        Framework::TensorFlow,
        &[
            (Role::Chief, 1, Some(RestartPolicy::OnFailure)),
            (Role::Ps, 2, Some(RestartPolicy::OnFailure)),
            (Role::Worker, 2, Some(RestartPolicy::OnFailure)),
        ],
    ));
    w.run_all();
    w.set(id(Role::Ps, 1), failed(137, FailureReason::OomKilled));
    let r = w.tick();
    assert_eq!(
        stops(&r),
        vec![(id(Role::Ps, 1), inc(0, 0), true, StopReason::Restart)]
    );
    let st = w.status();
    assert_eq!(st.attempt, 0);
    assert_eq!(st.replica_retries.get("ps-1"), Some(&1));
    assert_eq!(st.restart_count, 1);
    w.advance(10);
    let r = w.tick();
    assert_eq!(starts(&r), vec![(id(Role::Ps, 1), inc(0, 1))]);
    w.set(id(Role::Ps, 1), ReplicaPhase::Running);
    w.tick();
    assert!(w.cond(ConditionType::Running));
}

#[test]
fn backoff_limit_counts_every_restart_with_exponential_backoff() {
    let mut j = pytorch(1);
    j.spec.run_policy.backoff_limit = Some(2);
    let mut w = World::new(j);
    w.run_all();
    let mut waits = Vec::new();
    for round in 1..=2u32 {
        w.set(id(Role::Worker, 0), error(1));
        w.tick(); // restart decided
        let r = w.tick(); // all stopped, waiting out the back-off
        waits.push(r.requeue_after);
        assert_eq!(w.status().restart_count, round);
        w.advance(3600);
        w.tick();
        w.all(ReplicaPhase::Running);
        w.tick();
    }
    assert_eq!(
        waits,
        vec![Some(Duration::from_secs(10)), Some(Duration::from_secs(20))]
    );
    w.set(id(Role::Worker, 0), error(1));
    let r = w.tick();
    assert!(w.cond(ConditionType::Failed), "{r:?}");
    assert_eq!(w.reason(ConditionType::Failed), "BackoffLimitExceeded");
    assert_eq!(w.status().restart_count, 2);
    assert!(starts(&r).is_empty());
}

#[test]
fn backoff_limit_zero_fails_on_first_retryable_exit() {
    let mut j = pytorch(1);
    j.spec.run_policy.backoff_limit = Some(0);
    let mut w = World::new(j);
    w.run_all();
    w.set(id(Role::Master, 0), error(137));
    w.tick();
    assert_eq!(w.reason(ConditionType::Failed), "BackoffLimitExceeded");
}

#[test]
fn late_and_duplicated_events_of_an_old_attempt_never_count() {
    let mut w = World::new(pytorch(2));
    w.run_all();
    w.set(id(Role::Worker, 0), error(1));
    // The same failure reported twice, plus an older "Running" for the same incarnation.
    w.extra.push(ObservedReplica::new(
        id(Role::Worker, 0),
        inc(0, 0),
        error(1),
    ));
    w.extra.push(ObservedReplica::new(
        id(Role::Worker, 0),
        inc(0, 0),
        ReplicaPhase::Running,
    ));
    w.tick();
    assert_eq!(w.status().restart_count, 1);
    w.advance(10);
    w.tick();
    w.all(ReplicaPhase::Running);
    w.tick();
    // Late: the old attempt's worker 1 "fails", and its master "succeeds".
    w.extra.push(ObservedReplica::new(
        id(Role::Worker, 1),
        inc(0, 0),
        error(1),
    ));
    w.extra.push(ObservedReplica::new(
        id(Role::Master, 0),
        inc(0, 0),
        ReplicaPhase::Succeeded,
    ));
    let r = w.tick();
    assert_eq!(w.status().restart_count, 1, "{r:?}");
    assert!(!w.cond(ConditionType::Succeeded));
    assert!(w.cond(ConditionType::Running));
    // The stale records get deleted (both of them); nothing else happens.
    assert_eq!(stops(&r).len(), 2, "{r:?}");
    assert!(
        stops(&r)
            .iter()
            .all(|s| s.1 == inc(0, 0) && s.3 == StopReason::Stale)
    );
    assert!(starts(&r).is_empty());
}

#[test]
fn a_failure_seen_again_before_the_shell_acted_counts_once() {
    let mut w = World::new(pytorch(1));
    w.run_all();
    w.set(id(Role::Worker, 0), error(1));
    let first = w.reconcile(); // actions not applied yet
    let second = w.reconcile(); // same observation again
    assert_eq!(w.status().restart_count, 1);
    // The second round re-issues the stops (idempotent), as stale now.
    assert_eq!(stops(&first).len(), 2);
    assert_eq!(stops(&second).len(), 2);
    assert!(stops(&second).iter().all(|s| s.3 == StopReason::Stale));
}

#[test]
fn replay_after_controller_crash_is_identical_and_counts_nothing_twice() {
    let mut w = World::new(pytorch(2));
    w.run_all();
    w.set(id(Role::Master, 0), error(1));
    let before = w.job.clone();
    let observed = w.observed();
    // Crash before the status was persisted: the replay from the old status is identical.
    let a = reconcile(&before, &observed, &w.admission, w.now);
    let b = reconcile(&before, &observed, &w.admission, w.now);
    assert_eq!(a, b);
    // Crash after persisting but before acting: a fresh controller reads the stored status
    // and sees the same replicas; it repeats the stops and counts nothing more.
    let persisted = w.reconcile();
    let mut restarted = w.job.clone();
    restarted.status =
        Some(serde_json::from_value(serde_json::to_value(&persisted.status).unwrap()).unwrap());
    let replay = reconcile(&restarted, &observed, &w.admission, w.now);
    assert_eq!(replay.status.restart_count, 1);
    assert_eq!(replay.status.attempt, 1);
    let mut s1: Vec<_> = stops(&persisted).iter().map(|s| (s.0, s.1)).collect();
    let mut s2: Vec<_> = stops(&replay).iter().map(|s| (s.0, s.1)).collect();
    s1.sort();
    s2.sort();
    assert_eq!(s1, s2);
    assert!(starts(&replay).is_empty());
}

#[test]
fn preemption_is_not_a_failure_and_requeues_with_history() {
    let mut j = pytorch(1);
    j.spec.run_policy.backoff_limit = Some(0);
    let mut w = World::new(j);
    w.run_all();
    w.admission = preempted(120);
    let r = w.reconcile();
    let s: Vec<_> = r
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Stop {
                grace_period,
                reason,
                delete,
                ..
            } => Some((*grace_period, *reason, *delete)),
            _ => None,
        })
        .collect();
    assert_eq!(
        s,
        vec![(Duration::from_secs(120), StopReason::Preempted, true); 2]
    );
    assert!(
        !has(&r, &Action::Requeue),
        "requeue waits for the replicas to stop"
    );
    let st = w.status();
    assert_eq!(
        (st.restart_count, st.preemption_count, st.attempt),
        (0, 1, 1)
    );
    assert!(w.cond(ConditionType::Queued));
    assert_eq!(w.reason(ConditionType::Queued), "Preempted");
    assert!(w.cond(ConditionType::Admitted));
    assert!(!w.cond(ConditionType::Failed));
    // Replicas still stopping: the preemption is not counted again.
    w.reconcile();
    assert_eq!(w.status().preemption_count, 1);
    w.replicas.clear();
    let r = w.tick();
    assert_eq!(r.actions, vec![Action::Requeue]);
    assert!(!w.cond(ConditionType::Admitted));
    // Still reported preempted by a lagging scheduler: nothing more.
    let r = w.tick();
    assert!(r.actions.is_empty(), "{r:?}");
    assert_eq!(w.status().preemption_count, 1);
    // Admitted again: a new attempt starts at once (no back-off), history kept.
    w.advance(600);
    w.admission = admit_all(&w.job);
    let r = w.tick();
    assert_eq!(starts(&r).len(), 2);
    assert!(starts(&r).iter().all(|s| s.1 == inc(1, 0)));
    assert_eq!(w.status().start_time, Some(w.now));
    assert_eq!(w.status().restart_count, 0);
}

#[test]
fn preemption_versus_failure_with_the_same_exit_code() {
    for (reason, counts) in [
        (FailureReason::Preempted, false),
        (FailureReason::Error, true),
    ] {
        let mut w = World::new(job(
            Framework::Jax,
            &[(Role::Worker, 2, Some(RestartPolicy::ExitCode))],
        ));
        w.run_all();
        w.set(id(Role::Worker, 1), failed(143, reason));
        let r = w.tick();
        let st = w.status();
        assert_eq!(st.restart_count, u32::from(counts), "{reason}: {r:?}");
        assert_eq!(st.preemption_count, u32::from(!counts), "{reason}");
        assert_eq!(w.cond(ConditionType::Restarting), counts, "{reason}");
        assert_eq!(
            w.reason(ConditionType::Queued) == "Preempted",
            !counts,
            "{reason}"
        );
        if !counts {
            // All stopped: the job goes back to its queue even though the scheduler still
            // lists the admission; then waits for a new one.
            let r = w.tick();
            assert_eq!(r.actions, vec![Action::Requeue], "{r:?}");
            w.admission = AdmissionState::Waiting;
            assert!(w.tick().actions.is_empty());
        }
    }
}

#[test]
fn withdrawn_admission_stops_the_job_like_a_preemption() {
    let mut w = World::new(pytorch(1));
    w.run_all();
    w.admission = AdmissionState::Waiting;
    let r = w.tick();
    assert_eq!(stops(&r).len(), 2);
    assert_eq!(w.status().preemption_count, 1);
    let r = w.tick();
    assert_eq!(r.actions, vec![Action::Requeue]);
}

#[test]
fn active_deadline_fails_a_running_job() {
    let mut j = pytorch(1);
    j.spec.run_policy.active_deadline_seconds = Some(100);
    let mut w = World::new(j);
    w.run_all();
    let r = w.tick();
    assert_eq!(r.requeue_after, Some(Duration::from_secs(100)));
    w.advance(100);
    let r = w.tick();
    assert!(w.cond(ConditionType::Failed));
    assert_eq!(w.reason(ConditionType::Failed), "DeadlineExceeded");
    assert!(stops(&r).iter().all(|s| s.3 == StopReason::JobFailed));
    assert_eq!(stops(&r).len(), 2);
}

#[test]
fn deadline_during_restart_backoff_fails_and_starts_nothing() {
    let mut j = pytorch(1);
    j.spec.run_policy.active_deadline_seconds = Some(30);
    let mut w = World::new(j);
    w.run_all();
    w.advance(25);
    w.set(id(Role::Worker, 0), error(1));
    w.tick(); // restart, back-off until 35s, after the deadline at 30s
    let r = w.tick();
    assert_eq!(
        r.requeue_after,
        Some(Duration::from_secs(5)),
        "the deadline comes first"
    );
    w.advance(5);
    let r = w.tick();
    assert_eq!(w.reason(ConditionType::Failed), "DeadlineExceeded");
    assert!(!w.cond(ConditionType::Restarting));
    assert_eq!(w.status().backoff_until, None);
    assert!(starts(&r).is_empty());
    w.advance(3600);
    assert!(starts(&w.tick()).is_empty());
}

/// An OOM kill names the memory limit the replica hit and the field that sets it, so the fix
/// is plain; without a limit it says the replica ran out of memory.
#[test]
fn an_oom_kill_names_the_limit() {
    for (memory, want) in [
        (
            Some("512Mi"),
            "failed with exit code 137 (OOMKilled): it used all of its memory limit, 512Mi \
             (spec.replicas.worker.resources.memory)",
        ),
        (
            None,
            "failed with exit code 137 (OOMKilled): it ran out of memory",
        ),
    ] {
        let mut spec = job(
            Framework::Jax,
            &[(Role::Worker, 1, Some(RestartPolicy::Never))],
        );
        if let Some(m) = memory
            && let Some(r) = spec.spec.replicas.get_mut(&Role::Worker)
        {
            r.resources.memory = Some(corral_api::quantity::Quantity::parse(m).expect("quantity"));
        }
        let mut w = World::new(spec);
        w.run_all();
        w.set(id(Role::Worker, 0), failed(137, FailureReason::OomKilled));
        w.tick();
        let message = w
            .status()
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Failed)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(message.contains(want), "{memory:?}: {message}");
    }
}
