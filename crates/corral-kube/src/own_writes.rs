//! A pass's own writes, as the next pass waits for them: the operator plans from its watch
//! caches, which lag the API server (by seconds when it is saturated). A pass that planned
//! from a view older than the previous pass's writes would see a job it just admitted as
//! unadmitted beside its new pods, or miss pods it just made. The preconditions keep such a
//! plan's writes from landing, but the pass is wasted on refused writes and pods made again
//! under names already taken (`corral bench operator`, 500 jobs: 20 such creates of 1,320).

use std::time::Duration;

/// Objects a pass wrote: the next pass plans only once its watch caches show them (or a
/// short wait ran out), so that it never decides from a view older than its own writes: a
/// job whose status (and admission) it wrote must not look unadmitted beside its new pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// (namespace, name, resourceVersion) of each TrainingJob as the write left it.
    pub jobs: Vec<(String, String, String)>,
    /// (namespace, name) of each pod created.
    pub pods: Vec<(String, String)>,
    /// (name, resourceVersion) of each usage ledger ConfigMap as the write left it: a
    /// plane rebuilt from a view without them would count a closed admission's time
    /// nowhere.
    pub ledger: Vec<(String, String)>,
}

impl Written {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.pods.is_empty() && self.ledger.is_empty()
    }
}

/// Whether resourceVersion `have` is `want` or newer. Versions are opaque to clients, but
/// kube-apiserver's (etcd revisions) are increasing integers; others compare equal or not.
pub fn version_at_least(have: &str, want: &str) -> bool {
    match (have.parse::<u64>(), want.parse::<u64>()) {
        (Ok(h), Ok(w)) => h >= w,
        _ => have == want,
    }
}

/// How long a pass waits for the watch caches to show the previous pass's writes; past it,
/// it plans anyway (the preconditions still hold).
pub const CATCH_UP_LIMIT: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_revisions_where_they_are_numbers() {
        assert!(version_at_least("120", "120"));
        assert!(version_at_least("1000", "999"), "not as text");
        assert!(!version_at_least("999", "1000"));
        assert!(version_at_least("abc", "abc"));
        assert!(!version_at_least("abd", "abc"), "opaque: equal or not");
    }
}
