//! The launch contract: the exact environment, address and files each replica starts with.
//!
//! Existing training scripts must run unchanged on Corral and on Kubeflow, so every variable
//! follows the Kubeflow training-operator (and mpi-operator) format, name and order:
//! TF_CONFIG for TensorFlow; MASTER_*/WORLD_SIZE/RANK and torchrun's PET_* for PyTorch
//! (PET_NNODES=min:max and PET_RDZV_* when elastic); an MPI hostfile (`host slots=N`) and
//! OMPI_MCA_* / I_MPI_* / HYDRA_* for MPI; COORDINATOR_* and NUM_PROCESSES/PROCESS_ID (plus
//! the JAX_* forms) for JAX; MASTER_*/WORLD_SIZE/RANK/WORKER_* for XGBoost. Each function in
//! `frameworks` names the Kubeflow source it follows.
//!
//! The shell supplies the [`Addresses`] (Kubernetes DNS names with the framework port, or a
//! local host with ports Corral allocated) and, where Corral pins GPUs itself, the
//! placement's GPU indices ([`LaunchOptions::gpu_indices`]) for CUDA_VISIBLE_DEVICES and
//! NVIDIA_VISIBLE_DEVICES.
//!
//! Precedence: the contract's variables win over a user's variable of the same name (as on
//! Kubeflow, where the operator's entries come last and Kubernetes lets the last one win);
//! the names overridden are reported so that the shell can warn. Every other user variable
//! is kept, in the user's order, before the contract's.

mod address;
mod frameworks;

use std::collections::BTreeSet;
use std::fmt;

use corral_api::training_job::{EnvVar, Framework, TrainingJob, TrainingJobSpec};

use crate::lifecycle::ReplicaId;

pub use address::{Addresses, Endpoint, kubernetes_host, replica_slots};
pub use frameworks::MPI_HOSTFILE_NAME;

/// Where the MPI launcher finds its hostfile by default (mpi-operator's configMountPath).
pub const DEFAULT_MPI_CONFIG_DIR: &str = "/etc/mpi";

/// What the shell knows beyond the job and the addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// GPU indices the placement gave this replica, when Corral pins GPUs itself (embedded).
    /// `None` leaves GPU visibility to the platform (Kubernetes' device plugin).
    pub gpu_indices: Option<Vec<u32>>,
    /// Directory of launch files (the MPI hostfile). Embedded shells point it at the job's
    /// own directory.
    pub mpi_config_dir: String,
    /// MPI without sshd in the workers (embedded): the program mpirun runs as its rsh
    /// agent (`<agent> <host> <command>`), which runs the command inside the named replica,
    /// as mpi-operator v1's `kubectl exec` script did. With it the hostfile names replicas
    /// (`<job>-worker-0`), which only the agent resolves, and the launcher is given
    /// credentials to exec into its own job's replicas ([`LaunchSpec::exec_credentials`]).
    /// `None`: workers run sshd (Kubernetes, as mpi-operator v2).
    pub mpi_rsh_agent: Option<String>,
    /// A writable directory of this replica's own, where the replicas of a job share one
    /// machine (one host name, one job `TMPDIR`: embedded). Open MPI's daemons keep their
    /// session directories there, apart, as each pod's `/tmp` keeps them on Kubernetes:
    /// two `orted`s of one job under the same host name and `TMPDIR` remove each other's.
    /// `None`: each replica has a machine of its own.
    pub replica_tmp_dir: Option<String>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            gpu_indices: None,
            mpi_config_dir: DEFAULT_MPI_CONFIG_DIR.to_string(),
            mpi_rsh_agent: None,
            replica_tmp_dir: None,
        }
    }
}

/// A file the replica needs before it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchFile {
    pub path: String,
    pub contents: String,
    /// Unix permission bits.
    pub mode: u32,
}

/// Everything one replica starts with.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchSpec {
    pub replica: ReplicaId,
    /// `<job>-<role>-<index>`.
    pub name: String,
    /// The replica's own address (its hostname on Kubernetes is the first label).
    pub endpoint: Endpoint,
    /// Ports the replica listens on.
    pub ports: Vec<u16>,
    /// The user's variables (minus those the contract overrides), then the contract's.
    pub env: Vec<EnvVar>,
    pub files: Vec<LaunchFile>,
    /// User variables that the contract replaced.
    pub overridden_env: Vec<String>,
    /// The replica runs an exec agent ([`LaunchOptions::mpi_rsh_agent`]): the shell gives
    /// it credentials that may exec into the replicas of its own job, and nothing else.
    pub exec_credentials: bool,
}

impl LaunchSpec {
    /// The literal value of a variable, if set.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|v| v.name == name)
            .and_then(|v| v.value.as_deref())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchError {
    /// The job has no such replica (unknown role, or index beyond the count).
    NoSuchReplica(String),
    /// The addresses lack a replica the contract must name.
    MissingAddress(String),
    /// A replica the contract must name has no port.
    MissingPort(String),
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::NoSuchReplica(r) => write!(f, "the job has no replica {r}"),
            LaunchError::MissingAddress(r) => write!(f, "no address for replica {r}"),
            LaunchError::MissingPort(r) => write!(f, "replica {r} has no port"),
        }
    }
}

impl std::error::Error for LaunchError {}

/// The contract's variables, in order; setting a name again replaces its value in place.
#[derive(Debug, Default)]
struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    fn set(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        match self.vars.iter_mut().find(|(n, _)| n == name) {
            Some(v) => v.1 = value,
            None => self.vars.push((name.to_string(), value)),
        }
    }

    fn set_if_absent(&mut self, name: &str, value: impl Into<String>) {
        if !self.vars.iter().any(|(n, _)| n == name) {
            self.vars.push((name.to_string(), value.into()));
        }
    }
}

/// What the framework functions read.
struct Ctx<'a> {
    job: &'a str,
    spec: &'a TrainingJobSpec,
    replica: ReplicaId,
    addresses: &'a Addresses,
    options: &'a LaunchOptions,
}

impl Ctx<'_> {
    fn endpoint(&self, id: ReplicaId) -> Result<&Endpoint, LaunchError> {
        self.addresses
            .get(id)
            .ok_or_else(|| LaunchError::MissingAddress(id.name(self.job)))
    }

    fn host(&self, id: ReplicaId) -> Result<&str, LaunchError> {
        Ok(&self.endpoint(id)?.host)
    }

    fn port(&self, id: ReplicaId) -> Result<u16, LaunchError> {
        self.endpoint(id)?
            .port
            .ok_or_else(|| LaunchError::MissingPort(id.name(self.job)))
    }
}

fn with_ctx<T>(
    job: &TrainingJob,
    replica: ReplicaId,
    addresses: &Addresses,
    options: &LaunchOptions,
    f: impl FnOnce(&Ctx<'_>) -> Result<T, LaunchError>,
) -> Result<T, LaunchError> {
    let mut spec = job.spec.clone();
    spec.apply_defaults();
    let slots = spec
        .replicas
        .get(&replica.role)
        .map(|r| address::replica_slots(job, replica.role, r.count));
    if slots.is_none_or(|n| replica.index >= n) {
        return Err(LaunchError::NoSuchReplica(replica.name(job.name())));
    }
    let ctx = Ctx {
        job: job.name(),
        spec: &spec,
        replica,
        addresses,
        options,
    };
    f(&ctx)
}

/// The environment, address and files of one replica.
pub fn replica_env(
    job: &TrainingJob,
    replica: ReplicaId,
    addresses: &Addresses,
    options: &LaunchOptions,
) -> Result<LaunchSpec, LaunchError> {
    with_ctx(job, replica, addresses, options, |ctx| {
        let endpoint = ctx.endpoint(replica)?.clone();
        let mut env = Env::default();
        let mut files = Vec::new();
        let mut exec_credentials = false;
        match ctx.spec.framework {
            Framework::TensorFlow => frameworks::tensorflow(ctx, &mut env)?,
            Framework::PyTorch => frameworks::pytorch(ctx, &mut env)?,
            Framework::Mpi => {
                exec_credentials = frameworks::mpi(ctx, &mut env, &mut files)?;
            }
            Framework::Jax => frameworks::jax(ctx, &mut env)?,
            Framework::XGBoost => frameworks::xgboost(ctx, &mut env)?,
            Framework::Generic => {}
        }
        // A job that saved a checkpoint resumes from it: where, and at which step.
        if let Some(c) = job.status.as_ref().and_then(|s| s.last_checkpoint.as_ref()) {
            use corral_api::progress::{CHECKPOINT_PATH_ENV, CHECKPOINT_STEP_ENV};
            env.set_if_absent(CHECKPOINT_STEP_ENV, c.step.to_string());
            if let Some(path) = &c.path {
                env.set_if_absent(CHECKPOINT_PATH_ENV, path.clone());
            }
        }
        // A served model's replica listens where the router will look for it.
        if corral_api::served_model::serving_replica_of(job).is_some()
            && let Some(port) = endpoint.port
        {
            env.set(corral_api::served_model::PORT_ENV, port.to_string());
        }
        if let Some(gpus) = &options.gpu_indices {
            // An empty list hides every GPU; a framework's own setting (the MPI launcher's
            // GPU opt-out) stays.
            let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
            let list = list.join(",");
            env.set_if_absent("CUDA_VISIBLE_DEVICES", list.clone());
            let nvidia = if gpus.is_empty() {
                "none".to_string()
            } else {
                list
            };
            env.set_if_absent("NVIDIA_VISIBLE_DEVICES", nvidia);
        }

        let contract: BTreeSet<&str> = env.vars.iter().map(|(n, _)| n.as_str()).collect();
        let template = ctx.spec.replicas.get(&replica.role).map(|r| &r.template);
        let mut out = Vec::new();
        let mut overridden = Vec::new();
        for v in template.map(|t| t.env.as_slice()).unwrap_or_default() {
            if contract.contains(v.name.as_str()) {
                if !overridden.contains(&v.name) {
                    overridden.push(v.name.clone());
                }
            } else {
                out.push(v.clone());
            }
        }
        out.extend(env.vars.iter().map(|(n, v)| EnvVar::literal(n, v)));
        Ok(LaunchSpec {
            replica,
            name: replica.name(ctx.job),
            ports: endpoint.port.into_iter().collect(),
            endpoint,
            env: out,
            files,
            overridden_env: overridden,
            exec_credentials,
        })
    })
}

/// TF_CONFIG as replica `replica` of a TensorFlow job sees it.
pub fn tf_config(
    job: &TrainingJob,
    replica: ReplicaId,
    addresses: &Addresses,
) -> Result<String, LaunchError> {
    with_ctx(
        job,
        replica,
        addresses,
        &LaunchOptions::default(),
        frameworks::tf_config_json,
    )
}

/// The MPI hostfile of a job (launcher first when it runs ranks, then the workers).
pub fn mpi_hostfile(job: &TrainingJob, addresses: &Addresses) -> Result<String, LaunchError> {
    let launcher = ReplicaId::new(corral_api::training_job::Role::Launcher, 0);
    with_ctx(
        job,
        launcher,
        addresses,
        &LaunchOptions::default(),
        frameworks::mpi_hostfile_text,
    )
}
