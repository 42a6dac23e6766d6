//! Import of Kubeflow's job kinds: TFJob, PyTorchJob, XGBoostJob, JAXJob (kubeflow.org/v1) and
//! MPIJob (kubeflow.org/v2beta1) become TrainingJobs. Everything in the manifest either
//! converts to a Corral field, is kept for the Kubernetes shell in `template.podTemplate`
//! (volumes, tolerations, sidecars, security contexts), or is an error that says why; nothing
//! is dropped silently. Server-populated fields (status, uid, managedFields) are not intent and
//! are not carried.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::meta::{API_VERSION, ObjectMeta};
use crate::node_pool::GPU_PRODUCT_LABEL;
use crate::quantity::Quantity;
use crate::suggest::did_you_mean;
use crate::training_job::*;
use crate::validate::{FieldError, ValidationErrors};

/// The Kubeflow kinds Corral accepts.
pub const KINDS: [&str; 5] = ["TFJob", "PyTorchJob", "XGBoostJob", "JAXJob", "MPIJob"];

/// How one Kubeflow kind maps to Corral.
struct KindMap {
    framework: Framework,
    api_version: &'static str,
    specs_key: &'static str,
    /// The training container's default name; `None`: the first container (MPI).
    container: Option<&'static str>,
    port_name: Option<&'static str>,
    /// Kubeflow replica type (any case) -> role.
    roles: &'static [(&'static str, Role)],
    extra_spec_keys: &'static [&'static str],
}

fn kind_map(kind: &str) -> Option<KindMap> {
    Some(match kind {
        "TFJob" => KindMap {
            framework: Framework::TensorFlow,
            api_version: "kubeflow.org/v1",
            specs_key: "tfReplicaSpecs",
            container: Some("tensorflow"),
            port_name: Some("tfjob-port"),
            roles: &[
                ("chief", Role::Chief),
                ("master", Role::Chief),
                ("ps", Role::Ps),
                ("worker", Role::Worker),
                ("evaluator", Role::Evaluator),
            ],
            extra_spec_keys: &["successPolicy", "enableDynamicWorker"],
        },
        "PyTorchJob" => KindMap {
            framework: Framework::PyTorch,
            api_version: "kubeflow.org/v1",
            specs_key: "pytorchReplicaSpecs",
            container: Some("pytorch"),
            port_name: Some("pytorchjob-port"),
            roles: &[("master", Role::Master), ("worker", Role::Worker)],
            extra_spec_keys: &["elasticPolicy", "nprocPerNode"],
        },
        "XGBoostJob" => KindMap {
            framework: Framework::XGBoost,
            api_version: "kubeflow.org/v1",
            specs_key: "xgbReplicaSpecs",
            container: Some("xgboost"),
            port_name: Some("xgboostjob-port"),
            roles: &[("master", Role::Master), ("worker", Role::Worker)],
            extra_spec_keys: &[],
        },
        "JAXJob" => KindMap {
            framework: Framework::Jax,
            api_version: "kubeflow.org/v1",
            specs_key: "jaxReplicaSpecs",
            container: Some("jax"),
            port_name: Some("jaxjob-port"),
            roles: &[("worker", Role::Worker)],
            extra_spec_keys: &[],
        },
        "MPIJob" => KindMap {
            framework: Framework::Mpi,
            api_version: "kubeflow.org/v2beta1",
            specs_key: "mpiReplicaSpecs",
            container: None,
            port_name: None,
            roles: &[("launcher", Role::Launcher), ("worker", Role::Worker)],
            extra_spec_keys: &[
                "slotsPerWorker",
                "runLauncherAsWorker",
                "sshAuthMountPath",
                "launcherCreationPolicy",
                "mpiImplementation",
            ],
        },
        _ => return None,
    })
}

/// The Corral role of a replica type of a Kubeflow `kind`, in any case (TFJob's `Master` is
/// Corral's chief); `None` for a kind or replica type Kubeflow does not define.
pub fn replica_role(kind: &str, replica_type: &str) -> Option<Role> {
    let lower = replica_type.to_ascii_lowercase();
    let map = kind_map(kind)?;
    map.roles.iter().find(|(n, _)| *n == lower).map(|&(_, r)| r)
}

/// Metadata the API server sets; not the user's intent, so not carried over.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Container fields that become Corral fields; the rest stays in the pod template.
const CONVERTED_CONTAINER_FIELDS: &[&str] =
    &["image", "command", "args", "env", "workingDir", "resources"];

struct Converter {
    errs: ValidationErrors,
    /// What Kubernetes and the Kubeflow operators accept but Corral does not honour.
    warnings: Vec<FieldError>,
}

impl Converter {
    fn err(&mut self, path: &str, msg: impl Into<String>) {
        self.errs.push(path, msg);
    }

    fn warn(&mut self, path: &str, msg: impl Into<String>) {
        self.warnings.push(FieldError::new(path, msg));
    }

    fn string(&mut self, path: &str, v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.err(path, "must be a string");
                None
            }
        }
    }

    fn u32(&mut self, path: &str, v: &Value) -> Option<u32> {
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                self.err(path, "must be a whole number, zero or more");
                None
            }
        }
    }

    fn u64(&mut self, path: &str, v: &Value) -> Option<u64> {
        match v.as_u64() {
            Some(n) => Some(n),
            None => {
                self.err(path, "must be a whole number, zero or more");
                None
            }
        }
    }

    fn bool(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                self.err(path, "must be true or false");
                None
            }
        }
    }

    fn strings(&mut self, path: &str, v: &Value) -> Vec<String> {
        match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| match item {
                    Value::String(s) => Some(s.clone()),
                    // YAML users write `- 2` for an argument; Kubernetes would reject it, but
                    // its meaning is plain.
                    Value::Number(n) => Some(n.to_string()),
                    _ => {
                        self.err(&format!("{path}[{i}]"), "must be a string");
                        None
                    }
                })
                .collect(),
            _ => {
                self.err(path, "must be a list of strings");
                Vec::new()
            }
        }
    }

    fn object<'a>(&mut self, path: &str, v: &'a Value) -> Option<&'a Map<String, Value>> {
        match v {
            Value::Object(o) => Some(o),
            _ => {
                self.err(path, "must be a mapping");
                None
            }
        }
    }

    /// Reports keys outside `known`, with the closest known name.
    fn only_keys(&mut self, path: &str, obj: &Map<String, Value>, known: &[&str], what: &str) {
        for k in obj.keys() {
            if !known.contains(&k.as_str()) {
                let hint = did_you_mean(k, known.iter().copied())
                    .map(|m| format!("did you mean `{m}`? "))
                    .unwrap_or_default();
                self.err(
                    &format!("{path}.{k}"),
                    format!(
                        "{hint}Corral cannot convert this {what} field; it understands {}",
                        known.join(", ")
                    ),
                );
            }
        }
    }
}

/// Converts a Kubeflow job manifest into a TrainingJob, or says what cannot be converted.
pub fn convert(raw: &Value) -> Result<TrainingJob, ValidationErrors> {
    convert_with_warnings(raw).map(|(job, _)| job)
}

/// [`convert`], and what the manifest asks that Corral does not honour although Kubernetes
/// and the Kubeflow operators accept it (a gang's minimum, a scheduling timeout, metadata
/// beyond names, labels and annotations): warnings, not errors, so that a manifest that runs
/// on Kubeflow is accepted.
pub fn convert_with_warnings(
    raw: &Value,
) -> Result<(TrainingJob, Vec<FieldError>), ValidationErrors> {
    let mut c = Converter {
        errs: ValidationErrors::default(),
        warnings: Vec::new(),
    };
    let kind = raw.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = raw.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let Some(map) = kind_map(kind) else {
        let hint = did_you_mean(kind, KINDS)
            .map(|m| format!("did you mean `{m}`? "))
            .unwrap_or_default();
        c.err(
            "kind",
            format!(
                "`{kind}` ({api_version}) cannot be converted; {hint}Corral converts {}",
                KINDS.join(", ")
            ),
        );
        return Err(c.errs);
    };
    if api_version != map.api_version {
        let extra = if kind == "MPIJob" {
            " (the v1 MPIJob of the training operator is deprecated; mpi-operator's v2beta1 is the supported form)"
        } else {
            ""
        };
        c.err(
            "apiVersion",
            format!(
                "`{api_version}` is not supported for {kind}; use `{}`{extra}",
                map.api_version
            ),
        );
        return Err(c.errs);
    }
    let Some(obj) = raw.as_object() else {
        c.err("", "must be a mapping");
        return Err(c.errs);
    };
    c.only_keys(
        "",
        obj,
        &["apiVersion", "kind", "metadata", "spec", "status"],
        "top-level",
    );

    let metadata = convert_metadata(&mut c, obj.get("metadata"));
    let spec_path = "spec";
    let Some(spec) = obj.get("spec").and_then(|s| c.object(spec_path, s)) else {
        if !obj.contains_key("spec") {
            c.err("spec", "is required");
        }
        return Err(c.errs);
    };
    let mut known_spec: Vec<&str> = vec![map.specs_key, "runPolicy"];
    known_spec.extend_from_slice(map.extra_spec_keys);
    c.only_keys(spec_path, spec, &known_spec, kind);

    let mut job_spec = TrainingJobSpec {
        framework: map.framework,
        replicas: BTreeMap::new(),
        run_policy: RunPolicy::default(),
        success_policy: None,
        queue: None,
        priority_class: None,
        elastic: None,
        nproc_per_node: None,
        mpi: None,
        port: None,
    };

    // Replica specs.
    let specs_path = format!("spec.{}", map.specs_key);
    match spec.get(map.specs_key) {
        None => c.err(
            &specs_path,
            format!("is required: the replica types of the {kind}"),
        ),
        Some(v) => {
            if let Some(specs) = c.object(&specs_path, v) {
                for (rtype, rspec) in specs {
                    let rpath = format!("{specs_path}.{rtype}");
                    let lower = rtype.to_ascii_lowercase();
                    let Some(&(_, role)) = map.roles.iter().find(|(n, _)| *n == lower) else {
                        let names: Vec<&str> = map.roles.iter().map(|(n, _)| *n).collect();
                        let hint = did_you_mean(&lower, names.iter().copied())
                            .map(|m| format!("did you mean `{m}`? "))
                            .unwrap_or_default();
                        c.err(
                            &rpath,
                            format!(
                                "`{rtype}` is not a replica type of {kind}; {hint}types: {}",
                                names.join(", ")
                            ),
                        );
                        continue;
                    };
                    if job_spec.replicas.contains_key(&role) {
                        c.err(&rpath, format!("a second `{role}` replica spec (Master and Chief mean the same in TFJob); keep one"));
                        continue;
                    }
                    if let Some(r) =
                        convert_replica(&mut c, &rpath, rspec, &map, &mut job_spec.port)
                    {
                        job_spec.replicas.insert(role, Box::new(r));
                    }
                }
            }
        }
    }

    if let Some(rp) = spec.get("runPolicy") {
        convert_run_policy(&mut c, "spec.runPolicy", rp, &mut job_spec);
    }
    match kind {
        "TFJob" => {
            if let Some(sp) = spec.get("successPolicy") {
                match sp.as_str() {
                    Some("") => job_spec.success_policy = Some(SuccessPolicy::Default),
                    Some("AllWorkers") => job_spec.success_policy = Some(SuccessPolicy::AllWorkers),
                    _ => c.err(
                        "spec.successPolicy",
                        "must be \"\" (chief or worker 0) or \"AllWorkers\"",
                    ),
                }
            }
            if let Some(v) = spec.get("enableDynamicWorker")
                && c.bool("spec.enableDynamicWorker", v) == Some(true)
            {
                c.warn(
                    "spec.enableDynamicWorker",
                    "ignored: Corral admits whole gangs with a fixed cluster spec (TF_CONFIG lists every worker)",
                );
            }
        }
        "PyTorchJob" => {
            if let Some(e) = spec.get("elasticPolicy") {
                job_spec.elastic = convert_elastic(&mut c, e, &mut job_spec.nproc_per_node);
            }
            if let Some(n) = spec.get("nprocPerNode") {
                job_spec.nproc_per_node = match n {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => {
                        c.err(
                            "spec.nprocPerNode",
                            "must be `auto`, `cpu`, `gpu` or a number",
                        );
                        None
                    }
                };
            }
        }
        "MPIJob" => job_spec.mpi = Some(convert_mpi(&mut c, spec)),
        _ => {}
    }

    let warnings = c.warnings;
    c.errs.into_result().map(|()| {
        let job = TrainingJob {
            api_version: API_VERSION.to_string(),
            kind: "TrainingJob".to_string(),
            metadata,
            spec: job_spec,
            status: None,
        };
        (job, warnings)
    })
}

/// A manifest's metadata and the first container of a pod spec at `pod_path` (`name` if
/// several), converted as a Kubeflow replica's are, for another kind's conversion (KServe's
/// predictor): errors and warnings carry the manifest's own paths.
pub(crate) fn convert_pod(
    meta: Option<&Value>,
    pod_path: &str,
    pod_spec: &Value,
    name: &'static str,
) -> (
    ObjectMeta,
    Option<ReplicaSpec>,
    ValidationErrors,
    Vec<FieldError>,
) {
    let mut c = Converter {
        errs: ValidationErrors::default(),
        warnings: Vec::new(),
    };
    let metadata = convert_metadata(&mut c, meta);
    let map = KindMap {
        framework: Framework::Generic,
        api_version: "",
        specs_key: "",
        container: Some(name),
        port_name: None,
        roles: &[],
        extra_spec_keys: &[],
    };
    const AT: &str = "\u{0}pod";
    let replica = serde_json::json!({ "template": { "spec": pod_spec } });
    let spec = convert_replica(&mut c, AT, &replica, &map, &mut None);
    let place = |p: &str| p.replacen(&format!("{AT}.template.spec"), pod_path, 1);
    let mut errs = ValidationErrors::default();
    for e in c.errs.0 {
        errs.push(place(&e.path), e.message);
    }
    let warnings = c
        .warnings
        .into_iter()
        .map(|w| FieldError::new(place(&w.path), w.message))
        .collect();
    (metadata, spec, errs, warnings)
}

fn convert_metadata(c: &mut Converter, v: Option<&Value>) -> ObjectMeta {
    let mut meta = ObjectMeta::default();
    let Some(v) = v else {
        c.err("metadata.name", "is required");
        return meta;
    };
    let Some(m) = c.object("metadata", v) else {
        return meta;
    };
    for (k, val) in m {
        let path = format!("metadata.{k}");
        match k.as_str() {
            "name" => meta.name = c.string(&path, val).unwrap_or_default(),
            "namespace" => meta.namespace = c.string(&path, val),
            "labels" | "annotations" => {
                let mut out = BTreeMap::new();
                if let Some(o) = c.object(&path, val) {
                    for (lk, lv) in o {
                        if let Some(s) = c.string(&format!("{path}.{lk}"), lv) {
                            out.insert(lk.clone(), s);
                        }
                    }
                }
                if k == "labels" {
                    meta.labels = out;
                } else {
                    meta.annotations = out;
                }
            }
            "generateName" => {
                if !m.contains_key("name") {
                    c.err(&path, "Corral needs a fixed `metadata.name` (replica hostnames derive from it); set one");
                }
            }
            s if SERVER_METADATA.contains(&s) => {}
            _ => c.warn(
                &path,
                "ignored: Corral keeps name, namespace, labels and annotations",
            ),
        }
    }
    meta
}

fn convert_replica(
    c: &mut Converter,
    path: &str,
    v: &Value,
    map: &KindMap,
    port: &mut Option<u16>,
) -> Option<ReplicaSpec> {
    let obj = c.object(path, v)?;
    c.only_keys(
        path,
        obj,
        &["replicas", "restartPolicy", "template"],
        "replica spec",
    );
    let count = match obj.get("replicas") {
        Some(n) => c.u32(&format!("{path}.replicas"), n)?,
        None => 1,
    };
    let restart_policy = match obj.get("restartPolicy").map(|v| (v, v.as_str())) {
        None => None,
        Some((_, Some("Never"))) => Some(RestartPolicy::Never),
        Some((_, Some("OnFailure"))) => Some(RestartPolicy::OnFailure),
        Some((_, Some("ExitCode"))) => Some(RestartPolicy::ExitCode),
        Some((_, Some("Always"))) => Some(RestartPolicy::Always),
        Some(_) => {
            c.err(
                &format!("{path}.restartPolicy"),
                "must be one of Never, OnFailure, ExitCode, Always",
            );
            None
        }
    };
    let tpath = format!("{path}.template");
    let Some(template) = obj.get("template").and_then(|t| c.object(&tpath, t)) else {
        c.err(
            &tpath,
            "is required: the pod template with the training container",
        );
        return None;
    };
    let mut pod_template = template.clone();
    let spath = format!("{tpath}.spec");
    let Some(pod_spec) = template.get("spec").and_then(|s| c.object(&spath, s)) else {
        c.err(&spath, "is required: a pod spec with containers");
        return None;
    };
    let mut pod_spec = pod_spec.clone();
    let cpath = format!("{spath}.containers");
    let containers: Vec<Value> = match pod_spec.get("containers") {
        Some(Value::Array(cs)) if !cs.is_empty() => cs.clone(),
        _ => {
            c.err(&cpath, "needs at least one container");
            return None;
        }
    };
    let main_index = match map.container {
        None => 0,
        Some(name) => {
            let named = containers
                .iter()
                .position(|ct| ct.get("name").and_then(Value::as_str) == Some(name));
            match named {
                Some(i) => i,
                None if containers.len() == 1 => 0,
                None => {
                    c.err(
                        &cpath,
                        format!("has {} containers and none is named `{name}`; Kubeflow finds the training container by that name, so name it `{name}`", containers.len()),
                    );
                    return None;
                }
            }
        }
    };
    let main_path = format!("{cpath}[{main_index}]");
    let main = c.object(&main_path, &containers[main_index])?.clone();

    let mut template_out = ReplicaTemplate {
        image: main
            .get("image")
            .and_then(|v| c.string(&format!("{main_path}.image"), v)),
        command: main
            .get("command")
            .map(|v| c.strings(&format!("{main_path}.command"), v))
            .unwrap_or_default(),
        args: main
            .get("args")
            .map(|v| c.strings(&format!("{main_path}.args"), v))
            .unwrap_or_default(),
        env: Vec::new(),
        working_dir: main
            .get("workingDir")
            .and_then(|v| c.string(&format!("{main_path}.workingDir"), v)),
        pod_template: None,
        python: None,
    };
    if let Some(env) = main.get("env") {
        let epath = format!("{main_path}.env");
        if let Value::Array(items) = env {
            for (i, item) in items.iter().enumerate() {
                let ipath = format!("{epath}[{i}]");
                let Some(o) = c.object(&ipath, item) else {
                    continue;
                };
                c.only_keys(&ipath, o, &["name", "value", "valueFrom"], "env");
                let name = o
                    .get("name")
                    .and_then(|v| c.string(&format!("{ipath}.name"), v))
                    .unwrap_or_default();
                let value = o
                    .get("value")
                    .and_then(|v| c.string(&format!("{ipath}.value"), v));
                let value_from = o
                    .get("valueFrom")
                    .and_then(|v| c.object(&format!("{ipath}.valueFrom"), v))
                    .cloned();
                template_out.env.push(EnvVar {
                    name,
                    value,
                    value_from,
                });
            }
        } else {
            c.err(&epath, "must be a list of {name, value}");
        }
    }

    // Resources: requests are what the scheduler reserves; limits above them stay on the pod.
    let mut resources = Resources::default();
    let mut kept_limits = Map::new();
    if let Some(res) = main.get("resources") {
        let rpath = format!("{main_path}.resources");
        if let Some(res) = c.object(&rpath, res) {
            c.only_keys(&rpath, res, &["limits", "requests"], "container resources");
            let read = |c: &mut Converter, key: &str| -> BTreeMap<String, Quantity> {
                let mut out = BTreeMap::new();
                if let Some(v) = res.get(key)
                    && let Some(o) = c.object(&format!("{rpath}.{key}"), v)
                {
                    for (name, q) in o {
                        let qpath = format!("{rpath}.{key}.{name}");
                        let text = match q {
                            Value::String(s) => s.clone(),
                            Value::Number(n) => n.to_string(),
                            _ => {
                                c.err(&qpath, "must be a quantity such as 2, \"500m\" or \"16Gi\"");
                                continue;
                            }
                        };
                        match Quantity::parse(&text) {
                            Ok(q) => {
                                out.insert(name.clone(), q);
                            }
                            Err(e) => c.err(&qpath, e.to_string()),
                        }
                    }
                }
                out
            };
            let limits = read(c, "limits");
            let requests = read(c, "requests");
            let mut names: Vec<&String> = limits.keys().chain(requests.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let (req, lim) = (requests.get(name), limits.get(name));
                let Some(amount) = req.or(lim).cloned() else {
                    continue;
                };
                if let (Some(r), Some(l)) = (req, lim)
                    && r.milli().ok() != l.milli().ok()
                {
                    kept_limits.insert(name.clone(), Value::String(l.to_string()));
                }
                match name.as_str() {
                    "cpu" => resources.cpu = Some(amount),
                    "memory" => resources.memory = Some(amount),
                    "nvidia.com/gpu" => {
                        match amount.units().ok().and_then(|u| u32::try_from(u).ok()) {
                            Some(n) if amount.milli().is_ok_and(|m| m % 1000 == 0) => {
                                resources.gpu = n
                            }
                            _ => c.err(
                                &format!("{rpath}.limits.nvidia.com/gpu"),
                                "must be a whole number of GPUs",
                            ),
                        }
                    }
                    "ephemeral-storage" => {
                        kept_limits.insert(name.clone(), Value::String(amount.to_string()));
                    }
                    _ => {
                        resources.extended.insert(name.clone(), amount);
                    }
                }
            }
        }
    }

    // GPU type from the node selector that GPU feature discovery's label answers.
    if let Some(Value::Object(sel)) = pod_spec.get_mut("nodeSelector") {
        if let Some(product) = sel.remove(GPU_PRODUCT_LABEL)
            && let Some(p) = c.string(
                &format!("{spath}.nodeSelector.{GPU_PRODUCT_LABEL}"),
                &product,
            )
        {
            resources.gpu_types.push(p);
        }
        if sel.is_empty() {
            pod_spec.remove("nodeSelector");
        }
    }

    // The framework port, when the manifest sets it by Kubeflow's port name.
    if let (Some(port_name), Some(Value::Array(ports))) = (map.port_name, main.get("ports")) {
        for p in ports {
            if p.get("name").and_then(Value::as_str) == Some(port_name) {
                match p.get("containerPort").and_then(Value::as_u64).and_then(|n| u16::try_from(n).ok()) {
                    Some(n) if port.is_none_or(|old| old == n) => *port = Some(n),
                    Some(n) => c.err(
                        &format!("{main_path}.ports"),
                        format!("`{port_name}` is {n} here but {} in another replica type; Corral uses one port per job", port.unwrap_or(0)),
                    ),
                    None => c.err(&format!("{main_path}.ports"), "containerPort must be 1-65535"),
                }
            }
        }
    }

    // What stays for the Kubernetes shell: the main container less converted fields, sidecars,
    // and pod-level fields.
    let mut rest_main = main.clone();
    for f in CONVERTED_CONTAINER_FIELDS {
        rest_main.remove(*f);
    }
    if !kept_limits.is_empty() {
        rest_main.insert(
            "resources".into(),
            serde_json::json!({ "limits": kept_limits }),
        );
    }
    let mut rest_containers = containers.clone();
    let only_name = rest_main.keys().all(|k| k == "name");
    if only_name {
        rest_containers.remove(main_index);
    } else {
        rest_containers[main_index] = Value::Object(rest_main);
    }
    if rest_containers.is_empty() {
        pod_spec.remove("containers");
    } else {
        pod_spec.insert("containers".into(), Value::Array(rest_containers));
    }
    if pod_spec.is_empty() {
        pod_template.remove("spec");
    } else {
        pod_template.insert("spec".into(), Value::Object(pod_spec));
    }
    if pod_template
        .get("metadata")
        .is_some_and(|m| m.as_object().is_some_and(Map::is_empty))
    {
        pod_template.remove("metadata");
    }
    if !pod_template.is_empty() {
        template_out.pod_template = Some(pod_template);
    }

    Some(ReplicaSpec {
        count,
        resources,
        template: template_out,
        restart_policy,
    })
}

fn convert_run_policy(c: &mut Converter, path: &str, v: &Value, spec: &mut TrainingJobSpec) {
    let Some(rp) = c.object(path, v) else { return };
    c.only_keys(
        path,
        rp,
        &[
            "cleanPodPolicy",
            "ttlSecondsAfterFinished",
            "activeDeadlineSeconds",
            "backoffLimit",
            "suspend",
            "schedulingPolicy",
            "managedBy",
        ],
        "runPolicy",
    );
    let out = &mut spec.run_policy;
    for (k, val) in rp {
        let p = format!("{path}.{k}");
        match k.as_str() {
            "cleanPodPolicy" => {
                out.clean_pod_policy = match val.as_str() {
                    Some("None") => Some(CleanPodPolicy::None),
                    Some("Running") => Some(CleanPodPolicy::Running),
                    Some("All") => Some(CleanPodPolicy::All),
                    _ => {
                        c.err(&p, "must be None, Running or All");
                        None
                    }
                }
            }
            "ttlSecondsAfterFinished" => out.ttl_seconds_after_finished = c.u64(&p, val),
            "activeDeadlineSeconds" => out.active_deadline_seconds = c.u64(&p, val),
            "backoffLimit" => out.backoff_limit = c.u32(&p, val),
            "suspend" => out.suspend = c.bool(&p, val).unwrap_or(false),
            "managedBy" if val.as_str() != Some("kubeflow.org/training-operator") => {
                c.err(
                    &p,
                    "names another controller; Corral cannot take over a job managed elsewhere",
                );
            }
            "schedulingPolicy" => {
                let Some(sp) = c.object(&p, val) else {
                    continue;
                };
                c.only_keys(
                    &p,
                    sp,
                    &[
                        "queue",
                        "priorityClass",
                        "minAvailable",
                        "minResources",
                        "scheduleTimeoutSeconds",
                    ],
                    "schedulingPolicy",
                );
                if let Some(q) = sp.get("queue") {
                    spec.queue = c.string(&format!("{p}.queue"), q);
                }
                if let Some(pc) = sp.get("priorityClass") {
                    spec.priority_class = c.string(&format!("{p}.priorityClass"), pc);
                }
                if let Some(m) = sp.get("minAvailable") {
                    let total: u64 = spec.replicas.values().map(|r| u64::from(r.count)).sum();
                    if let Some(m) = c.u64(&format!("{p}.minAvailable"), m)
                        && m != total
                        && spec.framework != Framework::PyTorch
                    {
                        c.warn(
                            &format!("{p}.minAvailable"),
                            format!("ignored: Corral admits whole gangs, so all {total} replicas start together, not {m}; for a job that runs with fewer, use a PyTorchJob with elasticPolicy"),
                        );
                    }
                }
                if sp.contains_key("minResources") {
                    c.warn(
                        &format!("{p}.minResources"),
                        "ignored: Corral computes a gang's resources from its replicas",
                    );
                }
                if sp.contains_key("scheduleTimeoutSeconds") {
                    c.warn(&format!("{p}.scheduleTimeoutSeconds"), "ignored: a Corral job waits in its queue until admitted; runPolicy.activeDeadlineSeconds bounds its run");
                }
            }
            _ => {}
        }
    }
}

fn convert_elastic(
    c: &mut Converter,
    v: &Value,
    nproc: &mut Option<String>,
) -> Option<ElasticPolicy> {
    let path = "spec.elasticPolicy";
    let ep = c.object(path, v)?;
    c.only_keys(
        path,
        ep,
        &[
            "minReplicas",
            "maxReplicas",
            "rdzvBackend",
            "rdzvPort",
            "rdzvHost",
            "rdzvId",
            "rdzvConf",
            "standalone",
            "nProcPerNode",
            "maxRestarts",
            "metrics",
        ],
        "elasticPolicy",
    );
    let mut out = ElasticPolicy::default();
    for (k, val) in ep {
        let p = format!("{path}.{k}");
        match k.as_str() {
            "minReplicas" => out.min_replicas = c.u32(&p, val),
            "maxReplicas" => out.max_replicas = c.u32(&p, val),
            "rdzvBackend" => out.rdzv_backend = c.string(&p, val),
            "rdzvPort" => out.rdzv_port = c.u32(&p, val).and_then(|n| u16::try_from(n).ok()),
            "rdzvHost" => out.rdzv_host = c.string(&p, val),
            "rdzvId" => out.rdzv_id = c.string(&p, val),
            "standalone" => out.standalone = c.bool(&p, val),
            "maxRestarts" => out.max_restarts = c.u32(&p, val),
            "nProcPerNode" => *nproc = c.u32(&p, val).map(|n| n.to_string()),
            "rdzvConf" => {
                if let Value::Array(items) = val {
                    for (i, item) in items.iter().enumerate() {
                        let key = item.get("key").and_then(Value::as_str);
                        let value = item.get("value").and_then(Value::as_str);
                        match (key, value) {
                            (Some(k), Some(v)) => {
                                out.rdzv_conf.insert(k.to_string(), v.to_string());
                            }
                            _ => c.err(&format!("{p}[{i}]"), "must be {key: string, value: string}"),
                        }
                    }
                } else {
                    c.err(&p, "must be a list of {key, value}");
                }
            }
            "metrics" => c.warn(&p, "ignored: Corral does not autoscale on metrics (HPA); it resizes elastic jobs between minReplicas and maxReplicas as capacity allows"),
            _ => {}
        }
    }
    Some(out)
}

fn convert_mpi(c: &mut Converter, spec: &Map<String, Value>) -> MpiOptions {
    let mut out = MpiOptions::default();
    if let Some(v) = spec.get("slotsPerWorker") {
        out.slots_per_worker = c.u32("spec.slotsPerWorker", v);
    }
    if let Some(v) = spec.get("runLauncherAsWorker") {
        out.run_launcher_as_worker = c.bool("spec.runLauncherAsWorker", v).unwrap_or(false);
    }
    if let Some(v) = spec.get("sshAuthMountPath") {
        out.ssh_auth_mount_path = c.string("spec.sshAuthMountPath", v);
    }
    if let Some(v) = spec.get("launcherCreationPolicy") {
        out.launcher_creation_policy = match v.as_str() {
            Some("AtStartup") => Some(LauncherCreationPolicy::AtStartup),
            Some("WaitForWorkersReady") => Some(LauncherCreationPolicy::WaitForWorkersReady),
            _ => {
                c.err(
                    "spec.launcherCreationPolicy",
                    "must be AtStartup or WaitForWorkersReady",
                );
                None
            }
        };
    }
    if let Some(v) = spec.get("mpiImplementation") {
        out.implementation = match v.as_str() {
            Some("OpenMPI") => Some(MpiImplementation::OpenMPI),
            Some("Intel") => Some(MpiImplementation::Intel),
            Some("MPICH") => Some(MpiImplementation::Mpich),
            _ => {
                c.err("spec.mpiImplementation", "must be OpenMPI, Intel or MPICH");
                None
            }
        };
    }
    out
}
