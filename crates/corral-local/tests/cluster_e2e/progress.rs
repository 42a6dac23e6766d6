//! A replica's progress file reaches the job's status: percent, steps, metrics and an ETA
//! once the rate has been measured, and the percent moves as the script writes.

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
