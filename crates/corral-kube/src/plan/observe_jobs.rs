//! Stage 1: every TrainingJob as the control plane restores it: the job with its uid and
//! creation time, the pods it owns (observed as replica incarnations), the admission recorded
//! in its status, its node selector and tolerations, and whether it is being deleted.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use corral_api::training_job::TrainingJob;
use corral_core::control::{
    HeldAdmission, JobRecord, LaunchRejection, RestoredJob, SchedulingHints,
};

use crate::consts::{ADMISSION_ANNOTATION, LAUNCH_REJECTED_ANNOTATION};
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
    let mut pods_by_job: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in &world.pods {
        if let Some(k) = observe::pod_job_key(p) {
            pods_by_job.entry(k).or_default().push(p);
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
            let hints =
                observe::job_constraints(job).map(|(node_selector, tolerations)| SchedulingHints {
                    node_selector,
                    tolerations,
                    ..SchedulingHints::default()
                });
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
            let pods = pods_by_job
                .get(&key)
                .map(|ps| ps.iter().copied().filter(|p| owned_by(p, job)).collect())
                .unwrap_or_default();
            ObservedJob {
                deleting: world.deleting_jobs.contains(&key),
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
