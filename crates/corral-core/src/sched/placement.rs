//! Placing a whole gang in one pool: every replica or none.
//!
//! Replicas of a group are packed onto as few nodes as possible (the best node, by
//! `index::NodeFit`, that holds several of them, else one that holds one, filled), and
//! every later replica prefers the topology domain of the first. Tightest fit keeps whole
//! nodes free for large gangs: fragmentation is the first cause of stuck 8-GPU jobs.

use super::index::{ClusterIndex, NodeFilter, PodRequest};

/// One placed replica: group, index within the group, node, GPU mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Alloc {
    pub group: u16,
    pub index: u32,
    pub node: u32,
    pub mask: u64,
}

/// What placement needs to know about a job.
pub(crate) struct GangShape<'a> {
    /// One request per replica group, in the job's group order.
    pub groups: &'a [(u32, PodRequest)],
    /// Group indices in placement order (most GPUs first).
    pub order: &'a [u16],
    /// For each distinct per-replica GPU count g > 0: how many g-sized slots the gang needs.
    pub gpu_slots: &'a [(u32, u64)],
    pub filter: NodeFilter<'a>,
}

/// Cheap necessary condition: enough free GPU slots of every size the gang uses. A node
/// with k free GPUs holds at most floor(k/g) slots of g, and replicas on one node of sizes
/// g_i with sum <= k use at most floor(k/g) such slots, so this never rejects a gang that
/// fits.
pub(crate) fn enough_slots(index: &ClusterIndex, pool: u16, shape: &GangShape<'_>) -> bool {
    shape
        .gpu_slots
        .iter()
        .all(|&(g, need)| index.fits_count(pool, g) >= need)
}

fn scaled(pod: &PodRequest, n: u32) -> PodRequest {
    let k = u64::from(n);
    PodRequest {
        cpu: pod.cpu.saturating_mul(k),
        mem: pod.mem.saturating_mul(k),
        gpu: pod.gpu.saturating_mul(n),
        ext: pod
            .ext
            .iter()
            .map(|&(id, v)| (id, v.saturating_mul(k)))
            .collect(),
    }
}

/// How many replicas like `pod` fit on the node now.
fn replicas_fitting(index: &ClusterIndex, node: u32, pod: &PodRequest) -> u32 {
    let n = &index.nodes[node as usize];
    // A zero request does not limit the count: checked_div gives None for it.
    let mut fit = u64::from(u32::MAX);
    if let Some(f) = n.free_gpus().checked_div(pod.gpu) {
        fit = fit.min(u64::from(f));
    }
    for f in [
        n.free_cpu.checked_div(pod.cpu),
        n.free_mem.checked_div(pod.mem),
    ]
    .into_iter()
    .flatten()
    {
        fit = fit.min(f);
    }
    for &(id, v) in &pod.ext {
        let free = n
            .ext_free
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0, |&(_, f)| f);
        if let Some(f) = free.checked_div(v) {
            fit = fit.min(f);
        }
    }
    fit.min(u64::from(u32::MAX)) as u32
}

/// Places every replica or, failing that, nothing (the index is left as it was).
pub(crate) fn place_gang(
    index: &mut ClusterIndex,
    pool: u16,
    shape: &GangShape<'_>,
    scan_limit: usize,
) -> Option<Vec<Alloc>> {
    let mut allocs: Vec<Alloc> = Vec::new();
    let mut domain: Option<u32> = None;
    let max_gpus = index.pools[pool as usize].max_node_gpus;
    for &gi in shape.order {
        let (count, pod) = &shape.groups[gi as usize];
        let mut next_index = 0u32;
        // Replicas per node at most: a node never holds more than max_gpus / g of them.
        let per_node = max_gpus.checked_div(pod.gpu).map_or(1, |n| n.max(1));
        while next_index < *count {
            let remaining = count - next_index;
            let want = remaining.min(per_node);
            // Tightest node holding `want` replicas at once.
            let (node, take) = match index.find_node(
                pool,
                &scaled(pod, want),
                domain,
                &shape.filter,
                scan_limit,
            ) {
                Some((n, _)) => (Some(n), want),
                None if want > 1 => {
                    // Else fill the tightest node that holds one; then pack it.
                    match index.find_node(pool, pod, domain, &shape.filter, scan_limit) {
                        Some((n, _)) => {
                            let fit = replicas_fitting(index, n, pod).clamp(1, remaining);
                            (Some(n), fit)
                        }
                        None => (None, 0),
                    }
                }
                None => (None, 0),
            };
            let Some(node) = node else {
                for a in allocs.iter().rev() {
                    let pod = &shape.groups[a.group as usize].1;
                    index.give(a.node, a.mask, pod);
                }
                return None;
            };
            if domain.is_none() {
                domain = Some(index.nodes[node as usize].domain);
            }
            for _ in 0..take {
                let mask = index.take(node, pod);
                allocs.push(Alloc {
                    group: gi,
                    index: next_index,
                    node,
                    mask,
                });
                next_index += 1;
            }
        }
    }
    Some(allocs)
}
