//! Which replica jobs of a served model to create or remove so that as many as desired
//! live. Each replica is a one-replica TrainingJob (`corral_api::served_model::replica_job`)
//! submitted to the control plane, so that the same scheduler, queues, quotas and
//! priorities place it, and a serving priority class above training's preempts training
//! with its grace period.

use std::collections::BTreeSet;

/// One replica job of a served model, as the shell sees it in the plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaView {
    pub index: u32,
    /// In the router's rotation (running and answering its readiness check).
    pub ready: bool,
    /// Its job has finished for good (failed past its backoff limit, or launch rejected):
    /// it will never serve again and is replaced.
    pub finished: bool,
    /// Already being deleted.
    pub deleting: bool,
}

/// What to do to one replica job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReplicaAction {
    /// Submit replica `index`'s job.
    Create(u32),
    /// Delete replica `index`'s job (it stops with its grace period; the router takes it
    /// out of rotation first).
    Remove(u32),
}

/// The actions that bring `existing` to `desired` live replicas: finished ones are replaced,
/// new ones take the lowest index not in `taken` (every index any replica of the model has,
/// those given here included; the new ones are added), and a scale-down removes replicas
/// not yet ready first (they serve nobody), then the highest indices.
pub fn plan_replicas(
    desired: u32,
    existing: &[ReplicaView],
    taken: &mut BTreeSet<u32>,
) -> Vec<ReplicaAction> {
    let mut actions = Vec::new();
    for r in existing.iter().filter(|r| r.finished && !r.deleting) {
        actions.push(ReplicaAction::Remove(r.index));
    }
    let mut live: Vec<&ReplicaView> = existing
        .iter()
        .filter(|r| !r.finished && !r.deleting)
        .collect();
    let want = desired as usize;
    if live.len() > want {
        // Not ready before ready, then highest index first.
        live.sort_by_key(|r| (r.ready, std::cmp::Reverse(r.index)));
        for r in &live[..live.len() - want] {
            actions.push(ReplicaAction::Remove(r.index));
        }
    } else {
        taken.extend(existing.iter().map(|r| r.index));
        let free: Vec<u32> = (0u32..)
            .filter(|i| !taken.contains(i))
            .take(want - live.len())
            .collect();
        for i in free {
            taken.insert(i);
            actions.push(ReplicaAction::Create(i));
        }
    }
    actions.sort();
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(index: u32, ready: bool) -> ReplicaView {
        ReplicaView {
            index,
            ready,
            finished: false,
            deleting: false,
        }
    }

    #[test]
    fn scales_up_into_the_lowest_free_indices() {
        let existing = [view(0, true), view(2, true)];
        assert_eq!(
            plan_replicas(4, &existing, &mut BTreeSet::new()),
            vec![ReplicaAction::Create(1), ReplicaAction::Create(3)]
        );
    }

    #[test]
    fn scales_down_the_unready_first_then_the_highest() {
        let existing = [view(0, true), view(1, false), view(2, true), view(3, true)];
        assert_eq!(
            plan_replicas(2, &existing, &mut BTreeSet::new()),
            vec![ReplicaAction::Remove(1), ReplicaAction::Remove(3)]
        );
    }

    #[test]
    fn replaces_a_finished_replica_under_a_new_index() {
        let mut dead = view(0, false);
        dead.finished = true;
        let existing = [dead, view(1, true)];
        assert_eq!(
            plan_replicas(2, &existing, &mut BTreeSet::new()),
            vec![ReplicaAction::Create(2), ReplicaAction::Remove(0)]
        );
    }

    #[test]
    fn a_replica_being_deleted_is_neither_live_nor_reused() {
        let mut going = view(0, true);
        going.deleting = true;
        assert_eq!(
            plan_replicas(1, &[going], &mut BTreeSet::new()),
            vec![ReplicaAction::Create(1)]
        );
        assert_eq!(plan_replicas(0, &[going], &mut BTreeSet::new()), vec![]);
    }
}
