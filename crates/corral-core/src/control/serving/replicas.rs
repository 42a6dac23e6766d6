//! Which replica jobs of a served model to create or remove so that as many as desired
//! live. Each replica is a one-replica TrainingJob (`corral_api::served_model::replica_job`)
//! submitted to the control plane, so that the same scheduler, queues, quotas and
//! priorities place it, and a serving priority class above training's preempts training
//! with its grace period.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

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
    /// Requests under way on it (the router's count).
    pub in_flight: u32,
}

/// What to do to one replica job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReplicaAction {
    /// Submit replica `index`'s job.
    Create(u32),
    /// Take replica `index` out of the router's rotation: it gets no new request and keeps
    /// running until those under way on it have ended ([`ReplicaDrains`]), then it is
    /// removed.
    Drain(u32),
    /// Delete replica `index`'s job (it stops with its grace period; the router takes it
    /// out of rotation first).
    Remove(u32),
}

/// How long a draining replica may keep requests under way before it is removed anyway
/// (Knative's default request timeout): a stream that never ends does not hold a replica
/// for ever.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// A model's replicas taken out of rotation for a scale-down, by index, and since when:
/// kept between decisions, so that a ready replica is removed only once the requests under
/// way on it have ended (a scale-down, to zero included, drops no request).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaDrains {
    since: BTreeMap<u32, Timestamp>,
}

impl ReplicaDrains {
    /// Whether replica `index` is draining (out of rotation).
    pub fn contains(&self, index: u32) -> bool {
        self.since.contains_key(&index)
    }

    /// Forgets the drains of replicas that are gone, finished or being deleted: `replicas`
    /// are every replica of the model, of every revision.
    pub fn forget_gone<'a>(&mut self, replicas: impl IntoIterator<Item = &'a ReplicaView>) {
        let alive: BTreeSet<u32> = replicas
            .into_iter()
            .filter(|r| !r.finished && !r.deleting)
            .map(|r| r.index)
            .collect();
        self.since.retain(|i, _| alive.contains(i));
    }

    /// The replicas draining, by index.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.since.keys().copied()
    }

    /// As [`plan_replicas`], with drains: a scale-down drains the ready replicas it takes
    /// (`drain_first`; a revision that drained whole has nothing under way to wait for), and
    /// a draining replica is removed once the router, told in an earlier decision, has
    /// nothing under way on it, or after [`DRAIN_LIMIT`]. Draining replicas are not live: a
    /// scale-up while one drains creates new ones. Call [`ReplicaDrains::forget_gone`] with
    /// the model's replicas first.
    pub fn plan(
        &mut self,
        desired: u32,
        existing: &[ReplicaView],
        taken: &mut BTreeSet<u32>,
        now: Timestamp,
        drain_first: bool,
    ) -> Vec<ReplicaAction> {
        let mut drained = Vec::new();
        for r in existing
            .iter()
            .filter(|r| self.contains(r.index) && !r.finished && !r.deleting)
        {
            let since = self.since[&r.index];
            let quiet = since < now && r.in_flight == 0;
            if quiet || now.duration_since(since).unsigned_abs() >= DRAIN_LIMIT {
                drained.push(ReplicaAction::Remove(r.index));
            }
        }
        let others: Vec<ReplicaView> = existing
            .iter()
            .filter(|r| !self.contains(r.index))
            .copied()
            .collect();
        taken.extend(existing.iter().map(|r| r.index));
        let mut actions = plan_replicas(desired, &others, taken);
        if drain_first {
            for a in &mut actions {
                if let ReplicaAction::Remove(i) = *a
                    && others
                        .iter()
                        .any(|r| r.index == i && r.ready && !r.finished)
                {
                    self.since.insert(i, now);
                    *a = ReplicaAction::Drain(i);
                }
            }
        }
        actions.extend(drained);
        actions.sort();
        actions
    }
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
            in_flight: 0,
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

    fn decide(
        drains: &mut ReplicaDrains,
        desired: u32,
        existing: &[ReplicaView],
        now: Timestamp,
    ) -> Vec<ReplicaAction> {
        drains.forget_gone(existing);
        drains.plan(desired, existing, &mut BTreeSet::new(), now, true)
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("valid")
    }

    #[test]
    fn a_ready_replica_drains_before_it_goes_and_an_unready_one_goes_at_once() {
        let mut drains = ReplicaDrains::default();
        let mut busy = view(2, true);
        busy.in_flight = 3;
        let existing = [view(0, true), view(1, false), busy];
        let actions = decide(&mut drains, 1, &existing, at(0));
        assert_eq!(
            actions,
            vec![ReplicaAction::Drain(2), ReplicaAction::Remove(1)]
        );
        // Still busy: it stays; replica 0 alone is live, so nothing else changes.
        let existing = [view(0, true), busy];
        assert!(decide(&mut drains, 1, &existing, at(5)).is_empty());
        // A scale-up meanwhile creates a new replica; the draining one is not reused.
        let actions = decide(&mut drains, 2, &existing, at(6));
        assert_eq!(actions, vec![ReplicaAction::Create(1)]);
        // Its requests have ended: removed.
        let done = view(2, true);
        let actions = decide(&mut drains, 1, &[view(0, true), done], at(7));
        assert_eq!(actions, vec![ReplicaAction::Remove(2)]);
        // Gone: forgotten.
        decide(&mut drains, 1, &[view(0, true)], at(8));
        assert!(!drains.contains(2));
    }

    #[test]
    fn a_drain_that_never_ends_is_cut_at_the_limit() {
        let mut drains = ReplicaDrains::default();
        let mut stream = view(0, true);
        stream.in_flight = 1;
        assert_eq!(
            decide(&mut drains, 0, &[stream], at(0)),
            vec![ReplicaAction::Drain(0)]
        );
        assert!(decide(&mut drains, 0, &[stream], at(299)).is_empty());
        assert_eq!(
            decide(&mut drains, 0, &[stream], at(300)),
            vec![ReplicaAction::Remove(0)]
        );
    }

    #[test]
    fn a_replica_is_not_removed_in_the_decision_that_drains_it() {
        // Nothing under way yet, but the router has not been told: one more decision.
        let mut drains = ReplicaDrains::default();
        assert_eq!(
            decide(&mut drains, 0, &[view(0, true)], at(0)),
            vec![ReplicaAction::Drain(0)]
        );
        assert_eq!(decide(&mut drains, 0, &[view(0, true)], at(0)), vec![]);
        assert_eq!(
            decide(&mut drains, 0, &[view(0, true)], at(1)),
            vec![ReplicaAction::Remove(0)]
        );
    }
}
