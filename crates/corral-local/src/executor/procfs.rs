//! Reading `/proc` and sending signals: the few process facts the executor and the shim need.

use std::fs;
use std::path::Path;

use rustix::process::{Pid, Signal};

/// What `/proc/<pid>/stat` says about one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// One letter: R, S, D, Z (zombie), T, X, ...
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    /// utime + stime + cutime + cstime, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, in clock ticks (field 22). With the pid it names one process
    /// for the life of the machine: a recycled pid has a later start time.
    pub start_time: u64,
    /// Resident set, in pages.
    pub rss_pages: u64,
}

impl ProcStat {
    /// Whether the process has finished (zombie or being torn down).
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name may hold spaces and parentheses,
/// so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid: u32 = text.get(..open)?.trim().parse().ok()?;
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let num =
        |i: usize| -> Option<u64> { rest.get(i)?.parse::<i64>().ok().map(|v| v.max(0) as u64) };
    Some(ProcStat {
        pid,
        state: rest.first()?.chars().next()?,
        ppid: num(1)? as u32,
        pgrp: num(2)? as u32,
        cpu_ticks: num(11)? + num(12)? + num(13)? + num(14)?,
        start_time: num(19)?,
        rss_pages: num(21)?,
    })
}

/// `/proc/<pid>/stat` of one process, or `None` when there is no such process.
pub fn stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Every process visible in `/proc` (those that vanish while we read are skipped).
pub fn all() -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// Live (not zombie) members of process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<ProcStat> {
    all()
        .into_iter()
        .filter(|s| s.pgrp == pgid && !s.is_dead())
        .collect()
}

/// Whether `pid` is alive and is the process that started at `start_time` (not a recycled
/// pid, not a zombie).
pub fn is_same_alive(pid: u32, start_time: u64) -> bool {
    matches!(stat(pid), Some(s) if s.start_time == start_time && !s.is_dead())
}

pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

fn pid_of(pid: u32) -> Option<Pid> {
    Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Sends `signal` to one process. Errors (no such process, ...) are returned, not panicked.
pub fn signal_process(pid: u32, signal: Signal) -> std::io::Result<()> {
    let pid = pid_of(pid).ok_or_else(|| std::io::Error::other("invalid pid"))?;
    rustix::process::kill_process(pid, signal).map_err(Into::into)
}

/// Sends `signal` to every process of group `pgid`.
pub fn signal_group(pgid: u32, signal: Signal) -> std::io::Result<()> {
    let pid = pid_of(pgid).ok_or_else(|| std::io::Error::other("invalid pgid"))?;
    rustix::process::kill_process_group(pid, signal).map_err(Into::into)
}

/// Sends SIGKILL to every live member of group `pgid` except `except`, until none is left
/// (members may fork while we kill). Returns how many kills were sent.
pub fn kill_group_except(pgid: u32, except: u32) -> usize {
    let mut sent = 0;
    for _ in 0..100 {
        let members: Vec<u32> = group_members(pgid)
            .into_iter()
            .map(|s| s.pid)
            .filter(|&p| p != except)
            .collect();
        if members.is_empty() {
            break;
        }
        for pid in members {
            if signal_process(pid, Signal::KILL).is_ok() {
                sent += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    sent
}

/// The raw number of a signal (as in `kill -l`).
pub fn signal_number(signal: Signal) -> i32 {
    signal.as_raw()
}

/// Reads a small text file, trimmed; `None` when unreadable.
pub fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let text = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 987654 1000000 250 18446744073709551615";
        let s = parse_stat(text).expect("parses");
        assert_eq!(s.pid, 4242);
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.pgrp, 4242);
        assert_eq!(s.cpu_ticks, 13);
        assert_eq!(s.start_time, 987654);
        assert_eq!(s.rss_pages, 250);
    }

    #[test]
    fn own_process_is_alive_and_recycled_start_time_is_not() {
        let me = std::process::id();
        let s = stat(me).expect("own stat");
        assert!(is_same_alive(me, s.start_time));
        assert!(!is_same_alive(me, s.start_time + 1));
    }
}
