//! Gandiva (Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning",
//! OSDI 2018), as far as a round-based simulator allows: policy `gandiva_nodes`. (Policy
//! `gandiva` is Gavel's rendering of Gandiva, an equal time-share of the cluster; see
//! [`super::gavel::Objective::EqualShare`].)
//!
//! - **Heterogeneity-agnostic**: a job may run on any GPU type where it runs at all; the type
//!   is chosen for packing, never for speed.
//! - **Packing with locality**: a job of `k` GPUs gets the fewest nodes possible
//!   (`ceil(k / GPUs per node)`): one node when it fits one, the partly used node with the
//!   fewest free GPUs that holds it (partly used nodes fill first); across types, the
//!   placement on fewer nodes, then with less left over, then on the type with the most
//!   free GPUs (load balance, blind to speed), then the first type.
//! - **Migration to defragment**: when a multi-GPU job cannot get such a placement although
//!   the GPUs are free in total, single-node jobs are moved off the node(s) it needs onto
//!   other nodes (a running job that moves pays the restart cost, as a migration).
//! - **Time-slicing (suspend-resume) when oversubscribed**: a job that still finds no GPUs
//!   joins the least shared set of GPUs held by jobs of its own size (Gandiva's affinity),
//!   up to [`Gandiva::max_share`] (2) jobs per set; the jobs of a set take turns, round
//!   robin, for [`Gandiva::quantum_s`] each, and each turn pays the engine's restart cost.
//!   Gandiva's turns are about a minute, since its suspend-resume takes well under a second
//!   and keeps all progress; the engine charges `restart_s` per resume and the work since
//!   the last checkpoint per suspend, so a turn here lasts whole rounds adding up to at
//!   least 10 restarts and more than a checkpoint interval (360 s with the defaults). When
//!   GPUs free up, suspended jobs of shared sets move onto them (Gandiva undoes
//!   oversubscription on departures).
//! - A job that can be neither placed nor time-sliced waits; jobs behind it in arrival order
//!   do not overtake it (Gandiva does not say how it keeps large jobs from starving; this
//!   does).
//!
//! Not modelled: packing two jobs onto one GPU at once (Gandiva's "packing"; Gavel's
//! throughput file has co-location rates, but the engine gives each GPU to one job at a
//! time, so packing here is node packing plus time-slicing) and grow-shrink.

use std::collections::BTreeMap;

use super::{Assignment, Policy, RoundCtx};
use crate::cluster::SimCluster;
use crate::job::SimJob;
use crate::round::EngineConfig;

/// How good a placement is (smaller is better): nodes, GPUs left free on them, the type's
/// free GPUs (more first), the type.
type PlaceKey = (usize, u32, std::cmp::Reverse<u32>, usize);

/// `(node index, GPUs)` per node.
type Nodes = Vec<(usize, u32)>;

/// Groups to move, with their new nodes.
type Moves = Vec<(u64, Nodes)>;

/// GPUs that a set of jobs time-shares; `members[0]` runs.
#[derive(Clone, Debug, PartialEq)]
struct Group {
    gpu_type: usize,
    nodes: Vec<(usize, u32)>,
    members: Vec<usize>,
    /// When the running member's turn began (None: at the next round).
    slice_start: Option<f64>,
}

pub struct Gandiva {
    /// Length of a turn on time-shared GPUs; 0 (default): the fewest whole rounds that last
    /// 10x the restart cost and longer than a checkpoint interval plus the restart cost.
    pub quantum_s: f64,
    /// Jobs that may share one set of GPUs.
    pub max_share: usize,
    groups: BTreeMap<u64, Group>,
    next_id: u64,
    group_of: BTreeMap<usize, u64>,
    /// Waiting jobs without GPUs, in arrival order.
    queue: Vec<usize>,
    /// Nodes per type, and GPUs per node of each type (its largest node).
    by_type: Vec<Vec<usize>>,
    node_size: Vec<u32>,
}

impl Default for Gandiva {
    fn default() -> Self {
        Gandiva {
            quantum_s: 0.0,
            max_share: 2,
            groups: BTreeMap::new(),
            next_id: 0,
            group_of: BTreeMap::new(),
            queue: Vec::new(),
            by_type: Vec::new(),
            node_size: Vec::new(),
        }
    }
}

/// A placement of `k` GPUs of type `t` on the fewest nodes, filling partly used nodes
/// first; `None` when it needs more nodes than that. Does not change `free`.
fn local_place(free: &[u32], nodes: &[usize], node_size: u32, k: u32) -> Option<Vec<(usize, u32)>> {
    let m = k.div_ceil(node_size.max(1)) as usize;
    if m <= 1 {
        let n = nodes
            .iter()
            .copied()
            .filter(|&n| free[n] >= k)
            .min_by_key(|&n| (free[n], n))?;
        return Some(vec![(n, k)]);
    }
    let mut order: Vec<usize> = nodes.iter().copied().filter(|&n| free[n] > 0).collect();
    order.sort_by_key(|&n| (std::cmp::Reverse(free[n]), n));
    order.truncate(m);
    let total: u32 = order.iter().map(|&n| free[n]).sum();
    if total < k {
        return None;
    }
    let mut left = k;
    let mut out = Vec::new();
    for n in order {
        let take = free[n].min(left);
        if take > 0 {
            out.push((n, take));
            left -= take;
        }
    }
    out.sort_unstable();
    Some(out)
}

impl Gandiva {
    fn free(&self, cluster: &SimCluster) -> Vec<u32> {
        let mut free: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
        for g in self.groups.values() {
            for &(n, k) in &g.nodes {
                free[n] = free[n].saturating_sub(k);
            }
        }
        free
    }

    /// The best free placement of job `j` over the types it runs on.
    fn place(&self, ctx: &RoundCtx, free: &[u32], j: usize) -> Option<(usize, Vec<(usize, u32)>)> {
        let k = ctx.jobs[j].gpus;
        let mut best: Option<(PlaceKey, usize, Nodes)> = None;
        for t in 0..ctx.cluster.types.len() {
            if ctx.tput[j][t] <= 0.0 {
                continue;
            }
            let Some(p) = local_place(free, &self.by_type[t], self.node_size[t], k) else {
                continue;
            };
            let left: u32 = p.iter().map(|&(n, g)| free[n] - g).sum();
            let type_free: u32 = self.by_type[t].iter().map(|&n| free[n]).sum();
            let key = (p.len(), left, std::cmp::Reverse(type_free), t);
            if best.as_ref().is_none_or(|b| key < b.0) {
                best = Some((key, t, p));
            }
        }
        best.map(|(_, t, p)| (t, p))
    }

    /// Moves single-node groups off the nodes a job of `k` GPUs on type `t` needs, so that
    /// it fits them. Returns the job's placement and the moves `(group, new nodes)`.
    fn defragment(&self, free: &[u32], t: usize, k: u32) -> Option<(Nodes, Moves)> {
        let nodes = &self.by_type[t];
        let size = self.node_size[t];
        let m = k.div_ceil(size.max(1)) as usize;
        let total: u32 = nodes.iter().map(|&n| free[n]).sum();
        if total < k || m > nodes.len() {
            return None;
        }
        // Groups that live on one node, by node.
        let mut on_node: BTreeMap<usize, Vec<(u32, u64)>> = BTreeMap::new();
        for (&id, g) in &self.groups {
            if g.gpu_type == t && g.nodes.len() == 1 {
                let (n, c) = g.nodes[0];
                on_node.entry(n).or_default().push((c, id));
            }
        }
        for v in on_node.values_mut() {
            v.sort_unstable();
        }
        // Candidate target sets: for one node, every node; for more, the m nodes with the
        // most free GPUs plus movable ones.
        let mut candidates: Vec<Vec<usize>> = Vec::new();
        if m == 1 {
            candidates.extend(nodes.iter().map(|&n| vec![n]));
        } else {
            let mut order = nodes.clone();
            let movable = |n: usize| -> u32 {
                free[n] + on_node.get(&n).map_or(0, |v| v.iter().map(|x| x.0).sum())
            };
            order.sort_by_key(|&n| (std::cmp::Reverse(movable(n)), n));
            order.truncate(m);
            candidates.push(order);
        }
        let mut best: Option<(u32, Nodes, Moves)> = None;
        for target in candidates {
            let have: u32 = target.iter().map(|&n| free[n]).sum();
            let mut deficit = k.saturating_sub(have);
            if deficit == 0 {
                continue; // it fits without moving anything: not a fragmentation case
            }
            let mut scratch = free.to_vec();
            let mut moves = Vec::new();
            let mut moved = 0u32;
            // Evict the smallest groups first, from the target nodes in order.
            let mut evict: Vec<(u32, u64, usize)> = target
                .iter()
                .flat_map(|&n| {
                    on_node
                        .get(&n)
                        .into_iter()
                        .flatten()
                        .map(move |&(c, id)| (c, id, n))
                })
                .collect();
            evict.sort_unstable();
            let others: Vec<usize> = nodes
                .iter()
                .copied()
                .filter(|n| !target.contains(n))
                .collect();
            for (c, id, n) in evict {
                if deficit == 0 {
                    break;
                }
                let Some(dest) = local_place(&scratch, &others, size, c) else {
                    continue;
                };
                for &(d, g) in &dest {
                    scratch[d] -= g;
                }
                scratch[n] += c;
                deficit = deficit.saturating_sub(c);
                moved += c;
                moves.push((id, dest));
            }
            if deficit > 0 {
                continue;
            }
            let Some(place) = local_place(&scratch, &target, size, k) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| moved < b.0) {
                best = Some((moved, place, moves));
            }
        }
        best.map(|(_, p, m)| (p, m))
    }

    fn new_group(&mut self, t: usize, nodes: Vec<(usize, u32)>, j: usize, free: &mut [u32]) {
        for &(n, g) in &nodes {
            free[n] -= g;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.groups.insert(
            id,
            Group {
                gpu_type: t,
                nodes,
                members: vec![j],
                slice_start: None,
            },
        );
        self.group_of.insert(j, id);
    }
}

impl Policy for Gandiva {
    fn name(&self) -> String {
        "gandiva_nodes".into()
    }

    fn init(
        &mut self,
        cluster: &SimCluster,
        _jobs: &[SimJob],
        _tput: &[Vec<f64>],
        cfg: &EngineConfig,
    ) -> Result<(), String> {
        if self.quantum_s <= 0.0 {
            // The fewest whole rounds that last 10 restarts (so a turn loses at most a tenth
            // to restarting) and outlast a checkpoint interval plus the restart (the engine
            // charges a suspended job the work since its last checkpoint; a shorter turn
            // would lose all of it every time).
            let need = (10.0 * cfg.restart_s).max(cfg.checkpoint_s + cfg.restart_s);
            let rounds = (need / cfg.round_s - 1e-9).ceil().max(1.0);
            self.quantum_s = rounds * cfg.round_s;
        }
        if self.max_share == 0 {
            return Err("gandiva: max_share must be at least 1".into());
        }
        let n = cluster.types.len();
        self.by_type = vec![Vec::new(); n];
        self.node_size = vec![0; n];
        for (i, node) in cluster.nodes.iter().enumerate() {
            self.by_type[node.gpu_type].push(i);
            self.node_size[node.gpu_type] = self.node_size[node.gpu_type].max(node.gpus);
        }
        Ok(())
    }

    fn on_arrival(&mut self, job: usize, _spec: &SimJob, _tput: &[f64]) {
        self.queue.push(job);
    }

    fn on_finish(&mut self, job: usize) {
        self.queue.retain(|&j| j != job);
        if let Some(id) = self.group_of.remove(&job)
            && let Some(g) = self.groups.get_mut(&id)
        {
            let was_running = g.members.first() == Some(&job);
            g.members.retain(|&j| j != job);
            if g.members.is_empty() {
                self.groups.remove(&id);
            } else if was_running {
                g.slice_start = None;
            }
        }
    }

    fn schedule(&mut self, ctx: &RoundCtx) -> Vec<Assignment> {
        let mut free = self.free(ctx.cluster);
        // Waiting jobs in arrival order: a free placement, else room made by migration,
        // else a turn on GPUs shared with jobs of the same size; else wait, and nobody
        // behind overtakes.
        let mut blocked = false;
        let queue = std::mem::take(&mut self.queue);
        let mut still = Vec::new();
        for j in queue {
            if blocked {
                still.push(j);
                continue;
            }
            if let Some((t, p)) = self.place(ctx, &free, j) {
                self.new_group(t, p, j, &mut free);
                continue;
            }
            let k = ctx.jobs[j].gpus;
            if k > 1 {
                let defrag = (0..ctx.cluster.types.len())
                    .filter(|&t| ctx.tput[j][t] > 0.0)
                    .find_map(|t| self.defragment(&free, t, k).map(|d| (t, d)));
                if let Some((t, (place, moves))) = defrag {
                    for (id, dest) in moves {
                        if let Some(g) = self.groups.get_mut(&id) {
                            for &(n, c) in &g.nodes {
                                free[n] += c;
                            }
                            for &(n, c) in &dest {
                                free[n] -= c;
                            }
                            g.nodes = dest;
                        }
                    }
                    self.new_group(t, place, j, &mut free);
                    continue;
                }
            }
            let join = self
                .groups
                .iter()
                .filter(|(_, g)| {
                    g.members.len() < self.max_share
                        && ctx.tput[j][g.gpu_type] > 0.0
                        && g.nodes.iter().map(|x| x.1).sum::<u32>() == k
                })
                .min_by_key(|(id, g)| (g.members.len(), **id))
                .map(|(id, _)| *id);
            if let Some(id) = join
                && let Some(g) = self.groups.get_mut(&id)
            {
                g.members.push(j);
                self.group_of.insert(j, id);
                continue;
            }
            blocked = true;
            still.push(j);
        }
        self.queue = still;
        // Undo oversubscription where GPUs are free (nobody is waiting).
        if !blocked {
            let ids: Vec<u64> = self.groups.keys().copied().collect();
            for id in ids {
                while let Some(g) = self.groups.get(&id)
                    && g.members.len() > 1
                    && let Some(&j) = g.members.last()
                {
                    let Some((t, p)) = self.place(ctx, &free, j) else {
                        break;
                    };
                    if let Some(g) = self.groups.get_mut(&id) {
                        g.members.pop();
                    }
                    self.new_group(t, p, j, &mut free);
                }
            }
        }
        // Round robin on shared GPUs.
        for g in self.groups.values_mut() {
            match g.slice_start {
                None => g.slice_start = Some(ctx.now),
                Some(s) if g.members.len() > 1 && ctx.now - s >= self.quantum_s - 1e-9 => {
                    g.members.rotate_left(1);
                    g.slice_start = Some(ctx.now);
                }
                Some(_) => {}
            }
        }
        self.groups
            .values()
            .filter_map(|g| {
                Some(Assignment {
                    job: *g.members.first()?,
                    gpu_type: g.gpu_type,
                    placement: Some(g.nodes.clone()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_placement_fills_partly_used_nodes_and_uses_fewest_nodes() {
        // Nodes of 4 GPUs with 4, 1, 3 free.
        let free = [4, 1, 3];
        let nodes = [0, 1, 2];
        assert_eq!(local_place(&free, &nodes, 4, 1), Some(vec![(1, 1)]));
        assert_eq!(local_place(&free, &nodes, 4, 3), Some(vec![(2, 3)]));
        assert_eq!(local_place(&free, &nodes, 4, 4), Some(vec![(0, 4)]));
        // 6 GPUs need 2 nodes: 4 + 3 free.
        assert_eq!(local_place(&free, &nodes, 4, 6), Some(vec![(0, 4), (2, 2)]));
        // 8 GPUs are free in total but not on 2 nodes.
        assert_eq!(local_place(&free, &nodes, 4, 8), None);
    }
}
