//! Stage 5: Bindings. Corral is the pods' scheduler (`schedulerName: corral`), so it binds
//! them itself, to the nodes of the job's admission: only once every replica of the gang
//! exists (or is being created in this pass), and only if all of them fit on their nodes now
//! next to every pod already bound there, whoever's (pods still terminating included). All
//! of a gang, or none of it. A pod created in the same pass gets its node in `spec.nodeName`
//! instead of a Binding (one write instead of two).

use std::collections::BTreeMap;

use corral_api::TrainingJobStatus;
use corral_api::training_job::Role;
use corral_core::control::{ControlPlane, Need, Room, event_reason, take_gang};
use corral_core::lifecycle::policy::launcher_waits_for_workers;
use corral_core::lifecycle::{ReplicaId, conditions, current_incarnation};
use corral_core::sched::Admission;

use super::JobPlan;
use super::PodBinding;
use super::observe_jobs::ObservedJob;
use super::translate::Creating;
use crate::observe::{self, Amounts, World};

/// The event of a gang that waits for room on a node (the core's reason).
pub const WAITING_FOR_ROOM: &str = event_reason::WAITING_FOR_ROOM;

/// The bindings of every job that holds an admission and has not finished, against the
/// room left on every node now (each gang's bindings take theirs in key order).
pub(super) fn bind_admitted(
    plans: &mut BTreeMap<String, JobPlan>,
    jobs: &[ObservedJob<'_>],
    plane: &ControlPlane,
    created: &BTreeMap<String, Creating>,
    world: &World,
) {
    // Device plugins pick GPU indices on Kubernetes: the room counts GPUs.
    let mut free: BTreeMap<String, Room> = observe::free_now(world)
        .into_iter()
        .map(|(node, a)| {
            let room = Room {
                gpus: a.gpus,
                gpu_indices: None,
                cpu_milli: a.cpu_milli,
                memory_bytes: a.memory_bytes,
                extended: a.extended,
            };
            (node, room)
        })
        .collect();
    let none = Creating::default();
    for o in jobs {
        let (Some(jp), Some(adm), Some(job)) = (
            plans.get_mut(&o.key),
            plane.admission(&o.key),
            plane.job(&o.key),
        ) else {
            continue;
        };
        let status = job.status.clone().unwrap_or_default();
        if conditions::is_terminal(&status) {
            continue;
        }
        let creating = created.get(&o.key).unwrap_or(&none);
        plan_bindings(jp, o, &adm.admission, &status, creating, &mut free);
    }
}

/// Binds the job's unbound current pods to the nodes of `adm`, taking their requests from
/// `free` (the room left on every node) when they all fit.
fn plan_bindings(
    jp: &mut JobPlan,
    o: &ObservedJob<'_>,
    adm: &Admission,
    status: &TrainingJobStatus,
    creating: &Creating,
    free: &mut BTreeMap<String, Room>,
) {
    let job = o.job;
    let wait_for_workers = launcher_waits_for_workers(&job.spec);
    let mut unbound: Vec<(ReplicaId, String, Amounts)> = Vec::new();
    for p in &adm.placements {
        let Ok(role) = p.role.parse::<Role>() else {
            return;
        };
        let id = ReplicaId::new(role, p.index);
        let cur = current_incarnation(status, id);
        let pod = o.pods.iter().find(|pod| {
            observe::replica_of(pod) == Some((id, cur)) && pod.metadata.deletion_timestamp.is_none()
        });
        match (pod, creating.requests.get(&id)) {
            (Some(pod), _) if observe::is_terminal(pod) || observe::pod_node(pod).is_some() => {}
            (Some(pod), _) => unbound.push((id, p.node.clone(), observe::pod_requests(pod))),
            (None, Some(need)) => unbound.push((id, p.node.clone(), need.clone())),
            (None, None) if wait_for_workers && role == Role::Launcher => {}
            // A replica of the gang does not exist yet: bind nothing.
            (None, None) => return,
        }
    }
    if unbound.is_empty() {
        return;
    }
    // The core decides whether the gang fits in the room the pods bound there leave.
    let needs: Vec<Need> = unbound
        .iter()
        .map(|(id, node, need)| Need {
            replica: id.to_string(),
            node: node.clone(),
            gpu_indices: Vec::new(),
            gpus: need.gpus,
            cpu_milli: need.cpu_milli,
            memory_bytes: need.memory_bytes,
            extended: need.extended.clone(),
        })
        .collect();
    if let Err(why) = take_gang(free, &needs) {
        if !jp.events.iter().any(|e| e.reason == WAITING_FOR_ROOM) {
            jp.event(false, WAITING_FOR_ROOM, why);
        }
        return;
    }
    for (id, node, _) in unbound {
        let pod = id.name(&job.metadata.name);
        // A pod made in this pass is made on its node: one write, not a create and a Binding.
        match jp
            .create
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
        {
            Some(p) => p.spec.get_or_insert_with(Default::default).node_name = Some(node),
            None => jp.bind.push(PodBinding { pod, node }),
        }
    }
}
