//! From objects as the API server returns them to corral-api's types (which the core reads),
//! without duplicating the spec types: Corral's CRDs are read as `DynamicObject`s and decoded
//! one by one, so that one undecodable object never hides the others.

use std::sync::Arc;

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
pub fn pipeline_runs() -> ApiResource {
    api_resource::<corral_api::pipeline::PipelineRunSpec>()
}
pub fn pipelines() -> ApiResource {
    api_resource::<corral_api::pipeline::PipelineSpec>()
}
pub fn served_models() -> ApiResource {
    api_resource::<corral_api::served_model::ServedModelSpec>()
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

/// Objects of one kind decoded once per resourceVersion (by uid), and shared with the passes
/// (`Arc`): a pass reads every stored object, and decoding each again (to JSON and back) was
/// most of an idle pass's time with 2,000 finished jobs stored, copying each most of the
/// rest. An object that does not decode is decoded again next time.
pub struct Decoded<T>(std::sync::Mutex<std::collections::HashMap<String, (String, Arc<T>)>>);

impl<T> Default for Decoded<T> {
    fn default() -> Self {
        Decoded(Default::default())
    }
}

impl<T: DeserializeOwned> Decoded<T> {
    /// Every object decoded (from the cache where its version is unchanged); the errors of
    /// those that do not decode go to `warnings`. Objects gone are forgotten.
    pub fn decode_all(
        &self,
        objs: &[Arc<DynamicObject>],
        warnings: &mut Vec<String>,
    ) -> Vec<Arc<T>> {
        let mut fresh = std::collections::HashMap::with_capacity(objs.len());
        let mut out = Vec::with_capacity(objs.len());
        let mut cache = self
            .0
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default();
        for o in objs {
            let key = o.metadata.uid.clone();
            let version = o.metadata.resource_version.clone();
            let cached = key.as_ref().and_then(|k| cache.remove(k));
            let value = match (cached, &version) {
                (Some((v, value)), Some(now)) if &v == now => value,
                _ => match decode::<T>(o) {
                    Ok(value) => Arc::new(value),
                    Err(e) => {
                        warnings.push(e);
                        continue;
                    }
                },
            };
            if let (Some(k), Some(v)) = (key, version) {
                fresh.insert(k, (v, value.clone()));
            }
            out.push(value);
        }
        if let Ok(mut c) = self.0.lock() {
            *c = fresh;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(uid: &str, version: &str, image: &str) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": uid, "namespace": "ml", "uid": uid, "resourceVersion": version},
                "spec": {"framework": "pytorch", "replicas": {"master": {"count": 1,
                    "resources": {"cpu": "1"}, "template": {"image": image}}}}
            }))
            .expect("object"),
        )
    }

    /// A new version is decoded again; an unchanged one is the cached value; an object that
    /// does not decode is reported every time and never cached.
    #[test]
    fn decoded_once_per_version() {
        let cache = Decoded::<corral_api::TrainingJob>::default();
        let mut w = Vec::new();
        let bad = Arc::new(
            serde_json::from_value::<DynamicObject>(serde_json::json!({
                "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": "bad", "namespace": "ml", "uid": "bad", "resourceVersion": "1"},
                "spec": {"framework": 7}
            }))
            .expect("object"),
        );
        let first = cache.decode_all(&[job("a", "1", "x:1"), bad.clone()], &mut w);
        assert_eq!(first.len(), 1);
        assert_eq!(w.len(), 1, "{w:?}");
        let image = |j: &corral_api::TrainingJob| {
            j.spec
                .replicas
                .values()
                .next()
                .and_then(|r| r.template.image.clone())
        };
        let again = cache.decode_all(&[job("a", "1", "x:1"), bad], &mut w);
        assert_eq!(again.len(), 1);
        assert_eq!(w.len(), 2, "an undecodable object is reported again");
        let changed = cache.decode_all(&[job("a", "2", "x:2")], &mut w);
        assert_eq!(image(&changed[0]).as_deref(), Some("x:2"));
        assert_eq!(
            cache.0.lock().map(|c| c.len()).unwrap_or(0),
            1,
            "gone: forgotten"
        );
    }
}
