//! What the plane learns from a shell about its nodes while jobs run: the room a node has
//! now (a preempted job's replicas may still hold GPUs) and the health of its GPUs.

mod plane_world;

use std::collections::{BTreeMap, BTreeSet};

use corral_core::control::{ControlPlane, Room, Step};
use corral_core::lifecycle::{
    Action, FailureReason, Incarnation, ObservedReplica, ReplicaId, ReplicaPhase,
};
use jiff::Timestamp;
use plane_world::{cluster, config, job, record};

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_000_000 + s).expect("time")
}

/// The starts a step asks of one job.
fn starts(steps: &[Step], key: &str) -> Vec<(ReplicaId, Incarnation)> {
    steps
        .iter()
        .flat_map(|s| &s.actions)
        .filter(|a| a.job == key)
        .filter_map(|a| match a.action {
            Action::Start {
                replica,
                incarnation,
                ..
            } => Some((replica, incarnation)),
            _ => None,
        })
        .collect()
}

/// A GPU is never shared, whatever the shell: a preempted job's replicas hold their GPUs
/// until they have exited, and the preemptor's starts wait for them in the plane (one
/// `WaitingForRoom` event naming the GPUs), then start once the room is observed free.
#[test]
fn a_victim_slow_to_exit_keeps_the_preemptors_starts_waiting_for_room() {
    let room = |free: &[u32]| {
        BTreeMap::from([(
            "node-a".to_string(),
            Room::gpus_only(free.iter().copied().collect::<BTreeSet<u32>>()),
        )])
    };
    let mut plane = ControlPlane::new(cluster(4), config()).expect("plane");
    plane.observe_room(room(&[0, 1, 2, 3]));
    plane
        .submit(record(job("low", 4, 1, Some("low")), 1))
        .expect("submit low");
    let now = at;
    let first = plane.step(now(1));
    let low_starts: Vec<(ReplicaId, Incarnation)> = first
        .actions
        .iter()
        .filter_map(|a| match a.action {
            Action::Start {
                replica,
                incarnation,
                ..
            } => Some((replica, incarnation)),
            _ => None,
        })
        .collect();
    assert_eq!(low_starts.len(), 4, "{first:?}");
    for (r, i) in &low_starts {
        plane.observe(
            "team/low",
            ObservedReplica::new(*r, *i, ReplicaPhase::Running),
        );
    }
    plane.settle(now(1));

    // high preempts low; low's four replicas are told to stop but have not exited.
    plane
        .submit(record(job("high", 4, 1, Some("high")), 2))
        .expect("submit high");
    plane.observe_room(room(&[]));
    let mut steps = vec![plane.step(now(2))];
    steps.push(plane.settle(now(2)));
    let starts = |steps: &[Step], key: &str| {
        steps
            .iter()
            .flat_map(|s| &s.actions)
            .filter(|a| a.job == key && matches!(a.action, Action::Start { .. }))
            .count()
    };
    let stopped: std::collections::BTreeSet<ReplicaId> = steps
        .iter()
        .flat_map(|s| &s.actions)
        .filter(|a| a.job == "team/low")
        .filter_map(|a| match a.action {
            Action::Stop { replica, .. } => Some(replica),
            _ => None,
        })
        .collect();
    assert_eq!(stopped.len(), 4, "the victim is stopped: {steps:?}");
    assert!(
        plane.admission("team/high").is_some(),
        "high holds the GPUs' admission"
    );
    assert_eq!(
        starts(&steps, "team/high"),
        0,
        "but starts nothing on held GPUs"
    );
    let waits: Vec<&String> = steps
        .iter()
        .flat_map(|s| &s.events)
        .filter(|e| e.job == "team/high" && e.reason == "WaitingForRoom")
        .map(|e| &e.message)
        .collect();
    assert_eq!(waits.len(), 1, "announced once: {waits:?}");
    assert!(waits[0].contains("still in use"), "{}", waits[0]);

    // Still stopping a second later: nothing new, no second event.
    plane.observe_room(room(&[]));
    let later = plane.step(now(3));
    assert_eq!(starts(std::slice::from_ref(&later), "team/high"), 0);
    assert!(!later.events.iter().any(|e| e.reason == "WaitingForRoom"));

    // The victim has exited: its GPUs are free and the preemptor starts.
    for (r, i) in &low_starts {
        let exited = ReplicaPhase::Failed {
            exit_code: 143,
            reason: FailureReason::Preempted,
        };
        plane.observe("team/low", ObservedReplica::new(*r, *i, exited));
    }
    plane.observe_room(room(&[0, 1, 2, 3]));
    let after = vec![plane.step(now(4)), plane.settle(now(4))];
    assert_eq!(starts(&after, "team/high"), 4, "{after:?}");
}

/// GPU health is an observation while the cluster runs: a GPU that turns unhealthy gets no
/// new replica (the job already on it keeps it), and once it heals it is offered again.
#[test]
fn a_gpu_that_turns_unhealthy_is_not_offered_until_it_heals() {
    let mut plane = ControlPlane::new(cluster(4), config()).expect("plane");
    plane
        .submit(record(job("first", 1, 2, Some("low")), 1))
        .expect("submit");
    let steps = vec![plane.step(at(1))];
    for (r, i) in starts(&steps, "team/first") {
        plane.observe(
            "team/first",
            ObservedReplica::new(r, i, ReplicaPhase::Running),
        );
    }
    plane.settle(at(1));
    let gpus = |plane: &ControlPlane, key: &str| {
        plane
            .admission(key)
            .map(|a| a.admission.placements[0].gpu_indices.clone())
    };
    assert_eq!(gpus(&plane, "team/first"), Some(vec![0, 1]));

    // GPU 1 (first's) and GPU 2 (free) fail while it runs.
    plane.observe_unhealthy_gpus("node-a", &[1, 2]);
    plane
        .submit(record(job("second", 1, 2, Some("low")), 2))
        .expect("submit");
    plane.step(at(2));
    plane.settle(at(2));
    assert_eq!(
        gpus(&plane, "team/first"),
        Some(vec![0, 1]),
        "first keeps its GPUs"
    );
    assert_eq!(
        gpus(&plane, "team/second"),
        None,
        "only GPU 3 is healthy and free: two do not fit"
    );
    let reason = plane.pending_reason("team/second").expect("a reason");
    assert!(reason.contains("GPU"), "{reason}");

    // GPU 2 heals: second gets 2 and 3.
    plane.observe_unhealthy_gpus("node-a", &[1]);
    plane.step(at(3));
    assert_eq!(gpus(&plane, "team/second"), Some(vec![2, 3]));
}
