//! What `corral artifacts` (run in a pod that mounts a namespace's artifact volume) reports
//! of artifacts to a shell that cannot read them itself: the Kubernetes operator, whose
//! pipeline steps write to a PersistentVolumeClaim only pods mount. The report is the pod's
//! termination message, which Kubernetes keeps in the pod's status and caps at 4,096 bytes.

use serde::{Deserialize, Serialize};

/// The most a report may take: the kubelet keeps 4,096 bytes of a termination message.
pub const REPORT_LIMIT: usize = 4096;

/// The longest artifact text a report carries (for a condition or a fan-out's items): what
/// fits in [`REPORT_LIMIT`] once quoted. Embedded, a condition reads up to 64 KiB.
pub const REPORT_TEXT_LIMIT: usize = 3072;

/// Paths a pod is asked about, by kind (the pod's arguments, in order) and, in
/// [`ArtifactsReport`], what was found, position by position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactsReport {
    /// `sha256:<hex>` of each path hashed, as the embedded cluster hashes artifacts (a
    /// missing path hashes as empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sha256: Vec<String>,
    /// The text of each path read, trimmed (empty unless it is one regular file, or a
    /// directory holding exactly one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub text: Vec<String>,
}

impl ArtifactsReport {
    /// The report as a termination message, or why it does not fit in one.
    pub fn to_message(&self) -> Result<String, String> {
        let text = serde_json::to_string(self).map_err(|e| e.to_string())?;
        if text.len() > REPORT_LIMIT {
            return Err(format!(
                "the report is {} bytes, more than the {REPORT_LIMIT} a termination message \
                 keeps: ask about fewer paths at once",
                text.len()
            ));
        }
        Ok(text)
    }
}
