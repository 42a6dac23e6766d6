//! `corral operator`'s flags: what the running operator ([`crate::operator`]) is told.

use std::net::SocketAddr;

/// `corral operator`: run Corral as a Kubernetes operator.
#[derive(Clone, Debug, clap::Args)]
pub struct OperatorArgs {
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Namespace of the leader-election Lease (default: the pod's namespace, from
    /// POD_NAMESPACE, else `corral-system`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "corral-system")]
    pub lease_namespace: String,
    #[arg(long, default_value = "corral-operator")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: the pod name, from POD_NAME).
    #[arg(long, env = "POD_NAME", default_value = "corral-operator")]
    pub identity: String,
    /// Seconds a Lease holds without renewal (client-go's LeaseDuration): how long standbys
    /// wait after the leader's last renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_secs: u64,
    /// Seconds after its last successful renewal was sent that the leader stops writing
    /// (client-go's RenewDeadline); less than the lease duration, whose difference is the
    /// margin between its last write and another replica taking over.
    #[arg(long, default_value_t = 10)]
    pub renew_deadline_secs: u64,
    /// Seconds between renewals, and between a standby's attempts (client-go's
    /// RetryPeriod); less than the renew deadline.
    #[arg(long, default_value_t = 2)]
    pub renew_every_secs: u64,
    /// Run a full pass at least this often even if nothing changes.
    #[arg(long, default_value_t = 30)]
    pub resync_secs: u64,
    /// Wait this long after a change to gather more before a pass. Short: a new job is
    /// bound within ~90 ms with 2,000 finished jobs stored (`corral bench operator`), and
    /// under a burst the passes themselves gather the changes that arrive meanwhile.
    #[arg(long, default_value_t = 25)]
    pub debounce_ms: u64,
    /// Writes per second to the API server (0: unlimited); reads are watches. Sized for
    /// 20 jobs/s of a typical mix (2.6 pods a job, ~5.5 writes a pod: ~290 writes/s), so
    /// that the limit guards the API server without throttling the work (deploy/README.md).
    #[arg(long, default_value_t = 300.0)]
    pub api_qps: f64,
    /// Writes allowed at once above the rate (a token bucket, as client-go's).
    #[arg(long, default_value_t = 600)]
    pub api_burst: u32,
    /// Jobs whose writes a pass issues at once (each job's own writes keep their order).
    #[arg(long, default_value_t = crate::apply::DEFAULT_APPLY_WINDOW)]
    pub apply_window: usize,
    /// Also publish, as Events, a job's Admitted, Running, Suspended and Succeeded, which its
    /// status conditions (and `status.admission`) already keep with their time and words.
    /// Off: Events carry what no condition keeps (warnings, preemptions, restarts, why a job
    /// waits), one write per job transition less.
    #[arg(long)]
    pub condition_events: bool,
    /// Rebuild the control plane from the API server on every pass instead of keeping it
    /// from pass to pass and feeding it what changed: what operators before the kept plane
    /// did; costs CPU with every job stored (`corral bench operator --rebuild-each-pass`).
    #[arg(long)]
    pub rebuild_each_pass: bool,
    /// A pass's writes should end within this many milliseconds: a pass admits no more
    /// replicas than the API server took that long to write in recent passes, and the next
    /// pass admits the rest, in the same order (0: a pass admits everything that fits).
    #[arg(long, default_value_t = 1000)]
    pub pass_budget_ms: u64,
    /// Where replicas send their progress reports, as they reach this operator's `--listen`
    /// address (`POST /progress`), e.g. through its Service: each replica gets it in
    /// `CORRAL_PROGRESS_URL` with a token projected for it (docs/progress.md). Unset:
    /// replicas are not told, and progress is not collected.
    #[arg(long)]
    pub progress_url: Option<String>,
    /// Appended to replica host names (Kubeflow's CUSTOM_CLUSTER_DOMAIN).
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Node label whose value is the node's topology domain (rack, NVLink/IB island).
    #[arg(long)]
    pub topology_label: Option<String>,
    /// Seconds a job's replicas get between SIGTERM and SIGKILL when stopped (preemption,
    /// suspend, restart, delete), for jobs whose pod templates set no
    /// terminationGracePeriodSeconds (default: 30).
    #[arg(long)]
    pub grace_period_secs: Option<u64>,
    /// Seconds a newly admitted job is safe from preemption, so that jobs do not preempt
    /// each other in a loop (default: 300); a job waiting for one says until when.
    #[arg(long)]
    pub preemption_protection_secs: Option<u64>,
    /// Seconds at least between two resizes of one elastic job, its admission counting as
    /// one, so that sizes do not oscillate (default: 60; docs/elastic.md).
    #[arg(long)]
    pub resize_dwell_secs: Option<u64>,
    /// Kubeflow's job kinds: `serve` them (instead of Kubeflow's training operator; install
    /// deploy/kubeflow-crds.yaml), or queue and place those labelled `corral.dev/queue`
    /// `alongside` Kubeflow's operator. See deploy/README.md.
    #[arg(long, value_enum, default_value_t = crate::kubeflow::Mode::Off)]
    pub kubeflow: crate::kubeflow::Mode,
    /// Serve KServe's InferenceService (serving.kserve.io/v1beta1, custom-container
    /// predictors) as ServedModels it owns, with KServe's status written back (instead of
    /// KServe; install deploy/kserve-crds.yaml). See docs/serving.md.
    #[arg(long)]
    pub kserve: bool,
    /// Days the usage ledger (ConfigMaps `corral-usage-*` in the operator's namespace, see
    /// docs/usage.md) keeps what each admission held; older days are deleted.
    #[arg(long, default_value_t = crate::ledger::DEFAULT_RETENTION_DAYS)]
    pub usage_retention_days: u64,
    /// The PersistentVolumeClaim, in each namespace that runs pipelines, that holds their
    /// artifacts (ReadWriteMany: every step's pods mount it). See deploy/README.md.
    #[arg(long, default_value = "corral-artifacts")]
    pub artifacts_claim: String,
    /// Keep pipeline artifacts in an object store instead of the claim: s3://BUCKET[/PREFIX]
    /// (each namespace's under PREFIX/NAMESPACE). Each step's pod fetches what it reads
    /// and uploads what it wrote with the credentials of its namespace's Secret
    /// `--artifact-store-secret`. See deploy/README.md.
    #[arg(long, value_parser = crate::pipelines::artifacts::store_url)]
    pub artifact_store: Option<String>,
    /// The Secret, in each namespace that runs pipelines, with its credentials for the
    /// artifact store (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, and AWS_REGION,
    /// AWS_ENDPOINT for S3-compatible stores).
    #[arg(long, default_value = crate::pipelines::artifacts::DEFAULT_STORE_SECRET)]
    pub artifact_store_secret: String,
    /// The image of the short pods that make a step's output directories and hash or read
    /// artifacts (`corral artifacts`): the operator's own.
    #[arg(long, env = "CORRAL_TOOLS_IMAGE", default_value = concat!("ghcr.io/corral-dev/corral:", env!("CARGO_PKG_VERSION")))]
    pub tools_image: String,
    /// The port every served model's replica listens on in its own pod (`$PORT`); the
    /// router in the operator reaches it at the pod's IP. See docs/serving.md.
    #[arg(long, default_value_t = crate::serving::DEFAULT_SERVING_PORT)]
    pub serving_port: u16,
    /// Log lines as text (for a terminal) or JSON (one object per line, for a log
    /// collector). The level and targets come from RUST_LOG (default: info).
    #[arg(long, env = "CORRAL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Directory with the validating webhook's certificate (tls.crt, tls.key; a
    /// cert-manager Secret mounted). Without it no webhook is served. See deploy/README.md.
    #[arg(long)]
    pub webhook_cert_dir: Option<std::path::PathBuf>,
    /// Address of the validating webhook (HTTPS, /validate/trainingjobs).
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub webhook_listen: SocketAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
