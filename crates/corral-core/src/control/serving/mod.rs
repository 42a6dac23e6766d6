//! Serving: how many replicas of each served model run, and which replica jobs to create or
//! remove, from the load the router observes and the time passed in.
//!
//! - `autoscale`: the Knative-style decision (stable and panic windows, scale-down delay,
//!   scale to zero after an idle period, a held request at zero asks for one replica).
//! - `replicas`: desired count + the replica jobs that exist -> create / remove.
//! - `model`: the TrainingJob output a model serves (`spec.model`), resolved at submit.
//! - `traffic`: what makes a revision, and the split between the latest and the stable
//!   revision (canary, rollout, rollback; promotion; drains).
//!
//! Placement is not decided here: each replica is a one-replica TrainingJob
//! (`corral_api::served_model::replica_job`) that the shell submits to the same
//! [`ControlPlane`](super::ControlPlane), so queues, quotas, priorities, preemption with
//! grace and GPU placement are training's, in every shell.

mod autoscale;
mod model;
mod replicas;
mod traffic;

use std::collections::{BTreeMap, BTreeSet};

use corral_api::served_model::{
    ModelOrigin, RevisionStatus, ServedModelSpec, ServedModelStatus, revision_name, revision_path,
    serving_path,
};
use jiff::Timestamp;

pub use autoscale::{Autoscaler, LoadSample, ScaleDecision};
pub use model::{
    ModelSourceProblem, output_pinned, outputs_released, resolve_model, resolve_model_from_run,
};
pub use replicas::{DRAIN_LIMIT, ReplicaAction, ReplicaDrains, ReplicaView, plan_replicas};
pub use traffic::{Share, promotes, revision_hash, same_revision, split, stable_index};

/// What the router saw of one model since the last pass (every shell's router reports
/// this).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServingObservation {
    /// Requests in flight (held ones included) over all its revisions.
    pub in_flight: u32,
    /// Requests arrived since the last observation.
    pub arrived: u64,
    /// Replica job names in rotation.
    pub ready: BTreeSet<String>,
    /// Requests under way on each revision's replicas, by revision name.
    pub in_flight_by_revision: BTreeMap<String, u32>,
    /// Requests under way on each replica, by replica job name.
    pub outstanding: BTreeMap<String, u32>,
}

/// One replica job of a model as a shell observes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaJob<'a> {
    pub name: &'a str,
    pub index: u32,
    /// Its revision label (none on replicas made before revisions: the first revision's).
    pub revision: Option<&'a str>,
    /// Succeeded or failed: it serves no more.
    pub finished: bool,
    /// Being deleted (stopping with its grace period).
    pub deleting: bool,
}

/// The revisions of `model` as [`Serving::decide`] takes them: each kept revision (by name,
/// oldest first) with its replica jobs, then any revision that only replica jobs still
/// name, each with the requests the router counts under way on it.
pub fn revision_views(
    model: &str,
    kept: &[String],
    jobs: &[ReplicaJob<'_>],
    seen: &ServingObservation,
) -> Vec<RevisionView> {
    let mut views: Vec<RevisionView> = kept
        .iter()
        .map(|name| RevisionView {
            name: name.clone(),
            ..RevisionView::default()
        })
        .collect();
    for j in jobs {
        let revision = j
            .revision
            .map_or_else(|| revision_name(model, 1), str::to_string);
        let view = ReplicaView {
            index: j.index,
            ready: seen.ready.contains(j.name),
            finished: j.finished,
            deleting: j.deleting,
            in_flight: seen.outstanding.get(j.name).copied().unwrap_or(0),
        };
        match views.iter_mut().find(|v| v.name == revision) {
            Some(v) => v.replicas.push(view),
            None => views.push(RevisionView {
                name: revision,
                replicas: vec![view],
                in_flight: 0,
            }),
        }
    }
    for v in &mut views {
        v.in_flight = seen
            .in_flight_by_revision
            .get(&v.name)
            .copied()
            .unwrap_or(0);
    }
    views
}

/// One revision of a model as the shell sees it: its replica jobs and the requests under
/// way on them (the router's count).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevisionView {
    pub name: String,
    pub replicas: Vec<ReplicaView>,
    pub in_flight: u32,
}

/// One model as the shell sees it: its spec now, its latest and stable revisions, and every
/// revision that is kept or still has replica jobs (replicas of a revision the shell no
/// longer keeps go under a view of their own: they drain and go).
#[derive(Clone, Copy, Debug)]
pub struct ModelView<'a> {
    pub spec: &'a ServedModelSpec,
    pub latest: &'a str,
    pub stable: &'a str,
    pub revisions: &'a [RevisionView],
}

/// One revision's decision for this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct RevisionPlan {
    pub name: String,
    pub share: Share,
    /// The autoscaler's decision, for a revision meant to carry requests; `None` for one
    /// that drains (its replicas stop once nothing is under way on them).
    pub scale: Option<ScaleDecision>,
    pub desired: u32,
    /// Replicas that count (neither finished nor being deleted) and those in rotation.
    pub current: u32,
    pub ready: u32,
    pub in_flight: u32,
    pub actions: Vec<ReplicaAction>,
}

/// One model's decision for this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelPlan {
    /// Every revision seen, latest and stable included, oldest first as given.
    pub revisions: Vec<RevisionPlan>,
    /// The stable revision after this pass (the latest, once promoted).
    pub stable: String,
    /// The latest revision became the stable one in this pass: the shell records it.
    pub promoted: bool,
    /// Revisions neither latest nor stable without any replica job left: the shell forgets
    /// them (and what it kept for them).
    pub retired: Vec<String>,
    /// Replicas (by index) out of rotation after this decision: the router sends them no
    /// new request while those under way end (`ReplicaAction::Drain`).
    pub draining: Vec<u32>,
    /// Sums over the revisions, and whether any autoscaler is in panic.
    pub desired: u32,
    pub current: u32,
    pub ready: u32,
    pub panic: bool,
    pub last_request: Option<Timestamp>,
    /// Replica jobs ended for good in a row without any replica serving since, and until
    /// when no new one is created ([`replacement_backoff`]): a crash loop or a launch the
    /// platform refuses does not make jobs as fast as the shell can.
    pub backoff: Option<(u32, Timestamp)>,
}

/// How long to wait before replacing a replica after `failures` replica jobs in a row ended
/// for good without any replica serving: the first at once, then 10 s doubling to 5 min
/// (Kubernetes' CrashLoopBackOff).
pub fn replacement_backoff(failures: u32) -> std::time::Duration {
    match failures {
        0 | 1 => std::time::Duration::ZERO,
        n => std::time::Duration::from_secs(10u64.saturating_mul(1 << (n - 2).min(5)).min(300)),
    }
}

/// Whether a model answers requests now: a replica in rotation, or, scaled to zero with
/// `minReplicas: 0` and nothing in the way (no `status.message`), a request is held until a
/// replica is ready (a cold start).
pub fn answers_requests(spec: &ServedModelSpec, status: &ServedModelStatus) -> bool {
    status.ready_replicas > 0
        || (status.message.is_none()
            && status.desired_replicas == 0
            && spec.autoscaling.min_replicas == 0)
}

impl ModelPlan {
    /// The model's status after this decision. `hash_of`: a kept revision's hash (by
    /// name); revisions without one are not shown.
    pub fn status(
        &self,
        namespace: &str,
        name: &str,
        latest: &str,
        model: Option<ModelOrigin>,
        hash_of: impl Fn(&str) -> Option<String>,
    ) -> ServedModelStatus {
        let revisions = self
            .revisions
            .iter()
            .filter(|r| !self.retired.contains(&r.name))
            .filter_map(|r| {
                Some(RevisionStatus {
                    name: r.name.clone(),
                    hash: hash_of(&r.name)?,
                    traffic_percent: r.share.traffic,
                    target_percent: r.share.target,
                    desired_replicas: r.desired,
                    replicas: r.current,
                    ready_replicas: r.ready,
                    in_flight: r.in_flight,
                    url: Some(revision_path(namespace, name, &r.name)),
                })
            })
            .collect();
        ServedModelStatus {
            model,
            desired_replicas: self.desired,
            replicas: self.current,
            ready_replicas: self.ready,
            panic: self.panic,
            url: Some(serving_path(namespace, name)),
            last_request_time: self.last_request,
            latest_revision: Some(latest.to_string()),
            stable_revision: Some(self.stable.clone()),
            revisions,
            message: self.backoff.map(|(n, until)| {
                format!(
                    "Back-off: {n} replica jobs in a row ended without serving (their events \
                     say why); the next one is made at {until}"
                )
            }),
        }
    }
}

/// One model's state between passes.
#[derive(Clone, Debug, Default)]
struct ModelState {
    /// What the router saw since the last decision.
    pending: Option<LoadSample>,
    /// An autoscaler per revision meant to carry requests.
    autoscalers: BTreeMap<String, Autoscaler>,
    /// Revisions that drained in the last decision: the router has been told to send them
    /// nothing, so what it counts on them now is all they will get.
    draining: BTreeSet<String>,
    /// Replicas taken out of rotation for a scale-down.
    replica_drains: ReplicaDrains,
    last_request: Option<Timestamp>,
    /// Replicas (by index) seen finished for good, so that each counts once.
    finished_seen: BTreeSet<u32>,
    /// Replica jobs ended for good in a row, and when the next may be made.
    failures: u32,
    replace_after: Option<Timestamp>,
}

/// Every served model's autoscalers and drains, by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct Serving {
    models: BTreeMap<String, ModelState>,
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Serving {
    pub fn new() -> Self {
        Self::default()
    }

    /// What the router saw of model `key` (`namespace/name`): requests in flight (held
    /// ones included) over all its revisions, and arrived since the last sample.
    pub fn observe_load(&mut self, key: &str, sample: LoadSample) {
        let m = self.models.entry(key.to_string()).or_default();
        if sample.arrived > 0 || sample.in_flight > 0 {
            m.last_request = Some(sample.at);
        }
        m.pending = Some(sample);
    }

    /// The traffic split, each revision's replicas and what to create or remove, for model
    /// `key` now.
    pub fn decide(&mut self, key: &str, view: ModelView<'_>, now: Timestamp) -> ModelPlan {
        let m = self.models.entry(key.to_string()).or_default();
        let sample = m.pending.take();
        let mut revisions: Vec<RevisionView> = view.revisions.to_vec();
        for name in [view.stable, view.latest] {
            if !revisions.iter().any(|r| r.name == name) {
                revisions.push(RevisionView {
                    name: name.to_string(),
                    ..RevisionView::default()
                });
            }
        }
        m.replica_drains
            .forget_gone(revisions.iter().flat_map(|r| &r.replicas));
        let finished: BTreeSet<u32> = revisions
            .iter()
            .flat_map(|r| &r.replicas)
            .filter(|x| x.finished && !x.deleting)
            .map(|x| x.index)
            .collect();
        let ended = count(finished.difference(&m.finished_seen).count());
        m.finished_seen = finished;
        if ended > 0 {
            m.failures = m.failures.saturating_add(ended);
            let wait = replacement_backoff(m.failures);
            m.replace_after = (!wait.is_zero()).then(|| now + wait);
        }
        // A replica draining for a scale-down serves no new request: not live.
        let out_of_rotation: BTreeSet<u32> = m.replica_drains.indices().collect();
        let live = |r: &RevisionView| {
            r.replicas
                .iter()
                .filter(|x| !x.finished && !x.deleting && !out_of_rotation.contains(&x.index))
                .copied()
                .collect::<Vec<_>>()
        };
        let ready_of = |name: &str| {
            revisions
                .iter()
                .find(|r| r.name == name)
                .map_or(0, |r| count(live(r).iter().filter(|x| x.ready).count()))
        };
        let canary = view.spec.canary_traffic_percent;
        let mut stable = view.stable.to_string();
        let (mut latest_share, mut stable_share) = split(
            canary,
            view.latest == stable,
            ready_of(view.latest),
            ready_of(&stable),
        );
        let promoted = view.latest != stable && promotes(canary, latest_share);
        if promoted {
            stable = view.latest.to_string();
            (latest_share, stable_share) = split(canary, true, 0, 0);
        }

        let mut taken: BTreeSet<u32> = revisions
            .iter()
            .flat_map(|r| r.replicas.iter().map(|x| x.index))
            .collect();
        let mut plans = Vec::new();
        let mut draining = BTreeSet::new();
        for r in &revisions {
            let share = if r.name == view.latest {
                latest_share
            } else if r.name == stable {
                stable_share
            } else {
                Share::default()
            };
            let live = live(r);
            let current = count(live.len());
            let ready = count(live.iter().filter(|x| x.ready).count());
            let (scale, desired) = if share.sized_for > 0 {
                let a = m.autoscalers.entry(r.name.clone()).or_default();
                if let Some(s) = sample {
                    a.observe(LoadSample {
                        at: s.at,
                        in_flight: u32::try_from(traffic::percent_of(
                            u64::from(s.in_flight),
                            share.sized_for,
                        ))
                        .unwrap_or(u32::MAX),
                        arrived: traffic::percent_of(s.arrived, share.sized_for),
                    });
                }
                let d = a.decide(&view.spec.autoscaling, now, current, ready);
                (Some(d), d.desired)
            } else {
                m.autoscalers.remove(&r.name);
                draining.insert(r.name.clone());
                // Its replicas stop once the router, told in the last pass to send it
                // nothing, has nothing under way on them.
                let drained = m.draining.contains(&r.name) && r.in_flight == 0;
                (None, if drained { 0 } else { current })
            };
            // A revision that drained whole has nothing under way left: its replicas go at
            // once; one that carries requests drains those it scales down.
            let actions =
                m.replica_drains
                    .plan(desired, &r.replicas, &mut taken, now, share.sized_for > 0);
            plans.push(RevisionPlan {
                name: r.name.clone(),
                share,
                scale,
                desired,
                current,
                ready,
                in_flight: r.in_flight,
                actions,
            });
        }
        m.draining = draining;
        if plans.iter().any(|p| p.ready > 0) {
            m.failures = 0;
            m.replace_after = None;
        }
        let backoff = m
            .replace_after
            .filter(|until| now < *until)
            .map(|until| (m.failures, until));
        if backoff.is_some() {
            for p in &mut plans {
                p.actions.retain(|a| !matches!(a, ReplicaAction::Create(_)));
            }
        }
        let retired = revisions
            .iter()
            .filter(|r| r.name != view.latest && r.name != stable && r.replicas.is_empty())
            .map(|r| r.name.clone())
            .collect();
        ModelPlan {
            desired: plans.iter().map(|p| p.desired).sum(),
            current: plans.iter().map(|p| p.current).sum(),
            ready: plans.iter().map(|p| p.ready).sum(),
            panic: plans.iter().any(|p| p.scale.is_some_and(|s| s.panic)),
            revisions: plans,
            stable,
            promoted,
            retired,
            draining: m.replica_drains.indices().collect(),
            last_request: m.last_request,
            backoff,
        }
    }

    /// A deleted model's autoscalers go with it.
    pub fn forget(&mut self, key: &str) {
        self.models.remove(key);
    }
}
