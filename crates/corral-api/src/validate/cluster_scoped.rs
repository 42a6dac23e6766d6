//! The cluster-wide kinds an administrator writes: Queues (quotas, cohorts, borrowing),
//! NodePools and JobPriorityClasses.

use std::collections::BTreeSet;

use crate::job_priority_class::JobPriorityClass;
use crate::node_pool::NodePool;
use crate::queue::{MAX_BUDGET_GPU_HOURS, Queue, ResourceAmounts};

use super::names::{check_dns1123_label, check_labels, check_meta};
use super::quantities::check_amounts;
use super::{MAX_USER_PRIORITY, ValidationContext, ValidationErrors, unknown_name};

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
    if let Some(b) = &q.spec.budget {
        match b.gpu_hours.milli() {
            Err(e) => errs.push("spec.budget.gpuHours", e.to_string()),
            Ok(m) if m == 0 || m > u128::from(MAX_BUDGET_GPU_HOURS) * 1000 => errs.push(
                "spec.budget.gpuHours",
                format!(
                    "`{}` is out of range; use more than 0 and at most \
                     {MAX_BUDGET_GPU_HOURS} GPU-hours per {} (e.g. 100, \"2.5\", \"500m\")",
                    b.gpu_hours.as_str(),
                    b.period.as_str()
                ),
            ),
            Ok(_) => {}
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
