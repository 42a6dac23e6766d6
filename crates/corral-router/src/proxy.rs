//! One request through the router: refuse a body over the model's limit, hold the request
//! while no replica is ready (a cold start, bounded), send it to the ready replica with the
//! fewest outstanding requests, and on a replica that fails send it to another: after a
//! connect error whatever the method (nothing reached the replica), after a 5xx or a broken
//! exchange only when the method is idempotent. A replica that failed leaves rotation until
//! its readiness check passes again. The response streams through as it comes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};

use crate::Router;
use crate::body::{InFlight, Outstanding, Tracked};
use crate::table::{Model, Pick, Within};

/// Headers of one hop, never forwarded (RFC 9110 7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// An answer of the router's own, in the API's error shape.
pub(crate) fn refusal(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The 404 of a request for a model that is not served.
fn unknown_model(key: &str) -> Response<Body> {
    refusal(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("there is no served model `{key}`"),
    )
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers named in Connection are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in HOP_BY_HOP.iter().chain(named.iter()) {
        headers.remove(n);
    }
}

impl Router {
    /// Serves a request to `/serve/<namespace>/<model>/...` (a model's URL) or to
    /// `/serve/<namespace>/<model>@<revision>/...` (one revision's, whatever the split;
    /// names are DNS labels, without `@`): the replica sees what follows, query included,
    /// and never the caller's `Authorization` (the shell's to check, not the model server's).
    pub async fn serve(
        &self,
        namespace: &str,
        model: &str,
        mut req: Request<Body>,
    ) -> Response<Body> {
        req.headers_mut().remove(header::AUTHORIZATION);
        let prefix = format!("/serve/{namespace}/{model}");
        let path_and_query = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let rest = path_and_query.strip_prefix(&prefix).unwrap_or("/");
        let rest = if rest.is_empty() || rest.starts_with('?') {
            format!("/{rest}")
        } else {
            rest.to_string()
        };
        match model.split_once('@') {
            Some((model, revision)) => {
                let key = format!("{namespace}/{model}");
                self.handle_revision(&key, revision, &rest, req).await
            }
            None => {
                self.handle(&format!("{namespace}/{model}"), &rest, req)
                    .await
            }
        }
    }

    /// Serves one request for model `key`; `path_and_query` is what the replica sees (the
    /// part after the model's prefix, starting with `/`).
    pub async fn handle(
        &self,
        key: &str,
        path_and_query: &str,
        req: Request<Body>,
    ) -> Response<Body> {
        let Some(model) = self.model(key) else {
            return unknown_model(key);
        };
        let arrived = Instant::now();
        let in_flight = InFlight::new(model.clone());
        let mut revision = model.choose_revision();
        let response = self
            .forward(&model, path_and_query, req, in_flight, &mut revision, false)
            .await;
        let unsplit: Arc<str> = Arc::from("");
        model
            .stats_of(revision.as_ref().unwrap_or(&unsplit))
            .record(response.status().as_u16(), arrived.elapsed());
        response
    }

    /// Serves one request for revision `revision` of model `key` (its name, or `latest` /
    /// `stable`) whatever the split: its replicas only, held while none is ready, as a
    /// revision's own URL (a canary tried before it gets a share, the stable one compared).
    pub async fn handle_revision(
        &self,
        key: &str,
        revision: &str,
        path_and_query: &str,
        req: Request<Body>,
    ) -> Response<Body> {
        let Some(model) = self.model(key) else {
            return unknown_model(key);
        };
        let Some(pinned) = model.pinned_revision(revision) else {
            return refusal(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!(
                    "served model `{key}` has no revision `{revision}` with replicas or a \
                     share of requests; it has: {}",
                    model.revisions_named().join(", ")
                ),
            );
        };
        let arrived = Instant::now();
        let in_flight = InFlight::new(model.clone());
        let mut answered = Some(pinned.clone());
        let response = self
            .forward(&model, path_and_query, req, in_flight, &mut answered, true)
            .await;
        model
            .stats_of(&pinned)
            .record(response.status().as_u16(), arrived.elapsed());
        response
    }

    /// `revision`: the revision the split chose, on return the one whose replica answered.
    /// `pinned`: only that revision's replicas may answer.
    async fn forward(
        &self,
        model: &Arc<Model>,
        path_and_query: &str,
        req: Request<Body>,
        in_flight: InFlight,
        revision: &mut Option<Arc<str>>,
        pinned: bool,
    ) -> Response<Body> {
        let limit = model.settings().max_request_bytes;
        let (parts, body) = req.into_parts();
        let too_large = || {
            refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PayloadTooLarge",
                &format!(
                    "the request body is larger than this model's limit of {limit} bytes (spec.maxRequestBytes)"
                ),
            )
        };
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            return too_large();
        }
        // Held whole (up to the limit) so that it can be sent again to another replica.
        let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
        let body: Bytes = match Limited::new(body, limit_usize).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
            Err(e) => {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("the request body could not be read: {e}"),
                );
            }
        };
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        let retry_on_error = idempotent(&parts.method);
        let deadline = tokio::time::Instant::now() + self.inner.config.cold_start_timeout;
        let mut tried = Vec::new();
        let mut attempts = 0;
        let mut last_failure: Option<Response<Body>> = None;
        let chosen = revision.clone();
        let retried = |r: &Option<Arc<str>>| {
            if let Some(r) = r {
                model.stats_of(r).retried();
            }
        };
        loop {
            // The chosen revision's replicas first; when none of them is ready or every
            // one failed, any revision with a share (no request waits or fails while a
            // ready replica of the model could take it).
            let mut picked = match chosen.as_deref() {
                Some(r) => model.pick(Within::Revision(r), &tried),
                None => Pick::NoneReady,
            };
            if !pinned && !matches!(picked, Pick::Replica(_)) {
                let routed = model.pick(Within::Routed, &tried);
                if !(chosen.is_some() && matches!(routed, Pick::NoneReady)) {
                    picked = routed;
                }
            }
            let replica = match picked {
                Pick::Replica(r) => r,
                Pick::AllTried => {
                    return last_failure.unwrap_or_else(|| {
                        refusal(
                            StatusCode::BAD_GATEWAY,
                            "BadGateway",
                            "every replica failed",
                        )
                    });
                }
                Pick::NoneReady => {
                    // A cold start (or every replica out of rotation): wait for one to
                    // become ready, counted in flight so that the autoscaler asks for one.
                    let notified = model.became_ready.notified();
                    if (!pinned && !matches!(model.pick(Within::Routed, &tried), Pick::NoneReady))
                        || chosen.as_deref().is_some_and(|r| {
                            !matches!(model.pick(Within::Revision(r), &tried), Pick::NoneReady)
                        })
                    {
                        continue;
                    }
                    if attempts >= self.inner.config.max_attempts
                        || tokio::time::timeout_at(deadline, notified).await.is_err()
                    {
                        return last_failure.unwrap_or_else(|| {
                            refusal(
                                StatusCode::SERVICE_UNAVAILABLE,
                                "Unavailable",
                                &format!(
                                    "no replica became ready within {} s",
                                    self.inner.config.cold_start_timeout.as_secs()
                                ),
                            )
                        });
                    }
                    // A replica came (back) into rotation: one that failed this request
                    // before may take it again (a crashed replica restarted).
                    tried.clear();
                    continue;
                }
            };
            tried.push(replica.addr);
            attempts += 1;
            if revision.as_deref() != Some(&*replica.revision) {
                *revision = Some(replica.revision.clone());
            }
            let uri = match Uri::builder()
                .scheme("http")
                .authority(replica.addr.to_string())
                .path_and_query(path_and_query)
                .build()
            {
                Ok(u) => u,
                Err(e) => {
                    return refusal(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("not a path: {e}"),
                    );
                }
            };
            let mut upstream = Request::new(Full::new(body.clone()));
            *upstream.method_mut() = parts.method.clone();
            *upstream.uri_mut() = uri;
            *upstream.headers_mut() = headers.clone();
            upstream.headers_mut().remove(header::HOST);
            let outstanding = Outstanding::new(replica.clone());
            match self.inner.client.request(upstream).await {
                Ok(resp)
                    if resp.status().is_server_error()
                        && retry_on_error
                        && attempts < self.inner.config.max_attempts
                        && {
                            replica.eject();
                            let within = match (pinned, chosen.as_deref()) {
                                (true, Some(r)) => Within::Revision(r),
                                _ => Within::Routed,
                            };
                            matches!(model.pick(within, &tried), Pick::Replica(_))
                        } =>
                {
                    // Another replica is ready: this answer is dropped unread.
                    retried(revision);
                    continue;
                }
                Ok(resp) => {
                    if resp.status().is_server_error() {
                        replica.eject();
                    }
                    let (mut parts, body) = resp.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    return Response::from_parts(
                        parts,
                        Body::new(Tracked::new(body, in_flight, outstanding)),
                    );
                }
                Err(e) => {
                    replica.eject();
                    retried(revision);
                    let nothing_sent = e.is_connect();
                    last_failure = Some(refusal(
                        StatusCode::BAD_GATEWAY,
                        "BadGateway",
                        &format!("replica {} failed: {e}", replica.name),
                    ));
                    if !(nothing_sent || retry_on_error) {
                        return last_failure.unwrap_or_else(|| {
                            refusal(StatusCode::BAD_GATEWAY, "BadGateway", "replica failed")
                        });
                    }
                }
            }
            if attempts >= self.inner.config.max_attempts {
                return last_failure.unwrap_or_else(|| {
                    refusal(
                        StatusCode::BAD_GATEWAY,
                        "BadGateway",
                        "every attempt failed",
                    )
                });
            }
        }
    }
}

/// How long a held request waits for a replica, at most, unless configured.
pub const DEFAULT_COLD_START_TIMEOUT: Duration = Duration::from_secs(120);
