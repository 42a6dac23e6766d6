//! The store's job events: recorded as they happen, read per job (`describe`) and in order
//! of arrival (what the dashboard's watch pushes).

use rusqlite::params;

use super::{Store, StoreError, StoredEvent, to_i64, to_u64};

impl Store {
    pub fn add_event(&self, e: &StoredEvent) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO events (namespace, job, time_ms, type, reason, message) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                e.namespace,
                e.job,
                to_i64(e.time_ms),
                e.type_,
                e.reason,
                e.message
            ])?;
        Ok(())
    }

    /// Events after the one with id `after`, oldest first, at most `limit`, each with its
    /// id; of one namespace or of all. What a watcher pushes as it happens.
    pub fn events_after(
        &self,
        after: i64,
        namespace: Option<&str>,
        limit: u32,
    ) -> Result<Vec<(i64, StoredEvent)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, namespace, job, time_ms, type, reason, message FROM events \
             WHERE id > ?1 AND (?2 IS NULL OR namespace = ?2) ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![after, namespace, limit], |r| {
                Ok((
                    r.get(0)?,
                    StoredEvent {
                        namespace: r.get(1)?,
                        job: r.get(2)?,
                        time_ms: to_u64(r.get(3)?),
                        type_: r.get(4)?,
                        reason: r.get(5)?,
                        message: r.get(6)?,
                    },
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The id of the newest event (0: none yet).
    pub fn last_event_id(&self) -> Result<i64, StoreError> {
        let id: Option<i64> = self
            .conn
            .query_row("SELECT MAX(id) FROM events", [], |r| r.get(0))?;
        Ok(id.unwrap_or(0))
    }

    /// A job's events, oldest first.
    pub fn events(&self, namespace: &str, job: &str) -> Result<Vec<StoredEvent>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT namespace, job, time_ms, type, reason, message FROM events \
             WHERE namespace = ?1 AND job = ?2 ORDER BY id",
        )?;
        let rows = stmt
            .query_map(params![namespace, job], |r| {
                Ok(StoredEvent {
                    namespace: r.get(0)?,
                    job: r.get(1)?,
                    time_ms: to_u64(r.get(2)?),
                    type_: r.get(3)?,
                    reason: r.get(4)?,
                    message: r.get(5)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}
