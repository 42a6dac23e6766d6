//! A replica's progress file reaches the job's status: percent, steps, metrics and an ETA
//! once the rate has been measured, and the percent moves as the script writes; a checkpoint
//! reported after a stop notice ends the stop early and reaches the resumed attempt.

use std::time::{Duration, Instant};

use super::{WAITS, job};
use crate::common::cluster::{Harness, state};
use corral_local::cluster::JobState;

pub(super) fn reported_progress_reaches_the_status() {
    let (mut h, mut c) = Harness::new(WAITS, 33700, "");
    let finish = h.scratch("finish");
    // Step 10, then step 60 a moment later (written whole, then renamed, as a script
    // should), then waits to be told to finish.
    let script = format!(
        "printf %s {{\\\"step\\\":10,\\\"totalSteps\\\":100}} > $CORRAL_PROGRESS_FILE; sleep 2.5; \
         printf %s {{\\\"step\\\":60,\\\"totalSteps\\\":100,\\\"samplesPerSecond\\\":125.5,\\\"metrics\\\":{{\\\"loss\\\":0.25}}}} > $CORRAL_PROGRESS_FILE.new; \
         mv $CORRAL_PROGRESS_FILE.new $CORRAL_PROGRESS_FILE; \
         while [ ! -e {f} ]; do sleep 0.05; done",
        f = finish.display()
    );
    c.submit(&job("reporting", 1, "", &script), "default", h.now)
        .expect("submit");
    let progress = |c: &corral_local::Cluster| {
        c.get("default", "reporting")
            .expect("get")
            .and_then(|j| j.status)
            .and_then(|s| s.progress)
    };
    h.until(&mut c, "the first report", |c| {
        progress(c).is_some_and(|p| p.step == 10)
    });
    let first = progress(&c).expect("progress");
    assert_eq!(first.percent, Some(10.0));
    assert_eq!(first.replica, "reporting-worker-0");
    h.until(&mut c, "the second report", |c| {
        progress(c).is_some_and(|p| p.step == 60)
    });
    let second = progress(&c).expect("progress");
    assert_eq!(second.percent, Some(60.0));
    assert_eq!(second.samples_per_second, Some(125.5));
    assert_eq!(second.metrics.get("loss"), Some(&0.25));
    // The cluster's clock moves a second a pass: by now the rate is measured.
    let eta = second
        .eta_seconds
        .expect("an ETA once the rate is measured");
    assert!(eta > 0, "{second:?}");
    std::fs::write(&finish, b"").expect("finish");
    h.until(&mut c, "success", |c| {
        state(c, "reporting") == Some(JobState::Succeeded)
    });
    // What it reported last stays in the finished job's status.
    assert_eq!(progress(&c).map(|p| p.step), Some(60));
}

/// A replica told to stop (SIGTERM and the stop notice) that saves a checkpoint and says so
/// is stopped at once, not at the end of its grace period (60 s here, and it ignores
/// SIGTERM); the job's status keeps the checkpoint, and the resumed attempt gets it in its
/// environment.
pub(super) fn a_checkpoint_on_notice_ends_the_stop_early_and_the_resume_gets_it() {
    let (mut h, c) = Harness::new(WAITS, 33750, "");
    drop(c);
    h.config.file.settings.grace_period_seconds = Some(60);
    let mut c = h.open();
    let resumed = h.scratch("resumed-env");
    // On SIGTERM: read the notice, save "a checkpoint" and report it; never exit by itself.
    // A resumed attempt writes what it was given and ends.
    let program = h.scratch("checkpointing.sh");
    std::fs::write(
        &program,
        format!(
            r#"if [ -n "$CORRAL_CHECKPOINT_STEP" ]; then
  echo "$CORRAL_CHECKPOINT_STEP $CORRAL_CHECKPOINT_PATH" > {r}; exit 0
fi
on_term() {{
  grep -q '"reason":"Suspended"' "$CORRAL_STOP_NOTICE_FILE" || return
  echo '{{"step":42,"checkpoint":{{"step":42,"path":"/ck/42"}}}}' > "$CORRAL_PROGRESS_FILE.new"
  mv "$CORRAL_PROGRESS_FILE.new" "$CORRAL_PROGRESS_FILE"
}}
trap on_term TERM
echo '{{"step":40}}' > "$CORRAL_PROGRESS_FILE"
while true; do sleep 0.1; done
"#,
            r = resumed.display()
        ),
    )
    .expect("program");
    // exec: the shell that traps SIGTERM is the replica's process itself.
    let script = format!("exec sh {}", program.display());
    c.submit(&job("ckpt", 1, "", &script), "default", h.now)
        .expect("submit");
    let progress = |c: &corral_local::Cluster| {
        c.get("default", "ckpt")
            .expect("get")
            .and_then(|j| j.status)
            .and_then(|s| s.progress)
    };
    h.until(&mut c, "running and reporting", |c| {
        progress(c).is_some_and(|p| p.step == 40)
    });
    let asked = Instant::now();
    c.suspend("default", "ckpt", h.now).expect("suspend");
    // Suspended is said at once; the replica is gone only once it has stopped.
    h.until(&mut c, "suspended, its replica stopped", |c| {
        state(c, "ckpt") == Some(JobState::Suspended)
            && c.describe("default", "ckpt")
                .ok()
                .flatten()
                .is_some_and(|d| d.replicas.iter().all(|r| r.phase != "Running"))
    });
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "stopped {took:?} after the suspend: the checkpoint ended the 60 s grace period"
    );
    let last = c
        .get("default", "ckpt")
        .expect("get")
        .and_then(|j| j.status)
        .and_then(|s| s.last_checkpoint)
        .unwrap_or_else(|| {
            panic!(
                "the checkpoint in the status: {:?}\nlog: {}",
                c.get("default", "ckpt")
                    .ok()
                    .flatten()
                    .and_then(|j| j.status),
                crate::common::cluster::log_of(&c, "ckpt", "worker-0")
            )
        });
    assert_eq!((last.step, last.path.as_deref()), (42, Some("/ck/42")));
    c.resume("default", "ckpt", h.now).expect("resume");
    h.until(&mut c, "the resumed attempt succeeds", |c| {
        state(c, "ckpt") == Some(JobState::Succeeded)
    });
    let given = std::fs::read_to_string(&resumed).expect("the resumed attempt's env");
    assert_eq!(given.trim(), "42 /ck/42");
}
