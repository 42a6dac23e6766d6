//! Serving: how many replicas of each served model run, and which replica jobs to create or
//! remove, from the load the router observes and the time passed in.
//!
//! - `autoscale`: the Knative-style decision (stable and panic windows, scale-down delay,
//!   scale to zero after an idle period, a held request at zero asks for one replica).
//! - `replicas`: desired count + the replica jobs that exist -> create / remove.
//!
//! Placement is not decided here: each replica is a one-replica TrainingJob
//! (`corral_api::served_model::replica_job`) that the shell submits to the same
//! [`ControlPlane`](super::ControlPlane), so queues, quotas, priorities, preemption with
//! grace and GPU placement are training's, in every shell.

mod autoscale;
mod replicas;

use std::collections::BTreeMap;

use corral_api::served_model::ServedModelSpec;
use jiff::Timestamp;

pub use autoscale::{Autoscaler, LoadSample, ScaleDecision};
pub use replicas::{ReplicaAction, ReplicaView, plan_replicas};

/// One model's decision for this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelPlan {
    pub scale: ScaleDecision,
    /// Replicas that count (neither finished nor being deleted) and those in rotation.
    pub current: u32,
    pub ready: u32,
    pub actions: Vec<ReplicaAction>,
    pub last_request: Option<Timestamp>,
}

/// Every served model's autoscaler, by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct Serving {
    models: BTreeMap<String, Autoscaler>,
}

impl Serving {
    pub fn new() -> Self {
        Self::default()
    }

    /// What the router saw of model `key` (`namespace/name`).
    pub fn observe_load(&mut self, key: &str, sample: LoadSample) {
        self.models
            .entry(key.to_string())
            .or_default()
            .observe(sample);
    }

    /// How many replicas model `key` should have now, and what to create or remove.
    pub fn decide(
        &mut self,
        key: &str,
        spec: &ServedModelSpec,
        now: Timestamp,
        replicas: &[ReplicaView],
    ) -> ModelPlan {
        let live = replicas.iter().filter(|r| !r.finished && !r.deleting);
        let current = u32::try_from(live.clone().count()).unwrap_or(u32::MAX);
        let ready = u32::try_from(live.filter(|r| r.ready).count()).unwrap_or(u32::MAX);
        let autoscaler = self.models.entry(key.to_string()).or_default();
        let scale = autoscaler.decide(&spec.autoscaling, now, current, ready);
        ModelPlan {
            scale,
            current,
            ready,
            actions: plan_replicas(scale.desired, replicas),
            last_request: autoscaler.last_request(),
        }
    }

    /// A deleted model's autoscaler goes with it.
    pub fn forget(&mut self, key: &str) {
        self.models.remove(key);
    }
}
