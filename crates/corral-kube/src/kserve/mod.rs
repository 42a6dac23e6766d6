//! KServe's `InferenceService` (serving.kserve.io/v1beta1) on Kubernetes, served by Corral
//! (`corral operator --kserve`), as Kubeflow's job kinds are in serve mode: each one with a
//! custom-container predictor becomes a ServedModel of the same name that it owns
//! (`corral_api::kserve::convert`, the converter `corral submit` and `corral convert` use),
//! and gets that model's status back in KServe's format ([`status`]): `url`, the
//! `PredictorReady`/`IngressReady`/`Ready` conditions, the predictor's revisions and traffic,
//! so that `kubectl get isvc` and KServe's SDK keep reading it. One that Corral cannot serve
//! (a model-format predictor, a transformer, a bad field) gets `Ready: False` with reason
//! `InvalidSpec` and the converter's words, and no model; a ServedModel it made earlier is
//! left serving (KServe keeps the last good revision too).
//!
//! The plan is pure ([`plan`]) over what the API server holds; [`watch`] carries it out.
//! Whether a model is ready, its revisions and its split are the control plane's
//! decisions, read from the ServedModel's status; this module only converts and copies.

pub mod crds;
pub mod status;
pub mod watch;

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use corral_api::ServedModel;

use crate::kubeflow::QUEUE_LABEL;

pub const GROUP: &str = "serving.kserve.io";
pub const VERSION: &str = "v1beta1";
pub const KIND: &str = "InferenceService";
pub const PLURAL: &str = "inferenceservices";
/// On a ServedModel made from an InferenceService: `InferenceService/<uid>` of it.
pub const SOURCE_ANNOTATION: &str = "corral.dev/kserve-source";
/// Field manager of the writes this module makes.
pub const FIELD_MANAGER: &str = "corral-kserve";

pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// One InferenceService as the API server returned it.
#[derive(Clone, Debug)]
pub struct InferenceService {
    pub raw: Value,
}

impl InferenceService {
    fn meta(&self, field: &str) -> Option<&str> {
        self.raw.get("metadata")?.get(field)?.as_str()
    }
    pub fn name(&self) -> &str {
        self.meta("name").unwrap_or("")
    }
    pub fn namespace(&self) -> &str {
        self.meta("namespace").unwrap_or("default")
    }
    pub fn uid(&self) -> &str {
        self.meta("uid").unwrap_or("")
    }
    pub fn generation(&self) -> Option<i64> {
        self.raw.pointer("/metadata/generation")?.as_i64()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.raw.get("metadata")?.get("labels")?.get(key)?.as_str()
    }
    pub fn deleting(&self) -> bool {
        self.raw
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
    }
    /// `InferenceService/<uid>`: what [`SOURCE_ANNOTATION`] says of a model made from it.
    pub fn source(&self) -> String {
        format!("{KIND}/{}", self.uid())
    }
    pub fn owner_reference(&self) -> Value {
        crate::owners::controller(&api_version(), KIND, self.name(), self.uid())
    }
    pub fn status(&self) -> Option<&Value> {
        self.raw.get("status")
    }
}

/// A write the plan asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum KserveAction {
    /// Server-side apply of the ServedModel an InferenceService stands for.
    ApplyModel {
        namespace: String,
        name: String,
        body: Value,
    },
    /// The InferenceService's status (a merge patch of its status subresource).
    WriteStatus {
        namespace: String,
        name: String,
        status: Value,
    },
}

/// The ServedModel an InferenceService converts into (in its namespace, its queue from the
/// `corral.dev/queue` label unless it names none), or the converter's errors in words.
pub fn convert(isvc: &InferenceService) -> Result<ServedModel, String> {
    let (mut model, _warnings) =
        corral_api::kserve::convert_with_warnings(&isvc.raw).map_err(|e| e.to_string())?;
    model.metadata.namespace = Some(isvc.namespace().to_string());
    if model.spec.queue.is_none() {
        model.spec.queue = isvc.label(QUEUE_LABEL).map(str::to_string);
    }
    model
        .metadata
        .annotations
        .insert(SOURCE_ANNOTATION.into(), isvc.source());
    Ok(model)
}

/// The server-side apply body of the owned ServedModel.
pub fn model_body(isvc: &InferenceService, model: &ServedModel) -> Value {
    json!({
        "apiVersion": corral_api::API_VERSION,
        "kind": "ServedModel",
        "metadata": {
            "name": isvc.name(),
            "namespace": isvc.namespace(),
            "labels": model.metadata.labels,
            "annotations": model.metadata.annotations,
            "ownerReferences": [isvc.owner_reference()],
        },
        "spec": model.spec,
    })
}

/// What an InferenceService is, as far as its status goes.
#[derive(Clone, Copy, Debug)]
pub enum Served<'a> {
    /// Its ServedModel, as the control plane left it in this pass.
    Model(&'a ServedModel),
    /// Converted; its ServedModel is being made.
    Pending,
    /// Not served, and why (`reason`, words).
    Refused(&'a str, &'a str),
}

/// The writes that make every InferenceService's ServedModel what it says, and its status
/// what that model's is. `models`: the ServedModels with their status as decided now.
pub fn plan(
    isvcs: &[InferenceService],
    models: &[Arc<ServedModel>],
    now: Timestamp,
) -> Vec<KserveAction> {
    let mut actions = Vec::new();
    for isvc in isvcs.iter().filter(|i| !i.deleting()) {
        let (ns, name) = (isvc.namespace(), isvc.name());
        let existing = models
            .iter()
            .find(|m| m.metadata.name == name && m.metadata.namespace.as_deref() == Some(ns));
        let made_here = existing
            .is_some_and(|m| m.metadata.annotations.get(SOURCE_ANNOTATION) == Some(&isvc.source()));
        let conflict;
        let invalid;
        let served = match convert(isvc) {
            Err(e) => {
                invalid = e;
                Served::Refused("InvalidSpec", &invalid)
            }
            Ok(_) if existing.is_some() && !made_here => {
                conflict = format!(
                    "a ServedModel `{name}` that this InferenceService did not make exists in \
                     namespace `{ns}`: delete it or rename one of them"
                );
                Served::Refused("Conflict", &conflict)
            }
            Ok(model) => {
                let current = existing.filter(|m| {
                    m.spec == model.spec && m.metadata.annotations == model.metadata.annotations
                });
                if current.is_none() {
                    actions.push(KserveAction::ApplyModel {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        body: model_body(isvc, &model),
                    });
                }
                match existing {
                    Some(m) => Served::Model(m),
                    None => Served::Pending,
                }
            }
        };
        let status = status::kserve_status(isvc, served, now);
        if !status::same_status(isvc.status(), &status) {
            actions.push(KserveAction::WriteStatus {
                namespace: ns.to_string(),
                name: name.to_string(),
                status,
            });
        }
    }
    actions
}

#[cfg(test)]
mod tests;
