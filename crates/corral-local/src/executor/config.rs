//! How the executor is set up: the shim program it spawns for each replica, cgroups or
//! not, ports, log cap, container runtime, uv and standby shims.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use super::container::ContainerRuntime;

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
    /// by [`CgroupManager::detect_with`](crate::cgroup::CgroupManager::detect_with).
    pub cgroup_root: Option<PathBuf>,
    pub shim: ShimCommand,
    /// Variables of the server's environment that replicas may see (`passEnv` in
    /// `corral.yaml`). Nothing else of it reaches a replica: see [`base_env`](super::base_env).
    pub pass_env: Vec<String>,
    /// The container runtime that runs replicas with an image (none: such a spec is
    /// refused; the cluster decides beforehand whether an image is used).
    pub containers: Option<ContainerRuntime>,
    /// uv, which builds the Python environments replicas ask for (none: such a spec is
    /// refused), and where the environments are kept.
    pub python: Option<(PathBuf, PathBuf)>,
    /// Shims kept started ahead of time (see [`standby`](super::standby)); 0: each start spawns its own.
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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

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
}
