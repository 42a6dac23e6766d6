//! What no node of a cluster can ever hold: refused at submit where the nodes are fixed
//! (the plane and a shell's `SubmitCheck`, with the field named), admitted and reported
//! Unschedulable where they come and go (Kubernetes); and the judgement is exact for
//! gangs of one role: refused exactly when the empty cluster cannot admit it.

use std::collections::BTreeMap;

use corral_api::{NodePool, Queue, TrainingJob};
use corral_core::control::{
    ControlConfig, ControlError, ControlPlane, JobRecord, Platform, SubmitCheck,
};
use corral_core::sched::{
    ClusterFit, ClusterSnapshot, JobRequest, Node, NodePoolConfig, QueueConfig, ReplicaGroup,
    SchedulerConfig, schedule,
};
use jiff::Timestamp;
use proptest::prelude::*;

const H100: &str = "NVIDIA-H100-80GB-HBM3";

/// A job of `roles` (role, count, resources as YAML flow mapping fields).
fn job(name: &str, extra: &str, roles: &[(&str, u32, &str)]) -> TrainingJob {
    let mut yaml = format!(
        "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {{name: {name}, namespace: team}}\nspec:\n  framework: generic\n{extra}  replicas:\n"
    );
    for (role, count, res) in roles {
        yaml.push_str(&format!(
            "    {role}:\n      count: {count}\n      resources: {{{res}}}\n      template: {{command: [train]}}\n"
        ));
    }
    serde_saphyr::from_str(&yaml).expect("test job")
}

fn worker(name: &str, count: u32, res: &str) -> TrainingJob {
    job(name, "", &[("worker", count, res)])
}

fn record(job: TrainingJob) -> JobRecord {
    JobRecord {
        uid: format!("uid-{}", job.metadata.name),
        job,
        submitted: 1,
        hints: Default::default(),
    }
}

/// One 8-GPU H100 node with 64 CPUs and 512 GiB.
fn one_node() -> ClusterSnapshot {
    nodes(&[("node-0", 8, 64, 512)])
}

fn nodes(spec: &[(&str, u32, u64, u64)]) -> ClusterSnapshot {
    ClusterSnapshot {
        nodes: spec
            .iter()
            .map(|&(name, gpus, cpus, gib)| {
                let mut n = Node::new(
                    name,
                    (gpus > 0).then(|| H100.to_string()),
                    gpus,
                    cpus * 1000,
                    gib << 30,
                );
                if gpus > 0 {
                    n.labels
                        .insert("nvidia.com/gpu.product".into(), H100.into());
                }
                n
            })
            .collect(),
        ..ClusterSnapshot::default()
    }
}

fn processes() -> ControlConfig {
    ControlConfig::builder(Platform::Processes).build()
}

/// Submits to a fresh plane: the refusal's text, or `None` when accepted.
fn refused(cluster: &ClusterSnapshot, job: TrainingJob) -> Option<String> {
    let check = SubmitCheck::new(cluster, &processes()).expect("check");
    let before = check.check(&job).err().map(|r| r.to_string());
    let mut plane = ControlPlane::new(cluster.clone(), processes()).expect("plane");
    let key = format!("team/{}", job.metadata.name);
    let result = plane.submit(record(job));
    match (&before, result) {
        (Some(text), Err(ControlError::Invalid { message, .. })) => {
            // The shell's check and the plane's refusal are one text; nothing is kept.
            assert_eq!(&message, text);
            assert!(plane.job(&key).is_none(), "a refused job is not stored");
        }
        (None, Ok(())) => {}
        (b, r) => panic!("the shell's check ({b:?}) and the plane ({r:?}) disagree"),
    }
    before
}

#[test]
fn memory_beyond_every_node_is_refused_naming_the_field() {
    let text = refused(&one_node(), worker("big", 1, "gpu: 1, memory: 600Gi")).expect("refused");
    assert_eq!(
        text,
        "spec.replicas.worker.resources.memory: this cluster can never run the job: needs 1 \
         GPU of any type on one node; a replica needs 600 GiB memory but the largest node, \
         node-0, has 512 GiB; ask for at most 512 GiB per replica"
    );
}

#[test]
fn cpu_beyond_every_node_is_refused_naming_the_field() {
    let text = refused(&one_node(), worker("hungry", 1, "cpu: 128")).expect("refused");
    assert!(
        text.starts_with("spec.replicas.worker.resources.cpu: "),
        "{text}"
    );
    assert!(
        text.contains("a replica needs 128 CPUs but the largest node, node-0, has 64"),
        "{text}"
    );
    assert!(text.ends_with("ask for at most 64 per replica"), "{text}");
}

#[test]
fn more_gpus_per_replica_than_any_node_has_are_refused() {
    let text = refused(&one_node(), worker("wide", 1, "gpu: 16")).expect("refused");
    assert!(
        text.starts_with("spec.replicas.worker.resources.gpu: "),
        "{text}"
    );
    assert!(
        text.contains("a replica needs 16 GPUs but the largest node has 8"),
        "{text}"
    );
    assert!(
        text.ends_with("use at most 8 per replica, and more replicas"),
        "{text}"
    );
}

#[test]
fn a_gang_larger_than_the_whole_cluster_is_refused() {
    let text = refused(&one_node(), worker("gang", 2, "gpu: 8")).expect("refused");
    assert!(text.starts_with("spec.replicas.worker.count: "), "{text}");
    assert!(
        text.contains("the gang needs 16 GPUs but the pool has only 8"),
        "{text}"
    );
    // CPU in all: each replica fits alone, three do not.
    let text = refused(&one_node(), worker("cpus", 3, "cpu: 30")).expect("refused");
    assert!(text.starts_with("spec.replicas.worker.count: "), "{text}");
    assert!(
        text.contains("the gang needs 90 CPUs in all but the nodes have 64 CPUs"),
        "{text}"
    );
    // Two nodes of 64 CPUs have 128 in all, but hold one 40-CPU replica each.
    let two = nodes(&[("a", 0, 64, 64), ("b", 0, 64, 64)]);
    let text = refused(&two, worker("shape", 3, "cpu: 40")).expect("refused");
    assert!(
        text.contains("the nodes hold at most 2 of the gang's 3 replicas at once"),
        "{text}"
    );
    // A gang of two roles whose replicas fit alone but not together.
    let text = refused(
        &one_node(),
        job(
            "roles",
            "",
            &[
                ("chief", 1, "gpu: 4, cpu: 40"),
                ("worker", 1, "gpu: 4, cpu: 40"),
            ],
        ),
    )
    .expect("refused");
    assert!(text.starts_with("spec.replicas: "), "{text}");
}

#[test]
fn a_gpu_type_no_node_has_is_refused() {
    let text = refused(
        &one_node(),
        worker("typed", 1, "gpu: 1, gpuTypes: [Tesla-V100-SXM2-32GB]"),
    )
    .expect("refused");
    assert!(
        text.starts_with("spec.replicas.worker.resources.gpuTypes: "),
        "{text}"
    );
    assert!(text.contains("no node pool has GPUs of type"), "{text}");
}

/// `examples/cluster.yaml`'s pools and its `default` queue, whose only quota is in pool
/// v100; this machine has only an H100 node.
fn example_cluster() -> ClusterSnapshot {
    let pools: Vec<NodePool> = ["h100:NVIDIA-H100-80GB-HBM3", "v100:Tesla-V100-SXM2-32GB"]
        .iter()
        .map(|p| {
            let (name, t) = p.split_once(':').expect("pool");
            serde_saphyr::from_str(&format!(
                "apiVersion: corral.dev/v1alpha1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  gpuType: {t}\n  nodeSelector: {{nvidia.com/gpu.product: {t}}}\n"
            ))
            .expect("pool")
        })
        .collect();
    let queue = |yaml: &str| -> QueueConfig {
        let q: Queue = serde_saphyr::from_str(yaml).expect("queue");
        QueueConfig::from_queue(&q).expect("queue config")
    };
    let mut cluster = one_node();
    cluster.pools = pools.iter().map(NodePoolConfig::from_node_pool).collect();
    cluster.queues = vec![
        queue(
            "apiVersion: corral.dev/v1alpha1\nkind: Queue\nmetadata: {name: default}\nspec:\n  quotas:\n    - {nodePool: v100, gpu: 8}\n",
        ),
        queue(
            "apiVersion: corral.dev/v1alpha1\nkind: Queue\nmetadata: {name: lender}\nspec:\n  cohort: research\n  quotas:\n    - {nodePool: h100, gpu: 8}\n",
        ),
        queue(
            "apiVersion: corral.dev/v1alpha1\nkind: Queue\nmetadata: {name: borrower}\nspec:\n  cohort: research\n  quotas:\n    - {nodePool: h100, gpu: 0, borrowingLimit: {gpu: 4}}\n",
        ),
    ];
    cluster
}

#[test]
fn a_queue_without_quota_where_the_job_could_run_is_refused() {
    let cluster = example_cluster();
    let text = refused(&cluster, worker("nowhere", 1, "gpu: 1")).expect("refused");
    assert_eq!(
        text,
        "spec.queue: this cluster can never run the job: needs 1 GPU of any type on one \
         node; queue default has no GPU quota in pool h100 and has no cohort to borrow \
         from; name a queue with GPU quota in pool h100"
    );
    // Borrowing counts: 4 GPUs may be borrowed from the cohort, 8 may not.
    let queued = |name: &str, gpus: u32| {
        job(
            name,
            "  queue: borrower\n",
            &[("worker", 1, &format!("gpu: {gpus}"))],
        )
    };
    assert_eq!(refused(&cluster, queued("small", 4)), None);
    let text = refused(&cluster, queued("large", 8)).expect("refused");
    assert!(
        text.contains(
            "queue borrower may use at most 4 GPUs in pool h100, borrowing included, but \
             the job needs 8 GPUs"
        ),
        "{text}"
    );
}

#[test]
fn jobs_that_fit_are_accepted() {
    for j in [
        worker("one", 1, "gpu: 8, cpu: 64, memory: 512Gi"),
        worker("cpu", 4, "cpu: 16"),
        worker("pair", 2, "gpu: 4"),
        job(
            "roles",
            "",
            &[("chief", 1, "gpu: 4"), ("worker", 1, "gpu: 4")],
        ),
    ] {
        let name = j.metadata.name.clone();
        assert_eq!(refused(&one_node(), j), None, "{name}");
    }
}

/// On Kubernetes the same job is admitted to the plane and waits Unschedulable, with a
/// Warning naming memory.
#[test]
fn where_nodes_come_and_go_the_job_waits_unschedulable() {
    let config = ControlConfig::builder(Platform::Pods).build();
    let check = SubmitCheck::new(&one_node(), &config).expect("check");
    let mut big = worker("big", 1, "gpu: 1, memory: 600Gi");
    big.spec.replicas.values_mut().for_each(|r| {
        r.template.image = Some("train:1".into());
    });
    assert_eq!(check.check(&big), Ok(()));
    let mut plane = ControlPlane::new(one_node(), config).expect("plane");
    plane.submit(record(big)).expect("admitted to the plane");
    let step = plane.step(Timestamp::from_second(10).expect("time"));
    let warning = step
        .events
        .iter()
        .find(|e| e.reason == "Unschedulable")
        .expect("an Unschedulable event");
    assert!(
        warning
            .message
            .contains("a replica needs 600 GiB memory but the largest node, node-0, has 512 GiB"),
        "{}",
        warning.message
    );
    let job = plane.job("team/big").expect("kept");
    let status = job.status.clone().unwrap_or_default();
    assert!(
        status.conditions.iter().any(|c| c.type_
            == corral_api::training_job::ConditionType::Unschedulable
            && c.status == corral_api::training_job::ConditionStatus::True),
        "{status:?}"
    );
}

/// Bad input never panics: absurd counts and amounts are judged, not overflowed.
#[test]
fn absurd_requests_are_judged_without_panicking() {
    let fit = ClusterFit::new(&one_node()).expect("fit");
    let req = JobRequest {
        key: "team/absurd".into(),
        queue: "default".into(),
        priority: 0,
        submit_time: 0,
        groups: vec![ReplicaGroup {
            role: "worker".into(),
            count: u32::MAX,
            cpu_milli: u64::MAX,
            memory_bytes: u64::MAX,
            gpu: u32::MAX,
            allowed_gpu_types: Vec::new(),
            extended: BTreeMap::from([("example.com/fpga".to_string(), u64::MAX)]),
        }],
        throughput: BTreeMap::new(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: None,
    };
    // No default queue in a bare snapshot: the judgement still names what falls short.
    assert!(fit.never_fits(&req).is_some());
    let mut empty = req.clone();
    empty.groups[0].count = 0;
    assert!(fit.never_fits(&empty).is_none());
}

fn request(count: u32, gpu: u32, cpu: u64, gib: u64) -> JobRequest {
    JobRequest {
        key: "team/p".into(),
        queue: "default".into(),
        priority: 0,
        submit_time: 0,
        groups: vec![ReplicaGroup {
            role: "worker".into(),
            count,
            cpu_milli: cpu * 1000,
            memory_bytes: gib << 30,
            gpu,
            allowed_gpu_types: Vec::new(),
            extended: BTreeMap::new(),
        }],
        throughput: BTreeMap::new(),
        preemptible: true,
        node_selector: BTreeMap::new(),
        tolerations: Default::default(),
        elastic: None,
    }
}

proptest! {
    /// For gangs of one role the judgement is exact: a job is refused exactly when one
    /// cycle on the empty cluster cannot admit it.
    #[test]
    fn refused_exactly_when_the_empty_cluster_cannot_admit_it(
        shape in prop::collection::vec((0u32..=8, 1u64..=64, 1u64..=512), 1..=4),
        count in 1u32..=6,
        gpu in 0u32..=10,
        cpu in 0u64..=80,
        gib in 0u64..=600,
    ) {
        let names: Vec<String> = (0..shape.len()).map(|i| format!("n{i}")).collect();
        let spec: Vec<(&str, u32, u64, u64)> = shape
            .iter()
            .zip(&names)
            .map(|(&(g, c, m), n)| (n.as_str(), g, c, m))
            .collect();
        let mut cluster = nodes(&spec);
        cluster.queues = corral_core::control::with_default_queue(
            Vec::new(),
            &cluster.pools,
            &cluster.nodes,
        );
        let req = request(count, gpu, cpu, gib);
        let fit = ClusterFit::new(&cluster).expect("fit");
        let never = fit.never_fits(&req);
        let outcome = schedule(&cluster, std::slice::from_ref(&req), SchedulerConfig::default(), 1)
            .expect("cycle");
        let admitted = !outcome.admitted.is_empty();
        prop_assert_eq!(never.is_none(), admitted, "{:?}", never.map(|r| r.to_string()));
    }
}
