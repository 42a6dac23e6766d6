//! Why an admitted job was preempted, in words.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why an admitted job was preempted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PreemptionReason {
    /// A job of higher priority needed the room.
    LowerPriority {
        preemptor: String,
        preemptor_priority: i32,
        victim_priority: i32,
    },
    /// The preemptor's queue reclaims quota it lent to the victim's queue.
    Reclaim {
        preemptor: String,
        queue: String,
        pool: String,
    },
    /// A job of the same priority that has received much less service needed the room
    /// (least attained service first).
    AttainedService {
        preemptor: String,
        /// Attained service in GPU-seconds of the preemptor and of the victim.
        preemptor_service: f64,
        victim_service: f64,
    },
    /// The job moves to a pool where it runs faster and that has room.
    Rebalance {
        from_pool: String,
        to_pool: String,
        /// Its throughput there over its throughput where it ran.
        speedup: f64,
        /// The job it traded places with, which gains much less from this job's new pool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        swapped_with: Option<String>,
    },
}

/// What a victim is told of a job in another namespace: never its name (tenants are walled
/// off; a job's name can say what a team works on).
const ELSEWHERE: &str = "a job of another namespace";

/// `other` (a job key, `namespace/name`) as `viewer` (another job's key) may read it: by
/// name within its own namespace, else as [`ELSEWHERE`]. Every message about one job that
/// names another goes through it.
pub fn job_as_seen_by(viewer: &str, other: &str) -> String {
    let namespace = |job: &str| job.split_once('/').map(|(ns, _)| ns.to_string());
    if namespace(other) == namespace(viewer) {
        other.to_string()
    } else {
        ELSEWHERE.to_string()
    }
}

impl PreemptionReason {
    /// The reason as `victim` (a job key, `namespace/name`) may read it: a job of another
    /// namespace is not named.
    pub fn as_seen_by(&self, victim: &str) -> PreemptionReason {
        let shown = |other: &str| job_as_seen_by(victim, other);
        let mut seen = self.clone();
        match &mut seen {
            PreemptionReason::LowerPriority { preemptor, .. }
            | PreemptionReason::Reclaim { preemptor, .. }
            | PreemptionReason::AttainedService { preemptor, .. } => {
                *preemptor = shown(preemptor);
            }
            PreemptionReason::Rebalance { swapped_with, .. } => {
                if let Some(other) = swapped_with {
                    *other = shown(other);
                }
            }
        }
        seen
    }
}

impl fmt::Display for PreemptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreemptionReason::LowerPriority {
                preemptor,
                preemptor_priority,
                victim_priority,
            } => write!(
                f,
                "preempted to make room for {preemptor}, which has higher priority ({preemptor_priority} > {victim_priority})"
            ),
            PreemptionReason::Reclaim {
                preemptor,
                queue,
                pool,
            } => write!(
                f,
                "preempted because queue {queue} reclaims its quota in pool {pool}, which this job's queue had borrowed (for {preemptor})"
            ),
            PreemptionReason::AttainedService {
                preemptor,
                preemptor_service,
                victim_service,
            } => write!(
                f,
                "preempted to make room for {preemptor}, which has had much less service at the same priority ({:.1} < {:.1} GPU-hours)",
                preemptor_service / 3600.0,
                victim_service / 3600.0
            ),
            PreemptionReason::Rebalance {
                from_pool,
                to_pool,
                speedup,
                swapped_with: None,
            } => write!(
                f,
                "moved from pool {from_pool} to pool {to_pool}, where it runs {speedup:.1}x faster"
            ),
            PreemptionReason::Rebalance {
                from_pool,
                to_pool,
                speedup,
                swapped_with: Some(other),
            } => write!(
                f,
                "moved from pool {from_pool} to pool {to_pool} (speed x{speedup:.2}), trading places with {other}, which gains much more or loses much less from the move"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_victim_reads_the_name_of_a_preemptor_of_its_own_namespace_only() {
        let reason = PreemptionReason::LowerPriority {
            preemptor: "team-b/secret-launch".into(),
            preemptor_priority: 100,
            victim_priority: 0,
        };
        let other = reason.as_seen_by("team-a/resnet").to_string();
        assert!(!other.contains("secret-launch"), "{other}");
        assert!(other.contains("a job of another namespace"), "{other}");
        let same = reason.as_seen_by("team-b/resnet").to_string();
        assert!(same.contains("team-b/secret-launch"), "{same}");
        let swap = PreemptionReason::Rebalance {
            from_pool: "a".into(),
            to_pool: "b".into(),
            speedup: 2.0,
            swapped_with: Some("team-b/x".into()),
        };
        assert!(
            !swap.as_seen_by("team-a/y").to_string().contains("team-b/x"),
            "a swap partner of another namespace is not named"
        );
    }
}
