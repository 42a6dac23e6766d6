//! Opening the cluster, after a clean stop or a crash: re-adopt the replica processes that
//! survived, kill the ones nobody recorded, and rebuild the control plane from the stored
//! jobs, admissions and replica records. Whatever the plane drops (an admission this machine
//! can no longer hold) is persisted like any other step.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use corral_api::training_job::Role;
use corral_core::control::{ControlPlane, HeldAdmission, JobRecord, RestoredJob, SubmitCheck};
use corral_core::lifecycle::{self, Incarnation, ObservedReplica, ReplicaId};
use corral_core::sched::{Admission, ClusterSnapshot};
use jiff::Timestamp;

use super::engine::{Cluster, Counters};
use super::replicas::{observed, start_failure};
use super::{ClusterConfig, ClusterError, TickReport};
use crate::executor::{
    ExecutorConfig, LocalExecutor, ProcessRecord, ProcessState, ShimCommand, discover, procfs,
};
use crate::inventory::inventory;
use crate::store::{Store, StoredJob, StoredReplica};

impl Cluster {
    /// Opens (or creates) the cluster in `config.data_dir`: the store, the executor and the
    /// control plane. Recovers from a previous run: every recorded replica is re-adopted
    /// (same pid and start time) or observed as ended or gone, the control plane is rebuilt
    /// from the stored jobs and admissions. Returns warnings (no NVML, no cgroups, ...).
    pub fn open(
        config: ClusterConfig,
        now: Timestamp,
    ) -> Result<(Cluster, Vec<String>), ClusterError> {
        open(config, now)
    }
}

fn open(config: ClusterConfig, now: Timestamp) -> Result<(Cluster, Vec<String>), ClusterError> {
    let isolated = matches!(
        crate::tenancy::isolation_here(&config.file.settings),
        corral_core::tenancy::Isolation::PerNamespace(_)
    );
    // The directories' modes before the store makes its files in them, the files' after.
    let mode_notes = crate::tenancy::prepare_data_dir(&config.data_dir, isolated)
        .map_err(ClusterError::Config)?;
    let mut store = Store::open(&config.data_dir)?;
    // What the store just made is tightened without a word: only what was looser before
    // (the call above) is news.
    crate::tenancy::protect_data_dir(&config.data_dir, isolated).map_err(ClusterError::Config)?;
    let tenancy = crate::tenancy::Tenancy::open(&config.file.settings, &store)
        .map_err(|e| ClusterError::Config(e.to_string()))?;
    let shim = match &config.shim {
        Some(shim) => shim.clone(),
        None => ShimCommand::current_exe()
            .map_err(|e| ClusterError::Executor(format!("finding the shim: {e}")))?,
    };
    let mut exec_config = ExecutorConfig::new(config.data_dir.join("replicas"), shim);
    exec_config.cgroup = config.cgroup;
    exec_config.cgroup_root = config.file.settings.cgroup_root.clone();
    exec_config.pass_env = config.file.settings.pass_env.clone();
    exec_config.standby_shims = STANDBY_SHIMS;
    let containers = &config.file.settings.containers;
    let (runtime, container_notes) =
        crate::executor::container::detect(&crate::executor::container::RuntimeChoice {
            runtime: containers.runtime.clone(),
            oci_runtime: containers.oci_runtime.clone(),
            without_runtime: containers.without_runtime,
        })
        .map_err(ClusterError::Executor)?;
    exec_config.containers = runtime;
    exec_config.python =
        crate::executor::python::find_uv().map(|uv| (uv, config.data_dir.join("python")));
    let range = config.file.settings.ports;
    exec_config.port_range = range.min..range.max.saturating_add(1).max(range.min);
    let (mut executor, mut warnings) =
        LocalExecutor::new(exec_config).map_err(|e| ClusterError::Executor(e.to_string()))?;
    warnings.extend(mode_notes);
    warnings.extend(container_notes);
    let inventory = inventory();
    for (index, why) in &inventory.unhealthy_gpus {
        warnings.push(format!(
            "GPU {index} is unhealthy ({why}): it is not offered for new replicas"
        ));
    }
    let (node, pools, queues) = super::node::build_cluster(&config.file, &inventory)?;
    // A declared pool that takes no node admits nothing, ever: say so now.
    warnings.extend(corral_core::sched::pools_without_nodes(
        &pools,
        std::slice::from_ref(&node),
    ));

    // Jobs finished for good, with nothing running and no admission, are handed to the
    // plane by name and kept as summaries; only the others are decoded into the plane, so
    // opening a long history costs little memory (the rows are read one at a time).
    let admitted: HashSet<String> = store.admissions()?.into_iter().map(|(u, _)| u).collect();
    let running: HashSet<String> = store
        .running_replicas()?
        .into_iter()
        .map(|r| r.job_uid)
        .collect();
    let mut jobs: Vec<StoredJob> = Vec::new();
    // Summaries of the retired ones are made as their rows are read, so that no more than
    // one of them is decoded at a time.
    let mut retired_rows = corral_core::packed::Packer::default();
    let mut retired: Vec<super::SummaryRow> = Vec::new();
    let mut all_uids: HashSet<String> = HashSet::new();
    store.for_each_job(|j| {
        all_uids.insert(j.uid.clone());
        let by_name = corral_core::control::restorable_by_name(
            &j.job,
            j.deleting,
            admitted.contains(&j.uid),
            running.contains(&j.uid),
        );
        if by_name {
            retired.push(super::engine::summary_row(&j).packed(&mut retired_rows));
        } else {
            jobs.push(j);
        }
        Ok(())
    })?;
    // A pipeline run keeps a snapshot for the jobs of its steps.
    for run in store.runs(None)? {
        all_uids.insert(run.uid);
    }
    // A stored pipeline keeps one per kept version for the runs made from it later.
    all_uids.extend(
        store
            .pipeline_versions(None, None)?
            .into_iter()
            .filter_map(|p| p.metadata.uid),
    );
    let retired_uids: HashSet<&str> = retired.iter().map(super::SummaryRow::uid).collect();
    // Uploads of requests that never ended, and snapshots of jobs that were never stored.
    // A served model's snapshots are kept by its name and revision (see `revisions`).
    for m in store.served_models()? {
        let ns = m.metadata.namespace_or_default();
        all_uids.insert(super::serving::code_id(ns, &m.metadata.name));
        for r in store.served_revisions(ns, &m.metadata.name)? {
            all_uids.insert(super::revisions::revision_code_id(
                ns,
                &m.metadata.name,
                r.number,
            ));
        }
    }
    warnings.extend(crate::code::CodeStore::new(&config.data_dir).sweep(&all_uids));
    let replicas = adopt_replicas(
        &mut store,
        &mut executor,
        &jobs,
        &all_uids,
        &retired_uids,
        &mut warnings,
    )?;
    let key_of: HashMap<&str, String> = jobs.iter().map(|j| (j.uid.as_str(), j.key())).collect();
    for name in executor.sweep_containers() {
        warnings.push(format!(
            "removed container {name}, which no running replica owns"
        ));
    }
    let admissions: BTreeMap<String, HeldAdmission> = store
        .admissions()?
        .into_iter()
        .filter_map(|(uid, a)| {
            let key = key_of.get(uid.as_str())?.clone();
            Some((
                uid,
                HeldAdmission {
                    admission: Admission {
                        job: key,
                        pool: a.pool,
                        gpu_type: a.gpu_type,
                        placements: a.running.placements,
                    },
                    admitted_at: a.running.admitted_at,
                },
            ))
        })
        .collect();
    // Admissions of jobs that are gone.
    for (uid, _) in store.admissions()? {
        if !all_uids.contains(&uid) {
            store.release(&uid)?;
        }
    }
    // Ports of admitted jobs (and of jobs whose replicas still stop).
    for (port, uid, _) in store.ports()? {
        let conflicts = executor.ports_mut().reserve(&uid, &[port]);
        if !conflicts.is_empty() {
            warnings.push(format!("port {port} is recorded twice"));
        }
    }
    let mut by_uid: HashMap<&str, Vec<ObservedReplica>> = HashMap::new();
    for r in &replicas {
        if let Some(o) = observed(r, r.state) {
            by_uid.entry(r.job_uid.as_str()).or_default().push(o);
        }
    }
    let restored = jobs
        .iter()
        .map(|j| RestoredJob {
            record: JobRecord {
                job: j.job.clone(),
                uid: j.uid.clone(),
                submitted: j.submitted_ms,
                hints: Default::default(),
            },
            admission: admissions.get(&j.uid).cloned(),
            replicas: by_uid.remove(j.uid.as_str()).unwrap_or_default(),
            deleting: j.deleting,
            service: None,
        })
        .collect();
    let snapshot = ClusterSnapshot {
        nodes: vec![node.clone()],
        pools: pools.clone(),
        queues: queues.clone(),
        running: Vec::new(),
    };
    let control = super::node::control_config(&config.file, &node);
    let control_budgets_empty = control.budgets.is_empty();
    let submit_check = SubmitCheck::new(&snapshot, &control)
        .map_err(|e| ClusterError::Scheduler(e.to_string()))?;
    let (mut plane, step) = ControlPlane::restore(snapshot, control, restored, now)
        .map_err(|e| ClusterError::Scheduler(e.to_string()))?;
    // After the restore: a job running on a GPU that turned unhealthy keeps its admission.
    let unhealthy: BTreeSet<u32> = super::node::unhealthy_gpus(&inventory, node.gpus)
        .into_iter()
        .collect();
    let unhealthy_list: Vec<u32> = unhealthy.iter().copied().collect();
    plane.observe_unhealthy_gpus(&node.name, &unhealthy_list);
    // Starts that could not be made, with the words the shim or the runtime left.
    for r in &replicas {
        if let Some(failure) = start_failure(r, r.state) {
            plane.start_failed(&format!("{}/{}", r.namespace, r.job), failure);
        }
    }
    // What budgeted queues held this month, closed before the restart (open intervals came
    // back with their admissions).
    if !control_budgets_empty {
        let now_ms = u64::try_from(now.as_millisecond()).unwrap_or(0);
        let month = 32 * 86_400_000;
        plane.restore_usage(store.usage(None, now_ms.saturating_sub(month), u64::MAX)?);
    }
    plane.restore_retired(
        retired
            .iter()
            .map(|row| format!("{}/{}", row.namespace(), row.name())),
    );
    let exec_key = crate::exec::ExecKey::load_or_create(&config.data_dir).map_err(|e| {
        ClusterError::Config(format!(
            "the exec key in {}: {e}",
            config.data_dir.display()
        ))
    })?;
    let exec_agent = config.exec_agent.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .map(|exe| format!("{} rsh", exe.display()))
    });
    let mut cluster = Cluster {
        config,
        store,
        tenancy,
        executor,
        plane,
        submit_check: std::sync::Arc::new(submit_check),
        inventory,
        node,
        unhealthy_gpus: unhealthy,
        gpu_health_read: Instant::now(),
        progress: Default::default(),
        pools,
        queues,
        stopping: BTreeMap::new(),
        ports_to_release: BTreeMap::new(),
        summaries: BTreeSet::new(),
        retired_rows,
        live: HashMap::new(),
        counters: Counters::default(),
        uid_counter: 0,
        start_gate: None,
        exec_key,
        exec_agent,
        api_url: None,
        api_fingerprint: None,
        served: Default::default(),
        artifacts_collected: None,
    };
    for j in jobs {
        cluster.cache(j);
    }
    for m in cluster.store.served_models()? {
        let ns = m.metadata.namespace_or_default().to_string();
        let key = format!("{ns}/{}", m.metadata.name);
        let revisions = cluster.store.served_revisions(&ns, &m.metadata.name)?;
        if revisions.is_empty() {
            // Stored before revisions: what it runs is its first.
            if let Err(e) = cluster.first_revision(&m, jiff::Timestamp::now()) {
                warnings.push(format!("served model {key}: {e}"));
            }
        } else {
            cluster.served.revisions.insert(key.clone(), revisions);
        }
        cluster.served.models.insert(key, m);
    }
    cluster.summaries.extend(retired);
    for e in &step.events {
        if e.reason == corral_core::control::event_reason::ADMISSION_LOST {
            warnings.push(format!("{}: {}", e.job, e.message));
        }
    }
    let mut report = TickReport::default();
    cluster.apply(step, now, &mut report)?;
    cluster.start_gate = None;
    Ok((cluster, warnings))
}

/// Shims the executor keeps started ahead of time: a gang of 8 (a node's GPUs, the common
/// case) starts without one process spawn on the control loop; a larger one spawns the rest.
/// Each idle shim is a process blocked on a pipe, about 1 MB resident (mostly shared).
const STANDBY_SHIMS: usize = 8;

/// Re-adopts every recorded replica process, oldest incarnation first; records the current
/// incarnation of a live job found running but never recorded (a crash between the start
/// and the store write) and kills anything else, so that nothing runs twice. Returns the
/// replica records as they are now.
fn adopt_replicas(
    store: &mut Store,
    executor: &mut LocalExecutor,
    jobs: &[StoredJob],
    all_uids: &HashSet<String>,
    retired_uids: &HashSet<&str>,
    warnings: &mut Vec<String>,
) -> Result<Vec<StoredReplica>, ClusterError> {
    let mut known_dirs = BTreeSet::new();
    let mut out = Vec::new();
    for mut r in store.replicas()? {
        known_dirs.insert(r.record.dir.clone());
        // A retired job's replicas all ended (none is recorded running): nothing to watch.
        if retired_uids.contains(r.job_uid.as_str()) {
            continue;
        }
        let state = executor.adopt(r.record.clone());
        if state != r.state {
            store.set_replica_state(&r.name, r.attempt, r.retry, state)?;
            r.state = state;
        }
        if !all_uids.contains(&r.job_uid) {
            // A replica of a job that is gone: it must not run.
            let _ = executor.stop(&r.name, Duration::ZERO);
            store.remove_replica(&r.name, r.attempt, r.retry)?;
            continue;
        }
        out.push(r);
    }
    for rec in discover(&executor.config().run_dir) {
        if known_dirs.contains(&rec.dir) {
            continue;
        }
        let alive = procfs::is_same_alive(rec.pid, rec.start_time);
        match orphan_row(store, &rec, jobs)? {
            // The current incarnation of a live job, started but never recorded: recorded
            // now, running or with the exit it left (its directory exists, so it cannot be
            // started again; unrecorded, its job would wait for it forever).
            Some(mut row) => {
                let how = if alive { "running" } else { "ended" };
                warnings.push(format!("unrecorded replica {} found {how}", rec.name));
                row.state = executor.adopt(rec);
                store.put_replica(&row)?;
                out.push(row);
            }
            None if !alive => {}
            None => {
                warnings.push(format!("killing unrecorded replica process {}", rec.name));
                let _ = procfs::signal_group(rec.pid, rustix::process::Signal::KILL);
                if let Some(cg) = &rec.cgroup {
                    cg.kill_all(None);
                }
            }
        }
    }
    Ok(out)
}

/// The store row of an unrecorded process, if it is the current incarnation of a replica
/// of a live job (its name, incarnation label and job all match).
fn orphan_row(
    store: &Store,
    rec: &ProcessRecord,
    jobs: &[StoredJob],
) -> Result<Option<StoredReplica>, ClusterError> {
    let Some(stored) = jobs.iter().find(|j| j.key() == rec.job && !j.deleting) else {
        return Ok(None);
    };
    let Some((short, inc)) = rec.incarnation.split_once('-') else {
        return Ok(None);
    };
    let Ok(inc) = inc.parse::<Incarnation>() else {
        return Ok(None);
    };
    let prefix = format!("{}.{}-", stored.namespace, stored.name);
    let Some((role, index)) = rec
        .name
        .strip_prefix(&prefix)
        .and_then(|rest| rest.rsplit_once('-'))
    else {
        return Ok(None);
    };
    let (Ok(role), Ok(index)) = (role.parse::<Role>(), index.parse::<u32>()) else {
        return Ok(None);
    };
    let id = ReplicaId::new(role, index);
    let status = stored.job.status.clone().unwrap_or_default();
    let terminal = corral_core::lifecycle::conditions::is_terminal(&status);
    if !stored.uid.starts_with(short)
        || inc != lifecycle::current_incarnation(&status, id)
        || terminal
    {
        return Ok(None);
    }
    let port = store
        .ports()?
        .into_iter()
        .find(|(_, uid, replica)| *uid == stored.uid && *replica == id.key())
        .map(|(p, _, _)| p);
    Ok(Some(StoredReplica {
        name: rec.name.clone(),
        namespace: stored.namespace.clone(),
        job: stored.name.clone(),
        job_uid: stored.uid.clone(),
        role: role.as_str().to_string(),
        index,
        attempt: inc.attempt,
        retry: inc.retry,
        record: rec.clone(),
        port,
        started_ms: stored.submitted_ms,
        state: ProcessState::Running,
    }))
}
