//! What the operator stores on a TrainingJob: the admission it holds (`status.admission`,
//! and the `corral.dev/admission` annotation that earlier operators wrote).
//!
//! The annotation is the operator's own versioned record ([`AdmissionAnnotation`]), converted
//! explicitly to and from the core's [`HeldAdmission`], so that the scheduler's types can
//! change without breaking a running cluster. Reading is lenient on purpose:
//! - unknown fields are ignored, so an operator rolled back to an older version keeps the
//!   admissions a newer one wrote (and does not stop their gangs);
//! - a record without `v` is the format written before the record was versioned
//!   (`{"admittedAt", "job", "pool", "gpuType", "placements"}`), which this one reads as is.
//!
//! Writing keeps `job` and the placement fields of that older format, so that an operator
//! of the older format (which requires `job` and refuses unknown placement fields) still
//! reads what this one writes.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use corral_api::training_job::{AdmissionRecord, PlacementRecord, TrainingJob};

use corral_core::control::HeldAdmission;
use corral_core::sched::{Admission, ReplicaPlacement};

use crate::consts::ADMISSION_ANNOTATION;

/// The version this operator writes.
pub const ADMISSION_ANNOTATION_VERSION: u32 = 1;

/// The `corral.dev/admission` annotation: the admission a job holds, with the placement of
/// every replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionAnnotation {
    /// Version of the record; absent (0) in the format written before it was versioned.
    #[serde(default)]
    pub v: u32,
    /// When the job was admitted (ms since the epoch): recently admitted jobs are protected
    /// from preemption.
    pub admitted_at: u64,
    /// The job's `namespace/name`, as written; ignored when read (the record sits on the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub pool: String,
    #[serde(default)]
    pub gpu_type: Option<String>,
    #[serde(default)]
    pub placements: Vec<AnnotatedPlacement>,
}

/// Where one replica runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnnotatedPlacement {
    pub role: String,
    pub index: u32,
    pub node: String,
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
}

impl AdmissionAnnotation {
    /// The record of an admission the plane holds for a job.
    pub fn from_held(held: &HeldAdmission) -> Self {
        let a = &held.admission;
        AdmissionAnnotation {
            v: ADMISSION_ANNOTATION_VERSION,
            admitted_at: held.admitted_at,
            job: Some(a.job.clone()),
            pool: a.pool.clone(),
            gpu_type: a.gpu_type.clone(),
            placements: a
                .placements
                .iter()
                .map(|p| AnnotatedPlacement {
                    role: p.role.clone(),
                    index: p.index,
                    node: p.node.clone(),
                    gpu_indices: p.gpu_indices.clone(),
                })
                .collect(),
        }
    }

    /// The admission for the plane, of the job `key` (`namespace/name`) the record sits on.
    pub fn to_held(&self, key: &str) -> HeldAdmission {
        HeldAdmission {
            admitted_at: self.admitted_at,
            admission: Admission {
                job: key.to_string(),
                pool: self.pool.clone(),
                gpu_type: self.gpu_type.clone(),
                placements: self
                    .placements
                    .iter()
                    .map(|p| ReplicaPlacement {
                        role: p.role.clone(),
                        index: p.index,
                        node: p.node.clone(),
                        gpu_indices: p.gpu_indices.clone(),
                    })
                    .collect(),
            },
        }
    }

    /// Reads the annotation's text.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The annotation's text.
    pub fn to_text(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

/// The admission as the operator writes it now: in the job's status, in the same write as
/// the status that announces it (`status.admission`). The annotation is still read, for jobs
/// admitted by an operator that wrote it, and removed at the job's next admission change.
pub fn admission_record(held: &HeldAdmission) -> AdmissionRecord {
    let a = &held.admission;
    AdmissionRecord {
        admitted_at: i64::try_from(held.admitted_at)
            .ok()
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
            .unwrap_or(Timestamp::UNIX_EPOCH),
        pool: a.pool.clone(),
        gpu_type: a.gpu_type.clone(),
        placements: a
            .placements
            .iter()
            .map(|p| PlacementRecord {
                role: p.role.clone(),
                index: p.index,
                node: p.node.clone(),
                gpu_indices: p.gpu_indices.clone(),
            })
            .collect(),
    }
}

/// The admission recorded on the job `key`: `status.admission`, else the annotation that
/// earlier operators wrote; an annotation that does not read is an error in words.
pub fn recorded_admission(job: &TrainingJob, key: &str) -> Result<Option<HeldAdmission>, String> {
    if let Some(record) = job.status.as_ref().and_then(|s| s.admission.as_deref()) {
        return Ok(Some(held_admission(record, key)));
    }
    match job.metadata.annotations.get(ADMISSION_ANNOTATION) {
        None => Ok(None),
        Some(text) => AdmissionAnnotation::parse(text)
            .map(|r| Some(r.to_held(key)))
            .map_err(|e| format!("annotation {ADMISSION_ANNOTATION}: {e}")),
    }
}

/// The admission for the plane from `status.admission` of the job `key`.
pub fn held_admission(record: &AdmissionRecord, key: &str) -> HeldAdmission {
    HeldAdmission {
        admitted_at: u64::try_from(record.admitted_at.as_millisecond()).unwrap_or(0),
        admission: Admission {
            job: key.to_string(),
            pool: record.pool.clone(),
            gpu_type: record.gpu_type.clone(),
            placements: record
                .placements
                .iter()
                .map(|p| ReplicaPlacement {
                    role: p.role.clone(),
                    index: p.index,
                    node: p.node.clone(),
                    gpu_indices: p.gpu_indices.clone(),
                })
                .collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_record_round_trips_to_the_millisecond() {
        let held = AdmissionAnnotation::parse(UNVERSIONED)
            .expect("parses")
            .to_held("ml/llm");
        let mut held = held;
        held.admitted_at += 123;
        let record = admission_record(&held);
        assert_eq!(record.admitted_at.to_string(), "2025-01-01T00:00:00.123Z");
        assert_eq!(held_admission(&record, "ml/llm"), held);
        // As the API server stores it and gives it back.
        let text = serde_json::to_string(&record).expect("writes");
        let back: AdmissionRecord = serde_json::from_str(&text).expect("reads");
        assert_eq!(held_admission(&back, "ml/llm"), held);
    }

    /// The annotation as operators before the versioned record wrote it
    /// (`StoredAdmission { admitted_at, #[serde(flatten)] admission: Admission }`).
    const UNVERSIONED: &str = r#"{"admittedAt":1735689600000,"job":"ml/llm","pool":"NVIDIA-H100-80GB-HBM3","gpuType":"NVIDIA-H100-80GB-HBM3","placements":[{"role":"master","index":0,"node":"n1","gpuIndices":[0,1,2,3,4,5,6,7]},{"role":"worker","index":0,"node":"n2","gpuIndices":[0,1,2,3,4,5,6,7]}]}"#;

    #[test]
    fn reads_the_unversioned_annotation_of_earlier_operators() {
        let r = AdmissionAnnotation::parse(UNVERSIONED).expect("earlier format reads");
        assert_eq!(r.v, 0);
        let held = r.to_held("ml/llm");
        assert_eq!(held.admitted_at, 1_735_689_600_000);
        assert_eq!(held.admission.job, "ml/llm");
        assert_eq!(held.admission.pool, "NVIDIA-H100-80GB-HBM3");
        assert_eq!(
            held.admission.gpu_type.as_deref(),
            Some("NVIDIA-H100-80GB-HBM3")
        );
        assert_eq!(held.admission.placements.len(), 2);
        assert_eq!(held.admission.placements[1].role, "worker");
        assert_eq!(held.admission.placements[1].node, "n2");
        assert_eq!(
            held.admission.placements[1].gpu_indices,
            (0..8).collect::<Vec<u32>>()
        );
    }

    #[test]
    fn ignores_fields_a_newer_operator_added() {
        let text = r#"{"v":7,"admittedAt":5,"pool":"p","gpuType":null,"reservedFor":"x","placements":[{"role":"worker","index":1,"node":"n","gpuIndices":[3],"numa":0}]}"#;
        let r = AdmissionAnnotation::parse(text).expect("unknown fields are ignored");
        assert_eq!(r.v, 7);
        let held = r.to_held("ns/j");
        assert_eq!(held.admission.job, "ns/j");
        assert_eq!(held.admission.placements[0].index, 1);
        assert_eq!(held.admission.placements[0].gpu_indices, vec![3]);
    }

    #[test]
    fn round_trips_and_stays_readable_by_the_unversioned_format() {
        let held = AdmissionAnnotation::parse(UNVERSIONED)
            .expect("parses")
            .to_held("ml/llm");
        let text = AdmissionAnnotation::from_held(&held)
            .to_text()
            .expect("writes");
        let back = AdmissionAnnotation::parse(&text).expect("reads back");
        assert_eq!(back.v, ADMISSION_ANNOTATION_VERSION);
        assert_eq!(back.to_held("ml/llm"), held);
        // What an operator of the unversioned format decodes: the core's `Admission`,
        // flattened, next to `admittedAt` (`job` required, placements strict).
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Unversioned {
            admitted_at: u64,
            #[serde(flatten)]
            admission: Admission,
        }
        let old: Unversioned = serde_json::from_str(&text).expect("older operators read it");
        assert_eq!(old.admitted_at, held.admitted_at);
        assert_eq!(old.admission, held.admission);
    }
}

/// The `corral.dev/launch-rejected` annotation: which replica incarnation the API server
/// refused to create, and its words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchRejectionAnnotation {
    pub role: String,
    pub index: u32,
    /// `<attempt>.<retry>`, as the pod's incarnation label.
    pub incarnation: String,
    /// The HTTP status of the refusal (400, 403, 409, 422).
    pub code: u16,
    /// The Status reason (`Invalid`, `Forbidden`, `AlreadyExists`, `BadRequest`).
    #[serde(default)]
    pub reason: String,
    pub message: String,
}

impl LaunchRejectionAnnotation {
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    pub fn to_text(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// The core's observation, or why the record does not read.
    pub fn to_rejection(&self) -> Result<corral_core::control::LaunchRejection, String> {
        let role: corral_api::training_job::Role = self
            .role
            .parse()
            .map_err(|e| format!("role `{}`: {e}", self.role))?;
        Ok(corral_core::control::LaunchRejection {
            replica: corral_core::lifecycle::ReplicaId::new(role, self.index),
            incarnation: self.incarnation.parse()?,
            message: format!("{} ({} {})", self.message, self.code, self.reason),
        })
    }
}
