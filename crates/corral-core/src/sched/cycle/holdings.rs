//! What the scheduler holds now: running jobs with their placements, pending jobs, queue
//! usage, pool names.

use super::*;

impl Scheduler {
    /// Jobs running now, with their placements.
    pub fn running_jobs(&self) -> Vec<RunningJob> {
        self.jobs
            .iter()
            .flatten()
            .filter_map(|e| {
                let r = e.running.as_ref()?;
                let mut placements: Vec<ReplicaPlacement> = r
                    .allocs
                    .iter()
                    .map(|a| ReplicaPlacement {
                        role: e.req.groups[a.group as usize].role.clone(),
                        index: a.index,
                        node: self.index.nodes[a.node as usize].name.clone(),
                        gpu_indices: (0..64).filter(|b| a.mask & (1 << b) != 0).collect(),
                    })
                    .collect();
                placements.sort_by(|a, b| (&a.role, a.index).cmp(&(&b.role, b.index)));
                Some(RunningJob {
                    request: e.req.clone(),
                    placements,
                    admitted_at: r.admitted_at,
                })
            })
            .collect()
    }

    /// Keys of pending jobs, in submission-slot order.
    pub fn pending_jobs(&self) -> Vec<&str> {
        self.jobs
            .iter()
            .flatten()
            .filter(|e| e.running.is_none())
            .map(|e| e.req.key.as_str())
            .collect()
    }

    /// A queue's usage in a pool, if both exist.
    pub fn queue_usage(&self, queue: &str, pool: &str) -> Option<crate::sched::ResourceAmount> {
        let q = *self.quotas.by_name.get(queue)?;
        let p = self.index.pools.iter().position(|p| p.name == pool)?;
        Some(crate::sched::ResourceAmount::from_array(
            self.quotas.usage(q, p as u16),
        ))
    }

    /// Pool names, in index order.
    pub fn pool_names(&self) -> Vec<&str> {
        self.index.pools.iter().map(|p| p.name.as_str()).collect()
    }

    /// The GPU types of the cluster's pools, each once.
    pub fn gpu_types(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .index
            .pools
            .iter()
            .filter_map(|p| p.gpu_type.as_deref())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}
