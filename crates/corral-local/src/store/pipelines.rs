//! Pipeline runs and the artifacts their steps produced.
//!
//! - `pipeline_runs`: a run as submitted ([`corral_api::PipelineRun`] without its status,
//!   in `run`) and its status ([`corral_api::PipelineRunStatus`]), written in the same
//!   transaction as the step jobs the status names, so that a crash never leaves a step
//!   started twice or a finished step forgotten. Public API types, only ever extended with
//!   defaulted fields (as `jobs.spec`).
//! - `artifacts`: the cache and the lineage: per namespace and cache key, the run and step
//!   that produced the outputs (path and SHA-256 each, JSON) from which inputs (JSON, the
//!   input artifacts' records). Kept when the run is deleted: later runs reuse them.
//!
//! Both are tables made on open when missing (no schema version change).

use std::collections::BTreeMap;

use corral_api::pipeline::{ArtifactRecord, PipelineRun, PipelineRunStatus};
use corral_core::control::artifact_gc::CacheEntry;
use corral_core::control::pipeline::{CacheHit, Recorded};
use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError, json, parse, to_i64};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pipeline_runs (
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    uid       TEXT NOT NULL UNIQUE,
    run       TEXT NOT NULL,
    status    TEXT NOT NULL,
    finished  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS pipeline_runs_active ON pipeline_runs (finished);
CREATE TABLE IF NOT EXISTS artifacts (
    namespace  TEXT NOT NULL,
    cache_key  TEXT NOT NULL,
    run        TEXT NOT NULL,
    step       TEXT NOT NULL,
    outputs    TEXT NOT NULL,
    inputs     TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, cache_key)
);
";

/// A stored run, its status in `run.status`.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRun {
    pub uid: String,
    pub run: PipelineRun,
}

impl Store {
    /// Inserts a run (inside the open batch; the caller checked that its name is free).
    pub fn insert_run(&self, uid: &str, run: &PipelineRun) -> Result<(), StoreError> {
        let namespace = run.metadata.namespace_or_default();
        let mut bare = run.clone();
        let status = bare.status.take().unwrap_or_default();
        self.conn
            .prepare_cached(
                "INSERT INTO pipeline_runs (namespace, name, uid, run, status, finished)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0)",
            )?
            .execute(params![
                namespace,
                run.metadata.name,
                uid,
                json(&bare)?,
                json(&status)?
            ])?;
        Ok(())
    }

    fn runs_where<P: rusqlite::Params>(
        &self,
        filter: &str,
        p: P,
    ) -> Result<Vec<StoredRun>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT uid, run, status FROM pipeline_runs {filter} ORDER BY namespace, name"
        ))?;
        let rows = stmt.query_map(p, |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (uid, run, status) = row?;
            let mut run: PipelineRun = parse(&format!("pipeline run {uid}"), &run)?;
            run.status = Some(parse(&format!("pipeline run status {uid}"), &status)?);
            out.push(StoredRun { uid, run });
        }
        Ok(out)
    }

    /// Runs that have not ended.
    pub fn active_runs(&self) -> Result<Vec<StoredRun>, StoreError> {
        self.runs_where("WHERE finished = 0", [])
    }

    /// Every run of a namespace, or of every namespace.
    pub fn runs(&self, namespace: Option<&str>) -> Result<Vec<StoredRun>, StoreError> {
        match namespace {
            Some(ns) => self.runs_where("WHERE namespace = ?1", [ns]),
            None => self.runs_where("", []),
        }
    }

    pub fn run(&self, namespace: &str, name: &str) -> Result<Option<StoredRun>, StoreError> {
        Ok(self
            .runs_where("WHERE namespace = ?1 AND name = ?2", [namespace, name])?
            .pop())
    }

    pub fn save_run_status(&self, uid: &str, status: &PipelineRunStatus) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE pipeline_runs SET status = ?1, finished = ?2 WHERE uid = ?3")?
            .execute(params![json(status)?, status.phase.is_finished(), uid])?;
        Ok(())
    }

    pub fn remove_run(&self, uid: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM pipeline_runs WHERE uid = ?1")?
            .execute([uid])?;
        Ok(())
    }

    /// An earlier result with this key in this namespace.
    pub fn cache_hit(&self, namespace: &str, key: &str) -> Result<Option<CacheHit>, StoreError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT run, step, outputs FROM artifacts WHERE namespace = ?1 AND cache_key = ?2",
            )?
            .query_row([namespace, key], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .optional()?;
        let Some((run, step, outputs)) = row else {
            return Ok(None);
        };
        let outputs: BTreeMap<String, ArtifactRecord> =
            parse(&format!("artifacts of {run}/{step}"), &outputs)?;
        Ok(Some(CacheHit {
            from: format!("{run}/{step}"),
            outputs,
        }))
    }

    /// Every entry of the cache, for the artifacts' collection.
    pub fn cache_entries(&self) -> Result<Vec<CacheEntry>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT namespace, cache_key, outputs FROM artifacts")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (namespace, key, outputs) = row?;
            let outputs = parse(&format!("artifacts of {namespace}/{key}"), &outputs)?;
            out.push(CacheEntry {
                namespace,
                key,
                outputs,
            });
        }
        Ok(out)
    }

    /// Forgets cache entries whose artifacts are gone, in one transaction.
    pub fn forget_cache(&mut self, entries: &[(String, String)]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for (namespace, key) in entries {
            tx.execute(
                "DELETE FROM artifacts WHERE namespace = ?1 AND cache_key = ?2",
                [namespace, key],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records a step's outputs with their lineage (the first result of a key stays).
    pub fn record_artifacts(
        &self,
        namespace: &str,
        run: &str,
        r: &Recorded,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO artifacts
                 (namespace, cache_key, run, step, outputs, inputs, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                namespace,
                r.cache_key,
                run,
                r.step,
                json(&r.outputs)?,
                json(&r.inputs)?,
                to_i64(now_ms)
            ])?;
        Ok(())
    }
}
