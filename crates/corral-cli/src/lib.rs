//! The `corral` command's subcommands, as a library: the `corral` binary (`main.rs`) parses
//! arguments and dispatches here, and tests (`tests/e2e.rs`) call the same code. Subcommands
//! read files, call corral-api, corral-core and the server, and print; no scheduling or
//! validation logic lives here.
//!
//! - [`remote`]: commands that talk to a Corral server (submit, list, get, describe, ...).
//! - [`up`], [`quickstart`]: run the embedded cluster; [`doctor`]: what this machine offers it.
//! - [`manifests`]: `validate` and `convert` over files; [`plan`]: one scheduling cycle.
//! - [`sim`], [`bench`], [`api_bench`]: the simulator, the scheduler benchmark and the API
//!   benchmark.
//! - [`input`], [`output`], [`explain`]: reading files, printing results.
//! - [`snapshot`]: the code snapshot `submit --code DIR` ships.

pub mod api_bench;
pub mod bench;
pub mod doctor;
pub mod explain;
pub mod input;
pub mod manifests;
pub mod output;
pub mod plan;
pub mod quickstart;
pub mod remote;
pub mod sim;
pub mod snapshot;
pub mod up;
