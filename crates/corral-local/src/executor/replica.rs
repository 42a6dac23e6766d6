//! What the executor is given and gives back about one replica: the spec it starts, the
//! record that finds it again after a restart, the state it observes and what it uses.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::container::{ContainerHandle, ContainerRequest};
use super::files::{self, EXIT_FILE, ExitRecord, LOG_FILE, RECORD_FILE};
use crate::cgroup::CgroupRef;
use crate::gpu::GpuSample;

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
    /// Run in a container of this image (see [`container`](super::container)): `command` is then unused,
    /// the request's `command` and `args` override the image's entrypoint and CMD.
    pub container: Option<ContainerRequest>,
    /// Python packages to run with (see [`python`](super::python)).
    pub python: Option<corral_api::training_job::PythonEnv>,
    /// The uid and gid its namespace's replicas run under (see [`crate::tenancy`]); `None`:
    /// the server's own.
    pub run_as: Option<RunAs>,
    /// Host directories a container sees at the same path, read-write (its namespace's
    /// pipeline artifacts, whose paths its environment names). Unused outside a container.
    pub mounts: Vec<PathBuf>,
}

/// A tenant's identity, as the shim applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

impl From<corral_core::tenancy::TenantIdentity> for RunAs {
    fn from(id: corral_core::tenancy::TenantIdentity) -> Self {
        RunAs {
            uid: id.uid,
            gid: id.gid,
        }
    }
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
    /// Its command never ran: the shim or the container runtime could not start it (exit
    /// `code`: 127 for a program that does not exist, 125 for a runtime's own error such
    /// as an image it cannot pull); the exit file's `error` says why.
    StartFailed {
        code: i32,
    },
}

impl ReplicaProcessSpec {
    /// Why its program cannot be started, where that is certain before any process is
    /// made: a plain command (no container, no Python environment, whose setup may still
    /// provide it) naming an absolute path that is not an executable file, or a bare name
    /// found in no directory of its `PATH`. The shell reports it as a failed start without
    /// spawning, as Kubernetes reports an image it cannot pull before any container runs.
    /// Relative paths are left to the shim (they depend on its working directory).
    pub fn missing_program(&self) -> Option<String> {
        use std::os::unix::fs::PermissionsExt;
        if self.container.is_some() || self.python.is_some() {
            return None;
        }
        let program = self.command.first()?;
        let runnable = |p: &Path| {
            fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if program.starts_with('/') {
            return (!runnable(Path::new(program)))
                .then(|| format!("cannot run {program:?}: no such executable file"));
        }
        if program.contains('/') || program.is_empty() {
            return None;
        }
        let path = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("PATH").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| super::base_env::DEFAULT_PATH.to_string());
        let found = std::env::split_paths(&path).any(|dir| runnable(&dir.join(program)));
        (!found).then(|| format!("cannot run {program:?}: not found in PATH ({path})"))
    }
}

impl ProcessState {
    pub fn is_terminal(self) -> bool {
        self != ProcessState::Running
    }

    pub(super) fn from_exit(rec: &ExitRecord) -> Self {
        if rec.setup_failed {
            ProcessState::SetupFailed
        } else if rec.start_failed {
            ProcessState::StartFailed {
                code: rec.code.unwrap_or(125),
            }
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
