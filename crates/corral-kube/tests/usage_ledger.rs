//! The usage ledger on Kubernetes (against the mocked API server of `common`): what each
//! admission held is written to ConfigMaps of the operator's namespace before the job's
//! release, a plane rebuilt from the API server counts it towards its queue's budget, and a
//! job deleted while it held GPUs is charged until it was found gone.

mod common;

use common::passes::*;
use serde_json::{Value, json};

const CONFIGMAPS: &str = "api/v1/configmaps";

/// The intervals the ledger holds, in the operator's namespace.
fn ledger(fake: &common::FakeApi) -> Vec<Value> {
    fake.list(CONFIGMAPS)
        .into_iter()
        .filter(|cm| cm["metadata"]["namespace"] == json!("corral-system"))
        .filter(|cm| cm["metadata"]["labels"]["corral.dev/usage-ledger"] == json!("v1"))
        .flat_map(|cm| {
            cm["data"]
                .as_object()
                .map(|d| d.values().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .filter_map(|v| v.as_str().and_then(|s| serde_json::from_str(s).ok()))
        .collect()
}

fn run(fake: &common::FakeApi, job: &str) {
    set_phase(fake, &format!("{job}-master-0"), "Running", None);
    set_phase(fake, &format!("{job}-worker-0"), "Running", None);
}

#[tokio::test]
async fn a_budget_counts_what_finished_jobs_held_after_a_rebuild() {
    let fake = cluster(&["n1"]);
    fake.update("apis/corral.dev/v1alpha1/queues", "", "default", |q| {
        q["spec"]["budget"] = json!({"gpuHours": 1, "period": "day"});
    });
    fake.insert(JOBS, job("a", 1, 1, json!({})));
    pass(&fake, t(0)).await;
    run(&fake, "a");
    pass(&fake, t(5)).await;
    assert!(ledger(&fake).is_empty(), "nothing closed yet");
    // Two GPUs for 30 minutes: the queue's hour of the day.
    set_phase(&fake, "a-master-0", "Succeeded", Some(0));
    set_phase(&fake, "a-worker-0", "Succeeded", Some(0));
    pass(&fake, t(1800)).await;
    let rows = ledger(&fake);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["job"], json!("ml/a"));
    assert_eq!(rows[0]["queue"], json!("default"));
    assert_eq!(rows[0]["gpuType"], json!(H100));
    assert_eq!(rows[0]["gpus"], json!(2));
    assert_eq!(rows[0]["start"], json!(t(0).as_millisecond()));
    assert_eq!(rows[0]["end"], json!(t(1800).as_millisecond()));
    assert!(
        fake.get(JOBS, "ml", "a").expect("job")["status"]["admission"].is_null(),
        "released after the ledger was written"
    );

    // The operator restarts: its plane is rebuilt from the API server, ledger included.
    *fake.planner.lock().expect("planner") = None;
    fake.insert(JOBS, job("b", 1, 1, json!({})));
    pass(&fake, t(1900)).await;
    assert!(pods_of(&fake, "b").is_empty(), "over budget: not admitted");
    let queued = job_status(&fake, "b")["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == json!("Queued")).cloned())
        .expect("queued");
    let message = queued["message"].as_str().unwrap_or_default();
    assert!(message.contains("budget"), "{message}");
    // A new day renews the budget.
    pass(&fake, t(86_400)).await;
    assert_eq!(
        pods_of(&fake, "b").len(),
        2,
        "admitted when the period renews"
    );
}

#[tokio::test]
async fn a_job_deleted_while_it_held_gpus_is_charged_until_it_was_found_gone() {
    let fake = cluster(&["n1"]);
    fake.insert(JOBS, job("c", 1, 2, json!({})));
    pass(&fake, t(0)).await;
    run(&fake, "c");
    pass(&fake, t(5)).await;
    // `kubectl delete trainingjob c`: the job goes at once, its pods to the garbage
    // collector.
    fake.remove(JOBS, "ml", "c");
    pass(&fake, t(600)).await;
    let rows = ledger(&fake);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["job"], json!("ml/c"));
    assert_eq!(rows[0]["gpus"], json!(4));
    assert_eq!(rows[0]["end"], json!(t(600).as_millisecond()));
    // Its usage stays in the ledger, and is not charged twice.
    pass(&fake, t(700)).await;
    assert_eq!(ledger(&fake), rows);
}
