//! Stored Pipelines (kind `Pipeline`), which runs name (`spec.pipelineRef`): one row per
//! namespace and name, its current version only (`metadata.generation` counts them; a run
//! keeps its own copy of the version it was made from). A table made on open when missing
//! (no schema version change).

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
";

impl Store {
    /// Stores a pipeline, replacing the one of its name (inside the open batch).
    pub fn put_pipeline(&self, p: &Pipeline) -> Result<(), StoreError> {
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

    /// Removes a pipeline; whether there was one.
    pub fn remove_pipeline(&self, namespace: &str, name: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM pipelines WHERE namespace = ?1 AND name = ?2")?
            .execute([namespace, name])?;
        Ok(n > 0)
    }
}
