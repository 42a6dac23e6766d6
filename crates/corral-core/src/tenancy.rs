//! Which identity a namespace's replicas run under on a machine the shell shares between
//! tenants: the decision of every shell that runs replicas itself (the embedded cluster);
//! on Kubernetes the cluster's own wall (namespaces, pod security) applies instead.
//!
//! When the server may change identities (it runs as root), each namespace gets a uid of
//! its own from a configured range, and a gid of the same number: its replicas cannot read
//! the server's files, another namespace's files, or signal another namespace's processes.
//!
//! The mapping is stable and collision-free:
//! - a namespace's first choice is a hash of its name (FNV-1a 64, fixed forever, so the
//!   same namespace gets the same uid on every machine with the same range);
//! - when that slot is taken (by another namespace, or by an account of the machine the
//!   shell reports as reserved), the next slots are tried in order, wrapping around;
//! - the shell records every assignment and hands the recorded ones back as `taken`: an
//!   assignment never moves while it is recorded and inside the range, whatever namespaces
//!   come later.

use std::collections::{BTreeMap, BTreeSet};

/// A range of uids (and the gids of the same numbers), as `/etc/subuid` writes one: the
/// first id and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    pub start: u32,
    pub count: u32,
}

/// The default range: 65,536 ids from 0x7000_0000 (1,879,048,192), a block systemd leaves
/// unassigned (above the container ranges it hands out, below 2^31, where some tools treat
/// ids as signed) and far above the ranges `useradd` writes to `/etc/subuid` (from 100,000).
pub const DEFAULT_ID_RANGE: IdRange = IdRange {
    start: 0x7000_0000,
    count: 65_536,
};

/// The lowest first id a range may have: below it are the machine's own system and
/// regular accounts.
pub const MIN_RANGE_START: u32 = 65_536;

/// The uid and gid a namespace's replicas run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantIdentity {
    pub uid: u32,
    pub gid: u32,
}

/// Why a range or an assignment was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenancyError {
    /// `tenants.uidRange` is not usable: the message names the field and what is valid.
    InvalidRange(String),
    /// Every id of the range is taken.
    RangeFull { start: u32, count: u32 },
}

impl std::fmt::Display for TenancyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TenancyError::InvalidRange(m) => write!(f, "{m}"),
            TenancyError::RangeFull { start, count } => write!(
                f,
                "every uid of tenants.uidRange ({start}, {count} ids) is taken by a namespace \
                 or an account of this machine: make the range larger"
            ),
        }
    }
}

impl std::error::Error for TenancyError {}

impl IdRange {
    /// Refuses a range that would hand out ids of the machine's accounts (below
    /// [`MIN_RANGE_START`]), root's, or the ids that mean "none" (`u32::MAX`, and
    /// `u32::MAX - 1`, the overflow id `nobody` of 16-bit interfaces is 65534 and is below
    /// the minimum anyway).
    pub fn validate(&self) -> Result<(), TenancyError> {
        if self.count == 0 {
            return Err(TenancyError::InvalidRange(
                "tenants.uidRange.count: 0; at least 1 id is needed (default 65536)".into(),
            ));
        }
        if self.start < MIN_RANGE_START {
            return Err(TenancyError::InvalidRange(format!(
                "tenants.uidRange.start: {}; must be at least {MIN_RANGE_START}, above the \
                 machine's own accounts (default {})",
                self.start, DEFAULT_ID_RANGE.start
            )));
        }
        let end = u64::from(self.start) + u64::from(self.count);
        if end > u64::from(u32::MAX - 1) {
            return Err(TenancyError::InvalidRange(format!(
                "tenants.uidRange: start {} + count {} passes {}, the last usable id",
                self.start,
                self.count,
                u32::MAX - 2
            )));
        }
        Ok(())
    }

    pub fn contains(&self, id: u32) -> bool {
        id >= self.start && u64::from(id) < u64::from(self.start) + u64::from(self.count)
    }
}

/// The uid (and gid) of `namespace`: its recorded one when `taken` holds it inside the
/// range, else the first free slot from its hash on. `taken`: every recorded assignment,
/// uid -> namespace; `reserved`: ids of the machine's own accounts and groups inside the
/// range, never handed out. The caller records a new assignment before using it.
pub fn identity_of(
    namespace: &str,
    range: IdRange,
    taken: &BTreeMap<u32, String>,
    reserved: &BTreeSet<u32>,
) -> Result<TenantIdentity, TenancyError> {
    range.validate()?;
    if let Some((&uid, _)) = taken
        .iter()
        .find(|(uid, ns)| ns.as_str() == namespace && range.contains(**uid))
    {
        return Ok(TenantIdentity { uid, gid: uid });
    }
    let first = fnv1a64(namespace.as_bytes()) % u64::from(range.count);
    for step in 0..u64::from(range.count) {
        let uid = range.start + ((first + step) % u64::from(range.count)) as u32;
        if !taken.contains_key(&uid) && !reserved.contains(&uid) {
            return Ok(TenantIdentity { uid, gid: uid });
        }
    }
    Err(TenancyError::RangeFull {
        start: range.start,
        count: range.count,
    })
}

/// FNV-1a, 64 bits: fixed, so that a namespace's first choice never changes between
/// versions (std's hasher may).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether a shell that runs replicas itself walls its tenants off: only a server that may
/// change identities (root) can run replicas as other users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Each namespace's replicas run under [`identity_of`] its namespace.
    PerNamespace(IdRange),
    /// Replicas run as the server's own user: every replica can read what the server can.
    Shared,
}

/// The isolation of a server running with effective uid `server_uid`.
pub fn isolation(server_uid: u32, range: IdRange) -> Isolation {
    if server_uid == 0 {
        Isolation::PerNamespace(range)
    } else {
        Isolation::Shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> IdRange {
        IdRange {
            start: 100_000,
            count: 4,
        }
    }

    #[test]
    fn the_same_namespace_gets_the_same_id_and_gid_equals_uid() {
        let none = BTreeMap::new();
        let a = identity_of("team-a", DEFAULT_ID_RANGE, &none, &BTreeSet::new()).expect("id");
        let b = identity_of("team-a", DEFAULT_ID_RANGE, &none, &BTreeSet::new()).expect("id");
        assert_eq!(a, b);
        assert_eq!(a.uid, a.gid);
        assert!(DEFAULT_ID_RANGE.contains(a.uid));
    }

    #[test]
    fn collisions_take_the_next_free_slot_and_recorded_ones_never_move() {
        let mut taken = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for ns in ["a", "b", "c", "d"] {
            let id = identity_of(ns, small(), &taken, &BTreeSet::new()).expect("room");
            assert!(seen.insert(id.uid), "{ns} got a taken uid {}", id.uid);
            taken.insert(id.uid, ns.to_string());
        }
        // Full: a fifth namespace is refused, the recorded ones still get theirs.
        assert!(matches!(
            identity_of("e", small(), &taken, &BTreeSet::new()),
            Err(TenancyError::RangeFull { .. })
        ));
        for (uid, ns) in &taken {
            let id = identity_of(ns, small(), &taken, &BTreeSet::new()).expect("recorded");
            assert_eq!(id.uid, *uid);
        }
    }

    #[test]
    fn reserved_ids_are_skipped() {
        let first = identity_of("x", small(), &BTreeMap::new(), &BTreeSet::new()).expect("id");
        let reserved = BTreeSet::from([first.uid]);
        let next = identity_of("x", small(), &BTreeMap::new(), &reserved).expect("id");
        assert_ne!(next.uid, first.uid);
        assert!(small().contains(next.uid));
    }

    #[test]
    fn a_recorded_id_outside_a_changed_range_is_replaced() {
        let taken = BTreeMap::from([(5_000_000, "x".to_string())]);
        let id = identity_of("x", small(), &taken, &BTreeSet::new()).expect("id");
        assert!(small().contains(id.uid));
    }

    #[test]
    fn ranges_that_would_hand_out_accounts_or_overflow_are_refused_by_field() {
        for (range, field) in [
            (
                IdRange {
                    start: 1000,
                    count: 10,
                },
                "tenants.uidRange.start",
            ),
            (
                IdRange {
                    start: 100_000,
                    count: 0,
                },
                "tenants.uidRange.count",
            ),
            (
                IdRange {
                    start: u32::MAX - 10,
                    count: 100,
                },
                "tenants.uidRange",
            ),
        ] {
            let e = range.validate().expect_err("invalid").to_string();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn only_root_isolates() {
        assert_eq!(
            isolation(0, DEFAULT_ID_RANGE),
            Isolation::PerNamespace(DEFAULT_ID_RANGE)
        );
        assert_eq!(isolation(1000, DEFAULT_ID_RANGE), Isolation::Shared);
    }
}
