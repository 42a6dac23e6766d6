//! Where the pods around pipelines find artifacts: the namespace's PersistentVolumeClaim
//! (every pod mounts it), or an object store (`--artifact-store`): then each pod has its own
//! empty volume at the same mount, filled before its main container starts and, for a
//! step's outputs, uploaded by a sidecar once it ended (`corral artifacts prepare|upload
//! --store`, in the operator's image). Either way a step sees its artifacts at the same
//! paths, under [`ARTIFACTS_MOUNT`].

use serde_json::{Map, Value, json};

use super::{ARTIFACTS_MOUNT, ARTIFACTS_VOLUME};

/// Where a namespace's pipeline artifacts are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArtifactLocation {
    /// The PersistentVolumeClaim of this name in each namespace (ReadWriteMany).
    Claim(String),
    /// An object store (`s3://BUCKET/PREFIX`); each namespace's artifacts under
    /// `<url>/<namespace>`, reached with the credentials in that namespace's Secret of
    /// this name (its keys as the AWS tools read them: `AWS_ACCESS_KEY_ID`, ...).
    Store { url: String, secret: String },
}

/// The Secret, in each namespace, that holds its credentials for the artifact store.
pub const DEFAULT_STORE_SECRET: &str = "corral-artifact-store";

/// The operator's `--artifact-store`, checked when the operator starts: an `s3://` URL (a
/// pod can reach nothing else; S3-compatible stores such as MinIO by `AWS_ENDPOINT` in the
/// Secret).
pub fn store_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("`{url}`: valid: s3://BUCKET or s3://BUCKET/PREFIX"))?;
    if rest.trim_matches('/').is_empty() {
        return Err(format!("`{url}` names no bucket: s3://BUCKET[/PREFIX]"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

impl ArtifactLocation {
    /// The store (a URL [`store_url`] took) when there is one, else the claim.
    pub fn new(claim: &str, store: Option<&str>, secret: &str) -> Self {
        match store {
            Some(url) => Self::Store {
                url: url.to_string(),
                secret: secret.to_string(),
            },
            None => Self::Claim(claim.to_string()),
        }
    }

    /// The namespace's root in the store, as `corral artifacts --store` takes it.
    fn root(url: &str, namespace: &str) -> String {
        format!("{url}/{namespace}")
    }
}

/// What the operator's own containers in tenants' pods run with: what Kubernetes'
/// `restricted` Pod Security Standard asks of a container, so that a namespace enforcing
/// it takes them.
pub(crate) fn restricted_container() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

fn tool_resources() -> Value {
    json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}})
}

/// An artifact pod's volumes, mounts, the `--store` its command takes and its environment
/// (the store's credentials), by where the artifacts are.
pub(crate) struct ToolPod {
    pub volumes: Vec<Value>,
    pub mounts: Vec<Value>,
    pub args: Vec<String>,
    pub env_from: Vec<Value>,
}

/// What a pod of the operator's image that hashes or reads a namespace's artifacts needs.
pub(crate) fn tool_pod(location: &ArtifactLocation, namespace: &str) -> ToolPod {
    match location {
        ArtifactLocation::Claim(claim) => ToolPod {
            volumes: vec![claim_volume(claim, false)],
            mounts: vec![
                json!({"name": ARTIFACTS_VOLUME, "mountPath": ARTIFACTS_MOUNT, "readOnly": true}),
            ],
            args: Vec::new(),
            env_from: Vec::new(),
        },
        ArtifactLocation::Store { url, secret } => ToolPod {
            volumes: Vec::new(),
            mounts: Vec::new(),
            args: vec!["--store".into(), ArtifactLocation::root(url, namespace)],
            env_from: vec![json!({"secretRef": {"name": secret}})],
        },
    }
}

/// A pod template's JSON given the artifacts a step reads (`inputs`, paths under
/// [`ARTIFACTS_MOUNT`]) and writes (`outputs`, made empty before it starts), in its main
/// container (the one without an image, as the pod build reads it). `read_only`: a served
/// model's replica, which only reads.
pub(crate) fn mount_artifacts(
    template: &mut Map<String, Value>,
    location: &ArtifactLocation,
    tools_image: &str,
    namespace: &str,
    inputs: &[String],
    outputs: &[String],
) {
    let read_only = outputs.is_empty();
    let spec = template
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(spec) = spec else {
        return;
    };
    let volume = match location {
        ArtifactLocation::Claim(claim) => claim_volume(claim, read_only),
        // The pod's own: what the step reads is fetched into it.
        ArtifactLocation::Store { .. } => json!({"name": ARTIFACTS_VOLUME, "emptyDir": {}}),
    };
    push(spec, "volumes", volume);
    let mut mount = json!({"name": ARTIFACTS_VOLUME, "mountPath": ARTIFACTS_MOUNT});
    if read_only {
        mount["readOnly"] = json!(true);
    }
    let containers = spec.entry("containers").or_insert_with(|| json!([]));
    if let Some(list) = containers.as_array_mut() {
        let main = match list.iter().position(|c| c.get("image").is_none()) {
            Some(i) => i,
            None => {
                list.push(json!({}));
                list.len() - 1
            }
        };
        if let Some(c) = list[main].as_object_mut() {
            push(c, "volumeMounts", mount);
        }
    }
    // As the step's own user (the pod's): its outputs are its to write.
    let tool = |name: &str, command: Vec<String>, env_from: &[Value]| {
        let mut c = json!({
            "name": name,
            "securityContext": restricted_container(),
            "image": tools_image,
            "command": command,
            "volumeMounts": [{"name": ARTIFACTS_VOLUME, "mountPath": ARTIFACTS_MOUNT}],
            "resources": tool_resources(),
        });
        if !env_from.is_empty() {
            c["envFrom"] = json!(env_from);
        }
        c
    };
    let base = |verb: &str| vec!["corral".to_string(), "artifacts".into(), verb.into()];
    match location {
        ArtifactLocation::Claim(_) => {
            if !outputs.is_empty() {
                let mut command = base("prepare");
                command.extend(outputs.iter().cloned());
                push(spec, "initContainers", tool("corral-outputs", command, &[]));
            }
        }
        ArtifactLocation::Store { url, secret } => {
            let root = ArtifactLocation::root(url, namespace);
            let env_from = [json!({"secretRef": {"name": secret}})];
            let mut command = base("prepare");
            command.extend(["--store".to_string(), root.clone()]);
            for i in inputs {
                command.extend(["--input".to_string(), i.clone()]);
            }
            command.extend(outputs.iter().cloned());
            push(
                spec,
                "initContainers",
                tool("corral-artifacts", command, &env_from),
            );
            if !outputs.is_empty() {
                let mut command = base("upload");
                command.extend(["--store".to_string(), root]);
                command.extend(outputs.iter().cloned());
                // A sidecar (Kubernetes >= 1.29): it runs beside the step and is stopped
                // once the step's containers ended, which is when it uploads; the pod ends
                // when it has.
                let mut sidecar = tool("corral-upload", command, &env_from);
                sidecar["restartPolicy"] = json!("Always");
                push(spec, "initContainers", sidecar);
            }
        }
    }
}

/// The namespace's claim as a pod's volume (read-only for a pod that only reads, where
/// the kubelet then mounts it so).
fn claim_volume(claim: &str, read_only: bool) -> Value {
    let mut v = json!({"name": ARTIFACTS_VOLUME, "persistentVolumeClaim": {"claimName": claim}});
    if read_only {
        v["persistentVolumeClaim"]["readOnly"] = json!(true);
    }
    v
}

/// Each artifact path an input stands for: one, or a fan-out's collected outputs (the JSON
/// list of their paths that the core makes their record's path).
pub(crate) fn input_paths(path: &str) -> Vec<String> {
    if path.starts_with('[')
        && let Ok(list) = serde_json::from_str::<Vec<String>>(path)
    {
        return list;
    }
    vec![path.to_string()]
}

pub(crate) fn push(obj: &mut Map<String, Value>, key: &str, item: Value) {
    match obj.get_mut(key).and_then(Value::as_array_mut) {
        Some(list) => list.push(item),
        None => {
            obj.insert(key.into(), json!([item]));
        }
    }
}
