//! GPUs through NVML (`nvml-wrapper`, which loads `libnvidia-ml` at run time). A machine
//! without the library or without GPUs is a CPU-only node: every function here then returns
//! an empty list, never an error, and nothing is made up.
//!
//! The NVML reads are behind [`GpuSource`] (one real implementation, [`NvmlSource`]); what is
//! made of the readings (health, a replica's share of a GPU's memory) is pure and tested
//! with recorded samples.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use corral_api::gpu_type;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use serde::{Deserialize, Serialize};

/// One GPU of this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuDevice {
    /// NVML index, the number used in `CUDA_VISIBLE_DEVICES`.
    pub index: u32,
    /// NVML's product name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Corral's GPU type: the canonical form of `name` (`NVIDIA-H100-80GB-HBM3`, see
    /// `corral_api::gpu_type`), the spelling of the `nvidia.com/gpu.product` label.
    pub gpu_type: String,
    pub memory_bytes: u64,
    pub uuid: String,
    /// MIG mode now (`None`: the card does not support MIG).
    pub mig_enabled: Option<bool>,
}

/// A process with memory on a GPU (NVML's running compute processes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuProcess {
    pub pid: u32,
    /// `None` where the driver does not say.
    pub used_memory_bytes: Option<u64>,
}

/// One GPU now. Fields NVML does not offer on this card are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    /// NVML's product name (DCGM's `modelName`).
    pub model_name: String,
    /// Percent of the last sample period during which a kernel ran.
    pub utilization_percent: Option<u32>,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    pub power_watts: Option<f64>,
    pub temperature_celsius: Option<u32>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// The last critical Xid error NVML reported for this GPU since Corral started.
    pub last_xid: Option<u64>,
    pub pages_pending_retirement: Option<bool>,
    pub processes: Vec<GpuProcess>,
}

/// NVML and driver versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverInfo {
    pub nvml_version: String,
    pub driver_version: String,
}

/// Where GPU readings come from.
pub trait GpuSource: Send + Sync {
    /// Why there are no readings (`None` when the source works).
    fn unavailable_reason(&self) -> Option<String>;
    fn driver(&self) -> Option<DriverInfo>;
    fn devices(&self) -> Vec<GpuDevice>;
    fn samples(&self) -> Vec<GpuSample>;
}

/// Xid errors that a user's own program causes (an illegal address, a page fault of the
/// application, a watchdog of the application): they say nothing of the card's health
/// (the list the NVIDIA device plugin skips).
const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// Why a GPU should not get new replicas, or `None` when it is healthy.
pub fn unhealthy_reason(s: &GpuSample) -> Option<String> {
    if let Some(n) = s.ecc_uncorrected_volatile.filter(|n| *n > 0) {
        return Some(format!(
            "{n} uncorrected ECC error(s) since the driver loaded; reset the GPU (nvidia-smi -r) or reboot"
        ));
    }
    if s.pages_pending_retirement == Some(true) {
        return Some("memory pages are waiting to be retired; reboot to retire them".into());
    }
    if let Some(xid) = s.last_xid.filter(|x| !APPLICATION_XIDS.contains(x)) {
        return Some(format!(
            "NVML reported critical Xid error {xid}; see the kernel log (dmesg) and NVIDIA's Xid table"
        ));
    }
    None
}

/// GPU memory held by processes `pids` (a replica's process tree or cgroup) on one GPU.
pub fn memory_of(sample: &GpuSample, pids: &[u32]) -> u64 {
    sample
        .processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .filter_map(|p| p.used_memory_bytes)
        .sum()
}

/// The real source: NVML, loaded once per process.
pub struct NvmlSource {
    /// Last critical Xid per GPU UUID, collected from an NVML event set on each sample.
    xids: Mutex<(
        Option<nvml_wrapper::EventSet<'static>>,
        BTreeMap<String, u64>,
    )>,
}

static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

fn nvml() -> Result<&'static Nvml, &'static str> {
    NVML.get_or_init(|| Nvml::init().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(String::as_str)
}

impl NvmlSource {
    fn new() -> Self {
        let set = nvml().ok().and_then(|nvml| {
            let mut set = nvml.create_event_set().ok()?;
            for i in 0..nvml.device_count().unwrap_or(0) {
                let dev = nvml.device_by_index(i).ok()?;
                // A card that cannot report Xid events consumes the set: start a new one
                // (Xids of the cards before it are then not seen; servers hold one model).
                set = match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                    Ok(s) => s,
                    Err(_) => nvml.create_event_set().ok()?,
                };
            }
            Some(set)
        });
        NvmlSource {
            xids: Mutex::new((set, BTreeMap::new())),
        }
    }

    /// Drains the Xid events that arrived since the last call.
    fn poll_xids(&self) -> BTreeMap<String, u64> {
        let Ok(mut guard) = self.xids.lock() else {
            return BTreeMap::new();
        };
        let (set, seen) = &mut *guard;
        if let Some(set) = set {
            // Bounded, so a storm of events cannot hold the caller.
            for _ in 0..64 {
                match set.wait(0) {
                    Ok(ev) => {
                        if let (Ok(uuid), Some(XidError::Value(x))) =
                            (ev.device.uuid(), ev.event_data)
                        {
                            seen.insert(uuid, x);
                        }
                    }
                    // Timeout: nothing more has arrived.
                    Err(_) => break,
                }
            }
        }
        seen.clone()
    }
}

impl GpuSource for NvmlSource {
    fn unavailable_reason(&self) -> Option<String> {
        nvml().err().map(|e| {
            format!(
                "NVML is not available ({e}); this is a CPU-only node (install the NVIDIA driver for GPUs)"
            )
        })
    }

    fn driver(&self) -> Option<DriverInfo> {
        let nvml = nvml().ok()?;
        Some(DriverInfo {
            nvml_version: nvml.sys_nvml_version().unwrap_or_default(),
            driver_version: nvml.sys_driver_version().unwrap_or_default(),
        })
    }

    fn devices(&self) -> Vec<GpuDevice> {
        let Ok(nvml) = nvml() else {
            return Vec::new();
        };
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|index| {
                let dev = nvml.device_by_index(index).ok()?;
                let name = dev.name().unwrap_or_else(|_| "unknown".into());
                Some(GpuDevice {
                    index,
                    gpu_type: gpu_type::canonical(&name),
                    name,
                    memory_bytes: dev.memory_info().map(|m| m.total).unwrap_or(0),
                    uuid: dev.uuid().unwrap_or_default(),
                    mig_enabled: dev.mig_mode().ok().map(|m| m.current == 1),
                })
            })
            .collect()
    }

    fn samples(&self) -> Vec<GpuSample> {
        let Ok(nvml) = nvml() else {
            return Vec::new();
        };
        let xids = self.poll_xids();
        let count = nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|index| {
                let dev = nvml.device_by_index(index).ok()?;
                let uuid = dev.uuid().unwrap_or_default();
                let memory = dev.memory_info().ok();
                let processes = dev
                    .running_compute_processes()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        used_memory_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect();
                Some(GpuSample {
                    index,
                    model_name: dev.name().unwrap_or_default(),
                    utilization_percent: dev.utilization_rates().ok().map(|u| u.gpu),
                    memory_used_bytes: memory.as_ref().map_or(0, |m| m.used),
                    memory_total_bytes: memory.as_ref().map_or(0, |m| m.total),
                    power_watts: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                    temperature_celsius: dev.temperature(TemperatureSensor::Gpu).ok(),
                    ecc_uncorrected_volatile: dev
                        .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                        .ok(),
                    last_xid: xids.get(&uuid).copied(),
                    pages_pending_retirement: dev.are_pages_pending_retired().ok(),
                    processes,
                    uuid,
                })
            })
            .collect()
    }
}

/// This process's NVML source.
pub fn source() -> &'static NvmlSource {
    static SOURCE: OnceLock<NvmlSource> = OnceLock::new();
    SOURCE.get_or_init(NvmlSource::new)
}

/// Why there is no GPU information (`None` when NVML is loaded).
pub fn unavailable_reason() -> Option<String> {
    source().unavailable_reason()
}

/// The GPUs of this machine, by index; empty without NVML.
pub fn devices() -> Vec<GpuDevice> {
    source().devices()
}

/// Every GPU now; empty without NVML.
pub fn samples() -> Vec<GpuSample> {
    source().samples()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading as NVML gave it for an H100 running one replica (pid 4242, 30 GiB) and
    /// another process (pid 7, not a replica's).
    fn h100() -> GpuSample {
        GpuSample {
            index: 0,
            uuid: "GPU-5e2f".into(),
            model_name: "NVIDIA H100 80GB HBM3".into(),
            utilization_percent: Some(97),
            memory_used_bytes: 34 << 30,
            memory_total_bytes: 80 << 30,
            power_watts: Some(612.5),
            temperature_celsius: Some(61),
            ecc_uncorrected_volatile: Some(0),
            last_xid: None,
            pages_pending_retirement: Some(false),
            processes: vec![
                GpuProcess {
                    pid: 4242,
                    used_memory_bytes: Some(30 << 30),
                },
                GpuProcess {
                    pid: 7,
                    used_memory_bytes: Some(4 << 30),
                },
                GpuProcess {
                    pid: 4243,
                    used_memory_bytes: None,
                },
            ],
        }
    }

    #[test]
    fn a_replica_owns_the_memory_of_its_own_processes_only() {
        let s = h100();
        assert_eq!(memory_of(&s, &[4242, 4243, 9999]), 30 << 30);
        assert_eq!(memory_of(&s, &[7]), 4 << 30);
        assert_eq!(memory_of(&s, &[]), 0);
    }

    #[test]
    fn health_from_ecc_retirement_and_critical_xids() {
        assert_eq!(unhealthy_reason(&h100()), None);
        let ecc = GpuSample {
            ecc_uncorrected_volatile: Some(2),
            ..h100()
        };
        assert!(unhealthy_reason(&ecc).is_some_and(|r| r.contains("2 uncorrected ECC")));
        let pending = GpuSample {
            pages_pending_retirement: Some(true),
            ..h100()
        };
        assert!(unhealthy_reason(&pending).is_some());
        // Xid 13 is a program's own error (illegal address); 79 is "fallen off the bus".
        let app = GpuSample {
            last_xid: Some(13),
            ..h100()
        };
        assert_eq!(unhealthy_reason(&app), None);
        let lost = GpuSample {
            last_xid: Some(79),
            ..h100()
        };
        assert!(unhealthy_reason(&lost).is_some_and(|r| r.contains("Xid error 79")));
        // Cards without ECC or retirement say nothing: healthy, not guessed.
        let consumer = GpuSample {
            ecc_uncorrected_volatile: None,
            pages_pending_retirement: None,
            ..h100()
        };
        assert_eq!(unhealthy_reason(&consumer), None);
    }

    #[test]
    fn no_nvml_is_a_cpu_only_node_not_an_error() {
        let devices = devices();
        let samples = samples();
        if let Some(reason) = unavailable_reason() {
            assert!(devices.is_empty() && samples.is_empty(), "{reason}");
            assert!(source().driver().is_none());
        } else {
            assert_eq!(devices.len(), samples.len());
            for d in &devices {
                assert_eq!(d.gpu_type, gpu_type::canonical(&d.name));
            }
        }
    }
}
