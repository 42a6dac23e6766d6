//! Corral's pure core. Everything here is deterministic: no I/O, no clock (time is an
//! argument), no threads, and no decision depends on hash-map iteration order.
//! The embedded cluster, the Kubernetes operator and the simulator all call this code.

pub mod control;
pub mod launch;
pub mod lifecycle;
pub mod packed;
pub mod sched;
pub mod tenancy;
pub mod views;
