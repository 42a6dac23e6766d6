//! When each part of a replica's output arrived, so that `corral logs --timestamps` and
//! `--since` work on output that carries no times of its own (as the container runtime
//! records them for `kubectl logs`).
//!
//! Beside each log segment, `<log>.times` holds lines `<offset> <unix ms>`: the bytes of
//! the output stream from `offset` on (counted from the replica's first byte, across
//! rotations) arrived at that millisecond or later. A line is written only when the
//! millisecond changed, and always for the first bytes of a segment, so the file's first
//! offset is where its segment starts. The times file rotates with its log segment (and
//! makes it rotate when it would outgrow it), so both stay within the log's cap.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The previous segment of a rotated log. Here and not beside the log's writer
/// (`files::RotatingLog`): that uses this module, not the reverse.
pub fn rotated_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".1");
    PathBuf::from(s)
}

/// The times file of a log segment.
pub fn times_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".times");
    PathBuf::from(s)
}

/// Writes the times of one log (owned by its [`super::files::RotatingLog`]).
pub(crate) struct LogTimes {
    log: PathBuf,
    path: PathBuf,
    file: File,
    /// Stream offset of the next byte.
    offset: u64,
    last_ms: Option<u64>,
    /// Bytes in the current times file.
    written: u64,
}

impl LogTimes {
    pub(crate) fn open(log: &Path, offset: u64) -> io::Result<Self> {
        let path = times_path(log);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let written = file.metadata()?.len();
        Ok(LogTimes {
            log: log.to_path_buf(),
            path,
            file,
            offset,
            last_ms: None,
            written,
        })
    }

    /// `n` bytes of output were written just now, at `now` (Unix milliseconds).
    pub(crate) fn record(&mut self, n: usize, now: u64) -> io::Result<()> {
        if self.last_ms != Some(now) {
            let line = format!("{} {now}\n", self.offset);
            self.file.write_all(line.as_bytes())?;
            self.written += line.len() as u64;
            self.last_ms = Some(now);
        }
        self.offset += n as u64;
        Ok(())
    }

    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// The log rotated: its times go with it, and the new segment starts a new file.
    pub(crate) fn rotate(&mut self) -> io::Result<()> {
        fs::rename(&self.path, times_path(&rotated_path(&self.log)))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.written = 0;
        self.last_ms = None;
        Ok(())
    }
}

/// One line of output with the time it arrived (none for output written before times were
/// kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedLine {
    pub unix_ms: Option<u64>,
    /// The line with its newline (the last may have none).
    pub text: Vec<u8>,
}

/// A whole log (rotated segment, then the current one), line by line, with times.
pub fn timed_lines(log: &Path) -> io::Result<Vec<TimedLine>> {
    let mut out = Vec::new();
    for segment in [rotated_path(log), log.to_path_buf()] {
        let bytes = match fs::read(&segment) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let times = read_times(&times_path(&segment))?;
        // The segment starts at its first recorded offset.
        let start = times.first().map_or(0, |t| t.0);
        let mut at = 0usize;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let offset = start + at as u64;
            let i = times.partition_point(|t| t.0 <= offset);
            out.push(TimedLine {
                unix_ms: i.checked_sub(1).map(|i| times[i].1),
                text: line.to_vec(),
            });
            at += line.len();
        }
    }
    Ok(out)
}

fn read_times(path: &Path) -> io::Result<Vec<(u64, u64)>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    // A line cut short by a crash is skipped.
    Ok(text
        .lines()
        .filter_map(|l| {
            let (o, t) = l.split_once(' ')?;
            Some((o.parse().ok()?, t.parse().ok()?))
        })
        .collect())
}
