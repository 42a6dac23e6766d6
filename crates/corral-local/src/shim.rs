//! The shim: a tiny supervisor between the executor and every replica process.
//!
//! The executor starts each replica as `<shim program> <args prefix...> <replica dir>` (in
//! production `corral shim <replica dir>`, the same binary as the server). The shim
//!
//! 1. is the leader of the replica's process group (the executor spawns it with
//!    `process_group(0)`; run by hand, it makes its own group);
//! 2. reads `<dir>/launch.json`; makes the replica's cgroup with its limits and its
//!    TMPDIR: this setup runs in the shims, in parallel for a gang, not in the server's
//!    control loop, and a failure fails the replica with the reason before its command
//!    runs;
//! 3. spawns the real command in the replica's cgroup (the
//!    command, and everything it starts, is limited and accounted; the shim itself is not,
//!    so its own work never waits on the replica's CPU quota), with the launch env and
//!    working directory, stdin from /dev/null, stdout and stderr into one pipe that it
//!    copies into the size-capped `<dir>/output.log`;
//! 4. forwards SIGTERM (from anyone but itself) to the whole group;
//! 5. waits for the command; when it has exited, SIGKILLs whatever else is left in the group
//!    and the cgroup (no orphans), and writes `<dir>/exit.json` atomically: exit code or
//!    signal, and whether the cgroup recorded an OOM kill.
//!
//! A standby shim (`corral shim --standby`, see [`crate::executor::standby`]) is started
//! before its replica exists and reads the replica directory from stdin; then it is the same.
//!
//! Because the shim outlives a crash of the server and writes the exit status to a file, the
//! executor learns how a replica ended whether the replica is its own child or was re-adopted
//! after a restart.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use signal_hook::consts::SIGTERM;
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;

use crate::executor::files::{
    self, COMMAND_PID_FILE, EXIT_FILE, ExitRecord, LAUNCH_FILE, LOG_FILE, LaunchFile, RECORD_FILE,
    RotatingLog,
};
use crate::executor::standby::STANDBY_ARG;
use crate::executor::{ProcessRecord, procfs};

/// How long the shim waits for the output pipe to drain after the command exited.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Entry point of `corral shim <replica dir>`: `args` are the arguments after the
/// subcommand (exactly one, the replica directory). Returns the process exit code: the
/// command's code, 128 + signal when it was killed, 125 when the shim itself failed.
pub fn run<I, S>(args: I) -> i32
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: corral shim <replica dir> | corral shim {STANDBY_ARG}");
        return 2;
    };
    let dir = if dir == STANDBY_ARG {
        // A standby shim: the directory comes on stdin, whole once the server closes the
        // pipe; nothing at all means the server went away (or no longer needs this one).
        use std::os::unix::ffi::OsStringExt;
        let mut bytes = Vec::new();
        if std::io::stdin().lock().read_to_end(&mut bytes).is_err() || bytes.is_empty() {
            return 0;
        }
        PathBuf::from(OsString::from_vec(bytes))
    } else {
        PathBuf::from(dir)
    };
    match supervise(&dir) {
        Ok(code) => code,
        Err(message) => {
            // The replica's log is where its user looks; stderr is for a shim run by hand.
            eprintln!("corral shim: {message}");
            append_to_log(&dir, &message);
            let rec = ExitRecord {
                code: Some(125),
                signal: None,
                oom_killed: false,
                error: Some(message),
                setup_failed: false,
                // The shim could not get as far as running the command.
                start_failed: true,
                written_by: "shim".into(),
                finished_at_ms: files::now_ms(),
            };
            if let Err(e) = files::write_json_atomic(&dir.join(EXIT_FILE), &rec) {
                eprintln!("corral shim: writing {}: {e}", EXIT_FILE);
            }
            125
        }
    }
}

/// Best effort: a `corral:` line in the replica's log (where the launch file would put it).
fn append_to_log(dir: &Path, message: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(LOG_FILE))
    {
        let _ = writeln!(f, "corral: {message}");
    }
}

fn supervise(dir: &Path) -> Result<i32, String> {
    let me = std::process::id();
    let pgid = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
    if pgid != me {
        rustix::process::setpgid(None, None).map_err(|e| format!("setpgid: {e}"))?;
    }
    let launch: LaunchFile = files::read_json(&dir.join(LAUNCH_FILE))
        .map_err(|e| format!("reading {LAUNCH_FILE}: {e}"))?
        .ok_or_else(|| format!("{} has no {LAUNCH_FILE}", dir.display()))?;
    if let Some(gate) = &launch.start_gate {
        crate::executor::StartGate::wait(gate);
    }
    let tenant = launch.run_as.is_some()
        || launch
            .python
            .as_ref()
            .is_some_and(|p| p.tenant_gid.is_some());
    if tenant {
        // What the shim makes for a tenant (its log, its Python environment) must be
        // readable by its group whatever umask the server runs with; its directories gate
        // who else may reach them.
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    }
    let mut log = RotatingLog::open(&launch.log_path, launch.log_limit_bytes)
        .map_err(|e| format!("opening {}: {e}", launch.log_path.display()))?;
    // The replica's own TMPDIR (and, for a tenant, its HOME): a tenant's own, the only
    // places in its directory it may write.
    let tmp = dir.join(crate::executor::TMP_DIR);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    // Its job's scratch (TMPDIR; a tenant's private /tmp and /dev/shm), shared by the
    // job's replicas: whichever shim comes first makes it.
    if let Some(scratch) = &launch.scratch {
        crate::executor::scratch::make(scratch, launch.run_as)
            .map_err(|e| format!("making the job's scratch {}: {e}", scratch.tmp.display()))?;
    }
    if let Some(who) = launch.run_as {
        let home = dir.join(crate::executor::HOME_DIR);
        std::fs::create_dir_all(&home).map_err(|e| format!("creating {}: {e}", home.display()))?;
        for d in [&tmp, &home] {
            crate::tenancy::set_owner_mode(d, who.uid, who.gid, 0o700)
                .map_err(|e| format!("giving {} to uid {}: {e}", d.display(), who.uid))?;
        }
    }

    // Before the command exists, so that no SIGTERM can be lost. One that comes before the
    // command is in the group reaches nobody when forwarded: the flag keeps it.
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGTERM])
        .map_err(|e| format!("installing the SIGTERM handler: {e}"))?;
    let signal_handle = signals.handle();
    let stop_requested = Arc::new(AtomicBool::new(false));
    let forwarder = {
        let stop_requested = Arc::clone(&stop_requested);
        std::thread::spawn(move || {
            for info in signals.forever() {
                let from_self = info.process.is_some_and(|p| p.pid as u32 == me);
                if !from_self {
                    stop_requested.store(true, Ordering::SeqCst);
                    let _ = procfs::signal_group(me, rustix::process::Signal::TERM);
                }
            }
        })
    };

    // The command joins the replica's cgroup, not the shim: what the shim does (start,
    // copy the log, write the exit) must not spend the replica's CPU quota, which at 10m
    // (1 ms per 100 ms) held back every start by a whole period. The cgroups' process
    // lists are opened now and written by the command's process itself between fork and
    // exec (see `join_in_child`), so the command and all it starts are limited.
    // A container's cgroup is made by its runtime below the replica's; the runtime's
    // client stays out.
    // The executor named the cgroup; the shim makes it, so that a gang's replicas make
    // theirs in parallel. A container's runtime puts its own cgroup below it.
    if let Some(cg) = &launch.cgroup {
        cg.create(&launch.cgroup_limits)
            .map_err(|e| format!("making the replica cgroup: {e}"))?;
    }
    let joined = launch
        .cgroup
        .as_ref()
        .filter(|_| launch.container.is_none());
    let cgroup_procs: Vec<std::fs::File> = match joined {
        Some(cg) => cg
            .self_join_files()
            .into_iter()
            .map(|f| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&f)
                    .map_err(|e| format!("joining the replica cgroup ({}): {e}", f.display()))
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    // The process record, before the command runs: if the server was killed between the
    // spawn and its own write, a restart still finds this replica (the executor writes the
    // same record; whichever rename comes last wins, with the same content).
    if let Some(draft) = &launch.record
        && !dir.join(RECORD_FILE).exists()
        && let Some(stat) = procfs::stat(me)
    {
        let record = ProcessRecord {
            name: draft.name.clone(),
            job: draft.job.clone(),
            incarnation: draft.incarnation.clone(),
            pid: me,
            start_time: stat.start_time,
            dir: dir.to_path_buf(),
            cgroup: launch.cgroup.clone(),
            gpu_indices: draft.gpu_indices.clone(),
            container: launch.container.clone(),
        };
        files::write_json_atomic(&dir.join(RECORD_FILE), &record)
            .map_err(|e| format!("writing {RECORD_FILE}: {e}"))?;
    }

    let Some((program, args)) = launch.command.split_first() else {
        return Err("the command is empty".into());
    };
    let mut env = launch.env.clone();
    if let Some(py) = &launch.python {
        let built = crate::executor::python::prepare(py, &mut |bytes| {
            let _ = log.write(bytes);
        });
        match built {
            Ok(dir) => crate::executor::python::activate(&mut env, &dir),
            Err(_) if stop_requested.load(Ordering::SeqCst) => {
                let _ = log.write(b"corral: stopped while the python environment was built\n");
                signal_handle.close();
                let _ = forwarder.join();
                finish(dir, &launch, None, Some(SIGTERM), None)?;
                return Ok(128 + SIGTERM);
            }
            Err(crate::executor::python::BuildError::Resolve(message)) => {
                let _ = log.write(format!("corral: {message}\n").as_bytes());
                signal_handle.close();
                let _ = forwarder.join();
                let rec = ExitRecord {
                    code: Some(125),
                    signal: None,
                    oom_killed: false,
                    error: Some(message),
                    setup_failed: true,
                    start_failed: false,
                    written_by: "shim".into(),
                    finished_at_ms: files::now_ms(),
                };
                files::write_json_atomic(&dir.join(EXIT_FILE), &rec)
                    .map_err(|e| format!("writing {EXIT_FILE}: {e}"))?;
                return Ok(125);
            }
            Err(crate::executor::python::BuildError::Io(message)) => return Err(message),
        }
    }
    if stop_requested.load(Ordering::SeqCst) {
        // Stopped before it started: the command never runs.
        let _ = log.write(b"corral: stopped before the command started\n");
        signal_handle.close();
        let _ = forwarder.join();
        finish(dir, &launch, None, Some(SIGTERM), None)?;
        return Ok(128 + SIGTERM);
    }
    let (reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
    let writer2 = writer.try_clone().map_err(|e| format!("pipe: {e}"))?;
    let mut cmd = Command::new(program);
    // Nothing of the server's environment, which the shim inherited, reaches the command.
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2);
    // A tenant's command enters its working directory as the tenant (see `join_in_child`):
    // one its uid may not enter fails its start, as it would on its own.
    let tenant_wd = match (&launch.run_as, &launch.working_dir) {
        (Some(_), Some(wd)) => Some(
            std::ffi::CString::new(wd.as_os_str().as_encoded_bytes())
                .map_err(|_| format!("the working directory {} has a NUL", wd.display()))?,
        ),
        (None, Some(wd)) => {
            cmd.current_dir(wd);
            None
        }
        _ => None,
    };
    let mounts = match &launch.scratch {
        Some(scratch) => {
            let (mounts, notes) = crate::executor::scratch::private_mounts(
                scratch,
                dir,
                launch.working_dir.as_deref(),
                program,
            );
            for note in notes {
                let _ = log.write(format!("corral: {note}\n").as_bytes());
            }
            mounts
        }
        None => Default::default(),
    };
    join_in_child(&mut cmd, cgroup_procs, mounts, launch.run_as, tenant_wd);
    let spawned = cmd.spawn();
    drop(cmd); // closes our copies of the pipe's write end

    let mut child = match spawned {
        Ok(child) => {
            // A stop that came while the command was being spawned may have been forwarded
            // to a group it was not in yet; it is in it now.
            if stop_requested.load(Ordering::SeqCst) {
                let _ = procfs::signal_group(me, rustix::process::Signal::TERM);
            }
            // Not fatal: without it `exec` says the replica is still preparing.
            let _ = std::fs::write(dir.join(COMMAND_PID_FILE), child.id().to_string());
            child
        }
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 125,
            };
            // A missing working directory fails the spawn with the same error as a missing
            // program: say which one it is.
            let message = match &launch.working_dir {
                Some(wd) if !wd.is_dir() => format!(
                    "cannot run {program:?}: the working directory {} does not exist \
                     (template.workingDir; a relative one is relative to the server's)",
                    wd.display()
                ),
                Some(wd) if launch.run_as.is_some() && code == 126 => {
                    format!(
                        "cannot run {program:?} as the job's user (uid {}): {e} (the program, \
                         or the working directory {}, is not open to it)",
                        launch.run_as.map_or(0, |w| w.uid),
                        wd.display()
                    )
                }
                _ => format!("cannot run {program:?}: {e}"),
            };
            // A tenant gets the file or directory in its way, and what would open it.
            let message = match launch.run_as.filter(|_| matches!(code, 126 | 127)) {
                Some(who) => {
                    let tenant_path = env
                        .iter()
                        .find(|(k, _)| k == "PATH")
                        .map_or("", |(_, v)| v.as_str());
                    let server_path = std::env::var("PATH").unwrap_or_default();
                    match crate::tenancy::closed_to_tenant(
                        program,
                        launch.working_dir.as_deref(),
                        tenant_path,
                        &server_path,
                        who.uid,
                        who.gid,
                    ) {
                        Some(why) => format!(
                            "cannot run {program:?} as its namespace's user (uid {}, gid {}): \
                             {why}",
                            who.uid, who.gid
                        ),
                        None => message,
                    }
                }
                None => message,
            };
            let _ = log.write(format!("corral: {message}\n").as_bytes());
            signal_handle.close();
            let _ = forwarder.join();
            finish(dir, &launch, Some(code), None, Some(message))?;
            return Ok(code);
        }
    };

    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut reader = reader;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Err(e) = log.write(&buf[..n]) {
                        eprintln!("corral shim: writing the log: {e}");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done_tx.send(());
    });

    let status = child
        .wait()
        .map_err(|e| format!("waiting for the command: {e}"))?;

    // The replica is over when its command is: nothing it started may outlive it. The
    // cgroup holds everything the command started, including processes that left the group
    // (setsid), and listing it is cheap; without one, the group is found by scanning /proc.
    match joined {
        Some(cg) => cg.kill_all(Some(me)),
        None => {
            procfs::kill_group_except(me, me);
        }
    }
    let _ = done_rx.recv_timeout(DRAIN_TIMEOUT);
    signal_handle.close();
    let _ = forwarder.join();

    finish(dir, &launch, status.code(), status.signal(), None)?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 125,
    })
}

/// Makes the command's process move itself into the replica's cgroups before it execs:
/// writing "0" to `tasks` (v1) or `cgroup.procs` (v2) moves the writer (see
/// `CgroupRef::self_join_files`). It enters a mount namespace of its own with its job's
/// `/tmp` and `/dev/shm` (see [`crate::executor::scratch`]), while it is still root. Then,
/// for a tenant, it becomes the tenant for good: no
/// supplementary groups, its gid, its uid (real, effective and saved: root's capabilities
/// go), no new privileges through setuid programs, and it enters its working directory as
/// the tenant. The cgroup is joined first, while the process may still write there.
/// Between fork and exec only async-signal-safe calls are allowed: the files are already
/// open, the directory's name already made, and raw system calls allocate nothing.
/// (The files close at exec: std opens them close-on-exec.)
fn join_in_child(
    cmd: &mut Command,
    cgroup_procs: Vec<std::fs::File>,
    mounts: crate::executor::scratch::PrivateMounts,
    run_as: Option<crate::executor::RunAs>,
    working_dir: Option<std::ffi::CString>,
) {
    use rustix::process::{Gid, Uid};
    use std::os::unix::process::CommandExt;
    if cgroup_procs.is_empty() && mounts.is_empty() && run_as.is_none() {
        return;
    }
    // SAFETY: the closure only makes system calls on descriptors and strings made before
    // the fork and converts their error codes; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            for f in &cgroup_procs {
                rustix::io::write(f, b"0").map_err(std::io::Error::from)?;
            }
            mounts.enter();
            if let Some(who) = run_as {
                rustix::thread::set_thread_groups(&[])?;
                rustix::thread::set_thread_gid(Gid::from_raw(who.gid))?;
                rustix::thread::set_thread_uid(Uid::from_raw(who.uid))?;
                rustix::thread::set_no_new_privs(true)?;
                if let Some(wd) = &working_dir {
                    rustix::process::chdir(wd.as_c_str())?;
                }
            }
            Ok(())
        });
    }
}

/// Where the runtime does not report an OOM kill (podman with runc on cgroup v1) and the
/// kernel counted it only in the container's own cgroup, gone with the container: the
/// container was SIGKILLed (its client exits 137) after its cgroup, below the replica's,
/// reached its memory limit. Only a kill from inside the container at that moment would
/// read the same; Corral's own stops do not reach the limit.
fn killed_at_its_memory_limit(
    c: &crate::executor::container::ContainerHandle,
    launch: &LaunchFile,
    code: Option<i32>,
    signal: Option<i32>,
) -> bool {
    let killed = code == Some(137) || signal == Some(9);
    match (c.memory_limit, &launch.cgroup) {
        (Some(limit), Some(cg)) if killed => cg.peak_memory_bytes().is_some_and(|p| p >= limit),
        _ => false,
    }
}

/// How the replica ended. `error`: why the command could not be started at all (then the
/// start failed); a container whose runtime's client exited 125 to 127 before the
/// container ever ran (an image it cannot pull, an option it refuses, a command the image
/// lacks) failed to start too, in the runtime's words: the last lines of the log.
fn finish(
    dir: &Path,
    launch: &LaunchFile,
    code: Option<i32>,
    signal: Option<i32>,
    error: Option<String>,
) -> Result<(), String> {
    let mut error = error;
    let mut start_failed = error.is_some();
    // cgroup v2 counts OOM kills of child cgroups too (a container's, below the replica's).
    let mut oom_killed = launch.cgroup.as_ref().is_some_and(|cg| cg.oom_kills() > 0);
    // A container is asked how it ended, then removed: nothing of a replica outlives it.
    if let Some(c) = &launch.container {
        if error.is_none() && matches!(code, Some(125..=127)) && c.never_started() {
            start_failed = true;
            error = Some(last_words(&launch.log_path).unwrap_or_else(|| {
                format!(
                    "{} exited {} before the container started",
                    c.kind.as_str(),
                    code.unwrap_or_default()
                )
            }));
        }
        oom_killed |= c.oom_killed() || killed_at_its_memory_limit(c, launch, code, signal);
        if !c.remove() {
            eprintln!("corral shim: removing container {} failed", c.name);
        }
        if let Some(cg) = &launch.cgroup {
            // Best effort: the executor removes what is left when it retires the cgroup.
            let _ = cg.remove_runtime_dirs();
        }
    }
    let rec = ExitRecord {
        code,
        signal,
        oom_killed,
        error,
        setup_failed: false,
        start_failed,
        written_by: "shim".into(),
        finished_at_ms: files::now_ms(),
    };
    files::write_json_atomic(&dir.join(EXIT_FILE), &rec)
        .map_err(|e| format!("writing {EXIT_FILE}: {e}"))
}

/// What a container runtime said last, from the end of the replica's log: from its last
/// line that starts with `Error` (podman's and docker's form) to the end, else the last
/// line; at most 1,000 characters. `None` for an empty log.
fn last_words(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 8 * 1024;
    let mut f = std::fs::File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let from = lines
        .iter()
        .rposition(|l| l.starts_with("Error"))
        .unwrap_or(lines.len().checked_sub(1)?);
    let words = lines[from..].join(" ");
    Some(match words.char_indices().nth(1000) {
        Some((i, _)) => format!("{}...", &words[..i]),
        None => words,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime's last words: from its last `Error` line on, else the last line.
    #[test]
    fn the_last_words_of_a_log_are_the_runtime_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join(LOG_FILE);
        assert_eq!(last_words(&log), None);
        std::fs::write(
            &log,
            "Trying to pull localhost/nope:1...\n\
             time=\"...\" level=warning msg=\"Failed, retrying in 1s ... (1/3)\"\n\
             Error: initializing source docker://localhost/nope:1: connection refused\n\n",
        )
        .expect("write");
        assert_eq!(
            last_words(&log).as_deref(),
            Some("Error: initializing source docker://localhost/nope:1: connection refused")
        );
        std::fs::write(&log, "one\ntwo\n").expect("write");
        assert_eq!(last_words(&log).as_deref(), Some("two"));
        std::fs::write(&log, "\n\n").expect("write");
        assert_eq!(last_words(&log), None);
    }
    use crate::cgroup::{CgroupLimits, CgroupRef};

    /// The shim makes the cgroup the executor named; when it cannot, the replica fails
    /// with the reason and its command never runs.
    #[test]
    fn a_cgroup_the_shim_cannot_make_fails_the_replica_before_its_command() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("replica");
        std::fs::create_dir_all(&dir).expect("dir");
        let marker = tmp.path().join("ran");
        let launch = LaunchFile {
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("touch {}", marker.display()),
            ],
            env: vec![],
            working_dir: None,
            log_path: dir.join(LOG_FILE),
            log_limit_bytes: 4096,
            // Below a directory that does not exist: mkdir fails.
            cgroup: Some(CgroupRef::V2 {
                dir: tmp.path().join("no-such-hierarchy").join("replica"),
            }),
            cgroup_limits: CgroupLimits {
                memory_bytes: Some(64 << 20),
                cpu_milli: None,
            },
            record: None,
            container: None,
            python: None,
            start_gate: None,
            run_as: None,
            scratch: None,
        };
        files::write_json(&dir.join(LAUNCH_FILE), &launch).expect("launch file");
        assert_eq!(run([dir.as_os_str()]), 125);
        let exit: ExitRecord = files::read_json(&dir.join(EXIT_FILE))
            .expect("exit file")
            .expect("an exit file");
        let error = exit.error.unwrap_or_default();
        assert!(error.contains("making the replica cgroup"), "{error}");
        assert!(error.contains("no-such-hierarchy"), "{error}");
        assert!(!marker.exists(), "the command ran without its cgroup");
        let log = std::fs::read_to_string(dir.join(LOG_FILE)).unwrap_or_default();
        assert!(log.contains("making the replica cgroup"), "{log}");
    }
}
