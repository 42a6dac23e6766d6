//! The scheduler's cycle as the plane takes it: admissions, preemptions and moves into
//! standings, changes and events, and the ledger of attained service.

use super::*;

impl ControlPlane {
    /// Keeps `holding` in step with a job's standing; called after every change of it.
    pub(super) fn sync_holding(&mut self, key: &str) {
        let holds = self
            .jobs
            .get(key)
            .is_some_and(|e| matches!(e.standing, Standing::Admitted(_) | Standing::Moving { .. }));
        if holds {
            self.holding.insert(key.to_string());
        } else {
            self.holding.remove(key);
        }
    }

    /// Counts the GPU-seconds every admitted job held since the last step, and hands each
    /// its attained service; one pass over the admitted jobs, nothing when no time passed.
    pub(super) fn accrue(&mut self, now: Millis) {
        let Some(seconds) = self.ledger.advance(now) else {
            return;
        };
        for key in &self.holding {
            let Some(e) = self.jobs.get(key) else {
                continue;
            };
            let a = match &e.standing {
                Standing::Admitted(a) | Standing::Moving { to: a, .. } => a,
                _ => continue,
            };
            let gpu_s = a.gpus() as f64 * seconds;
            self.ledger.add(
                key,
                e.job.spec.queue_name(),
                a.admission.gpu_type.as_deref(),
                gpu_s,
            );
            if let (Standing::Admitted(_), Ok(r)) = (&e.standing, &e.request) {
                let service = self.ledger.weighted(key, &r.throughput);
                self.scheduler.set_attained_service(key, service);
            }
        }
    }

    pub(super) fn apply_outcome(&mut self, outcome: CycleOutcome, now: Timestamp, step: &mut Step) {
        step.counters = outcome.counters;
        let now_ms = millis(now);
        let moved: BTreeMap<String, Admission> = outcome
            .moved
            .into_iter()
            .map(|a| (a.job.clone(), a))
            .collect();
        for p in outcome.preempted {
            let Some(e) = self.jobs.get_mut(&p.job) else {
                self.scheduler.finish(&p.job);
                continue;
            };
            let message = p.reason.as_seen_by(&p.job).to_string();
            match moved.get(&p.job) {
                Some(to) => {
                    // Stays admitted at the new placement, which is recorded now; the
                    // replicas stop and start there (a new attempt).
                    let to = HeldAdmission {
                        admission: to.clone(),
                        admitted_at: now_ms,
                    };
                    step.changes.push(Change::Admission {
                        job: p.job.clone(),
                        admission: Some(to.clone()),
                    });
                    step.event(
                        &p.job,
                        EventType::Normal,
                        event_reason::MOVED,
                        format!("{message}; moving to pool {}", to.admission.pool),
                    );
                    e.standing = Standing::Moving {
                        grace: e.grace,
                        message,
                        to,
                    };
                }
                None => {
                    // The job leaves the scheduler now and re-enters its queue once its
                    // replicas have stopped, so it cannot be admitted while they still run.
                    self.scheduler.finish(&p.job);
                    step.changes.push(Change::Admission {
                        job: p.job.clone(),
                        admission: None,
                    });
                    step.event(
                        &p.job,
                        EventType::Warning,
                        event_reason::PREEMPTED,
                        message.clone(),
                    );
                    e.standing = Standing::Preempting {
                        grace: e.grace,
                        message,
                    };
                }
            }
            self.sync_holding(&p.job);
            self.unsettled.insert(p.job);
        }
        for a in outcome.admitted {
            let Some(e) = self.jobs.get_mut(&a.job) else {
                self.scheduler.finish(&a.job);
                continue;
            };
            step.event(
                &a.job,
                EventType::Normal,
                event_reason::ADMITTED,
                admitted_message(&a),
            );
            let held = HeldAdmission {
                admission: a,
                admitted_at: now_ms,
            };
            step.changes.push(Change::Admission {
                job: held.admission.job.clone(),
                admission: Some(held.clone()),
            });
            let key = held.admission.job.clone();
            e.standing = Standing::Admitted(held);
            e.pending = None;
            self.sync_holding(&key);
            self.unsettled.insert(key);
        }
        for r in outcome.resized {
            self.apply_resize(r, now_ms, step);
        }
        for p in outcome.pending {
            if let Some(e) = self.jobs.get_mut(&p.job)
                && e.pending.as_ref() != Some(&p.reason)
            {
                e.pending = Some(p.reason);
                self.unsettled.insert(p.job);
            }
        }
    }

    /// An elastic job's new size: it holds the new admission (charged from now), and the
    /// lifecycle starts or stops the replicas that differ. One event says old, new and why.
    fn apply_resize(&mut self, r: crate::sched::Resize, now_ms: Millis, step: &mut Step) {
        let key = r.admission.job.clone();
        let Some(e) = self.jobs.get_mut(&key) else {
            return;
        };
        let held = match &mut e.standing {
            Standing::Admitted(h) | Standing::Moving { to: h, .. } => h,
            // The scheduler resizes only jobs it holds as running; the plane holds those
            // as admitted or moving.
            _ => return,
        };
        held.admission = r.admission.clone();
        held.admitted_at = now_ms;
        step.changes.push(Change::Admission {
            job: key.clone(),
            admission: Some(held.clone()),
        });
        step.event(
            &key,
            EventType::Normal,
            event_reason::RESIZED,
            r.as_seen_by_its_job().to_string(),
        );
        self.unsettled.insert(key);
    }
}

fn admitted_message(a: &Admission) -> String {
    let nodes: BTreeSet<&str> = a.placements.iter().map(|p| p.node.as_str()).collect();
    let ty = a
        .gpu_type
        .as_deref()
        .map(|t| format!(", GPU type {t}"))
        .unwrap_or_default();
    let gpus: Vec<String> = a
        .placements
        .iter()
        .filter(|p| !p.gpu_indices.is_empty())
        .map(|p| format!("{}-{}: {:?}", p.role, p.index, p.gpu_indices))
        .collect();
    let mut msg = format!(
        "admitted to pool {}{ty}: {} on {}",
        a.pool,
        match a.placements.len() {
            1 => "1 replica".to_string(),
            n => format!("{n} replicas"),
        },
        nodes.into_iter().collect::<Vec<_>>().join(", ")
    );
    if !gpus.is_empty() {
        msg.push_str(&format!(" (GPUs {})", gpus.join(", ")));
    }
    msg
}
