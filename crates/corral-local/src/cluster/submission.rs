//! What a submission is checked against and how, before any lock is taken: parse, validate
//! against the cluster's configuration and node, this machine's own checks (a command to
//! run, an image it can use, the code snapshot's files), names. The checked documents are
//! stored by [`super::commands`].

use std::collections::BTreeSet;
use std::sync::Arc;

use corral_api::TrainingJob;
use corral_api::document::{Document, parse_documents};
use corral_api::pipeline::{Pipeline, PipelineRun};
use corral_api::validate::ValidationContext;
use corral_core::control::SubmitCheck;

use super::engine::Cluster;
use super::{ClusterError, DocumentProblem, FieldProblem};
use crate::config::WithoutRuntime;

/// What submissions are checked against ([`Cluster::submit_context`]).
#[derive(Clone, Debug)]
pub struct SubmitContext {
    pub(super) validation: ValidationContext,
    images: ImagePolicy,
    /// What no node of this machine can ever hold: the plane's own check at submit.
    pub(super) fit: Arc<SubmitCheck>,
}

/// Whether a submission's text may name a stored Pipeline (`spec.pipelineRef`): only then
/// are the namespace's pipelines read for its check.
pub fn names_stored_pipelines(text: &str) -> bool {
    text.contains("pipelineRef")
}

impl SubmitContext {
    /// With the stored Pipelines of the namespace submitted to, every kept version of
    /// them, which its runs may name.
    pub fn with_pipelines(mut self, pipelines: Vec<Pipeline>) -> Self {
        self.validation.pipelines = pipelines;
        self
    }
}

/// Documents of a submission, parsed and checked ([`Cluster::check_submission`]).
#[derive(Debug)]
pub struct CheckedSubmission {
    pub(super) namespace: String,
    /// Each job, with the kind it was converted from.
    pub(super) jobs: Vec<(TrainingJob, Option<String>)>,
    /// Each job's warnings (same order): what it asks that this cluster accepts but does
    /// not honour.
    pub(super) warnings: Vec<Vec<String>>,
    /// PipelineRuns, checked with their steps' jobs.
    pub(super) runs: Vec<PipelineRun>,
    /// Pipelines to keep, checked with their steps' jobs as a run's are.
    pub(super) pipelines: Vec<Pipeline>,
}

impl CheckedSubmission {
    /// One job Corral itself submits (a served model's replica), checked as the plane
    /// checks every submission.
    pub(super) fn internal(namespace: &str, job: TrainingJob) -> Self {
        CheckedSubmission {
            namespace: namespace.to_string(),
            jobs: vec![(job, None)],
            warnings: vec![Vec::new()],
            runs: Vec::new(),
            pipelines: Vec::new(),
        }
    }

    /// Each checked job, with the kind it was converted from.
    pub fn jobs(&self) -> &[(TrainingJob, Option<String>)] {
        &self.jobs
    }

    /// Each job's warnings, in the order of [`CheckedSubmission::jobs`]: `path: message`.
    pub fn warnings(&self) -> &[Vec<String>] {
        &self.warnings
    }

    /// The checked PipelineRuns.
    pub fn runs(&self) -> &[PipelineRun] {
        &self.runs
    }

    /// The checked Pipelines.
    pub fn pipelines(&self) -> &[Pipeline] {
        &self.pipelines
    }

    /// Names the code snapshot (`sha256:...` of its archive) that every job of the
    /// submission runs from ([`crate::code`]).
    pub fn with_code(mut self, digest: &str) -> Self {
        for (job, _) in &mut self.jobs {
            job.metadata
                .annotations
                .insert(crate::code::ANNOTATION.to_string(), digest.to_string());
        }
        // A run's steps run from it too: each step's job gets its copy when it is made;
        // a pipeline keeps it for the runs made from it later.
        let metas = self.runs.iter_mut().map(|r| &mut r.metadata);
        for meta in metas.chain(self.pipelines.iter_mut().map(|p| &mut p.metadata)) {
            meta.annotations
                .insert(crate::code::ANNOTATION.to_string(), digest.to_string());
        }
        self
    }
}

impl Cluster {
    /// What a submission is checked against: the configuration (priority classes, queues,
    /// pools), this machine's node, and what it can run (a container runtime, uv). None of
    /// it changes while the cluster is open, so a server keeps one and checks submissions
    /// without the cluster's lock.
    pub fn submit_context(&self) -> SubmitContext {
        SubmitContext {
            validation: super::node::validation_context(&self.config.file, &self.node),
            images: self.image_policy(),
            fit: Arc::clone(&self.submit_check),
        }
    }

    pub(super) fn image_policy(&self) -> ImagePolicy {
        ImagePolicy {
            runtime: self
                .executor
                .config()
                .containers
                .as_ref()
                .map(|r| r.kind.as_str()),
            without_runtime: self.config.file.settings.containers.without_runtime,
            uv: self.executor.config().python.is_some(),
        }
    }

    /// The part of [`Cluster::submit`] that needs no cluster: parse, validate against
    /// `ctx` ([`Cluster::submit_context`]), check names. `submit` and a dry run
    /// (`corral validate` against a server) share it, so they give the same errors.
    pub fn check_submission(
        ctx: &SubmitContext,
        text: &str,
        namespace: &str,
    ) -> Result<CheckedSubmission, ClusterError> {
        let images = ctx.images;
        let mut problems = Vec::new();
        let mut accepted = Vec::new();
        let mut warned = Vec::new();
        let mut runs = Vec::new();
        let mut pipelines = Vec::new();
        for r in parse_documents(text, &ctx.validation) {
            match r {
                Err(e) => problems.push(DocumentProblem::from(&e)),
                Ok(p) => {
                    let what = Some(match &p.converted_from {
                        Some(k) => format!("{k} {} as TrainingJob", p.document.name()),
                        None => format!("{} {}", p.document.kind(), p.document.name()),
                    });
                    let mut errors = Vec::new();
                    let mut warnings: Vec<FieldProblem> = p
                        .warnings
                        .iter()
                        .map(|w| FieldProblem {
                            path: w.path.clone(),
                            message: w.message.clone(),
                        })
                        .collect();
                    match p.document {
                        Document::TrainingJob(job) => {
                            let mut job = *job;
                            check_local(&job, namespace, images, &mut errors, &mut warnings);
                            job.metadata.namespace = Some(namespace.to_string());
                            // What this machine can never hold: refused as the plane refuses
                            // it, before the lock (and by `corral validate` against a server).
                            if errors.is_empty()
                                && let Err(r) = ctx.fit.check(&job)
                            {
                                errors.push(FieldProblem {
                                    path: r.path,
                                    message: r.message,
                                });
                            }
                            if errors.is_empty() {
                                accepted.push((job, p.converted_from.clone()));
                                warned.push(
                                    warnings
                                        .iter()
                                        .map(|w| format!("{}: {}", w.path, w.message))
                                        .collect(),
                                );
                            }
                        }
                        Document::PipelineRun(run) => {
                            let mut run = *run;
                            run.metadata.namespace = Some(namespace.to_string());
                            if run.metadata.name.is_empty()
                                && let Some(prefix) = &run.metadata.generate_name
                            {
                                run.metadata.name = super::pipelines::generated_name(prefix);
                            }
                            run.status = None;
                            let steps = StepJobs {
                                owner: &run.metadata,
                                steps: &run.spec.pipeline_spec.steps,
                                path: "spec.pipelineSpec.steps",
                            };
                            steps.check(ctx, namespace, &mut errors, &mut warnings);
                            if errors.is_empty() {
                                runs.push(run);
                            }
                        }
                        Document::Pipeline(pipeline) => {
                            let mut pipeline = *pipeline;
                            pipeline.metadata.namespace = Some(namespace.to_string());
                            pipeline.status = None;
                            let steps = StepJobs {
                                owner: &pipeline.metadata,
                                steps: &pipeline.spec.steps,
                                path: "spec.steps",
                            };
                            steps.check(ctx, namespace, &mut errors, &mut warnings);
                            if errors.is_empty() {
                                pipelines.push(pipeline);
                            }
                        }
                        other => errors.push(FieldProblem {
                            path: "kind".into(),
                            message: format!(
                                "{} cannot be submitted; declare it in the cluster's \
                                 configuration file (corral.yaml)",
                                other.kind()
                            ),
                        }),
                    }
                    if !errors.is_empty() {
                        problems.push(DocumentProblem {
                            index: p.index,
                            what,
                            errors,
                        });
                    }
                }
            }
        }
        let mut names = BTreeSet::new();
        for (i, (job, _)) in accepted.iter().enumerate() {
            if !names.insert(job.metadata.name.clone()) {
                problems.push(DocumentProblem {
                    index: i + 1,
                    what: Some(format!("TrainingJob {}", job.metadata.name)),
                    errors: vec![FieldProblem {
                        path: "metadata.name".into(),
                        message: "appears twice in this submission".into(),
                    }],
                });
            }
        }
        if !problems.is_empty() {
            return Err(ClusterError::Invalid(problems));
        }
        Ok(CheckedSubmission {
            namespace: namespace.to_string(),
            jobs: accepted,
            warnings: warned,
            runs,
            pipelines,
        })
    }
}

/// The steps of a run (or of a pipeline, named as its runs' jobs would be from a run of
/// its name), each step's job checked as a submitted job is: this machine's own checks
/// and whether any node can ever hold it.
struct StepJobs<'a> {
    owner: &'a corral_api::meta::ObjectMeta,
    steps: &'a [corral_api::pipeline::StepSpec],
    /// Where the steps are in the document.
    path: &'static str,
}

impl StepJobs<'_> {
    fn check(
        &self,
        ctx: &SubmitContext,
        namespace: &str,
        errors: &mut Vec<FieldProblem>,
        warnings: &mut Vec<FieldProblem>,
    ) {
        for (i, step) in self.steps.iter().enumerate() {
            let job = corral_api::pipeline::step_job(self.owner, step);
            let mut step_errors = Vec::new();
            check_local(&job, namespace, ctx.images, &mut step_errors, warnings);
            if step_errors.is_empty()
                && let Err(r) = ctx.fit.check(&job)
            {
                step_errors.push(FieldProblem {
                    path: r.path,
                    message: r.message,
                });
            }
            errors.extend(step_errors.into_iter().map(|e| FieldProblem {
                path: format!("{}[{i}] (job {}): {}", self.path, job.metadata.name, e.path),
                message: e.message,
            }));
        }
    }
}

/// What the embedded cluster needs beyond validation: a command to run, the namespace.
/// What this cluster does with a template's `image`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ImagePolicy {
    /// The container runtime (`podman`, `docker`), if there is one.
    pub(super) runtime: Option<&'static str>,
    without_runtime: WithoutRuntime,
    /// Whether uv is there to build Python environments.
    uv: bool,
}

fn check_local(
    job: &TrainingJob,
    namespace: &str,
    images: ImagePolicy,
    errors: &mut Vec<FieldProblem>,
    warnings: &mut Vec<FieldProblem>,
) {
    if let Some(ns) = &job.metadata.namespace
        && ns != namespace
    {
        errors.push(FieldProblem {
            path: "metadata.namespace".into(),
            message: format!(
                "`{ns}` differs from the namespace of the request (`{namespace}`); remove it \
                 or submit to `{ns}`"
            ),
        });
    }
    if let Err(e) = corral_api::validate::check_dns1123_label(namespace) {
        errors.push(FieldProblem {
            path: "metadata.namespace".into(),
            message: e,
        });
    }
    if job
        .metadata
        .annotations
        .contains_key(crate::code::ANNOTATION)
    {
        errors.push(FieldProblem {
            path: format!("metadata.annotations.{}", crate::code::ANNOTATION),
            message: "is set by the server when code is shipped with the job (`corral submit \
                      --code DIR`); remove it"
                .into(),
        });
    }
    for (role, spec) in &job.spec.replicas {
        if spec.template.python.is_some() && !images.uv {
            errors.push(FieldProblem {
                path: format!("spec.replicas.{role}.template.python"),
                message: "this cluster cannot build Python environments: uv is not installed \
                          on the server's PATH (pip install uv)"
                    .into(),
            });
        }
        let image = spec.template.image.as_deref();
        match (images.runtime, image) {
            // A relative working directory is inside the code snapshot, in a container as
            // on the host ([`code_references`]).
            (Some(_), Some(_)) => {}
            (None, Some(image)) if images.without_runtime == WithoutRuntime::Reject => {
                errors.push(FieldProblem {
                    path: format!("spec.replicas.{role}.template.image"),
                    message: format!(
                        "this cluster has no container runtime (podman or docker) to run \
                         `{image}`, and refuses jobs with images (containers.withoutRuntime: \
                         reject); remove `image` to run `command` on the host"
                    ),
                });
            }
            _ if spec.template.command.is_empty() => errors.push(FieldProblem {
                path: format!("spec.replicas.{role}.template.command"),
                message: match image {
                    Some(image) => format!(
                        "this cluster has no container runtime (podman or docker), so the \
                         entrypoint of `{image}` cannot run: set `command` to run on the host"
                    ),
                    None => "set `command` (or `image`, to run in a container)".into(),
                },
            }),
            _ => {}
        }
        for (i, v) in spec.template.env.iter().enumerate() {
            let Some(from) = v.value_from.as_ref().filter(|_| v.value.is_none()) else {
                continue;
            };
            let path = format!("spec.replicas.{role}.template.env[{i}].valueFrom");
            // A Secret or ConfigMap this cluster does not have: Kubernetes would not start
            // the pod either. What the pod says of itself is only not there.
            if from.contains_key("secretKeyRef") || from.contains_key("configMapKeyRef") {
                errors.push(FieldProblem {
                    path,
                    message: "valueFrom works on Kubernetes only; give a literal `value`".into(),
                });
            } else {
                warnings.push(FieldProblem {
                    path,
                    message: format!(
                        "ignored on the embedded cluster: {} is not set (Kubernetes resolves \
                         valueFrom)",
                        v.name
                    ),
                });
            }
        }
        // Pod fields Kubernetes applies (volumes, node selectors, tolerations, sidecars,
        // security contexts): kept for it, not honoured here.
        if let Some(pod) = &spec.template.pod_template {
            let base = format!("spec.replicas.{role}.template.podTemplate");
            pod_warnings(&base, pod, warnings);
        }
    }
}

/// What a replica's pod template asks that only Kubernetes applies. Container ports and pull
/// policies say nothing here (Corral allocates ports; images are local), so they are not
/// worth a warning.
fn pod_warnings(
    base: &str,
    pod: &serde_json::Map<String, serde_json::Value>,
    warnings: &mut Vec<FieldProblem>,
) {
    const IGNORED: &str = "ignored on the embedded cluster (applied on Kubernetes only)";
    let mut warn = |path: String, message: String| warnings.push(FieldProblem { path, message });
    for (k, v) in pod {
        let Some(inner) = v.as_object().filter(|_| k == "spec" || k == "metadata") else {
            warn(format!("{base}.{k}"), IGNORED.into());
            continue;
        };
        for (key, value) in inner {
            let path = format!("{base}.{k}.{key}");
            let containers = value
                .as_array()
                .filter(|_| k == "spec" && key == "containers");
            let Some(containers) = containers else {
                warn(path, IGNORED.into());
                continue;
            };
            for (i, c) in containers.iter().enumerate() {
                let Some(c) = c.as_object() else { continue };
                let name = c.get("name").and_then(|n| n.as_str()).unwrap_or("");
                if c.contains_key("image") {
                    warn(
                        format!("{path}[{i}]"),
                        format!(
                            "sidecar `{name}` does not run on the embedded cluster (Kubernetes \
                             only)"
                        ),
                    );
                    continue;
                }
                for f in c.keys() {
                    if !matches!(f.as_str(), "name" | "ports" | "imagePullPolicy") {
                        warn(format!("{path}[{i}].{f}"), IGNORED.into());
                    }
                }
            }
        }
    }
}

/// Each requirements file a job names must be in its code snapshot (`code`, unpacked) and
/// list packages only.
pub(super) fn code_references(
    jobs: &[(TrainingJob, Option<String>)],
    code: Option<&std::path::Path>,
) -> Vec<DocumentProblem> {
    let mut problems = Vec::new();
    for (i, (job, _)) in jobs.iter().enumerate() {
        let mut errors = Vec::new();
        for (role, spec) in &job.spec.replicas {
            // A relative working directory means a directory of the code snapshot (in a
            // container too, where the snapshot is /workspace), never the server's own
            // directory: it exists only where the snapshot has it.
            if let Some(wd) = spec
                .template
                .working_dir
                .as_ref()
                .filter(|wd| !wd.starts_with('/'))
            {
                let message = match code {
                    None => Some(format!(
                        "`{wd}` is relative, so it names a directory of the job's code \
                         snapshot, and this submission has none: submit with `corral submit \
                         --code DIR`, or give an absolute path"
                    )),
                    Some(dir) if !dir.join(wd).is_dir() => Some(format!(
                        "`{wd}` is not a directory of the code snapshot; name one that is, \
                         or remove workingDir to start in the snapshot's top directory"
                    )),
                    Some(_) => None,
                };
                if let Some(message) = message {
                    errors.push(FieldProblem {
                        path: format!("spec.replicas.{role}.template.workingDir"),
                        message,
                    });
                }
            }
            let Some(file) = spec
                .template
                .python
                .as_ref()
                .and_then(|p| p.requirements_file.as_ref())
            else {
                continue;
            };
            let path = format!("spec.replicas.{role}.template.python.requirementsFile");
            let message = match code {
                None => Some(format!(
                    "`{file}` is read from the job's code snapshot, and this submission has \
                     none: submit with `corral submit --code DIR`"
                )),
                Some(dir) => match std::fs::read_to_string(dir.join(file)) {
                    Err(e) => Some(format!("`{file}` is not in the code snapshot ({e})")),
                    Ok(text) => crate::executor::python::requirement_lines(&text)
                        .err()
                        .map(|e| format!("`{file}`: {e}")),
                },
            };
            if let Some(message) = message {
                errors.push(FieldProblem { path, message });
            }
        }
        if !errors.is_empty() {
            problems.push(DocumentProblem {
                index: i + 1,
                what: Some(format!("TrainingJob {}", job.metadata.name)),
                errors,
            });
        }
    }
    problems
}
