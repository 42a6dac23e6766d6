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
            // Each key once: visiting shared keys from both sides doubles the work at every
            // level (exponential in the depth of the PipelineRun schema).
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
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
    for file in ["namespace.yaml", "rbac.yaml", "operator.yaml"] {
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

/// The rules of the ClusterRole in `deploy/<file>`.
fn cluster_role_rules(file: &str) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let role: ClusterRole = serde_json::from_value(
        docs(&deploy().join(file))
            .into_iter()
            .find(|d| d["kind"] == "ClusterRole")
            .expect("ClusterRole"),
    )
    .expect("ClusterRole");
    role.rules.unwrap_or_default()
}

/// Whether `rules` let `verb` be done on `group`/`resource`.
fn grants(
    rules: &[k8s_openapi::api::rbac::v1::PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == group)
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

#[test]
fn rbac_grants_what_the_operator_calls_and_no_wildcards() {
    let docs = docs(&deploy().join("rbac.yaml"));
    let rules = cluster_role_rules("rbac.yaml");
    let allows = |group: &str, resource: &str, verb: &str| grants(&rules, group, resource, verb);
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
        ("", "secrets", &["create"][..]),
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

/// The files of the ordered install, as deploy/kustomization.yaml lists them.
fn kustomization_resources() -> Vec<String> {
    let k = &docs(&deploy().join("kustomization.yaml"))[0];
    k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file").to_string())
        .collect()
}

/// deploy/install.yaml: every file of the kustomization, in its order, as one file.
fn render_install() -> String {
    let mut out = String::from(
        "# The whole install in one file, in order: `kubectl apply --server-side -f deploy/install.yaml`.\n\
         # Generated from deploy/kustomization.yaml's files by crates/corral-kube/tests/deploy.rs\n\
         # (UPDATE_GOLDENS=1 rewrites it); do not edit.\n",
    );
    for f in kustomization_resources() {
        let text = std::fs::read_to_string(deploy().join(&f)).expect("read");
        out.push_str(&format!("---\n# deploy/{f}\n"));
        out.push_str(text.trim_start_matches("---\n"));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

// Issue 19 #6: `kubectl apply -f deploy/rbac.yaml -f deploy/operator.yaml` failed on a first
// run: the Namespace came after the objects in it.
#[test]
fn the_install_is_ordered_namespace_and_crds_first() {
    let path = deploy().join("install.yaml");
    let rendered = render_install();
    if std::env::var_os("UPDATE_GOLDENS").is_some() || !path.exists() {
        std::fs::write(&path, &rendered).expect("write");
    }
    assert_eq!(
        std::fs::read_to_string(&path).expect("install.yaml"),
        rendered,
        "deploy/install.yaml is out of date; UPDATE_GOLDENS=1 regenerates it"
    );
    let files = kustomization_resources();
    // Every install manifest is in the kustomization.
    for f in ["namespace.yaml", "crds.yaml", "rbac.yaml", "operator.yaml"] {
        assert!(
            files.iter().any(|x| x == f),
            "{f} missing from kustomization.yaml"
        );
    }
    for all in [
        docs(&path),
        files.iter().flat_map(|f| docs(&deploy().join(f))).collect(),
    ] {
        let kinds: Vec<&str> = all
            .iter()
            .map(|d| d["kind"].as_str().expect("kind"))
            .collect();
        let ns_at = kinds
            .iter()
            .position(|k| *k == "Namespace")
            .expect("a Namespace");
        let last_crd = kinds
            .iter()
            .rposition(|k| *k == "CustomResourceDefinition")
            .expect("CRDs");
        for (i, d) in all.iter().enumerate() {
            if d["metadata"]["namespace"].is_string() {
                assert!(
                    i > ns_at,
                    "{} {} comes before its Namespace",
                    kinds[i],
                    d["metadata"]["name"]
                );
            }
            if !matches!(kinds[i], "Namespace" | "CustomResourceDefinition") {
                assert!(i > last_crd, "{} comes before the CRDs", kinds[i]);
            }
        }
        assert_eq!(
            all.iter().filter(|d| d["kind"] == "Namespace").count(),
            1,
            "one Namespace"
        );
    }
    // The README and deploy/README say the same command.
    for readme in [deploy().join("README.md"), deploy().join("../README.md")] {
        let text = std::fs::read_to_string(&readme).expect("readme");
        assert!(
            text.contains("kubectl apply --server-side -k deploy/")
                || text.contains("kubectl apply --server-side -f deploy/install.yaml"),
            "{} does not give the ordered install",
            readme.display()
        );
        assert!(
            !text.contains("-f deploy/rbac.yaml -f deploy/operator.yaml"),
            "{} still gives the unordered install",
            readme.display()
        );
    }
}

/// The Helm template's YAML with `{{ ... }}` replaced by a placeholder, so that its rules
/// parse.
fn helm_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read");
    let mut plain = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("{{") {
        plain.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .map_or(rest.len(), |e| start + e + 2);
        plain.push_str("templated");
        rest = &rest[end..];
    }
    plain.push_str(rest);
    plain
        .split("\n---")
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .map(|d| serde_saphyr::from_str::<Value>(d).expect("helm template parses"))
        .collect()
}

// Issue 19 #2: the operator sets blockOwnerDeletion on what it creates, which the
// OwnerReferencesPermissionEnforcement admission plugin allows only with update on the
// owner's finalizers.
#[test]
fn rbac_lets_the_operator_block_owner_deletion_in_both_installs() {
    let job: corral_api::TrainingJob = serde_saphyr::from_str(
        "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, namespace: ml, uid: u-1}\n\
         spec:\n  framework: pytorch\n  replicas:\n    worker: {template: {image: x, command: [x]}}\n",
    )
    .expect("job");
    let svc = corral_kube::build::build_service(&job).expect("service");
    let blocks = svc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.block_owner_deletion == Some(true));
    let rules_of = |docs: Vec<Value>| -> Vec<Value> {
        docs.into_iter()
            .find(|d| d["kind"] == "ClusterRole")
            .and_then(|d| d["rules"].as_array().cloned())
            .expect("ClusterRole rules")
    };
    let plain = rules_of(docs(&deploy().join("rbac.yaml")));
    let helm = rules_of(helm_docs(&deploy().join("helm/corral/templates/rbac.yaml")));
    assert_eq!(plain, helm, "the chart grants what deploy/rbac.yaml grants");
    let grants_finalizers = plain.iter().any(|r| {
        r["apiGroups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "corral.dev"))
            && r["resources"]
                .as_array()
                .is_some_and(|x| x.iter().any(|x| x == "trainingjobs/finalizers"))
            && r["verbs"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == "update"))
    });
    assert!(blocks, "the operator sets blockOwnerDeletion");
    assert!(
        grants_finalizers,
        "missing update on corral.dev/trainingjobs/finalizers"
    );
}

/// Options of `corral operator`, as clap reads a Deployment's `args` (after `operator`).
#[derive(clap::Parser)]
struct OperatorCli {
    #[command(flatten)]
    args: corral_kube::OperatorArgs,
}

fn args_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect()
}

// The webhook overlay (deploy/webhook/): its parts name each other rightly, and the
// configuration is what deploy/README.md says (sideEffects None, v1 reviews, a short
// timeout, CREATE and UPDATE of trainingjobs only, never DELETE).
#[test]
fn the_webhook_overlay_is_consistent() {
    use clap::Parser;
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;

    let dir = deploy().join("webhook");
    let k = &docs(&dir.join("kustomization.yaml"))[0];
    assert_eq!(k["resources"], serde_json::json!(["../", "webhook.yaml"]));
    assert_eq!(k["patches"][0]["path"], "operator-patch.yaml");
    let all = docs(&dir.join("webhook.yaml"));
    let of = |kind: &str| -> Value {
        all.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in deploy/webhook/webhook.yaml"))
            .clone()
    };
    let vwc: ValidatingWebhookConfiguration =
        serde_json::from_value(of("ValidatingWebhookConfiguration")).expect("parses");
    let service: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(of("Service")).expect("parses");
    let cert = of("Certificate");
    let issuer = of("Issuer");
    let patch = &docs(&dir.join("operator-patch.yaml"))[0];
    let base = docs(&deploy().join("operator.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the operator's Deployment");

    let svc_name = service.metadata.name.clone().expect("name");
    let ns = service.metadata.namespace.clone().expect("namespace");
    let webhooks = vwc.webhooks.clone().expect("webhooks");
    assert_eq!(webhooks.len(), 1);
    let w = &webhooks[0];
    assert_eq!(w.name, "trainingjobs.corral.dev");
    assert!(matches!(w.failure_policy.as_deref(), Some("Fail")));
    assert_eq!(w.side_effects, "None");
    assert_eq!(w.admission_review_versions, vec!["v1".to_string()]);
    assert!(w.timeout_seconds.is_some_and(|t| (1..=10).contains(&t)));
    let to = w.client_config.service.as_ref().expect("a Service");
    assert_eq!(
        (to.name.as_str(), to.namespace.as_str()),
        (svc_name.as_str(), ns.as_str())
    );
    assert_eq!(to.path.as_deref(), Some(corral_kube::webhook::PATH));
    let svc_port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .expect("a port");
    assert_eq!(to.port, Some(svc_port.port));
    let rules = w.rules.clone().expect("rules");
    assert_eq!(rules.len(), 1);
    let r = &rules[0];
    assert_eq!(
        r.api_groups.as_deref(),
        Some(&["corral.dev".to_string()][..])
    );
    assert_eq!(
        r.resources.as_deref(),
        Some(
            &[
                "trainingjobs".to_string(),
                "pipelineruns".to_string(),
                "pipelines".to_string(),
                "servedmodels".to_string()
            ][..]
        )
    );
    assert_eq!(
        r.operations.as_deref(),
        Some(&["CREATE".to_string(), "UPDATE".to_string()][..]),
        "deletes and status updates must never wait on the webhook"
    );
    // cert-manager: the CA of the Certificate the operator mounts is injected.
    let cert_ref = format!(
        "{}/{}",
        cert["metadata"]["namespace"].as_str().expect("ns"),
        cert["metadata"]["name"].as_str().expect("name")
    );
    assert_eq!(
        vwc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("cert-manager.io/inject-ca-from")),
        Some(&cert_ref)
    );
    assert_eq!(
        cert["spec"]["issuerRef"]["name"],
        issuer["metadata"]["name"]
    );
    let dns = format!("{svc_name}.{ns}.svc");
    assert!(
        cert["spec"]["dnsNames"]
            .as_array()
            .expect("dnsNames")
            .iter()
            .any(|d| d == dns.as_str()),
        "the certificate must name {dns}"
    );

    // The operator: the base args, then where the certificate is mounted and the port the
    // Service targets.
    let args = args_of(patch);
    let base_args = args_of(&base);
    assert_eq!(
        args[..base_args.len()],
        base_args[..],
        "the patch's args repeat deploy/operator.yaml's"
    );
    assert_eq!(args[0], "operator");
    let cli = OperatorCli::try_parse_from(&args).expect("the operator accepts the args");
    let cert_dir = cli.args.webhook_cert_dir.expect("--webhook-cert-dir");
    let pod = &patch["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["name"],
        base["spec"]["template"]["spec"]["containers"][0]["name"]
    );
    let mount = &container["volumeMounts"][0];
    assert_eq!(mount["mountPath"], cert_dir.display().to_string());
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["secret"]["secretName"], cert["spec"]["secretName"]);
    let port = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| {
            Some(p["name"].as_str().unwrap_or_default().to_string())
                == svc_port.target_port.as_ref().map(|t| match t {
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => {
                        s.clone()
                    }
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => {
                        i.to_string()
                    }
                })
        })
        .expect("the container port the Service targets");
    assert_eq!(
        port["containerPort"].as_u64(),
        Some(u64::from(cli.args.webhook_listen.port()))
    );
}

#[test]
fn the_kserve_crd_is_structural_and_its_files_are_current() {
    let path = deploy().join("kserve-crds.yaml");
    let text = corral_kube::kserve::crds::render().expect("render");
    if std::env::var_os("UPDATE_GOLDENS").is_some() {
        std::fs::write(&path, &text).expect("write deploy/kserve-crds.yaml");
    }
    let on_disk = std::fs::read_to_string(&path).expect("deploy/kserve-crds.yaml exists");
    assert_eq!(
        on_disk, text,
        "deploy/kserve-crds.yaml is stale: UPDATE_GOLDENS=1 rewrites it"
    );
    let crd = corral_kube::kserve::crds::crd();
    structural(
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        "openAPIV3Schema",
    );
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["isvc"])
    );
    // The RBAC of `--kserve`: what kserve::watch calls.
    let rules = cluster_role_rules("kserve-rbac.yaml");
    for (g, r, v) in [
        ("serving.kserve.io", "inferenceservices", "watch"),
        ("serving.kserve.io", "inferenceservices/status", "patch"),
        (
            "serving.kserve.io",
            "inferenceservices/finalizers",
            "update",
        ),
        ("corral.dev", "servedmodels", "patch"),
        ("corral.dev", "servedmodels", "create"),
    ] {
        assert!(grants(&rules, g, r, v), "missing {v} on {g}/{r}");
    }
}
