//! [`Cluster`]: the owner of the store, the executor and the control plane, and the control
//! loop's pass ([`Cluster::tick`]). The other parts of the shell are in the sibling modules:
//! `recovery` (open after a crash), `commands` (submit, delete, suspend, resume), `act`
//! (persist a step, then start and stop replicas), `views` (list, describe, queues, nodes,
//! top, metrics), `node` (this machine as a node, from the inventory and `corral.yaml`) and
//! `replicas` (a replica's names, and what the plane sees of it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::time::Instant;

use corral_core::control::{ControlPlane, Room, Settling};
use corral_core::lifecycle;
use corral_core::sched::{Millis, Node, NodePoolConfig, QueueConfig};
use jiff::Timestamp;

use super::replicas::{observed, start_failure};
use super::{ClusterConfig, ClusterError, JobState, JobSummary, SummaryRow, TickReport};
use crate::executor::{LocalExecutor, ProcessState};
use crate::inventory::NodeInventory;
use crate::store::{Store, StoreError, StoredJob};

impl From<StoreError> for ClusterError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::AlreadyExists { namespace, name } => {
                ClusterError::AlreadyExists { namespace, name }
            }
            other => ClusterError::Store(other.to_string()),
        }
    }
}

impl Cluster {
    /// The code snapshots of this data directory.
    pub fn code_store(&self) -> crate::code::CodeStore {
        crate::code::CodeStore::new(&self.config.data_dir)
    }
}

pub(super) fn millis(t: Timestamp) -> Millis {
    u64::try_from(t.as_millisecond()).unwrap_or(0)
}

pub(super) fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(super) fn new_uid(namespace: &str, name: &str, now: Timestamp, n: u64) -> String {
    let mut a = std::collections::hash_map::RandomState::new().build_hasher();
    a.write(namespace.as_bytes());
    a.write(name.as_bytes());
    a.write_i128(now.as_nanosecond());
    a.write_u64(n);
    let mut b = std::collections::hash_map::RandomState::new().build_hasher();
    b.write_u64(a.finish());
    b.write_u64(std::process::id().into());
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

pub(super) fn state_of(stored: &StoredJob) -> JobState {
    if stored.deleting {
        return JobState::Deleting;
    }
    lifecycle::job_state(&stored.job.spec, stored.job.status.as_ref())
}

/// A job as `list` shows it, from its stored record alone (the core's rule).
pub(super) fn summary(j: &StoredJob) -> JobSummary {
    JobSummary {
        namespace: j.namespace.clone(),
        name: j.name.clone(),
        ..JobSummary::of(&j.job, &j.uid, timestamp(j.submitted_ms), j.deleting)
    }
}

/// A job's `list` row, as the cache keeps it.
pub(super) fn summary_row(j: &StoredJob) -> SummaryRow {
    SummaryRow::new(&summary(j))
}

/// Counters kept in memory (reset when the process restarts, as Prometheus expects).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) jobs_submitted: u64,
    pub(super) admissions: u64,
    pub(super) preemptions: u64,
    pub(super) replica_starts: u64,
    pub(super) restarts: u64,
    pub(super) succeeded: u64,
    pub(super) failed: u64,
    pub(super) ticks: u64,
    pub(super) last_cycle_seconds: f64,
    pub(super) last_tick_seconds: f64,
}

/// The embedded cluster. See the module docs.
pub struct Cluster {
    pub(super) config: ClusterConfig,
    pub(super) store: Store,
    /// Which uid each namespace's replicas run under (see [`crate::tenancy`]).
    pub(super) tenancy: crate::tenancy::Tenancy,
    pub(super) executor: LocalExecutor,
    /// Every decision about jobs: admission, lifecycle, reasons, events.
    pub(super) plane: ControlPlane,
    /// The plane's check at submit, made before the cluster's lock ([`Cluster::submit_context`]).
    pub(super) submit_check: std::sync::Arc<corral_core::control::SubmitCheck>,
    pub(super) inventory: NodeInventory,
    pub(super) node: Node,
    /// The node's GPUs NVML reports unhealthy, as last read (see `read_gpu_health`).
    pub(super) unhealthy_gpus: BTreeSet<u32>,
    pub(super) gpu_health_read: Instant,
    /// The progress files as last read (see `read_progress`).
    pub(super) progress: super::progress::ProgressFiles,
    pub(super) pools: Vec<NodePoolConfig>,
    /// Declared queues and the implicit `default` one (the control plane's rule).
    pub(super) queues: Vec<QueueConfig>,
    /// Stops already sent, by (process name, incarnation label).
    /// With the grace period sent: a shorter one (a checkpoint saved meanwhile) is sent again.
    pub(super) stopping: BTreeMap<(String, String), std::time::Duration>,
    /// Jobs that gave their admission back while replicas may still run: their ports are
    /// released once none runs (a port is never given to two replicas at once).
    /// uid -> key.
    pub(super) ports_to_release: BTreeMap<String, String>,
    /// Every stored job as the views show it, by (namespace, name), finished ones too: a
    /// namespace's jobs are one range, whatever the history of the others.
    pub(super) summaries: BTreeSet<SummaryRow>,
    /// Where a retired job's row is packed (see [`corral_core::packed`]).
    pub(super) retired_rows: corral_core::packed::Packer,
    /// The whole stored record of every job the control plane holds (not retired), by
    /// key; kept in step with the store by each write. A finished job leaves it when the
    /// plane retires it, so that memory and the hot paths do not grow with history.
    pub(super) live: HashMap<String, StoredJob>,
    pub(super) counters: Counters,
    pub(super) uid_counter: u64,
    /// Closed from a gang's start until the end of the pass that records it Running (see
    /// [`StartGate`](crate::executor::StartGate)).
    pub(super) start_gate: Option<crate::executor::StartGate>,
    /// Signs the tokens MPI launchers exec into their workers with.
    pub(super) exec_key: crate::exec::ExecKey,
    /// See [`ClusterConfig::exec_agent`](super::ClusterConfig::exec_agent).
    pub(super) exec_agent: Option<String>,
    /// The API's URL (`http://host:port`), once the server listens: given to MPI
    /// launchers, whose agent calls it.
    pub(super) api_url: Option<String>,
    /// The SHA-256 fingerprint of the API's certificate when it serves HTTPS: MPI
    /// launchers pin it (`CORRAL_FINGERPRINT`) to reach the API.
    pub(super) api_fingerprint: Option<String>,
    /// Served models and their autoscalers (see `serving`).
    pub(super) served: super::serving::ServedModels,
    /// When the pipeline artifacts were last collected (`artifact_gc.rs`).
    pub(super) artifacts_collected: Option<Timestamp>,
}

/// How often the GPUs' health is read while the cluster runs.
const GPU_HEALTH_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

impl Cluster {
    /// The configuration the cluster was opened with (tokens, ports, declared objects).
    /// Which identities this cluster's replicas run under.
    pub fn tenancy(&self) -> &crate::tenancy::Tenancy {
        &self.tenancy
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Records the API address with the data directory's lock, for the message that a
    /// second `corral up` on the same directory gets.
    pub fn announce_address(&mut self, addr: &str) -> Result<(), ClusterError> {
        self.api_url = Some(format!("http://{addr}"));
        Ok(self.store.announce_address(addr)?)
    }

    /// The API serves HTTPS with the certificate of this fingerprint: what MPI launchers
    /// are given to reach it (after [`Cluster::announce_address`]).
    pub fn announce_https(&mut self, fingerprint: &str) {
        if let Some(url) = &self.api_url {
            self.api_url = Some(url.replacen("http://", "https://", 1));
        }
        self.api_fingerprint = Some(fingerprint.to_string());
    }

    /// Re-reads a job's row into the cache after a write to it.
    pub(super) fn refresh_job(&mut self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        if let Some(j) = self.store.job(namespace, name)? {
            self.cache(j);
        }
        Ok(())
    }

    /// Puts a job's row (as stored) into the cache: its summary, and the whole record
    /// while the plane holds the job.
    pub(super) fn cache(&mut self, j: StoredJob) {
        let key = j.key();
        if self.plane.is_retired(&key) {
            self.summaries
                .replace(summary_row(&j).packed(&mut self.retired_rows));
            self.live.remove(&key);
        } else {
            self.summaries.replace(summary_row(&j));
            self.live.insert(key, j);
        }
    }

    /// Updates the cached summary of a live job after a change made to it in place.
    pub(super) fn resummarize(&mut self, key: &str) {
        if let Some(j) = self.live.get(key) {
            self.summaries.replace(summary_row(j));
        }
    }

    /// Moves a retired job's row into the block of retired rows: what it keeps for good
    /// holds no allocation of its own.
    pub(super) fn pack_row(&mut self, key: &str) {
        let Some((namespace, name)) = key.split_once('/') else {
            return;
        };
        let packed = self
            .summaries
            .get(SummaryRow::key_of(namespace, name).as_slice())
            .map(|row| row.packed(&mut self.retired_rows));
        if let Some(row) = packed {
            self.summaries.replace(row);
        }
    }

    /// Drops a job removed from the store from the cache.
    pub(super) fn forget_job(&mut self, key: &str) {
        self.live.remove(key);
        if let Some((namespace, name)) = key.split_once('/') {
            self.summaries
                .remove(SummaryRow::key_of(namespace, name).as_slice());
        }
    }

    /// The cached row of a job the plane holds, by key (`namespace/name`).
    pub(super) fn stored(&self, key: &str) -> Option<&StoredJob> {
        self.live.get(key)
    }

    /// The uid of any stored job, retired ones included, by key.
    pub(super) fn uid_of(&self, key: &str) -> Option<&str> {
        let (namespace, name) = key.split_once('/')?;
        self.summaries
            .get(SummaryRow::key_of(namespace, name).as_slice())
            .map(SummaryRow::uid)
    }

    /// One pass of the control loop: observe what the executor saw, step the control plane,
    /// persist what it decided, then start and stop replicas; replicas just started are
    /// observed at once and the plane settles again, so a gang shows Running in this pass.
    pub fn tick(&mut self, now: Timestamp) -> Result<TickReport, ClusterError> {
        let started = Instant::now();
        let mut report = TickReport::default();
        let decided = self.decide_and_act(now, &mut report);
        // The gangs started in this pass are recorded Running (or it failed): their shims
        // go on with their setup.
        self.start_gate = None;
        decided?;
        // Pipelines after the plane's step: a step that just ended is seen in this pass, and
        // the jobs of the steps it starts are admitted and started in this pass too (one
        // step of the plane more), not a pass later.
        if self.advance_pipelines(now, &mut report) > 0 {
            let decided = self.decide_and_act(now, &mut report);
            self.start_gate = None;
            decided?;
        }
        self.release_idle_ports()?;
        self.collect_artifacts(now, &mut report);
        // After the starts: removing ended replicas' cgroups is not on the way from one
        // job's exit to the next one's start.
        self.executor.remove_retired_cgroups();
        self.counters.ticks += 1;
        self.counters.last_tick_seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// The pass up to its housekeeping: observe, step the plane, act, settle.
    fn decide_and_act(
        &mut self,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), ClusterError> {
        let started = Instant::now();
        self.observe()?;
        self.read_gpu_health(report);
        self.read_progress();
        self.plane.observe_room(self.room());
        let step = self.plane.step(now);
        self.counters.last_cycle_seconds = started.elapsed().as_secs_f64();
        // Starts and removed records are observations too: settle by the plane's rule.
        let mut settling = Settling::default();
        let mut asked = !step.is_empty();
        let mut acted = self.apply(step, now, report)?;
        while settling.again(asked, acted) {
            let step = self.plane.settle(now);
            asked = !step.is_empty();
            acted = self.apply(step, now, report)?;
        }
        Ok(())
    }

    /// This node's room: its GPUs less the unhealthy ones and those any replica still holds
    /// (a preempted job's replicas hold theirs until they have exited).
    fn room(&self) -> BTreeMap<String, Room> {
        let in_use = self.executor.gpus_in_use();
        let free = (0..self.node.gpus)
            .filter(|g| !self.unhealthy_gpus.contains(g) && !in_use.contains(g))
            .collect();
        BTreeMap::from([(self.node.name.clone(), Room::gpus_only(free))])
    }

    /// Reads the GPUs' health again (NVML, every few seconds) and tells the plane when it
    /// changed: a GPU that fails while the server runs gets no new replica, and one that
    /// recovers is offered again.
    fn read_gpu_health(&mut self, report: &mut TickReport) {
        if self.node.gpus == 0 || self.gpu_health_read.elapsed() < GPU_HEALTH_PERIOD {
            return;
        }
        self.gpu_health_read = Instant::now();
        let samples = crate::gpu::samples();
        let now: BTreeSet<u32> = samples
            .iter()
            .filter(|s| s.index < self.node.gpus)
            .filter_map(|s| crate::gpu::unhealthy_reason(s).map(|why| (s.index, why)))
            .map(|(i, why)| {
                if !self.unhealthy_gpus.contains(&i) {
                    report.errors.push(format!(
                        "GPU {i} is unhealthy ({why}): it gets no new replicas"
                    ));
                }
                i
            })
            .collect();
        // No samples: no NVML here (or it failed this time); what was last known stands.
        if !samples.is_empty() {
            self.observe_unhealthy_gpus(now);
        }
    }

    /// The node's GPUs that are unhealthy now, as NVML reports them (read every few
    /// seconds where NVML is present) or as another health source says: they get no new
    /// replica until they heal, a job running on one keeps it. The control plane decides
    /// what waits and why.
    pub fn observe_unhealthy_gpus(&mut self, gpus: BTreeSet<u32>) {
        if gpus != self.unhealthy_gpus {
            let list: Vec<u32> = gpus.iter().copied().collect();
            self.plane.observe_unhealthy_gpus(&self.node.name, &list);
            self.unhealthy_gpus = gpus;
        }
    }

    /// What the executor saw change since the last pass, into the store and the plane.
    fn observe(&mut self) -> Result<(), ClusterError> {
        let changes = self.executor.poll(Instant::now());
        if changes.is_empty() {
            return Ok(());
        }
        // Every state seen in this pass: one transaction.
        self.store.begin_batch()?;
        let recorded = self.record_observations(changes);
        self.store.commit_batch()?;
        recorded
    }

    fn record_observations(
        &mut self,
        changes: Vec<(String, ProcessState)>,
    ) -> Result<(), ClusterError> {
        for (name, state) in changes {
            let Some(current) = self.executor.record(&name).map(|r| r.incarnation.clone()) else {
                continue;
            };
            if let Some(r) = self
                .store
                .replicas_named(&name)?
                .into_iter()
                .find(|r| r.record.incarnation == current)
            {
                self.store
                    .set_replica_state(&r.name, r.attempt, r.retry, state)?;
                let key = format!("{}/{}", r.namespace, r.job);
                if let Some(failure) = start_failure(&r, state) {
                    // The words of the shim or the runtime go with it.
                    self.plane.start_failed(&key, failure);
                } else if let Some(observed) = observed(&r, state) {
                    self.plane.observe(&key, observed);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Cluster>();
    }
}
