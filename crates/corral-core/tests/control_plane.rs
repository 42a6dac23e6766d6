//! The control plane end to end with a fake executor that starts and stops replicas at
//! once: arrivals, a gang that fits and one that waits, one that can never fit, a replica
//! failure and restart, a preemption with the configured grace period, suspend and resume,
//! delete, and a restore that drops an admission the machine can no longer hold.

use std::time::Duration;

use corral_api::training_job::ConditionType;
use corral_core::control::{
    Change, ControlConfig, ControlError, ControlPlane, Effect, HeldAdmission, RestoredJob,
};
use corral_core::lifecycle::{
    Action, FailureReason, Incarnation, JobState, ObservedReplica, ReplicaId, ReplicaPhase,
    conditions,
};
use jiff::Timestamp;
use plane_world::shell::FakeShell;
use plane_world::{cluster, config, job, record};

mod plane_world;

#[test]
fn a_scenario_of_arrivals_failure_preemption_suspend_and_delete() {
    let plane = ControlPlane::new(cluster(4), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("small", 2, 1, Some("low")), 1))
        .expect("submit small");
    shell
        .plane
        .submit(record(job("wide", 4, 1, Some("low")), 2))
        .expect("submit wide");
    // huge can never fit this cluster of fixed nodes: refused at submit, naming the field.
    let refused = shell.plane.submit(record(job("huge", 2, 8, None), 3));
    assert!(
        matches!(&refused, Err(ControlError::Invalid { message: m, .. })
            if m.starts_with("spec.replicas.worker.resources.gpu: this cluster can never run the job")),
        "{refused:?}"
    );
    assert!(shell.plane.job("team/huge").is_none());
    shell.run(1);

    // small fits and runs; wide waits for room.
    assert_eq!(shell.state("team/small"), JobState::Running);
    assert_eq!(shell.running("team/small"), 2);
    assert_eq!(shell.events("team/small"), ["Admitted", "Running"]);
    assert_eq!(shell.admission_changes("team/small"), [true]);
    assert_eq!(shell.state("team/wide"), JobState::Queued);
    let reason = shell.plane.pending_reason("team/wide").expect("a reason");
    assert!(reason.contains("4 GPUs"), "{reason}");
    let wide = shell.plane.job("team/wide").and_then(|j| j.status.clone());
    let queued = wide
        .as_ref()
        .and_then(|s| conditions::get(s, ConditionType::Queued));
    assert_eq!(queued.map(|c| c.message.as_str()), Some(reason.as_str()));

    // A worker of small fails: OnFailure restarts it alone? PyTorch restarts the gang.
    let failed = ObservedReplica::new(
        ReplicaId::new(corral_api::training_job::Role::Worker, 1),
        Incarnation {
            attempt: 0,
            retry: 0,
        },
        ReplicaPhase::Failed {
            exit_code: 1,
            reason: FailureReason::Error,
        },
    );
    shell.plane.observe("team/small", failed);
    shell.run(1);
    let small = shell
        .plane
        .job("team/small")
        .and_then(|j| j.status.clone())
        .expect("status");
    assert_eq!(small.restart_count, 1);
    assert!(shell.events("team/small").contains(&"Restarting"));
    // After its back-off the gang runs again, as a new attempt.
    shell.run(120);
    assert_eq!(shell.state("team/small"), JobState::Running);
    assert_eq!(shell.running("team/small"), 2);

    // A high-priority gang preempts small (and not the waiting wide) with the grace period.
    shell.stops.clear();
    shell
        .plane
        .submit(record(job("urgent", 4, 1, Some("high")), 4))
        .expect("submit urgent");
    shell.run(1);
    assert!(
        shell.events("team/small").contains(&"Preempted"),
        "urgent: {:?} {:?} {:?}",
        shell.state("team/urgent"),
        shell.plane.pending_reason("team/urgent"),
        shell.events("team/small")
    );
    assert!(shell.events("team/small").contains(&"Requeued"));
    assert!(
        shell
            .stops
            .iter()
            .any(|(j, g)| j == "team/small" && *g == Duration::from_secs(7)),
        "{:?}",
        shell.stops
    );
    assert_eq!(shell.running("team/small"), 0);
    assert_eq!(shell.state("team/urgent"), JobState::Running);
    assert_eq!(shell.state("team/small"), JobState::Queued);
    let small = shell
        .plane
        .job("team/small")
        .and_then(|j| j.status.clone())
        .expect("status");
    assert_eq!(small.preemption_count, 1);
    // A gang restart keeps the admission; the preemption gives it back.
    assert_eq!(shell.admission_changes("team/small"), [true, false]);

    // Suspend urgent: its replicas stop with the configured grace period (not 30 s), and
    // wide, which waits with less attained service than small, is admitted in its place.
    shell.stops.clear();
    let (stored, effect) = shell
        .plane
        .set_suspend("team/urgent", true)
        .expect("suspend");
    assert!(stored.spec.run_policy.suspend);
    assert_eq!(effect, Effect::Made);
    // A second suspend changes nothing and says so.
    let (_, again) = shell
        .plane
        .set_suspend("team/urgent", true)
        .expect("suspend again");
    assert_eq!(again, Effect::AlreadySo);
    shell.run(1);
    assert_eq!(shell.state("team/urgent"), JobState::Suspended);
    assert!(
        shell
            .stops
            .iter()
            .all(|(j, g)| j != "team/urgent" || *g == Duration::from_secs(7))
    );
    assert!(shell.stops.iter().any(|(j, _)| j == "team/urgent"));
    assert_eq!(shell.running("team/urgent"), 0);
    assert_eq!(shell.state("team/wide"), JobState::Running);
    assert_eq!(shell.state("team/small"), JobState::Queued);

    // Resume: urgent outranks small again.
    shell
        .plane
        .set_suspend("team/urgent", false)
        .expect("resume");
    shell.run(1);
    assert_eq!(shell.state("team/urgent"), JobState::Running);
    assert!(shell.events("team/urgent").contains(&"Resumed"));

    // Delete urgent: replicas stop, then it is removed, and the next job runs.
    assert_eq!(shell.plane.delete("team/urgent"), Ok(Effect::Made));
    assert_eq!(shell.plane.delete("team/urgent"), Ok(Effect::AlreadySo));
    shell.run(1);
    assert!(shell.plane.job("team/urgent").is_none());
    assert!(
        shell
            .log
            .iter()
            .flat_map(|s| &s.changes)
            .any(|c| matches!(c, Change::Removed { job } if job == "team/urgent"))
    );
    assert_eq!(shell.running("team/urgent"), 0);
    assert_eq!(shell.state("team/wide"), JobState::Running);
    assert!(shell.events("team/wide").contains(&"Preempted"));

    // The ledger counted GPU-seconds per job and per queue.
    let small_service: f64 = shell
        .plane
        .ledger()
        .job("team/small")
        .map(|s| s.values().sum())
        .unwrap_or(0.0);
    assert!(small_service > 0.0);
    assert!(shell.plane.ledger().queues()["default"]["H100"] >= small_service);
}

#[test]
fn restore_drops_only_the_admission_the_scheduler_names() {
    // Two jobs whose names share a prefix (`train`, `train-2`): the machine now has 2 GPUs,
    // and only the job that no longer fits loses its admission.
    let placement = |job: &str, gpus: &[u32]| HeldAdmission {
        admission: corral_core::sched::Admission {
            job: job.to_string(),
            pool: "H100".into(),
            gpu_type: Some("H100".into()),
            placements: vec![corral_core::sched::ReplicaPlacement {
                role: "worker".into(),
                index: 0,
                node: "node-a".into(),
                gpu_indices: gpus.to_vec(),
            }],
        },
        admitted_at: 5,
    };
    let restored = |name: &str, gpus: u32, held: HeldAdmission| RestoredJob {
        record: record(job(name, 1, gpus, None), 1),
        admission: Some(held),
        replicas: Vec::new(),
        deleting: false,
        service: None,
    };
    let jobs = vec![
        restored("train", 1, placement("team/train", &[0])),
        restored("train-2", 3, placement("team/train-2", &[1, 2, 3])),
    ];
    let (plane, step) = ControlPlane::restore(
        cluster(2),
        config(),
        jobs,
        Timestamp::from_second(10).expect("time"),
    )
    .expect("restore");
    assert!(plane.admission("team/train").is_some());
    assert!(plane.admission("team/train-2").is_none());
    assert_eq!(
        step.changes,
        [Change::Admission {
            job: "team/train-2".into(),
            admission: None
        }]
    );
    assert!(
        step.events
            .iter()
            .any(|e| e.job == "team/train-2" && e.reason == "AdmissionLost")
    );
}

#[test]
fn the_implicit_default_queue_admits_jobs_that_name_no_queue() {
    let plane = ControlPlane::new(cluster(1), ControlConfig::default()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("plain", 1, 1, None), 1))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.state("team/plain"), JobState::Running);
    // The default grace period is 30 s.
    assert_eq!(
        shell.plane.grace_period("team/plain"),
        Some(Duration::from_secs(30))
    );
}

#[test]
fn the_same_inputs_give_the_same_steps() {
    let run = || {
        let plane = ControlPlane::new(cluster(4), config()).expect("plane");
        let mut shell = FakeShell::new(plane);
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            shell
                .plane
                .submit(record(job(name, 2, 1, None), i as u64))
                .expect("submit");
        }
        shell.run(1);
        shell.plane.delete("team/a").expect("delete");
        shell.run(1);
        shell.log
    };
    assert_eq!(run(), run());
}

#[test]
fn a_job_waiting_for_protected_victims_says_until_when() {
    let mut config = config();
    config.scheduler.preemption_protection_ms = 300_000;
    let plane = ControlPlane::new(cluster(2), config).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("low", 2, 1, Some("low")), 1))
        .expect("submit low");
    shell.run(1);
    assert_eq!(shell.state("team/low"), JobState::Running);
    shell
        .plane
        .submit(record(job("high", 2, 1, Some("high")), 2))
        .expect("submit high");
    shell.run(10);
    let reason = shell.plane.pending_reason("team/high").expect("waits");
    // `low` was admitted at t=1,000,001 s; its protection ends 300 s later.
    let until = Timestamp::from_second(1_000_301).expect("time").to_string();
    assert!(
        reason.contains("protected from preemption until") && reason.contains(&until),
        "{reason}"
    );
    // Once the protection has passed, the high-priority job preempts.
    shell.run(300);
    assert_eq!(shell.state("team/high"), JobState::Running);
    assert!(shell.events("team/low").contains(&"Preempted"));
}

#[test]
fn a_step_asks_for_each_start_once_and_a_restored_move_keeps_its_new_placement() {
    let plane = ControlPlane::new(cluster(4), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("gang", 4, 1, None), 1))
        .expect("submit");
    let step = shell.plane.step(shell.ts());
    let starts = step
        .actions
        .iter()
        .filter(|a| matches!(a.action, Action::Start { .. }))
        .count();
    assert_eq!(starts, 4, "{:?}", step.actions);
    // A job stopping (Admitted and Queued) with an admission stored is moving: restored, it
    // holds that admission rather than giving it back.
    let mut moving = job("mover", 1, 1, None);
    let mut status = corral_api::TrainingJobStatus::default();
    let at = Timestamp::from_second(5).expect("time");
    for t in [ConditionType::Admitted, ConditionType::Queued] {
        conditions::set(
            &mut status,
            t,
            corral_api::training_job::ConditionStatus::True,
            "Moving",
            "moving to a faster pool".into(),
            at,
        );
    }
    moving.status = Some(status);
    let to = HeldAdmission {
        admission: corral_core::sched::Admission {
            job: "team/mover".into(),
            pool: "H100".into(),
            gpu_type: Some("H100".into()),
            placements: vec![corral_core::sched::ReplicaPlacement {
                role: "worker".into(),
                index: 0,
                node: "node-a".into(),
                gpu_indices: vec![2],
            }],
        },
        admitted_at: 5,
    };
    let restored = RestoredJob {
        record: record(moving, 1),
        admission: Some(to.clone()),
        replicas: Vec::new(),
        deleting: false,
        service: None,
    };
    let (plane, step) =
        ControlPlane::restore(cluster(4), config(), vec![restored], at).expect("restore");
    assert!(step.changes.is_empty(), "{:?}", step.changes);
    assert_eq!(plane.admission("team/mover"), Some(&to));
}

/// A finished job leaves the plane but for its name: the plane's memory and every step
/// cost what the live jobs cost, whatever the history; the name stays taken until the
/// user deletes the job, which is then removed like any other.
#[test]
fn a_finished_job_is_retired_to_its_name_and_can_still_be_deleted() {
    let plane = ControlPlane::new(cluster(4), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("done", 2, 1, None), 1))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.running("team/done"), 2);
    for (id, inc) in shell.running_replicas("team/done") {
        shell.end("team/done", id, inc, ReplicaPhase::Succeeded);
    }
    shell.run(1);
    let retired: Vec<&String> = shell
        .log
        .iter()
        .flat_map(|s| &s.changes)
        .filter_map(|c| match c {
            Change::Retired { job } => Some(job),
            _ => None,
        })
        .collect();
    assert_eq!(
        retired,
        ["team/done"],
        "retired once, after its last status"
    );
    assert!(shell.plane.is_retired("team/done"));
    assert!(shell.plane.job("team/done").is_none());
    assert_eq!(shell.plane.admissions().count(), 0);
    assert_eq!(shell.state("team/done"), JobState::Succeeded);
    assert_eq!(shell.plane.unsettled(), 0);

    // The name stays taken; a finished job cannot be resumed.
    let again = shell.plane.submit(record(job("done", 1, 1, None), 2));
    assert!(
        matches!(again, Err(ControlError::AlreadyExists(_))),
        "{again:?}"
    );
    let resumed = shell.plane.set_suspend("team/done", false);
    assert!(
        matches!(&resumed, Err(ControlError::Conflict(m)) if m.contains("has finished")),
        "{resumed:?}"
    );

    // Deleted: removed in the next step, and the name is free again.
    shell.plane.delete("team/done").expect("delete");
    shell.run(1);
    assert!(matches!(
        shell.log.last().map(|s| s.changes.as_slice()),
        Some([Change::Removed { job }]) if job == "team/done"
    ));
    assert!(!shell.plane.is_retired("team/done"));
    shell
        .plane
        .submit(record(job("done", 1, 1, None), 3))
        .expect("the name is free after the delete");
}

#[test]
fn a_queue_spends_its_quota_only_on_the_namespaces_it_lists() {
    use corral_core::sched::{PoolQuota, QueueConfig, ResourceAmount};
    let mut snapshot = cluster(8);
    snapshot.queues = vec![QueueConfig {
        name: "team-vision".into(),
        cohort: None,
        weight: 1,
        namespaces: vec!["vision".into()],
        quotas: [(
            "H100".to_string(),
            PoolQuota {
                nominal: ResourceAmount::gpus(8),
                borrowing_limit: None,
                lending_limit: None,
            },
        )]
        .into(),
    }];
    let plane = ControlPlane::new(snapshot, config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    // `job()` is in namespace `team`; a second copy in `vision`.
    let mut foreign = job("steal", 1, 1, None);
    foreign.spec.queue = Some("team-vision".into());
    let mut own = foreign.clone();
    own.metadata.name = "own".into();
    own.metadata.namespace = Some("vision".into());
    shell.plane.submit(record(foreign, 1)).expect("submit");
    shell.plane.submit(record(own, 2)).expect("submit");
    shell.run(1);
    assert_eq!(shell.state("vision/own"), JobState::Running);
    assert_eq!(shell.state("team/steal"), JobState::Queued);
    let status = shell
        .job("team/steal")
        .and_then(|j| j.status)
        .expect("status");
    assert!(conditions::is_true(&status, ConditionType::Unschedulable));
    assert_eq!(status.blocked_by, ["NamespaceNotAllowed"]);
    let queued = conditions::get(&status, ConditionType::Queued).expect("Queued condition");
    assert!(
        queued
            .message
            .contains("queue team-vision admits only jobs of namespace vision, not of team"),
        "{}",
        queued.message
    );
    assert!(shell.events("team/steal").contains(&"Unschedulable"));
    // Announced once, not every pass.
    shell.run(60);
    shell.run(60);
    let unschedulable = shell
        .events("team/steal")
        .iter()
        .filter(|e| **e == "Unschedulable")
        .count();
    assert_eq!(unschedulable, 1);
}

#[test]
fn a_launch_the_platform_refuses_fails_the_job_and_releases_its_gpus() {
    use corral_core::control::LaunchRejection;
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("bad", 2, 4, None), 1))
        .expect("submit");
    shell
        .plane
        .submit(record(job("next", 1, 8, None), 2))
        .expect("submit");
    // The shell persists the admission and tries to start the gang; the platform starts
    // worker-0 and refuses worker-1 (e.g. 422: a toleration operator `Sometimes`).
    shell.now += 1;
    let step = shell.plane.step(shell.ts());
    shell.persist(&step);
    let starts: Vec<Action> = step
        .actions
        .iter()
        .filter(|a| a.job == "team/bad")
        .map(|a| a.action.clone())
        .collect();
    assert_eq!(starts.len(), 2);
    shell.log.push(step.clone());
    shell.apply("team/bad", starts[0].clone());
    let Action::Start {
        replica: refused,
        incarnation: inc,
        ..
    } = starts[1]
    else {
        panic!("a start: {:?}", starts[1]);
    };
    let message = "Pod \"bad-worker-1\" is invalid: spec.tolerations[0].operator: Unsupported value: \"Sometimes\"";
    // A rejection of an older incarnation is stale and changes nothing.
    shell.plane.launch_rejected(
        "team/bad",
        LaunchRejection {
            replica: refused,
            incarnation: Incarnation {
                attempt: inc.attempt + 7,
                retry: 0,
            },
            message: "stale".into(),
        },
    );
    shell.run(0);
    assert_ne!(shell.state("team/bad"), JobState::Failed);
    shell.plane.launch_rejected(
        "team/bad",
        LaunchRejection {
            replica: refused,
            incarnation: inc,
            message: message.into(),
        },
    );
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::Failed);
    let status = shell
        .job("team/bad")
        .and_then(|j| j.status)
        .expect("status");
    let failed = conditions::get(&status, ConditionType::Failed).expect("Failed");
    assert_eq!(failed.reason, "LaunchRejected");
    assert!(
        failed.message.contains("bad-worker-1"),
        "{}",
        failed.message
    );
    assert!(failed.message.contains(message), "{}", failed.message);
    assert_eq!(status.gpus, 0);
    assert!(shell.events("team/bad").contains(&"Failed"));
    // The replica that did start is stopped and the admission given back: the 8-GPU job
    // that waited behind it runs.
    assert_eq!(shell.running("team/bad"), 0);
    assert_eq!(shell.admission_changes("team/bad").last(), Some(&false));
    shell.run(1);
    assert_eq!(shell.state("team/next"), JobState::Running);
}

#[test]
fn a_replica_removed_from_outside_restarts_the_gang_counted_and_announced() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("ddp", 2, 2, None), 1))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.state("team/ddp"), JobState::Running);
    let before = shell
        .job("team/ddp")
        .and_then(|j| j.status)
        .expect("status");
    assert_eq!(before.restart_count, 0);
    // `kubectl delete pod ddp-worker-1` (or a drain): the replica's record is gone.
    let (lost, inc) = *shell.live["team/ddp"]
        .keys()
        .find(|(id, _)| id.index == 1)
        .expect("worker-1");
    shell
        .live
        .get_mut("team/ddp")
        .map(|l| l.remove(&(lost, inc)));
    shell.plane.forget_replica("team/ddp", lost, inc);
    shell.run(1);
    let status = shell
        .job("team/ddp")
        .and_then(|j| j.status)
        .expect("status");
    assert_eq!(status.restart_count, 1, "the loss is counted as a restart");
    assert_eq!(
        status.attempt,
        before.attempt + 1,
        "the whole gang restarts"
    );
    let restarting = conditions::get(&status, ConditionType::Restarting).expect("Restarting");
    assert!(
        restarting.message.contains("ddp-worker-1 vanished"),
        "{}",
        restarting.message
    );
    assert!(shell.events("team/ddp").contains(&"Restarting"));
    // Not in the same incarnation: every replica of the new attempt starts after back-off.
    shell.run(60);
    assert_eq!(shell.state("team/ddp"), JobState::Running);
    let live: Vec<Incarnation> = shell.live["team/ddp"]
        .iter()
        .filter(|(_, r)| r.phase == ReplicaPhase::Running)
        .map(|((_, i), _)| *i)
        .collect();
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|i| i.attempt == before.attempt + 1));
}
