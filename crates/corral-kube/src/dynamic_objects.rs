//! From objects as the API server returns them to corral-api's types (which the core reads),
//! without duplicating the spec types: Corral's CRDs are read as `DynamicObject`s and decoded
//! one by one, so that one undecodable object never hides the others.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde::de::DeserializeOwned;

use corral_api::{JobPriorityClassSpec, Kind, NodePoolSpec, QueueSpec, TrainingJobSpec};

/// The API resource of a Corral kind (group corral.dev, version v1alpha1).
pub fn api_resource<K: Kind>() -> ApiResource {
    let gvk = GroupVersionKind::gvk(
        corral_api::meta::API_GROUP,
        corral_api::crd::VERSION,
        K::KIND,
    );
    ApiResource::from_gvk_with_plural(&gvk, K::PLURAL)
}

pub fn training_jobs() -> ApiResource {
    api_resource::<TrainingJobSpec>()
}
pub fn queues() -> ApiResource {
    api_resource::<QueueSpec>()
}
pub fn node_pools() -> ApiResource {
    api_resource::<NodePoolSpec>()
}
pub fn job_priority_classes() -> ApiResource {
    api_resource::<JobPriorityClassSpec>()
}
/// The deprecated `PriorityClass` kind of corral.dev, still read for one release.
pub fn legacy_priority_classes() -> ApiResource {
    let gvk = GroupVersionKind::gvk(
        corral_api::meta::API_GROUP,
        corral_api::crd::VERSION,
        corral_api::job_priority_class::LEGACY_KIND,
    );
    ApiResource::from_gvk_with_plural(&gvk, corral_api::job_priority_class::LEGACY_PLURAL)
}

/// Decodes one object of a Corral kind; the error names the object and the field.
pub fn decode<T: DeserializeOwned>(obj: &DynamicObject) -> Result<T, String> {
    let name = format!(
        "{}/{}",
        obj.metadata.namespace.as_deref().unwrap_or(""),
        obj.metadata.name.as_deref().unwrap_or("")
    );
    let value = serde_json::to_value(obj).map_err(|e| format!("{name}: {e}"))?;
    serde_path_to_json(value).map_err(|e| format!("{name}: {e}"))
}

fn serde_path_to_json<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}
