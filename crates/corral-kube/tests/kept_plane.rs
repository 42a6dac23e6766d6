//! The operator's control plane lives from pass to pass, fed what changed, and is rebuilt
//! from the API server only when it must (against the mocked API server of `common`). Every
//! pass here is also checked against a plane rebuilt from the same world
//! (`common::passes::kept_pass`), as every pass of the other kube tests is.

mod common;

use common::passes::*;
use common::{FakeApi, h100_node};
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::plan::{PlanConfig, Rebuild};
use serde_json::json;

async fn rebuilt_at(fake: &FakeApi, secs: i64) -> Option<Rebuild> {
    pass(fake, t(secs)).await.0.rebuilt
}

/// The job and its pods gone at once, as the garbage collector leaves them.
fn remove_with_pods(fake: &FakeApi, job: &str) {
    fake.remove(JOBS, "ml", job);
    for p in pods_of(fake, job) {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        fake.remove(PODS, "ml", &name);
    }
}

#[tokio::test]
async fn the_plane_is_fed_what_changed_and_rebuilt_only_when_it_must() {
    let fake = cluster(&["n1", "n2"]);
    assert_eq!(rebuilt_at(&fake, 0).await, Some(Rebuild::Start));

    // A new job is submitted to the kept plane, admitted and started.
    fake.insert(JOBS, job("a", 1, 4, json!({})));
    let (plan, report) = pass(&fake, t(1)).await;
    assert_eq!(plan.rebuilt, None);
    assert_eq!(report.pods_created, 2);
    set_phase(&fake, "a-master-0", "Running", None);
    set_phase(&fake, "a-worker-0", "Running", None);
    assert_eq!(rebuilt_at(&fake, 2).await, None);
    assert_eq!(condition(&fake, "a", "Running").as_deref(), Some("True"));

    // A pod's end is an observation: the gang restarts.
    set_phase(&fake, "a-worker-0", "Failed", Some(1));
    let (plan, _) = pass(&fake, t(3)).await;
    assert_eq!(plan.rebuilt, None);
    assert!(
        event_reasons(&plan).iter().any(|r| r == "Restarting"),
        "{:?}",
        event_reasons(&plan)
    );

    // Suspend and resume are fed too.
    fake.update(JOBS, "ml", "a", |j| {
        j["spec"]["runPolicy"] = json!({"suspend": true})
    });
    assert_eq!(rebuilt_at(&fake, 4).await, None);
    assert!(pods_of(&fake, "a").is_empty(), "suspended: its pods go");
    assert_eq!(condition(&fake, "a", "Suspended").as_deref(), Some("True"));

    // A new node changes the cluster: rebuilt.
    fake.insert("api/v1/nodes", h100_node("n3"));
    assert_eq!(rebuilt_at(&fake, 5).await, Some(Rebuild::Cluster));
    assert_eq!(rebuilt_at(&fake, 6).await, None);

    // A spec change beyond `suspend` is the restore's to read.
    fake.update(JOBS, "ml", "a", |j| {
        j["spec"]["replicas"]["worker"]["count"] = json!(2)
    });
    assert_eq!(rebuilt_at(&fake, 7).await, Some(Rebuild::Job));
    fake.update(JOBS, "ml", "a", |j| {
        j["spec"]["runPolicy"] = json!({"suspend": false})
    });
    let (plan, report) = pass(&fake, t(8)).await;
    assert_eq!(plan.rebuilt, None);
    assert_eq!(report.pods_created, 3, "resumed with its new size");

    // A job holding an admission deleted at once (kubectl's background deletion): its pods
    // are the garbage collector's. While they run they take room as anyone's pods do (the
    // cluster changed); the restore accounts for them.
    fake.remove(JOBS, "ml", "a");
    assert_eq!(rebuilt_at(&fake, 9).await, Some(Rebuild::Cluster));
    fake.insert(JOBS, job("d", 1, 4, json!({})));
    assert_eq!(rebuilt_at(&fake, 10).await, None);
    remove_with_pods(&fake, "d");
    assert_eq!(rebuilt_at(&fake, 11).await, Some(Rebuild::Vanished));
}

#[tokio::test]
async fn a_write_that_did_not_land_rebuilds_the_plane_from_what_was_stored() {
    let fake = cluster(&["n1"]);
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let cfg = PlanConfig::default();
    kept_pass(&fake, &applier, &cfg, t(0)).await;

    // The API server fails the second pod of the gang (a 500): the plane decided both.
    fake.insert(JOBS, job("b", 1, 4, json!({})));
    fake.state.lock().expect("lock").pod_creates_left = Some(1);
    let (plan, report) = kept_pass(&fake, &applier, &cfg, t(1)).await;
    assert_eq!(plan.rebuilt, None);
    assert!(!report.errors.is_empty(), "the create failed");
    fake.state.lock().expect("lock").pod_creates_left = None;

    // The next passes rebuild from what the API server holds while the job is backed off,
    // then create the missing pod, once; after that the plane is kept again.
    let mut at = 2;
    loop {
        let (plan, report) = kept_pass(&fake, &applier, &cfg, t(at)).await;
        assert_eq!(plan.rebuilt, Some(Rebuild::Unapplied));
        if report.backed_off == 0 {
            assert_eq!(report.pods_created, 1);
            break;
        }
        assert!(at < 40, "still backed off");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        at += 1;
    }
    let (plan, report) = kept_pass(&fake, &applier, &cfg, t(at + 1)).await;
    assert_eq!(plan.rebuilt, None);
    assert_eq!(report.pods_created, 0);
    let pods = pods_of(&fake, "b");
    assert_eq!(pods.len(), 2, "{pods:?}");
}

#[tokio::test]
async fn a_finished_job_deleted_leaves_the_kept_plane_without_a_rebuild() {
    let fake = cluster(&["n1"]);
    fake.insert(JOBS, job("c", 1, 1, json!({})));
    pass(&fake, t(0)).await;
    set_phase(&fake, "c-master-0", "Succeeded", Some(0));
    set_phase(&fake, "c-worker-0", "Succeeded", Some(0));
    pass(&fake, t(1)).await;
    assert_eq!(condition(&fake, "c", "Succeeded").as_deref(), Some("True"));
    pass(&fake, t(2)).await;
    remove_with_pods(&fake, "c");
    assert_eq!(rebuilt_at(&fake, 3).await, None);
    // Its name is free again: a new job of that name is a new job.
    fake.insert(JOBS, job("c", 1, 1, json!({})));
    let (plan, report) = pass(&fake, t(4)).await;
    assert_eq!(plan.rebuilt, None);
    assert_eq!(report.pods_created, 2);

    // Deleted and made again between two passes (another uid): the restore reads it.
    remove_with_pods(&fake, "c");
    fake.insert(JOBS, job("c", 1, 2, json!({})));
    let (plan, report) = pass(&fake, t(5)).await;
    assert_eq!(plan.rebuilt, Some(Rebuild::Job));
    assert_eq!(report.pods_created, 2);
}
