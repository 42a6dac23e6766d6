//! The files of one replica directory, shared by the executor and the shim:
//! `launch.json` (what the shim runs), `exit.json` (how it ended), `record.json` (the
//! executor's [`ProcessRecord`](super::ProcessRecord)), and the size-capped `output.log`
//! (stdout and stderr interleaved, rotated once into `output.log.1`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::log_times::{LogTimes, rotated_path};
use crate::cgroup::{CgroupLimits, CgroupRef};

pub const LAUNCH_FILE: &str = "launch.json";
pub const EXIT_FILE: &str = "exit.json";
pub const RECORD_FILE: &str = "record.json";
pub const LOG_FILE: &str = "output.log";
/// The pid of the replica's command once it runs (after its Python environment is built):
/// what `exec` enters (see `crate::exec`).
pub const COMMAND_PID_FILE: &str = "command.pid";

/// What the shim runs: written by the executor before it spawns the shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchFile {
    /// Program and arguments.
    pub command: Vec<String>,
    /// The command's whole environment: the shim passes on nothing it inherited.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    pub log_path: PathBuf,
    pub log_limit_bytes: u64,
    /// The cgroup the shim makes, with `cgroup_limits`, and has the command join.
    pub cgroup: Option<CgroupRef>,
    #[serde(default)]
    pub cgroup_limits: CgroupLimits,
    /// What the shim needs to write the replica's process record itself, before the
    /// command runs (so that a server killed between the spawn and its own write still
    /// finds the replica on restart): name, job, incarnation and GPUs of the replica.
    #[serde(default)]
    pub record: Option<RecordDraft>,
    /// The container the command runs (it is the runtime's client): the shim asks the
    /// runtime whether it was OOM-killed and removes it once the command has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<super::container::ContainerHandle>,
    /// The Python environment the shim builds (or reuses) before the command runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<super::python::PythonLaunch>,
    /// The executor's start gate (see [`StartGate`](super::StartGate)): the shim waits
    /// until no gang is being spawned before it does its own setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_gate: Option<PathBuf>,
    /// The tenant's identity: the shim makes `home/` and `tmp/` its own and drops to it
    /// before the command runs (a container's runtime client stays root and runs the
    /// container as it, `--user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<super::RunAs>,
    /// The job's scratch directories (its TMPDIR, and for a tenant its private `/tmp` and
    /// `/dev/shm`), which the shim makes; none in a container (the image has its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<super::scratch::Scratch>,
}

/// The parts of a [`super::ProcessRecord`] known before the shim runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordDraft {
    pub name: String,
    pub job: String,
    pub incarnation: String,
    pub gpu_indices: Vec<u32>,
}

/// How a replica ended: written atomically by the shim (or by the executor when it had to
/// SIGKILL the shim itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// Exit code, when the command exited.
    pub code: Option<i32>,
    /// Signal number, when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Whether the replica's cgroup recorded an OOM kill.
    pub oom_killed: bool,
    /// Why the command could not be run at all (then `code` is 127 or 126).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the replica needs before its command could not be made (its Python
    /// environment): `error` says why; retrying would not help.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub setup_failed: bool,
    /// The command never ran: the shim could not start it (a program that does not exist,
    /// a working directory that does not, a cgroup it could not make) or, in a container,
    /// the runtime could not (an image it cannot pull, an option it refuses: its client
    /// exited 125 before the container started). `error` says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_failed: bool,
    /// Who wrote the record: "shim" or "executor".
    pub written_by: String,
    /// Milliseconds since the Unix epoch.
    pub finished_at_ms: u64,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Writes `value` as JSON to `path` in place: a reader may see it half-written, so only
/// for a file nobody reads before this has returned.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    // One write: serde_json writes token by token, a system call each on a bare file.
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode_0600()
        .open(path)?
        .write_all(&bytes)
}

/// Writes `value` as JSON to `path` atomically: a temporary file, then a rename, so a
/// reader sees the old file or the whole new one, never a torn one.
///
/// No fsync, the same threat model as the store (see `store.rs`): what must survive is a
/// crash of the server or the shim, and the kernel's page cache holds the file through
/// that. A power loss also ends every replica, so a record lost with it describes a
/// process that no longer exists; recovery then goes by the store. Two fsyncs (file and
/// directory) per write cost ~6 ms here, 4 writes per replica start: 100 ms for a job of 8.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    write_json(&tmp, value)?;
    fs::rename(&tmp, path)
}

/// Reads a JSON file; `Ok(None)` when it does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// An append-only log capped at `limit` bytes in all: two segments of `limit / 2`, the
/// current one and `<path>.1`, so the newest output is always kept.
pub struct RotatingLog {
    path: PathBuf,
    segment: u64,
    file: File,
    written: u64,
    /// When each part arrived (`<path>.times`), for `corral logs --timestamps`.
    times: LogTimes,
}

impl RotatingLog {
    pub fn open(path: &Path, limit: u64) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let written = file.metadata()?.len();
        let before = fs::metadata(rotated_path(path)).map_or(0, |m| m.len());
        Ok(RotatingLog {
            path: path.to_path_buf(),
            segment: (limit / 2).max(1),
            file,
            written,
            times: LogTimes::open(path, before + written)?,
        })
    }

    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            // The times file counts against the segment too, so both stay within the cap.
            if self.written >= self.segment || self.times.written() >= self.segment {
                self.rotate()?;
            }
            let room = (self.segment - self.written) as usize;
            let n = room.min(data.len());
            self.file.write_all(&data[..n])?;
            self.written += n as u64;
            self.times.record(n, now_ms())?;
            data = &data[n..];
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        fs::rename(&self.path, rotated_path(&self.path))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.written = 0;
        self.times.rotate()
    }
}

/// The last `max_bytes` of a replica's output, across the rotated segment and the current one.
pub fn read_log_tail(log: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    for path in [rotated_path(log), log.to_path_buf()] {
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut out)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let skip = out.len().saturating_sub(max_bytes as usize);
    out.drain(..skip);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::log_times::{timed_lines, times_path};
    use super::*;
    use std::io::{Seek, SeekFrom};

    fn file_len(path: &Path) -> u64 {
        File::open(path)
            .and_then(|mut f| f.seek(SeekFrom::End(0)))
            .unwrap_or(0)
    }

    #[test]
    fn log_rotates_and_keeps_the_newest_output_within_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(LOG_FILE);
        let mut log = RotatingLog::open(&path, 100).expect("open");
        for i in 0..100u32 {
            log.write(format!("line {i:03}\n").as_bytes())
                .expect("write");
        }
        let total = file_len(&path) + file_len(&rotated_path(&path));
        assert!(total <= 100, "{total}");
        let tail = read_log_tail(&path, 1000).expect("tail");
        let text = String::from_utf8_lossy(&tail);
        assert!(text.ends_with("line 099\n"), "{text}");
    }

    #[test]
    fn json_round_trips_atomically() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(EXIT_FILE);
        let rec = ExitRecord {
            code: Some(3),
            signal: None,
            oom_killed: false,
            error: None,
            setup_failed: false,
            start_failed: false,
            written_by: "shim".into(),
            finished_at_ms: 1,
        };
        write_json_atomic(&path, &rec).expect("write");
        let back: Option<ExitRecord> = read_json(&path).expect("read");
        assert_eq!(back, Some(rec));
        let none: Option<ExitRecord> = read_json(&dir.path().join("nope")).expect("read");
        assert!(none.is_none());
    }

    #[test]
    fn lines_get_the_time_their_first_byte_arrived_across_rotations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("output.log");
        let mut log = RotatingLog::open(&path, 60).expect("open");
        for i in 0..10u32 {
            log.write(format!("line {i}\n").as_bytes()).expect("write");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let lines = timed_lines(&path).expect("read");
        let text: Vec<String> = lines
            .iter()
            .map(|l| String::from_utf8_lossy(&l.text).into_owned())
            .collect();
        // Rotation kept the newest lines, whole, in order.
        assert_eq!(
            text.last().map(String::as_str),
            Some("line 9\n"),
            "{text:?}"
        );
        let times: Vec<u64> = lines.iter().map(|l| l.unix_ms.expect("timed")).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        assert!(times_path(&path).exists() && times_path(&rotated_path(&path)).exists());
    }
}
