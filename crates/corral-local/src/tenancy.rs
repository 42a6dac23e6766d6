//! The wall between tenants on this machine, as the embedded shell applies it: which
//! identity a namespace's replicas run under (decided by `corral_core::tenancy`, recorded in
//! the store), and the modes of the server's own files.
//!
//! When the server runs as root:
//! - each namespace's replicas run under a uid and gid of their own (`tenants.uidRange`);
//!   the shim drops to it before the command runs (see [`crate::shim`]);
//! - the data directory and the directories replicas must pass through (`replicas/`,
//!   `code/`, `python/`) are `0711`: traversable, not listable; everything else the server
//!   keeps there is its own (`corral.db` and its WAL `0600`);
//! - a replica's directories are `root:<its gid>`, `0750`: its namespace reads them (its
//!   log, its launch files), nobody else does, and it cannot change what the server trusts
//!   there (`record.json`, `exit.json`); what it may write is its `home/` and `tmp/`,
//!   owned by its uid, `0700`.
//!
//! Otherwise replicas run as the server's user and can read whatever it can: the server
//! says so at start and `corral doctor` says how to get the wall.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use corral_core::tenancy::{self, IdRange, Isolation, TenantIdentity};

use crate::config::Settings;
use crate::store::{Store, StoreError};

/// The identities of this server's tenants.
#[derive(Debug)]
pub struct Tenancy {
    isolation: Isolation,
    /// Recorded assignments, uid -> namespace.
    taken: BTreeMap<u32, String>,
    /// Ids of this machine's own accounts and groups inside the range.
    reserved: BTreeSet<u32>,
}

/// Why a namespace has no identity.
#[derive(Debug, thiserror::Error)]
pub enum TenancyError {
    #[error("{0}")]
    Range(#[from] tenancy::TenancyError),
    #[error("recording a tenant's uid: {0}")]
    Store(#[from] StoreError),
}

impl Tenancy {
    /// The tenancy of a server running with this process's effective uid.
    pub fn open(settings: &Settings, store: &Store) -> Result<Self, TenancyError> {
        let range = settings.tenants.id_range();
        range.validate()?;
        let isolation = tenancy::isolation(rustix::process::geteuid().as_raw(), range);
        Ok(Self::with(isolation, store.tenant_ids()?))
    }

    /// Replicas run as the server's user (tests, and servers that are not root).
    pub fn shared() -> Self {
        Self::with(Isolation::Shared, BTreeMap::new())
    }

    fn with(isolation: Isolation, taken: BTreeMap<u32, String>) -> Self {
        let reserved = match isolation {
            Isolation::PerNamespace(range) => machine_ids(range),
            Isolation::Shared => BTreeSet::new(),
        };
        Tenancy {
            isolation,
            taken,
            reserved,
        }
    }

    /// Whether each namespace runs under an identity of its own.
    pub fn isolated(&self) -> bool {
        matches!(self.isolation, Isolation::PerNamespace(_))
    }

    /// The identity `namespace`'s replicas run under: `None` when they run as the server;
    /// a new assignment is recorded in `store` before it is returned.
    pub fn identity(
        &mut self,
        store: &Store,
        namespace: &str,
    ) -> Result<Option<TenantIdentity>, TenancyError> {
        let Isolation::PerNamespace(range) = self.isolation else {
            return Ok(None);
        };
        let id = tenancy::identity_of(namespace, range, &self.taken, &self.reserved)?;
        if self.taken.get(&id.uid).map(String::as_str) != Some(namespace) {
            store.record_tenant_id(namespace, id.uid)?;
            self.taken.retain(|_, ns| ns != namespace);
            self.taken.insert(id.uid, namespace.to_string());
        }
        Ok(Some(id))
    }

    /// One line for `corral up` and `corral doctor`.
    pub fn describe(&self) -> String {
        describe(&self.isolation)
    }
}

/// What isolation a server running as `euid` gets, in words: what it means and, without
/// it, how to get it.
pub fn describe(isolation: &Isolation) -> String {
    match isolation {
        Isolation::PerNamespace(r) => format!(
            "tenants are isolated: each namespace's replicas run as a uid and gid of their own \
             ({}..={}, tenants.uidRange), without access to the server's files or another \
             namespace's",
            r.start,
            u64::from(r.start) + u64::from(r.count) - 1
        ),
        Isolation::Shared => format!(
            "tenants are NOT isolated on this machine: replicas run as the server's user ({}), \
             so any job can read the data directory (every job's logs and files, the store) \
             and the configuration with its tokens, and signal other jobs' processes",
            user_name()
        ),
    }
}

/// How to get isolation where there is none.
pub const HOW_TO_ISOLATE: &str = "run `corral up` as root (e.g. a systemd service) with a \
    data directory other users may pass through (e.g. --data-dir /var/lib/corral): each \
    namespace's replicas then run as a uid of their own (tenants.uidRange in corral.yaml)";

/// The isolation this process would get.
pub fn isolation_here(settings: &Settings) -> Isolation {
    tenancy::isolation(
        rustix::process::geteuid().as_raw(),
        settings.tenants.id_range(),
    )
}

fn user_name() -> String {
    let uid = rustix::process::geteuid().as_raw();
    fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)? == uid.to_string()).then(|| name.to_string())
            })
        })
        .map_or_else(|| format!("uid {uid}"), |n| format!("{n}, uid {uid}"))
}

/// The uids of `/etc/passwd` and gids of `/etc/group` inside `range`: a tenant never gets
/// the id of an account of this machine.
fn machine_ids(range: IdRange) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for file in ["/etc/passwd", "/etc/group"] {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            if let Some(id) = line.split(':').nth(2).and_then(|f| f.parse::<u32>().ok())
                && range.contains(id)
            {
                out.insert(id);
            }
        }
    }
    out
}

/// Sets `path`'s owner (root keeps ownership: `uid` 0) and mode; a no-op when both are
/// right already.
pub fn set_owner_mode(path: &Path, uid: u32, gid: u32, mode: u32) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.uid() != uid || meta.gid() != gid {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    }
    if meta.mode() & 0o7777 != mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The first of `path` and the directories above it that a process of another uid and group
/// `gid` (a tenant's) may not pass or run, if any.
pub fn closed_to_group(path: &Path, gid: u32) -> Option<PathBuf> {
    closed_to(path, None, gid)
}

/// The first of `path` and the directories above it that a process of `uid` (when known)
/// and group `gid` may not pass or run, if any.
fn closed_to(path: &Path, uid: Option<u32>, gid: u32) -> Option<PathBuf> {
    path.ancestors().find_map(|p| {
        let open = fs::metadata(p).is_ok_and(|m| {
            let mode = m.mode();
            if Some(m.uid()) == uid {
                mode & 0o100 != 0
            } else if m.gid() == gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            }
        });
        (!open).then(|| p.to_path_buf())
    })
}

/// `path` (a `PATH` value) without the directories group `gid` may not search: a tenant's
/// command would find nothing there (root's pyenv shims, `/root/.cargo/bin`), and one
/// it cannot enter makes a program found nowhere fail with "permission denied" rather
/// than "not found".
pub fn search_path_for_group(path: &str, gid: u32) -> String {
    path.split(':')
        .filter(|d| d.starts_with('/') && closed_to_group(Path::new(d), gid).is_none())
        .collect::<Vec<_>>()
        .join(":")
}

/// Why a tenant (`uid`, `gid`) cannot run `program` (as the job names it) in
/// `working_dir`, when a file or directory closed to it is the cause: which one, its mode,
/// and what to do. `tenant_path` is its `PATH`, `server_path` the server's, in which a
/// program the tenant's `PATH` left out is found. `None` when nothing closed is in the way
/// (a program that exists nowhere, for one).
pub fn closed_to_tenant(
    program: &str,
    working_dir: Option<&Path>,
    tenant_path: &str,
    server_path: &str,
    uid: u32,
    gid: u32,
) -> Option<String> {
    let mode = |p: &Path| fs::metadata(p).map_or(0, |m| m.mode() & 0o7777);
    if let Some(wd) = working_dir
        && let Some(closed) = closed_to(wd, Some(uid), gid)
    {
        return Some(format!(
            "its working directory {} is out of its reach: {} (mode {:o}) is closed to other \
             users. Run `chmod o+x {}`, or choose a working directory every user may enter",
            wd.display(),
            closed.display(),
            mode(&closed),
            closed.display()
        ));
    }
    let in_path = |path: &str| {
        path.split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(program))
            .find(|p| p.is_file())
    };
    let path = if program.contains('/') {
        let p = Path::new(program);
        match working_dir {
            Some(wd) if p.is_relative() => wd.join(p),
            _ => p.to_path_buf(),
        }
    } else {
        in_path(tenant_path).or_else(|| in_path(server_path))?
    };
    let closed = closed_to(&path, Some(uid), gid)?;
    let fix = if closed == path {
        format!("`chmod o+rx {}`", path.display())
    } else {
        format!("`chmod o+x {}`", closed.display())
    };
    Some(format!(
        "{} is out of its reach: {} (mode {:o}) is closed to other users. Run {fix}, or \
         install the program where every user may run it (e.g. /usr/local/bin)",
        path.display(),
        closed.display(),
        mode(&closed)
    ))
}

/// Subdirectories of the data directory that replicas pass through to reach their own.
pub const TRAVERSED_DIRS: [&str; 3] = ["replicas", "code", "python"];

/// Makes the data directory the server's alone: `0700`, or `0711` under isolation (replicas
/// pass through it to their own directories, without listing it); the same for the
/// directories they pass through; the store's files `0600`. Returns what was looser and
/// was tightened, in words.
pub fn protect_data_dir(data_dir: &Path, isolated: bool) -> Result<Vec<String>, String> {
    let dir_mode = if isolated { 0o711 } else { 0o700 };
    let mut notes = Vec::new();
    let mut tighten = |path: &Path, mode: u32| -> Result<(), String> {
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let was = meta.mode() & 0o7777;
        if was != mode {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| {
                format!(
                    "{} is mode {was:o} and could not be made {mode:o}: {e}",
                    path.display()
                )
            })?;
            // Only a mode that let others read or write is worth a word.
            if was & 0o066 != 0 {
                notes.push(format!(
                    "{} was mode {was:o}, readable by other users: now {mode:o}",
                    path.display()
                ));
            }
        }
        Ok(())
    };
    tighten(data_dir, dir_mode)?;
    for sub in TRAVERSED_DIRS {
        let path = data_dir.join(sub);
        if isolated && !path.exists() {
            // Made with its mode: only what was looser before is worth a note.
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .mode(dir_mode)
                .create(&path)
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
        }
        tighten(&path, dir_mode)?;
    }
    for db in crate::store::DATABASE_FILES {
        for suffix in ["", "-wal", "-shm"] {
            tighten(&data_dir.join(format!("{db}{suffix}")), 0o600)?;
        }
    }
    tighten(&data_dir.join(crate::lock::LOCK_FILE), 0o600)?;
    Ok(notes)
}

/// Makes `path` (a database about to be opened) `0600` before anything is written to it:
/// created so when missing, tightened when looser. SQLite gives its `-wal` and `-shm` files
/// the database file's mode, so they are private from their first byte too.
pub fn private_file(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    if file.metadata()?.mode() & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// Readies the data directory for a server with `isolated` tenants or not: made if
/// missing, its modes set (see [`protect_data_dir`]); with tenants, refused when a directory
/// above it is closed to other users (their replicas could not reach their own files).
pub fn prepare_data_dir(data_dir: &Path, isolated: bool) -> Result<Vec<String>, String> {
    if !data_dir.exists() {
        // Made with its mode, not tightened after with a note.
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(if isolated { 0o711 } else { 0o700 })
            .create(data_dir)
            .map_err(|e| format!("creating {}: {e}", data_dir.display()))?;
    }
    if isolated {
        let real = fs::canonicalize(data_dir)
            .map_err(|e| format!("resolving {}: {e}", data_dir.display()))?;
        for dir in real.ancestors().skip(1) {
            let mode = fs::metadata(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?
                .mode();
            if mode & 0o001 == 0 {
                return Err(format!(
                    "the data directory {} is below {}, mode {:o}, which other users may not                      pass: tenants' replicas run as users of their own and could not reach                      their files. Use a data directory they may reach (e.g. --data-dir                      /var/lib/corral) or `chmod o+x {}`",
                    data_dir.display(),
                    dir.display(),
                    mode & 0o7777,
                    dir.display()
                ));
            }
        }
    }
    protect_data_dir(data_dir, isolated)
}

/// Checks the configuration file that holds tokens: readable by its owner alone, or
/// refused when the server isolates tenants (a replica could read every token) and
/// warned about otherwise. `Ok(Some(warning))` for a warning.
pub fn check_config_file(
    path: &Path,
    has_tokens: bool,
    isolated: bool,
) -> Result<Option<String>, String> {
    if !has_tokens {
        return Ok(None);
    }
    let meta = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.mode() & 0o777;
    if mode & 0o077 == 0 {
        return Ok(None);
    }
    let what = format!(
        "{} holds API tokens and is mode {mode:o}, readable by other users: run `chmod 600 {}`",
        path.display(),
        path.display()
    );
    if isolated {
        Err(format!(
            "refusing to start: {what} (a replica, which runs as another user, could read \
             every namespace's token)"
        ))
    } else {
        Ok(Some(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_with_tokens_readable_by_others_is_refused_when_isolated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("corral.yaml");
        fs::write(&path, "kind: CorralConfig\n").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = check_config_file(&path, true, true).expect_err("refused");
        assert!(e.contains("chmod 600"), "{e}");
        let w = check_config_file(&path, true, false).expect("warned");
        assert!(w.is_some_and(|w| w.contains("readable by other users")));
        assert_eq!(check_config_file(&path, false, true), Ok(None));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(check_config_file(&path, true, true), Ok(None));
    }

    #[test]
    fn the_data_dir_is_tightened_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        fs::create_dir(&data).expect("mkdir");
        fs::set_permissions(&data, fs::Permissions::from_mode(0o755)).expect("chmod");
        fs::write(data.join(crate::store::DB_FILE), b"").expect("write");
        fs::set_permissions(
            data.join(crate::store::DB_FILE),
            fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        let notes = protect_data_dir(&data, true).expect("tightened");
        assert_eq!(notes.len(), 2, "{notes:?}");
        let mode = |p: &Path| fs::metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!(mode(&data), 0o711);
        assert_eq!(mode(&data.join("replicas")), 0o711);
        assert_eq!(mode(&data.join(crate::store::DB_FILE)), 0o600);
        assert!(protect_data_dir(&data, true).expect("again").is_empty());
        protect_data_dir(&data, false).expect("shared");
        assert_eq!(mode(&data), 0o700);
    }

    #[test]
    fn every_database_of_the_data_dir_is_private_from_its_first_byte() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path| fs::metadata(p).expect("meta").mode() & 0o7777;
        // An audit trail opened fresh, written to: its file, WAL and shared memory 0600.
        let audit = crate::store::AuditLog::open(dir.path()).expect("audit");
        audit
            .record(&crate::store::AuditEntry {
                seq: 0,
                at_ms: 1,
                who: "alice".into(),
                scope: "team-a".into(),
                action: "POST".into(),
                target: "/api/v1/namespaces/team-a/trainingjobs".into(),
                status: 201,
                outcome: "ok".into(),
            })
            .expect("record");
        for f in ["audit.db", "audit.db-wal", "audit.db-shm"] {
            assert_eq!(mode(&dir.path().join(f)), 0o600, "{f}");
        }
        // One left looser (by an older release) is tightened at the next start.
        let history = dir.path().join(crate::store::HISTORY_FILE);
        fs::write(&history, b"").expect("write");
        fs::set_permissions(&history, fs::Permissions::from_mode(0o644)).expect("chmod");
        let notes = protect_data_dir(dir.path(), true).expect("tightened");
        assert_eq!(mode(&history), 0o600);
        assert!(notes.iter().any(|n| n.contains("history.db")), "{notes:?}");
    }

    /// A program a tenant cannot reach gets the directory in its way and the command that
    /// opens it, whether it was named by path, found on the tenant's PATH, or left out of
    /// it; a working directory the same.
    #[test]
    fn a_program_out_of_a_tenants_reach_is_named_with_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path, m: u32| {
            fs::set_permissions(p, fs::Permissions::from_mode(m)).expect("chmod");
        };
        let closed = dir.path().join("closed");
        let open = dir.path().join("open");
        for d in [&closed, &open] {
            fs::create_dir_all(d).expect("mkdir");
        }
        let prog = closed.join("train");
        let private = open.join("private");
        for p in [&prog, &private] {
            fs::write(p, "#!/bin/sh\n").expect("write");
        }
        mode(dir.path(), 0o711);
        mode(&closed, 0o700);
        mode(&open, 0o755);
        mode(&prog, 0o755);
        mode(&private, 0o700);
        let (uid, gid) = (4242, 4242);
        let path = prog.display().to_string();
        let why = closed_to_tenant(&path, None, "/usr/bin", "", uid, gid).expect("closed");
        assert!(
            why.contains(&format!("`chmod o+x {}`", closed.display())),
            "{why}"
        );
        assert!(why.contains("mode 700"), "{why}");
        // Found only on the server's PATH, left out of the tenant's.
        let server_path = closed.display().to_string();
        let why =
            closed_to_tenant("train", None, "/usr/bin", &server_path, uid, gid).expect("closed");
        assert!(why.contains(&path), "{why}");
        // The program itself closed.
        let why = closed_to_tenant("private", None, &open.display().to_string(), "", uid, gid)
            .expect("closed");
        assert!(
            why.contains(&format!("`chmod o+rx {}`", private.display())),
            "{why}"
        );
        // A working directory it may not enter.
        let why = closed_to_tenant("sh", Some(&closed), "/bin", "", uid, gid).expect("closed");
        assert!(why.contains("its working directory"), "{why}");
        // Nothing in the way: nothing to say.
        assert_eq!(
            closed_to_tenant("no-such-program", None, "/bin", "/usr/bin", uid, gid),
            None
        );
        // Its own directory, closed to everyone else, is open to it.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&closed, Some(uid), Some(gid)).expect("chown");
            assert_eq!(
                closed_to_tenant(&path, Some(&closed), "", "", uid, gid),
                None
            );
        }
    }

    #[test]
    fn a_tenants_search_path_keeps_only_the_directories_it_may_enter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mode = |p: &Path, m: u32| {
            fs::set_permissions(p, fs::Permissions::from_mode(m)).expect("chmod");
        };
        // The tempdir is 0700: everything below it is closed until it opens.
        let open = dir.path().join("open");
        let closed = dir.path().join("closed");
        let below = closed.join("bin");
        for d in [&open, &below] {
            fs::create_dir_all(d).expect("mkdir");
        }
        mode(dir.path(), 0o711);
        mode(&open, 0o755);
        mode(&closed, 0o700);
        mode(&below, 0o755);
        let path = format!(
            "{}:relative:{}:{}",
            open.display(),
            closed.display(),
            below.display()
        );
        let gid = 4242;
        assert_eq!(
            search_path_for_group(&path, gid),
            open.display().to_string()
        );
        assert_eq!(closed_to_group(&below, gid), Some(closed.clone()));
        // Its own group may pass a directory closed to others.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&closed, None, Some(gid)).expect("chown");
            mode(&closed, 0o710);
            assert_eq!(closed_to_group(&below, gid), None);
            assert_eq!(closed_to_group(&below, gid + 1), Some(closed));
        }
    }
}
