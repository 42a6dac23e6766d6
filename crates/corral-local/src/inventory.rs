//! What this machine offers: CPUs, memory, hostname and GPUs (NVML).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::executor::procfs;
use crate::gpu::{self, GpuDevice};

/// This node's capacity, as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInventory {
    pub hostname: String,
    /// CPUs this process may use (affinity and cgroup CPU quota respected).
    pub cpus: u32,
    /// Physical memory, or our cgroup's memory limit when lower.
    pub memory_bytes: u64,
    pub gpus: Vec<GpuDevice>,
    /// GPUs NVML reports unhealthy (index, why): not offered for new replicas.
    #[serde(default)]
    pub unhealthy_gpus: Vec<(u32, String)>,
}

/// Reads the inventory of this machine. Never fails: unknown values fall back to 1 CPU, 0
/// bytes, "localhost", no GPUs.
pub fn inventory() -> NodeInventory {
    NodeInventory {
        hostname: hostname(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        memory_bytes: memory_bytes(),
        gpus: gpu::devices(),
        unhealthy_gpus: gpu::samples()
            .iter()
            .filter_map(|s| Some((s.index, gpu::unhealthy_reason(s)?)))
            .collect(),
    }
}

fn hostname() -> String {
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The memory limit of our own cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`).
fn own_cgroup_memory_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut it = line.splitn(3, ':');
        let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
        let rel = path.trim_start_matches('/');
        let file = if controllers.is_empty() {
            Path::new("/sys/fs/cgroup").join(rel).join("memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            Path::new("/sys/fs/cgroup/memory")
                .join(rel)
                .join("memory.limit_in_bytes")
        } else {
            return None;
        };
        procfs::read_trimmed(&file)?.parse().ok()
    })
}

fn memory_bytes() -> u64 {
    let total = mem_total().unwrap_or(0);
    match own_cgroup_memory_limit() {
        Some(limit) if limit > 0 && (total == 0 || limit < total) => limit,
        _ => total,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machine_has_cpus_and_memory() {
        let inv = super::inventory();
        assert!(inv.cpus >= 1);
        assert!(inv.memory_bytes > 0);
        assert!(!inv.hostname.is_empty());
    }
}
