//! The local executor: runs replicas as processes on this machine, limits them with cgroups,
//! watches them, stops them, and finds them again after a crash of the server.
//!
//! # API
//!
//! ```text
//! LocalExecutor::new(ExecutorConfig) -> (LocalExecutor, warnings)   warnings: e.g. no cgroups
//!   .start(&ReplicaProcessSpec) -> ProcessRecord      persist the record (store), it is also
//!                                                     written to <dir>/record.json
//!   .adopt(ProcessRecord) -> ProcessState             after a restart, for every stored record
//!   .poll(now) -> Vec<(name, ProcessState)>           non-blocking; changes since the last poll;
//!                                                     also escalates stops to SIGKILL
//!   .stop(name, grace)                                SIGTERM now, SIGKILL of the group after grace
//!   .usage(name) -> ReplicaUsage                      CPU seconds, memory, GPUs (NVML)
//!   .log_path(name) / read_log_tail(name, bytes)
//!   .ports_mut() -> &mut PortAllocator                ports from config.port_range
//!   .discard_files(name, label_prefix)                a deleted job's directories, to the trash
//!   .discard_scratch(job, label_prefix)               its scratch (TMPDIR, /tmp, /dev/shm)
//! discover(run_dir) -> Vec<ProcessRecord>             every record.json under run_dir
//! ```
//!
//! # How a replica runs
//!
//! Every replica has a directory `<run_dir>/<name>/<incarnation>/` that holds `launch.json`,
//! `record.json`, `output.log` (+ `output.log.1`: stdout and stderr, capped at
//! `log_limit_bytes` in all, with the shim's own `corral:` lines) and, once it ended,
//! `exit.json`. The executor spawns the [shim](crate::shim) (`corral-shim <dir>`) as the
//! leader of a new process group; the shim joins the replica's cgroup, runs the command and
//! writes `exit.json`. The executor never
//! waits on the command itself: it reaps the shims it spawned (no zombies) and reads
//! `exit.json`, so an adopted replica (no longer our child) is observed the same way.
//!
//! A process is identified by pid *and* its start time (`/proc/<pid>/stat` field 22), so a
//! recycled pid is never mistaken for a replica. An incarnation is started at most once: the
//! directory of a `(name, incarnation)` that was ever started makes a second `start` fail.
//!
//! Stop: SIGTERM to the shim, which forwards it to the whole group; after the grace period
//! (checked by [`LocalExecutor::poll`]) SIGKILL to the group and to everything in the cgroup.
//! When the command exits the shim kills whatever it left behind, so nothing outlives a
//! replica.
//!
//! Environment: [`base_env`] (PATH, HOME, LANG, TMPDIR (TMP, TEMP) its job's [`scratch`], and
//! what `passEnv` allows; nothing else of the server's), then the spec's `env` on top.
//! Unless the spec sets `CUDA_VISIBLE_DEVICES` itself, it is set to the replica's
//! `gpu_indices` (empty: no GPU). The working directory defaults to the replica directory.
//!
//! A deleted job's directories are moved to `<run_dir>/.trash` and removed by a thread
//! ([`trash`]); a finished job that is kept keeps its logs.
//!
//! A spec with a `container` runs as the container runtime's client under the same shim
//! (see [`container`]); one with `python` gets its environment built by the shim first
//! (see [`python`]).

mod base_env;
mod config;
pub mod container;
mod error;
pub(crate) mod files;
pub mod log_times;
pub mod procfs;
pub mod python;
mod replica;
pub mod scratch;
pub mod standby;
mod start;
mod start_gate;
mod supervise;
pub mod trash;
mod usage;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::Child;
use std::time::Instant;

use crate::cgroup::{CgroupManager, CgroupRef};
use crate::gpu;
use crate::ports::PortAllocator;

pub(crate) use base_env::DEFAULT_PATH;
pub use base_env::{TMP_DIR, base_env};
pub use config::{CgroupMode, ExecutorConfig, SHIM_BINARY, ShimCommand};
pub use error::ExecutorError;
use error::io_err;
pub use files::read_log_tail;
pub use log_times::rotated_path;
pub use replica::{ProcessRecord, ProcessState, ReplicaProcessSpec, ReplicaUsage, RunAs, discover};
pub use start::HOME_DIR;
pub use start_gate::StartGate;

struct Tracked {
    record: ProcessRecord,
    /// The shim, while it is our child and not yet reaped.
    child: Option<Child>,
    state: ProcessState,
    /// The state the caller last saw (from start, adopt or poll).
    reported: ProcessState,
    /// When the stop escalates to SIGKILL.
    kill_at: Option<Instant>,
    /// We sent SIGKILL to the group.
    killed: bool,
}

/// Runs replicas as local processes. Single-threaded: wrap it in a mutex to share it.
pub struct LocalExecutor {
    config: ExecutorConfig,
    cgroups: Option<CgroupManager>,
    /// Which cgroup mode was chosen and why, in words (the log, `corral doctor`).
    cgroup_mode: String,
    replicas: BTreeMap<String, Tracked>,
    /// Names of the tracked replicas that have not ended, so that what runs now is found
    /// without walking the ended ones, which stay tracked until their job is deleted.
    active: BTreeSet<String>,
    /// Shims whose replica has ended but which were not yet reaped.
    unreaped: Vec<Child>,
    /// Cgroups of ended replicas (and whether a container ran in each), removed by
    /// [`LocalExecutor::remove_retired_cgroups`] after the pass has started what it could;
    /// one still busy (its shim was still exiting) is retried on the next.
    retired_cgroups: Vec<(CgroupRef, bool)>,
    ports: PortAllocator,
    /// Threads a gang's launches are spread over: half the cores, read once (finding them
    /// reads the cgroup's CPU quota files, which cost as much as a launch's own files).
    launch_threads: usize,
    /// Closed while a gang is started; `None` when its file could not be made.
    start_gate: Option<PathBuf>,
    /// Shims started ahead of time; `None` when the configuration asks for none.
    standby: Option<standby::StandbyShims>,
    /// Where deleted jobs' replica directories go.
    trash: trash::Trash,
}

/// Percent-encodes everything outside `[A-Za-z0-9._-]` so a name is one safe path component.
fn path_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && !out.is_empty()) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl LocalExecutor {
    /// Creates the run directory and sets up cgroups. The warnings say what will not be
    /// enforced on this machine (e.g. "cgroups unavailable: ...").
    pub fn new(config: ExecutorConfig) -> Result<(Self, Vec<String>), ExecutorError> {
        fs::create_dir_all(&config.run_dir)
            .map_err(io_err(format!("creating {}", config.run_dir.display())))?;
        let mut warnings = Vec::new();
        let (cgroups, cgroup_mode) = match config.cgroup {
            CgroupMode::Disabled => (None, "cgroups disabled by configuration".to_string()),
            CgroupMode::Auto => match CgroupManager::detect_with(config.cgroup_root.as_deref()) {
                Ok(m) => {
                    let line = m.describe().to_string();
                    (Some(m), line)
                }
                Err(reason) => {
                    let line = format!(
                        "cgroups unavailable ({reason}): memory and CPU limits are not enforced, \
                         OOM kills are not detected, usage is read from /proc"
                    );
                    warnings.push(line.clone());
                    (None, line)
                }
            },
        };
        if let Some(reason) = gpu::unavailable_reason() {
            warnings.push(reason);
        }
        let ports = PortAllocator::new(config.port_range.clone());
        // Made once, so that a shim finds it even if no gang was started yet.
        let gate = config.run_dir.join(StartGate::FILE);
        let start_gate = match fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&gate)
        {
            Ok(_) => Some(gate),
            Err(e) => {
                warnings.push(format!(
                    "the start gate {} could not be made ({e}): a gang's shims may slow \
                     down its own start",
                    gate.display()
                ));
                None
            }
        };
        let standby = match config.standby_shims {
            0 => None,
            n => match standby::StandbyShims::start(config.shim.clone(), n) {
                Ok(s) => Some(s),
                Err(e) => {
                    warnings.push(format!(
                        "no standby shims ({e}): every replica start spawns its shim"
                    ));
                    None
                }
            },
        };
        let trash = trash::Trash::open(&config.run_dir).unwrap_or_else(|e| {
            warnings.push(format!(
                "no trash directory in {} ({e}): a deleted job's files are removed on the \
                 control loop",
                config.run_dir.display()
            ));
            trash::Trash::in_place()
        });
        Ok((
            LocalExecutor {
                config,
                cgroups,
                cgroup_mode,
                replicas: BTreeMap::new(),
                active: BTreeSet::new(),
                unreaped: Vec::new(),
                retired_cgroups: Vec::new(),
                ports,
                launch_threads: std::thread::available_parallelism().map_or(1, |n| n.get() / 2),
                start_gate,
                standby,
                trash,
            },
            warnings,
        ))
    }

    /// Which cgroup mode was chosen and why, in one line.
    pub fn cgroup_mode(&self) -> &str {
        &self.cgroup_mode
    }

    /// Whether replica limits are enforced through cgroups.
    pub fn cgroups_enabled(&self) -> bool {
        self.cgroups.is_some()
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    pub fn ports_mut(&mut self) -> &mut PortAllocator {
        &mut self.ports
    }

    /// The directory of one incarnation of a replica.
    pub fn replica_dir(&self, name: &str, incarnation: &str) -> PathBuf {
        self.config
            .run_dir
            .join(path_component(name))
            .join(path_component(incarnation))
    }

    /// Removes the files of a deleted job's replica `name`: the directories of its
    /// incarnations whose label starts with `label_prefix` (the job's; an earlier job of
    /// the same name had its own) go to the trash at once, except one still running; the
    /// replica's directory goes whole when nothing else is in it.
    pub fn discard_files(&mut self, name: &str, label_prefix: &str) -> Result<(), ExecutorError> {
        let dir = self.config.run_dir.join(path_component(name));
        let running = self
            .replicas
            .get(name)
            .filter(|t| !t.state.is_terminal())
            .map(|t| path_component(&t.record.incarnation));
        let prefix = path_component(label_prefix);
        let entries: Vec<fs::DirEntry> = match fs::read_dir(&dir) {
            Ok(entries) => entries.filter_map(Result::ok).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(format!("reading {}", dir.display()))(e)),
        };
        let discarded = |entry: &fs::DirEntry| {
            let label = entry.file_name();
            let label = label.to_string_lossy();
            label.starts_with(&prefix) && running.as_deref() != Some(label.as_ref())
        };
        // Nothing else in it: the replica's directory goes whole, in one rename. Here, on
        // the control loop, so that no start of the same name makes it meanwhile; and no
        // removal here at all, not even of an empty directory: freeing an inode's blocks
        // can wait on the disk (a synchronous discard where the file system is mounted
        // with `discard`), and every request would wait behind it.
        if entries.iter().all(discarded) {
            return self
                .trash
                .discard(&dir)
                .map_err(io_err(format!("removing {}", dir.display())));
        }
        for entry in entries.iter().filter(|e| discarded(e)) {
            let path = entry.path();
            self.trash
                .discard(&path)
                .map_err(io_err(format!("removing {}", path.display())))?;
        }
        Ok(())
    }

    /// Removes a deleted job's scratch directories (see [`scratch`]): `job` is its
    /// `namespace/name`, `label_prefix` how its incarnations begin.
    pub fn discard_scratch(&mut self, job: &str, label_prefix: &str) -> Result<(), ExecutorError> {
        scratch::discard(&self.config.run_dir, job, label_prefix, &mut self.trash)
            .map_err(io_err(format!("removing the scratch of {job}")))
    }

    /// The last observed state of a replica.
    pub fn state(&self, name: &str) -> Option<ProcessState> {
        self.replicas.get(name).map(|t| t.state)
    }

    /// The record of a tracked replica.
    pub fn record(&self, name: &str) -> Option<&ProcessRecord> {
        self.replicas.get(name).map(|t| &t.record)
    }

    /// The GPU indices held by replicas that have not ended (a stopping replica in its grace
    /// period included): what the control plane's room leaves out.
    pub fn gpus_in_use(&self) -> BTreeSet<u32> {
        self.active
            .iter()
            .filter_map(|name| self.replicas.get(name))
            .filter(|t| !t.state.is_terminal())
            .flat_map(|t| t.record.gpu_indices.iter().copied())
            .collect()
    }

    /// Tracks `t` as `name`, and whether it still runs.
    fn insert_tracked(&mut self, name: String, t: Tracked) {
        if t.state.is_terminal() {
            self.active.remove(&name);
        } else {
            self.active.insert(name.clone());
        }
        self.replicas.insert(name, t);
    }

    /// The records of the replicas that have not ended (a stopping one included).
    pub fn running(&self) -> Vec<&ProcessRecord> {
        self.active
            .iter()
            .filter_map(|name| self.replicas.get(name))
            .filter(|t| !t.state.is_terminal())
            .map(|t| &t.record)
            .collect()
    }

    /// Every tracked replica's record, by name.
    pub fn records(&self) -> Vec<&ProcessRecord> {
        self.replicas.values().map(|t| &t.record).collect()
    }

    /// Stops tracking an ended replica (its files stay). Returns false if it still runs.
    pub fn forget(&mut self, name: &str) -> bool {
        match self.replicas.get(name) {
            Some(t) if !t.state.is_terminal() => false,
            Some(_) => {
                self.active.remove(name);
                if let Some(mut t) = self.replicas.remove(name)
                    && let Some(c) = t.child.take()
                {
                    self.unreaped.push(c);
                }
                true
            }
            None => true,
        }
    }

    /// The current segment of a replica's output log (`<path>.1` holds the previous one).
    pub fn log_path(&self, name: &str) -> Option<PathBuf> {
        self.replicas.get(name).map(|t| t.record.log_path())
    }

    /// The last `max_bytes` of a replica's output.
    pub fn read_log_tail(&self, name: &str, max_bytes: u64) -> Result<Vec<u8>, ExecutorError> {
        let path = self
            .log_path(name)
            .ok_or_else(|| ExecutorError::NotFound(name.to_string()))?;
        files::read_log_tail(&path, max_bytes)
            .map_err(io_err(format!("reading {}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executor_can_move_between_threads() {
        fn assert_send<T: Send>() {}
        assert_send::<LocalExecutor>();
    }

    #[test]
    fn path_components_are_safe() {
        assert_eq!(path_component("job-worker-0"), "job-worker-0");
        assert_eq!(path_component("ns/job"), "ns%2Fjob");
        assert_eq!(path_component(".."), "%2E.");
        assert_eq!(path_component("a b"), "a%20b");
    }
}
