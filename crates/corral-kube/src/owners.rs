//! The owner reference Corral writes on what it makes for an object (a step's job, a
//! model's revision, a Pipeline's kept version, a converted Kubeflow job or
//! InferenceService): that object controls it, and Kubernetes' garbage collector deletes it
//! with its owner (blockOwnerDeletion: a foreground delete waits for it; the operator's
//! RBAC grants `<owner>/finalizers: update` for that).

use serde_json::{Value, json};

/// `ownerReferences[0]` naming the controlling owner.
pub fn controller(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}
