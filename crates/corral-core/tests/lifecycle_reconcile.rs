//! Table-driven tests of the job lifecycle state machine (`corral_core::lifecycle`) from
//! admission to cleanup: starting replicas in role order, success policies, terminal jobs,
//! clean-pod policy and TTL, suspend and resume, elastic resizing, the MPI launcher's
//! order, stray replicas, and what is stored. Failures, restarts and preemption are in
//! `lifecycle_failures.rs`. A fake shell (`lifecycle_world::World`) applies the actions and
//! stores the status as JSON between reconciles, as a real store would.

use std::time::Duration;

use corral_api::training_job::{
    CleanPodPolicy, ConditionType, ElasticPolicy, Framework, LauncherCreationPolicy, MpiOptions,
    RestartPolicy, Role, SuccessPolicy, TrainingJob,
};
use corral_core::lifecycle::{
    Action, AdmissionState, Incarnation, ObservedReplica, ReplicaPhase, StopReason,
};

mod lifecycle_world;

use lifecycle_world::*;

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
