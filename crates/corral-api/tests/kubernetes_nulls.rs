//! Kubernetes semantics in imported manifests: an explicit YAML null is an absent field,
//! so manifests that Kubernetes and the Kubeflow operators accept (kubectl writes
//! `creationTimestamp: null`; generated manifests write `env: null`, `args: null`, ...) are
//! accepted here too, and mean what they mean there.

mod common;

use common::{errors, valid};
use corral_api::document::Document;
use corral_api::training_job::Role;

const ELASTIC: &str = r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: elastic-example-imagenet
  namespace: null
  creationTimestamp: null
  labels: null
spec:
  runPolicy:
    cleanPodPolicy: None
    backoffLimit: null
    schedulingPolicy: null
  elasticPolicy:
    rdzvBackend: c10d
    minReplicas: 1
    maxReplicas: 2
    maxRestarts: 100
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        metadata:
          creationTimestamp: null
          annotations: null
        spec:
          nodeSelector: null
          volumes: null
          containers:
            - name: pytorch
              image: kubeflow/pytorch-elastic-example-imagenet:latest
              imagePullPolicy: IfNotPresent
              env: null
              ports: null
              resources: {}
              args: null
              command: [python, -m, torch.distributed.run, /workspace/examples/imagenet.py]
              workingDir: null
              volumeMounts: null
status: {}
"#;

const MPI: &str = r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi}
spec:
  slotsPerWorker: 1
  runPolicy: {cleanPodPolicy: Running, ttlSecondsAfterFinished: 60}
  sshAuthMountPath: /home/mpiuser/.ssh
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - image: mpioperator/mpi-pi:openmpi
            name: mpi-launcher
            securityContext: {runAsUser: 1000}
            command: [mpirun]
            args: [-n, "2", /home/mpiuser/pi]
            resources: {limits: {cpu: 1, memory: 1Gi}}
            env: null
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - image: mpioperator/mpi-pi:openmpi
            name: mpi-worker
            command: [/usr/sbin/sshd]
            args: [-De, -f, /home/mpiuser/.sshd_config]
            resources: {limits: {cpu: 1, memory: null}}
"#;

fn job(docs: Vec<Document>) -> corral_api::TrainingJob {
    match docs.into_iter().next() {
        Some(Document::TrainingJob(j)) => *j,
        other => panic!("expected a TrainingJob, got {other:?}"),
    }
}

#[test]
fn the_kubeflow_elastic_example_with_nulls_is_accepted_as_if_they_were_absent() {
    let j = job(valid(ELASTIC));
    assert_eq!(j.metadata.namespace, None);
    assert!(j.metadata.labels.is_empty());
    let w = &j.spec.replicas[&Role::Worker];
    assert_eq!(w.count, 2);
    assert!(w.template.args.is_empty());
    assert!(w.template.env.is_empty());
    assert_eq!(w.template.working_dir, None);
    assert_eq!(
        w.template.image.as_deref(),
        Some("kubeflow/pytorch-elastic-example-imagenet:latest")
    );
    let elastic = j.spec.elastic.expect("elastic policy");
    assert_eq!(
        (elastic.min_replicas, elastic.max_replicas),
        (Some(1), Some(2))
    );
}

#[test]
fn an_mpi_v2beta1_manifest_with_null_env_is_accepted() {
    let j = job(valid(MPI));
    let launcher = &j.spec.replicas[&Role::Launcher];
    assert!(launcher.template.env.is_empty());
    assert_eq!(launcher.template.command, vec!["mpirun".to_string()]);
    let worker = &j.spec.replicas[&Role::Worker];
    assert_eq!(worker.count, 2);
    assert_eq!(
        worker.resources.memory, None,
        "memory: null is no memory limit"
    );
}

#[test]
fn a_training_job_reads_null_as_absent_too() {
    let text = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, labels: null}\n\
                spec:\n  framework: generic\n  queue: null\n  replicas:\n    worker:\n      count: 1\n      \
                resources: {cpu: null}\n      template: {command: [echo], args: null, env: null}\n";
    let j = job(valid(text));
    assert_eq!(j.spec.queue, None);
    assert!(j.spec.replicas[&Role::Worker].resources.cpu.is_none());
}

#[test]
fn a_null_does_not_hide_real_errors() {
    let text = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\n\
                spec:\n  framework: generic\n  replicas:\n    worker:\n      count: null\n      \
                template: {command: [echo], comand: null, image: 5}\n";
    let e = errors(text);
    assert!(
        e.iter().any(|l| l.contains("template.image")),
        "a wrong type is still an error: {e:?}"
    );
}
