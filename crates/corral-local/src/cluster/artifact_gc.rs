//! Pipeline artifacts collected, embedded: at most once a minute, the output directories
//! under `<data>/artifacts/<namespace>/<run>/<step>/<output>` are handed to the core's rule
//! (`control::artifact_gc::collect`) with the runs that exist, what their statuses name and
//! what served models serve from; what it names is removed, then the cache entries that
//! named it. Job outputs (`<namespace>/.jobs/<job>.<uid>`) go by
//! `control::artifact_gc::collect_job_outputs`: of jobs that no longer exist, served by no
//! model, once `artifacts.jobOutputRetentionSeconds` have passed since they were let go
//! (their modification time, set then).

use std::path::Path;
use std::time::Duration;

use corral_core::control::artifact_gc::{
    ArtifactDir, Holders, JobOutputDir, collect, collect_job_outputs,
};
use jiff::Timestamp;

use super::TickReport;
use super::engine::Cluster;

/// How often the artifacts are looked over.
const EVERY: Duration = Duration::from_secs(60);

/// The directory name job outputs live under (never a run's: see `crate::artifacts`).
const JOBS_DIR: &str = ".jobs";

impl Cluster {
    pub(super) fn collect_artifacts(&mut self, now: Timestamp, report: &mut TickReport) {
        let recent = self
            .artifacts_collected
            .and_then(|t| now.duration_since(t).try_into().ok())
            .is_some_and(|since: Duration| since < EVERY);
        if recent {
            return;
        }
        self.artifacts_collected = Some(now);
        let root = crate::artifacts::root(&self.config.data_dir);
        self.collect_job_outputs(&root, now, report);
        let dirs = output_dirs(&root);
        if dirs.is_empty() {
            return;
        }
        let runs = match self.store.runs(None) {
            Ok(r) => r,
            Err(e) => return report.errors.push(format!("collecting artifacts: {e}")),
        };
        let cache = match self.store.cache_entries() {
            Ok(c) => c,
            Err(e) => return report.errors.push(format!("collecting artifacts: {e}")),
        };
        let served = self.model_pins().into_iter().map(|o| o.path);
        let holders = Holders::of(runs.iter().map(|r| &r.run), served);
        let retention = Duration::from_secs(self.config.file.settings.artifacts.retention_seconds);
        let decided = collect(&dirs, &cache, &holders, retention, now);
        // The cache first: an entry never names a directory that is gone.
        if let Err(e) = self.store.forget_cache(&decided.cache) {
            return report.errors.push(format!("collecting artifacts: {e}"));
        }
        for dir in &decided.dirs {
            let path = Path::new(dir);
            if let Err(e) = std::fs::remove_dir_all(path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    report.errors.push(format!("removing artifact {dir}: {e}"));
                }
                continue;
            }
            // The step's and the run's directories, once empty.
            for parent in path.ancestors().skip(1).take(2) {
                if std::fs::remove_dir(parent).is_err() {
                    break;
                }
            }
        }
        report.artifacts_removed.extend(decided.dirs);
    }
}

impl Cluster {
    fn collect_job_outputs(&mut self, root: &Path, now: Timestamp, report: &mut TickReport) {
        let dirs = job_output_dirs(root);
        if dirs.is_empty() {
            return;
        }
        let data = &self.config.data_dir;
        let live = self
            .summaries
            .iter()
            .map(|r| {
                let dir = crate::artifacts::job_output_dir(data, r.namespace(), r.name(), r.uid());
                dir.to_string_lossy().into_owned()
            })
            .collect();
        let served = self.model_pins().into_iter().map(|o| o.path);
        let holders = Holders::of([], served);
        let retention = Duration::from_secs(
            self.config
                .file
                .settings
                .artifacts
                .job_output_retention_seconds,
        );
        for dir in collect_job_outputs(&dirs, &live, &holders, retention, now) {
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    report
                        .errors
                        .push(format!("removing job output {dir}: {e}"));
                }
                _ => report.artifacts_removed.push(dir),
            }
        }
    }
}

/// Every `<namespace>/.jobs/<job>.<uid>` directory under `root`, with its modification
/// time; what cannot be read is left out (and so kept).
fn job_output_dirs(root: &Path) -> Vec<JobOutputDir> {
    subdirs(root)
        .flat_map(|ns| subdirs(&ns.join(JOBS_DIR)).collect::<Vec<_>>())
        .filter_map(|dir| {
            let since = std::fs::metadata(&dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| Timestamp::try_from(t).ok())?;
            Some(JobOutputDir {
                path: dir.to_string_lossy().into_owned(),
                since,
            })
        })
        .collect()
}

/// Every `<namespace>/<run>/<step>/<output>` directory under `root`, with when it was last
/// written; what cannot be read is left out (and so kept).
fn output_dirs(root: &Path) -> Vec<ArtifactDir> {
    let mut out = Vec::new();
    for ns in subdirs(root) {
        for run in subdirs(&ns).filter(|r| r.file_name().is_some_and(|n| n != JOBS_DIR)) {
            for step in subdirs(&run) {
                for output in subdirs(&step) {
                    let modified = std::fs::metadata(&output)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| Timestamp::try_from(t).ok());
                    let (Some(modified), Some(namespace), Some(run_name)) =
                        (modified, name_of(&ns), name_of(&run))
                    else {
                        continue;
                    };
                    out.push(ArtifactDir {
                        namespace,
                        run: run_name,
                        path: output.to_string_lossy().into_owned(),
                        modified,
                    });
                }
            }
        }
    }
    out
}

fn name_of(p: &Path) -> Option<String> {
    p.file_name().and_then(|n| n.to_str()).map(str::to_string)
}

/// The directories in `dir` (not links), none if it cannot be read.
fn subdirs(dir: &Path) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
}
