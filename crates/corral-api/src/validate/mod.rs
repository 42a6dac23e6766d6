//! Validation with precise errors: every error names the field path
//! (`spec.replicas.worker.resources.gpu`), says what is wrong and what would be valid.
//! All errors of a document are collected and reported together.
//!
//! - `training_job`: a TrainingJob as written, against what the cluster declares, and
//!   what a valid job asks for that no node holds now.
//! - `served_model`: a ServedModel's autoscaling and readiness, and its replicas as the
//!   TrainingJob each becomes.
//! - `cluster_scoped`: Queues, NodePools and JobPriorityClasses.
//! - `context`: what validation knows of the cluster ([`ValidationContext`]).
//! - `names`: DNS names, label keys and values, object metadata.
//! - `pipeline`: a PipelineRun: its DAG, references, parameter types and step jobs.
//! - `quantities`: CPU, memory and other amounts, with their plausible bounds.

mod cluster_scoped;
mod context;
mod names;
mod pipeline;
mod quantities;
mod served_model;
mod training_job;

use std::fmt;

use crate::suggest::did_you_mean;

pub use cluster_scoped::{validate_node_pool, validate_priority_class, validate_queue};
pub use context::{NodeFacts, ValidationContext};
pub use names::{check_dns1035_label, check_dns1123_label};
pub use pipeline::{MAX_ITEMS, validate_pipeline, validate_pipeline_run};
pub use served_model::{MAX_SERVING_REPLICAS, validate_served_model};
pub use training_job::{missing_images, validate_training_job};

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
