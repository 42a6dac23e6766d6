//! PipelineRun: one run of a pipeline, a DAG of steps (TrainingJobs of any framework or
//! single-replica tasks) that pass artifacts by reference, with typed parameters,
//! conditions, retries, caching and a bound on the steps in flight.
//!
//! The pipeline is written inline (`spec.pipelineSpec`), so that `corral submit run.yaml`
//! starts a run from one file, or stored once as a [`Pipeline`] and named by its runs
//! (`spec.pipelineRef`), which take a copy of it when submitted ([`PipelineRunSpec::resolve`]):
//! a run never changes under a pipeline revised after it started. A step becomes an
//! ordinary TrainingJob named `<run>-<step>` ([`step_job`]), queued, admitted and run like
//! any other.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Kind, Object, ObjectMeta};
use crate::training_job::{
    EnvVar, Framework, PythonEnv, ReplicaSpec, ReplicaTemplate, Resources, RestartPolicy, Role,
    TrainingJob, TrainingJobSpec,
};

/// One run of a pipeline.
pub type PipelineRun = Object<PipelineRunSpec, PipelineRunStatus>;

/// A pipeline kept for runs to name (`spec.pipelineRef`): its spec is the DAG a run's
/// `pipelineSpec` holds. Submitting one of a name that exists revises it
/// (`metadata.generation` counts the versions); runs already made keep their copy.
pub type Pipeline = Object<PipelineSpec>;

impl Kind for PipelineSpec {
    const KIND: &'static str = "Pipeline";
    const PLURAL: &'static str = "pipelines";
    const NAMESPACED: bool = true;
}

/// A stored [`Pipeline`] of the run's namespace that the run runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRef {
    pub name: String,
    /// The version (`metadata.generation`) the run was made from: recorded at submit; when
    /// given, the submit is refused unless it is the pipeline's current version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

/// Labels every step's job carries: which run and which step it is.
pub const RUN_LABEL: &str = "corral.dev/pipeline-run";
pub const STEP_LABEL: &str = "corral.dev/pipeline-step";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRunSpec {
    /// The pipeline this run runs: written here, or copied from `pipelineRef` at submit.
    #[serde(default)]
    pub pipeline_spec: PipelineSpec,
    /// A stored Pipeline of the run's namespace to run instead of an inline
    /// `pipelineSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_ref: Option<PipelineRef>,
    /// Values of the pipeline's parameters, by name (those left out take their default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
}

impl PipelineRunSpec {
    /// Whether it names a stored Pipeline whose copy it does not hold yet (a shell gives it
    /// one: [`Self::resolve`]).
    pub fn awaits_copy(&self) -> bool {
        self.pipeline_ref
            .as_ref()
            .is_some_and(|r| r.generation.is_none() || self.pipeline_spec.steps.is_empty())
    }

    /// Copies the pipeline `pipelineRef` names into `pipelineSpec`, from `known` (every kept
    /// version of the namespace's stored pipelines, and those of the same submission, which
    /// have no generation yet and are the current ones), and records its version: the one
    /// `generation` names, else the current one. A run without a reference is left as it
    /// is. Refused at `spec.pipelineRef.name` for a pipeline that is not there (naming those
    /// that are), at `.generation` for a version that is not kept (naming those that are),
    /// and at `spec.pipelineSpec` for an inline spec besides that is not that version's.
    pub fn resolve(&mut self, known: &[Pipeline]) -> Result<(), crate::validate::FieldError> {
        use crate::validate::FieldError;
        let Some(r) = self.pipeline_ref.as_mut() else {
            return Ok(());
        };
        let versions: Vec<&Pipeline> = known.iter().filter(|p| p.metadata.name == r.name).collect();
        // The current version: one of this submission (no generation yet), else the last.
        let current = versions
            .iter()
            .find(|p| p.metadata.generation.is_none())
            .or_else(|| versions.iter().max_by_key(|p| p.metadata.generation))
            .copied();
        let Some(current) = current else {
            let mut names: Vec<&str> = known.iter().map(|p| p.metadata.name.as_str()).collect();
            names.dedup();
            let hint = if names.is_empty() {
                "; there is none: submit one (kind: Pipeline) first".to_string()
            } else {
                format!("; there are: {}", names.join(", "))
            };
            return Err(FieldError::new(
                "spec.pipelineRef.name",
                format!("there is no Pipeline `{}` in this namespace{hint}", r.name),
            ));
        };
        let p = match r.generation {
            None => current,
            Some(asked) => {
                let kept = versions
                    .iter()
                    .find(|p| p.metadata.generation == Some(asked))
                    .copied();
                match (kept, current.metadata.generation) {
                    (Some(p), _) => p,
                    (None, None) => {
                        return Err(FieldError::new(
                            "spec.pipelineRef.generation",
                            format!(
                                "Pipeline `{}` is a new version in this submission, not \
                                 generation {asked}; leave generation out",
                                r.name
                            ),
                        ));
                    }
                    (None, Some(now)) => {
                        let mut kept: Vec<String> = versions
                            .iter()
                            .filter_map(|p| p.metadata.generation.map(|g| g.to_string()))
                            .collect();
                        kept.dedup();
                        return Err(FieldError::new(
                            "spec.pipelineRef.generation",
                            format!(
                                "Pipeline `{}` has no generation {asked}; it keeps {} (the \
                                 current one is {now}; leave generation out to run it)",
                                r.name,
                                kept.join(", ")
                            ),
                        ));
                    }
                }
            }
        };
        // A run read back and submitted again carries both: the copy must be the version's
        // it names.
        if self.pipeline_spec != PipelineSpec::default() && self.pipeline_spec != p.spec {
            return Err(FieldError::new(
                "spec.pipelineSpec",
                format!(
                    "differs from the version of Pipeline `{}` that spec.pipelineRef names; \
                     give one of them",
                    r.name
                ),
            ));
        }
        r.generation = p.metadata.generation;
        self.pipeline_spec = p.spec.clone();
        Ok(())
    }

    /// Fills each fan-out over a parameter (`withParam`) with the run's value of that
    /// parameter (else its default), where it is a list and `withItems` is empty; what
    /// cannot be filled is left for validation to name.
    pub fn fill_param_items(&mut self) {
        let spec = &mut self.pipeline_spec;
        for step in &mut spec.steps {
            let Some(name) = &step.with_param else {
                continue;
            };
            if !step.with_items.is_empty() || Reference::parse(name).is_ok() {
                continue;
            }
            let value = self.params.get(name).or_else(|| {
                spec.parameters
                    .iter()
                    .find(|p| &p.name == name)
                    .and_then(|p| p.default.as_ref())
            });
            if let Some(serde_json::Value::Array(items)) = value {
                step.with_items = items.clone();
            }
        }
    }
}

impl Kind for PipelineRunSpec {
    const KIND: &'static str = "PipelineRun";
    const PLURAL: &'static str = "pipelineruns";
    const NAMESPACED: bool = true;
}

/// A DAG of steps and the parameters they read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<ParameterSpec>,
    pub steps: Vec<StepSpec>,
    /// Steps of one run in flight (created and not finished) at most (default: no bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// The exit handler: a step that runs once every other step has ended (or the run has
    /// failed and nothing else runs), whatever the outcome, with `CORRAL_RUN_PHASE` set to
    /// it (`Succeeded` or `Failed`) and `CORRAL_RUN_STATUS` to the run's final status in
    /// Kubeflow's form ([`RUN_STATUS_ENV`]). Never cached; no step may read it. Its failure fails a
    /// run that had succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exit: Option<Box<StepSpec>>,
}

/// A typed parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParameterSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: ParameterType,
    /// The value when the run gives none; without one the run must give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParameterType {
    String,
    Int,
    Float,
    Bool,
    /// A list of values (of any of the types): what a fan-out step iterates over
    /// (`withParam`); a step reading it as an input gets it as JSON text.
    List,
}

impl ParameterType {
    pub fn as_str(self) -> &'static str {
        match self {
            ParameterType::String => "string",
            ParameterType::Int => "int",
            ParameterType::Float => "float",
            ParameterType::Bool => "bool",
            ParameterType::List => "list",
        }
    }

    /// Whether `v` is a value of this type (an int is a float too).
    pub fn admits(self, v: &serde_json::Value) -> bool {
        match self {
            ParameterType::String => v.is_string(),
            ParameterType::Int => v.is_i64() || v.is_u64(),
            ParameterType::Float => v.is_number(),
            ParameterType::Bool => v.is_boolean(),
            ParameterType::List => v.is_array(),
        }
    }
}

/// One step: a TrainingJob template (`job`) or a single-replica task (`task`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepSpec {
    pub name: String,
    /// Steps that must succeed before this one starts, besides those whose outputs it reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Inputs by name: `steps.<step>.outputs.<artifact>` (a path) or `params.<name>` (a
    /// value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    /// Artifacts this step writes, each a directory it is given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// Every condition must hold for the step to run; otherwise it is Skipped, and so is
    /// every step that needs it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<WhenCondition>,
    /// Times a failed step is run again before it fails the run (default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// Reuse the outputs of an earlier identical step (default: on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CachePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<TrainingJobSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskSpec>,
    /// Fan-out: the step runs once per item, as steps `<name>-0`, `<name>-1`, ..., each
    /// with `CORRAL_ITEM` (the item: a string as is, anything else as JSON text) and
    /// `CORRAL_ITEM_INDEX` in its environment. A step that needs this one waits for every
    /// iteration; a step that reads one of its outputs (`steps.<name>.outputs.<output>`)
    /// gets them all, collected in item order (as Kubeflow Pipelines' `dsl.Collected`): a
    /// JSON list of the iterations' paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with_items: Vec<serde_json::Value>,
    /// Fan-out over a parameter: the name of a `list` parameter, whose value in the run
    /// (or default) gives the items, as `withItems` would (filled at submit, so that the
    /// stored run says what it iterates over). Or over an earlier step's output,
    /// `steps.<step>.outputs.<output>`: a JSON list in its one file, read once that step
    /// has ended (recorded in the run's `status.fanOuts`), as Argo's `withParam` of a
    /// result. Not with `withItems`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_param: Option<String>,
    /// Iterations of this fan-out step in flight at most (default: the run's bound only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// Set on an iteration of a fan-out step by [`PipelineSpec::expanded`]: the fan-out it
    /// belongs to and that step's `parallelism`. Never written by users.
    #[serde(skip)]
    #[schemars(skip)]
    pub iteration_of: Option<(String, Option<u32>)>,
}

/// The environment variables an iteration of a fan-out step is given.
pub const ITEM_ENV: &str = "CORRAL_ITEM";
pub const ITEM_INDEX_ENV: &str = "CORRAL_ITEM_INDEX";

/// The name of a fan-out step's `index`-th iteration.
pub fn iteration_name(step: &str, index: usize) -> String {
    format!("{step}-{index}")
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CachePolicy {
    /// `false`: always run this step.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Replaces the computed key (steps sharing a key share results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

fn yes() -> bool {
    true
}

/// `value` (a reference, as in `inputs`) compared with a string (`equals`, `notEquals`) or,
/// read as a number, with a number (`greaterThan`, ...); exactly one comparison. A parameter
/// compares by its JSON text (`3`, `true`), an artifact by the trimmed content of its file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhenCondition {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_equals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub greater_than: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub greater_than_or_equal: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub less_than: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub less_than_or_equal: Option<f64>,
}

/// One comparison of a [`WhenCondition`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Comparison<'a> {
    Equals(&'a str),
    NotEquals(&'a str),
    GreaterThan(f64),
    GreaterThanOrEqual(f64),
    LessThan(f64),
    LessThanOrEqual(f64),
}

impl WhenCondition {
    /// The comparisons it asks for (valid: exactly one).
    pub fn comparisons(&self) -> Vec<Comparison<'_>> {
        let mut out = Vec::new();
        out.extend(self.equals.as_deref().map(Comparison::Equals));
        out.extend(self.not_equals.as_deref().map(Comparison::NotEquals));
        out.extend(self.greater_than.map(Comparison::GreaterThan));
        out.extend(
            self.greater_than_or_equal
                .map(Comparison::GreaterThanOrEqual),
        );
        out.extend(self.less_than.map(Comparison::LessThan));
        out.extend(self.less_than_or_equal.map(Comparison::LessThanOrEqual));
        out
    }
}

/// The field names of [`WhenCondition`]'s comparisons, for messages.
pub const COMPARISONS: &str =
    "`equals`, `notEquals`, `greaterThan`, `greaterThanOrEqual`, `lessThan` and `lessThanOrEqual`";

/// A single-replica task: what one replica of a generic job takes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonEnv>,
    #[serde(default, skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
}

/// What an input or a condition reads.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reference {
    Param(String),
    Artifact {
        step: String,
        output: String,
    },
    /// The text of an output's one file, as a value (an output parameter, Kubeflow's
    /// `taskOutputParameter`): `steps.<step>.outputs.<output>.value`.
    Value {
        step: String,
        output: String,
    },
}

impl Reference {
    /// `params.<name>`, `steps.<step>.outputs.<artifact>` or its `.value`.
    pub fn parse(s: &str) -> Result<Reference, String> {
        let parts: Vec<&str> = s.split('.').collect();
        match parts.as_slice() {
            ["params", p] if !p.is_empty() => Ok(Reference::Param(p.to_string())),
            ["steps", step, "outputs", out] if !step.is_empty() && !out.is_empty() => {
                Ok(Reference::Artifact {
                    step: step.to_string(),
                    output: out.to_string(),
                })
            }
            ["steps", step, "outputs", out, "value"] if !step.is_empty() && !out.is_empty() => {
                Ok(Reference::Value {
                    step: step.to_string(),
                    output: out.to_string(),
                })
            }
            _ => Err(format!(
                "`{s}` is not a reference; write `params.<name>`, \
                 `steps.<step>.outputs.<artifact>` (its path) or \
                 `steps.<step>.outputs.<artifact>.value` (the text of its one file)"
            )),
        }
    }

    /// The step this reference makes its reader depend on.
    pub fn step(&self) -> Option<&str> {
        match self {
            Reference::Artifact { step, .. } | Reference::Value { step, .. } => Some(step),
            Reference::Param(_) => None,
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Param(p) => write!(f, "params.{p}"),
            Reference::Artifact { step, output } => write!(f, "steps.{step}.outputs.{output}"),
            Reference::Value { step, output } => {
                write!(f, "steps.{step}.outputs.{output}.value")
            }
        }
    }
}

impl StepSpec {
    /// Every step this one needs: `dependsOn`, and the steps its inputs and conditions
    /// read. Sorted, without repeats. References that do not parse are left out
    /// (validation reports them).
    pub fn needs(&self) -> Vec<String> {
        let mut out: Vec<String> = self.depends_on.clone();
        let refs = self
            .inputs
            .values()
            .chain(self.when.iter().map(|w| &w.value))
            .chain(self.with_param.iter());
        for r in refs {
            if let Some(step) = Reference::parse(r).ok().as_ref().and_then(Reference::step) {
                out.push(step.to_string());
            }
        }
        out.sort();
        out.dedup();
        out
    }

    pub fn cache_enabled(&self) -> bool {
        self.cache.as_ref().is_none_or(|c| c.enabled)
    }

    /// Sets `name=value` in the environment of every replica the step runs.
    fn add_env(&mut self, name: &str, value: &str) {
        let var = EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            value_from: None,
        };
        if let Some(job) = self.job.as_mut() {
            for r in job.replicas.values_mut() {
                r.template.env.retain(|e| e.name != name);
                r.template.env.push(var.clone());
            }
        }
        if self.job.is_none() {
            let task = self.task.get_or_insert_with(TaskSpec::default);
            task.env.retain(|e| e.name != name);
            task.env.push(var);
        }
    }
}

/// Characters the server appends to `metadata.generateName`, as Kubernetes does.
pub const GENERATED_SUFFIX_LEN: usize = 5;

/// The variable the exit handler's processes read the run's outcome from.
pub const RUN_PHASE_ENV: &str = "CORRAL_RUN_PHASE";

/// The variable the exit handler's processes read the run's final status from, as Kubeflow
/// Pipelines hands a `dsl.PipelineTaskFinalStatus` to an exit task: a JSON object with
/// `state` (`SUCCEEDED` or `FAILED`), `pipelineJobResourceName` (the run),
/// `pipelineTaskName` (the exit step) and `error` (`code` 0 or 1 and `message`, why the run
/// failed).
pub const RUN_STATUS_ENV: &str = "CORRAL_RUN_STATUS";

/// The name of a step's job: `<run>-<step>`.
pub fn step_job_name(run: &str, step: &str) -> String {
    format!("{run}-{step}")
}

/// The TrainingJob a step runs as, without its artifacts' environment (which the shell
/// adds: where they are is its choice): named `<run>-<step>`, labelled with the run and
/// the step; `retries` become the job's `backoffLimit`, a failed replica restarting the
/// job (`OnFailure`) until it is spent.
pub fn step_job(run: &ObjectMeta, step: &StepSpec) -> TrainingJob {
    let mut spec = match (&step.job, &step.task) {
        (Some(job), _) => job.clone(),
        (None, Some(task)) => task_job(task),
        (None, None) => task_job(&TaskSpec::default()),
    };
    if step.retries > 0 || spec.run_policy.backoff_limit.is_none() {
        spec.run_policy.backoff_limit = Some(step.retries);
    }
    if step.retries > 0 {
        for r in spec.replicas.values_mut() {
            if matches!(r.restart_policy, None | Some(RestartPolicy::Never)) {
                r.restart_policy = Some(RestartPolicy::OnFailure);
            }
        }
    }
    let mut job = TrainingJob::new(&step_job_name(&run.name, &step.name), spec);
    job.metadata.namespace = run.namespace.clone();
    job.metadata
        .labels
        .insert(RUN_LABEL.to_string(), run.name.clone());
    job.metadata
        .labels
        .insert(STEP_LABEL.to_string(), step.name.clone());
    job
}

fn task_job(task: &TaskSpec) -> TrainingJobSpec {
    let replica = ReplicaSpec {
        count: 1,
        resources: task.resources.clone(),
        template: ReplicaTemplate {
            image: task.image.clone(),
            command: task.command.clone(),
            args: task.args.clone(),
            env: task.env.clone(),
            working_dir: task.working_dir.clone(),
            pod_template: None,
            python: task.python.clone(),
        },
        restart_policy: Some(RestartPolicy::Never),
    };
    TrainingJobSpec {
        framework: Framework::Generic,
        replicas: BTreeMap::from([(Role::Worker, Box::new(replica))]),
        run_policy: Default::default(),
        success_policy: None,
        queue: task.queue.clone(),
        priority_class: task.priority_class.clone(),
        elastic: None,
        nproc_per_node: None,
        mpi: None,
        port: None,
    }
}

/// What Corral has recorded of a run: its phase and each step's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PipelineRunStatus {
    #[serde(default)]
    pub phase: RunPhase,
    /// Why it ended (the failed step and its reason), or what it waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, StepStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// The items of each fan-out over an earlier step's output (`withParam:
    /// steps.<step>.outputs.<output>`), by fan-out step, read once that step ended.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fan_outs: BTreeMap<String, Vec<serde_json::Value>>,
}

impl PipelineRun {
    /// The pipeline as this run runs it: each fan-out over an earlier step's output given
    /// the items its status recorded, then [`PipelineSpec::expanded`]. A fan-out whose items
    /// are not known yet stays one step (its iterations do not exist yet).
    pub fn expanded_spec(&self) -> PipelineSpec {
        let recorded = self.status.as_ref().map(|s| &s.fan_outs);
        let Some(recorded) = recorded.filter(|r| !r.is_empty()) else {
            return self.spec.pipeline_spec.expanded();
        };
        let mut spec = self.spec.pipeline_spec.clone();
        for step in &mut spec.steps {
            if let Some(items) = recorded.get(&step.name) {
                step.with_items = items.clone();
            }
        }
        spec.expanded()
    }
}

impl StepSpec {
    /// A fan-out over an earlier step's output: that step and output.
    pub fn fan_out_source(&self) -> Option<(String, String)> {
        match Reference::parse(self.with_param.as_deref()?) {
            Ok(Reference::Artifact { step, output }) => Some((step, output)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RunPhase {
    #[default]
    Running,
    Succeeded,
    Failed,
}

impl RunPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Running => "Running",
            RunPhase::Succeeded => "Succeeded",
            RunPhase::Failed => "Failed",
        }
    }

    pub fn is_finished(self) -> bool {
        self != RunPhase::Running
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    #[serde(default)]
    pub phase: StepPhase,
    /// The step's TrainingJob, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// What identifies its result (see the core's `pipeline::cache_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// A cache hit: the run and step (`<run>/<step>`) whose outputs it reuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Its artifacts once it succeeded (or hit the cache).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, ArtifactRecord>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StepPhase {
    /// Waiting for the steps it needs, or for room under `parallelism`.
    #[default]
    Pending,
    /// Its job exists and has not finished.
    Running,
    Succeeded,
    Failed,
    /// A condition did not hold, or a step it needs was skipped.
    Skipped,
    /// Not run: an earlier identical step's outputs are reused.
    Cached,
}

impl StepPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            StepPhase::Pending => "Pending",
            StepPhase::Running => "Running",
            StepPhase::Succeeded => "Succeeded",
            StepPhase::Failed => "Failed",
            StepPhase::Skipped => "Skipped",
            StepPhase::Cached => "Cached",
        }
    }

    /// Its outputs can be read.
    pub fn has_outputs(self) -> bool {
        matches!(self, StepPhase::Succeeded | StepPhase::Cached)
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, StepPhase::Pending | StepPhase::Running)
    }
}

/// One artifact: where it is and the SHA-256 of its content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRecord {
    pub path: String,
    pub sha256: String,
}

impl PipelineSpec {
    /// Steps as they run: a fan-out step counts once per item.
    pub fn step_count(&self) -> usize {
        self.steps.iter().map(|s| s.with_items.len().max(1)).sum()
    }

    /// The pipeline as it runs: each fan-out step (`withItems`) replaced by its iterations
    /// (see [`StepSpec::with_items`]), and a step that needed it needing every iteration.
    /// A pipeline without fan-out is returned as it is.
    pub fn expanded(&self) -> PipelineSpec {
        let fan_outs: BTreeMap<&str, usize> = self
            .steps
            .iter()
            .filter(|s| !s.with_items.is_empty())
            .map(|s| (s.name.as_str(), s.with_items.len()))
            .collect();
        if fan_outs.is_empty() {
            return self.clone();
        }
        let widen = |names: &[String]| -> Vec<String> {
            names
                .iter()
                .flat_map(|n| match fan_outs.get(n.as_str()) {
                    Some(&len) => (0..len).map(|i| iteration_name(n, i)).collect(),
                    None => vec![n.clone()],
                })
                .collect()
        };
        // A step reading a fan-out's outputs (collected, one per item) needs every iteration.
        let collecting = |step: &StepSpec| -> Vec<String> {
            let read: Vec<String> = step
                .inputs
                .values()
                .filter_map(|r| match Reference::parse(r) {
                    Ok(Reference::Artifact { step, .. })
                        if fan_outs.contains_key(step.as_str()) =>
                    {
                        Some(step)
                    }
                    _ => None,
                })
                .collect();
            let mut needs = widen(&step.depends_on);
            needs.extend(widen(&read));
            needs.sort();
            needs.dedup();
            needs
        };
        let mut steps = Vec::new();
        for step in &self.steps {
            let mut step = step.clone();
            step.depends_on = collecting(&step);
            if step.with_items.is_empty() {
                steps.push(step);
                continue;
            }
            let items = std::mem::take(&mut step.with_items);
            for (i, item) in items.iter().enumerate() {
                let mut one = step.clone();
                one.name = iteration_name(&step.name, i);
                one.iteration_of = Some((step.name.clone(), step.parallelism));
                one.parallelism = None;
                // An iteration of a fan-out over a step's output comes after that step.
                if let Some((source, _)) = step.fan_out_source() {
                    one.depends_on.push(source);
                }
                one.with_param = None;
                let text = match item {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                one.add_env(ITEM_ENV, &text);
                one.add_env(ITEM_INDEX_ENV, &i.to_string());
                steps.push(one);
            }
        }
        let mut on_exit = self.on_exit.clone();
        if let Some(exit) = on_exit.as_deref_mut() {
            exit.depends_on = collecting(exit);
        }
        PipelineSpec {
            parameters: self.parameters.clone(),
            steps,
            parallelism: self.parallelism,
            on_exit,
        }
    }

    /// The iterations of fan-out step `name` in this (expanded) pipeline, in item order.
    pub fn iterations_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a StepSpec> + 'a {
        self.steps
            .iter()
            .filter(move |s| s.iteration_of.as_ref().is_some_and(|(f, _)| f == name))
    }

    /// The steps' indices in an order where every step comes after those it needs (ties by
    /// declaration order); `None` when they form a cycle (validation refuses those).
    pub fn topological_order(&self) -> Option<Vec<usize>> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let index: BTreeMap<&str, usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        // Kahn's algorithm taking the earliest declared ready step first (petgraph's
        // toposort orders ties as its search meets them, not as they were written).
        let mut needed_by: Vec<Vec<usize>> = vec![Vec::new(); self.steps.len()];
        let mut waiting: Vec<usize> = vec![0; self.steps.len()];
        for (i, step) in self.steps.iter().enumerate() {
            for need in step.needs() {
                if let Some(&j) = index.get(need.as_str()) {
                    needed_by[j].push(i);
                    waiting[i] += 1;
                }
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> = (0..self.steps.len())
            .filter(|&i| waiting[i] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(self.steps.len());
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &j in &needed_by[i] {
                waiting[j] -= 1;
                if waiting[j] == 0 {
                    ready.push(Reverse(j));
                }
            }
        }
        (order.len() == self.steps.len()).then_some(order)
    }
}
