//! One-line explanations of valid documents: what Corral understood from the file.

use crate::output::plural;
use corral_api::document::{Document, Parsed};

pub fn summary(parsed: &Parsed) -> String {
    let from = parsed
        .converted_from
        .as_ref()
        .map(|k| format!(" (converted from {k})"))
        .unwrap_or_default();
    match &parsed.document {
        Document::TrainingJob(job) => {
            let mut spec = job.spec.clone();
            spec.apply_defaults();
            let roles: Vec<String> = spec
                .replicas
                .iter()
                .map(|(role, r)| {
                    let mut each = Vec::new();
                    if r.resources.gpu > 0 {
                        let types = if r.resources.gpu_types.is_empty() {
                            String::new()
                        } else {
                            format!(" {}", r.resources.gpu_types.join("|"))
                        };
                        each.push(format!("{} GPU{types}", r.resources.gpu));
                    }
                    if let Some(c) = &r.resources.cpu {
                        each.push(format!("{c} CPU"));
                    }
                    if let Some(m) = &r.resources.memory {
                        each.push(m.to_string());
                    }
                    let each = if each.is_empty() {
                        String::new()
                    } else {
                        format!(" x [{}]", each.join(", "))
                    };
                    let policy = spec.restart_policy(*role);
                    format!("{role} {}{each} restart {policy:?}", r.count)
                })
                .collect();
            let prio = spec
                .priority_class
                .as_deref()
                .map(|p| format!(", priority {p}"))
                .unwrap_or_default();
            format!(
                "TrainingJob {}{from}: valid. {} job, {} ({}), {} in all, queue {}{prio}",
                job.metadata.name,
                spec.framework,
                plural(spec.total_replicas(), "replica"),
                roles.join("; "),
                plural(spec.total_gpus(), "GPU"),
                spec.queue_name(),
            )
        }
        Document::ServedModel(m) => {
            let a = &m.spec.autoscaling;
            let r = &m.spec.resources;
            let gpus = if r.gpu > 0 {
                format!(", {} per replica", plural(r.gpu, "GPU"))
            } else {
                String::new()
            };
            format!(
                "ServedModel {}: valid. {}..{} replicas at {} in flight each{gpus}, ready on {}, \
                 queue {}{}",
                m.metadata.name,
                a.min_replicas,
                a.max_replicas(),
                a.target_in_flight,
                m.spec.readiness.path,
                m.spec.queue.as_deref().unwrap_or(corral_api::DEFAULT_QUEUE),
                m.spec
                    .priority_class
                    .as_deref()
                    .map(|p| format!(", priority {p}"))
                    .unwrap_or_default(),
            )
        }
        Document::Queue(q) => {
            let quotas: Vec<String> = q
                .spec
                .quotas
                .iter()
                .map(|x| {
                    let gpu = x
                        .gpu
                        .map(|g| format!("{g} GPUs"))
                        .unwrap_or_else(|| "GPUs unlimited".into());
                    format!("{}: {gpu}", x.node_pool)
                })
                .collect();
            format!(
                "Queue {}: valid. cohort {}, weight {}, quotas [{}]",
                q.metadata.name,
                q.spec.cohort.as_deref().unwrap_or("(none)"),
                q.spec.weight,
                quotas.join("; ")
            )
        }
        Document::NodePool(p) => format!(
            "NodePool {}: valid. GPU type {}, {} GPUs per node",
            p.metadata.name,
            p.spec.gpu_type.as_deref().unwrap_or("(none: CPU only)"),
            p.spec
                .gpus_per_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".into()),
        ),
        Document::Pipeline(p) => format!(
            "Pipeline {}: valid. {}, {}; runs name it (spec.pipelineRef) or `corral run {}`",
            p.metadata.name,
            plural(p.spec.steps.len() as u64, "step"),
            plural(p.spec.parameters.len() as u64, "parameter"),
            p.metadata.name,
        ),
        Document::PipelineRun(r) => {
            let spec = &r.spec.pipeline_spec;
            let bound = spec
                .parallelism
                .map(|p| format!(", at most {p} at once"))
                .unwrap_or_default();
            let name = match (&r.metadata.generate_name, r.metadata.name.as_str()) {
                (Some(prefix), "") => format!("{prefix}<generated>"),
                _ => r.metadata.name.clone(),
            };
            format!(
                "PipelineRun {name}: valid. {}{bound}, {}",
                match spec.step_count() {
                    n if n == spec.steps.len() => plural(n as u64, "step"),
                    n => format!(
                        "{} ({n} as they run)",
                        plural(spec.steps.len() as u64, "step")
                    ),
                },
                plural(spec.parameters.len() as u64, "parameter"),
            )
        }
        Document::JobPriorityClass(p) => format!(
            "JobPriorityClass {}: valid. value {}{}",
            p.metadata.name,
            p.spec.value,
            if p.spec.global_default {
                " (default)"
            } else {
                ""
            }
        ),
    }
}
