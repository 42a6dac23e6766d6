//! The router against real HTTP replicas on loopback (axum servers in the test): balancing,
//! retries and rotation, the body limit, the cold-start hold, and streaming. No timing: each
//! test orders events with channels, and waits only for readiness (bounded).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router as Axum;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, Request, StatusCode};
use axum::routing::{get, post};
use corral_router::{ModelTarget, ReplicaTarget, Router, RouterConfig};
use http_body_util::BodyExt;
use tokio::sync::{Notify, mpsc};

#[derive(Clone)]
struct Replica {
    name: &'static str,
    hits: Arc<AtomicU32>,
    release: Arc<Notify>,
    fail: bool,
    chunks: Arc<tokio::sync::Mutex<Option<mpsc::Receiver<&'static str>>>>,
}

/// A replica server that can be stopped.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Stops it and waits until its port refuses connections.
    async fn kill(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let _ = d.await;
        }
    }
}

impl std::ops::Deref for Server {
    type Target = SocketAddr;
    fn deref(&self) -> &SocketAddr {
        &self.addr
    }
}

async fn start(name: &'static str, fail: bool) -> (Server, Replica, mpsc::Sender<&'static str>) {
    let (tx, rx) = mpsc::channel(4);
    let r = Replica {
        name,
        hits: Arc::new(AtomicU32::new(0)),
        release: Arc::new(Notify::new()),
        fail,
        chunks: Arc::new(tokio::sync::Mutex::new(Some(rx))),
    };
    let app = Axum::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/who",
            get(|State(r): State<Replica>| async move {
                r.hits.fetch_add(1, Ordering::SeqCst);
                if r.fail {
                    (StatusCode::INTERNAL_SERVER_ERROR, "broken").into_response_parts()
                } else {
                    (StatusCode::OK, r.name).into_response_parts()
                }
            }),
        )
        .route(
            "/fail",
            post(|State(r): State<Replica>| async move {
                r.hits.fetch_add(1, Ordering::SeqCst);
                StatusCode::INTERNAL_SERVER_ERROR
            }),
        )
        .route("/echo", post(|body: String| async move { body }))
        .route(
            "/slow",
            get(|State(r): State<Replica>| async move {
                r.release.notified().await;
                r.name
            }),
        )
        .route(
            "/stream",
            get(|State(r): State<Replica>| async move {
                let rx = r
                    .chunks
                    .lock()
                    .await
                    .take()
                    .expect("one stream per replica");
                let s = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv()
                        .await
                        .map(|c| (Ok::<_, std::io::Error>(c.to_string()), rx))
                });
                Body::from_stream(s)
            }),
        )
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    let server = Server {
        addr,
        stop: Some(stop),
        done: Some(done),
    };
    (server, r, tx)
}

trait IntoParts {
    fn into_response_parts(self) -> axum::response::Response;
}
impl<T: axum::response::IntoResponse> IntoParts for T {
    fn into_response_parts(self) -> axum::response::Response {
        self.into_response()
    }
}

fn target(replicas: &[(&str, SocketAddr)]) -> ModelTarget {
    ModelTarget {
        replicas: replicas
            .iter()
            .map(|(n, a)| ReplicaTarget {
                name: n.to_string(),
                addr: *a,
                revision: String::new(),
                draining: false,
            })
            .collect(),
        traffic: Vec::new(),
        readiness_path: "/healthz".into(),
        probe_period: Duration::from_millis(100),
        failure_threshold: 1,
        max_request_bytes: 1024,
        aliases: Vec::new(),
    }
}

fn router() -> Router {
    let router = Router::new(RouterConfig {
        cold_start_timeout: Duration::from_secs(30),
        ..RouterConfig::default()
    });
    tokio::spawn(router.clone().probe_forever());
    router
}

/// Waits (bounded) until `n` replicas of `key` are in rotation.
async fn until_ready(router: &Router, key: &str, n: usize) {
    for _ in 0..300 {
        if router.replicas(key).iter().filter(|r| r.ready).count() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{n} replicas never became ready: {:?}",
        router.replicas(key)
    );
}

fn req(method: Method, body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .body(Body::from(body.to_string()))
        .expect("request")
}

async fn text(r: axum::response::Response) -> (StatusCode, String) {
    let status = r.status();
    let b = r.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&b).into_owned())
}

/// Replicas `(name, addr, revision)` and the split `(revision, percent)`.
fn split_target(replicas: &[(&str, SocketAddr, &str)], traffic: &[(&str, u32)]) -> ModelTarget {
    let mut t = target(&[]);
    t.replicas = replicas
        .iter()
        .map(|(n, a, r)| ReplicaTarget {
            name: n.to_string(),
            addr: *a,
            revision: r.to_string(),
            draining: false,
        })
        .collect();
    t.traffic = traffic.iter().map(|(r, p)| (r.to_string(), *p)).collect();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_requests_follow_the_revisions_percentages_exactly() {
    let (a, _, _) = start("a", false).await;
    let (b, _, _) = start("b", false).await;
    let (c, _, _) = start("c", false).await;
    let router = router();
    router.set_model(
        "ns/m",
        split_target(
            &[
                ("a", *a, "m-00001"),
                ("b", *b, "m-00001"),
                ("c", *c, "m-00002"),
            ],
            &[("m-00001", 90), ("m-00002", 10)],
        ),
    );
    until_ready(&router, "ns/m", 3).await;
    let mut canary = 0;
    for _ in 0..300 {
        let (status, who) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
        assert_eq!(status, StatusCode::OK);
        canary += u32::from(who == "c");
    }
    // Every 100 requests in a row follow the split.
    assert_eq!(canary, 30);
    let stats = router.stats();
    let by_revision: Vec<(String, u64)> = stats[0]
        .revisions
        .iter()
        .map(|(r, s)| (r.clone(), s.by_class[0]))
        .collect();
    assert_eq!(
        by_revision,
        vec![("m-00001".to_string(), 270), ("m-00002".to_string(), 30)]
    );
    // A revision with no share gets nothing new (it drains).
    router.set_model(
        "ns/m",
        split_target(
            &[
                ("a", *a, "m-00001"),
                ("b", *b, "m-00001"),
                ("c", *c, "m-00002"),
            ],
            &[("m-00001", 0), ("m-00002", 100)],
        ),
    );
    for _ in 0..20 {
        let (_, who) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
        assert_eq!(who, "c");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revisions_own_url_reaches_that_revision_only() {
    let (a, _, _) = start("a", false).await;
    let (b, _, _) = start("b", false).await;
    let (c, rc, _) = start("c", true).await;
    let router = router();
    // m-00002 (c, whose answers fail) has replicas but no share yet: a canary before
    // its traffic; m-00001 takes every request of the model's own URL.
    let mut t = split_target(
        &[
            ("a", *a, "m-00001"),
            ("b", *b, "m-00001"),
            ("c", *c, "m-00002"),
        ],
        &[("m-00001", 100), ("m-00002", 0)],
    );
    t.aliases = vec![
        ("latest".into(), "m-00002".into()),
        ("stable".into(), "m-00001".into()),
    ];
    router.set_model("ns/m", t);
    until_ready(&router, "ns/m", 3).await;
    for name in ["m-00002", "latest"] {
        let r = router
            .handle_revision("ns/m", name, "/who", req(Method::GET, ""))
            .await;
        // Its own answer, a 500, not another revision's replica after a retry.
        let (status, body) = text(r).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "broken")
        );
    }
    assert_eq!(
        rc.hits.load(Ordering::SeqCst),
        2,
        "c was asked once per request"
    );
    for name in ["m-00001", "stable"] {
        for _ in 0..4 {
            let r = router
                .handle_revision("ns/m", name, "/who", req(Method::GET, ""))
                .await;
            let (status, who) = text(r).await;
            assert!(
                status == StatusCode::OK && (who == "a" || who == "b"),
                "{status} {who}"
            );
        }
    }
    // The model's own URL never reaches the canary.
    for _ in 0..10 {
        let (_, who) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
        assert_ne!(who, "broken");
    }
    assert_eq!(rc.hits.load(Ordering::SeqCst), 2);
    // A revision the model does not serve: 404 naming those it does.
    let (status, body) = text(
        router
            .handle_revision("ns/m", "m-00009", "/who", req(Method::GET, ""))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("no revision `m-00009`") && body.contains("m-00001, m-00002, latest, stable"),
        "{body}"
    );
    // Counted under the revision asked for.
    let stats = router.stats();
    let canary = stats[0]
        .revisions
        .iter()
        .find(|(r, _)| r == "m-00002")
        .map(|(_, s)| s.by_class.iter().sum::<u64>());
    assert_eq!(canary, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_with_none_ready_gives_its_requests_to_a_ready_one() {
    let (a, _, _) = start("a", false).await;
    let router = router();
    // m-00002 has no replica in rotation (none yet): its 50% goes to m-00001's.
    router.set_model(
        "ns/m",
        split_target(&[("a", *a, "m-00001")], &[("m-00001", 50), ("m-00002", 50)]),
    );
    until_ready(&router, "ns/m", 1).await;
    for _ in 0..10 {
        let (status, who) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
        assert_eq!((status, who.as_str()), (StatusCode::OK, "a"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_outstanding_goes_to_the_idle_replica() {
    let (a, ra, _) = start("a", false).await;
    let (b, rb, _) = start("b", false).await;
    let router = router();
    router.set_model("ns/m", target(&[("a", *a), ("b", *b)]));
    until_ready(&router, "ns/m", 2).await;
    // One slow request occupies a replica; every next request goes to the other one.
    let r2 = router.clone();
    let slow =
        tokio::spawn(
            async move { text(r2.handle("ns/m", "/slow", req(Method::GET, "")).await).await },
        );
    let busy = loop {
        let states = router.replicas("ns/m");
        if let Some(s) = states.iter().find(|s| s.outstanding == 1) {
            break s.name.clone();
        }
        tokio::task::yield_now().await;
    };
    let idle = if busy == "a" { "b" } else { "a" };
    for _ in 0..5 {
        let (status, who) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
        assert_eq!((status, who.as_str()), (StatusCode::OK, idle));
    }
    ra.release.notify_waiters();
    rb.release.notify_waiters();
    let (status, who) = slow.await.expect("slow");
    assert_eq!((status, who), (StatusCode::OK, busy));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_replica_is_retried_elsewhere_and_leaves_rotation() {
    let (good, rg, _) = start("good", false).await;
    let (bad, rb, _) = start("bad", true).await;
    let router = router();
    router.set_model("ns/m", target(&[("good", *good), ("bad", *bad)]));
    until_ready(&router, "ns/m", 2).await;
    for _ in 0..4 {
        let (status, who) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
        assert_eq!((status, who.as_str()), (StatusCode::OK, "good"));
    }
    // The bad one answered at most once before it left rotation (a probe may bring it back
    // between requests, the next failure takes it out again).
    assert!(rb.hits.load(Ordering::SeqCst) >= 1);
    assert_eq!(rg.hits.load(Ordering::SeqCst), 4);
    let stats = router.stats();
    assert_eq!(stats[0].revisions[0].1.by_class[0], 4, "{stats:?}");
    assert!(stats[0].revisions[0].1.retries >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_loses_no_request_and_a_post_is_not_sent_twice() {
    let (good, rg, _) = start("good", false).await;
    let (victim, _, _) = start("victim", false).await;
    let router = router();
    router.set_model("ns/m", target(&[("good", *good), ("victim", victim.addr)]));
    until_ready(&router, "ns/m", 2).await;
    victim.kill().await;
    // Both in rotation still (no probe has failed yet); every request succeeds, a POST too
    // (a refused connection sent nothing).
    for method in [Method::GET, Method::POST, Method::GET, Method::POST] {
        let path = if method == Method::GET {
            "/who"
        } else {
            "/echo"
        };
        let (status, _) = text(router.handle("ns/m", path, req(method, "x")).await).await;
        assert_eq!(status, StatusCode::OK);
    }
    let states = router.replicas("ns/m");
    assert!(
        !states.iter().any(|s| s.name == "victim" && s.ready),
        "{states:?}"
    );
    assert!(rg.hits.load(Ordering::SeqCst) >= 2);

    // A POST that fails with 500 is answered as is, not sent to another replica.
    let (f1, r1, _) = start("f1", true).await;
    let (f2, r2, _) = start("f2", true).await;
    router.set_model("ns/p", target(&[("f1", f1.addr), ("f2", f2.addr)]));
    until_ready(&router, "ns/p", 2).await;
    let (status, _) = text(router.handle("ns/p", "/fail", req(Method::POST, "x")).await).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r1.hits.load(Ordering::SeqCst) + r2.hits.load(Ordering::SeqCst),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_with_413() {
    let (a, _, _) = start("a", false).await;
    let router = router();
    router.set_model("ns/m", target(&[("a", *a)]));
    until_ready(&router, "ns/m", 1).await;
    let (status, body) = text(
        router
            .handle("ns/m", "/echo", req(Method::POST, &"x".repeat(2048)))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body.contains("1024 bytes"), "{body}");
    let (status, body) = text(
        router
            .handle("ns/m", "/echo", req(Method::POST, "hello"))
            .await,
    )
    .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "hello"));
    let (status, _) = text(router.handle("ns/nope", "/", req(Method::GET, "")).await).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_at_zero_is_held_until_a_replica_is_ready() {
    let router = router();
    router.set_model("ns/m", target(&[]));
    let r2 = router.clone();
    let held =
        tokio::spawn(
            async move { text(r2.handle("ns/m", "/who", req(Method::GET, "")).await).await },
        );
    // The autoscaler sees the held request as in flight.
    loop {
        let load = router.take_load("ns/m").expect("model");
        if load.in_flight == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let (a, _, _) = start("a", false).await;
    router.set_model("ns/m", target(&[("a", *a)]));
    let (status, who) = held.await.expect("held");
    assert_eq!((status, who.as_str()), (StatusCode::OK, "a"));
    assert_eq!(router.take_load("ns/m").map(|l| l.in_flight), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_gets_503_when_no_replica_comes() {
    let router = Router::new(RouterConfig {
        cold_start_timeout: Duration::from_millis(200),
        ..RouterConfig::default()
    });
    router.set_model("ns/m", target(&[]));
    let (status, body) = text(router.handle("ns/m", "/who", req(Method::GET, "")).await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("no replica became ready"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_arrives_chunk_by_chunk() {
    let (a, _, chunks) = start("a", false).await;
    let router = router();
    router.set_model("ns/m", target(&[("a", *a)]));
    until_ready(&router, "ns/m", 1).await;
    let response = router.handle("ns/m", "/stream", req(Method::GET, "")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    // Each chunk is read before the next is even sent: nothing waits for the whole body.
    for chunk in ["data: one\n\n", "data: two\n\n"] {
        chunks.send(chunk).await.expect("send");
        let frame = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(frame.into_data().expect("data"), chunk.as_bytes());
    }
    // In flight until the stream ends.
    assert_eq!(router.stats()[0].in_flight, 1);
    drop(chunks);
    assert!(body.frame().await.is_none());
    assert_eq!(router.stats()[0].in_flight, 0);
}
