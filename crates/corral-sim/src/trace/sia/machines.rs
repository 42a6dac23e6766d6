//! Sia's profiled machines, the GPU types of a simulated cluster they stand for, and how
//! Sia names a job's placement on them.

/// One of Sia's profiled machines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The profile suffix (`placements-<name>.csv`).
    pub name: &'static str,
    /// GPU type names that map to this machine (lower case).
    pub gpu_types: &'static [&'static str],
    pub gpus_per_node: u32,
}

/// The machines of Sia's profiles.
pub const MACHINES: [Machine; 6] = [
    Machine {
        name: "aws",
        gpu_types: &["t4"],
        gpus_per_node: 4,
    },
    Machine {
        name: "azure",
        gpu_types: &["v100"],
        gpus_per_node: 8,
    },
    Machine {
        name: "dgx-ext",
        gpu_types: &["a100"],
        gpus_per_node: 8,
    },
    Machine {
        name: "dgx",
        gpu_types: &[],
        gpus_per_node: 8,
    },
    Machine {
        name: "quad",
        gpu_types: &["rtx6000", "quadro-rtx-6000"],
        gpus_per_node: 4,
    },
    Machine {
        name: "rtx",
        gpu_types: &["rtx2080ti", "2080ti"],
        gpus_per_node: 8,
    },
];

/// The machine whose profiles a cluster GPU type uses.
pub fn machine_for_type(gpu_type: &str) -> Result<Machine, String> {
    let t = gpu_type.to_ascii_lowercase();
    MACHINES
        .iter()
        .find(|m| m.name == t || m.gpu_types.contains(&t.as_str()))
        .copied()
        .ok_or_else(|| {
            format!(
                "GPU type `{gpu_type}` has no Sia profiles: expected t4 (aws), v100 (azure), \
                 a100 (dgx-ext), dgx, rtx6000 (quad) or rtx2080ti (rtx)"
            )
        })
}

/// The compact placement of `gpus` on nodes of `per_node`, as Sia names it: GPUs per node,
/// rotated to the lexicographically smallest form (`6` on 4-GPU nodes: `24`).
pub fn compact_placement(gpus: u32, per_node: u32) -> String {
    let per_node = per_node.max(1);
    let mut p: Vec<u32> = vec![per_node; (gpus / per_node) as usize];
    if !gpus.is_multiple_of(per_node) {
        p.push(gpus % per_node);
    }
    let best = (0..p.len())
        .map(|i| {
            let mut r = p[i..].to_vec();
            r.extend_from_slice(&p[..i]);
            r
        })
        .min()
        .unwrap_or_default();
    best.iter().map(u32::to_string).collect()
}
