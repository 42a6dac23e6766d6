//! A start the platform cannot make (an image it cannot pull, a command that does not exist)
//! is decided once, in the core, for every shell: the job's other replicas stop, it gives its
//! admission back at once (its GPUs go to a job that can run), it waits out a back-off of
//! 10 s doubling to 5 min in state BackOff (`Queued` reason and `blockedBy` StartBackOff, a
//! Warning event once), then re-enters its queue; never counted against backoffLimit; the
//! count is in the job's status, so a plane rebuilt from it (the operator, each pass) goes on
//! counting; a start that succeeded resets it.

use std::time::Duration;

use corral_api::TrainingJob;
use corral_api::training_job::{ConditionType, Role};
use corral_core::control::{ControlConfig, ControlPlane, JobRecord, RestoredJob, StartFailure};
use corral_core::lifecycle::{
    Action, FailureReason, Incarnation, JobState, ObservedReplica, ReplicaId, ReplicaPhase,
    StopReason, conditions,
};
use corral_core::sched::{ClusterSnapshot, Node};
use plane_world::shell::FakeShell;

mod plane_world;

const PULL: &str = "ImagePullBackOff: Back-off pulling image \"registry.local/nope:1\"";

fn job(name: &str, workers: u32, gpus: u32, backoff_limit: u32) -> TrainingJob {
    let yaml = format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: team}}
spec:
  framework: pytorch
  replicas:
    worker:
      count: {workers}
      restartPolicy: OnFailure
      resources: {{gpu: {gpus}, cpu: 1, memory: 1Gi}}
      template: {{command: [train]}}
  runPolicy: {{backoffLimit: {backoff_limit}}}
"
    );
    serde_saphyr::from_str(&yaml).expect("test job")
}

fn cluster(gpus: u32) -> ClusterSnapshot {
    ClusterSnapshot {
        nodes: vec![Node::new(
            "node-a",
            Some("H100".into()),
            gpus,
            64_000,
            256 << 30,
        )],
        ..ClusterSnapshot::default()
    }
}

fn config() -> ControlConfig {
    ControlConfig {
        grace_period: Some(Duration::from_secs(5)),
        ..ControlConfig::default()
    }
}

fn record(job: TrainingJob, submitted: u64) -> JobRecord {
    JobRecord {
        uid: format!("uid-{}", job.metadata.name),
        job,
        submitted,
        hints: Default::default(),
    }
}

fn worker(i: u32) -> ReplicaId {
    ReplicaId::new(Role::Worker, i)
}

#[test]
fn a_start_that_cannot_succeed_backs_off_then_the_job_is_admitted_again() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.held.push("team/bad".into());
    shell
        .plane
        .submit(record(job("bad", 1, 4, 3), 1))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::Admitted);
    let (_, first) = shell.fail_last_start("team/bad", PULL);
    shell.run(0);

    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    let status = shell.status("team/bad");
    assert_eq!(status.phase, Some(JobState::BackOff));
    assert_eq!(status.start_failures, 1);
    assert_eq!(status.restart_count, 0);
    assert_eq!(status.blocked_by, ["StartBackOff"]);
    assert_eq!(status.gpus, 0);
    assert!(status.attempt > first.attempt, "its incarnation is stale");
    let queued = conditions::get(&status, ConditionType::Queued).expect("Queued");
    assert_eq!(queued.reason, "StartBackOff");
    assert!(
        queued.message.contains("bad-worker-0"),
        "{}",
        queued.message
    );
    assert!(queued.message.contains(PULL), "{}", queued.message);
    assert!(!conditions::is_true(&status, ConditionType::Admitted));
    assert_eq!(shell.backoff_left("team/bad"), Duration::from_secs(10));
    assert_eq!(shell.admission_changes("team/bad"), [true, false]);
    assert!(shell.plane.admission("team/bad").is_none());
    assert!(!shell.plane.is_pending("team/bad"), "out of the scheduler");
    // A Warning event once, with the platform's words.
    let warned: Vec<_> = shell
        .log
        .iter()
        .flat_map(|s| &s.events)
        .filter(|e| e.reason == "StartBackOff")
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].message.contains(PULL));
    // The plane asks to be stepped when the back-off ends.
    let wake = shell.log.iter().filter_map(|s| s.wake_in).min();
    assert_eq!(wake, Some(Duration::from_secs(10)));

    // Not before the back-off ends, with no more events.
    shell.run(9);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    assert_eq!(shell.admission_changes("team/bad"), [true, false]);
    assert_eq!(
        shell
            .events("team/bad")
            .iter()
            .filter(|e| **e == "StartBackOff")
            .count(),
        1
    );

    // Then admitted again, a new attempt; the next failure doubles the back-off.
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::Admitted);
    assert_eq!(shell.admission_changes("team/bad"), [true, false, true]);
    let (_, second) = shell.fail_last_start("team/bad", PULL);
    assert!(second.attempt > first.attempt);
    shell.run(0);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    assert_eq!(shell.status("team/bad").start_failures, 2);
    assert_eq!(shell.backoff_left("team/bad"), Duration::from_secs(20));

    // The image appears: the start succeeds. The count resets once the job has run a while
    // (a shell may report Running before the program is known to have started).
    shell.run(20);
    assert_eq!(shell.asked.len(), 3);
    shell.carry_out(2);
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::Running);
    assert_eq!(shell.status("team/bad").start_failures, 2);
    assert_eq!(shell.status("team/bad").blocked_by, Vec::<String>::new());
    shell.run(60);
    assert_eq!(shell.status("team/bad").start_failures, 0);
    assert_eq!(shell.status("team/bad").restart_count, 0);
}

#[test]
fn the_gpus_of_a_job_that_cannot_start_go_at_once_to_a_job_that_can() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.held.push("team/bad".into());
    shell
        .plane
        .submit(record(job("bad", 2, 4, 3), 1))
        .expect("submit");
    shell
        .plane
        .submit(record(job("next", 1, 8, 3), 2))
        .expect("submit");
    shell.run(1);
    assert_eq!(shell.state("team/next"), JobState::Queued);
    // worker-0 of the gang started; worker-1's image cannot be pulled.
    let asked = shell.asked_starts();
    assert_eq!(asked.len(), 2);
    shell.carry_out(0);
    let (_, r0, _) = asked[0].clone();
    let (_, r1, i1) = asked[1].clone();
    assert_eq!((r0, r1), (worker(0), worker(1)));
    shell.plane.start_failed(
        "team/bad",
        StartFailure {
            replica: r1,
            incarnation: i1,
            exit_code: 125,
            message: "Error: initializing source docker://nope:1: connection refused".into(),
        },
    );
    shell.run(0);

    // The started replica was stopped for the back-off, the admission given back, and the
    // job waiting behind it admitted in the same pass.
    let stopped: Vec<StopReason> = shell
        .log
        .iter()
        .flat_map(|s| &s.actions)
        .filter_map(|a| match &a.action {
            Action::Stop {
                reason, replica, ..
            } if a.job == "team/bad" && *replica == r0 => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(stopped.first(), Some(&StopReason::StartBackOff));
    assert_eq!(shell.running("team/bad"), 0);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    assert_eq!(shell.admission_changes("team/bad"), [true, false]);
    assert_eq!(shell.state("team/next"), JobState::Running);
    assert_eq!(shell.status("team/next").gpus, 8);

    // After its back-off, bad waits in its queue for room like any job.
    shell.run(10);
    assert_eq!(shell.state("team/bad"), JobState::Queued);
    let status = shell.status("team/bad");
    assert!(conditions::is_true(&status, ConditionType::Queued));
    assert_ne!(status.blocked_by, ["StartBackOff"]);
    assert!(shell.plane.is_pending("team/bad"));
    assert!(shell.plane.pending_reason("team/bad").is_some());
}

#[test]
fn start_failures_are_never_counted_against_backoff_limit() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.held.push("team/bad".into());
    // backoffLimit 0: the first restart would fail the job.
    shell
        .plane
        .submit(record(job("bad", 1, 1, 0), 1))
        .expect("submit");
    shell.run(1);
    let mut waited = 0;
    for n in 1..=7u32 {
        shell.fail_last_start("team/bad", PULL);
        shell.run(0);
        let status = shell.status("team/bad");
        assert_eq!(shell.state("team/bad"), JobState::BackOff, "failure {n}");
        assert_eq!(status.start_failures, n);
        assert_eq!(status.restart_count, 0);
        assert!(!conditions::is_terminal(&status));
        let left = shell.backoff_left("team/bad");
        assert_eq!(
            left,
            Duration::from_secs(300).min(Duration::from_secs(10 << (n - 1)))
        );
        waited += left.as_secs();
        shell.run(i64::try_from(left.as_secs()).expect("seconds"));
        assert_eq!(shell.state("team/bad"), JobState::Admitted, "failure {n}");
    }
    assert_eq!(waited, 10 + 20 + 40 + 80 + 160 + 300 + 300);
}

#[test]
fn the_count_of_start_failures_is_durable_across_a_restore() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.held.push("team/bad".into());
    shell
        .plane
        .submit(record(job("bad", 1, 4, 3), 1))
        .expect("submit");
    shell.run(1);
    shell.fail_last_start("team/bad", PULL);
    shell.run(0);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);

    // The operator rebuilds the plane every pass from what it stored: no admission, no pod.
    let rebuild = |shell: &mut FakeShell| {
        let stored = shell.stored.get("team/bad").cloned().expect("stored");
        let restored = RestoredJob {
            record: record(stored, 1),
            admission: shell.plane.admission("team/bad").cloned(),
            replicas: shell
                .live
                .get("team/bad")
                .into_iter()
                .flatten()
                .map(|((id, inc), p)| ObservedReplica::new(*id, *inc, p.phase))
                .collect(),
            deleting: false,
            service: None,
        };
        let (plane, step) = ControlPlane::restore(cluster(8), config(), vec![restored], shell.ts())
            .expect("restore");
        shell.plane = plane;
        shell.persist(&step);
        shell.log.push(step);
    };
    rebuild(&mut shell);
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    assert_eq!(shell.status("team/bad").start_failures, 1);
    assert!(!shell.plane.is_pending("team/bad"));
    assert!(shell.plane.admission("team/bad").is_none());
    // Announced once, not once per rebuilt plane.
    rebuild(&mut shell);
    shell.run(1);
    assert_eq!(
        shell
            .events("team/bad")
            .iter()
            .filter(|e| **e == "StartBackOff")
            .count(),
        1
    );

    // The back-off ends by the stored time; the next failure counts on from the stored count.
    rebuild(&mut shell);
    shell.run(8);
    assert_eq!(shell.state("team/bad"), JobState::Admitted);
    rebuild(&mut shell);
    shell.fail_last_start("team/bad", PULL);
    shell.run(0);
    assert_eq!(shell.status("team/bad").start_failures, 2);
    assert_eq!(shell.backoff_left("team/bad"), Duration::from_secs(20));
    rebuild(&mut shell);
    shell.run(0);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    assert_eq!(shell.status("team/bad").start_failures, 2);
}

#[test]
fn a_start_failure_observed_without_words_backs_off_too_and_a_stale_one_is_ignored() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.held.push("team/bad".into());
    shell
        .plane
        .submit(record(job("bad", 1, 4, 3), 1))
        .expect("submit");
    shell.run(1);
    let (_, replica, inc) = shell.asked_starts().last().cloned().expect("asked");
    // An older incarnation's failure changes nothing.
    shell.plane.start_failed(
        "team/bad",
        StartFailure {
            replica,
            incarnation: Incarnation {
                attempt: inc.attempt + 3,
                retry: 0,
            },
            exit_code: 125,
            message: "stale".into(),
        },
    );
    shell.run(0);
    assert_eq!(shell.state("team/bad"), JobState::Admitted);
    // A shell that only observes the phase (a plane restored from pods) decides the same.
    shell.plane.observe(
        "team/bad",
        ObservedReplica::new(
            replica,
            inc,
            ReplicaPhase::Failed {
                exit_code: 127,
                reason: FailureReason::StartFailed,
            },
        ),
    );
    shell.run(0);
    assert_eq!(shell.state("team/bad"), JobState::BackOff);
    let status = shell.status("team/bad");
    assert_eq!(status.start_failures, 1);
    let queued = conditions::get(&status, ConditionType::Queued).expect("Queued");
    assert!(
        queued.message.contains("exit code 127"),
        "{}",
        queued.message
    );
}

#[test]
fn a_suspend_during_the_back_off_ends_it() {
    let plane = ControlPlane::new(cluster(8), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.held.push("team/bad".into());
    shell
        .plane
        .submit(record(job("bad", 1, 4, 3), 1))
        .expect("submit");
    shell.run(1);
    shell.fail_last_start("team/bad", PULL);
    shell.run(0);
    shell.plane.set_suspend("team/bad", true).expect("suspend");
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::Suspended);
    shell.plane.set_suspend("team/bad", false).expect("resume");
    shell.run(1);
    assert_eq!(shell.state("team/bad"), JobState::Admitted);
    assert_eq!(shell.status("team/bad").backoff_until, None);
}
