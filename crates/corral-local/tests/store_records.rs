//! Stored records read back when a newer release added fields to them, and a record of a
//! newer, incompatible version is refused in words.

use corral_local::store::{DB_FILE, Store, StoreError};

/// A data directory whose tables were filled by hand, as a newer release might have.
fn store_with(rows: &str) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Store::open(dir.path()).expect("create"));
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("sqlite");
    conn.execute_batch(rows).expect("rows");
    drop(conn);
    let store = Store::open(dir.path()).expect("open");
    (dir, store)
}

#[test]
fn records_with_fields_added_by_a_newer_release_read() {
    let (_dir, store) = store_with(
        r#"
        INSERT INTO jobs (namespace, name, uid, seq, submitted_ms, spec, status) VALUES
          ('default', 'j', 'u1', 1, 1000,
           '{"apiVersion":"corral.dev/v1alpha1","kind":"TrainingJob",
             "metadata":{"name":"j","namespace":"default","futureMeta":1},
             "spec":{"framework":"generic","futureSpec":{"a":1},
                     "replicas":{"worker":{"count":1,"template":{"command":["true"]},"futureReplica":2}}}}',
           '{"phase":"Running","futureStatus":[1,2]}');
        INSERT INTO admissions (job_uid, admission) VALUES ('u1',
          '{"v":1,"pool":"cpu","gpuType":null,"admittedAt":5,"futureTop":true,
            "request":{"key":"default/j","queue":"default","futureRequest":"x",
                       "groups":[{"role":"worker","count":1,"cpuMilli":100,"futureGroup":1}]},
            "placements":[{"role":"worker","index":0,"node":"vm","gpuIndices":[],"futurePlacement":0}]}');
        INSERT INTO replicas (name, attempt, retry, namespace, job, job_uid, role, idx, record,
                              port, started_ms, state) VALUES
          ('default.j-worker-0', 0, 0, 'default', 'j', 'u1', 'worker', 0,
           '{"name":"default.j-worker-0","job":"default/j","incarnation":"u1-0.0","pid":7,
             "start_time":9,"dir":"/tmp/r","cgroup":null,"gpu_indices":[],"future_record":1}',
           NULL, 5, '"Running"');
        "#,
    );
    let jobs = store.jobs().expect("jobs");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].key(), "default/j");
    let admissions = store.admissions().expect("admissions");
    assert_eq!(admissions.len(), 1);
    let a = &admissions[0].1;
    assert_eq!((a.pool.as_str(), a.running.admitted_at), ("cpu", 5));
    assert_eq!(a.running.request.groups[0].cpu_milli, 100);
    assert_eq!(a.running.placements.len(), 1);
    let replicas = store.running_replicas().expect("replicas");
    assert_eq!(replicas.len(), 1);
    assert_eq!(replicas[0].record.pid, 7);
}

#[test]
fn an_admission_of_a_newer_record_version_is_refused_in_words() {
    let (_dir, store) = store_with(
        r#"INSERT INTO admissions (job_uid, admission) VALUES ('u1', '{"v":2,"pool":"cpu"}');"#,
    );
    let err = store.admissions().expect_err("v2");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("admission of u1") && message.contains("upgrade corral"),
        "{message}"
    );
}
