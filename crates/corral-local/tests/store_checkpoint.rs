//! The store's WAL is copied into the database by the store's checkpoint thread, not by
//! the commit that crosses a threshold (which held the server's lock through two fsyncs).

use std::time::{Duration, Instant};

use corral_local::store::{DB_FILE, Store, StoredEvent};

#[test]
fn commits_are_checkpointed_in_the_background() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let db = dir.path().join(DB_FILE);
    let before = std::fs::metadata(&db).expect("db").len();
    // About 4 MB of events: far below the writer's own checkpoint threshold (64 MB), so
    // only the checkpoint thread moves them into the database file.
    let message = "x".repeat(4000);
    store.begin_batch().expect("begin");
    for i in 0..1000 {
        store
            .add_event(&StoredEvent {
                namespace: "default".into(),
                job: format!("j{i}"),
                time_ms: i,
                type_: "Normal".into(),
                reason: "Test".into(),
                message: message.clone(),
            })
            .expect("event");
    }
    store.commit_batch().expect("commit");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let size = std::fs::metadata(&db).expect("db").len();
        if size > before + 3_000_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database file stayed at {size} bytes (from {before}): the WAL was not checkpointed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Reopened, everything is there.
    drop(store);
    let store = Store::open(dir.path()).expect("reopen");
    assert_eq!(store.events("default", "j999").expect("events").len(), 1);
}
