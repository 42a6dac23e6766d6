//! Which pipeline artifacts go, for every shell: an output directory of a step of a run that
//! no longer exists, which no run holds (its status names the path: a cache hit reuses an
//! earlier run's outputs) and no served model serves from, once it is older than the
//! retention. The cache entries that name a removed directory go with it, so that a later
//! identical step runs again instead of reusing what is no longer there.
//!
//! Until then a deleted run's artifacts stay for the cache, as Kubeflow Pipelines keeps
//! them; the retention bounds the disk they take, as Argo's artifact GC does.
//!
//! A TrainingJob's output directory ([`collect_job_outputs`]) stays while its job exists
//! and while a served model serves from it, then for its own retention after the last of
//! them let go, so that what a deleted job wrote can still be copied out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use corral_api::pipeline::{ArtifactRecord, PipelineRun};
use jiff::Timestamp;

/// One output directory a shell found (`<namespace>/<run>/<step>/<output>` embedded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactDir {
    pub namespace: String,
    pub run: String,
    pub path: String,
    /// When it was last written.
    pub modified: Timestamp,
}

/// One entry of the cache: its key and the outputs it reuses.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheEntry {
    pub namespace: String,
    pub key: String,
    pub outputs: BTreeMap<String, ArtifactRecord>,
}

/// What holds artifacts: the runs that exist, and the paths served models serve from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holders {
    /// `(namespace, run)` of every run that exists.
    pub runs: BTreeSet<(String, String)>,
    /// Paths held: every existing run's outputs (its own and those its cache hits reuse)
    /// and what served models serve from.
    pub paths: BTreeSet<String>,
}

impl Holders {
    /// The runs and what their statuses name, plus `served` (served models' paths).
    pub fn of<'a>(
        runs: impl IntoIterator<Item = &'a PipelineRun>,
        served: impl IntoIterator<Item = String>,
    ) -> Holders {
        let mut h = Holders {
            paths: served.into_iter().collect(),
            ..Holders::default()
        };
        for r in runs {
            h.runs.insert((
                r.metadata.namespace_or_default().to_string(),
                r.metadata.name.clone(),
            ));
            let outputs = r.status.iter().flat_map(|s| s.steps.values());
            for a in outputs.flat_map(|st| st.outputs.values()) {
                h.paths.insert(a.path.clone());
            }
        }
        h
    }

    /// Whether `dir` is held: a held path is it, inside it, or holds it.
    fn holds(&self, dir: &str) -> bool {
        self.paths.iter().any(|p| {
            p == dir
                || p.strip_prefix(dir)
                    .is_some_and(|rest| rest.starts_with('/'))
                || dir
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}

/// One TrainingJob's output directory a shell found (`.jobs/<job>.<uid>` embedded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutputDir {
    pub path: String,
    /// When the last thing that held it let go (the shell marks it so: its job deleted, the
    /// last model serving from it gone), or it was last written.
    pub since: Timestamp,
}

/// The job output directories to remove now: of no job that exists (`live`, their paths),
/// from which no served model serves (`holders`' paths), once `retention` has passed since
/// they were let go.
pub fn collect_job_outputs(
    dirs: &[JobOutputDir],
    live: &BTreeSet<String>,
    holders: &Holders,
    retention: Duration,
    now: Timestamp,
) -> Vec<String> {
    dirs.iter()
        .filter(|d| !live.contains(&d.path) && !holders.holds(&d.path))
        .filter(|d| {
            now.duration_since(d.since)
                .try_into()
                .is_ok_and(|age: Duration| age >= retention)
        })
        .map(|d| d.path.clone())
        .collect()
}

/// What to remove: directories, then the cache entries that name them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collection {
    pub dirs: Vec<String>,
    /// `(namespace, key)`.
    pub cache: Vec<(String, String)>,
}

/// The artifacts to remove now (see the module docs).
pub fn collect(
    dirs: &[ArtifactDir],
    cache: &[CacheEntry],
    holders: &Holders,
    retention: Duration,
    now: Timestamp,
) -> Collection {
    let old_enough = |d: &ArtifactDir| {
        now.duration_since(d.modified)
            .try_into()
            .is_ok_and(|age: Duration| age >= retention)
    };
    let removed: BTreeSet<&str> = dirs
        .iter()
        .filter(|d| !holders.runs.contains(&(d.namespace.clone(), d.run.clone())))
        .filter(|d| !holders.holds(&d.path))
        .filter(|d| old_enough(d))
        .map(|d| d.path.as_str())
        .collect();
    let gone = |path: &str| {
        removed.iter().any(|r| {
            path == *r
                || path
                    .strip_prefix(r)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    };
    Collection {
        dirs: removed.iter().map(|s| s.to_string()).collect(),
        cache: cache
            .iter()
            .filter(|e| e.outputs.values().any(|a| gone(&a.path)))
            .map(|e| (e.namespace.clone(), e.key.clone()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(run: &str, step: &str, days_old: i64) -> ArtifactDir {
        ArtifactDir {
            namespace: "ns".into(),
            run: run.into(),
            path: format!("/a/ns/{run}/{step}/out"),
            modified: Timestamp::from_second(1_000_000 - days_old * 86_400).unwrap_or_default(),
        }
    }

    fn entry(key: &str, path: &str) -> CacheEntry {
        CacheEntry {
            namespace: "ns".into(),
            key: key.into(),
            outputs: BTreeMap::from([(
                "out".to_string(),
                ArtifactRecord {
                    path: path.into(),
                    sha256: "h".into(),
                },
            )]),
        }
    }

    #[test]
    fn only_what_nothing_holds_and_is_old_enough_goes_with_its_cache_entries() {
        let now = Timestamp::from_second(1_000_000).unwrap_or_default();
        let dirs = [
            dir("live", "s", 40),     // its run exists
            dir("gone", "old", 40),   // nothing holds it: goes
            dir("gone", "new", 1),    // too young
            dir("gone", "held", 40),  // a live run's cache hit reuses it
            dir("gone", "model", 40), // a served model serves a file inside it
        ];
        let holders = Holders {
            runs: BTreeSet::from([("ns".to_string(), "live".to_string())]),
            paths: BTreeSet::from([
                "/a/ns/gone/held/out".to_string(),
                "/a/ns/gone/model/out/model.json".to_string(),
            ]),
        };
        let cache = [
            entry("k-old", "/a/ns/gone/old/out"),
            entry("k-held", "/a/ns/gone/held/out"),
            entry("k-prefix", "/a/ns/gone/old/outer"),
        ];
        let c = collect(
            &dirs,
            &cache,
            &holders,
            Duration::from_secs(30 * 86_400),
            now,
        );
        assert_eq!(c.dirs, ["/a/ns/gone/old/out"]);
        assert_eq!(c.cache, [("ns".to_string(), "k-old".to_string())]);
        // With no retention, the young one goes too; held ones never do.
        let c = collect(&dirs, &cache, &holders, Duration::ZERO, now);
        assert_eq!(c.dirs, ["/a/ns/gone/new/out", "/a/ns/gone/old/out"]);
    }

    #[test]
    fn a_job_output_goes_after_its_retention_once_nothing_holds_it() {
        let t = |s: i64| Timestamp::from_second(1_000_000 + s).unwrap_or_default();
        let dir = |name: &str, since: i64| JobOutputDir {
            path: format!("/a/ns/.jobs/{name}"),
            since: t(since),
        };
        let dirs = [
            dir("live.1", 0),
            dir("served.2", 0),
            dir("gone.3", 0),
            dir("fresh.4", 50),
        ];
        let live = BTreeSet::from(["/a/ns/.jobs/live.1".to_string()]);
        let holders = Holders {
            paths: BTreeSet::from(["/a/ns/.jobs/served.2/model.json".to_string()]),
            ..Holders::default()
        };
        let day = Duration::from_secs(100);
        assert_eq!(
            collect_job_outputs(&dirs, &live, &holders, day, t(120)),
            ["/a/ns/.jobs/gone.3"]
        );
        assert!(collect_job_outputs(&dirs, &live, &holders, day, t(99)).is_empty());
        assert_eq!(
            collect_job_outputs(&dirs, &live, &holders, Duration::ZERO, t(50)),
            ["/a/ns/.jobs/gone.3", "/a/ns/.jobs/fresh.4"]
        );
    }
}
