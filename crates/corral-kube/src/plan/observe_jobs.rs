//! Stage 1: every TrainingJob as the control plane restores it: the job with its uid and
//! creation time, the pods it owns (observed as replica incarnations), the admission recorded
//! in its status, its node selector and tolerations, and whether it is being deleted.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use corral_api::training_job::TrainingJob;
use corral_core::control::{
    HeldAdmission, JobRecord, LaunchRejection, RestoredJob, SchedulingHints, restorable_by_name,
};

use crate::consts::{ADMISSION_ANNOTATION, JOB_NAME_LABEL, LAUNCH_REJECTED_ANNOTATION};
use crate::observe::{self, World};
use crate::record::{self, LaunchRejectionAnnotation};

/// One TrainingJob as observed this pass.
pub(super) struct ObservedJob<'a> {
    pub job: &'a TrainingJob,
    /// `namespace/name`: the job's key in the control plane.
    pub key: String,
    /// The pods this job owns (its controller is this job, by uid), of any incarnation.
    pub pods: Vec<&'a Pod>,
    /// Whether the job carries the admission annotation of earlier operators (readable or
    /// not): removed with the next status write, which records the admission instead.
    pub annotated: bool,
    /// The admission recorded on the job (`status.admission`, or the annotation).
    pub stored: Option<HeldAdmission>,
    /// Node selector and tolerations of its pod templates, or why they do not read.
    pub hints: Result<SchedulingHints, String>,
    /// Whether the job has a deletionTimestamp.
    pub deleting: bool,
    /// Finished for good, holding nothing ([`restorable_by_name`]): handed to the plane by
    /// name; its templates are not read (`hints` is empty).
    pub retired: bool,
    /// What the operator could not read, as Warning events: (reason, note).
    pub problems: Vec<(&'static str, String)>,
    /// A launch the API server refused for good, as recorded on the job.
    pub rejection: Option<LaunchRejection>,
}

impl ObservedJob<'_> {
    /// The job for [`corral_core::control::ControlPlane::restore`]; `None` when its pod
    /// templates do not read (the scheduler cannot honour a node selector it cannot read,
    /// and no pod could be built from them): such a job is left alone and reported.
    pub fn restored(&self, now: Timestamp) -> Option<RestoredJob> {
        let hints = self.hints.as_ref().ok()?.clone();
        let submitted = self.job.metadata.creation_timestamp.unwrap_or(now);
        // The plane holds the admission as `admission` below; its statuses never carry the
        // record (the operator adds the plane's admission to each status it writes).
        let mut job = self.job.clone();
        if let Some(status) = &mut job.status {
            status.admission = None;
        }
        Some(RestoredJob {
            record: JobRecord {
                job,
                uid: self.job.metadata.uid.clone().unwrap_or_default(),
                submitted: u64::try_from(submitted.as_millisecond()).unwrap_or(0),
                hints,
            },
            admission: self.stored.clone(),
            replicas: self
                .pods
                .iter()
                .filter_map(|p| observe::observe_pod(p))
                .collect(),
            deleting: self.deleting,
            service: None,
        })
    }
}

/// Whether a pod belongs to this job (its controller is this job, by uid).
fn owned_by(pod: &Pod, job: &TrainingJob) -> bool {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return true;
    };
    match pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        Some(o) => o.uid == uid,
        None => true,
    }
}

/// Every TrainingJob of the world, in key order.
pub(super) fn observe_jobs(world: &World) -> Vec<ObservedJob<'_>> {
    // By (namespace, job name), borrowed: every pass groups every pod of the cluster.
    let mut pods_by_job: HashMap<(&str, &str), Vec<&Pod>> = HashMap::new();
    for p in &world.pods {
        if let Some(job) = observe::label(&p.metadata, JOB_NAME_LABEL) {
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            pods_by_job.entry((ns, job)).or_default().push(p);
        }
    }
    let mut out: Vec<ObservedJob<'_>> = world
        .jobs
        .iter()
        .map(|job| {
            let key = observe::job_key(job);
            let mut problems = Vec::new();
            let stored = match record::recorded_admission(job, &key) {
                Ok(held) => held,
                Err(e) => {
                    problems.push(("InvalidAdmission", e));
                    None
                }
            };
            let pods: Vec<&Pod> = pods_by_job
                .get(&(
                    job.metadata.namespace_or_default(),
                    job.metadata.name.as_str(),
                ))
                .map(|ps| ps.iter().copied().filter(|p| owned_by(p, job)).collect())
                .unwrap_or_default();
            let deleting = world.deleting_jobs.contains(&key);
            // A job finished for good with nothing of it left is handed over by name (the
            // core's rule, as embedded): a long history costs the pass neither time nor
            // memory, so nothing more of it is read.
            let live_pod = pods.iter().any(|p| !observe::is_terminal(p));
            let retired = restorable_by_name(job, deleting, stored.is_some(), live_pod);
            let hints = if retired {
                Ok(SchedulingHints::default())
            } else {
                observe::job_constraints(job).map(|(node_selector, tolerations)| SchedulingHints {
                    node_selector,
                    tolerations,
                    ..SchedulingHints::default()
                })
            };
            if let Err(e) = &hints {
                problems.push(("Invalid", e.clone()));
            }
            let rejection = job
                .metadata
                .annotations
                .get(LAUNCH_REJECTED_ANNOTATION)
                .and_then(|t| {
                    match LaunchRejectionAnnotation::parse(t).and_then(|r| r.to_rejection()) {
                        Ok(r) => Some(r),
                        Err(e) => {
                            problems.push((
                                "InvalidAnnotation",
                                format!("annotation {LAUNCH_REJECTED_ANNOTATION}: {e}"),
                            ));
                            None
                        }
                    }
                });
            ObservedJob {
                deleting,
                retired,
                job,
                key,
                pods,
                annotated: job.metadata.annotations.contains_key(ADMISSION_ANNOTATION),
                stored,
                hints,
                problems,
                rejection,
            }
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}
