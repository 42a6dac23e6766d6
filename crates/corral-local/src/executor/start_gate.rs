//! The start gate: keeps a gang's shims from taking the cores its own spawns need.

use std::fs;
use std::io;
use std::path::Path;

/// A lock file in the run directory that the control loop holds (exclusive) from the
/// spawn of a gang's first shim until the gang is recorded Running, and that every shim
/// takes (shared, at once released) before its own setup. The shims spawned first wait,
/// blocked, instead of taking the cores the server needs to spawn the rest and record
/// them: on two cores a spawn waited up to 3 ms for its new process to be scheduled behind
/// the gang's earlier shims (their cgroup, log and command setup). The shims' work is not
/// less, only later; nothing of the gang's own waits on the server in between.
/// `flock(2)`: the kernel opens the gate if the server dies, so a shim never waits on a
/// dead server, and a gate that cannot be taken is not waited for (slower, never wrong).
#[derive(Debug)]
pub struct StartGate(fs::File);

impl StartGate {
    /// The gate's file in the run directory.
    pub const FILE: &'static str = "start.gate";

    /// Closes the gate at `path` until the returned value is dropped.
    pub fn close(path: &Path) -> io::Result<StartGate> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        file.lock()?;
        Ok(StartGate(file))
    }

    /// What a shim does: waits until the gate is open. Best effort, as above.
    pub fn wait(path: &Path) {
        if let Ok(f) = fs::File::open(path) {
            let _ = f.lock_shared();
        }
    }
}

impl Drop for StartGate {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}
