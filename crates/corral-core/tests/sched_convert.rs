//! TrainingJob -> JobRequest.

use corral_core::sched::JobRequest;

#[test]
fn training_job_maps_replicas_resources_and_queue() {
    let job: corral_api::TrainingJob = serde_saphyr::from_str(
        r#"
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: bert, namespace: nlp}
spec:
  framework: pytorch
  queue: team-a
  replicas:
    master:
      count: 1
      resources: {cpu: "2", memory: 8Gi}
      template: {image: "x"}
    worker:
      count: 4
      resources: {cpu: 500m, memory: 64Gi, gpu: 8, gpuTypes: [A100], extended: {rdma/hca: "1"}}
      template: {image: "x"}
"#,
    )
    .expect("valid job");
    let r = JobRequest::from_training_job(&job, 100, 42).expect("converts");
    assert_eq!(r.key, "nlp/bert");
    assert_eq!(r.queue, "team-a");
    assert_eq!((r.priority, r.submit_time), (100, 42));
    assert_eq!(r.total_gpus(), 32);
    assert_eq!(r.total_replicas(), 5);
    let w = r
        .groups
        .iter()
        .find(|g| g.role == "worker")
        .expect("worker");
    assert_eq!((w.count, w.cpu_milli, w.memory_bytes), (4, 500, 64 << 30));
    assert_eq!(w.allowed_gpu_types, vec!["A100".to_string()]);
    assert_eq!(w.extended.get("rdma/hca"), Some(&1));
    let m = r
        .groups
        .iter()
        .find(|g| g.role == "master")
        .expect("master");
    assert_eq!((m.cpu_milli, m.gpu), (2000, 0));
}
