//! Golden tests of the pure pipeline: a job, nodes (and pods of other schedulers) in; the
//! headless Service, launch ConfigMap, replica Pods and Bindings out, as YAML. Set
//! `UPDATE_GOLDENS=1` to rewrite `expected.yaml` after an intended change.

use std::path::Path;

use corral_kube::World;
use corral_kube::plan::{PlanConfig, plan};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Fixture {
    job: corral_api::TrainingJob,
    #[serde(default)]
    queues: Vec<corral_api::Queue>,
    nodes: Vec<Node>,
    #[serde(default)]
    pods: Vec<Pod>,
}

fn now() -> jiff::Timestamp {
    "2025-01-01T00:05:00Z".parse().expect("timestamp")
}

fn render(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("input.yaml")).expect("input.yaml");
    let f: Fixture = serde_saphyr::from_str(&text).expect("fixture parses");
    let world = World {
        jobs: vec![f.job.into()],
        queues: f.queues,
        nodes: f.nodes.into_iter().map(Into::into).collect(),
        pods: f.pods.into_iter().map(Into::into).collect(),
        ..World::default()
    };
    let p = plan(&world, &PlanConfig::default(), now());
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let jp = &p.jobs[0];
    assert!(
        jp.events.iter().all(|e| !e.warning),
        "unexpected warnings: {:?}",
        jp.events
    );
    let out = json!({
        "service": jp.service,
        "configMap": jp.config_map,
        "sshSecret": jp.ssh_secret,
        "pods": jp.create,
        "bindings": jp.bind.iter().map(|b| json!({"pod": b.pod, "node": b.node})).collect::<Vec<Value>>(),
        "events": jp.events.iter().map(|e| format!("{}: {}", e.reason, e.note)).collect::<Vec<String>>(),
    });
    serde_saphyr::to_string(&out).expect("yaml")
}

fn check(case: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(case);
    let got = render(&dir);
    let path = dir.join("expected.yaml");
    if std::env::var_os("UPDATE_GOLDENS").is_some() || !path.exists() {
        std::fs::write(&path, &got).expect("write golden");
    }
    let want = std::fs::read_to_string(&path).expect("expected.yaml");
    assert_eq!(
        got, want,
        "golden {case} differs; UPDATE_GOLDENS=1 rewrites it"
    );
}

#[test]
fn golden_pytorch_ddp() {
    check("pytorch-ddp");
}

#[test]
fn golden_tensorflow_ps_with_pod_template_taints_and_foreign_pods() {
    check("tensorflow-ps");
}

#[test]
fn golden_mpi_hostfile() {
    check("mpi");
}
