//! The usage ledger's closed intervals (`corral_core::control::accounting`): one row per
//! interval a step closed, written in the step's own transaction, never deleted with its
//! job. Open intervals are the admissions the store keeps anyway.

use corral_core::control::accounting::UsageInterval;
use rusqlite::params;

use super::{Store, StoreError, to_i64, to_u64};

/// Created on open, for stores of every schema version (a table only: a data directory
/// an older release opens again keeps working, and records nothing there).
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS usage (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    job       TEXT NOT NULL,
    queue     TEXT NOT NULL,
    gpu_type  TEXT NOT NULL,
    gpus      INTEGER NOT NULL,
    cpu_milli INTEGER NOT NULL,
    start_ms  INTEGER NOT NULL,
    end_ms    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_end ON usage (end_ms);
CREATE INDEX IF NOT EXISTS usage_by_namespace ON usage (namespace, end_ms);
";

impl Store {
    /// Records closed intervals (inside the step's batch).
    pub fn add_usage(&self, intervals: &[UsageInterval]) -> Result<(), StoreError> {
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO usage (namespace, job, queue, gpu_type, gpus, cpu_milli, start_ms, end_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for i in intervals {
            let name = i.job.split_once('/').map_or(i.job.as_str(), |(_, n)| n);
            insert.execute(params![
                i.namespace(),
                name,
                i.queue,
                i.gpu_type,
                i.gpus,
                to_i64(i.cpu_milli),
                to_i64(i.start),
                to_i64(i.end),
            ])?;
        }
        Ok(())
    }

    /// Closed intervals that overlap `[from, to)`, of one namespace or all, oldest first.
    pub fn usage(
        &self,
        namespace: Option<&str>,
        from: u64,
        to: u64,
    ) -> Result<Vec<UsageInterval>, StoreError> {
        let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<UsageInterval> {
            let ns: String = r.get(0)?;
            let name: String = r.get(1)?;
            Ok(UsageInterval {
                job: format!("{ns}/{name}"),
                queue: r.get(2)?,
                gpu_type: r.get(3)?,
                gpus: r.get(4)?,
                cpu_milli: to_u64(r.get(5)?),
                start: to_u64(r.get(6)?),
                end: to_u64(r.get(7)?),
            })
        };
        const COLUMNS: &str =
            "SELECT namespace, job, queue, gpu_type, gpus, cpu_milli, start_ms, end_ms FROM usage";
        let rows = match namespace {
            Some(ns) => self
                .conn
                .prepare_cached(&format!(
                    "{COLUMNS} WHERE namespace = ?1 AND end_ms > ?2 AND start_ms < ?3 ORDER BY id"
                ))?
                .query_map(params![ns, to_i64(from), to_i64(to)], row)?
                .collect::<Result<Vec<_>, _>>()?,
            None => self
                .conn
                .prepare_cached(&format!(
                    "{COLUMNS} WHERE end_ms > ?1 AND start_ms < ?2 ORDER BY id"
                ))?
                .query_map(params![to_i64(from), to_i64(to)], row)?
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(job: &str, start: u64, end: u64) -> UsageInterval {
        UsageInterval {
            job: job.to_string(),
            queue: "q".into(),
            gpu_type: "H100".into(),
            gpus: 2,
            cpu_milli: 1500,
            start,
            end,
        }
    }

    #[test]
    fn intervals_read_back_by_namespace_and_time() {
        let store = Store::open_in_memory().expect("store");
        let rows = [
            interval("a/x", 0, 10),
            interval("a/y", 10, 20),
            interval("b/z", 5, 30),
        ];
        store.add_usage(&rows).expect("add");
        assert_eq!(store.usage(None, 0, 100).expect("all"), rows.to_vec());
        assert_eq!(
            store.usage(Some("a"), 12, 100).expect("a"),
            vec![rows[1].clone()]
        );
        assert_eq!(store.usage(Some("b"), 30, 100).expect("none"), vec![]);
    }
}
