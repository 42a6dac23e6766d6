//! Who may read what through the operator's read API: Kubernetes' own answer. A caller
//! sends a bearer token the API server knows (`kubectl create token`, an OIDC token, a
//! service account's); a TokenReview says who it is, and SubjectAccessReviews say which
//! namespaces' TrainingJobs that user may `list`, as `kubectl get trainingjobs` would be
//! allowed. The wall between tenants is the cluster's RBAC; the read API never widens it.
//! Answers are kept a minute (by the token's SHA-256), so that a dashboard polling does not
//! load the API server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

/// How long an answer of the API server is taken without asking again.
pub const ANSWER_TTL: Duration = Duration::from_secs(60);
/// Answers kept at most (expired ones go first; past it, all).
const ANSWERS_KEPT: usize = 10_000;

/// A refusal, with the status and the words the caller gets.
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            message: message.into(),
        }
    }
}

/// The user a token stands for.
#[derive(Clone, Debug)]
pub struct Caller {
    pub token: [u8; 32],
    pub user: UserInfo,
}

impl Caller {
    pub fn name(&self) -> &str {
        self.user.username.as_deref().unwrap_or_default()
    }
}

#[derive(Default)]
struct Answers {
    users: HashMap<[u8; 32], (UserInfo, Instant)>,
    /// (token, `<verb> <resource>/<subresource> <namespace>`; no namespace for every one)
    /// -> may do that there.
    lists: HashMap<([u8; 32], String), (bool, Instant)>,
}

fn fresh<T: Clone>(v: Option<&(T, Instant)>, now: Instant) -> Option<T> {
    v.filter(|(_, at)| now.saturating_duration_since(*at) < ANSWER_TTL)
        .map(|(v, _)| v.clone())
}

fn bound<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, (V, Instant)>, now: Instant) {
    if map.len() >= ANSWERS_KEPT {
        map.retain(|_, (_, at)| now.saturating_duration_since(*at) < ANSWER_TTL);
        if map.len() >= ANSWERS_KEPT {
            map.clear();
        }
    }
}

/// What a caller asks to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    TrainingJobs,
    PodLogs,
    /// A request to a served model through the router (as `services/proxy` is to a
    /// Service).
    ServedModelProxy,
}

impl Target {
    /// API group, resource, subresource.
    fn parts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Target::TrainingJobs => (corral_api::meta::API_GROUP, "trainingjobs", ""),
            Target::PodLogs => ("", "pods", "log"),
            Target::ServedModelProxy => (corral_api::meta::API_GROUP, "servedmodels", "proxy"),
        }
    }

    fn words(self) -> &'static str {
        match self {
            Target::TrainingJobs => "trainingjobs.corral.dev",
            Target::PodLogs => "pods/log",
            Target::ServedModelProxy => "servedmodels.corral.dev/proxy",
        }
    }
}

/// Asks the API server, and remembers its answers a minute.
pub struct Access {
    client: Client,
    answers: Mutex<Answers>,
}

impl Access {
    pub fn new(client: Client) -> Self {
        Access {
            client,
            answers: Mutex::new(Answers::default()),
        }
    }

    /// Who sends `token` (the request's bearer token, if any).
    pub async fn caller(&self, token: Option<&str>) -> Result<Caller, Refusal> {
        let token = token.ok_or_else(|| {
            Refusal::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "send `Authorization: Bearer <a token the cluster knows>` \
                     (e.g. `kubectl create token <service account>`)",
            )
        })?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some(user) = self
            .answers
            .lock()
            .ok()
            .and_then(|a| fresh(a.users.get(&key), now))
        {
            return Ok(Caller { token: key, user });
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable(format!("the API server did not review the token: {e}")))?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                format!(
                    "the cluster does not know this token{}",
                    status.error.map(|e| format!(": {e}")).unwrap_or_default()
                ),
            ));
        }
        let user = status.user.unwrap_or_default();
        if let Ok(mut a) = self.answers.lock() {
            bound(&mut a.users, now);
            a.users.insert(key, (user.clone(), now));
        }
        Ok(Caller { token: key, user })
    }

    /// Whether the caller may list TrainingJobs in `namespace` (`""`: in every namespace).
    pub async fn may_list(&self, caller: &Caller, namespace: &str) -> Result<bool, Refusal> {
        self.may(caller, "list", Target::TrainingJobs, namespace)
            .await
    }

    /// Whether the caller may `verb` `target` in `namespace` (`""`: in every namespace), as
    /// the API server would let it.
    pub async fn may(
        &self,
        caller: &Caller,
        verb: &str,
        target: Target,
        namespace: &str,
    ) -> Result<bool, Refusal> {
        let (group, resource, subresource) = target.parts();
        let key = (
            caller.token,
            format!("{verb} {resource}/{subresource} {namespace}"),
        );
        let now = Instant::now();
        if let Some(yes) = self
            .answers
            .lock()
            .ok()
            .and_then(|a| fresh(a.lists.get(&key), now))
        {
            return Ok(yes);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: caller.user.username.clone(),
                uid: caller.user.uid.clone(),
                groups: caller.user.groups.clone(),
                extra: caller.user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource: (!subresource.is_empty()).then(|| subresource.to_string()),
                    verb: Some(verb.to_string()),
                    namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable(format!("the API server did not review the access: {e}")))?;
        let yes = answer.status.is_some_and(|s| s.allowed);
        if let Ok(mut a) = self.answers.lock() {
            bound(&mut a.lists, now);
            a.lists.insert(key, (yes, now));
        }
        Ok(yes)
    }

    /// The caller may `verb` `target` in `namespace`, or is refused (403) saying so.
    pub async fn check_verb(
        &self,
        caller: &Caller,
        verb: &str,
        target: Target,
        namespace: &str,
    ) -> Result<(), Refusal> {
        if self.may(caller, verb, target, namespace).await? {
            return Ok(());
        }
        Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{} may not {verb} {} in namespace {namespace}",
                caller.name(),
                target.words()
            ),
        ))
    }

    /// The caller may list TrainingJobs in `namespace`, or is refused (403) saying so.
    pub async fn check(&self, caller: &Caller, namespace: &str) -> Result<(), Refusal> {
        if self.may_list(caller, "").await? || self.may_list(caller, namespace).await? {
            return Ok(());
        }
        Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{} may not list trainingjobs.{} in namespace {namespace}",
                caller.name(),
                corral_api::meta::API_GROUP
            ),
        ))
    }

    /// Of `namespaces`, those the caller may see (`None`: every namespace).
    pub async fn visible(
        &self,
        caller: &Caller,
        namespaces: Vec<String>,
    ) -> Result<Option<Vec<String>>, Refusal> {
        if self.may_list(caller, "").await? {
            return Ok(None);
        }
        let mut out = Vec::new();
        for ns in namespaces {
            if self.may_list(caller, &ns).await? {
                out.push(ns);
            }
        }
        Ok(Some(out))
    }
}

fn unavailable(message: String) -> Refusal {
    Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", message)
}
