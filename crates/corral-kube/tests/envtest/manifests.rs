//! Objects applied as `kubectl apply --server-side` does: the deploy/ manifests, namespaces,
//! and the wait for a CRD to be served.

use std::path::Path;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{Env, raw};

/// Applies every object of a multi-document YAML file (server-side apply, as `kubectl apply
/// --server-side`).
pub(crate) async fn apply_file(client: &Client, path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("yaml");
    apply_all(client, docs.into_iter().filter(|d| !d.is_null()).collect()).await;
}

pub(crate) async fn apply_all(client: &Client, docs: Vec<Value>) {
    for doc in docs {
        apply_one(client, &doc, false)
            .await
            .unwrap_or_else(|e| panic!("apply {}: {e}", doc["metadata"]["name"]));
    }
}

pub(crate) async fn apply_one(
    client: &Client,
    doc: &Value,
    dry_run: bool,
) -> Result<(), kube::Error> {
    let (group, version) = match doc["apiVersion"].as_str().unwrap_or("").split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap_or("").to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap_or(""));
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &ar)
        }
        _ => Api::all_with(client.clone(), &ar),
    };
    let mut pp = PatchParams::apply("envtest").force();
    pp.dry_run = dry_run;
    api.patch(
        doc["metadata"]["name"].as_str().unwrap_or(""),
        &pp,
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
}

pub(crate) async fn namespace(env: &Env, ns: &str) {
    apply_all(
        &env.admin,
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            // The ServiceAccount admission plugin needs it (no controller-manager makes it).
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": ns}}),
        ],
    )
    .await;
}

/// Waits until the API server serves `group/version` `plural` (a CRD established).
pub(crate) async fn served(client: &Client, group: &str, version: &str, plural: &str) {
    let path = format!("/apis/{group}/{version}/{plural}");
    for _ in 0..100 {
        if let Ok((200, _)) = raw(client, "GET", &path, None).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{path} is not served");
}

pub(crate) fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}
