//! The audit trail: every write made through the API (submit, delete, suspend, resume, and
//! any other change), who made it (the token's namespace and name, never the token), when,
//! and how it ended. Kept in the store, capped at [`AUDIT_CAP`] entries: the oldest go
//! first. Written through a connection of its own ([`AuditLog`]), so that recording a
//! request never waits for the cluster's lock.

use std::path::Path;

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::{DB_FILE, StoreError};

/// Entries kept: about 2 MB of store at 200 bytes each.
pub const AUDIT_CAP: i64 = 10_000;

pub(super) const AUDIT_TABLE: &str = "CREATE TABLE IF NOT EXISTS audit (
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

/// The audit trail's own connection to the store.
pub struct AuditLog {
    conn: Connection,
    cap: i64,
}

impl AuditLog {
    /// Opens the store's audit table in `data_dir` (the store made it when it opened).
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(data_dir.join(DB_FILE))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(AUDIT_TABLE)?;
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
        let tx = self.conn.unchecked_transaction()?;
        tx.prepare_cached(
            "INSERT INTO audit (at_ms, who, scope, action, target, status, outcome) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            e.at_ms as i64,
            e.who,
            e.scope,
            e.action,
            e.target,
            e.status,
            e.outcome
        ])?;
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
