//! Corral's resource model: the objects users write (TrainingJob, ServedModel, Queue,
//! NodePool, JobPriorityClass) in Kubernetes object form, their defaults, validation with precise errors,
//! import of Kubeflow's job kinds, and CRDs generated from these types.
//!
//! Pure data and functions: no I/O. Shells read files and call [`parse_documents`].

pub mod artifacts_report;
pub mod crd;
pub mod document;
pub mod gpu_type;
pub mod job_priority_class;
pub mod kfp;
pub mod kserve;
pub mod kubeflow;
pub mod meta;
pub mod metric_names;
pub mod node_pool;
pub mod pipeline;
pub mod progress;
pub mod quantity;
pub mod queue;
pub mod served_model;
pub mod suggest;
pub mod training_job;
pub mod validate;

pub use job_priority_class::{JobPriorityClass, JobPriorityClassSpec, PreemptionPolicy};
pub use meta::{API_VERSION, Kind, NoStatus, Object, ObjectMeta};
pub use node_pool::{NodePool, NodePoolSpec};
pub use pipeline::{Pipeline, PipelineRef, PipelineRun, PipelineRunSpec, PipelineRunStatus};
pub use quantity::Quantity;
pub use queue::{PoolQuota, Queue, QueueSpec, ResourceAmounts};
pub use served_model::{ServedModel, ServedModelSpec, ServedModelStatus};
pub use training_job::*;
