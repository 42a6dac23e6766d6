//! The embedded shell: Corral on one machine with nothing to install. It observes local
//! processes, calls corral-core (scheduler, lifecycle, launch contract), applies the decisions
//! and records the outcome in a SQLite store. It decides nothing itself.

pub mod cluster;
pub mod config;
pub mod lock;
pub mod store;

pub use cluster::{Cluster, ClusterConfig, ClusterError};
pub use config::ClusterFileConfig;
pub mod artifacts;
pub mod cgroup;
pub mod code;
pub mod doctor;
pub mod exec;
pub mod executor;
pub mod gpu;
pub mod inventory;
pub mod ports;
pub mod shim;
pub mod tenancy;
