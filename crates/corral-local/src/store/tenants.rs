//! The uid each namespace's replicas run under (see `corral_core::tenancy`): recorded so
//! that an assignment never moves, whatever namespaces come later.

use std::collections::BTreeMap;

use rusqlite::params;

use super::{Store, StoreError};

/// Made on open when missing: a table of its own, so that older stores gain it without a
/// schema change.
pub(super) const TENANT_IDS_TABLE: &str = "CREATE TABLE IF NOT EXISTS tenant_ids (
    uid INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL UNIQUE
);";

impl Store {
    /// Every recorded assignment, uid -> namespace.
    pub fn tenant_ids(&self) -> Result<BTreeMap<u32, String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT uid, namespace FROM tenant_ids")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records `namespace`'s uid, replacing an earlier one of the namespace (one outside a
    /// range that changed since).
    pub fn record_tenant_id(&self, namespace: &str, uid: u32) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO tenant_ids (uid, namespace) VALUES (?1, ?2)")?
            .execute(params![uid, namespace])?;
        Ok(())
    }
}
