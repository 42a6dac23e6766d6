//! The conformance story (`corral_core::control::conformance`) through the bare plane and a
//! fake shell: the reference every shell's own conformance test is held to. The fake shell
//! behaves as a platform does: a start it cannot make is reported with `start_failed`, a
//! slow replica ends only when killed after its grace period, the room left on the node is
//! observed before each step, and GPU health is observed when it changes.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_core::control::conformance::{self, JobOutcome, ScenarioStep};
use corral_core::control::{ControlConfig, ControlPlane};
use corral_core::lifecycle::{FailureReason, ReplicaPhase, job_state};
use plane_world::cluster;
use plane_world::shell::{FakeShell, NODE};

mod plane_world;

#[test]
fn the_conformance_story_through_the_bare_plane() {
    let mut config = ControlConfig {
        grace_period: Some(Duration::from_secs(conformance::GRACE_SECONDS)),
        priority_classes: conformance::priority_classes(),
        ..ControlConfig::default()
    };
    config.scheduler.preemption_protection_ms = 0;
    let plane = ControlPlane::new(cluster(conformance::NODE_GPUS), config).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell.room_of = Some(conformance::NODE_GPUS);
    let key = |name: &str| format!("{}/{name}", conformance::NAMESPACE);
    let mut seen_events = 0usize;
    let mut submitted: Vec<&str> = Vec::new();
    let mut trace = Vec::new();
    for step in conformance::steps() {
        match step.clone() {
            ScenarioStep::Submit(names) => {
                for name in names {
                    let job = conformance::job(name, &["train".to_string()]).expect("job");
                    if conformance::cannot_start(name) {
                        shell.cannot_start.insert(key(name));
                    }
                    if conformance::slow_to_stop(name) {
                        shell.slow_to_stop.insert(key(name));
                    }
                    let at = u64::try_from(shell.now).expect("time") * 1000;
                    shell
                        .plane
                        .submit(plane_world::record(job, at))
                        .expect("submit");
                    submitted.push(name);
                }
            }
            ScenarioStep::FailWorker(name, index) => {
                let k = key(name);
                let (id, inc) = shell
                    .running_replicas(&k)
                    .into_iter()
                    .find(|(id, _)| id.index == index)
                    .unwrap_or_else(|| panic!("a live worker; trace so far {trace:#?}"));
                let failed = ReplicaPhase::Failed {
                    exit_code: 1,
                    reason: FailureReason::Error,
                };
                shell.end(&k, id, inc, failed);
            }
            ScenarioStep::Finish(name) => {
                let k = key(name);
                for (id, inc) in shell.running_replicas(&k) {
                    shell.end(&k, id, inc, ReplicaPhase::Succeeded);
                }
            }
            ScenarioStep::Suspend(name) => {
                shell.plane.set_suspend(&key(name), true).expect("suspend");
            }
            ScenarioStep::Resume(name) => {
                shell.plane.set_suspend(&key(name), false).expect("resume");
            }
            ScenarioStep::Delete(name) => {
                shell.plane.delete(&key(name)).expect("delete");
            }
            ScenarioStep::GpuTurnsUnhealthy(name) => {
                let gpus = shell.gpus_of(&key(name), 0);
                assert!(!gpus.is_empty(), "{name}'s worker-0 holds a GPU");
                shell.plane.observe_unhealthy_gpus(NODE, &gpus[..1]);
            }
            ScenarioStep::GpusHeal => shell.plane.observe_unhealthy_gpus(NODE, &[]),
        }
        // Settle: time passes a second at a time until the plane asks for nothing more.
        for _ in 0..600 {
            let before = shell.log.len();
            shell.run(1);
            let quiet = shell.log[before..]
                .iter()
                .all(|s| s.is_empty() && s.wake_in.is_none());
            let dying = shell
                .live
                .values()
                .flat_map(|l| l.values())
                .any(|r| r.killed_at.is_some());
            if quiet && !dying {
                break;
            }
        }
        assert!(
            !shell.shared_a_gpu,
            "two running replicas shared a GPU after {step:?}"
        );
        let events: Vec<&corral_core::control::JobEvent> =
            shell.log.iter().flat_map(|s| &s.events).collect();
        let mut outcome = BTreeMap::new();
        for name in &submitted {
            let k = key(name);
            outcome.insert(
                name.to_string(),
                JobOutcome::new(
                    shell.job(&k).map(|j| job_state(&j.spec, j.status.as_ref())),
                    shell.plane.admission(&k).is_some(),
                    events[seen_events..]
                        .iter()
                        .filter(|e| e.job == k)
                        .map(|e| e.reason),
                ),
            );
        }
        seen_events = events.len();
        trace.push(outcome);
    }
    let differences = conformance::differences(&trace);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
