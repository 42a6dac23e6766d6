//! Pipelines on Kubernetes: PipelineRun objects advanced after each operator pass by the
//! core's decision (`corral_core::control::pipeline`), the same decision the embedded
//! cluster applies. The steps are TrainingJobs this module creates (owned by their run, so
//! deleting the run deletes them), queued, admitted and placed by the operator's own pass
//! like any job.
//!
//! Artifacts live on a PersistentVolumeClaim of the run's namespace (`--artifacts-claim`,
//! ReadWriteMany: every step's pods mount it at [`ARTIFACTS_MOUNT`], an output at
//! `<mount>/<run>/<step>/<output>`), or in an object store (`--artifact-store`, see
//! [`artifacts`]), at the same paths in each pod. The operator mounts no tenant's volume
//! and reads no tenant's store: what the
//! decision asks of artifacts (the content hash of a finished step's outputs, the text a
//! condition compares) is answered by a short pod of the operator's own image
//! (`corral artifacts hash|read`) that mounts the claim and reports through its
//! termination message; the run waits for it and goes on when the pod ends. The cache is
//! what the namespace's runs recorded in their statuses (a deleted run takes its results
//! out of the cache).
//!
//! Pure: [`plan`] reads the runs and the operator's [`World`] and returns [`RunAction`]s;
//! [`apply`] carries them out, [`watch`] runs it in the operator.

pub mod apply;
pub mod artifacts;
pub mod versions;
pub mod watch;

pub use artifacts::ArtifactLocation;
use artifacts::{input_paths, mount_artifacts, restricted_container, tool_pod};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use corral_api::artifacts_report::ArtifactsReport;
use corral_api::pipeline::ArtifactRecord;
use corral_api::pipeline::{Pipeline, PipelineRunSpec};
use corral_api::validate::{FieldError, ValidationContext, validate_pipeline_run};
use corral_api::{PipelineRun, PipelineRunStatus, TrainingJob};
use corral_core::control::pipeline::{
    CacheHit, Decision, Facts, Observed, StepLaunch, Wants, decide, max_rounds, observe_job,
    recorded_results, refused, step_job_with_artifacts, watched_jobs,
};

use crate::observe::World;

/// Where every step's pods (and the artifact pods) mount the namespace's artifact claim.
pub const ARTIFACTS_MOUNT: &str = "/corral/artifacts";
/// The volume's name in those pods.
pub const ARTIFACTS_VOLUME: &str = "corral-artifacts";
/// Label of the pods that hash or read a run's artifacts; its value is the run's name.
pub const ARTIFACTS_OF_LABEL: &str = "corral.dev/artifacts-of";
/// A failed artifact pod is left this long (its message shown in a Warning) before it is
/// made again.
const RETRY_FAILED_READ: SignedDuration = SignedDuration::from_secs(30);
/// The non-root user of the operator's image (as deploy/operator.yaml runs it).
const TOOLS_USER: i64 = 65532;
/// The pod's container; its termination message is the report.
const TOOL_CONTAINER: &str = "artifacts";

/// What the pipelines need beyond the runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Where each namespace's artifacts are: its PersistentVolumeClaim or an object store.
    pub artifacts: ArtifactLocation,
    /// The image of the pods that make output directories and read artifacts: the
    /// operator's own (it holds `corral`).
    pub tools_image: String,
}

/// One write of the pipelines' plan.
#[derive(Clone, Debug, PartialEq)]
pub enum RunAction {
    /// A step's TrainingJob (JSON, owned by its run).
    CreateJob {
        namespace: String,
        name: String,
        job: Value,
    },
    /// A pod that hashes or reads artifacts.
    CreatePod {
        namespace: String,
        pod: Box<Pod>,
    },
    DeletePod {
        namespace: String,
        name: String,
    },
    /// A stored Pipeline's current version kept (see [`versions`]).
    KeepVersion {
        namespace: String,
        revision: Box<ControllerRevision>,
    },
    /// A run of a stored Pipeline given its copy (spec.pipelineSpec and the version in
    /// spec.pipelineRef), written only over the version it was read at.
    Resolve {
        namespace: String,
        name: String,
        resource_version: Option<String>,
        spec: Box<PipelineRunSpec>,
    },
    /// The run's new status, written only over the version it was decided from.
    Status {
        namespace: String,
        name: String,
        resource_version: Option<String>,
        status: PipelineRunStatus,
    },
    Event {
        namespace: String,
        run: String,
        uid: Option<String>,
        warning: bool,
        reason: String,
        note: String,
    },
}

/// What one pass reads, indexed.
struct View<'a> {
    runs: &'a [Arc<PipelineRun>],
    /// The stored Pipelines that runs name (`spec.pipelineRef`), and their kept versions.
    pipelines: &'a [Arc<Pipeline>],
    kept: &'a [Arc<ControllerRevision>],
    jobs: HashMap<String, &'a TrainingJob>,
    pods: HashMap<(String, String), &'a Pod>,
    /// Step jobs created moments ago, which the watch may not show yet (`namespace/name`).
    recent: &'a BTreeSet<String>,
    cfg: &'a PipelineConfig,
    now: Timestamp,
}

/// Everything to write so that every run moves on as far as it can now.
pub fn plan(
    runs: &[Arc<PipelineRun>],
    pipelines: &[Arc<Pipeline>],
    kept: &[Arc<ControllerRevision>],
    world: &World,
    recent: &BTreeSet<String>,
    cfg: &PipelineConfig,
    now: Timestamp,
) -> Vec<RunAction> {
    let view = View {
        runs,
        pipelines,
        kept,
        jobs: world
            .jobs
            .iter()
            .map(|j| (crate::observe::job_key(j), j.as_ref()))
            .collect(),
        pods: world
            .pods
            .iter()
            .filter(|p| crate::observe::label(&p.metadata, ARTIFACTS_OF_LABEL).is_some())
            .map(|p| {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                (
                    (ns, p.metadata.name.clone().unwrap_or_default()),
                    p.as_ref(),
                )
            })
            .collect(),
        recent,
        cfg,
        now,
    };
    let mut order: Vec<&PipelineRun> = runs.iter().map(Arc::as_ref).collect();
    order.sort_by(|a, b| {
        (a.metadata.namespace_or_default(), &a.metadata.name)
            .cmp(&(b.metadata.namespace_or_default(), &b.metadata.name))
    });
    let mut out: Vec<RunAction> = versions::to_keep(pipelines, kept)
        .into_iter()
        .map(|(namespace, r)| RunAction::KeepVersion {
            namespace,
            revision: Box::new(r),
        })
        .collect();
    for run in order {
        plan_run(run, &view, &mut out);
    }
    out
}

fn plan_run(run: &PipelineRun, view: &View, out: &mut Vec<RunAction>) {
    let ns = run.metadata.namespace_or_default().to_string();
    let name = run.metadata.name.clone();
    let finished = run.status.as_ref().is_some_and(|s| s.phase.is_finished());
    if finished {
        // Its artifact pods have said what they had to.
        for ((pns, pod), p) in &view.pods {
            if *pns == ns
                && crate::observe::label(&p.metadata, ARTIFACTS_OF_LABEL) == Some(name.as_str())
                && p.metadata.deletion_timestamp.is_none()
            {
                out.push(RunAction::DeletePod {
                    namespace: ns.clone(),
                    name: pod.clone(),
                });
            }
        }
        return;
    }
    // A run of a stored Pipeline gets its copy first, as `corral up` gives it at submit:
    // written into the run (spec.pipelineSpec, and the version in spec.pipelineRef), so
    // that a later change of the Pipeline does not change the run. Decided next pass.
    if run.status.is_none() && run.spec.awaits_copy() {
        let mut known: Vec<Pipeline> = view
            .pipelines
            .iter()
            .filter(|p| p.metadata.namespace_or_default() == ns)
            .map(|p| p.as_ref().clone())
            .collect();
        known.extend(versions::kept_in(&ns, view.pipelines, view.kept));
        let mut spec = run.spec.clone();
        let why = match spec.resolve(&known) {
            // The copy is checked before it is written (the webhook would refuse the write
            // of one it cannot run, and the run would wait with no word of why).
            Ok(()) => {
                let mut copied = run.clone();
                copied.spec = spec.clone();
                match check(&copied) {
                    Ok(()) => {
                        out.push(RunAction::Resolve {
                            namespace: ns,
                            name,
                            resource_version: run.metadata.resource_version.clone(),
                            spec: Box::new(spec),
                        });
                        return;
                    }
                    Err(errors) => errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                }
            }
            Err(e) => e.to_string(),
        };
        let d = refused(run, why, view.now);
        record(run, d.status, d.events, out);
        return;
    }
    if run.status.is_none()
        && let Err(errors) = check(run)
    {
        let why: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let d = refused(run, why.join("; "), view.now);
        record(run, d.status, d.events, out);
        return;
    }
    let mut jobs = BTreeMap::new();
    for (step, job) in watched_jobs(run) {
        let key = format!("{ns}/{job}");
        let seen = match view.jobs.get(&key) {
            Some(j) => observe_job(Some(j)),
            None if view.recent.contains(&key) => Observed::Active,
            None => Observed::Gone,
        };
        jobs.insert(step, seen);
    }
    let mut run = run.clone();
    let original = run.status.clone();
    let mut facts = Facts::default();
    let mut events = Vec::new();
    for _ in 0..max_rounds(&run) {
        let d: Decision = decide(&run, &jobs, &facts, view.now);
        if !d.wants.is_empty() {
            if gather(&run, d.wants, view, &mut facts, out) {
                continue;
            }
            break;
        }
        events.extend(d.events);
        run.status = Some(d.status);
        if d.create.is_empty() {
            break;
        }
        for launch in d.create {
            jobs.insert(launch.step.clone(), Observed::Active);
            out.push(step_job(&run, &launch, view.cfg));
        }
    }
    let status = run.status.clone().unwrap_or_default();
    if original.as_ref() != Some(&status) {
        record(&run, status, events, out);
    }
}

/// What a run must be to run here, beyond what the API server's schema checked: what the
/// embedded cluster checks at submit, with images required as on Kubernetes. The webhook
/// refuses the same at `kubectl apply` (`crate::webhook::check_run`).
pub fn check(run: &PipelineRun) -> Result<(), Vec<FieldError>> {
    let ctx = ValidationContext {
        requires_image: true,
        ..ValidationContext::default()
    };
    // The API server completed a generateName into the name and keeps both: the name is
    // the run's (as the webhook reads it, which keeps no generateName).
    let mut stored = run.clone();
    if !stored.metadata.name.is_empty() {
        stored.metadata.generate_name = None;
    }
    validate_pipeline_run(&stored, &ctx).map_err(|e| e.0)
}

fn record(
    run: &PipelineRun,
    status: PipelineRunStatus,
    events: Vec<String>,
    out: &mut Vec<RunAction>,
) {
    let ns = run.metadata.namespace_or_default().to_string();
    let failed = status.phase == corral_api::pipeline::RunPhase::Failed;
    out.push(RunAction::Status {
        namespace: ns.clone(),
        name: run.metadata.name.clone(),
        resource_version: run.metadata.resource_version.clone(),
        status,
    });
    let last = events.len();
    for (i, note) in events.into_iter().enumerate() {
        out.push(RunAction::Event {
            namespace: ns.clone(),
            run: run.metadata.name.clone(),
            uid: run.metadata.uid.clone(),
            warning: failed && i + 1 == last,
            reason: "Pipeline".into(),
            note,
        });
    }
}

/// Where a step's output is, as its pods (and the artifact pods) see it.
pub fn output_path(run: &str, step: &str, output: &str) -> String {
    format!("{ARTIFACTS_MOUNT}/{run}/{step}/{output}")
}

/// Answers what the decision wants from what the pass sees; `false` when some answer needs
/// an artifact pod that has not reported yet (made here if missing).
fn gather(
    run: &PipelineRun,
    wants: Wants,
    view: &View,
    facts: &mut Facts,
    out: &mut Vec<RunAction>,
) -> bool {
    let ns = run.metadata.namespace_or_default();
    for key in wants.lookup {
        let hit = cache_hit(ns, &key, view.runs);
        facts.cache.insert(key, hit);
    }
    let mut ready = true;
    for (step, outputs) in wants.hash {
        if outputs.is_empty() {
            // Nothing to hash: no pod to ask.
            facts.outputs.insert(step, BTreeMap::new());
            continue;
        }
        let paths: Vec<String> = outputs
            .iter()
            .map(|o| output_path(&run.metadata.name, &step, o))
            .collect();
        match ask(run, Question::Hash, &paths, view, out) {
            Some(report) => {
                let records = outputs
                    .into_iter()
                    .zip(paths)
                    .zip(report.sha256)
                    .map(|((o, path), sha256)| (o, ArtifactRecord { path, sha256 }))
                    .collect();
                facts.outputs.insert(step, records);
            }
            None => ready = false,
        }
    }
    for path in wants.read {
        match ask(run, Question::Read, std::slice::from_ref(&path), view, out) {
            Some(mut report) => {
                facts
                    .contents
                    .insert(path, report.text.pop().unwrap_or_default());
            }
            None => ready = false,
        }
    }
    ready
}

/// The earliest result a namespace's runs recorded under `key`.
fn cache_hit(namespace: &str, key: &str, runs: &[Arc<PipelineRun>]) -> Option<CacheHit> {
    let mut hits: Vec<(Option<Timestamp>, String, CacheHit)> = Vec::new();
    for r in runs
        .iter()
        .filter(|r| r.metadata.namespace_or_default() == namespace)
    {
        for (step, recorded, outputs) in recorded_results(r) {
            if recorded == key {
                let from = format!("{}/{step}", r.metadata.name);
                let hit = CacheHit {
                    from: from.clone(),
                    outputs: outputs.clone(),
                };
                hits.push((r.metadata.creation_timestamp, from, hit));
            }
        }
    }
    hits.into_iter()
        .min_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
        .map(|(_, _, h)| h)
}

/// What an artifact pod is asked about its paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Question {
    Hash,
    Read,
}

impl Question {
    fn verb(self) -> &'static str {
        match self {
            Question::Hash => "hash",
            Question::Read => "read",
        }
    }
}

/// The name of the pod that answers `question` about `paths` for `run`: the same question
/// finds the same pod, pass after pass.
pub fn artifacts_pod_name(run: &str, verb: &str, paths: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(verb);
    for p in paths {
        h.update([0]);
        h.update(p);
    }
    let digest = format!("{:x}", h.finalize());
    format!("{run}-{verb}-{}", &digest[..10])
}

/// The answer of the pod that answers `question`, once it reported; otherwise the pod is
/// made (or, failed a while ago, made again) and `None`.
fn ask(
    run: &PipelineRun,
    question: Question,
    paths: &[String],
    view: &View,
    out: &mut Vec<RunAction>,
) -> Option<ArtifactsReport> {
    let ns = run.metadata.namespace_or_default().to_string();
    let name = artifacts_pod_name(&run.metadata.name, question.verb(), paths);
    let Some(pod) = view.pods.get(&(ns.clone(), name.clone())) else {
        out.push(RunAction::CreatePod {
            namespace: ns,
            pod: Box::new(artifacts_pod(run, &name, question, paths, view.cfg)),
        });
        return None;
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let message = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == TOOL_CONTAINER))
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone());
    let failed = |why: String, out: &mut Vec<RunAction>| {
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let old = created.is_none_or(|t| view.now.duration_since(t) >= RETRY_FAILED_READ);
        if old && pod.metadata.deletion_timestamp.is_none() {
            out.push(RunAction::Event {
                namespace: ns.clone(),
                run: run.metadata.name.clone(),
                uid: run.metadata.uid.clone(),
                warning: true,
                reason: "ArtifactsUnreadable".into(),
                note: format!(
                    "pod {name} could not {} {}: {why}; it is made again",
                    question.verb(),
                    paths.join(", ")
                ),
            });
            out.push(RunAction::DeletePod {
                namespace: ns.clone(),
                name: name.clone(),
            });
        }
    };
    match phase {
        Some("Succeeded") => {
            let parsed = message
                .as_deref()
                .ok_or_else(|| "it left no termination message".to_string())
                .and_then(|m| {
                    serde_json::from_str::<ArtifactsReport>(m).map_err(|e| e.to_string())
                });
            let want = paths.len();
            match parsed {
                Ok(r) if question == Question::Hash && r.sha256.len() == want => Some(r),
                Ok(r) if question == Question::Read && r.text.len() == want => Some(r),
                Ok(_) => {
                    failed("its report does not answer every path".into(), out);
                    None
                }
                Err(e) => {
                    failed(format!("its report does not read: {e}"), out);
                    None
                }
            }
        }
        Some("Failed") => {
            failed(message.unwrap_or_else(|| "it failed".into()), out);
            None
        }
        _ => None,
    }
}

fn owner(run: &PipelineRun) -> Value {
    crate::owners::controller(
        corral_api::API_VERSION,
        "PipelineRun",
        &run.metadata.name,
        run.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// A pod of the operator's image that answers one question about a run's artifacts; it
/// meets the `restricted` Pod Security Standard (it runs as the image's non-root user and
/// only reads the claim).
pub fn artifacts_pod(
    run: &PipelineRun,
    name: &str,
    question: Question,
    paths: &[String],
    cfg: &PipelineConfig,
) -> Pod {
    let namespace = run.metadata.namespace_or_default();
    let tool = tool_pod(&cfg.artifacts, namespace);
    let mut command = vec![
        "corral".to_string(),
        "artifacts".into(),
        question.verb().into(),
    ];
    command.extend(tool.args);
    command.extend(paths.iter().cloned());
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                ARTIFACTS_OF_LABEL: run.metadata.name,
                corral_api::pipeline::RUN_LABEL: run.metadata.name,
            },
            "ownerReferences": [owner(run)],
        },
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": TOOLS_USER,
                "runAsGroup": TOOLS_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": TOOL_CONTAINER,
                "securityContext": restricted_container(),
                "image": cfg.tools_image,
                "command": command,
                "volumeMounts": tool.mounts,
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                              "limits": {"memory": "256Mi"}},
                "terminationMessagePolicy": "File",
            }],
            "volumes": tool.volumes,
        },
    });
    if !tool.env_from.is_empty() {
        pod["spec"]["containers"][0]["envFrom"] = json!(tool.env_from);
    }
    // Built from literals of the right shapes: it decodes.
    serde_json::from_value(pod).unwrap_or_default()
}

/// A step's TrainingJob as the API server takes it: the decision's job with the artifact
/// paths, every replica mounting the claim, its output directories made before it starts,
/// owned by its run.
fn step_job(run: &PipelineRun, launch: &StepLaunch, cfg: &PipelineConfig) -> RunAction {
    let dirs: BTreeMap<String, String> = launch
        .outputs
        .iter()
        .map(|o| (o.clone(), output_path(&run.metadata.name, &launch.step, o)))
        .collect();
    let mut job = step_job_with_artifacts(launch, &dirs);
    let inputs: Vec<String> = launch
        .inputs
        .values()
        .filter_map(|i| match i {
            corral_core::control::pipeline::StepInput::Artifact(path) => Some(input_paths(path)),
            corral_core::control::pipeline::StepInput::Value(_) => None,
        })
        .flatten()
        .collect();
    if !dirs.is_empty() || !inputs.is_empty() {
        let outputs: Vec<String> = dirs.into_values().collect();
        let namespace = run.metadata.namespace_or_default();
        for replica in job.spec.replicas.values_mut() {
            let t = replica.template.pod_template.get_or_insert_with(Map::new);
            mount_artifacts(
                t,
                &cfg.artifacts,
                &cfg.tools_image,
                namespace,
                &inputs,
                &outputs,
            );
        }
    }
    let name = job.metadata.name.clone();
    let namespace = run.metadata.namespace_or_default().to_string();
    job.metadata.namespace = Some(namespace.clone());
    let mut value = serde_json::to_value(&job).unwrap_or(Value::Null);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("ownerReferences".into(), json!([owner(run)]));
    }
    RunAction::CreateJob {
        namespace,
        name,
        job: value,
    }
}

#[cfg(test)]
mod tests;
