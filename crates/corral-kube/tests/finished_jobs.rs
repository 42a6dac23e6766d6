//! Finished jobs on Kubernetes: cleaned up and deleted after their TTL, or, finished for
//! good, handed to the control plane by name and left alone (against the mocked API server
//! of `common`).

mod common;

use common::passes::*;
use corral_kube::apply::ApplyReport;
use serde_json::json;

#[tokio::test]
async fn a_finished_job_is_cleaned_up_and_deleted_after_its_ttl() {
    let fake = cluster(&["n1"]);
    fake.insert(
        JOBS,
        job(
            "done",
            1,
            1,
            json!({"runPolicy": {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60}}),
        ),
    );
    pass(&fake, t(0)).await;
    set_phase(&fake, "done-master-0", "Succeeded", Some(0));
    set_phase(&fake, "done-worker-0", "Succeeded", Some(0));
    let (plan, _) = pass(&fake, t(10)).await;
    assert!(event_reasons(&plan).contains(&"Succeeded".to_string()));
    assert_eq!(
        condition(&fake, "done", "Succeeded").as_deref(),
        Some("True")
    );
    assert!(pods_of(&fake, "done").is_empty(), "cleanPodPolicy All");
    pass(&fake, t(20)).await;
    let job = fake.get(JOBS, "ml", "done").expect("kept until the ttl");
    assert!(job["status"]["admission"].is_null(), "released");
    pass(&fake, t(80)).await;
    assert!(
        fake.get(JOBS, "ml", "done").is_none(),
        "deleted after the ttl"
    );
    assert!(
        fake.get("api/v1/services", "ml", "done").is_none(),
        "owned objects go with it"
    );
}

/// A job finished for good (no TTL), its admission released and its pods ended, is handed
/// to the plane by name only: later passes plan nothing for it, still count it, and its
/// name stays taken.
#[tokio::test]
async fn a_job_finished_for_good_is_restored_by_name_and_still_counted() {
    let fake = cluster(&["n1"]);
    fake.insert(JOBS, job("old", 1, 1, json!({})));
    pass(&fake, t(0)).await;
    set_phase(&fake, "old-master-0", "Succeeded", Some(0));
    set_phase(&fake, "old-worker-0", "Succeeded", Some(0));
    pass(&fake, t(10)).await;
    assert_eq!(
        condition(&fake, "old", "Succeeded").as_deref(),
        Some("True")
    );
    assert!(
        fake.get(JOBS, "ml", "old").expect("job")["status"]["admission"].is_null(),
        "released"
    );
    let status_before = job_status(&fake, "old");
    for at in [20, 30] {
        let (plan, report) = pass(&fake, t(at)).await;
        assert!(
            plan.jobs.iter().all(|jp| jp.is_empty()),
            "nothing to do for a retired job: {:?}",
            plan.jobs
        );
        assert_eq!(report, ApplyReport::default(), "no write");
        assert_eq!(
            plan.jobs_by_state["default"]["Succeeded"], 1,
            "still counted"
        );
    }
    assert_eq!(
        job_status(&fake, "old"),
        status_before,
        "its status is kept"
    );
}
