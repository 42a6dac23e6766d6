//! Directories of replicas whose job was deleted: moved aside at once, removed later.
//!
//! A deleted job's replica directories (logs, launch and process records) are of no use
//! once its records are gone, and kept they would fill the disk one job at a time. Removing
//! a directory of large logs can take long, so the control loop only renames it into
//! `<run_dir>/.trash/` (one `rename(2)`, the name is free at once) and a thread of the
//! executor removes it. Whatever a stopped server left in the trash is removed when the
//! next one opens. `.trash` cannot be a replica's name: replica names never start with a
//! dot (`path_component` escapes one).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// The trash directory and the thread that empties it.
#[derive(Debug)]
pub struct Trash {
    /// `None` when it could not be made: then removal happens in place.
    dir: Option<PathBuf>,
    /// `None` when no thread could be started: then removal happens in place.
    remover: Option<mpsc::Sender<PathBuf>>,
    /// Names entries uniquely within this server's life (with its start time and pid).
    next: u64,
    prefix: String,
}

impl Trash {
    /// The trash's name in the run directory.
    pub const DIR: &'static str = ".trash";

    /// Makes `<run_dir>/.trash` and starts the thread that removes what is put there,
    /// beginning with what an earlier server left.
    pub fn open(run_dir: &Path) -> io::Result<Trash> {
        let dir = run_dir.join(Self::DIR);
        fs::create_dir_all(&dir)?;
        let leftovers: Vec<PathBuf> = fs::read_dir(&dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let remover = std::thread::Builder::new()
            .name("corral-trash".into())
            .spawn(move || {
                for path in leftovers.into_iter().chain(rx) {
                    if let Err(e) = remove(&path) {
                        eprintln!("corral: could not remove {}: {e}", path.display());
                    }
                }
            })
            .ok()
            .map(|_| tx);
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Ok(Trash {
            dir: Some(dir),
            remover,
            next: 0,
            prefix: format!("{started}-{}", std::process::id()),
        })
    }

    /// No trash: what is discarded is removed at once, by the caller's thread.
    pub fn in_place() -> Trash {
        Trash {
            dir: None,
            remover: None,
            next: 0,
            prefix: String::new(),
        }
    }

    /// Moves `path` (a directory under the run directory) into the trash, to be removed in
    /// the background. A path that does not exist is nothing to do.
    pub fn discard(&mut self, path: &Path) -> io::Result<()> {
        let Some(dir) = &self.dir else {
            return remove(path);
        };
        self.next += 1;
        let target = dir.join(format!("{}-{}", self.prefix, self.next));
        match fs::rename(path, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        let target = match &self.remover {
            Some(tx) => match tx.send(target) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(target)) => target,
            },
            None => target,
        };
        remove(&target)
    }
}

/// Removes a directory with what it holds, or a file; one already gone is not an error.
fn remove(path: &Path) -> io::Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_until_empty(run: &Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::read_dir(run.join(Trash::DIR)).map_or(0, Iterator::count) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the trash was not emptied"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn discarded_directories_go_and_leftovers_of_an_earlier_server_too() {
        let run = tempfile::tempdir().expect("tempdir");
        // Left by a server that stopped before it emptied its trash.
        let old = run.path().join(Trash::DIR).join("1-1-1/inc");
        fs::create_dir_all(&old).expect("mkdir");
        fs::write(old.join("output.log"), b"old").expect("write");
        let replica = run.path().join("ns.job-worker-0/abcd1234-0.0");
        fs::create_dir_all(&replica).expect("mkdir");
        fs::write(replica.join("output.log"), vec![b'x'; 1 << 20]).expect("write");

        let mut trash = Trash::open(run.path()).expect("open");
        trash.discard(&replica).expect("discard");
        assert!(!replica.exists(), "the name is free at once");
        trash
            .discard(&run.path().join("never-was"))
            .expect("a missing directory is nothing to do");
        wait_until_empty(run.path());
        assert!(
            run.path().join("ns.job-worker-0").exists(),
            "only what was given"
        );
    }
}
