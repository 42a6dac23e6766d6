//! Served models as submitted (`served_models`): the ServedModel without its status (the
//! status is what the serving pass computes). The replicas are jobs, stored as jobs.
//! `spec` holds the public resource type ([`corral_api::ServedModel`]), versioned by its
//! `apiVersion` and kept compatible as an API, as `jobs.spec` is.

use corral_api::ServedModel;
use rusqlite::params;

use super::{Store, StoreError};

/// Made on open when missing: a table of its own, so that older stores gain it without a
/// schema change.
pub(super) const SERVED_MODELS_TABLE: &str = "CREATE TABLE IF NOT EXISTS served_models (
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    spec      TEXT NOT NULL,
    PRIMARY KEY (namespace, name)
);";

impl Store {
    /// Every served model, by namespace and name.
    pub fn served_models(&self) -> Result<Vec<ServedModel>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT namespace, name, spec FROM served_models ORDER BY 1, 2")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (ns, name, spec) = row?;
            let model = serde_json::from_str(&spec).map_err(|e| StoreError::Corrupt {
                what: format!("served model {ns}/{name}"),
                message: e.to_string(),
            })?;
            out.push(model);
        }
        Ok(out)
    }

    /// Stores new served models, all or none; one whose name is taken is refused.
    pub fn insert_served_models(&mut self, models: &[ServedModel]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for m in models {
            let ns = m.metadata.namespace_or_default();
            let mut stored = m.clone();
            stored.status = None;
            let spec = serde_json::to_string(&stored).map_err(|e| StoreError::Corrupt {
                what: format!("served model {ns}/{}", m.metadata.name),
                message: e.to_string(),
            })?;
            let inserted = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO served_models (namespace, name, spec) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![ns, m.metadata.name, spec])?;
            if inserted == 0 {
                return Err(StoreError::AlreadyExists {
                    namespace: ns.to_string(),
                    name: m.metadata.name.clone(),
                });
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn remove_served_model(&self, namespace: &str, name: &str) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM served_models WHERE namespace = ?1 AND name = ?2")?
            .execute(params![namespace, name])?;
        Ok(n > 0)
    }
}
