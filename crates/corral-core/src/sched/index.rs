//! Free capacity, indexed so that placing a replica never scans every node.
//!
//! Per pool, nodes that may take new work sit in buckets by their number of free GPUs
//! (YuniKorn keeps nodes sorted by free capacity the same way). Within a bucket nodes are
//! ordered by (topology domain, node), so a range query finds room in one domain.
//! Free GPUs are a bit mask per node, so GPU indices come for free.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::explain::{CPU, GPU, MEMORY, Misfit, ResourceShort, Shortfall};
use super::model::{ClusterSnapshot, NodePoolConfig, SchedError};
use super::taint::{Taint, Toleration, first_untolerated, tolerates_all};

pub(crate) const NO_POOL: u16 = u16::MAX;

/// Nodes to reserve, and a packing of the gang on them: (group, node) per replica.
pub(crate) type ReservationPlan = (Vec<u32>, Vec<(u16, u32)>);
/// Room left on a node while packing: GPUs, CPU, memory, extended resources.
type Room = (u64, u64, u64, Vec<(u32, u64)>);

/// Fitting nodes of one free-GPU bucket compared by [`ClusterIndex::find_node`]: enough
/// to tell nodes apart by CPU and memory left, few enough to keep placement cheap.
const FITTING_PER_BUCKET: usize = 8;

/// How a placement leaves a node, best first when ordered: the GPUs it strands (free GPUs
/// the node can no longer back with its share of CPU and memory; negative when it uses
/// GPUs that were stranded), whether it breaks a whole free node of the pool's largest
/// size, and the free GPUs left (tightest fit). A cheap form of the fragmentation
/// gradient of "Beware of Fragmentation" (ATC 2023), with no workload model: each free GPU
/// needs the node's CPU and memory divided by its GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct NodeFit {
    pub stranded: i64,
    pub breaks_whole: bool,
    pub gpus_left: u32,
}

/// What one replica needs on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodRequest {
    pub cpu: u64,
    pub mem: u64,
    pub gpu: u32,
    /// Extended resources by id, sorted.
    pub ext: Vec<(u32, u64)>,
}

/// Node selector and tolerations of a job (what every role of it tolerates, see
/// [`super::taint::common_tolerations`]).
pub(crate) struct NodeFilter<'a> {
    pub selector: &'a BTreeMap<String, String>,
    pub tolerations: &'a [Toleration],
}

impl NodeFilter<'_> {
    pub(crate) fn admits(&self, node: &NodeState) -> bool {
        self.selects(node) && tolerates_all(self.tolerations, &node.taints)
    }
    pub(crate) fn selects(&self, node: &NodeState) -> bool {
        self.selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
    }
    pub(crate) fn is_trivial(&self) -> bool {
        self.selector.is_empty() && self.tolerations.is_empty()
    }
}

pub(crate) struct NodeState {
    pub name: String,
    pub pool: u16,
    pub domain: u32,
    pub gpus: u32,
    pub free_mask: u64,
    pub free_cpu: u64,
    pub free_mem: u64,
    pub cpu_total: u64,
    pub mem_total: u64,
    pub ext_free: Vec<(u32, u64)>,
    pub ext_total: Vec<(u32, u64)>,
    pub labels: BTreeMap<String, String>,
    /// The node's taints that keep pods off (`NoSchedule`, `NoExecute`) only.
    pub taints: Vec<Taint>,
    pub schedulable: bool,
    pub reserved: bool,
    /// GPUs the node reports unhealthy now ([`ClusterIndex::set_unhealthy`]): never free.
    pub unhealthy: u64,
    /// Of those, the ones the index holds itself (they were free, or were given back while
    /// unhealthy); a GPU a job still holds stays the job's until it gives it back.
    pub held_unhealthy: u64,
}

impl NodeState {
    pub fn free_gpus(&self) -> u32 {
        self.free_mask.count_ones()
    }
    /// Whether the node may take new work (and so sits in its pool's buckets).
    fn indexed(&self) -> bool {
        self.schedulable && self.pool != NO_POOL && !self.reserved
    }
    fn has_room(&self, pod: &PodRequest) -> bool {
        self.free_cpu >= pod.cpu
            && self.free_mem >= pod.mem
            && self.free_gpus() >= pod.gpu
            && pod.ext.iter().all(|&(id, v)| self.ext_free(id) >= v)
    }
    /// Of `free` GPUs, those that `cpu` and `memory` left cannot back at the node's own
    /// ratio of CPU and memory per GPU.
    fn stranded(&self, free: u32, cpu: u64, mem: u64) -> u32 {
        if free == 0 {
            return 0;
        }
        let gpus = u128::from(self.gpus);
        let backed = |left: u64, total: u64| match total {
            0 => u128::MAX,
            t => u128::from(left) * gpus / u128::from(t),
        };
        let usable = backed(cpu, self.cpu_total)
            .min(backed(mem, self.mem_total))
            .min(u128::from(free)) as u32;
        free - usable
    }
    fn ext_free(&self, id: u32) -> u64 {
        self.ext_free
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0, |&(_, v)| v)
    }
    pub(crate) fn ext_capacity(&self, id: u32) -> u64 {
        self.ext_total
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0, |&(_, v)| v)
    }
}

/// Which amount of a node a [`ResourceShort`] row reads.
#[derive(Clone, Copy)]
enum Key {
    Cpu,
    Mem,
    Ext(u32),
}

/// The most of a resource one of `nodes` has (first in order among equals), against what a
/// replica needs.
fn most_of(
    nodes: &[&NodeState],
    resource: &str,
    needed: u64,
    amount: impl Fn(&NodeState) -> u64,
) -> ResourceShort {
    let best = nodes.iter().map(|n| (amount(n), *n)).fold(
        None,
        |best: Option<(u64, &NodeState)>, (v, n)| match best {
            Some((b, _)) if b >= v => best,
            _ => Some((v, n)),
        },
    );
    ResourceShort {
        resource: resource.to_string(),
        needed,
        most: best.map_or(0, |(v, _)| v),
        node: best.filter(|(v, _)| *v > 0).map(|(_, n)| n.name.clone()),
    }
}

pub(crate) struct PoolState {
    pub name: String,
    pub gpu_type: Option<String>,
    /// Indexed nodes by free GPU count: (domain, node).
    pub buckets: Vec<BTreeSet<(u32, u32)>>,
    /// Free GPUs on indexed nodes.
    pub free_gpus: u64,
    /// GPUs on schedulable nodes, free or not.
    pub total_gpus: u64,
    pub max_node_gpus: u32,
    /// `total_gpus` and `max_node_gpus` less the GPUs unhealthy now.
    pub healthy_gpus: u64,
    pub max_node_healthy_gpus: u32,
    pub max_node_cpu: u64,
    pub max_node_mem: u64,
    pub nodes: Vec<u32>,
    /// Nodes of the pool that carry taints (few, usually), for naming the taint that keeps
    /// a job off a node without scanning every node.
    pub tainted: Vec<u32>,
    /// Jobs holding reservations here, with the reserved nodes.
    pub reservations: Vec<(String, Vec<u32>)>,
}

pub(crate) struct ClusterIndex {
    pub nodes: Vec<NodeState>,
    pub pools: Vec<PoolState>,
    pub node_by_name: HashMap<String, u32>,
    pub ext_ids: BTreeMap<String, u32>,
    /// Total CPU, memory and GPUs on schedulable nodes (for dominant resource shares).
    pub cluster_total: [u64; 3],
}

fn lowest_bits(mask: u64, n: u32) -> u64 {
    let mut out = 0u64;
    let mut m = mask;
    for _ in 0..n {
        let bit = m & m.wrapping_neg();
        out |= bit;
        m &= !bit;
    }
    out
}

impl ClusterIndex {
    pub fn new(snapshot: &ClusterSnapshot) -> Result<Self, SchedError> {
        let pools_cfg: Vec<NodePoolConfig> = if snapshot.pools.is_empty() {
            // One pool per GPU type, named after it; CPU-only nodes in `cpu`.
            let mut types: BTreeSet<Option<&String>> = BTreeSet::new();
            for n in &snapshot.nodes {
                types.insert(n.gpu_type.as_ref().filter(|_| n.gpus > 0));
            }
            types
                .into_iter()
                .map(|t| NodePoolConfig {
                    name: t.cloned().unwrap_or_else(|| "cpu".to_string()),
                    gpu_type: t.cloned(),
                    node_selector: BTreeMap::new(),
                })
                .collect()
        } else {
            snapshot.pools.clone()
        };
        let mut pools: Vec<PoolState> = pools_cfg
            .iter()
            .map(|p| PoolState {
                name: p.name.clone(),
                gpu_type: p.gpu_type.clone(),
                buckets: Vec::new(),
                free_gpus: 0,
                total_gpus: 0,
                max_node_gpus: 0,
                healthy_gpus: 0,
                max_node_healthy_gpus: 0,
                max_node_cpu: 0,
                max_node_mem: 0,
                nodes: Vec::new(),
                tainted: Vec::new(),
                reservations: Vec::new(),
            })
            .collect();
        let mut ext_ids = BTreeMap::new();
        let mut domains: BTreeMap<String, u32> = BTreeMap::new();
        let mut node_by_name = HashMap::with_capacity(snapshot.nodes.len());
        let mut nodes = Vec::with_capacity(snapshot.nodes.len());
        let mut cluster_total = [0u64; 3];
        for (i, n) in snapshot.nodes.iter().enumerate() {
            if n.gpus > 64 {
                return Err(SchedError::TooManyGpus {
                    node: n.name.clone(),
                    gpus: n.gpus,
                });
            }
            if node_by_name.insert(n.name.clone(), i as u32).is_some() {
                return Err(SchedError::DuplicateNode(n.name.clone()));
            }
            let explicit = !snapshot.pools.is_empty();
            let pool = pools_cfg
                .iter()
                .position(|p| super::pools::pool_selects(p, n, explicit))
                .map_or(NO_POOL, |p| p as u16);
            let next_domain = domains.len() as u32;
            let domain = match &n.topology {
                Some(t) => *domains.entry(t.clone()).or_insert(next_domain),
                None => u32::MAX,
            };
            let full_mask = if n.gpus == 64 {
                u64::MAX
            } else {
                (1u64 << n.gpus) - 1
            };
            let mut used_mask = 0u64;
            for &g in &n.allocated.gpu_indices {
                if g < n.gpus {
                    used_mask |= 1 << g;
                }
            }
            let mut ext_free: Vec<(u32, u64)> = Vec::new();
            let mut ext_total: Vec<(u32, u64)> = Vec::new();
            for (name, &cap) in &n.extended {
                let next = ext_ids.len() as u32;
                let id = *ext_ids.entry(name.clone()).or_insert(next);
                let used = n.allocated.extended.get(name).copied().unwrap_or(0);
                ext_free.push((id, cap.saturating_sub(used)));
                ext_total.push((id, cap));
            }
            ext_free.sort_unstable();
            ext_total.sort_unstable();
            if n.schedulable {
                // Saturating: a snapshot with absurd totals must not panic the scheduler.
                cluster_total[0] = cluster_total[0].saturating_add(u64::from(n.gpus));
                cluster_total[1] = cluster_total[1].saturating_add(n.cpu_milli);
                cluster_total[2] = cluster_total[2].saturating_add(n.memory_bytes);
            }
            let taints: Vec<Taint> = n
                .taints
                .iter()
                .filter(|t| t.keeps_pods_off())
                .cloned()
                .collect();
            if pool != NO_POOL {
                let p = &mut pools[pool as usize];
                p.nodes.push(i as u32);
                if !taints.is_empty() {
                    p.tainted.push(i as u32);
                }
                if n.schedulable {
                    p.total_gpus = p.total_gpus.saturating_add(u64::from(n.gpus));
                    p.max_node_gpus = p.max_node_gpus.max(n.gpus);
                    p.max_node_cpu = p.max_node_cpu.max(n.cpu_milli);
                    p.max_node_mem = p.max_node_mem.max(n.memory_bytes);
                }
            }
            nodes.push(NodeState {
                name: n.name.clone(),
                pool,
                domain,
                gpus: n.gpus,
                free_mask: full_mask & !used_mask,
                free_cpu: n.cpu_milli.saturating_sub(n.allocated.cpu_milli),
                free_mem: n.memory_bytes.saturating_sub(n.allocated.memory_bytes),
                cpu_total: n.cpu_milli,
                mem_total: n.memory_bytes,
                ext_free,
                ext_total,
                labels: n.labels.clone(),
                taints,
                schedulable: n.schedulable,
                reserved: false,
                unhealthy: 0,
                held_unhealthy: 0,
            });
        }
        for p in &mut pools {
            p.buckets = vec![BTreeSet::new(); p.max_node_gpus as usize + 1];
            p.healthy_gpus = p.total_gpus;
            p.max_node_healthy_gpus = p.max_node_gpus;
        }
        let mut index = ClusterIndex {
            nodes,
            pools,
            node_by_name,
            ext_ids,
            cluster_total,
        };
        for i in 0..index.nodes.len() as u32 {
            index.insert(i);
        }
        Ok(index)
    }

    pub fn ext_id(&mut self, name: &str) -> u32 {
        let next = self.ext_ids.len() as u32;
        *self.ext_ids.entry(name.to_string()).or_insert(next)
    }

    fn bucket_key(&self, node: u32) -> usize {
        let n = &self.nodes[node as usize];
        let p = &self.pools[n.pool as usize];
        (n.free_gpus() as usize).min(p.buckets.len().saturating_sub(1))
    }

    fn insert(&mut self, node: u32) {
        let n = &self.nodes[node as usize];
        if !n.indexed() {
            return;
        }
        let (pool, domain, free) = (n.pool as usize, n.domain, u64::from(n.free_gpus()));
        let key = self.bucket_key(node);
        let p = &mut self.pools[pool];
        p.buckets[key].insert((domain, node));
        p.free_gpus += free;
    }

    fn remove(&mut self, node: u32) {
        let n = &self.nodes[node as usize];
        if !n.indexed() {
            return;
        }
        let (pool, domain, free) = (n.pool as usize, n.domain, u64::from(n.free_gpus()));
        let key = self.bucket_key(node);
        let p = &mut self.pools[pool];
        p.buckets[key].remove(&(domain, node));
        p.free_gpus -= free;
    }

    /// Takes room for one replica on a node that has it; returns the GPU mask taken.
    pub fn take(&mut self, node: u32, pod: &PodRequest) -> u64 {
        let mask = lowest_bits(self.nodes[node as usize].free_mask, pod.gpu);
        self.apply(node, mask, pod, true);
        mask
    }

    /// Takes exactly these GPUs and resources, if they are free.
    pub fn take_exact(&mut self, node: u32, mask: u64, pod: &PodRequest) -> bool {
        let n = &self.nodes[node as usize];
        let ok = n.free_mask & mask == mask
            && n.free_cpu >= pod.cpu
            && n.free_mem >= pod.mem
            && pod.ext.iter().all(|&(id, v)| n.ext_free(id) >= v);
        if ok {
            self.apply(node, mask, pod, true);
        }
        ok
    }

    /// The node's unhealthy GPUs are now `mask` (its GPU health is observed while the
    /// cluster runs): a GPU that turns unhealthy is offered to no new replica (a job on it
    /// keeps it until it gives it back), and one that heals is free again. Returns whether
    /// anything changed.
    pub fn set_unhealthy(&mut self, node: u32, mask: u64) -> bool {
        let n = &self.nodes[node as usize];
        let full = if n.gpus >= 64 {
            u64::MAX
        } else {
            (1u64 << n.gpus) - 1
        };
        let mask = mask & full;
        if n.unhealthy == mask {
            return false;
        }
        self.remove(node);
        let n = &mut self.nodes[node as usize];
        let turned_bad = mask & !n.unhealthy & n.free_mask;
        n.free_mask &= !turned_bad;
        n.held_unhealthy |= turned_bad;
        let healed = n.held_unhealthy & !mask;
        n.free_mask |= healed;
        n.held_unhealthy &= !healed;
        n.unhealthy = mask;
        let pool = n.pool;
        self.insert(node);
        // The pool's healthy capacity, again over its nodes (health changes are rare).
        if let Some(p) = self.pools.get(pool as usize) {
            let healthy = |i: &u32| {
                let n = &self.nodes[*i as usize];
                n.gpus.saturating_sub(n.unhealthy.count_ones())
            };
            let schedulable = p
                .nodes
                .iter()
                .filter(|i| self.nodes[**i as usize].schedulable);
            let total: u64 = schedulable.clone().map(|i| u64::from(healthy(i))).sum();
            let max = schedulable.map(healthy).max().unwrap_or(0);
            let p = &mut self.pools[pool as usize];
            p.healthy_gpus = total;
            p.max_node_healthy_gpus = max;
        }
        true
    }

    /// Gives back what [`take`] or [`take_exact`] took.
    pub fn give(&mut self, node: u32, mask: u64, pod: &PodRequest) {
        self.apply(node, mask, pod, false);
    }

    fn apply(&mut self, node: u32, mask: u64, pod: &PodRequest, taking: bool) {
        self.remove(node);
        let n = &mut self.nodes[node as usize];
        if taking {
            n.free_mask &= !mask;
            n.free_cpu -= pod.cpu;
            n.free_mem -= pod.mem;
        } else {
            // An unhealthy GPU given back is not free: the index keeps it until it heals.
            n.held_unhealthy |= mask & n.unhealthy;
            n.free_mask |= mask & !n.unhealthy;
            n.free_cpu += pod.cpu;
            n.free_mem += pod.mem;
        }
        for &(id, v) in &pod.ext {
            if let Some(e) = n.ext_free.iter_mut().find(|(i, _)| *i == id) {
                e.1 = if taking { e.1 - v } else { e.1 + v };
            }
        }
        self.insert(node);
    }

    /// How many replicas of `g` GPUs fit in the pool's free capacity, counting GPUs only.
    pub fn fits_count(&self, pool: u16, g: u32) -> u64 {
        let p = &self.pools[pool as usize];
        if g == 0 {
            return u64::MAX;
        }
        (g as usize..p.buckets.len())
            .map(|k| p.buckets[k].len() as u64 * (k as u64 / u64::from(g)))
            .sum()
    }

    /// Of the pool's usable nodes (indexed: schedulable, not reserved) that the job's node
    /// selector and tolerations admit, the one with the most free GPUs (first in order
    /// among equals). Walks the buckets from the fullest; only for a job that waits.
    pub fn largest_free_for(&self, pool: u16, filter: &NodeFilter<'_>) -> (u32, Option<u32>) {
        let p = &self.pools[pool as usize];
        let trivial = filter.is_trivial();
        for k in (0..p.buckets.len()).rev() {
            for &(_, n) in &p.buckets[k] {
                let node = &self.nodes[n as usize];
                if (trivial && node.taints.is_empty()) || filter.admits(node) {
                    return (k as u32, Some(n));
                }
            }
        }
        (0, None)
    }

    /// The schedulable node of the pool with the most free GPUs that has room for `pod`
    /// (free now, or in all with `when_empty`) and that the job's node selector admits but
    /// one of whose taints it does not tolerate: (node, its GPUs for the job, that taint).
    /// Names what keeps the job off a node that has room.
    pub fn tainted_room(
        &self,
        pool: u16,
        filter: &NodeFilter<'_>,
        pod: &PodRequest,
        when_empty: bool,
    ) -> Option<(u32, u32, String)> {
        let p = &self.pools[pool as usize];
        p.tainted
            .iter()
            .filter_map(|&n| {
                let node = &self.nodes[n as usize];
                let room = if when_empty {
                    node.gpus >= pod.gpu
                        && node.cpu_total >= pod.cpu
                        && node.mem_total >= pod.mem
                        && pod.ext.iter().all(|&(id, v)| node.ext_capacity(id) >= v)
                } else {
                    node.has_room(pod)
                };
                if !node.schedulable || !filter.selects(node) || !room {
                    return None;
                }
                let taint = first_untolerated(filter.tolerations, &node.taints)?;
                let gpus = if when_empty {
                    node.gpus
                } else {
                    node.free_gpus()
                };
                Some((n, gpus, taint.to_string()))
            })
            .max_by_key(|&(n, free, _)| (free, std::cmp::Reverse(n)))
    }

    /// Why no usable node of the pool (indexed, admitted by the filter) has room for `pod`
    /// now, where GPUs are not what is missing: the most free CPU, memory and extended
    /// resources on one node among those with enough free GPUs. `None` when such a node
    /// has room, or when none has the GPUs (GPUs are then what is missing). Examines the
    /// nodes [`ClusterIndex::find_node`] examines.
    pub fn shortfall_now(
        &self,
        pool: u16,
        pod: &PodRequest,
        filter: &NodeFilter<'_>,
        scan_limit: usize,
    ) -> Option<Shortfall> {
        let p = &self.pools[pool as usize];
        let first = pod.gpu as usize;
        if first >= p.buckets.len() {
            return None;
        }
        let trivial = filter.is_trivial();
        let mut most = self.resource_rows(pod, &[]);
        let mut any = false;
        let mut narrowed = false;
        for bucket in &p.buckets[first..] {
            for &(_, n) in bucket.iter().take(scan_limit) {
                let node = &self.nodes[n as usize];
                if !((trivial && node.taints.is_empty()) || filter.admits(node)) {
                    narrowed = true;
                    continue;
                }
                if node.has_room(pod) {
                    return None;
                }
                any = true;
                for (row, key) in most.iter_mut() {
                    let have = match key {
                        Key::Cpu => node.free_cpu,
                        Key::Mem => node.free_mem,
                        Key::Ext(id) => node.ext_free(*id),
                    };
                    if have > row.most {
                        row.most = have;
                        row.node = Some(node.name.clone());
                    }
                }
            }
        }
        if !any || most.is_empty() {
            return None;
        }
        Some(Shortfall {
            role: None,
            narrowed,
            resources: most.into_iter().map(|(row, _)| row).collect(),
        })
    }

    /// Why no schedulable node of the pool could hold `pod` even empty (for a replica that
    /// [`ClusterIndex::could_ever_hold`] rules out): no node takes new work, none has the
    /// labels of the node selector, every selected one has a taint the job does not
    /// tolerate, or the rest are too small (the most of each resource one of them has).
    pub fn misfit(
        &self,
        pool: u16,
        pod: &PodRequest,
        filter: &NodeFilter<'_>,
        unknown_ext: &[String],
    ) -> Misfit {
        let p = &self.pools[pool as usize];
        let schedulable: Vec<&NodeState> = p
            .nodes
            .iter()
            .map(|&n| &self.nodes[n as usize])
            .filter(|n| n.schedulable)
            .collect();
        if schedulable.is_empty() {
            return Misfit::NoneSchedulable;
        }
        let selected: Vec<&NodeState> = schedulable
            .iter()
            .copied()
            .filter(|n| filter.selects(n))
            .collect();
        if selected.is_empty() {
            return Misfit::Selector {
                selector: filter.selector.clone(),
            };
        }
        let usable: Vec<&NodeState> = selected
            .iter()
            .copied()
            .filter(|n| tolerates_all(filter.tolerations, &n.taints))
            .collect();
        if usable.is_empty() {
            let taint = selected
                .iter()
                .find_map(|n| first_untolerated(filter.tolerations, &n.taints))
                .map(ToString::to_string)
                .unwrap_or_default();
            return Misfit::Taints {
                taint,
                narrowed: selected.len() < schedulable.len(),
            };
        }
        let mut rows: Vec<ResourceShort> = Vec::new();
        if pod.gpu > 0 {
            rows.push(most_of(&usable, GPU, u64::from(pod.gpu), |n| {
                u64::from(n.gpus)
            }));
        }
        for (row, key) in self.resource_rows(pod, unknown_ext) {
            rows.push(match key {
                Key::Cpu => most_of(&usable, CPU, row.needed, |n| n.cpu_total),
                Key::Mem => most_of(&usable, MEMORY, row.needed, |n| n.mem_total),
                Key::Ext(id) => most_of(&usable, &row.resource, row.needed, |n| n.ext_capacity(id)),
            });
        }
        Misfit::Resources(Shortfall {
            role: None,
            narrowed: usable.len() < schedulable.len(),
            resources: rows,
        })
    }

    /// A row per resource `pod` asks for besides GPUs (CPU, memory, extended), at zero.
    /// `unknown_ext` names ids past the index's own (resources no node has).
    fn resource_rows(&self, pod: &PodRequest, unknown_ext: &[String]) -> Vec<(ResourceShort, Key)> {
        let row = |resource: &str, needed: u64| ResourceShort {
            resource: resource.to_string(),
            needed,
            most: 0,
            node: None,
        };
        let mut rows = Vec::new();
        if pod.cpu > 0 {
            rows.push((row(CPU, pod.cpu), Key::Cpu));
        }
        if pod.mem > 0 {
            rows.push((row(MEMORY, pod.mem), Key::Mem));
        }
        for &(id, v) in &pod.ext {
            if v > 0 {
                let name = self
                    .ext_ids
                    .iter()
                    .find(|(_, i)| **i == id)
                    .map(|(name, _)| name.as_str())
                    .or_else(|| {
                        let past = id.checked_sub(self.ext_ids.len() as u32)?;
                        unknown_ext.get(past as usize).map(String::as_str)
                    })
                    .unwrap_or("");
                rows.push((row(name, v), Key::Ext(id)));
            }
        }
        rows
    }

    /// Free GPUs on nodes reserved for other jobs than `except` that this job could use
    /// (its filter admits the node and the node has room for a replica of `gpus` GPUs), and
    /// those jobs: a reservation is named in a job's reason only where it is what keeps
    /// the job from room it could otherwise take.
    pub fn reserved_room(
        &self,
        pool: u16,
        filter: &NodeFilter<'_>,
        gpus: u32,
        except: &str,
    ) -> (u64, Vec<String>) {
        let p = &self.pools[pool as usize];
        let trivial = filter.is_trivial();
        let mut free = 0u64;
        let mut jobs = Vec::new();
        for (job, nodes) in &p.reservations {
            if job == except {
                continue;
            }
            let room: u64 = nodes
                .iter()
                .map(|&n| &self.nodes[n as usize])
                .filter(|node| {
                    node.free_gpus() > 0
                        && node.free_gpus() >= gpus
                        && ((trivial && node.taints.is_empty()) || filter.admits(node))
                })
                .map(|node| u64::from(node.free_gpus()))
                .sum();
            if room > 0 {
                free += room;
                jobs.push(job.clone());
            }
        }
        (free, jobs)
    }

    /// Finds a node for one replica, preferring `domain` when given. Nodes are ranked by
    /// the GPUs the placement strands (see [`NodeFit`]), then by the tightest fit in free
    /// GPUs (keeps whole nodes free for large gangs). Buckets are searched from the tightest
    /// and the search stops after the first bucket that offers a node stranding nothing;
    /// at most [`FITTING_PER_BUCKET`] fitting nodes of a bucket are compared.
    pub fn find_node(
        &self,
        pool: u16,
        pod: &PodRequest,
        domain: Option<u32>,
        filter: &NodeFilter<'_>,
        scan_limit: usize,
    ) -> Option<(u32, NodeFit)> {
        let p = &self.pools[pool as usize];
        let first = pod.gpu as usize;
        if first >= p.buckets.len() {
            return None;
        }
        let trivial = filter.is_trivial();
        let ok = |n: u32| {
            let node = &self.nodes[n as usize];
            node.has_room(pod) && ((trivial && node.taints.is_empty()) || filter.admits(node))
        };
        // One search within the domain, or over all nodes.
        let search = |domain: Option<u32>| {
            let (lo, hi) = match domain {
                Some(d) => ((d, 0), (d, u32::MAX)),
                None => ((0, 0), (u32::MAX, u32::MAX)),
            };
            let mut best: Option<(NodeFit, u32)> = None;
            for bucket in &p.buckets[first..] {
                let mut fitting = 0;
                for &(_, n) in bucket.range(lo..=hi).take(scan_limit) {
                    if !ok(n) {
                        continue;
                    }
                    let fit = self.fit(n, pod, p.max_node_gpus);
                    if best.is_none_or(|(b, _)| fit < b) {
                        best = Some((fit, n));
                    }
                    fitting += 1;
                    if fitting == FITTING_PER_BUCKET {
                        break;
                    }
                }
                if best.is_some_and(|(b, _)| b.stranded <= 0) {
                    break;
                }
            }
            best.map(|(fit, n)| (n, fit))
        };
        if domain.is_some()
            && let Some(found) = search(domain)
        {
            return Some(found);
        }
        search(None)
    }

    /// How well `pod` fits node `n`, which has room for it.
    pub fn fit(&self, n: u32, pod: &PodRequest, max_node_gpus: u32) -> NodeFit {
        let node = &self.nodes[n as usize];
        let free = node.free_gpus();
        let left = free - pod.gpu;
        let before = node.stranded(free, node.free_cpu, node.free_mem);
        let after = node.stranded(left, node.free_cpu - pod.cpu, node.free_mem - pod.mem);
        NodeFit {
            stranded: i64::from(after) - i64::from(before),
            breaks_whole: left > 0 && free == node.gpus && free == max_node_gpus,
            gpus_left: left,
        }
    }

    /// Whether some schedulable node of the pool could hold the replica when empty.
    pub fn could_ever_hold(&self, pool: u16, pod: &PodRequest, filter: &NodeFilter<'_>) -> bool {
        let p = &self.pools[pool as usize];
        if pod.gpu > p.max_node_gpus || pod.cpu > p.max_node_cpu || pod.mem > p.max_node_mem {
            return false;
        }
        // One node must have it all: the pool's largest GPU count, CPU and memory may be on
        // different nodes.
        let trivial = filter.is_trivial();
        p.nodes.iter().any(|&n| {
            let node = &self.nodes[n as usize];
            node.schedulable
                && node.gpus >= pod.gpu
                && node.cpu_total >= pod.cpu
                && node.mem_total >= pod.mem
                && ((trivial && node.taints.is_empty()) || filter.admits(node))
                && pod.ext.iter().all(|&(id, v)| node.ext_capacity(id) >= v)
        })
    }

    /// Chooses nodes to reserve for a blocked gang: the nodes with the most free GPUs
    /// (full ones too: nothing new lands on a reserved node, so it only drains), until the
    /// gang has a concrete packing on their full capacity. Returns the nodes and that
    /// packing (group, node) per replica in placement order, or None when no such set is
    /// found (the gang cannot be helped by waiting; it then reserves nothing and blocks
    /// nobody).
    pub fn reservation_plan(
        &self,
        pool: u16,
        groups: &[(u32, PodRequest)],
        order: &[u16],
        filter: &NodeFilter<'_>,
    ) -> Option<ReservationPlan> {
        /// Nodes tried beyond the first set that could hold the gang by GPU count.
        const EXTRA_NODES: usize = 16;
        let p = &self.pools[pool as usize];
        let total: u64 = groups
            .iter()
            .map(|(c, pod)| u64::from(*c) * u64::from(pod.gpu))
            .sum();
        if total == 0 {
            return None;
        }
        let mut chosen: Vec<u32> = Vec::new();
        let mut capacity = 0u64;
        let mut extra = 0;
        for k in (0..p.buckets.len()).rev() {
            for &(_, n) in &p.buckets[k] {
                let node = &self.nodes[n as usize];
                if !(filter.admits(node) || filter.is_trivial() && node.taints.is_empty()) {
                    continue;
                }
                chosen.push(n);
                capacity += u64::from(node.gpus);
                if capacity < total {
                    continue;
                }
                if let Some(plan) = self.pack_on_empty(&chosen, groups, order) {
                    return Some((chosen, plan));
                }
                extra += 1;
                if extra > EXTRA_NODES {
                    return None;
                }
            }
        }
        None
    }

    /// Best-fit decreasing of the gang on these nodes as if they were empty.
    fn pack_on_empty(
        &self,
        nodes: &[u32],
        groups: &[(u32, PodRequest)],
        order: &[u16],
    ) -> Option<Vec<(u16, u32)>> {
        let mut room: Vec<Room> = nodes
            .iter()
            .map(|&n| {
                let node = &self.nodes[n as usize];
                (
                    u64::from(node.gpus),
                    node.cpu_total,
                    node.mem_total,
                    node.ext_total.clone(),
                )
            })
            .collect();
        let mut plan = Vec::new();
        for &gi in order {
            let (count, pod) = &groups[gi as usize];
            for _ in 0..*count {
                let best =
                    room.iter()
                        .enumerate()
                        .filter(|(_, r)| {
                            r.0 >= u64::from(pod.gpu)
                                && r.1 >= pod.cpu
                                && r.2 >= pod.mem
                                && pod.ext.iter().all(|&(id, v)| {
                                    r.3.iter().any(|&(i, free)| i == id && free >= v)
                                })
                        })
                        .min_by_key(|(i, r)| (r.0, *i))
                        .map(|(i, _)| i)?;
                let r = &mut room[best];
                r.0 -= u64::from(pod.gpu);
                r.1 -= pod.cpu;
                r.2 -= pod.mem;
                for &(id, v) in &pod.ext {
                    if let Some(e) = r.3.iter_mut().find(|(i, _)| *i == id) {
                        e.1 -= v;
                    }
                }
                plan.push((gi, nodes[best]));
            }
        }
        Some(plan)
    }

    /// Whether nothing at all is allocated on the node.
    pub fn node_is_empty(&self, n: u32) -> bool {
        let node = &self.nodes[n as usize];
        node.free_gpus() == node.gpus
            && node.free_cpu == node.cpu_total
            && node.free_mem == node.mem_total
            && node.ext_free == node.ext_total
    }

    /// Takes the nodes out of backfill for `job`.
    pub fn reserve_nodes(&mut self, pool: u16, job: &str, nodes: Vec<u32>) {
        for &n in &nodes {
            self.remove(n);
            self.nodes[n as usize].reserved = true;
        }
        self.pools[pool as usize]
            .reservations
            .push((job.to_string(), nodes));
    }

    /// Gives every reserved node back to backfill.
    pub fn clear_reservations(&mut self) {
        for pool in 0..self.pools.len() {
            let reservations = std::mem::take(&mut self.pools[pool].reservations);
            for (_, nodes) in reservations {
                for n in nodes {
                    self.nodes[n as usize].reserved = false;
                    self.insert(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
