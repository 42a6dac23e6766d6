//! `deploy/` manifests parse; the CRDs equal what the Rust types generate and validate as
//! apiextensions.k8s.io/v1 CustomResourceDefinitions with structural schemas; the RBAC
//! grants what the operator calls, and nothing wildcard.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split("\n---")
        .filter(|d| {
            d.lines().any(|l| {
                !l.trim().is_empty() && !l.trim_start().starts_with('#') && l.trim() != "---"
            })
        })
        .map(|d| {
            serde_saphyr::from_str::<Value>(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

fn check_crd_file(path: &Path) {
    let generated = corral_kube::crds::render_crds().expect("render");
    if std::env::var_os("UPDATE_GOLDENS").is_some() || !path.exists() {
        std::fs::write(path, &generated).expect("write");
    }
    let on_disk = docs(path);
    assert_eq!(
        on_disk,
        corral_api::crd::all_crds(),
        "{} is out of date; UPDATE_GOLDENS=1 regenerates it",
        path.display()
    );
    for doc in on_disk {
        let crd: CustomResourceDefinition =
            serde_json::from_value(doc.clone()).expect("a CustomResourceDefinition");
        // Nothing was dropped: every keyword is one apiextensions knows.
        let back = serde_json::to_value(&crd).expect("serializes");
        if let Some(d) = diff(&strip_nulls(doc.clone()), &strip_nulls(back), "") {
            panic!(
                "{:?} does not survive apiextensions/v1: {d}",
                crd.metadata.name
            );
        }
        let v = &crd.spec.versions[0];
        assert!(
            v.subresources.as_ref().is_some_and(|s| s.status.is_some())
                || crd.spec.names.kind != "TrainingJob"
        );
        let schema = serde_json::to_value(&v.schema.as_ref().expect("schema").open_api_v3_schema)
            .expect("schema");
        structural(&schema, "openAPIV3Schema");
    }
}

/// The first place where two documents differ (numbers compared by value).
fn diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let (Some(va), Some(vb)) = (x.get(k), y.get(k)) else {
                    return Some(format!("{path}.{k}: only on one side"));
                };
                if let Some(d) = diff(va, vb, &format!("{path}.{k}")) {
                    return Some(d);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (va, vb))| diff(va, vb, &format!("{path}[{i}]"))),
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        (x, y) if x == y => None,
        (x, y) => Some(format!("{path}: {x} != {y}")),
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        v => v,
    }
}

/// The rules of a structural schema (apiextensions validation): a type on every node (unless
/// int-or-string or preserving unknown fields), no $ref, not both properties and
/// additionalProperties, items for arrays.
fn structural(s: &Value, path: &str) {
    assert!(s.get("$ref").is_none(), "{path}: $ref");
    let int_or_string = s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    assert!(
        s.get("type").is_some() || int_or_string || preserve,
        "{path}: no type"
    );
    assert!(
        !(s.get("properties").is_some() && s.get("additionalProperties").is_some()),
        "{path}: properties and additionalProperties"
    );
    if s.get("type") == Some(&Value::String("array".into())) {
        assert!(s.get("items").is_some(), "{path}: array without items");
    }
    if let Some(Value::Object(props)) = s.get("properties") {
        for (k, p) in props {
            structural(p, &format!("{path}.{k}"));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = s.get(key) {
            structural(sub, &format!("{path}.{key}"));
        }
    }
}

#[test]
fn crds_equal_the_generated_ones_and_validate() {
    check_crd_file(&deploy().join("crds.yaml"));
    check_crd_file(&deploy().join("helm/corral/crds/crds.yaml"));
}

#[test]
fn install_manifests_parse_as_kubernetes_objects() {
    for file in ["rbac.yaml", "operator.yaml"] {
        for doc in docs(&deploy().join(file)) {
            let kind = doc["kind"].as_str().expect("kind").to_string();
            let ok = match kind.as_str() {
                "Deployment" => serde_json::from_value::<Deployment>(doc.clone()).map(|_| ()),
                "ClusterRole" => serde_json::from_value::<ClusterRole>(doc.clone()).map(|_| ()),
                "Role" => serde_json::from_value::<Role>(doc.clone()).map(|_| ()),
                "ClusterRoleBinding" => serde_json::from_value::<
                    k8s_openapi::api::rbac::v1::ClusterRoleBinding,
                >(doc.clone())
                .map(|_| ()),
                "RoleBinding" => {
                    serde_json::from_value::<k8s_openapi::api::rbac::v1::RoleBinding>(doc.clone())
                        .map(|_| ())
                }
                "ServiceAccount" => serde_json::from_value::<
                    k8s_openapi::api::core::v1::ServiceAccount,
                >(doc.clone())
                .map(|_| ()),
                "Namespace" => {
                    serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(doc.clone())
                        .map(|_| ())
                }
                "Service" => {
                    serde_json::from_value::<k8s_openapi::api::core::v1::Service>(doc.clone())
                        .map(|_| ())
                }
                other => panic!("unexpected kind {other} in {file}"),
            };
            ok.unwrap_or_else(|e| panic!("{file} {kind}: {e}"));
        }
    }
    for f in ["Chart.yaml", "values.yaml"] {
        docs(&deploy().join("helm/corral").join(f));
    }
}

#[test]
fn rbac_grants_what_the_operator_calls_and_no_wildcards() {
    let docs = docs(&deploy().join("rbac.yaml"));
    let role: ClusterRole = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "ClusterRole")
            .expect("ClusterRole")
            .clone(),
    )
    .expect("ClusterRole");
    let rules = role.rules.unwrap_or_default();
    let allows = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    };
    for (g, r, verbs) in [
        (
            "corral.dev",
            "trainingjobs",
            &["get", "list", "watch", "patch", "delete"][..],
        ),
        ("corral.dev", "trainingjobs/status", &["patch"][..]),
        ("corral.dev", "queues", &["list", "watch"][..]),
        ("corral.dev", "nodepools", &["list", "watch"][..]),
        ("corral.dev", "jobpriorityclasses", &["list", "watch"][..]),
        ("corral.dev", "priorityclasses", &["list", "watch"][..]),
        ("", "pods", &["list", "watch", "create", "delete"][..]),
        ("", "pods/binding", &["create"][..]),
        ("", "services", &["list", "watch", "create", "patch"][..]),
        ("", "configmaps", &["create", "patch"][..]),
        ("", "nodes", &["list", "watch"][..]),
        ("events.k8s.io", "events", &["create", "patch"][..]),
    ] {
        for v in verbs {
            assert!(allows(g, r, v), "missing {v} on {g}/{r}");
        }
    }
    assert!(!allows("", "secrets", "get"), "no secrets");
    for r in &rules {
        for list in [
            &r.verbs,
            r.resources.as_ref().unwrap_or(&vec![]),
            r.api_groups.as_ref().unwrap_or(&vec![]),
        ] {
            assert!(!list.iter().any(|x| x == "*"), "wildcard in {r:?}");
        }
    }
    let lease: Role = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "Role")
            .expect("Role")
            .clone(),
    )
    .expect("Role");
    assert_eq!(
        lease.metadata.namespace.as_deref(),
        Some("corral-system"),
        "leases only in its namespace"
    );
}
