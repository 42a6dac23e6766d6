//! How a job lets go of what it holds: back into its queue, out of the scheduler, or
//! removed once deleted.

use super::*;

impl ControlPlane {
    /// Every replica has stopped after a preemption, a move or a resume: the job takes its
    /// new placement (a move), or re-enters its queue with its history.
    pub(super) fn requeue(&mut self, key: &str, step: &mut Step) {
        let Some(e) = self.jobs.get_mut(key) else {
            return;
        };
        match std::mem::replace(&mut e.standing, Standing::Out) {
            Standing::Moving { to, .. } => {
                e.standing = Standing::Admitted(to);
                self.sync_holding(key);
                self.unsettled.insert(key.to_string());
                return;
            }
            Standing::Preempting { .. } => step.event(
                key,
                EventType::Normal,
                event_reason::REQUEUED,
                "all replicas stopped; back in the queue".to_string(),
            ),
            Standing::Admitted(_) => {
                self.scheduler.finish(key);
                step.changes.push(Change::Admission {
                    job: key.to_string(),
                    admission: None,
                });
            }
            Standing::Queued => e.standing = Standing::Queued,
            Standing::Out => {}
        }
        self.sync_holding(key);
        self.enqueue_if_waiting(key, step);
        self.unsettled.insert(key.to_string());
    }

    /// The job finished or was suspended and nothing of it runs: out of the scheduler.
    pub(super) fn release(&mut self, key: &str, step: &mut Step) {
        let Some(e) = self.jobs.get_mut(key) else {
            return;
        };
        match std::mem::replace(&mut e.standing, Standing::Out) {
            Standing::Admitted(_) | Standing::Moving { .. } => {
                self.scheduler.finish(key);
                step.changes.push(Change::Admission {
                    job: key.to_string(),
                    admission: None,
                });
            }
            Standing::Queued => {
                self.scheduler.finish(key);
            }
            Standing::Preempting { .. } | Standing::Out => {}
        }
        e.pending = None;
        self.sync_holding(key);
    }

    /// A deleted job: stop every replica; once none runs, it is removed. Returns whether
    /// it is settled (removed).
    pub(super) fn advance_deletion(&mut self, key: &str, step: &mut Step) -> bool {
        let Some(e) = self.jobs.get(key) else {
            return true;
        };
        let active: Vec<(ReplicaId, Incarnation)> = e
            .replicas
            .iter()
            .filter(|(_, p)| p.is_active())
            .map(|(k, _)| *k)
            .collect();
        if !active.is_empty() {
            for (id, inc) in active {
                step.actions.push(JobAction {
                    job: key.to_string(),
                    action: Action::Stop {
                        replica: id,
                        incarnation: inc,
                        grace_period: e.grace,
                        delete: true,
                        reason: lifecycle::StopReason::Stale,
                    },
                });
            }
            return false;
        }
        self.release(key, step);
        self.jobs.remove(key);
        self.holding.remove(key);
        self.ledger.forget_job(key);
        step.changes.push(Change::Removed {
            job: key.to_string(),
        });
        true
    }
}
