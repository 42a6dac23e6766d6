//! The audit trail: every write made through the API (submit, delete, suspend, resume, and
//! any other change), who made it (the token's namespace and name, never the token), when,
//! and how it ended. Kept in `<data>/audit.db` ([`AUDIT_FILE`]), a SQLite database of its
//! own beside the store, capped at [`AUDIT_CAP`] entries: the oldest go first. A file of
//! its own, not a table of `corral.db`: in one file every recorded request contended with
//! the cluster's commits for the one WAL write lock (8 clients submitting: 5,970 -> 4,045
//! submissions/s in `corral bench api`).

use std::path::Path;

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::{DB_FILE, StoreError};

/// The audit trail's database, in the data directory.
pub const AUDIT_FILE: &str = "audit.db";

/// Entries kept: about 2 MB of store at 200 bytes each.
pub const AUDIT_CAP: i64 = 10_000;

const AUDIT_TABLE: &str = "CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    who TEXT NOT NULL,
    scope TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL
);";

/// One write through the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Order of arrival.
    #[serde(default)]
    pub seq: i64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The token's name (`name` in corral.yaml), else `token #<n>` (its place in the
    /// list), else `anonymous` where the server has no tokens.
    pub who: String,
    /// The namespace the token acts in; `*`: every namespace.
    pub scope: String,
    /// `POST`, `DELETE`, ...
    pub action: String,
    /// The path written to, with its query (`/api/v1/namespaces/a/trainingjobs?dryRun=All`).
    pub target: String,
    /// The HTTP status of the answer.
    pub status: u16,
    /// `ok`, or the refusal's code and message.
    pub outcome: String,
}

/// Moves the entries that a store of 0.1 kept in its own `audit` table into `conn`, once;
/// the table is dropped in the same transaction, so nothing is copied twice.
fn move_from_store(conn: &Connection, store: &Path) -> Result<(), StoreError> {
    if !store.exists() {
        return Ok(());
    }
    conn.execute(
        "ATTACH DATABASE ?1 AS store",
        params![store.to_string_lossy()],
    )?;
    let moved = (|| -> Result<(), StoreError> {
        let old: i64 = conn.query_row(
            "SELECT COUNT(*) FROM store.sqlite_master WHERE type = 'table' AND name = 'audit'",
            [],
            |r| r.get(0),
        )?;
        if old == 0 {
            return Ok(());
        }
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(
            "INSERT INTO main.audit (at_ms, who, scope, action, target, status, outcome) \
             SELECT at_ms, who, scope, action, target, status, outcome FROM store.audit \
             ORDER BY seq; \
             DROP TABLE store.audit;",
        )?;
        tx.commit()?;
        Ok(())
    })();
    conn.execute("DETACH DATABASE store", [])?;
    moved
}

/// The audit trail's connection to its database.
pub struct AuditLog {
    conn: Connection,
    cap: i64,
}

impl AuditLog {
    /// Opens the store's audit table in `data_dir` (the store made it when it opened).
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let path = data_dir.join(AUDIT_FILE);
        crate::tenancy::private_file(&path).map_err(|e| StoreError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let conn = Connection::open(&path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        // As the store's own connection: a commit is durable against a crash of the server
        // (the WAL is in the page cache), without an fsync per recorded request.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(AUDIT_TABLE)?;
        move_from_store(&conn, &data_dir.join(DB_FILE))?;
        Ok(AuditLog {
            conn,
            cap: AUDIT_CAP,
        })
    }

    /// The same log keeping `cap` entries (tests).
    pub fn with_cap(self, cap: i64) -> Self {
        AuditLog { cap, ..self }
    }

    /// Records one entry and drops the oldest beyond the cap ([`AUDIT_CAP`]).
    pub fn record(&self, e: &AuditEntry) -> Result<(), StoreError> {
        self.record_all(std::slice::from_ref(e))
    }

    /// Records entries in one transaction (one commit for a burst of requests) and drops
    /// the oldest beyond the cap.
    pub fn record_all(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO audit (at_ms, who, scope, action, target, status, outcome) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for e in entries {
                insert.execute(params![
                    e.at_ms as i64,
                    e.who,
                    e.scope,
                    e.action,
                    e.target,
                    e.status,
                    e.outcome
                ])?;
            }
        }
        let last = tx.last_insert_rowid();
        tx.prepare_cached("DELETE FROM audit WHERE seq <= ?1")?
            .execute(params![last - self.cap])?;
        tx.commit()?;
        Ok(())
    }

    /// The newest `limit` entries, oldest first.
    pub fn recent(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, at_ms, who, scope, action, target, status, outcome FROM \
             (SELECT * FROM audit ORDER BY seq DESC LIMIT ?1) ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![limit as i64], |r| {
            Ok(AuditEntry {
                seq: r.get(0)?,
                at_ms: r.get::<_, i64>(1)? as u64,
                who: r.get(2)?,
                scope: r.get(3)?,
                action: r.get(4)?,
                target: r.get(5)?,
                status: r.get(6)?,
                outcome: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            seq: 0,
            at_ms: n,
            who: "alice".into(),
            scope: "team-a".into(),
            action: "POST".into(),
            target: format!("/api/v1/namespaces/team-a/trainingjobs/{n}/suspend"),
            status: 200,
            outcome: "ok".into(),
        }
    }

    #[test]
    fn entries_a_store_kept_move_to_the_audit_file_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _store = super::super::Store::open(dir.path()).expect("store");
        {
            // The 0.1 layout: the trail as a table of the store.
            let old = Connection::open(dir.path().join(DB_FILE)).expect("store file");
            old.execute_batch(AUDIT_TABLE).expect("old table");
            for n in 0..3 {
                let e = entry(n);
                old.execute(
                    "INSERT INTO audit (at_ms, who, scope, action, target, status, outcome) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        e.at_ms as i64,
                        e.who,
                        e.scope,
                        e.action,
                        e.target,
                        e.status,
                        e.outcome
                    ],
                )
                .expect("old entry");
            }
        }
        let log = AuditLog::open(dir.path()).expect("audit");
        log.record(&entry(3)).expect("record");
        // A second opening (the server opens a writer and a reader) copies nothing again.
        let reader = AuditLog::open(dir.path()).expect("audit again");
        let got = reader.recent(100).expect("read");
        assert_eq!(
            got.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        let old = Connection::open(dir.path().join(DB_FILE)).expect("store file");
        let left: i64 = old
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'audit'",
                [],
                |r| r.get(0),
            )
            .expect("schema");
        assert_eq!(left, 0, "the store's old table is dropped");
    }

    #[test]
    fn a_batch_is_kept_whole_and_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = AuditLog::open(dir.path()).expect("audit").with_cap(4);
        let batch: Vec<_> = (0..6).map(entry).collect();
        log.record_all(&batch).expect("record");
        let got = log.recent(100).expect("read");
        assert_eq!(
            got.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
            vec![2, 3, 4, 5]
        );
    }

    #[test]
    fn entries_are_kept_in_order_and_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _store = super::super::Store::open(dir.path()).expect("store");
        let log = AuditLog::open(dir.path()).expect("audit").with_cap(3);
        for n in 0..5 {
            log.record(&entry(n)).expect("record");
        }
        let got = log.recent(100).expect("read");
        assert_eq!(
            got.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
            vec![2, 3, 4],
            "the newest 3, oldest first"
        );
        assert_eq!(log.recent(1).expect("read")[0].at_ms, 4);
    }
}
