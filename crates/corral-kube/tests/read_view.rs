//! What the operator's read API answers from a pass (against the mocked API server of
//! `common`): the same summaries, details, nodes and usage the embedded server gives, made
//! from the world and the plane of the pass.

mod common;

use common::passes::*;
use corral_kube::operator::observe_api;
use corral_kube::plan::PlanConfig;
use corral_kube::read_api::Snapshot;
use serde_json::json;

async fn snapshot(fake: &common::FakeApi, secs: i64) -> Snapshot {
    let cfg = PlanConfig {
        read_view: true,
        ..PlanConfig::default()
    };
    let (mut plan, _) = pass_with(fake, &cfg, t(secs)).await;
    let view = plan.view.take().expect("a read view");
    Snapshot {
        world: observe_api(&fake.client()).await.expect("observe"),
        cluster: view.cluster,
        plane: view.plane,
        runs: Vec::new(),
        pipelines: Vec::new(),
        served_models: Vec::new(),
    }
}

#[tokio::test]
async fn a_pass_answers_list_describe_nodes_and_usage() {
    let fake = cluster(&["n1"]);
    // Eight GPUs: the first job takes six, the second waits for four.
    fake.insert(JOBS, job("big", 2, 2, json!({})));
    fake.insert(JOBS, job("wait", 1, 2, json!({})));
    snapshot(&fake, 0).await;
    set_phase(&fake, "big-master-0", "Running", None);
    let snap = snapshot(&fake, 60).await;

    let rows = snap.summaries(|_| true);
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["big", "wait"]);
    assert_eq!(rows[0].gpus, 6);
    assert_eq!(rows[0].replicas_total, 3);
    assert!(snap.summaries(|ns| ns == "other").is_empty());

    let big = snap.details("ml", "big", Vec::new()).expect("big");
    let admission = big.admission.expect("admitted");
    assert_eq!(admission.gpu_type.as_deref(), Some(H100));
    assert_eq!(big.replicas.len(), 3, "{:?}", big.replicas);
    let master = &big.replicas[0];
    assert_eq!((master.role.as_str(), master.index), ("master", 0));
    assert_eq!(master.phase, "Running");
    assert_eq!(master.gpus.len(), 2);
    assert!(big.pending_reason.is_none());
    let wait = snap.details("ml", "wait", Vec::new()).expect("wait");
    assert!(wait.admission.is_none());
    let reason = wait.pending_reason.expect("why it waits");
    assert!(reason.contains("GPU"), "{reason}");
    assert!(snap.details("ml", "nope", Vec::new()).is_none());

    let nodes = snap.nodes();
    assert_eq!(nodes.len(), 1);
    let held: Vec<_> = nodes[0]
        .gpus
        .iter()
        .filter_map(|g| g.used_by.as_deref())
        .collect();
    assert_eq!(held, vec!["ml/big"; 6]);
    assert_eq!(nodes[0].pool.as_deref(), Some(H100));

    let queues = &snap.plane.queues;
    assert_eq!(queues.len(), 1);
    assert_eq!((queues[0].admitted, queues[0].pending), (1, 1));

    // An admission held for a minute, charged until the pass: six GPU-minutes.
    let usage = snap.usage(Some("ml"), 0, u64::MAX);
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].gpu_seconds(), 360.0);
    assert!(snap.usage(Some("other"), 0, u64::MAX).is_empty());
}
