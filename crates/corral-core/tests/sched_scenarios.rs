//! Scenario tests: each YAML file under fixtures/sched/ is a cluster, then cycles of
//! submissions and finishes with the decisions expected.

use std::collections::BTreeMap;

use corral_core::sched::{ClusterSnapshot, JobRequest, Scheduler, SchedulerConfig};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Scenario {
    snapshot: ClusterSnapshot,
    #[serde(default)]
    config: SchedulerConfig,
    cycles: Vec<Cycle>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Cycle {
    now: u64,
    #[serde(default)]
    submit: Vec<JobRequest>,
    #[serde(default)]
    finish: Vec<String>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Expect {
    /// Exactly these jobs are admitted in this cycle.
    #[serde(default)]
    admitted: Vec<String>,
    #[serde(default)]
    preempted: Vec<String>,
    /// Job -> text its pending reason contains.
    #[serde(default)]
    pending: BTreeMap<String, String>,
    /// Job -> GPU type it was admitted on.
    #[serde(default)]
    gpu_type: BTreeMap<String, String>,
    /// Job -> nodes its replicas run on (sorted, deduplicated).
    #[serde(default)]
    nodes: BTreeMap<String, Vec<String>>,
}

fn run(name: &str) {
    let path = format!(
        "{}/tests/fixtures/sched/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    let scenario: Scenario = serde_saphyr::from_str(&text).expect("fixture parses");
    let mut s = Scheduler::new(&scenario.snapshot, scenario.config).expect("valid snapshot");
    for (i, c) in scenario.cycles.into_iter().enumerate() {
        for key in &c.finish {
            assert!(s.finish(key), "{name} cycle {i}: unknown job {key}");
        }
        for j in c.submit {
            s.submit(j).expect("unique job");
        }
        let out = s.cycle(c.now);
        let mut admitted: Vec<&str> = out.admitted.iter().map(|a| a.job.as_str()).collect();
        admitted.sort();
        let mut want: Vec<&str> = c.expect.admitted.iter().map(String::as_str).collect();
        want.sort();
        let reasons: Vec<String> = out
            .pending
            .iter()
            .map(|p| format!("{}: {}", p.job, p.reason))
            .collect();
        assert_eq!(
            admitted, want,
            "{name} cycle {i} admitted; pending: {reasons:#?}"
        );
        let mut preempted: Vec<&str> = out.preempted.iter().map(|p| p.job.as_str()).collect();
        preempted.sort();
        let mut want: Vec<&str> = c.expect.preempted.iter().map(String::as_str).collect();
        want.sort();
        assert_eq!(preempted, want, "{name} cycle {i} preempted");
        for (job, text) in &c.expect.pending {
            let p = out
                .pending
                .iter()
                .find(|p| &p.job == job)
                .unwrap_or_else(|| panic!("{name} cycle {i}: {job} not pending"));
            let reason = p.reason.to_string();
            assert!(
                reason.contains(text.as_str()),
                "{name} cycle {i}: {job}: {reason}"
            );
        }
        for (job, ty) in &c.expect.gpu_type {
            let a = out
                .admitted
                .iter()
                .find(|a| &a.job == job)
                .expect("admitted");
            assert_eq!(
                a.gpu_type.as_deref(),
                Some(ty.as_str()),
                "{name} cycle {i}: {job}"
            );
        }
        for (job, nodes) in &c.expect.nodes {
            let a = out
                .admitted
                .iter()
                .find(|a| &a.job == job)
                .expect("admitted");
            let mut got: Vec<&str> = a.placements.iter().map(|p| p.node.as_str()).collect();
            got.sort();
            got.dedup();
            assert_eq!(&got, nodes, "{name} cycle {i}: {job} nodes");
        }
    }
}

#[test]
fn gang_is_all_or_nothing_and_small_jobs_backfill() {
    run("gang_and_backfill");
}

#[test]
fn higher_priority_preempts_youngest_lower_priority() {
    run("priority_preemption");
}

#[test]
fn borrowing_and_reclaim_within_a_cohort() {
    run("borrow_and_reclaim");
}

#[test]
fn throughput_picks_the_gpu_type() {
    run("heterogeneity");
}

#[test]
fn blocked_gang_reservation_prevents_starvation() {
    run("reservation");
}

#[test]
fn placement_keeps_whole_nodes_and_scarce_types_free() {
    run("fragmentation");
}
