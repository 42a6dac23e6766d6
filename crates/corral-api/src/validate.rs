//! Validation with precise errors: every error names the field path
//! (`spec.replicas.worker.resources.gpu`), says what is wrong and what would be valid.
//! All errors of a document are collected and reported together.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::gpu_type;
use crate::job_priority_class::JobPriorityClass;
use crate::meta::ObjectMeta;
use crate::node_pool::NodePool;
use crate::quantity::Quantity;
use crate::queue::{Queue, ResourceAmounts};
use crate::suggest::did_you_mean;
use crate::training_job::{Framework, ReplicaSpec, Role, SuccessPolicy, TrainingJob};

/// Replicas per role above this are a typo, not a job.
pub const MAX_REPLICAS_PER_ROLE: u32 = 10_000;
/// Without node pools to say otherwise, no GPU server holds more than this many GPUs.
pub const MAX_GPUS_PER_NODE: u32 = 16;
/// CPU cores per replica above this are a typo.
pub const MAX_CPU_CORES: u128 = 4096;
/// Memory per replica above this (64 TiB) is a typo.
pub const MAX_MEMORY_BYTES: u128 = 64 << 40;
/// Memory requests below this are almost always a missing suffix ("16" for "16Gi").
pub const MIN_MEMORY_BYTES: u128 = 1 << 20;
/// Kubernetes reserves priority values above this for system classes.
pub const MAX_USER_PRIORITY: i32 = 1_000_000_000;
/// A DNS label (hostname part) holds at most 63 characters.
pub const MAX_DNS_LABEL: usize = 63;

/// One thing wrong with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Where: `spec.replicas.worker.resources.gpu`.
    pub path: String,
    /// What is wrong, and what would be valid.
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every error found in one document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(path, message));
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = &FieldError> {
        self.0.iter()
    }
    pub fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Roles with replicas but no `template.image`, on a cluster that runs images only
/// (Kubernetes): such a job could never start a replica there, so it is never admitted.
pub fn missing_images(spec: &crate::TrainingJobSpec) -> Vec<FieldError> {
    spec.replicas
        .iter()
        .filter(|(_, r)| r.count > 0 && r.template.image.as_deref().is_none_or(str::is_empty))
        .map(|(role, _)| {
            FieldError::new(
                format!("spec.replicas.{role}.template.image"),
                "is required on Kubernetes: each replica runs as a pod from a container image \
                 (e.g. `image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime`)",
            )
        })
        .collect()
}

/// What validation knows of the cluster: node pools, priority classes and queues, when the
/// caller has them. With none, only built-in bounds apply.
#[derive(Clone, Debug, Default)]
pub struct ValidationContext {
    pub node_pools: Vec<NodePool>,
    pub priority_classes: Vec<JobPriorityClass>,
    pub queues: Vec<Queue>,
    /// The nodes of the cluster the job goes to, when validation runs against one (a submit,
    /// `corral validate` with a reachable server). With them, what the cluster does not
    /// declare does not exist: a job that names a missing priority class or queue, or asks
    /// for GPUs that no node has, is refused instead of waiting forever (as Kubernetes
    /// refuses a pod naming a missing priority class at admission). Without them (files
    /// alone), those checks only apply to what the files declare.
    pub nodes: Option<Vec<NodeFacts>>,
    /// The cluster runs replicas from container images only (Kubernetes): every role with
    /// replicas needs `template.image`.
    pub requires_image: bool,
}

/// One node of a cluster, as validation sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// Product name of its GPUs; `None` without GPUs.
    pub gpu_type: Option<String>,
    pub gpus: u32,
}

impl ValidationContext {
    /// The checks that need the cluster, named for a user told they did not run offline.
    pub const CLUSTER_CHECKS: &'static str = "that the priority class and queue exist, and that the cluster has the GPUs (type and count per node) each replica asks for";

    /// The queues a job may name: the declared ones, and `default` unless one is declared
    /// (the control plane's implicit unlimited queue).
    fn queue_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .queues
            .iter()
            .map(|q| q.metadata.name.as_str())
            .collect();
        if !names.contains(&crate::DEFAULT_QUEUE) {
            names.push(crate::DEFAULT_QUEUE);
        }
        names.sort_unstable();
        names
    }

    /// The most GPUs any node of an allowed type holds, and the pool that holds them.
    fn largest_gpu_node(&self, allowed: &[String]) -> Option<(u32, String)> {
        self.node_pools
            .iter()
            .filter(|p| {
                allowed.is_empty()
                    || p.spec
                        .gpu_type
                        .as_ref()
                        .is_some_and(|t| self.selects_any(allowed, t))
            })
            .filter_map(|p| p.spec.gpus_per_node.map(|n| (n, p.metadata.name.clone())))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)))
    }

    /// What this cluster's nodes hold, in words: "this cluster has GPU types
    /// NVIDIA-H100-80GB-HBM3 (1 per node)", "this cluster has no GPUs". `None` without nodes.
    pub fn gpus_in_words(&self) -> Option<String> {
        let nodes = self.nodes.as_ref()?;
        let mut per_type: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
        for n in nodes.iter().filter(|n| n.gpus > 0) {
            let t = n.gpu_type.as_deref().unwrap_or("(no type)");
            let e = per_type.entry(t).or_insert((n.gpus, n.gpus));
            e.0 = e.0.min(n.gpus);
            e.1 = e.1.max(n.gpus);
        }
        if per_type.is_empty() {
            return Some("this cluster has no GPUs".into());
        }
        let list: Vec<String> = per_type
            .iter()
            .map(|(t, (lo, hi))| {
                if lo == hi {
                    format!("{t} ({lo} per node)")
                } else {
                    format!("{t} ({lo} to {hi} per node)")
                }
            })
            .collect();
        let noun = if list.len() == 1 { "type" } else { "types" };
        Some(format!("this cluster has GPU {noun} {}", list.join(", ")))
    }

    /// The most GPUs one node of a type that `allowed` selects holds (any type when empty).
    fn largest_node_of(&self, allowed: &[String]) -> Option<u32> {
        self.nodes
            .as_ref()?
            .iter()
            .filter(|n| {
                allowed.is_empty()
                    || n.gpu_type
                        .as_ref()
                        .is_some_and(|t| self.selects_any(allowed, t))
            })
            .map(|n| n.gpus)
            .max()
    }

    /// Whether any of the names `allowed` selects type `t` among the types that exist here
    /// (`corral_api::gpu_type::resolve`).
    fn selects_any(&self, allowed: &[String], t: &str) -> bool {
        let known = self.gpu_types();
        allowed
            .iter()
            .any(|a| gpu_type::selects(a, t, known.iter().copied()))
    }

    fn gpu_types(&self) -> BTreeSet<&str> {
        self.node_pools
            .iter()
            .filter_map(|p| p.spec.gpu_type.as_deref())
            .chain(
                self.nodes
                    .iter()
                    .flatten()
                    .filter(|n| n.gpus > 0)
                    .filter_map(|n| n.gpu_type.as_deref()),
            )
            .collect()
    }
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63: a name that can be a hostname (DNS-1035).
pub fn check_dns1035_label(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > MAX_DNS_LABEL {
        return Err(format!(
            "`{value}` is {} characters; at most {MAX_DNS_LABEL} are allowed",
            value.len()
        ));
    }
    let bytes = value.as_bytes();
    let ok_chars = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !ok_chars || !bytes[0].is_ascii_lowercase() || bytes[bytes.len() - 1] == b'-' {
        let fixed = suggest_dns_name(value);
        return Err(format!(
            "`{value}` cannot be a hostname: use lowercase letters, digits and '-', starting with a letter and ending with a letter or digit{}",
            if fixed.is_empty() || fixed == value {
                String::new()
            } else {
                format!(" (e.g. `{fixed}`)")
            }
        ));
    }
    Ok(())
}

/// DNS-1123 label: like DNS-1035 but may start with a digit (namespaces, queues).
pub fn check_dns1123_label(value: &str) -> Result<(), String> {
    match value.as_bytes().first() {
        Some(b) if b.is_ascii_digit() => check_dns1035_label(&format!("a{}", &value[1..]))
            .map_err(|e| e.replacen(&format!("a{}", &value[1..]), value, 1)),
        _ => check_dns1035_label(value),
    }
}

fn suggest_dns_name(value: &str) -> String {
    let mut s: String = value
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '-');
    s.chars()
        .take(MAX_DNS_LABEL)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// Kubernetes label keys (`prefix/name`) and values.
fn check_labels(path: &str, labels: &BTreeMap<String, String>, errs: &mut ValidationErrors) {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    for (k, v) in labels {
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        let prefix_ok = prefix
            .is_none_or(|p| p.len() <= 253 && p.split('.').all(|l| check_dns1123_label(l).is_ok()));
        if !name_ok(name) || !prefix_ok {
            errs.push(
                format!("{path}.{k}"),
                "is not a valid label key: use an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            );
        }
        if !v.is_empty() && !name_ok(v) {
            errs.push(
                format!("{path}.{k}"),
                format!("`{v}` is not a valid label value: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"),
            );
        }
    }
}

fn check_meta(meta: &ObjectMeta, namespaced: bool, errs: &mut ValidationErrors) {
    if meta.name.is_empty() {
        errs.push(
            "metadata.name",
            "is required: a lowercase name such as `mnist-ddp`",
        );
    } else if let Err(e) = check_dns1035_label(&meta.name) {
        errs.push("metadata.name", e);
    }
    if let Some(ns) = &meta.namespace {
        if !namespaced {
            errs.push(
                "metadata.namespace",
                "this kind is cluster-wide and has no namespace; remove the field",
            );
        } else if let Err(e) = check_dns1123_label(ns) {
            errs.push("metadata.namespace", e);
        }
    }
    check_labels("metadata.labels", &meta.labels, errs);
}

fn check_quantity(path: &str, q: &Quantity, errs: &mut ValidationErrors) -> Option<u128> {
    match q.milli() {
        Ok(v) => Some(v),
        Err(e) => {
            errs.push(path, e.to_string());
            None
        }
    }
}

fn check_cpu(path: &str, q: &Quantity, errs: &mut ValidationErrors) {
    if let Some(milli) = check_quantity(path, q, errs) {
        if milli == 0 {
            errs.push(
                path,
                "must be more than 0; write e.g. \"500m\" or 2, or remove it",
            );
        } else if milli > MAX_CPU_CORES * 1000 {
            errs.push(
                path,
                format!("`{q}` is more than {MAX_CPU_CORES} cores; no node has that many"),
            );
        }
    }
}

fn check_memory(path: &str, q: &Quantity, errs: &mut ValidationErrors) {
    if let Some(milli) = check_quantity(path, q, errs) {
        let bytes = milli.div_ceil(1000);
        if bytes == 0 {
            errs.push(
                path,
                "must be more than 0; write e.g. \"16Gi\", or remove it",
            );
        } else if bytes < MIN_MEMORY_BYTES {
            errs.push(
                path,
                format!("`{q}` is only {bytes} bytes; memory is in bytes, so write a suffix, e.g. \"{q}Gi\" or \"{q}Mi\""),
            );
        } else if bytes > MAX_MEMORY_BYTES {
            errs.push(
                path,
                format!("`{q}` is more than 64Ti; no node has that much"),
            );
        }
    }
}

/// Validates a TrainingJob as written (before defaults).
pub fn validate_training_job(
    job: &TrainingJob,
    ctx: &ValidationContext,
) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    check_meta(&job.metadata, true, &mut errs);
    let spec = &job.spec;
    let fw = spec.framework;

    if spec.replicas.is_empty() {
        errs.push(
            "spec.replicas",
            format!(
                "needs at least one role; {fw} jobs have {}",
                role_list(fw.roles())
            ),
        );
    }
    if ctx.requires_image {
        errs.0.extend(missing_images(spec));
    }
    for (role, replica) in &spec.replicas {
        let path = format!("spec.replicas.{role}");
        if !fw.roles().contains(role) {
            errs.push(
                &path,
                format!(
                    "`{role}` is not a role of {fw} jobs; {fw} jobs have {}",
                    role_list(fw.roles())
                ),
            );
        }
        check_replica(&path, fw, *role, replica, ctx, &mut errs);
    }
    check_required_roles(fw, spec, &mut errs);

    // Replica hostnames are `<job>-<role>-<index>`: they must fit in one DNS label.
    if !job.metadata.name.is_empty()
        && check_dns1035_label(&job.metadata.name).is_ok()
        && let Some((longest, suffix_len)) = spec
            .replicas
            .iter()
            .map(|(role, r)| {
                let suffix = format!("-{role}-{}", r.count.saturating_sub(1));
                (format!("{}{suffix}", job.metadata.name), suffix.len())
            })
            .max_by_key(|(n, _)| n.len())
        && longest.len() > MAX_DNS_LABEL
    {
        errs.push(
                    "metadata.name",
                    format!(
                        "is too long: replica hostname `{longest}` has {} characters and a hostname holds {MAX_DNS_LABEL}; use a name of at most {} characters",
                        longest.len(),
                        MAX_DNS_LABEL - suffix_len
                    ),
                );
    }

    let rp = &spec.run_policy;
    if rp.active_deadline_seconds == Some(0) {
        errs.push(
            "spec.runPolicy.activeDeadlineSeconds",
            "must be at least 1 second; remove it for no deadline",
        );
    }
    if let Some(limit) = rp.backoff_limit
        && limit > 10_000
    {
        errs.push(
            "spec.runPolicy.backoffLimit",
            format!("{limit} restarts is not a limit; use at most 10000"),
        );
    }
    if spec.success_policy == Some(SuccessPolicy::AllWorkers) && fw != Framework::TensorFlow {
        errs.push(
            "spec.successPolicy",
            format!("`AllWorkers` applies to tensorflow jobs only; {fw} jobs use `Default`"),
        );
    }
    let on_cluster = ctx.nodes.is_some();
    if let Some(q) = &spec.queue {
        if let Err(e) = check_dns1123_label(q) {
            errs.push("spec.queue", e);
        } else if (on_cluster || !ctx.queues.is_empty()) && !ctx.queue_names().contains(&q.as_str())
        {
            errs.push("spec.queue", unknown_name("queue", q, &ctx.queue_names()));
        }
    }
    if let Some(pc) = &spec.priority_class {
        if let Err(e) = check_dns1123_label(pc) {
            errs.push("spec.priorityClass", e);
        } else if (on_cluster || !ctx.priority_classes.is_empty())
            && !ctx.priority_classes.iter().any(|x| x.metadata.name == *pc)
        {
            let names: Vec<&str> = ctx
                .priority_classes
                .iter()
                .map(|x| x.metadata.name.as_str())
                .collect();
            let message = if names.is_empty() {
                format!(
                    "there is no priority class `{pc}`: this cluster declares none; remove `priorityClass` or declare a JobPriorityClass in the cluster's configuration"
                )
            } else {
                unknown_name("priority class", pc, &names)
            };
            errs.push("spec.priorityClass", message);
        }
    }
    if spec.port == Some(0) {
        errs.push(
            "spec.port",
            "must be 1-65535; remove it to use the framework default",
        );
    }
    if let Some(elastic) = &spec.elastic {
        if fw != Framework::PyTorch {
            errs.push(
                "spec.elastic",
                format!("elastic training is for pytorch jobs (torchrun); {fw} jobs cannot resize"),
            );
        }
        let workers = spec.replicas.get(&Role::Worker).map(|w| w.count);
        let (min, max) = (elastic.min_replicas, elastic.max_replicas);
        if min == Some(0) {
            errs.push("spec.elastic.minReplicas", "must be at least 1");
        }
        if let (Some(min), Some(max)) = (min, max) {
            if max < min {
                errs.push(
                    "spec.elastic.maxReplicas",
                    format!("{max} is less than minReplicas {min}"),
                );
            }
            if let Some(w) = workers
                && (w < min || w > max)
            {
                errs.push(
                    "spec.replicas.worker.count",
                    format!(
                        "{w} is outside the elastic range {min}..={max}; set a count between them"
                    ),
                );
            }
        }
        if let Some(b) = &elastic.rdzv_backend {
            const BACKENDS: [&str; 4] = ["c10d", "etcd", "etcd-v2", "static"];
            if !BACKENDS.contains(&b.as_str()) {
                errs.push(
                    "spec.elastic.rdzvBackend",
                    unknown_name("rendezvous backend", b, &BACKENDS),
                );
            }
        }
        if elastic.rdzv_port == Some(0) {
            errs.push("spec.elastic.rdzvPort", "must be 1-65535");
        }
    }
    if let Some(n) = &spec.nproc_per_node {
        if fw != Framework::PyTorch {
            errs.push(
                "spec.nprocPerNode",
                format!("applies to pytorch jobs (torchrun) only, not {fw}"),
            );
        } else if !matches!(n.as_str(), "auto" | "cpu" | "gpu")
            && !n.parse::<u32>().is_ok_and(|v| v >= 1)
        {
            errs.push(
                "spec.nprocPerNode",
                format!("`{n}` is not valid; use `auto`, `cpu`, `gpu` or a positive integer"),
            );
        }
    }
    if let Some(mpi) = &spec.mpi {
        if fw != Framework::Mpi {
            errs.push(
                "spec.mpi",
                format!("MPI settings apply to mpi jobs only, not {fw}"),
            );
        }
        if mpi.slots_per_worker == Some(0) {
            errs.push("spec.mpi.slotsPerWorker", "must be at least 1");
        }
    }
    errs.into_result()
}

fn role_list(roles: &[Role]) -> String {
    let names: Vec<String> = roles.iter().map(|r| format!("`{r}`")).collect();
    match names.len() {
        0 => String::new(),
        1 => format!("one role, {}", names[0]),
        _ => format!("roles {}", names.join(", ")),
    }
}

/// `1 GPU`, `2 GPUs`.
fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn unknown_name(what: &str, name: &str, known: &[&str]) -> String {
    let hint = did_you_mean(name, known.iter().copied())
        .map(|m| format!("did you mean `{m}`? "))
        .unwrap_or_default();
    if known.is_empty() {
        format!("there is no {what} `{name}`")
    } else {
        format!(
            "there is no {what} `{name}`; {hint}known: {}",
            known.join(", ")
        )
    }
}

fn check_required_roles(fw: Framework, spec: &crate::TrainingJobSpec, errs: &mut ValidationErrors) {
    let has = |r: Role| spec.replicas.contains_key(&r);
    if spec.replicas.is_empty() {
        return;
    }
    let missing = match fw {
        Framework::PyTorch if !has(Role::Master) && !has(Role::Worker) => {
            Some("pytorch jobs need a `master` or at least one `worker`")
        }
        Framework::TensorFlow if !has(Role::Chief) && !has(Role::Worker) => {
            Some("tensorflow jobs need a `chief` or at least one `worker`")
        }
        Framework::Mpi if !has(Role::Launcher) => {
            Some("mpi jobs need a `launcher` (it runs mpirun)")
        }
        Framework::Jax if !has(Role::Worker) => Some("jax jobs need `worker` replicas"),
        Framework::XGBoost if !has(Role::Master) => Some("xgboost jobs need a `master`"),
        _ => None,
    };
    if let Some(m) = missing {
        errs.push("spec.replicas", m);
    }
}

fn check_replica(
    path: &str,
    fw: Framework,
    role: Role,
    r: &ReplicaSpec,
    ctx: &ValidationContext,
    errs: &mut ValidationErrors,
) {
    if r.count == 0 {
        errs.push(
            format!("{path}.count"),
            "must be at least 1; remove the role to run without it",
        );
    } else if r.count > MAX_REPLICAS_PER_ROLE {
        errs.push(
            format!("{path}.count"),
            format!(
                "{} replicas is more than the {MAX_REPLICAS_PER_ROLE} a role may have",
                r.count
            ),
        );
    } else if r.count > 1 && fw.singleton_roles().contains(&role) {
        errs.push(
            format!("{path}.count"),
            format!("{fw} jobs have exactly one {role}; got {}", r.count),
        );
    }

    let res = &r.resources;
    let rpath = format!("{path}.resources");
    if let Some(cpu) = &res.cpu {
        check_cpu(&format!("{rpath}.cpu"), cpu, errs);
    }
    if let Some(mem) = &res.memory {
        check_memory(&format!("{rpath}.memory"), mem, errs);
    }
    let known_types = ctx.gpu_types();
    let mut unknown_types = 0;
    for (i, t) in res.gpu_types.iter().enumerate() {
        if t.trim().is_empty() {
            errs.push(format!("{rpath}.gpuTypes[{i}]"), "must not be empty");
        } else if (ctx.nodes.is_some() || !known_types.is_empty())
            && gpu_type::resolve(t, known_types.iter().copied()).is_empty()
        {
            unknown_types += 1;
            let names: Vec<&str> = known_types.iter().copied().collect();
            let mut message = unknown_name("node pool with GPU type", t, &names);
            if let Some(what) = ctx.gpus_in_words() {
                message = format!("{message} ({what})");
            }
            errs.push(format!("{rpath}.gpuTypes[{i}]"), message);
        }
    }
    if !res.gpu_types.is_empty() && res.gpu == 0 {
        errs.push(
            format!("{rpath}.gpuTypes"),
            "names GPU types but `gpu` is 0; set `gpu` or remove `gpuTypes`",
        );
    }
    let cluster_gpus = ctx.nodes.as_ref().map(|nodes| {
        nodes
            .iter()
            .filter(|n| {
                res.gpu_types.is_empty()
                    || n.gpu_type
                        .as_ref()
                        .is_some_and(|t| ctx.selects_any(&res.gpu_types, t))
            })
            .map(|n| n.gpus)
            .max()
            .unwrap_or(0)
    });
    // No node has such GPUs at all: the job could never start. (One that asks for more per
    // replica than the largest node holds is accepted and reported Unschedulable, as every
    // shell does, since nodes may still be added; see control/conformance.rs.)
    // Every type asked for is unknown, and already said so (with what exists): one error
    // for one mistake.
    let types_reported = !res.gpu_types.is_empty() && unknown_types == res.gpu_types.len();
    if res.gpu > 0 && cluster_gpus == Some(0) {
        let message = if types_reported {
            None
        } else if res.gpu_types.is_empty() {
            Some(format!(
                "asks for {} but this cluster has no GPUs, so the job would wait forever; remove `gpu` to run on CPUs",
                plural(res.gpu, "GPU")
            ))
        } else {
            Some(format!(
                "asks for {} of type {} but no node of this cluster has GPUs of that type, so the job would wait forever; {}",
                plural(res.gpu, "GPU"),
                res.gpu_types.join(" or "),
                ctx.gpus_in_words().unwrap_or_default()
            ))
        };
        if let Some(message) = message {
            errs.push(format!("{rpath}.gpu"), message);
        }
    } else if res.gpu > 0 {
        let (limit, where_) = match ctx.largest_gpu_node(&res.gpu_types) {
            Some((n, pool)) => (
                n,
                format!("the largest node of an allowed type holds {n} (pool {pool})"),
            ),
            None if !ctx.node_pools.is_empty() && !res.gpu_types.is_empty() => (
                MAX_GPUS_PER_NODE,
                format!("no GPU server holds more than {MAX_GPUS_PER_NODE}"),
            ),
            None => (
                MAX_GPUS_PER_NODE,
                format!("no GPU server holds more than {MAX_GPUS_PER_NODE}"),
            ),
        };
        if res.gpu > limit {
            errs.push(
                format!("{rpath}.gpu"),
                format!("{} GPUs in one replica cannot fit on one node: {where_}; use at most {limit} per replica and more replicas", res.gpu),
            );
        }
    }
    for (name, q) in &res.extended {
        let epath = format!("{rpath}.extended.{name}");
        if name == "nvidia.com/gpu" {
            errs.push(
                &epath,
                "GPUs are counted by `resources.gpu`; move the count there",
            );
            continue;
        }
        if !name.contains('/') {
            errs.push(
                &epath,
                "extended resource names are qualified, e.g. `rdma/hca` or `example.com/fpga`",
            );
        }
        if let Some(milli) = check_quantity(&epath, q, errs)
            && milli % 1000 != 0
        {
            errs.push(
                &epath,
                format!("`{q}` is not a whole number; extended resources are counted in units"),
            );
        }
    }

    let t = &r.template;
    let tpath = format!("{path}.template");
    if t.command.is_empty() && t.image.as_deref().is_none_or(str::is_empty) {
        errs.push(
            &tpath,
            "needs `command` (what the replica runs on the embedded cluster) or `image` (on Kubernetes), or both",
        );
    }
    for (i, c) in t.command.iter().enumerate() {
        if i == 0 && c.trim().is_empty() {
            errs.push(
                format!("{tpath}.command[0]"),
                "the program to run must not be empty",
            );
        }
    }
    let mut seen = BTreeSet::new();
    for (i, e) in t.env.iter().enumerate() {
        let epath = format!("{tpath}.env[{i}]");
        let valid_name = !e.name.is_empty()
            && !e.name.starts_with(|c: char| c.is_ascii_digit())
            && e.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid_name {
            errs.push(
                format!("{epath}.name"),
                format!("`{}` is not a valid variable name: letters, digits, '_', '-', '.', not starting with a digit", e.name),
            );
        }
        if !seen.insert(e.name.as_str()) {
            errs.push(
                format!("{epath}.name"),
                format!("`{}` is set twice; keep one", e.name),
            );
        }
        if e.value.is_some() && e.value_from.is_some() {
            errs.push(&epath, "set either `value` or `valueFrom`, not both");
        }
    }
    if let Some(wd) = &t.working_dir
        && wd.is_empty()
    {
        errs.push(
            format!("{tpath}.workingDir"),
            "must not be empty; remove it to use the default",
        );
    }
    if let Some(py) = &t.python {
        if py.requirements.is_empty() && py.requirements_file.is_none() {
            errs.push(
                format!("{tpath}.python.requirements"),
                "list at least one requirement (e.g. `numpy==2.1.0`), name a \
                 requirementsFile, or remove `python`",
            );
        }
        if let Some(f) = &py.requirements_file {
            let inside = !f.is_empty()
                && !f.starts_with('/')
                && f.split('/').all(|c| !c.is_empty() && c != "..");
            if !inside {
                errs.push(
                    format!("{tpath}.python.requirementsFile"),
                    format!(
                        "`{f}` is not a path inside the job's code snapshot; write it relative \
                         to the directory given to `corral submit --code`, e.g. \
                         `requirements.txt`"
                    ),
                );
            }
        }
        for (i, r) in py.requirements.iter().enumerate() {
            if r.trim().is_empty() || r.contains(['\n', '\r']) || r.trim_start().starts_with('-') {
                errs.push(
                    format!("{tpath}.python.requirements[{i}]"),
                    format!(
                        "`{r}` is not one requirement: one package specifier per entry \
                         (e.g. `numpy==2.1.0`), no options or line breaks"
                    ),
                );
            }
        }
        if let Some(v) = &py.version
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        {
            errs.push(
                format!("{tpath}.python.version"),
                format!("`{v}` is not a Python version; write e.g. `3.11`"),
            );
        }
        if t.image.is_some() {
            errs.push(
                format!("{tpath}.python"),
                "an image brings its own Python; use `python` without `image`",
            );
        }
    }
}

fn check_amounts(path: &str, a: &ResourceAmounts, errs: &mut ValidationErrors) {
    if let Some(cpu) = &a.cpu {
        check_quantity(&format!("{path}.cpu"), cpu, errs);
    }
    if let Some(m) = &a.memory {
        check_quantity(&format!("{path}.memory"), m, errs);
    }
}

/// What a valid job asks for that no node of the cluster in `ctx` can hold now: a replica
/// with more GPUs than the largest node of an allowed type. Such a job is accepted (it is
/// reported Unschedulable and waits, since nodes may join: see control/conformance.rs), so
/// these are warnings, said at once by `corral validate` and `corral submit` with what
/// exists. Empty without the cluster's nodes.
pub fn capacity_warnings(job: &TrainingJob, ctx: &ValidationContext) -> Vec<FieldError> {
    let Some(exists) = ctx.gpus_in_words() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (role, r) in &job.spec.replicas {
        let res = &r.resources;
        if res.gpu == 0 {
            continue;
        }
        let Some(largest) = ctx.largest_node_of(&res.gpu_types) else {
            continue;
        };
        if largest > 0 && res.gpu > largest {
            out.push(FieldError::new(
                format!("spec.replicas.{}.resources.gpu", role.as_str()),
                format!(
                    "{} in one replica, but {exists}: the job stays Queued (Unschedulable) until a \
                     node with {} joins; use at most {largest} per replica and more replicas",
                    plural(res.gpu, "GPU"),
                    plural(res.gpu, "GPU")
                ),
            ));
        }
    }
    out
}

pub fn validate_queue(q: &Queue, ctx: &ValidationContext) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    check_meta(&q.metadata, false, &mut errs);
    if let Some(c) = &q.spec.cohort
        && let Err(e) = check_dns1123_label(c)
    {
        errs.push("spec.cohort", e);
    }
    if q.spec.weight == 0 || q.spec.weight > 1000 {
        errs.push(
            "spec.weight",
            format!(
                "{} is out of range; use 1-1000 (relative to other queues)",
                q.spec.weight
            ),
        );
    }
    for (i, ns) in q.spec.namespaces.iter().enumerate() {
        if let Err(e) = check_dns1123_label(ns) {
            errs.push(format!("spec.namespaces[{i}]"), e);
        }
    }
    let pools: Vec<&str> = ctx
        .node_pools
        .iter()
        .map(|p| p.metadata.name.as_str())
        .collect();
    let mut seen = BTreeSet::new();
    for (i, quota) in q.spec.quotas.iter().enumerate() {
        let path = format!("spec.quotas[{i}]");
        if quota.node_pool.is_empty() {
            errs.push(
                format!("{path}.nodePool"),
                "is required: the NodePool this quota is for",
            );
        } else if !pools.is_empty() && !pools.contains(&quota.node_pool.as_str()) {
            errs.push(
                format!("{path}.nodePool"),
                unknown_name("node pool", &quota.node_pool, &pools),
            );
        }
        if !seen.insert(quota.node_pool.as_str()) {
            errs.push(
                format!("{path}.nodePool"),
                format!("`{}` has two quotas; merge them", quota.node_pool),
            );
        }
        check_amounts(
            &path,
            &ResourceAmounts {
                gpu: quota.gpu,
                cpu: quota.cpu.clone(),
                memory: quota.memory.clone(),
            },
            &mut errs,
        );
        if let Some(b) = &quota.borrowing_limit {
            check_amounts(&format!("{path}.borrowingLimit"), b, &mut errs);
            if q.spec.cohort.is_none() {
                errs.push(
                    format!("{path}.borrowingLimit"),
                    "a queue borrows only from its cohort; set `spec.cohort` or remove the limit",
                );
            }
        }
        if let Some(l) = &quota.lending_limit {
            check_amounts(&format!("{path}.lendingLimit"), l, &mut errs);
            if let (Some(lend), Some(nominal)) = (l.gpu, quota.gpu)
                && lend > nominal
            {
                errs.push(
                    format!("{path}.lendingLimit.gpu"),
                    format!("{lend} is more than the queue's own quota of {nominal} GPUs"),
                );
            }
        }
    }
    errs.into_result()
}

pub fn validate_node_pool(p: &NodePool) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    check_meta(&p.metadata, false, &mut errs);
    if let Some(t) = &p.spec.gpu_type
        && t.trim().is_empty()
    {
        errs.push(
            "spec.gpuType",
            "must not be empty; remove it for a CPU-only pool",
        );
    }
    if let Some(n) = p.spec.gpus_per_node {
        if n == 0 || n > 64 {
            errs.push(
                "spec.gpusPerNode",
                format!("{n} is out of range; use 1-64, or remove it for a CPU-only pool"),
            );
        } else if p.spec.gpu_type.is_none() {
            errs.push(
                "spec.gpuType",
                "is required when gpusPerNode is set: the GPU product name of the pool",
            );
        }
    }
    check_labels("spec.nodeSelector", &p.spec.node_selector, &mut errs);
    errs.into_result()
}

pub fn validate_priority_class(p: &JobPriorityClass) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    check_meta(&p.metadata, false, &mut errs);
    if p.spec.value > MAX_USER_PRIORITY {
        errs.push(
            "spec.value",
            format!(
                "{} is reserved for system classes; use at most {MAX_USER_PRIORITY}",
                p.spec.value
            ),
        );
    }
    errs.into_result()
}

#[cfg(test)]
mod tests {
    use crate::document::parse_documents;

    /// Against a cluster (nodes known), what is not declared does not exist; from files
    /// alone, nothing is assumed about what the cluster declares.
    #[test]
    fn a_cluster_context_refuses_what_it_lacks() {
        let job = "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  framework: generic
  priorityClass: urgent
  replicas:
    worker:
      resources: {gpu: 1}
      template: {command: [sleep, '1']}
";
        let offline = ValidationContext::default();
        assert!(parse_documents(job, &offline).iter().all(Result::is_ok));
        let cluster = ValidationContext {
            nodes: Some(vec![NodeFacts {
                gpu_type: None,
                gpus: 0,
            }]),
            ..ValidationContext::default()
        };
        let errs = parse_documents(job, &cluster)
            .into_iter()
            .filter_map(Result::err)
            .flat_map(|e| e.errors.iter().map(|f| f.to_string()).collect::<Vec<_>>())
            .collect::<Vec<_>>();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("spec.priorityClass") || errs[1].contains("spec.priorityClass"));
        assert!(
            errs.iter().any(|e| e.contains("this cluster has no GPUs")),
            "{errs:?}"
        );
    }

    /// A type the cluster lacks is one error, naming what exists; a known type without a
    /// node of it says the job would wait forever.
    #[test]
    fn an_unknown_gpu_type_is_one_error() {
        let job = |types: &str| {
            format!(
                "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {{name: j}}
spec:
  framework: generic
  replicas:
    worker:
      resources: {{gpu: 1, gpuTypes: [{types}]}}
      template: {{command: [sleep, '1']}}
"
            )
        };
        let errors = |ctx: &ValidationContext, types: &str| {
            parse_documents(&job(types), ctx)
                .into_iter()
                .filter_map(Result::err)
                .flat_map(|e| e.errors.iter().map(|f| f.to_string()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        let h200 = ValidationContext {
            nodes: Some(vec![NodeFacts {
                gpu_type: Some("NVIDIA-H200".into()),
                gpus: 1,
            }]),
            ..ValidationContext::default()
        };
        let errs = errors(&h200, "A100");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("gpuTypes[0]"), "{errs:?}");
        assert!(
            errs[0].contains("this cluster has GPU type NVIDIA-H200 (1 per node)"),
            "{errs:?}"
        );
        // Each unknown type is named; none adds the "would wait forever" of `gpu`.
        let errs = errors(&h200, "A100, H200");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("gpuTypes[0]"), "{errs:?}");
        let errs = errors(&h200, "A100, B200");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().all(|e| e.contains("gpuTypes[")), "{errs:?}");
        // A type a pool declares but no node has: the job would wait forever.
        let pool_without_nodes = ValidationContext {
            node_pools: vec![
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "corral.dev/v1alpha1",
                    "kind": "NodePool",
                    "metadata": {"name": "a100"},
                    "spec": {"gpuType": "NVIDIA-A100-SXM4-80GB"},
                }))
                .expect("a NodePool"),
            ],
            ..h200.clone()
        };
        let errs = errors(&pool_without_nodes, "A100");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("would wait forever"), "{errs:?}");
    }

    use super::*;

    #[test]
    fn dns_names() {
        assert!(check_dns1035_label("mnist-ddp").is_ok());
        assert!(check_dns1035_label("a").is_ok());
        let e = check_dns1035_label("MNIST_ddp").unwrap_err();
        assert!(e.contains("`mnist-ddp`"), "{e}");
        assert!(check_dns1035_label("1job").is_err());
        assert!(check_dns1035_label("job-").is_err());
        assert!(
            check_dns1035_label(&"a".repeat(64))
                .unwrap_err()
                .contains("64 characters")
        );
        assert!(check_dns1123_label("1team").is_ok());
        assert!(check_dns1123_label("Team").is_err());
    }
}
