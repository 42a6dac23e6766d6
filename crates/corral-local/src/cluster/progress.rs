//! Progress files: each replica may write its progress, as JSON, to the file its launch env
//! names (`CORRAL_PROGRESS_FILE`, in the replica's own `tmp/`, so that a tenant may write it
//! and a container sees it at the same path). The control loop reads the files that changed,
//! every few seconds, and hands the reports to the plane, which decides what the status
//! shows (`corral_core::lifecycle::record_progress`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use corral_api::progress::{JobProgress, ProgressReport};

use super::engine::Cluster;

/// The file's name in the replica's `tmp/`.
pub const PROGRESS_FILE: &str = "progress.json";
/// The stop notice's name in the replica's `tmp/`.
pub const STOP_NOTICE_FILE: &str = "stop-notice.json";
/// How often the files are looked at.
const PROGRESS_PERIOD: Duration = Duration::from_secs(2);
/// A report is a few hundred bytes; a larger file is not read.
const MAX_BYTES: u64 = 64 * 1024;

/// Where a replica whose directory is `replica_dir` writes its progress.
pub fn progress_path(replica_dir: &Path) -> PathBuf {
    replica_dir
        .join(crate::executor::TMP_DIR)
        .join(PROGRESS_FILE)
}

/// Where Corral writes a replica's stop notice (`CORRAL_STOP_NOTICE_FILE`).
pub fn stop_notice_path(replica_dir: &Path) -> PathBuf {
    replica_dir
        .join(crate::executor::TMP_DIR)
        .join(STOP_NOTICE_FILE)
}

/// Writes the notice that comes with SIGTERM, on one line: `{"reason":"Preempted",
/// "graceSeconds":30,"deadline":"..."}`, whole (written, then renamed). A replica that cannot
/// be told still gets its SIGTERM.
pub(super) fn write_stop_notice(replica_dir: &Path, reason: &str, grace: Duration) {
    let deadline = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::try_from(grace).unwrap_or_default())
        .unwrap_or_else(|_| jiff::Timestamp::now());
    let notice = serde_json::json!({
        "reason": reason,
        "graceSeconds": grace.as_secs(),
        "deadline": deadline.to_string(),
    });
    let path = stop_notice_path(replica_dir);
    let Ok(mut bytes) = serde_json::to_vec(&notice) else {
        return;
    };
    bytes.push(b'\n');
    // Readable by the replica's own user (a tenant's uid): the directory it is in is that
    // user's alone (0700), so the file's mode lets no one else read it.
    let tmp = path.with_extension("json.new");
    let written = std::fs::write(&tmp, bytes)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        })
        .and_then(|()| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// What was last read of each file, so that an unchanged one is not read again.
#[derive(Default)]
pub struct ProgressFiles {
    read_at: Option<Instant>,
    seen: BTreeMap<PathBuf, SystemTime>,
}

/// A job's progress, for /metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct JobProgressRow {
    pub namespace: String,
    pub job: String,
    pub progress: JobProgress,
}

impl Cluster {
    /// The progress of every job the plane holds that has reported some.
    pub fn progress_rows(&self) -> Vec<JobProgressRow> {
        let mut rows: Vec<JobProgressRow> = self
            .live
            .values()
            .filter_map(|j| {
                let progress = *j.job.status.as_ref()?.progress.clone()?;
                Some(JobProgressRow {
                    namespace: j.namespace.clone(),
                    job: j.name.clone(),
                    progress,
                })
            })
            .collect();
        rows.sort_by(|a, b| (&a.namespace, &a.job).cmp(&(&b.namespace, &b.job)));
        rows
    }

    /// Reads the progress files written since the last look (every [`PROGRESS_PERIOD`])
    /// and tells the plane. A file caught in the middle of a write, or not JSON, is read
    /// again next time.
    pub(super) fn read_progress(&mut self) {
        if self
            .progress
            .read_at
            .is_some_and(|t| t.elapsed() < PROGRESS_PERIOD)
        {
            return;
        }
        self.progress.read_at = Some(Instant::now());
        let mut reports = Vec::new();
        let mut seen = BTreeMap::new();
        for r in self.executor.running() {
            let path = progress_path(&r.dir);
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let Ok(modified) = meta.modified() else {
                continue;
            };
            if self.progress.seen.get(&path) == Some(&modified) {
                seen.insert(path, modified);
                continue;
            }
            if meta.len() > MAX_BYTES {
                continue;
            }
            let report = std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<ProgressReport>(&bytes).ok());
            if let Some(report) = report {
                seen.insert(path, modified);
                // The executor's name is `<namespace>.<replica>`; the status names the
                // replica as its job's user knows it (`CORRAL_REPLICA`).
                let namespace = r.job.split('/').next().unwrap_or_default();
                let replica = r
                    .name
                    .strip_prefix(namespace)
                    .and_then(|n| n.strip_prefix('.'))
                    .unwrap_or(&r.name);
                reports.push((r.job.clone(), replica.to_string(), report));
            }
        }
        // Files of replicas that ended are forgotten.
        self.progress.seen = seen;
        for (job, replica, report) in reports {
            self.plane.observe_progress(&job, replica, report);
        }
    }
}
