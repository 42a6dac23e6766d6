//! Stored Pipelines (kind `Pipeline`), which runs name (`spec.pipelineRef`): one row per
//! namespace and name for its current version, and one per version in `pipeline_versions`
//! (`metadata.generation` counts them; a run keeps its own copy of the version it was made
//! from), so that a run may name an earlier one. Tables made on open when missing (no
//! schema version change); a store made before versions were kept gets its current
//! versions copied in on open.

use corral_api::pipeline::Pipeline;
use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError, json, parse};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pipelines (
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    pipeline  TEXT NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS pipeline_versions (
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    generation INTEGER NOT NULL,
    pipeline   TEXT NOT NULL,
    PRIMARY KEY (namespace, name, generation)
);
-- A current version stored before versions were kept (idempotent, on every open).
INSERT OR IGNORE INTO pipeline_versions (namespace, name, generation, pipeline)
    SELECT namespace, name, COALESCE(json_extract(pipeline, '$.metadata.generation'), 1), pipeline
    FROM pipelines;
";

impl Store {
    /// Stores a pipeline as the current version of its name, and keeps it as version
    /// `metadata.generation` (inside the open batch).
    pub fn put_pipeline(&self, p: &Pipeline) -> Result<(), StoreError> {
        let ns = p.metadata.namespace_or_default();
        let text = json(p)?;
        self.conn
            .prepare_cached(
                "INSERT INTO pipeline_versions (namespace, name, generation, pipeline)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (namespace, name, generation) DO UPDATE SET pipeline = excluded.pipeline",
            )?
            .execute(params![
                ns,
                p.metadata.name,
                p.metadata.generation.unwrap_or(1),
                text
            ])?;
        self.conn
            .prepare_cached(
                "INSERT INTO pipelines (namespace, name, pipeline) VALUES (?1, ?2, ?3)
                 ON CONFLICT (namespace, name) DO UPDATE SET pipeline = excluded.pipeline",
            )?
            .execute(params![
                p.metadata.namespace_or_default(),
                p.metadata.name,
                json(p)?
            ])?;
        Ok(())
    }

    /// The pipelines of a namespace, or of every namespace, by namespace and name.
    pub fn pipelines(&self, namespace: Option<&str>) -> Result<Vec<Pipeline>, StoreError> {
        let filter = if namespace.is_some() {
            "WHERE namespace = ?1"
        } else {
            "WHERE ?1 IS NULL"
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT namespace, name, pipeline FROM pipelines {filter} ORDER BY namespace, name"
        ))?;
        let rows = stmt.query_map([namespace], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (ns, name, text) = row?;
            out.push(parse(&format!("pipeline {ns}/{name}"), &text)?);
        }
        Ok(out)
    }

    pub fn pipeline(&self, namespace: &str, name: &str) -> Result<Option<Pipeline>, StoreError> {
        let text: Option<String> = self
            .conn
            .prepare_cached("SELECT pipeline FROM pipelines WHERE namespace = ?1 AND name = ?2")?
            .query_row([namespace, name], |r| r.get(0))
            .optional()?;
        text.map(|t| parse(&format!("pipeline {namespace}/{name}"), &t))
            .transpose()
    }

    /// Every kept version of the pipelines of a namespace (or of every namespace), the
    /// current ones included, by namespace, name and generation.
    pub fn pipeline_versions(
        &self,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<Vec<Pipeline>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT namespace, name, pipeline FROM pipeline_versions
             WHERE (?1 IS NULL OR namespace = ?1) AND (?2 IS NULL OR name = ?2)
             ORDER BY namespace, name, generation",
        )?;
        let rows = stmt.query_map(params![namespace, name], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (ns, name, text) = row?;
            out.push(parse(&format!("pipeline {ns}/{name}"), &text)?);
        }
        Ok(out)
    }

    /// Removes a pipeline with every version of it; whether there was one.
    pub fn remove_pipeline(&self, namespace: &str, name: &str) -> Result<bool, StoreError> {
        self.conn
            .prepare_cached("DELETE FROM pipeline_versions WHERE namespace = ?1 AND name = ?2")?
            .execute([namespace, name])?;
        let n = self
            .conn
            .prepare_cached("DELETE FROM pipelines WHERE namespace = ?1 AND name = ?2")?
            .execute([namespace, name])?;
        Ok(n > 0)
    }

    /// Forgets one version (a submission refused after it was stored).
    pub fn remove_pipeline_version(
        &self,
        namespace: &str,
        name: &str,
        generation: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "DELETE FROM pipeline_versions WHERE namespace = ?1 AND name = ?2 AND generation = ?3",
            )?
            .execute(params![namespace, name, generation])?;
        Ok(())
    }
}
