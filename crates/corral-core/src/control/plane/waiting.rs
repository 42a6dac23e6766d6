//! Why a job waits: its starts held back for room, and the reason written into its status
//! (and its `blockedBy` kinds) while it waits for an admission.

use super::*;

impl ControlPlane {
    /// Takes the room a job's starts need, or holds them all back while the gang does not fit
    /// in the room observed (a Normal `WaitingForRoom` event says why, once per wait).
    /// Returns whether starts were held back.
    pub(super) fn hold_starts_without_room(
        &mut self,
        key: &str,
        actions: &mut Vec<Action>,
        step: &mut Step,
    ) -> bool {
        let Some(room) = self.room.as_mut() else {
            return false;
        };
        let groups = self.jobs.get(key).and_then(|e| e.request.as_ref().ok());
        let needs: Vec<Need> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Start {
                    replica, placement, ..
                } => {
                    let group = groups
                        .and_then(|r| r.groups.iter().find(|g| g.role == replica.role.as_str()));
                    Some(Need {
                        replica: replica.to_string(),
                        node: placement.node.clone(),
                        gpu_indices: placement.gpu_indices.clone(),
                        gpus: placement.gpu_indices.len() as u64,
                        cpu_milli: group.map_or(0, |g| g.cpu_milli),
                        memory_bytes: group.map_or(0, |g| g.memory_bytes),
                        extended: group.map(|g| g.extended.clone()).unwrap_or_default(),
                    })
                }
                _ => None,
            })
            .collect();
        if needs.is_empty() {
            self.waiting_for_room.remove(key);
            return false;
        }
        match room::take_gang(room, &needs) {
            Ok(()) => {
                self.waiting_for_room.remove(key);
                false
            }
            Err(why) => {
                actions.retain(|a| !matches!(a, Action::Start { .. }));
                if self.waiting_for_room.get(key) != Some(&why) {
                    step.event(
                        key,
                        EventType::Normal,
                        event_reason::WAITING_FOR_ROOM,
                        why.clone(),
                    );
                    self.waiting_for_room.insert(key.to_string(), why);
                }
                true
            }
        }
    }

    /// The pending reason goes into the `Queued` condition, and a job that cannot fit even
    /// on an empty cluster is marked `Unschedulable` (and keeps waiting).
    pub(super) fn explain_wait(
        &mut self,
        key: &str,
        old: &TrainingJobStatus,
        status: &mut TrainingJobStatus,
        now: Timestamp,
        step: &mut Step,
    ) {
        let Some(e) = self.jobs.get_mut(key) else {
            return;
        };
        if lifecycle::is_backing_off(status) {
            // Out of the scheduler until the back-off ends; the `Queued` message says why.
            status.blocked_by = vec![START_BACK_OFF_BLOCKER.to_string()];
            return;
        }
        if let Err(message) = &e.request
            && e.wants_admission()
            && conditions::is_true(status, ConditionType::Queued)
        {
            // Never admitted as written: the reason is written once into the status, and
            // announced once (a plane rebuilt each pass compares with the stored status).
            let text = format!("the job cannot be admitted as written: {message}");
            let kinds = vec![INVALID_BLOCKER.to_string()];
            let old_text = conditions::get(old, ConditionType::Queued).map(|c| c.message.as_str());
            if old.blocked_by != kinds || old_text != Some(text.as_str()) {
                step.event(key, EventType::Warning, event_reason::INVALID, text.clone());
            }
            status.blocked_by = kinds;
            conditions::set(
                status,
                ConditionType::Queued,
                ConditionStatus::True,
                INVALID_BLOCKER,
                text,
                now,
            );
            return;
        }
        let waiting = e.standing == Standing::Queued;
        let reason = e.pending.as_ref().filter(|_| waiting);
        let never_fits = reason.is_some_and(PendingReason::never_fits);
        if let Some(reason) = reason
            && conditions::is_true(status, ConditionType::Queued)
        {
            let text = reason.to_string();
            let old_text = conditions::get(old, ConditionType::Queued).map(|c| c.message.as_str());
            // What blocks the job is recorded in its status (`blockedBy`), so that a shell
            // that rebuilds the plane each pass announces a change once, like the others.
            let kinds = blocker_kinds(reason);
            let news = old.blocked_by != kinds;
            // Free GPUs and quota use move all the time: a reason whose numbers changed is
            // written at most every REASON_REFRESH (a status write each, for every waiting
            // job), one that names another blocker at once.
            let due = e
                .reason_written
                .is_none_or(|t| millis(now).saturating_sub(t) >= REASON_REFRESH_MS);
            if old_text != Some(text.as_str()) && (news || due) {
                if news {
                    step.event(key, EventType::Normal, event_reason::PENDING, text.clone());
                }
                status.blocked_by = kinds;
                e.reason_written = Some(millis(now));
                let c_reason = conditions::get(status, ConditionType::Queued)
                    .map(|c| c.reason.clone())
                    .unwrap_or_else(|| conditions::reason::QUEUED.to_string());
                conditions::set(
                    status,
                    ConditionType::Queued,
                    ConditionStatus::True,
                    &c_reason,
                    text,
                    now,
                );
            }
        }
        if !waiting {
            // Admitted, suspended, finished or stopping: nothing blocks it.
            status.blocked_by.clear();
        }
        if never_fits {
            let text = reason.map(|r| r.to_string()).unwrap_or_default();
            if !conditions::is_true(status, ConditionType::Unschedulable) {
                step.event(
                    key,
                    EventType::Warning,
                    event_reason::UNSCHEDULABLE,
                    format!("cannot run on this cluster even when it is empty: {text}"),
                );
            }
            conditions::set(
                status,
                ConditionType::Unschedulable,
                ConditionStatus::True,
                event_reason::UNSCHEDULABLE,
                text,
                now,
            );
        } else if reason.is_some() || !waiting {
            conditions::clear(
                status,
                ConditionType::Unschedulable,
                conditions::reason::QUEUED,
                "the cluster can hold the job".to_string(),
                now,
            );
        }
    }
}

/// What kinds of blockers a reason names, for deciding whether a change is news.
fn blocker_kinds(reason: &PendingReason) -> Vec<String> {
    use crate::sched::Blocker;
    let mut kinds: Vec<String> = reason
        .blockers
        .iter()
        .map(|b| {
            match b {
                Blocker::NoSuchQueue { .. } => "NoSuchQueue",
                Blocker::NamespaceNotAllowed { .. } => "NamespaceNotAllowed",
                Blocker::NoMatchingPool { .. } => "NoMatchingPool",
                Blocker::TooLargeForNode { .. } => "NodeSize",
                Blocker::TooLargeForPool { .. } => "PoolSize",
                Blocker::GangTooLarge { .. } => "GangSize",
                Blocker::NoQuota { .. } => "NoQuota",
                Blocker::TooFewHealthyGpus { .. } => "HealthyGpus",
                Blocker::NoSuitableNode { .. } => "NoSuitableNode",
                Blocker::Capacity { .. } => "Capacity",
                Blocker::Quota { .. } => "Quota",
                Blocker::AwaitingCycle => "AwaitingCycle",
                Blocker::Protected { .. } => "Protected",
                Blocker::OverBudget { .. } => "OverBudget",
            }
            .to_string()
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}
