//! A served model's revisions (`served_revisions`): each the ServedModel as it was when its
//! template last changed (`spec`, the public resource type, as `served_models.spec`), its
//! content hash, and when it was promoted (every request went to it; the newest promoted
//! revision is the stable one). Kept until the control plane retires the revision.

use corral_api::ServedModel;
use jiff::Timestamp;
use rusqlite::params;

use super::{Store, StoreError};

/// Made on open when missing (a table of its own: older stores gain it without a schema
/// change; a model stored before revisions gets its first one on open).
pub(super) const SERVED_REVISIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS served_revisions (
    namespace   TEXT NOT NULL,
    model       TEXT NOT NULL,
    number      INTEGER NOT NULL,
    hash        TEXT NOT NULL,
    spec        TEXT NOT NULL,
    promoted_at TEXT,
    PRIMARY KEY (namespace, model, number)
);";

/// One stored revision.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRevision {
    pub number: u32,
    pub hash: String,
    /// The model as it was (metadata and spec) when this revision was made.
    pub model: ServedModel,
    pub promoted_at: Option<Timestamp>,
}

fn corrupt(what: String, e: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what,
        message: e.to_string(),
    }
}

impl Store {
    /// A model's revisions, oldest first.
    pub fn served_revisions(
        &self,
        namespace: &str,
        model: &str,
    ) -> Result<Vec<StoredRevision>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT number, hash, spec, promoted_at FROM served_revisions
             WHERE namespace = ?1 AND model = ?2 ORDER BY number",
        )?;
        let rows = stmt.query_map(params![namespace, model], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (number, hash, spec, promoted) = row?;
            let what = format!("revision {number} of served model {namespace}/{model}");
            out.push(StoredRevision {
                number,
                hash,
                model: serde_json::from_str(&spec).map_err(|e| corrupt(what.clone(), e))?,
                promoted_at: promoted
                    .map(|p| p.parse::<Timestamp>())
                    .transpose()
                    .map_err(|e| corrupt(what, e))?,
            });
        }
        Ok(out)
    }

    /// Stores a new revision of a model and, when `spec` is given, the model's new spec,
    /// in one transaction.
    pub fn insert_served_revision(
        &mut self,
        namespace: &str,
        revision: &StoredRevision,
        spec: Option<&ServedModel>,
    ) -> Result<(), StoreError> {
        let name = &revision.model.metadata.name;
        let what = || format!("served model {namespace}/{name}");
        let mut stored = revision.model.clone();
        stored.status = None;
        let text = serde_json::to_string(&stored).map_err(|e| corrupt(what(), e))?;
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "INSERT INTO served_revisions (namespace, model, number, hash, spec, promoted_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            namespace,
            name,
            revision.number,
            revision.hash,
            text,
            revision.promoted_at.map(|t| t.to_string())
        ])?;
        if let Some(m) = spec {
            update_spec(&tx, namespace, m)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Replaces a model's spec (a change that makes no new revision: scaling, limits,
    /// the traffic split).
    pub fn update_served_model(&self, namespace: &str, m: &ServedModel) -> Result<(), StoreError> {
        update_spec(&self.conn, namespace, m)
    }

    /// Records that revision `number` of `model` was promoted at `at`.
    pub fn promote_served_revision(
        &self,
        namespace: &str,
        model: &str,
        number: u32,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE served_revisions SET promoted_at = ?4
                 WHERE namespace = ?1 AND model = ?2 AND number = ?3",
            )?
            .execute(params![namespace, model, number, at.to_string()])?;
        Ok(())
    }

    /// Forgets revisions of a model (`None`: every one, the model is deleted).
    pub fn remove_served_revisions(
        &self,
        namespace: &str,
        model: &str,
        number: Option<u32>,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "DELETE FROM served_revisions WHERE namespace = ?1 AND model = ?2
                 AND (?3 IS NULL OR number = ?3)",
            )?
            .execute(params![namespace, model, number])?;
        Ok(())
    }
}

fn update_spec(
    conn: &rusqlite::Connection,
    namespace: &str,
    m: &ServedModel,
) -> Result<(), StoreError> {
    let mut stored = m.clone();
    stored.status = None;
    let text = serde_json::to_string(&stored)
        .map_err(|e| corrupt(format!("served model {namespace}/{}", m.metadata.name), e))?;
    conn.prepare_cached("UPDATE served_models SET spec = ?3 WHERE namespace = ?1 AND name = ?2")?
        .execute(params![namespace, m.metadata.name, text])?;
    Ok(())
}
