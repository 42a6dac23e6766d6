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

    /// Each of `queues` with its usage per pool (what its admitted jobs hold, its quota
    /// and borrowing limit there) and how many of its jobs are admitted and pending: what
    /// `corral queues` shows, in every shell.
    pub fn queue_infos(
        &self,
        queues: &[crate::sched::QueueConfig],
    ) -> Vec<crate::views::QueueInfo> {
        use crate::views::{QueueInfo, QueuePoolUsage};
        let mut admitted: BTreeMap<&str, u32> = BTreeMap::new();
        let mut pending: BTreeMap<&str, u32> = BTreeMap::new();
        for (key, e) in &self.jobs {
            let queue = e.job.spec.queue_name();
            if self.admission(key).is_some() {
                *admitted.entry(queue).or_default() += 1;
            } else if self.is_pending(key) {
                *pending.entry(queue).or_default() += 1;
            }
        }
        let pools = self.pool_names();
        queues
            .iter()
            .map(|q| QueueInfo {
                name: q.name.clone(),
                cohort: q.cohort.clone(),
                weight: q.weight,
                pending: pending.get(q.name.as_str()).copied().unwrap_or(0),
                admitted: admitted.get(q.name.as_str()).copied().unwrap_or(0),
                usage: pools
                    .iter()
                    .map(|pool| QueuePoolUsage {
                        pool: pool.to_string(),
                        used: self
                            .queue_usage(&q.name, pool)
                            .unwrap_or(ResourceAmount::ZERO),
                        nominal: q.quotas.get(*pool).map(|p| p.nominal.into()),
                        borrowing_limit: q
                            .quotas
                            .get(*pool)
                            .and_then(|p| p.borrowing_limit)
                            .map(Into::into),
                    })
                    .collect(),
            })
            .collect()
    }

    /// What a shell's read API answers from the plane, taken at `now` in one go: why each
    /// queued job waits, every admission, the queues, the open charges and the budgets.
    /// (The operator takes one after each pass; its HTTP handlers read that, never the
    /// plane.)
    pub fn read_view(
        &self,
        cluster: &crate::sched::ClusterSnapshot,
        now: Timestamp,
    ) -> crate::views::PlaneView {
        // The queues as the plane has them: `default` included where none is declared.
        let queues = crate::control::rules::with_default_queue(
            cluster.queues.clone(),
            &cluster.pools,
            &cluster.nodes,
        );
        let mut pending = BTreeMap::new();
        for (key, e) in &self.jobs {
            if let (Standing::Queued, Some(r)) = (&e.standing, &e.pending) {
                pending.insert(key.clone(), r.to_string());
            }
        }
        let admissions = self
            .admissions()
            .map(|(key, held)| {
                (
                    key.to_string(),
                    crate::views::AdmissionInfo {
                        pool: held.admission.pool.clone(),
                        gpu_type: held.admission.gpu_type.clone(),
                        admitted_at: i64::try_from(held.admitted_at)
                            .ok()
                            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
                            .unwrap_or(Timestamp::UNIX_EPOCH),
                        placements: held.admission.placements.clone(),
                    },
                )
            })
            .collect();
        crate::views::PlaneView {
            at: now,
            pending,
            admissions,
            queues: self.queue_infos(&queues),
            open_usage: self.open_usage(now),
            budgets: self.budget_standings(now),
        }
    }

    /// Jobs that will be reconciled in the next step.
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
    }
}
