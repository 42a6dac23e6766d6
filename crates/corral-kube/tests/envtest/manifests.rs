//! Objects applied as `kubectl apply --server-side` does: the deploy/ manifests, namespaces,
//! and the wait for a CRD to be served.

use std::path::Path;

use corral_kube::testenv;
use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use serde_json::Value;

pub(crate) use corral_kube::testenv::apply_one;

use crate::harness::Env;

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

pub(crate) async fn namespace(env: &Env, ns: &str) {
    testenv::namespace(&env.admin, ns).await.expect("namespace");
}

/// Waits until the API server serves `group/version` `plural` (a CRD established).
pub(crate) async fn served(client: &Client, group: &str, version: &str, plural: &str) {
    testenv::served(client, group, version, plural)
        .await
        .expect("served");
}

pub(crate) fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}
