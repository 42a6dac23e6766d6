//! The commands that talk to a Corral server: submit, list, get, describe, logs, delete,
//! suspend, resume, queues, nodes, top, audit, usage. Each reads its arguments, calls
//! [`corral_server::api_client::Client`] and prints; a server error is printed as the user's
//! problem and its fix (`path: message` lines), never as an HTTP dump.
//!
//! - `common_args`: where the server is, the namespace, how to print (`-o`); `login`: the
//!   client's configuration (server, token, a CA file or a pinned certificate).
//! - `jobs`: submit, list, get, describe, logs; `bulk`: delete, suspend, resume (by name,
//!   `--all` or a label selector); `cluster_views`: queues, nodes, top.
//! - `pipelines`: pipeline runs (`get pipelineruns`, `describe`/`delete pipelinerun/NAME`).
//! - `stored_pipelines`: stored pipelines (`get pipelines`, `describe`/`delete
//!   pipeline/NAME`) and `corral run PIPELINE`.
//! - `serving`: served models on get, describe and delete (`servedmodel NAME`).
//! - `usage`: the usage ledger (`corral usage`, table, JSON, YAML or CSV).
//! - `exec`: a command inside a replica (`exec`), and the MPI launcher's agent (`rsh`).
//! - `render`: the tables and reports as text; `print`: stdout and failures.

mod bulk;
mod cluster_views;
mod common_args;
mod completion;
mod exec;
mod jobs;
pub mod login;
mod pipelines;
pub(crate) mod print;
mod render;
pub mod serving;
pub mod stored_pipelines;
mod usage;

pub use bulk::{
    Confirm, JobArgs, Selector, confirm_on_terminal, delete_with, run_delete, run_resume,
    run_suspend,
};
pub use cluster_views::{
    AuditArgs, ClusterViewArgs, TopArgs, run_audit, run_nodes, run_queues, run_top,
};
pub use common_args::{
    ConnArgs, GlobalFlags, NamespaceArgs, Output, declared_namespace, set_global_flags,
};
pub use completion::{COMPLETE_VAR, job_names, registration};
pub use exec::{ExecArgs, run_exec, run_rsh};
pub use jobs::{
    DescribeArgs, GetArgs, ListArgs, LogsArgs, SubmitArgs, parse_duration_secs, run_describe,
    run_get, run_list, run_logs, run_submit,
};
pub use pipelines::describe_text as describe_run_text;
pub use render::{
    age, bytes, describe_text, jobs_table, names_text, nodes_text, queues_table, table, top_table,
};
pub use usage::{UsageArgs, run_usage, usage_csv, usage_table};
