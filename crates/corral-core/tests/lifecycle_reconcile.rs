//! Table-driven tests of the job lifecycle state machine (`corral_core::lifecycle`): every
//! transition, late and duplicated events, replay after a controller crash, preemption
//! versus failure, and deadlines during restarts. A fake shell (`support::World`) applies the
//! actions and stores the status as JSON between reconciles, as a real store would.

use std::time::Duration;

use corral_api::training_job::{
    CleanPodPolicy, ConditionType, ElasticPolicy, Framework, LauncherCreationPolicy, MpiOptions,
    RestartPolicy, Role, SuccessPolicy, TrainingJob,
};
use corral_core::lifecycle::{
    Action, AdmissionState, FailureReason, Incarnation, ObservedReplica, ReplicaPhase, StopReason,
    reconcile,
};

use support::*;

#[test]
fn new_job_waits_in_its_queue_and_starts_nothing() {
    let mut w = World::new(pytorch(2));
    let r = w.tick();
    assert!(r.actions.is_empty(), "{r:?}");
    assert!(w.cond(ConditionType::Queued));
    assert_eq!(w.reason(ConditionType::Queued), "Queued");
    assert!(!w.cond(ConditionType::Admitted));
    assert_eq!(w.status().start_time, None);
    // Idempotent: nothing changes on a second look.
    let before = w.status();
    let r = w.tick();
    assert!(r.actions.is_empty());
    assert_eq!(w.status(), before);
}

#[test]
fn admission_starts_every_replica_with_its_placement_in_role_order() {
    let mut w = World::new(pytorch(2));
    w.admission = admit_all(&w.job);
    let r = w.tick();
    let expected: Vec<Action> = [(Role::Master, 0), (Role::Worker, 0), (Role::Worker, 1)]
        .into_iter()
        .map(|(role, i)| Action::Start {
            replica: id(role, i),
            incarnation: inc(0, 0),
            placement: placement(role, i),
        })
        .collect();
    assert_eq!(r.actions, expected);
    assert!(w.cond(ConditionType::Admitted));
    assert!(!w.cond(ConditionType::Queued));
    assert_eq!(w.status().start_time, Some(ts(0)));
    // Starting, not yet running; a repeat reconcile starts nothing twice.
    let r = w.tick();
    assert!(starts(&r).is_empty(), "{r:?}");
    assert!(!w.cond(ConditionType::Running));
    assert_eq!(w.status().replica_statuses[&Role::Worker].active, 2);
    w.all(ReplicaPhase::Running);
    w.tick();
    assert!(w.cond(ConditionType::Running));
}

#[test]
fn placement_missing_a_replica_starts_nothing() {
    let mut w = World::new(pytorch(2));
    let AdmissionState::Admitted(mut a) = admit_all(&w.job) else {
        unreachable!()
    };
    a.placements
        .retain(|p| !(p.role == Role::Worker.as_str() && p.index == 1));
    w.admission = AdmissionState::Admitted(a);
    let r = w.tick();
    assert!(r.actions.is_empty(), "{r:?}");
    assert!(w.cond(ConditionType::Queued));
    assert_eq!(w.reason(ConditionType::Queued), "PlacementIncomplete");
    assert!(!w.cond(ConditionType::Admitted));
}

/// Success policy per framework: (job, replicas that succeed, job succeeded?).
#[test]
fn success_policy_table() {
    use Framework::*;
    let tf = |chief: u32, policy: Option<SuccessPolicy>| {
        let mut j = job(
            TensorFlow,
            &[
                (Role::Chief, chief, None),
                (Role::Ps, 1, None),
                (Role::Worker, 2, None),
            ],
        );
        j.spec.success_policy = policy;
        j
    };
    // (case, job, replicas that succeed, job succeeded?)
    type Case = (&'static str, TrainingJob, Vec<(Role, u32)>, bool);
    let cases: Vec<Case> = vec![
        (
            "tf chief decides",
            tf(1, None),
            vec![(Role::Chief, 0)],
            true,
        ),
        (
            "tf workers without chief do not",
            tf(1, None),
            vec![(Role::Worker, 0), (Role::Worker, 1)],
            false,
        ),
        (
            "tf worker 0 without chief",
            tf(0, None),
            vec![(Role::Worker, 0)],
            true,
        ),
        (
            "tf worker 1 is not worker 0",
            tf(0, None),
            vec![(Role::Worker, 1)],
            false,
        ),
        (
            "tf AllWorkers needs all",
            tf(0, Some(SuccessPolicy::AllWorkers)),
            vec![(Role::Worker, 0)],
            false,
        ),
        (
            "tf AllWorkers",
            tf(0, Some(SuccessPolicy::AllWorkers)),
            vec![(Role::Worker, 0), (Role::Worker, 1)],
            true,
        ),
        ("pytorch master", pytorch(2), vec![(Role::Master, 0)], true),
        (
            "pytorch workers alone do not",
            pytorch(2),
            vec![(Role::Worker, 0), (Role::Worker, 1)],
            false,
        ),
        (
            "mpi launcher",
            job(Mpi, &[(Role::Launcher, 1, None), (Role::Worker, 2, None)]),
            vec![(Role::Launcher, 0)],
            true,
        ),
        (
            "mpi workers do not",
            job(Mpi, &[(Role::Launcher, 1, None), (Role::Worker, 2, None)]),
            vec![(Role::Worker, 0), (Role::Worker, 1)],
            false,
        ),
        (
            "xgboost master",
            job(XGBoost, &[(Role::Master, 1, None), (Role::Worker, 2, None)]),
            vec![(Role::Master, 0)],
            true,
        ),
        (
            "jax needs every worker",
            job(Jax, &[(Role::Worker, 2, None)]),
            vec![(Role::Worker, 0)],
            false,
        ),
        (
            "jax all workers",
            job(Jax, &[(Role::Worker, 2, None)]),
            vec![(Role::Worker, 0), (Role::Worker, 1)],
            true,
        ),
        (
            "generic all replicas",
            job(Generic, &[(Role::Master, 1, None), (Role::Worker, 1, None)]),
            vec![(Role::Master, 0), (Role::Worker, 0)],
            true,
        ),
        (
            "generic not all",
            job(Generic, &[(Role::Master, 1, None), (Role::Worker, 1, None)]),
            vec![(Role::Master, 0)],
            false,
        ),
    ];
    let mut stops_checked = 0;
    for (name, j, done, expect) in cases {
        let mut w = World::new(j);
        w.run_all();
        for (role, i) in &done {
            w.set(id(*role, *i), ReplicaPhase::Succeeded);
        }
        // Taken before the tick: applying the stops makes these replicas inactive.
        let mut still_running: Vec<_> = w
            .replicas
            .iter()
            .filter(|(_, p)| p.is_active())
            .map(|(rid, _)| rid.0)
            .collect();
        let r = w.tick();
        assert_eq!(w.cond(ConditionType::Succeeded), expect, "{name}: {r:?}");
        if expect {
            assert_eq!(w.status().completion_time, Some(w.now), "{name}");
            assert!(!w.cond(ConditionType::Running), "{name}");
            // The rest (PS, workers) stop when the job succeeds: exactly those, so the
            // check below is not vacuous whenever something still ran.
            let mut stopped: Vec<_> = stops(&r).into_iter().map(|s| s.0).collect();
            stopped.sort();
            still_running.sort();
            assert_eq!(stopped, still_running, "{name}: {r:?}");
            assert!(
                stops(&r).iter().all(|s| s.3 == StopReason::JobSucceeded),
                "{name}"
            );
            stops_checked += stopped.len();
        }
    }
    // Some successful case had replicas left to stop (else the stop checks test nothing).
    assert!(stops_checked > 0);
}

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

#[test]
fn terminal_job_never_gets_new_replicas_whatever_arrives_late() {
    let mut j = pytorch(1);
    j.spec.run_policy.clean_pod_policy = Some(CleanPodPolicy::Running);
    let mut w = World::new(j);
    w.run_all();
    w.set(id(Role::Master, 0), error(1));
    w.job
        .spec
        .replicas
        .get_mut(&Role::Master)
        .unwrap()
        .restart_policy = Some(RestartPolicy::Never);
    let r = w.tick();
    assert!(w.cond(ConditionType::Failed), "{r:?}");
    assert_eq!(
        stops(&r),
        vec![(id(Role::Worker, 0), inc(0, 0), true, StopReason::JobFailed)]
    );
    assert!(
        !has(&r, &Action::Release),
        "release waits until nothing runs"
    );
    let r = w.tick();
    assert_eq!(r.actions, vec![Action::Release]);
    assert!(!w.cond(ConditionType::Admitted));
    let frozen = w.status();
    // Late: a replica (started by a slow shell) shows up running, a fresh incarnation and a
    // success arrive, the scheduler re-admits, the clock moves on.
    w.replicas
        .insert((id(Role::Worker, 0), inc(7, 0)), ReplicaPhase::Running);
    w.extra.push(ObservedReplica::new(
        id(Role::Master, 0),
        inc(0, 0),
        ReplicaPhase::Succeeded,
    ));
    w.advance(10_000);
    for _ in 0..3 {
        let r = w.tick();
        assert!(starts(&r).is_empty(), "{r:?}");
        assert!(!has(&r, &Action::Release));
    }
    assert!(
        !w.replicas.keys().any(|(_, i)| *i == inc(7, 0)),
        "the late replica was stopped"
    );
    assert_eq!(w.status(), frozen);
    assert!(!w.cond(ConditionType::Succeeded));
}

#[test]
fn clean_pod_policy_decides_which_records_stay() {
    // (policy, delete running replicas?, delete finished records?)
    for (policy, del_running, del_finished) in [
        (CleanPodPolicy::None, false, false),
        (CleanPodPolicy::Running, true, false),
        (CleanPodPolicy::All, true, true),
    ] {
        let mut j = job(
            Framework::TensorFlow,
            &[
                (Role::Chief, 1, None),
                (Role::Ps, 1, None),
                (Role::Worker, 1, None),
            ],
        );
        j.spec.run_policy.clean_pod_policy = Some(policy);
        let mut w = World::new(j);
        w.run_all();
        w.set(id(Role::Chief, 0), ReplicaPhase::Succeeded);
        w.set(id(Role::Worker, 0), ReplicaPhase::Succeeded);
        let r = w.tick();
        assert!(w.cond(ConditionType::Succeeded));
        let s = stops(&r);
        let ps = s.iter().find(|s| s.0 == id(Role::Ps, 0)).expect("ps stops");
        assert_eq!(ps.2, del_running, "{policy:?}");
        assert_eq!(ps.3, StopReason::JobSucceeded);
        let chief = s.iter().find(|s| s.0 == id(Role::Chief, 0));
        assert_eq!(chief.is_some(), del_finished, "{policy:?}");
        if let Some(c) = chief {
            assert_eq!(c.3, StopReason::Cleanup);
        }
        w.tick();
        assert!(!w.replicas.values().any(|p| p.is_active()), "{policy:?}");
    }
}

#[test]
fn ttl_deletes_the_job_after_it_finished() {
    let mut j = pytorch(1);
    j.spec.run_policy.ttl_seconds_after_finished = Some(60);
    let mut w = World::new(j);
    w.run_all();
    w.set(id(Role::Master, 0), ReplicaPhase::Succeeded);
    let r = w.tick();
    assert_eq!(r.requeue_after, Some(Duration::from_secs(60)));
    w.advance(59);
    assert!(!has(&w.tick(), &Action::DeleteJob));
    w.advance(1);
    assert!(has(&w.tick(), &Action::DeleteJob));
}

#[test]
fn suspend_stops_replicas_keeps_the_job_and_resume_requeues() {
    let mut j = pytorch(1);
    j.spec.run_policy.active_deadline_seconds = Some(1000);
    let mut w = World::new(j);
    w.run_all();
    w.job.spec.run_policy.suspend = true;
    let r = w.tick();
    assert!(
        stops(&r)
            .iter()
            .all(|s| s.3 == StopReason::Suspended && s.2)
    );
    assert_eq!(stops(&r).len(), 2);
    assert!(w.cond(ConditionType::Suspended));
    assert!(!w.cond(ConditionType::Running));
    let r = w.tick();
    assert_eq!(r.actions, vec![Action::Release]);
    assert!(!w.cond(ConditionType::Admitted));
    // The deadline clock stops while suspended.
    w.advance(5000);
    let r = w.tick();
    assert!(r.actions.is_empty(), "{r:?}");
    assert!(!w.cond(ConditionType::Failed));
    // Resume: back to the queue; admitted again, a new attempt starts.
    w.job.spec.run_policy.suspend = false;
    w.admission = AdmissionState::Waiting;
    let r = w.tick();
    assert_eq!(r.actions, vec![Action::Requeue]);
    assert!(!w.cond(ConditionType::Suspended));
    assert_eq!(w.reason(ConditionType::Suspended), "Resumed");
    assert!(w.cond(ConditionType::Queued));
    w.admission = admit_all(&w.job);
    let r = w.tick();
    assert!(starts(&r).iter().all(|s| s.1 == inc(1, 0)));
    assert_eq!(starts(&r).len(), 2);
    assert_eq!(w.status().restart_count, 0);
}

fn elastic_admission(workers: u32) -> AdmissionState {
    let placements = (0..workers).map(|i| placement(Role::Worker, i)).collect();
    AdmissionState::Admitted(admission(placements))
}

#[test]
fn elastic_job_resizes_between_min_and_max_without_restarting() {
    let mut j = job(Framework::PyTorch, &[(Role::Worker, 2, None)]);
    j.spec.elastic = Some(ElasticPolicy {
        min_replicas: Some(2),
        max_replicas: Some(4),
        ..Default::default()
    });
    let mut w = World::new(j);
    w.admission = elastic_admission(2);
    assert_eq!(starts(&w.tick()).len(), 2);
    w.all(ReplicaPhase::Running);
    w.tick();
    // The scheduler offers capacity: two more workers join.
    w.admission = elastic_admission(4);
    let r = w.tick();
    assert_eq!(
        starts(&r),
        vec![
            (id(Role::Worker, 2), inc(0, 0)),
            (id(Role::Worker, 3), inc(0, 0))
        ]
    );
    assert!(stops(&r).is_empty());
    w.all(ReplicaPhase::Running);
    w.tick();
    // It takes one back.
    w.admission = elastic_admission(3);
    let r = w.tick();
    assert_eq!(
        stops(&r),
        vec![(id(Role::Worker, 3), inc(0, 0), true, StopReason::ScaleDown)]
    );
    assert!(starts(&r).is_empty());
    assert_eq!(w.status().restart_count, 0);
    w.tick();
    assert!(w.cond(ConditionType::Running));
    // Out of bounds: the admission is unusable; what runs keeps running.
    w.admission = elastic_admission(5);
    let r = w.tick();
    assert!(r.actions.is_empty(), "{r:?}");
    assert_eq!(w.reason(ConditionType::Admitted), "PlacementIncomplete");
    // An elastic worker that fails restarts alone.
    w.admission = elastic_admission(3);
    w.tick();
    w.set(id(Role::Worker, 1), error(1));
    let r = w.tick();
    assert_eq!(
        stops(&r),
        vec![(id(Role::Worker, 1), inc(0, 0), true, StopReason::Restart)]
    );
}

#[test]
fn mpi_launcher_waits_for_workers_when_asked() {
    let mut j = job(
        Framework::Mpi,
        &[(Role::Launcher, 1, None), (Role::Worker, 2, None)],
    );
    j.spec.mpi = Some(MpiOptions {
        launcher_creation_policy: Some(LauncherCreationPolicy::WaitForWorkersReady),
        ..Default::default()
    });
    let mut w = World::new(j);
    w.admission = admit_all(&w.job);
    let r = w.tick();
    assert_eq!(
        starts(&r),
        vec![
            (id(Role::Worker, 0), inc(0, 0)),
            (id(Role::Worker, 1), inc(0, 0))
        ]
    );
    w.all(ReplicaPhase::Running);
    let r = w.tick();
    assert_eq!(starts(&r), vec![(id(Role::Launcher, 0), inc(0, 0))]);
}

#[test]
fn running_replicas_without_an_admission_are_stopped() {
    let mut w = World::new(pytorch(1));
    w.replicas
        .insert((id(Role::Worker, 0), inc(0, 0)), ReplicaPhase::Running);
    let r = w.tick();
    assert_eq!(
        stops(&r),
        vec![(id(Role::Worker, 0), inc(0, 0), true, StopReason::Stale)]
    );
}

#[test]
fn incarnation_label_round_trips() {
    let i = Incarnation {
        attempt: 3,
        retry: 1,
    };
    assert_eq!(i.to_string(), "3.1");
    assert_eq!("3.1".parse::<Incarnation>(), Ok(i));
    assert!("3".parse::<Incarnation>().is_err());
    assert!("a.b".parse::<Incarnation>().is_err());
}

#[test]
fn status_stores_lifecycle_fields_in_camel_case() {
    let mut w = World::new(job(
        Framework::TensorFlow,
        &[
            (Role::Ps, 1, Some(RestartPolicy::OnFailure)),
            (Role::Worker, 1, None),
        ],
    ));
    w.run_all();
    w.set(id(Role::Ps, 0), error(1));
    w.tick();
    let v = serde_json::to_value(w.status()).unwrap();
    assert_eq!(v["restartCount"], 1);
    assert_eq!(v["replicaRetries"]["ps-0"], 1);
    assert!(v["backoffUntil"].is_string());
    assert!(v.get("attempt").is_none(), "zero is omitted");
    assert!(
        v["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Restarting")
    );
}

mod support {
    // A fake shell for lifecycle tests: it keeps the replicas it was told to start, applies
    // actions, stores the status the way a store would (serialized and read back), and lets a
    // test move replicas between phases and the clock forward.
    #![allow(dead_code)]

    use std::collections::BTreeMap;
    use std::time::Duration;

    use corral_api::training_job::{
        ConditionStatus, ConditionType, Framework, ReplicaSpec, ReplicaTemplate, RestartPolicy,
        Role, TrainingJob, TrainingJobSpec, TrainingJobStatus,
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
}
