//! What the plane shows a shell: jobs, admissions, requests, reasons, usage.

use super::*;

impl ControlPlane {
    // ---- views ----------------------------------------------------------------------

    /// The job (spec and status) as the plane knows it.
    pub fn job(&self, key: &str) -> Option<&TrainingJob> {
        self.jobs.get(key).map(|e| &e.job)
    }

    /// The admission the job holds (a moving job: the one it moves to).
    pub fn admission(&self, key: &str) -> Option<&HeldAdmission> {
        match &self.jobs.get(key)?.standing {
            Standing::Admitted(a) | Standing::Moving { to: a, .. } => Some(a),
            _ => None,
        }
    }

    /// What the scheduler was asked for the job (its resources, priority, queue), when its
    /// spec could be read.
    pub fn request(&self, key: &str) -> Option<&JobRequest> {
        self.jobs.get(key)?.request.as_ref().ok()
    }

    /// Every admission held, in key order.
    pub fn admissions(&self) -> impl Iterator<Item = (&str, &HeldAdmission)> {
        self.holding.iter().filter_map(|k| {
            let (key, e) = self.jobs.get_key_value(k)?;
            match &e.standing {
                Standing::Admitted(a) | Standing::Moving { to: a, .. } => Some((key.as_str(), a)),
                _ => None,
            }
        })
    }

    /// Whether the plane knows the job only by name: it finished and was retired
    /// ([`Change::Retired`]).
    /// Whether the job waits for an admission ([`lifecycle::is_pending`]) and is not being
    /// deleted: what `pending` counts in every shell.
    pub fn is_pending(&self, key: &str) -> bool {
        self.jobs.get(key).is_some_and(|e| {
            !e.deleting && lifecycle::is_pending(&e.job.spec, e.job.status.as_ref())
        })
    }

    pub fn is_retired(&self, key: &str) -> bool {
        self.retired.contains(key)
    }

    /// Why the job still waits, in words, while it waits.
    pub fn pending_reason(&self, key: &str) -> Option<String> {
        let e = self.jobs.get(key)?;
        match (&e.standing, &e.pending) {
            (Standing::Queued, Some(r)) => Some(r.to_string()),
            _ => None,
        }
    }

    /// Why a job waits, in words: the scheduler's reason, or what keeps it from the
    /// scheduler (a job that cannot be admitted as written says so in its `Queued`
    /// condition).
    pub fn waiting_reason(&self, key: &str) -> Option<String> {
        self.pending_reason(key).or_else(|| {
            let status = self.jobs.get(key)?.job.status.as_ref()?;
            conditions::get(status, ConditionType::Queued)
                .filter(|c| c.status == ConditionStatus::True && !c.message.is_empty())
                .map(|c| c.message.clone())
        })
    }

    /// The grace period the job's replicas get.
    pub fn grace_period(&self, key: &str) -> Option<Duration> {
        self.jobs.get(key).map(|e| e.grace)
    }

    /// What a queue uses in a pool now.
    pub fn queue_usage(&self, queue: &str, pool: &str) -> Option<ResourceAmount> {
        self.scheduler.queue_usage(queue, pool)
    }

    /// Pool names, in the scheduler's order.
    pub fn pool_names(&self) -> Vec<&str> {
        self.scheduler.pool_names()
    }

    /// The ledger of attained service.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Jobs that will be reconciled in the next step.
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
    }
}
