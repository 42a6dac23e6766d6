//! What users look at: jobs, their details and events, queues, this machine's node, the
//! resource use of replicas, log files and metrics. Reads only.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::PathBuf;

use corral_api::TrainingJob;
use corral_core::control::EventType;
use corral_core::control::accounting::{BudgetStanding, UsageInterval};
use corral_core::lifecycle::{Incarnation, ReplicaPhase};

use super::engine::{Cluster, summary, timestamp};
use super::replicas::phase_of;
use super::{
    AdmissionInfo, ClusterError, Event, GpuDevice, JobDetails, JobSummary, MetricsSnapshot,
    NodeInfo, QueueInfo, ReplicaInfo, ReplicaLog, ReplicaUsageRow, SummaryRow,
};
use crate::executor::ProcessState;

impl Cluster {
    /// The job with its recorded status.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<TrainingJob>, ClusterError> {
        Ok(self.store.job(namespace, name)?.map(|j| j.job))
    }

    /// The usage ledger over `[from, to)` (ms since the epoch), of one namespace or all: the
    /// intervals the store recorded (deleted jobs' included) and the admissions held now,
    /// charged until `now`.
    pub fn usage(
        &self,
        namespace: Option<&str>,
        from: u64,
        to: u64,
        now: jiff::Timestamp,
    ) -> Result<Vec<UsageInterval>, ClusterError> {
        let mut all = self.store.usage(namespace, from, to)?;
        all.extend(
            self.plane
                .open_usage(now)
                .into_iter()
                .filter(|i| namespace.is_none_or(|ns| i.namespace() == ns)),
        );
        Ok(all)
    }

    /// Each budgeted queue's standing now: its budget, what its jobs held of it this period
    /// and when the period renews.
    pub fn budget_standings(&self, now: jiff::Timestamp) -> BTreeMap<String, BudgetStanding> {
        self.plane.budget_standings(now)
    }

    /// Jobs of one namespace (or all), ordered by namespace then name.
    /// Reads the cached summaries only: one namespace is one range of them, whatever the
    /// history of the others.
    pub fn list(&self, namespace: Option<&str>) -> Result<Vec<JobSummary>, ClusterError> {
        self.list_rows(namespace)
            .iter()
            .map(|r| r.summary())
            .collect()
    }

    /// [`Cluster::list`] as shared rows with their JSON, not copied: a server joins their
    /// text after it has let go of the cluster.
    pub fn list_rows(&self, namespace: Option<&str>) -> Vec<SummaryRow> {
        match namespace {
            None => self.summaries.iter().cloned().collect(),
            Some(ns) => {
                let (start, end) = SummaryRow::namespace_range(ns);
                self.summaries
                    .range::<[u8], _>((
                        Bound::Included(start.as_slice()),
                        Bound::Excluded(end.as_slice()),
                    ))
                    .cloned()
                    .collect()
            }
        }
    }

    /// Job, conditions, events, replicas and why it waits.
    pub fn describe(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<JobDetails>, ClusterError> {
        let Some(stored) = self.store.job(namespace, name)? else {
            return Ok(None);
        };
        let replicas = self.store.replicas_of(&stored.uid)?;
        let mut infos = Vec::new();
        for r in &replicas {
            let phase = phase_of(r.state);
            let (exit_code, reason) = corral_core::views::exit_of(&phase);
            let message = if r.state.is_terminal() {
                r.record.exit_error()
            } else {
                None
            };
            infos.push(ReplicaInfo {
                name: format!("{}-{}-{}", stored.name, r.role, r.index),
                role: r.role.clone(),
                index: r.index,
                incarnation: format!("{}.{}", r.attempt, r.retry),
                phase: phase_name(phase).to_string(),
                exit_code,
                reason,
                message,
                pid: (r.state == ProcessState::Running).then_some(r.record.pid),
                gpus: r.record.gpu_indices.clone(),
                port: r.port,
                // Every earlier incarnation was a restart of this replica: the gang's
                // (attempt) and its own (retry), as kubectl counts a container's restarts.
                restarts: r.attempt + r.retry,
                started: Some(timestamp(r.started_ms)),
                log_path: Some(r.record.log_path()),
            });
        }
        let admission = self
            .store
            .admissions()?
            .into_iter()
            .find(|(uid, _)| *uid == stored.uid)
            .map(|(_, a)| AdmissionInfo {
                pool: a.pool,
                gpu_type: a.gpu_type,
                admitted_at: timestamp(a.running.admitted_at),
                placements: a.running.placements,
            });
        let events = self
            .store
            .events(namespace, name)?
            .into_iter()
            .map(event_of)
            .collect();
        Ok(Some(JobDetails {
            summary: summary(&stored),
            pending_reason: self.plane.pending_reason(&stored.key()),
            job: stored.job,
            admission,
            replicas: infos,
            events,
        }))
    }

    /// Why each of `rows`' jobs waits, where the scheduler says it does (as `describe`'s
    /// `pending_reason`), by the row's position: what a watcher pushes beside the rows.
    pub fn pending_reasons(&self, rows: &[SummaryRow]) -> Vec<Option<String>> {
        let mut key = String::new();
        rows.iter()
            .map(|r| {
                key.clear();
                key.push_str(r.namespace());
                key.push('/');
                key.push_str(r.name());
                self.plane.pending_reason(&key)
            })
            .collect()
    }

    /// The id of the newest event, where a watcher starts.
    pub fn last_event_id(&self) -> Result<i64, ClusterError> {
        Ok(self.store.last_event_id()?)
    }

    /// Events after the one with id `after` (of `namespace`, or of all), oldest first, at
    /// most `limit`, each with its id.
    pub fn events_after(
        &self,
        after: i64,
        namespace: Option<&str>,
        limit: u32,
    ) -> Result<Vec<(i64, Event)>, ClusterError> {
        Ok(self
            .store
            .events_after(after, namespace, limit)?
            .into_iter()
            .map(|(id, e)| (id, event_of(e)))
            .collect())
    }

    /// Queues with their usage per pool and job counts (the plane's view).
    pub fn queues(&self) -> Vec<QueueInfo> {
        self.plane.queue_infos(&self.queues)
    }

    /// This machine, as the scheduler sees it.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let mut used_by: BTreeMap<u32, String> = BTreeMap::new();
        let (mut cpu, mut mem) = (0u64, 0u64);
        for (key, held) in self.plane.admissions() {
            let spec = self.plane.job(key).map(|j| &j.spec);
            for p in &held.admission.placements {
                for g in &p.gpu_indices {
                    used_by.insert(*g, key.to_string());
                }
                let resources = spec
                    .and_then(|s| s.replicas.iter().find(|(r, _)| r.as_str() == p.role))
                    .map(|(_, r)| &r.resources);
                if let Some(r) = resources {
                    let c = r.cpu.as_ref().and_then(|q| q.milli().ok()).unwrap_or(0);
                    let m = r.memory.as_ref().and_then(|q| q.units().ok()).unwrap_or(0);
                    cpu = cpu.saturating_add(u64::try_from(c).unwrap_or(u64::MAX));
                    mem = mem.saturating_add(u64::try_from(m).unwrap_or(u64::MAX));
                }
            }
        }
        let samples = if self.node.gpus > 0 {
            crate::gpu::samples()
        } else {
            Vec::new()
        };
        let gpus = (0..self.node.gpus)
            .map(|i| {
                let device = self.inventory.gpus.iter().find(|d| d.index == i);
                let sample = samples.iter().find(|s| s.index == i);
                GpuDevice {
                    index: i,
                    name: device
                        .map(|d| d.name.clone())
                        .or_else(|| self.node.gpu_type.clone())
                        .unwrap_or_default(),
                    memory_bytes: device.map(|d| d.memory_bytes),
                    used_by: used_by.get(&i).cloned(),
                    uuid: sample.map(|s| s.uuid.clone()),
                    utilization_percent: sample.and_then(|s| s.utilization_percent),
                    memory_used_bytes: sample.map(|s| s.memory_used_bytes),
                    power_watts: sample.and_then(|s| s.power_watts),
                    temperature_celsius: sample.and_then(|s| s.temperature_celsius),
                    unhealthy: sample.and_then(crate::gpu::unhealthy_reason),
                }
            })
            .collect();
        let pool = self
            .pools
            .iter()
            .find(|p| p.gpu_type.is_none() || p.gpu_type == self.node.gpu_type)
            .map(|p| p.name.clone())
            .or_else(|| {
                self.pools
                    .is_empty()
                    .then(|| self.node.gpu_type.clone().unwrap_or_else(|| "cpu".into()))
            });
        vec![NodeInfo {
            name: self.node.name.clone(),
            pool,
            gpu_type: self.node.gpu_type.clone(),
            gpus,
            cpu_milli: self.node.cpu_milli,
            memory_bytes: self.node.memory_bytes,
            cpu_milli_allocated: cpu,
            memory_bytes_allocated: mem,
            extended: self.node.extended.clone(),
        }]
    }

    /// Resource use of every running replica.
    pub fn top(&self) -> Vec<ReplicaUsageRow> {
        let replicas = self.store.running_replicas().unwrap_or_default();
        replicas
            .iter()
            .map(|r| {
                let usage = self.executor.usage(&r.name);
                ReplicaUsageRow {
                    namespace: r.namespace.clone(),
                    job: r.job.clone(),
                    replica: format!("{}-{}-{}", r.job, r.role, r.index),
                    pid: Some(r.record.pid),
                    cpu_seconds: usage.as_ref().map(|u| u.cpu_seconds),
                    memory_bytes: usage.as_ref().map(|u| u.memory_bytes),
                    gpus: r.record.gpu_indices.clone(),
                    gpu_utilization_percent: usage.as_ref().and_then(|u| {
                        let utils: Vec<u32> = u
                            .gpus
                            .iter()
                            .filter_map(|g| g.utilization_percent)
                            .collect();
                        (!utils.is_empty()).then(|| utils.iter().sum::<u32>() / utils.len() as u32)
                    }),
                    gpu_memory_bytes: usage.as_ref().and_then(|u| u.gpu_memory_bytes),
                }
            })
            .collect()
    }

    /// The log file of a replica (`<job>-<role>-<index>`, or `<role>-<index>`), of its
    /// latest incarnation; kept after the job finishes or is deleted.
    pub fn log_path(&self, namespace: &str, job: &str, replica: &str) -> Option<PathBuf> {
        self.replica_logs(namespace, job, replica)
            .pop()
            .map(|l| l.path)
    }

    /// Every incarnation's log of a replica (`<job>-<role>-<index>`, or `<role>-<index>`),
    /// oldest first: read from the replica directories, because the store drops the records
    /// of earlier incarnations on a restart while their files stay. Only the incarnations of
    /// the job of this name that exists now (or, once deleted, of the last one that ran).
    pub fn replica_logs(&self, namespace: &str, job: &str, replica: &str) -> Vec<ReplicaLog> {
        let short = replica
            .strip_prefix(job)
            .and_then(|r| r.strip_prefix('-'))
            .unwrap_or(replica);
        let name = format!("{namespace}.{job}-{short}");
        let dir = self.executor.replica_dir(&name, "x");
        let Some(Ok(entries)) = dir.parent().map(std::fs::read_dir) else {
            return Vec::new();
        };
        // Directory names are `<first 8 of the job's uid>-<attempt>.<retry>`.
        let mut found: Vec<(String, Incarnation, ReplicaLog)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let file_name = e.file_name().to_string_lossy().into_owned();
                let (uid, inc) = file_name.rsplit_once('-')?;
                let inc: Incarnation = inc.parse().ok()?;
                let path = e.path().join("output.log");
                let started = std::fs::metadata(e.path().join("launch.json"))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| jiff::Timestamp::try_from(t).ok());
                Some((
                    uid.to_string(),
                    inc,
                    ReplicaLog {
                        incarnation: inc.to_string(),
                        started,
                        path,
                    },
                ))
            })
            .collect();
        let current_uid = match self.store.job(namespace, job) {
            Ok(Some(stored)) => Some(stored.uid.chars().take(8).collect::<String>()),
            _ => found
                .iter()
                .max_by_key(|(_, _, l)| l.started)
                .map(|(uid, _, _)| uid.clone()),
        };
        found.retain(|(uid, _, _)| Some(uid) == current_uid.as_ref());
        found.sort_by_key(|(_, inc, _)| (inc.attempt, inc.retry));
        found.into_iter().map(|(_, _, l)| l).collect()
    }

    /// Gauges and counters for `/metrics`.
    pub fn metrics(&self) -> MetricsSnapshot {
        let mut m = MetricsSnapshot {
            jobs_submitted_total: self.counters.jobs_submitted,
            admissions_total: self.counters.admissions,
            preemptions_total: self.counters.preemptions,
            replica_starts_total: self.counters.replica_starts,
            restarts_total: self.counters.restarts,
            jobs_succeeded_total: self.counters.succeeded,
            jobs_failed_total: self.counters.failed,
            ticks_total: self.counters.ticks,
            last_cycle_seconds: self.counters.last_cycle_seconds,
            last_tick_seconds: self.counters.last_tick_seconds,
            gpus_total: u64::from(self.node.gpus),
            hostname: self.node.name.clone(),
            gpu_samples: if self.node.gpus > 0 {
                crate::gpu::samples()
            } else {
                Vec::new()
            },
            ..MetricsSnapshot::default()
        };
        for j in &self.summaries {
            *m.jobs
                .entry(j.queue().to_string())
                .or_default()
                .entry(j.state().as_str().to_string())
                .or_default() += 1;
        }
        for (key, held) in self.plane.admissions() {
            let gpus: u64 = held
                .admission
                .placements
                .iter()
                .map(|p| p.gpu_indices.len() as u64)
                .sum();
            m.gpus_allocated += gpus;
            let queue = self
                .plane
                .job(key)
                .map_or(corral_api::DEFAULT_QUEUE, |j| j.spec.queue_name());
            *m.queue_gpus_used.entry(queue.to_string()).or_default() += gpus;
        }
        m.running_replicas = self
            .store
            .replicas()
            .unwrap_or_default()
            .iter()
            .filter(|r| r.state == ProcessState::Running)
            .count() as u64;
        m
    }
}

fn phase_name(p: ReplicaPhase) -> &'static str {
    corral_core::views::phase_name(&p)
}

pub(super) fn event_of(e: crate::store::StoredEvent) -> Event {
    Event {
        time: timestamp(e.time_ms),
        namespace: e.namespace,
        job: e.job,
        type_: if e.type_ == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason,
        message: e.message,
    }
}
