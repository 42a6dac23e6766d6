//! A TrainingJob as written (before defaults): its roles and replicas, each field's
//! bounds, and what it names (priority class, queue, GPU types) against the cluster.

use std::collections::BTreeSet;

use crate::gpu_type;
use crate::training_job::{Framework, ReplicaSpec, Role, SuccessPolicy, TrainingJob};

use super::names::{check_dns1035_label, check_dns1123_label, check_meta};
use super::quantities::{check_cpu, check_memory, check_quantity};
use super::{
    FieldError, MAX_DNS_LABEL, MAX_GPUS_PER_NODE, MAX_REPLICAS_PER_ROLE, ValidationContext,
    ValidationErrors, unknown_name,
};

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
    // No node has such GPUs at all: the job could never start. (Whether a replica or the
    // gang fits the nodes is the control plane's judgement: refused at submit where nodes
    // are fixed, Unschedulable on Kubernetes; see corral-core's `control::SubmitCheck`.)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::parse_documents;
    use crate::validate::NodeFacts;

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
}
