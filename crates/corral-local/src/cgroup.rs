//! Memory and CPU limits for replicas through Linux control groups, v2 (unified) or v1
//! (one hierarchy per controller), found from `/proc/self/mountinfo` and `/proc/self/cgroup`.
//!
//! On cgroup v2 replica cgroups go in a subtree Corral owns ([`place_v2`]): the configured
//! `cgroupRoot`, else `<own cgroup>/corral` (a delegated subtree, such as a systemd unit with
//! `Delegate=yes`, is enough; the server moves itself into a leaf when v2's "no internal
//! processes" rule requires), else `<mount>/corral` when the server's own cgroup is not
//! visible under the mount (`0::/process_api/...` in some containers) or cannot be
//! delegated. memory (required), cpu and pids are enabled on the way down. On cgroup v1
//! they go under the executor's own cgroup of each controller (`<own>/corral/<leaf>`).
//! [`CgroupManager::describe`] says which was chosen and why. A [`CgroupRef`] names the
//! directories of one replica's cgroup by absolute path and is serialisable, so a restarted
//! server finds the cgroups of the replicas it re-adopts; a whole replica is killed with
//! `cgroup.kill` (v2), else by signalling every pid in `cgroup.procs`.
//!
//! The kernel enforces the memory limit: a replica that exceeds it is OOM-killed inside its
//! own cgroup, alone, and the cgroup's `oom_kill` counter (v1 `memory.oom_control`, v2
//! `memory.events`) records it, which is how an exit is reported as OOMKilled.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::executor::procfs;

/// CFS period used for CPU limits (100 ms, the kernel default).
const CPU_PERIOD_US: u64 = 100_000;

/// One replica's cgroup: absolute directories, per hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", rename_all = "lowercase")]
pub enum CgroupRef {
    /// Unified hierarchy: one directory for every controller.
    V2 { dir: PathBuf },
    /// Legacy hierarchies: one directory per controller (the same path when co-mounted).
    V1 {
        memory: Option<PathBuf>,
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
    },
}

/// Limits applied to a new replica cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLimits {
    /// Memory limit in bytes (swap is limited too where the kernel allows).
    pub memory_bytes: Option<u64>,
    /// CPU limit in milli-CPUs (1000 = one core), enforced by the CFS quota.
    pub cpu_milli: Option<u64>,
}

impl CgroupRef {
    /// The distinct directories of this cgroup.
    pub fn dirs(&self) -> Vec<&Path> {
        let mut out: Vec<&Path> = Vec::new();
        match self {
            CgroupRef::V2 { dir } => out.push(dir),
            CgroupRef::V1 {
                memory,
                cpu,
                cpuacct,
            } => {
                for d in [memory, cpu, cpuacct].into_iter().flatten() {
                    if !out.contains(&d.as_path()) {
                        out.push(d);
                    }
                }
            }
        }
        out
    }

    fn memory_dir(&self) -> Option<&Path> {
        match self {
            CgroupRef::V2 { dir } => Some(dir),
            CgroupRef::V1 { memory, .. } => memory.as_deref(),
        }
    }

    /// Moves process `pid` (0: the caller) into this cgroup, in every hierarchy.
    pub fn join(&self, pid: u32) -> io::Result<()> {
        for dir in self.dirs() {
            fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| io::Error::new(e.kind(), format!("joining {}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// The files a newly forked process writes `0` into, before it execs, to move itself
    /// into this cgroup in every hierarchy. On v1 that is `tasks`, which moves only the
    /// writing thread (a forked child has no other): the kernel then skips the global
    /// threadgroup lock, whose write side `cgroup.procs` takes and which waits for an RCU
    /// grace period, about 7 ms per replica start on a small VM against 0.03 ms. v2 has no
    /// such file for a domain cgroup (`cgroup.threads` moves threads only within one).
    pub fn self_join_files(&self) -> Vec<PathBuf> {
        let file = match self {
            CgroupRef::V2 { .. } => "cgroup.procs",
            CgroupRef::V1 { .. } => "tasks",
        };
        self.dirs().into_iter().map(|d| d.join(file)).collect()
    }

    /// The processes in this cgroup (union over the hierarchies).
    pub fn procs(&self) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        for dir in self.dirs() {
            if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in text.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                    if !out.contains(&pid) {
                        out.push(pid);
                    }
                }
            }
        }
        out
    }

    /// SIGKILLs every process in the cgroup except `except`, until none is left.
    pub fn kill_all(&self, except: Option<u32>) {
        if except.is_none()
            && let CgroupRef::V2 { dir } = self
            && fs::write(dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for _ in 0..100 {
            let pids: Vec<u32> = self
                .procs()
                .into_iter()
                .filter(|p| Some(*p) != except)
                .collect();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = procfs::signal_process(pid, rustix::process::Signal::KILL);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// How many processes the kernel OOM-killed in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        let Some(dir) = self.memory_dir() else {
            return 0;
        };
        let file = match self {
            CgroupRef::V2 { .. } => "memory.events",
            CgroupRef::V1 { .. } => "memory.oom_control",
        };
        fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|text| keyed_value(&text, "oom_kill"))
            .unwrap_or(0)
    }

    /// Memory in use, as the working set (usage minus inactive page cache), in bytes.
    pub fn memory_bytes(&self) -> Option<u64> {
        let dir = self.memory_dir()?;
        let (usage_file, inactive_key) = match self {
            CgroupRef::V2 { .. } => ("memory.current", "inactive_file"),
            CgroupRef::V1 { .. } => ("memory.usage_in_bytes", "total_inactive_file"),
        };
        let usage: u64 = procfs::read_trimmed(&dir.join(usage_file))?.parse().ok()?;
        let inactive = fs::read_to_string(dir.join("memory.stat"))
            .ok()
            .and_then(|t| keyed_value(&t, inactive_key))
            .unwrap_or(0);
        Some(usage.saturating_sub(inactive))
    }

    /// CPU time used by every process that ever ran in the cgroup, in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        match self {
            CgroupRef::V2 { dir } => {
                let text = fs::read_to_string(dir.join("cpu.stat")).ok()?;
                Some(keyed_value(&text, "usage_usec")? as f64 / 1e6)
            }
            CgroupRef::V1 { cpuacct, .. } => {
                let ns: u64 = procfs::read_trimmed(&cpuacct.as_ref()?.join("cpuacct.usage"))?
                    .parse()
                    .ok()?;
                Some(ns as f64 / 1e9)
            }
        }
    }

    /// The highest memory use the cgroup (and its children) ever had, in bytes.
    pub fn peak_memory_bytes(&self) -> Option<u64> {
        let file = match self {
            CgroupRef::V2 { .. } => "memory.peak",
            CgroupRef::V1 { .. } => "memory.max_usage_in_bytes",
        };
        procfs::read_trimmed(&self.memory_dir()?.join(file))?
            .parse()
            .ok()
    }

    /// The cgroup's path inside its hierarchy (`/corral/<leaf>`), as a container runtime
    /// with the cgroupfs manager takes it for `--cgroup-parent`: the memory hierarchy's,
    /// which holds the limits that matter.
    pub fn hierarchy_path(&self) -> Option<String> {
        let dir = self.memory_dir()?;
        let point = mounts()
            .into_iter()
            .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
            .map(|m| m.point)
            .filter(|p| dir.starts_with(p))
            .max_by_key(|p| p.components().count())?;
        let rel = dir.strip_prefix(&point).ok()?;
        Some(format!("/{}", rel.display()))
    }

    /// This cgroup as a container runtime sees it when it is a container's parent: one
    /// path ([`CgroupRef::hierarchy_path`]) in every hierarchy. The CPU hierarchies' own
    /// directories differ from it when this process sits elsewhere in them than in the
    /// memory hierarchy; the container's CPU time is then at the runtime's path.
    pub fn as_runtime_parent(&self) -> CgroupRef {
        let CgroupRef::V1 {
            memory,
            cpu,
            cpuacct,
        } = self
        else {
            return self.clone();
        };
        let Some(rel) = self.hierarchy_path() else {
            return self.clone();
        };
        let mounts = mounts();
        let moved = |dir: &Option<PathBuf>| -> Option<PathBuf> {
            let dir = dir.as_ref()?;
            let point = mounts
                .iter()
                .filter(|m| m.fstype == "cgroup" && dir.starts_with(&m.point))
                .map(|m| &m.point)
                .max_by_key(|p| p.components().count())?;
            Some(point.join(rel.trim_start_matches('/')))
        };
        CgroupRef::V1 {
            memory: memory.clone(),
            cpu: moved(cpu).or_else(|| cpu.clone()),
            cpuacct: moved(cpuacct).or_else(|| cpuacct.clone()),
        }
    }

    /// Removes what a container runtime made below and beside this cgroup when it was the
    /// parent of a container: the same path in every hierarchy (podman makes it in each,
    /// with a `conmon` child), empty directories only, deepest first.
    /// Whether none is left.
    pub fn remove_runtime_dirs(&self) -> bool {
        let Some(rel) = self.hierarchy_path() else {
            return true;
        };
        let mut gone = true;
        for m in mounts()
            .into_iter()
            .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
        {
            let dir = m.point.join(rel.trim_start_matches('/'));
            remove_empty_tree(&dir);
            gone &= !dir.exists();
        }
        gone
    }

    /// One attempt to remove the cgroup directories, without waiting: true when none is
    /// left. A cgroup whose last process is exiting but not yet gone is still busy.
    /// `ran_container`: what a container runtime made at this cgroup's path in the other
    /// hierarchies goes too (a replica that ran on the host left nothing there, and looking
    /// costs a read of the mount table and every hierarchy).
    pub fn try_remove(&self, ran_container: bool) -> bool {
        let mut gone = !ran_container || self.remove_runtime_dirs();
        for dir in self.dirs() {
            // Children a container runtime made (no processes of their own by now).
            remove_empty_children(dir);
            if let Err(e) = fs::remove_dir(dir)
                && e.kind() != io::ErrorKind::NotFound
            {
                gone = false;
            }
        }
        gone
    }

    /// Removes the cgroup directories (they must be empty of processes; retried briefly).
    pub fn remove(&self) -> io::Result<()> {
        let mut last = Ok(());
        for dir in self.dirs() {
            last = Ok(());
            remove_empty_children(dir);
            for _ in 0..50 {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) => {
                        last = Err(e);
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
            }
        }
        last
    }
}

/// Removes the child cgroups of `dir` (empty of processes), deepest first.
fn remove_empty_children(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_empty_tree(&e.path());
        }
    }
}

/// Removes the cgroup `dir` and its children, deepest first (cgroup directories go with
/// `rmdir`; their files are the kernel's).
fn remove_empty_tree(dir: &Path) {
    remove_empty_children(dir);
    let _ = fs::remove_dir(dir);
}

/// `key value` lines (memory.events, memory.stat, cpu.stat, memory.oom_control).
fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut it = line.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// Where replica cgroups are created on this machine, and why there (for the log and
/// `corral doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupManager {
    V2 {
        base: PathBuf,
        why: String,
    },
    V1 {
        memory: PathBuf,
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
        why: String,
    },
}

struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    super_opts: Vec<String>,
}

fn mounts() -> Vec<Mount> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            Some(Mount {
                root: unescape_mount(left.get(3)?),
                point: PathBuf::from(unescape_mount(left.get(4)?)),
                fstype: right.first()?.to_string(),
                super_opts: right.get(2)?.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// `/proc/self/cgroup`: (controllers, path) per hierarchy; v2 has empty controllers.
fn own_cgroups() -> Vec<(Vec<String>, String)> {
    let Ok(text) = fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ':');
            let _id = it.next()?;
            let controllers = it.next()?;
            let path = it.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some((controllers, path.to_string()))
        })
        .collect()
}

/// The directory of our own cgroup inside a mount: the mount point plus our path relative to
/// the mount's root.
fn own_dir(mount: &Mount, own_path: &str) -> PathBuf {
    let rel = if mount.root == "/" {
        own_path
    } else {
        own_path
            .strip_prefix(mount.root.as_str())
            .unwrap_or(own_path)
    };
    mount.point.join(rel.trim_start_matches('/'))
}

impl CgroupManager {
    /// [`CgroupManager::detect_with`] without a configured place.
    pub fn detect() -> Result<Self, String> {
        Self::detect_with(None)
    }

    /// Finds a usable hierarchy and a subtree Corral may own, and proves with a probe cgroup
    /// that limits can be set there. cgroup v2 when its hierarchy has the memory controller:
    /// `configured` (`cgroupRoot` in corral.yaml; relative to the cgroup2 mount) if given,
    /// else `<own cgroup>/corral`, else `<cgroup2 mount>/corral` (when our own cgroup is not
    /// visible under the mount, as in some containers, or cannot be delegated). Otherwise
    /// cgroup v1, under our own memory (and cpu, cpuacct) cgroups. `Err` says in words why
    /// cgroups cannot be used.
    pub fn detect_with(configured: Option<&Path>) -> Result<Self, String> {
        let mounts = mounts();
        let own = own_cgroups();
        let v1_mount = |controller: &str| -> Option<PathBuf> {
            let mount = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.super_opts.iter().any(|o| o == controller))?;
            let (_, path) = own
                .iter()
                .find(|(c, _)| c.iter().any(|x| x == controller))?;
            Some(own_dir(mount, path).join("corral"))
        };
        let mut v2_failure = None;
        let manager = if let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup2") {
            let controllers =
                procfs::read_trimmed(&m.point.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                let own_v2 = own
                    .iter()
                    .find(|(c, _)| c.is_empty())
                    .map(|(_, p)| own_dir(m, p));
                match place_v2(
                    &m.point,
                    own_v2.as_deref(),
                    configured,
                    "corral",
                    &["memory"],
                ) {
                    Ok((base, why)) => Some(CgroupManager::V2 { base, why }),
                    Err(e) => {
                        v2_failure = Some(e);
                        None
                    }
                }
            } else {
                v2_failure = Some(format!(
                    "the cgroup v2 hierarchy at {} has no memory controller (controllers: {}); \
                     it is bound to a v1 hierarchy",
                    m.point.display(),
                    if controllers.is_empty() {
                        "none"
                    } else {
                        controllers.as_str()
                    }
                ));
                None
            }
        } else {
            None
        };
        let manager = match manager {
            Some(m) => m,
            None => match v1_mount("memory") {
                Some(memory) => {
                    let why = match &v2_failure {
                        Some(e) => format!(
                            "cgroup v1 ({e}); replica cgroups under {}",
                            memory.display()
                        ),
                        None => format!(
                            "cgroup v1 (no cgroup v2 hierarchy is mounted); replica cgroups under {}",
                            memory.display()
                        ),
                    };
                    let cpu = v1_mount("cpu");
                    let cpuacct = v1_mount("cpuacct");
                    for dir in [Some(&memory), cpu.as_ref(), cpuacct.as_ref()]
                        .into_iter()
                        .flatten()
                    {
                        fs::create_dir_all(dir)
                            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
                    }
                    CgroupManager::V1 {
                        memory,
                        cpu,
                        cpuacct,
                        why,
                    }
                }
                None => {
                    return Err(match v2_failure {
                        Some(e) => format!("{e}, and no cgroup v1 memory hierarchy is mounted"),
                        None => "no cgroup hierarchy with the memory controller is mounted".into(),
                    });
                }
            },
        };
        let probe = format!("probe-{}", std::process::id());
        let cg = manager
            .create(
                &probe,
                &CgroupLimits {
                    memory_bytes: Some(256 << 20),
                    cpu_milli: Some(1000),
                },
            )
            .map_err(|e| format!("cannot set limits in a cgroup: {e}"))?;
        let _ = cg.remove();
        Ok(manager)
    }

    /// Which hierarchy and where, and why: one line for the log and `corral doctor`.
    pub fn describe(&self) -> &str {
        match self {
            CgroupManager::V2 { why, .. } | CgroupManager::V1 { why, .. } => why,
        }
    }

    /// `v2` or `v1`.
    pub fn version(&self) -> &'static str {
        match self {
            CgroupManager::V2 { .. } => "v2",
            CgroupManager::V1 { .. } => "v1",
        }
    }

    /// Creates the cgroup `leaf` (an existing one is reused) and applies `limits`.
    pub fn create(&self, leaf: &str, limits: &CgroupLimits) -> io::Result<CgroupRef> {
        let cg = self.plan(leaf);
        cg.create(limits)?;
        Ok(cg)
    }

    /// Where the cgroup named `leaf` goes, without making it: the executor names it in the
    /// launch file and the replica's shim makes it ([`CgroupRef::create`]) before the
    /// command starts, so that a gang's cgroups are made in parallel, off the server's
    /// control loop.
    pub fn plan(&self, leaf: &str) -> CgroupRef {
        match self {
            CgroupManager::V2 { base, .. } => CgroupRef::V2 {
                dir: base.join(leaf),
            },
            CgroupManager::V1 {
                memory,
                cpu,
                cpuacct,
                ..
            } => CgroupRef::V1 {
                memory: Some(memory.join(leaf)),
                cpu: cpu.as_ref().map(|d| d.join(leaf)),
                cpuacct: cpuacct.as_ref().map(|d| d.join(leaf)),
            },
        }
    }
}

impl CgroupRef {
    /// Makes this cgroup's directories (one that exists is reused) and applies the limits
    /// (when they cannot be applied, the cgroup is removed again).
    pub fn create(&self, limits: &CgroupLimits) -> io::Result<()> {
        for dir in self.dirs() {
            match fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("creating {}: {e}", dir.display()),
                    ));
                }
            }
        }
        if let Err(e) = apply_limits(self, limits) {
            let _ = self.remove();
            return Err(e);
        }
        Ok(())
    }
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    fs::write(dir.join(file), value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {value:?} to {}: {e}", dir.join(file).display()),
        )
    })
}

fn apply_limits(cg: &CgroupRef, limits: &CgroupLimits) -> io::Result<()> {
    // The CFS quota may not be below 1 ms per period.
    let quota = limits
        .cpu_milli
        .map(|m| (m * CPU_PERIOD_US / 1000).max(1000));
    match cg {
        CgroupRef::V2 { dir } => {
            if let Some(bytes) = limits.memory_bytes {
                write(dir, "memory.max", &bytes.to_string())?;
                let _ = write(dir, "memory.swap.max", "0");
                // An OOM kill takes the whole replica, never half of it; other replicas
                // are in other cgroups and are not touched.
                let _ = write(dir, "memory.oom.group", "1");
            }
            if let Some(quota) = quota {
                write(dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
            }
        }
        CgroupRef::V1 { memory, cpu, .. } => {
            if let (Some(bytes), Some(dir)) = (limits.memory_bytes, memory) {
                write(dir, "memory.limit_in_bytes", &bytes.to_string())?;
                // Without swap accounting this file is absent; the limit above still holds.
                let _ = write(dir, "memory.memsw.limit_in_bytes", &bytes.to_string());
            }
            if let (Some(quota), Some(dir)) = (quota, cpu) {
                write(dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                write(dir, "cpu.cfs_quota_us", &quota.to_string())?;
            }
        }
    }
    Ok(())
}

/// Controllers Corral enables for replica cgroups on v2 when the hierarchy offers them.
const V2_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// Finds or makes the v2 subtree Corral owns under the cgroup2 mount `mount`: `configured`
/// (absolute, or relative to the mount), else `<own>/corral` when our own cgroup `own` is
/// visible and can be delegated, else `<mount>/<fallback>`. Controllers are enabled on the
/// way down (`cgroup.subtree_control`); `required` must be among them. Returns the
/// directory replica cgroups go in and, in words, why there.
pub fn place_v2(
    mount: &Path,
    own: Option<&Path>,
    configured: Option<&Path>,
    fallback: &str,
    required: &[&str],
) -> Result<(PathBuf, String), String> {
    if let Some(c) = configured {
        let dir = if c.is_absolute() {
            c.to_path_buf()
        } else {
            mount.join(c)
        };
        if !dir.starts_with(mount) {
            return Err(format!(
                "cgroupRoot {} is not under the cgroup2 mount {}",
                dir.display(),
                mount.display()
            ));
        }
        let enabled = delegate_chain(mount, &dir, required)?;
        return Ok((
            dir.clone(),
            format!(
                "cgroup v2 at {} (cgroupRoot in corral.yaml), controllers {}",
                dir.display(),
                enabled.join(" ")
            ),
        ));
    }
    let own_failure = match own {
        Some(own) if own.is_dir() => {
            let base = own.join("corral");
            match delegate_chain(mount, &base, required) {
                Ok(enabled) => {
                    return Ok((
                        base.clone(),
                        format!(
                            "cgroup v2 at {} (below the server's own cgroup), controllers {}",
                            base.display(),
                            enabled.join(" ")
                        ),
                    ));
                }
                Err(e) => format!(
                    "the server's own cgroup {} cannot be delegated ({e})",
                    own.display()
                ),
            }
        }
        Some(own) => format!(
            "the server's own cgroup {} is not visible under the mount",
            own.display()
        ),
        None => "the server's own cgroup is not listed in /proc/self/cgroup".to_string(),
    };
    let base = mount.join(fallback);
    let enabled = delegate_chain(mount, &base, required)
        .map_err(|e| format!("{own_failure}, and {} cannot be used: {e}", base.display()))?;
    Ok((
        base.clone(),
        format!(
            "cgroup v2 at {} ({own_failure}, so Corral made its own subtree under the mount root), controllers {}",
            base.display(),
            enabled.join(" ")
        ),
    ))
}

/// Creates `dir` (and its parents) under `mount` and enables the controllers Corral uses in
/// `cgroup.subtree_control` of every directory from the mount down to `dir`, so `dir`'s
/// children get them. cgroup v2 forbids processes in a non-root cgroup whose controllers are
/// enabled for children ("no internal processes"): when this process is in the way, it
/// moves itself into a leaf `corral-server` of that cgroup first. Returns the controllers
/// `dir`'s children get; `Err` when one of `required` cannot be had.
fn delegate_chain(mount: &Path, dir: &Path, required: &[&str]) -> Result<Vec<String>, String> {
    let rel = dir
        .strip_prefix(mount)
        .map_err(|_| format!("{} is not under {}", dir.display(), mount.display()))?;
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut chain = vec![mount.to_path_buf()];
    let mut at = mount.to_path_buf();
    for part in rel.components() {
        at = at.join(part);
        chain.push(at.clone());
    }
    let mut enabled = Vec::new();
    for cg in &chain {
        let available = procfs::read_trimmed(&cg.join("cgroup.controllers")).unwrap_or_default();
        let active = procfs::read_trimmed(&cg.join("cgroup.subtree_control")).unwrap_or_default();
        enabled = Vec::new();
        for c in V2_CONTROLLERS {
            if !available.split_whitespace().any(|a| a == c) {
                continue;
            }
            if active.split_whitespace().any(|a| a == c) {
                enabled.push(c.to_string());
                continue;
            }
            let mut result = write(cg, "cgroup.subtree_control", &format!("+{c}"));
            if result.is_err() && cg != mount && holds_self(cg) {
                let leaf = cg.join("corral-server");
                fs::create_dir_all(&leaf)
                    .map_err(|e| format!("creating {}: {e}", leaf.display()))?;
                write(&leaf, "cgroup.procs", &std::process::id().to_string())
                    .map_err(|e| format!("moving the server into {}: {e}", leaf.display()))?;
                result = write(cg, "cgroup.subtree_control", &format!("+{c}"));
            }
            match result {
                Ok(()) => enabled.push(c.to_string()),
                Err(e) if required.contains(&c) => return Err(e.to_string()),
                Err(_) => {}
            }
        }
        for r in required {
            if !enabled.iter().any(|e| e == r) {
                return Err(format!(
                    "the {r} controller is not available in {}",
                    cg.display()
                ));
            }
        }
    }
    if enabled.is_empty() {
        enabled.push("none".into());
    }
    Ok(enabled)
}

/// Whether this process is a member of cgroup directory `dir`.
fn holds_self(dir: &Path) -> bool {
    let me = std::process::id();
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().any(|l| l.trim().parse() == Ok(me)))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keyed_values() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed_value(text, "oom_kill"), Some(3));
        assert_eq!(keyed_value(text, "missing"), None);
    }

    #[test]
    fn own_dir_strips_the_mount_root() {
        let m = Mount {
            root: "/kubepods/pod1".into(),
            point: PathBuf::from("/sys/fs/cgroup/memory"),
            fstype: "cgroup".into(),
            super_opts: vec!["rw".into(), "memory".into()],
        };
        assert_eq!(
            own_dir(&m, "/kubepods/pod1/c1"),
            PathBuf::from("/sys/fs/cgroup/memory/c1")
        );
    }
}
