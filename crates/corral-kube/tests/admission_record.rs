//! Where the operator keeps a job's admission: in its status (`status.admission`), made
//! durable in the same write as the status that announces it; the annotation that earlier
//! operators wrote is still honoured, and removed with the job's next status write.

mod common;

use common::passes::*;
use serde_json::{Value, json};

/// The job's writes in the fake API server's log: (to its status, to the object).
fn job_writes(log: &[String], name: &str) -> (usize, usize) {
    let patches = |suffix: &str| {
        log.iter()
            .filter(|l| l.starts_with("PATCH") && l.ends_with(suffix))
            .count()
    };
    (
        patches(&format!("/trainingjobs/{name}/status")),
        patches(&format!("/trainingjobs/{name}")),
    )
}

#[tokio::test]
async fn the_admission_is_recorded_in_the_status_write_that_announces_it() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(JOBS, job("llm", 1, 8, json!({})));
    fake.clear_log();
    pass(&fake, t(0)).await;
    let (status_writes, object_writes) = job_writes(&fake.log(), "llm");
    assert_eq!(status_writes, 1, "{:?}", fake.log());
    assert_eq!(object_writes, 0, "no annotation set: {:?}", fake.log());

    let status = job_status(&fake, "llm");
    assert_eq!(condition(&fake, "llm", "Admitted").as_deref(), Some("True"));
    let placements = status["admission"]["placements"]
        .as_array()
        .expect("placements recorded");
    assert_eq!(placements.len(), 2);
    for p in pods_of(&fake, "llm") {
        let role = &p["metadata"]["labels"]["corral.dev/role"];
        let index: u32 = p["metadata"]["labels"]["corral.dev/index"]
            .as_str()
            .and_then(|i| i.parse().ok())
            .expect("index");
        let placed = placements
            .iter()
            .find(|pl| &pl["role"] == role && pl["index"] == json!(index))
            .expect("a placement per pod");
        assert_eq!(p["spec"]["nodeName"], placed["node"]);
        assert_eq!(placed["gpuIndices"].as_array().map(Vec::len), Some(8));
    }
    assert!(status["admission"]["admittedAt"].is_string());

    // Finished: the status that says so drops the record, in one write.
    set_phase(&fake, "llm-master-0", "Succeeded", Some(0));
    set_phase(&fake, "llm-worker-0", "Succeeded", Some(0));
    fake.clear_log();
    pass(&fake, t(10)).await;
    assert_eq!(
        condition(&fake, "llm", "Succeeded").as_deref(),
        Some("True")
    );
    assert!(job_status(&fake, "llm")["admission"].is_null());
    assert_eq!(job_writes(&fake.log(), "llm"), (1, 0), "{:?}", fake.log());
}

#[tokio::test]
async fn an_admission_an_earlier_operator_annotated_is_kept_and_moved_into_the_status() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(JOBS, job("llm", 1, 8, json!({})));
    pass(&fake, t(0)).await;
    let pods_before: Vec<Value> = pods_of(&fake, "llm");
    assert_eq!(pods_before.len(), 2);

    // As an operator of the annotation format left it: the record in the annotation
    // (admittedAt in ms, placements as the status has them), none in the status.
    fake.update(JOBS, "ml", "llm", |j| {
        let record = j["status"]["admission"].take();
        let legacy = json!({
            "v": 1,
            "admittedAt": 1_735_689_600_000u64,
            "job": "ml/llm",
            "pool": record["pool"],
            "gpuType": record["gpuType"],
            "placements": record["placements"],
        });
        j["status"]
            .as_object_mut()
            .expect("status")
            .remove("admission");
        j["metadata"]["annotations"] = json!({"corral.dev/admission": legacy.to_string()});
    });
    set_phase(&fake, "llm-master-0", "Running", None);
    set_phase(&fake, "llm-worker-0", "Running", None);
    let (plan, report) = pass(&fake, t(5)).await;
    assert!(
        !event_reasons(&plan)
            .iter()
            .any(|r| r == "AdmissionLost" || r == "Admitted"),
        "the annotated admission is held as it was: {:?}",
        event_reasons(&plan)
    );
    assert_eq!(report.pods_deleted, 0);
    assert_eq!(report.pods_created, 0);
    assert_eq!(condition(&fake, "llm", "Running").as_deref(), Some("True"));
    let job = fake.get(JOBS, "ml", "llm").expect("job");
    assert!(
        job["metadata"]["annotations"]["corral.dev/admission"].is_null(),
        "the annotation goes with the first status write: {}",
        job["metadata"]
    );
    assert_eq!(
        nodes(&job["status"]["admission"]["placements"]),
        pods_before
            .iter()
            .map(|p| p["spec"]["nodeName"].clone())
            .collect::<Vec<_>>(),
        "the same placements, now in the status"
    );
    assert_eq!(
        job["status"]["admission"]["admittedAt"],
        json!("2025-01-01T00:00:00Z")
    );
}

/// The node of each placement, master first (as `pods_of` lists the pods).
fn nodes(placements: &Value) -> Vec<Value> {
    let mut ps: Vec<&Value> = placements
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    ps.sort_by_key(|p| (p["role"] != json!("master"), p["index"].as_u64()));
    ps.iter().map(|p| p["node"].clone()).collect()
}

fn foreign_pod(name: &str, node: &str, gpus: u32) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                 "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"},
    })
}

/// A waiting job's status that changes in words only (how many GPUs are free now) is not
/// rewritten every pass; a change that matters (its admission) is written at once.
#[tokio::test]
async fn a_waiting_jobs_new_words_are_not_written_every_pass() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(PODS, foreign_pod("f1", "n2", 2));
    fake.insert(JOBS, job("big", 1, 8, json!({})));
    let applier = corral_kube::apply::Applier::new(
        fake.client(),
        None,
        corral_kube::apply::RateLimiter::unlimited(),
    );
    let cfg = corral_kube::plan::PlanConfig::default();
    let once = |at| common::passes::kept_pass(&fake, &applier, &cfg, at);
    once(t(0)).await;
    let first = job_status(&fake, "big");
    assert_eq!(first["phase"], json!("Queued"), "{first}");

    // Other GPUs taken: the same wait, other numbers.
    fake.remove(PODS, "other", "f1");
    fake.insert(PODS, foreign_pod("f2", "n2", 4));
    fake.clear_log();
    let (plan, _) = once(t(1)).await;
    let jp = plan.jobs.iter().find(|j| j.name == "big").expect("planned");
    assert!(
        jp.status.is_some() && jp.status_words_only,
        "{:?}",
        jp.status
    );
    assert_eq!(job_writes(&fake.log(), "big"), (0, 0), "{:?}", fake.log());
    assert_eq!(job_status(&fake, "big"), first, "kept as written");

    // Room: admitted, written at once.
    fake.remove(PODS, "other", "f2");
    once(t(2)).await;
    assert_eq!(condition(&fake, "big", "Admitted").as_deref(), Some("True"));
    assert!(job_status(&fake, "big")["admission"].is_object());
}
