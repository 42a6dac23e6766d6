//! A pass admits in slices (`--pass-budget-ms`): no more replicas than its writes can do
//! in its budget, the rest in the next pass, in the same order, a gang never cut (against
//! the mocked API server of `common`; every pass is also checked against a plane rebuilt
//! from the same world and sliced the same way).

mod common;

use common::passes::*;
use corral_kube::plan::{PassSlice, Planner};
use serde_json::json;
use std::time::Duration;

fn sliced(fake: &common::FakeApi, replicas: u32) {
    *fake.planner.lock().expect("planner") =
        Some(Planner::keeping().with_slice(PassSlice::fixed(replicas)));
}

fn admitted(fake: &common::FakeApi, jobs: &[&str]) -> Vec<String> {
    jobs.iter()
        .filter(|j| !pods_of(fake, j).is_empty())
        .map(|j| j.to_string())
        .collect()
}

#[tokio::test]
async fn a_burst_is_admitted_slice_by_slice_in_queue_order() {
    let fake = cluster(&["n1", "n2"]);
    sliced(&fake, 3);
    let names = ["j1", "j2", "j3", "j4", "j5", "j6"];
    for n in names {
        // A master and a worker of 1 GPU each: 2 pods a job, 12 in all, room for every one.
        fake.insert(JOBS, job(n, 1, 1, json!({})));
    }

    // Each pass stops at the first job that reaches 3 replicas: two jobs, four pods.
    let mut expected_deferred = [4u64, 2, 0].into_iter();
    for (pass_no, upto) in [2usize, 4, 6].into_iter().enumerate() {
        let (plan, report) = pass(&fake, t(pass_no as i64)).await;
        assert_eq!(plan.slice, Some(3));
        assert_eq!(report.pods_created, 4, "pass {pass_no}");
        assert_eq!(
            admitted(&fake, &names),
            names[..upto].to_vec(),
            "pass {pass_no}"
        );
        let deferred = expected_deferred.next().unwrap_or_default();
        assert_eq!(plan.counters.deferred, deferred, "pass {pass_no}");
        if deferred > 0 {
            // The rest is taken up at once, not at the next resync.
            assert_eq!(plan.wake_in, Some(Duration::ZERO), "pass {pass_no}");
        }
    }
    // A job left for the next pass was never told it cannot run.
    for n in names {
        assert_ne!(condition(&fake, n, "Failed").as_deref(), Some("True"));
    }
}

#[tokio::test]
async fn a_gang_larger_than_the_slice_is_admitted_whole() {
    let fake = cluster(&["n1", "n2"]);
    sliced(&fake, 2);
    // Six replicas of 2 GPUs: 12 of the 16.
    fake.insert(JOBS, job("big", 5, 2, json!({})));
    fake.insert(JOBS, job("small", 1, 1, json!({})));
    let (plan, report) = pass(&fake, t(0)).await;
    assert_eq!(
        report.pods_created, 6,
        "all 6 replicas of the gang, in one pass"
    );
    assert_eq!(plan.counters.deferred, 1);
    assert!(pods_of(&fake, "small").is_empty());
    let (plan, report) = pass(&fake, t(1)).await;
    assert_eq!(report.pods_created, 2);
    assert_eq!(plan.counters.deferred, 0);
}
