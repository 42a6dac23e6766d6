//! A served model's `spec.model`: the TrainingJob output (or pipeline step's artifact) it
//! serves. Resolved once, when the
//! model is submitted: the job must be of the model's namespace and have succeeded, and the
//! path must be in its output. The result, a [`ModelOrigin`], is pinned on the model (and
//! so on each revision): replicas get its path, `describe` shows the run it came from, and
//! a model retrained under the same job name is a new revision when submitted again.

use corral_api::pipeline::StepPhase;
use corral_api::served_model::{ModelOrigin, ModelSource};
use corral_api::training_job::ConditionType;
use corral_api::{PipelineRun, TrainingJob};

use crate::lifecycle::conditions;
use crate::lifecycle::job_state;

/// Why `spec.model` cannot be served: the field and the words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSourceProblem {
    pub path: &'static str,
    pub message: String,
}

/// The origin of `source` in `namespace`: `job` is the TrainingJob it names as the shell
/// found it (`None`: there is none), `output_dir` that job's output directory, and `hash`
/// the content hash of a path on the cluster (`None`: nothing there).
pub fn resolve_model(
    source: &ModelSource,
    namespace: &str,
    job: Option<&TrainingJob>,
    output_dir: &str,
    hash: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<ModelOrigin, ModelSourceProblem> {
    let name = &source.training_job;
    let Some(job) = job else {
        return Err(ModelSourceProblem {
            path: "spec.model.trainingJob",
            message: format!(
                "there is no TrainingJob `{name}` in namespace `{namespace}`; name a job of \
                 this namespace that has succeeded"
            ),
        });
    };
    let status = job.status.clone().unwrap_or_default();
    if !conditions::is_true(&status, ConditionType::Succeeded) {
        let now = job_state(&job.spec, job.status.as_ref());
        return Err(ModelSourceProblem {
            path: "spec.model.trainingJob",
            message: format!(
                "TrainingJob `{name}` has not succeeded (it is {now}); a model is served from \
                 a job that has: submit this model once it has (`corral get {name} -w` follows it)"
            ),
        });
    }
    let path = match &source.path {
        Some(p) => format!("{}/{p}", output_dir.trim_end_matches('/')),
        None => output_dir.to_string(),
    };
    let Some(sha256) = hash(&path) else {
        return Err(ModelSourceProblem {
            path: if source.path.is_some() {
                "spec.model.path"
            } else {
                "spec.model.trainingJob"
            },
            message: format!(
                "TrainingJob `{name}` wrote nothing at {path}: its replicas write the model \
                 into $CORRAL_OUTPUT_DIR ({output_dir})"
            ),
        });
    };
    Ok(ModelOrigin {
        training_job: name.clone(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        pipeline_run: None,
        step: None,
        output: None,
        completion_time: status.completion_time,
        path,
        sha256,
    })
}

/// The origin of `source` (`pipelineRun`, `step`, `output`) in `namespace`: `run` is the
/// PipelineRun it names as the shell found it (`None`: there is none), and `hash` the
/// content hash of a path on the cluster (`None`: nothing there). The step must have
/// succeeded or reused a cached result, with that output.
pub fn resolve_model_from_run(
    source: &ModelSource,
    namespace: &str,
    run: Option<&PipelineRun>,
    hash: &mut dyn FnMut(&str) -> Option<String>,
) -> Result<ModelOrigin, ModelSourceProblem> {
    let name = source.pipeline_run.clone().unwrap_or_default();
    let (step, output) = (
        source.step.clone().unwrap_or_default(),
        source.output.clone().unwrap_or_default(),
    );
    let Some(run) = run else {
        return Err(ModelSourceProblem {
            path: "spec.model.pipelineRun",
            message: format!(
                "there is no PipelineRun `{name}` in namespace `{namespace}`; name a run of \
                 this namespace whose step has succeeded"
            ),
        });
    };
    let status = run.status.clone().unwrap_or_default();
    let Some(st) = status.steps.get(&step) else {
        let mut known: Vec<&str> = status.steps.keys().map(String::as_str).collect();
        if known.is_empty() {
            known = run
                .spec
                .pipeline_spec
                .steps
                .iter()
                .map(|s| s.name.as_str())
                .collect();
        }
        return Err(ModelSourceProblem {
            path: "spec.model.step",
            message: format!(
                "PipelineRun `{name}` has no step `{step}` (its steps: {})",
                known.join(", ")
            ),
        });
    };
    if !matches!(st.phase, StepPhase::Succeeded | StepPhase::Cached) {
        return Err(ModelSourceProblem {
            path: "spec.model.step",
            message: format!(
                "step `{step}` of PipelineRun `{name}` has not succeeded (it is {}); submit \
                 this model once it has (`corral describe pipelinerun {name}` follows it)",
                st.phase.as_str()
            ),
        });
    }
    let Some(artifact) = st.outputs.get(&output) else {
        let known: Vec<&str> = st.outputs.keys().map(String::as_str).collect();
        return Err(ModelSourceProblem {
            path: "spec.model.output",
            message: format!(
                "step `{step}` of PipelineRun `{name}` has no output `{output}` (its outputs: \
                 {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        });
    };
    let path = match &source.path {
        Some(p) => format!("{}/{p}", artifact.path.trim_end_matches('/')),
        None => artifact.path.clone(),
    };
    let Some(sha256) = hash(&path) else {
        return Err(ModelSourceProblem {
            path: if source.path.is_some() {
                "spec.model.path"
            } else {
                "spec.model.output"
            },
            message: format!(
                "output `{output}` of step `{step}` of PipelineRun `{name}` holds nothing at \
                 {path}"
            ),
        });
    };
    Ok(ModelOrigin {
        training_job: st.job.clone().unwrap_or_default(),
        uid: run.metadata.uid.clone().unwrap_or_default(),
        pipeline_run: Some(name),
        step: Some(step),
        output: Some(output),
        completion_time: status.completion_time,
        path,
        sha256,
    })
}

/// Whether the output of the job with `uid` must be kept when the job goes: a revision of a
/// served model serves from it (`pins`: the origins of every revision kept, since a
/// rollback may go back to any of them).
pub fn output_pinned<'a>(uid: &str, pins: impl IntoIterator<Item = &'a ModelOrigin>) -> bool {
    pins.into_iter().any(|o| o.uid == uid)
}

/// The job outputs that revisions no longer kept release: those they pinned (`released`)
/// whose job is gone (`job_exists` says not) and that no kept revision still pins
/// (`remaining`); each once.
pub fn outputs_released<'a>(
    released: &'a [ModelOrigin],
    remaining: &[ModelOrigin],
    job_exists: impl Fn(&ModelOrigin) -> bool,
) -> Vec<&'a ModelOrigin> {
    let mut out: Vec<&ModelOrigin> = Vec::new();
    // A pipeline step's artifact is its run's, not a job output.
    for o in released.iter().filter(|o| o.pipeline_run.is_none()) {
        if !job_exists(o)
            && !output_pinned(&o.uid, remaining)
            && !out.iter().any(|seen| seen.uid == o.uid)
        {
            out.push(o);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(job: &str, uid: &str) -> ModelOrigin {
        ModelOrigin {
            training_job: job.into(),
            uid: uid.into(),
            pipeline_run: None,
            step: None,
            output: None,
            completion_time: None,
            path: format!("/data/{job}"),
            sha256: "sha256:00".into(),
        }
    }

    #[test]
    fn an_output_goes_once_nothing_serves_it_and_its_job_is_gone() {
        let pins = [origin("a", "u-a"), origin("b", "u-b")];
        assert!(output_pinned("u-a", &pins));
        assert!(!output_pinned("u-c", &pins));
        // The model served a (twice: two revisions), b and c; b is pinned elsewhere, c's
        // job still exists: only a's output goes, once.
        let released = [
            origin("a", "u-a"),
            origin("a", "u-a"),
            origin("b", "u-b"),
            origin("c", "u-c"),
        ];
        let remaining = [origin("b", "u-b")];
        let gone: Vec<&str> = outputs_released(&released, &remaining, |o| o.uid == "u-c")
            .iter()
            .map(|o| o.uid.as_str())
            .collect();
        assert_eq!(gone, vec!["u-a"]);
    }
    use corral_api::training_job::{Condition, ConditionStatus, TrainingJobStatus};

    fn job(succeeded: bool) -> TrainingJob {
        let text = "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: train}\n\
                    spec:\n  framework: generic\n  replicas:\n    worker:\n      template: {command: [python3, t.py]}\n";
        let mut j: TrainingJob = serde_saphyr::from_str(text).expect("job");
        j.metadata.uid = Some("u-1".into());
        let type_ = if succeeded {
            ConditionType::Succeeded
        } else {
            ConditionType::Running
        };
        j.status = Some(TrainingJobStatus {
            conditions: vec![Condition {
                type_,
                status: ConditionStatus::True,
                reason: "R".into(),
                message: String::new(),
                last_transition_time: jiff::Timestamp::UNIX_EPOCH,
            }],
            ..TrainingJobStatus::default()
        });
        j
    }

    fn source(path: Option<&str>) -> ModelSource {
        ModelSource {
            training_job: "train".into(),
            pipeline_run: None,
            step: None,
            output: None,
            path: path.map(String::from),
        }
    }

    #[test]
    fn a_succeeded_jobs_output_is_pinned_with_its_run_and_content() {
        let mut seen = Vec::new();
        let origin = resolve_model(
            &source(Some("model.json")),
            "team-a",
            Some(&job(true)),
            "/d/out/",
            &mut |p| {
                seen.push(p.to_string());
                Some("sha256:ab".into())
            },
        )
        .expect("resolved");
        assert_eq!(seen, ["/d/out/model.json"]);
        assert_eq!(origin.path, "/d/out/model.json");
        assert_eq!(
            (origin.uid.as_str(), origin.sha256.as_str()),
            ("u-1", "sha256:ab")
        );
        let whole = resolve_model(
            &source(None),
            "team-a",
            Some(&job(true)),
            "/d/out",
            &mut |_| Some("sha256:cd".into()),
        )
        .expect("resolved");
        assert_eq!(whole.path, "/d/out");
    }

    #[test]
    fn a_missing_running_or_empty_source_is_refused_at_its_field() {
        let mut any = |_: &str| Some("sha256:x".to_string());
        let e = resolve_model(&source(None), "team-a", None, "/d", &mut any).expect_err("none");
        assert_eq!(e.path, "spec.model.trainingJob");
        assert!(
            e.message
                .contains("no TrainingJob `train` in namespace `team-a`"),
            "{e:?}"
        );
        let e = resolve_model(&source(None), "team-a", Some(&job(false)), "/d", &mut any)
            .expect_err("running");
        assert!(
            e.message.contains("has not succeeded (it is Running)"),
            "{e:?}"
        );
        let e = resolve_model(
            &source(Some("model.json")),
            "team-a",
            Some(&job(true)),
            "/d",
            &mut |_| None,
        )
        .expect_err("nothing there");
        assert_eq!(e.path, "spec.model.path");
        assert!(
            e.message.contains("wrote nothing at /d/model.json"),
            "{e:?}"
        );
    }
}
