//! Apply: carries out a [`Plan`] against the API server, job by job, in an order that
//! survives a crash between any two calls:
//! 1. the admission annotation (the durable decision, with a resourceVersion precondition);
//! 2. the status (server-side apply, field manager `corral`, resourceVersion precondition:
//!    a status computed from a stale view is rejected, and nothing else is done for the
//!    job until the next pass);
//! 3. the launch ConfigMap and the headless Service (server-side apply);
//! 4. the pods (create: a name still held by another incarnation is never taken over);
//! 5. the Bindings of the gang;
//! 6. deletions, each with its grace period and a UID precondition;
//! 7. the job itself after its TTL; then events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Binding, ConfigMap, ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Error};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::consts::*;
use crate::convert;
use crate::plan::{AdmissionChange, JobPlan, Plan};

/// A token bucket bounding the operator's writes to the API server (`--api-qps`,
/// `--api-burst`), as client-go's rate limiter does.
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Mutex<(f64, Instant)>>,
    qps: f64,
    burst: f64,
}

impl RateLimiter {
    /// `qps <= 0` means unlimited.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            inner: Arc::new(Mutex::new((burst, Instant::now()))),
            qps,
            burst,
        }
    }

    pub fn unlimited() -> Self {
        Self::new(0.0, 1)
    }

    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let wait = {
            let mut g = self.inner.lock().await;
            let now = Instant::now();
            let refill = now.duration_since(g.1).as_secs_f64() * self.qps;
            g.0 = (g.0 + refill).min(self.burst);
            g.1 = now;
            g.0 -= 1.0;
            if g.0 >= 0.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(-g.0 / self.qps)
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// What one apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub pods_created: u64,
    pub pods_bound: u64,
    pub pods_deleted: u64,
    pub status_updates: u64,
    pub events: u64,
    /// Calls that failed, in words (the next pass retries; nothing here is fatal).
    pub errors: Vec<String>,
}

fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Applies with the client; events go through `recorder` when given.
pub struct Applier {
    pub client: Client,
    pub recorder: Option<Recorder>,
    pub limiter: RateLimiter,
}

impl Applier {
    pub fn new(client: Client, recorder: Option<Recorder>, limiter: RateLimiter) -> Self {
        Applier {
            client,
            recorder,
            limiter,
        }
    }

    pub async fn apply(&self, plan: &Plan) -> ApplyReport {
        let mut report = ApplyReport::default();
        for jp in &plan.jobs {
            if jp.is_empty() {
                continue;
            }
            if let Err(e) = self.apply_job(jp, &mut report).await {
                report
                    .errors
                    .push(format!("{}/{}: {e}", jp.namespace, jp.name));
            }
            self.publish_events(jp, &mut report).await;
        }
        report
    }

    async fn apply_job(&self, jp: &JobPlan, report: &mut ApplyReport) -> Result<(), Error> {
        let jobs: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &jp.namespace,
            &convert::training_jobs(),
        );
        let mut rv = jp.resource_version.clone();

        // 1. The admission: the decision is durable before anything acts on it.
        let annotation = match &jp.admission {
            AdmissionChange::Keep => None,
            AdmissionChange::Set(a) => Some(Value::String(a.to_text().map_err(Error::SerdeError)?)),
            AdmissionChange::Clear => Some(Value::Null),
        };
        if let Some(value) = annotation {
            let mut meta = json!({"annotations": {ADMISSION_ANNOTATION: value}});
            if let Some(rv) = &rv {
                meta["resourceVersion"] = json!(rv);
            }
            self.limiter.acquire().await;
            let patched = jobs
                .patch(
                    &jp.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": meta})),
                )
                .await?;
            rv = patched.metadata.resource_version.clone();
        }

        // 2. The status, on top of exactly what was observed.
        if let Some(status) = &jp.status {
            let mut meta = json!({"name": jp.name, "namespace": jp.namespace});
            if let Some(rv) = &rv {
                meta["resourceVersion"] = json!(rv);
            }
            let body = json!({
                "apiVersion": corral_api::API_VERSION,
                "kind": "TrainingJob",
                "metadata": meta,
                "status": status,
            });
            self.limiter.acquire().await;
            jobs.patch_status(
                &jp.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await?;
            report.status_updates += 1;
        }

        // 3. Launch files and the headless Service.
        let ssa = PatchParams::apply(FIELD_MANAGER).force();
        if let Some(cm) = &jp.config_map {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &jp.namespace);
            let name = cm.metadata.name.clone().unwrap_or_default();
            self.limiter.acquire().await;
            api.patch(
                &name,
                &ssa,
                &Patch::Apply(with_type(cm, "v1", "ConfigMap")?),
            )
            .await?;
        }
        if let Some(svc) = &jp.service {
            let api: Api<Service> = Api::namespaced(self.client.clone(), &jp.namespace);
            let name = svc.metadata.name.clone().unwrap_or_default();
            self.limiter.acquire().await;
            api.patch(&name, &ssa, &Patch::Apply(with_type(svc, "v1", "Service")?))
                .await?;
        }

        // 4. Pods. A name that exists already belongs to some incarnation; never take it
        // over: the next pass sees which one it is.
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &jp.namespace);
        let mut all_created = true;
        for pod in &jp.create {
            self.limiter.acquire().await;
            match pods
                .create(
                    &PostParams {
                        dry_run: false,
                        field_manager: Some(FIELD_MANAGER.into()),
                    },
                    pod,
                )
                .await
            {
                Ok(_) => report.pods_created += 1,
                Err(e) if code(&e) == Some(409) => {
                    all_created = false;
                }
                Err(e) => return Err(e),
            }
        }

        // 5. Bindings: the gang is bound only if all of its pods exist.
        if all_created {
            for b in &jp.bind {
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(b.pod.clone()),
                        namespace: Some(jp.namespace.clone()),
                        ..Default::default()
                    },
                    target: ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(b.node.clone()),
                        ..Default::default()
                    },
                };
                self.limiter.acquire().await;
                let r: Result<Value, Error> = pods
                    .create_subresource("binding", &b.pod, &PostParams::default(), &binding)
                    .await;
                match r {
                    Ok(_) => report.pods_bound += 1,
                    // Already bound (a pass before a restart did it).
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => return Err(e),
                }
            }
        }

        // 6. Deletions with the grace period, only of the very pod observed.
        for d in &jp.delete {
            let dp = DeleteParams {
                grace_period_seconds: Some(u32::try_from(d.grace.as_secs()).unwrap_or(u32::MAX)),
                preconditions: d.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            self.limiter.acquire().await;
            match pods.delete(&d.name, &dp).await {
                Ok(_) => report.pods_deleted += 1,
                Err(e) if matches!(code(&e), Some(404 | 409)) => {}
                Err(e) => return Err(e),
            }
        }

        // 7. The job after ttlSecondsAfterFinished (its pods and Service go with it).
        if jp.delete_job {
            self.limiter.acquire().await;
            match jobs.delete(&jp.name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn publish_events(&self, jp: &JobPlan, report: &mut ApplyReport) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let reference = ObjectReference {
            api_version: Some(corral_api::API_VERSION.to_string()),
            kind: Some("TrainingJob".into()),
            name: Some(jp.name.clone()),
            namespace: Some(jp.namespace.clone()),
            uid: jp.uid.clone(),
            resource_version: None,
            field_path: None,
        };
        for e in &jp.events {
            let ev = Event {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.clone(),
                note: Some(truncate(&e.note, 1000)),
                action: e.reason.clone(),
                secondary: None,
            };
            self.limiter.acquire().await;
            match recorder.publish(&ev, &reference).await {
                Ok(()) => report.events += 1,
                Err(err) => report.errors.push(format!(
                    "{}/{}: event {}: {err}",
                    jp.namespace, jp.name, e.reason
                )),
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// A typed object as an apply body (apiVersion and kind are required there).
fn with_type<T: serde::Serialize>(obj: &T, api_version: &str, kind: &str) -> Result<Value, Error> {
    let mut v = serde_json::to_value(obj).map_err(Error::SerdeError)?;
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}
