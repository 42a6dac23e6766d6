//! Serving through the control plane: a served model's replicas are one-replica jobs placed
//! by the same scheduler, so a serving priority above training's preempts a training job with
//! its grace period, and a training job below it never takes a serving replica's GPUs. And the
//! autoscaler's properties over random load: bounds, no scale-down in panic, no flapping.

use std::time::Duration;

use corral_api::served_model::{Autoscaling, ServedModel, replica_job};
use corral_core::control::ControlPlane;
use corral_core::control::serving::{
    Autoscaler, LoadSample, ModelPlan, ModelView, ReplicaAction, ReplicaView, RevisionView,
    Serving, plan_replicas,
};
use corral_core::lifecycle::JobState;
use jiff::Timestamp;
use plane_world::shell::FakeShell;
use plane_world::{cluster, config, job, record};
use proptest::prelude::*;

mod plane_world;

fn model(priority: &str, gpus: u32) -> ServedModel {
    serde_saphyr::from_str(&format!(
        "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {{name: llm, namespace: team}}
spec:
  priorityClass: {priority}
  resources: {{gpu: {gpus}, cpu: 1, memory: 1Gi}}
  template: {{command: [python3, server.py]}}
  autoscaling: {{minReplicas: 0, maxReplicas: 4}}
"
    ))
    .expect("test model")
}

#[test]
fn a_serving_replica_of_higher_priority_preempts_training_with_its_grace() {
    let plane = ControlPlane::new(cluster(4), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(job("train", 4, 1, Some("low")), 1))
        .expect("submit training");
    shell.run(1);
    assert_eq!(shell.state("team/train"), JobState::Running);

    let replica = replica_job(&model("high", 2), 0);
    assert_eq!(replica.metadata.name, "llm-serving-0");
    shell.stops.clear();
    shell
        .plane
        .submit(record(replica, 2))
        .expect("submit replica");
    shell.run(1);
    assert!(shell.events("team/train").contains(&"Preempted"));
    assert!(
        shell
            .stops
            .iter()
            .any(|(j, g)| j == "team/train" && *g == Duration::from_secs(7)),
        "{:?}",
        shell.stops
    );
    assert_eq!(shell.state("team/llm-serving-0"), JobState::Running);
    assert_eq!(shell.running("team/llm-serving-0"), 1);
}

#[test]
fn training_of_lower_priority_waits_for_a_serving_replica() {
    let plane = ControlPlane::new(cluster(4), config()).expect("plane");
    let mut shell = FakeShell::new(plane);
    shell
        .plane
        .submit(record(replica_job(&model("high", 4), 0), 1))
        .expect("submit replica");
    shell.run(1);
    assert_eq!(shell.state("team/llm-serving-0"), JobState::Running);
    shell
        .plane
        .submit(record(job("train", 1, 1, Some("low")), 2))
        .expect("submit training");
    shell.run(5);
    assert_eq!(shell.state("team/train"), JobState::Queued);
    assert!(!shell.events("team/llm-serving-0").contains(&"Preempted"));
}

#[test]
fn a_replica_is_told_its_port_in_port() {
    use corral_core::launch::{Addresses, LaunchOptions, replica_env};
    use corral_core::lifecycle::ReplicaId;
    let job = replica_job(&model("high", 1), 0);
    let addrs = Addresses::local(&job, "127.0.0.1", |_| Some(41234));
    let id = ReplicaId::new(corral_api::training_job::Role::Worker, 0);
    let spec = replica_env(&job, id, &addrs, &LaunchOptions::default()).expect("launch spec");
    assert_eq!(spec.env_value("PORT"), Some("41234"));
    // A training job of the generic framework is not told one.
    let train = job_generic();
    let addrs = Addresses::local(&train, "127.0.0.1", |_| Some(41235));
    let spec = replica_env(&train, id, &addrs, &LaunchOptions::default()).expect("launch spec");
    assert_eq!(spec.env_value("PORT"), None);
}

fn job_generic() -> corral_api::TrainingJob {
    let mut j = replica_job(&model("high", 1), 0);
    j.metadata.labels.clear();
    j
}

fn one_revision<'a>(
    spec: &'a corral_api::ServedModelSpec,
    revisions: &'a [RevisionView],
) -> ModelView<'a> {
    ModelView {
        spec,
        latest: "llm-00001",
        stable: "llm-00001",
        revisions,
    }
}

fn replicas_of(name: &str, replicas: &[ReplicaView]) -> Vec<RevisionView> {
    vec![RevisionView {
        name: name.to_string(),
        replicas: replicas.to_vec(),
        in_flight: 0,
    }]
}

fn actions(plan: &ModelPlan, revision: &str) -> Vec<ReplicaAction> {
    plan.revisions
        .iter()
        .find(|r| r.name == revision)
        .map(|r| r.actions.clone())
        .unwrap_or_default()
}

#[test]
fn the_serving_plan_creates_on_load_and_removes_after_idle() {
    let spec = model("high", 1).spec;
    let mut serving = Serving::new();
    let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).expect("valid");
    // At zero, nothing asked.
    let plan = serving.decide("team/llm", one_revision(&spec, &[]), t(0));
    assert!(actions(&plan, "llm-00001").is_empty());
    // A held request: one replica.
    serving.observe_load(
        "team/llm",
        LoadSample {
            at: t(1),
            in_flight: 1,
            arrived: 1,
        },
    );
    let plan = serving.decide("team/llm", one_revision(&spec, &[]), t(1));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Create(0)]);
    let up = replicas_of(
        "llm-00001",
        &[ReplicaView {
            index: 0,
            ready: true,
            finished: false,
            deleting: false,
            in_flight: 0,
        }],
    );
    // Idle for the whole period (300 s by default): removed.
    for s in 2..=200 {
        serving.observe_load(
            "team/llm",
            LoadSample {
                at: t(s),
                in_flight: 0,
                arrived: 0,
            },
        );
        let plan = serving.decide("team/llm", one_revision(&spec, &up), t(s));
        assert!(actions(&plan, "llm-00001").is_empty());
    }
    for s in 201..=400 {
        serving.observe_load(
            "team/llm",
            LoadSample {
                at: t(s),
                in_flight: 0,
                arrived: 0,
            },
        );
    }
    // Scaled to zero: the replica first leaves rotation, and goes once nothing is under
    // way on it (a request that came in just before is answered, not dropped).
    let plan = serving.decide("team/llm", one_revision(&spec, &up), t(400));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Drain(0)]);
    assert_eq!(plan.draining, [0]);
    let mut busy = up.clone();
    busy[0].replicas[0].in_flight = 1;
    let plan = serving.decide("team/llm", one_revision(&spec, &busy), t(401));
    assert!(
        actions(&plan, "llm-00001").is_empty(),
        "a request still under way"
    );
    assert_eq!(plan.current, 0, "a draining replica serves no new request");
    let plan = serving.decide("team/llm", one_revision(&spec, &up), t(402));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Remove(0)]);
}

#[test]
fn replicas_that_keep_ending_are_replaced_after_a_growing_back_off() {
    let mut spec = model("high", 1).spec;
    spec.autoscaling.min_replicas = 1;
    let mut serving = Serving::new();
    let t = |ms: i64| Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("valid");
    let view = |index: u32, ready: bool, finished: bool, deleting: bool| ReplicaView {
        index,
        ready,
        finished,
        deleting,
        in_flight: 0,
    };
    let plan = serving.decide("team/llm", one_revision(&spec, &[]), t(0));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Create(0)]);
    // Replica 0 ends for good (its launch refused, or failed past its backoff limit): the
    // first is replaced at once.
    let dead = replicas_of("llm-00001", &[view(0, false, true, false)]);
    let plan = serving.decide("team/llm", one_revision(&spec, &dead), t(100));
    assert_eq!(
        actions(&plan, "llm-00001"),
        vec![ReplicaAction::Create(1), ReplicaAction::Remove(0)]
    );
    assert_eq!(plan.backoff, None);
    // Its replacement ends too: removed, and the next is made only after 10 s, which the
    // status says; seen again (still being deleted), it does not count twice.
    let dead = replicas_of(
        "llm-00001",
        &[view(0, false, true, true), view(1, false, true, false)],
    );
    let plan = serving.decide("team/llm", one_revision(&spec, &dead), t(200));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Remove(1)]);
    assert_eq!(plan.backoff, Some((2, t(10_200))));
    let status = plan.status("team", "llm", "llm-00001", None, |_| None);
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("Back-off: 2 replica jobs in a row")),
        "{status:?}"
    );
    let gone = replicas_of("llm-00001", &[view(1, false, true, true)]);
    let plan = serving.decide("team/llm", one_revision(&spec, &gone), t(5_000));
    assert!(actions(&plan, "llm-00001").is_empty());
    let plan = serving.decide("team/llm", one_revision(&spec, &[]), t(10_200));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Create(0)]);
    assert_eq!(plan.backoff, None);
    // The third ends: 20 s. One that serves resets the count.
    let dead = replicas_of("llm-00001", &[view(0, false, true, false)]);
    let plan = serving.decide("team/llm", one_revision(&spec, &dead), t(11_000));
    assert_eq!(plan.backoff, Some((3, t(31_000))));
    let plan = serving.decide("team/llm", one_revision(&spec, &[]), t(31_000));
    assert_eq!(actions(&plan, "llm-00001"), vec![ReplicaAction::Create(0)]);
    let up = replicas_of("llm-00001", &[view(0, true, false, false)]);
    serving.decide("team/llm", one_revision(&spec, &up), t(32_000));
    let dead = replicas_of("llm-00001", &[view(0, false, true, false)]);
    let plan = serving.decide("team/llm", one_revision(&spec, &dead), t(40_000));
    assert_eq!(plan.backoff, None, "the count starts again after serving");
    assert!(actions(&plan, "llm-00001").contains(&ReplicaAction::Create(1)));
}

fn autoscaling() -> impl Strategy<Value = Autoscaling> {
    (0u32..4, 1u32..12, 1u32..8, 6u32..90, 101u32..400, 1u32..200).prop_flat_map(
        |(min, span, target, stable, threshold, idle)| {
            (1u32..=stable).prop_map(move |panic| Autoscaling {
                min_replicas: min,
                max_replicas: Some(min.max(1) + span - 1),
                target_in_flight: target,
                stable_window_seconds: stable,
                panic_window_seconds: panic,
                panic_threshold_percent: threshold,
                scale_to_zero_after_seconds: idle,
            })
        },
    )
}

/// Load as (seconds since the previous sample, in flight).
fn load() -> impl Strategy<Value = Vec<(i64, u32)>> {
    prop::collection::vec((1i64..5, 0u32..60), 1..200)
}

/// Runs the autoscaler over `load`, the replicas following its decision at once.
fn run(spec: &Autoscaling, load: &[(i64, u32)]) -> Vec<(Timestamp, u32, u32, bool)> {
    let mut a = Autoscaler::new();
    let mut now = Timestamp::from_second(1_800_000_000).expect("valid");
    let mut current = spec.min_replicas;
    let mut out = Vec::new();
    for &(dt, in_flight) in load {
        now += jiff::SignedDuration::from_secs(dt);
        a.observe(LoadSample {
            at: now,
            in_flight,
            arrived: u64::from(in_flight),
        });
        let d = a.decide(spec, now, current, current);
        out.push((now, current, d.desired, d.panic));
        current = d.desired;
    }
    out
}

proptest! {
    #[test]
    fn desired_stays_within_min_and_max(spec in autoscaling(), load in load()) {
        for (_, _, desired, _) in run(&spec, &load) {
            prop_assert!(desired >= spec.min_replicas && desired <= spec.max_replicas());
        }
    }

    #[test]
    fn no_scale_down_in_panic(spec in autoscaling(), load in load()) {
        for (_, current, desired, panic) in run(&spec, &load) {
            if panic {
                prop_assert!(desired >= current, "{current} -> {desired} in panic");
            }
        }
    }

    #[test]
    fn no_scale_down_within_a_stable_window_of_a_scale_up(
        spec in autoscaling(),
        load in load(),
    ) {
        let window = jiff::SignedDuration::from_secs(i64::from(spec.stable_window_seconds));
        let mut last_up: Option<(Timestamp, u32)> = None;
        for (at, current, desired, _) in run(&spec, &load) {
            if desired > current {
                last_up = Some((at, desired));
            } else if desired < current
                && let Some((up_at, up_to)) = last_up
                && at.duration_since(up_at) < window
            {
                prop_assert!(
                    desired >= up_to,
                    "scaled up to {up_to} then down to {desired} within the stable window"
                );
            }
        }
    }

    #[test]
    fn the_plan_reaches_the_desired_count(desired in 0u32..10, n in 0u32..10, ready in any::<u16>()) {
        let existing: Vec<ReplicaView> = (0..n)
            .map(|i| ReplicaView { index: i * 2, ready: ready & (1 << i) != 0, finished: false, deleting: false, in_flight: 0 })
            .collect();
        let actions = plan_replicas(desired, &existing, &mut Default::default());
        let created = actions.iter().filter(|a| matches!(a, ReplicaAction::Create(_))).count();
        let removed = actions.iter().filter(|a| matches!(a, ReplicaAction::Remove(_))).count();
        prop_assert_eq!(n as usize + created - removed, desired as usize);
    }
}
