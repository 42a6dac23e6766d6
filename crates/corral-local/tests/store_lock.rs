//! One writer per data directory: a second open is refused at once, naming the holder, and
//! the directory is free again when the holder drops the store or is killed with SIGKILL.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corral_local::lock::LockHolder;
use corral_local::store::{Store, StoreError};

/// Set in the child that [`a_holder_killed_with_sigkill_frees_the_directory`] starts.
const HELPER_DIR: &str = "CORRAL_TEST_LOCK_HOLDER_DIR";
const HELPER_ADDR: &str = "192.0.2.1:7443";

fn in_use(result: Result<Store, StoreError>) -> (std::path::PathBuf, LockHolder, String) {
    let Err(e) = result else {
        panic!("a second open succeeded while the first store is open");
    };
    let message = e.to_string();
    match e {
        StoreError::InUse { dir, holder } => (dir, holder, message),
        other => panic!("expected InUse, got {other}"),
    }
}

#[test]
fn a_second_open_fails_until_the_first_store_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Store::open(dir.path()).expect("open");
    let started = Instant::now();
    let (at, holder, message) = in_use(Store::open(dir.path()));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not after waiting"
    );
    assert_eq!(at, dir.path());
    assert_eq!(holder.pid, Some(std::process::id()));
    assert_eq!(holder.api, None);
    assert!(
        message.starts_with(&format!(
            "data directory {} is in use by ",
            dir.path().display()
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!("(pid {})", std::process::id())),
        "{message}"
    );
    assert!(
        message.ends_with("; stop it first or use another --data-dir"),
        "{message}"
    );

    first.announce_address("127.0.0.1:7443").expect("announce");
    let (_, holder, message) = in_use(Store::open(dir.path()));
    assert_eq!(holder.api.as_deref(), Some("127.0.0.1:7443"));
    assert!(
        message.contains(&format!(
            "(pid {}, API at 127.0.0.1:7443)",
            std::process::id()
        )),
        "{message}"
    );
    // A shorter address replaces the longer one entirely.
    first.announce_address("[::1]:1").expect("announce");
    let (_, holder, _) = in_use(Store::open(dir.path()));
    assert_eq!(holder.api.as_deref(), Some("[::1]:1"));

    drop(first);
    let second = Store::open(dir.path()).expect("open after the first is dropped");
    assert!(matches!(
        Store::open(dir.path()),
        Err(StoreError::InUse { .. })
    ));
    drop(second);
}

#[test]
fn in_memory_stores_take_no_lock() {
    let a = Store::open_in_memory().expect("a");
    let b = Store::open_in_memory().expect("b");
    a.announce_address("127.0.0.1:1").expect("no-op");
    drop((a, b));
}

/// Not a test of its own: in the child process started by the SIGKILL test, holds the store
/// open, says so on stdout, and waits to be killed.
#[test]
fn lock_holder_helper() {
    let Some(dir) = std::env::var_os(HELPER_DIR) else {
        return;
    };
    let store = Store::open(Path::new(&dir)).expect("helper: open");
    store
        .announce_address(HELPER_ADDR)
        .expect("helper: announce");
    println!("HOLDING {}", std::process::id());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn a_holder_killed_with_sigkill_frees_the_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "lock_holder_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_DIR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the holder");
    let stdout = child.stdout.take().expect("stdout");
    // libtest prints the helper's line after its own "test lock_holder_helper ... ".
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("HOLDING ") {
                let _ = tx.send(line[at..].to_string());
                break;
            }
        }
    });
    let holding = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(line) => line,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the holder did not say it holds the lock: {e}");
        }
    };
    assert_eq!(holding, format!("HOLDING {}", child.id()));

    let (_, holder, message) = in_use(Store::open(dir.path()));
    assert_eq!(holder.pid, Some(child.id()), "{message}");
    assert_eq!(holder.api.as_deref(), Some(HELPER_ADDR), "{message}");

    // std's kill is SIGKILL: the holder gets no chance to clean up.
    child.kill().expect("kill -9");
    let status = child.wait().expect("wait");
    assert!(!status.success());
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status:?}");
    }
    let store = Store::open(dir.path()).expect("open after the holder was killed");
    // The new holder describes itself; the dead one's address is gone.
    let (_, holder, _) = in_use(Store::open(dir.path()));
    assert_eq!(holder.pid, Some(std::process::id()));
    assert_eq!(holder.api, None);
    drop(store);
}
