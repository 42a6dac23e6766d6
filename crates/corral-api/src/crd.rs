//! CustomResourceDefinitions generated from the Rust types, with structural OpenAPI v3
//! schemas as apiextensions.k8s.io/v1 requires. The same schemas name the valid fields when
//! a user misspells one.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::NoStatus;
use crate::job_priority_class::{JobPriorityClassSpec, LEGACY_KIND, LEGACY_PLURAL, LEGACY_WARNING};
use crate::meta::{API_GROUP, Kind};
use crate::node_pool::NodePoolSpec;
use crate::pipeline::{PipelineRunSpec, PipelineRunStatus, PipelineSpec};
use crate::queue::QueueSpec;
use crate::served_model::{ServedModelSpec, ServedModelStatus};
use crate::training_job::{TrainingJobSpec, TrainingJobStatus};

/// The served and stored version.
pub const VERSION: &str = "v1alpha1";

/// Keywords that apiextensions.k8s.io/v1 JSONSchemaProps accepts and Corral's types use.
const KEPT_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "description",
    "properties",
    "additionalProperties",
    "items",
    "required",
    "enum",
    "nullable",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
];

/// Formats Kubernetes knows; others (schemars' uint32, ...) are dropped.
const KNOWN_FORMATS: &[&str] = &["int32", "int64", "float", "double", "date-time", "byte"];

/// The structural schema of a type: inlined, no `$ref`, only keywords Kubernetes accepts,
/// unit enums flattened to `enum`, maps keyed by an enum turned into named properties.
pub fn structural_schema<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.inline_subschemas = true;
    });
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    make_structural(&mut value);
    value
}

fn make_structural(v: &mut Value) {
    let Value::Object(obj) = v else {
        return;
    };
    // `Option<T>` of a non-object T: anyOf [T, null] becomes T with `nullable: true`.
    if let Some(Value::Array(branches)) = obj.get("anyOf") {
        let is_null = |b: &Value| {
            b.get("type") == Some(&json!("null"))
                || b.get("enum") == Some(&json!([null]))
                || b.get("const") == Some(&Value::Null)
        };
        if branches.len() == 2 && branches.iter().any(is_null) {
            let inner = branches.iter().find(|b| !is_null(b)).cloned();
            obj.remove("anyOf");
            if let Some(Value::Object(inner)) = inner {
                for (k, val) in inner {
                    obj.entry(k).or_insert(val);
                }
            }
            obj.insert("nullable".into(), json!(true));
        }
    }
    // `oneOf`/`anyOf` of single-value strings (documented unit enum variants): one `enum`.
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            // Undocumented variants come together as one branch of several values.
            let values: Option<Vec<Vec<Value>>> = branches
                .iter()
                .map(|b| {
                    b.get("const")
                        .map(|c| vec![c.clone()])
                        .or_else(|| match b.get("enum") {
                            Some(Value::Array(e))
                                if !e.is_empty() && e.iter().all(Value::is_string) =>
                            {
                                Some(e.clone())
                            }
                            _ => None,
                        })
                })
                .collect();
            let values: Option<Vec<Value>> = values.map(|v| v.into_iter().flatten().collect());
            if let Some(values) = values {
                obj.remove(key);
                obj.insert("type".into(), json!("string"));
                obj.insert("enum".into(), Value::Array(values));
            }
        }
    }
    if let Some(c) = obj.remove("const") {
        obj.insert("enum".into(), json!([c]));
    }
    // Maps keyed by an enum (roles): name each key as a property.
    if let Some(names) = obj.remove("propertyNames")
        && let (Some(Value::Array(keys)), Some(item)) =
            (names.get("enum"), obj.get("additionalProperties").cloned())
    {
        let props: Map<String, Value> = keys
            .iter()
            .filter_map(|k| k.as_str().map(|k| (k.to_string(), item.clone())))
            .collect();
        obj.remove("additionalProperties");
        obj.insert("properties".into(), Value::Object(props));
    }
    // Named properties already say what is allowed; Kubernetes forbids both together.
    if obj.contains_key("properties") && obj.get("additionalProperties") == Some(&json!(false)) {
        obj.remove("additionalProperties");
    }
    if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        obj.remove("additionalProperties");
    }
    if obj.get("additionalProperties") == Some(&json!(true)) {
        obj.remove("additionalProperties");
        obj.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    if obj.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        // Kubernetes requires exactly this shape for int-or-string.
        obj.remove("type");
        obj.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if let Some(Value::String(f)) = obj.get("format")
        && !KNOWN_FORMATS.contains(&f.as_str())
    {
        obj.remove("format");
    }
    match obj.get("default") {
        Some(Value::Null) => {
            obj.remove("default");
        }
        Some(Value::Array(a)) if a.is_empty() => {
            obj.remove("default");
        }
        Some(Value::Object(o)) if o.is_empty() => {
            obj.remove("default");
        }
        _ => {}
    }
    obj.retain(|k, _| KEPT_KEYWORDS.contains(&k.as_str()));
    // Any JSON value (`serde_json::Value`, whose schema says nothing of its type): kept as
    // written, which a structural schema must say.
    if !obj.contains_key("type")
        && !obj.contains_key("anyOf")
        && !obj.contains_key("x-kubernetes-int-or-string")
    {
        obj.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    for key in ["properties"] {
        if let Some(Value::Object(props)) = obj.get_mut(key) {
            for p in props.values_mut() {
                if *p == Value::Bool(true) {
                    *p = json!({});
                }
                make_structural(p);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        // Any JSON value (`serde_json::Value`): schemars says `true` or `{}`.
        let any = match obj.get(key) {
            Some(Value::Bool(true)) => true,
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        };
        if any {
            obj.insert(
                key.into(),
                json!({"x-kubernetes-preserve-unknown-fields": true}),
            );
        } else if let Some(sub @ Value::Object(_)) = obj.get_mut(key) {
            make_structural(sub);
        }
    }
    if let Some(Value::Array(branches)) = obj.get_mut("anyOf") {
        for b in branches {
            make_structural(b);
        }
    }
}

/// The CRD of one kind.
pub fn crd<Spec: Kind + JsonSchema, Status: JsonSchema>(
    short_names: &[&str],
    printer_columns: Value,
) -> Value {
    let kind = Spec::KIND;
    let singular = kind.to_ascii_lowercase();
    let mut properties = Map::new();
    properties.insert("apiVersion".into(), json!({"type": "string"}));
    properties.insert("kind".into(), json!({"type": "string"}));
    properties.insert("metadata".into(), json!({"type": "object"}));
    properties.insert("spec".into(), structural_schema::<Spec>());
    let has_status = std::any::type_name::<Status>() != std::any::type_name::<NoStatus>();
    if has_status {
        properties.insert("status".into(), structural_schema::<Status>());
    }
    let mut version = json!({
        "name": VERSION,
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "description": format!("{kind} (corral.dev)"),
            "properties": properties,
            "required": ["spec"],
        }},
    });
    if has_status {
        version["subresources"] = json!({"status": {}});
    }
    if printer_columns.as_array().is_some_and(|c| !c.is_empty()) {
        version["additionalPrinterColumns"] = printer_columns;
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{API_GROUP}", Spec::PLURAL)},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": Spec::PLURAL,
                "singular": singular,
                "shortNames": short_names,
                "categories": ["corral"],
            },
            "scope": if Spec::NAMESPACED { "Namespaced" } else { "Cluster" },
            "versions": [version],
        },
    })
}

/// The CRDs of every Corral kind, in the order they should be applied.
pub fn all_crds() -> Vec<Value> {
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    let mut crds = vec![
        crd::<TrainingJobSpec, TrainingJobStatus>(
            &["tj"],
            json!([
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Framework", "type": "string", "jsonPath": ".spec.framework"},
                {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
                {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
                age.clone(),
            ]),
        ),
        crd::<QueueSpec, NoStatus>(
            &["cq"],
            json!([
                {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohort"},
                {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight"},
                age.clone(),
            ]),
        ),
        crd::<NodePoolSpec, NoStatus>(
            &["np"],
            json!([
                {"name": "GPU-Type", "type": "string", "jsonPath": ".spec.gpuType"},
                {"name": "GPUs/Node", "type": "integer", "jsonPath": ".spec.gpusPerNode"},
                age.clone(),
            ]),
        ),
        crd::<JobPriorityClassSpec, NoStatus>(
            &["jpc"],
            json!([
                {"name": "Value", "type": "integer", "jsonPath": ".spec.value"},
                age.clone(),
            ]),
        ),
    ];
    require_images(&mut crds[0]);
    let legacy = legacy_priority_class_crd(&crds[3]);
    crds.push(legacy);
    let runs = crd::<PipelineRunSpec, PipelineRunStatus>(
        &["plr"],
        json!([
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
            age.clone(),
        ]),
    );
    crds.push(runs);
    // Stored pipelines that runs name (`spec.pipelineRef`).
    crds.push(crd::<PipelineSpec, NoStatus>(&["pl"], json!([age.clone()])));
    let mut served = crd::<ServedModelSpec, ServedModelStatus>(
        &["sm"],
        json!([
            {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Latest", "type": "string", "jsonPath": ".status.latestRevision"},
            {"name": "URL", "type": "string", "jsonPath": ".status.url", "priority": 1},
            age,
        ]),
    );
    // As a TrainingJob's: a replica is a pod from an image.
    if let Some(Value::Object(t)) = served
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/template")
        && let Value::Array(list) = t.entry("required").or_insert_with(|| json!([]))
        && !list.iter().any(|v| v == "image")
    {
        list.push(json!("image"));
    }
    crds.push(served);
    crds
}

/// On Kubernetes every replica is a pod from a container image: the API server refuses a
/// TrainingJob whose template names none (`spec.replicas.worker.template.image: Required
/// value`), so it is never admitted. (The embedded cluster runs commands without images; its
/// validation does not ask for one.)
fn require_images(training_job_crd: &mut Value) {
    let Some(replicas) = training_job_crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/replicas")
    else {
        return;
    };
    let roles: Vec<&mut Value> = if replicas.get("properties").is_some() {
        replicas
            .get_mut("properties")
            .and_then(Value::as_object_mut)
            .map(|p| p.values_mut().collect())
            .unwrap_or_default()
    } else {
        replicas
            .get_mut("additionalProperties")
            .into_iter()
            .collect()
    };
    for role in roles {
        if let Some(t @ Value::Object(_)) = role.pointer_mut("/properties/template") {
            let required = t
                .as_object_mut()
                .map(|o| o.entry("required").or_insert_with(|| json!([])));
            if let Some(Value::Array(list)) = required
                && !list.iter().any(|v| v == "image")
            {
                list.push(json!("image"));
            }
        }
    }
}

/// The former kind's CRD (`priorityclasses.corral.dev`), served for one more release with the
/// same schema, marked deprecated so that kubectl prints the warning on every use.
fn legacy_priority_class_crd(current: &Value) -> Value {
    let mut legacy = current.clone();
    legacy["metadata"]["name"] = json!(format!("{LEGACY_PLURAL}.{API_GROUP}"));
    legacy["spec"]["names"] = json!({
        "kind": LEGACY_KIND,
        "listKind": format!("{LEGACY_KIND}List"),
        "plural": LEGACY_PLURAL,
        "singular": LEGACY_KIND.to_ascii_lowercase(),
        "shortNames": ["cpc"],
        "categories": ["corral"],
    });
    if let Some(v) = legacy["spec"]["versions"].get_mut(0) {
        v["deprecated"] = json!(true);
        v["deprecationWarning"] = json!(LEGACY_WARNING);
        v["schema"]["openAPIV3Schema"]["description"] = json!(format!(
            "{LEGACY_KIND} (corral.dev), deprecated: use JobPriorityClass"
        ));
    }
    legacy
}

/// The field names valid at `path` (dot-separated object keys; `[i]` for list items) of a
/// structural schema, for "did you mean" on unknown fields.
pub fn fields_at<'a>(schema: &'a Value, path: &[String]) -> Vec<&'a str> {
    let mut node = schema;
    for seg in path {
        let next = if seg.starts_with('[') {
            node.get("items")
        } else {
            node.get("properties")
                .and_then(|p| p.get(seg.as_str()))
                .or_else(|| node.get("additionalProperties"))
        };
        match next {
            Some(n) => node = n,
            None => return Vec::new(),
        }
    }
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}
