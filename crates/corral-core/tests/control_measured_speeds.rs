//! Type choice by measured throughput, in production as in simulation: a job that reported
//! its speed on the GPU types it ran on is placed by those speeds when it waits again, not by
//! the static table (which fills in the types it has not run on, scaled from one it has).

use std::collections::BTreeMap;

use corral_api::progress::ProgressReport;
use corral_core::control::ControlPlane;
use corral_core::sched::{ClusterSnapshot, Node};
use plane_world::shell::FakeShell;
use plane_world::{config, job, record};

mod plane_world;

/// One H100 and one A100, the table saying an H100 is three times an A100.
fn plane() -> ControlPlane {
    let cluster = ClusterSnapshot {
        nodes: vec![
            Node::new("h", Some("H100".into()), 1, 64_000, 256 << 30),
            Node::new("a", Some("A100".into()), 1, 64_000, 256 << 30),
        ],
        ..ClusterSnapshot::default()
    };
    let mut c = config();
    c.scheduler.gpu_type_speed = BTreeMap::from([("H100".into(), 3.0), ("A100".into(), 1.0)]);
    ControlPlane::new(cluster, c).expect("plane")
}

fn gpu_type(shell: &FakeShell, key: &str) -> Option<String> {
    shell
        .plane
        .admission(key)
        .and_then(|a| a.admission.gpu_type.clone())
}

fn report(shell: &mut FakeShell, rate: f64) {
    shell.plane.observe_progress(
        "team/m",
        "m-worker-0".into(),
        ProgressReport {
            step: 10,
            samples_per_second: Some(rate),
            ..ProgressReport::default()
        },
    );
    shell.run(1);
}

/// Suspended and resumed: the job waits again and is placed anew.
fn requeue(shell: &mut FakeShell) {
    shell.plane.set_suspend("team/m", true).expect("suspend");
    shell.run(1);
    shell.plane.set_suspend("team/m", false).expect("resume");
    shell.run(1);
}

#[test]
fn a_job_measured_faster_on_the_slower_type_goes_there_next_time() {
    let mut shell = FakeShell::new(plane());
    // Another job holds the H100: m runs on the A100 and reports 100 samples/s.
    shell
        .plane
        .submit(record(job("blocker", 1, 1, None), 1))
        .expect("submit blocker");
    shell.run(1);
    assert_eq!(gpu_type(&shell, "team/blocker").as_deref(), Some("H100"));
    shell
        .plane
        .submit(record(job("m", 1, 1, None), 2))
        .expect("submit m");
    shell.run(1);
    assert_eq!(gpu_type(&shell, "team/m").as_deref(), Some("A100"));
    report(&mut shell, 100.0);
    assert_eq!(
        shell.status("team/m").measured_throughput,
        BTreeMap::from([("A100".to_string(), 100.0)])
    );
    // The H100 frees. Measured on the A100 only, m's H100 speed is the table's 3x of it:
    // placed anew, it takes the H100.
    for (id, inc) in shell.running_replicas("team/blocker") {
        shell.end(
            "team/blocker",
            id,
            inc,
            corral_core::lifecycle::ReplicaPhase::Succeeded,
        );
    }
    shell.run(1);
    requeue(&mut shell);
    assert_eq!(gpu_type(&shell, "team/m").as_deref(), Some("H100"));
    // There it measures 90 samples/s: slower than on the A100 (an input-bound job).
    report(&mut shell, 90.0);
    assert_eq!(
        shell.status("team/m").measured_throughput,
        BTreeMap::from([("A100".to_string(), 100.0), ("H100".to_string(), 90.0)])
    );
    // Placed anew with both cards free, it takes the A100, which the table would not.
    requeue(&mut shell);
    assert_eq!(gpu_type(&shell, "team/m").as_deref(), Some("A100"));
}
