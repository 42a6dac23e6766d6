//! Same trace, same seed: the same output, for every policy. Uses small prefixes of the
//! real traces in ../shared/traces (beside the repository; skipped when they are missing,
//! except under CI=true, where that fails).

mod common;

use corral_sim::cluster::ClusterSpec;
use corral_sim::trace::{gavel, philly};
use corral_sim::{EngineConfig, PolicyKind, SimJob, report, run_policy};

fn gavel_prefix(n: usize) -> Option<Vec<SimJob>> {
    let d = common::shared_trace("gavel")?;
    // Present but unreadable is a failure, not a skip.
    let tp = std::fs::read_to_string(d.join("simulation_throughputs.json")).unwrap();
    let tr = std::fs::read_to_string(d.join("dev-seed1.trace")).unwrap();
    let t = gavel::Throughputs::parse(&tp, "simulation_throughputs.json").unwrap();
    let mut jobs = gavel::parse_trace(&tr, "dev-seed1.trace", &t).unwrap();
    jobs.truncate(n);
    Some(jobs)
}

fn run_all(jobs: &[SimJob], cluster: &str, per_node: u32, seed: u64) -> String {
    let c = ClusterSpec::parse_flag(cluster, per_node)
        .unwrap()
        .build()
        .unwrap();
    let cfg = EngineConfig {
        seed,
        checkpoint_s: 600.0,
        ..EngineConfig::default()
    };
    let mut ms = Vec::new();
    for k in PolicyKind::ALL {
        let mut p = k.build(seed);
        let (_, m) = run_policy(jobs, &c, p.as_mut(), &cfg, &mut |_| {}).unwrap();
        assert_eq!(m.jobs_completed, jobs.len(), "{}", m.policy);
        ms.push(m);
    }
    report::json(&ms)
}

#[test]
fn gavel_prefix_same_seed_same_output() {
    let Some(jobs) = gavel_prefix(40) else {
        return;
    };
    let a = run_all(&jobs, "k80:12,p100:12,v100:12", 1, 7);
    let b = run_all(&jobs, "k80:12,p100:12,v100:12", 1, 7);
    assert_eq!(a, b);
}

#[test]
fn philly_prefix_same_seed_same_output_on_multi_gpu_nodes() {
    let Some(path) = common::shared_trace("philly/philly.csv") else {
        return;
    };
    let text = std::fs::read_to_string(path).unwrap();
    let jobs = philly::parse(&text, "philly.csv", Some(300)).unwrap();
    let a = run_all(&jobs, "gpu:128/8", 1, 3);
    let b = run_all(&jobs, "gpu:128/8", 1, 3);
    assert_eq!(a, b);
}
