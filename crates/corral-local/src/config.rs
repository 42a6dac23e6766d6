//! `corral.yaml`: what the embedded cluster is told beyond what it discovers.
//!
//! The file is a multi-document YAML (or JSON) stream. Documents of the Corral kinds
//! `NodePool`, `Queue` and `JobPriorityClass` declare the cluster's pools, queues and priority
//! classes exactly as on Kubernetes. One optional document of `kind: CorralConfig` holds the
//! embedded cluster's own settings:
//!
//! ```yaml
//! apiVersion: corral.dev/v1alpha1
//! kind: CorralConfig
//! ports: {min: 29500, max: 29999}      # ports handed to replicas
//! tokens:                               # API tokens; no namespace: every namespace
//!   - {token: s3cret, namespace: team-a, name: alice}   # name: who the audit trail says
//!   - {token: admin-token}              #   (default: token #<n>, its place in the list)
//! node:                                 # overrides of what the machine reports
//!   gpus: 2                             # pretend the machine has 2 GPUs (tests, demos)
//!   gpuType: FAKE-GPU
//!   cpu: "8"
//!   memory: 16Gi
//!   extended: {rdma/hca: 1}             # extra countable resources
//! gracePeriodSeconds: 30                # SIGTERM -> SIGKILL on every stop (preemption,
//!                                       # suspend, restart, delete) of jobs whose pod
//!                                       # template sets no terminationGracePeriodSeconds
//! preemptionProtectionSeconds: 300      # a job admitted less long ago is not preempted;
//!                                       # a job waiting for it says until when
//! resizeDwellSeconds: 60                # an elastic job is resized at most once in this
//!                                       # long (docs/elastic.md)
//! passEnv: [HTTPS_PROXY]                # server variables replicas may see; otherwise a
//!                                       # replica sees only PATH, LANG, HOME and TMPDIR
//!                                       # (its own), the launch contract and its job's env
//! cgroupRoot: corral                    # cgroup v2: where replica cgroups go (relative to
//!                                       # the cgroup2 mount, or absolute); default: below
//!                                       # the server's own cgroup, else <mount>/corral
//! containers:                           # replicas whose template names an `image`
//!   runtime: auto                       # auto (podman, else docker, else none), podman,
//!                                       # docker, a path to either, or none
//!   ociRuntime: runc                    # podman --runtime; default: runc on hosts without
//!                                       # the unified cgroup v2 hierarchy, else podman's own
//!   withoutRuntime: host                # a job with an image and no runtime here: `host`
//!                                       # runs its command on the host (a Warning event
//!                                       # says the image is not used), `reject` refuses it
//!                                       # at submit
//! codeSnapshots:                        # `corral submit --code DIR`
//!   maxBytes: 104857600                 # largest snapshot, files' bytes (default 100 MiB)
//! artifacts:                            # pipeline steps' outputs (docs/pipelines.md)
//!   retentionSeconds: 2592000           # a deleted run's artifacts that no run reuses and
//!                                       # no served model serves go once this old
//!                                       # (default 30 days)
//!   jobOutputRetentionSeconds: 86400    # a job's output ($CORRAL_OUTPUT_DIR) stays this
//!                                       # long after its job and the models serving from
//!                                       # it are gone (default 1 day; 0: at once)
//! tenants:                              # when the server runs as root, each namespace's
//!   uidRange: {start: 1879048192, count: 65536}   # replicas run as a uid (and gid) of
//!                                       # their own from this range (the default shown);
//!                                       # see corral_core::tenancy for the mapping
//! ```
//!
//! The file holds every namespace's token: when it has tokens it must be readable by the
//! server's user alone (`chmod 600`); a root server refuses a looser one.

use std::collections::BTreeMap;
use std::path::Path;

use corral_api::document::{Document, parse_documents, raw_documents};
use corral_api::validate::ValidationContext;
use corral_api::{JobPriorityClass, NodePool, Quantity, Queue};
use serde::{Deserialize, Serialize};

/// The kind of the settings document.
pub const CONFIG_KIND: &str = "CorralConfig";

/// Default range of ports handed to replicas (inclusive).
pub const DEFAULT_PORT_RANGE: PortRange = PortRange {
    min: 29500,
    max: 30499,
};

/// Why the configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// An inclusive range of TCP ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PortRange {
    pub min: u16,
    pub max: u16,
}

impl Default for PortRange {
    fn default() -> Self {
        DEFAULT_PORT_RANGE
    }
}

/// An API token and the namespace it may act in (`None`: every namespace).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiToken {
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Who holds it, as the audit trail names them (`alice`); default `token #<n>`, its
    /// place in the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// What to believe about this machine instead of what it reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverrides {
    /// GPUs to offer (indices `0..gpus`), instead of those NVML finds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// GPU product name to report (defaults to NVML's, or `FAKE-GPU` with `gpus` set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// CPU to offer (a quantity: `8`, `7500m`), instead of the machine's cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory to offer (`16Gi`), instead of the machine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Other countable resources the machine offers (`rdma/hca: 1`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, u64>,
    /// Node name (defaults to the hostname).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The `CorralConfig` document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub ports: PortRange,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<ApiToken>,
    #[serde(default)]
    pub node: NodeOverrides,
    /// Grace period between SIGTERM and SIGKILL whenever a replica is stopped (preemption,
    /// suspend, restart, delete) and its job sets none of its own (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<u64>,
    /// A job admitted less than this long ago is not preempted, so that jobs do not
    /// preempt each other in a loop (default 300). A job that waits for such a job says
    /// so in its reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_protection_seconds: Option<u64>,
    /// An elastic job is resized at most once in this long (default 60; its admission
    /// counts as a resize), so that sizes do not oscillate. See docs/elastic.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize_dwell_seconds: Option<u64>,
    /// Variables of the server's environment that replicas may see. Replicas see none of
    /// it otherwise, only PATH, LANG, HOME and TMPDIR (TMP, TEMP; their own), the launch
    /// contract's variables and their job's `env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_env: Vec<String>,
    /// How replicas with an image run.
    #[serde(default)]
    pub containers: ContainerSettings,
    /// Where replica cgroups go on cgroup v2 (absolute, or relative to the cgroup2 mount);
    /// by default below the server's own cgroup, else `<mount>/corral`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<std::path::PathBuf>,
    /// Code snapshots shipped with jobs (`corral submit --code DIR`).
    #[serde(default)]
    pub code_snapshots: CodeSnapshotSettings,
    /// How tenants are walled off from each other and from the server.
    #[serde(default)]
    pub tenants: TenantSettings,
    /// Pipeline steps' outputs.
    #[serde(default)]
    pub artifacts: ArtifactSettings,
}

/// Default retention of a deleted run's artifacts: 30 days.
pub const DEFAULT_ARTIFACT_RETENTION_SECONDS: u64 = 30 * 24 * 3600;

/// Default retention of a deleted job's output directory: 1 day.
pub const DEFAULT_JOB_OUTPUT_RETENTION_SECONDS: u64 = 24 * 3600;

/// The `artifacts` settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactSettings {
    /// A deleted run's artifacts that no run reuses (a cache hit) and no served model
    /// serves from go once this old (default 30 days); the cache forgets them with them.
    #[serde(default = "default_artifact_retention")]
    pub retention_seconds: u64,
    /// A TrainingJob's output directory (`$CORRAL_OUTPUT_DIR`) stays this long after its
    /// job was deleted, or after the last served model serving from it went (default 1 day;
    /// 0: at once), so that what the job wrote can still be copied out.
    #[serde(default = "default_job_output_retention")]
    pub job_output_retention_seconds: u64,
}

fn default_job_output_retention() -> u64 {
    DEFAULT_JOB_OUTPUT_RETENTION_SECONDS
}

fn default_artifact_retention() -> u64 {
    DEFAULT_ARTIFACT_RETENTION_SECONDS
}

impl Default for ArtifactSettings {
    fn default() -> Self {
        ArtifactSettings {
            retention_seconds: DEFAULT_ARTIFACT_RETENTION_SECONDS,
            job_output_retention_seconds: DEFAULT_JOB_OUTPUT_RETENTION_SECONDS,
        }
    }
}

/// The `tenants` settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantSettings {
    /// The uids (and gids of the same numbers) namespaces' replicas run under when the
    /// server runs as root; default [`corral_core::tenancy::DEFAULT_ID_RANGE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid_range: Option<UidRange>,
}

/// `tenants.uidRange`: the first id and how many, as a line of `/etc/subuid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UidRange {
    pub start: u32,
    pub count: u32,
}

impl TenantSettings {
    /// The configured range, or the default.
    pub fn id_range(&self) -> corral_core::tenancy::IdRange {
        self.uid_range
            .map_or(corral_core::tenancy::DEFAULT_ID_RANGE, |r| {
                corral_core::tenancy::IdRange {
                    start: r.start,
                    count: r.count,
                }
            })
    }
}

/// Default largest code snapshot: 100 MiB of files.
pub const DEFAULT_CODE_SNAPSHOT_MAX_BYTES: u64 = 100 * 1024 * 1024;

/// The `codeSnapshots` settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CodeSnapshotSettings {
    /// Largest snapshot: the sum of its files' sizes, and of its archive (default 100 MiB).
    #[serde(default = "default_code_max")]
    pub max_bytes: u64,
}

fn default_code_max() -> u64 {
    DEFAULT_CODE_SNAPSHOT_MAX_BYTES
}

impl Default for CodeSnapshotSettings {
    fn default() -> Self {
        CodeSnapshotSettings {
            max_bytes: DEFAULT_CODE_SNAPSHOT_MAX_BYTES,
        }
    }
}

/// The `containers` settings (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerSettings {
    /// `auto` (default), `podman`, `docker`, a path to either, or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// podman's OCI runtime (`--runtime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_runtime: Option<String>,
    /// What a job with an image gets on a cluster without a runtime.
    #[serde(default, deserialize_with = "without_runtime")]
    pub without_runtime: WithoutRuntime,
}

/// `withoutRuntime`, with an error that names the field (serde's names only the value).
fn without_runtime<'de, D: serde::Deserializer<'de>>(d: D) -> Result<WithoutRuntime, D::Error> {
    let text = String::deserialize(d)?;
    match text.as_str() {
        "host" => Ok(WithoutRuntime::Host),
        "reject" => Ok(WithoutRuntime::Reject),
        other => Err(serde::de::Error::custom(format!(
            "containers.withoutRuntime: `{other}` is not one of host, reject"
        ))),
    }
}

/// What a job with an image gets on a cluster without a container runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WithoutRuntime {
    /// Its command runs on the host; a Warning event says that the image was not used.
    #[default]
    Host,
    /// Refused at submit.
    Reject,
}

/// Everything `corral.yaml` declares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterFileConfig {
    pub node_pools: Vec<NodePool>,
    pub queues: Vec<Queue>,
    pub priority_classes: Vec<JobPriorityClass>,
    pub settings: Settings,
}

impl ClusterFileConfig {
    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&text)
    }

    /// Parses the text of a configuration file (YAML or JSON, several documents).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut out = ClusterFileConfig::default();
        if text.trim().is_empty() {
            return Ok(out);
        }
        let raws = raw_documents(text).map_err(ConfigError::Invalid)?;
        let mut rest = Vec::new();
        let mut seen_settings = false;
        for raw in raws {
            let kind = raw.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
            if kind == CONFIG_KIND {
                if seen_settings {
                    return Err(ConfigError::Invalid(format!(
                        "more than one {CONFIG_KIND} document"
                    )));
                }
                seen_settings = true;
                out.settings = serde_json::from_value(raw)
                    .map_err(|e| ConfigError::Invalid(format!("{CONFIG_KIND}: {e}")))?;
            } else {
                rest.push(raw);
            }
        }
        out.settings.validate()?;
        if rest.is_empty() {
            return Ok(out);
        }
        let joined = serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": rest,
        }))
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let mut problems = Vec::new();
        for r in parse_documents(&joined, &ValidationContext::default()) {
            match r {
                Ok(p) => match p.document {
                    Document::JobPriorityClass(c) if !p.warnings.is_empty() => {
                        // A deprecated kind still loads; whoever runs `corral up` sees why it
                        // should change.
                        for w in &p.warnings {
                            eprintln!("warning: {} {}: {w}", c.kind, c.metadata.name);
                        }
                        out.priority_classes.push(c)
                    }
                    Document::NodePool(n) => out.node_pools.push(n),
                    Document::Queue(q) => out.queues.push(q),
                    Document::JobPriorityClass(c) => out.priority_classes.push(c),
                    d @ (Document::TrainingJob(_)
                    | Document::PipelineRun(_)
                    | Document::Pipeline(_)
                    | Document::ServedModel(_)) => problems.push(format!(
                        "{} {} does not belong in the configuration; submit it",
                        d.kind(),
                        d.name()
                    )),
                },
                Err(e) => problems.push(e.to_string()),
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(ConfigError::Invalid(problems.join("\n")))
        }
    }

    /// What validation of submitted jobs knows of the cluster.
    pub fn validation_context(&self) -> ValidationContext {
        ValidationContext {
            node_pools: self.node_pools.clone(),
            priority_classes: self.priority_classes.clone(),
            queues: self.queues.clone(),
            nodes: None,
            requires_image: false,
            pipelines: Vec::new(),
        }
    }

    /// The namespaces a token may act in: `Some(None)` for every namespace, `Some(Some(ns))`
    /// for one, `None` for an unknown token.
    pub fn token_scope(&self, token: &str) -> Option<Option<&str>> {
        self.settings
            .tokens
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), token.as_bytes()))
            .map(|t| t.namespace.as_deref())
    }
}

impl ClusterFileConfig {
    /// Who a token is, for the audit trail: its name (or `token #<n>`, 1-based) and the
    /// namespace it acts in (`*`: every one); `None` for an unknown token.
    pub fn token_identity(&self, token: &str) -> Option<(String, String)> {
        let (i, t) = self
            .settings
            .tokens
            .iter()
            .enumerate()
            .find(|(_, t)| constant_time_eq(t.token.as_bytes(), token.as_bytes()))?;
        Some((
            t.name
                .clone()
                .unwrap_or_else(|| format!("token #{}", i + 1)),
            t.namespace.clone().unwrap_or_else(|| "*".into()),
        ))
    }
}

impl Settings {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.ports.min == 0 || self.ports.min > self.ports.max {
            return Err(ConfigError::Invalid(format!(
                "ports: min ({}) must be at least 1 and at most max ({})",
                self.ports.min, self.ports.max
            )));
        }
        if let Some(k) = &self.kind
            && k != CONFIG_KIND
        {
            return Err(ConfigError::Invalid(format!(
                "kind: expected {CONFIG_KIND}"
            )));
        }
        if self.tokens.iter().any(|t| t.token.is_empty()) {
            return Err(ConfigError::Invalid(
                "tokens: a token may not be empty".into(),
            ));
        }
        if let Some(r) = &self.containers.runtime
            && r.is_empty()
        {
            return Err(ConfigError::Invalid(
                "containers.runtime: empty; use auto, podman, docker, a path, or none".into(),
            ));
        }
        self.tenants
            .id_range()
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some(g) = self.node.gpus
            && g > 64
        {
            return Err(ConfigError::Invalid(format!(
                "node.gpus: {g} GPUs; at most 64 are supported"
            )));
        }
        Ok(())
    }
}

/// Compares secrets without leaking where they differ through timing.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_settings_and_declarations() {
        let text = r#"
apiVersion: corral.dev/v1alpha1
kind: CorralConfig
ports: {min: 31000, max: 31010}
tokens:
  - {token: abc, namespace: team-a}
  - {token: root}
node: {gpus: 2, gpuType: FAKE-GPU}
---
apiVersion: corral.dev/v1alpha1
kind: NodePool
metadata: {name: fake}
spec: {gpuType: FAKE-GPU}
---
apiVersion: corral.dev/v1alpha1
kind: Queue
metadata: {name: default}
spec:
  quotas:
    - {nodePool: fake, gpu: 2}
"#;
        let c = ClusterFileConfig::parse(text).expect("valid");
        assert_eq!(
            c.settings.ports,
            PortRange {
                min: 31000,
                max: 31010
            }
        );
        assert_eq!(c.settings.node.gpus, Some(2));
        assert_eq!(c.node_pools.len(), 1);
        assert_eq!(c.queues.len(), 1);
        assert_eq!(c.token_scope("abc"), Some(Some("team-a")));
        assert_eq!(c.token_scope("root"), Some(None));
        assert_eq!(c.token_scope("nope"), None);
        assert_eq!(
            c.token_identity("abc"),
            Some(("token #1".to_string(), "team-a".to_string()))
        );
        assert_eq!(
            c.token_identity("root"),
            Some(("token #2".to_string(), "*".to_string()))
        );
    }

    #[test]
    fn container_settings_parse_and_name_bad_values() {
        let c = ClusterFileConfig::parse(
            "kind: CorralConfig\ncontainers: {runtime: podman, ociRuntime: runc, withoutRuntime: reject}",
        )
        .expect("valid");
        assert_eq!(c.settings.containers.runtime.as_deref(), Some("podman"));
        assert_eq!(
            c.settings.containers.without_runtime,
            WithoutRuntime::Reject
        );
        let e =
            ClusterFileConfig::parse("kind: CorralConfig\ncontainers: {withoutRuntime: ignore}")
                .expect_err("invalid");
        assert!(e.to_string().contains("withoutRuntime"), "{e}");
    }

    #[test]
    fn the_tenant_range_parses_and_a_bad_one_names_its_field() {
        let c = ClusterFileConfig::parse(
            "kind: CorralConfig\ntenants: {uidRange: {start: 200000, count: 1000}}",
        )
        .expect("valid");
        assert_eq!(c.settings.tenants.id_range().start, 200_000);
        let e = ClusterFileConfig::parse(
            "kind: CorralConfig\ntenants: {uidRange: {start: 10, count: 1000}}",
        )
        .expect_err("invalid");
        assert!(e.to_string().contains("tenants.uidRange.start"), "{e}");
        assert_eq!(
            ClusterFileConfig::default().settings.tenants.id_range(),
            corral_core::tenancy::DEFAULT_ID_RANGE
        );
    }

    #[test]
    fn empty_file_is_the_default() {
        let c = ClusterFileConfig::parse("").expect("valid");
        assert_eq!(c, ClusterFileConfig::default());
    }

    #[test]
    fn rejects_bad_settings() {
        assert!(ClusterFileConfig::parse("kind: CorralConfig\nports: {min: 10, max: 5}").is_err());
        assert!(ClusterFileConfig::parse("kind: CorralConfig\nbogus: 1").is_err());
    }
}
