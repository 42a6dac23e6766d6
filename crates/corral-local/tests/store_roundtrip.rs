//! The SQLite store: schema version, WAL, all-or-nothing submits, records that survive a
//! reopen.

use std::path::PathBuf;

use corral_api::{TrainingJob, TrainingJobSpec, TrainingJobStatus};
use corral_local::executor::container::{ContainerHandle, RuntimeKind};
use corral_local::executor::{ProcessRecord, ProcessState};
use corral_local::store::{NewJob, SCHEMA_VERSION, Store, StoreError, StoredEvent, StoredReplica};

fn new_job(name: &str, uid: &str) -> NewJob {
    let spec: TrainingJobSpec = serde_json::from_value(serde_json::json!({
        "framework": "generic",
        "replicas": {"worker": {"count": 2, "template": {"command": ["true"]}}}
    }))
    .expect("spec");
    NewJob {
        namespace: "default".into(),
        name: name.into(),
        uid: uid.into(),
        submitted_ms: 1000,
        converted_from: None,
        job: TrainingJob::new(name, spec),
    }
}

#[test]
fn jobs_status_and_records_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let mut store = Store::open(dir.path()).expect("open");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        store
            .insert_jobs(&[new_job("a", "uid-a"), new_job("b", "uid-b")])
            .expect("insert");
        let status = TrainingJobStatus {
            restart_count: 2,
            attempt: 2,
            ..Default::default()
        };
        store.save_status("uid-a", &status).expect("status");
        store
            .put_replica(&StoredReplica {
                name: "default.a-worker-0".into(),
                namespace: "default".into(),
                job: "a".into(),
                job_uid: "uid-a".into(),
                role: "worker".into(),
                index: 0,
                attempt: 2,
                retry: 0,
                record: ProcessRecord {
                    name: "default.a-worker-0".into(),
                    job: "default/a".into(),
                    incarnation: "uid-a-2.0".into(),
                    pid: 4242,
                    start_time: 17,
                    dir: PathBuf::from("/tmp/x"),
                    cgroup: None,
                    gpu_indices: vec![1],
                    container: Some(ContainerHandle {
                        program: PathBuf::from("/usr/bin/podman"),
                        global_args: vec!["--runtime".into(), "runc".into()],
                        kind: RuntimeKind::Podman,
                        name: "corral-default.a-worker-0--uid-a-2.0-0badcafe".into(),
                        memory_limit: Some(64 << 20),
                    }),
                },
                port: Some(29501),
                started_ms: 5000,
                state: ProcessState::Running,
            })
            .expect("replica");
        store
            .add_event(&StoredEvent {
                namespace: "default".into(),
                job: "a".into(),
                time_ms: 5000,
                type_: "Normal".into(),
                reason: "Started".into(),
                message: "started".into(),
            })
            .expect("event");
    }
    let mut store = Store::open(dir.path()).expect("reopen");
    let jobs = store.jobs().expect("jobs");
    assert_eq!(
        jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(
        jobs[0].job.status.as_ref().map(|s| s.restart_count),
        Some(2)
    );
    let reps = store.replicas().expect("replicas");
    assert_eq!(reps.len(), 1);
    assert_eq!(reps[0].record.pid, 4242);
    assert_eq!(reps[0].state, ProcessState::Running);
    assert_eq!(store.running_replicas().expect("running"), reps);
    assert_eq!(
        store.replicas_named("default.a-worker-0").expect("named"),
        reps
    );
    assert!(
        store
            .replicas_named("default.b-worker-0")
            .expect("named")
            .is_empty()
    );
    store
        .set_replica_state("default.a-worker-0", 2, 0, ProcessState::Exited { code: 1 })
        .expect("state");
    assert_eq!(
        store.replicas().expect("replicas")[0].state,
        ProcessState::Exited { code: 1 }
    );
    assert!(store.running_replicas().expect("running").is_empty());
    assert_eq!(
        store
            .replicas_named("default.a-worker-0")
            .expect("named")
            .len(),
        1
    );
    assert_eq!(store.events("default", "a").expect("events").len(), 1);
    store.remove_job("uid-a").expect("remove");
    assert!(store.job("default", "a").expect("job").is_none());
    assert!(store.replicas().expect("replicas").is_empty());
    assert!(store.events("default", "a").expect("events").is_empty());
}

#[test]
fn a_submit_is_all_or_nothing() {
    let mut store = Store::open_in_memory().expect("open");
    store.insert_jobs(&[new_job("a", "uid-a")]).expect("insert");
    let err = store
        .insert_jobs(&[new_job("c", "uid-c"), new_job("a", "uid-a2")])
        .expect_err("a exists");
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
    assert!(
        store.job("default", "c").expect("job").is_none(),
        "c rolled back"
    );
    assert_eq!(store.jobs().expect("jobs").len(), 1);
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Store::open(dir.path()).expect("open"));
    let conn = rusqlite::Connection::open(dir.path().join("corral.db")).expect("sqlite");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bump");
    drop(conn);
    assert!(matches!(
        Store::open(dir.path()),
        Err(StoreError::TooNew { .. })
    ));
}

/// A watcher reads the events after the last it saw, of its namespace only, in order and
/// a page at a time.
#[test]
fn events_after_an_id_by_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    assert_eq!(store.last_event_id().expect("last"), 0);
    for (i, ns) in ["team-a", "team-b", "team-a", "team-a"].iter().enumerate() {
        store
            .add_event(&StoredEvent {
                namespace: (*ns).into(),
                job: format!("job-{i}"),
                time_ms: 1000 + i as u64,
                type_: "Normal".into(),
                reason: "Admitted".into(),
                message: format!("event {i}"),
            })
            .expect("event");
    }
    let last = store.last_event_id().expect("last");
    let all = store.events_after(0, None, 100).expect("all");
    assert_eq!(all.len(), 4);
    assert_eq!(all.last().map(|(id, _)| *id), Some(last));
    let a = store.events_after(0, Some("team-a"), 100).expect("team-a");
    let jobs: Vec<&str> = a.iter().map(|(_, e)| e.job.as_str()).collect();
    assert_eq!(jobs, ["job-0", "job-2", "job-3"]);
    // After the first team-a event, a page of one: the next team-a event, not team-b's.
    let next = store.events_after(a[0].0, Some("team-a"), 1).expect("next");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].1.job, "job-2");
    assert!(
        store
            .events_after(last, None, 100)
            .expect("none")
            .is_empty()
    );
}
