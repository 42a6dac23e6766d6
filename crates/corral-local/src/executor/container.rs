//! Replicas in containers: a replica whose template names an `image` runs as
//! `podman run` (or `docker run`) under the same [shim](crate::shim) as any process, so its
//! output, exit file, stop and re-adoption work unchanged:
//!
//! - the runtime client runs in the foreground (`--sig-proxy` is the default without a
//!   terminal), so the container's output goes into the replica's log and the SIGTERM the
//!   shim forwards reaches the container's first process;
//! - the container has a name derived from the replica and its incarnation: the runtime
//!   refuses a second container of one name, so an incarnation never runs twice;
//! - when the client is killed (a stop whose grace period ran out, a replica whose shim
//!   vanished) the container would live on under the runtime's monitor, so the executor
//!   removes it by name (`rm -f`); the shim removes it once it has ended normally, after
//!   asking the runtime whether the kernel killed it for memory;
//! - like Kubernetes: the image's entrypoint and working directory unless the job sets
//!   `command` (the entrypoint), `args` or `workingDir`; the launch contract's variables and
//!   the job's `env` (none of the host's); host networking, so the ports Corral allocated
//!   work; memory and CPU limits; only the placement's GPUs.
//!
//! [`run_args`] is pure, so the argument list is unit-tested without a runtime.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// Label on every container Corral starts: the run directory it belongs to.
pub const LABEL_RUN_DIR: &str = "corral.dev/run-dir";
/// Label: the replica (`<namespace>.<job>-<role>-<index>`).
pub const LABEL_REPLICA: &str = "corral.dev/replica";
/// Label: the job (`namespace/name`).
pub const LABEL_JOB: &str = "corral.dev/job";
/// The file of `KEY=VALUE` lines that holds a container's environment (in the replica
/// directory, so values are not visible in the process list).
pub const ENV_FILE: &str = "container.env";

/// Which command-line dialect the runtime speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Podman,
    Docker,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Podman => "podman",
            RuntimeKind::Docker => "docker",
        }
    }
}

/// A container runtime this machine can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRuntime {
    pub kind: RuntimeKind,
    pub program: PathBuf,
    /// Options before the subcommand, e.g. `--runtime runc`.
    pub global_args: Vec<String>,
    /// `--ulimit name=soft:hard` for every container: set when this process may not raise
    /// its limits, so that the runtime's defaults (higher) would make every start fail.
    pub ulimits: Vec<(String, u64, u64)>,
    /// Whether the runtime manages cgroups as plain directories (cgroupfs): then a
    /// container's cgroup is made below the replica's own (`--cgroup-parent`), where Corral
    /// reads its CPU, memory and OOM kills. (With systemd's manager a parent is a slice.)
    pub cgroupfs: bool,
}

impl ContainerRuntime {
    /// The handle of the container of one replica incarnation.
    pub fn handle(&self, name: &str, incarnation: &str) -> ContainerHandle {
        ContainerHandle {
            program: self.program.clone(),
            global_args: self.global_args.clone(),
            kind: self.kind,
            name: container_name(name, incarnation),
            memory_limit: None,
        }
    }
}

/// What a job asks for: the image and Kubernetes' `command` (entrypoint) and `args`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerRequest {
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
}

/// Everything that finds a started container again: kept in the replica's launch file and
/// process record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerHandle {
    pub program: PathBuf,
    #[serde(default)]
    pub global_args: Vec<String>,
    pub kind: RuntimeKind,
    pub name: String,
    /// The container's memory limit, in bytes: with it, how the container ended says
    /// whether the kernel killed it for memory where the runtime does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
}

impl ContainerHandle {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.global_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    fn remove_command(&self) -> Command {
        let mut cmd = self.command();
        cmd.args(["rm", "-f"]);
        if self.kind == RuntimeKind::Podman {
            // The container is being killed anyway: no second grace period.
            cmd.args(["-t", "0"]);
        }
        cmd.arg(&self.name);
        cmd
    }

    /// Removes the container (killing it if it runs) without waiting: the caller reaps the
    /// child later. The control loop must not wait for the runtime.
    pub fn remove_in_background(&self) -> io::Result<std::process::Child> {
        self.remove_command().spawn()
    }

    /// Removes the container and waits for the runtime. Whether it is gone.
    pub fn remove(&self) -> bool {
        self.remove_command().status().is_ok_and(|s| s.success()) || !self.exists()
    }

    /// Whether a container of this name exists (running or not).
    pub fn exists(&self) -> bool {
        let mut cmd = self.command();
        cmd.args(["container", "inspect", &self.name]);
        cmd.status().is_ok_and(|s| s.success())
    }

    /// Whether the container never started: it does not exist (its image could not be
    /// pulled, the runtime refused an option before it made it) or was made and never ran
    /// (its command could not be started). `false` when the runtime cannot be asked.
    pub fn never_started(&self) -> bool {
        let mut cmd = self.command();
        cmd.args(["container", "inspect", "--format", "{{.State.StartedAt}}"])
            .arg(&self.name)
            .stdout(Stdio::piped());
        match cmd.output() {
            Ok(o) if o.status.success() => {
                let at = String::from_utf8_lossy(&o.stdout);
                let at = at.trim();
                // Both runtimes write Go's zero time for a container that never ran.
                at.is_empty() || at.starts_with("0001-01-01")
            }
            Ok(_) => true,
            Err(_) => false,
        }
    }

    /// Whether the kernel killed the container for exceeding its memory limit.
    /// `argv` run inside the running container by the runtime's `exec`: the container's
    /// namespaces, cgroup, user, working directory and environment. stdout and stderr piped,
    /// stdin piped when `stdin`.
    pub fn exec_command(&self, argv: &[String], stdin: bool) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.env_clear()
            .envs(client_env())
            .args(&self.global_args)
            .arg("exec");
        if stdin {
            cmd.arg("--interactive");
        }
        // What follows the container's name is the command, never the runtime's options.
        cmd.arg(&self.name)
            .args(argv)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    pub fn oom_killed(&self) -> bool {
        let mut cmd = self.command();
        cmd.args(["container", "inspect", "--format", "{{.State.OOMKilled}}"])
            .arg(&self.name)
            .stdout(Stdio::piped());
        cmd.output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
    }
}

/// A container name for one replica incarnation: `corral-` and the replica's name with
/// everything a runtime refuses replaced, plus a hash of the exact name and incarnation so
/// that two names that differ only in replaced characters never collide.
pub fn container_name(name: &str, incarnation: &str) -> String {
    let mut out = String::from("corral-");
    for c in name.chars().chain("--".chars()).chain(incarnation.chars()) {
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    let _ = write!(
        out,
        "-{:08x}",
        fnv1a(&format!("{name}\0{incarnation}")) as u32
    );
    out
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What one `run` needs besides the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions<'a> {
    pub replica: &'a str,
    pub job: &'a str,
    pub run_dir: &'a Path,
    /// The replica directory: mounted at the same path (MPI hostfiles and other launch
    /// files are written there and named by path in the environment).
    pub replica_dir: &'a Path,
    /// Variables whose value holds a newline: an env file cannot carry them.
    pub multiline_env: Vec<(String, String)>,
    pub working_dir: Option<&'a Path>,
    /// The job's code snapshot: mounted read-only at [`crate::code::CONTAINER_DIR`], the
    /// working directory unless the job names one.
    pub code: Option<&'a Path>,
    /// `--cgroup-parent`: the replica's own cgroup, in its hierarchy.
    pub cgroup_parent: Option<String>,
    pub cpu_milli: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub gpu_indices: &'a [u32],
    /// The tenant's uid and gid: the container's processes run as them (`--user`), as a
    /// host replica of the namespace does.
    pub run_as: Option<super::RunAs>,
    /// More host directories, each mounted read-write at the same path.
    pub mounts: &'a [PathBuf],
}

/// The whole command line of `<runtime> run` for one replica.
pub fn run_args(
    runtime: &ContainerRuntime,
    handle: &ContainerHandle,
    request: &ContainerRequest,
    opts: &RunOptions<'_>,
) -> Vec<String> {
    let mut a: Vec<String> = vec![runtime.program.display().to_string()];
    a.extend(runtime.global_args.iter().cloned());
    a.push("run".into());
    a.push("--name".into());
    a.push(handle.name.clone());
    for (k, v) in [
        (LABEL_RUN_DIR, opts.run_dir.display().to_string()),
        (LABEL_REPLICA, opts.replica.to_string()),
        (LABEL_JOB, opts.job.to_string()),
    ] {
        a.push("--label".into());
        a.push(format!("{k}={v}"));
    }
    a.push("--network=host".into());
    if let Some(who) = opts.run_as {
        a.push("--user".into());
        a.push(format!("{}:{}", who.uid, who.gid));
    }
    a.push("--env-file".into());
    a.push(opts.replica_dir.join(ENV_FILE).display().to_string());
    for (k, v) in &opts.multiline_env {
        a.push("--env".into());
        a.push(format!("{k}={v}"));
    }
    a.push("--volume".into());
    let dir = opts.replica_dir.display();
    a.push(format!("{dir}:{dir}"));
    for m in opts.mounts {
        a.push("--volume".into());
        a.push(format!("{}:{}", m.display(), m.display()));
    }
    if let Some(parent) = &opts.cgroup_parent {
        a.push("--cgroup-parent".into());
        a.push(parent.clone());
    }
    if let Some(code) = opts.code {
        a.push("--volume".into());
        a.push(format!(
            "{}:{}:ro",
            code.display(),
            crate::code::CONTAINER_DIR
        ));
    }
    let workdir = opts
        .working_dir
        .or(opts.code.map(|_| Path::new(crate::code::CONTAINER_DIR)));
    if let Some(wd) = workdir {
        a.push("--workdir".into());
        a.push(wd.display().to_string());
    }
    if let Some(m) = opts.memory_bytes {
        a.push("--memory".into());
        a.push(m.to_string());
        // No swap beyond the limit: a hog is killed, as on Kubernetes, not swapped out.
        a.push("--memory-swap".into());
        a.push(m.to_string());
    }
    if let Some(c) = opts.cpu_milli {
        a.push("--cpus".into());
        a.push(format!("{}.{:03}", c / 1000, c % 1000));
    }
    for (name, soft, hard) in &runtime.ulimits {
        a.push("--ulimit".into());
        a.push(format!("{name}={soft}:{hard}"));
    }
    if !opts.gpu_indices.is_empty() {
        match runtime.kind {
            // CDI names of the NVIDIA container toolkit: one device per GPU index.
            RuntimeKind::Podman => {
                for i in opts.gpu_indices {
                    a.push("--device".into());
                    a.push(format!("nvidia.com/gpu={i}"));
                }
            }
            // docker's --gpus is a CSV field: a list of devices must be quoted.
            RuntimeKind::Docker => {
                let list: Vec<String> = opts.gpu_indices.iter().map(u32::to_string).collect();
                a.push("--gpus".into());
                a.push(format!("\"device={}\"", list.join(",")));
            }
        }
    }
    // Kubernetes: `command` replaces the entrypoint (and the image's CMD with it), `args`
    // replace the CMD. Both runtimes take one program as --entrypoint; the rest follows
    // the image.
    let mut tail: Vec<String> = Vec::new();
    if let Some((program, rest)) = request.command.split_first() {
        a.push("--entrypoint".into());
        a.push(program.clone());
        tail.extend(rest.iter().cloned());
    }
    tail.extend(request.args.iter().cloned());
    a.push(request.image.clone());
    a.extend(tail);
    a
}

/// The env file's text and the variables it cannot hold (a value with a newline).
pub fn env_file(env: &[(String, String)]) -> (String, Vec<(String, String)>) {
    let mut text = String::new();
    let mut multiline = Vec::new();
    for (k, v) in env {
        if v.contains('\n') || v.contains('\r') {
            multiline.push((k.clone(), v.clone()));
        } else {
            let _ = writeln!(text, "{k}={v}");
        }
    }
    (text, multiline)
}

/// Which runtime to use: `auto` (podman, else docker), `podman`, `docker`, a path to
/// either, or `none`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeChoice {
    pub runtime: Option<String>,
    /// podman's OCI runtime (`--runtime`); by default runc on hosts without the unified
    /// cgroup v2 hierarchy, where crun fails.
    pub oci_runtime: Option<String>,
    /// What a job with an image gets where no runtime is found (said in the note).
    pub without_runtime: crate::config::WithoutRuntime,
}

/// Finds the container runtime. `Ok(None)` when there is none and none was named (the
/// notes say why); an error when the one named does not work. The notes also say what was
/// adjusted to this machine (OCI runtime, rlimits), once, for the server's log.
pub fn detect(choice: &RuntimeChoice) -> Result<(Option<ContainerRuntime>, Vec<String>), String> {
    let mut notes = Vec::new();
    let named = choice.runtime.as_deref().filter(|r| *r != "auto");
    if named == Some("none") {
        return Ok((None, notes));
    }
    let candidates: Vec<PathBuf> = match named {
        Some(r) => vec![PathBuf::from(r)],
        None => vec!["podman".into(), "docker".into()],
    };
    let mut tried = Vec::new();
    for program in candidates {
        let Some(path) = find_program(&program) else {
            tried.push(format!("{}: not found", program.display()));
            continue;
        };
        let kind = if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("docker"))
        {
            RuntimeKind::Docker
        } else {
            RuntimeKind::Podman
        };
        let mut global_args = Vec::new();
        if kind == RuntimeKind::Podman {
            let oci = match &choice.oci_runtime {
                Some(r) => Some(r.clone()),
                None if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
                    && find_program(Path::new("runc")).is_some() =>
                {
                    notes.push(
                        "containers: this host has no unified cgroup v2 hierarchy; podman runs \
                         containers with runc (crun fails here)"
                            .into(),
                    );
                    Some("runc".into())
                }
                None => None,
            };
            if let Some(oci) = oci {
                global_args.push("--runtime".into());
                global_args.push(oci);
            }
        }
        let manager = match kind {
            RuntimeKind::Podman => "{{.Host.CgroupManager}}",
            RuntimeKind::Docker => "{{.CgroupDriver}}",
        };
        let works = Command::new(&path)
            .args(&global_args)
            .args(["info", "--format", manager])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output();
        match works {
            Ok(o) if o.status.success() => {
                let ulimits = ulimits_to_pin(&mut notes);
                let cgroupfs = String::from_utf8_lossy(&o.stdout).trim() == "cgroupfs";
                return Ok((
                    Some(ContainerRuntime {
                        kind,
                        program: path,
                        global_args,
                        ulimits,
                        cgroupfs,
                    }),
                    notes,
                ));
            }
            Ok(o) => tried.push(format!(
                "{} info failed: {}",
                path.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => tried.push(format!("{}: {e}", path.display())),
        }
    }
    if named.is_some() {
        return Err(format!(
            "containers.runtime: {} does not work ({})",
            named.unwrap_or_default(),
            tried.join("; ")
        ));
    }
    notes.push(format!(
        "no container runtime ({}): {}",
        tried.join("; "),
        without_runtime_consequence(choice.without_runtime)
    ));
    Ok((None, notes))
}

/// What a job with an image gets on a cluster without a container runtime, in words.
pub fn without_runtime_consequence(without: crate::config::WithoutRuntime) -> &'static str {
    match without {
        crate::config::WithoutRuntime::Host => {
            "a job with an image runs its command on the host, without the image (containers.withoutRuntime: host)"
        }
        crate::config::WithoutRuntime::Reject => {
            "a job with an image is refused at submit (containers.withoutRuntime: reject)"
        }
    }
}

/// `program` if it names a file, else the first match on `PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// podman lowers its own (and so its monitor's) process limit to this; a container may not
/// ask for more without CAP_SYS_RESOURCE (measured with podman 4.3).
const PODMAN_NPROC: u64 = 32768;

/// Without CAP_SYS_RESOURCE a container may not have higher rlimits than the runtime's
/// monitor, and runtimes ask for more by default (podman: 1048576 open files and
/// processes): then every container gets this process's own limits instead (processes:
/// at most [`PODMAN_NPROC`]).
fn ulimits_to_pin(notes: &mut Vec<String>) -> Vec<(String, u64, u64)> {
    if has_cap_sys_resource() {
        return Vec::new();
    }
    use rustix::process::{Resource, getrlimit};
    let mut out = Vec::new();
    for (name, res, cap) in [
        ("nofile", Resource::Nofile, u64::MAX),
        ("nproc", Resource::Nproc, PODMAN_NPROC),
    ] {
        let l = getrlimit(res);
        let hard = l.maximum.unwrap_or(u64::MAX).min(cap);
        if hard == u64::MAX {
            // Unlimited: the runtime's default is no raise.
            continue;
        }
        let soft = l.current.unwrap_or(hard).min(hard);
        out.push((name.to_string(), soft, hard));
    }
    if !out.is_empty() {
        let list: Vec<String> = out.iter().map(|(n, s, h)| format!("{n}={s}:{h}")).collect();
        notes.push(format!(
            "containers: this server may not raise rlimits (no CAP_SYS_RESOURCE); containers \
             get its own limits: {}",
            list.join(", ")
        ));
    }
    out
}

/// Whether this process holds CAP_SYS_RESOURCE (bit 24 of `CapEff`).
fn has_cap_sys_resource() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

/// The environment of the runtime client itself (not of the container): what it needs to
/// find its storage and configuration. The container's environment is in [`ENV_FILE`].
pub fn client_env() -> Vec<(String, String)> {
    const KEEP: &[&str] = &[
        "PATH",
        "HOME",
        "LANG",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
        "CONTAINER_HOST",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
    ];
    let mut env: Vec<(String, String)> = KEEP
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), super::DEFAULT_PATH.into()));
    }
    env
}

/// Names of the containers labelled with `run_dir` (running or not), for the sweep at
/// start-up that removes what no record owns.
pub fn list_labelled(runtime: &ContainerRuntime, run_dir: &Path) -> io::Result<Vec<String>> {
    let out = Command::new(&runtime.program)
        .args(&runtime.global_args)
        .args(["ps", "-a", "--format", "{{.Names}}", "--filter"])
        .arg(format!("label={LABEL_RUN_DIR}={}", run_dir.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{} ps failed",
            runtime.program.display()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(kind: RuntimeKind) -> ContainerRuntime {
        ContainerRuntime {
            kind,
            program: PathBuf::from(format!("/usr/bin/{}", kind.as_str())),
            global_args: if kind == RuntimeKind::Podman {
                vec!["--runtime".into(), "runc".into()]
            } else {
                Vec::new()
            },
            ulimits: vec![("nofile".into(), 1024, 4096)],
            cgroupfs: true,
        }
    }

    fn opts<'a>(dir: &'a Path, gpus: &'a [u32]) -> RunOptions<'a> {
        RunOptions {
            replica: "default.j-worker-0",
            job: "default/j",
            run_dir: Path::new("/data/replicas"),
            replica_dir: dir,
            multiline_env: vec![("NOTE".into(), "a\nb".into())],
            working_dir: None,
            code: None,
            cgroup_parent: None,
            cpu_milli: Some(1500),
            memory_bytes: Some(64 << 20),
            gpu_indices: gpus,
            run_as: None,
            mounts: &[],
        }
    }

    #[test]
    fn a_tenants_container_runs_as_its_uid_and_gid() {
        let rt = runtime(RuntimeKind::Podman);
        let h = rt.handle("default.j-worker-0", "abc-0.0");
        let dir = PathBuf::from("/data/replicas/r/1");
        let req = ContainerRequest {
            image: "img:1".into(),
            command: Vec::new(),
            args: Vec::new(),
        };
        let mut o = opts(&dir, &[]);
        assert!(!run_args(&rt, &h, &req, &o).contains(&"--user".to_string()));
        o.run_as = Some(crate::executor::RunAs {
            uid: 1_879_048_200,
            gid: 1_879_048_200,
        });
        let joined = run_args(&rt, &h, &req, &o).join(" ");
        assert!(joined.contains("--user 1879048200:1879048200"), "{joined}");
    }

    #[test]
    fn podman_gets_limits_host_network_and_only_the_placements_gpus_by_cdi() {
        let rt = runtime(RuntimeKind::Podman);
        let h = rt.handle("default.j-worker-0", "abc-0.0");
        let dir = PathBuf::from("/data/replicas/r/1");
        let req = ContainerRequest {
            image: "img:1".into(),
            command: Vec::new(),
            args: Vec::new(),
        };
        let a = run_args(&rt, &h, &req, &opts(&dir, &[1, 3]));
        let joined = a.join(" ");
        assert!(
            joined.starts_with(&format!(
                "/usr/bin/podman --runtime runc run --name {} ",
                h.name
            )),
            "{joined}"
        );
        for part in [
            "--network=host",
            "--env-file /data/replicas/r/1/container.env",
            "--env NOTE=a\nb",
            "--volume /data/replicas/r/1:/data/replicas/r/1",
            "--memory 67108864 --memory-swap 67108864",
            "--cpus 1.500",
            "--ulimit nofile=1024:4096",
            "--device nvidia.com/gpu=1 --device nvidia.com/gpu=3",
            "--label corral.dev/run-dir=/data/replicas",
            "--label corral.dev/job=default/j",
        ] {
            assert!(joined.contains(part), "{part:?} missing in {joined}");
        }
        assert!(!joined.contains("gpu=0") && !joined.contains("gpu=2"));
        // No override: the image's entrypoint, CMD and working directory.
        assert_eq!(a.last().map(String::as_str), Some("img:1"));
        assert!(!joined.contains("--entrypoint") && !joined.contains("--workdir"));
    }

    #[test]
    fn docker_gets_a_quoted_gpu_list_and_command_replaces_the_entrypoint() {
        let rt = runtime(RuntimeKind::Docker);
        let h = rt.handle("r", "1");
        let dir = PathBuf::from("/d");
        let req = ContainerRequest {
            image: "img".into(),
            command: vec!["python".into(), "-u".into()],
            args: vec!["train.py".into(), "--epochs=1".into()],
        };
        let mut o = opts(&dir, &[0, 2]);
        o.working_dir = Some(Path::new("/work"));
        let a = run_args(&rt, &h, &req, &o);
        let joined = a.join(" ");
        assert!(joined.contains("--gpus \"device=0,2\""), "{joined}");
        assert!(joined.contains("--workdir /work"), "{joined}");
        assert!(
            joined.ends_with("--entrypoint python img -u train.py --epochs=1"),
            "{joined}"
        );
    }

    #[test]
    fn args_alone_keep_the_entrypoint() {
        let rt = runtime(RuntimeKind::Podman);
        let h = rt.handle("r", "1");
        let dir = PathBuf::from("/d");
        let req = ContainerRequest {
            image: "img".into(),
            command: Vec::new(),
            args: vec!["--lr".into(), "0.1".into()],
        };
        let a = run_args(&rt, &h, &req, &opts(&dir, &[]));
        assert!(!a.iter().any(|x| x == "--entrypoint" || x == "--device"));
        assert_eq!(a[a.len() - 3..], ["img", "--lr", "0.1"]);
    }

    #[test]
    fn container_names_are_valid_and_distinct() {
        let a = container_name("ns.job-worker-0", "abcd-1.0");
        assert!(a.starts_with("corral-ns.job-worker-0--abcd-1.0-"), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        );
        assert_ne!(container_name("a/b", "1"), container_name("a_b", "1"));
        assert_ne!(container_name("a", "1"), container_name("a", "2"));
    }

    #[test]
    fn env_values_with_newlines_leave_the_env_file() {
        let (text, rest) = env_file(&[
            ("A".into(), "1".into()),
            ("TF_CONFIG".into(), "{\"x\": 1}".into()),
            ("B".into(), "x\ny".into()),
        ]);
        assert_eq!(text, "A=1\nTF_CONFIG={\"x\": 1}\n");
        assert_eq!(rest, vec![("B".to_string(), "x\ny".to_string())]);
    }
}
