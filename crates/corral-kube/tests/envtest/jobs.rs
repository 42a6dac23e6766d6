//! Corral's own TrainingJobs end to end: a PyTorch gang and its restart, an MPI job's
//! hostfile, ssh Secret and TTL (with garbage collection), suspend and resume.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::harness::Env;
use crate::kubelet::{env_of, kubelet_phase, kubelet_reap, pods};
use crate::manifests::namespace;
use crate::passes::{Operator, pass};
use crate::trainingjobs::{condition, job, replica, submit, training_job, training_jobs};

pub(crate) async fn pytorch_gang(env: &Env, op: &Operator) {
    let ns = "ml";
    namespace(env, ns).await;
    submit(
        env,
        training_job(
            ns,
            "ddp",
            "pytorch",
            json!({"master": replica(1, 8), "worker": replica(1, 8)}),
            json!({"backoffLimit": 3}),
        ),
    )
    .await;
    let now = Timestamp::now();
    pass(op, now).await;
    let ps = pods(env, ns).await;
    assert_eq!(
        ps.len(),
        2,
        "one pod per replica; job: {}",
        job(env, ns, "ddp").await.unwrap_or_default()
    );
    let mut nodes = Vec::new();
    for p in &ps {
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.scheduler_name.as_deref(), Some("corral"));
        nodes.push(spec.node_name.clone().expect("placed on its node"));
        assert_eq!(env_of(p, "WORLD_SIZE").as_deref(), Some("2"));
        let master = env_of(p, "MASTER_ADDR").expect("MASTER_ADDR");
        assert!(master.starts_with("ddp-master-0.ddp.ml.svc"), "{master}");
    }
    nodes.sort();
    assert_eq!(
        nodes,
        ["gpu-1", "gpu-2"],
        "8 GPUs each: one replica per node"
    );
    let worker = ps
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("ddp-worker-0"))
        .expect("worker");
    assert_eq!(env_of(worker, "RANK").as_deref(), Some("1"));
    let svc: Api<Service> = Api::namespaced(env.admin.clone(), ns);
    let svc = svc.get("ddp").await.expect("headless Service");
    assert_eq!(svc.spec.and_then(|s| s.cluster_ip).as_deref(), Some("None"));
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(
        condition(&j, "Admitted").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.admin.clone(), ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("ddp"))
        .filter_map(|e| e.reason)
        .collect();
    // Its condition and `status.admission` keep the admission; no Event repeats it.
    assert!(!reasons.contains(&"Admitted".to_string()), "{reasons:?}");
    assert!(
        j["status"]["admission"]["placements"].is_array(),
        "{}",
        j["status"]
    );

    for p in ["ddp-master-0", "ddp-worker-0"] {
        kubelet_phase(env, ns, p, "Running", None).await;
    }
    pass(op, now + SignedDuration::from_secs(1)).await;
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(j["status"]["phase"], json!("Running"), "{}", j["status"]);

    // A failed worker restarts the gang: both pods go, new ones come, the restart is counted.
    let old: Vec<String> = ps.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    kubelet_phase(env, ns, "ddp-worker-0", "Failed", Some(1)).await;
    let mut t = now + SignedDuration::from_secs(2);
    let mut restarted = false;
    for _ in 0..20 {
        pass(op, t).await;
        kubelet_reap(env, ns).await;
        let fresh = pods(env, ns).await;
        if fresh.len() == 2
            && fresh.iter().all(|p| {
                p.metadata.uid.as_ref().is_some_and(|u| !old.contains(u))
                    && p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
            })
        {
            restarted = true;
            break;
        }
        t += SignedDuration::from_secs(15);
    }
    assert!(
        restarted,
        "the gang was not restarted: {:?}",
        pods(env, ns).await
    );
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(j["status"]["restartCount"], json!(1), "{}", j["status"]);

    for p in ["ddp-master-0", "ddp-worker-0"] {
        kubelet_phase(env, ns, p, "Succeeded", Some(0)).await;
    }
    pass(op, t + SignedDuration::from_secs(1)).await;
    let j = job(env, ns, "ddp").await.expect("job");
    assert_eq!(
        condition(&j, "Succeeded").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
}

pub(crate) async fn mpi_hostfile_and_ttl(env: &Env, op: &Operator) {
    let ns = "mpi";
    namespace(env, ns).await;
    submit(
        env,
        training_job(
            ns,
            "allreduce",
            "mpi",
            json!({"launcher": replica(1, 0), "worker": replica(2, 1)}),
            json!({"ttlSecondsAfterFinished": 60}),
        ),
    )
    .await;
    let now = Timestamp::now();
    pass(op, now).await;
    assert_eq!(pods(env, ns).await.len(), 3);
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), ns);
    let cm = cms.get("allreduce-launch").await.expect("launch ConfigMap");
    let hostfile = cm
        .data
        .unwrap_or_default()
        .into_values()
        .find(|v| v.contains("slots="))
        .expect("a hostfile");
    assert!(
        hostfile.contains("allreduce-worker-0.allreduce.mpi.svc"),
        "{hostfile}"
    );
    assert!(
        hostfile.contains("allreduce-worker-1.allreduce.mpi.svc"),
        "{hostfile}"
    );
    // Issue 19 #11: the ssh key Secret as Kubeflow's MPI operator makes it, created with
    // the deployed RBAC and mounted in launcher and workers.
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), ns);
    let secret = secrets.get("allreduce-ssh").await.expect("ssh Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/ssh-auth"));
    let keys: Vec<String> = secret.data.unwrap_or_default().into_keys().collect();
    assert!(
        keys.contains(&"ssh-privatekey".to_string()) && keys.contains(&"ssh-publickey".to_string()),
        "{keys:?}"
    );
    for p in pods(env, ns).await {
        let spec = p.spec.expect("spec");
        let mounted = spec.volumes.unwrap_or_default().iter().any(|v| {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some("allreduce-ssh"))
        });
        assert!(
            mounted,
            "{:?} does not mount the ssh Secret",
            p.metadata.name
        );
    }

    for p in [
        "allreduce-launcher-0",
        "allreduce-worker-0",
        "allreduce-worker-1",
    ] {
        kubelet_phase(env, ns, p, "Running", None).await;
    }
    pass(op, now + SignedDuration::from_secs(1)).await;
    kubelet_phase(env, ns, "allreduce-launcher-0", "Succeeded", Some(0)).await;
    pass(op, now + SignedDuration::from_secs(2)).await;
    kubelet_reap(env, ns).await;
    let j = job(env, ns, "allreduce").await.expect("job");
    assert_eq!(
        condition(&j, "Succeeded").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
    // Within its TTL it stays; after, the operator deletes it.
    pass(op, now + SignedDuration::from_secs(30)).await;
    assert!(
        job(env, ns, "allreduce").await.is_some(),
        "deleted before its TTL"
    );
    pass(op, now + SignedDuration::from_secs(120)).await;
    assert!(
        job(env, ns, "allreduce").await.is_none(),
        "not deleted after its TTL"
    );
    if env.gc {
        // Owned objects go with it (the garbage collector of kube-controller-manager; up to
        // a minute on a loaded machine).
        let mut gone = false;
        for _ in 0..200 {
            kubelet_reap(env, ns).await;
            if pods(env, ns).await.is_empty()
                && cms
                    .get_opt("allreduce-launch")
                    .await
                    .ok()
                    .flatten()
                    .is_none()
            {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            gone,
            "pods and ConfigMap of a deleted job were not collected"
        );
    }
}

pub(crate) async fn suspend_resume(env: &Env, op: &Operator) {
    let ns = "sus";
    namespace(env, ns).await;
    submit(
        env,
        training_job(
            ns,
            "nap",
            "generic",
            json!({"worker": replica(1, 1)}),
            json!({}),
        ),
    )
    .await;
    let now = Timestamp::now();
    pass(op, now).await;
    assert_eq!(pods(env, ns).await.len(), 1);
    let api: Api<DynamicObject> = Api::namespaced_with(env.admin.clone(), ns, &training_jobs());
    let set = |v: bool| json!({"spec": {"runPolicy": {"suspend": v}}});
    api.patch("nap", &PatchParams::default(), &Patch::Merge(set(true)))
        .await
        .expect("suspend");
    pass(op, now + SignedDuration::from_secs(1)).await;
    kubelet_reap(env, ns).await;
    pass(op, now + SignedDuration::from_secs(2)).await;
    assert!(
        pods(env, ns).await.is_empty(),
        "a suspended job runs nothing"
    );
    let j = job(env, ns, "nap").await.expect("job");
    assert_eq!(
        condition(&j, "Suspended").as_deref(),
        Some("True"),
        "{}",
        j["status"]
    );
    api.patch("nap", &PatchParams::default(), &Patch::Merge(set(false)))
        .await
        .expect("resume");
    pass(op, now + SignedDuration::from_secs(3)).await;
    assert_eq!(pods(env, ns).await.len(), 1, "resumed");
    // Done with it: its GPU is free for the next cases.
    api.delete("nap", &DeleteParams::default())
        .await
        .expect("delete");
    pass(op, now + SignedDuration::from_secs(4)).await;
    kubelet_reap(env, ns).await;
    // What it held until it was suspended is in the usage ledger, written with the
    // operator's identity into its namespace (deploy/rbac.yaml allows it), where a
    // rebuilt plane reads it back.
    let maps: Api<ConfigMap> = Api::namespaced(env.admin.clone(), "corral-system");
    let ledger = maps
        .list(&ListParams::default().labels("corral.dev/usage-ledger=v1"))
        .await
        .expect("the ledger");
    let (intervals, warnings) = corral_kube::ledger::intervals(
        &ledger
            .items
            .iter()
            .cloned()
            .map(std::sync::Arc::new)
            .collect::<Vec<_>>(),
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let nap: Vec<_> = intervals.iter().filter(|i| i.job == "sus/nap").collect();
    assert_eq!(nap.len(), 1, "{intervals:?}");
    let ms = |t: Timestamp| u64::try_from(t.as_millisecond()).unwrap_or(0);
    assert_eq!((nap[0].gpus, nap[0].start), (1, ms(now)), "{nap:?}");
    assert_eq!(
        nap[0].end,
        ms(now + SignedDuration::from_secs(2)),
        "{nap:?}"
    );
    let cm = ledger
        .items
        .iter()
        .find(|cm| cm.data.iter().flatten().any(|(_, v)| v.contains("sus/nap")))
        .expect("its ConfigMap");
    assert_eq!(
        cm.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("corral.dev/usage-namespace")),
        Some(&ns.to_string())
    );
}
