//! Names of the Prometheus series that every shell (the embedded cluster's server and the
//! Kubernetes operator) exposes with the same labels and meaning, so one dashboard works on
//! both. Names are relative to [`PREFIX`]; counters get `_total` from the encoder.

/// Prefix of every series (`corral_...`).
pub const PREFIX: &str = "corral";

/// Gauge family `corral_jobs{queue,state}`: TrainingJobs by queue and state.
pub const JOBS: &str = "jobs";
/// Gauge family `corral_queue_gpus_in_use{queue}`: GPUs held by the admitted jobs of a queue.
pub const QUEUE_GPUS_IN_USE: &str = "queue_gpus_in_use";
/// Counter `corral_admissions_total`: jobs admitted by the scheduler.
pub const ADMISSIONS: &str = "admissions";
/// Counter `corral_preemptions_total`: jobs preempted back to their queue.
pub const PREEMPTIONS: &str = "preemptions";

/// Label of the queue a series is about.
pub const LABEL_QUEUE: &str = "queue";
/// Label of a job's state (one of [`JOB_STATES`]).
pub const LABEL_STATE: &str = "state";

/// Every value of the `state` label, in lifecycle order.
pub const JOB_STATES: [&str; 10] = [
    "Queued",
    "Admitted",
    "Running",
    "Restarting",
    "Preempting",
    "BackOff",
    "Suspended",
    "Succeeded",
    "Failed",
    "Deleting",
];
