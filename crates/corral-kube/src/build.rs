//! Build: a TrainingJob, the placement of one replica and the launch contract become the
//! job's headless Service, its launch-file ConfigMap (MPI hostfile) and the replica Pods.
//! Pure: no client, no clock; golden-tested from YAML fixtures.
//!
//! Pods are built as JSON first (the user's `template.podTemplate` is passed through as
//! JSON), then decoded into k8s-openapi's `Pod`, so that a pod template Kubernetes would
//! reject is reported here, with the field, instead of failing at the API server.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value, json};

use corral_api::training_job::{Framework, ReplicaSpec, TrainingJob};
use corral_core::launch::{self, Addresses, LaunchOptions};
use corral_core::lifecycle::{Incarnation, ReplicaId};
use corral_core::sched::ReplicaPlacement;

use crate::consts::*;

/// What the build needs beyond the job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// Appended to replica host names (`<job>-<role>-<i>.<job>.<ns>.svc.<domain>`), as
    /// Kubeflow's CUSTOM_CLUSTER_DOMAIN.
    pub cluster_domain: Option<String>,
    /// Where replicas send their progress (`--progress-url`): each gets it with a token
    /// projected for it ([`crate::progress`]). None: replicas are not told.
    pub progress_url: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The job has no uid yet (it was not read from the API server).
    NoUid,
    /// A name Kubernetes would reject as a host name, Service name or label.
    InvalidName(String),
    NoImage(String),
    Launch(String),
    /// `template.podTemplate` does not decode as a Kubernetes pod template.
    PodTemplate(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::NoUid => f.write_str("the job has no uid"),
            BuildError::InvalidName(m) => f.write_str(m),
            BuildError::NoImage(r) => write!(
                f,
                "spec.replicas.{r}.template.image is required on Kubernetes"
            ),
            BuildError::Launch(m) => write!(f, "launch contract: {m}"),
            BuildError::PodTemplate(m) => write!(f, "template.podTemplate: {m}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// A DNS-1123 label (host names, the Service's name is additionally DNS-1035: a letter
/// first).
fn check_label(what: &str, s: &str, letter_first: bool) -> Result<(), BuildError> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
        && (!letter_first || s.as_bytes()[0].is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        let first = if letter_first {
            ", starting with a letter"
        } else {
            ""
        };
        Err(BuildError::InvalidName(format!(
            "{what} `{s}` must be at most 63 lowercase letters, digits and '-'{first}, so that `<job>-<role>-<i>.<job>.<ns>.svc` resolves"
        )))
    }
}

fn owner_reference(job: &TrainingJob) -> Result<OwnerReference, BuildError> {
    let uid = job.metadata.uid.clone().ok_or(BuildError::NoUid)?;
    Ok(OwnerReference {
        api_version: corral_api::API_VERSION.to_string(),
        kind: "TrainingJob".to_string(),
        name: job.metadata.name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The volume of the token replicas report progress with.
const PROGRESS_VOLUME: &str = "corral-progress";

fn job_port(job: &TrainingJob) -> Option<u16> {
    job.spec.port.or(job.spec.framework.default_port())
}

fn base_labels(job: &TrainingJob) -> BTreeMap<String, String> {
    BTreeMap::from([(JOB_NAME_LABEL.to_string(), job.metadata.name.clone())])
}

/// The job's headless Service: `<job>.<ns>.svc`, so that every replica pod (hostname
/// `<job>-<role>-<i>`, subdomain `<job>`) resolves as `<job>-<role>-<i>.<job>.<ns>.svc`.
/// Addresses are published before pods are ready: rendezvous happens before readiness.
pub fn build_service(job: &TrainingJob) -> Result<Service, BuildError> {
    check_label("job name", &job.metadata.name, true)?;
    let mut spec = json!({
        "clusterIP": "None",
        "selector": base_labels(job),
        "publishNotReadyAddresses": true,
    });
    if let Some(port) = job_port(job) {
        spec["ports"] =
            json!([{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}]);
    }
    let meta = ObjectMeta {
        name: Some(job.metadata.name.clone()),
        namespace: Some(job.metadata.namespace_or_default().to_string()),
        labels: Some(base_labels(job)),
        owner_references: Some(vec![owner_reference(job)?]),
        ..Default::default()
    };
    let spec = serde_json::from_value(spec).map_err(|e| BuildError::PodTemplate(e.to_string()))?;
    Ok(Service {
        metadata: meta,
        spec: Some(spec),
        status: None,
    })
}

/// The name of the ConfigMap with a job's launch files.
pub fn config_map_name(job: &str) -> String {
    format!("{job}-launch")
}

/// Launch files (the MPI hostfile) of a job, as one ConfigMap mounted where the contract
/// says; `None` for frameworks without files.
pub fn build_config_map(
    job: &TrainingJob,
    opts: &BuildOptions,
) -> Result<Option<ConfigMap>, BuildError> {
    let files = launch_files(job, opts)?;
    if files.is_empty() {
        return Ok(None);
    }
    let data: BTreeMap<String, String> = files
        .into_iter()
        .map(|f| (file_key(&f.path), f.contents))
        .collect();
    Ok(Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&job.metadata.name)),
            namespace: Some(job.metadata.namespace_or_default().to_string()),
            labels: Some(base_labels(job)),
            owner_references: Some(vec![owner_reference(job)?]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }))
}

/// Where an MPI job's ssh keys are mounted in the launcher and every worker: the job's
/// `mpi.sshAuthMountPath`, else `/root/.ssh` (Kubeflow's MPI operator v2 mounts them for
/// every MPIJob, so that `mpirun` reaches the workers over ssh); `None` for other frameworks.
pub fn ssh_mount_path(job: &TrainingJob) -> Option<&str> {
    (job.spec.framework == Framework::Mpi).then(|| {
        job.spec
            .mpi
            .as_ref()
            .and_then(|m| m.ssh_auth_mount_path.as_deref())
            .unwrap_or(SSH_DEFAULT_MOUNT_PATH)
    })
}

/// The name of an MPI job's ssh key Secret, `<job>-ssh` (as Kubeflow's MPI operator).
pub fn ssh_secret_name(job: &str) -> String {
    format!("{job}-ssh")
}

/// An MPI job's ssh key Secret, laid out as Kubeflow's MPI operator v2 does: type
/// `kubernetes.io/ssh-auth`, immutable, owned by the job, `ssh-privatekey` and
/// `ssh-publickey` (OpenSSH formats, [`with_ssh_keys`]). The key pair is the shell's to
/// generate (randomness is I/O), once, when it creates the Secret: building stays pure.
pub fn build_ssh_secret(job: &TrainingJob) -> Result<Secret, BuildError> {
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(ssh_secret_name(&job.metadata.name)),
            namespace: Some(job.metadata.namespace_or_default().to_string()),
            labels: Some(base_labels(job)),
            owner_references: Some(vec![owner_reference(job)?]),
            ..Default::default()
        },
        type_: Some("kubernetes.io/ssh-auth".into()),
        immutable: Some(true),
        ..Default::default()
    })
}

/// The Secret with its key pair: the private key file and the `authorized_keys` line.
pub fn with_ssh_keys(mut secret: Secret, private_openssh: &str, public_openssh: &str) -> Secret {
    secret.string_data = Some(BTreeMap::from([
        (SSH_PRIVATE_KEY.to_string(), private_openssh.to_string()),
        (SSH_PUBLIC_KEY.to_string(), public_openssh.to_string()),
    ]));
    secret
}

fn file_key(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// Every launch file of the job (over all replicas, deduplicated by path).
fn launch_files(
    job: &TrainingJob,
    opts: &BuildOptions,
) -> Result<Vec<launch::LaunchFile>, BuildError> {
    let addresses = Addresses::kubernetes(job, opts.cluster_domain.as_deref());
    let mut out: Vec<launch::LaunchFile> = Vec::new();
    for (role, spec) in &job.spec.replicas {
        if spec.count == 0 {
            continue;
        }
        let l = launch::replica_env(
            job,
            ReplicaId::new(*role, 0),
            &addresses,
            &LaunchOptions::default(),
        )
        .map_err(|e| BuildError::Launch(e.to_string()))?;
        for f in l.files {
            if !out.iter().any(|o| o.path == f.path) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

fn main_container_name(framework: Framework) -> &'static str {
    match framework {
        Framework::PyTorch => "pytorch",
        Framework::TensorFlow => "tensorflow",
        Framework::XGBoost => "xgboost",
        Framework::Jax => "jax",
        Framework::Mpi => "mpi",
        Framework::Generic => "main",
    }
}

fn resources_json(spec: &ReplicaSpec, kept: Option<&Value>) -> Value {
    // Corral's resources are reserved and enforced: requests and limits are equal.
    let mut amounts = Map::new();
    let r = &spec.resources;
    if let Some(cpu) = &r.cpu {
        amounts.insert("cpu".into(), json!(cpu.as_str()));
    }
    if let Some(m) = &r.memory {
        amounts.insert("memory".into(), json!(m.as_str()));
    }
    if r.gpu > 0 {
        amounts.insert(GPU_RESOURCE.into(), json!(r.gpu.to_string()));
    }
    for (name, q) in &r.extended {
        amounts.insert(name.clone(), json!(q.as_str()));
    }
    let mut requests = amounts.clone();
    let mut limits = amounts;
    // What the pod template keeps (ephemeral-storage, ...) adds to Corral's own.
    if let Some(Value::Object(kept)) = kept {
        for (key, target) in [("requests", &mut requests), ("limits", &mut limits)] {
            if let Some(Value::Object(m)) = kept.get(key) {
                for (k, v) in m {
                    target.entry(k.clone()).or_insert(v.clone());
                }
            }
        }
    }
    let mut out = Map::new();
    if !requests.is_empty() {
        out.insert("requests".into(), Value::Object(requests));
    }
    if !limits.is_empty() {
        out.insert("limits".into(), Value::Object(limits));
    }
    Value::Object(out)
}

/// One replica pod of the current incarnation, for the node the scheduler chose. The pod
/// carries `schedulerName: corral` and no `nodeName`: Corral binds it through the Binding
/// subresource once the whole gang exists and fits.
pub fn build_pod(
    job: &TrainingJob,
    replica: ReplicaId,
    incarnation: Incarnation,
    placement: &ReplicaPlacement,
    opts: &BuildOptions,
) -> Result<Pod, BuildError> {
    let job_name = job.metadata.name.as_str();
    let ns = job.metadata.namespace_or_default();
    check_label("job name", job_name, true)?;
    let pod_name = replica.name(job_name);
    check_label("replica name", &pod_name, false)?;
    let spec = job
        .spec
        .replicas
        .get(&replica.role)
        .ok_or_else(|| BuildError::Launch(format!("the job has no role {}", replica.role)))?;
    let image = spec
        .template
        .image
        .clone()
        .ok_or_else(|| BuildError::NoImage(replica.role.to_string()))?;
    let addresses = Addresses::kubernetes(job, opts.cluster_domain.as_deref());
    let launch = launch::replica_env(job, replica, &addresses, &LaunchOptions::default())
        .map_err(|e| BuildError::Launch(e.to_string()))?;

    let template = spec.template.pod_template.clone().unwrap_or_default();
    let mut pod_spec = match template.get("spec") {
        Some(Value::Object(s)) => s.clone(),
        Some(_) => return Err(BuildError::PodTemplate("spec must be an object".into())),
        None => Map::new(),
    };
    let template_meta = match template.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };

    // The main container: what the pod template kept of it (a container without an image),
    // completed from the replica template and the launch contract. Other containers are
    // sidecars, passed through.
    let containers = match pod_spec.remove("containers") {
        Some(Value::Array(c)) => c,
        Some(_) => {
            return Err(BuildError::PodTemplate(
                "spec.containers must be a list".into(),
            ));
        }
        None => Vec::new(),
    };
    let main_at = containers.iter().position(|c| c.get("image").is_none());
    let mut main = match main_at {
        Some(i) => match &containers[i] {
            Value::Object(m) => m.clone(),
            _ => {
                return Err(BuildError::PodTemplate(
                    "spec.containers entries must be objects".into(),
                ));
            }
        },
        None => Map::new(),
    };
    main.entry("name")
        .or_insert_with(|| json!(main_container_name(job.spec.framework)));
    main.insert("image".into(), json!(image));
    if !spec.template.command.is_empty() {
        main.insert("command".into(), json!(spec.template.command));
    }
    if !spec.template.args.is_empty() {
        main.insert("args".into(), json!(spec.template.args));
    }
    if let Some(wd) = &spec.template.working_dir {
        main.insert("workingDir".into(), json!(wd));
    }
    let mut launch = launch;
    if let Some(url) = &opts.progress_url {
        use crate::progress::{TOKEN_DIR, TOKEN_FILE, TOKEN_FILE_ENV, URL_ENV};
        launch
            .env
            .push(corral_api::training_job::EnvVar::literal(URL_ENV, url));
        launch.env.push(corral_api::training_job::EnvVar::literal(
            TOKEN_FILE_ENV,
            &format!("{TOKEN_DIR}/{TOKEN_FILE}"),
        ));
    }
    let env: Vec<Value> = launch
        .env
        .iter()
        .map(|v| {
            let mut e = Map::new();
            e.insert("name".into(), json!(v.name));
            if let Some(value) = &v.value {
                e.insert("value".into(), json!(value));
            }
            if let Some(from) = &v.value_from {
                e.insert("valueFrom".into(), Value::Object(from.clone()));
            }
            Value::Object(e)
        })
        .collect();
    if !env.is_empty() {
        main.insert("env".into(), Value::Array(env));
    }
    let resources = resources_json(spec, main.get("resources"));
    main.insert("resources".into(), resources);
    if let Some(port) = job_port(job) {
        let ports = main
            .entry("ports")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(ports) = ports
            && !ports
                .iter()
                .any(|p| p.get("containerPort").and_then(Value::as_u64) == Some(u64::from(port)))
        {
            ports.push(json!({"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}));
        }
        // A probe without a port checks the port Corral gave the replica, as Knative fills
        // it for KServe's predictors (whose probes name none): Kubernetes refuses the pod.
        for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
            for handler in ["httpGet", "tcpSocket", "grpc"] {
                if let Some(Value::Object(h)) = main.get_mut(probe).and_then(|p| p.get_mut(handler))
                {
                    h.entry("port").or_insert_with(|| json!(port));
                }
            }
        }
    }
    let mut files_mounted = false;
    let ssh = ssh_mount_path(job);
    let progress = opts.progress_url.is_some();
    if !launch.files.is_empty() || ssh.is_some() || progress {
        let mut mounts: Vec<Value> = match main.remove("volumeMounts") {
            Some(Value::Array(m)) => m,
            _ => Vec::new(),
        };
        for f in &launch.files {
            mounts.push(json!({
                "name": "corral-launch",
                "mountPath": f.path,
                "subPath": file_key(&f.path),
                "readOnly": true,
            }));
        }
        if let Some(path) = ssh {
            mounts.push(json!({"name": SSH_VOLUME, "mountPath": path}));
        }
        if progress {
            mounts.push(
                json!({"name": PROGRESS_VOLUME, "mountPath": crate::progress::TOKEN_DIR,
                               "readOnly": true}),
            );
        }
        main.insert("volumeMounts".into(), Value::Array(mounts));
        files_mounted = !launch.files.is_empty();
    }
    let mut all_containers = vec![Value::Object(main)];
    for (i, c) in containers.into_iter().enumerate() {
        if Some(i) != main_at {
            all_containers.push(c);
        }
    }
    pod_spec.insert("containers".into(), Value::Array(all_containers));
    if files_mounted || ssh.is_some() || progress {
        let mut volumes: Vec<Value> = match pod_spec.remove("volumes") {
            Some(Value::Array(v)) => v,
            _ => Vec::new(),
        };
        if files_mounted {
            volumes.push(json!({
                "name": "corral-launch",
                "configMap": {"name": config_map_name(job_name), "defaultMode": 0o444},
            }));
        }
        if ssh.is_some() {
            // The private key, its public half and authorized_keys, readable by the
            // owner only (sshd refuses looser modes).
            volumes.push(json!({
                "name": SSH_VOLUME,
                "secret": {
                    "secretName": ssh_secret_name(job_name),
                    "defaultMode": 0o600,
                    "items": [
                        {"key": SSH_PRIVATE_KEY, "path": "id_rsa"},
                        {"key": SSH_PUBLIC_KEY, "path": "id_rsa.pub"},
                        {"key": SSH_PUBLIC_KEY, "path": "authorized_keys"},
                    ],
                },
            }));
        }
        if progress {
            // Bound to this pod, for the operator alone, renewed by the kubelet.
            volumes.push(json!({
                "name": PROGRESS_VOLUME,
                "projected": {"sources": [{"serviceAccountToken": {
                    "audience": crate::progress::AUDIENCE,
                    "expirationSeconds": crate::progress::TOKEN_SECONDS,
                    "path": crate::progress::TOKEN_FILE,
                }}]},
            }));
        }
        pod_spec.insert("volumes".into(), Value::Array(volumes));
    }
    pod_spec.insert("hostname".into(), json!(pod_name));
    pod_spec.insert("subdomain".into(), json!(job_name));
    pod_spec.insert("schedulerName".into(), json!(SCHEDULER_NAME));
    // Corral decides restarts (the lifecycle, counted durably in the job's status).
    pod_spec.insert("restartPolicy".into(), json!("Never"));
    pod_spec.remove("nodeName");

    let mut labels: Map<String, Value> = match template_meta.get("labels") {
        Some(Value::Object(l)) => l.clone(),
        _ => Map::new(),
    };
    labels.insert(JOB_NAME_LABEL.into(), json!(job_name));
    labels.insert(ROLE_LABEL.into(), json!(replica.role.as_str()));
    labels.insert(INDEX_LABEL.into(), json!(replica.index.to_string()));
    labels.insert(INCARNATION_LABEL.into(), json!(incarnation.to_string()));
    let mut annotations: Map<String, Value> = match template_meta.get("annotations") {
        Some(Value::Object(a)) => a.clone(),
        _ => Map::new(),
    };
    annotations.insert(NODE_ANNOTATION.into(), json!(placement.node));

    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)?],
        },
        "spec": pod_spec,
    });
    serde_json::from_value(pod).map_err(|e| BuildError::PodTemplate(e.to_string()))
}
