//! Why a job cannot be placed now: the capacity that falls short in a pool, what is left
//! healthy of it, and the recently admitted victims that preemption may not stop yet.

use super::*;

impl Scheduler {
    /// The blocker when some of the pool's GPUs are unhealthy and the healthy rest could
    /// not hold the job even empty (see [`Blocker::TooFewHealthyGpus`]).
    pub(super) fn too_few_healthy_gpus(&self, pool: u16, e: &JobEntry) -> Option<Blocker> {
        let p = &self.index.pools[pool as usize];
        if p.healthy_gpus == p.total_gpus {
            return None;
        }
        let unhealthy = p.total_gpus - p.healthy_gpus;
        let biggest = e
            .groups
            .iter()
            .filter(|(c, _)| *c > 0)
            .map(|(_, pod)| pod.gpu)
            .max()
            .unwrap_or(0);
        let (needed, per_replica, healthy) = if biggest > p.max_node_healthy_gpus {
            (u64::from(biggest), true, u64::from(p.max_node_healthy_gpus))
        } else if e.total[0] > p.healthy_gpus {
            (e.total[0], false, p.healthy_gpus)
        } else {
            return None;
        };
        Some(Blocker::TooFewHealthyGpus {
            pool: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            needed,
            per_replica,
            healthy,
            unhealthy,
        })
    }

    /// Lower-priority jobs in `pool` that preemption may not stop yet only because they
    /// were admitted recently: how many (among the first few looked at), and when the first
    /// protection ends. A reason that names them says what the job waits for, and until when.
    pub(super) fn protected_victims(
        &self,
        slot: u32,
        pool: u16,
        now: Millis,
    ) -> Option<(u32, Millis)> {
        if self.config.preemption_protection_ms == 0 {
            return None;
        }
        let priority = self.entry(slot).req.priority;
        let mut jobs = 0u32;
        let mut until: Option<Millis> = None;
        for &(_, _, v) in self.running_by_pool[pool as usize]
            .range(..(priority, 0, 0))
            .take(PROTECTED_VICTIMS_EXAMINED)
        {
            let ve = self.entry(v);
            let Some(r) = &ve.running else { continue };
            if !ve.req.preemptible || r.cycle == self.cycle_no {
                continue;
            }
            let end = r
                .admitted_at
                .saturating_add(self.config.preemption_protection_ms);
            if end > now {
                jobs += 1;
                until = Some(until.map_or(end, |u| u.min(end)));
            }
        }
        until.map(|u| (jobs, u))
    }

    /// How much of the pool jobs with fewer candidate pools than `e` want, relative to the
    /// pool's part of the GPUs in use, in steps of 5% (the tolerance of speed bands): a job
    /// takes the pool least wanted by jobs with less choice first, so that they find room;
    /// pools wanted about as much are told apart by fit. Measured against use rather than
    /// size so that it holds from the first jobs, before the wanting jobs have arrived.
    pub(super) fn pinned_level(&self, e: &JobEntry, pool: u16, used: u64) -> u32 {
        let p = &self.index.pools[pool as usize];
        let all = self.index.cluster_total[0];
        let choice = e.pools.len().min(self.gpu_pools);
        let wanted: u64 = self.pinned_milli[pool as usize][..choice].iter().sum();
        if p.total_gpus == 0 || all == 0 || wanted == 0 {
            return 0;
        }
        // 20 * wanted / (total * used / all), in u128 so that nothing overflows.
        let num = u128::from(wanted) * 20 * u128::from(all);
        let den = u128::from(p.total_gpus) * u128::from(used.max(1)) * 1000;
        (num / den).min(u128::from(u32::MAX)) as u32
    }

    pub(super) fn capacity_blocker(&self, pool: u16, e: &JobEntry) -> Blocker {
        let p = &self.index.pools[pool as usize];
        let filter = e.shape().filter;
        // Only nodes the job may use count as its largest free block.
        let (largest, node) = self.index.largest_free_for(pool, &filter);
        let biggest = e.groups.iter().map(|(_, pod)| pod.gpu).max().unwrap_or(0);
        let (reserved_free, reserved_for) =
            self.index.reserved_room(pool, &filter, biggest, &e.req.key);
        // Where the GPUs are there (or not asked for): the first replica (largest first)
        // that no usable node has room for, and what it lacks.
        let scan = self.config.node_scan_limit as usize;
        let several_roles = e.groups.iter().filter(|(c, _)| *c > 0).count() > 1;
        let short = e
            .order
            .iter()
            .filter(|&&gi| e.groups[gi as usize].0 > 0)
            .find_map(|&gi| {
                let pod = &e.groups[gi as usize].1;
                let mut s = self.index.shortfall_now(pool, pod, &filter, scan)?;
                if several_roles {
                    s.role = Some(e.req.groups[gi as usize].role.clone());
                }
                Some((gi, s))
            });
        // The largest replica, or the one that lacks room.
        let pod = &e.groups[short.as_ref().map_or(e.order[0], |(gi, _)| *gi) as usize].1;
        // Named where it is what keeps the job off room: more free GPUs than the job
        // finds elsewhere, or room for a replica that finds none.
        let no_room = || {
            short.is_some()
                || pod.gpu == 0
                    && self
                        .index
                        .find_node(pool, pod, None, &filter, scan)
                        .is_none()
        };
        let tainted = self
            .index
            .tainted_room(pool, &filter, pod, false)
            .filter(|&(_, free, _)| free > largest || no_room())
            .map(|(n, free_gpus, taint)| TaintBlock {
                node: self.index.nodes[n as usize].name.clone(),
                free_gpus: if pod.gpu > 0 { free_gpus } else { 0 },
                taint,
            });
        let fit = if biggest == 0 {
            0
        } else {
            self.index.fits_count(pool, biggest)
        };
        Blocker::Capacity {
            pool: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            largest_free: largest,
            largest_free_node: node.map(|n| self.index.nodes[n as usize].name.clone()),
            gpus_per_replica: biggest,
            free_gpus: p.free_gpus,
            replicas_that_fit: fit.min(e.pods_gpus.len() as u64),
            replicas: e.pods_gpus.len() as u64,
            reserved_for,
            reserved_free,
            tainted,
            short: short.map(|(_, s)| s),
        }
    }
}
