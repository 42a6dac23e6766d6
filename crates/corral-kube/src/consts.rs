//! Names Corral writes on Kubernetes objects.

/// The pod's job (every replica pod and the job's Service carry it).
pub const JOB_NAME_LABEL: &str = "corral.dev/job-name";
/// The replica's role (`master`, `worker`, ...).
pub const ROLE_LABEL: &str = "corral.dev/role";
/// The replica's index within its role.
pub const INDEX_LABEL: &str = "corral.dev/index";
/// The replica's incarnation, `<attempt>.<retry>` (see `corral_core::lifecycle::Incarnation`).
pub const INCARNATION_LABEL: &str = "corral.dev/incarnation";
/// On a TrainingJob: the admission it holds (pool, GPU type, placement of every replica) as
/// JSON ([`crate::record::AdmissionAnnotation`]), as operators before `status.admission`
/// kept it. Still read (a job admitted by such an operator keeps its gang), and removed
/// with the job's next status write, which records the admission in the status instead.
pub const ADMISSION_ANNOTATION: &str = "corral.dev/admission";
/// On a TrainingJob: a replica launch the API server refused for good (400, 403, 422, or a
/// name held by a pod the job does not own), as JSON
/// ([`crate::record::LaunchRejectionAnnotation`]). The observation the next pass hands to the control plane, which fails the job with the
/// server's message and releases its admission.
pub const LAUNCH_REJECTED_ANNOTATION: &str = "corral.dev/launch-rejected";
/// On a pod: the node Corral chose for it (before the Binding is made).
pub const NODE_ANNOTATION: &str = "corral.dev/node";
/// `spec.schedulerName` of replica pods: kube-scheduler leaves them to Corral.
pub const SCHEDULER_NAME: &str = "corral";
/// Field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "corral";
/// The node label that carries the GPU type (NVIDIA GPU feature discovery).
pub const GPU_PRODUCT_LABEL: &str = corral_api::node_pool::GPU_PRODUCT_LABEL;
/// The extended resource of NVIDIA GPUs (device plugin).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Name of the framework port on replica containers and the Service.
pub const PORT_NAME: &str = "corral";
/// The volume of an MPI job's ssh keys (Kubeflow's MPI operator's name).
pub const SSH_VOLUME: &str = "ssh-auth";
/// Where an MPI job's ssh keys are mounted unless `mpi.sshAuthMountPath` says otherwise.
pub const SSH_DEFAULT_MOUNT_PATH: &str = "/root/.ssh";
/// Keys of the ssh Secret (`kubernetes.io/ssh-auth` and Kubeflow's MPI operator's).
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
pub const SSH_PUBLIC_KEY: &str = "ssh-publickey";
