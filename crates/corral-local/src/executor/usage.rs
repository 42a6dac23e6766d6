//! What a running replica uses: CPU and memory (its cgroup, else its process group's
//! `/proc` entries) and its GPUs (NVML).

use super::{LocalExecutor, ReplicaUsage, procfs};
use crate::gpu::{self, GpuSample};

impl LocalExecutor {
    /// CPU, memory and GPU use of a running replica.
    pub fn usage(&self, name: &str) -> Option<ReplicaUsage> {
        let t = self.replicas.get(name)?;
        if t.state.is_terminal() {
            return None;
        }
        let rec = &t.record;
        // A container's cgroup is below the replica's, at the runtime's path.
        let cgroup = rec.cgroup.as_ref().map(|cg| match rec.container {
            Some(_) => cg.as_runtime_parent(),
            None => cg.clone(),
        });
        let from_cgroup = cgroup
            .as_ref()
            .and_then(|cg| Some((cg.cpu_seconds()?, cg.memory_bytes()?)));
        let (cpu_seconds, memory_bytes) = match from_cgroup {
            Some(v) => v,
            None => {
                let members = procfs::group_members(rec.pid);
                let ticks: u64 = members.iter().map(|s| s.cpu_ticks).sum();
                let pages: u64 = members.iter().map(|s| s.rss_pages).sum();
                (
                    ticks as f64 / procfs::clock_ticks_per_second() as f64,
                    pages * procfs::page_size(),
                )
            }
        };
        let gpus: Vec<GpuSample> = if rec.gpu_indices.is_empty() {
            Vec::new()
        } else {
            gpu::samples()
                .into_iter()
                .filter(|s| rec.gpu_indices.contains(&s.index))
                .collect()
        };
        let gpu_memory_bytes = (!gpus.is_empty()).then(|| {
            let pids: Vec<u32> = match &rec.cgroup {
                Some(cg) => cg.procs(),
                None => procfs::group_members(rec.pid)
                    .iter()
                    .map(|s| s.pid)
                    .collect(),
            };
            gpus.iter().map(|s| gpu::memory_of(s, &pids)).sum()
        });
        Some(ReplicaUsage {
            cpu_seconds,
            memory_bytes,
            gpus,
            gpu_memory_bytes,
        })
    }
}
