//! Running a command inside a running replica (`corral exec`, and the MPI launcher's rsh
//! agent, which starts `orted` in each worker as mpi-operator v1's `kubectl exec` did).
//!
//! Whether it may run is `corral_core::control::decide_exec`; this module carries it out.
//! The command runs as the replica's own command does: its environment and working
//! directory (read from the running command's `/proc` entry, so a Python environment the
//! shim activated is included), its cgroup (limits, and the shim's kill of everything in it
//! when the replica ends) and its process group (the executor's stop signals it), its user.
//! A replica in a container is entered by its runtime (`podman exec`), which gives the same.
//!
//! Replica credentials: an MPI launcher is given `CORRAL_TOKEN`, a token naming its own job
//! (`cj1.<namespace>.<job>.<mac>`), the MAC an HMAC-SHA256 of namespace, job and uid under a
//! key kept in the data directory (`exec.key`, made once): it stays valid across a server
//! restart (re-adopted replicas keep working), and a job re-created under the same name gets
//! another.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::cgroup::CgroupRef;
use crate::executor::ProcessRecord;
use crate::executor::container::ContainerHandle;
use crate::executor::procfs;

/// The prefix of a replica's token.
pub const JOB_TOKEN_PREFIX: &str = "cj1.";
const KEY_FILE: &str = "exec.key";
const KEY_BYTES: usize = 32;

/// The key replica tokens are signed with.
#[derive(Clone)]
pub struct ExecKey([u8; KEY_BYTES]);

impl std::fmt::Debug for ExecKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExecKey(..)")
    }
}

impl ExecKey {
    /// `<data_dir>/exec.key`, made (mode 0600, from the kernel's random source) when absent.
    pub fn load_or_create(data_dir: &Path) -> io::Result<Self> {
        let path = data_dir.join(KEY_FILE);
        match fs::read(&path) {
            Ok(bytes) => {
                let key: [u8; KEY_BYTES] = bytes.as_slice().try_into().map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{} holds {} bytes, not {KEY_BYTES}; remove it to make a new key \
                             (running MPI launchers then lose their exec credentials)",
                            path.display(),
                            bytes.len()
                        ),
                    )
                })?;
                Ok(ExecKey(key))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut key = [0u8; KEY_BYTES];
                fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
                let tmp = data_dir.join(format!("{KEY_FILE}.tmp"));
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(&key)?;
                f.sync_all()?;
                fs::rename(&tmp, &path)?;
                Ok(ExecKey(key))
            }
            Err(e) => Err(e),
        }
    }

    fn mac(&self, namespace: &str, job: &str, uid: &str) -> String {
        // Names are DNS labels (no NUL): the fields cannot run into each other.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(format!("{namespace}\0{job}\0{uid}").as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The token of one job's replicas.
    pub fn job_token(&self, namespace: &str, job: &str, uid: &str) -> String {
        format!(
            "{JOB_TOKEN_PREFIX}{namespace}.{job}.{}",
            self.mac(namespace, job, uid)
        )
    }

    /// Whether `token` is the token of job `namespace/job` with `uid`.
    pub fn verify(&self, token: &JobToken, uid: &str) -> bool {
        let expected = self.mac(&token.namespace, &token.job, uid);
        // Constant time: the comparison must not tell how much of a guess was right.
        expected.len() == token.mac.len()
            && expected
                .bytes()
                .zip(token.mac.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// A replica's token, parsed (not yet verified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobToken {
    pub namespace: String,
    pub job: String,
    mac: String,
}

impl JobToken {
    /// `cj1.<namespace>.<job>.<mac>`; `None` for any other token.
    pub fn parse(token: &str) -> Option<Self> {
        let rest = token.strip_prefix(JOB_TOKEN_PREFIX)?;
        let mut parts = rest.split('.');
        let (namespace, job, mac) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || namespace.is_empty() || job.is_empty() || mac.is_empty() {
            return None;
        }
        Some(JobToken {
            namespace: namespace.to_string(),
            job: job.to_string(),
            mac: mac.to_string(),
        })
    }
}

/// Where a command exec'd into a replica runs.
#[derive(Clone, Debug)]
pub enum ExecContext {
    /// A replica the shim runs as a process: its context, entered by hand.
    Process(ProcessContext),
    /// A replica in a container: the runtime's own `exec` enters it (its namespaces,
    /// cgroup, user and environment), as `kubectl exec` does on Kubernetes.
    Container(ContainerHandle),
}

impl ExecContext {
    /// The command `argv`, ready to spawn inside the replica; stdout and stderr piped,
    /// stdin piped when `stdin` (else /dev/null).
    pub fn command(&self, argv: &[String], stdin: bool) -> io::Result<Command> {
        if argv.first().is_none_or(|p| p.is_empty()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "command: empty; give the program and its arguments",
            ));
        }
        match self {
            ExecContext::Process(p) => p.command(argv, stdin),
            ExecContext::Container(c) => Ok(c.exec_command(argv, stdin)),
        }
    }
}

/// What a command exec'd into a process replica runs with.
#[derive(Clone, Debug)]
pub struct ProcessContext {
    pub env: Vec<(String, String)>,
    pub working_dir: PathBuf,
    pub cgroup: Option<CgroupRef>,
    /// The replica's process group (the shim's pid).
    pub process_group: u32,
    pub uid: u32,
    pub gid: u32,
    /// The command's mount namespace (`/proc/<pid>/ns/mnt`) when it is not the server's:
    /// a tenant's replica has its job's own `/tmp` and `/dev/shm` there (see
    /// [`crate::executor::scratch`]), and what is exec'd sees the same.
    pub mount_namespace: Option<PathBuf>,
}

/// The context of the replica's running command, the shim's child whose pid the shim wrote
/// once it spawned it: `None` when it is not running (ended, or the shim is still preparing
/// it: a child that builds the Python environment is not the command, and has not its
/// environment).
pub fn context_of(record: &ProcessRecord) -> Option<ExecContext> {
    if !procfs::is_same_alive(record.pid, record.start_time) {
        return None;
    }
    if let Some(container) = &record.container {
        // The shim is alive, so is its runtime client; the runtime says if the container
        // itself is not running (it may still be pulling its image).
        return Some(ExecContext::Container(container.clone()));
    }
    let pid: u32 = fs::read_to_string(record.dir.join(crate::executor::files::COMMAND_PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // Still the shim's child (not a pid the kernel gave to another process since).
    let command = procfs::stat(pid).filter(|s| s.ppid == record.pid && !s.is_dead())?;
    let proc_dir = PathBuf::from(format!("/proc/{}", command.pid));
    let environ = fs::read(proc_dir.join("environ")).ok()?;
    let env = environ
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let text = std::str::from_utf8(kv).ok()?;
            let (k, v) = text.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect();
    let working_dir = fs::read_link(proc_dir.join("cwd")).ok()?;
    let status = fs::read_to_string(proc_dir.join("status")).ok()?;
    let id_of = |field: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    use std::os::unix::fs::MetadataExt;
    let namespace_of = |p: &Path| {
        fs::metadata(p.join("ns/mnt"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    let mount_namespace = (namespace_of(&proc_dir) != namespace_of(Path::new("/proc/self")))
        .then(|| proc_dir.join("ns/mnt"));
    Some(ExecContext::Process(ProcessContext {
        mount_namespace,
        env,
        working_dir,
        cgroup: record.cgroup.clone(),
        process_group: record.pid,
        uid: id_of("Uid:")?,
        gid: id_of("Gid:")?,
    }))
}

impl ProcessContext {
    fn command(&self, argv: &[String], stdin: bool) -> io::Result<Command> {
        use std::os::unix::process::CommandExt;
        let Some((program, args)) = argv.split_first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "command: empty; give the program and its arguments",
            ));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The replica's user, where the server may take it on (it runs as root, or as
        // that user already).
        // As for the replica's own command (see the shim): root's supplementary groups go,
        // and no setuid program gives privileges back.
        let me = rustix::process::geteuid().as_raw();
        let tenant = me == 0 && self.uid != 0;
        let identity = (me == 0 || me == self.uid).then_some((self.uid, self.gid, me == 0));
        // Into the replica's mount namespace (its job's /tmp and /dev/shm) while still
        // root; entering one moves to its root directory, so the working directory is
        // entered after, as the replica's user.
        let mount_namespace = match &self.mount_namespace {
            Some(ns) if me == 0 => Some(fs::File::open(ns).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("opening the replica's mount namespace: {e}"),
                )
            })?),
            _ => None,
        };
        let working_dir = std::ffi::CString::new(self.working_dir.as_os_str().as_encoded_bytes())
            .map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a working directory with a NUL",
            )
        })?;
        // Open before the fork: between fork and exec only write(2) may run.
        let joins: Vec<fs::File> = match &self.cgroup {
            Some(cg) => cg
                .self_join_files()
                .iter()
                .map(|f| fs::OpenOptions::new().write(true).open(f))
                .collect::<io::Result<_>>()
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("joining the replica's cgroup: {e}"))
                })?,
            None => Vec::new(),
        };
        let group = rustix::process::Pid::from_raw(self.process_group as i32);
        // SAFETY: the closure only makes system calls (setpgid, write, setns, setgroups,
        // setgid, setuid, prctl, chdir) on descriptors and strings made before the fork; it
        // allocates nothing and takes no lock.
        unsafe {
            cmd.pre_exec(move || {
                use rustix::process::{Gid, Uid};
                // The replica's group, so that its stop signals the command too. A server
                // that re-adopted the replica runs in another session, where the kernel
                // refuses it; the cgroup still holds the command then.
                let _ = rustix::process::setpgid(None, group);
                for f in &joins {
                    rustix::io::write(f, b"0").map_err(io::Error::from)?;
                }
                if let Some(ns) = &mount_namespace {
                    rustix::thread::move_into_link_name_space(
                        std::os::fd::AsFd::as_fd(ns),
                        Some(rustix::thread::LinkNameSpaceType::Mount),
                    )?;
                }
                if let Some((uid, gid, drop_groups)) = identity {
                    if drop_groups {
                        rustix::thread::set_thread_groups(&[])?;
                    }
                    rustix::thread::set_thread_gid(Gid::from_raw(gid))?;
                    rustix::thread::set_thread_uid(Uid::from_raw(uid))?;
                }
                if tenant {
                    rustix::thread::set_no_new_privs(true)?;
                }
                rustix::process::chdir(working_dir.as_c_str())?;
                Ok(())
            });
        }
        Ok(cmd)
    }
}

/// The exit status of an exec'd command as a shell reports it: its code, or 128 + signal.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_for_their_own_job_and_uid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = ExecKey::load_or_create(dir.path()).expect("key");
        let token = key.job_token("team-a", "hvd", "uid-1");
        let parsed = JobToken::parse(&token).expect("parses");
        assert_eq!(
            (parsed.namespace.as_str(), parsed.job.as_str()),
            ("team-a", "hvd")
        );
        assert!(key.verify(&parsed, "uid-1"));
        assert!(!key.verify(&parsed, "uid-2"));
        // The same key is read back: tokens survive a restart.
        let again = ExecKey::load_or_create(dir.path()).expect("key");
        assert!(again.verify(&parsed, "uid-1"));
        // A token with its names changed does not verify.
        let forged = token.replacen("hvd", "other", 1);
        let forged = JobToken::parse(&forged).expect("parses");
        assert!(!key.verify(&forged, "uid-1"));
        for bad in ["", "cj1.", "cj1.a.b", "cj1.a.b.c.d", "secret", "cj1..b.c"] {
            assert_eq!(JobToken::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_short_key_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(KEY_FILE), b"short").expect("write");
        let e = ExecKey::load_or_create(dir.path()).expect_err("refused");
        assert!(e.to_string().contains("exec.key holds 5 bytes"), "{e}");
    }
}
