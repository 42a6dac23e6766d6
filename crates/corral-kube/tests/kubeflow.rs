//! Kubeflow's job kinds on Kubernetes against the mocked API server: served by Corral
//! (converted to an owned TrainingJob, status written back in Kubeflow's format) and
//! alongside Kubeflow's operator (kept suspended until admitted, then placed by node
//! affinity and unsuspended).

mod common;

use common::FakeApi;
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::kubeflow::{self, KubeflowAction, Mode};
use corral_kube::plan::PlanConfig;
use jiff::Timestamp;
use serde_json::{Value, json};

const PODS: &str = "api/v1/pods";
const JOBS: &str = "apis/corral.dev/v1alpha1/trainingjobs";
const PYTORCHJOBS: &str = "apis/kubeflow.org/v1/pytorchjobs";
const H100: &str = "NVIDIA-H100-80GB-HBM3";

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).expect("valid time")
}

fn cluster(nodes: &[&str]) -> FakeApi {
    let fake = FakeApi::new();
    for n in nodes {
        fake.insert(
            "api/v1/nodes",
            json!({
                "metadata": {"name": n, "labels": {"nvidia.com/gpu.product": H100}},
                "status": {
                    "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }),
        );
    }
    fake
}

fn replica(count: u32, gpus: u32) -> Value {
    json!({
        "replicas": count,
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [{
            "name": "pytorch",
            "image": "pytorch/pytorch:2.5.1",
            "command": ["python", "train.py"],
            "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4", "memory": "16Gi"}},
        }]}},
    })
}

fn pytorchjob(name: &str, workers: u32, gpus: u32, labels: Value, suspend: bool) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": {
            "runPolicy": {"suspend": suspend},
            "pytorchReplicaSpecs": {"Master": replica(1, gpus), "Worker": replica(workers, gpus)},
        },
    })
}

async fn operator_pass(fake: &FakeApi, now: Timestamp) {
    let applier = Applier::new(fake.client(), None, RateLimiter::unlimited());
    let (_, report) = common::passes::kept_pass(fake, &applier, &PlanConfig::default(), now).await;
    assert!(
        report.errors.is_empty(),
        "apply errors: {:?}",
        report.errors
    );
}

async fn kubeflow_pass(fake: &FakeApi, mode: Mode, now: Timestamp) -> Vec<KubeflowAction> {
    let (actions, report) = kubeflow::apply::reconcile_once(&fake.client(), None, mode, now)
        .await
        .expect("list");
    assert!(
        report.errors.is_empty(),
        "apply errors: {:?}",
        report.errors
    );
    actions
}

fn set_phase(fake: &FakeApi, name: &str, phase: &str) {
    fake.update(PODS, "ml", name, |p| p["status"]["phase"] = json!(phase));
}

fn kf_condition(job: &Value, ty: &str) -> Option<String> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == json!(ty))
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

#[tokio::test]
async fn serve_converts_a_pytorchjob_runs_it_and_writes_kubeflow_status_back() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(PYTORCHJOBS, pytorchjob("bert", 1, 8, json!({}), false));
    let kf_uid = fake.get(PYTORCHJOBS, "ml", "bert").expect("job")["metadata"]["uid"].clone();

    // The Kubeflow job becomes a TrainingJob it owns.
    kubeflow_pass(&fake, Mode::Serve, t(0)).await;
    let tj = fake
        .get(JOBS, "ml", "bert")
        .expect("owned TrainingJob created");
    assert_eq!(tj["spec"]["framework"], json!("pytorch"));
    assert_eq!(
        tj["spec"]["replicas"]["worker"]["resources"]["gpu"],
        json!(8)
    );
    let owner = &tj["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], json!("PyTorchJob"));
    assert_eq!(owner["uid"], kf_uid);
    assert_eq!(owner["controller"], json!(true));

    // Corral's operator admits and starts it like any TrainingJob; pods carry Kubeflow's labels.
    operator_pass(&fake, t(1)).await;
    let pods = fake.list(PODS);
    assert_eq!(pods.len(), 2);
    for p in &pods {
        assert_eq!(
            p["metadata"]["labels"]["training.kubeflow.org/job-name"],
            json!("bert")
        );
        assert!(p["spec"]["nodeName"].is_string(), "bound: {p}");
    }
    let master = pods
        .iter()
        .find(|p| p["metadata"]["name"] == json!("bert-master-0"))
        .expect("master pod");
    assert_eq!(
        master["metadata"]["labels"]["training.kubeflow.org/replica-type"],
        json!("master")
    );

    // Before anything runs: Created, no Running.
    kubeflow_pass(&fake, Mode::Serve, t(2)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "bert").expect("job");
    assert_eq!(kf_condition(&kf, "Created").as_deref(), Some("True"));
    assert_eq!(kf_condition(&kf, "Running"), None);
    assert_eq!(
        kf["status"]["replicaStatuses"]["Master"]["active"],
        json!(0)
    );

    // Running: Kubeflow's condition, replica counts by Kubeflow's replica types.
    set_phase(&fake, "bert-master-0", "Running");
    set_phase(&fake, "bert-worker-0", "Running");
    operator_pass(&fake, t(3)).await;
    kubeflow_pass(&fake, Mode::Serve, t(4)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "bert").expect("job");
    assert_eq!(kf_condition(&kf, "Running").as_deref(), Some("True"));
    assert_eq!(
        kf["status"]["replicaStatuses"]["Master"]["active"],
        json!(1)
    );
    assert_eq!(
        kf["status"]["replicaStatuses"]["Worker"]["active"],
        json!(1)
    );
    assert!(kf["status"]["startTime"].is_string());
    assert_eq!(
        kf["status"]["conditions"][1]["reason"],
        json!("PyTorchJobRunning")
    );

    // A pass with nothing new writes nothing.
    assert!(kubeflow_pass(&fake, Mode::Serve, t(5)).await.is_empty());

    // Succeeded: the last condition (kubectl's State column), Running turned False.
    set_phase(&fake, "bert-master-0", "Succeeded");
    set_phase(&fake, "bert-worker-0", "Succeeded");
    operator_pass(&fake, t(6)).await;
    kubeflow_pass(&fake, Mode::Serve, t(7)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "bert").expect("job");
    let conds = kf["status"]["conditions"].as_array().expect("conditions");
    assert_eq!(conds.last().expect("last")["type"], json!("Succeeded"));
    assert_eq!(kf_condition(&kf, "Running").as_deref(), Some("False"));
    assert_eq!(
        kf["status"]["replicaStatuses"]["Master"]["succeeded"],
        json!(1)
    );
    assert!(kf["status"]["completionTime"].is_string());
}

#[tokio::test]
async fn serve_suspend_of_the_kubeflow_job_suspends_its_training_job() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(PYTORCHJOBS, pytorchjob("s", 1, 8, json!({}), false));
    kubeflow_pass(&fake, Mode::Serve, t(0)).await;
    operator_pass(&fake, t(1)).await;
    assert_eq!(fake.list(PODS).len(), 2);

    fake.update(PYTORCHJOBS, "ml", "s", |j| {
        j["spec"]["runPolicy"]["suspend"] = json!(true)
    });
    kubeflow_pass(&fake, Mode::Serve, t(2)).await;
    let tj = fake.get(JOBS, "ml", "s").expect("tj");
    assert_eq!(tj["spec"]["runPolicy"]["suspend"], json!(true));
    operator_pass(&fake, t(3)).await;
    fake.finish_terminating();
    operator_pass(&fake, t(4)).await;
    kubeflow_pass(&fake, Mode::Serve, t(5)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "s").expect("job");
    assert_eq!(
        kf_condition(&kf, "Suspended").as_deref(),
        Some("True"),
        "{}",
        kf["status"]
    );
}

#[tokio::test]
async fn serve_a_job_that_does_not_convert_fails_with_the_field_named_once() {
    let fake = cluster(&["n1"]);
    let mut job = pytorchjob("bad", 1, 1, json!({}), false);
    job["spec"]["pytorchReplicaSpecs"]["Wokrer"] =
        job["spec"]["pytorchReplicaSpecs"]["Worker"].take();
    job["spec"]["pytorchReplicaSpecs"]
        .as_object_mut()
        .expect("specs")
        .remove("Worker");
    fake.insert(PYTORCHJOBS, job);

    kubeflow_pass(&fake, Mode::Serve, t(0)).await;
    assert!(
        fake.get(JOBS, "ml", "bad").is_none(),
        "no TrainingJob for an invalid job"
    );
    let kf = fake.get(PYTORCHJOBS, "ml", "bad").expect("job");
    assert_eq!(kf_condition(&kf, "Failed").as_deref(), Some("True"));
    let failed = kf["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == json!("Failed")))
        .expect("failed condition");
    assert_eq!(failed["reason"], json!("InvalidSpec"));
    let msg = failed["message"].as_str().expect("message");
    assert!(msg.contains("spec.pytorchReplicaSpecs.Wokrer"), "{msg}");
    assert!(msg.contains("worker"), "says what is valid: {msg}");
    // Said once: the next pass writes nothing.
    assert!(kubeflow_pass(&fake, Mode::Serve, t(1)).await.is_empty());
}

#[tokio::test]
async fn serve_does_not_take_over_a_training_job_of_the_same_name() {
    let fake = cluster(&["n1"]);
    fake.insert(
        JOBS,
        json!({"metadata": {"name": "x", "namespace": "ml"},
               "spec": {"framework": "generic", "replicas": {"worker": {"count": 1,
                        "template": {"image": "busybox", "command": ["true"]}}}}}),
    );
    fake.insert(PYTORCHJOBS, pytorchjob("x", 1, 1, json!({}), false));
    kubeflow_pass(&fake, Mode::Serve, t(0)).await;
    let tj = fake.get(JOBS, "ml", "x").expect("tj");
    assert_eq!(
        tj["spec"]["framework"],
        json!("generic"),
        "the user's job is left as it is"
    );
    let kf = fake.get(PYTORCHJOBS, "ml", "x").expect("job");
    assert_eq!(kf_condition(&kf, "Failed").as_deref(), Some("True"));
}

#[test]
fn status_keys_replica_types_as_the_manifest_spells_them() {
    // TFJob's `Master` is Corral's chief; the status says `Master`, as Kubeflow would.
    let raw = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "tf", "namespace": "ml", "uid": "u1"},
        "spec": {"tfReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}},
            "PS": {"replicas": 2, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}},
        }},
    });
    let job = kubeflow::KubeflowJob::new(raw).expect("kind");
    let tj = kubeflow::serve::convert(&job).expect("converts");
    let status = kubeflow::status::kubeflow_status(&job, &tj, t(0));
    let mut keys: Vec<&String> = status["replicaStatuses"]
        .as_object()
        .expect("replica statuses")
        .keys()
        .collect();
    keys.sort();
    assert_eq!(keys, ["Master", "PS"]);
    assert_eq!(status["conditions"][0]["reason"], json!("TFJobCreated"));
}

fn placements(fake: &FakeApi, name: &str) -> Value {
    let tj = fake.get(JOBS, "ml", name).expect("workload");
    tj["status"]["admission"].clone()
}

#[tokio::test]
async fn alongside_keeps_a_labelled_job_suspended_until_admitted_then_places_and_unsuspends_it() {
    let fake = cluster(&["n1", "n2", "n3"]);
    // Submitted without suspend: Corral suspends it on sight.
    fake.insert(
        PYTORCHJOBS,
        pytorchjob("llm", 1, 8, json!({"corral.dev/queue": "default"}), false),
    );
    // Unlabelled: Kubeflow's alone.
    fake.insert(PYTORCHJOBS, pytorchjob("plain", 1, 8, json!({}), false));

    kubeflow_pass(&fake, Mode::Alongside, t(0)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "llm").expect("job");
    assert_eq!(kf["spec"]["runPolicy"]["suspend"], json!(true));
    let workload = fake.get(JOBS, "ml", "llm").expect("workload created");
    assert_eq!(
        workload["metadata"]["annotations"]["corral.dev/runner"],
        json!("kubeflow.org")
    );
    assert!(fake.get(JOBS, "ml", "plain").is_none());
    assert_eq!(
        fake.get(PYTORCHJOBS, "ml", "plain").expect("plain")["spec"]["runPolicy"]["suspend"],
        json!(false)
    );

    // The control plane admits the workload; Corral creates none of its pods.
    operator_pass(&fake, t(1)).await;
    assert!(
        fake.list(PODS).is_empty(),
        "Kubeflow's operator makes the pods"
    );
    let admission = placements(&fake, "llm");
    assert_eq!(admission["placements"].as_array().map(Vec::len), Some(2));
    assert!(fake.get("api/v1/services", "ml", "llm").is_none());

    // Applied to the Kubeflow job: affinity to the placed nodes per replica type, unsuspended.
    kubeflow_pass(&fake, Mode::Alongside, t(2)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "llm").expect("job");
    assert_eq!(kf["spec"]["runPolicy"]["suspend"], json!(false));
    for (rtype, role) in [("Master", "master"), ("Worker", "worker")] {
        let node = admission["placements"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["role"] == json!(role)))
            .expect("placement")["node"]
            .clone();
        let tpl = &kf["spec"]["pytorchReplicaSpecs"][rtype]["template"];
        let expr = &tpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0];
        assert_eq!(expr["key"], json!("kubernetes.io/hostname"));
        assert_eq!(expr["values"], json!([node]), "{rtype}");
        assert_eq!(
            tpl["metadata"]["labels"]["corral.dev/job-name"],
            json!("llm")
        );
        // The user's container is untouched.
        assert_eq!(
            tpl["spec"]["containers"][0]["image"],
            json!("pytorch/pytorch:2.5.1")
        );
    }
    // Stable: nothing more to do.
    operator_pass(&fake, t(3)).await;
    let again = kubeflow_pass(&fake, Mode::Alongside, t(4)).await;
    assert!(again.is_empty(), "{again:?}");

    // Kubeflow's operator finished it: the workload goes, its GPUs are free.
    fake.update(PYTORCHJOBS, "ml", "llm", |j| {
        j["status"] = json!({"conditions": [{"type": "Succeeded", "status": "True"}]});
    });
    kubeflow_pass(&fake, Mode::Alongside, t(5)).await;
    assert!(fake.get(JOBS, "ml", "llm").is_none(), "workload deleted");
}

/// Kubeflow's pods of an admitted workload are the workload's, not foreign usage: the
/// admission stays (no over-commit seen), and a second job waits for the room.
#[tokio::test]
async fn alongside_counts_kubeflow_pods_once() {
    let fake = cluster(&["n1", "n2"]);
    fake.insert(
        PYTORCHJOBS,
        pytorchjob("a", 1, 8, json!({"corral.dev/queue": "default"}), true),
    );
    kubeflow_pass(&fake, Mode::Alongside, t(0)).await;
    operator_pass(&fake, t(1)).await;
    kubeflow_pass(&fake, Mode::Alongside, t(2)).await;
    let admission = placements(&fake, "a");
    // What Kubeflow's operator and kube-scheduler would make of it: pods labelled by the
    // patched templates, bound to the placed nodes.
    for p in admission["placements"].as_array().expect("placements") {
        let role = p["role"].as_str().expect("role");
        let name = format!("a-{role}-{}", p["index"]);
        fake.insert(
            PODS,
            json!({
                "metadata": {"name": name, "namespace": "ml", "labels": {
                    "corral.dev/job-name": "a", "training.kubeflow.org/job-name": "a",
                    "training.kubeflow.org/replica-type": role}},
                "spec": {"nodeName": p["node"], "containers": [{"name": "pytorch", "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": "Running"},
            }),
        );
    }
    fake.insert(
        PYTORCHJOBS,
        pytorchjob("b", 1, 8, json!({"corral.dev/queue": "default"}), true),
    );
    kubeflow_pass(&fake, Mode::Alongside, t(3)).await;
    operator_pass(&fake, t(4)).await;
    operator_pass(&fake, t(5)).await;
    assert_eq!(
        placements(&fake, "a"),
        admission,
        "the first admission holds"
    );
    let b = fake.get(JOBS, "ml", "b").expect("workload b");
    assert!(b["status"]["admission"].is_null(), "b waits");
    kubeflow_pass(&fake, Mode::Alongside, t(6)).await;
    assert_eq!(
        fake.get(PYTORCHJOBS, "ml", "b").expect("b")["spec"]["runPolicy"]["suspend"],
        json!(true)
    );
}

#[tokio::test]
async fn alongside_a_labelled_job_that_does_not_convert_stays_suspended_and_is_told_once() {
    let fake = cluster(&["n1"]);
    let mut job = pytorchjob("odd", 1, 1, json!({"corral.dev/queue": "default"}), false);
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = json!("one");
    fake.insert(PYTORCHJOBS, job);
    kubeflow_pass(&fake, Mode::Alongside, t(0)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "odd").expect("job");
    assert_eq!(kf["spec"]["runPolicy"]["suspend"], json!(true));
    let why = kf["metadata"]["annotations"]["corral.dev/invalid"]
        .as_str()
        .expect("why");
    assert!(
        why.contains("spec.pytorchReplicaSpecs.Master.replicas"),
        "{why}"
    );
    assert!(kubeflow_pass(&fake, Mode::Alongside, t(1)).await.is_empty());
    assert!(fake.get(JOBS, "ml", "odd").is_none());
}

#[test]
fn kubeflow_crds_are_structural_and_deploy_copy_is_current() {
    let text = kubeflow::crds::render().expect("render");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubeflow-crds.yaml"
    );
    if std::env::var_os("UPDATE_GOLDENS").is_some() {
        std::fs::write(path, &text).expect("write deploy/kubeflow-crds.yaml");
    }
    let on_disk = std::fs::read_to_string(path).expect("deploy/kubeflow-crds.yaml exists");
    assert_eq!(
        on_disk, text,
        "deploy/kubeflow-crds.yaml is stale: UPDATE_GOLDENS=1 rewrites it"
    );
    for crd in kubeflow::crds::all_crds() {
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        fn typed(v: &Value, path: &str) {
            assert!(v["type"].is_string(), "{path} has no type");
            if let Some(props) = v["properties"].as_object() {
                for (k, p) in props {
                    typed(p, &format!("{path}.{k}"));
                }
            }
        }
        typed(schema, "openAPIV3Schema");
        assert_eq!(
            crd["spec"]["versions"][0]["subresources"]["status"],
            json!({})
        );
    }
}

/// A finished job is never run again; after its TTL (the control plane deletes the
/// TrainingJob) the Kubeflow job itself goes, as Kubeflow's operator does.
#[tokio::test]
async fn serve_ttl_deletes_the_finished_kubeflow_job_and_never_reruns_it() {
    let fake = cluster(&["n1", "n2"]);
    let mut job = pytorchjob("once", 1, 8, json!({}), false);
    job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = json!(60);
    fake.insert(PYTORCHJOBS, job);
    kubeflow_pass(&fake, Mode::Serve, t(0)).await;
    operator_pass(&fake, t(1)).await;
    for p in ["once-master-0", "once-worker-0"] {
        set_phase(&fake, p, "Succeeded");
    }
    operator_pass(&fake, t(2)).await;
    kubeflow_pass(&fake, Mode::Serve, t(3)).await;
    let kf = fake.get(PYTORCHJOBS, "ml", "once").expect("job");
    assert_eq!(kf_condition(&kf, "Succeeded").as_deref(), Some("True"));

    // Within the TTL nothing goes.
    operator_pass(&fake, t(30)).await;
    assert!(kubeflow_pass(&fake, Mode::Serve, t(31)).await.is_empty());
    assert!(fake.get(JOBS, "ml", "once").is_some());

    // After it: the TrainingJob, then the Kubeflow job; nothing is re-created.
    operator_pass(&fake, t(120)).await;
    assert!(
        fake.get(JOBS, "ml", "once").is_none(),
        "TrainingJob deleted after its TTL"
    );
    kubeflow_pass(&fake, Mode::Serve, t(121)).await;
    assert!(fake.get(JOBS, "ml", "once").is_none(), "not run again");
    assert!(
        fake.get(PYTORCHJOBS, "ml", "once").is_none(),
        "Kubeflow job deleted after its TTL"
    );
}
