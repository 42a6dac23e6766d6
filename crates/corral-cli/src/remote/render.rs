//! The remote commands' tables and reports, as text: jobs, `describe`, queues, nodes, top.

use std::fmt::Write as _;
use std::time::Duration;

use corral_local::cluster::{
    JobDetails, JobSummary, NodeInfo, QueueInfo, QueuePoolUsage, QuotaLimits, ReplicaUsageRow,
};
use jiff::Timestamp;

use crate::output::plural;

/// Plain aligned columns.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if !first {
                text.push_str("   ");
            }
            first = false;
            let w = widths.get(i).copied().unwrap_or(0);
            let _ = write!(text, "{cell:<w$}");
        }
        s.push_str(text.trim_end());
        s.push('\n');
    };
    line(&mut s, &mut header.iter().copied());
    for row in rows {
        line(&mut s, &mut row.iter().map(String::as_str));
    }
    s
}

/// `3s`, `5m`, `2h`, `4d` since `t`.
pub fn age(t: Timestamp, now: Timestamp) -> String {
    let secs = now.as_second().saturating_sub(t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `60% (step 60/100, 125.5 samples/s), ETA 2m; loss=0.25 (worker-0, 12s ago)`.
pub fn progress_text(p: &corral_api::progress::JobProgress, now: Timestamp) -> String {
    let mut t = match p.percent {
        Some(pct) => format!("{pct}% ("),
        None => "(".to_string(),
    };
    t += &match p.total_steps {
        Some(total) => format!("step {}/{total}", p.step),
        None => format!("step {}", p.step),
    };
    if let Some(rate) = p.samples_per_second {
        t += &format!(", {rate} samples/s");
    }
    t += ")";
    if let Some(eta) = p.eta_seconds {
        let done =
            Timestamp::from_second(now.as_second().saturating_add(eta as i64)).unwrap_or(now);
        t += &format!(", ETA {}", age(now, done));
    }
    if !p.metrics.is_empty() {
        let metrics: Vec<String> = p.metrics.iter().map(|(k, v)| format!("{k}={v}")).collect();
        t += &format!("; {}", metrics.join(" "));
    }
    t += &format!(" ({}, {} ago)", p.replica, age(p.updated, now));
    t
}

pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "Ki", "Mi", "Gi", "Ti"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[unit])
    }
}

/// CPUs as the scheduler's reasons write them: `0.25`, `2`.
fn cpu(milli: u64) -> String {
    corral_core::sched::cpu_text(milli)
}

/// The jobs' table, ages as of `now`; `wide` adds preemptions, creation time and uid.
pub fn jobs_table(jobs: &[JobSummary], with_namespace: bool, wide: bool, now: Timestamp) -> String {
    let mut header = vec![];
    if with_namespace {
        header.push("NAMESPACE");
    }
    header.extend([
        "NAME",
        "STATE",
        "FRAMEWORK",
        "QUEUE",
        "REPLICAS",
        "GPUS",
        "RESTARTS",
        "AGE",
    ]);
    if wide {
        header.extend(["PREEMPTIONS", "CREATED", "UID"]);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let mut row = Vec::new();
            if with_namespace {
                row.push(j.namespace.clone());
            }
            row.extend([
                j.name.clone(),
                j.state.to_string(),
                j.framework.clone(),
                j.queue.clone(),
                format!("{}/{}", j.replicas_ready, j.replicas_total),
                j.gpus.to_string(),
                j.restarts.to_string(),
                age(j.created, now),
            ]);
            if wide {
                row.extend([
                    j.preemptions.to_string(),
                    j.created
                        .round(jiff::Unit::Second)
                        .unwrap_or(j.created)
                        .to_string(),
                    j.uid.clone(),
                ]);
            }
            row
        })
        .collect();
    table(&header, &rows)
}

/// `trainingjob/<name>` lines.
pub fn names_text(jobs: &[JobSummary]) -> String {
    jobs.iter()
        .map(|j| format!("trainingjob/{}\n", j.name))
        .collect()
}

/// The readable report of `corral describe`.
pub fn describe_text(d: &JobDetails) -> String {
    let now = Timestamp::now();
    let s = &d.summary;
    let mut t = String::new();
    let _ = writeln!(t, "Name:        {}", s.name);
    let _ = writeln!(t, "Namespace:   {}", s.namespace);
    let _ = writeln!(t, "Framework:   {}", s.framework);
    let _ = writeln!(t, "Queue:       {}", s.queue);
    if let Some(p) = &d.job.spec.priority_class {
        let _ = writeln!(t, "Priority:    {p}");
    }
    let _ = writeln!(t, "State:       {}", s.state);
    let _ = writeln!(
        t,
        "Replicas:    {}/{} ready, {} GPUs",
        s.replicas_ready, s.replicas_total, s.gpus
    );
    let _ = writeln!(
        t,
        "Created:     {} ({} ago)",
        s.created,
        age(s.created, now)
    );
    if let Some(st) = d.job.status.as_ref() {
        if let Some(start) = st.start_time {
            let _ = writeln!(t, "Started:     {start}");
        }
        if let Some(done) = st.completion_time {
            let _ = writeln!(t, "Completed:   {done}");
        }
    }
    let _ = writeln!(
        t,
        "Restarts:    {} (preempted {} times)",
        s.restarts, s.preemptions
    );
    if let Some(p) = d.job.status.as_ref().and_then(|st| st.progress.as_ref()) {
        let _ = writeln!(t, "Progress:    {}", progress_text(p, now));
    }
    if let Some(reason) = &d.pending_reason {
        let _ = writeln!(t, "Waiting:     {reason}");
    }
    if let Some(e) = &d.job.spec.elastic {
        // The size the scheduler gave the job now (see docs/elastic.md).
        let now_size = d
            .admission
            .as_ref()
            .map(|a| a.placements.iter().filter(|p| p.role == "worker").count());
        let range = match (e.min_replicas, e.max_replicas) {
            (Some(min), Some(max)) => format!("{min}..{max}"),
            _ => "fixed".to_string(),
        };
        let size = now_size.map_or("not admitted".to_string(), |n| format!("{n} workers"));
        let _ = writeln!(t, "Elastic:     {size} (range {range})");
    }
    if let Some(a) = &d.admission {
        let gpu = a.gpu_type.as_deref().unwrap_or("no GPU");
        let _ = writeln!(
            t,
            "Admitted:    pool {} ({gpu}) at {}",
            a.pool, a.admitted_at
        );
        for p in &a.placements {
            let gpus = if p.gpu_indices.is_empty() {
                String::new()
            } else {
                format!(
                    " GPUs {}",
                    p.gpu_indices
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            let _ = writeln!(t, "  {}-{} on {}{gpus}", p.role, p.index, p.node);
        }
    }
    if let Some(st) = d.job.status.as_ref()
        && !st.conditions.is_empty()
    {
        t.push_str("\nConditions:\n");
        let rows: Vec<Vec<String>> = st
            .conditions
            .iter()
            .map(|c| {
                vec![
                    format!("{:?}", c.type_),
                    format!("{:?}", c.status),
                    c.reason.clone(),
                    age(c.last_transition_time, now),
                    c.message.clone(),
                ]
            })
            .collect();
        t.push_str(&indent(&table(
            &["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
            &rows,
        )));
    }
    if !d.replicas.is_empty() {
        t.push_str("\nReplicas:\n");
        let rows: Vec<Vec<String>> = d
            .replicas
            .iter()
            .map(|r| {
                let exit = match (r.exit_code, &r.reason) {
                    (Some(c), Some(why)) => format!("{c} ({why})"),
                    (Some(c), None) => c.to_string(),
                    (None, Some(why)) => why.clone(),
                    (None, None) => String::new(),
                };
                vec![
                    r.name.clone(),
                    r.phase.clone(),
                    r.pid.map(|p| p.to_string()).unwrap_or_default(),
                    r.port.map(|p| p.to_string()).unwrap_or_default(),
                    r.gpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    r.restarts.to_string(),
                    exit,
                ]
            })
            .collect();
        t.push_str(&indent(&table(
            &["NAME", "PHASE", "PID", "PORT", "GPUS", "RESTARTS", "EXIT"],
            &rows,
        )));
        for r in &d.replicas {
            if let Some(message) = &r.message {
                t.push_str(&format!("  {}: {message}\n", r.name));
            }
        }
    }
    t.push_str("\nEvents:\n");
    if d.events.is_empty() {
        t.push_str("  <none>\n");
    } else {
        let rows: Vec<Vec<String>> = d
            .events
            .iter()
            .map(|e| {
                vec![
                    age(e.time, now),
                    e.type_.as_str().to_string(),
                    e.reason.clone(),
                    e.message.clone(),
                ]
            })
            .collect();
        t.push_str(&indent(&table(
            &["AGE", "TYPE", "REASON", "MESSAGE"],
            &rows,
        )));
    }
    t
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

pub fn queues_table(queues: &[QueueInfo]) -> String {
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            let usage: Vec<String> = q.usage.iter().map(pool_usage).collect();
            vec![
                q.name.clone(),
                q.cohort.clone().unwrap_or_else(|| "-".into()),
                q.weight.to_string(),
                q.pending.to_string(),
                q.admitted.to_string(),
                usage.join("; "),
            ]
        })
        .collect();
    table(
        &["QUEUE", "COHORT", "WEIGHT", "PENDING", "ADMITTED", "USAGE"],
        &rows,
    )
}

/// A queue's usage in one pool, of each resource its quota names or it uses: `h100: 2 of
/// 8 GPUs used`, `cpu: 1.5 of 16 CPUs used, 2.0Gi of 64.0Gi memory used`, `v100: nothing
/// used, no quota`.
fn pool_usage(u: &QueuePoolUsage) -> String {
    let used = u.used;
    let limits = u.nominal.unwrap_or_default();
    let mut parts = Vec::new();
    let gpus = |n: u64| plural(n, "GPU");
    let cpus = |m: u64| {
        if m == 1000 {
            "1 CPU".to_string()
        } else {
            format!("{} CPUs", cpu(m))
        }
    };
    let memory = |b: u64| format!("{} memory", bytes(b));
    let mut each = |used: u64, limit: Option<u64>, unit: &dyn Fn(u64) -> String| match limit {
        Some(l) => parts.push(format!("{} of {} used", number_of(&unit(used)), unit(l))),
        None if used > 0 => parts.push(format!("{} used", unit(used))),
        None => {}
    };
    each(used.gpu, limits.gpu, &gpus);
    each(used.cpu_milli, limits.cpu_milli, &cpus);
    each(used.memory_bytes, limits.memory_bytes, &memory);
    let what = if parts.is_empty() {
        "nothing used".to_string()
    } else {
        parts.join(", ")
    };
    match u.nominal {
        Some(n) if n == QuotaLimits::default() => format!("{}: {what}, unlimited", u.pool),
        Some(_) => format!("{}: {what}", u.pool),
        None => format!("{}: {what}, no quota", u.pool),
    }
}

/// `2` of `2 GPUs`: the number alone, the unit said once (`2 of 8 GPUs`).
fn number_of(amount: &str) -> &str {
    amount.split(' ').next().unwrap_or(amount)
}

/// A value or `-` (absent: not measured here, e.g. no NVML).
fn opt(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

pub fn nodes_text(nodes: &[NodeInfo]) -> String {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let used = n.gpus.iter().filter(|g| g.used_by.is_some()).count();
            vec![
                n.name.clone(),
                n.pool.clone().unwrap_or_else(|| "-".into()),
                n.gpu_type.clone().unwrap_or_else(|| "-".into()),
                format!("{used}/{}", n.gpus.len()),
                format!("{}/{}", cpu(n.cpu_milli_allocated), cpu(n.cpu_milli)),
                format!(
                    "{}/{}",
                    bytes(n.memory_bytes_allocated),
                    bytes(n.memory_bytes)
                ),
            ]
        })
        .collect();
    let mut t = table(
        &["NODE", "POOL", "GPU TYPE", "GPUS USED", "CPU", "MEMORY"],
        &rows,
    );
    let gpu_rows: Vec<Vec<String>> = nodes
        .iter()
        .flat_map(|n| {
            n.gpus.iter().map(move |g| {
                let used = match (g.memory_used_bytes, g.memory_bytes) {
                    (Some(u), Some(t)) => format!("{}/{}", bytes(u), bytes(t)),
                    (None, Some(t)) => bytes(t),
                    _ => "-".into(),
                };
                vec![
                    n.name.clone(),
                    g.index.to_string(),
                    g.name.clone(),
                    used,
                    opt(g.utilization_percent.map(|u| format!("{u}%"))),
                    opt(g.power_watts.map(|w| format!("{w:.0}W"))),
                    opt(g.temperature_celsius.map(|c| format!("{c}C"))),
                    match &g.unhealthy {
                        Some(why) => format!("UNHEALTHY: {why}"),
                        None if g.uuid.is_some() => "ok".into(),
                        None => "-".into(),
                    },
                    g.used_by.clone().unwrap_or_else(|| "free".into()),
                ]
            })
        })
        .collect();
    if !gpu_rows.is_empty() {
        t.push('\n');
        t.push_str(&table(
            &[
                "NODE", "GPU", "NAME", "MEMORY", "UTIL", "POWER", "TEMP", "HEALTH", "USED BY",
            ],
            &gpu_rows,
        ));
    }
    t
}

/// `corral top` rows with CPU use as a percentage of one core between two samples.
pub fn top_table(
    before: &[ReplicaUsageRow],
    after: &[ReplicaUsageRow],
    elapsed: Duration,
) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let rows: Vec<Vec<String>> = after
        .iter()
        .map(|r| {
            let prev = before
                .iter()
                .find(|b| {
                    b.namespace == r.namespace
                        && b.job == r.job
                        && b.replica == r.replica
                        && b.pid == r.pid
                })
                .and_then(|b| b.cpu_seconds);
            // A rate needs both samples of the same process: a replica that started (or
            // restarted) between them shows `-`, not its CPU seconds in another unit.
            let cpu = match (prev, r.cpu_seconds) {
                (Some(a), Some(b)) => format!("{:.0}%", ((b - a).max(0.0) / secs) * 100.0),
                _ => "-".into(),
            };
            vec![
                r.namespace.clone(),
                r.job.clone(),
                r.replica.clone(),
                r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                cpu,
                r.memory_bytes.map(bytes).unwrap_or_else(|| "-".into()),
                if r.gpus.is_empty() {
                    "-".into()
                } else {
                    r.gpus
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
                opt(r.gpu_utilization_percent.map(|u| format!("{u}%"))),
                opt(r.gpu_memory_bytes.map(bytes)),
            ]
        })
        .collect();
    table(
        &[
            "NAMESPACE",
            "JOB",
            "REPLICA",
            "PID",
            "CPU",
            "MEMORY",
            "GPUS",
            "GPU UTIL",
            "GPU MEM",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_core::sched::ResourceAmount;
    use corral_local::cluster::{JobState, QueuePoolUsage, QuotaLimits};

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn jobs() -> Vec<JobSummary> {
        let job = |ns: &str, name: &str, state, ready, total, gpus, restarts, created| JobSummary {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("{name}-0001"),
            framework: "pytorch".into(),
            queue: "team-a".into(),
            state,
            replicas_ready: ready,
            replicas_total: total,
            gpus,
            created: at(created),
            restarts,
            preemptions: 0,
        };
        vec![
            job(
                "vision",
                "resnet",
                JobState::Running,
                4,
                4,
                8,
                2,
                "2026-11-23T10:00:00Z",
            ),
            job(
                "nlp",
                "bert",
                JobState::Queued,
                0,
                1,
                1,
                0,
                "2026-11-23T11:59:30Z",
            ),
        ]
    }

    const NOW: &str = "2026-11-23T12:00:00Z";

    #[test]
    fn jobs_tables() {
        insta::assert_snapshot!("jobs", jobs_table(&jobs(), false, false, at(NOW)));
        insta::assert_snapshot!(
            "jobs_all_namespaces_wide",
            jobs_table(&jobs(), true, true, at(NOW))
        );
        insta::assert_snapshot!("jobs_names", names_text(&jobs()));
    }

    #[test]
    fn queues_table_says_of_what() {
        let usage = |pool: &str, used, nominal: Option<ResourceAmount>| QueuePoolUsage {
            pool: pool.into(),
            used: ResourceAmount {
                gpu: used,
                ..ResourceAmount::ZERO
            },
            nominal: nominal.map(QuotaLimits::from),
            borrowing_limit: None,
        };
        let queues = vec![QueueInfo {
            name: "team-a".into(),
            cohort: Some("research".into()),
            weight: 1,
            pending: 1,
            admitted: 1,
            usage: vec![
                usage("h100", 12, Some(ResourceAmount::gpus(16))),
                usage("a100", 1, Some(ResourceAmount::UNLIMITED)),
                usage("v100", 0, None),
                // A CPU pool: its CPUs and memory, not "0 GPUs used".
                QueuePoolUsage {
                    pool: "cpu".into(),
                    used: ResourceAmount {
                        gpu: 0,
                        cpu_milli: 1500,
                        memory_bytes: 2 << 30,
                    },
                    nominal: Some(QuotaLimits {
                        gpu: None,
                        cpu_milli: Some(16_000),
                        memory_bytes: Some(64 << 30),
                    }),
                    borrowing_limit: None,
                },
            ],
        }];
        insta::assert_snapshot!("queues", queues_table(&queues));
    }

    #[test]
    fn progress_reads_as_a_line() {
        let now = at(NOW);
        let p = corral_api::progress::JobProgress {
            step: 60,
            total_steps: Some(100),
            percent: Some(60.0),
            samples_per_second: Some(125.5),
            eta_seconds: Some(150),
            metrics: [("loss".to_string(), 0.25)].into(),
            updated: at("2026-11-23T11:59:48Z"),
            replica: "resnet-worker-0".into(),
            attempt: 0,
            rate_since_step: 10,
            rate_since: at("2026-11-23T11:58:00Z"),
        };
        assert_eq!(
            progress_text(&p, now),
            "60% (step 60/100, 125.5 samples/s), ETA 2m; loss=0.25 (resnet-worker-0, 12s ago)"
        );
        let open = corral_api::progress::JobProgress {
            step: 7,
            updated: now,
            replica: "w-0".into(),
            rate_since: now,
            ..Default::default()
        };
        assert_eq!(progress_text(&open, now), "(step 7) (w-0, 0s ago)");
    }

    #[test]
    fn ages_have_units() {
        let now = at(NOW);
        assert_eq!(age(at("2026-11-23T11:59:55Z"), now), "5s");
        assert_eq!(age(at("2026-11-23T11:50:00Z"), now), "10m");
        assert_eq!(age(at("2026-11-23T07:00:00Z"), now), "5h");
        assert_eq!(age(at("2026-11-20T12:00:00Z"), now), "3d");
    }
}
