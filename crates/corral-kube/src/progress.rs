//! Progress on Kubernetes: a replica reports its progress (the JSON of the embedded progress
//! file, `corral_api::progress::ProgressReport`) by `POST`ing it to the operator at
//! `CORRAL_PROGRESS_URL`, with the token Kubernetes projects into its pod at
//! `CORRAL_PROGRESS_TOKEN_FILE` (audience `corral`, bound to the pod, renewed by the
//! kubelet), as Kubeflow Trainer's progress server takes them. The pod needs no RBAC of its
//! own.
//!
//! The operator asks the API server who the token is (a TokenReview): a pod-bound
//! service-account token names its pod, and a report counts only for the replica that pod
//! is, in the token's namespace. The leader hands the reports to its next pass
//! ([`World::progress`](crate::World)), whose control plane records them as embedded
//! (`ControlPlane::observe_progress`: status, ETA, the rate elastic growth follows, a
//! checkpoint saved after a stop notice); a standby answers 503 and the replica's next
//! report goes to whichever replica its connection reaches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use corral_api::progress::ProgressReport;

use crate::consts::JOB_NAME_LABEL;

/// The audience of the tokens replicas report with: a token made for the API server (or
/// anything else) is not taken, and these are good for nothing else.
pub const AUDIENCE: &str = "corral";
/// Where a replica sends its reports.
pub const URL_ENV: &str = "CORRAL_PROGRESS_URL";
/// The file holding the replica's token (the kubelet renews it in place).
pub const TOKEN_FILE_ENV: &str = "CORRAL_PROGRESS_TOKEN_FILE";
/// Where the token is projected in every replica's main container.
pub const TOKEN_DIR: &str = "/var/run/secrets/corral.dev/progress";
pub const TOKEN_FILE: &str = "token";
/// How long a projected token lasts before the kubelet renews it.
pub const TOKEN_SECONDS: i64 = 3600;
/// A report is a few hundred bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The extra field a pod-bound service-account token carries its pod's name in.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";

/// One report, attributed.
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    /// The job's key (`namespace/name`).
    pub job: String,
    /// The replica (its pod's name, as embedded names it).
    pub replica: String,
    pub report: ProgressReport,
}

/// How long a token the API server vouched for is taken without asking it again: a replica
/// may report every batch, and a TokenReview per report would load the API server with the
/// replicas' reports. A report still counts only while its pod is a replica (the pod cache),
/// so a token that outlives its pod gains nothing.
pub const REVIEW_TTL: Duration = Duration::from_secs(60);
/// Tokens remembered at most (expired ones go first; past it, all).
const REVIEWS_KEPT: usize = 10_000;

/// Tokens the API server vouched for lately, by SHA-256 (the tokens themselves are not kept):
/// the pod each is bound to, and when it was asked.
#[derive(Default)]
struct Reviews(HashMap<[u8; 32], ((String, String), Instant)>);

impl Reviews {
    fn get(&self, key: &[u8; 32], now: Instant) -> Option<(String, String)> {
        self.0
            .get(key)
            .filter(|(_, at)| now.saturating_duration_since(*at) < REVIEW_TTL)
            .map(|(who, _)| who.clone())
    }

    fn put(&mut self, key: [u8; 32], who: (String, String), now: Instant) {
        if self.0.len() >= REVIEWS_KEPT {
            self.0
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < REVIEW_TTL);
            if self.0.len() >= REVIEWS_KEPT {
                self.0.clear();
            }
        }
        self.0.insert(key, (who, now));
    }
}

/// Reports taken and not yet handed to a pass, while this replica leads.
#[derive(Default)]
pub struct Inbox {
    state: Mutex<Option<Leading>>,
    reviews: Mutex<Reviews>,
}

struct Leading {
    pods: Store<Pod>,
    notify: Arc<Notify>,
    reports: Vec<Reported>,
}

/// Why a report is refused, as the HTTP answer says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Refusal {
            status,
            message: message.into(),
        }
    }
}

impl Inbox {
    /// This replica leads: reports are checked against `pods` and wake the pass loop.
    pub fn lead(&self, pods: Store<Pod>, notify: Arc<Notify>) {
        if let Ok(mut s) = self.state.lock() {
            *s = Some(Leading {
                pods,
                notify,
                reports: Vec::new(),
            });
        }
    }

    /// This replica no longer leads: what it held is dropped (the replicas report again).
    pub fn follow(&self) {
        if let Ok(mut s) = self.state.lock() {
            *s = None;
        }
    }

    /// The reports taken since the last pass.
    pub fn take(&self) -> Vec<Reported> {
        match self.state.lock() {
            Ok(mut s) => s
                .as_mut()
                .map(|l| std::mem::take(&mut l.reports))
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// The stop notice of pod `namespace/pod` ([`crate::stop_notice`]): `None` while it is
    /// not being stopped; refused for a pod that is not a replica of a job.
    fn notice(&self, namespace: &str, pod: &str) -> Result<Option<serde_json::Value>, Refusal> {
        let s = self
            .state
            .lock()
            .map_err(|_| Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "try again"))?;
        let Some(leading) = s.as_ref() else {
            return Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "this operator replica does not lead: ask again",
            ));
        };
        let found = leading
            .pods
            .get(&ObjectRef::<Pod>::new(pod).within(namespace))
            .filter(|p| crate::observe::label(&p.metadata, JOB_NAME_LABEL).is_some())
            .ok_or_else(|| {
                Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!("pod {namespace}/{pod} is not a replica of a Corral job"),
                )
            })?;
        Ok(crate::stop_notice::notice(&found))
    }

    /// Files a report from pod `namespace/pod`, if that pod is a replica of a job.
    fn file(&self, namespace: &str, pod: &str, report: ProgressReport) -> Result<(), Refusal> {
        let mut s = self
            .state
            .lock()
            .map_err(|_| Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "try again"))?;
        let Some(leading) = s.as_mut() else {
            return Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "this operator replica does not lead: report again",
            ));
        };
        let found = leading
            .pods
            .get(&ObjectRef::<Pod>::new(pod).within(namespace));
        let job = found
            .as_ref()
            .and_then(|p| crate::observe::label(&p.metadata, JOB_NAME_LABEL))
            .ok_or_else(|| {
                Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!("pod {namespace}/{pod} is not a replica of a Corral job"),
                )
            })?;
        leading.reports.push(Reported {
            job: format!("{namespace}/{job}"),
            replica: pod.to_string(),
            report,
        });
        leading.notify.notify_one();
        Ok(())
    }
}

/// The pod a token is bound to (`namespace`, `pod`), as the API server says.
pub async fn authenticate(client: &Client, token: &str) -> Result<(String, String), Refusal> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: Some(vec![AUDIENCE.to_string()]),
        },
        ..TokenReview::default()
    };
    let api: Api<TokenReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| {
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the API server did not review the token: {e}"),
            )
        })?;
    let status = answer.status.unwrap_or_default();
    let audiences = status.audiences.unwrap_or_default();
    if status.authenticated != Some(true) || !audiences.iter().any(|a| a == AUDIENCE) {
        return Err(Refusal::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "the token is not one for audience `{AUDIENCE}`{}",
                status.error.map(|e| format!(": {e}")).unwrap_or_default()
            ),
        ));
    }
    let user = status.user.unwrap_or_default();
    let namespace = user
        .username
        .as_deref()
        .and_then(|u| u.strip_prefix("system:serviceaccount:"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(ns, _)| ns.to_string());
    let pod = user
        .extra
        .as_ref()
        .and_then(|e| e.get(POD_NAME_EXTRA))
        .and_then(|v| v.first())
        .cloned();
    match (namespace, pod) {
        (Some(ns), Some(pod)) => Ok((ns, pod)),
        _ => Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "the token is not a service-account token bound to a pod (project one: \
             serviceAccountToken with audience `corral`)",
        )),
    }
}

/// The pod the bearer token of `headers` is bound to, as the API server said (asked at most
/// once a minute per token).
/// The token of an `Authorization: Bearer <token>` header, if one is sent.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

async fn sender(
    client: &Client,
    inbox: &Inbox,
    headers: &HeaderMap,
) -> Result<(String, String), Refusal> {
    let token = bearer(headers).ok_or_else(|| {
        Refusal::new(
            StatusCode::UNAUTHORIZED,
            format!("send `Authorization: Bearer <the token in ${TOKEN_FILE_ENV}>`"),
        )
    })?;
    let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let now = Instant::now();
    let known = inbox.reviews.lock().ok().and_then(|r| r.get(&key, now));
    match known {
        Some(who) => Ok(who),
        None => {
            let who = authenticate(client, token).await?;
            if let Ok(mut r) = inbox.reviews.lock() {
                r.put(key, who.clone(), now);
            }
            Ok(who)
        }
    }
}

/// `POST /progress`: a report from a replica, checked and filed for the next pass; the
/// answer is the replica's stop notice while it is being stopped.
pub async fn receive(
    client: &Client,
    inbox: &Inbox,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Option<serde_json::Value>, Refusal> {
    let (namespace, pod) = sender(client, inbox, headers).await?;
    if body.len() > MAX_BODY {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a report is at most {MAX_BODY} bytes"),
        ));
    }
    let report: ProgressReport = serde_json::from_slice(body).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("not a progress report (docs/progress.md): {e}"),
        )
    })?;
    inbox.file(&namespace, &pod, report)?;
    inbox.notice(&namespace, &pod)
}

/// The `/progress` route of the operator's HTTP listener: `POST` a report, `GET` the
/// stop notice.
pub fn routes(client: Client, inbox: Arc<Inbox>) -> axum::Router {
    let (c, i) = (client.clone(), inbox.clone());
    let post = axum::routing::post(move |headers: HeaderMap, body: Bytes| {
        let (client, inbox) = (c.clone(), i.clone());
        async move {
            match receive(&client, &inbox, &headers, &body).await {
                Ok(None) => (StatusCode::ACCEPTED, String::new()),
                Ok(Some(notice)) => (StatusCode::ACCEPTED, notice.to_string() + "\n"),
                Err(r) => {
                    tracing::debug!(status = %r.status, "progress report refused: {}", r.message);
                    (r.status, r.message + "\n")
                }
            }
        }
    });
    let get = axum::routing::get(move |headers: HeaderMap| {
        let (client, inbox) = (client.clone(), inbox.clone());
        async move {
            let answer = match sender(&client, &inbox, &headers).await {
                Ok((ns, pod)) => inbox.notice(&ns, &pod),
                Err(r) => Err(r),
            };
            match answer {
                Ok(Some(notice)) => (StatusCode::OK, notice.to_string() + "\n"),
                Ok(None) => (StatusCode::NO_CONTENT, String::new()),
                Err(r) => (r.status, r.message + "\n"),
            }
        }
    });
    axum::Router::new().route("/progress", post.merge(get))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn store(pods: Vec<serde_json::Value>) -> Store<Pod> {
        let mut w = Writer::<Pod>::default();
        w.apply_watcher_event(&Event::Init);
        for p in pods {
            w.apply_watcher_event(&Event::InitApply(serde_json::from_value(p).expect("pod")));
        }
        w.apply_watcher_event(&Event::InitDone);
        w.as_reader()
    }

    #[test]
    fn a_report_counts_for_the_replica_its_pod_is_and_only_while_leading() {
        let inbox = Inbox::default();
        let report = ProgressReport {
            step: 7,
            ..ProgressReport::default()
        };
        let refused = inbox.file("ml", "ddp-worker-0", report.clone());
        assert_eq!(
            refused.map_err(|r| r.status),
            Err(StatusCode::SERVICE_UNAVAILABLE)
        );
        let pods = store(vec![
            json!({"metadata": {"name": "ddp-worker-0", "namespace": "ml",
                                "labels": {JOB_NAME_LABEL: "ddp"}}}),
            json!({"metadata": {"name": "web-0", "namespace": "ml"}}),
        ]);
        inbox.lead(pods, Arc::new(Notify::new()));
        inbox
            .file("ml", "ddp-worker-0", report.clone())
            .expect("taken");
        // Another namespace's pod of that name, or a pod of no job: not a replica.
        let other = inbox.file("other", "ddp-worker-0", report.clone());
        assert_eq!(other.map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
        let web = inbox.file("ml", "web-0", report.clone());
        assert_eq!(web.map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
        assert_eq!(
            inbox.take(),
            vec![Reported {
                job: "ml/ddp".into(),
                replica: "ddp-worker-0".into(),
                report,
            }]
        );
        assert!(inbox.take().is_empty(), "handed over once");
        inbox.follow();
        assert!(
            inbox
                .file("ml", "ddp-worker-0", ProgressReport::default())
                .is_err()
        );
    }

    #[test]
    fn a_vouched_token_is_taken_for_a_minute_without_asking_again() {
        let mut r = Reviews::default();
        let t0 = Instant::now();
        let who = ("ml".to_string(), "ddp-worker-0".to_string());
        r.put([1; 32], who.clone(), t0);
        assert_eq!(
            r.get(&[1; 32], t0 + Duration::from_secs(59)),
            Some(who.clone())
        );
        assert_eq!(
            r.get(&[1; 32], t0 + REVIEW_TTL),
            None,
            "asked again after a minute"
        );
        assert_eq!(r.get(&[2; 32], t0), None, "another token");
        // Bounded: at the limit, the expired go first; if none has, all go.
        let fill = |r: &mut Reviews, at: Instant| {
            *r = Reviews::default();
            for i in 0..REVIEWS_KEPT {
                let mut k = [0u8; 32];
                k[..8].copy_from_slice(&(i as u64).to_le_bytes());
                r.put(k, who.clone(), at);
            }
            assert_eq!(r.0.len(), REVIEWS_KEPT);
        };
        fill(&mut r, t0);
        r.put([3; 32], who.clone(), t0 + REVIEW_TTL);
        assert_eq!(r.0.len(), 1, "all expired: only the new one");
        fill(&mut r, t0);
        r.put([3; 32], who.clone(), t0);
        assert_eq!(r.0.len(), 1, "none expired: cleared, then the new one");
        assert_eq!(r.get(&[3; 32], t0), Some(who));
    }

    #[test]
    fn replicas_are_told_where_to_report_with_a_token_bound_to_their_pod() {
        use corral_core::lifecycle::{Incarnation, ReplicaId};
        use corral_core::sched::ReplicaPlacement;
        let job: corral_api::TrainingJob = serde_json::from_value(json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "j", "namespace": "ml", "uid": "u1"},
            "spec": {"framework": "generic", "replicas": {"worker": {"count": 1,
                     "template": {"image": "busybox", "command": ["true"]}}}},
        }))
        .expect("job");
        let replica = ReplicaId::new(corral_api::training_job::Role::Worker, 0);
        let placement = ReplicaPlacement {
            role: "worker".into(),
            index: 0,
            node: "n1".into(),
            gpu_indices: Vec::new(),
        };
        let build = |opts| {
            let pod =
                crate::build::build_pod(&job, replica, Incarnation::default(), &placement, &opts)
                    .expect("pod");
            serde_json::to_value(pod).expect("json")
        };
        let without = build(crate::build::BuildOptions::default());
        assert!(without.to_string().find("CORRAL_PROGRESS_URL").is_none());
        let with = build(crate::build::BuildOptions {
            progress_url: Some("http://op:8080/progress".into()),
            ..Default::default()
        });
        let env = &with["spec"]["containers"][0]["env"];
        let var = |n: &str| {
            env.as_array()
                .and_then(|e| e.iter().find(|v| v["name"] == n))
                .map(|v| v["value"].clone())
        };
        assert_eq!(var(URL_ENV), Some(json!("http://op:8080/progress")));
        assert_eq!(
            var(TOKEN_FILE_ENV),
            Some(json!(format!("{TOKEN_DIR}/{TOKEN_FILE}")))
        );
        let volume = &with["spec"]["volumes"][0];
        let source = &volume["projected"]["sources"][0]["serviceAccountToken"];
        assert_eq!(source["audience"], json!(AUDIENCE));
        assert_eq!(source["path"], json!(TOKEN_FILE));
        let mount = &with["spec"]["containers"][0]["volumeMounts"][0];
        assert_eq!(mount["name"], volume["name"]);
        assert_eq!(mount["mountPath"], json!(TOKEN_DIR));
        assert_eq!(mount["readOnly"], json!(true));
    }
}
