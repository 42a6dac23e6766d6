//! Pipelines through the real server, with the example's standard-library steps: a
//! data -> train (2-replica PyTorch-style) -> evaluate run passes artifacts and succeeds;
//! a rerun with the same inputs is all cache hits; a changed parameter reruns exactly the
//! steps downstream of it; a failing step is retried, then fails the run with its reason;
//! a 50-wide fan-out keeps to its bound and its dependent waits for every iteration;
//! a bad run is refused with the field's path and nothing stored; delete takes the steps'
//! jobs; and `kill -9` of `corral up` mid-run: the finished steps are not run again.

use corral_api::pipeline::{RunPhase, StepPhase};
use corral_local::cluster::PipelineRunDetails;

use super::*;

const STEP_PY: &str = include_str!("../../../../examples/pipeline/step.py");

/// The example's pipeline (examples/pipeline/pipeline.yaml) named `name`, its steps run
/// from `dir` and logging each run of a step to `dir/steps.log`.
fn pipeline(name: &str, lr: &str, dir: &Path) -> Result<String, Failed> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pipeline/pipeline.yaml"),
    )?;
    let d = dir.display().to_string();
    let place = format!(
        "workingDir: {d:?}, env: [{{name: STEPS_LOG, value: {:?}}}], command",
        format!("{d}/steps.log")
    );
    Ok(text
        .replace("generateName: example-", &format!("name: {name}"))
        .replace("lr: 0.1", &format!("lr: {lr}"))
        .replace("{command", &format!("{{{place}"))
        .replace(
            "          command: [python3, step.py",
            &format!("          workingDir: {d:?}\n          env: [{{name: STEPS_LOG, value: {:?}}}]\n          command: [python3, step.py", format!("{d}/steps.log")),
        ))
}

/// A directory with the steps' script, where they may log (as root, steps run as their
/// namespace's uid).
fn steps_dir() -> Result<tempfile::TempDir, Failed> {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("step.py"), STEP_PY)?;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777))?;
    Ok(work)
}

fn wait_for_run(client: &Client, ns: &str, name: &str) -> Result<PipelineRunDetails, Failed> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = client.describe_pipeline_run(ns, name)?;
        let phase = d.run.status.as_ref().map(|s| s.phase);
        if phase.is_some_and(RunPhase::is_finished) {
            return Ok(d);
        }
        if Instant::now() > deadline {
            return Err(
                format!("run {name} did not end:\n{}", remote::describe_run_text(&d)).into(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn phases(d: &PipelineRunDetails) -> Vec<(String, StepPhase)> {
    d.steps.iter().map(|s| (s.name.clone(), s.phase)).collect()
}

fn steps_log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("steps.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

pub(super) fn a_pipeline_runs_caches_reruns_and_fails_with_its_reason() -> TestResult {
    if !common::prerequisite(common::python3_available(), "python3 is not installed") {
        return Ok(());
    }
    let c = TestCluster::start("")?;
    let work = steps_dir()?;
    let client = c.client(None);

    // data -> train (master + worker) -> evaluate, the model passed as an artifact.
    let submitted = client.submit("default", &pipeline("r1", "0.1", work.path())?)?;
    check(
        submitted.len() == 1 && submitted[0].kind.as_deref() == Some("PipelineRun"),
        format!("{submitted:?}"),
    )?;
    let d = wait_for_run(&client, "default", "r1")?;
    let mut text = remote::describe_run_text(&d);
    for step in &d.steps {
        if let Some(job) = &step.job {
            let mut buf = Vec::new();
            let _ = client.logs("default", job, &LogRequest::default(), &mut buf);
            text.push_str(&format!("--- {job}:\n{}", String::from_utf8_lossy(&buf)));
        }
    }
    let all = |p: StepPhase| {
        ["data", "train", "evaluate"]
            .iter()
            .map(|s| (s.to_string(), p))
            .collect::<Vec<_>>()
    };
    check(phases(&d) == all(StepPhase::Succeeded), text.clone())?;
    let status = d.run.status.clone().unwrap_or_default();
    let metrics = &status.steps["evaluate"].outputs["metrics"];
    let score = std::fs::read_to_string(Path::new(&metrics.path).join("score.txt"))?;
    // sum(0..100) * 0.1
    check(
        score.trim() == "score=495",
        format!("score {score:?}\n{text}"),
    )?;
    check(
        metrics
            .path
            .ends_with("artifacts/default/r1/evaluate/metrics")
            && metrics.sha256.starts_with("sha256:"),
        format!("{metrics:?}"),
    )?;
    // The steps are ordinary jobs, named and labelled by run and step.
    let train = client.describe("default", "r1-train")?;
    check(
        train.summary.replicas_total == 2
            && train
                .job
                .metadata
                .labels
                .get("corral.dev/pipeline-step")
                .map(String::as_str)
                == Some("train"),
        format!("{:?}", train.job.metadata),
    )?;
    check(
        text.contains("└─ train") && text.contains("r1-train (Succeeded)"),
        format!("describe draws the DAG:\n{text}"),
    )?;
    check(
        steps_log(work.path()) == ["data", "train", "evaluate"],
        format!("{:?}", steps_log(work.path())),
    )?;

    // The same inputs again: every step reuses r1's result, no job is made.
    client.submit("default", &pipeline("r2", "0.1", work.path())?)?;
    let d = wait_for_run(&client, "default", "r2")?;
    check(
        phases(&d) == all(StepPhase::Cached),
        remote::describe_run_text(&d),
    )?;
    check(
        d.steps[1].cached_from.as_deref() == Some("r1/train"),
        format!("{:?}", d.steps[1]),
    )?;
    check(
        client.describe("default", "r2-data").is_err() && steps_log(work.path()).len() == 3,
        "a cached step made a job",
    )?;

    // `generateName`: the same file submitted twice is two runs, each named by the server.
    let again = pipeline("r1", "0.1", work.path())?.replace("name: r1", "generateName: again-");
    let first = client.submit("default", &again)?;
    let second = client.submit("default", &again)?;
    let names = [first[0].name.clone(), second[0].name.clone()];
    check(
        names[0] != names[1]
            && names
                .iter()
                .all(|n| n.starts_with("again-") && n.len() == 11),
        format!("{names:?}"),
    )?;
    for name in &names {
        let d = wait_for_run(&client, "default", name)?;
        check(
            phases(&d) == all(StepPhase::Cached),
            remote::describe_run_text(&d),
        )?;
    }

    // A new learning rate: data is reused, train and evaluate (downstream of it) run.
    client.submit("default", &pipeline("r3", "0.2", work.path())?)?;
    let d = wait_for_run(&client, "default", "r3")?;
    let expected = vec![
        ("data".to_string(), StepPhase::Cached),
        ("train".to_string(), StepPhase::Succeeded),
        ("evaluate".to_string(), StepPhase::Succeeded),
    ];
    check(phases(&d) == expected, remote::describe_run_text(&d))?;
    check(
        steps_log(work.path())[3..] == ["train", "evaluate"],
        format!("{:?}", steps_log(work.path())),
    )?;

    // A step that always fails, with one retry: run twice, then the run fails saying why.
    let failing = pipeline("r4", "0.1", work.path())?
        .replace("step.py, evaluate]", "step.py, fail]")
        .replace("outputs: [metrics]", "outputs: [metrics]\n        retries: 1")
        .replace(
            "    parallelism: 2\n",
            &format!(
                "    parallelism: 2\n    onExit:\n      name: notify\n      task: {{workingDir: {:?}, \
                 command: [sh, -c, 'echo exit $CORRAL_RUN_PHASE >> steps.log']}}\n",
                work.path().display().to_string()
            ),
        );
    client.submit("default", &failing)?;
    let d = wait_for_run(&client, "default", "r4")?;
    let status = d.run.status.clone().unwrap_or_default();
    let message = status.message.clone().unwrap_or_default();
    check(
        status.phase == RunPhase::Failed && message.starts_with("step evaluate failed: "),
        remote::describe_run_text(&d),
    )?;
    check(
        steps_log(work.path()).last().map(String::as_str) == Some("exit Failed")
            && d.steps
                .last()
                .is_some_and(|s| s.name == "notify" && s.phase == StepPhase::Succeeded),
        format!(
            "the exit handler ran last, told the outcome: {:?}\n{}",
            steps_log(work.path()),
            remote::describe_run_text(&d)
        ),
    )?;
    let job = client.describe("default", "r4-evaluate")?;
    check(
        job.summary.restarts == 1
            && steps_log(work.path())
                .iter()
                .filter(|l| *l == "fail")
                .count()
                == 2,
        format!(
            "retried once: {:?}\n{}",
            steps_log(work.path()),
            remote::describe_text(&job)
        ),
    )?;

    // A cycle is refused with its path; nothing is stored.
    let cyclic = pipeline("r5", "0.1", work.path())?.replace(
        "outputs: [dataset]",
        "outputs: [dataset]\n        dependsOn: [evaluate]",
    );
    let e = client
        .submit("default", &cyclic)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    check(
        e.contains("spec.pipelineSpec.steps[0]") && e.contains("cycle"),
        e.clone(),
    )?;
    let names: Vec<String> = client
        .pipeline_runs(Some("default"))?
        .into_iter()
        .map(|r| r.metadata.name)
        .collect();
    check(
        names.len() == 6 && names[2..] == ["r1", "r2", "r3", "r4"],
        format!("{names:?}"),
    )?;

    // The example as written, with its directory as the code snapshot (`corral submit
    // --code examples/pipeline examples/pipeline/pipeline.yaml`): every step's job runs
    // from its copy.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pipeline");
    let text = std::fs::read_to_string(example.join("pipeline.yaml"))?;
    let up = corral_cli::code_archive::upload(&text, &example)?;
    let submitted = client.submit_with_code("default", &up.boundary, &up.body)?;
    let name = submitted
        .first()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let d = wait_for_run(&client, "default", &name)?;
    let status = d.run.status.clone().unwrap_or_default();
    let score = status
        .steps
        .get("evaluate")
        .and_then(|s| s.outputs.get("metrics"))
        .map(|m| std::fs::read_to_string(Path::new(&m.path).join("score.txt")))
        .transpose()?
        .unwrap_or_default();
    check(
        status.phase == RunPhase::Succeeded && score.trim() == "score=495",
        format!("{score:?}\n{}", remote::describe_run_text(&d)),
    )?;

    // Deleting a run deletes its steps' jobs.
    client.delete_pipeline_run("default", "r1")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.describe("default", "r1-train").is_ok() {
        check(Instant::now() < deadline, "r1-train outlived its run")?;
        std::thread::sleep(Duration::from_millis(100));
    }
    check(
        client.describe_pipeline_run("default", "r1").is_err(),
        "r1 is still there",
    )?;
    Ok(())
}

/// `kill -9` of `corral up` while a step runs, then a restart: the finished step is not run
/// again, the running one is re-adopted (not started twice), the run finishes.
pub(super) fn a_pipeline_run_survives_kill_9_of_the_server() -> TestResult {
    if !common::prerequisite(common::python3_available(), "python3 is not installed") {
        return Ok(());
    }
    let dir = usage::admin_dir()?;
    let up = usage::UpProcess::start(dir.path(), usage::free_port()?)?;
    let work = steps_dir()?;
    // train takes a few seconds, so that the server dies under it.
    let run = pipeline("crash", "0.1", work.path())?.replace(
        "command: [python3, step.py, train]",
        "command: [sh, -c, 'sleep 3; exec python3 step.py train']",
    );
    up.client(usage::ADMIN_TOKEN).submit("default", &run)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = up
            .client(usage::ADMIN_TOKEN)
            .describe_pipeline_run("default", "crash")?;
        let train = d.steps.iter().find(|s| s.name == "train").map(|s| s.phase);
        if train == Some(StepPhase::Running) {
            break;
        }
        check(
            Instant::now() < deadline,
            format!("train never ran:\n{}", remote::describe_run_text(&d)),
        )?;
        std::thread::sleep(Duration::from_millis(50));
    }
    up.kill()?;
    let up = usage::UpProcess::start(dir.path(), usage::free_port()?)?;
    let d = wait_for_run(&up.client(usage::ADMIN_TOKEN), "default", "crash")?;
    let all = ["data", "train", "evaluate"];
    check(
        d.steps.iter().all(|s| s.phase == StepPhase::Succeeded),
        remote::describe_run_text(&d),
    )?;
    check(
        steps_log(work.path()) == all,
        format!(
            "each step ran once: {:?}\n{}",
            steps_log(work.path()),
            remote::describe_run_text(&d)
        ),
    )?;
    Ok(())
}

/// A 50-wide run with `parallelism: 8`: never more than 8 of its steps' jobs run at once
/// (by their recorded start and completion times), and every step runs.
pub(super) fn a_fan_out_and_a_wide_run_keep_to_their_bounds() -> TestResult {
    let c = TestCluster::start("")?;
    let client = c.client(None);
    // Ten plain steps beside a 50-wide fan-out bounded at 6, in a run bounded at 8; each
    // iteration checks the item it was given; `merge` needs every iteration.
    let mut steps = String::new();
    for i in 0..10 {
        steps.push_str(&format!(
            "      - {{name: s{i}, cache: {{enabled: false}}, task: {{command: [sleep, '0.2'], \
             resources: {{cpu: 10m, memory: 16Mi}}}}}}\n"
        ));
    }
    let items: Vec<String> = (0..50).map(|i| format!("item-{i}")).collect();
    steps.push_str(&format!(
        "      - name: shard\n        withItems: [{}]\n        parallelism: 6\n        \
         cache: {{enabled: false}}\n        task: {{command: [sh, -c, 'test \"$CORRAL_ITEM\" = \
         \"item-$CORRAL_ITEM_INDEX\" && sleep 0.2'], resources: {{cpu: 10m, memory: 16Mi}}}}\n\
         \x20     - {{name: merge, dependsOn: [shard], cache: {{enabled: false}}, \
         task: {{command: ['true'], resources: {{cpu: 10m, memory: 16Mi}}}}}}\n",
        items.join(", ")
    ));
    let run = format!(
        "apiVersion: corral.dev/v1alpha1\nkind: PipelineRun\nmetadata: {{name: wide}}\n\
         spec:\n  pipelineSpec:\n    parallelism: 8\n    steps:\n{steps}"
    );
    client.submit("default", &run)?;
    let d = wait_for_run(&client, "default", "wide")?;
    check(
        d.steps.len() == 61 && d.steps.iter().all(|s| s.phase == StepPhase::Succeeded),
        remote::describe_run_text(&d),
    )?;
    // Each step's job from its start to its end; the most that overlap at one moment, in
    // all and of the fan-out's iterations.
    let mut edges = Vec::new();
    let mut shards_end = None;
    let mut merge_start = None;
    for s in &d.steps {
        let job = client.describe("default", s.job.as_deref().unwrap_or_default())?;
        let status = job.job.status.unwrap_or_default();
        let (Some(start), Some(end)) = (status.start_time, status.completion_time) else {
            return Err(format!("{} has no start or end", s.name).into());
        };
        let shard = s.name.starts_with("shard-");
        if shard {
            shards_end = shards_end.max(Some(end));
        }
        if s.name == "merge" {
            merge_start = Some(start);
        }
        edges.push((start, 1i32, shard));
        edges.push((end, -1i32, shard));
    }
    // Ends before starts at the same instant: a step that ended frees its place.
    edges.sort();
    let (mut now, mut most, mut shards, mut most_shards) = (0, 0, 0, 0);
    for (_, delta, shard) in edges {
        now += delta;
        most = most.max(now);
        if shard {
            shards += delta;
            most_shards = most_shards.max(shards);
        }
    }
    check(
        (2..=8).contains(&most),
        format!("{most} steps ran at once with parallelism 8"),
    )?;
    check(
        (2..=6).contains(&most_shards),
        format!("{most_shards} iterations ran at once with the fan-out's parallelism 6"),
    )?;
    check(
        merge_start >= shards_end,
        format!(
            "merge started at {merge_start:?}, before the last iteration ended at {shards_end:?}"
        ),
    )?;
    Ok(())
}

/// A fan-out over an earlier step's output: `plan` writes the list, `shard` runs once per
/// item (its iterations made once plan has ended), `report` collects every shard's output.
pub(super) fn a_fan_out_over_a_steps_output_runs_once_per_item_it_listed() -> TestResult {
    let c = TestCluster::start("")?;
    let client = c.client(None);
    let run = r#"apiVersion: corral.dev/v1alpha1
kind: PipelineRun
metadata: {name: listed}
spec:
  pipelineSpec:
    steps:
      - name: plan
        outputs: [shards]
        task: {command: [sh, -c, 'echo "[\"a\", \"b\", \"c\"]" > $CORRAL_OUTPUT_SHARDS/list.json'], resources: {cpu: 10m, memory: 16Mi}}
      - name: shard
        withParam: steps.plan.outputs.shards
        outputs: [part]
        task: {command: [sh, -c, 'echo "part $CORRAL_ITEM" > $CORRAL_OUTPUT_PART/p'], resources: {cpu: 10m, memory: 16Mi}}
      - name: report
        inputs: {parts: steps.shard.outputs.part}
        outputs: [summary]
        task: {command: [sh, -c, 'for d in $(echo "$CORRAL_INPUT_PARTS" | tr -d "[]\"" | tr , " "); do cat $d/p; done > $CORRAL_OUTPUT_SUMMARY/all'], resources: {cpu: 10m, memory: 16Mi}}
"#;
    client.submit("default", run)?;
    let d = wait_for_run(&client, "default", "listed")?;
    let text = remote::describe_run_text(&d);
    let status = d.run.status.clone().unwrap_or_default();
    check(status.phase == RunPhase::Succeeded, text.clone())?;
    check(
        phases(&d)
            == [
                ("plan".to_string(), StepPhase::Succeeded),
                ("shard-0".to_string(), StepPhase::Succeeded),
                ("shard-1".to_string(), StepPhase::Succeeded),
                ("shard-2".to_string(), StepPhase::Succeeded),
                ("report".to_string(), StepPhase::Succeeded),
            ],
        text.clone(),
    )?;
    check(
        status.fan_outs.get("shard").map(Vec::len) == Some(3),
        format!("the items recorded: {:?}", status.fan_outs),
    )?;
    let summary = status
        .steps
        .get("report")
        .and_then(|s| s.outputs.get("summary"))
        .map(|a| std::path::Path::new(&a.path).join("all"))
        .ok_or("no summary")?;
    let all = std::fs::read_to_string(summary)?;
    check(
        all == "part a\npart b\npart c\n",
        format!("{all:?}\n{text}"),
    )?;
    Ok(())
}
