//! GPUs through NVML (`nvml-wrapper`, which loads `libnvidia-ml` at run time). A machine
//! without the library or without GPUs is a CPU-only node: every function here then returns
//! an empty list, never an error.

use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

/// One GPU of this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// NVML index, the number used in `CUDA_VISIBLE_DEVICES`.
    pub index: u32,
    /// Product name, e.g. "NVIDIA H100 80GB HBM3": Corral's GPU type.
    pub gpu_type: String,
    pub memory_bytes: u64,
    pub uuid: String,
}

/// Utilisation of one GPU now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    /// Percent of the last sample period during which a kernel ran.
    pub utilization_percent: u32,
    pub memory_used_bytes: u64,
}

static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

fn nvml() -> Option<&'static Nvml> {
    NVML.get_or_init(|| Nvml::init().map_err(|e| e.to_string()))
        .as_ref()
        .ok()
}

/// Why there is no GPU information (`None` when NVML is loaded).
pub fn unavailable_reason() -> Option<String> {
    match NVML.get_or_init(|| Nvml::init().map_err(|e| e.to_string())) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "NVML is not available ({e}); this is a CPU-only node"
        )),
    }
}

/// The GPUs of this machine, by index; empty without NVML.
pub fn devices() -> Vec<GpuDevice> {
    let Some(nvml) = nvml() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let dev = nvml.device_by_index(index).ok()?;
            Some(GpuDevice {
                index,
                gpu_type: dev.name().unwrap_or_else(|_| "unknown".into()),
                memory_bytes: dev.memory_info().map(|m| m.total).unwrap_or(0),
                uuid: dev.uuid().unwrap_or_default(),
            })
        })
        .collect()
}

/// Utilisation and memory of every GPU now; empty without NVML.
pub fn samples() -> Vec<GpuSample> {
    let Some(nvml) = nvml() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let dev = nvml.device_by_index(index).ok()?;
            Some(GpuSample {
                index,
                utilization_percent: dev.utilization_rates().map(|u| u.gpu).unwrap_or(0),
                memory_used_bytes: dev.memory_info().map(|m| m.used).unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_nvml_is_a_cpu_only_node_not_an_error() {
        let devices = super::devices();
        let samples = super::samples();
        if let Some(reason) = super::unavailable_reason() {
            assert!(devices.is_empty() && samples.is_empty(), "{reason}");
        } else {
            assert_eq!(devices.len(), samples.len());
        }
    }
}
