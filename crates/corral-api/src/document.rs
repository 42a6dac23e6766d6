//! From text to typed, validated documents. YAML (several documents, `---`) or JSON, a
//! `kind: List` of items, Corral kinds and Kubeflow kinds alike. Every problem is reported with
//! the document it is in and the field path; unknown fields are all reported at once, each with
//! the closest valid name.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::crd::{fields_at, structural_schema};
use crate::job_priority_class::{
    JobPriorityClass, JobPriorityClassSpec, LEGACY_KIND, LEGACY_WARNING,
};
use crate::kserve;
use crate::kubeflow;
use crate::meta::{API_VERSION, Kind};
use crate::node_pool::{NodePool, NodePoolSpec};
use crate::pipeline::{Pipeline, PipelineRun, PipelineRunSpec, PipelineSpec};
use crate::queue::{Queue, QueueSpec};
use crate::served_model::{ServedModel, ServedModelSpec};
use crate::suggest::did_you_mean;
use crate::training_job::{TrainingJob, TrainingJobSpec};
use crate::validate::{
    FieldError, ValidationContext, ValidationErrors, validate_node_pool, validate_pipeline,
    validate_pipeline_run, validate_priority_class, validate_queue, validate_served_model,
    validate_training_job,
};

/// Input larger than this is refused before parsing (a job spec is a few KiB).
pub const MAX_INPUT_BYTES: usize = 4 << 20;

/// One Corral object.
#[derive(Clone, Debug, PartialEq)]
pub enum Document {
    TrainingJob(Box<TrainingJob>),
    ServedModel(Box<ServedModel>),
    Queue(Queue),
    NodePool(NodePool),
    JobPriorityClass(JobPriorityClass),
    PipelineRun(Box<PipelineRun>),
    Pipeline(Box<Pipeline>),
}

impl Document {
    pub fn kind(&self) -> &'static str {
        match self {
            Document::TrainingJob(_) => TrainingJobSpec::KIND,
            Document::ServedModel(_) => ServedModelSpec::KIND,
            Document::Queue(_) => QueueSpec::KIND,
            Document::NodePool(_) => NodePoolSpec::KIND,
            Document::JobPriorityClass(_) => JobPriorityClassSpec::KIND,
            Document::PipelineRun(_) => PipelineRunSpec::KIND,
            Document::Pipeline(_) => PipelineSpec::KIND,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Document::TrainingJob(j) => &j.metadata.name,
            Document::ServedModel(m) => &m.metadata.name,
            Document::Queue(q) => &q.metadata.name,
            Document::NodePool(p) => &p.metadata.name,
            Document::JobPriorityClass(p) => &p.metadata.name,
            Document::PipelineRun(r) => &r.metadata.name,
            Document::Pipeline(p) => &p.metadata.name,
        }
    }

    /// The document as a JSON value (for printing as YAML or JSON).
    pub fn to_value(&self) -> Value {
        let v = match self {
            Document::TrainingJob(j) => serde_json::to_value(j),
            Document::ServedModel(m) => serde_json::to_value(m),
            Document::Queue(q) => serde_json::to_value(q),
            Document::NodePool(p) => serde_json::to_value(p),
            Document::JobPriorityClass(p) => serde_json::to_value(p),
            Document::PipelineRun(r) => serde_json::to_value(r),
            Document::Pipeline(p) => serde_json::to_value(p),
        };
        // Serializing plain data structs to a Value cannot fail (no non-string map keys).
        v.unwrap_or(Value::Null)
    }
}

/// A document that parsed, and what it was converted from (a Kubeflow kind), if anything.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// 1-based position in the input.
    pub index: usize,
    pub document: Document,
    pub converted_from: Option<String>,
    /// What the document asks that Corral accepts but does not honour (a Kubeflow field
    /// Kubernetes accepts and Corral has no use for): shown as warnings, never refused.
    pub warnings: Vec<FieldError>,
    /// Problems found while decoding that did not stop it (unknown fields, unknown roles);
    /// reported together with the semantic errors.
    decode_errors: Vec<FieldError>,
}

/// A document that did not parse or validate.
#[derive(Clone, Debug, PartialEq)]
pub struct DocumentError {
    /// 1-based position in the input (0: the input as a whole).
    pub index: usize,
    /// `TrainingJob mnist`, when known.
    pub what: Option<String>,
    pub errors: ValidationErrors,
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        let plural = if n == 1 { "error" } else { "errors" };
        match (&self.what, self.index) {
            (Some(w), i) => write!(f, "document {i} ({w}): {n} {plural}")?,
            (None, 0) => write!(f, "{n} {plural}")?,
            (None, i) => write!(f, "document {i}: {n} {plural}")?,
        }
        for e in self.errors.iter() {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// The documents of one input, each parsed or with its errors.
pub type ParseResult = Vec<Result<Parsed, DocumentError>>;

fn input_error(message: String) -> ParseResult {
    vec![Err(DocumentError {
        index: 0,
        what: None,
        errors: ValidationErrors(vec![FieldError::new("", message)]),
    })]
}

/// Splits text into raw documents (JSON or YAML), flattening `kind: List`.
pub fn raw_documents(text: &str) -> Result<Vec<Value>, String> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(format!(
            "input is {} bytes; the limit is {} MiB",
            text.len(),
            MAX_INPUT_BYTES >> 20
        ));
    }
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') {
        let v: Value = serde_json::from_str(trimmed).map_err(|e| format!("malformed JSON: {e}"))?;
        vec![v]
    } else {
        // YAML 1.2 booleans only: `y`, `no`, `on` stay strings (env values, args), as users mean.
        let options = serde_saphyr::options! { strict_booleans: true };
        serde_saphyr::from_multiple_with_options::<Value>(trimmed, options)
            .map_err(|e| format!("malformed YAML: {e}"))?
    };
    let mut out = Vec::new();
    for d in docs {
        match d {
            Value::Null => {}
            Value::Object(ref o) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                match o.get("items") {
                    Some(Value::Array(items)) => out.extend(items.iter().cloned()),
                    _ => return Err("a `kind: List` needs an `items` list".into()),
                }
            }
            other => out.push(other),
        }
    }
    for d in &mut out {
        drop_nulls(d);
    }
    Ok(out)
}

/// Removes every mapping entry whose value is an explicit null, at any depth: Kubernetes
/// treats `field: null` as an absent field (kubectl and the Kubeflow examples write such
/// fields, e.g. `creationTimestamp: null`), so Corral reads the document as it would.
/// Nulls inside lists are kept (and reported by the typed decoding).
pub fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, x| !x.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Parses, converts (Kubeflow) and validates every document in `text`. Cross-document
/// references (queues to node pools, jobs to queues and priority classes) are checked
/// against the documents of this input together with `ctx`.
pub fn parse_documents(text: &str, ctx: &ValidationContext) -> ParseResult {
    let raws = match raw_documents(text) {
        Ok(r) => r,
        Err(e) => return input_error(e),
    };
    if raws.is_empty() {
        return input_error("no documents: the input is empty".into());
    }
    let decoded: Vec<Result<Parsed, DocumentError>> = raws
        .into_iter()
        .enumerate()
        .map(|(i, raw)| decode(i + 1, raw))
        .collect();
    // Context for cross-references: what this input defines, plus what the caller knows.
    let mut full = ctx.clone();
    // A document of this input replaces one of the same name the caller already knew.
    fn upsert<T>(list: &mut Vec<crate::meta::Object<T>>, item: &crate::meta::Object<T>)
    where
        T: Clone,
    {
        list.retain(|x| x.metadata.name != item.metadata.name);
        list.push(item.clone());
    }
    for p in decoded.iter().flatten() {
        match &p.document {
            Document::NodePool(np) => upsert(&mut full.node_pools, np),
            Document::Queue(q) => upsert(&mut full.queues, q),
            Document::JobPriorityClass(pc) => upsert(&mut full.priority_classes, pc),
            // A new version: no generation until stored; the kept ones stay nameable.
            Document::Pipeline(p) => {
                let mut p = (**p).clone();
                p.metadata.generation = None;
                full.pipelines.retain(|x| {
                    x.metadata.name != p.metadata.name || x.metadata.generation.is_some()
                });
                full.pipelines.push(p);
            }
            Document::TrainingJob(_) | Document::PipelineRun(_) | Document::ServedModel(_) => {}
        }
    }
    decoded
        .into_iter()
        .map(|r| {
            let mut p = r?;
            // A run of a stored pipeline runs a copy of it; a fan-out over a parameter takes
            // the run's value as its items.
            if let Document::PipelineRun(run) = &mut p.document {
                if let Err(e) = run.spec.resolve(&full.pipelines) {
                    return Err(DocumentError {
                        index: p.index,
                        what: Some(describe(&p)),
                        errors: ValidationErrors(vec![e]),
                    });
                }
                run.spec.fill_param_items();
            }
            let checked = match &p.document {
                Document::TrainingJob(j) => validate_training_job(j, &full),
                Document::ServedModel(m) => validate_served_model(m, &full),
                Document::Queue(q) => validate_queue(q, &full),
                Document::NodePool(np) => validate_node_pool(np),
                Document::JobPriorityClass(pc) => validate_priority_class(pc),
                Document::PipelineRun(r) => validate_pipeline_run(r, &full),
                Document::Pipeline(pl) => validate_pipeline(pl, &full),
            };
            let mut errors = ValidationErrors(p.decode_errors.clone());
            if let Err(semantic) = checked {
                errors.0.extend(semantic.0);
            }
            if errors.is_empty() {
                Ok(p)
            } else {
                Err(DocumentError {
                    index: p.index,
                    what: Some(describe(&p)),
                    errors,
                })
            }
        })
        .chain(duplicate_default_priority(&full))
        .collect()
}

fn describe(p: &Parsed) -> String {
    let name = match &p.document {
        Document::PipelineRun(r) if r.metadata.name.is_empty() => format!(
            "{}<generated>",
            r.metadata.generate_name.as_deref().unwrap_or_default()
        ),
        d => d.name().to_string(),
    };
    match &p.converted_from {
        Some(k) => format!("{k} {name} as {}", p.document.kind()),
        None => format!("{} {name}", p.document.kind()),
    }
}

fn duplicate_default_priority(ctx: &ValidationContext) -> Option<Result<Parsed, DocumentError>> {
    let defaults: Vec<&str> = ctx
        .priority_classes
        .iter()
        .filter(|p| p.spec.global_default)
        .map(|p| p.metadata.name.as_str())
        .collect();
    (defaults.len() > 1).then(|| {
        Err(DocumentError {
            index: 0,
            what: None,
            errors: ValidationErrors(vec![FieldError::new(
                "spec.globalDefault",
                format!(
                    "only one JobPriorityClass may be the default; {} all set it",
                    defaults.join(", ")
                ),
            )]),
        })
    })
}

const CORRAL_KINDS: [&str; 7] = [
    "TrainingJob",
    "ServedModel",
    "Queue",
    "NodePool",
    "JobPriorityClass",
    "PipelineRun",
    "Pipeline",
];

/// One raw document to a typed one (no semantic validation yet).
pub fn decode(index: usize, raw: Value) -> Result<Parsed, DocumentError> {
    let fail = |what: Option<String>, errors: Vec<FieldError>| DocumentError {
        index,
        what,
        errors: ValidationErrors(errors),
    };
    let Value::Object(obj) = &raw else {
        return Err(fail(
            None,
            vec![FieldError::new(
                "",
                "a document must be a mapping with apiVersion, kind, metadata and spec",
            )],
        ));
    };
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind_owned = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = kind_owned.as_str();
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let what = Some(format!("{kind} {name}").trim().to_string()).filter(|s| !s.is_empty());
    // Kubeflow Pipelines' compiled YAML has no kind: it is known by its sections.
    if crate::kfp::is_pipeline_spec(obj) {
        let run = crate::kfp::convert(&raw)
            .map_err(|errors| fail(Some(crate::kfp::WHAT.to_string()), errors))?;
        return Ok(Parsed {
            index,
            document: Document::PipelineRun(Box::new(run)),
            converted_from: Some(crate::kfp::WHAT.to_string()),
            warnings: Vec::new(),
            decode_errors: Vec::new(),
        });
    }
    if kind.is_empty() {
        return Err(fail(
            what,
            vec![FieldError::new(
                "kind",
                format!(
                    "is required: one of {}, or a Kubeflow kind ({})",
                    CORRAL_KINDS.join(", "),
                    kubeflow::KINDS.join(", ")
                ),
            )],
        ));
    }
    if kubeflow::KINDS.contains(&kind) || api_version.starts_with("kubeflow.org/") {
        let (job, warnings) =
            kubeflow::convert_with_warnings(&raw).map_err(|errors| fail(what.clone(), errors.0))?;
        return Ok(Parsed {
            index,
            document: Document::TrainingJob(Box::new(job)),
            converted_from: Some(kind.to_string()),
            warnings,
            decode_errors: Vec::new(),
        });
    }
    if kind == kserve::KIND || api_version.starts_with(kserve::GROUP) {
        let (model, warnings) =
            kserve::convert_with_warnings(&raw).map_err(|errors| fail(what.clone(), errors.0))?;
        return Ok(Parsed {
            index,
            document: Document::ServedModel(Box::new(model)),
            converted_from: Some(kind.to_string()),
            warnings,
            decode_errors: Vec::new(),
        });
    }
    let mut raw = raw;
    let mut warnings = Vec::new();
    let (document, decode_errors) = match kind {
        "TrainingJob" => {
            let role_errors = take_unknown_roles(&mut raw);
            typed::<TrainingJob, TrainingJobSpec>(raw, role_errors)
                .map(|(j, e)| (Document::TrainingJob(Box::new(j)), e))
        }
        "ServedModel" => typed::<ServedModel, ServedModelSpec>(raw, Vec::new())
            .map(|(m, e)| (Document::ServedModel(Box::new(m)), e)),
        "Queue" => typed::<Queue, QueueSpec>(raw, Vec::new()).map(|(q, e)| (Document::Queue(q), e)),
        "PipelineRun" => typed::<PipelineRun, PipelineRunSpec>(raw, Vec::new())
            .map(|(r, e)| (Document::PipelineRun(Box::new(r)), e)),
        "Pipeline" => typed::<Pipeline, PipelineSpec>(raw, Vec::new())
            .map(|(p, e)| (Document::Pipeline(Box::new(p)), e)),
        "NodePool" => typed::<NodePool, NodePoolSpec>(raw, Vec::new())
            .map(|(p, e)| (Document::NodePool(p), e)),
        "JobPriorityClass" => typed::<JobPriorityClass, JobPriorityClassSpec>(raw, Vec::new())
            .map(|(p, e)| (Document::JobPriorityClass(p), e)),
        LEGACY_KIND if api_version == API_VERSION => {
            warnings.push(FieldError::new("kind", LEGACY_WARNING));
            typed::<JobPriorityClass, JobPriorityClassSpec>(raw, Vec::new()).map(|(mut p, e)| {
                p.kind = JobPriorityClassSpec::KIND.to_string();
                (Document::JobPriorityClass(p), e)
            })
        }
        other => {
            let all: Vec<&str> = CORRAL_KINDS
                .iter()
                .chain(kubeflow::KINDS.iter())
                .copied()
                .collect();
            let hint = did_you_mean(other, all.iter().copied())
                .map(|m| format!("did you mean `{m}`? "))
                .unwrap_or_default();
            Err(vec![FieldError::new(
                "kind",
                format!(
                    "`{other}` is not a kind Corral knows; {hint}kinds: {}",
                    all.join(", ")
                ),
            )])
        }
    }
    .map_err(|e| fail(what.clone(), e))?;
    Ok(Parsed {
        index,
        document,
        converted_from: None,
        warnings,
        decode_errors,
    })
}

/// Removes `spec.replicas` entries whose key is not a role, reporting each with the roles of
/// the job's framework, so that one misspelled role does not hide every other error.
fn take_unknown_roles(raw: &mut Value) -> Vec<FieldError> {
    let framework: Option<crate::Framework> = raw
        .pointer("/spec/framework")
        .and_then(|f| serde_json::from_value(f.clone()).ok());
    let Some(Value::Object(replicas)) = raw.pointer_mut("/spec/replicas") else {
        return Vec::new();
    };
    let valid: Vec<&str> = match framework {
        Some(fw) => fw.roles().iter().map(|r| r.as_str()).collect(),
        None => crate::Role::ALL.iter().map(|r| r.as_str()).collect(),
    };
    let unknown: Vec<String> = replicas
        .keys()
        .filter(|k| k.parse::<crate::Role>().is_err())
        .cloned()
        .collect();
    unknown
        .into_iter()
        .map(|k| {
            replicas.remove(&k);
            let hint = did_you_mean(&k, valid.iter().copied())
                .map(|m| format!("did you mean `{m}`? "))
                .unwrap_or_default();
            let whose = framework
                .map(|f| format!("{f} jobs have"))
                .unwrap_or_else(|| "roles are".into());
            FieldError::new(
                format!("spec.replicas.{k}"),
                format!("`{k}` is not a role; {hint}{whose} {}", valid.join(", ")),
            )
        })
        .collect()
}

/// Decodes a Corral object: checks apiVersion, then deserializes reporting the first type
/// error and every unknown field, with the closest valid name for each.
fn typed<T: DeserializeOwned, Spec: Kind + schemars::JsonSchema>(
    raw: Value,
    mut errors: Vec<FieldError>,
) -> Result<(T, Vec<FieldError>), Vec<FieldError>> {
    match raw.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => errors.push(FieldError::new(
            "apiVersion",
            format!(
                "`{other}` is not served for {}; use `{API_VERSION}`",
                Spec::KIND
            ),
        )),
        None => errors.push(FieldError::new(
            "apiVersion",
            format!("is required: `{API_VERSION}`"),
        )),
    }
    let mut unknown: Vec<Vec<String>> = Vec::new();
    let result: Result<T, _> = {
        let mut record = |path: serde_ignored::Path| unknown.push(ignored_segments(&path));
        let de = serde_ignored::Deserializer::new(raw, &mut record);
        serde_path_to_error::deserialize(de)
    };
    // The schema is only needed to suggest names for unknown fields; building it costs
    // more than the whole decode, so valid documents skip it.
    let schema = if unknown.is_empty() {
        Value::Null
    } else {
        document_schema::<Spec>()
    };
    for segs in unknown {
        let Some((field, parent)) = segs.split_last() else {
            continue;
        };
        let known = fields_at(&schema, parent);
        let hint = match did_you_mean(field, known.iter().copied()) {
            Some(m) => format!("; did you mean `{m}`?"),
            None if !known.is_empty() => format!("; valid fields here: {}", known.join(", ")),
            None => String::new(),
        };
        errors.push(FieldError::new(
            join_path(&segs),
            format!("unknown field{hint}"),
        ));
    }
    match result {
        Ok(v) => Ok((v, errors)),
        Err(e) => {
            let segs = error_segments(e.path());
            errors.push(FieldError::new(
                join_path(&segs),
                explain_serde(&e.into_inner().to_string()),
            ));
            Err(errors)
        }
    }
}

/// The schema of a whole object of this kind (apiVersion/kind/metadata/spec/status).
fn document_schema<Spec: Kind + schemars::JsonSchema>() -> Value {
    let meta = structural_schema::<crate::meta::ObjectMeta>();
    serde_json::json!({"properties": {
        "apiVersion": {}, "kind": {}, "metadata": meta,
        "spec": structural_schema::<Spec>(), "status": {},
    }})
}

fn ignored_segments(path: &serde_ignored::Path) -> Vec<String> {
    use serde_ignored::Path;
    let mut out = Vec::new();
    let mut p = path;
    loop {
        match p {
            Path::Root => break,
            Path::Seq { parent, index } => {
                out.push(format!("[{index}]"));
                p = parent;
            }
            Path::Map { parent, key } => {
                out.push(key.clone());
                p = parent;
            }
            Path::Some { parent }
            | Path::NewtypeStruct { parent }
            | Path::NewtypeVariant { parent } => p = parent,
        }
    }
    out.reverse();
    out
}

fn error_segments(path: &serde_path_to_error::Path) -> Vec<String> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(format!("[{index}]")),
            Segment::Map { key } => Some(key.clone()),
            Segment::Enum { variant } => Some(variant.clone()),
            Segment::Unknown => None,
        })
        .collect()
}

/// `spec.replicas.worker.template.env[0].name`
pub fn join_path(segs: &[String]) -> String {
    let mut s = String::new();
    for seg in segs {
        if !s.is_empty() && !seg.starts_with('[') {
            s.push('.');
        }
        s.push_str(seg);
    }
    s
}

/// Serde's messages, reworded where they are cryptic, with "did you mean" for enum values.
fn explain_serde(msg: &str) -> String {
    if let Some(rest) = msg.strip_prefix("unknown variant `")
        && let Some((value, expected)) = rest.split_once("`, expected ")
    {
        let options: Vec<&str> = expected
            .trim_start_matches("one of ")
            .split(", ")
            .map(|s| s.trim_matches('`'))
            .collect();
        let hint = did_you_mean(value, options.iter().copied())
            .map(|m| format!("did you mean `{m}`? "))
            .unwrap_or_default();
        return format!(
            "`{value}` is not valid; {hint}valid values: {}",
            options.join(", ")
        );
    }
    if let Some(field) = msg.strip_prefix("missing field `") {
        return format!("`{}` is required here", field.trim_end_matches('`'));
    }
    if (msg.starts_with("invalid type: integer")
        || msg.starts_with("invalid type: floating point")
        || msg.starts_with("invalid type: boolean"))
        && msg.ends_with("expected a string")
    {
        return format!("{msg}; quote it (\"...\") to keep it as text");
    }
    if msg.starts_with("invalid value: integer `-") {
        return format!("{msg}: must be zero or more");
    }
    msg.to_string()
}
