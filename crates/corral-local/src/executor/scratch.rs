//! A job's private scratch space on this machine: its `/tmp` and `/dev/shm`.
//!
//! Every replica's `TMPDIR` (and `TMP`, `TEMP`: Python's `tempfile`, torch's caches and
//! torchrun's files honour them) is its job's scratch directory,
//! `<run_dir>/.scratch/<job>.<uid>/`, made by the shim and owned by the tenant, `0700`.
//! Where replicas run as a tenant (the server is root), the shim also gives the command a
//! mount namespace of its own (before it drops root) in which:
//! - `/tmp` is that same directory, so that what a program writes to `/tmp` by name is
//!   its job's alone, and another namespace cannot pre-create a file there for it;
//! - `/dev/shm` is the job's directory under `/dev/shm/corral-<run dir hash>/` (memory, as
//!   `/dev/shm` is): the replicas of one job share it (NCCL's and gloo's shared memory
//!   between ranks on one machine), other jobs do not see it.
//!
//! A mount is left out when the replica's own directory, working directory or program lies
//! under it (a data directory under `/tmp`, as in tests): hiding them would fail the start.
//! A working directory or program there gets a `corral:` line in the replica's log; a data
//! directory there is said once, by `corral doctor`. The directories go when the job is
//! deleted ([`discard`]).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RunAs;

/// The scratch directories' parent in the run directory (a name no replica's can be:
/// those never start with a dot).
pub const SCRATCH_DIR: &str = ".scratch";

/// Where the machine's shared memory is.
const DEV_SHM: &str = "/dev/shm";

/// A job's scratch directories, as the launch file names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scratch {
    /// The job's `TMPDIR`, and its `/tmp` in a private mount namespace.
    pub tmp: PathBuf,
    /// Its `/dev/shm` in a private mount namespace; `None` where the machine has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm: Option<PathBuf>,
    /// Whether the command gets a mount namespace of its own with them (a tenant's).
    #[serde(default)]
    pub private_mounts: bool,
}

/// The name of a job's scratch directories: its `namespace/name` and the start of its uid
/// (`label_prefix`, as its incarnations begin), one safe path component.
fn job_dir_name(job: &str, label_prefix: &str) -> String {
    format!(
        "{}.{}",
        super::path_component(job),
        super::path_component(label_prefix.trim_end_matches('-'))
    )
}

/// The shared-memory directory of the executor whose run directory is `run_dir`: one per
/// data directory, so that two servers on one machine never meet there.
fn shm_root(run_dir: &Path) -> Option<PathBuf> {
    Path::new(DEV_SHM).is_dir().then(|| {
        // FNV-1a: stable and short; the path only has to differ between data directories.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in run_dir.as_os_str().as_encoded_bytes() {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        Path::new(DEV_SHM).join(format!("corral-{hash:016x}"))
    })
}

/// The scratch of the job `job` (`namespace/name`) whose incarnations begin with the
/// first part of `incarnation` (up to its first `-`).
pub fn for_replica(run_dir: &Path, job: &str, incarnation: &str, run_as: Option<RunAs>) -> Scratch {
    let prefix = incarnation.split('-').next().unwrap_or(incarnation);
    let name = job_dir_name(job, prefix);
    Scratch {
        tmp: run_dir.join(SCRATCH_DIR).join(&name),
        shm: shm_root(run_dir).map(|root| root.join(&name)),
        private_mounts: run_as.is_some(),
    }
}

/// Makes the directories (the shim, before the command): their parents the server's and
/// passable (`0711`), each job's directory its tenant's alone (`0700`), or the server's
/// user's where there is no tenant. Replicas of one job make the same directories: one
/// that exists is fine.
pub fn make(scratch: &Scratch, run_as: Option<RunAs>) -> io::Result<()> {
    let dirs =
        std::iter::once(&scratch.tmp).chain(scratch.shm.iter().filter(|_| scratch.private_mounts));
    for dir in dirs {
        if let Some(parent) = dir.parent() {
            make_dir(parent, 0o711)?;
            // `/dev/shm` is open to all: a name made there by someone else (a link to
            // elsewhere, a directory of another user) is never taken for the server's own.
            let meta = fs::symlink_metadata(parent)?;
            if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
                return Err(io::Error::other(format!(
                    "{} is not a directory of the server's own (made by another user?): \
                     remove it",
                    parent.display()
                )));
            }
            if run_as.is_some() {
                crate::tenancy::set_owner_mode(parent, 0, 0, 0o711)?;
            }
        }
        make_dir(dir, 0o700)?;
        if let Some(who) = run_as {
            crate::tenancy::set_owner_mode(dir, who.uid, who.gid, 0o700)?;
        }
    }
    Ok(())
}

fn make_dir(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new().recursive(true).mode(mode).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// The bind mounts the command's process makes in its own mount namespace: (source,
/// target), as C strings made before the fork.
#[derive(Debug, Default)]
pub struct PrivateMounts {
    binds: Vec<(CString, CString)>,
}

impl PrivateMounts {
    /// Whether there is anything to mount.
    pub fn is_empty(&self) -> bool {
        self.binds.is_empty()
    }

    /// Enters a new mount namespace, keeps its mounts from reaching the machine's, and
    /// binds each directory in place. Between fork and exec, after stdout and stderr are
    /// the log's: raw system calls on strings made before, no allocation. Where the
    /// machine refuses (root without CAP_SYS_ADMIN, as in a default Docker container) the
    /// command runs with the machine's directories, and its log says so.
    pub fn enter(&self) {
        use rustix::mount::{MountPropagationFlags, mount_bind, mount_change};
        if self.binds.is_empty() {
            return;
        }
        // SAFETY: only the mount namespace is unshared, not the file descriptor table.
        let entered =
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
                .and_then(|()| {
                    mount_change(
                        c"/",
                        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
                    )
                });
        if entered.is_err() {
            say(
                b"corral: this machine refused a mount namespace (unshare: no CAP_SYS_ADMIN?): \
                  this replica shares the machine's /tmp and /dev/shm with other jobs\n",
            );
            return;
        }
        for (source, target) in &self.binds {
            if mount_bind(source.as_c_str(), target.as_c_str()).is_err() {
                say(b"corral: mounting the job's own ");
                say(target.as_bytes());
                say(b" failed: this replica shares the machine's\n");
            }
        }
    }
}

/// The machine's directory that the replicas of a server with data directory `data_dir`
/// keep instead of their job's own (the data directory is under it), if any.
pub fn shared_because_of(data_dir: &Path) -> Option<&'static str> {
    let data = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    ["/tmp", DEV_SHM].into_iter().find(|d| data.starts_with(d))
}

/// Whether this process may give a child a mount namespace of its own (what the shim does
/// for a tenant's command): a child that tries, then exits.
pub fn mount_namespaces_work() -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut probe = std::process::Command::new("/bin/true");
    // SAFETY: one system call between fork and exec.
    unsafe {
        probe.pre_exec(|| {
            rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS)
                .map_err(io::Error::from)
        });
    }
    probe
        .stdin(std::process::Stdio::null())
        .status()
        .map(|_| ())
}

/// Writes to the command's stderr (the replica's log) between fork and exec.
fn say(bytes: &[u8]) {
    // SAFETY: fd 2 is open for the whole call (the child's stderr, set before pre_exec).
    let stderr = unsafe { rustix::fd::BorrowedFd::borrow_raw(2) };
    let _ = rustix::io::write(stderr, bytes);
}

/// What of `scratch` to mount for a command whose own directory is `replica_dir`, working
/// directory `working_dir` and program `program`, and, for each mount left out, why.
pub fn private_mounts(
    scratch: &Scratch,
    replica_dir: &Path,
    working_dir: Option<&Path>,
    program: &str,
) -> (PrivateMounts, Vec<String>) {
    let mut out = PrivateMounts::default();
    let mut notes = Vec::new();
    if !scratch.private_mounts {
        return (out, notes);
    }
    // The replica's own directory is under the data directory: `corral doctor` says once
    // where the data directory keeps replicas on the machine's /tmp, not every replica's log.
    let needed: Vec<(Option<&str>, PathBuf)> = [
        Some((None, replica_dir.to_path_buf())),
        working_dir.map(|w| (Some("its working directory"), w.to_path_buf())),
        Some(program)
            .filter(|p| p.starts_with('/'))
            .map(|p| (Some("its program"), PathBuf::from(p))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let wanted = [
        (Some(&scratch.tmp), Path::new("/tmp")),
        (scratch.shm.as_ref(), Path::new(DEV_SHM)),
    ];
    for (source, target) in wanted {
        let Some(source) = source else { continue };
        if let Some((what, path)) = needed.iter().find(|(_, p)| p.starts_with(target)) {
            let Some(what) = what else { continue };
            notes.push(format!(
                "this replica shares the machine's {} with other jobs: {what} ({}) is there \
                 (its TMPDIR is its job's own all the same)",
                target.display(),
                path.display()
            ));
            continue;
        }
        let (Ok(source), Ok(target)) = (
            CString::new(source.as_os_str().as_encoded_bytes()),
            CString::new(target.as_os_str().as_encoded_bytes()),
        ) else {
            continue;
        };
        out.binds.push((source, target));
    }
    (out, notes)
}

/// Removes the scratch directories of a deleted job (those of every incarnation whose
/// label starts with `label_prefix`): `/tmp`'s through the trash, shared memory at once
/// (it is memory; nothing there waits on a disk).
pub fn discard(
    run_dir: &Path,
    job: &str,
    label_prefix: &str,
    trash: &mut super::trash::Trash,
) -> io::Result<()> {
    let name = job_dir_name(job, label_prefix);
    trash.discard(&run_dir.join(SCRATCH_DIR).join(&name))?;
    if let Some(root) = shm_root(run_dir) {
        match fs::remove_dir_all(root.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_has_one_scratch_for_all_its_replicas_and_incarnations() {
        let run = Path::new("/data/replicas");
        let a = for_replica(run, "team-a/train", "1a2b3c4d-worker-0-1", None);
        let b = for_replica(run, "team-a/train", "1a2b3c4d-worker-1-3", None);
        assert_eq!(a, b);
        assert_eq!(
            a.tmp,
            Path::new("/data/replicas/.scratch/team-a%2Ftrain.1a2b3c4d")
        );
        assert!(!a.private_mounts);
        // Another job of the same name (deleted and submitted again), another namespace.
        let again = for_replica(run, "team-a/train", "99999999-worker-0-1", None);
        let other = for_replica(run, "team-b/train", "1a2b3c4d-worker-0-1", None);
        assert_ne!(again.tmp, a.tmp);
        assert_ne!(other.tmp, a.tmp);
        assert_ne!(other.shm, a.shm);
        // What a deletion removes is the directory the replicas used.
        assert_eq!(
            run.join(SCRATCH_DIR)
                .join(job_dir_name("team-a/train", "1a2b3c4d-")),
            a.tmp
        );
    }

    /// A name in `/dev/shm` made by someone else before the server (a link to elsewhere)
    /// is refused, not followed.
    #[test]
    fn a_scratch_parent_that_is_not_the_servers_own_directory_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        let squatted = tmp.path().join("corral-0");
        std::os::unix::fs::symlink(&elsewhere, &squatted).expect("symlink");
        let scratch = Scratch {
            tmp: tmp.path().join("own").join("j.1"),
            shm: Some(squatted.join("j.1")),
            private_mounts: true,
        };
        let e = make(&scratch, None).expect_err("refused");
        assert!(
            e.to_string()
                .contains("not a directory of the server's own"),
            "{e}"
        );
        assert!(!elsewhere.join("j.1").exists(), "followed the link");
        // Its own directories are made.
        let own = Scratch {
            shm: Some(tmp.path().join("shm").join("j.1")),
            ..scratch
        };
        make(&own, None).expect("made");
        for d in [&own.tmp, own.shm.as_ref().expect("shm")] {
            assert_eq!(fs::metadata(d).expect("dir").mode() & 0o777, 0o700);
        }
    }

    #[test]
    fn a_mount_that_would_hide_the_replicas_own_files_is_left_out() {
        let scratch = Scratch {
            tmp: "/data/replicas/.scratch/j.1".into(),
            shm: Some("/dev/shm/corral-0/j.1".into()),
            private_mounts: true,
        };
        let (mounts, notes) =
            private_mounts(&scratch, Path::new("/data/replicas/r/1"), None, "python");
        assert_eq!(mounts.binds.len(), 2);
        assert!(notes.is_empty(), "{notes:?}");
        let (mounts, notes) = private_mounts(
            &scratch,
            Path::new("/tmp/t/data/replicas/r/1"),
            None,
            "/bin/sh",
        );
        assert_eq!(mounts.binds.len(), 1, "only /dev/shm");
        assert!(notes.is_empty(), "doctor says that, once: {notes:?}");
        let (mounts, notes) = private_mounts(
            &scratch,
            Path::new("/data/replicas/r/1"),
            Some(Path::new("/tmp/project")),
            "/dev/shm/tool",
        );
        assert!(mounts.is_empty());
        assert_eq!(notes.len(), 2, "{notes:?}");
        // No tenant, no namespace.
        let shared = Scratch {
            private_mounts: false,
            ..scratch
        };
        let (mounts, notes) = private_mounts(&shared, Path::new("/data/r"), None, "x");
        assert!(mounts.is_empty() && notes.is_empty());
    }
}
