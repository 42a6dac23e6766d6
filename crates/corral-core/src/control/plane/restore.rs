//! Rebuilding the plane from what a shell stored: jobs, admissions, observed replicas,
//! and the names of retired jobs.

use super::*;
use crate::control::accounting::charge_of;

impl ControlPlane {
    /// Rebuilds the plane from what a shell stored. Admissions that no longer fit the
    /// cluster (a node went away, the machine shrank) are dropped, one by one, the job the
    /// scheduler names first: their jobs stop and requeue; the step returned says so
    /// (changes and `AdmissionLost` events) and must be persisted like any other. Fails only
    /// when the cluster itself is inconsistent (a node twice, a node too large).
    pub fn restore(
        cluster: ClusterSnapshot,
        config: ControlConfig,
        jobs: Vec<RestoredJob>,
        now: Timestamp,
    ) -> Result<(Self, Step), SchedError> {
        let ClusterSnapshot {
            nodes,
            pools,
            queues,
            running: _,
        } = cluster;
        let mut config = config;
        let config_budgets = config.budgets.clone();
        // The plane carries out a move itself (stop, then start on the new placement as a
        // new attempt), in every shell: the scheduler may move jobs in place.
        config.scheduler.move_in_place = true;
        let queues = rules::with_default_queue(queues, &pools, &nodes);
        let base = ClusterSnapshot {
            nodes,
            pools,
            queues,
            running: Vec::new(),
        };
        let mut step = Step::default();
        let mut entries: BTreeMap<String, Box<Entry>> = BTreeMap::new();
        let mut ledger = Ledger::default();
        let mut held: BTreeMap<String, HeldAdmission> = BTreeMap::new();
        // Every stored admission is charged since it was admitted; those dropped below are
        // closed now, by the step's changes.
        let mut charges = Charges::default();
        let mut moving: BTreeMap<String, (String, HeldAdmission)> = BTreeMap::new();
        for r in jobs {
            let key = r.record.key();
            let mut entry = Self::entry(&config, r.record);
            if let Some(s) = r.service {
                ledger.set_job(&key, s);
            }
            for o in r.replicas {
                merge_phase(&mut entry.replicas, o);
            }
            entry.deleting = r.deleting;
            if let Some(a) = &r.admission {
                charges.restore(charge_of(
                    entry.job.spec.queue_name(),
                    a,
                    entry.request.as_ref().ok(),
                ));
            }
            let status = entry.status();
            if lifecycle::is_preempting(&status) {
                let message = conditions::get(&status, ConditionType::Queued)
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                match r.admission {
                    // A preemption gives the admission back when it is decided, so a job
                    // stopping with one stored is moving: it holds its new placement.
                    Some(to) if entry.request.is_ok() => {
                        held.insert(key.clone(), to.clone());
                        moving.insert(key.clone(), (message, to));
                    }
                    // Its room was given to the preemptor: the admission is not taken back.
                    other => {
                        entry.standing = Standing::Preempting {
                            grace: entry.grace,
                            message,
                        };
                        if other.is_some() {
                            step.changes.push(Change::Admission {
                                job: key.clone(),
                                admission: None,
                            });
                        }
                    }
                }
            } else if let Some(a) = r.admission {
                if entry.request.is_ok() {
                    held.insert(key.clone(), a);
                } else {
                    step.changes.push(Change::Admission {
                        job: key.clone(),
                        admission: None,
                    });
                }
            }
            entries.insert(key, Box::new(entry));
        }
        // The scheduler's running set; an admission that does not fit is dropped (the
        // scheduler names the job), and the rest are tried again.
        let scheduler = loop {
            let running: Vec<RunningJob> = held
                .iter()
                .filter_map(|(key, a)| {
                    let request = entries.get(key)?.request.as_ref().ok()?;
                    Some(RunningJob {
                        request: request.clone(),
                        placements: a.admission.placements.clone(),
                        admitted_at: a.admitted_at,
                    })
                })
                .collect();
            let snapshot = ClusterSnapshot {
                running,
                ..base.clone()
            };
            match Scheduler::new(&snapshot, config.scheduler.clone()) {
                Ok(s) => break s,
                Err(e) => {
                    let Some(job) = e.job().map(str::to_string).filter(|j| held.contains_key(j))
                    else {
                        return Err(e);
                    };
                    held.remove(&job);
                    step.changes.push(Change::Admission {
                        job: job.clone(),
                        admission: None,
                    });
                    let message =
                        format!("the admission no longer holds: {e}; the job is requeued");
                    // It stops and requeues as a preempted job does: back in its queue once
                    // nothing of it runs, whether the plane lives on or is restored again.
                    if let Some(entry) = entries.get_mut(&job) {
                        entry.standing = Standing::Preempting {
                            grace: entry.grace,
                            message: message.clone(),
                        };
                    }
                    step.event(
                        &job,
                        EventType::Warning,
                        event_reason::ADMISSION_LOST,
                        message,
                    );
                }
            }
        };
        let mut plane = ControlPlane {
            config,
            scheduler,
            jobs: entries,
            unsettled: BTreeSet::new(),
            holding: BTreeSet::new(),
            ledger,
            retired: PackedNames::default(),
            retired_removed: Vec::new(),
            room: None,
            waiting_for_room: BTreeMap::new(),
            charges,
            budgets: Budgets::new(config_budgets),
        };
        for (key, a) in held {
            if let Some(e) = plane.jobs.get_mut(&key) {
                e.standing = match moving.remove(&key) {
                    Some((message, to)) => Standing::Moving {
                        grace: e.grace,
                        message,
                        to,
                    },
                    None => Standing::Admitted(a),
                };
                plane.holding.insert(key);
            }
        }
        // A moving job whose new placement no longer fits was dropped above: it stops and
        // requeues like a preempted job.
        for (key, (message, _)) in moving {
            if let Some(e) = plane.jobs.get_mut(&key) {
                e.standing = Standing::Preempting {
                    grace: e.grace,
                    message,
                };
            }
        }
        let keys: Vec<String> = plane.jobs.keys().cloned().collect();
        for key in keys {
            plane.enqueue_if_waiting(&key, &mut step);
            plane.unsettled.insert(key);
        }
        plane.ledger.advance(millis(now));
        plane.charge(millis(now), &mut step);
        Ok((plane, step))
    }

    /// Jobs a shell restores by name only ([`rules::restorable_by_name`] of its records;
    /// any other job goes through [`ControlPlane::restore`] and is retired by the plane
    /// itself). They are known as [`Change::Retired`] jobs are: their names are taken,
    /// `delete` removes them.
    pub fn restore_retired(&mut self, keys: impl IntoIterator<Item = String>) {
        for key in keys {
            if !self.jobs.contains_key(&key) {
                self.retired.insert(&key);
            }
        }
    }
}
