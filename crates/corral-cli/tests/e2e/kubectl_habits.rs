//! The CLI as kubectl users type it, through the real `corral` program against a real
//! server: global flags before the command, label selectors on `get`, `get -o yaml` with no
//! name, `describe` with no name, job names completed by the shell, a second delete or
//! suspend that says it changed nothing, and `submit -p` setting a pipeline run's
//! parameters as `argo submit -p` does.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::{TestCluster, TestResult, check, parked_job};

/// Runs the `corral` program with `args`; its exit status, stdout and stderr.
fn corral(args: &[&str]) -> Result<Output, libtest_mimic::Failed> {
    Ok(Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .env_remove("CORRAL_NAMESPACE")
        .output()?)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn labelled(name: &str, team: &str) -> String {
    parked_job(name).replacen(
        &format!("metadata: {{name: {name}}}"),
        &format!("metadata: {{name: {name}, labels: {{team: {team}}}}}"),
        1,
    )
}

pub(crate) fn kubectl_habits_hold() -> TestResult {
    let cluster = TestCluster::start("")?;
    let client = cluster.client(None);
    let url = cluster.server.url();
    for (name, team) in [("nlp-a", "nlp"), ("nlp-b", "nlp"), ("vision-a", "vision")] {
        client.submit("ml", &labelled(name, team))?;
    }

    // Global flags before the command, as `kubectl --server X -n ns get` takes them.
    let o = corral(&[
        "--server", &url, "-n", "ml", "get", "-l", "team=nlp", "-o", "name",
    ])?;
    let (out, err) = text(&o);
    check(o.status.success(), format!("get -l: {err}"))?;
    check(
        out == "trainingjob/nlp-a\ntrainingjob/nlp-b\n",
        format!("get -l team=nlp printed:\n{out}"),
    )?;
    let o = corral(&["--server", &url, "list", "-n", "ml", "-l", "team!=nlp"])?;
    let (out, _) = text(&o);
    check(
        out.contains("vision-a") && !out.contains("nlp-"),
        format!("list -l team!=nlp printed:\n{out}"),
    )?;
    let o = corral(&["--server", &url, "get", "-n", "ml", "-l", "=nlp"])?;
    let (_, err) = text(&o);
    check(
        !o.status.success() && err.contains("--selector"),
        format!("a bad selector: {err}"),
    )?;

    // `get -o yaml` with no name: the TrainingJobs themselves, as a List.
    let o = corral(&["--server", &url, "-n", "ml", "get", "-o", "json"])?;
    let (out, err) = text(&o);
    check(o.status.success(), format!("get -o json: {err}"))?;
    let list: serde_json::Value = serde_json::from_str(&out)?;
    check(list["kind"] == "List", format!("{list}"))?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    check(
        items.len() == 3
            && items
                .iter()
                .all(|i| i["kind"] == "TrainingJob" && i["spec"]["replicas"].is_object()),
        format!("get -o json items: {list}"),
    )?;

    // `describe` with no name: every job of the namespace.
    let o = corral(&["--server", &url, "-n", "ml", "describe"])?;
    let (out, err) = text(&o);
    check(o.status.success(), format!("describe: {err}"))?;
    for name in ["nlp-a", "nlp-b", "vision-a"] {
        check(
            out.contains(name),
            format!("describe misses {name}:\n{out}"),
        )?;
    }

    // Shell completion of job names, asked as bash's script asks (`corral completion bash`).
    let o = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["--", "corral", "logs", "nlp"])
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", "2")
        .env("_CLAP_IFS", "\n")
        .env("CORRAL_SERVER", &url)
        .env("CORRAL_NAMESPACE", "ml")
        .env_remove("CORRAL_TOKEN")
        .output()?;
    let (out, err) = text(&o);
    let mut names: Vec<&str> = out.lines().map(str::trim).collect();
    names.sort_unstable();
    check(
        names == ["nlp-a", "nlp-b"],
        format!("`corral logs nlp<TAB>` completed to {out:?} ({err})"),
    )?;

    // A second suspend changes nothing, and says so.
    let o = corral(&["--server", &url, "-n", "ml", "suspend", "nlp-a"])?;
    let (out, _) = text(&o);
    check(
        o.status.success() && out.contains("was suspended already"),
        format!("suspend of a suspended job: {out}"),
    )?;

    // Ten deletes of one job at once: one deletes it; the others say it was being deleted
    // already, or (once it is gone) that it does not exist. Never ten "deleted".
    let deletes: Vec<_> = (0..10)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_corral"))
                .args(["--server", &url, "-n", "ml", "delete", "vision-a"])
                .env_remove("CORRAL_SERVER")
                .env_remove("CORRAL_TOKEN")
                .env_remove("CORRAL_NAMESPACE")
                .output()
        })
        .collect();
    let mut deleted = 0;
    for d in deletes {
        let d = d?;
        let (out, err) = text(&d);
        if out.trim() == "trainingjob/vision-a deleted" {
            deleted += 1;
        } else {
            check(
                out.contains("was being deleted already") || err.contains("not found"),
                format!("a concurrent delete printed: {out}{err}"),
            )?;
        }
    }
    check(deleted == 1, format!("{deleted} deletes said `deleted`"))?;
    Ok(())
}

/// A relative workingDir names a directory of the code snapshot: without one the job is
/// refused at submit, naming the field and the fix.
pub(crate) fn relative_working_dir_needs_code() -> TestResult {
    let cluster = TestCluster::start("")?;
    let client = cluster.client(None);
    let job = parked_job("rel").replacen(
        "template: {command: [sleep, \"30\"]}",
        "template: {command: [sleep, \"30\"], workingDir: src}",
        1,
    );
    check(job.contains("workingDir: src"), job.clone())?;
    let e = match client.submit("default", &job) {
        Ok(r) => return Err(format!("accepted: {r:?}").into()),
        Err(e) => e.to_string(),
    };
    check(
        e.contains("template.workingDir") && e.contains("--code"),
        format!("the refusal: {e}"),
    )
}

/// `corral submit FILE -p NAME=VALUE`: the run gets the value, typed as YAML reads it; a
/// value of the wrong type is the server's refusal at `spec.params.NAME`; a malformed `-p`
/// never reaches the server.
pub(crate) fn submit_p_sets_a_runs_parameters() -> TestResult {
    let cluster = TestCluster::start("")?;
    let url = cluster.server.url();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("run.yaml");
    std::fs::write(
        &file,
        "apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: tuned}
spec:
  params: {lr: 0.1}
  pipelineSpec:
    parameters:
      - {name: lr, type: float}
      - {name: tag, type: string, default: a}
      - {name: lrs, type: list, default: [1]}
    steps:
      - {name: only, task: {command: ['true'], resources: {cpu: 10m, memory: 16Mi}}}
      - name: sweep
        withParam: lrs
        task: {command: [sh, -c, 'test -n \"$CORRAL_ITEM\"'], resources: {cpu: 10m, memory: 16Mi}}
",
    )?;
    let path = file.to_string_lossy().to_string();
    let o = corral(&["--server", &url, "submit", &path, "-p", "lr=fast"])?;
    let (_, err) = text(&o);
    check(
        !o.status.success() && err.contains("spec.params.lr") && err.contains("not of type float"),
        format!("a string for a float: {err}"),
    )?;
    let o = corral(&["--server", &url, "submit", &path, "-p", "oops"])?;
    check(
        o.status.code() == Some(2),
        format!("-p oops: {:?}", text(&o)),
    )?;
    check(
        cluster
            .client(None)
            .pipeline_runs(Some("default"))?
            .is_empty(),
        "a refused run was stored",
    )?;
    let o = corral(&[
        "--server",
        &url,
        "submit",
        &path,
        "-p",
        "lr=0.25",
        "--param",
        "tag=v2",
        "-p",
        "lrs=[0.1, 0.2, 0.3]",
    ])?;
    check(o.status.success(), format!("submit -p: {:?}", text(&o)))?;
    let runs = cluster.client(None).pipeline_runs(Some("default"))?;
    let params = runs
        .first()
        .map(|r| r.spec.params.clone())
        .unwrap_or_default();
    check(
        params.get("lr") == Some(&serde_json::json!(0.25))
            && params.get("tag") == Some(&serde_json::json!("v2")),
        format!("the run's params: {params:?}"),
    )?;
    // The fan-out over `lrs` runs once per item of the list given with -p.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let runs = cluster.client(None).pipeline_runs(Some("default"))?;
        let status = runs
            .first()
            .and_then(|r| r.status.clone())
            .unwrap_or_default();
        if status.phase.is_finished() {
            break status;
        }
        check(Instant::now() < deadline, "the run did not finish")?;
        std::thread::sleep(Duration::from_millis(200));
    };
    let names: Vec<&str> = status.steps.keys().map(String::as_str).collect();
    check(
        status.phase.as_str() == "Succeeded" && names == ["only", "sweep-0", "sweep-1", "sweep-2"],
        format!("the run: {} with steps {names:?}", status.phase.as_str()),
    )?;
    Ok(())
}
