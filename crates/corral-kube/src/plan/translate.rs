//! Stage 4: the control plane's [`Step`] as Kubernetes work, one [`JobPlan`] per job:
//! - `Change::Status` -> the status to apply (the last one of the step), with the admission
//!   the plane holds in `status.admission`;
//! - `Change::Admission` -> the status to apply, for its `admission`;
//! - `Change::Deleting` -> delete the TrainingJob (its TTL after finishing passed);
//!   `Change::Removed` -> nothing (every replica has stopped; the job is going);
//!   `Change::Retired` -> nothing (the job finished; its object stays as it is);
//! - `Action::Start` -> a pod (and the job's headless Service and launch ConfigMap);
//! - `Action::Stop` -> a pod deletion with the plane's grace period and a UID precondition;
//! - events -> Kubernetes Events, as the plane words them; one that announces a condition
//!   the status written with it keeps is marked `kept_in_status`.

use std::collections::BTreeMap;

use corral_core::control::{Change, ControlPlane, EventType, Step, kept_in_status};
use corral_core::lifecycle::{Action, ReplicaId, conditions};

use super::observe_jobs::ObservedJob;
use super::{AdmissionChange, JobPlan, PlannedEvent, PodDeletion};
use crate::build::{self, BuildOptions};
use crate::observe::{self, Amounts, World};
use crate::record;

/// The pods a job's plan creates, by replica, with what each requests (for the bindings).
#[derive(Default)]
pub(super) struct Creating {
    pub requests: BTreeMap<ReplicaId, Amounts>,
}

/// Fills `plans` from the step; returns the pods created per job.
pub(super) fn translate(
    step: &Step,
    plane: &ControlPlane,
    jobs: &[ObservedJob<'_>],
    world: &World,
    plans: &mut BTreeMap<String, JobPlan>,
    build_options: &BuildOptions,
) -> BTreeMap<String, Creating> {
    let by_key: BTreeMap<&str, &ObservedJob<'_>> =
        jobs.iter().map(|o| (o.key.as_str(), o)).collect();

    // Changes: the last status of each job wins; a job whose admission changed gets its
    // status written too, since the admission is recorded in it.
    for change in &step.changes {
        match change {
            Change::Status { job, status } => {
                if let Some(jp) = plans.get_mut(job) {
                    jp.status = Some(status.clone());
                }
            }
            Change::Admission { job, .. } => {
                if let (Some(jp), Some(j)) = (plans.get_mut(job), plane.job(job))
                    && jp.status.is_none()
                {
                    jp.status = Some(j.status.clone().unwrap_or_default());
                }
            }
            Change::Deleting { job } => {
                if let Some(jp) = plans.get_mut(job) {
                    jp.delete_job = true;
                }
            }
            // The Kubernetes store keeps the job as it is; the plane is rebuilt each pass.
            Change::Removed { .. } | Change::Retired { .. } => {}
        }
    }
    // Each status written carries the admission the plane holds after the step (none once
    // the job lost it or finished): one write makes both durable. The annotation earlier
    // operators wrote goes with the first such write.
    for (key, jp) in plans.iter_mut() {
        let Some(status) = &mut jp.status else {
            continue;
        };
        let held = plane.admission(key);
        status.admission = held.map(|h| Box::new(record::admission_record(h)));
        let observed = by_key.get(key.as_str());
        jp.status_words_only = observed
            .and_then(|o| o.job.status.as_ref())
            .is_some_and(|old| {
                let mut old = old.clone();
                old.admission = None;
                let mut new = status.clone();
                new.admission = None;
                conditions::only_waiting_words_differ(&old, &new)
            });
        if observed.is_some_and(|o| o.annotated) {
            jp.admission = AdmissionChange::Clear;
        }
    }

    // Actions: pods to create and to delete (the plane asks for each once per step).
    let mut creating: BTreeMap<String, Creating> = BTreeMap::new();
    for a in &step.actions {
        let (Some(jp), Some(o)) = (plans.get_mut(&a.job), by_key.get(a.job.as_str())) else {
            continue;
        };
        let job = o.job;
        match &a.action {
            Action::Start {
                replica,
                incarnation,
                placement,
            } => match build::build_pod(job, *replica, *incarnation, placement, build_options) {
                Ok(pod) => {
                    creating
                        .entry(a.job.clone())
                        .or_default()
                        .requests
                        .insert(*replica, observe::pod_requests(&pod));
                    jp.create.push(pod);
                }
                Err(e) => {
                    let message = e.to_string();
                    jp.event(true, "InvalidPodTemplate", message.clone());
                    jp.reject_launch(*replica, *incarnation, "InvalidPodTemplate", message);
                }
            },
            Action::Stop {
                replica,
                incarnation,
                grace_period,
                delete,
                reason,
            } => {
                let name = replica.name(&job.metadata.name);
                for p in &o.pods {
                    let same = p.metadata.name.as_deref() == Some(name.as_str())
                        && observe::replica_of(p).map(|(_, inc)| inc) == Some(*incarnation);
                    // A terminating pod is deleted again only to shorten its grace period
                    // (the plane's stop without one, once the job saved a checkpoint);
                    // otherwise never, which would cut its grace short.
                    let terminating = p.metadata.deletion_timestamp.is_some();
                    let shortens = p
                        .metadata
                        .deletion_grace_period_seconds
                        .is_some_and(|g| u64::try_from(g).unwrap_or(0) > grace_period.as_secs());
                    if !same || (terminating && !shortens) {
                        continue;
                    }
                    // On Kubernetes a pod stops only by being deleted; a finished pod's
                    // record stays unless the plane asks to delete it.
                    if !delete && observe::is_terminal(p) {
                        continue;
                    }
                    jp.delete.push(PodDeletion {
                        name: name.clone(),
                        uid: p.metadata.uid.clone(),
                        grace: *grace_period,
                        notice: (!terminating && !grace_period.is_zero())
                            .then(|| reason.as_str().to_string()),
                    });
                }
            }
            // The plane carries out the other lifecycle actions itself.
            Action::Requeue | Action::Release | Action::DeleteJob => {}
        }
    }

    // The headless Service (and the launch ConfigMap with new pods) of every job that holds
    // an admission and has not finished.
    for (key, jp) in plans.iter_mut() {
        let (Some(o), Some(_), Some(job)) = (
            by_key.get(key.as_str()),
            plane.admission(key),
            plane.job(key),
        ) else {
            continue;
        };
        if job.status.as_ref().is_some_and(conditions::is_terminal) {
            continue;
        }
        let has_service = world.services.iter().any(|s| {
            s.metadata.name.as_deref() == Some(o.job.metadata.name.as_str())
                && s.metadata.namespace.as_deref() == Some(jp.namespace.as_str())
        });
        // Written once: re-applying it with every pod creation cost a write per restart
        // and per leader handover.
        if !has_service {
            match build::build_service(o.job) {
                Ok(s) => jp.service = Some(s),
                Err(e) => {
                    jp.event(true, "InvalidName", e.to_string());
                    jp.reject_first_launch("InvalidName", e.to_string());
                }
            }
        }
        if !jp.create.is_empty() {
            match build::build_config_map(o.job, build_options) {
                Ok(c) => jp.config_map = c,
                Err(e) => {
                    jp.event(true, "InvalidLaunch", e.to_string());
                    jp.reject_first_launch("InvalidLaunch", e.to_string());
                }
            }
            if build::ssh_mount_path(o.job).is_some() {
                match build::build_ssh_secret(o.job) {
                    Ok(s) => jp.ssh_secret = Some(s),
                    Err(e) => {
                        jp.event(true, "InvalidLaunch", e.to_string());
                        jp.reject_first_launch("InvalidLaunch", e.to_string());
                    }
                }
            }
        }
    }

    // A gang the operator cannot build is created not at all (its refusal is recorded).
    for jp in plans.values_mut() {
        if jp.reject.is_some() {
            jp.create.clear();
            jp.config_map = None;
            jp.ssh_secret = None;
        }
    }

    // Events, as the plane words them.
    for e in &step.events {
        if let Some(jp) = plans.get_mut(&e.job) {
            let kept_in_status = jp
                .status
                .as_ref()
                .is_some_and(|s| kept_in_status(e.reason, s));
            jp.events.push(PlannedEvent {
                warning: e.type_ == EventType::Warning,
                reason: e.reason.to_string(),
                note: e.message.clone(),
                recurring: false,
                kept_in_status,
            });
        }
    }
    creating
}
