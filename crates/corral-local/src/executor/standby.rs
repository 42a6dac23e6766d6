//! Standby shims: shims started ahead of time, each blocked reading a replica directory
//! from its stdin, so that starting a replica hands a directory to a process that already
//! exists instead of spawning one on the control loop.
//!
//! A spawn costs the control loop about 0.5 ms on a small VM (the new process must be
//! scheduled and exec before the spawning thread goes on), 4-5 ms for a gang of 8, and the
//! shim's own loading (0.3-0.7 ms of CPU each) then competes with the rest of the start. A
//! standby shim did all of that earlier, in the background. A thread of the executor keeps
//! the pool full: it waits a little after a shim was taken, so that its spawns do not
//! compete with the start that took it, then spawns one at a time.
//!
//! The server writes the replica's process record (the standby's pid and start time) before
//! it hands the directory over, so there is never a shim working on a directory without a
//! record. A standby shim that reads end-of-file (the server closed its pipe, or died)
//! exits at once: standby shims never outlive their server.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{ShimCommand, procfs};

/// The argument that makes a shim wait for its replica directory on stdin.
pub const STANDBY_ARG: &str = "--standby";

/// How long the refilling thread waits after a shim was taken before it spawns.
const REFILL_DELAY: Duration = Duration::from_millis(20);
/// After a failed spawn (no such program, no processes left): not in a tight loop.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// How often idle standby shims are checked for having died (reaped, then replaced).
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// One standby shim: its process (stdin is the pipe the directory is written to) and its
/// start time (`/proc/<pid>/stat` field 22), which identifies it in the process record.
#[derive(Debug)]
pub struct Standby {
    pub child: Child,
    pub start_time: u64,
}

impl Standby {
    /// Hands the replica directory over and closes the pipe; the shim then runs the
    /// replica as if it had been started with `dir` as its argument.
    pub fn hand_over(&mut self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let mut stdin = self
            .child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the standby shim's stdin is gone"))?;
        stdin.write_all(dir.as_os_str().as_bytes())
    }

    /// Ends a standby shim that will not be used, and reaps it.
    fn end(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Default)]
struct Pool {
    ready: Vec<Standby>,
    /// Set when the executor goes away: the thread ends, the shims with it.
    closed: bool,
    /// A shim was taken since the thread last looked.
    taken: bool,
}

#[derive(Debug, Default)]
struct Shared {
    pool: Mutex<Pool>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The pool of standby shims and the thread that keeps it full.
#[derive(Debug)]
pub struct StandbyShims {
    shared: Arc<Shared>,
    refiller: Option<JoinHandle<()>>,
}

impl StandbyShims {
    /// Starts the thread that fills the pool up to `size` shims of `shim`.
    pub fn start(shim: ShimCommand, size: usize) -> std::io::Result<StandbyShims> {
        let shared = Arc::new(Shared::default());
        let refiller = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("corral-standby".into())
                .spawn(move || refill(&shared, &shim, size))?
        };
        Ok(StandbyShims {
            shared,
            refiller: Some(refiller),
        })
    }

    /// A live standby shim, if one is ready (dead ones met on the way are reaped).
    pub fn take(&self) -> Option<Standby> {
        let mut pool = self.shared.lock();
        let mut found = None;
        while let Some(mut s) = pool.ready.pop() {
            if matches!(s.child.try_wait(), Ok(None)) {
                found = Some(s);
                break;
            }
            let _ = s.child.wait();
        }
        pool.taken = true;
        drop(pool);
        self.shared.changed.notify_one();
        found
    }

    /// The pids of the standby shims ready now.
    pub fn pids(&self) -> Vec<u32> {
        self.shared
            .lock()
            .ready
            .iter()
            .map(|s| s.child.id())
            .collect()
    }
}

impl Drop for StandbyShims {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_one();
        if let Some(t) = self.refiller.take() {
            let _ = t.join();
        }
        for s in std::mem::take(&mut self.shared.lock().ready) {
            s.end();
        }
    }
}

fn refill(shared: &Shared, shim: &ShimCommand, size: usize) {
    loop {
        let mut pool = shared.lock();
        loop {
            if pool.closed {
                return;
            }
            // Reap the idle ones that died (killed by hand, the OOM killer): replaced below.
            pool.ready
                .retain_mut(|s| matches!(s.child.try_wait(), Ok(None)));
            if pool.ready.len() < size {
                break;
            }
            pool.taken = false;
            pool = shared
                .changed
                .wait_timeout(pool, CHECK_EVERY)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let after_take = std::mem::take(&mut pool.taken);
        drop(pool);
        if after_take {
            std::thread::sleep(REFILL_DELAY);
        }
        match spawn(shim) {
            Ok(s) => {
                let mut pool = shared.lock();
                if pool.closed {
                    drop(pool);
                    s.end();
                    return;
                }
                pool.ready.push(s);
            }
            Err(_) => {
                // A start without a standby spawns its shim itself and reports what
                // fails; here only try again later.
                let pool = shared.lock();
                if pool.closed {
                    return;
                }
                let _ = shared.changed.wait_timeout(pool, RETRY_DELAY);
            }
        }
    }
}

/// Spawns one standby shim, leader of its own process group like any shim.
fn spawn(shim: &ShimCommand) -> std::io::Result<Standby> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(&shim.program)
        .args(&shim.args_prefix)
        .arg(STANDBY_ARG)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // Not reaped yet: its /proc entry exists even if it already exited.
    match procfs::stat(child.id()) {
        Some(stat) => Ok(Standby {
            child,
            start_time: stat.start_time,
        }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(std::io::Error::other("the standby shim has no /proc entry"))
        }
    }
}
