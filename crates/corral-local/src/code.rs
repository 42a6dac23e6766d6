//! Code snapshots: a directory shipped with a job (`corral submit --code DIR`).
//!
//! The CLI archives the directory (tar.gz, what `.gitignore` leaves, entries sorted, times
//! and owners zeroed, so the same files give the same archive and digest) and uploads it
//! with the job in one request. The server checks the archive's SHA-256 against the digest
//! the client sent, unpacks it (regular files and directories only, no path outside the
//! snapshot, at most `codeSnapshots.maxBytes` of files) into `<data>/code/.incoming/`, and
//! the submit moves it to `<data>/code/<job uid>/`, one read-only copy per job. The job
//! carries the digest in its [`ANNOTATION`]. Replicas run from the copy: it is their
//! working directory unless the job sets one; in a container it is mounted read-only at
//! [`CONTAINER_DIR`]. The copy is removed with the job (delete, TTL); a refused or failed
//! submission leaves nothing (what is in `.incoming` is removed with the request, and at
//! start-up, as is any copy whose job the store does not hold).
//!
//! Each copy belongs to one job: no other job's replicas are pointed at it or mount it.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// The annotation that names a job's snapshot: `sha256:<64 hex digits>` of its archive.
/// Set by the server on a submission with code; a manifest may not set it itself.
pub const ANNOTATION: &str = "corral.dev/code";

/// Where a replica in a container sees its job's snapshot (read-only).
pub const CONTAINER_DIR: &str = "/workspace";

const INCOMING: &str = ".incoming";

/// Why a snapshot was refused.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    #[error(
        "the code snapshot holds more than {limit} bytes of files, this server's limit \
         (codeSnapshots.maxBytes in corral.yaml); leave out what the job need not ship \
         (.gitignore)"
    )]
    TooLarge { limit: u64 },
    #[error("the code snapshot archive is not valid: {0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> CodeError {
    let context = context.into();
    move |source| CodeError::Io { context, source }
}

/// `sha256:<hex>` of `bytes` read to the end.
pub fn digest_of(mut r: impl Read) -> io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format_digest(h))
}

/// `sha256:<hex>` of a finished hasher.
pub fn format_digest(h: Sha256) -> String {
    let bytes = h.finalize();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Whether `s` is a digest as [`format_digest`] writes it.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The snapshots of one data directory, `<data>/code`.
#[derive(Clone, Debug)]
pub struct CodeStore {
    root: PathBuf,
}

static STAGED: AtomicU64 = AtomicU64::new(0);

impl CodeStore {
    pub fn new(data_dir: &Path) -> Self {
        CodeStore {
            root: data_dir.join("code"),
        }
    }

    /// Where the job with `uid` keeps its snapshot.
    pub fn job_dir(&self, uid: &str) -> PathBuf {
        self.root.join(uid)
    }

    /// A new path in the staging directory (created), for one upload.
    pub fn incoming_path(&self, suffix: &str) -> Result<PathBuf, CodeError> {
        let dir = self.root.join(INCOMING);
        fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        // Uploads of every namespace pass here: the server's alone.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("setting the mode of {}", dir.display())))?;
        let n = STAGED.fetch_add(1, Ordering::Relaxed);
        Ok(dir.join(format!("{}-{n}{suffix}", std::process::id())))
    }

    /// Removes the snapshot of the job with `uid`, if it has one.
    pub fn remove(&self, uid: &str) -> io::Result<()> {
        remove_tree(&self.job_dir(uid))
    }

    /// At start-up: removes the staging directory (uploads of requests that never ended)
    /// and the snapshot of every job the store does not hold (a submission that failed
    /// between unpacking and storing).
    pub fn sweep(&self, jobs: &HashSet<String>) -> Vec<String> {
        let mut notes = Vec::new();
        let Ok(entries) = fs::read_dir(&self.root) else {
            return notes;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if (name == INCOMING || !jobs.contains(&name))
                && let Err(err) = remove_tree(&e.path())
            {
                notes.push(format!("cannot remove {}: {err}", e.path().display()));
            }
        }
        notes
    }

    /// Moves an unpacked snapshot into place for the job `uid` (a rename: same file system).
    pub fn place(&self, staged: &Path, uid: &str) -> io::Result<PathBuf> {
        let dest = self.job_dir(uid);
        fs::rename(staged, &dest)?;
        Ok(dest)
    }

    /// A staged copy (hard links) of a placed snapshot, for a job submitted later from it
    /// (a served model's replica): [`CodeStore::place`] moves it to that job.
    pub fn stage_copy(&self, from: &Path) -> Result<PathBuf, CodeError> {
        let staged = self.incoming_path(".d")?;
        link_tree(from, &staged).map_err(io_err(format!("copying {}", from.display())))?;
        Ok(staged)
    }

    /// Another job of the same submission gets its own copy of a placed snapshot (hard
    /// links: the files are read-only).
    pub fn copy(&self, from: &Path, uid: &str) -> io::Result<PathBuf> {
        let dest = self.job_dir(uid);
        link_tree(from, &dest)?;
        Ok(dest)
    }
}

fn link_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir(to)?;
    for e in fs::read_dir(from)? {
        let e = e?;
        let ty = e.file_type()?;
        let target = to.join(e.file_name());
        if ty.is_dir() {
            link_tree(&e.path(), &target)?;
        } else {
            fs::hard_link(e.path(), &target)?;
        }
    }
    fs::set_permissions(to, fs::metadata(from)?.permissions())
}

/// Removes a tree made read-only by [`unpack`] (its directories are made writable first,
/// which a non-root owner needs to delete their entries). Absent is fine.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return fs::remove_file(path),
        Ok(_) => {}
    }
    make_writable(path)?;
    fs::remove_dir_all(path)
}

fn make_writable(dir: &Path) -> io::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            make_writable(&e.path())?;
        }
    }
    Ok(())
}

/// Unpacks a tar.gz snapshot into `dest` (created; must not exist), read-only. Only
/// regular files and directories with plain relative paths; at most `limit` bytes of files
/// in all (counted from the headers, checked again while writing). On error nothing is
/// left at `dest`. Returns the bytes of files unpacked.
pub fn unpack(archive: impl Read, dest: &Path, limit: u64) -> Result<u64, CodeError> {
    fs::create_dir(dest).map_err(io_err(format!("creating {}", dest.display())))?;
    let r = unpack_into(archive, dest, limit);
    if r.is_err() {
        let _ = remove_tree(dest);
    }
    r
}

fn unpack_into(archive: impl Read, dest: &Path, limit: u64) -> Result<u64, CodeError> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let mut total: u64 = 0;
    let entries = tar
        .entries()
        .map_err(|e| CodeError::Invalid(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| CodeError::Invalid(e.to_string()))?;
        let path = entry
            .path()
            .map_err(|e| CodeError::Invalid(e.to_string()))?
            .into_owned();
        let plain = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !plain {
            return Err(CodeError::Invalid(format!(
                "`{}` is not a relative path inside the snapshot",
                path.display()
            )));
        }
        let target = dest.join(&path);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            fs::create_dir_all(&target)
                .map_err(io_err(format!("creating {}", target.display())))?;
            continue;
        }
        if !kind.is_file() {
            return Err(CodeError::Invalid(format!(
                "`{}` is neither a regular file nor a directory",
                path.display()
            )));
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| CodeError::Invalid(e.to_string()))?;
        total = total.saturating_add(size);
        if total > limit {
            return Err(CodeError::TooLarge { limit });
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        }
        let mode = entry.header().mode().unwrap_or(0o644);
        let mut out =
            fs::File::create(&target).map_err(io_err(format!("creating {}", target.display())))?;
        // At most the header's size: the reader of an entry ends there.
        let written = io::copy(&mut (&mut entry).take(size), &mut out)
            .map_err(io_err(format!("writing {}", target.display())))?;
        if written != size {
            return Err(CodeError::Invalid(format!(
                "`{}` is truncated",
                path.display()
            )));
        }
        // Read-only, executables kept executable.
        let ro = if mode & 0o111 != 0 { 0o555 } else { 0o444 };
        fs::set_permissions(&target, fs::Permissions::from_mode(ro))
            .map_err(io_err(format!("setting the mode of {}", target.display())))?;
    }
    // Directories last, deepest first, so that unpacking could still write into them.
    let mut all: Vec<PathBuf> = Vec::new();
    collect_dirs(dest, &mut all).map_err(io_err(format!("reading {}", dest.display())))?;
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for d in all {
        // The snapshot as a whole is the server's until a replica of its job starts and
        // gives it to the job's group (see `crate::tenancy`); inside, read-only for all.
        let mode = if d == dest { 0o500 } else { 0o555 };
        fs::set_permissions(&d, fs::Permissions::from_mode(mode))
            .map_err(io_err(format!("setting the mode of {}", d.display())))?;
    }
    Ok(total)
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    out.push(dir.to_path_buf());
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            collect_dirs(&e.path(), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for (name, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // `append_data` refuses `..`; the raw name is what a hostile client sends.
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, *data).expect("append");
        }
        b.into_inner().expect("tar").finish().expect("gz")
    }

    #[test]
    fn unpacks_read_only_and_refuses_escapes_and_excess() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dest = tmp.path().join("a");
        let n = unpack(
            &archive(&[("x/y.txt", b"hello"), ("z", b"!")])[..],
            &dest,
            100,
        )
        .expect("unpack");
        assert_eq!(n, 6);
        assert_eq!(fs::read(dest.join("x/y.txt")).expect("read"), b"hello");
        let mode = fs::metadata(dest.join("x/y.txt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o222, 0, "read-only: {mode:o}");
        remove_tree(&dest).expect("removable");
        assert!(!dest.exists());

        let e = unpack(&archive(&[("../evil", b"x")])[..], &dest, 100).expect_err("escape");
        assert!(matches!(e, CodeError::Invalid(_)), "{e}");
        assert!(!dest.exists(), "nothing left");
        assert!(!tmp.path().join("evil").exists());

        let e = unpack(
            &archive(&[("a", &[0u8; 60]), ("b", &[0u8; 60])])[..],
            &dest,
            100,
        )
        .expect_err("too large");
        assert!(e.to_string().contains("limit"), "{e}");
        assert!(!dest.exists(), "nothing left");
    }

    #[test]
    fn digests() {
        let d = digest_of(&b"abc"[..]).expect("digest");
        assert_eq!(
            d,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_digest(&d));
        assert!(!is_digest("sha256:BA78"));
    }
}
