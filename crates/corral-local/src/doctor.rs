//! What this machine offers the embedded cluster and what Corral will do with it: GPUs
//! (NVML), cgroups, the container runtime, the replica port range and the data directory's
//! lock. `corral doctor` prints the report; `corral up` prints its one-line summary.
//! Each finding is OK or WARN, and a WARN names its fix.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::cgroup::CgroupManager;
use crate::config::{ClusterFileConfig, Settings};
use crate::executor::container::{self, RuntimeChoice};
use crate::gpu::{self, DriverInfo, GpuDevice, GpuSource};

/// OK: works as Corral needs. WARN: something Corral cannot do here; `fix` says how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    Ok,
    Warn,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// `gpu`, `cgroups`, `containers`, `ports`, `data`.
    pub area: &'static str,
    pub level: Level,
    pub what: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub findings: Vec<Finding>,
    pub driver: Option<DriverInfo>,
    pub gpus: Vec<GpuDevice>,
    /// `v2`, `v1` or `none`.
    pub cgroup_version: &'static str,
    pub container_runtime: Option<String>,
    pub all_ok: bool,
    /// The GPUs corral.yaml's `node.gpus` declares in place of NVML's (count, type).
    pub configured_gpus: Option<(u32, String)>,
}

fn ok(area: &'static str, what: String) -> Finding {
    Finding {
        area,
        level: Level::Ok,
        what,
        fix: None,
    }
}

fn warn(area: &'static str, what: String, fix: &str) -> Finding {
    Finding {
        area,
        level: Level::Warn,
        what,
        fix: Some(fix.to_string()),
    }
}

/// The GPU findings from what a [`GpuSource`] reports (pure but for the source).
pub fn gpu_findings(source: &dyn GpuSource, settings: &Settings) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(reason) = source.unavailable_reason() {
        match configured_gpus(source, settings) {
            // Declared GPUs (a test machine, a simulation): NVML's absence is expected.
            Some((n, t)) => out.push(ok(
                "gpu",
                format!("{reason}; the node offers the {n} x {t} that corral.yaml's node.gpus declares"),
            )),
            None => out.push(warn(
                "gpu",
                reason,
                "for GPUs install the NVIDIA driver (it provides libnvidia-ml.so.1); CPU-only jobs need nothing",
            )),
        }
    } else {
        let driver = source.driver();
        let devices = source.devices();
        let d = driver
            .as_ref()
            .map(|d| format!("driver {}, NVML {}", d.driver_version, d.nvml_version))
            .unwrap_or_default();
        if devices.is_empty() {
            out.push(warn(
                "gpu",
                format!("NVML loads ({d}) but reports no GPUs"),
                "check `nvidia-smi`; a GPU that fell off the bus needs a reset or reboot",
            ));
        }
        let samples = source.samples();
        for g in &devices {
            let mig = match g.mig_enabled {
                Some(true) => "MIG on",
                Some(false) => "MIG off",
                None => "no MIG",
            };
            let line = format!(
                "GPU {}: {} -> type {}, {} GiB, {mig}, {d}",
                g.index,
                g.name,
                g.gpu_type,
                g.memory_bytes >> 30
            );
            let unhealthy = samples
                .iter()
                .find(|s| s.index == g.index)
                .and_then(gpu::unhealthy_reason);
            if let Some(why) = unhealthy {
                out.push(warn(
                    "gpu",
                    format!("{line}: unhealthy ({why}); it gets no new replicas"),
                    "see `nvidia-smi -q -i <index>`; reset or replace the GPU",
                ));
            } else if g.mig_enabled == Some(true) {
                out.push(warn(
                    "gpu",
                    format!("{line}: Corral schedules whole GPUs, not MIG instances"),
                    "disable MIG: `nvidia-smi -i <index> -mig 0` (as root, GPU idle)",
                ));
            } else {
                out.push(ok("gpu", line));
            }
        }
    }
    if let Some(n) = settings.node.gpus {
        out.push(warn(
            "gpu",
            format!(
                "corral.yaml sets node.gpus: {n}; Corral offers {n} GPU(s) of type {} whatever NVML finds",
                settings
                    .node
                    .gpu_type
                    .as_deref()
                    .map(corral_api::gpu_type::canonical)
                    .unwrap_or_else(|| "FAKE-GPU (or NVML's)".into())
            ),
            "remove node.gpus from corral.yaml to use the GPUs NVML reports",
        ));
    }
    out
}

/// The CUDA driver library, which every CUDA program loads (NVML alone is not enough).
const CUDA_DRIVER: &str = "libcuda.so.1";

/// Where the CUDA driver library is, as a replica's loader would look for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverLibrary {
    /// Found without `LD_LIBRARY_PATH`: in the loader's cache (`/etc/ld.so.cache`) or a
    /// directory the loader always searches.
    pub by_the_loader: bool,
    /// The first directory of the server's `LD_LIBRARY_PATH` that holds it.
    pub on_ld_library_path: Option<String>,
}

impl DriverLibrary {
    /// This machine's.
    pub fn find() -> Self {
        let cached = std::fs::read("/etc/ld.so.cache")
            .is_ok_and(|cache| contains(&cache, format!("{CUDA_DRIVER}\0").as_bytes()));
        let arch = format!("{}-linux-gnu", std::env::consts::ARCH);
        let trusted = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
            .iter()
            .map(|d| Path::new(d).to_path_buf())
            .chain(
                ["/lib", "/usr/lib"]
                    .iter()
                    .map(|d| Path::new(d).join(&arch)),
            );
        let by_the_loader = cached || trusted.into_iter().any(|d| d.join(CUDA_DRIVER).exists());
        let on_ld_library_path = std::env::var("LD_LIBRARY_PATH").ok().and_then(|p| {
            p.split(':')
                .filter(|d| !d.is_empty())
                .find(|d| Path::new(d).join(CUDA_DRIVER).exists())
                .map(str::to_string)
        });
        DriverLibrary {
            by_the_loader,
            on_ld_library_path,
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether CUDA programs in GPU replicas will find the driver. A replica sees none of the
/// server's environment but `PATH` (and what `passEnv` names), so a driver found only
/// through the server's `LD_LIBRARY_PATH` is not found there: torch then says no GPU.
pub fn driver_library_finding(lib: &DriverLibrary, settings: &Settings) -> Finding {
    let passed = settings.pass_env.iter().any(|v| v == "LD_LIBRARY_PATH");
    match (lib.by_the_loader, &lib.on_ld_library_path) {
        (true, _) => ok(
            "gpu",
            format!("CUDA driver {CUDA_DRIVER}: found by the loader, as replicas look for it"),
        ),
        (false, Some(dir)) if passed => ok(
            "gpu",
            format!(
                "CUDA driver {CUDA_DRIVER}: in {dir}, on LD_LIBRARY_PATH, which passEnv gives replicas"
            ),
        ),
        (false, Some(dir)) => warn(
            "gpu",
            format!(
                "CUDA driver {CUDA_DRIVER}: only in {dir}, found through the server's LD_LIBRARY_PATH, \
                 which replicas do not see: CUDA programs in them will find no GPU"
            ),
            &format!(
                "list {dir} in a file under /etc/ld.so.conf.d/ and run `ldconfig`, or add \
                 `passEnv: [LD_LIBRARY_PATH]` to corral.yaml"
            ),
        ),
        (false, None) => warn(
            "gpu",
            format!(
                "CUDA driver {CUDA_DRIVER}: not found: CUDA programs in replicas cannot use the GPUs"
            ),
            "install the driver's CUDA library (Debian/Ubuntu: libnvidia-compute-<version> or \
             libcuda1), or list its directory under /etc/ld.so.conf.d/ and run `ldconfig`",
        ),
    }
}

/// Whether each NodePool of corral.yaml takes this machine (the core's rule): a pool that
/// selects no node admits nothing, ever.
pub fn pool_findings(file: &ClusterFileConfig) -> Vec<Finding> {
    if file.node_pools.is_empty() {
        return Vec::new();
    }
    let node = match crate::cluster::local_node(&file.settings.node, &crate::inventory::inventory())
    {
        Ok(n) => n,
        Err(e) => return vec![warn("pools", e.to_string(), "fix `node` in corral.yaml")],
    };
    let pools: Vec<_> = file
        .node_pools
        .iter()
        .map(corral_core::sched::NodePoolConfig::from_node_pool)
        .collect();
    let empty = corral_core::sched::pools_without_nodes(&pools, std::slice::from_ref(&node));
    if empty.is_empty() {
        return vec![ok(
            "pools",
            format!("every NodePool of corral.yaml takes node {}", node.name),
        )];
    }
    empty
        .into_iter()
        .map(|w| {
            warn(
                "pools",
                w,
                "set the pool's gpuType and nodeSelector to what this node has (`corral nodes`), or set node.gpuType in corral.yaml",
            )
        })
        .collect()
}

/// Examines this machine for a cluster configured by `file` in `data_dir`.
/// The GPUs `node.gpus` in corral.yaml declares instead of NVML's: their count and type
/// (`node.gpuType`, else NVML's name, else FAKE-GPU, as the inventory names them).
fn configured_gpus(source: &dyn GpuSource, settings: &Settings) -> Option<(u32, String)> {
    let n = settings.node.gpus.filter(|n| *n > 0)?;
    let t = settings
        .node
        .gpu_type
        .clone()
        .or_else(|| source.devices().first().map(|g| g.gpu_type.clone()))
        .unwrap_or_else(|| "FAKE-GPU".to_string());
    Some((n, t))
}

pub fn examine(data_dir: &Path, settings: &Settings) -> Report {
    let source = gpu::source();
    let mut findings = gpu_findings(source, settings);
    // Enumerated once for the report (none without NVML).
    let gpus = source.devices();
    if !gpus.is_empty() {
        findings.push(driver_library_finding(&DriverLibrary::find(), settings));
    }

    let cgroup_version = match CgroupManager::detect_with(settings.cgroup_root.as_deref()) {
        Ok(m) => {
            findings.push(ok(
                "cgroups",
                format!(
                    "{}: memory and CPU limits are enforced, OOM kills are detected",
                    m.describe()
                ),
            ));
            m.version()
        }
        Err(reason) => {
            findings.push(warn(
                "cgroups",
                format!(
                    "unavailable ({reason}): memory and CPU limits are not enforced, OOM kills are not detected"
                ),
                "run corral as root, or in a systemd unit with Delegate=yes, or set cgroupRoot in corral.yaml to a writable cgroup v2 directory",
            ));
            "none"
        }
    };

    let choice = RuntimeChoice {
        runtime: settings.containers.runtime.clone(),
        oci_runtime: settings.containers.oci_runtime.clone(),
        without_runtime: settings.containers.without_runtime,
    };
    let container_runtime = match container::detect(&choice) {
        Ok((Some(rt), _)) => {
            let args = if rt.global_args.is_empty() {
                String::new()
            } else {
                format!(" ({})", rt.global_args.join(" "))
            };
            let runs = format!(
                "{} at {}{args}: jobs with an image run in containers",
                rt.kind.as_str(),
                rt.program.display()
            );
            // A runtime that works but can pull nothing fails every job whose image is not
            // here already: say so now, not at each job's start.
            match image_pulls(&rt) {
                Ok(()) => findings.push(ok("containers", runs)),
                Err(why) => findings.push(warn(
                    "containers",
                    format!("{runs}, but {why}"),
                    "load the images the jobs name (`podman load -i FILE`), or point \
                     /etc/containers/registries.conf at a registry mirror this machine reaches",
                )),
            }
            Some(rt.kind.as_str().to_string())
        }
        // Turned off in corral.yaml: nothing to fix.
        Ok((None, _)) if settings.containers.runtime.as_deref() == Some("none") => {
            findings.push(ok(
                "containers",
                format!(
                    "off (containers.runtime: none): {}",
                    container::without_runtime_consequence(settings.containers.without_runtime)
                ),
            ));
            None
        }
        // Said by detect's note, the consequence (containers.withoutRuntime) included.
        Ok((None, notes)) => {
            findings.push(warn(
                "containers",
                notes.join("; "),
                "install podman (`apt-get install podman`) or docker",
            ));
            None
        }
        Err(e) => {
            findings.push(warn(
                "containers",
                format!("the configured runtime does not work: {e}"),
                "fix containers.runtime in corral.yaml, or set it to auto",
            ));
            None
        }
    };

    let ports = settings.ports;
    let count = u32::from(ports.max.saturating_sub(ports.min)) + 1;
    if ports.max < ports.min || count < 16 {
        findings.push(warn(
            "ports",
            format!("replica ports {}-{}: {count} port(s)", ports.min, ports.max),
            "widen `ports: {min, max}` in corral.yaml; every replica of a running job holds one",
        ));
    } else {
        findings.push(ok(
            "ports",
            format!(
                "replica ports {}-{} ({count}); each running replica holds one",
                ports.min, ports.max
            ),
        ));
    }

    match crate::lock::holder(data_dir) {
        Ok(None) => findings.push(ok(
            "data",
            format!(
                "data directory {} is not held by a server",
                data_dir.display()
            ),
        )),
        Ok(Some(h)) => findings.push(warn(
            "data",
            format!(
                "data directory {} is held by {}{}{}",
                data_dir.display(),
                h.program.as_deref().unwrap_or("a process"),
                h.pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                h.api
                    .as_deref()
                    .map(|a| format!(", serving at {a}"))
                    .unwrap_or_default()
            ),
            "use that server (`--server`), stop it, or pass another --data-dir",
        )),
        Err(e) => findings.push(warn(
            "data",
            format!("cannot read the lock of {}: {e}", data_dir.display()),
            "check the directory's permissions",
        )),
    }
    let isolation = crate::tenancy::isolation_here(settings);
    findings.push(match isolation {
        corral_core::tenancy::Isolation::PerNamespace(_) => {
            ok("tenants", crate::tenancy::describe(&isolation))
        }
        corral_core::tenancy::Isolation::Shared => warn(
            "tenants",
            crate::tenancy::describe(&isolation),
            crate::tenancy::HOW_TO_ISOLATE,
        ),
    });
    if matches!(isolation, corral_core::tenancy::Isolation::PerNamespace(_)) {
        findings.push(match crate::executor::scratch::mount_namespaces_work() {
            Ok(()) => match crate::executor::scratch::shared_because_of(data_dir) {
                None => ok(
                    "scratch",
                    "each job has its own /tmp and /dev/shm (a mount namespace per replica)".into(),
                ),
                // Said, not warned: tests and trials keep their data there.
                Some(dir) => ok(
                    "scratch",
                    format!(
                        "each job has its own /tmp and /dev/shm, except {dir}: the data \
                         directory {} is under it, so replicas keep the machine's (use one \
                         elsewhere, e.g. --data-dir /var/lib/corral)",
                        data_dir.display()
                    ),
                ),
            },
            Err(e) => warn(
                "scratch",
                format!(
                    "this machine refuses mount namespaces ({e}): replicas share the machine's \
                     /tmp and /dev/shm with other namespaces (TMPDIR is still each job's own)"
                ),
                "run corral with CAP_SYS_ADMIN (as root on the host, not in a default container)",
            ),
        });
    }
    let all_ok = findings.iter().all(|f| f.level == Level::Ok);
    Report {
        findings,
        driver: source.driver(),
        gpus,
        cgroup_version,
        container_runtime,
        all_ok,
        configured_gpus: configured_gpus(source, settings),
    }
}

impl Report {
    /// The report with more findings (`corral doctor` adds whether corral.yaml's pools take
    /// this node; `corral up` says that when it opens the cluster).
    pub fn with_findings(mut self, more: Vec<Finding>) -> Report {
        self.findings.extend(more);
        self.all_ok = self.findings.iter().all(|f| f.level == Level::Ok);
        self
    }

    /// The report as `corral doctor` prints it: one line per finding, its fix below.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let level = match f.level {
                Level::Ok => "OK  ",
                Level::Warn => "WARN",
            };
            out.push_str(&format!("{level} {:<10} {}\n", f.area, f.what));
            if let Some(fix) = &f.fix {
                out.push_str(&format!("     {:<10} fix: {fix}\n", ""));
            }
        }
        out
    }

    /// One line for `corral up`: GPUs, cgroups, containers, ports.
    pub fn one_line(&self) -> String {
        let gpus = if let Some((n, t)) = &self.configured_gpus {
            format!("{n} x {t} (corral.yaml's node.gpus)")
        } else if self.gpus.is_empty() {
            "no GPUs".to_string()
        } else {
            let mut types: Vec<String> = Vec::new();
            for g in &self.gpus {
                let n = self
                    .gpus
                    .iter()
                    .filter(|x| x.gpu_type == g.gpu_type)
                    .count();
                let t = format!("{n} x {}", g.gpu_type);
                if !types.contains(&t) {
                    types.push(t);
                }
            }
            let driver = self
                .driver
                .as_ref()
                .map(|d| format!(" (driver {})", d.driver_version))
                .unwrap_or_default();
            format!("{}{driver}", types.join(", "))
        };
        let cgroups = match self.cgroup_version {
            "none" => "cgroups off (limits not enforced)".to_string(),
            v => format!("cgroup {v} limits enforced"),
        };
        let containers = self
            .container_runtime
            .clone()
            .unwrap_or_else(|| "no container runtime".into());
        format!("machine: {gpus}; {cgroups}; {containers}")
    }

    /// What this report warns of, one line each with its fix.
    pub fn warnings(&self) -> Vec<String> {
        self.findings
            .iter()
            .filter(|f| f.level == Level::Warn)
            .map(|f| match &f.fix {
                Some(fix) => format!("{}: {} (fix: {fix})", f.area, f.what),
                None => format!("{}: {}", f.area, f.what),
            })
            .collect()
    }
}

/// Whether the runtime can pull images: its default registry answers a TCP connection
/// within a few seconds. `Err` says what can run instead (the images already here).
fn image_pulls(rt: &container::ContainerRuntime) -> Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    const REGISTRY: &str = "registry-1.docker.io:443";
    // Name resolution has no timeout of its own: the probe runs on a thread of its own, and
    // a machine whose resolver hangs is not held up (`corral up` examines at each start).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let reached = match REGISTRY.to_socket_addrs() {
            Ok(mut addrs) => match addrs.next() {
                Some(addr) => TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    .map(drop)
                    .map_err(|e| e.to_string()),
                None => Err("no address".to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        let _ = tx.send(reached);
    });
    let unreachable = match rx.recv_timeout(Duration::from_millis(2500)) {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e,
        Err(_) => "no answer within 2.5 s".to_string(),
    };
    let local = std::process::Command::new(&rt.program)
        .args(&rt.global_args)
        .args(["images", "--format", "{{.Repository}}:{{.Tag}}"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::trim)
                // Dangling layers (`<none>:<none>`) are no image a job can name.
                .filter(|l| !l.is_empty() && !l.contains("<none>"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let here = match local.len() {
        0 => "no image is here, so every job with an image fails to start".to_string(),
        n if n <= 5 => format!("only the images here can run: {}", local.join(", ")),
        n => format!(
            "only the {n} images here can run ({}, ...)",
            local[..5].join(", ")
        ),
    };
    Err(format!(
        "it cannot pull images ({REGISTRY} unreachable: {unreachable}): {here}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuSample;

    /// A recorded H100 machine: what NVML said, replayed.
    struct Recorded {
        mig: Option<bool>,
        ecc: u64,
    }

    impl GpuSource for Recorded {
        fn unavailable_reason(&self) -> Option<String> {
            None
        }
        fn driver(&self) -> Option<DriverInfo> {
            Some(DriverInfo {
                nvml_version: "13.580.82.07".into(),
                driver_version: "580.82.07".into(),
            })
        }
        fn devices(&self) -> Vec<GpuDevice> {
            vec![GpuDevice {
                index: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                gpu_type: "NVIDIA-H100-80GB-HBM3".into(),
                memory_bytes: 80 << 30,
                uuid: "GPU-1".into(),
                mig_enabled: self.mig,
            }]
        }
        fn samples(&self) -> Vec<GpuSample> {
            vec![GpuSample {
                index: 0,
                uuid: "GPU-1".into(),
                model_name: "NVIDIA H100 80GB HBM3".into(),
                utilization_percent: Some(0),
                memory_used_bytes: 0,
                memory_total_bytes: 80 << 30,
                power_watts: Some(70.0),
                temperature_celsius: Some(30),
                ecc_uncorrected_volatile: Some(self.ecc),
                last_xid: None,
                pages_pending_retirement: Some(false),
                processes: Vec::new(),
            }]
        }
    }

    struct NoNvml;

    impl GpuSource for NoNvml {
        fn unavailable_reason(&self) -> Option<String> {
            Some("NVML is not available (libnvidia-ml.so.1: not found)".into())
        }
        fn driver(&self) -> Option<DriverInfo> {
            None
        }
        fn devices(&self) -> Vec<GpuDevice> {
            Vec::new()
        }
        fn samples(&self) -> Vec<GpuSample> {
            Vec::new()
        }
    }

    #[test]
    fn a_healthy_h100_is_ok_with_its_canonical_type() {
        let f = gpu_findings(
            &Recorded {
                mig: Some(false),
                ecc: 0,
            },
            &Settings::default(),
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].level, Level::Ok);
        assert!(
            f[0].what
                .contains("NVIDIA H100 80GB HBM3 -> type NVIDIA-H100-80GB-HBM3")
                && f[0].what.contains("driver 580.82.07")
                && f[0].what.contains("MIG off"),
            "{}",
            f[0].what
        );
    }

    #[test]
    fn mig_ecc_missing_nvml_and_overrides_warn_with_a_fix() {
        let mig = gpu_findings(
            &Recorded {
                mig: Some(true),
                ecc: 0,
            },
            &Settings::default(),
        );
        assert_eq!(mig[0].level, Level::Warn);
        assert!(mig[0].fix.as_deref().is_some_and(|f| f.contains("-mig 0")));
        let ecc = gpu_findings(
            &Recorded {
                mig: Some(false),
                ecc: 3,
            },
            &Settings::default(),
        );
        assert!(ecc[0].what.contains("unhealthy") && ecc[0].what.contains("no new replicas"));
        let none = gpu_findings(&NoNvml, &Settings::default());
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].level, Level::Warn);
        assert!(none[0].fix.is_some());
        let mut settings = Settings::default();
        settings.node.gpus = Some(2);
        settings.node.gpu_type = Some("NVIDIA H100 80GB HBM3".into());
        let forced = gpu_findings(&NoNvml, &settings);
        assert!(
            forced[1]
                .what
                .contains("2 GPU(s) of type NVIDIA-H100-80GB-HBM3")
        );
    }

    #[test]
    fn a_driver_only_on_the_servers_ld_library_path_warns_unless_passed() {
        let settings = Settings::default();
        let cached = DriverLibrary {
            by_the_loader: true,
            on_ld_library_path: Some("/usr/local/nvidia/lib64".into()),
        };
        assert_eq!(driver_library_finding(&cached, &settings).level, Level::Ok);
        let only_env = DriverLibrary {
            by_the_loader: false,
            on_ld_library_path: Some("/usr/local/nvidia/lib64".into()),
        };
        let f = driver_library_finding(&only_env, &settings);
        assert_eq!(f.level, Level::Warn);
        assert!(f.what.contains("/usr/local/nvidia/lib64"), "{}", f.what);
        let fix = f.fix.unwrap_or_default();
        assert!(
            fix.contains("ldconfig") && fix.contains("passEnv: [LD_LIBRARY_PATH]"),
            "{fix}"
        );
        let passing = Settings {
            pass_env: vec!["LD_LIBRARY_PATH".into()],
            ..Settings::default()
        };
        assert_eq!(driver_library_finding(&only_env, &passing).level, Level::Ok);
        let missing = DriverLibrary {
            by_the_loader: false,
            on_ld_library_path: None,
        };
        let f = driver_library_finding(&missing, &passing);
        assert_eq!(f.level, Level::Warn);
        assert!(f.what.contains("not found"), "{}", f.what);
    }

    #[test]
    fn a_pool_that_selects_no_node_warns_and_one_that_does_is_ok() {
        let example = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster.yaml"),
        )
        .expect("examples/cluster.yaml");
        let text = format!(
            "{example}\n---\nkind: CorralConfig\nnode: {{name: n1, gpus: 8, gpuType: NVIDIA H100 80GB HBM3}}\n"
        );
        let file = ClusterFileConfig::parse(&text).expect("config");
        let f = pool_findings(&file);
        let warned: Vec<&str> = f
            .iter()
            .filter(|f| f.level == Level::Warn)
            .map(|f| f.what.as_str())
            .collect();
        assert_eq!(warned.len(), 2, "a100 and v100 select nothing: {f:?}");
        assert!(
            warned[0].starts_with("NodePool a100 selects no node"),
            "{}",
            warned[0]
        );
        assert!(
            warned[0].contains("n1 (8 x NVIDIA-H100-80GB-HBM3)"),
            "{}",
            warned[0]
        );
        assert!(f.iter().all(|f| !f.what.contains("NodePool h100")), "{f:?}");
        let only_h100 = ClusterFileConfig {
            node_pools: file
                .node_pools
                .iter()
                .filter(|p| p.metadata.name == "h100")
                .cloned()
                .collect(),
            ..file.clone()
        };
        let f = pool_findings(&only_h100);
        assert!(f.len() == 1 && f[0].level == Level::Ok, "{f:?}");
    }

    #[test]
    fn this_machine_gets_a_report_and_a_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let r = examine(dir.path(), &Settings::default());
        for area in ["gpu", "cgroups", "containers", "ports", "data"] {
            assert!(r.findings.iter().any(|f| f.area == area), "{area}: {r:?}");
        }
        assert!(
            r.findings
                .iter()
                .all(|f| (f.level == Level::Warn) == f.fix.is_some())
        );
        assert_eq!(r.all_ok, r.findings.iter().all(|f| f.level == Level::Ok));
        // As root (tenants isolated) it says whether each job gets its own /tmp and /dev/shm.
        if rustix::process::geteuid().is_root() {
            assert!(r.findings.iter().any(|f| f.area == "scratch"), "{r:?}");
        }
        let line = r.one_line();
        assert!(
            line.starts_with("machine: ") && !line.contains('\n'),
            "{line}"
        );
    }
}
