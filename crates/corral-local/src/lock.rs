//! One writer per data directory: an exclusive advisory lock on `data_dir/corral.lock`.
//!
//! Two servers on one data directory would both rebuild the running set from the store, run
//! the same jobs and over-commit the machine. The store takes this lock when it opens the
//! directory and holds it for its life; a second open fails at once, naming the holder.
//!
//! The lock is `flock(2)` (through `std::fs::File::try_lock`), so the kernel releases it
//! when the holding process dies, `kill -9` included: there is never a stale lock to clean
//! up. It is tied to the open file description: a second open in the same process is refused
//! too, and the descriptor is close-on-exec (std's default), so replica shims started by the
//! server do not inherit it and do not keep the directory locked after the server is gone.
//!
//! The file's contents only describe the holder (`pid=`, `program=`, `api=` lines), for the
//! error message: they are rewritten by the holder, and read (never trusted for the decision)
//! by whoever is refused. The file is left in place on release; deleting it would race with
//! the next opener.

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "corral.lock";

/// Who holds a data directory, as its lock file says (every part may be missing: the
/// holder may still be writing it, or be an older program).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: Option<u32>,
    /// e.g. `corral up`.
    pub program: Option<String>,
    /// The API address, once the holder's server has bound it.
    pub api: Option<String>,
}

impl LockHolder {
    /// This process, before it serves anything.
    fn this_process() -> LockHolder {
        LockHolder {
            pid: Some(std::process::id()),
            program: program_name(),
            api: None,
        }
    }

    fn to_text(&self) -> String {
        let mut text = String::new();
        if let Some(pid) = self.pid {
            text.push_str(&format!("pid={pid}\n"));
        }
        if let Some(program) = &self.program {
            text.push_str(&format!("program={}\n", one_line(program)));
        }
        if let Some(api) = &self.api {
            text.push_str(&format!("api={}\n", one_line(api)));
        }
        text
    }

    /// Reads what it can; unknown or malformed lines are ignored.
    fn parse(text: &str) -> LockHolder {
        let mut holder = LockHolder::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match key.trim() {
                "pid" => holder.pid = value.parse().ok(),
                "program" => holder.program = Some(value.to_string()),
                "api" => holder.api = Some(value.to_string()),
                _ => {}
            }
        }
        holder
    }
}

impl fmt::Display for LockHolder {
    /// `corral up (pid 1234, API at 127.0.0.1:7443)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.program.as_deref().unwrap_or("another process"))?;
        match (self.pid, &self.api) {
            (Some(pid), Some(api)) => write!(f, " (pid {pid}, API at {api})"),
            (Some(pid), None) => write!(f, " (pid {pid})"),
            (None, Some(api)) => write!(f, " (API at {api})"),
            (None, None) => Ok(()),
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// `corral up`: the program's file name and its subcommand (the first argument that is not
/// an option), as far as they can be told.
fn program_name() -> Option<String> {
    let mut args = std::env::args_os();
    let argv0 = args.next()?;
    let name = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())?;
    match args.next().map(|a| a.to_string_lossy().into_owned()) {
        Some(sub) if !sub.starts_with('-') && !sub.contains('/') => Some(format!("{name} {sub}")),
        _ => Some(name),
    }
}

/// Who holds `data_dir` now, without taking it: `Ok(None)` when no process does.
pub fn holder(data_dir: &Path) -> std::io::Result<Option<LockHolder>> {
    let path = data_dir.join(LOCK_FILE);
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        // Nobody holds it; our shared lock goes with the file.
        Ok(()) => Ok(None),
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            file.read_to_string(&mut text)?;
            Ok(Some(LockHolder::parse(&text)))
        }
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Why a data directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another open store holds it.
    Held { holder: LockHolder },
    /// The lock file could not be opened or locked.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The held lock of one data directory; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

impl DirLock {
    /// Takes the lock of `data_dir` without waiting, and records this process as its holder.
    pub fn acquire(data_dir: &Path) -> Result<DirLock, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |error| LockError::Io {
            path: path.clone(),
            error,
        };
        // Not truncated on open: the holder's description must survive a refused open.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                // What the holder wrote; a holder that cannot be described is still a holder.
                let holder = match file.read_to_string(&mut text) {
                    Ok(_) => LockHolder::parse(&text),
                    Err(_) => LockHolder::default(),
                };
                return Err(LockError::Held { holder });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let lock = DirLock {
            file,
            path: path.clone(),
        };
        lock.write_holder(&LockHolder::this_process()).map_err(io)?;
        Ok(lock)
    }

    /// Adds the API address to the holder's description.
    pub fn announce_address(&self, addr: &str) -> std::io::Result<()> {
        self.write_holder(&LockHolder {
            api: Some(addr.to_string()),
            ..LockHolder::this_process()
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites the description in place: the new text over the old, then the file cut to
    /// its length, so that a reader never sees an empty file once the holder has written.
    fn write_holder(&self, holder: &LockHolder) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let text = holder.to_text();
        self.file.write_all_at(text.as_bytes(), 0)?;
        self.file
            .set_len(u64::try_from(text.len()).unwrap_or(u64::MAX))?;
        (&self.file).flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_text_round_trips_and_tolerates_junk() {
        let h = LockHolder {
            pid: Some(1234),
            program: Some("corral up".into()),
            api: Some("127.0.0.1:7443".into()),
        };
        assert_eq!(LockHolder::parse(&h.to_text()), h);
        assert_eq!(h.to_string(), "corral up (pid 1234, API at 127.0.0.1:7443)");
        let junk = LockHolder::parse("pid=x\nnonsense\nfuture=1\napi=\nprogram=corral up\n");
        assert_eq!(
            junk,
            LockHolder {
                pid: None,
                program: Some("corral up".into()),
                api: None
            }
        );
        assert_eq!(LockHolder::default().to_string(), "another process");
    }
}
