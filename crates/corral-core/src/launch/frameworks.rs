//! The per-framework env, in the Kubeflow training-operator's formats and order (each
//! function names the Kubeflow source it follows).

use corral_api::training_job::{MpiImplementation, Role};
use serde_json::json;

use super::{Ctx, Env, LaunchError, LaunchFile};
use crate::lifecycle::ReplicaId;

/// Where the MPI hostfile lives in a launcher (mpi-operator's configMountPath/hostfileName).
pub const MPI_HOSTFILE_NAME: &str = "hostfile";

/// TensorFlow: `TF_CONFIG`, only for distributed jobs (more than one replica), as
/// kubeflow/training-operator pkg/controller.v1/tensorflow/tensorflow.go (genTFConfigJSONStr,
/// genClusterSpec) and tfjob_controller.go (isDistributed).
pub(super) fn tensorflow(ctx: &Ctx<'_>, env: &mut Env) -> Result<(), LaunchError> {
    if ctx.spec.total_replicas() == 1 {
        // A single replica trains locally; TF_CONFIG would make it wait for a cluster.
        return Ok(());
    }
    env.set("TF_CONFIG", tf_config_json(ctx)?);
    Ok(())
}

/// `{"cluster":{"<role>":["host:port",...]},"task":{"type":"<role>","index":N},
/// "environment":"cloud"}`. Roles in the cluster are sorted by name (Go marshals map keys
/// sorted); the evaluator is not part of the training cluster but gets its own task.
pub(super) fn tf_config_json(ctx: &Ctx<'_>) -> Result<String, LaunchError> {
    let mut roles: Vec<Role> = ctx
        .spec
        .replicas
        .keys()
        .copied()
        .filter(|r| *r != Role::Evaluator)
        .collect();
    roles.sort_by_key(|r| r.as_str());
    let mut cluster = serde_json::Map::new();
    for role in roles {
        let count = ctx.spec.replicas.get(&role).map_or(0, |r| r.count);
        let mut members = Vec::new();
        for index in 0..count {
            let id = ReplicaId::new(role, index);
            members.push(json!(format!("{}:{}", ctx.host(id)?, ctx.port(id)?)));
        }
        cluster.insert(role.as_str().to_string(), serde_json::Value::Array(members));
    }
    let config = json!({
        "cluster": cluster,
        "task": { "type": ctx.replica.role.as_str(), "index": ctx.replica.index },
        "environment": "cloud",
    });
    Ok(config.to_string())
}

/// PyTorch: kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go (setPodEnv),
/// master.go (MASTER_*) and elastic.go (PET_RDZV_*, PET_NNODES=min:max).
///
/// Kubeflow sets the master variables only when the job has a master; Corral lets worker 0
/// stand in for a missing master in a static job (as Kubeflow Trainer v2 does with node 0),
/// so that worker-only jobs work without an elastic policy.
pub(super) fn pytorch(ctx: &Ctx<'_>, env: &mut Env) -> Result<(), LaunchError> {
    let spec = ctx.spec;
    let has_master = spec
        .replicas
        .get(&Role::Master)
        .is_some_and(|r| r.count > 0);
    let total = spec.total_replicas();
    env.set("PYTHONUNBUFFERED", "0");

    let master = if has_master {
        Some(ReplicaId::new(Role::Master, 0))
    } else if spec.elastic.is_none() {
        Some(ReplicaId::new(Role::Worker, 0))
    } else {
        None
    };
    if let Some(m) = master {
        let (host, port) = (ctx.host(m)?, ctx.port(m)?);
        env.set("MASTER_PORT", port.to_string());
        env.set("MASTER_ADDR", host);
        env.set("PET_MASTER_PORT", port.to_string());
        env.set("PET_MASTER_ADDR", host);
        let mut rank = u64::from(ctx.replica.index);
        if has_master && ctx.replica.role == Role::Worker {
            rank += 1;
        }
        // WORLD_SIZE counts processes: replicas times an integer nprocPerNode ("auto" and
        // other words count as 1, as Kubeflow's getNprocPerNodeInt does).
        let nproc = spec
            .nproc_per_node
            .as_deref()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(1);
        env.set("WORLD_SIZE", total.saturating_mul(nproc).to_string());
        env.set("RANK", rank.to_string());
        if let Some(n) = &spec.nproc_per_node {
            env.set("PET_NPROC_PER_NODE", n.clone());
        }
        env.set("PET_NODE_RANK", rank.to_string());
    }

    match &spec.elastic {
        Some(e) => {
            let worker0 = ReplicaId::new(Role::Worker, 0);
            let host = match &e.rdzv_host {
                Some(h) => h.clone(),
                None => ctx.host(worker0)?.to_string(),
            };
            let port = match e.rdzv_port {
                Some(p) => p,
                None => ctx.port(worker0)?,
            };
            env.set("PET_RDZV_ENDPOINT", format!("{host}:{port}"));
            env.set(
                "PET_RDZV_BACKEND",
                e.rdzv_backend.clone().unwrap_or_else(|| "c10d".to_string()),
            );
            let nnodes = match (e.min_replicas, e.max_replicas) {
                (Some(min), Some(max)) => format!("{min}:{max}"),
                _ => spec
                    .replicas
                    .get(&Role::Worker)
                    .map_or(0, |w| w.count)
                    .to_string(),
            };
            env.set("PET_NNODES", nnodes);
            // Corral resizes elastic jobs while they run. torch >= 2.4 shares the rendezvous
            // store with the workers and keeps the first round's bootstrap address, so that
            // agents joining a later round wait for a MASTER_ADDR nobody writes (the group
            // never grows); not sharing it makes every round publish its own.
            env.set("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1");
            if let Some(r) = e.max_restarts {
                env.set("PET_MAX_RESTARTS", r.to_string());
            }
            if master.is_none()
                && let Some(n) = &spec.nproc_per_node
            {
                // torchrun needs it; the master block above did not run.
                env.set("PET_NPROC_PER_NODE", n.clone());
            }
            if let Some(id) = &e.rdzv_id {
                env.set("PET_RDZV_ID", id.clone());
            }
            if !e.rdzv_conf.is_empty() {
                let conf: Vec<String> = e
                    .rdzv_conf
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                env.set("PET_RDZV_CONF", conf.join(","));
            }
            if e.standalone == Some(true) {
                env.set("PET_STANDALONE", "");
            }
        }
        None => env.set("PET_NNODES", total.to_string()),
    }
    Ok(())
}

/// MPI: kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (newConfigMap: the
/// hostfile; newLauncherPodTemplate: ompiEnvVars / intelEnvVars / mpichEnvVars, the slots
/// variable and nvidiaDisableEnvVars; newWorker: K_MPI_JOB_ROLE). With an rsh agent
/// (embedded), mpi-operator v1's newLauncher instead: OMPI_MCA_plm_rsh_agent
/// (I_MPI_HYDRA_BOOTSTRAP_EXEC, HYDRA_LAUNCHER_EXEC) names the agent, with no ssh options.
/// Returns whether the replica runs the agent.
pub(super) fn mpi(
    ctx: &Ctx<'_>,
    env: &mut Env,
    files: &mut Vec<LaunchFile>,
) -> Result<bool, LaunchError> {
    let mpi = ctx.spec.mpi.clone().unwrap_or_default();
    let slots = mpi.slots_per_worker.unwrap_or(1);
    let implementation = mpi.implementation.unwrap_or(MpiImplementation::OpenMPI);
    if ctx.replica.role != Role::Launcher {
        env.set("K_MPI_JOB_ROLE", "worker");
        // Each worker's orted keeps its session directory in the worker's own directory.
        // Only workers: mpirun hands the launcher's `OMPI_MCA_orte_*` settings to every
        // orted it starts, which would put them all in one place again.
        if let (MpiImplementation::OpenMPI, Some(dir)) =
            (implementation, &ctx.options.replica_tmp_dir)
        {
            env.set("OMPI_MCA_orte_tmpdir_base", dir.clone());
        }
        return Ok(false);
    }
    let agent = ctx.options.mpi_rsh_agent.as_deref();
    let hostfile = format!(
        "{}/{MPI_HOSTFILE_NAME}",
        ctx.options.mpi_config_dir.trim_end_matches('/')
    );
    env.set("K_MPI_JOB_ROLE", "launcher");
    match implementation {
        MpiImplementation::OpenMPI => {
            // Lets mpirun reach workers by their DNS names.
            env.set("OMPI_MCA_orte_keep_fqdn_hostnames", "true");
            env.set("OMPI_MCA_orte_default_hostfile", hostfile.clone());
            match agent {
                None => env.set("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                Some(agent) => {
                    env.set("OMPI_MCA_plm_rsh_agent", agent);
                    // Only the launcher holds the agent's credentials: no orted may
                    // start others (a tree spawn would run the agent in a worker).
                    env.set("OMPI_MCA_plm_rsh_no_tree_spawn", "true");
                }
            }
            env.set("OMPI_MCA_orte_set_default_slots", slots.to_string());
        }
        MpiImplementation::Intel => {
            env.set("I_MPI_HYDRA_HOST_FILE", hostfile.clone());
            match agent {
                None => env.set(
                    "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                    "-o ConnectionAttempts=10",
                ),
                Some(agent) => {
                    env.set("I_MPI_HYDRA_BOOTSTRAP", "rsh");
                    env.set("I_MPI_HYDRA_BOOTSTRAP_EXEC", agent);
                }
            }
            env.set("I_MPI_PERHOST", slots.to_string());
        }
        MpiImplementation::Mpich => {
            env.set("HYDRA_HOST_FILE", hostfile.clone());
            match agent {
                None => env.set("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10"),
                Some(agent) => {
                    env.set("HYDRA_LAUNCHER", "rsh");
                    env.set("HYDRA_LAUNCHER_EXEC", agent);
                }
            }
        }
    }
    if !mpi.run_launcher_as_worker {
        // The launcher only runs mpirun: keep it off the GPUs.
        env.set("NVIDIA_VISIBLE_DEVICES", "");
        env.set("NVIDIA_DRIVER_CAPABILITIES", "");
    }
    files.push(LaunchFile {
        path: hostfile,
        contents: mpi_hostfile_text(ctx)?,
        mode: 0o444,
    });
    Ok(agent.is_some())
}

/// `host slots=N` per line for Open MPI, `host:N` for Intel MPI and MPICH; the launcher
/// first when it also runs ranks, then the workers by index. With an rsh agent the hosts
/// are replica names (`<job>-worker-0`): embedded, every replica shares one address, which
/// mpirun would take for one host and run every rank in the launcher.
pub(super) fn mpi_hostfile_text(ctx: &Ctx<'_>) -> Result<String, LaunchError> {
    let mpi = ctx.spec.mpi.clone().unwrap_or_default();
    let slots = mpi.slots_per_worker.unwrap_or(1);
    let host = |id: ReplicaId| -> Result<String, LaunchError> {
        match ctx.options.mpi_rsh_agent {
            Some(_) => Ok(id.name(ctx.job)),
            None => ctx.host(id).map(str::to_string),
        }
    };
    let mut hosts = Vec::new();
    if mpi.run_launcher_as_worker {
        hosts.push(host(ReplicaId::new(Role::Launcher, 0))?);
    }
    let workers = ctx.spec.replicas.get(&Role::Worker).map_or(0, |w| w.count);
    for index in 0..workers {
        hosts.push(host(ReplicaId::new(Role::Worker, index))?);
    }
    let open_mpi = matches!(
        mpi.implementation.unwrap_or(MpiImplementation::OpenMPI),
        MpiImplementation::OpenMPI
    );
    Ok(hosts
        .iter()
        .map(|h| {
            if open_mpi {
                format!("{h} slots={slots}\n")
            } else {
                format!("{h}:{slots}\n")
            }
        })
        .collect())
}

/// JAX: kubeflow/training-operator pkg/controller.v1/jax/envvar.go (setPodEnv): the
/// coordinator is worker 0. Corral adds the `JAX_*` forms that `jax.distributed.initialize`
/// and common launch scripts read (`JAX_COORDINATOR_ADDRESS` is `host:port`).
pub(super) fn jax(ctx: &Ctx<'_>, env: &mut Env) -> Result<(), LaunchError> {
    let coordinator = ReplicaId::new(Role::Worker, 0);
    let (host, port) = (ctx.host(coordinator)?, ctx.port(coordinator)?);
    let total = ctx.spec.total_replicas();
    let id = ctx.replica.index;
    env.set("PYTHONUNBUFFERED", "1");
    env.set("COORDINATOR_PORT", port.to_string());
    env.set("COORDINATOR_ADDRESS", host);
    env.set("NUM_PROCESSES", total.to_string());
    env.set("PROCESS_ID", id.to_string());
    env.set("JAX_COORDINATOR_ADDRESS", format!("{host}:{port}"));
    env.set("JAX_NUM_PROCESSES", total.to_string());
    env.set("JAX_PROCESS_ID", id.to_string());
    Ok(())
}

/// XGBoost (Rabit tracker on the master; also LightGBM): kubeflow/training-operator
/// pkg/controller.v1/xgboost/pod.go (SetPodEnv). Worker ranks follow the masters.
pub(super) fn xgboost(ctx: &Ctx<'_>, env: &mut Env) -> Result<(), LaunchError> {
    let spec = ctx.spec;
    let master = ReplicaId::new(Role::Master, 0);
    let masters = spec.replicas.get(&Role::Master).map_or(0, |m| m.count);
    let workers = spec.replicas.get(&Role::Worker).map_or(0, |w| w.count);
    let total = spec.total_replicas();
    let mut rank = u64::from(ctx.replica.index);
    if ctx.replica.role == Role::Worker {
        rank += u64::from(masters);
    }
    env.set("MASTER_PORT", ctx.port(master)?.to_string());
    env.set("MASTER_ADDR", ctx.host(master)?);
    env.set("WORLD_SIZE", total.to_string());
    env.set("RANK", rank.to_string());
    env.set("PYTHONUNBUFFERED", "0");
    if total > 1 && workers > 0 {
        let worker0 = ReplicaId::new(Role::Worker, 0);
        env.set("WORKER_PORT", ctx.port(worker0)?.to_string());
        let mut addrs = Vec::new();
        for index in 0..workers {
            addrs.push(ctx.host(ReplicaId::new(Role::Worker, index))?);
        }
        env.set("WORKER_ADDRS", addrs.join(","));
    }
    Ok(())
}
