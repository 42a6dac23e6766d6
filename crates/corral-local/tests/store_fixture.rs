//! A data directory written by corral 0.1.0 (`tests/fixtures/README.md`) still opens and
//! reads back: job, admission, replica rows, ports, events.

use std::path::Path;

use corral_local::executor::ProcessState;
use corral_local::store::{DB_FILE, SCHEMA_VERSION, Store};

const UID: &str = "07bd6ff61afacb7c7cf546aeb55ff21a";

/// A copy of the fixture in a fresh data directory (the fixture itself stays untouched).
fn open_copy(dir: &Path) -> Store {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corral-0.1.0-running-job.db");
    std::fs::copy(&fixture, dir.join(DB_FILE)).expect("copy fixture");
    Store::open(dir).expect("open the 0.1.0 store")
}

#[test]
fn a_store_written_by_0_1_0_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_copy(dir.path());
    assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);

    let jobs = store.jobs().expect("jobs");
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.key(), "default/fixture-sleep");
    assert_eq!(job.uid, UID);
    assert_eq!(job.seq, 1);
    assert!(!job.deleting);
    let worker = job
        .job
        .spec
        .replicas
        .get(&corral_api::Role::Worker)
        .expect("worker role");
    assert_eq!(worker.count, 2);
    let status = job.job.status.as_ref().expect("status");
    assert_eq!(status.restart_count, 0);
    assert_eq!(status.conditions.len(), 3);

    let admissions = store.admissions().expect("admissions");
    assert_eq!(admissions.len(), 1);
    let (uid, a) = &admissions[0];
    assert_eq!(uid, UID);
    assert_eq!(a.pool, "cpu");
    assert_eq!(a.gpu_type, None);
    assert_eq!(a.running.request.key, "default/fixture-sleep");
    assert_eq!(a.running.request.queue, "default");
    assert_eq!(a.running.request.submit_time, 1_795_428_480_568);
    assert!(a.running.request.preemptible);
    assert_eq!(a.running.request.groups.len(), 1);
    let group = &a.running.request.groups[0];
    assert_eq!(
        (
            group.role.as_str(),
            group.count,
            group.cpu_milli,
            group.memory_bytes,
            group.gpu
        ),
        ("worker", 2, 100, 64 << 20, 0)
    );
    assert_eq!(a.running.admitted_at, 1_795_428_480_570);
    assert_eq!(a.running.placements.len(), 2);
    for (i, p) in a.running.placements.iter().enumerate() {
        assert_eq!(p.role, "worker");
        assert_eq!(p.index as usize, i);
        assert_eq!(p.node, "vm");
        assert!(p.gpu_indices.is_empty());
    }

    let replicas = store.replicas_of(UID).expect("replicas");
    assert_eq!(
        replicas.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        [
            "default.fixture-sleep-worker-0",
            "default.fixture-sleep-worker-1"
        ]
    );
    assert_eq!(
        replicas.iter().map(|r| r.record.pid).collect::<Vec<_>>(),
        [2409, 2411]
    );
    assert_eq!(
        replicas.iter().map(|r| r.port).collect::<Vec<_>>(),
        [Some(29500), Some(29501)]
    );
    assert!(replicas.iter().all(|r| r.state == ProcessState::Running));
    assert!(replicas.iter().all(|r| r.record.cgroup.is_some()));
    assert_eq!(store.running_replicas().expect("running"), replicas);

    let ports = store.ports().expect("ports");
    assert_eq!(
        ports,
        [
            (29500, UID.to_string(), "worker-0".to_string()),
            (29501, UID.to_string(), "worker-1".to_string())
        ]
    );
    let events = store.events("default", "fixture-sleep").expect("events");
    assert_eq!(
        events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
        ["Submitted", "Admitted", "Started", "Started", "Running"]
    );
}

#[test]
fn a_0_1_0_admission_is_rewritten_as_a_versioned_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_copy(dir.path());
    let (uid, a) = store.admissions().expect("admissions").remove(0);
    let ports = [
        ("worker-0".to_string(), 29500),
        ("worker-1".to_string(), 29501),
    ];
    store.admit(&uid, &a, &ports).expect("admit");
    assert_eq!(store.admissions().expect("admissions"), [(uid.clone(), a)]);
    drop(store);
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("sqlite");
    let text: String = conn
        .query_row(
            "SELECT admission FROM admissions WHERE job_uid = ?1",
            [&uid],
            |r| r.get(0),
        )
        .expect("row");
    assert!(
        text.starts_with(r#"{"v":1,"pool":"cpu","gpuType":null,"admittedAt":1795428480570,"#),
        "{text}"
    );
}

/// The embedded cluster opens the 0.1.0 directory through the control plane: on the same
/// node the stored admission is kept; on a machine without that node it is dropped with a
/// warning naming the job, and the job stays, queued again.
#[test]
fn the_cluster_opens_a_0_1_0_directory_through_the_control_plane() {
    use corral_local::config::ClusterFileConfig;
    use corral_local::{Cluster, ClusterConfig};
    for (node, kept) in [("vm", true), ("another-node", false)] {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open_copy(dir.path()));
        let mut config = ClusterConfig::new(dir.path());
        let text = format!("kind: CorralConfig\nnode: {{name: {node}, cpu: '8', memory: 16Gi}}\n");
        config.file = ClusterFileConfig::parse(&text).expect("config");
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("time");
        let (cluster, warnings) = Cluster::open(config, now).expect("open");
        let d = cluster
            .describe("default", "fixture-sleep")
            .expect("describe")
            .expect("the job is still there");
        assert_eq!(d.admission.is_some(), kept, "{node}: {warnings:?}");
        let lost = warnings
            .iter()
            .any(|w| w.contains("default/fixture-sleep") && w.contains("no longer holds"));
        assert_eq!(lost, !kept, "{node}: {warnings:?}");
    }
}
