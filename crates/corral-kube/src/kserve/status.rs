//! A ServedModel's status in KServe's format (`InferenceServiceStatus` of
//! serving.kserve.io/v1beta1): `url`, `address.url`, the conditions `PredictorReady`,
//! `IngressReady` and `Ready` (what `kubectl get isvc` shows and KServe's SDK
//! `wait_isvc_ready` reads), `components.predictor` (latest created, ready and rolled-out
//! revisions; `traffic` per revision) and `modelStatus`. A condition keeps its
//! `lastTransitionTime` while its status does not change.

use jiff::Timestamp;
use serde_json::{Value, json};

use corral_core::control::serving::answers_requests;

use super::{InferenceService, Served};

fn condition(
    old: Option<&Value>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let since = old
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.get("type").and_then(Value::as_str) == Some(type_)
                    && c.get("status").and_then(Value::as_str) == Some(status)
            })
        })
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now.to_string()));
    let mut c = json!({"type": type_, "status": status, "lastTransitionTime": since});
    if !ok {
        c["reason"] = json!(reason);
        c["message"] = json!(message);
    }
    c
}

/// The status of `isvc` for what it is now.
pub fn kserve_status(isvc: &InferenceService, served: Served<'_>, now: Timestamp) -> Value {
    let old = isvc.status();
    let (ok, reason, message) = match served {
        Served::Model(m) => {
            let s = m.status.clone().unwrap_or_default();
            match &s.message {
                Some(msg) if msg.starts_with("Invalid") => (false, "InvalidSpec", msg.clone()),
                Some(msg) => (false, "PredictorNotReady", msg.clone()),
                // Scaled to zero it stays Ready, as KServe's serverless revisions do.
                None if answers_requests(&m.spec, &s) => (true, "", String::new()),
                None => (
                    false,
                    "PredictorNotReady",
                    format!(
                        "{} of {} replicas ready (ServedModel {})",
                        s.ready_replicas, s.desired_replicas, m.metadata.name
                    ),
                ),
            }
        }
        Served::Pending => (
            false,
            "PredictorNotReady",
            "its ServedModel is being made".to_string(),
        ),
        Served::Refused(reason, why) => (false, reason, why.to_string()),
    };
    let model = match served {
        Served::Model(m) => Some(m),
        _ => None,
    };
    let ms = model.and_then(|m| m.status.clone()).unwrap_or_default();
    let url = ms.url.clone();
    let ready_revision = ms
        .revisions
        .iter()
        .rev()
        .find(|r| r.ready_replicas > 0)
        .map(|r| r.name.clone());
    let traffic: Vec<Value> = ms
        .revisions
        .iter()
        .filter(|r| r.traffic_percent > 0)
        .map(|r| {
            json!({
                "revisionName": r.name,
                "percent": r.traffic_percent,
                "latestRevision": Some(&r.name) == ms.latest_revision.as_ref(),
            })
        })
        .collect();
    let transition = match (served, ok) {
        (Served::Refused("InvalidSpec", _), _) => "InvalidSpec",
        (Served::Model(_), false)
            if ms
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("Invalid")) =>
        {
            "InvalidSpec"
        }
        (_, true) if ms.latest_revision == ms.stable_revision => "UpToDate",
        _ => "InProgress",
    };
    json!({
        "observedGeneration": isvc.generation(),
        "url": url,
        "address": {"url": url},
        "conditions": [
            condition(old, "IngressReady", model.is_some(), "Pending", "no ServedModel yet", now),
            condition(old, "PredictorReady", ok, reason, &message, now),
            condition(old, "Ready", ok, reason, &message, now),
        ],
        "components": {"predictor": {
            "url": url,
            "latestCreatedRevision": ms.latest_revision,
            "latestReadyRevision": ready_revision,
            "latestRolledoutRevision": ms.stable_revision,
            "traffic": traffic,
        }},
        "modelStatus": {
            "transitionStatus": transition,
            "states": {
                "activeModelState": if ok { "Loaded" } else { "Pending" },
                "targetModelState": if transition == "InvalidSpec" { "FailedToLoad" } else { "Loaded" },
            },
        },
    })
}

/// Whether the status written already says `new` (every field `new` sets; the API server
/// drops nulls, so a null equals a missing field). Fields `new` does not name are not
/// compared: the merge patch would keep them, and comparing them would write every pass.
pub fn same_status(old: Option<&Value>, new: &Value) -> bool {
    fn same(old: Option<&Value>, new: &Value) -> bool {
        match (old, new) {
            (None | Some(Value::Null), Value::Null) => true,
            (Some(Value::Object(o)), Value::Object(n)) => n.iter().all(|(k, v)| same(o.get(k), v)),
            (Some(o), n) => o == n,
            (None, _) => false,
        }
    }
    same(old, new)
}
