//! From training to serving, end to end through the real server: examples/serving's
//! `train.yaml` writes its model into the job's output directory (`$CORRAL_OUTPUT_DIR`), and
//! `from-training.yaml` serves it (`spec.model`): refused at its field before the job has
//! succeeded, then pinned to that run (uid, content hash) in the model's status, and its
//! replicas answer with the trained weights through the router.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{prerequisite, python3_available};
use super::{TestCluster, TestResult, check, wait_for_state};
use corral_local::cluster::JobState;

/// Submits `manifest` with `dir` as its code.
fn submit_with_code(
    client: &corral_server::api_client::Client,
    manifest: &str,
    dir: &Path,
) -> TestResult {
    let upload = corral_cli::code_archive::upload(manifest, dir)?;
    client.submit_with_code("default", &upload.boundary, &upload.body)?;
    Ok(())
}

/// Waits (bounded) until no job whose name starts with `prefix` is left: a deleted model's
/// replica jobs stop and go, so that nothing keeps running after the test.
fn until_jobs_gone(client: &corral_server::api_client::Client, prefix: &str) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: Vec<String> = client
            .list(Some("default"))?
            .into_iter()
            .map(|j| j.name)
            .filter(|n| n.starts_with(prefix))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        check(
            Instant::now() < deadline,
            format!("jobs still there a minute after the delete: {left:?}"),
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs examples/serving's train.yaml (`train`) to its end; it must succeed.
fn train_tiny(
    client: &corral_server::api_client::Client,
    train: &str,
    example: &Path,
) -> TestResult {
    submit_with_code(client, train, example)?;
    let state = wait_for_state(
        client,
        "default",
        "train-tiny",
        Duration::from_secs(120),
        JobState::is_finished,
    )?;
    check(state == JobState::Succeeded, format!("train-tiny {state}"))
}

pub(crate) fn a_model_trained_by_a_job_is_served_from_its_output() -> TestResult {
    if !prerequisite(python3_available(), "python3") {
        return Ok(());
    }
    // Outputs go as soon as nothing holds them (no retention), so that the test sees them
    // go; the retention itself is corral-local's cluster_e2e `job_outputs`.
    let c = TestCluster::start("kind: CorralConfig\nartifacts: {jobOutputRetentionSeconds: 0}\n")?;
    let client = c.client(None);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serving");
    let train = std::fs::read_to_string(example.join("train.yaml"))?;
    // Only the cluster says where a model came from: a spoofed origin is replaced.
    let serve = std::fs::read_to_string(example.join("from-training.yaml"))?.replace(
        "  name: tiny-trained\n",
        "  name: tiny-trained\n  annotations:\n    corral.dev/model-origin: \
         '{\"trainingJob\":\"x\",\"uid\":\"x\",\"path\":\"/etc/shadow\",\"sha256\":\"x\"}'\n",
    );

    let early = client.submit("default", &serve);
    check(
        early.as_ref().is_err_and(|e| {
            let t = e.to_string();
            t.contains("spec.model.trainingJob") && t.contains("no TrainingJob `train-tiny`")
        }),
        format!("a model of a job that does not exist: {early:?}"),
    )?;
    check(
        client.served_models("default")?.is_empty(),
        "a refused model was stored",
    )?;

    train_tiny(&client, &train, &example)?;
    let job_uid = client
        .describe("default", "train-tiny")?
        .job
        .metadata
        .uid
        .clone()
        .unwrap_or_default();

    submit_with_code(&client, &serve, &example)?;
    let url = c.url("/serve/default/tiny-trained/predict?x=1,2,3");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut r = agent.get(url).call()?;
    let body = r.body_mut().read_to_string()?;
    check(r.status().as_u16() == 200, format!("predict: {body}"))?;
    let answer: Value = serde_json::from_str(&body)?;
    // The trained weights (~[2, -1, 0.5, 0.25], bias ~1): 2 - 2 + 1.5 + 1 = 2.5.
    let y = answer["y"].as_f64().unwrap_or(f64::NAN);
    check(
        (y - 2.5).abs() < 0.1,
        format!("the trained model answers: {body}"),
    )?;
    check(
        answer["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("trained-train-tiny.")),
        format!("the weights came from train-tiny's output: {body}"),
    )?;

    let model = client.served_model("default", "tiny-trained")?;
    let origin = &model["model"]["status"]["model"];
    check(
        origin["trainingJob"] == "train-tiny"
            && origin["uid"] == Value::String(job_uid.clone())
            && origin["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/model.json") && p.contains("/artifacts/default/"))
            && origin["sha256"]
                .as_str()
                .is_some_and(|s| s.starts_with("sha256:") && s.len() == 71),
        format!("the run it came from (uid {job_uid}): {origin}"),
    )?;
    // The job is gone, its output is not: the model still serves.
    client.delete("default", "train-tiny")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.describe("default", "train-tiny").is_ok() {
        check(Instant::now() < deadline, "train-tiny was not deleted")?;
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut r = agent
        .get(c.url("/serve/default/tiny-trained/predict?x=1,2,3"))
        .call()?;
    let body = r.body_mut().read_to_string()?;
    check(
        r.status().as_u16() == 200,
        format!("served after its job was deleted: {body}"),
    )?;
    // Outputs are kept while a model serves from them, and go after: deleting the model
    // takes train-tiny's output (its job is gone) and its replica jobs' own.
    let model_path = origin["path"].as_str().unwrap_or_default();
    let output = Path::new(model_path)
        .parent()
        .ok_or("the model path has no parent")?
        .to_path_buf();
    let jobs_dir = output.parent().ok_or("no .jobs directory")?.to_path_buf();
    check(
        output.is_dir(),
        format!("{} went while served", output.display()),
    )?;
    // Trained again: the model's next revision serves the new run's output; once the
    // first revision is retired, the first run's output (its job gone) goes.
    train_tiny(&client, &train, &example)?;
    submit_with_code(&client, &serve, &example)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = client.served_model("default", "tiny-trained")?;
        let status = &m["model"]["status"];
        let names: Vec<&str> = status["revisions"]
            .as_array()
            .map(|rs| rs.iter().filter_map(|r| r["name"].as_str()).collect())
            .unwrap_or_default();
        if status["stableRevision"] == "tiny-trained-00002" && names == ["tiny-trained-00002"] {
            break;
        }
        check(
            Instant::now() < deadline,
            format!("the second revision did not take over: {status}"),
        )?;
        std::thread::sleep(Duration::from_millis(200));
    }
    check(
        !output.exists(),
        format!("{} outlived its job and its revision", output.display()),
    )?;
    client.delete("default", "train-tiny")?;
    client.delete_served_model("default", "tiny-trained")?;
    let left = || -> Vec<String> {
        std::fs::read_dir(&jobs_dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("train-tiny.") || n.starts_with("tiny-trained-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !left().is_empty() {
        check(
            Instant::now() < deadline,
            format!("outputs left after the model was deleted: {:?}", left()),
        )?;
        std::thread::sleep(Duration::from_millis(100));
    }
    until_jobs_gone(&client, "tiny-trained-")
}

/// A model served from a pipeline run's step artifact: refused at its field while the run
/// does not exist and for a step or output it lacks, then pinned to the run and step (the
/// lineage `describe` shows), and answering with what the step wrote.
pub(crate) fn a_model_is_served_from_a_pipeline_steps_output() -> TestResult {
    if !prerequisite(python3_available(), "python3") {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let client = c.client(None);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serving");
    let model = |step: &str, output: &str| {
        format!(
            "apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {{name: from-run}}
spec:
  model: {{pipelineRun: fit-run, step: {step}, output: {output}, path: model.json}}
  template: {{command: [python3, model_server.py]}}
  resources: {{cpu: 200m, memory: 128Mi}}
  readiness: {{path: /healthz}}
  autoscaling: {{minReplicas: 1, maxReplicas: 1}}
"
        )
    };
    let early = client.submit("default", &model("fit", "model"));
    check(
        early.as_ref().is_err_and(|e| {
            let t = e.to_string();
            t.contains("spec.model.pipelineRun") && t.contains("no PipelineRun `fit-run`")
        }),
        format!("a model of a run that does not exist: {early:?}"),
    )?;
    client.submit(
        "default",
        r#"apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: fit-run}
spec:
  pipelineSpec:
    steps:
      - name: fit
        outputs: [model]
        task:
          command: [python3, -c, "import json, os; json.dump({'weights': [1, 1, 1, 1], 'bias': 0.5}, open(os.path.join(os.environ['CORRAL_OUTPUT_MODEL'], 'model.json'), 'w'))"]
          resources: {cpu: 100m, memory: 64Mi}
"#,
    )?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let run_uid = loop {
        let runs = client.pipeline_runs(Some("default"))?;
        let run = runs.first().ok_or("no run")?;
        let status = run.status.clone().unwrap_or_default();
        if status.phase.is_finished() {
            check(
                status.phase.as_str() == "Succeeded",
                format!("fit-run {}", status.phase.as_str()),
            )?;
            break run.metadata.uid.clone().unwrap_or_default();
        }
        check(Instant::now() < deadline, "fit-run did not finish")?;
        std::thread::sleep(Duration::from_millis(200));
    };
    for (step, output, field, words) in [
        (
            "train",
            "model",
            "spec.model.step",
            "no step `train` (its steps: fit)",
        ),
        (
            "fit",
            "weights",
            "spec.model.output",
            "no output `weights` (its outputs: model)",
        ),
    ] {
        let e = client.submit("default", &model(step, output));
        check(
            e.as_ref().is_err_and(|e| {
                let t = e.to_string();
                t.contains(field) && t.contains(words)
            }),
            format!("{step}/{output}: {e:?}"),
        )?;
    }
    check(
        client.served_models("default")?.is_empty(),
        "a refused model was stored",
    )?;
    submit_with_code(&client, &model("fit", "model"), &example)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut r = agent
        .get(c.url("/serve/default/from-run/predict?x=1,2,3"))
        .call()?;
    let body = r.body_mut().read_to_string()?;
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    // What the step wrote: 1 + 2 + 3 + 0.5.
    check(
        r.status().as_u16() == 200 && answer["y"].as_f64() == Some(6.5),
        format!("the step's model answers: {body}"),
    )?;
    let m = client.served_model("default", "from-run")?;
    let origin = &m["model"]["status"]["model"];
    check(
        origin["pipelineRun"] == "fit-run"
            && origin["step"] == "fit"
            && origin["output"] == "model"
            && origin["uid"] == Value::String(run_uid.clone())
            && origin["trainingJob"] == "fit-run-fit"
            && origin["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/fit-run/fit/model/model.json")),
        format!("the run and step it came from (run uid {run_uid}): {origin}"),
    )?;
    client.delete_served_model("default", "from-run")?;
    until_jobs_gone(&client, "from-run-")
}
