//! Each class of bad input is rejected with an error that names the field, says what is
//! wrong and what would be valid; errors of one document come together.

mod common;
use common::{assert_has, errors, valid};

fn job(spec: &str) -> String {
    format!(
        "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: job\nspec:\n{}",
        spec.lines().map(|l| format!("  {l}\n")).collect::<String>()
    )
}

#[test]
fn examples_are_valid() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    let mut all = String::new();
    // examples/ and one level of directories below it (one per framework, the quickstart).
    let mut dirs = vec![examples.clone()];
    for entry in std::fs::read_dir(&examples).expect("examples dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    for dir in dirs {
        for entry in std::fs::read_dir(dir).expect("examples dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                all.push_str("---\n");
                all.push_str(&std::fs::read_to_string(&path).expect("read example"));
                n += 1;
            }
        }
    }
    assert!(
        n >= 20,
        "expected an example per framework, the quickstart's jobs and a cluster setup"
    );
    // Validated together, as `corral validate examples/*.yaml examples/*/*.yaml` does: jobs
    // refer to the cluster's queues, pools and priority classes.
    let docs = valid(&all);
    assert!(docs.len() >= 22);
}

#[test]
fn malformed_yaml_and_json() {
    let e = errors("spec: [unclosed");
    assert!(e[0].contains("malformed YAML"), "{e:?}");
    let e = errors("{\"apiVersion\": \"corral.dev/v1alpha1\", ");
    assert!(e[0].contains("malformed JSON"), "{e:?}");
    let e = errors("");
    assert!(e[0].contains("empty"), "{e:?}");
    let e = errors("- just\n- a list\n");
    assert!(e[0].contains("must be a mapping"), "{e:?}");
}

#[test]
fn unknown_fields_are_all_reported_with_suggestions() {
    let e = errors(&job(
        "framework: pytorch\nreplicsa: {}\nreplicas:\n  master:\n    cuont: 1\n    resources: {memry: 1Gi}\n    template: {command: [python], workdir: /tmp}\n",
    ));
    assert_has(&e, "spec.replicsa", "did you mean `replicas`");
    assert_has(&e, "spec.replicas.master.cuont", "did you mean `count`");
    assert_has(
        &e,
        "spec.replicas.master.resources.memry",
        "did you mean `memory`",
    );
    assert_has(
        &e,
        "spec.replicas.master.template.workdir",
        "did you mean `workingDir`",
    );
    assert_eq!(e.len(), 4, "{e:#?}");
}

#[test]
fn unknown_roles_and_roles_the_framework_lacks() {
    let e = errors(&job(
        "framework: pytorch\nreplicas:\n  wokrer: {template: {command: [x]}}\n  chief: {template: {command: [x]}}\n  master: {template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas.wokrer", "did you mean `worker`");
    assert_has(&e, "spec.replicas.chief", "not a role of pytorch jobs");
    assert_has(&e, "spec.replicas.chief", "`master`, `worker`");
}

#[test]
fn missing_and_duplicate_required_roles() {
    let e = errors(&job("framework: pytorch\nreplicas: {}\n"));
    assert_has(&e, "spec.replicas", "needs at least one role");
    let e = errors(&job(
        "framework: mpi\nreplicas:\n  worker: {count: 2, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas", "need a `launcher`");
    let e = errors(&job(
        "framework: pytorch\nreplicas:\n  master: {count: 2, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas.master.count", "exactly one master");
    let e = errors(&job(
        "framework: tensorflow\nreplicas:\n  chief: {count: 2, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas.chief.count", "exactly one chief");
    let e = errors(&job(
        "framework: xgboost\nreplicas:\n  worker: {template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas", "need a `master`");
    let e = errors(&job(
        "framework: tensorflow\nreplicas:\n  ps: {template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas", "`chief` or at least one `worker`");
}

#[test]
fn names_must_be_hostnames() {
    let text = job("framework: jax\nreplicas:\n  worker: {template: {command: [x]}}\n")
        .replace("name: job", "name: My_Job");
    let e = errors(&text);
    assert_has(&e, "metadata.name", "cannot be a hostname");
    assert_has(&e, "metadata.name", "`my-job`");
    let long = "a".repeat(60);
    let text = job("framework: jax\nreplicas:\n  worker: {count: 12, template: {command: [x]}}\n")
        .replace("name: job", &format!("name: {long}"));
    let e = errors(&text);
    assert_has(&e, "metadata.name", "hostname holds 63");
    let text = job("framework: jax\nreplicas:\n  worker: {template: {command: [x]}}\n")
        .replace("name: job", "name: job\n  namespace: Team_A");
    assert_has(&errors(&text), "metadata.namespace", "cannot be a hostname");
}

#[test]
fn counts_and_quantities() {
    let e = errors(&job(
        "framework: jax\nreplicas:\n  worker: {count: 0, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas.worker.count", "at least 1");
    let e = errors(&job(
        "framework: jax\nreplicas:\n  worker: {count: -3, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas.worker.count", "zero or more");
    let e = errors(&job(
        "framework: jax\nreplicas:\n  worker: {count: 50000, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.replicas.worker.count", "more than the 10000");
    let e = errors(&job(
        "framework: jax\nreplicas:\n  worker:\n    resources: {cpu: abc, memory: \"16\", gpu: 64}\n    template: {command: [x]}\n",
    ));
    assert_has(&e, "spec.replicas.worker.resources.cpu", "not a quantity");
    assert_has(&e, "spec.replicas.worker.resources.memory", "\"16Gi\"");
    assert_has(
        &e,
        "spec.replicas.worker.resources.gpu",
        "cannot fit on one node",
    );
    assert!(e.len() >= 3, "errors come together: {e:#?}");
    let e = errors(&job(
        "framework: jax\nreplicas:\n  worker:\n    resources: {cpu: \"0\", memory: 100Ti}\n    template: {command: [x]}\n",
    ));
    assert_has(&e, "spec.replicas.worker.resources.cpu", "more than 0");
    assert_has(
        &e,
        "spec.replicas.worker.resources.memory",
        "more than 64Ti",
    );
    // The notations users write are valid.
    valid(&job(
        "framework: jax\nreplicas:\n  worker:\n    resources: {cpu: 500m, memory: 16Gi, gpu: 8, extended: {rdma/hca: 1}}\n    template: {command: [x]}\n",
    ));
}

#[test]
fn gpu_counts_against_declared_node_pools() {
    let pools = "apiVersion: corral.dev/v1alpha1\nkind: NodePool\nmetadata: {name: v100}\nspec: {gpuType: Tesla-V100, gpusPerNode: 4}\n---\napiVersion: corral.dev/v1alpha1\nkind: NodePool\nmetadata: {name: a100}\nspec: {gpuType: A100, gpusPerNode: 8}\n---\n";
    let text = format!(
        "{pools}{}",
        job(
            "framework: jax\nreplicas:\n  worker:\n    resources: {gpu: 8, gpuTypes: [Tesla-V100]}\n    template: {command: [x]}\n"
        )
    );
    let e = errors(&text);
    assert_has(
        &e,
        "spec.replicas.worker.resources.gpu",
        "holds 4 (pool v100)",
    );
    let text = format!(
        "{pools}{}",
        job(
            "framework: jax\nreplicas:\n  worker:\n    resources: {gpu: 8, gpuTypes: [A10O]}\n    template: {command: [x]}\n"
        )
    );
    assert_has(
        &errors(&text),
        "spec.replicas.worker.resources.gpuTypes[0]",
        "did you mean `A100`",
    );
    // 8 on the A100 pool fits.
    let text = format!(
        "{pools}{}",
        job(
            "framework: jax\nreplicas:\n  worker:\n    resources: {gpu: 8}\n    template: {command: [x]}\n"
        )
    );
    valid(&text);
}

#[test]
fn templates_env_and_policies() {
    let e = errors(&job(
        "framework: pytorch\nsuccessPolicy: AllWorkers\nnprocPerNode: many\nmpi: {slotsPerWorker: 0}\nreplicas:\n  worker:\n    template:\n      env: [{name: A, value: x}, {name: A, value: y}, {name: 1BAD, value: z}]\n",
    ));
    assert_has(&e, "spec.replicas.worker.template", "needs `command`");
    assert_has(&e, "spec.replicas.worker.template.env[1].name", "set twice");
    assert_has(
        &e,
        "spec.replicas.worker.template.env[2].name",
        "not a valid variable name",
    );
    assert_has(&e, "spec.successPolicy", "tensorflow jobs only");
    assert_has(&e, "spec.nprocPerNode", "`auto`, `cpu`, `gpu`");
    assert_has(&e, "spec.mpi", "mpi jobs only");
    assert_has(&e, "spec.mpi.slotsPerWorker", "at least 1");
    let e = errors(&job(
        "framework: pytorch\nelastic: {minReplicas: 4, maxReplicas: 2, rdzvBackend: zookeeper}\nreplicas:\n  worker: {count: 3, template: {command: [x]}}\n",
    ));
    assert_has(&e, "spec.elastic.maxReplicas", "less than minReplicas");
    assert_has(&e, "spec.elastic.rdzvBackend", "c10d");
    let e = errors(&job(
        "framework: pytorch\nreplicas:\n  worker:\n    restartPolicy: OnFailur\n    template: {command: [x]}\n",
    ));
    assert_has(
        &e,
        "spec.replicas.worker.restartPolicy",
        "did you mean `OnFailure`",
    );
}

#[test]
fn kinds_versions_and_cross_references() {
    let e = errors(
        "apiVersion: corral.dev/v1alpha1\nkind: TrainingJb\nmetadata: {name: x}\nspec: {}\n",
    );
    assert_has(&e, "kind", "did you mean `TrainingJob`");
    let e = errors(
        &job("framework: jax\nreplicas:\n  worker: {template: {command: [x]}}\n")
            .replace("corral.dev/v1alpha1", "corral.dev/v1"),
    );
    assert_has(&e, "apiVersion", "use `corral.dev/v1alpha1`");
    let text = "apiVersion: corral.dev/v1alpha1\nkind: NodePool\nmetadata: {name: a100}\nspec: {gpuType: A100, gpusPerNode: 8}\n---\napiVersion: corral.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  quotas:\n    - {nodePool: a10O, gpu: 4, lendingLimit: {gpu: 8}, borrowingLimit: {gpu: 2}}\n";
    let e = errors(text);
    assert_has(&e, "spec.quotas[0].nodePool", "did you mean `a100`");
    assert_has(
        &e,
        "spec.quotas[0].lendingLimit.gpu",
        "more than the queue's own quota",
    );
    assert_has(&e, "spec.quotas[0].borrowingLimit", "set `spec.cohort`");
    let text = format!(
        "apiVersion: corral.dev/v1alpha1\nkind: Queue\nmetadata: {{name: team-a}}\nspec: {{}}\n---\n{}",
        job("framework: jax\nqueue: team-b\nreplicas:\n  worker: {template: {command: [x]}}\n")
    );
    assert_has(&errors(&text), "spec.queue", "no queue `team-b`");
    let text = "apiVersion: corral.dev/v1alpha1\nkind: JobPriorityClass\nmetadata: {name: a}\nspec: {value: 2000000000, globalDefault: true}\n---\napiVersion: corral.dev/v1alpha1\nkind: JobPriorityClass\nmetadata: {name: b}\nspec: {value: 1, globalDefault: true}\n";
    let e = errors(text);
    assert_has(&e, "spec.value", "reserved for system");
    assert_has(&e, "spec.globalDefault", "only one JobPriorityClass");
}

#[test]
fn json_and_lists_are_accepted() {
    let json = r#"{"apiVersion":"corral.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j"},
        "spec":{"framework":"generic","replicas":{"worker":{"count":2,"template":{"command":["true"]}}}}}"#;
    assert_eq!(valid(json).len(), 1);
    let list = "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: corral.dev/v1alpha1\n    kind: NodePool\n    metadata: {name: a}\n    spec: {}\n  - apiVersion: corral.dev/v1alpha1\n    kind: NodePool\n    metadata: {name: b}\n    spec: {}\n";
    assert_eq!(valid(list).len(), 2);
}

#[test]
fn huge_input_is_refused_before_parsing() {
    let big = format!(
        "a: \"{}\"\n",
        "x".repeat(corral_api::document::MAX_INPUT_BYTES)
    );
    let e = errors(&big);
    assert!(e[0].contains("limit is 4 MiB"), "{e:?}");
}

#[test]
fn the_former_priority_class_kind_is_read_as_job_priority_class_with_a_warning() {
    use corral_api::document::{Document, parse_documents};
    let text = "apiVersion: corral.dev/v1alpha1\nkind: PriorityClass\nmetadata: {name: high}\nspec: {value: 1000}\n";
    let parsed = parse_documents(text, &Default::default());
    let p = parsed[0]
        .as_ref()
        .expect("the deprecated kind still parses");
    let Document::JobPriorityClass(c) = &p.document else {
        panic!("read as {}", p.document.kind());
    };
    assert_eq!(c.kind, "JobPriorityClass", "normalized to the new kind");
    assert_eq!(c.spec.value, 1000);
    assert!(
        p.warnings.iter().any(|w| w.path == "kind"
            && w.message.contains("deprecated")
            && w.message.contains("JobPriorityClass")),
        "{:?}",
        p.warnings
    );
    // The new kind carries no warning; Kubernetes' own PriorityClass is not Corral's.
    let text = text.replace("kind: PriorityClass", "kind: JobPriorityClass");
    let parsed = parse_documents(&text, &Default::default());
    assert!(parsed[0].as_ref().expect("valid").warnings.is_empty());
    let k8s = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n";
    assert_has(&errors(k8s), "kind", "JobPriorityClass");
}

#[test]
fn on_kubernetes_a_job_without_an_image_is_refused_naming_the_field() {
    use corral_api::document::parse_documents;
    use corral_api::validate::ValidationContext;
    let text = job(
        "framework: pytorch\nreplicas:\n  master: {template: {command: [python, train.py]}}\n  worker: {count: 2, template: {image: 'pytorch/pytorch:2.5.1', command: [python, train.py]}}\n",
    );
    assert!(parse_documents(&text, &ValidationContext::default())[0].is_ok());
    let kube = ValidationContext {
        requires_image: true,
        ..ValidationContext::default()
    };
    let errs: Vec<String> = match &parse_documents(&text, &kube)[0] {
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        Ok(_) => panic!("accepted without an image"),
    };
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_has(
        &errs,
        "spec.replicas.master.template.image",
        "is required on Kubernetes",
    );
}

#[test]
fn queue_budgets_name_the_field_and_the_valid_values() {
    let queue = |budget: &str| {
        format!(
            "apiVersion: corral.dev/v1alpha1\nkind: Queue\nmetadata:\n  name: team-a\nspec:\n  budget: {budget}\n"
        )
    };
    let docs = valid(&queue("{gpuHours: 100, period: week}"));
    assert_eq!(docs.len(), 1);
    valid(&queue("{gpuHours: '500m', period: day}"));
    assert_has(
        &errors(&queue("{gpuHours: 0, period: day}")),
        "spec.budget.gpuHours",
        "out of range; use more than 0 and at most 1000000000 GPU-hours per day",
    );
    assert_has(
        &errors(&queue("{gpuHours: lots, period: day}")),
        "spec.budget.gpuHours",
        "not a quantity",
    );
    let e = errors(&queue("{gpuHours: 10, period: year}"));
    assert!(
        e.iter()
            .any(|e| e.contains("year") && e.contains("day") && e.contains("month")),
        "{e:?}"
    );
    let e = errors(&queue("{gpuHours: 10}"));
    assert!(e.iter().any(|e| e.contains("period")), "{e:?}");
}
