//! On Kubernetes the wall between tenants is the cluster's (namespaces, RBAC, pod
//! security); the operator must never widen it (issue 33): everything it makes for a job
//! (Service, launch ConfigMap, ssh Secret, pods) lives in the job's namespace, and what it
//! says about a job (Events, status conditions) never names another namespace's job, even
//! when that job preempted it (against the mocked API server of `common`).

mod common;

use common::passes::*;
use corral_kube::apply::{Applier, RateLimiter};
use corral_kube::plan::{Plan, PlanConfig};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

/// Where the operator keeps the usage ledger (its own namespace).
const LEDGER_NAMESPACE: &str = "corral-system";
const NAMESPACES: [&str; 2] = ["team-a", "team-b"];

/// One pass as the operator makes it, publishing its Events (`passes::pass` does not).
async fn pass_with_events(fake: &common::FakeApi, now: jiff::Timestamp) -> Plan {
    let reporter = Reporter {
        controller: "corral".into(),
        instance: Some("test".into()),
    };
    let applier = Applier::new(
        fake.client(),
        Some(Recorder::new(fake.client(), reporter)),
        RateLimiter::unlimited(),
    );
    let (plan, report) =
        common::passes::kept_pass(fake, &applier, &PlanConfig::default(), now).await;
    assert!(
        report.errors.is_empty(),
        "apply errors: {:?}",
        report.errors
    );
    plan
}

fn mpi_job(name: &str, namespace: &str, class: &str) -> Value {
    let tpl = json!({"image": "mpioperator/mpi-pi:openmpi", "command": ["mpirun", "pi"]});
    let res = json!({"cpu": "2", "memory": "4Gi", "gpu": 4});
    json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "framework": "mpi",
            "priorityClass": class,
            "mpi": {"sshAuthMountPath": "/home/mpiuser/.ssh", "slotsPerWorker": 1},
            "replicas": {
                "launcher": {"count": 1, "resources": {"cpu": "1", "memory": "1Gi"}, "template": tpl},
                "worker": {"count": 2, "resources": res, "template": tpl},
            },
        },
    })
}

#[tokio::test]
async fn what_the_operator_makes_and_says_stays_in_the_jobs_namespace() {
    let fake = cluster(&["n1"]);
    fake.state.lock().expect("lock").graceful_deletes = true;
    for (name, value) in [("low", 10), ("high", 1000)] {
        fake.insert(
            "apis/corral.dev/v1alpha1/jobpriorityclasses",
            json!({"metadata": {"name": name}, "spec": {"value": value}}),
        );
    }
    // team-a's MPI job takes the node: its Service, hostfile ConfigMap and ssh Secret.
    fake.insert(JOBS, mpi_job("pi", "team-a", "low"));
    let mut plans = vec![pass_with_events(&fake, t(0)).await];
    // team-b's, of a name that says what the team works on, preempts it.
    fake.insert(JOBS, mpi_job("secret-launch", "team-b", "high"));
    plans.push(pass_with_events(&fake, t(600)).await);
    fake.finish_terminating();
    plans.push(pass_with_events(&fake, t(640)).await);
    plans.push(pass_with_events(&fake, t(641)).await);

    // Every object is in the namespace of the job that owns it, and each job got its own.
    let jobs = fake.list(JOBS);
    let namespace_of_uid = |uid: &Value| {
        jobs.iter()
            .find(|j| j["metadata"]["uid"] == *uid)
            .and_then(|j| j["metadata"]["namespace"].as_str())
            .map(str::to_string)
    };
    for collection in [
        "api/v1/services",
        "api/v1/configmaps",
        "api/v1/secrets",
        PODS,
    ] {
        // The usage ledger is the operator's, in its own namespace (below).
        let objects: Vec<Value> = fake
            .list(collection)
            .into_iter()
            .filter(|o| o["metadata"]["namespace"] != json!(LEDGER_NAMESPACE))
            .collect();
        // team-a's pods went with the preemption.
        for ns in NAMESPACES.iter().filter(|_| collection != PODS) {
            assert!(
                objects
                    .iter()
                    .any(|o| o["metadata"]["namespace"] == json!(ns)),
                "no {collection} of {ns}'s job: {objects:#?}"
            );
        }
        for o in &objects {
            let owner = &o["metadata"]["ownerReferences"][0]["uid"];
            assert_eq!(
                namespace_of_uid(owner).as_deref(),
                o["metadata"]["namespace"].as_str(),
                "{collection} {} is not in its job's namespace",
                o["metadata"]["name"]
            );
        }
    }
    // Nothing was written into a namespace other than the job's.
    for line in fake.log() {
        if let Some(path) = line.split_whitespace().nth(1)
            && let Some(rest) = path.split("/namespaces/").nth(1)
        {
            let ns = rest.split('/').next().unwrap_or_default();
            let ledger = ns == LEDGER_NAMESPACE && rest.contains("/configmaps");
            assert!(NAMESPACES.contains(&ns) || ledger, "{line}");
        }
    }

    // The ledger keeps each namespace's usage apart: team-a's preempted admission is in
    // a ConfigMap of team-a's alone.
    let ledger: Vec<Value> = fake
        .list("api/v1/configmaps")
        .into_iter()
        .filter(|o| o["metadata"]["namespace"] == json!(LEDGER_NAMESPACE))
        .collect();
    assert!(
        !ledger.is_empty(),
        "team-a's preempted admission was charged"
    );
    for cm in &ledger {
        let ns = cm["metadata"]["labels"]["corral.dev/usage-namespace"].clone();
        for v in cm["data"].as_object().into_iter().flat_map(|d| d.values()) {
            let i: Value = serde_json::from_str(v.as_str().unwrap_or_default()).expect("json");
            let job_ns = i["job"]
                .as_str()
                .and_then(|j| j.split_once('/'))
                .map(|x| x.0);
            assert_eq!(Some(ns.as_str().unwrap_or_default()), job_ns, "{cm:#}");
        }
    }

    // The Events published are in the namespace of the job they are about.
    let published = fake.state.lock().expect("lock").events.clone();
    assert!(
        published.iter().any(|e| e["reason"] == json!("Preempted")),
        "{published:#?}"
    );
    for e in &published {
        let ns = e["metadata"]["namespace"].as_str().unwrap_or_default();
        assert_eq!(
            Some(ns),
            e["regarding"]["namespace"].as_str(),
            "an Event outside its job's namespace: {e:#}"
        );
        let other = NAMESPACES
            .iter()
            .find(|n| **n != ns)
            .copied()
            .unwrap_or_default();
        let text = e.to_string();
        assert!(
            !text.contains(other) && (ns != "team-a" || !text.contains("secret-launch")),
            "an Event in {ns} names another namespace's job: {e:#}"
        );
    }

    // What team-a reads about its job never names team-b's.
    for jp in plans.iter().flat_map(|p| &p.jobs) {
        let (other_ns, other_job) = if jp.namespace == "team-a" {
            ("team-b", "secret-launch")
        } else {
            ("team-a", "team-a/pi")
        };
        for e in &jp.events {
            assert!(
                !e.note.contains(other_ns) && !e.note.contains(other_job),
                "an event of {}/{} names another namespace's job: {e:?}",
                jp.namespace,
                jp.name
            );
        }
    }
    let pi = fake.get(JOBS, "team-a", "pi").expect("team-a's job");
    let status = pi["status"].to_string();
    assert!(
        !status.contains("secret-launch") && !status.contains("team-b"),
        "{status}"
    );
    // It is told why all the same.
    let preempted: Vec<&str> = plans
        .iter()
        .flat_map(|p| &p.jobs)
        .filter(|j| j.namespace == "team-a")
        .flat_map(|j| &j.events)
        .filter(|e| e.reason == "Preempted")
        .map(|e| e.note.as_str())
        .collect();
    assert!(
        preempted
            .iter()
            .all(|n| n.contains("a job of another namespace")),
        "{preempted:?}"
    );
    assert!(
        !preempted.is_empty(),
        "team-a's job was not preempted: the case is not made"
    );
}
