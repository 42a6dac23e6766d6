//! Kubeflow manifests convert faithfully: real ones from Kubeflow's repositories
//! (../shared/kubeflow-examples) and the wilder shapes users write; what cannot be converted
//! is an error that says so.

mod common;
use common::{assert_has, errors, shared_dir, valid};
use corral_api::document::Document;
use corral_api::{Framework, Role, TrainingJob};

fn job(text: &str) -> TrainingJob {
    match valid(text).into_iter().next() {
        Some(Document::TrainingJob(j)) => *j,
        other => panic!("expected a TrainingJob, got {other:?}"),
    }
}

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(path).expect("fixture")
}

fn shared_example(name: &str) -> String {
    std::fs::read_to_string(shared_dir().join("kubeflow-examples").join(name))
        .expect("shared example")
}

fn yaml(job: &TrainingJob) -> String {
    serde_saphyr::to_string(job).expect("yaml")
}

#[test]
fn every_shared_kubeflow_example_converts() {
    let dir = shared_dir().join("kubeflow-examples");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("../shared/kubeflow-examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 7);
    for path in names {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let j = job(&std::fs::read_to_string(&path).expect("read"));
        insta::assert_snapshot!(format!("shared__{name}"), yaml(&j));
    }
}

#[test]
fn pytorch_mnist_gloo_keeps_gpus_args_and_restart_policy() {
    let j = job(&shared_example(
        "pytorch-mnist-v1-pytorch_job_mnist_gloo.yaml",
    ));
    assert_eq!(j.spec.framework, Framework::PyTorch);
    assert_eq!(j.metadata.name, "pytorch-dist-mnist-gloo");
    let master = &j.spec.replicas[&Role::Master];
    assert_eq!(master.count, 1);
    assert_eq!(master.resources.gpu, 1);
    assert_eq!(master.template.args, ["--backend", "gloo"]);
    assert_eq!(
        master.template.image.as_deref(),
        Some("kubeflow/pytorch-dist-mnist:latest")
    );
    assert_eq!(
        master.restart_policy,
        Some(corral_api::RestartPolicy::OnFailure)
    );
    assert_eq!(j.spec.replicas[&Role::Worker].count, 1);
}

#[test]
fn tfjob_roles_and_xgboost_ports() {
    let j = job(&shared_example("tensorflow-dist-mnist-tf_job_mnist.yaml"));
    let roles: Vec<Role> = j.spec.replicas.keys().copied().collect();
    assert_eq!(roles, [Role::Chief, Role::Ps, Role::Worker]);
    assert_eq!(j.spec.replicas[&Role::Worker].count, 2);
    let x = job(&shared_example("xgboost-xgboostjob.yaml"));
    assert_eq!(x.spec.framework, Framework::XGBoost);
    assert_eq!(
        x.spec.replicas[&Role::Worker].restart_policy,
        Some(corral_api::RestartPolicy::ExitCode)
    );
    // imagePullPolicy and the named port are kept for the Kubernetes shell, not dropped.
    let pod = x.spec.replicas[&Role::Master]
        .template
        .pod_template
        .as_ref()
        .expect("pod template kept");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(container["ports"][0]["containerPort"], 9991);
}

#[test]
fn mpijob_v2beta1_pi() {
    let j = job(&shared_example("mpi-v2beta1-pi-pi.yaml"));
    assert_eq!(j.spec.framework, Framework::Mpi);
    let mpi = j.spec.mpi.as_ref().expect("mpi options");
    assert_eq!(mpi.slots_per_worker, Some(1));
    assert_eq!(
        mpi.ssh_auth_mount_path.as_deref(),
        Some("/home/mpiuser/.ssh")
    );
    assert_eq!(
        j.spec.run_policy.clean_pod_policy,
        Some(corral_api::CleanPodPolicy::Running)
    );
    assert_eq!(j.spec.run_policy.ttl_seconds_after_finished, Some(60));
    let launcher = &j.spec.replicas[&Role::Launcher];
    assert_eq!(launcher.template.command, ["mpirun"]);
    assert_eq!(launcher.template.args, ["-n", "2", "/home/mpiuser/pi"]);
    assert_eq!(
        launcher.resources.cpu.as_ref().map(|q| q.as_str()),
        Some("1")
    );
    assert_eq!(
        launcher.resources.memory.as_ref().map(|q| q.as_str()),
        Some("1Gi")
    );
    let pod = launcher
        .template
        .pod_template
        .as_ref()
        .expect("securityContext kept");
    assert_eq!(
        pod["spec"]["containers"][0]["securityContext"]["runAsUser"],
        1000
    );
}

#[test]
fn elastic_pytorch_with_gpu_product_volumes_and_secrets() {
    let j = job(&fixture("kubeflow/pytorch-elastic.yaml"));
    insta::assert_snapshot!("fixture__pytorch-elastic", yaml(&j));
    let e = j.spec.elastic.as_ref().expect("elastic");
    assert_eq!(
        (e.min_replicas, e.max_replicas, e.max_restarts),
        (Some(1), Some(2), Some(100))
    );
    assert_eq!(
        e.rdzv_conf.get("join_timeout").map(String::as_str),
        Some("600")
    );
    assert_eq!(j.spec.nproc_per_node.as_deref(), Some("2"));
    assert_eq!(j.spec.queue.as_deref(), Some("team-a"));
    assert_eq!(j.spec.priority_class.as_deref(), Some("high"));
    let w = &j.spec.replicas[&Role::Worker];
    assert_eq!(w.resources.gpu, 2);
    assert_eq!(w.resources.gpu_types, ["NVIDIA-A100-SXM4-80GB"]);
    // Requests are reserved; the larger CPU limit stays on the pod.
    assert_eq!(w.resources.cpu.as_ref().map(|q| q.as_str()), Some("4"));
    let pod = w.template.pod_template.as_ref().expect("pod template");
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "8"
    );
    assert!(
        pod["spec"].get("nodeSelector").is_none(),
        "gpu.product became gpuTypes"
    );
    assert_eq!(pod["spec"]["volumes"][0]["name"], "dshm");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
    assert_eq!(
        pod["metadata"]["annotations"]["sidecar.istio.io/inject"],
        "false"
    );
    let secret = w
        .template
        .env
        .iter()
        .find(|v| v.name == "WANDB_API_KEY")
        .expect("secret env");
    assert!(secret.value_from.is_some());
}

#[test]
fn tfjob_with_sidecar_port_and_any_case_roles() {
    let j = job(&fixture("kubeflow/tfjob-chief-eval.yaml"));
    insta::assert_snapshot!("fixture__tfjob-chief-eval", yaml(&j));
    let roles: Vec<Role> = j.spec.replicas.keys().copied().collect();
    assert_eq!(
        roles,
        [Role::Chief, Role::Ps, Role::Worker, Role::Evaluator]
    );
    assert_eq!(j.spec.port, Some(2223));
    assert_eq!(
        j.spec.success_policy,
        Some(corral_api::SuccessPolicy::AllWorkers)
    );
    let chief = j.spec.replicas[&Role::Chief]
        .template
        .pod_template
        .as_ref()
        .expect("sidecar kept");
    let names: Vec<&str> = chief["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["tensorflow", "log-shipper"]);
    assert_eq!(j.spec.replicas[&Role::Worker].resources.gpu, 1);
}

#[test]
fn horovod_mpijob() {
    let j = job(&fixture("kubeflow/mpi-horovod.yaml"));
    let mpi = j.spec.mpi.as_ref().expect("mpi");
    assert_eq!(mpi.slots_per_worker, Some(4));
    assert_eq!(
        mpi.launcher_creation_policy,
        Some(corral_api::LauncherCreationPolicy::WaitForWorkersReady)
    );
    assert_eq!(j.spec.replicas[&Role::Worker].resources.gpu, 4);
    assert_eq!(j.spec.total_gpus(), 8);
}

#[test]
fn what_cannot_be_converted_is_an_error() {
    let e = errors(&fixture("invalid/kubeflow-unconvertible.yaml"));
    // What Kubeflow accepts and Corral does not honour is a warning, not one of these.
    assert!(
        !e.iter()
            .any(|f| f.contains("metrics") || f.contains("scheduleTimeout")),
        "{e:?}"
    );
    assert_has(
        &e,
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
        "name it `pytorch`",
    );
    assert_has(
        &e,
        "spec.pytorchReplicaSpecs.Launcher",
        "not a replica type of PyTorchJob",
    );
    let e = errors("apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: {name: p}\nspec: {}\n");
    assert_has(&e, "kind", "cannot be converted");
    let e = errors("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: p}\nspec: {}\n");
    assert_has(&e, "apiVersion", "v2beta1");
    let e = errors(
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n  tfReplicaSpecs: {}\n  cleanPodPolicy: All\n",
    );
    assert_has(&e, "spec.cleanPodPolicy", "cannot convert");
    // A converted job is still validated as a TrainingJob.
    let e = errors(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: Bad_Name}\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 2\n      template: {spec: {containers: [{name: pytorch, image: x}]}}\n",
    );
    assert_has(&e, "metadata.name", "cannot be a hostname");
    assert_has(&e, "spec.replicas.master.count", "exactly one master");
}

#[test]
fn what_kubeflow_accepts_but_corral_does_not_honour_is_a_warning() {
    let text = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: warned
  finalizers: [example.com/keep]
spec:
  elasticPolicy:
    minReplicas: 1
    maxReplicas: 4
    metrics:
      - type: Resource
        resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
  runPolicy:
    schedulingPolicy:
      minAvailable: 1
      minResources: {cpu: 2}
      scheduleTimeoutSeconds: 60
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: a}]
";
    let raw: serde_json::Value = serde_saphyr::from_str(text).expect("yaml");
    let (job, warnings) = corral_api::kubeflow::convert_with_warnings(&raw).expect("accepted");
    assert_eq!(job.spec.replicas[&Role::Worker].count, 2);
    let paths: Vec<&str> = warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "metadata.finalizers",
            "spec.runPolicy.schedulingPolicy.minResources",
            "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
            "spec.elasticPolicy.metrics",
        ],
        "{warnings:?}"
    );
    assert!(
        warnings.iter().all(|w| w.message.starts_with("ignored")),
        "{warnings:?}"
    );
    // Through the parser too: the document is valid and carries its warnings.
    let parsed = corral_api::document::parse_documents(
        text,
        &corral_api::validate::ValidationContext::default(),
    );
    let p = parsed.into_iter().next().expect("one").expect("valid");
    assert_eq!(p.warnings.len(), 4);
    // A TFJob with dynamic workers runs with its fixed set.
    let tf = "apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: dyn}
spec:
  enableDynamicWorker: true
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: a}]}}
";
    let parsed = corral_api::document::parse_documents(
        tf,
        &corral_api::validate::ValidationContext::default(),
    );
    let p = parsed.into_iter().next().expect("one").expect("valid");
    assert_eq!(p.warnings[0].path, "spec.enableDynamicWorker");
}
