//! `/metrics`: the cluster's gauges and counters, each queue's quota and usage, and each
//! running replica's CPU, memory and GPUs. Names carry the `corral_` prefix, base units
//! (`_seconds`, `_bytes`) and `_total` on counters.
//!
//! Two formats, negotiated by the `Accept` header as the Prometheus client libraries do:
//! the Prometheus text format 0.0.4 (the default: what `curl | promtool check metrics` and
//! older scrapers read) and OpenMetrics 1.0 (when the scraper prefers it). The encoder is
//! our own because prometheus-client writes OpenMetrics only and keeps a family's series in
//! a hash map, so two scrapes listed them in different orders; here families come out in a
//! fixed order and series in the order of their (sorted) inputs.

use std::fmt::Write as _;

use corral_api::metric_names as names;
use corral_local::cluster::{
    JobProgressRow, JobState, MetricsSnapshot, QueueInfo, QuotaLimits, ReplicaUsageRow,
};

const STATES: [JobState; 10] = [
    JobState::Queued,
    JobState::Admitted,
    JobState::Running,
    JobState::Restarting,
    JobState::Preempting,
    JobState::BackOff,
    JobState::Suspended,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Deleting,
];

/// Gauge `corral_queue_nominal_quota{queue,pool,resource}`: a queue's nominal quota.
pub const QUEUE_NOMINAL_QUOTA: &str = "queue_nominal_quota";
/// Gauge `corral_queue_borrowing_limit{queue,pool,resource}`: how far above nominal a queue
/// may borrow.
pub const QUEUE_BORROWING_LIMIT: &str = "queue_borrowing_limit";
/// Gauge `corral_queue_resource_usage{queue,pool,resource}`: what a queue's admitted jobs hold.
pub const QUEUE_RESOURCE_USAGE: &str = "queue_resource_usage";

/// The exposition format of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: the acceptable media range with the highest
    /// quality (the first of equals) that names one of ours; text when none does. As
    /// client_golang's `expfmt.Negotiate`.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let mut ranges: Vec<(f32, usize, Format)> = Vec::new();
        for (i, range) in accept.split(',').enumerate() {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0f32;
            let mut version = None;
            for p in parts {
                if let Some((k, v)) = p.split_once('=') {
                    match k.trim().to_ascii_lowercase().as_str() {
                        "q" => q = v.trim().parse().unwrap_or(0.0),
                        "version" => version = Some(v.trim().to_string()),
                        _ => {}
                    }
                }
            }
            if q <= 0.0 {
                continue;
            }
            let format = match media.as_str() {
                // 1.0.0 is what we write; 0.0.1 is its draft, which scrapers read the same.
                "application/openmetrics-text"
                    if version
                        .as_deref()
                        .is_none_or(|v| v == "1.0.0" || v == "0.0.1") =>
                {
                    Format::OpenMetrics
                }
                "text/plain" | "text/*" | "*/*" => Format::Text,
                _ => continue,
            };
            ranges.push((q, i, format));
        }
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        ranges.first().map_or(Format::Text, |r| r.2)
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Gauge,
    Counter,
}

#[derive(Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) if v.is_nan() => f.write_str("NaN"),
            Value::Float(v) if v.is_infinite() => {
                f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" })
            }
            Value::Float(v) => write!(f, "{v}"),
        }
    }
}

/// One metric family: its name without `corral_` (and without `_total` for counters).
struct Family {
    name: String,
    help: &'static str,
    kind: Kind,
    /// Base unit, which `name` ends with (`seconds`, `bytes`).
    unit: Option<&'static str>,
    series: Vec<(Vec<(&'static str, String)>, Value)>,
}

impl Family {
    fn new(name: &str, help: &'static str, kind: Kind) -> Self {
        Family {
            name: format!("{}_{name}", names::PREFIX),
            help,
            kind,
            unit: None,
            series: Vec::new(),
        }
    }

    /// A family named exactly `name`, without `corral_`: the GPU series keep the names of
    /// NVIDIA's DCGM exporter, so its dashboards work unchanged.
    fn dcgm(name: &str, help: &'static str) -> Self {
        Family {
            name: name.to_string(),
            help,
            kind: Kind::Gauge,
            unit: None,
            series: Vec::new(),
        }
    }

    fn with_unit(mut self, unit: &'static str) -> Self {
        self.name = format!("{}_{unit}", self.name);
        self.unit = Some(unit);
        self
    }

    fn one(mut self, value: Value) -> Self {
        self.series.push((Vec::new(), value));
        self
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: Value) {
        self.series.push((labels, value));
    }

    fn encode(&self, out: &mut String, format: Format) {
        let family = self.name.clone();
        let sample = match self.kind {
            Kind::Counter => format!("{family}_total"),
            Kind::Gauge => family.clone(),
        };
        // In the text format a counter's metadata names its samples (`_total`); in
        // OpenMetrics it names the family, and the samples add `_total`.
        let meta = match format {
            Format::Text => &sample,
            Format::OpenMetrics => &family,
        };
        let kind = match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# HELP {meta} {}", escape_help(self.help, format));
        let _ = writeln!(out, "# TYPE {meta} {kind}");
        if let (Format::OpenMetrics, Some(unit)) = (format, self.unit) {
            let _ = writeln!(out, "# UNIT {meta} {unit}");
        }
        for (labels, value) in &self.series {
            out.push_str(&sample);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

fn escape_help(s: &str, format: Format) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

fn label(k: &'static str, v: &str) -> (&'static str, String) {
    (k, v.to_string())
}

/// A quota's limited resources as (resource label, value in base units); unlimited ones
/// have no series (a dashboard reads "no series" as "no limit").
fn quota_values(q: &QuotaLimits) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    if let Some(g) = q.gpu {
        out.push(("gpu", Value::Int(g)));
    }
    if let Some(c) = q.cpu_milli {
        out.push(("cpu", Value::Float(c as f64 / 1000.0)));
    }
    if let Some(m) = q.memory_bytes {
        out.push(("memory", Value::Int(m)));
    }
    out
}

/// Per-GPU series in the DCGM exporter's names and labels (`gpu`, `UUID`, `modelName`,
/// `Hostname`; `namespace`, `job`, `replica` while a replica the caller may see holds the
/// GPU), GPU health, and per-replica GPU memory and utilisation. Nothing without NVML.
///
/// The DCGM series keep DCGM's camelCase label names, which `promtool check metrics` lints,
/// so that dashboards made for NVIDIA's exporter work unchanged; Corral's own series
/// (`corral_gpu_healthy`) carry the same labels in Prometheus' snake_case.
fn gpu_families(m: &MetricsSnapshot, replicas: &[ReplicaUsageRow]) -> Vec<Family> {
    let mut util = Family::dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)");
    let mut fb_used = Family::dcgm("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)");
    let mut fb_free = Family::dcgm("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)");
    let mut power = Family::dcgm("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)");
    let mut temp = Family::dcgm("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)");
    let mut xid = Family::dcgm(
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered",
    );
    let mut ecc = Family::dcgm(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors",
    );
    let mut healthy = Family::new(
        "gpu_healthy",
        "1 while NVML reports the GPU healthy; 0: it gets no new replicas (ECC, page retirement, critical Xid)",
        Kind::Gauge,
    );
    const MIB: u64 = 1 << 20;
    let mut samples: Vec<&corral_local::gpu::GpuSample> = m.gpu_samples.iter().collect();
    samples.sort_by_key(|s| s.index);
    for s in samples {
        let mut labels = vec![
            label("gpu", &s.index.to_string()),
            label("UUID", &s.uuid),
            label("modelName", &s.model_name),
            label("Hostname", &m.hostname),
        ];
        if let Some(r) = replicas.iter().find(|r| r.gpus.contains(&s.index)) {
            labels.push(label("namespace", &r.namespace));
            labels.push(label("job", &r.job));
            labels.push(label("replica", &r.replica));
        }
        if let Some(u) = s.utilization_percent {
            util.add(labels.clone(), Value::Int(u.into()));
        }
        fb_used.add(labels.clone(), Value::Int(s.memory_used_bytes / MIB));
        fb_free.add(
            labels.clone(),
            Value::Int(s.memory_total_bytes.saturating_sub(s.memory_used_bytes) / MIB),
        );
        if let Some(w) = s.power_watts {
            power.add(labels.clone(), Value::Float(w));
        }
        if let Some(t) = s.temperature_celsius {
            temp.add(labels.clone(), Value::Int(t.into()));
        }
        xid.add(labels.clone(), Value::Int(s.last_xid.unwrap_or(0)));
        if let Some(e) = s.ecc_uncorrected_volatile {
            ecc.add(labels.clone(), Value::Int(e));
        }
        let ok = corral_local::gpu::unhealthy_reason(s).is_none();
        healthy.add(corral_labels(labels), Value::Int(u64::from(ok)));
    }
    let mut rows: Vec<&ReplicaUsageRow> = replicas.iter().collect();
    rows.sort_by(|a, b| (&a.namespace, &a.replica).cmp(&(&b.namespace, &b.replica)));
    let mut r_mem = Family::new(
        "replica_gpu_memory",
        "GPU memory held by a running replica's own processes",
        Kind::Gauge,
    )
    .with_unit("bytes");
    let mut r_util = Family::new(
        "replica_gpu_utilization_percent",
        "Mean utilization of a running replica's GPUs (in %)",
        Kind::Gauge,
    );
    for r in rows {
        let labels = vec![
            label("namespace", &r.namespace),
            label("job", &r.job),
            label("replica", &r.replica),
        ];
        if let Some(b) = r.gpu_memory_bytes {
            r_mem.add(labels.clone(), Value::Int(b));
        }
        if let Some(u) = r.gpu_utilization_percent {
            r_util.add(labels, Value::Int(u.into()));
        }
    }
    let mut out = vec![
        util, fb_used, fb_free, power, temp, xid, ecc, healthy, r_mem, r_util,
    ];
    // Without NVML there is nothing to say: no empty families either.
    out.retain(|f| !f.series.is_empty());
    out
}

/// `promtool check metrics` (Debian package `prometheus`) over `text`: its exit status and
/// what it said; `None` where promtool is not installed. For tests (this crate's and the
/// end-to-end ones), which hold /metrics to Prometheus' own linter.
/// How far each job is, and when it should end, as its replicas report it.
fn progress_families(rows: &[JobProgressRow]) -> [Family; 2] {
    let mut ratio = Family::new(
        "job_progress",
        "Fraction of its training a job has done, as its replicas report it",
        Kind::Gauge,
    )
    .with_unit("ratio");
    let mut eta = Family::new(
        "job_eta",
        "Time a job should still take, at the rate of steps measured in its current attempt",
        Kind::Gauge,
    )
    .with_unit("seconds");
    for r in rows {
        let labels = vec![label("namespace", &r.namespace), label("job", &r.job)];
        if let Some(p) = r.progress.percent {
            ratio.add(labels.clone(), Value::Float(p / 100.0));
        }
        if let Some(s) = r.progress.eta_seconds {
            eta.add(labels, Value::Int(s));
        }
    }
    [ratio, eta]
}

pub fn promtool_check(text: &str) -> std::io::Result<Option<(i32, String)>> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Some((out.status.code().unwrap_or(-1), said)))
}

/// DCGM's GPU labels renamed to snake_case, for a `corral_` series.
fn corral_labels(labels: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    labels
        .into_iter()
        .map(|(k, v)| {
            let k = match k {
                "UUID" => "uuid",
                "modelName" => "model_name",
                "Hostname" => "hostname",
                other => other,
            };
            (k, v)
        })
        .collect()
}

/// The text of `/metrics`, in `format`. `queues` and `replicas` may come in any order.
pub fn render(
    m: &MetricsSnapshot,
    queues: &[QueueInfo],
    replicas: &[ReplicaUsageRow],
    progress: &[JobProgressRow],
    format: Format,
) -> String {
    let mut families = Vec::new();

    let mut queue_names: Vec<&String> = m.jobs.keys().chain(m.queue_gpus_used.keys()).collect();
    queue_names.sort();
    queue_names.dedup();
    let mut jobs = Family::new(names::JOBS, "TrainingJobs by queue and state", Kind::Gauge);
    let mut queue_gpus = Family::new(
        names::QUEUE_GPUS_IN_USE,
        "GPUs held by the admitted jobs of a queue",
        Kind::Gauge,
    );
    for queue in &queue_names {
        let counts = m.jobs.get(*queue);
        for state in STATES {
            let n = counts
                .and_then(|c| c.get(state.as_str()))
                .copied()
                .unwrap_or(0);
            jobs.add(
                vec![
                    label(names::LABEL_QUEUE, queue),
                    label(names::LABEL_STATE, state.as_str()),
                ],
                Value::Int(n),
            );
        }
        let used = m.queue_gpus_used.get(*queue).copied().unwrap_or(0);
        queue_gpus.add(vec![label(names::LABEL_QUEUE, queue)], Value::Int(used));
    }
    families.push(jobs);
    families.push(queue_gpus);

    let mut queues: Vec<&QueueInfo> = queues.iter().collect();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let mut nominal = Family::new(
        QUEUE_NOMINAL_QUOTA,
        "Nominal quota of a queue in a node pool (resource gpu: GPUs, cpu: cores, memory: bytes); no series: unlimited",
        Kind::Gauge,
    );
    let mut borrowing = Family::new(
        QUEUE_BORROWING_LIMIT,
        "How far above its nominal quota a queue may borrow in a node pool (gpu: GPUs, cpu: cores, memory: bytes); no series: no limit",
        Kind::Gauge,
    );
    let mut usage = Family::new(
        QUEUE_RESOURCE_USAGE,
        "What the admitted jobs of a queue hold in a node pool (gpu: GPUs, cpu: cores, memory: bytes)",
        Kind::Gauge,
    );
    for q in queues {
        let mut pools: Vec<_> = q.usage.iter().collect();
        pools.sort_by(|a, b| a.pool.cmp(&b.pool));
        for u in pools {
            let labels = |resource: &str| {
                vec![
                    label(names::LABEL_QUEUE, &q.name),
                    label("pool", &u.pool),
                    label("resource", resource),
                ]
            };
            if let Some(n) = &u.nominal {
                for (resource, v) in quota_values(n) {
                    nominal.add(labels(resource), v);
                }
            }
            if let Some(b) = &u.borrowing_limit {
                for (resource, v) in quota_values(b) {
                    borrowing.add(labels(resource), v);
                }
            }
            let used = QuotaLimits {
                gpu: Some(u.used.gpu),
                cpu_milli: Some(u.used.cpu_milli),
                memory_bytes: Some(u.used.memory_bytes),
            };
            for (resource, v) in quota_values(&used) {
                usage.add(labels(resource), v);
            }
        }
    }
    families.push(nominal);
    families.push(borrowing);
    families.push(usage);

    let int = |v: u64| Value::Int(v);
    families.extend([
        Family::new("gpus", "GPUs the cluster offers", Kind::Gauge).one(int(m.gpus_total)),
        Family::new("gpus_allocated", "GPUs held by admitted jobs", Kind::Gauge)
            .one(int(m.gpus_allocated)),
        Family::new("replicas_running", "Replica processes running", Kind::Gauge)
            .one(int(m.running_replicas)),
        Family::new(
            "jobs_submitted",
            "TrainingJobs accepted since the server started",
            Kind::Counter,
        )
        .one(int(m.jobs_submitted_total)),
        Family::new(
            names::ADMISSIONS,
            "Jobs admitted by the scheduler",
            Kind::Counter,
        )
        .one(int(m.admissions_total)),
        Family::new(
            names::PREEMPTIONS,
            "Jobs preempted back to their queue",
            Kind::Counter,
        )
        .one(int(m.preemptions_total)),
        Family::new("replica_starts", "Replica processes started", Kind::Counter)
            .one(int(m.replica_starts_total)),
        Family::new(
            "job_restarts",
            "Job restarts after a failure (what backoffLimit counts)",
            Kind::Counter,
        )
        .one(int(m.restarts_total)),
        Family::new(
            "jobs_succeeded",
            "Jobs that reached Succeeded",
            Kind::Counter,
        )
        .one(int(m.jobs_succeeded_total)),
        Family::new("jobs_failed", "Jobs that reached Failed", Kind::Counter)
            .one(int(m.jobs_failed_total)),
        Family::new(
            "control_loop_ticks",
            "Passes of the control loop",
            Kind::Counter,
        )
        .one(int(m.ticks_total)),
        Family::new(
            "scheduling_cycle_last",
            "Duration of the last scheduling cycle",
            Kind::Gauge,
        )
        .with_unit("seconds")
        .one(Value::Float(m.last_cycle_seconds)),
        Family::new(
            "control_loop_tick_last",
            "Duration of the last control-loop pass",
            Kind::Gauge,
        )
        .with_unit("seconds")
        .one(Value::Float(m.last_tick_seconds)),
    ]);

    let mut rows: Vec<&ReplicaUsageRow> = replicas.iter().collect();
    rows.sort_by(|a, b| (&a.namespace, &a.replica).cmp(&(&b.namespace, &b.replica)));
    let mut cpu = Family::new(
        "replica_cpu",
        "CPU time used by a running replica",
        Kind::Counter,
    )
    .with_unit("seconds");
    let mut memory = Family::new(
        "replica_memory",
        "Resident memory of a running replica",
        Kind::Gauge,
    )
    .with_unit("bytes");
    let mut gpus = Family::new(
        "replica_gpus",
        "GPUs pinned to a running replica",
        Kind::Gauge,
    );
    for r in rows {
        let labels = vec![
            label("namespace", &r.namespace),
            label("job", &r.job),
            label("replica", &r.replica),
        ];
        if let Some(s) = r.cpu_seconds {
            cpu.add(labels.clone(), Value::Float(s.max(0.0)));
        }
        if let Some(b) = r.memory_bytes {
            memory.add(labels.clone(), Value::Int(b));
        }
        gpus.add(labels, Value::Int(r.gpus.len() as u64));
    }
    families.extend([cpu, memory, gpus]);
    families.extend(progress_families(progress));
    families.extend(gpu_families(m, replicas));

    let mut text = String::new();
    for f in &families {
        f.encode(&mut text, format);
    }
    if format == Format::OpenMetrics {
        text.push_str("# EOF\n");
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use corral_core::sched::ResourceAmount;
    use corral_local::cluster::QueuePoolUsage;

    #[test]
    fn job_states_are_the_shared_label_values() {
        let ours: Vec<&str> = STATES.iter().map(|s| s.as_str()).collect();
        assert_eq!(ours, names::JOB_STATES);
    }

    pub(crate) fn sample() -> (MetricsSnapshot, Vec<QueueInfo>, Vec<ReplicaUsageRow>) {
        let mut m = MetricsSnapshot::default();
        m.jobs
            .entry("team-a".into())
            .or_default()
            .insert("Running".into(), 2);
        m.gpus_total = 8;
        m.jobs_submitted_total = 3;
        let queues = vec![QueueInfo {
            name: "team-a".into(),
            cohort: None,
            weight: 1,
            pending: 0,
            admitted: 1,
            usage: vec![QueuePoolUsage {
                pool: "h100".into(),
                used: ResourceAmount {
                    gpu: 12,
                    cpu_milli: 1500,
                    memory_bytes: 1 << 30,
                },
                nominal: Some(ResourceAmount::gpus(16).into()),
                borrowing_limit: Some(ResourceAmount::gpus(4).into()),
            }],
        }];
        let row = |replica: &str| ReplicaUsageRow {
            namespace: "ns".into(),
            job: "j".into(),
            replica: replica.into(),
            pid: Some(1),
            cpu_seconds: Some(1.5),
            memory_bytes: Some(1024),
            gpus: vec![0, 1],
            gpu_utilization_percent: None,
            gpu_memory_bytes: None,
        };
        (m, queues, vec![row("j-worker-1"), row("j-worker-0")])
    }

    /// A reading as NVML gave it on an H100 server: GPU 0 runs replica `j-worker-0`.
    pub(crate) fn h100(index: u32) -> corral_local::gpu::GpuSample {
        corral_local::gpu::GpuSample {
            index,
            uuid: format!("GPU-{index}"),
            model_name: "NVIDIA H100 80GB HBM3".into(),
            utilization_percent: Some(97),
            memory_used_bytes: 30 << 30,
            memory_total_bytes: 80 << 30,
            power_watts: Some(612.5),
            temperature_celsius: Some(61),
            ecc_uncorrected_volatile: Some(0),
            last_xid: None,
            pages_pending_retirement: Some(false),
            processes: Vec::new(),
        }
    }

    #[test]
    fn gpu_series_carry_dcgm_names_and_the_replica_on_the_gpu() {
        let (mut m, queues, _) = sample();
        m.hostname = "gpu-host".into();
        m.gpu_samples = vec![
            h100(1),
            corral_local::gpu::GpuSample {
                last_xid: Some(79),
                ..h100(0)
            },
        ];
        let rows = vec![ReplicaUsageRow {
            namespace: "ns".into(),
            job: "j".into(),
            replica: "j-worker-0".into(),
            pid: Some(1),
            cpu_seconds: Some(1.0),
            memory_bytes: Some(1),
            gpus: vec![0],
            gpu_utilization_percent: Some(97),
            gpu_memory_bytes: Some(29 << 30),
        }];
        let text = render(&m, &queues, &rows, &[], Format::Text);
        let on0 = "gpu=\"0\",UUID=\"GPU-0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-host\",namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"";
        let on1 =
            "gpu=\"1\",UUID=\"GPU-1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-host\"}";
        for needle in [
            format!("DCGM_FI_DEV_GPU_UTIL{{{on0}}} 97"),
            format!("DCGM_FI_DEV_FB_USED{{{on0}}} 30720"),
            format!("DCGM_FI_DEV_FB_FREE{{{on0}}} 51200"),
            format!("DCGM_FI_DEV_POWER_USAGE{{{on0}}} 612.5"),
            format!("DCGM_FI_DEV_GPU_TEMP{{{on0}}} 61"),
            format!("DCGM_FI_DEV_XID_ERRORS{{{on0}}} 79"),
            "corral_gpu_healthy{gpu=\"0\",uuid=\"GPU-0\",model_name=\"NVIDIA H100 80GB HBM3\",hostname=\"gpu-host\",namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 0".to_string(),
            format!("DCGM_FI_DEV_GPU_UTIL{{{on1} 97"),
            "corral_gpu_healthy{gpu=\"1\",uuid=\"GPU-1\",model_name=\"NVIDIA H100 80GB HBM3\",hostname=\"gpu-host\"} 1".to_string(),
            "corral_replica_gpu_memory_bytes{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 31138512896".to_string(),
            "corral_replica_gpu_utilization_percent{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 97".to_string(),
        ] {
            assert!(text.contains(&needle), "no {needle} in\n{text}");
        }
        // GPU 0 comes before GPU 1 whatever order NVML gave.
        assert!(text.find("gpu=\"0\"") < text.find("gpu=\"1\""));

        // promtool lints them: the only complaint allowed is the DCGM series' own camelCase
        // label names (kept on purpose, see `gpu_families`). CORRAL_REQUIRE_PROMTOOL=1 (CI)
        // fails without promtool.
        let Some((_, said)) = promtool_check(&text).expect("promtool runs") else {
            assert!(
                std::env::var("CORRAL_REQUIRE_PROMTOOL").as_deref() != Ok("1"),
                "promtool is not installed; CORRAL_REQUIRE_PROMTOOL=1 requires it"
            );
            eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus)");
            return;
        };
        let complaints: Vec<&str> = said
            .lines()
            .filter(|l| {
                !(l.starts_with("DCGM_FI_DEV_")
                    && l.ends_with("label names should be written in 'snake_case' not 'camelCase'"))
            })
            .collect();
        assert!(
            complaints.is_empty(),
            "promtool check metrics: {complaints:?}\n{text}"
        );
        assert!(said.contains("DCGM_FI_DEV_GPU_UTIL"), "{said}\n{text}");
    }

    #[test]
    fn without_nvml_there_are_no_gpu_series() {
        let (m, queues, rows) = sample();
        let text = render(&m, &queues, &rows, &[], Format::Text);
        assert!(!text.contains("DCGM_"), "{text}");
        assert!(!text.contains("corral_gpu_healthy"), "{text}");
        assert!(!text.contains("replica_gpu_memory"), "{text}");
    }

    #[test]
    fn renders_cluster_quota_and_replica_metrics() {
        let (m, queues, rows) = sample();
        let progress = [JobProgressRow {
            namespace: "ns".into(),
            job: "j".into(),
            progress: corral_api::progress::JobProgress {
                step: 60,
                total_steps: Some(100),
                percent: Some(60.0),
                eta_seconds: Some(150),
                ..Default::default()
            },
        }];
        let text = render(&m, &queues, &rows, &progress, Format::Text);
        for needle in [
            "corral_job_progress_ratio{namespace=\"ns\",job=\"j\"} 0.6",
            "corral_job_eta_seconds{namespace=\"ns\",job=\"j\"} 150",
            "corral_jobs{queue=\"team-a\",state=\"Running\"} 2",
            "corral_jobs{queue=\"team-a\",state=\"Failed\"} 0",
            "corral_queue_gpus_in_use{queue=\"team-a\"} 0",
            "corral_queue_nominal_quota{queue=\"team-a\",pool=\"h100\",resource=\"gpu\"} 16",
            "corral_queue_borrowing_limit{queue=\"team-a\",pool=\"h100\",resource=\"gpu\"} 4",
            "corral_queue_resource_usage{queue=\"team-a\",pool=\"h100\",resource=\"gpu\"} 12",
            "corral_queue_resource_usage{queue=\"team-a\",pool=\"h100\",resource=\"cpu\"} 1.5",
            "corral_gpus 8",
            "# HELP corral_jobs_submitted_total TrainingJobs",
            "# TYPE corral_jobs_submitted_total counter",
            "corral_jobs_submitted_total 3",
            "corral_replica_cpu_seconds_total{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 1.5",
            "corral_replica_memory_bytes{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 1024",
            "corral_replica_gpus{namespace=\"ns\",job=\"j\",replica=\"j-worker-0\"} 2",
        ] {
            assert!(text.contains(needle), "no {needle} in\n{text}");
        }
        // Unlimited CPU and memory quotas have no series.
        assert!(!text.contains(
            "corral_queue_nominal_quota{queue=\"team-a\",pool=\"h100\",resource=\"cpu\"}"
        ));
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
        // Replicas come sorted, whatever order they came in.
        let w0 = text.find("replica=\"j-worker-0\"").unwrap_or(usize::MAX);
        let w1 = text.find("replica=\"j-worker-1\"").unwrap_or(0);
        assert!(w0 < w1, "{text}");
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let (m, queues, rows) = sample();
        let text = render(&m, &queues, &rows, &[], Format::OpenMetrics);
        for needle in [
            "# TYPE corral_jobs_submitted counter\ncorral_jobs_submitted_total 3\n",
            "# TYPE corral_scheduling_cycle_last_seconds gauge\n# UNIT corral_scheduling_cycle_last_seconds seconds\n",
        ] {
            assert!(text.contains(needle), "no {needle} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("a\"b\\c\nd", Format::Text), "a\"b\\\\c\\nd");
        assert_eq!(escape_help("a\"b", Format::OpenMetrics), "a\\\"b");
    }

    #[test]
    fn accept_header_picks_the_format() {
        use Format::*;
        for (accept, want) in [
            (None, Text),
            (Some("*/*"), Text),
            (Some("text/plain"), Text),
            (Some("text/plain;version=0.0.4"), Text),
            (Some("application/openmetrics-text"), OpenMetrics),
            // What Prometheus 2.x sends.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            // Prometheus with scrape_protocols: [PrometheusText0.0.4, OpenMetricsText1.0.0].
            (
                Some(
                    "text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4",
                ),
                Text,
            ),
            (Some("application/openmetrics-text;version=2.0.0"), Text),
            (Some("application/openmetrics-text;q=0"), Text),
            (Some("application/json"), Text),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn two_renders_of_the_same_state_are_identical() {
        let (m, queues, rows) = sample();
        let mut reversed = rows.clone();
        reversed.reverse();
        assert_eq!(
            render(&m, &queues, &rows, &[], Format::Text),
            render(&m, &queues, &reversed, &[], Format::Text)
        );
    }
}
