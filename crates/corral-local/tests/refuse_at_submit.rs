//! Embedded, the nodes are this machine: what it can never hold is refused at submit,
//! naming the field, and nothing is stored. The check made before the cluster's lock (a
//! server's submit and `corral validate` against it, `?dryRun=All`) says the same words.

mod common;

use std::time::Duration;

use common::cluster::{Harness, Waits};
use corral_local::{Cluster, ClusterError};

const WAITS: Waits = Waits {
    deadline: Duration::from_secs(30),
    pause: Duration::from_millis(25),
};

fn job(name: &str, count: u32, resources: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: {count}
      resources: {{{resources}}}
      template:
        command: [/bin/true]
"
    )
}

/// The one field problem of a refused submission.
fn refusal(err: ClusterError) -> (String, String) {
    let ClusterError::Invalid(problems) = err else {
        panic!("not refused as invalid: {err}");
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].errors.len(), 1, "{problems:?}");
    let e = &problems[0].errors[0];
    (e.path.clone(), e.message.clone())
}

fn refused_with(c: &mut Cluster, h: &Harness, text: &str) -> (String, String) {
    // The check before the lock (what a dry run answers) ...
    let dry = Cluster::check_submission(&c.submit_context(), text, "default")
        .map(|_| ())
        .map_err(refusal)
        .expect_err("refused by the dry run");
    // ... and the submit itself: the same words, and nothing stored.
    let submitted = refusal(c.submit(text, "default", h.now).expect_err("refused"));
    assert_eq!(dry, submitted);
    assert!(c.list(None).expect("list").is_empty(), "nothing is stored");
    submitted
}

fn memory_cpu_and_gangs_beyond_the_machine_are_refused() {
    let (h, mut c) = Harness::new(WAITS, 33400, "node: {cpu: '4', memory: 8Gi}\n");
    let (path, message) = refused_with(&mut c, &h, &job("fat", 1, "memory: 16Gi"));
    assert_eq!(path, "spec.replicas.worker.resources.memory");
    assert!(
        message.contains("a replica needs 16 GiB memory but the largest node")
            && message.contains("has 8 GiB")
            && message.ends_with("ask for at most 8 GiB per replica"),
        "{message}"
    );
    let (path, message) = refused_with(&mut c, &h, &job("hungry", 1, "cpu: '8'"));
    assert_eq!(path, "spec.replicas.worker.resources.cpu");
    assert!(message.contains("a replica needs 8 CPUs"), "{message}");
    let (path, message) = refused_with(&mut c, &h, &job("gang", 3, "cpu: '2'"));
    assert_eq!(path, "spec.replicas.worker.count");
    assert!(
        message.contains("the gang needs 6 CPUs in all but the nodes have 4 CPUs"),
        "{message}"
    );
    // What fits is accepted and stored.
    c.submit(&job("fits", 2, "cpu: '2', memory: 4Gi"), "default", h.now)
        .expect("accepted");
    assert_eq!(c.list(None).expect("list").len(), 1);
}

fn gpus_beyond_the_machine_are_refused() {
    let (h, mut c) = Harness::new(
        WAITS,
        33450,
        "node: {gpus: 8, gpuType: NVIDIA-H100-80GB-HBM3}\n",
    );
    let (path, message) = refused_with(&mut c, &h, &job("pair", 2, "gpu: 8"));
    assert_eq!(path, "spec.replicas.worker.count");
    assert!(
        message.contains("the gang needs 16 GPUs but the pool has only 8"),
        "{message}"
    );
}

/// `examples/cluster.yaml` on an H100 machine: the `default` queue has quota only in pool
/// v100, which has no node here, so a job in it could never run.
fn a_queue_without_quota_where_the_machine_is_is_refused() {
    let example = include_str!("../../../examples/cluster.yaml");
    let extra = format!("node: {{gpus: 8, gpuType: NVIDIA-H100-80GB-HBM3}}\n---\n{example}");
    let (h, mut c) = Harness::new(WAITS, 33500, &extra);
    let (path, message) = refused_with(&mut c, &h, &job("lost", 1, "gpu: 1"));
    assert_eq!(path, "spec.queue");
    assert!(
        message.contains(
            "queue default has no GPU quota in pool h100 and has no cohort to borrow from"
        ),
        "{message}"
    );
}

fn main() -> std::process::ExitCode {
    common::main(vec![
        (
            "memory_cpu_and_gangs_beyond_the_machine_are_refused",
            memory_cpu_and_gangs_beyond_the_machine_are_refused,
        ),
        (
            "gpus_beyond_the_machine_are_refused",
            gpus_beyond_the_machine_are_refused,
        ),
        (
            "a_queue_without_quota_where_the_machine_is_is_refused",
            a_queue_without_quota_where_the_machine_is_is_refused,
        ),
    ])
}
