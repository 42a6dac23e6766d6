//! A stored Pipeline through the real `corral up` and `corral` programs: submitted once
//! with its code, run with `corral run -p` (a fan-out whose outputs a later step collects), its code kept across a `kill -9` and restart,
//! revised into a new version while the runs made from the old one keep theirs, refusals at
//! the reference's fields with nothing stored, and deleted without its runs.

use std::process::{Command, Output};

use corral_api::pipeline::RunPhase;
use corral_local::cluster::PipelineRunDetails;

use super::usage::{self, ADMIN_TOKEN, UpProcess};
use super::*;

const PIPELINE: &str = "apiVersion: corral.dev/v1alpha1
kind: Pipeline
metadata: {name: fit}
spec:
  parameters:
    - {name: tag, type: string}
    - {name: lrs, type: list, default: [1]}
  steps:
    - name: train
      withParam: lrs
      inputs: {tag: params.tag}
      outputs: [model]
      task: {command: [sh, step.sh], resources: {cpu: 10m, memory: 16Mi}}
    - name: report
      inputs: {models: steps.train.outputs.model}
      outputs: [summary]
      task: {command: [sh, report.sh], resources: {cpu: 10m, memory: 16Mi}}
";

/// The report step: every iteration's output, collected in item order (a JSON list of
/// their directories), written one after the other.
const REPORT_SH: &str = r#"for d in $(echo "$CORRAL_INPUT_MODELS" | tr -d '[]"' | tr ',' ' '); do
  cat "$d/out.txt"
done > "$CORRAL_OUTPUT_SUMMARY/all.txt"
"#;

/// The code the pipeline ships: writes its version, item and tag into its output.
fn write_code(dir: &Path, version: &str) -> Result<(), Failed> {
    std::fs::write(
        dir.join("step.sh"),
        format!(
            "echo \"{version} $CORRAL_ITEM $CORRAL_INPUT_TAG\" > \"$CORRAL_OUTPUT_MODEL/out.txt\"\n"
        ),
    )?;
    std::fs::write(dir.join("report.sh"), REPORT_SH)?;
    Ok(())
}

fn corral(up: &UpProcess, args: &[&str]) -> Result<Output, Failed> {
    Ok(Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["--server", up.url(), "--token", ADMIN_TOKEN])
        .args(args)
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .env_remove("CORRAL_NAMESPACE")
        .output()?)
}

fn said(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `corral ARGS` succeeds and prints `words`.
fn ok(up: &UpProcess, args: &[&str], words: &str) -> TestResult {
    let o = corral(up, args)?;
    check(
        o.status.success() && said(&o).contains(words),
        format!("corral {args:?} (expected `{words}`): {}", said(&o)),
    )
}

/// `corral ARGS` fails and says `words`.
fn refused(up: &UpProcess, args: &[&str], words: &str) -> TestResult {
    let o = corral(up, args)?;
    check(
        !o.status.success() && said(&o).contains(words),
        format!(
            "corral {args:?} (expected a refusal with `{words}`): {}",
            said(&o)
        ),
    )
}

/// An output's file of a succeeded run: `step`'s `output`, file `file`.
fn output_file(d: &PipelineRunDetails, step: &str, output: &str, file: &str) -> String {
    let status = d.run.status.clone().unwrap_or_default();
    let dir = status
        .steps
        .get(step)
        .and_then(|s| s.outputs.get(output))
        .map(|a| a.path.clone())
        .unwrap_or_default();
    std::fs::read_to_string(Path::new(&dir).join(file))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The first iteration's output of a finished run, once it succeeded.
fn first_output(client: &Client, run: &str) -> Result<String, Failed> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = client.describe_pipeline_run("default", run)?;
        let status = d.run.status.clone().unwrap_or_default();
        if status.phase.is_finished() {
            check(
                status.phase == RunPhase::Succeeded,
                remote::describe_run_text(&d),
            )?;
            return Ok(output_file(&d, "train-0", "model", "out.txt"));
        }
        check(Instant::now() < deadline, format!("{run} did not finish"))?;
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn a_stored_pipeline_runs_with_its_code_and_keeps_its_versions() -> TestResult {
    let dir = usage::admin_dir()?;
    let code = tempfile::tempdir()?;
    write_code(code.path(), "v1")?;
    let file = dir.path().join("pipeline.yaml");
    std::fs::write(&file, PIPELINE)?;
    let (file, code_dir) = (
        file.to_string_lossy().to_string(),
        code.path().to_string_lossy().to_string(),
    );
    let up = UpProcess::start(dir.path(), usage::free_port()?)?;
    ok(
        &up,
        &["submit", &file, "--code", &code_dir],
        "pipeline/fit submitted in namespace default (generation 1)",
    )?;
    ok(&up, &["get", "pipelines"], "fit    1")?;
    ok(
        &up,
        &[
            "run",
            "fit",
            "-p",
            "tag=a",
            "-p",
            "lrs=[7, 8]",
            "--name",
            "r1",
        ],
        "pipelinerun/r1 submitted",
    )?;
    let client = up.client(ADMIN_TOKEN);
    check(first_output(&client, "r1")? == "v1 7 a", "r1 ran v1's code")?;
    // The report read both iterations' models, collected in item order.
    let d = client.describe_pipeline_run("default", "r1")?;
    let all = output_file(&d, "report", "summary", "all.txt");
    check(
        all == "v1 7 a\nv1 8 a",
        format!(
            "the collected models: {all:?}\n{}",
            remote::describe_run_text(&d)
        ),
    )?;
    // Refused at the field, nothing stored.
    refused(&up, &["run", "fit"], "spec.params.tag: is required")?;
    refused(
        &up,
        &["run", "fitt", "-p", "tag=a"],
        "spec.pipelineRef.name: there is no Pipeline `fitt` in this namespace; there are: fit",
    )?;
    refused(
        &up,
        &["run", "fit", "-p", "tag=a", "--generation", "3"],
        "spec.pipelineRef.generation: Pipeline `fit` has no generation 3; it keeps 1 (the current one is 1",
    )?;
    check(
        client.pipeline_runs(Some("default"))?.len() == 1,
        "a refused run was stored",
    )?;
    // The pipeline's code outlives a kill -9 and the restart's sweep of code snapshots.
    up.kill()?;
    let up = UpProcess::start(dir.path(), usage::free_port()?)?;
    let client = up.client(ADMIN_TOKEN);
    ok(&up, &["run", "fit", "-p", "tag=b", "--name", "r2"], "r2")?;
    check(first_output(&client, "r2")? == "v1 1 b", "r2 ran v1's code")?;
    // The same again is no new version; new code is.
    ok(
        &up,
        &["submit", &file, "--code", &code_dir],
        "(generation 1 kept: unchanged)",
    )?;
    write_code(code.path(), "v2")?;
    ok(
        &up,
        &["submit", &file, "--code", &code_dir],
        "(generation 2)",
    )?;
    ok(&up, &["run", "fit", "-p", "tag=c", "--name", "r3"], "r3")?;
    check(first_output(&client, "r3")? == "v2 1 c", "r3 ran v2's code")?;
    let generation = |run: &str| -> Result<Option<i64>, Failed> {
        let r = client.describe_pipeline_run("default", run)?.run;
        Ok(r.spec.pipeline_ref.and_then(|r| r.generation))
    };
    check(
        generation("r1")? == Some(1) && generation("r3")? == Some(2),
        "each run records the version it ran",
    )?;
    // The earlier version is kept, its code with it (across a kill -9 and the restart's
    // sweep of code snapshots): a run may name it.
    up.kill()?;
    let up = UpProcess::start(dir.path(), usage::free_port()?)?;
    let client = up.client(ADMIN_TOKEN);
    ok(
        &up,
        &[
            "run",
            "fit",
            "-p",
            "tag=d",
            "--generation",
            "1",
            "--name",
            "r4",
        ],
        "r4",
    )?;
    check(first_output(&client, "r4")? == "v1 1 d", "r4 ran v1's code")?;
    refused(
        &up,
        &["run", "fit", "-p", "tag=e", "--generation", "3"],
        "it keeps 1, 2 (the current one is 2",
    )?;
    ok(
        &up,
        &["describe", "pipeline/fit"],
        "r3     2            Succeeded",
    )?;
    ok(
        &up,
        &["describe", "pipeline/fit"],
        "corral run fit --generation 1",
    )?;
    // A compiled Kubeflow pipeline stored as a Pipeline (as `kfp pipeline upload`), then run
    // by name: the run is the pipeline's version, with the parameter given.
    let kfp_file = dir.path().join("two_steps.yaml");
    std::fs::write(
        &kfp_file,
        include_str!("../../../corral-api/tests/fixtures/kfp/two_steps.yaml"),
    )?;
    let kfp_file = kfp_file.to_string_lossy().to_string();
    ok(
        &up,
        &["submit", &kfp_file, "--as-pipeline"],
        "pipeline/two-steps submitted in namespace default (generation 1)",
    )?;
    ok(
        &up,
        &["run", "two-steps", "-p", "greeting=hi", "--name", "k1"],
        "pipelinerun/k1 submitted",
    )?;
    let k1 = client.describe_pipeline_run("default", "k1")?.run;
    check(
        k1.spec
            .pipeline_ref
            .as_ref()
            .map(|r| (r.name.as_str(), r.generation))
            == Some(("two-steps", Some(1)))
            && k1.spec.pipeline_spec.steps.len() == 2
            && k1.spec.params.get("greeting") == Some(&serde_json::json!("hi")),
        format!("k1 is not a run of two-steps: {:?}", k1.spec),
    )?;
    // Its steps name an image this machine may not pull: it is not waited for.
    ok(&up, &["delete", "pipelinerun/k1"], "deleted")?;
    refused(
        &up,
        &["submit", &file, "--as-pipeline"],
        "--as-pipeline stores compiled Kubeflow pipelines",
    )?;

    // Deleted: its runs stay, a new run is refused.
    ok(&up, &["delete", "pipeline/fit"], "pipeline/fit deleted")?;
    ok(&up, &["get", "pipelineruns"], "r1")?;
    refused(
        &up,
        &["run", "fit", "-p", "tag=d"],
        "no Pipeline `fit` in this namespace; there are: two-steps",
    )?;
    check(
        client.describe_pipeline_run("default", "r1").is_ok(),
        "r1 went with its pipeline",
    )?;
    Ok(())
}
