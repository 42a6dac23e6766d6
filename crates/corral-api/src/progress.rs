//! Training progress: what a replica reports ([`ProgressReport`], the JSON it writes to the
//! file named by `CORRAL_PROGRESS_FILE`) and what the job's status shows ([`JobProgress`],
//! with the ETA the core derives from the reports).

use std::collections::BTreeMap;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The environment variable naming the file a replica writes its progress to.
pub const PROGRESS_FILE_ENV: &str = "CORRAL_PROGRESS_FILE";

/// What a replica reports, whole, each time it writes the file: one JSON object such as
/// `{"step": 420, "totalSteps": 1000, "samplesPerSecond": 812.5, "metrics": {"loss": 0.31}}`.
/// Every field but `step` may be left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProgressReport {
    /// Steps (iterations, batches) done so far in the whole training, not this attempt.
    pub step: u64,
    /// Steps the training will take in all, when known.
    #[serde(default)]
    pub total_steps: Option<u64>,
    /// Percent done, when the script knows it better than `step / totalSteps`.
    #[serde(default)]
    pub percent: Option<f64>,
    /// Throughput the script measured.
    #[serde(default)]
    pub samples_per_second: Option<f64>,
    /// A few numbers worth seeing beside the progress (loss, accuracy); at most
    /// [`MAX_METRICS`] are kept.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// The checkpoint the script has just saved, whole and readable: where, and at which
    /// step. Reported after a stop notice (SIGTERM), it lets Corral stop the job at once
    /// instead of at the end of the grace period.
    #[serde(default)]
    pub checkpoint: Option<CheckpointReport>,
}

/// A checkpoint as a script reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointReport {
    pub step: u64,
    /// Where it is, as the script will read it back (a path, a URL).
    #[serde(default)]
    pub path: Option<String>,
}

/// The job's newest saved checkpoint, in its status; a new attempt gets it in
/// [`CHECKPOINT_STEP_ENV`] and [`CHECKPOINT_PATH_ENV`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// When its report was seen.
    pub saved: Timestamp,
}

/// The environment variable naming the step of the job's last checkpoint (a resumed job).
pub const CHECKPOINT_STEP_ENV: &str = "CORRAL_CHECKPOINT_STEP";
/// The environment variable naming where the job's last checkpoint is (a resumed job).
pub const CHECKPOINT_PATH_ENV: &str = "CORRAL_CHECKPOINT_PATH";
/// The environment variable naming the file Corral writes when it stops a replica with a
/// grace period (a preemption, a suspend): why, and by when it must be done.
pub const STOP_NOTICE_FILE_ENV: &str = "CORRAL_STOP_NOTICE_FILE";

/// The metrics of one report kept in the status at most.
pub const MAX_METRICS: usize = 8;

/// The job's progress in its status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobProgress {
    /// Steps done, as last reported.
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<u64>,
    /// Percent done (0-100), from the report's `percent` or `step / totalSteps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_second: Option<f64>,
    /// Seconds left at the rate of steps measured since `rateSince` (none until the job has
    /// run long enough in its current attempt to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
    /// When this report was seen.
    pub updated: Timestamp,
    /// The replica whose reports these are (the first to report in the attempt).
    #[serde(default)]
    pub replica: String,
    /// The attempt the rate is measured in: a restarted or preempted job measures afresh.
    #[serde(default)]
    pub attempt: u32,
    /// The step and time the rate is measured from.
    #[serde(default)]
    pub rate_since_step: u64,
    pub rate_since: Timestamp,
}
