//! The `corral` command's subcommands, as a library: the `corral` binary (`main.rs`) parses
//! arguments and dispatches here, and tests (`tests/e2e.rs`) call the same code. Subcommands
//! read files, call corral-api, corral-core and the server, and print; no scheduling or
//! validation logic lives here.
//!
//! - [`remote`]: commands that talk to a Corral server (submit, list, get, describe, ...).
//! - [`up`], [`quickstart`]: run the embedded cluster; [`doctor`]: what this machine offers it.
//! - [`manifests`]: `validate` and `convert` over files; [`plan`]: one scheduling cycle.
//! - [`sim`], [`sched_bench`], [`api_bench`], [`serve_bench`], [`pipeline_bench`],
//!   [`operator_bench`]: the simulator and the benchmarks of the scheduler, the API, the
//!   router, pipelines and the Kubernetes operator (on a real API server).
//! - [`input`], [`output`]: reading files, printing results; [`document_summary`]: what
//!   `validate` says it understood of each valid document.
//! - [`programs`]: `corral operator` and `corral up` run the `corral-operator` and
//!   `corral-server` programs beside `corral` in their own place.
//! - [`code_archive`]: the code snapshot `submit --code DIR` ships, as a tar archive.

pub mod api_bench;
pub mod artifacts_tool;
pub mod code_archive;
pub mod doctor;
pub mod document_summary;
pub mod input;
pub mod kfp_upload;
pub mod manifests;
pub mod operator_bench;
pub mod output;
pub mod params;
pub mod pipeline_bench;
pub mod plan;
pub mod programs;
pub mod quickstart;
pub mod remote;
pub mod sched_bench;
pub mod serve_bench;
pub mod sim;
pub mod up;
