//! A stored Pipeline's versions on Kubernetes, which keeps only an object's current spec:
//! each version (`metadata.generation`) the operator sees is kept as a ControllerRevision
//! (apps/v1, as StatefulSets keep theirs) `<pipeline>-g<generation>`, owned by the Pipeline
//! (deleted with it), holding the Pipeline as it was. A run naming an older generation
//! (`spec.pipelineRef.generation`) gets its copy from there, as `corral up` keeps every
//! version. A version changed and changed again between two passes is not seen, and not
//! kept.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::json;

use corral_api::pipeline::Pipeline;

use crate::observe::label;

/// Label of a Pipeline's kept versions; its value is the Pipeline's name.
pub const PIPELINE_LABEL: &str = "corral.dev/pipeline";

/// The name of a Pipeline's kept version.
pub fn version_name(pipeline: &str, generation: i64) -> String {
    format!("{pipeline}-g{generation}")
}

/// The versions kept of the namespace's Pipelines, each as the Pipeline it was (its
/// generation the revision's), leaving out those of a Pipeline of the name deleted since
/// (another owner) and those the current ones are.
pub fn kept_in(
    namespace: &str,
    current: &[Arc<Pipeline>],
    kept: &[Arc<ControllerRevision>],
) -> Vec<Pipeline> {
    kept.iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|r| {
            let name = label(&r.metadata, PIPELINE_LABEL)?;
            let owner = current.iter().find(|p| {
                p.metadata.namespace_or_default() == namespace && p.metadata.name == name
            })?;
            let uid = owner.metadata.uid.as_deref()?;
            let owned = r
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid);
            if !owned || owner.metadata.generation == Some(r.revision) {
                return None;
            }
            let mut p: Pipeline = serde_json::from_value(r.data.as_ref()?.0.clone()).ok()?;
            p.metadata.generation = Some(r.revision);
            Some(p)
        })
        .collect()
}

/// The ControllerRevisions to make: one for each Pipeline's current version not kept yet.
pub fn to_keep(
    current: &[Arc<Pipeline>],
    kept: &[Arc<ControllerRevision>],
) -> Vec<(String, ControllerRevision)> {
    let mut out = Vec::new();
    for p in current {
        let (Some(generation), Some(uid)) = (p.metadata.generation, p.metadata.uid.as_deref())
        else {
            continue;
        };
        let ns = p.metadata.namespace_or_default();
        let name = version_name(&p.metadata.name, generation);
        let there = kept.iter().any(|r| {
            r.metadata.namespace.as_deref() == Some(ns) && r.metadata.name.as_deref() == Some(&name)
        });
        if there {
            continue;
        }
        let data = json!({
            "apiVersion": corral_api::API_VERSION,
            "kind": "Pipeline",
            "metadata": {"name": p.metadata.name, "namespace": ns, "generation": generation},
            "spec": p.spec,
        });
        let revision = json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {PIPELINE_LABEL: p.metadata.name},
                "ownerReferences": [crate::owners::controller(
                    corral_api::API_VERSION,
                    "Pipeline",
                    &p.metadata.name,
                    uid,
                )],
            },
            "revision": generation,
            "data": data,
        });
        if let Ok(r) = serde_json::from_value(revision) {
            out.push((ns.to_string(), r));
        }
    }
    out
}
