//! The local executor with real processes: shim, process groups, logs, exit codes, signals,
//! stop, re-adoption after a simulated server crash, cgroup OOM kills, ports.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_local::executor::{
    CgroupMode, ExecutorConfig, LocalExecutor, ProcessRecord, ProcessState, ReplicaProcessSpec,
    StartGate, discover, procfs,
};
use corral_local::ports::PortAllocator;

use common::shim;

const TIMEOUT: Duration = Duration::from_secs(30);

fn executor(dir: &Path, cgroup: CgroupMode) -> (LocalExecutor, Vec<String>) {
    let mut config = ExecutorConfig::new(dir.join("run"), shim());
    config.cgroup = cgroup;
    config.log_limit_bytes = 64 * 1024;
    LocalExecutor::new(config).expect("executor")
}

/// An executor whose replicas get cgroups, or `None` (the test is skipped, or fails under
/// CI) where cgroups are not usable.
fn cgroup_executor(dir: &Path) -> Option<LocalExecutor> {
    let (ex, warnings) = executor(dir, CgroupMode::Auto);
    common::prerequisite(
        ex.cgroups_enabled(),
        &format!("cgroups are not usable here: {warnings:?}"),
    )
    .then_some(ex)
}

fn spec(name: &str, script: &str) -> ReplicaProcessSpec {
    ReplicaProcessSpec {
        name: name.into(),
        job: "default/test".into(),
        incarnation: "1".into(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

/// Polls until `name` reaches a terminal state (or panics after TIMEOUT).
fn wait_terminal(ex: &mut LocalExecutor, name: &str) -> ProcessState {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        ex.poll(Instant::now());
        if let Some(s) = ex.state(name)
            && s.is_terminal()
        {
            return s;
        }
        assert!(Instant::now() < deadline, "{name} did not end in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_text(ex: &LocalExecutor, name: &str) -> String {
    String::from_utf8_lossy(&ex.read_log_tail(name, 1 << 20).expect("log")).into_owned()
}

fn executor_runs_with_env_working_dir_and_logs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    let wd = tmp.path().join("work");
    std::fs::create_dir_all(&wd).expect("mkdir");
    let mut s = spec(
        "envjob-worker-0",
        "echo \"rank=$RANK cuda=$CUDA_VISIBLE_DEVICES pwd=$(pwd)\"; cat \"$HOSTFILE\"; echo err >&2",
    );
    s.working_dir = Some(wd.clone());
    s.gpu_indices = vec![1, 2];
    s.files = vec![(PathBuf::from("hostfile"), "localhost slots=2\n".into())];
    let dir = ex.replica_dir("envjob-worker-0", "1");
    s.env = vec![
        ("RANK".into(), "3".into()),
        (
            "HOSTFILE".into(),
            dir.join("hostfile").display().to_string(),
        ),
    ];
    let rec = ex.start(&s).expect("start");
    assert_eq!(rec.dir, dir);
    assert_eq!(
        wait_terminal(&mut ex, "envjob-worker-0"),
        ProcessState::Exited { code: 0 }
    );
    let log = log_text(&ex, "envjob-worker-0");
    assert!(
        log.contains(&format!("rank=3 cuda=1,2 pwd={}", wd.display())),
        "{log}"
    );
    assert!(
        log.contains("localhost slots=2"),
        "files are written first: {log}"
    );
    assert!(log.contains("err"), "stderr goes to the log too: {log}");
}

fn executor_log_is_capped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    // ~1 MB of output against a 64 KiB cap.
    ex.start(&spec(
        "chatty-worker-0",
        "i=0; while [ $i -lt 20000 ]; do echo \"line $i of a chatty replica ......\"; i=$((i+1)); done; echo LAST",
    ))
    .expect("start");
    assert_eq!(
        wait_terminal(&mut ex, "chatty-worker-0"),
        ProcessState::Exited { code: 0 }
    );
    let path = ex.log_path("chatty-worker-0").expect("log path");
    let rotated = corral_local::executor::rotated_path(&path);
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert!(
        size(&path) + size(&rotated) <= 64 * 1024,
        "log over its cap"
    );
    assert!(
        log_text(&ex, "chatty-worker-0").ends_with("LAST\n"),
        "newest output kept"
    );
}

fn executor_reports_exit_codes_signals_and_missing_programs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    ex.start(&spec("code-worker-0", "exit 7")).expect("start");
    ex.start(&spec("sig-worker-0", "kill -9 $$"))
        .expect("start");
    let mut missing = spec("missing-worker-0", "");
    missing.command = vec!["/nonexistent/program".into()];
    ex.start(&missing).expect("start");
    assert_eq!(
        wait_terminal(&mut ex, "code-worker-0"),
        ProcessState::Exited { code: 7 }
    );
    assert_eq!(
        wait_terminal(&mut ex, "sig-worker-0"),
        ProcessState::Signaled { signal: 9 }
    );
    assert_eq!(
        wait_terminal(&mut ex, "missing-worker-0"),
        ProcessState::StartFailed { code: 127 }
    );
    assert!(log_text(&ex, "missing-worker-0").contains("cannot run"));
    // A missing working directory is named as such, not as a missing program.
    let mut nowhere = spec("nowhere-worker-0", "exit 0");
    nowhere.working_dir = Some(tmp.path().join("no-such-dir"));
    ex.start(&nowhere).expect("start");
    assert_eq!(
        wait_terminal(&mut ex, "nowhere-worker-0"),
        ProcessState::StartFailed { code: 127 }
    );
    let log = log_text(&ex, "nowhere-worker-0");
    assert!(
        log.contains("working directory") && log.contains("no-such-dir"),
        "{log}"
    );
    // The same incarnation never starts twice.
    assert!(ex.start(&spec("code-worker-0", "exit 0")).is_err());
}

fn executor_poll_reports_each_change_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    ex.start(&spec("once-worker-0", "exit 0")).expect("start");
    let mut seen = Vec::new();
    wait_for("the exit", || {
        seen.extend(ex.poll(Instant::now()));
        !seen.is_empty()
    });
    assert_eq!(
        seen,
        vec![(
            "once-worker-0".to_string(),
            ProcessState::Exited { code: 0 }
        )]
    );
    assert!(ex.poll(Instant::now()).is_empty());
}

/// A deleted job's files: only its own incarnations go (a later job of the same name keeps
/// its own, a running one stays), and the replica's directory goes with the last of them.
fn discarded_files_are_the_jobs_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    let name = "default.reused-worker-0";
    let incarnation = |label: &str, script: &str| ReplicaProcessSpec {
        incarnation: label.into(),
        ..spec(name, script)
    };
    ex.start(&incarnation("aaaa-0.0", "exit 0")).expect("start");
    wait_terminal(&mut ex, name);
    ex.start(&incarnation("bbbb-0.0", "exit 0")).expect("start");
    wait_terminal(&mut ex, name);
    let (a, b) = (
        ex.replica_dir(name, "aaaa-0.0"),
        ex.replica_dir(name, "bbbb-0.0"),
    );
    let parent = a.parent().map(Path::to_path_buf).expect("parent");
    assert!(a.is_dir() && b.is_dir());

    ex.discard_files(name, "aaaa").expect("discard");
    assert!(!a.exists(), "the deleted job's incarnation is gone");
    assert!(b.is_dir(), "the other job's incarnation is kept");

    ex.start(&incarnation("bbbb-1.0", "sleep 30"))
        .expect("start");
    let running = ex.replica_dir(name, "bbbb-1.0");
    ex.discard_files(name, "bbbb").expect("discard");
    assert!(!b.exists(), "a finished incarnation goes");
    assert!(running.is_dir(), "the running incarnation stays");

    ex.stop(name, Duration::from_secs(1)).expect("stop");
    wait_terminal(&mut ex, name);
    ex.discard_files(name, "bbbb").expect("discard");
    assert!(
        !parent.exists(),
        "the replica's directory goes with its last incarnation"
    );
    let trash = tmp.path().join("run").join(".trash");
    wait_for("the trash to be emptied", || {
        std::fs::read_dir(&trash).map_or(0, Iterator::count) == 0
    });
}

/// A gang starts on one thread or several alike: one result per spec, in order, a bad spec
/// (a name twice, an empty command) refused without stopping the others.
fn executor_start_all_keeps_order_on_any_number_of_threads() {
    for threads in [1, 3] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
        let mut specs: Vec<ReplicaProcessSpec> = (0..6)
            .map(|i| spec(&format!("gang-worker-{i}"), &format!("exit {i}")))
            .collect();
        specs[2].command.clear();
        specs.push(spec("gang-worker-0", "exit 0"));
        let results = ex.start_all_on(&specs, threads);
        assert_eq!(results.len(), specs.len());
        for (i, result) in results.iter().enumerate() {
            match i {
                2 | 6 => assert!(result.is_err(), "{threads} threads: spec {i} started"),
                _ => {
                    let rec = result.as_ref().expect("started");
                    assert_eq!(rec.name, specs[i].name, "{threads} threads: order");
                }
            }
        }
        for i in [0, 1, 3, 4, 5] {
            assert_eq!(
                wait_terminal(&mut ex, &format!("gang-worker-{i}")),
                ProcessState::Exited { code: i },
                "{threads} threads"
            );
        }
    }
}

/// While the control loop starts a gang, the shims already spawned wait at the start gate
/// (a lock on `run/start.gate`) before their own setup; once it opens they go on.
fn shims_wait_at_the_start_gate_while_it_is_closed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, warnings) = executor(tmp.path(), CgroupMode::Disabled);
    assert!(
        warnings.iter().all(|w| !w.contains("start gate")),
        "{warnings:?}"
    );
    let gate = StartGate::close(&tmp.path().join("run").join(StartGate::FILE)).expect("gate");
    let marker = tmp.path().join("ran");
    ex.start(&spec(
        "gated-worker-0",
        &format!("touch {}", marker.display()),
    ))
    .expect("started");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !marker.exists(),
        "the command ran while the start gate was closed"
    );
    drop(gate);
    wait_for("the command after the gate opened", || marker.exists());
    assert_eq!(
        wait_terminal(&mut ex, "gated-worker-0"),
        ProcessState::Exited { code: 0 }
    );
}

fn standby_executor(dir: &Path, standby: usize) -> LocalExecutor {
    let mut config = ExecutorConfig::new(dir.join("run"), shim());
    config.cgroup = CgroupMode::Disabled;
    config.standby_shims = standby;
    let (ex, warnings) = LocalExecutor::new(config).expect("executor");
    assert!(
        warnings.iter().all(|w| !w.contains("standby")),
        "{warnings:?}"
    );
    ex
}

fn wait_standby(ex: &LocalExecutor, n: usize) -> Vec<u32> {
    wait_for(&format!("{n} standby shims"), || {
        ex.standby_pids().len() == n
    });
    ex.standby_pids()
}

/// A replica starts in a standby shim (its record names that process) with the launch's
/// command, env and log, and the pool is filled again with new shims.
fn standby_shims_run_replicas_and_are_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut ex = standby_executor(tmp.path(), 2);
    let before = wait_standby(&ex, 2);
    let mut s = spec("standby-worker-0", "echo \"from $GREETING\"; exit 3");
    s.env = vec![("GREETING".into(), "standby".into())];
    let rec = ex.start(&s).expect("started");
    assert!(
        before.contains(&rec.pid),
        "{} is not one of {before:?}",
        rec.pid
    );
    let on_disk: ProcessRecord =
        serde_json::from_slice(&std::fs::read(rec.dir.join("record.json")).expect("record.json"))
            .expect("record");
    assert_eq!((on_disk.pid, on_disk.start_time), (rec.pid, rec.start_time));
    assert_eq!(
        wait_terminal(&mut ex, "standby-worker-0"),
        ProcessState::Exited { code: 3 }
    );
    assert!(log_text(&ex, "standby-worker-0").contains("from standby"));
    let after = wait_standby(&ex, 2);
    assert!(
        !after.contains(&rec.pid),
        "the used shim is back in the pool"
    );
}

/// Standby shims that died while idle are not handed a replica: the start still runs it.
fn a_dead_standby_shim_is_not_used() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut ex = standby_executor(tmp.path(), 2);
    let dead = wait_standby(&ex, 2);
    for pid in &dead {
        procfs::signal_group(*pid, rustix::process::Signal::KILL).expect("kill");
    }
    wait_for("the killed standby shims to die", || {
        dead.iter()
            .all(|p| procfs::stat(*p).is_none_or(|s| s.state == 'Z'))
    });
    let rec = ex.start(&spec("after-dead-0", "exit 0")).expect("started");
    assert!(!dead.contains(&rec.pid), "a dead standby shim was used");
    assert_eq!(
        wait_terminal(&mut ex, "after-dead-0"),
        ProcessState::Exited { code: 0 }
    );
}

/// Idle standby shims end with their executor (and with a server that dies: their pipe
/// closes either way).
fn standby_shims_end_with_their_executor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ex = standby_executor(tmp.path(), 3);
    let pids = wait_standby(&ex, 3);
    drop(ex);
    wait_for("the standby shims to end", || {
        pids.iter().all(|p| procfs::stat(*p).is_none())
    });
}

/// Live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    procfs::all()
        .into_iter()
        .filter(|s| !s.is_dead())
        .filter(|s| {
            std::fs::read(format!("/proc/{}/cmdline", s.pid))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .map(|s| s.pid)
        .collect()
}

fn executor_stop_kills_the_whole_group_without_orphans() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    // The main process and its background grandchild ignore SIGTERM: only the SIGKILL of the
    // group after the grace period ends them.
    let marker = format!("1000.{}", std::process::id());
    ex.start(&spec(
        "stubborn-worker-0",
        &format!("trap '' TERM; sleep {marker} & wait; wait"),
    ))
    .expect("start");
    wait_for("the grandchild", || !processes_with(&marker).is_empty());
    let started = Instant::now();
    ex.stop("stubborn-worker-0", Duration::from_millis(300))
        .expect("stop");
    let state = wait_terminal(&mut ex, "stubborn-worker-0");
    assert_eq!(state, ProcessState::Signaled { signal: 9 });
    assert!(started.elapsed() >= Duration::from_millis(300));
    wait_for("no orphans", || processes_with(&marker).is_empty());

    // A polite replica ends on SIGTERM, its background child with it.
    let marker2 = format!("1001.{}", std::process::id());
    ex.start(&spec("polite-worker-0", &format!("sleep {marker2} & wait")))
        .expect("start");
    wait_for("the grandchild", || !processes_with(&marker2).is_empty());
    ex.stop("polite-worker-0", Duration::from_secs(20))
        .expect("stop");
    let state = wait_terminal(&mut ex, "polite-worker-0");
    assert_eq!(state, ProcessState::Signaled { signal: 15 });
    wait_for("no orphans", || processes_with(&marker2).is_empty());
}

fn executor_leftovers_die_with_the_main_process() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    let marker = format!("1002.{}", std::process::id());
    ex.start(&spec("leaky-worker-0", &format!("sleep {marker} & exit 0")))
        .expect("start");
    assert_eq!(
        wait_terminal(&mut ex, "leaky-worker-0"),
        ProcessState::Exited { code: 0 }
    );
    wait_for("no orphans", || processes_with(&marker).is_empty());
}

/// When the shim itself fails, the replica's log says why (its user reads the log, not the
/// shim's stderr) and the exit file records code 125 with the message.
fn shim_failures_are_in_the_replica_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("replica");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let shim = shim();
    let status = std::process::Command::new(&shim.program)
        .args(&shim.args_prefix)
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run the shim");
    assert_eq!(status.code(), Some(125));
    let log = std::fs::read_to_string(dir.join("output.log")).expect("the log");
    assert!(
        log.starts_with("corral: ") && log.contains("has no launch.json"),
        "{log}"
    );
    let exit = std::fs::read_to_string(dir.join("exit.json")).expect("the exit file");
    assert!(
        exit.contains("\"code\": 125") && exit.contains("launch.json"),
        "{exit}"
    );
}

/// A stop that reaches the shim before its command runs (the shim is still starting, joining
/// its cgroup) is not lost: the replica ends at once, not when the grace period is over.
fn executor_stop_right_after_start_is_not_lost() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Auto);
    let delays_us = [0u64, 200, 500, 1000, 2000, 3000, 5000, 8000, 12000, 20000];
    for (i, delay) in delays_us.iter().enumerate() {
        let name = format!("early-worker-{i}");
        ex.start(&spec(&name, "exec sleep 60")).expect("start");
        std::thread::sleep(Duration::from_micros(*delay));
        ex.stop(&name, Duration::from_secs(120)).expect("stop");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for (i, delay) in delays_us.iter().enumerate() {
        let name = format!("early-worker-{i}");
        loop {
            ex.poll(Instant::now());
            match ex.state(&name) {
                Some(s) if s.is_terminal() => {
                    assert_eq!(s, ProcessState::Signaled { signal: 15 }, "{name}");
                    break;
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "{name} (stopped {delay} us after its start) still runs: the SIGTERM was lost"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// With a cgroup the shim finds leftovers through it, so even one that left the process
/// group (setsid) dies with the main process.
fn executor_leftovers_in_the_cgroup_die_even_outside_the_group() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(mut ex) = cgroup_executor(tmp.path()) else {
        return;
    };
    let in_group = format!("1003.{}", std::process::id());
    let own_session = format!("1004.{}", std::process::id());
    ex.start(&spec(
        "leaky-worker-0",
        &format!("sleep {in_group} & setsid sleep {own_session} & exit 0"),
    ))
    .expect("start");
    assert_eq!(
        wait_terminal(&mut ex, "leaky-worker-0"),
        ProcessState::Exited { code: 0 }
    );
    wait_for("no orphans", || {
        processes_with(&in_group).is_empty() && processes_with(&own_session).is_empty()
    });
}

/// The command runs in the replica's cgroup and the shim does not: the shim's own work
/// (start, log, exit) never spends the replica's CPU quota.
fn the_command_is_in_the_cgroup_and_the_shim_is_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(mut ex) = cgroup_executor(tmp.path()) else {
        return;
    };
    let marker = format!("1005.{}", std::process::id());
    let mut s = spec("quota-worker-0", &format!("exec sleep {marker}"));
    s.cpu_milli = Some(10);
    let rec = ex.start(&s).expect("start");
    let cg = rec.cgroup.clone().expect("a cgroup");
    wait_for("the command in the cgroup", || {
        processes_with(&marker)
            .iter()
            .any(|pid| cg.procs().contains(pid))
    });
    assert!(
        !cg.procs().contains(&rec.pid),
        "the shim {} is in the replica's cgroup: {:?}",
        rec.pid,
        cg.procs()
    );
    ex.stop("quota-worker-0", std::time::Duration::ZERO)
        .expect("stop");
    wait_terminal(&mut ex, "quota-worker-0");
}

fn executor_adopts_an_incarnation_started_by_a_server_that_died_before_recording_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    let flag = tmp.path().join("go");
    let s = spec(
        "unrecorded-worker-0",
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; exit 3",
            flag.display()
        ),
    );
    let first = ex.start(&s).expect("start");
    // The shim writes its own record before the command runs.
    wait_for("the shim's record", || {
        std::fs::read_to_string(first.dir.join("record.json")).is_ok_and(|t| t.contains("pid"))
    });
    // The server dies right after the spawn; the next one is asked to start the same
    // incarnation again and adopts the one that runs instead of starting it twice.
    drop(ex);
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    let again = ex.start_all(std::slice::from_ref(&s));
    let adopted = again[0].as_ref().expect("adopted, not refused");
    assert_eq!(adopted.pid, first.pid);
    assert_eq!(ex.state("unrecorded-worker-0"), Some(ProcessState::Running));
    std::fs::write(&flag, "").expect("flag");
    assert_eq!(
        wait_terminal(&mut ex, "unrecorded-worker-0"),
        ProcessState::Exited { code: 3 }
    );
}

fn executor_adopts_replicas_after_a_crash() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Auto);
    let flag = tmp.path().join("go");
    let running = ex
        .start(&spec("survivor-worker-0", "echo before; sleep 1000"))
        .expect("start");
    let quitter = ex
        .start(&spec(
            "quitter-worker-0",
            &format!(
                "while [ ! -e {} ]; do sleep 0.05; done; exit 4",
                flag.display()
            ),
        ))
        .expect("start");
    let mut stored: Vec<ProcessRecord> = vec![running.clone(), quitter.clone()];
    // The server dies: nobody watches the replicas any more.
    drop(ex);
    std::fs::write(&flag, "").expect("flag");
    wait_for("the exit file", || quitter.exit_path().exists());

    let (mut ex, _) = executor(tmp.path(), CgroupMode::Auto);
    stored.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(discover(&tmp.path().join("run")), stored);
    assert_eq!(ex.adopt(running.clone()), ProcessState::Running);
    assert_eq!(ex.adopt(quitter.clone()), ProcessState::Exited { code: 4 });
    // Adopting again does not track it twice.
    assert_eq!(ex.adopt(running.clone()), ProcessState::Running);
    assert!(ex.poll(Instant::now()).is_empty());
    wait_for("the log", || {
        log_text(&ex, "survivor-worker-0").contains("before")
    });
    assert!(ex.usage("survivor-worker-0").is_some());

    // The adopted replica is stopped like our own, and its exit is learnt from the shim.
    ex.stop("survivor-worker-0", Duration::from_secs(20))
        .expect("stop");
    assert_eq!(
        wait_terminal(&mut ex, "survivor-worker-0"),
        ProcessState::Signaled { signal: 15 }
    );
}

fn executor_does_not_adopt_a_recycled_pid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ex, _) = executor(tmp.path(), CgroupMode::Disabled);
    let mut ex = ex;
    let rec = ex
        .start(&spec("victim-worker-0", "sleep 1000"))
        .expect("start");
    drop(ex);
    // Same pid, another start time: some other process now owns that pid.
    let mut recycled = rec.clone();
    recycled.start_time += 1;
    recycled.dir = tmp.path().join("elsewhere");
    let other = tempfile::tempdir().expect("tempdir");
    let (mut ex2, _) = executor(other.path(), CgroupMode::Disabled);
    assert_eq!(ex2.adopt(recycled), ProcessState::Gone);
    // The real replica was not touched by that, and is still adoptable.
    assert!(procfs::is_same_alive(rec.pid, rec.start_time));
    let (mut ex3, _) = executor(tmp.path(), CgroupMode::Disabled);
    // Not adopted yet: another incarnation of the same replica must not start.
    let mut again = spec("victim-worker-0", "sleep 1000");
    again.incarnation = "2".into();
    assert!(ex3.start(&again).is_err(), "would run twice");
    assert_eq!(ex3.adopt(rec), ProcessState::Running);
    ex3.stop("victim-worker-0", Duration::ZERO).expect("stop");
    assert_eq!(
        wait_terminal(&mut ex3, "victim-worker-0"),
        ProcessState::Signaled { signal: 9 }
    );
}

fn executor_memory_hog_is_oom_killed_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let Some(mut ex) = cgroup_executor(tmp.path()) else {
        return;
    };
    if !common::prerequisite(common::python3_available(), "python3 is not installed") {
        return;
    }
    let mut hog = spec("hog-worker-0", "");
    hog.command = vec![
        "python3".into(),
        "-c".into(),
        "import time\nchunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n    time.sleep(0.001)\n".into(),
    ];
    hog.memory_bytes = Some(96 << 20);
    let mut sibling = spec("calm-worker-0", "sleep 1000");
    sibling.memory_bytes = Some(96 << 20);
    sibling.cpu_milli = Some(500);
    ex.start(&sibling).expect("start sibling");
    ex.start(&hog).expect("start hog");
    assert_eq!(
        wait_terminal(&mut ex, "hog-worker-0"),
        ProcessState::OomKilled
    );
    ex.poll(Instant::now());
    assert_eq!(ex.state("calm-worker-0"), Some(ProcessState::Running));
    let usage = ex.usage("calm-worker-0").expect("usage");
    assert!(usage.memory_bytes < 96 << 20);
    let cgroup_dirs: Vec<PathBuf> = ["hog-worker-0", "calm-worker-0"]
        .iter()
        .flat_map(|name| {
            let rec = ex.record(name).expect("record");
            let cg = rec.cgroup.as_ref().expect("a cgroup");
            cg.dirs()
                .into_iter()
                .map(Path::to_path_buf)
                .collect::<Vec<_>>()
        })
        .collect();
    ex.stop("calm-worker-0", Duration::from_secs(10))
        .expect("stop");
    assert!(wait_terminal(&mut ex, "calm-worker-0").is_terminal());
    // Ended replicas' cgroups go, on a later sweep if the shim was still exiting.
    wait_for("the cgroups of ended replicas to be removed", || {
        ex.poll(Instant::now());
        ex.remove_retired_cgroups();
        cgroup_dirs.iter().all(|d| !d.exists())
    });
}

fn executor_reports_cpu_usage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut ex, _) = executor(tmp.path(), CgroupMode::Auto);
    let mut s = spec("busy-worker-0", "while :; do :; done");
    s.cpu_milli = Some(2000);
    ex.start(&s).expect("start");
    wait_for("some CPU time", || {
        ex.usage("busy-worker-0")
            .is_some_and(|u| u.cpu_seconds > 0.05 && u.memory_bytes > 0)
    });
    ex.stop("busy-worker-0", Duration::from_secs(10))
        .expect("stop");
    assert_eq!(
        wait_terminal(&mut ex, "busy-worker-0"),
        ProcessState::Signaled { signal: 15 }
    );
}

fn executor_ports_are_never_given_twice() {
    let mut ports = PortAllocator::new(42100..42120);
    let a = ports.allocate("job-a", 8).expect("a");
    let b = ports.allocate("job-b", 8).expect("b");
    let mut all: Vec<u16> = a.iter().chain(&b).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 16, "distinct ports");
    // A port somebody else listens on is skipped.
    let listener = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("bind");
    let busy = listener.local_addr().expect("addr").port();
    let mut around = PortAllocator::new(busy..busy.saturating_add(1));
    assert!(around.allocate("x", 1).is_err());
    // Only 4 left in the range: all or nothing.
    assert!(ports.allocate("job-c", 5).is_err());
    assert_eq!(ports.release("job-a").len(), 8);
    let c = ports.allocate("job-c", 5).expect("c");
    assert_eq!(c.len(), 5);
    assert!(c.iter().all(|p| !b.contains(p)));
}

fn main() -> std::process::ExitCode {
    common::main(vec![
        (
            "executor_runs_with_env_working_dir_and_logs",
            executor_runs_with_env_working_dir_and_logs,
        ),
        ("executor_log_is_capped", executor_log_is_capped),
        (
            "executor_reports_exit_codes_signals_and_missing_programs",
            executor_reports_exit_codes_signals_and_missing_programs,
        ),
        (
            "executor_poll_reports_each_change_once",
            executor_poll_reports_each_change_once,
        ),
        (
            "discarded_files_are_the_jobs_own",
            discarded_files_are_the_jobs_own,
        ),
        (
            "executor_start_all_keeps_order_on_any_number_of_threads",
            executor_start_all_keeps_order_on_any_number_of_threads,
        ),
        (
            "shims_wait_at_the_start_gate_while_it_is_closed",
            shims_wait_at_the_start_gate_while_it_is_closed,
        ),
        (
            "standby_shims_run_replicas_and_are_replaced",
            standby_shims_run_replicas_and_are_replaced,
        ),
        (
            "a_dead_standby_shim_is_not_used",
            a_dead_standby_shim_is_not_used,
        ),
        (
            "standby_shims_end_with_their_executor",
            standby_shims_end_with_their_executor,
        ),
        (
            "executor_stop_kills_the_whole_group_without_orphans",
            executor_stop_kills_the_whole_group_without_orphans,
        ),
        (
            "executor_leftovers_die_with_the_main_process",
            executor_leftovers_die_with_the_main_process,
        ),
        (
            "shim_failures_are_in_the_replica_log",
            shim_failures_are_in_the_replica_log,
        ),
        (
            "executor_stop_right_after_start_is_not_lost",
            executor_stop_right_after_start_is_not_lost,
        ),
        (
            "executor_leftovers_in_the_cgroup_die_even_outside_the_group",
            executor_leftovers_in_the_cgroup_die_even_outside_the_group,
        ),
        (
            "the_command_is_in_the_cgroup_and_the_shim_is_not",
            the_command_is_in_the_cgroup_and_the_shim_is_not,
        ),
        (
            "executor_adopts_replicas_after_a_crash",
            executor_adopts_replicas_after_a_crash,
        ),
        (
            "executor_adopts_an_incarnation_started_by_a_server_that_died_before_recording_it",
            executor_adopts_an_incarnation_started_by_a_server_that_died_before_recording_it,
        ),
        (
            "executor_does_not_adopt_a_recycled_pid",
            executor_does_not_adopt_a_recycled_pid,
        ),
        (
            "executor_memory_hog_is_oom_killed_alone",
            executor_memory_hog_is_oom_killed_alone,
        ),
        ("executor_reports_cpu_usage", executor_reports_cpu_usage),
        (
            "executor_ports_are_never_given_twice",
            executor_ports_are_never_given_twice,
        ),
    ])
}
