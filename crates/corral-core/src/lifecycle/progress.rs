//! A job's progress in its status, from what its replicas report: the percent done, the
//! rate of steps measured within the current attempt, and the ETA from that rate. Written
//! into the status only when a reader would see a difference (a point of percent, a new
//! attempt, or a quarter of a minute of steps), so that a script reporting every batch
//! costs the store one write in many.

use std::time::Duration;

use corral_api::TrainingJobStatus;
use corral_api::progress::{Checkpoint, JobProgress, MAX_METRICS, ProgressReport};
use jiff::Timestamp;

/// Steps that moved without moving the percent are written at most this often.
pub const RECORD_EVERY: Duration = Duration::from_secs(15);
/// No ETA until the rate has been measured over this long within the attempt.
pub const RATE_AFTER: Duration = Duration::from_secs(10);

/// Records `report` of `replica`, seen at `now`, into `status` when it is worth a write;
/// returns whether it was. The first replica to report in an attempt is the job's reporter
/// for that attempt (scripts usually report from rank 0 alone; where every rank reports,
/// one rank's steps are never mixed with another's).
pub fn record_progress(
    status: &mut TrainingJobStatus,
    replica: &str,
    report: &ProgressReport,
    now: Timestamp,
) -> bool {
    if status
        .progress
        .as_ref()
        .is_some_and(|p| p.attempt == status.attempt && p.replica != replica)
    {
        return false;
    }
    let checkpointed = record_checkpoint(status, report, now);
    let finite = |v: &f64| v.is_finite();
    let total = report.total_steps.filter(|t| *t > 0);
    let percent = report
        .percent
        .filter(finite)
        .or_else(|| total.map(|t| report.step as f64 * 100.0 / t as f64))
        .map(|p| p.clamp(0.0, 100.0));
    let prev = status.progress.as_ref();
    // A new attempt, or a step behind the last one (restarted from a checkpoint):
    // the rate is measured afresh from here.
    let fresh = prev.is_none_or(|p| p.attempt != status.attempt || report.step < p.step);
    let (since_step, since) = match prev {
        Some(p) if !fresh => (p.rate_since_step, p.rate_since),
        _ => (report.step, now),
    };
    let elapsed = now.duration_since(since).as_secs_f64();
    let eta_seconds = match total {
        Some(t) if report.step >= t => Some(0),
        Some(t) if elapsed >= RATE_AFTER.as_secs_f64() && report.step > since_step => {
            let rate = (report.step - since_step) as f64 / elapsed;
            Some(((t - report.step) as f64 / rate).round() as u64)
        }
        _ => None,
    };
    let worth = match prev {
        None => true,
        Some(p) => {
            fresh
                || p.total_steps != total
                || match (percent, p.percent) {
                    (Some(a), Some(b)) => (a - b).abs() >= 1.0,
                    (a, b) => a.is_some() != b.is_some(),
                }
                || (report.step != p.step
                    && now.duration_since(p.updated).as_secs_f64() >= RECORD_EVERY.as_secs_f64())
        }
    };
    if !worth {
        return checkpointed;
    }
    status.progress = Some(Box::new(JobProgress {
        step: report.step,
        total_steps: total,
        percent: percent.map(|p| (p * 10.0).round() / 10.0),
        samples_per_second: report.samples_per_second.filter(finite),
        eta_seconds,
        metrics: report
            .metrics
            .iter()
            .filter(|(_, v)| v.is_finite())
            .take(MAX_METRICS)
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        updated: now,
        replica: replica.to_string(),
        attempt: status.attempt,
        rate_since_step: since_step,
        rate_since: since,
    }));
    true
}

/// A checkpoint newer than the one recorded (a higher step, or the same step saved
/// elsewhere) becomes the job's last. Returns whether it did.
fn record_checkpoint(
    status: &mut TrainingJobStatus,
    report: &ProgressReport,
    now: Timestamp,
) -> bool {
    let Some(c) = &report.checkpoint else {
        return false;
    };
    let newer = status
        .last_checkpoint
        .as_ref()
        .is_none_or(|last| c.step > last.step || (c.step == last.step && c.path != last.path));
    if newer {
        status.last_checkpoint = Some(Box::new(Checkpoint {
            step: c.step,
            path: c.path.clone(),
            saved: now,
        }));
    }
    newer
}

/// Whether the job saved a checkpoint since `since` (when its replicas were told to stop):
/// then waiting out the rest of the grace period gains nothing.
pub fn checkpointed_since(status: &TrainingJobStatus, since: Timestamp) -> bool {
    status
        .last_checkpoint
        .as_ref()
        .is_some_and(|c| c.saved >= since)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("time")
    }

    fn report(step: u64) -> ProgressReport {
        ProgressReport {
            step,
            total_steps: Some(1000),
            ..Default::default()
        }
    }

    #[test]
    fn the_eta_comes_from_the_rate_within_the_attempt() {
        let mut status = TrainingJobStatus::default();
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(100),
            at(0)
        ));
        let p = status.progress.clone().expect("progress");
        assert_eq!(
            (p.percent, p.eta_seconds),
            (Some(10.0), None),
            "no rate yet"
        );
        // 200 steps in 20 s: 10 steps/s, 700 left.
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(300),
            at(20)
        ));
        let p = status.progress.clone().expect("progress");
        assert_eq!(p.percent, Some(30.0));
        assert_eq!(p.eta_seconds, Some(70));
        // Restarted from a checkpoint at 250: measured afresh.
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(250),
            at(30)
        ));
        assert_eq!(status.progress.as_ref().and_then(|p| p.eta_seconds), None);
        // A new attempt also starts afresh, even ahead of the old baseline.
        status.attempt = 1;
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(400),
            at(40)
        ));
        let p = status.progress.clone().expect("progress");
        assert_eq!(
            (p.attempt, p.rate_since_step, p.eta_seconds),
            (1, 400, None)
        );
    }

    #[test]
    fn one_replica_reports_for_the_attempt() {
        let mut status = TrainingJobStatus::default();
        assert!(record_progress(
            &mut status,
            "job-worker-1",
            &report(100),
            at(0)
        ));
        assert!(
            !record_progress(&mut status, "job-worker-0", &report(500), at(20)),
            "another rank's steps are not mixed in"
        );
        status.attempt = 1;
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(500),
            at(30)
        ));
        let p = status.progress.expect("progress");
        assert_eq!((p.replica.as_str(), p.step), ("job-worker-0", 500));
    }

    #[test]
    fn a_reported_checkpoint_becomes_the_last_and_only_a_newer_one_replaces_it() {
        let mut status = TrainingJobStatus::default();
        let with = |step, ck: u64, path: &str| ProgressReport {
            step,
            checkpoint: Some(corral_api::progress::CheckpointReport {
                step: ck,
                path: Some(path.into()),
            }),
            ..Default::default()
        };
        assert!(record_progress(
            &mut status,
            "w-0",
            &with(100, 100, "/ck/100"),
            at(0)
        ));
        assert!(!checkpointed_since(&status, at(1)));
        // Within the same percent and 15 s, only because of the checkpoint.
        assert!(record_progress(
            &mut status,
            "w-0",
            &with(101, 101, "/ck/101"),
            at(2)
        ));
        assert!(checkpointed_since(&status, at(1)));
        assert!(!record_progress(
            &mut status,
            "w-0",
            &with(101, 100, "/ck/100"),
            at(3)
        ));
        let last = status.last_checkpoint.expect("checkpoint");
        assert_eq!((last.step, last.path.as_deref()), (101, Some("/ck/101")));
    }

    #[test]
    fn small_moves_are_not_written_until_they_add_up() {
        let mut status = TrainingJobStatus::default();
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(100),
            at(0)
        ));
        // 0.5 points, 5 s later: nothing to write.
        assert!(!record_progress(
            &mut status,
            "job-worker-0",
            &report(105),
            at(5)
        ));
        // A whole point: written.
        assert!(record_progress(
            &mut status,
            "job-worker-0",
            &report(110),
            at(6)
        ));
        // Without a total, steps are written every RECORD_EVERY at most.
        let mut open = TrainingJobStatus::default();
        let r = |step| ProgressReport {
            step,
            ..Default::default()
        };
        assert!(record_progress(&mut open, "job-worker-0", &r(1), at(0)));
        assert!(!record_progress(&mut open, "job-worker-0", &r(2), at(5)));
        assert!(record_progress(&mut open, "job-worker-0", &r(3), at(16)));
        assert!(
            !record_progress(&mut open, "job-worker-0", &r(3), at(60)),
            "same step"
        );
    }

    #[test]
    fn odd_reports_stay_within_bounds() {
        let mut status = TrainingJobStatus::default();
        let r = ProgressReport {
            step: 2000,
            total_steps: Some(1000),
            percent: Some(f64::NAN),
            samples_per_second: Some(f64::INFINITY),
            metrics: (0..20).map(|i| (format!("m{i:02}"), i as f64)).collect(),
            checkpoint: None,
        };
        assert!(record_progress(&mut status, "job-worker-0", &r, at(0)));
        let p = status.progress.expect("progress");
        assert_eq!(p.percent, Some(100.0));
        assert_eq!(p.eta_seconds, Some(0));
        assert_eq!(p.samples_per_second, None);
        assert_eq!(p.metrics.len(), MAX_METRICS);
    }
}
