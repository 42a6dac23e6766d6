//! `corral crd` emits valid apiextensions.k8s.io/v1 CRDs: structural schemas that the API
//! server accepts, with every kind, version and subresource in place.

use corral_api::crd::all_crds;
use serde_json::Value;

/// The rules of a structural schema (Kubernetes' apiextensions validation): every node
/// specifies a type (unless int-or-string or preserve-unknown-fields), no $ref, only
/// JSONSchemaProps keywords, and value-validation branches carry no type/description/default.
fn check_structural(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    const ALLOWED: &[&str] = &[
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
    for k in obj.keys() {
        if !ALLOWED.contains(&k.as_str()) {
            problems.push(format!("{path}: keyword `{k}` is not allowed"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !obj.contains_key("type") && !int_or_string && !preserve {
        problems.push(format!("{path}: no type"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!(
            "{path}: properties and additionalProperties together"
        ));
    }
    if let Some(Value::Array(branches)) = obj.get("anyOf") {
        if !int_or_string {
            problems.push(format!("{path}: anyOf only for int-or-string"));
        }
        for b in branches {
            for k in ["description", "default", "nullable", "properties"] {
                if b.get(k).is_some() {
                    problems.push(format!("{path}: anyOf branch has `{k}`"));
                }
            }
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            check_structural(&format!("{path}.{k}"), v, problems);
        }
    }
    for k in ["items", "additionalProperties"] {
        if let Some(v @ Value::Object(_)) = obj.get(k) {
            check_structural(&format!("{path}[{k}]"), v, problems);
        }
    }
}

#[test]
fn crds_are_structural_and_complete() {
    let crds = all_crds();
    let kinds: Vec<&str> = crds
        .iter()
        .filter_map(|c| c["spec"]["names"]["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "TrainingJob",
            "Queue",
            "NodePool",
            "JobPriorityClass",
            "PriorityClass",
            "PipelineRun",
            "Pipeline",
            "ServedModel"
        ]
    );
    // The former name is served one more release, deprecated (kubectl prints the warning),
    // with the same schema as its successor.
    let legacy = &crds[4];
    assert_eq!(legacy["metadata"]["name"], "priorityclasses.corral.dev");
    assert_eq!(legacy["spec"]["versions"][0]["deprecated"], true);
    assert!(
        legacy["spec"]["versions"][0]["deprecationWarning"]
            .as_str()
            .is_some_and(|w| w.contains("JobPriorityClass"))
    );
    assert_eq!(
        legacy["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"],
        crds[3]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    );
    assert_ne!(
        crds[3]["spec"]["names"]["shortNames"],
        legacy["spec"]["names"]["shortNames"]
    );
    for crd in &crds {
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        let plural = crd["spec"]["names"]["plural"].as_str().expect("plural");
        assert_eq!(crd["metadata"]["name"], format!("{plural}.corral.dev"));
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0]["storage"], true);
        let schema = &versions[0]["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        check_structural(plural, schema, &mut problems);
        assert!(problems.is_empty(), "{plural}: {problems:#?}");
    }
    let tj = &crds[0];
    assert_eq!(tj["spec"]["scope"], "Namespaced");
    assert_eq!(crds[1]["spec"]["scope"], "Cluster");
    let v = &tj["spec"]["versions"][0];
    assert!(v["subresources"]["status"].is_object());
    let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
    // Roles are named properties, so the API server rejects unknown roles too.
    let mut roles: Vec<&String> = spec["properties"]["replicas"]["properties"]
        .as_object()
        .expect("roles")
        .keys()
        .collect();
    roles.sort();
    assert_eq!(
        roles,
        ["chief", "evaluator", "launcher", "master", "ps", "worker"]
    );
    let framework = &spec["properties"]["framework"];
    assert_eq!(framework["type"], "string");
    assert_eq!(framework["enum"].as_array().map(Vec::len), Some(6));
    let cpu = &spec["properties"]["replicas"]["properties"]["worker"]["properties"]["resources"]["properties"]
        ["cpu"];
    assert_eq!(cpu["x-kubernetes-int-or-string"], true);
    let required: Vec<&str> = spec["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        required.contains(&"framework") && required.contains(&"replicas"),
        "{required:?}"
    );
}

#[test]
fn crd_golden() {
    let text: Vec<String> = all_crds()
        .iter()
        .map(|c| serde_saphyr::to_string(c).expect("yaml"))
        .collect();
    insta::assert_snapshot!("crds", text.join("---\n"));
}

#[test]
fn every_replica_template_requires_an_image_on_kubernetes() {
    let crds = all_crds();
    let replicas = &crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["replicas"];
    let roles: Vec<&Value> = match replicas["properties"].as_object() {
        Some(p) => p.values().collect(),
        None => vec![&replicas["additionalProperties"]],
    };
    assert!(!roles.is_empty());
    for role in roles {
        let required = &role["properties"]["template"]["required"];
        assert!(
            required
                .as_array()
                .is_some_and(|r| r.iter().any(|v| v == "image")),
            "{role}"
        );
    }
}
