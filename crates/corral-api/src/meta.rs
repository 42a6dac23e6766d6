//! Kubernetes object form shared by every Corral resource: apiVersion, kind, metadata, spec,
//! status. The same YAML is accepted embedded and applied as a CRD on Kubernetes.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group and version of every Corral resource.
pub const API_GROUP: &str = "corral.dev";
pub const API_VERSION: &str = "corral.dev/v1alpha1";
/// The namespace a resource lands in when its metadata names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The part of Kubernetes' ObjectMeta that Corral reads and keeps. Server-populated fields are
/// accepted so that `kubectl get -o yaml` output validates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    /// A prefix the server completes into a unique name (PipelineRun only): submitting
    /// the same file again starts a new run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<jiff::Timestamp>,
}

impl ObjectMeta {
    pub fn named(name: &str) -> Self {
        ObjectMeta {
            name: name.to_string(),
            ..Default::default()
        }
    }

    pub fn namespace_or_default(&self) -> &str {
        self.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    }
}

/// A resource kind: its name, and whether it lives in a namespace.
pub trait Kind {
    const KIND: &'static str;
    const PLURAL: &'static str;
    const NAMESPACED: bool;
}

/// One Corral resource in Kubernetes object form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Object<Spec, Status = NoStatus> {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Spec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

impl<Spec: Kind, Status> Object<Spec, Status> {
    /// A new object of this kind with the current API version.
    pub fn new(name: &str, spec: Spec) -> Self {
        Object {
            api_version: API_VERSION.to_string(),
            kind: Spec::KIND.to_string(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

/// Status of kinds that have none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NoStatus {}
