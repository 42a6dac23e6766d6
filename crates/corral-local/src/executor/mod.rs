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
//! Environment: [`base_env`] (PATH, HOME, LANG, TMPDIR in the replica's directory, and
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

pub mod container;
pub(crate) mod files;
pub mod log_times;
pub mod procfs;
pub mod python;
pub mod standby;
pub mod trash;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use crate::cgroup::{CgroupLimits, CgroupManager, CgroupRef};
use crate::gpu::{self, GpuSample};
use crate::ports::PortAllocator;
use container::{ContainerHandle, ContainerRequest, ContainerRuntime};
use files::{EXIT_FILE, ExitRecord, LAUNCH_FILE, LOG_FILE, LaunchFile, RECORD_FILE};

pub use files::{read_log_tail, rotated_path};

/// The file name of the dedicated shim binary.
pub const SHIM_BINARY: &str = "corral-shim";

/// The program that supervises each replica (see [`crate::shim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimCommand {
    pub program: PathBuf,
    /// Arguments before the replica directory, e.g. `["shim"]`.
    pub args_prefix: Vec<OsString>,
}

impl ShimCommand {
    /// `corral-shim` next to the running binary (cargo builds and installs it with
    /// `corral`); without one, this very binary's hidden `shim` subcommand, which runs the
    /// same code but takes about twice the CPU time to start.
    pub fn current_exe() -> io::Result<Self> {
        Ok(Self::beside(std::env::current_exe()?))
    }

    /// The shim for the `corral` binary at `exe` (see [`current_exe`](Self::current_exe)).
    pub fn beside(exe: PathBuf) -> Self {
        let sibling = exe.with_file_name(SHIM_BINARY);
        if sibling.is_file() {
            return ShimCommand {
                program: sibling,
                args_prefix: Vec::new(),
            };
        }
        ShimCommand {
            program: exe,
            args_prefix: vec!["shim".into()],
        }
    }
}

/// Whether to use cgroups for limits and accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CgroupMode {
    /// Use cgroups when this machine lets us; otherwise warn once and run without limits.
    #[default]
    Auto,
    Disabled,
}

#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Replica directories go here: `<run_dir>/<name>/<incarnation>/`.
    pub run_dir: PathBuf,
    /// Cap of each replica's output log (both segments together).
    pub log_limit_bytes: u64,
    pub port_range: std::ops::Range<u16>,
    pub cgroup: CgroupMode,
    /// Where replica cgroups go on cgroup v2 (`cgroupRoot` in corral.yaml); `None`: found
    /// by [`CgroupManager::detect_with`].
    pub cgroup_root: Option<PathBuf>,
    pub shim: ShimCommand,
    /// Variables of the server's environment that replicas may see (`passEnv` in
    /// `corral.yaml`). Nothing else of it reaches a replica: see [`base_env`].
    pub pass_env: Vec<String>,
    /// The container runtime that runs replicas with an image (none: such a spec is
    /// refused; the cluster decides beforehand whether an image is used).
    pub containers: Option<ContainerRuntime>,
    /// uv, which builds the Python environments replicas ask for (none: such a spec is
    /// refused), and where the environments are kept.
    pub python: Option<(PathBuf, PathBuf)>,
    /// Shims kept started ahead of time (see [`standby`]); 0: each start spawns its own.
    pub standby_shims: usize,
}

impl ExecutorConfig {
    /// Defaults: 64 MiB of log per replica, ports 29500..30500, cgroups when possible, no
    /// variable of the server's environment passed through.
    pub fn new(run_dir: impl Into<PathBuf>, shim: ShimCommand) -> Self {
        ExecutorConfig {
            run_dir: run_dir.into(),
            log_limit_bytes: 64 << 20,
            port_range: 29500..30500,
            cgroup: CgroupMode::Auto,
            cgroup_root: None,
            shim,
            pass_env: Vec::new(),
            containers: None,
            python: None,
            standby_shims: 0,
        }
    }
}

/// `PATH` when the server has none.
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment every replica starts from, before the launch contract's variables and
/// the job's own `env`: `PATH` (the server's, so that the programs it finds are found),
/// `LANG` (the server's, else `C.UTF-8`), `HOME` and `TMPDIR` inside the replica's own
/// directory, and the variables the operator allows with `passEnv`. Nothing else of the
/// server's environment: a token or cloud key there is no tenant's business.
pub fn base_env(replica_dir: &Path, pass_env: &[String]) -> Vec<(String, String)> {
    let server = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut env = vec![
        (
            "PATH".to_string(),
            server("PATH").unwrap_or_else(|| DEFAULT_PATH.to_string()),
        ),
        (
            "LANG".to_string(),
            server("LANG").unwrap_or_else(|| "C.UTF-8".to_string()),
        ),
        ("HOME".to_string(), replica_dir.display().to_string()),
        (
            "TMPDIR".to_string(),
            replica_dir.join(TMP_DIR).display().to_string(),
        ),
    ];
    for name in pass_env {
        if let Some(value) = std::env::var_os(name) {
            env.retain(|(k, _)| k != name);
            env.push((name.clone(), value.to_string_lossy().into_owned()));
        }
    }
    env
}

/// The replica's own temporary directory (`TMPDIR`), inside its directory.
pub const TMP_DIR: &str = "tmp";

/// Everything needed to start one replica process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaProcessSpec {
    /// `<job>-<role>-<index>`; unique among this executor's replicas (include the namespace
    /// if two namespaces may hold jobs of the same name).
    pub name: String,
    /// `namespace/name` of the job.
    pub job: String,
    /// Distinguishes restarts of the same replica; each is started at most once.
    pub incarnation: String,
    /// Program and arguments.
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Default: the code snapshot, else the replica directory.
    pub working_dir: Option<PathBuf>,
    /// The job's code snapshot (read-only): the default working directory; in a container
    /// mounted read-only at [`crate::code::CONTAINER_DIR`].
    pub code: Option<PathBuf>,
    /// Files written before the start (e.g. an MPI hostfile); relative paths are relative to
    /// the replica directory.
    pub files: Vec<(PathBuf, String)>,
    pub cpu_milli: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub gpu_indices: Vec<u32>,
    /// Run in a container of this image (see [`container`]): `command` is then unused,
    /// the request's `command` and `args` override the image's entrypoint and CMD.
    pub container: Option<ContainerRequest>,
    /// Python packages to run with (see [`python`]).
    pub python: Option<corral_api::training_job::PythonEnv>,
}

/// What identifies a started replica; persist it to re-adopt the replica after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub name: String,
    #[serde(default)]
    pub job: String,
    pub incarnation: String,
    /// Pid of the shim, which is also the process group id.
    pub pid: u32,
    /// `/proc/<pid>/stat` start time (clock ticks after boot).
    pub start_time: u64,
    /// The replica directory.
    pub dir: PathBuf,
    #[serde(default)]
    pub cgroup: Option<CgroupRef>,
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    /// The container the replica runs in, if any: removed by name when the replica is
    /// killed, since killing the runtime's client leaves it running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerHandle>,
}

impl ProcessRecord {
    /// The current segment of the replica's output log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// The exit file, present once the replica has ended.
    pub fn exit_path(&self) -> PathBuf {
        self.dir.join(EXIT_FILE)
    }

    /// Why the command could not run at all, as the exit file says (none while it runs, or
    /// when it ran).
    pub fn exit_error(&self) -> Option<String> {
        files::read_json::<ExitRecord>(&self.exit_path())
            .ok()
            .flatten()
            .and_then(|exit| exit.error)
    }
}

/// What the executor observes of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcessState {
    Running,
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    /// Killed by the kernel because the replica exceeded its memory limit.
    OomKilled,
    /// The process vanished and left no exit status.
    Gone,
    /// What it needs before its command runs could not be made (a Python environment
    /// that does not resolve); the exit file's `error` says why.
    SetupFailed,
}

impl ProcessState {
    pub fn is_terminal(self) -> bool {
        self != ProcessState::Running
    }

    fn from_exit(rec: &ExitRecord) -> Self {
        if rec.setup_failed {
            ProcessState::SetupFailed
        } else if rec.oom_killed && rec.code != Some(0) {
            ProcessState::OomKilled
        } else if let Some(signal) = rec.signal {
            ProcessState::Signaled { signal }
        } else if let Some(code) = rec.code {
            ProcessState::Exited { code }
        } else {
            ProcessState::Gone
        }
    }
}

/// Resource use of one running replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaUsage {
    /// CPU time used so far (user + system), in seconds.
    pub cpu_seconds: f64,
    /// Memory in use: the cgroup's working set, or the sum of RSS without a cgroup.
    pub memory_bytes: u64,
    /// The replica's GPUs (empty without NVML).
    pub gpus: Vec<GpuSample>,
    /// GPU memory held by the replica's own processes (its cgroup, else its process group)
    /// on its GPUs; `None` without NVML.
    pub gpu_memory_bytes: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("replica {0} is already running")]
    AlreadyRunning(String),
    #[error("replica {name} incarnation {incarnation} was already started ({dir})")]
    AlreadyStarted {
        name: String,
        incarnation: String,
        dir: PathBuf,
    },
    #[error("no replica named {0}")]
    NotFound(String),
    #[error("invalid replica spec: {0}")]
    InvalidSpec(String),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ExecutorError {
    let context = context.into();
    move |source| ExecutorError::Io { context, source }
}

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

/// What one launch gives: the record and the shim, our child.
type Launched = Result<(ProcessRecord, Child), ExecutorError>;

/// A launch whose files are written and whose shim is not spawned yet.
struct Prepared {
    dir: PathBuf,
    cgroup: Option<CgroupRef>,
    container: Option<container::ContainerHandle>,
}

/// Runs replicas as local processes. Single-threaded: wrap it in a mutex to share it.
pub struct LocalExecutor {
    config: ExecutorConfig,
    cgroups: Option<CgroupManager>,
    /// Which cgroup mode was chosen and why, in words (the log, `corral doctor`).
    cgroup_mode: String,
    replicas: BTreeMap<String, Tracked>,
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

    /// Starts a replica: writes its files, creates its cgroup, spawns the shim.
    pub fn start(&mut self, spec: &ReplicaProcessSpec) -> Result<ProcessRecord, ExecutorError> {
        self.check_startable(spec)?;
        let (record, child) = self.launch(spec)?;
        Ok(self.track(record, child))
    }

    /// Starts several replicas (a gang) at once: the checks in order, then the launches,
    /// on several threads where there are cores to spare, since each spends most of its time
    /// in the kernel (cgroup creation, process spawn, file writes). One result per spec, in
    /// order; a failed one does not stop the others.
    pub fn start_all(
        &mut self,
        specs: &[ReplicaProcessSpec],
    ) -> Vec<Result<ProcessRecord, ExecutorError>> {
        // Half the cores launch; the other half run the shims that are starting. On two
        // cores that is one thread, which measured as fast as eight and costs no thread
        // creation.
        self.start_all_on(specs, self.launch_threads)
    }

    /// [`start_all`](Self::start_all) with the launches spread over at most `threads`
    /// threads (1: in this thread).
    pub fn start_all_on(
        &mut self,
        specs: &[ReplicaProcessSpec],
        threads: usize,
    ) -> Vec<Result<ProcessRecord, ExecutorError>> {
        let mut checked: Vec<Result<(), ExecutorError>> = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let twice = specs[..i].iter().any(|o| o.name == spec.name);
            checked.push(if twice {
                Err(ExecutorError::AlreadyRunning(format!(
                    "{} (twice in one start)",
                    spec.name
                )))
            } else {
                self.check_startable(spec)
            });
        }
        let threads = threads.clamp(1, specs.len().max(1));
        let this = &*self;
        let launch = |(spec, ok): (&ReplicaProcessSpec, Result<(), ExecutorError>)| {
            ok.and_then(|()| this.launch(spec))
        };
        let mut work: Vec<_> = specs.iter().zip(checked).collect();
        let launched: Vec<Launched> = if threads == 1 {
            // Every replica's files first, then the shims back to back: a shim that is
            // starting (loading, making its cgroup) takes a core, and the files written
            // before any runs are written without it in the way.
            let prepared: Vec<_> = work
                .into_iter()
                .map(|(spec, ok)| (spec, ok.and_then(|()| this.prepare(spec))))
                .collect();
            prepared
                .into_iter()
                .map(|(spec, p)| p.and_then(|p| this.spawn_shim(spec, p)))
                .collect()
        } else {
            let per_thread = work.len().div_ceil(threads);
            let mut chunks = Vec::new();
            while !work.is_empty() {
                let rest = work.split_off(per_thread.min(work.len()));
                chunks.push(std::mem::replace(&mut work, rest));
            }
            std::thread::scope(|scope| {
                let handles: Vec<_> = chunks
                    .into_iter()
                    .map(|chunk| {
                        let n = chunk.len();
                        let handle =
                            scope.spawn(move || chunk.into_iter().map(launch).collect::<Vec<_>>());
                        (n, handle)
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|(n, handle)| {
                        handle.join().unwrap_or_else(|_| {
                            (0..n)
                                .map(|_| {
                                    Err(ExecutorError::Io {
                                        context: "starting a replica".into(),
                                        source: io::Error::other("the launching thread panicked"),
                                    })
                                })
                                .collect()
                        })
                    })
                    .collect()
            })
        };
        launched
            .into_iter()
            .map(|r| match r {
                Ok((record, child)) => Ok(self.track(record, child)),
                Err(e) => self.adopt_started(e),
            })
            .collect()
    }

    /// A start refused because the incarnation was started already (by a server killed
    /// before it recorded the start): the shim wrote the record itself, so the replica is
    /// adopted (running, or with the exit it left) rather than started twice or never
    /// again. Launch files without a record and without a live shim are from a start that
    /// never ran its command: they are removed, so that the next start goes ahead.
    fn adopt_started(&mut self, e: ExecutorError) -> Result<ProcessRecord, ExecutorError> {
        let ExecutorError::AlreadyStarted { dir, .. } = &e else {
            return Err(e);
        };
        if let Ok(Some(record)) = files::read_json::<ProcessRecord>(&dir.join(RECORD_FILE)) {
            self.adopt(record.clone());
            return Ok(record);
        }
        let shim_alive = procfs::all().iter().any(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|arg| arg == dir.as_os_str().as_encoded_bytes())
            })
        });
        if !shim_alive && !dir.join(EXIT_FILE).exists() {
            let _ = fs::remove_file(dir.join(LAUNCH_FILE));
        }
        Err(e)
    }

    /// Refuses a spec that is malformed or whose replica runs (tracked or not).
    fn check_startable(&self, spec: &ReplicaProcessSpec) -> Result<(), ExecutorError> {
        if spec.name.is_empty() || spec.incarnation.is_empty() {
            return Err(ExecutorError::InvalidSpec(
                "name and incarnation must not be empty".into(),
            ));
        }
        if spec.container.is_some() && self.config.containers.is_none() {
            return Err(ExecutorError::InvalidSpec(format!(
                "{}: runs in a container, and this machine has no container runtime",
                spec.name
            )));
        }
        if spec.python.is_some() && self.config.python.is_none() {
            return Err(ExecutorError::InvalidSpec(format!(
                "{}: needs a Python environment, and uv is not installed here",
                spec.name
            )));
        }
        if spec.command.is_empty() && spec.container.is_none() {
            return Err(ExecutorError::InvalidSpec(format!(
                "{}: the command is empty",
                spec.name
            )));
        }
        if let Some(t) = self.replicas.get(&spec.name)
            && !t.state.is_terminal()
        {
            return Err(ExecutorError::AlreadyRunning(spec.name.clone()));
        }
        if let Some(other) = self.running_untracked_incarnation(&spec.name) {
            if other.incarnation == spec.incarnation {
                // This very incarnation runs, started by a server that died before it
                // recorded the start: the caller adopts it.
                return Err(ExecutorError::AlreadyStarted {
                    name: spec.name.clone(),
                    incarnation: spec.incarnation.clone(),
                    dir: other.dir,
                });
            }
            return Err(ExecutorError::AlreadyRunning(format!(
                "{} (incarnation {}, pid {}, not adopted yet)",
                spec.name, other.incarnation, other.pid
            )));
        }
        let dir = self.replica_dir(&spec.name, &spec.incarnation);
        if dir.join(RECORD_FILE).exists() || dir.join(LAUNCH_FILE).exists() {
            return Err(ExecutorError::AlreadyStarted {
                name: spec.name.clone(),
                incarnation: spec.incarnation.clone(),
                dir,
            });
        }
        Ok(())
    }

    /// Closes the [`StartGate`] until the returned value is dropped; `None` when it could
    /// not be (the shims then go on at once).
    pub fn close_start_gate(&self) -> Option<StartGate> {
        self.start_gate
            .as_deref()
            .and_then(|p| StartGate::close(p).ok())
    }

    /// The side effects of a start (files, shim, record; the shim makes the cgroup);
    /// touches no tracking state, so several run at once.
    fn launch(&self, spec: &ReplicaProcessSpec) -> Launched {
        self.prepare(spec).and_then(|p| self.spawn_shim(spec, p))
    }

    /// A launch's files: the replica's directory and `launch.json`, for the shim to read.
    fn prepare(&self, spec: &ReplicaProcessSpec) -> Result<Prepared, ExecutorError> {
        let dir = self.replica_dir(&spec.name, &spec.incarnation);
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        for (path, content) in &spec.files {
            let path = dir.join(path);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)
                    .map_err(io_err(format!("creating {}", parent.display())))?;
            }
            fs::write(&path, content).map_err(io_err(format!("writing {}", path.display())))?;
        }

        let handle = spec
            .container
            .as_ref()
            .zip(self.config.containers.as_ref())
            .map(|(_, rt)| {
                let mut h = rt.handle(&spec.name, &spec.incarnation);
                h.memory_limit = spec.memory_bytes;
                h
            });
        // A container's limits are the runtime's (its own cgroup). With the cgroupfs
        // manager that cgroup is made below the replica's (no limits of its own; the
        // runtime's client does not join it): there Corral reads the container's CPU,
        // memory and OOM kills as a host replica's.
        let cgroupfs = self.config.containers.as_ref().is_some_and(|r| r.cgroupfs);
        // Named here, made by the replica's shim before its command starts (in parallel
        // for a gang, off the control loop); a shim that cannot make it fails the replica
        // with the reason, before the command runs.
        let cgroup = match &self.cgroups {
            Some(m) if handle.is_none() || cgroupfs => Some(m.plan(&format!(
                "{}--{}",
                path_component(&spec.name),
                path_component(&spec.incarnation)
            ))),
            _ => None,
        };
        let cgroup_limits = if handle.is_none() {
            CgroupLimits {
                memory_bytes: spec.memory_bytes,
                cpu_milli: spec.cpu_milli,
            }
        } else {
            CgroupLimits::default()
        };

        let mut env = base_env(&dir, &self.config.pass_env);
        // The contract's variables and the job's own win over the base.
        env.retain(|(k, _)| !spec.env.iter().any(|(n, _)| n == k));
        env.extend(spec.env.iter().cloned());
        if !env.iter().any(|(k, _)| k == "CUDA_VISIBLE_DEVICES") {
            let gpus: Vec<String> = spec.gpu_indices.iter().map(u32::to_string).collect();
            env.push(("CUDA_VISIBLE_DEVICES".into(), gpus.join(",")));
        }
        let (command, env, working_dir) = match (&spec.container, &handle, &self.config.containers)
        {
            (Some(request), Some(handle), Some(runtime)) => {
                // The container sees the contract's and the job's variables; the image
                // brings its own PATH and HOME. CUDA_VISIBLE_DEVICES is not set: inside,
                // the placement's GPUs are numbered from 0.
                let (text, multiline_env) = container::env_file(&spec.env);
                let env_path = dir.join(container::ENV_FILE);
                if let Err(e) = fs::write(&env_path, text) {
                    return Err(io_err(format!("writing {}", env_path.display()))(e));
                }
                let args = container::run_args(
                    runtime,
                    handle,
                    request,
                    &container::RunOptions {
                        replica: &spec.name,
                        job: &spec.job,
                        run_dir: &self.config.run_dir,
                        replica_dir: &dir,
                        multiline_env,
                        working_dir: spec.working_dir.as_deref(),
                        code: spec.code.as_deref(),
                        cgroup_parent: cgroup.as_ref().and_then(CgroupRef::hierarchy_path),
                        cpu_milli: spec.cpu_milli,
                        memory_bytes: spec.memory_bytes,
                        gpu_indices: &spec.gpu_indices,
                    },
                );
                (args, container::client_env(), dir.clone())
            }
            _ => (
                spec.command.clone(),
                env,
                spec.working_dir
                    .clone()
                    .or_else(|| spec.code.clone())
                    .unwrap_or_else(|| dir.clone()),
            ),
        };
        let python = match spec.python.as_ref().zip(self.config.python.as_ref()) {
            None => None,
            Some((env, (uv, envs))) => {
                match python::PythonLaunch::new(uv.clone(), envs.clone(), env, spec.code.as_deref())
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        return Err(ExecutorError::Io {
                            context: format!("the python environment of {}", spec.name),
                            source: io::Error::other(e),
                        });
                    }
                }
            }
        };
        let launch = LaunchFile {
            command,
            env,
            working_dir: Some(working_dir),
            log_path: dir.join(LOG_FILE),
            log_limit_bytes: self.config.log_limit_bytes,
            cgroup: cgroup.clone(),
            cgroup_limits,
            record: Some(files::RecordDraft {
                name: spec.name.clone(),
                job: spec.job.clone(),
                incarnation: spec.incarnation.clone(),
                gpu_indices: spec.gpu_indices.clone(),
            }),
            container: handle.clone(),
            python,
            start_gate: self.start_gate.clone(),
        };
        // Written in place: no shim reads it before it is whole (the shim is spawned after),
        // and a directory without a record is not a replica to a restart.
        if let Err(e) = files::write_json(&dir.join(LAUNCH_FILE), &launch) {
            return Err(io_err(format!(
                "writing {}",
                dir.join(LAUNCH_FILE).display()
            ))(e));
        }
        Ok(Prepared {
            dir,
            cgroup,
            container: handle,
        })
    }

    /// The pids of the standby shims ready now (see [`standby`]).
    pub fn standby_pids(&self) -> Vec<u32> {
        self.standby.as_ref().map_or_else(Vec::new, |s| s.pids())
    }

    /// Starts the shim of a prepared launch (a standby one when there is one) and writes
    /// the replica's process record.
    fn spawn_shim(&self, spec: &ReplicaProcessSpec, prepared: Prepared) -> Launched {
        let Prepared {
            dir,
            cgroup,
            container: handle,
        } = prepared;
        let record = |pid: u32, start_time: u64| ProcessRecord {
            name: spec.name.clone(),
            job: spec.job.clone(),
            incarnation: spec.incarnation.clone(),
            pid,
            start_time,
            dir: dir.clone(),
            cgroup: cgroup.clone(),
            gpu_indices: spec.gpu_indices.clone(),
            container: handle.clone(),
        };
        if let Some(mut standby) = self.standby.as_ref().and_then(|s| s.take()) {
            // The record first: no shim ever works on a directory that has none.
            let rec = record(standby.child.id(), standby.start_time);
            if files::write_json_atomic(&dir.join(RECORD_FILE), &rec).is_ok()
                && standby.hand_over(&dir).is_ok()
            {
                return Ok((rec, standby.child));
            }
            // It died meanwhile (or the record could not be written): a fresh shim below,
            // whose record replaces this one.
            let _ = standby.child.kill();
            let _ = standby.child.wait();
        }
        // The shim reports into the replica's log and exit file; its own stdout and stderr
        // go nowhere, so that it never writes to a terminal or pipe that ended with the
        // server (and no file is created here for it).
        let mut cmd = Command::new(&self.config.shim.program);
        {
            use std::os::unix::process::CommandExt;
            cmd.args(&self.config.shim.args_prefix)
                .arg(&dir)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Err(io_err(format!(
                    "spawning the shim {}",
                    self.config.shim.program.display()
                ))(e));
            }
        };
        let pid = child.id();
        // The child is not reaped yet, so its /proc entry exists even if it already exited.
        let Some(stat) = procfs::stat(pid) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecutorError::Io {
                context: format!("reading /proc/{pid}/stat of the shim"),
                source: io::Error::other("no such process"),
            });
        };
        let record = record(pid, stat.start_time);
        if let Err(e) = files::write_json_atomic(&dir.join(RECORD_FILE), &record) {
            // Without a record a restart could not find it: do not let it run.
            let _ = procfs::signal_group(pid, Signal::KILL);
            let _ = child.wait();
            return Err(io_err(format!(
                "writing {}",
                dir.join(RECORD_FILE).display()
            ))(e));
        }
        Ok((record, child))
    }

    /// Watches a launched replica from now on.
    fn track(&mut self, record: ProcessRecord, child: Child) -> ProcessRecord {
        if let Some(old) = self.replicas.remove(&record.name)
            && let Some(c) = old.child
        {
            self.unreaped.push(c);
        }
        self.replicas.insert(
            record.name.clone(),
            Tracked {
                record: record.clone(),
                child: Some(child),
                state: ProcessState::Running,
                reported: ProcessState::Running,
                kill_at: None,
                killed: false,
            },
        );
        record
    }

    /// An incarnation of `name` that is alive on this machine but not tracked (started before
    /// a restart and not adopted yet): starting another would run the replica twice.
    fn running_untracked_incarnation(&self, name: &str) -> Option<ProcessRecord> {
        let dir = self.config.run_dir.join(path_component(name));
        let incarnations = fs::read_dir(dir).ok()?;
        incarnations.filter_map(Result::ok).find_map(|inc| {
            let rec: ProcessRecord = files::read_json(&inc.path().join(RECORD_FILE)).ok()??;
            let alive = procfs::is_same_alive(rec.pid, rec.start_time) && !rec.exit_path().exists();
            alive.then_some(rec)
        })
    }

    /// Takes over a replica started before a restart. `Running` when pid and start time still
    /// match (then it is watched like any other), else the state its exit file records, else
    /// `Gone` (and leftovers of it are killed). A replica is never tracked twice: adopting
    /// the name of a replica already running with another incarnation kills the adopted one.
    pub fn adopt(&mut self, record: ProcessRecord) -> ProcessState {
        if let Some(t) = self.replicas.get(&record.name) {
            if t.record.incarnation == record.incarnation && t.record.pid == record.pid {
                return t.state;
            }
            if !t.state.is_terminal() {
                return self.kill_duplicate(&record);
            }
        }
        let alive = procfs::is_same_alive(record.pid, record.start_time);
        let exit: Option<ExitRecord> = files::read_json(&record.exit_path()).ok().flatten();
        let state = match (&exit, alive) {
            (Some(rec), _) => ProcessState::from_exit(rec),
            (None, true) => ProcessState::Running,
            (None, false) => self.finish_without_exit_file(&record, false, None),
        };
        if state.is_terminal()
            && let Some(cg) = &record.cgroup
        {
            self.retire_cgroup(cg.clone(), record.container.is_some());
        }
        if let Some(old) = self.replicas.remove(&record.name)
            && let Some(c) = old.child
        {
            self.unreaped.push(c);
        }
        self.replicas.insert(
            record.name.clone(),
            Tracked {
                record,
                child: None,
                state,
                reported: state,
                kill_at: None,
                killed: false,
            },
        );
        state
    }

    fn kill_duplicate(&mut self, record: &ProcessRecord) -> ProcessState {
        if procfs::is_same_alive(record.pid, record.start_time) {
            let _ = procfs::signal_group(record.pid, Signal::KILL);
            if let Some(cg) = &record.cgroup {
                cg.kill_all(None);
            }
            remove_container(record);
            let _ = files::write_json_atomic(
                &record.exit_path(),
                &executor_exit(None, Some(procfs::signal_number(Signal::KILL)), false),
            );
            return ProcessState::Signaled {
                signal: procfs::signal_number(Signal::KILL),
            };
        }
        match files::read_json::<ExitRecord>(&record.exit_path()) {
            Ok(Some(rec)) => ProcessState::from_exit(&rec),
            _ => ProcessState::Gone,
        }
    }

    /// The shim ended without an exit file (killed, crashed): kill what it left behind, decide
    /// the state, and write the exit file so that every later look agrees.
    fn finish_without_exit_file(
        &self,
        record: &ProcessRecord,
        killed_by_us: bool,
        shim_status: Option<std::process::ExitStatus>,
    ) -> ProcessState {
        // A pid still in use as a process group id is never reused by the kernel, so group
        // members are ours unless a new process now owns the pid (then its group is not ours).
        let pid_reused = procfs::stat(record.pid)
            .is_some_and(|s| s.start_time != record.start_time && !s.is_dead());
        if !pid_reused {
            procfs::kill_group_except(record.pid, 0);
        }
        if let Some(cg) = &record.cgroup {
            cg.kill_all(None);
        }
        // The runtime's client is gone; the container it ran is not.
        remove_container(record);
        let oom = record.cgroup.as_ref().is_some_and(|cg| cg.oom_kills() > 0);
        let signal = if killed_by_us {
            Some(procfs::signal_number(Signal::KILL))
        } else {
            use std::os::unix::process::ExitStatusExt;
            shim_status.and_then(|s| s.signal())
        };
        let rec = executor_exit(None, signal, oom);
        let _ = files::write_json_atomic(&record.exit_path(), &rec);
        ProcessState::from_exit(&rec)
    }

    /// Observes every replica without blocking; returns the state changes since the last call
    /// (in name order). Escalates stops whose grace period is over at `now` to SIGKILL.
    pub fn poll(&mut self, now: Instant) -> Vec<(String, ProcessState)> {
        self.unreaped
            .retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
        // Only replicas with something to look at: ended ones stay tracked (until their job
        // is deleted) and would make every pass cost the cluster's whole history.
        let names: Vec<String> = self
            .replicas
            .iter()
            .filter(|(_, t)| !t.state.is_terminal() || t.state != t.reported)
            .map(|(name, _)| name.clone())
            .collect();
        let mut changes = Vec::new();
        for name in names {
            let Some(mut t) = self.replicas.remove(&name) else {
                continue;
            };
            if !t.state.is_terminal() {
                self.observe(&mut t, now);
            }
            if t.state != t.reported {
                t.reported = t.state;
                changes.push((name.clone(), t.state));
            }
            self.replicas.insert(name, t);
        }
        changes
    }

    fn observe(&mut self, t: &mut Tracked, now: Instant) {
        let rec = &t.record;
        if let Some(at) = t.kill_at
            && now >= at
        {
            t.kill_at = None;
            t.killed = true;
            if procfs::is_same_alive(rec.pid, rec.start_time) {
                let _ = procfs::signal_group(rec.pid, Signal::KILL);
            }
            if let Some(cg) = &rec.cgroup {
                cg.kill_all(None);
            }
        }
        let mut shim_status = None;
        let shim_ended = match &mut t.child {
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => {
                    shim_status = Some(status);
                    t.child = None;
                    true
                }
                Ok(None) => false,
                Err(_) => !procfs::is_same_alive(rec.pid, rec.start_time),
            },
            None => !procfs::is_same_alive(rec.pid, rec.start_time),
        };
        // Read after the liveness check: a shim writes its exit file before it exits.
        let exit: Option<ExitRecord> = files::read_json(&rec.exit_path()).ok().flatten();
        let state = match exit {
            Some(exit) => ProcessState::from_exit(&exit),
            None if shim_ended => {
                let record = t.record.clone();
                self.finish_without_exit_file(&record, t.killed, shim_status)
            }
            None => return,
        };
        t.state = state;
        t.kill_at = None;
        if let Some(c) = t.child.take() {
            self.unreaped.push(c);
        }
        if let Some(cg) = &t.record.cgroup {
            self.retire_cgroup(cg.clone(), t.record.container.is_some());
        }
    }

    /// Queues the cgroup of an ended replica for removal: the pass that saw the replica end
    /// starts the next ones first (the rmdirs are off the path from one job's exit to the
    /// next one's start), and must never wait for a shim to finish exiting.
    fn retire_cgroup(&mut self, cg: CgroupRef, ran_container: bool) {
        self.retired_cgroups.push((cg, ran_container));
    }

    /// Removes the cgroups of ended replicas; those still busy stay queued for the next call.
    pub fn remove_retired_cgroups(&mut self) {
        self.retired_cgroups
            .retain(|(cg, ran_container)| !cg.try_remove(*ran_container));
    }

    /// Stops a replica: SIGTERM now (the shim forwards it to the group), SIGKILL of the
    /// whole group once `grace` has passed (on a later [`poll`](Self::poll)). A zero grace
    /// kills at once. Stopping an ended replica does nothing.
    pub fn stop(&mut self, name: &str, grace: Duration) -> Result<(), ExecutorError> {
        let t = self
            .replicas
            .get_mut(name)
            .ok_or_else(|| ExecutorError::NotFound(name.to_string()))?;
        if t.state.is_terminal() {
            return Ok(());
        }
        let rec = &t.record;
        let alive = procfs::is_same_alive(rec.pid, rec.start_time);
        if grace.is_zero() {
            t.killed = true;
            t.kill_at = None;
            if alive {
                let _ = procfs::signal_group(rec.pid, Signal::KILL);
            }
            if let Some(cg) = &rec.cgroup {
                cg.kill_all(None);
            }
            return Ok(());
        }
        if alive {
            procfs::signal_process(rec.pid, Signal::TERM).map_err(io_err(format!(
                "sending SIGTERM to {name} (pid {})",
                rec.pid
            )))?;
        }
        let at = Instant::now() + grace;
        t.kill_at = Some(t.kill_at.map_or(at, |k| k.min(at)));
        Ok(())
    }

    /// Removes the containers of this run directory that no running replica owns (one whose
    /// shim was killed with the machine, or of a replica nobody recorded). For the start-up,
    /// after every record was adopted: it waits for the runtime. Returns their names.
    pub fn sweep_containers(&self) -> Vec<String> {
        let Some(rt) = &self.config.containers else {
            return Vec::new();
        };
        let Ok(names) = container::list_labelled(rt, &self.config.run_dir) else {
            return Vec::new();
        };
        let owned: std::collections::BTreeSet<&str> = self
            .replicas
            .values()
            .filter(|t| !t.state.is_terminal())
            .filter_map(|t| t.record.container.as_ref().map(|c| c.name.as_str()))
            .collect();
        names
            .into_iter()
            .filter(|n| !owned.contains(n.as_str()))
            .filter(|n| {
                ContainerHandle {
                    program: rt.program.clone(),
                    global_args: rt.global_args.clone(),
                    kind: rt.kind,
                    name: n.clone(),
                    memory_limit: None,
                }
                .remove()
            })
            .collect()
    }

    /// The last observed state of a replica.
    pub fn state(&self, name: &str) -> Option<ProcessState> {
        self.replicas.get(name).map(|t| t.state)
    }

    /// The record of a tracked replica.
    pub fn record(&self, name: &str) -> Option<&ProcessRecord> {
        self.replicas.get(name).map(|t| &t.record)
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

    /// CPU, memory and GPU use of a running replica.
    pub fn usage(&self, name: &str) -> Option<ReplicaUsage> {
        let t = self.replicas.get(name)?;
        if t.state.is_terminal() {
            return None;
        }
        let rec = &t.record;
        // A container's cgroup is below the replica's, at the runtime's path.
        let cgroup = rec.cgroup.as_ref().map(|cg| match rec.container {
            Some(_) => cg.as_runtime_parent(),
            None => cg.clone(),
        });
        let from_cgroup = cgroup
            .as_ref()
            .and_then(|cg| Some((cg.cpu_seconds()?, cg.memory_bytes()?)));
        let (cpu_seconds, memory_bytes) = match from_cgroup {
            Some(v) => v,
            None => {
                let members = procfs::group_members(rec.pid);
                let ticks: u64 = members.iter().map(|s| s.cpu_ticks).sum();
                let pages: u64 = members.iter().map(|s| s.rss_pages).sum();
                (
                    ticks as f64 / procfs::clock_ticks_per_second() as f64,
                    pages * procfs::page_size(),
                )
            }
        };
        let gpus: Vec<GpuSample> = if rec.gpu_indices.is_empty() {
            Vec::new()
        } else {
            gpu::samples()
                .into_iter()
                .filter(|s| rec.gpu_indices.contains(&s.index))
                .collect()
        };
        let gpu_memory_bytes = (!gpus.is_empty()).then(|| {
            let pids: Vec<u32> = match &rec.cgroup {
                Some(cg) => cg.procs(),
                None => procfs::group_members(rec.pid)
                    .iter()
                    .map(|s| s.pid)
                    .collect(),
            };
            gpus.iter().map(|s| gpu::memory_of(s, &pids)).sum()
        });
        Some(ReplicaUsage {
            cpu_seconds,
            memory_bytes,
            gpus,
            gpu_memory_bytes,
        })
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

/// Removes a killed replica's container without waiting for the runtime (a thread reaps
/// it): the control loop never waits on it.
fn remove_container(record: &ProcessRecord) {
    let Some(c) = &record.container else {
        return;
    };
    match c.remove_in_background() {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!("corral: removing container {}: {e}", c.name),
    }
}

fn executor_exit(code: Option<i32>, signal: Option<i32>, oom_killed: bool) -> ExitRecord {
    ExitRecord {
        code,
        signal,
        oom_killed,
        error: None,
        setup_failed: false,
        written_by: "executor".into(),
        finished_at_ms: files::now_ms(),
    }
}

/// Every replica record under `run_dir` (`<run_dir>/<name>/<incarnation>/record.json`), for a
/// restart that has no store to read them from. Unreadable records are skipped.
pub fn discover(run_dir: &Path) -> Vec<ProcessRecord> {
    let mut out = Vec::new();
    let Ok(names) = fs::read_dir(run_dir) else {
        return out;
    };
    for name in names.filter_map(Result::ok) {
        // `.trash` (replica names never start with a dot).
        if name.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let Ok(incs) = fs::read_dir(name.path()) else {
            continue;
        };
        for inc in incs.filter_map(Result::ok) {
            if let Ok(Some(rec)) = files::read_json::<ProcessRecord>(&inc.path().join(RECORD_FILE))
            {
                out.push(rec);
            }
        }
    }
    out.sort_by(|a, b| (&a.name, a.start_time).cmp(&(&b.name, b.start_time)));
    out
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
    fn the_dedicated_shim_is_preferred_when_it_was_built() {
        let dir = std::env::temp_dir().join(format!("corral-shim-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("mkdir");
        let exe = dir.join("corral");
        let alone = ShimCommand::beside(exe.clone());
        assert_eq!(alone.program, exe);
        assert_eq!(alone.args_prefix, vec![OsString::from("shim")]);
        fs::write(dir.join(SHIM_BINARY), b"").expect("write");
        let with = ShimCommand::beside(exe);
        assert_eq!(with.program, dir.join(SHIM_BINARY));
        assert!(with.args_prefix.is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn path_components_are_safe() {
        assert_eq!(path_component("job-worker-0"), "job-worker-0");
        assert_eq!(path_component("ns/job"), "ns%2Fjob");
        assert_eq!(path_component(".."), "%2E.");
        assert_eq!(path_component("a b"), "a%20b");
    }

    #[test]
    fn exit_records_map_to_states() {
        let rec = |code, signal, oom| executor_exit(code, signal, oom);
        assert_eq!(
            ProcessState::from_exit(&rec(Some(3), None, false)),
            ProcessState::Exited { code: 3 }
        );
        assert_eq!(
            ProcessState::from_exit(&rec(None, Some(9), true)),
            ProcessState::OomKilled
        );
        assert_eq!(
            ProcessState::from_exit(&rec(Some(0), None, true)),
            ProcessState::Exited { code: 0 }
        );
        assert_eq!(
            ProcessState::from_exit(&rec(None, Some(15), false)),
            ProcessState::Signaled { signal: 15 }
        );
        assert_eq!(
            ProcessState::from_exit(&rec(None, None, false)),
            ProcessState::Gone
        );
        let mut setup = rec(Some(125), None, false);
        setup.setup_failed = true;
        assert_eq!(ProcessState::from_exit(&setup), ProcessState::SetupFailed);
    }
}
