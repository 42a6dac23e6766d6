//! Sia workloads through every policy, with durations derived from Sia's profiles in
//! ../shared/traces/sia (beside the repository; skipped when it is missing, except under
//! CI=true, where that fails).

mod common;

use corral_sim::cluster::ClusterSpec;
use corral_sim::trace::sia;
use corral_sim::{EngineConfig, PolicyKind, run_policy};

#[test]
fn philly_workload_1_runs_through_every_policy() {
    let Some(w) = common::shared_trace("sia/workloads/philly/workload-1.csv") else {
        return;
    };
    let cluster = ClusterSpec::parse_flag(sia::DEFAULT_CLUSTER, 1)
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(cluster.total_gpus(), 64);
    let (jobs, notes) = sia::load(&w.to_string_lossy(), None, &cluster.types, None).unwrap();
    assert_eq!(jobs.len(), 160);
    // Every job of this workload has an exactly profiled placement on every type.
    assert!(notes.is_empty(), "{notes:?}");
    // cifar10 at batch 2048: the last row of validation-2048.csv (100 epochs) says 3178
    // iterations; A100s are faster than T4s for every cifar10 job (not for every model:
    // yolov3's profiled A100 step at local batch 16 is slower than the T4's).
    let c = jobs.iter().find(|j| j.name == "cifar10-0").unwrap();
    assert_eq!((c.gpus, c.steps), (6, 3178.0));
    for j in jobs.iter().filter(|j| j.job_type.starts_with("cifar10")) {
        assert!(
            j.throughput.on("a100") > j.throughput.on("t4"),
            "{} {:?}",
            j.name,
            j.throughput
        );
    }
    let cfg = EngineConfig::default();
    for k in PolicyKind::ALL {
        let mut p = k.build(1);
        let (_, m) = run_policy(&jobs, &cluster, p.as_mut(), &cfg, &mut |_| {}).unwrap();
        assert_eq!(m.jobs_completed, 160, "{}", m.policy);
        assert!(
            m.utilization > 0.0 && m.utilization <= 1.0 + 1e-9,
            "{}",
            m.policy
        );
    }
}

#[test]
fn a_cluster_type_without_profiles_is_refused_and_missing_profiles_mean_cannot_run() {
    let Some(w) = common::shared_trace("sia/workloads/saturn/workload-1.csv") else {
        return;
    };
    let w = w.to_string_lossy();
    let e = sia::load(&w, None, &["k80".to_string()], Some(3)).unwrap_err();
    assert!(e.contains("GPU type `k80` has no Sia profiles"), "{e}");
    let e = sia::load(&w, Some("/nonexistent"), &["t4".to_string()], Some(3)).unwrap_err();
    assert!(e.contains("--profiles"), "{e}");
}
