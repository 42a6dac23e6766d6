//! The stored form of an admission: the store's own versioned record, converted explicitly
//! from and to the scheduler's types, so that the scheduler's types can change without
//! making an existing data directory unreadable.
//!
//! Written (version 1), camelCase JSON in `admissions.admission`:
//!
//! ```json
//! {"v":1,"pool":"cpu","gpuType":null,"admittedAt":1795428480570,
//!  "request":{"key":"default/j","queue":"default","priority":0,"submitTime":1795428480568,
//!             "groups":[{"role":"worker","count":2,"cpuMilli":100,"memoryBytes":67108864,
//!                        "gpu":0,"allowedGpuTypes":[],"extended":{}}],
//!             "throughput":{},"preemptible":true,"nodeSelector":{}},
//!  "placements":[{"role":"worker","index":0,"node":"vm","gpuIndices":[]}]}
//! ```
//!
//! `request.tolerations` (only when the job has some) maps each role to Kubernetes-style
//! tolerations (`{"key","operator","value","effect"}`); records written before typed
//! tolerations hold a list of the taints (`key=value:Effect`) the job tolerated instead.
//!
//! Rules:
//! - Unknown fields are ignored (no `deny_unknown_fields` anywhere here): a record written by
//!   a newer release that only added fields still reads. Every field but the identifying ones
//!   (`pool`, `request.key`, `request.queue`, `group.role`, `placement.role/index/node`) has a
//!   default, so a field may also be dropped later.
//! - `v` changes only for a change an older reader must not misread (a field whose meaning
//!   changes); a reader refuses a `v` newer than [`VERSION`] with an error that says so.
//! - Without `v`: the layout corral 0.1.0 wrote (`serde_json` of `StoredAdmission`:
//!   `{"pool","gpuType","running":{"request","placements","admittedAt"}}`, with the request,
//!   groups and placements in the same field names as here). It stays readable; the fixture
//!   `tests/fixtures/corral-0.1.0-running-job.db` proves it.

use std::collections::BTreeMap;

use corral_core::sched::{
    ElasticRange, JobRequest, JobTolerations, ReplicaGroup, ReplicaPlacement, RunningJob, Taint,
    TaintEffect, Toleration, TolerationOperator,
};
use serde::{Deserialize, Serialize};

use super::StoredAdmission;

/// The record version this code writes.
pub(super) const VERSION: u64 = 1;

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// An admission as stored: the `admission` column of an `admissions` row (version 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AdmissionRow {
    pub v: u64,
    pub pool: String,
    #[serde(default)]
    pub gpu_type: Option<String>,
    #[serde(default)]
    pub admitted_at: u64,
    pub request: RequestRecord,
    #[serde(default)]
    pub placements: Vec<StoredPlacement>,
}

/// The admitted job's request, as the scheduler needs it to take the job back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestRecord {
    pub key: String,
    pub queue: String,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub submit_time: u64,
    #[serde(default)]
    pub groups: Vec<GroupRecord>,
    #[serde(default)]
    pub throughput: BTreeMap<String, f64>,
    #[serde(default = "yes")]
    pub preemptible: bool,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Written only when there are some, so that a reader from before typed tolerations
    /// (which expects a list) still reads every record without them.
    #[serde(default, skip_serializing_if = "TolerationsRecord::is_empty")]
    pub tolerations: TolerationsRecord,
    /// An elastic job's range; written only for elastic jobs (older readers ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticRecord>,
}

/// An elastic job's range as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ElasticRecord {
    pub role: String,
    pub min: u32,
    pub max: u32,
}

/// A job's tolerations as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum TolerationsRecord {
    /// By role.
    ByRole(BTreeMap<String, Vec<TolerationRecord>>),
    /// Before typed tolerations: the taints (`key=value:Effect`) every role tolerated.
    Taints(Vec<String>),
}

impl Default for TolerationsRecord {
    fn default() -> Self {
        TolerationsRecord::ByRole(BTreeMap::new())
    }
}

impl TolerationsRecord {
    fn is_empty(&self) -> bool {
        match self {
            TolerationsRecord::ByRole(m) => m.is_empty(),
            TolerationsRecord::Taints(t) => t.is_empty(),
        }
    }

    /// The scheduler's tolerations for a job of these roles.
    fn into_tolerations(self, roles: &[GroupRecord]) -> JobTolerations {
        match self {
            TolerationsRecord::ByRole(m) => m
                .into_iter()
                .map(|(role, list)| {
                    (
                        role,
                        list.iter()
                            .filter_map(TolerationRecord::to_toleration)
                            .collect(),
                    )
                })
                .collect(),
            TolerationsRecord::Taints(taints) => {
                let list: Vec<Toleration> = taints
                    .iter()
                    .filter_map(|t| Taint::parse(t))
                    .map(|t| Toleration::of(&t))
                    .collect();
                if list.is_empty() {
                    return JobTolerations::new();
                }
                roles
                    .iter()
                    .map(|g| (g.role.clone(), list.clone()))
                    .collect()
            }
        }
    }
}

/// One toleration as stored: Kubernetes' field names and spellings (empty effect: all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TolerationRecord {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub effect: String,
}

impl TolerationRecord {
    fn from_toleration(t: &Toleration) -> Self {
        let Toleration {
            key,
            operator,
            value,
            effect,
        } = t;
        TolerationRecord {
            key: key.clone(),
            operator: match operator {
                TolerationOperator::Exists => "Exists",
                TolerationOperator::Equal => "Equal",
            }
            .to_string(),
            value: value.clone(),
            effect: effect.map(|e| e.to_string()).unwrap_or_default(),
        }
    }

    /// `None` for what tolerates no taint (an operator or effect this code does not know).
    fn to_toleration(&self) -> Option<Toleration> {
        let operator = match self.operator.as_str() {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            _ => return None,
        };
        let effect = match self.effect.as_str() {
            "" => None,
            e => Some(TaintEffect::parse(e)?),
        };
        Some(Toleration {
            key: self.key.clone(),
            operator,
            value: self.value.clone(),
            effect,
        })
    }
}

/// One role's replicas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GroupRecord {
    pub role: String,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub cpu_milli: u64,
    #[serde(default)]
    pub memory_bytes: u64,
    #[serde(default)]
    pub gpu: u32,
    #[serde(default)]
    pub allowed_gpu_types: Vec<String>,
    #[serde(default)]
    pub extended: BTreeMap<String, u64>,
}

/// Where one replica runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StoredPlacement {
    pub role: String,
    pub index: u32,
    pub node: String,
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
}

/// corral 0.1.0's layout (no `v`): the admission wraps the scheduler's `RunningJob`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyAdmission {
    pool: String,
    #[serde(default)]
    gpu_type: Option<String>,
    running: LegacyRunning,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyRunning {
    request: RequestRecord,
    #[serde(default)]
    placements: Vec<StoredPlacement>,
    #[serde(default)]
    admitted_at: u64,
}

impl From<LegacyAdmission> for AdmissionRow {
    fn from(a: LegacyAdmission) -> Self {
        AdmissionRow {
            v: VERSION,
            pool: a.pool,
            gpu_type: a.gpu_type,
            admitted_at: a.running.admitted_at,
            request: a.running.request,
            placements: a.running.placements,
        }
    }
}

/// Reads a stored admission in any layout this code knows; `Err` says why not, in words.
pub(super) fn decode(text: &str) -> Result<StoredAdmission, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let record = match value.get("v") {
        None => AdmissionRow::from(
            serde_json::from_value::<LegacyAdmission>(value).map_err(|e| e.to_string())?,
        ),
        Some(v) => match v.as_u64() {
            Some(v) if v <= VERSION => {
                serde_json::from_value::<AdmissionRow>(value).map_err(|e| e.to_string())?
            }
            Some(v) => {
                return Err(format!(
                    "record version {v} is newer than this program's {VERSION}; upgrade corral"
                ));
            }
            None => return Err(format!("record version {v} is not a number")),
        },
    };
    Ok(record.into())
}

/// The text stored for an admission (the current version).
pub(super) fn encode(a: &StoredAdmission) -> Result<String, serde_json::Error> {
    serde_json::to_string(&AdmissionRow::from(a))
}

impl From<&StoredAdmission> for AdmissionRow {
    fn from(a: &StoredAdmission) -> Self {
        let RunningJob {
            request,
            placements,
            admitted_at,
        } = &a.running;
        AdmissionRow {
            v: VERSION,
            pool: a.pool.clone(),
            gpu_type: a.gpu_type.clone(),
            admitted_at: *admitted_at,
            request: RequestRecord::from(request),
            placements: placements.iter().map(StoredPlacement::from).collect(),
        }
    }
}

impl From<AdmissionRow> for StoredAdmission {
    fn from(r: AdmissionRow) -> Self {
        StoredAdmission {
            pool: r.pool,
            gpu_type: r.gpu_type,
            running: RunningJob {
                request: r.request.into(),
                placements: r.placements.into_iter().map(Into::into).collect(),
                admitted_at: r.admitted_at,
            },
        }
    }
}

impl From<&JobRequest> for RequestRecord {
    fn from(r: &JobRequest) -> Self {
        // Destructured, so that a field added to the scheduler's request is a compile error
        // here until someone decides whether it is stored.
        let JobRequest {
            key,
            queue,
            priority,
            submit_time,
            groups,
            throughput,
            preemptible,
            node_selector,
            tolerations,
            elastic,
        } = r;
        RequestRecord {
            key: key.clone(),
            queue: queue.clone(),
            priority: *priority,
            submit_time: *submit_time,
            groups: groups.iter().map(GroupRecord::from).collect(),
            throughput: throughput.clone(),
            preemptible: *preemptible,
            node_selector: node_selector.clone(),
            tolerations: TolerationsRecord::ByRole(
                tolerations
                    .iter()
                    .map(|(role, list)| {
                        (
                            role.clone(),
                            list.iter().map(TolerationRecord::from_toleration).collect(),
                        )
                    })
                    .collect(),
            ),
            elastic: elastic.as_ref().map(|e| ElasticRecord {
                role: e.role.clone(),
                min: e.min,
                max: e.max,
            }),
        }
    }
}

impl From<RequestRecord> for JobRequest {
    fn from(r: RequestRecord) -> Self {
        let tolerations = r.tolerations.into_tolerations(&r.groups);
        JobRequest {
            key: r.key,
            queue: r.queue,
            priority: r.priority,
            submit_time: r.submit_time,
            groups: r.groups.into_iter().map(Into::into).collect(),
            throughput: r.throughput,
            preemptible: r.preemptible,
            node_selector: r.node_selector,
            tolerations,
            elastic: r.elastic.map(|e| ElasticRange {
                role: e.role,
                min: e.min,
                max: e.max,
            }),
        }
    }
}

impl From<&ReplicaGroup> for GroupRecord {
    fn from(g: &ReplicaGroup) -> Self {
        let ReplicaGroup {
            role,
            count,
            cpu_milli,
            memory_bytes,
            gpu,
            allowed_gpu_types,
            extended,
        } = g;
        GroupRecord {
            role: role.clone(),
            count: *count,
            cpu_milli: *cpu_milli,
            memory_bytes: *memory_bytes,
            gpu: *gpu,
            allowed_gpu_types: allowed_gpu_types.clone(),
            extended: extended.clone(),
        }
    }
}

impl From<GroupRecord> for ReplicaGroup {
    fn from(g: GroupRecord) -> Self {
        ReplicaGroup {
            role: g.role,
            count: g.count,
            cpu_milli: g.cpu_milli,
            memory_bytes: g.memory_bytes,
            gpu: g.gpu,
            allowed_gpu_types: g.allowed_gpu_types,
            extended: g.extended,
        }
    }
}

impl From<&ReplicaPlacement> for StoredPlacement {
    fn from(p: &ReplicaPlacement) -> Self {
        let ReplicaPlacement {
            role,
            index,
            node,
            gpu_indices,
        } = p;
        StoredPlacement {
            role: role.clone(),
            index: *index,
            node: node.clone(),
            gpu_indices: gpu_indices.clone(),
        }
    }
}

impl From<StoredPlacement> for ReplicaPlacement {
    fn from(p: StoredPlacement) -> Self {
        ReplicaPlacement {
            role: p.role,
            index: p.index,
            node: p.node,
            gpu_indices: p.gpu_indices,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission() -> StoredAdmission {
        StoredAdmission {
            pool: "a100".into(),
            gpu_type: Some("NVIDIA A100-SXM4-80GB".into()),
            running: RunningJob {
                request: JobRequest {
                    key: "team-a/bert".into(),
                    queue: "team-a".into(),
                    priority: 100,
                    submit_time: 1_000,
                    groups: vec![ReplicaGroup {
                        role: "worker".into(),
                        count: 2,
                        cpu_milli: 4_000,
                        memory_bytes: 1 << 30,
                        gpu: 4,
                        allowed_gpu_types: vec!["NVIDIA A100-SXM4-80GB".into()],
                        extended: BTreeMap::from([("rdma".into(), 1)]),
                    }],
                    throughput: BTreeMap::from([("NVIDIA A100-SXM4-80GB".into(), 2.5)]),
                    preemptible: false,
                    node_selector: BTreeMap::from([("zone".into(), "a".into())]),
                    tolerations: [(
                        "worker".to_string(),
                        vec![
                            Toleration::exists("spot", None),
                            Toleration::equal("gpu", "shared", Some(TaintEffect::NoSchedule)),
                        ],
                    )]
                    .into(),
                    elastic: None,
                },
                placements: vec![
                    ReplicaPlacement {
                        role: "worker".into(),
                        index: 0,
                        node: "n1".into(),
                        gpu_indices: vec![0, 1, 2, 3],
                    },
                    ReplicaPlacement {
                        role: "worker".into(),
                        index: 1,
                        node: "n2".into(),
                        gpu_indices: vec![4, 5, 6, 7],
                    },
                ],
                admitted_at: 2_000,
            },
        }
    }

    #[test]
    fn an_admission_round_trips_through_its_record() {
        let a = admission();
        let text = encode(&a).expect("encode");
        assert!(text.starts_with(r#"{"v":1,"pool":"a100","#), "{text}");
        assert_eq!(decode(&text), Ok(a));
    }

    #[test]
    fn the_0_1_0_layout_reads() {
        // What `serde_json::to_string(&StoredAdmission)` wrote in corral 0.1.0.
        let a = admission();
        let legacy = serde_json::json!({
            "pool": a.pool,
            "gpuType": a.gpu_type,
            "running": serde_json::to_value(&a.running).expect("running"),
        });
        assert_eq!(decode(&legacy.to_string()), Ok(a));
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_default() {
        let text = r#"{"v":1,"pool":"cpu","future":{"x":1},
            "request":{"key":"default/j","queue":"default","newKnob":true,
                       "groups":[{"role":"worker","gpuSlices":3}]},
            "placements":[{"role":"worker","index":0,"node":"vm","numaNode":1}]}"#;
        let a = decode(text).expect("decode");
        assert_eq!(a.pool, "cpu");
        assert_eq!(a.gpu_type, None);
        assert_eq!(a.running.admitted_at, 0);
        assert!(a.running.request.preemptible, "default: preemptible");
        assert_eq!(a.running.request.groups[0].count, 1, "default count");
        assert_eq!(a.running.placements[0].node, "vm");
    }

    /// Records from before typed tolerations held the taints (`key=value:Effect`) the job
    /// tolerated; they read as those exact tolerations for every role. A record without
    /// tolerations writes none, so that such an older reader still reads it.
    #[test]
    fn tolerations_as_taint_strings_still_read() {
        let text = r#"{"v":1,"pool":"cpu",
            "request":{"key":"default/j","queue":"default","tolerations":["spot=yes:NoSchedule"],
                       "groups":[{"role":"worker"},{"role":"ps"}]}}"#;
        let a = decode(text).expect("decode");
        let want = vec![Toleration::equal(
            "spot",
            "yes",
            Some(TaintEffect::NoSchedule),
        )];
        assert_eq!(
            a.running.request.tolerations,
            JobTolerations::from([
                ("ps".to_string(), want.clone()),
                ("worker".to_string(), want)
            ])
        );
        let mut bare = admission();
        bare.running.request.tolerations.clear();
        let text = encode(&bare).expect("encode");
        assert!(!text.contains("tolerations"), "{text}");
        assert_eq!(decode(&text), Ok(bare));
    }

    #[test]
    fn a_newer_record_version_is_refused_in_words() {
        let err = decode(r#"{"v":2,"pool":"cpu"}"#).expect_err("v2");
        assert!(err.contains("record version 2 is newer"), "{err}");
        let err = decode(r#"{"v":"x","pool":"cpu"}"#).expect_err("v x");
        assert!(err.contains("not a number"), "{err}");
        assert!(decode("not json").is_err());
    }
}
