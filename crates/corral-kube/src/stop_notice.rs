//! The stop notice on Kubernetes: embedded, a replica stopped with a grace period finds why
//! and by when in `CORRAL_STOP_NOTICE_FILE`; a pod cannot be handed a file, so here the
//! operator writes the reason into the pod's `DisruptionTarget` condition (the condition
//! Kubernetes itself sets on a pod it is about to stop: preemption, eviction) before it
//! deletes the pod, the API server sets the deadline (`deletionTimestamp`, now + grace),
//! and the replica asks for the notice with its progress token: `GET $CORRAL_PROGRESS_URL`
//! answers `{"reason", "graceSeconds", "deadline"}` (200) or nothing yet (204), as does the
//! answer to every report it sends while it is being stopped.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::plan::PodDeletion;

/// The pod condition Kubernetes uses for "this pod is about to be stopped, and why".
pub const CONDITION: &str = "DisruptionTarget";

/// Writes why the replica stops into its pod's `DisruptionTarget` condition.
pub async fn tell(pods: &Api<Pod>, d: &PodDeletion, reason: &str) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": CONDITION,
        "status": "True",
        "reason": format!("{reason}ByCorral"),
        "message": format!(
            "Corral stops this replica ({reason}); it has {} s before SIGKILL",
            d.grace.as_secs()
        ),
        "lastTransitionTime": now,
    }]}});
    pods.patch_status(&d.name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|_| ())
}

/// The notice for a pod being stopped: its reason (from the condition, `Stopping` without
/// one), its grace period and the deadline; `None` while it is not being stopped.
pub fn notice(pod: &Pod) -> Option<Value> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?;
    let reason = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == CONDITION && c.status == "True")
        })
        .and_then(|c| c.reason.as_deref())
        .map(|r| r.strip_suffix("ByCorral").unwrap_or(r).to_string())
        .unwrap_or_else(|| "Stopping".to_string());
    Some(json!({
        "reason": reason,
        "graceSeconds": pod.metadata.deletion_grace_period_seconds.unwrap_or(0),
        "deadline": deadline.0.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_being_stopped_has_a_notice_with_its_reason_and_deadline() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "j-worker-0", "namespace": "ml"},
            "status": {"phase": "Running"},
        }))
        .expect("pod");
        assert_eq!(notice(&pod), None, "not being stopped");
        pod = serde_json::from_value(json!({
            "metadata": {"name": "j-worker-0", "namespace": "ml",
                "deletionTimestamp": "2026-11-28T06:00:30Z", "deletionGracePeriodSeconds": 30},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": CONDITION, "status": "True", "reason": "PreemptedByCorral"}]},
        }))
        .expect("pod");
        let n = notice(&pod).expect("a notice");
        assert_eq!(n["reason"], json!("Preempted"));
        assert_eq!(n["graceSeconds"], json!(30));
        assert_eq!(n["deadline"], json!("2026-11-28T06:00:30Z"));
        // Deleted by someone else (kubectl delete pod): stopping, reason unknown.
        if let Some(s) = pod.status.as_mut() {
            s.conditions = None;
        }
        assert_eq!(notice(&pod).expect("a notice")["reason"], json!("Stopping"));
    }
}
