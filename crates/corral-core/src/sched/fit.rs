//! Whether a job could ever run on a cluster: the one judgement behind a job's
//! `Unschedulable` reason while it waits (the scheduler's) and behind refusing it at
//! submit where the nodes are fixed ([`ClusterFit`]).
//!
//! It takes the cluster's nodes (their capacity, labels, taints, whether they take new
//! work) and queues as they are given, never what is free now: per pool that offers a GPU
//! type the job accepts, each replica must fit one node the job may use, the whole gang
//! must fit those nodes together, and the job's queue must be able to hold it there
//! (quota, borrowing included). A pool that fails is named with what falls short.

use std::cmp::Reverse;

use corral_api::gpu_type;

use super::explain::{Blocker, CPU, GPU, MEMORY, Misfit, Needs, PendingReason, TaintBlock};
use super::index::{ClusterIndex, NO_POOL, NodeFilter, NodeState, PodRequest};
use super::model::{ClusterSnapshot, JobRequest, SchedError};
use super::quota::{Amount, Quotas};
use super::taint::{Toleration, common_tolerations};

/// A job's replicas as the index counts them: (count, per-replica request) per group, the
/// order in which groups are placed (most GPUs first) and the gang's totals.
pub(crate) struct Gang {
    pub groups: Vec<(u32, PodRequest)>,
    pub order: Vec<u16>,
    /// GPUs, milli-CPUs and bytes of memory in all.
    pub total: Amount,
    pub replicas: u64,
}

impl Gang {
    /// `ext_id` names an extended resource by the index's id.
    pub fn new(req: &JobRequest, mut ext_id: impl FnMut(&str) -> u32) -> Self {
        let groups: Vec<(u32, PodRequest)> = req
            .groups
            .iter()
            .map(|g| {
                let mut ext: Vec<(u32, u64)> =
                    g.extended.iter().map(|(n, &v)| (ext_id(n), v)).collect();
                ext.sort_unstable();
                let pod = PodRequest {
                    cpu: g.cpu_milli,
                    mem: g.memory_bytes,
                    gpu: g.gpu,
                    ext,
                };
                (g.count, pod)
            })
            .collect();
        let mut order: Vec<u16> = (0..groups.len() as u16).collect();
        order.sort_by_key(|&i| (Reverse(groups[i as usize].1.gpu), i));
        let mut total = [0u64; 3];
        let mut replicas = 0u64;
        for (count, pod) in &groups {
            let c = u64::from(*count);
            replicas += c;
            total[0] = total[0].saturating_add(u64::from(pod.gpu).saturating_mul(c));
            total[1] = total[1].saturating_add(pod.cpu.saturating_mul(c));
            total[2] = total[2].saturating_add(pod.mem.saturating_mul(c));
        }
        Gang {
            groups,
            order,
            total,
            replicas,
        }
    }

    /// What the job needs, for the first clause of its reason.
    pub fn needs(&self, gpu_types: Vec<String>) -> Needs {
        let live = || self.groups.iter().filter(|(c, _)| *c > 0);
        let uniform = {
            let mut gs = live().map(|(_, p)| p.gpu);
            let first = gs.next();
            if gs.all(|g| Some(g) == first) {
                first
            } else {
                None
            }
        };
        let largest = live()
            .max_by_key(|(_, p)| (p.gpu, p.cpu, p.mem))
            .map(|(_, p)| (p.cpu, p.mem))
            .unwrap_or((0, 0));
        Needs {
            replicas: self.replicas,
            gpus_per_replica: uniform,
            total_gpus: self.total[0],
            gpu_types,
            cpu_milli: largest.0,
            memory_bytes: largest.1,
        }
    }
}

/// What [`judge`] finds.
pub(crate) struct Judgement {
    /// The job's queue, when it exists and admits the job's namespace.
    pub queue: Option<u32>,
    /// What every role of the job with replicas tolerates.
    pub tolerations: Vec<Toleration>,
    /// The GPU types the job names (those of its first group that names any).
    pub allowed: Option<Vec<String>>,
    /// Pools that could hold the job when empty, in the index's order.
    pub pools: Vec<u16>,
    /// Why every other pool (or the queue) can never hold it.
    pub blockers: Vec<Blocker>,
}

impl Judgement {
    /// Whether the job could not run even on the empty cluster.
    pub fn never_fits(&self) -> bool {
        self.queue.is_none() || self.pools.is_empty()
    }
}

/// The one judgement of whether `req` could ever run on the cluster `index` describes
/// (see the module docs). `unknown_ext` names extended resources of the job that no node
/// has, by id from `index.ext_ids.len()` on (a judge that may not add them to the index).
pub(crate) fn judge(
    index: &ClusterIndex,
    quotas: &Quotas,
    req: &JobRequest,
    gang: &Gang,
    unknown_ext: &[String],
) -> Judgement {
    let groups = &gang.groups;
    // Allowed GPU types: each group that uses GPUs and names types must accept the pool's
    // type (by `corral_api::gpu_type::matches`: aliases such as `H100` included).
    let named: Vec<&Vec<String>> = req
        .groups
        .iter()
        .filter(|g| g.gpu > 0 && g.count > 0 && !g.allowed_gpu_types.is_empty())
        .map(|g| &g.allowed_gpu_types)
        .collect();
    let existing: Vec<&str> = index
        .pools
        .iter()
        .filter_map(|p| p.gpu_type.as_deref())
        .collect();
    let accepts = |t: &str| {
        named.iter().all(|names| {
            names
                .iter()
                .any(|n| gpu_type::selects(n, t, existing.iter().copied()))
        })
    };
    let allowed: Option<Vec<String>> = named.first().map(|n| (*n).clone());
    let uses_gpus = gang.total[0] > 0;
    // A queue a job's namespace may not use is, for the job, no queue: it waits with a
    // reason naming the namespaces the queue admits.
    let namespace = req.key.split_once('/').map(|(ns, _)| ns);
    let mut refused = None;
    let queue = match quotas.by_name.get(&req.queue).copied() {
        Some(q) => {
            let allowed = &quotas.queues[q as usize].namespaces;
            let ok =
                allowed.is_empty() || namespace.is_some_and(|ns| allowed.iter().any(|a| a == ns));
            if !ok {
                refused = Some(Blocker::NamespaceNotAllowed {
                    queue: req.queue.clone(),
                    namespace: namespace.unwrap_or("").to_string(),
                    allowed: allowed.clone(),
                });
            }
            ok.then_some(q)
        }
        None => None,
    };
    let tolerations = common_tolerations(
        &req.tolerations,
        req.groups
            .iter()
            .filter(|g| g.count > 0)
            .map(|g| g.role.as_str()),
    );
    let filter = NodeFilter {
        selector: &req.node_selector,
        tolerations: &tolerations,
    };
    // Roles are named in a reason only when the job has several.
    let several_roles = req.groups.iter().filter(|g| g.count > 0).count() > 1;
    let role_of = |gi: usize| several_roles.then(|| req.groups[gi].role.clone());
    let mut pools = Vec::new();
    let mut blockers = Vec::new();
    for (pi, p) in index.pools.iter().enumerate() {
        let pi = pi as u16;
        let type_ok = match (&p.gpu_type, &allowed) {
            (None, _) => !uses_gpus,
            (Some(_), None) => true,
            (Some(t), Some(_)) => accepts(t),
        };
        if !type_ok || p.nodes.is_empty() {
            continue;
        }
        let biggest = groups
            .iter()
            .filter(|(c, _)| *c > 0)
            .map(|(_, pod)| pod.gpu)
            .max()
            .unwrap_or(0);
        if biggest > p.max_node_gpus {
            blockers.push(Blocker::TooLargeForNode {
                pool: p.name.clone(),
                gpu_type: p.gpu_type.clone(),
                gpus_per_replica: biggest,
                largest_node_gpus: p.max_node_gpus,
            });
            continue;
        }
        if gang.total[0] > p.total_gpus {
            blockers.push(Blocker::TooLargeForPool {
                pool: p.name.clone(),
                gpu_type: p.gpu_type.clone(),
                total_gpus: gang.total[0],
                pool_gpus: p.total_gpus,
            });
            continue;
        }
        // The first replica (largest first) that no node could ever hold.
        if let Some(&gi) = gang.order.iter().find(|&&gi| {
            let (c, pod) = &groups[gi as usize];
            *c > 0 && !index.could_ever_hold(pi, pod, &filter)
        }) {
            let pod = &groups[gi as usize].1;
            let taint = index
                .tainted_room(pi, &filter, pod, true)
                .map(|(n, gpus, taint)| TaintBlock {
                    node: index.nodes[n as usize].name.clone(),
                    free_gpus: if pod.gpu > 0 { gpus } else { 0 },
                    taint,
                });
            let mut misfit = index.misfit(pi, pod, &filter, unknown_ext);
            if let Misfit::Resources(s) = &mut misfit {
                s.role = role_of(gi as usize);
            }
            blockers.push(Blocker::NoSuitableNode {
                pool: p.name.clone(),
                gpu_type: p.gpu_type.clone(),
                taint,
                misfit: Some(misfit),
            });
            continue;
        }
        if gang.replicas > 1
            && let Some(b) = gang_short(index, pi, gang, &filter, &role_of)
        {
            blockers.push(b);
            continue;
        }
        if let Some(q) = queue
            && let Some(b) = quotas.never_admits(q, pi, gang.total, &index.pools)
        {
            blockers.push(b);
            continue;
        }
        pools.push(pi);
    }
    if pools.is_empty() && blockers.is_empty() {
        // Nodes no pool takes (declared pools select by GPU type and labels).
        const NAMED: usize = 3;
        let mut unpooled = index.nodes.iter().filter(|n| n.pool == NO_POOL);
        let names: Vec<String> = unpooled
            .by_ref()
            .take(NAMED)
            .map(|n| n.name.clone())
            .collect();
        let total = names.len() as u64 + unpooled.count() as u64;
        blockers.push(Blocker::NoMatchingPool {
            gpu_types: allowed.clone().unwrap_or_default(),
            asks_gpus: uses_gpus,
            unpooled: names,
            unpooled_total: total,
        });
    }
    if let Some(b) = refused {
        blockers.insert(0, b);
    } else if queue.is_none() {
        blockers.insert(
            0,
            Blocker::NoSuchQueue {
                queue: req.queue.clone(),
            },
        );
    }
    Judgement {
        queue,
        tolerations,
        allowed,
        pools,
        blockers,
    }
}

/// Why the whole gang can never fit the pool's nodes the job may use at once, though each
/// replica fits one: more GPUs, CPU or memory in all than those nodes have, or more
/// replicas of one role than the nodes hold by their shape. Only necessary conditions, so
/// that no job that could fit is ever refused (packing several roles is not tried).
fn gang_short(
    index: &ClusterIndex,
    pool: u16,
    gang: &Gang,
    filter: &NodeFilter<'_>,
    role_of: &dyn Fn(usize) -> Option<String>,
) -> Option<Blocker> {
    let p = &index.pools[pool as usize];
    let trivial = filter.is_trivial();
    let usable = || {
        p.nodes
            .iter()
            .map(|&n| &index.nodes[n as usize])
            .filter(|n| n.schedulable && ((trivial && n.taints.is_empty()) || filter.admits(n)))
    };
    // One pass that stops once the gang has room by every count, so that a gang that fits
    // costs what its size does, not what the pool's does.
    let mut sums = [0u64; 3];
    let mut fits = vec![0u64; gang.groups.len()];
    let enough = |sums: &[u64; 3], fits: &[u64]| {
        (0..3).all(|r| sums[r] >= gang.total[r])
            && gang
                .groups
                .iter()
                .zip(fits)
                .all(|((count, _), fit)| *fit >= u64::from(*count))
    };
    for n in usable() {
        if enough(&sums, &fits) {
            break;
        }
        sums[0] = sums[0].saturating_add(u64::from(n.gpus));
        sums[1] = sums[1].saturating_add(n.cpu_total);
        sums[2] = sums[2].saturating_add(n.mem_total);
        for ((_, pod), fit) in gang.groups.iter().zip(fits.iter_mut()) {
            *fit = fit.saturating_add(replicas_on_empty(n, pod));
        }
    }
    if enough(&sums, &fits) {
        return None;
    }
    let schedulable = p
        .nodes
        .iter()
        .filter(|&&n| index.nodes[n as usize].schedulable)
        .count();
    let narrowed = usable().count() < schedulable;
    let blocker = |resource: Option<&str>, needed: u64, most: u64, role: Option<String>| {
        Blocker::GangTooLarge {
            pool: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            resource: resource.map(str::to_string),
            needed,
            most,
            role,
            narrowed,
        }
    };
    for (r, resource) in [GPU, CPU, MEMORY].into_iter().enumerate() {
        if gang.total[r] > sums[r] {
            return Some(blocker(Some(resource), gang.total[r], sums[r], None));
        }
    }
    // Replicas of one role: how many each node holds by its shape.
    gang.order.iter().find_map(|&gi| {
        let (count, _) = &gang.groups[gi as usize];
        let (count, fit) = (u64::from(*count), fits[gi as usize]);
        (fit < count).then(|| blocker(None, count, fit, role_of(gi as usize)))
    })
}

/// How many replicas `pod` the node holds when empty (by every resource it asks).
fn replicas_on_empty(node: &NodeState, pod: &PodRequest) -> u64 {
    let each = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
    pod.ext.iter().fold(
        each(u64::from(node.gpus), u64::from(pod.gpu))
            .min(each(node.cpu_total, pod.cpu))
            .min(each(node.mem_total, pod.mem)),
        |m, &(id, v)| m.min(each(node.ext_capacity(id), v)),
    )
}

/// A cluster's nodes and queues, for judging jobs apart from a scheduler: a shell whose
/// nodes are fixed refuses at submit, before it takes its lock, what no node of it can
/// ever hold, by the very judgement that names a waiting job Unschedulable.
pub struct ClusterFit {
    index: ClusterIndex,
    quotas: Quotas,
}

impl std::fmt::Debug for ClusterFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterFit")
            .field("nodes", &self.index.nodes.len())
            .field("pools", &self.index.pools.len())
            .field("queues", &self.quotas.queues.len())
            .finish()
    }
}

impl ClusterFit {
    /// The cluster's nodes, pools and queues (what runs on it is not looked at).
    pub fn new(snapshot: &ClusterSnapshot) -> Result<Self, SchedError> {
        let index = ClusterIndex::new(&ClusterSnapshot {
            nodes: snapshot.nodes.clone(),
            pools: snapshot.pools.clone(),
            queues: Vec::new(),
            running: Vec::new(),
        })?;
        let quotas = Quotas::new(&snapshot.queues, &index.pools, index.cluster_total);
        Ok(ClusterFit { index, quotas })
    }

    /// Why `req` could never run on this cluster, even empty; `None` when it could.
    pub fn never_fits(&self, req: &JobRequest) -> Option<PendingReason> {
        never_fits(&self.index, &self.quotas, req)
    }
}

/// [`judge`] for a job the index does not hold: the reason it never fits, if so.
pub(crate) fn never_fits(
    index: &ClusterIndex,
    quotas: &Quotas,
    req: &JobRequest,
) -> Option<PendingReason> {
    // An elastic job is judged at its minimum: the size it is admitted at.
    let at_min;
    let req = if req.elastic.is_some() {
        at_min = super::elastic::at_min(req.clone());
        &at_min
    } else {
        req
    };
    // The scheduler refuses an empty job on its own terms.
    if req.groups.iter().all(|g| g.count == 0) {
        return None;
    }
    let known = index.ext_ids.len() as u32;
    let mut unknown: Vec<String> = Vec::new();
    let gang = Gang::new(req, |name| match index.ext_ids.get(name) {
        Some(&id) => id,
        None => match unknown.iter().position(|u| u == name) {
            Some(i) => known + i as u32,
            None => {
                unknown.push(name.to_string());
                known + unknown.len() as u32 - 1
            }
        },
    });
    let judged = judge(index, quotas, req, &gang, &unknown);
    judged.never_fits().then(|| PendingReason {
        needs: gang.needs(judged.allowed.unwrap_or_default()),
        blockers: judged.blockers,
    })
}
