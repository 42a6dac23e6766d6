//! The embedded cluster end to end with real processes: submit, tick, restart by policy,
//! no shared ports or GPUs, crash recovery (drop without cleanup, then open), delete, and
//! refused submissions. Every wait is bounded by a deadline; the cluster's clock is the
//! test's own, moved forward a second per pass so that restart back-offs pass quickly.

#[path = "cluster_e2e/artifacts.rs"]
mod artifacts;
mod common;
#[path = "cluster_e2e/progress.rs"]
mod progress;
#[path = "cluster_e2e/story.rs"]
mod story;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{Harness, Waits, retry_while_in_use, state};
use corral_local::cluster::JobState;
use corral_local::executor::procfs;
use corral_local::{Cluster, ClusterError};

const WAITS: Waits = Waits {
    deadline: Duration::from_secs(60),
    pause: Duration::from_millis(25),
};

fn alive(pid: u32) -> bool {
    procfs::stat(pid).is_some_and(|s| !s.is_dead())
}

fn job(name: &str, count: u32, extra: &str, script: &str) -> String {
    format!(
        r#"apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  framework: generic
  replicas:
    worker:
      count: {count}
{extra}      template:
        command: [/bin/sh, -c, '{script}']
"#
    )
}

fn four_replica_generic_job_succeeds() {
    let (mut h, mut c) = Harness::new(WAITS, 31000, "");
    let out = c
        .submit(
            &job(
                "four",
                4,
                "",
                "echo replica=$CORRAL_REPLICA incarnation=$CORRAL_INCARNATION",
            ),
            "default",
            h.now,
        )
        .expect("submit");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].name, "four");
    assert_eq!(state(&c, "four"), Some(JobState::Queued));

    let reports = h.until(&mut c, "success", |c| {
        state(c, "four") == Some(JobState::Succeeded)
    });
    let started: Vec<&String> = reports.iter().flat_map(|r| &r.started).collect();
    assert_eq!(started.len(), 4, "each replica starts once: {started:?}");
    assert!(reports.iter().any(|r| r.admitted == ["default/four"]));

    let d = c
        .describe("default", "four")
        .expect("describe")
        .expect("job");
    assert_eq!(d.replicas.len(), 4);
    let mut ports = BTreeSet::new();
    for r in &d.replicas {
        assert_eq!(r.phase, "Succeeded", "{r:?}");
        assert!(ports.insert(r.port.expect("port")), "ports are distinct");
        let log = std::fs::read_to_string(r.log_path.as_ref().expect("log")).expect("log");
        assert!(
            log.contains(&format!("replica={} incarnation=0.0", r.name)),
            "{log}"
        );
    }
    let reasons: Vec<&str> = d.events.iter().map(|e| e.reason.as_str()).collect();
    for r in ["Submitted", "Admitted", "Started", "Succeeded"] {
        assert!(reasons.contains(&r), "event {r} in {reasons:?}");
    }
    // The log stays reachable by replica name.
    assert!(c.log_path("default", "four", "worker-0").is_some());
    let m = c.metrics();
    assert_eq!(m.jobs_succeeded_total, 1);
    assert_eq!(m.replica_starts_total, 4);
    // A finished job gives its admission back (queues are listed, so this is not vacuous).
    assert!(!c.queues().is_empty());
    assert!(c.queues().iter().all(|q| q.admitted == 0));
}

fn failing_replica_restarts_and_the_count_is_durable() {
    let (mut h, mut c) = Harness::new(WAITS, 31100, "");
    let marker = h.scratch("failed-once");
    let script = format!(
        "if [ \"$CORRAL_REPLICA\" = flaky-worker-1 ] && [ ! -f {m} ]; then touch {m}; exit 3; fi; sleep 1",
        m = marker.display()
    );
    let policy = "      restartPolicy: OnFailure\n";
    let text = job("flaky", 2, policy, &script)
        .replace("  replicas:", "  runPolicy: {backoffLimit: 3}\n  replicas:");
    c.submit(&text, "default", h.now).expect("submit");
    let reports = h.until(&mut c, "success after a restart", |c| {
        state(c, "flaky") == Some(JobState::Succeeded)
    });
    assert!(marker.exists());
    let starts = reports.iter().flat_map(|r| &r.started).count();
    assert_eq!(starts, 4, "the whole gang restarts once: 2 + 2 starts");
    let status = c
        .get("default", "flaky")
        .expect("get")
        .and_then(|j| j.status)
        .expect("status");
    assert_eq!(status.restart_count, 1);
    assert_eq!(status.attempt, 1);
    let d = c
        .describe("default", "flaky")
        .expect("describe")
        .expect("job");
    assert!(d.events.iter().any(|e| e.reason == "Restarting"));

    // Durable: a new process reading the store sees the same count.
    drop(c);
    let c = h.open();
    let status = c
        .get("default", "flaky")
        .expect("get")
        .and_then(|j| j.status)
        .expect("status");
    assert_eq!(status.restart_count, 1);
    assert_eq!(state(&c, "flaky"), Some(JobState::Succeeded));
}

fn permanent_failure_fails_the_job() {
    let (mut h, mut c) = Harness::new(WAITS, 31150, "");
    c.submit(&job("broken", 1, "", "exit 7"), "default", h.now)
        .expect("submit");
    h.until(&mut c, "failure", |c| {
        state(c, "broken") == Some(JobState::Failed)
    });
    let d = c
        .describe("default", "broken")
        .expect("describe")
        .expect("job");
    assert_eq!(d.replicas[0].exit_code, Some(7));
    assert_eq!(d.replicas[0].message, None, "the command ran");
    assert!(d.events.iter().any(|e| e.reason == "Failed"));
}

/// A command that does not exist is a start that cannot succeed: the job backs off out of
/// its queue with the shim's words (state BackOff, not a restart counted against
/// backoffLimit, not a failure), gives its GPUs back at once to a job that fits only then,
/// and re-enters its queue after the back-off.
fn a_command_that_does_not_exist_backs_off_and_gives_its_gpus_to_another_job() {
    let (mut h, mut c) = Harness::new(WAITS, 31250, "node: {gpus: 2, gpuType: FAKE-GPU}\n");
    let gpus = "      resources: {gpu: 2}\n";
    let missing =
        job("missing", 1, gpus, "x").replace("[/bin/sh, -c, 'x']", "[no-such-program-corral-test]");
    c.submit(&missing, "default", h.now).expect("submit");
    c.submit(&job("next", 1, gpus, "sleep 30"), "default", h.now)
        .expect("submit");
    h.until(&mut c, "missing backs off and next runs", |c| {
        state(c, "missing") == Some(JobState::BackOff)
            && state(c, "next") == Some(JobState::Running)
    });
    let d = c
        .describe("default", "missing")
        .expect("describe")
        .expect("job");
    let status = d.job.status.clone().expect("status");
    assert_eq!(status.start_failures, 1);
    assert_eq!(status.restart_count, 0);
    assert_eq!(status.blocked_by, ["StartBackOff"]);
    assert_eq!(status.gpus, 0);
    assert!(d.admission.is_none(), "the admission was given back");
    let queued = status
        .conditions
        .iter()
        .find(|c| c.type_ == corral_api::training_job::ConditionType::Queued)
        .expect("Queued");
    assert_eq!(queued.reason, "StartBackOff");
    assert!(
        queued.message.contains("cannot run")
            && queued.message.contains("no-such-program-corral-test"),
        "{}",
        queued.message
    );
    let warnings: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason == "StartBackOff")
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", d.events);
    assert!(warnings[0].message.contains("no-such-program-corral-test"));
    assert!(
        !d.events
            .iter()
            .any(|e| e.reason == "FailedStart" || e.reason == "Failed")
    );
    let next = c
        .describe("default", "next")
        .expect("describe")
        .expect("job");
    assert_eq!(next.replicas[0].gpus.len(), 2);

    // After its back-off (10 s on the cluster's clock), it waits in its queue again.
    h.until(&mut c, "missing queued again", |c| {
        state(c, "missing") == Some(JobState::Queued)
    });
    assert_eq!(state(&c, "next"), Some(JobState::Running));
    for name in ["missing", "next"] {
        c.delete("default", name, h.now).expect("delete");
    }
    h.until(&mut c, "all deleted", |c| {
        c.list(None).expect("list").is_empty()
    });
}

fn two_jobs_never_share_a_port_or_a_gpu() {
    let (mut h, mut c) = Harness::new(WAITS, 31200, "node: {gpus: 4, gpuType: FAKE-GPU}\n");
    let gpu = "      resources: {gpu: 1}\n";
    for name in ["left", "right"] {
        c.submit(
            &job(name, 2, gpu, "echo gpus=$CUDA_VISIBLE_DEVICES; sleep 30"),
            "default",
            h.now,
        )
        .expect("submit");
    }
    // A third job cannot fit: 4 GPUs are taken.
    c.submit(&job("third", 1, gpu, "sleep 30"), "default", h.now)
        .expect("submit");
    h.until(&mut c, "both running", |c| {
        state(c, "left") == Some(JobState::Running) && state(c, "right") == Some(JobState::Running)
    });
    let mut gpus = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for name in ["left", "right"] {
        let d = c.describe("default", name).expect("describe").expect("job");
        assert_eq!(d.replicas.len(), 2);
        for r in &d.replicas {
            assert_eq!(r.gpus.len(), 1, "{r:?}");
            assert!(gpus.insert(r.gpus[0]), "GPU {:?} given twice", r.gpus);
            assert!(ports.insert(r.port.expect("port")), "port given twice");
        }
    }
    assert_eq!(gpus, BTreeSet::from([0, 1, 2, 3]));
    assert_eq!(state(&c, "third"), Some(JobState::Queued));
    let why = c
        .describe("default", "third")
        .expect("describe")
        .expect("job")
        .pending_reason
        .expect("a reason in words");
    assert!(why.contains("GPU"), "{why}");
    let node = &c.nodes()[0];
    assert_eq!(node.gpus.iter().filter(|g| g.used_by.is_some()).count(), 4);

    // Deleting one lets the third in, on the freed GPUs.
    c.delete("default", "left", h.now).expect("delete");
    h.until(&mut c, "third running", |c| {
        state(c, "third") == Some(JobState::Running)
    });
    assert_eq!(state(&c, "left"), None);
    for name in ["right", "third"] {
        c.delete("default", name, h.now).expect("delete");
    }
    h.until(&mut c, "all deleted", |c| {
        c.list(None).expect("list").is_empty()
    });
}

fn reopening_after_a_crash_readopts_running_replicas() {
    let (mut h, mut c) = Harness::new(WAITS, 31300, "");
    c.submit(&job("survivor", 2, "", "sleep 60"), "default", h.now)
        .expect("submit");
    h.until(&mut c, "running", |c| {
        state(c, "survivor") == Some(JobState::Running)
    });
    let pids = |c: &Cluster| -> Vec<u32> {
        c.describe("default", "survivor")
            .expect("describe")
            .expect("job")
            .replicas
            .iter()
            .filter_map(|r| r.pid)
            .collect()
    };
    let before = pids(&c);
    assert_eq!(before.len(), 2);

    // kill -9 of the server: no cleanup at all.
    drop(c);
    let mut c = h.open();
    assert_eq!(state(&c, "survivor"), Some(JobState::Running));
    for _ in 0..10 {
        let r = h.tick(&mut c);
        assert!(r.started.is_empty(), "nothing starts twice: {r:?}");
        assert!(r.admitted.is_empty(), "the admission survived: {r:?}");
    }
    assert_eq!(pids(&c), before, "the same processes");
    assert!(before.iter().all(|p| alive(*p)));
    assert_eq!(state(&c, "survivor"), Some(JobState::Running));
    assert_eq!(c.queues().iter().map(|q| q.admitted).sum::<u32>(), 1);

    c.delete("default", "survivor", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "survivor").is_none());
    let deadline = Instant::now() + WAITS.deadline;
    while before.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "replicas outlived their job");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn delete_leaves_no_process_behind() {
    let (mut h, mut c) = Harness::new(WAITS, 31400, "");
    // The replica forks children of its own and ignores SIGTERM.
    let script = "trap \"\" TERM; sleep 120 & sleep 120 & echo $$ > \"$HOME/pid\"; wait";
    c.submit(&job("stubborn", 1, "", script), "default", h.now)
        .expect("submit");
    h.until(&mut c, "running", |c| {
        state(c, "stubborn") == Some(JobState::Running)
    });
    let d = c
        .describe("default", "stubborn")
        .expect("describe")
        .expect("job");
    let shim = d.replicas[0].pid.expect("pid");
    let log_dir = d.replicas[0]
        .log_path
        .clone()
        .expect("log")
        .parent()
        .map(Path::to_path_buf)
        .expect("dir");
    // Wait for the script to record its pid in its HOME: the replica directory, or its
    // `home/` when it runs as its namespace's uid (as root).
    let pid_file = if common::is_root() {
        log_dir.join(corral_local::executor::HOME_DIR).join("pid")
    } else {
        log_dir.join("pid")
    };
    let deadline = Instant::now() + WAITS.deadline;
    while std::fs::read_to_string(&pid_file).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "script did not start");
        h.tick(&mut c);
    }
    let group: Vec<u32> = procfs::group_members(shim).iter().map(|s| s.pid).collect();
    assert!(group.len() >= 3, "shim, shell and two sleeps: {group:?}");

    c.delete("default", "stubborn", h.now).expect("delete");
    assert_eq!(state(&c, "stubborn"), Some(JobState::Deleting));
    h.until(&mut c, "removed", |c| {
        c.get("default", "stubborn").expect("get").is_none()
    });
    let deadline = Instant::now() + WAITS.deadline;
    while group.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "processes left: {group:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
    // Its files go with it (no one can ask for its logs any more): the incarnation's
    // directory at once, into the trash, which a thread empties; the replica's with it.
    assert!(!log_dir.exists(), "the replica's directory is still there");
    assert!(
        log_dir.parent().is_some_and(|p| !p.exists()),
        "the replica's name directory is still there"
    );
    let trash = log_dir
        .parent()
        .and_then(Path::parent)
        .expect("run dir")
        .join(".trash");
    let deadline = Instant::now() + WAITS.deadline;
    while std::fs::read_dir(&trash).map_or(0, Iterator::count) > 0 {
        assert!(Instant::now() < deadline, "the trash was not emptied");
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(matches!(
        c.delete("default", "stubborn", h.now),
        Err(ClusterError::NotFound { .. })
    ));
}

fn invalid_submissions_store_nothing() {
    // No container runtime, whatever this machine has: then an image alone cannot run.
    let (h, mut c) = Harness::new(WAITS, 31500, "containers: {runtime: none}\n");
    let good = job("good", 1, "", "true");
    let bad = job("bad", 1, "      resources: {gpux: 1}\n", "true");
    let err = c
        .submit(&format!("{good}---\n{bad}"), "default", h.now)
        .expect_err("refused");
    let ClusterError::Invalid(problems) = err else {
        panic!("expected field errors, got {err:?}");
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].index, 2);
    assert!(
        problems[0]
            .errors
            .iter()
            .any(|e| e.path.contains("resources.gpux")),
        "{problems:?}"
    );
    assert!(c.list(None).expect("list").is_empty(), "all or nothing");

    // Images alone do not run without a container runtime.
    let image_only = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: img}\n\
                      spec:\n  framework: generic\n  replicas:\n    worker:\n      template: {image: busybox}\n";
    let Err(ClusterError::Invalid(problems)) = c.submit(image_only, "default", h.now) else {
        panic!("an image-only job is refused");
    };
    assert_eq!(
        problems[0].errors[0].path,
        "spec.replicas.worker.template.command"
    );
    // Another namespace than the request's.
    let other = good.replace("{name: good}", "{name: good, namespace: team-b}");
    assert!(matches!(
        c.submit(&other, "default", h.now),
        Err(ClusterError::Invalid(_))
    ));
    // Duplicates: within one request, and against the store.
    assert!(matches!(
        c.submit(&format!("{good}---\n{good}"), "default", h.now),
        Err(ClusterError::Invalid(_))
    ));
    c.submit(&good, "default", h.now).expect("valid");
    assert!(matches!(
        c.submit(&good, "default", h.now),
        Err(ClusterError::AlreadyExists { .. })
    ));
    // The same name in another namespace is another job.
    c.submit(&good, "team-b", h.now).expect("other namespace");
    assert_eq!(c.list(None).expect("list").len(), 2);
}

fn suspend_stops_and_resume_requeues() {
    let (mut h, mut c) = Harness::new(WAITS, 31600, "");
    c.submit(&job("pausable", 1, "", "sleep 60"), "default", h.now)
        .expect("submit");
    h.until(&mut c, "running", |c| {
        state(c, "pausable") == Some(JobState::Running)
    });
    let pid = c
        .describe("default", "pausable")
        .expect("d")
        .expect("job")
        .replicas[0]
        .pid
        .expect("pid");
    c.suspend("default", "pausable", h.now).expect("suspend");
    h.until(&mut c, "suspended and stopped", |c| {
        state(c, "pausable") == Some(JobState::Suspended)
            && !alive(pid)
            && !c.queues().is_empty()
            && c.queues().iter().all(|q| q.admitted == 0)
    });
    c.resume("default", "pausable", h.now).expect("resume");
    h.until(&mut c, "running again", |c| {
        state(c, "pausable") == Some(JobState::Running)
    });
    c.delete("default", "pausable", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "pausable").is_none());
}

fn preemption_stops_the_victim_before_the_preemptor_gets_its_gpus() {
    let classes = "---\napiVersion: corral.dev/v1alpha1\nkind: JobPriorityClass\nmetadata: {name: high}\nspec: {value: 1000}\n\
                   ---\napiVersion: corral.dev/v1alpha1\nkind: JobPriorityClass\nmetadata: {name: low}\nspec: {value: 10}\n";
    let (mut h, mut c) = Harness::new(WAITS, 31700, &format!("node: {{gpus: 2}}\n{classes}"));
    let gpu = "      resources: {gpu: 1}\n";
    let low = job("victim", 2, gpu, "sleep 60")
        .replace("  replicas:", "  priorityClass: low\n  replicas:");
    c.submit(&low, "default", h.now).expect("submit");
    h.until(&mut c, "victim running", |c| {
        state(c, "victim") == Some(JobState::Running)
    });
    let victim_pids: Vec<u32> = c
        .describe("default", "victim")
        .expect("d")
        .expect("job")
        .replicas
        .iter()
        .filter_map(|r| r.pid)
        .collect();
    // Past the scheduler's protection of recently admitted jobs.
    h.now = h
        .now
        .checked_add(jiff::SignedDuration::from_secs(600))
        .expect("time");
    let high = job("urgent", 1, "      resources: {gpu: 2}\n", "sleep 60")
        .replace("  replicas:", "  priorityClass: high\n  replicas:");
    c.submit(&high, "default", h.now).expect("submit");
    let reports = h.until(&mut c, "urgent running", |c| {
        state(c, "urgent") == Some(JobState::Running)
    });
    assert!(reports.iter().any(|r| r.preempted == ["default/victim"]));
    // The preemptor started only once every victim replica had ended (its shim may take a
    // moment longer to exit after writing the exit status).
    let deadline = Instant::now() + WAITS.deadline;
    while victim_pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "victim processes left");
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(state(&c, "victim"), Some(JobState::Queued));
    let status = c
        .get("default", "victim")
        .expect("get")
        .and_then(|j| j.status)
        .expect("status");
    assert_eq!(status.preemption_count, 1);
    assert_eq!(status.restart_count, 0, "preemption is not a failure");
    let d = c.describe("default", "victim").expect("d").expect("job");
    assert!(d.events.iter().any(|e| e.reason == "Preempted"));
    for name in ["urgent", "victim"] {
        c.delete("default", name, h.now).expect("delete");
    }
    h.until(&mut c, "all deleted", |c| {
        c.list(None).expect("list").is_empty()
    });
}

fn a_replica_started_but_not_recorded_is_found_not_started_again() {
    let (mut h, mut c) = Harness::new(WAITS, 31800, "");
    c.submit(&job("orphan", 1, "", "sleep 60"), "default", h.now)
        .expect("submit");
    h.until(&mut c, "running", |c| {
        state(c, "orphan") == Some(JobState::Running)
    });
    let pid = c
        .describe("default", "orphan")
        .expect("d")
        .expect("job")
        .replicas[0]
        .pid
        .expect("pid");
    drop(c);
    // The crash came between the start and the store write: no record of the replica.
    {
        let store = retry_while_in_use(|| corral_local::store::Store::open(&h.config.data_dir));
        for r in store.replicas().expect("replicas") {
            store
                .remove_replica(&r.name, r.attempt, r.retry)
                .expect("remove");
        }
    }
    let (mut c, warnings) = h.open_with_warnings();
    assert!(
        warnings.iter().any(|w| w.contains("found running")),
        "{warnings:?}"
    );
    for _ in 0..5 {
        let r = h.tick(&mut c);
        assert!(r.started.is_empty(), "not started twice: {r:?}");
    }
    let d = c.describe("default", "orphan").expect("d").expect("job");
    assert_eq!(d.replicas.len(), 1);
    assert_eq!(d.replicas[0].pid, Some(pid));
    assert!(alive(pid));
    c.delete("default", "orphan", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "orphan").is_none());
    let deadline = Instant::now() + WAITS.deadline;
    while alive(pid) {
        assert!(Instant::now() < deadline, "replica outlived its job");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn a_job_larger_than_the_machine_is_refused_at_submit() {
    let (h, mut c) = Harness::new(WAITS, 31900, "node: {cpu: '4'}\n");
    let big = job("too-big", 2, "      resources: {cpu: '8'}\n", "true");
    let err = c.submit(&big, "default", h.now).expect_err("refused");
    let ClusterError::Invalid(problems) = &err else {
        panic!("not refused as invalid: {err}");
    };
    let field = &problems[0].errors[0];
    assert_eq!(field.path, "spec.replicas.worker.resources.cpu");
    assert!(
        field
            .message
            .contains("a replica needs 8 CPUs but the largest node")
            && field.message.contains("has 4"),
        "{}",
        field.message
    );
    assert!(c.list(None).expect("list").is_empty(), "nothing is stored");
}

fn the_configured_grace_period_reaches_suspend() {
    // gracePeriodSeconds is 2 (see Harness::new); the replica ignores SIGTERM, so it ends
    // only by SIGKILL when the grace period is over (30 s without the setting).
    let (mut h, mut c) = Harness::new(WAITS, 32000, "");
    let ready = h.scratch("trap-set");
    let script = format!(
        "trap \"\" TERM; touch {}; while true; do sleep 1; done",
        ready.display()
    );
    c.submit(&job("stubborn", 1, "", &script), "default", h.now)
        .expect("submit");
    // Running, and past the point where the shell ignores SIGTERM.
    h.until(&mut c, "running", |c| {
        state(c, "stubborn") == Some(JobState::Running) && ready.exists()
    });
    let pid = c
        .describe("default", "stubborn")
        .expect("d")
        .expect("job")
        .replicas[0]
        .pid
        .expect("pid");
    let asked = Instant::now();
    c.suspend("default", "stubborn", h.now).expect("suspend");
    h.until(&mut c, "suspended", |c| {
        state(c, "stubborn") == Some(JobState::Suspended) && !alive(pid)
    });
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "stopped after {took:?}: SIGTERM was ignored, so only the 2 s grace period ends it"
    );
    c.delete("default", "stubborn", h.now).expect("delete");
    h.until(&mut c, "deleted", |c| state(c, "stubborn").is_none());
}

/// The conformance story (corral_core::control::conformance) with real processes: the same
/// states, admissions and events after every step as the bare control plane.
fn a_replica_started_and_ended_but_not_recorded_is_recorded_not_retried() {
    // The crash came between the start and the store write, and the replica has ended
    // since: its exit is recorded on open, the job is not stuck retrying a start.
    let (mut h, mut c) = Harness::new(WAITS, 32300, "");
    let mark = h.path("finish");
    let script = format!(
        "[ \"$CORRAL_REPLICA\" = ended-worker-0 ] && exit 0; while [ ! -e {} ]; do sleep 0.05; done",
        mark.display()
    );
    let text = job("ended", 2, "      restartPolicy: Never\n", &script);
    c.submit(&text, "default", h.now).expect("submit");
    h.until(&mut c, "worker-0 ended", |c| {
        c.describe("default", "ended")
            .expect("d")
            .expect("job")
            .replicas
            .iter()
            .any(|r| r.index == 0 && r.phase == "Succeeded")
    });
    drop(c);
    {
        let store = retry_while_in_use(|| corral_local::store::Store::open(&h.config.data_dir));
        for r in store.replicas().expect("replicas") {
            if r.index == 0 {
                store
                    .remove_replica(&r.name, r.attempt, r.retry)
                    .expect("remove");
            }
        }
    }
    let (mut c, warnings) = h.open_with_warnings();
    assert!(
        warnings.iter().any(|w| w.contains("found ended")),
        "{warnings:?}"
    );
    for _ in 0..5 {
        let r = h.tick(&mut c);
        assert!(r.started.is_empty() && r.errors.is_empty(), "{r:?}");
    }
    std::fs::write(&mark, "").expect("mark");
    h.until(&mut c, "succeeded", |c| {
        state(c, "ended") == Some(JobState::Succeeded)
    });
    let d = c.describe("default", "ended").expect("d").expect("job");
    assert!(
        !d.events.iter().any(|e| e.reason == "StartBackOff"),
        "{:?}",
        d.events
    );
}

/// Finished jobs cost little and stay what they were: a finished job is kept as a summary
/// (listed, described, its name taken, deletable), across a restart too, where it is
/// handed to the control plane by name only.
fn finished_jobs_are_kept_as_summaries_across_a_restart() {
    let (mut h, mut c) = Harness::new(WAITS, 32400, "");
    for name in ["done-a", "done-b"] {
        c.submit(&job(name, 2, "", "echo hi"), "default", h.now)
            .expect("submit");
    }
    c.submit(&job("live", 1, "", "sleep 30"), "default", h.now)
        .expect("submit live");
    h.until(&mut c, "two jobs done, one running", |c| {
        state(c, "done-a") == Some(JobState::Succeeded)
            && state(c, "done-b") == Some(JobState::Succeeded)
            && state(c, "live") == Some(JobState::Running)
    });
    let before = c.list(Some("default")).expect("list");
    let done = before.iter().find(|j| j.name == "done-a").expect("listed");
    assert_eq!((done.replicas_ready, done.replicas_total), (2, 2));

    // A crash and a reopen: the finished jobs are the same summaries, the running one is
    // re-adopted.
    drop(c);
    let mut c = h.open();
    h.tick(&mut c);
    assert_eq!(c.list(Some("default")).expect("list"), before);
    let details = c
        .describe("default", "done-a")
        .expect("describe")
        .expect("found");
    assert_eq!(details.summary.state, JobState::Succeeded);
    assert_eq!(details.replicas.len(), 2);
    // Its name stays taken; it cannot be suspended.
    let again = c.submit(&job("done-a", 1, "", "true"), "default", h.now);
    assert!(
        matches!(again, Err(ClusterError::AlreadyExists { .. })),
        "{again:?}"
    );
    assert!(c.suspend("default", "done-a", h.now).is_err());

    // A finished job that is kept keeps its logs.
    let dirs_of = |c: &Cluster, name: &str| -> Vec<std::path::PathBuf> {
        c.describe("default", name)
            .expect("describe")
            .expect("found")
            .replicas
            .iter()
            .filter_map(|r| r.log_path.as_ref()?.parent().map(Path::to_path_buf))
            .collect()
    };
    let done_a = dirs_of(&c, "done-a");
    assert_eq!(done_a.len(), 2);
    let log = c.log_path("default", "done-b", "worker-0").expect("a log");
    assert!(std::fs::read_to_string(log).expect("read").contains("hi"));

    // Deleted: removed with its records and its files, and the name is free again.
    c.delete("default", "done-a", h.now).expect("delete");
    h.until(&mut c, "done-a removed", |c| state(c, "done-a").is_none());
    assert!(c.get("default", "done-a").expect("get").is_none());
    for d in &done_a {
        assert!(!d.exists(), "{} is still there", d.display());
    }
    c.submit(&job("done-a", 1, "", "true"), "default", h.now)
        .expect("the name is free");
    h.until(&mut c, "the new done-a succeeded", |c| {
        state(c, "done-a") == Some(JobState::Succeeded)
    });
    assert_eq!(state(&c, "done-b"), Some(JobState::Succeeded));
    assert_eq!(state(&c, "live"), Some(JobState::Running));
    c.delete("default", "live", h.now).expect("delete live");
    h.until(&mut c, "live removed", |c| state(c, "live").is_none());
}

fn main() -> std::process::ExitCode {
    common::main(vec![
        (
            "reported_progress_reaches_the_status",
            progress::reported_progress_reaches_the_status,
        ),
        (
            "a_deleted_runs_artifacts_go_once_nothing_reuses_them",
            artifacts::a_deleted_runs_artifacts_go_once_nothing_reuses_them,
        ),
        (
            "a_deleted_jobs_output_stays_for_its_retention",
            artifacts::a_deleted_jobs_output_stays_for_its_retention,
        ),
        (
            "a_checkpoint_on_notice_ends_the_stop_early_and_the_resume_gets_it",
            progress::a_checkpoint_on_notice_ends_the_stop_early_and_the_resume_gets_it,
        ),
        (
            "finished_jobs_are_kept_as_summaries_across_a_restart",
            finished_jobs_are_kept_as_summaries_across_a_restart,
        ),
        (
            "a_replica_started_and_ended_but_not_recorded_is_recorded_not_retried",
            a_replica_started_and_ended_but_not_recorded_is_recorded_not_retried,
        ),
        (
            "the_conformance_story_with_real_processes",
            story::the_conformance_story_with_real_processes,
        ),
        (
            "a_replica_without_a_free_port_backs_off_and_starts_once_one_is_free",
            story::a_replica_without_a_free_port_backs_off_and_starts_once_one_is_free,
        ),
        (
            "a_job_larger_than_the_machine_is_refused_at_submit",
            a_job_larger_than_the_machine_is_refused_at_submit,
        ),
        (
            "the_configured_grace_period_reaches_suspend",
            the_configured_grace_period_reaches_suspend,
        ),
        (
            "four_replica_generic_job_succeeds",
            four_replica_generic_job_succeeds,
        ),
        (
            "failing_replica_restarts_and_the_count_is_durable",
            failing_replica_restarts_and_the_count_is_durable,
        ),
        (
            "permanent_failure_fails_the_job",
            permanent_failure_fails_the_job,
        ),
        (
            "a_command_that_does_not_exist_backs_off_and_gives_its_gpus_to_another_job",
            a_command_that_does_not_exist_backs_off_and_gives_its_gpus_to_another_job,
        ),
        (
            "two_jobs_never_share_a_port_or_a_gpu",
            two_jobs_never_share_a_port_or_a_gpu,
        ),
        (
            "reopening_after_a_crash_readopts_running_replicas",
            reopening_after_a_crash_readopts_running_replicas,
        ),
        (
            "delete_leaves_no_process_behind",
            delete_leaves_no_process_behind,
        ),
        (
            "invalid_submissions_store_nothing",
            invalid_submissions_store_nothing,
        ),
        (
            "suspend_stops_and_resume_requeues",
            suspend_stops_and_resume_requeues,
        ),
        (
            "preemption_stops_the_victim_before_the_preemptor_gets_its_gpus",
            preemption_stops_the_victim_before_the_preemptor_gets_its_gpus,
        ),
        (
            "a_replica_started_but_not_recorded_is_found_not_started_again",
            a_replica_started_but_not_recorded_is_found_not_started_again,
        ),
    ])
}
