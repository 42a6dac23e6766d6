//! An elastic PyTorch job through the control plane and a fake shell: admitted at the size
//! that fits, grown when another job ends, shrunk for a higher-priority job (replica 0, the
//! rendezvous host, kept), each resize one `Resized` event, and it still succeeds.

use corral_api::progress::ProgressReport;
use corral_api::training_job::Role;
use corral_core::control::{ControlConfig, ControlPlane};
use corral_core::lifecycle::{JobState, ReplicaPhase};
use plane_world::shell::FakeShell;
use plane_world::{cluster, config, job, record};

mod plane_world;

fn elastic_job(name: &str, min: u32, max: u32) -> corral_api::TrainingJob {
    let mut j = job(name, min, 1, Some("low"));
    j.spec.elastic = Some(corral_api::training_job::ElasticPolicy {
        min_replicas: Some(min),
        max_replicas: Some(max),
        ..Default::default()
    });
    j
}

fn dwell_config(seconds: u64) -> ControlConfig {
    let mut c = config();
    c.scheduler.resize_dwell_ms = seconds * 1000;
    c
}

fn resized_messages(shell: &FakeShell, key: &str) -> Vec<String> {
    shell
        .log
        .iter()
        .flat_map(|s| &s.events)
        .filter(|e| e.job == key && e.reason == "Resized")
        .map(|e| e.message.clone())
        .collect()
}

fn workers(shell: &FakeShell, key: &str) -> Vec<u32> {
    let mut v: Vec<u32> = shell
        .running_replicas(key)
        .into_iter()
        .filter(|(id, _)| id.role == Role::Worker)
        .map(|(id, _)| id.index)
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn an_elastic_job_grows_when_room_frees_and_shrinks_for_higher_priority_work() {
    let plane = ControlPlane::new(cluster(3), dwell_config(10)).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("other", 2, 1, Some("low")), 1))
        .expect("submit other");
    shell.run(1);
    shell
        .plane
        .submit(record(elastic_job("el", 1, 3), 2))
        .expect("submit el");
    shell.run(1);
    assert_eq!(shell.state("team/el"), JobState::Running);
    assert_eq!(workers(&shell, "team/el"), [0], "1 GPU was left");
    let rendezvous = shell.gpus_of("team/el", 0);

    // other ends: el grows into its 2 GPUs once its dwell has passed, one event.
    for (id, inc) in shell.running_replicas("team/other") {
        shell.end("team/other", id, inc, ReplicaPhase::Succeeded);
    }
    shell.run(1);
    assert_eq!(workers(&shell, "team/el"), [0], "within the dwell");
    shell.run(10);
    assert_eq!(workers(&shell, "team/el"), [0, 1, 2]);
    assert_eq!(
        resized_messages(&shell, "team/el"),
        ["grew from 1 to 3 worker replicas into free GPUs"]
    );
    assert!(!shell.shared_a_gpu);

    // A high-priority job of 2 GPUs: el shrinks to 1 (replica 0 stays); nothing preempted.
    shell.run(10);
    shell
        .plane
        .submit(record(job("urgent", 2, 1, Some("high")), 30))
        .expect("submit urgent");
    shell.run(1);
    assert_eq!(shell.state("team/urgent"), JobState::Running);
    assert_eq!(workers(&shell, "team/el"), [0]);
    assert_eq!(shell.gpus_of("team/el", 0), rendezvous);
    assert_eq!(
        resized_messages(&shell, "team/el")[1],
        "shrank from 3 to 1 worker replicas to make room for team/urgent (priority 100)"
    );
    assert!(!shell.events("team/el").contains(&"Preempted"));
    assert_eq!(shell.state("team/el"), JobState::Running);
    assert!(!shell.shared_a_gpu);

    // el finishes at its size: its worker 0 succeeds (no master: every worker decides).
    let replicas = shell.running_replicas("team/el");
    for (id, inc) in replicas {
        shell.end("team/el", id, inc, ReplicaPhase::Succeeded);
    }
    shell.run(1);
    assert_eq!(shell.state("team/el"), JobState::Succeeded);
    // Only the shrink stopped replicas of el: workers 2 and 1, never 0.
    let stopped: Vec<&String> = shell.stops.iter().map(|(j, _)| j).collect();
    assert_eq!(stopped.iter().filter(|j| **j == "team/el").count(), 2);
}

#[test]
fn an_elastic_job_succeeds_with_worker_0_and_its_late_workers_stop() {
    // Worker 0 hosts the rendezvous: once it succeeded, workers that joined after the
    // group finished could never meet anyone; they are stopped, the job has succeeded.
    let plane = ControlPlane::new(cluster(3), dwell_config(10)).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(elastic_job("el", 1, 3), 1))
        .expect("submit el");
    shell.run(1);
    assert_eq!(workers(&shell, "team/el"), [0, 1, 2]);
    let (id, inc) = shell
        .running_replicas("team/el")
        .into_iter()
        .find(|(id, _)| id.index == 0)
        .expect("worker 0");
    shell.end("team/el", id, inc, ReplicaPhase::Succeeded);
    shell.run(1);
    assert_eq!(shell.state("team/el"), JobState::Succeeded);
    assert!(workers(&shell, "team/el").is_empty());
}

/// Tenants are walled off in what a job reads too: an elastic job shrunk for a job of
/// another namespace is told that much, never that job's name (the operator makes it an
/// Event in the job's namespace; the embedded API shows it to the job's token).
#[test]
fn an_elastic_job_shrunk_for_another_namespace_does_not_learn_its_name() {
    let plane = ControlPlane::new(cluster(3), dwell_config(0)).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(elastic_job("el", 1, 3), 1))
        .expect("submit el");
    shell.run(1);
    assert_eq!(workers(&shell, "team/el"), [0, 1, 2]);
    let mut rival = job("secret-launch", 2, 1, Some("high"));
    rival.metadata.namespace = Some("rivals".into());
    shell
        .plane
        .submit(record(rival, 2))
        .expect("submit the rival");
    shell.run(1);
    assert_eq!(shell.state("rivals/secret-launch"), JobState::Running);
    assert_eq!(workers(&shell, "team/el"), [0]);
    let messages = resized_messages(&shell, "team/el");
    assert_eq!(
        messages.last().map(String::as_str),
        Some(
            "shrank from 3 to 1 worker replicas to make room for a job of another namespace \
             (priority 100)"
        ),
        "{messages:?}"
    );
}

/// Free GPUs go to the elastic job that buys the most with them, as the jobs themselves
/// measure it (their progress reports' samplesPerSecond, per GPU held), not by arrival.
#[test]
fn the_elastic_job_that_reports_more_samples_per_gpu_grows_first() {
    for (faster, slower) in [("b", "a"), ("a", "b")] {
        let plane = ControlPlane::new(cluster(4), dwell_config(0)).expect("plane");
        let mut shell = FakeShell::new(plane);
        shell
            .plane
            .submit(record(job("other", 2, 1, Some("low")), 1))
            .expect("submit other");
        shell.run(1);
        for (name, at) in [("a", 2), ("b", 3)] {
            shell
                .plane
                .submit(record(elastic_job(name, 1, 3), at))
                .expect("submit");
            shell.run(1);
        }
        assert_eq!(workers(&shell, "team/a"), [0]);
        assert_eq!(workers(&shell, "team/b"), [0]);
        for (name, rate) in [(faster, 900.0), (slower, 300.0)] {
            shell.plane.observe_progress(
                &format!("team/{name}"),
                format!("{name}-worker-0"),
                ProgressReport {
                    step: 10,
                    samples_per_second: Some(rate),
                    ..ProgressReport::default()
                },
            );
        }
        shell.run(1);
        // other ends and a rigid job takes one of its 2 GPUs: the other goes to the faster
        // job (of two of one size), whatever the order of arrival.
        for (id, inc) in shell.running_replicas("team/other") {
            shell.end("team/other", id, inc, ReplicaPhase::Succeeded);
        }
        shell
            .plane
            .submit(record(job("filler", 1, 1, Some("low")), 4))
            .expect("submit filler");
        shell.run(2);
        assert_eq!(
            workers(&shell, &format!("team/{faster}")),
            [0, 1],
            "{faster} reported more samples a GPU"
        );
        assert_eq!(workers(&shell, &format!("team/{slower}")), [0]);
        assert!(!shell.shared_a_gpu);
    }
}
