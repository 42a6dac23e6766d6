//! What the dashboard does beyond reading, on the operator: a replica's live log (its pod's,
//! from the API server), and suspend, resume and delete. Each is done only where the
//! caller may do it itself (a SubjectAccessReview of the same verb on the job's
//! TrainingJobs, `get pods/log` for a log), then with the operator's rights: the caller's
//! RBAC is the wall, as `kubectl` would meet it, and the API server's audit log names the
//! operator.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, LogParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::json;

use super::access::{Refusal, Target};
use super::{ReadApi, answer, not_found};
use crate::consts::JOB_NAME_LABEL;

/// `?replica=<job>-<role>-<index>&follow=true&tail=200`, as embedded.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LogQuery {
    replica: Option<String>,
    follow: Option<bool>,
    tail: Option<i64>,
}

pub(super) async fn logs(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<LogQuery>,
) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        api.access.check(&caller, &namespace).await?;
        api.access
            .check_verb(&caller, "get", Target::PodLogs, &namespace)
            .await?;
        let snap = api.snapshot()?;
        snap.job(&namespace, &name)
            .ok_or_else(|| not_found(&namespace, &name))?;
        let replica = q.replica.clone().unwrap_or_default();
        let pod = snap
            .world
            .pods
            .iter()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(namespace.as_str())
                    && p.metadata.name.as_deref() == Some(replica.as_str())
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(JOB_NAME_LABEL))
                        == Some(&name)
            })
            .ok_or_else(|| {
                Refusal::new(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!(
                        "job {name} has no replica `{replica}` now (`corral describe {name}` \
                         lists its replicas)"
                    ),
                )
            })?;
        // The replica's own container: the first (sidecars come after it).
        let container = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone());
        let params = LogParams {
            container,
            follow: q.follow.unwrap_or(false),
            tail_lines: Some(q.tail.unwrap_or(200).clamp(1, 100_000)),
            ..LogParams::default()
        };
        let pods: Api<Pod> = Api::namespaced(api.client.clone(), &namespace);
        let reader = pods.log_stream(&replica, &params).await.map_err(|e| {
            Refusal::new(
                StatusCode::BAD_GATEWAY,
                "Unavailable",
                format!("the API server gave no log of {replica}: {e}"),
            )
        })?;
        let lines = reader.lines().map(|l| {
            l.map(|mut s| {
                s.push('\n');
                Bytes::from(s)
            })
        });
        Ok((
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            Body::from_stream(lines),
        )
            .into_response())
    })
    .await
}

/// Suspend, resume or delete a job, as the caller may.
async fn change(
    api: Arc<ReadApi>,
    headers: HeaderMap,
    namespace: String,
    name: String,
    action: &'static str,
) -> Response {
    answer(async move {
        let caller = api.caller(&headers).await?;
        let verb = if action == "deleted" {
            "delete"
        } else {
            "patch"
        };
        api.access
            .check_verb(&caller, verb, Target::TrainingJobs, &namespace)
            .await?;
        let jobs: Api<DynamicObject> = Api::namespaced_with(
            api.client.clone(),
            &namespace,
            &crate::dynamic_objects::training_jobs(),
        );
        let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
        let changed = match action {
            "deleted" => match jobs.delete(&name, &DeleteParams::default()).await {
                Ok(_) => true,
                Err(e) if gone(&e) => return Err(not_found(&namespace, &name)),
                Err(e) => return Err(failed(&name, e)),
            },
            _ => {
                let suspend = action == "suspended";
                let before = jobs.get(&name).await.map_err(|e| {
                    if gone(&e) {
                        not_found(&namespace, &name)
                    } else {
                        failed(&name, e)
                    }
                })?;
                let was = before.data["spec"]["runPolicy"]["suspend"].as_bool() == Some(true);
                let patch = json!({"spec": {"runPolicy": {"suspend": suspend}}});
                jobs.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(|e| failed(&name, e))?;
                was != suspend
            }
        };
        Ok(axum::Json(json!({
            "namespace": namespace,
            "name": name,
            "result": action,
            "changed": changed,
        }))
        .into_response())
    })
    .await
}

fn failed(name: &str, e: kube::Error) -> Refusal {
    match e {
        kube::Error::Api(s) => Refusal::new(
            StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_GATEWAY),
            "Refused",
            format!("the API server refused the change of {name}: {}", s.message),
        ),
        other => Refusal::new(
            StatusCode::BAD_GATEWAY,
            "Unavailable",
            format!("the API server did not answer the change of {name}: {other}"),
        ),
    }
}

pub(super) async fn suspend(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    change(api, headers, namespace, name, "suspended").await
}

pub(super) async fn resume(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    change(api, headers, namespace, name, "resumed").await
}

pub(super) async fn delete(
    State(api): State<Arc<ReadApi>>,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    change(api, headers, namespace, name, "deleted").await
}
