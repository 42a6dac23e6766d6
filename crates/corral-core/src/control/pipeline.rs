//! Pipelines: given a run (spec and recorded status), the jobs of its steps as the shell
//! sees them and the facts it gathered, what happens next: which steps start now (their
//! needs succeeded, their conditions hold, the run has room under `parallelism`), which
//! are skipped, which reuse a cached result, and when the run ends and why.
//!
//! [`decide`] is called until it wants nothing more: what it cannot know without I/O (the
//! content hashes of a finished step's outputs, whether the cache holds a key, what an
//! artifact a condition reads says) it asks for in [`Decision::wants`]; the shell gathers
//! it into [`Facts`] and asks again. Only a decision that wants nothing is applied.
//!
//! A step's retries are its job's: `retries` becomes the job's `backoffLimit`, so the
//! lifecycle restarts it and counts the restarts in the job's status (see
//! `corral_api::pipeline::step_job`); the step fails with the job's reason.
//!
//! Caching follows Kubeflow Pipelines v2: the key is the SHA-256 of the step's job spec,
//! its outputs' names and its inputs (parameter values, and input artifacts by content
//! hash), or of the key the step names; a step whose key an earlier successful step of
//! the same namespace recorded is `Cached` and reuses its outputs.

use std::collections::{BTreeMap, BTreeSet};

use corral_api::pipeline::{
    ArtifactRecord, Comparison, PipelineRun, PipelineRunStatus, PipelineSpec, Reference, RunPhase,
    StepPhase, StepSpec, StepStatus, step_job,
};
use corral_api::{ConditionStatus, ConditionType, JobState, TrainingJob};
use jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::lifecycle::job_state;

/// A step's job as the shell observed it.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// Its job has not finished.
    Active,
    Succeeded,
    /// It failed for good (its retries spent), in the job's words.
    Failed(String),
    /// The step's job does not exist (deleted from outside).
    Gone,
}

/// What a step's job says of the step: the one reading of a job's state for pipelines.
pub fn observe_job(job: Option<&TrainingJob>) -> Observed {
    let Some(job) = job else {
        return Observed::Gone;
    };
    match job_state(&job.spec, job.status.as_ref()) {
        JobState::Succeeded => Observed::Succeeded,
        JobState::Failed => {
            let why = job
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .find(|c| c.type_ == ConditionType::Failed && c.status == ConditionStatus::True)
                .map(|c| format!("{}: {}", c.reason, c.message))
                .unwrap_or_else(|| "its job failed".to_string());
            Observed::Failed(why)
        }
        _ => Observed::Active,
    }
}

/// A cached result: the step that recorded it (`<run>/<step>`) and its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheHit {
    pub from: String,
    pub outputs: BTreeMap<String, ArtifactRecord>,
}

/// What the shell found out for [`decide`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// A succeeded step's outputs: where each is and its content hash.
    pub outputs: BTreeMap<String, BTreeMap<String, ArtifactRecord>>,
    /// Cache keys looked up: a hit, or `None` for a miss.
    pub cache: BTreeMap<String, Option<CacheHit>>,
    /// An artifact's text (trimmed) by path, for conditions.
    pub contents: BTreeMap<String, String>,
}

/// What [`decide`] needs before it can decide.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Wants {
    /// Steps whose outputs must be hashed: (step, its output names).
    pub hash: Vec<(String, Vec<String>)>,
    /// Cache keys to look up.
    pub lookup: Vec<String>,
    /// Artifacts (by path) whose content a condition compares.
    pub read: Vec<String>,
}

impl Wants {
    pub fn is_empty(&self) -> bool {
        self.hash.is_empty() && self.lookup.is_empty() && self.read.is_empty()
    }
}

/// What a step's process is given: a parameter's value, or an input artifact's path.
#[derive(Clone, Debug, PartialEq)]
pub enum StepInput {
    Value(String),
    Artifact(String),
}

/// A step to start now: its job (to which the shell adds [`step_env`]) and its inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct StepLaunch {
    pub step: String,
    pub job: TrainingJob,
    pub inputs: BTreeMap<String, StepInput>,
    pub outputs: Vec<String>,
}

/// Steps whose result the shell records for the cache, with lineage.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub step: String,
    pub cache_key: String,
    pub outputs: BTreeMap<String, ArtifactRecord>,
    /// The artifacts it read: input name -> its record.
    pub inputs: BTreeMap<String, ArtifactRecord>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Non-empty: gather these into the facts and decide again; nothing else is valid.
    pub wants: Wants,
    /// The run's status after this decision (persist it, with the jobs of `create`, in
    /// one transaction).
    pub status: corral_api::PipelineRunStatus,
    pub create: Vec<StepLaunch>,
    pub record: Vec<Recorded>,
    /// The run ended in this decision (it ends exactly once).
    pub finished: bool,
    /// What happened, in words, one line each (step started, cached, skipped, ...).
    pub events: Vec<String>,
}

impl Decision {
    /// Nothing to persist or do.
    pub fn is_empty(&self, before: &corral_api::PipelineRunStatus) -> bool {
        self.create.is_empty() && self.record.is_empty() && self.status == *before
    }
}

/// The environment a step's process gets for its artifacts: `CORRAL_OUTPUT_<NAME>` (the
/// directory to write each output into) and `CORRAL_INPUT_<NAME>` (an input artifact's
/// path, or a parameter's value), names in upper case.
pub fn step_env(
    inputs: &BTreeMap<String, StepInput>,
    output_dirs: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (name, dir) in output_dirs {
        env.push((
            format!("CORRAL_OUTPUT_{}", name.to_uppercase()),
            dir.clone(),
        ));
    }
    for (name, input) in inputs {
        let v = match input {
            StepInput::Value(v) | StepInput::Artifact(v) => v.clone(),
        };
        env.push((format!("CORRAL_INPUT_{}", name.to_uppercase()), v));
    }
    env
}

/// A step's job as it is created: every replica given [`step_env`] (its artifacts' places
/// and its inputs' values), and each reference `$(NAME)` to one of those variables (or of
/// the replica's own literal variables) in its command and args replaced by the value, as Kubernetes expands `$(VAR)` from a
/// container's environment (a component compiled by Kubeflow Pipelines names its artifacts'
/// paths so: see `corral_api::kfp`). Other `$(...)` are left as written.
pub fn step_job_with_artifacts(
    launch: &StepLaunch,
    output_dirs: &BTreeMap<String, String>,
) -> TrainingJob {
    let env = step_env(&launch.inputs, output_dirs);
    let mut job = launch.job.clone();
    for replica in job.spec.replicas.values_mut() {
        let t = &mut replica.template;
        // The container's own variables expand too (a fan-out's `CORRAL_ITEM`), as
        // Kubernetes expands any of a container's variables.
        let mut vars = env.clone();
        vars.extend(
            t.env
                .iter()
                .filter_map(|e| e.value.clone().map(|v| (e.name.clone(), v))),
        );
        for word in t.command.iter_mut().chain(t.args.iter_mut()) {
            *word = expand_references(word, &vars);
        }
        for (k, v) in &env {
            t.env.push(corral_api::training_job::EnvVar::literal(k, v));
        }
    }
    job
}

/// `$(NAME)` replaced by NAME's value where `vars` has it; everything else as written.
fn expand_references(word: &str, vars: &[(String, String)]) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(at) = rest.find("$(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let value = after.find(')').and_then(|end| {
            let name = &after[..end];
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| (v, end))
        });
        match value {
            Some((v, end)) => {
                out.push_str(v);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("$(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A parameter's value as a step reads it: a string as is, anything else as JSON text.
fn param_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The run's parameter values, defaults filled in.
fn params(run: &PipelineRun) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for p in &run.spec.pipeline_spec.parameters {
        if let Some(v) = run.spec.params.get(&p.name).or(p.default.as_ref()) {
            out.insert(p.name.clone(), v.clone());
        }
    }
    out
}

/// What an input `steps.<step>.outputs.<output>` reads, once it can be read: that step's
/// output; of a fan-out step (in the expanded `spec`), every iteration's, collected in item
/// order into one record whose path is the JSON list of their paths and whose hash is the
/// SHA-256 of theirs, so that a reader's cache key and lineage change with any of them.
fn input_artifact(
    spec: &PipelineSpec,
    status: &PipelineRunStatus,
    step: &str,
    output: &str,
) -> Option<ArtifactRecord> {
    if let Some(st) = status.steps.get(step) {
        return st.outputs.get(output).cloned();
    }
    let mut paths = Vec::new();
    let mut hashes = Sha256::new();
    for it in spec.iterations_of(step) {
        let a = status.steps.get(&it.name)?.outputs.get(output)?;
        paths.push(serde_json::Value::String(a.path.clone()));
        hashes.update(a.sha256.as_bytes());
        hashes.update(b"\n");
    }
    if paths.is_empty() {
        return None;
    }
    Some(ArtifactRecord {
        path: serde_json::Value::Array(paths).to_string(),
        sha256: format!("sha256:{:x}", hashes.finalize()),
    })
}

/// The items of a fan-out over `steps.<step>.outputs.<output>`: the JSON list in that
/// output's one file. `Err(path)`: its text is needed first; `Ok(Err(why))`: it is not a
/// list of at most [`MAX_ITEMS`](corral_api::validate::MAX_ITEMS) items.
fn fan_out_items(
    status: &PipelineRunStatus,
    step: &str,
    output: &str,
    facts: &Facts,
) -> Result<Result<Vec<serde_json::Value>, String>, String> {
    let what = format!("steps.{step}.outputs.{output}");
    let Some(a) = status.steps.get(step).and_then(|s| s.outputs.get(output)) else {
        return Ok(Err(format!("{what} was not written")));
    };
    let Some(text) = facts.contents.get(&a.path) else {
        return Err(a.path.clone());
    };
    Ok(match serde_json::from_str::<Vec<serde_json::Value>>(text) {
        Err(e) => Err(format!(
            "{what} is not a JSON list in one file (a fan-out iterates over one): {e}"
        )),
        Ok(items) if items.len() > corral_api::validate::MAX_ITEMS => Err(format!(
            "{what} has {} items; a fan-out takes at most {}",
            items.len(),
            corral_api::validate::MAX_ITEMS
        )),
        Ok(items) => Ok(items),
    })
}

/// The cache key of a step with these resolved inputs (see the module docs).
pub fn cache_key(
    run: &PipelineRun,
    step: &StepSpec,
    params: &BTreeMap<String, serde_json::Value>,
    artifacts: &BTreeMap<String, ArtifactRecord>,
) -> String {
    if let Some(key) = step.cache.as_ref().and_then(|c| c.key.as_ref()) {
        return format!("sha256:{:x}", Sha256::digest(format!("key:{key}")));
    }
    let job = step_job(&run.metadata, step);
    let mut inputs = serde_json::Map::new();
    for (name, r) in &step.inputs {
        let v = match Reference::parse(r) {
            Ok(Reference::Param(p)) => params.get(&p).cloned().unwrap_or_default(),
            Ok(Reference::Artifact { .. } | Reference::Value { .. }) => artifacts
                .get(name)
                .map(|a| serde_json::Value::String(a.sha256.clone()))
                .unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        inputs.insert(name.clone(), v);
    }
    let doc = serde_json::json!({
        "spec": job.spec,
        "outputs": step.outputs,
        "inputs": inputs,
    });
    format!("sha256:{:x}", Sha256::digest(doc.to_string()))
}

/// The next decision for a run (see the module docs). `jobs`: each step's job that exists,
/// by step name.
pub fn decide(
    run: &PipelineRun,
    jobs: &BTreeMap<String, Observed>,
    facts: &Facts,
    now: Timestamp,
) -> Decision {
    let before = run.status.clone().unwrap_or_default();
    let mut d = Decision {
        status: before.clone(),
        ..Decision::default()
    };
    if before.phase.is_finished() {
        return d;
    }
    // Fan-out steps run as their iterations: from here on, a step is an iteration (a
    // fan-out over a step's output once its items are known).
    let expanded = run.expanded_spec();
    let spec = &expanded;
    let Some(order) = spec.topological_order() else {
        // Validation refuses cycles; a stored one fails rather than waits forever.
        finish(
            &mut d,
            RunPhase::Failed,
            "its steps form a cycle".into(),
            now,
        );
        return d;
    };
    if d.status.start_time.is_none() {
        d.status.start_time = Some(now);
    }
    let params = params(run);
    let limit = spec.parallelism.map_or(usize::MAX, |p| p as usize);
    // A fan-out named by a reference is not a step here: its iterations are (`dependsOn`).
    let names: BTreeSet<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    // First what the jobs say of the steps already started (the exit handler's too).
    let observed = order
        .iter()
        .map(|i| &spec.steps[*i])
        .chain(spec.on_exit.as_deref());
    for step in observed {
        let st = d.status.steps.entry(step.name.clone()).or_default();
        if st.phase != StepPhase::Running {
            continue;
        }
        match jobs.get(&step.name).unwrap_or(&Observed::Gone) {
            Observed::Active => {}
            Observed::Failed(why) => {
                st.phase = StepPhase::Failed;
                st.message = Some(why.clone());
                d.events.push(format!("step {} failed: {why}", step.name));
            }
            Observed::Gone => {
                st.phase = StepPhase::Failed;
                st.message = Some("its job was deleted".into());
                d.events
                    .push(format!("step {} failed: its job was deleted", step.name));
            }
            Observed::Succeeded => match facts.outputs.get(&step.name) {
                None => d.wants.hash.push((step.name.clone(), step.outputs.clone())),
                Some(outputs) => {
                    st.phase = StepPhase::Succeeded;
                    st.outputs = outputs.clone();
                    d.events.push(format!("step {} succeeded", step.name));
                }
            },
        }
    }
    if !d.wants.is_empty() {
        return d;
    }
    let failed = order
        .iter()
        .map(|i| &spec.steps[*i])
        .find(|s| d.status.steps.get(&s.name).map(|st| st.phase) == Some(StepPhase::Failed))
        .map(|s| s.name.clone());
    let mut in_flight = count(&d.status, StepPhase::Running);
    let mut fan_out_running: BTreeMap<String, usize> = BTreeMap::new();
    for step in &spec.steps {
        if let Some((fan_out, _)) = &step.iteration_of
            && d.status.steps.get(&step.name).map(|s| s.phase) == Some(StepPhase::Running)
        {
            *fan_out_running.entry(fan_out.clone()).or_default() += 1;
        }
    }
    // Then the steps that wait, in order: a step decided here is seen by those after it.
    for i in &order {
        let step = &spec.steps[*i];
        let phase_of = |d: &Decision, n: &str| d.status.steps.get(n).map(|s| s.phase);
        if phase_of(&d, &step.name) != Some(StepPhase::Pending) {
            continue;
        }
        let mut needs = step.needs();
        needs.retain(|n| names.contains(n.as_str()));
        if let Some(skipped) = needs
            .iter()
            .find(|n| phase_of(&d, n) == Some(StepPhase::Skipped))
        {
            set(
                &mut d,
                step,
                StepPhase::Skipped,
                format!("step {skipped} was skipped"),
            );
            continue;
        }
        if !needs
            .iter()
            .all(|n| phase_of(&d, n).is_some_and(StepPhase::has_outputs))
        {
            continue;
        }
        // A fan-out over an earlier step's output: its items, read now that the step has
        // ended; its iterations exist from the next decision on.
        if let Some((source, output)) = step.fan_out_source() {
            match fan_out_items(&d.status, &source, &output, facts) {
                Err(path) => d.wants.read.push(path),
                Ok(Err(why)) => set(&mut d, step, StepPhase::Failed, why),
                Ok(Ok(items)) if items.is_empty() => {
                    d.status.fan_outs.insert(step.name.clone(), items);
                    let why = format!("steps.{source}.outputs.{output} is an empty list");
                    set(&mut d, step, StepPhase::Skipped, why);
                }
                Ok(Ok(items)) => {
                    d.events.push(format!(
                        "step {} fans out over the {} items of steps.{source}.outputs.{output}",
                        step.name,
                        items.len()
                    ));
                    d.status.fan_outs.insert(step.name.clone(), items);
                    // Its iterations take its place.
                    d.status.steps.remove(&step.name);
                }
            }
            continue;
        }
        // Its inputs, resolved.
        let mut inputs = BTreeMap::new();
        let mut unread = Vec::new();
        let mut artifacts = BTreeMap::new();
        for (name, r) in &step.inputs {
            match Reference::parse(r) {
                Ok(Reference::Param(p)) => {
                    let v = params.get(&p).map(param_text).unwrap_or_default();
                    inputs.insert(name.clone(), StepInput::Value(v));
                }
                Ok(Reference::Artifact { step: s, output }) => {
                    if let Some(a) = input_artifact(spec, &d.status, &s, &output) {
                        inputs.insert(name.clone(), StepInput::Artifact(a.path.clone()));
                        artifacts.insert(name.clone(), a);
                    }
                }
                // The text of the output's one file, read by the shell first.
                Ok(Reference::Value { step: s, output }) => {
                    if let Some(a) = input_artifact(spec, &d.status, &s, &output) {
                        match facts.contents.get(&a.path) {
                            Some(text) => {
                                inputs.insert(name.clone(), StepInput::Value(text.clone()));
                            }
                            None => unread.push(a.path.clone()),
                        }
                        artifacts.insert(name.clone(), a);
                    }
                }
                Err(_) => {}
            }
        }
        if !unread.is_empty() {
            d.wants.read.extend(unread);
            continue;
        }
        match conditions(&d, step, &params, facts) {
            Err(path) => {
                d.wants.read.push(path);
                continue;
            }
            Ok(Some(why)) => {
                set(&mut d, step, StepPhase::Skipped, why);
                continue;
            }
            Ok(None) => {}
        }
        // A failed run starts nothing more; it ends once what runs has ended.
        if failed.is_some() {
            continue;
        }
        let key = cache_key(run, step, &params, &artifacts);
        if step.cache_enabled() {
            match facts.cache.get(&key) {
                None => {
                    d.wants.lookup.push(key);
                    continue;
                }
                Some(Some(hit)) => {
                    let st = d.status.steps.entry(step.name.clone()).or_default();
                    st.phase = StepPhase::Cached;
                    st.cache_key = Some(key);
                    st.cached_from = Some(hit.from.clone());
                    st.outputs = hit.outputs.clone();
                    d.events.push(format!(
                        "step {} reused the result of {}",
                        step.name, hit.from
                    ));
                    continue;
                }
                Some(None) => {}
            }
        }
        if in_flight >= limit {
            continue;
        }
        // A fan-out's own bound: its iterations in flight.
        if let Some((fan_out, bound)) = &step.iteration_of {
            let running = fan_out_running.entry(fan_out.clone()).or_default();
            if *running >= bound.map_or(usize::MAX, |b| b as usize) {
                continue;
            }
            *running += 1;
        }
        in_flight += 1;
        let job = step_job(&run.metadata, step);
        let st = d.status.steps.entry(step.name.clone()).or_default();
        st.phase = StepPhase::Running;
        st.job = Some(job.metadata.name.clone());
        st.cache_key = Some(key);
        d.events.push(format!(
            "step {} started as job {}",
            step.name, job.metadata.name
        ));
        d.create.push(StepLaunch {
            step: step.name.clone(),
            job,
            inputs,
            outputs: step.outputs.clone(),
        });
    }
    if !d.wants.is_empty() {
        d.create.clear();
        return d;
    }
    // What the steps that just succeeded record for the cache.
    for i in &order {
        let step = &spec.steps[*i];
        let was = before.steps.get(&step.name).map(|s| s.phase);
        // A fan-out whose iterations just took its place has no entry of its own.
        let Some(st) = d.status.steps.get(&step.name) else {
            continue;
        };
        if st.phase == StepPhase::Succeeded && was != Some(StepPhase::Succeeded) {
            let inputs = step
                .inputs
                .iter()
                .filter_map(|(name, r)| match Reference::parse(r) {
                    Ok(
                        Reference::Artifact { step: s, output }
                        | Reference::Value { step: s, output },
                    ) => input_artifact(spec, &d.status, &s, &output).map(|a| (name.clone(), a)),
                    _ => None,
                })
                .collect();
            if let Some(key) = &st.cache_key
                && step.cache_enabled()
            {
                d.record.push(Recorded {
                    step: step.name.clone(),
                    cache_key: key.clone(),
                    outputs: st.outputs.clone(),
                    inputs,
                });
            }
        }
    }
    // A step failed in this decision (a fan-out whose list could not be read) fails the
    // run as one whose job failed.
    let failed = failed.or_else(|| {
        order
            .iter()
            .map(|i| &spec.steps[*i])
            .find(|s| d.status.steps.get(&s.name).map(|st| st.phase) == Some(StepPhase::Failed))
            .map(|s| s.name.clone())
    });
    // How the steps ended, once they have; then the exit handler, then the run.
    let main: Vec<&StepStatus> = order
        .iter()
        .filter_map(|i| d.status.steps.get(&spec.steps[*i].name))
        .collect();
    let main_count = |p: StepPhase| main.iter().filter(|s| s.phase == p).count();
    let running = main_count(StepPhase::Running);
    let outcome = if let Some(step) = failed {
        if running == 0 {
            let why = d.status.steps[&step].message.clone().unwrap_or_default();
            Some((RunPhase::Failed, format!("step {step} failed: {why}")))
        } else {
            d.status.message = Some(format!(
                "step {step} failed; waiting for {running} running step(s) to end"
            ));
            None
        }
    } else if main.len() == spec.steps.len() && main.iter().all(|s| s.phase.is_finished()) {
        let (cached, skipped) = (
            main_count(StepPhase::Cached),
            main_count(StepPhase::Skipped),
        );
        let n = spec.steps.len();
        Some((
            RunPhase::Succeeded,
            format!("{n} steps: {cached} cached, {skipped} skipped"),
        ))
    } else {
        None
    };
    if let Some((phase, message)) = outcome {
        match spec.on_exit.as_deref() {
            None => finish(&mut d, phase, message, now),
            Some(exit) => exit_handler(&mut d, run, exit, &params, (phase, message), now),
        }
    }
    d
}

/// The run's final status as Kubeflow Pipelines hands it to an exit task
/// (`dsl.PipelineTaskFinalStatus`; [`corral_api::pipeline::RUN_STATUS_ENV`]).
fn final_status(run: &str, exit: &str, phase: RunPhase, message: &str) -> String {
    let failed = phase != RunPhase::Succeeded;
    serde_json::json!({
        "state": if failed { "FAILED" } else { "SUCCEEDED" },
        "pipelineJobResourceName": run,
        "pipelineTaskName": exit,
        "error": if failed {
            serde_json::json!({"code": 1, "message": message})
        } else {
            serde_json::json!({})
        },
    })
    .to_string()
}

/// The run's steps have ended with `outcome`: start the exit handler, wait for it, or end
/// the run (its failure fails a run that had succeeded).
fn exit_handler(
    d: &mut Decision,
    run: &PipelineRun,
    exit: &StepSpec,
    params: &BTreeMap<String, serde_json::Value>,
    (phase, message): (RunPhase, String),
    now: Timestamp,
) {
    let st = d.status.steps.entry(exit.name.clone()).or_default();
    match st.phase {
        StepPhase::Pending => {
            let mut job = step_job(&run.metadata, exit);
            let status = final_status(&run.metadata.name, &exit.name, phase, &message);
            for r in job.spec.replicas.values_mut() {
                r.template.env.push(corral_api::EnvVar::literal(
                    corral_api::pipeline::RUN_PHASE_ENV,
                    phase.as_str(),
                ));
                r.template.env.push(corral_api::EnvVar::literal(
                    corral_api::pipeline::RUN_STATUS_ENV,
                    &status,
                ));
            }
            st.phase = StepPhase::Running;
            st.job = Some(job.metadata.name.clone());
            // What it reads of steps that did not produce it is left out.
            let mut inputs = BTreeMap::new();
            for (name, r) in &exit.inputs {
                match Reference::parse(r) {
                    Ok(Reference::Param(p)) => {
                        let v = params.get(&p).map(param_text).unwrap_or_default();
                        inputs.insert(name.clone(), StepInput::Value(v));
                    }
                    Ok(Reference::Artifact { step, output }) => {
                        if let Some(a) = d
                            .status
                            .steps
                            .get(&step)
                            .and_then(|s| s.outputs.get(&output))
                        {
                            inputs.insert(name.clone(), StepInput::Artifact(a.path.clone()));
                        }
                    }
                    // Refused at submit (the exit handler cannot wait for a read).
                    Ok(Reference::Value { .. }) | Err(_) => {}
                }
            }
            d.status.message = Some(format!("{message}; running exit handler {}", exit.name));
            d.events.push(format!(
                "exit handler {} started as job {}",
                exit.name, job.metadata.name
            ));
            d.create.push(StepLaunch {
                step: exit.name.clone(),
                job,
                inputs,
                outputs: exit.outputs.clone(),
            });
        }
        StepPhase::Running => {}
        StepPhase::Failed if phase == RunPhase::Succeeded => {
            let why = st.message.clone().unwrap_or_default();
            finish(
                d,
                RunPhase::Failed,
                format!("exit handler {} failed: {why}", exit.name),
                now,
            );
        }
        StepPhase::Failed => {
            finish(
                d,
                phase,
                format!("{message}; exit handler {} failed too", exit.name),
                now,
            );
        }
        _ => finish(d, phase, message, now),
    }
}

fn count(status: &corral_api::PipelineRunStatus, phase: StepPhase) -> usize {
    status.steps.values().filter(|s| s.phase == phase).count()
}

fn set(d: &mut Decision, step: &StepSpec, phase: StepPhase, why: String) {
    d.events
        .push(format!("step {} {}: {why}", step.name, phase.as_str()));
    let st: &mut StepStatus = d.status.steps.entry(step.name.clone()).or_default();
    st.phase = phase;
    st.message = Some(why);
}

fn finish(d: &mut Decision, phase: RunPhase, message: String, now: Timestamp) {
    d.events.push(format!("run {}: {message}", phase.as_str()));
    d.status.phase = phase;
    d.status.message = Some(message);
    d.status.completion_time = Some(now);
    d.finished = true;
}

/// A run that cannot run as written (a shell that stores what it has not validated, as the
/// Kubernetes API server without Corral's webhook does, finds out later): it ends Failed at
/// once, with why, and no step of it starts.
pub fn refused(run: &PipelineRun, why: String, now: Timestamp) -> Decision {
    let mut d = Decision {
        status: run.status.clone().unwrap_or_default(),
        ..Decision::default()
    };
    if d.status.phase.is_finished() {
        return d;
    }
    d.status.start_time.get_or_insert(now);
    finish(&mut d, RunPhase::Failed, format!("Invalid: {why}"), now);
    d
}

/// `Ok(None)`: every condition holds; `Ok(Some(why))`: one does not; `Err(path)`: an
/// artifact must be read first.
fn conditions(
    d: &Decision,
    step: &StepSpec,
    params: &BTreeMap<String, serde_json::Value>,
    facts: &Facts,
) -> Result<Option<String>, String> {
    for w in &step.when {
        let value = match Reference::parse(&w.value) {
            Ok(Reference::Param(p)) => params.get(&p).map(param_text).unwrap_or_default(),
            Ok(Reference::Artifact { step: s, output } | Reference::Value { step: s, output }) => {
                let Some(a) = d
                    .status
                    .steps
                    .get(&s)
                    .and_then(|st| st.outputs.get(&output))
                else {
                    continue;
                };
                match facts.contents.get(&a.path) {
                    Some(text) => text.clone(),
                    None => return Err(a.path.clone()),
                }
            }
            Err(_) => continue,
        };
        for c in w.comparisons() {
            if let Some(why) = fails(c, &value) {
                return Ok(Some(format!("{} is `{value}`{why}", w.value)));
            }
        }
    }
    Ok(None)
}

/// Why `value` fails comparison `c` (after the value in a message), or `None` when it holds.
/// A number compares by its value; a value that is not one fails any numeric comparison.
fn fails(c: Comparison, value: &str) -> Option<String> {
    let number = value.trim().parse::<f64>().ok().filter(|v| v.is_finite());
    let numeric = |bound: f64, holds: fn(f64, f64) -> bool, op: &str| match number {
        Some(v) if holds(v, bound) => None,
        Some(_) => Some(format!(", not {op} {bound}")),
        None => Some(format!(", not a number to compare ({op} {bound})")),
    };
    match c {
        Comparison::Equals(want) => (value != want).then(|| format!(", not `{want}`")),
        Comparison::NotEquals(unwanted) => (value == unwanted).then(String::new),
        Comparison::GreaterThan(b) => numeric(b, |v, b| v > b, ">"),
        Comparison::GreaterThanOrEqual(b) => numeric(b, |v, b| v >= b, ">="),
        Comparison::LessThan(b) => numeric(b, |v, b| v < b, "<"),
        Comparison::LessThanOrEqual(b) => numeric(b, |v, b| v <= b, "<="),
    }
}

/// The jobs a run starts with, as [`decide`] starts them on a cache that holds nothing:
/// the steps that need no other and whose conditions hold, within the run's and each
/// fan-out's bound. What `corral plan` places.
pub fn first_steps(run: &PipelineRun, now: Timestamp) -> Vec<TrainingJob> {
    let mut facts = Facts::default();
    // Each round answers what the last one asked; the root steps read no artifact.
    for _ in 0..4 {
        let d = decide(run, &BTreeMap::new(), &facts, now);
        if d.wants.is_empty() {
            return d.create.into_iter().map(|l| l.job).collect();
        }
        for key in d.wants.lookup {
            facts.cache.insert(key, None);
        }
        if !d.wants.hash.is_empty() || !d.wants.read.is_empty() {
            break;
        }
    }
    Vec::new()
}

/// Every step's phase in the run's order, with the steps it needs, the exit handler last:
/// what `describe` draws.
pub fn listing(run: &PipelineRun) -> Vec<(String, StepPhase, Vec<String>)> {
    let spec = &run.expanded_spec();
    let order = spec
        .topological_order()
        .unwrap_or_else(|| (0..spec.steps.len()).collect());
    let status = run.status.clone().unwrap_or_default();
    let names: BTreeSet<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    order
        .into_iter()
        .map(|i| {
            let s = &spec.steps[i];
            let phase = status
                .steps
                .get(&s.name)
                .map_or(StepPhase::Pending, |st| st.phase);
            let mut needs = s.needs();
            needs.retain(|n| names.contains(n.as_str()));
            (s.name.clone(), phase, needs)
        })
        .chain(spec.on_exit.iter().map(|e| {
            let phase = status
                .steps
                .get(&e.name)
                .map_or(StepPhase::Pending, |st| st.phase);
            (e.name.clone(), phase, Vec::new())
        }))
        .collect()
}

/// Names of the steps of a run, for a shell's lookups of their jobs.
pub fn step_names(run: &PipelineRun) -> BTreeSet<String> {
    run.expanded_spec()
        .steps
        .iter()
        .map(|s| s.name.clone())
        .collect()
}

/// The jobs of a run's steps that are running, by step: those a shell observes for
/// [`decide`].
pub fn watched_jobs(run: &PipelineRun) -> Vec<(String, String)> {
    run.status
        .iter()
        .flat_map(|s| &s.steps)
        .filter(|(_, st)| st.phase == StepPhase::Running)
        .filter_map(|(name, st)| st.job.clone().map(|j| (name.clone(), j)))
        .collect()
}

/// Rounds of gathering facts and deciding again that a shell gives one run in one pass, at
/// most: each round answers at least one step, so a run needs no more than a few per step.
pub fn max_rounds(run: &PipelineRun) -> usize {
    4 * run.expanded_spec().steps.len() + 4
}

/// The results a run's status holds for the cache: each step that succeeded under a key,
/// as `(step, key, outputs)`. What a shell without a store of its own (the operator) looks
/// cache keys up in.
pub fn recorded_results(run: &PipelineRun) -> Vec<(&str, &str, &BTreeMap<String, ArtifactRecord>)> {
    run.status
        .iter()
        .flat_map(|s| &s.steps)
        .filter(|(_, st)| st.phase == StepPhase::Succeeded)
        .filter_map(|(step, st)| Some((step.as_str(), st.cache_key.as_deref()?, &st.outputs)))
        .collect()
}

/// The jobs a deleted run's steps left, by step: those a shell deletes with it.
pub fn step_jobs(run: &PipelineRun) -> Vec<String> {
    run.status
        .iter()
        .flat_map(|s| s.steps.values())
        .filter_map(|st| st.job.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn references_to_the_step_variables_expand_and_nothing_else() {
        let vars = vec![
            ("CORRAL_OUTPUT_DATA".to_string(), "/a/out".to_string()),
            ("CORRAL_INPUT_N".to_string(), "3".to_string()),
        ];
        let x = |w: &str| super::expand_references(w, &vars);
        assert_eq!(x("$(CORRAL_OUTPUT_DATA)/data"), "/a/out/data");
        assert_eq!(x("n=$(CORRAL_INPUT_N),$(CORRAL_INPUT_N)"), "n=3,3");
        assert_eq!(
            x("$(dirname \"$1\") $(HOME) $( $$"),
            "$(dirname \"$1\") $(HOME) $( $$"
        );
        assert_eq!(x("$(CORRAL_INPUT_N"), "$(CORRAL_INPUT_N");
    }
}
