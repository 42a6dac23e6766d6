//! `corral bench serve` (JSON): the router's overhead against calling the replica directly
//! (p50, p99 of sequential requests, interleaved so that both see the same machine), the
//! requests/s through the router with a trivial upstream, both on loopback; and, through a
//! real embedded server with the example's Python model server (skipped without python3),
//! a cold start from zero to the first answer and the reaction to a step in offered load
//! (to the autoscaler's new desired count, and to the first new replica in rotation).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use bytes::Bytes;
use clap::Args;
use corral_router::{ModelTarget, ReplicaTarget, Router, RouterConfig};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::remote::Output;
use crate::remote::print::{fail, print_structured};

#[derive(Args, Debug)]
pub struct BenchServeArgs {
    /// Sequential requests for the latencies, on each path.
    #[arg(long, default_value_t = 5_000)]
    pub requests: usize,
    /// Concurrent clients for requests/s.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Seconds of the requests/s measurement, on each path.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
    /// Skip the cold start and the load step (they start an embedded server and Python
    /// model servers).
    #[arg(long)]
    pub no_cold_start: bool,
}

const MODEL_SERVER: &str = include_str!("../../../examples/serving/model_server.py");

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// `corral bench serve`: prints JSON.
pub fn run_bench_serve(args: &BenchServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    let mut report = match runtime.block_on(router_bench(args)) {
        Ok(v) => v,
        Err(e) => return fail(&e),
    };
    if !args.no_cold_start {
        let (cold, step) = match embedded() {
            Ok(v) => v,
            Err(e) => (json!({"error": e}), json!({"error": "no embedded server"})),
        };
        report["coldStart"] = cold;
        report["loadStep"] = step;
    }
    print_structured(&report, Output::Json)
}

async fn listen(app: axum::Router) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

async fn front(State(router): State<Router>, req: Request) -> axum::response::Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .strip_prefix("/serve/bench/trivial")
        .unwrap_or("/")
        .to_string();
    router
        .handle("bench/trivial", &path, req.map(Body::new))
        .await
}

async fn call(client: &HttpClient, url: &hyper::Uri) -> Result<(), String> {
    let resp = client
        .get(url.clone())
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: {}", resp.status()));
    }
    resp.into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn router_bench(args: &BenchServeArgs) -> Result<Value, String> {
    // The trivial upstream: answers `ok` at once.
    let upstream = listen(axum::Router::new().fallback(|| async { "ok" })).await?;
    let router = Router::new(RouterConfig::default());
    router.set_model(
        "bench/trivial",
        ModelTarget {
            replicas: vec![ReplicaTarget {
                name: "trivial-0".into(),
                addr: upstream,
                revision: "trivial-00001".into(),
                draining: false,
            }],
            // Through the revision split, as every served model is.
            traffic: vec![("trivial-00001".into(), 100)],
            readiness_path: "/healthz".into(),
            probe_period: Duration::from_secs(1),
            failure_threshold: 3,
            max_request_bytes: 1 << 20,
            aliases: Vec::new(),
        },
    );
    tokio::spawn(router.clone().probe_forever());
    let front_addr = listen(
        axum::Router::new()
            .fallback(front)
            .with_state(router.clone()),
    )
    .await?;
    let client: HttpClient =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build(HttpConnector::new());
    let direct: hyper::Uri = format!("http://{upstream}/predict")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let routed: hyper::Uri = format!("http://{front_addr}/serve/bench/trivial/predict")
        .parse()
        .map_err(|e| format!("{e}"))?;
    // Until the replica is in rotation.
    let ready_by = Instant::now() + Duration::from_secs(10);
    while !router.replicas("bench/trivial").iter().any(|r| r.ready) {
        if Instant::now() > ready_by {
            return Err("the trivial upstream never became ready".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Warm both connections and paths.
    for _ in 0..200 {
        call(&client, &direct).await?;
        call(&client, &routed).await?;
    }
    let mut d = Vec::with_capacity(args.requests);
    let mut r = Vec::with_capacity(args.requests);
    for _ in 0..args.requests {
        let t = Instant::now();
        call(&client, &direct).await?;
        d.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        call(&client, &routed).await?;
        r.push(t.elapsed().as_secs_f64() * 1e3);
    }
    d.sort_by(f64::total_cmp);
    r.sort_by(f64::total_cmp);
    let (d50, d99, r50, r99) = (
        quantile(&d, 0.5),
        quantile(&d, 0.99),
        quantile(&r, 0.5),
        quantile(&r, 0.99),
    );
    let direct_rps = throughput(&client, &direct, args).await?;
    let routed_rps = throughput(&client, &routed, args).await?;
    Ok(json!({
        "machine": {"cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)},
        "latencyMs": {
            "requests": args.requests,
            "direct": {"p50": d50, "p99": d99},
            "router": {"p50": r50, "p99": r99},
            "overhead": {"p50": r50 - d50, "p99": r99 - d99},
            "targets": {"overheadP50": 0.2, "overheadP99": 1.0},
        },
        "requestsPerSecond": {
            "clients": args.clients,
            "seconds": args.seconds,
            "direct": direct_rps,
            "router": routed_rps,
            "target": 20_000,
        },
    }))
}

async fn throughput(
    client: &HttpClient,
    url: &hyper::Uri,
    args: &BenchServeArgs,
) -> Result<f64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(args.seconds.max(1));
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.clients.max(1))
        .map(|_| {
            let (client, url, done) = (client.clone(), url.clone(), done.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    call(&client, &url).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// A real embedded server: the cold start and the load step, each with a model of its own.
fn embedded() -> Result<(Value, Value), String> {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        let skipped = json!({"skipped": "python3 not found"});
        return Ok((skipped.clone(), skipped));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        // As root, replicas run as their namespace's uid and pass through it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .map_err(|e| e.to_string())?;
    }
    let code = dir.path().join("code");
    std::fs::create_dir(&code).map_err(|e| e.to_string())?;
    std::fs::write(code.join("model_server.py"), MODEL_SERVER).map_err(|e| e.to_string())?;
    let mut options = corral_server::ServerOptions::new(corral_local::ClusterConfig::new(
        dir.path().join("data"),
    ));
    options.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    options.stop_replicas_on_exit = true;
    let server = corral_server::Server::start(options)?;
    let client = corral_server::api_client::Client::new(&server.url(), None);
    let cold = cold_start(&server, &client, &code);
    let step = load_step(&server, &client, &code);
    // The replicas stop with their jobs before the server does (nothing left running).
    for model in ["cold", "step"] {
        let _ = client.delete_served_model("default", model);
    }
    let gone_by = Instant::now() + Duration::from_secs(60);
    while client
        .list(Some("default"))
        .is_ok_and(|jobs| !jobs.is_empty())
        && Instant::now() < gone_by
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.stop();
    let value = |r: Result<Value, String>| r.unwrap_or_else(|e| json!({"error": e}));
    Ok((value(cold), value(step)))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// A served model at zero: seconds from the first request to its answer (the plane's pass,
/// the replica's start, Python's start, the first readiness pass).
fn cold_start(
    server: &corral_server::Server,
    client: &corral_server::api_client::Client,
    code: &std::path::Path,
) -> Result<Value, String> {
    let model = "apiVersion: corral.dev/v1alpha1\nkind: ServedModel\nmetadata: {name: cold}\n\
                 spec:\n  template: {command: [python3, model_server.py]}\n  \
                 autoscaling: {minReplicas: 0, maxReplicas: 1}\n";
    let up = crate::code_archive::upload(model, code)?;
    client
        .submit_with_code("default", &up.boundary, &up.body)
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut r = agent()
        .get(format!("{}/serve/default/cold/predict?x=1", server.url()))
        .call()
        .map_err(|e| e.to_string())?;
    let _ = r.body_mut().read_to_string();
    let seconds = t.elapsed().as_secs_f64();
    Ok(
        json!({"seconds": seconds, "includes": "control-loop pass, replica and python3 start, first readiness check"}),
    )
}

/// A model at one replica (one request in flight is its target) gets a step from nothing
/// to `STEP` requests in flight: seconds from the step to the autoscaler's new desired
/// count (status, as the API reads it) and to the first new replica in rotation.
fn load_step(
    server: &corral_server::Server,
    client: &corral_server::api_client::Client,
    code: &std::path::Path,
) -> Result<Value, String> {
    const STEP: usize = 4;
    let model = "apiVersion: corral.dev/v1alpha1\nkind: ServedModel\nmetadata: {name: step}\n\
                 spec:\n  template: {command: [python3, model_server.py]}\n  \
                 autoscaling: {minReplicas: 1, maxReplicas: 3, targetInFlight: 1, \
                 stableWindowSeconds: 6, panicWindowSeconds: 1}\n";
    let up = crate::code_archive::upload(model, code)?;
    client
        .submit_with_code("default", &up.boundary, &up.body)
        .map_err(|e| e.to_string())?;
    let status = |field: &str| {
        client
            .served_model("default", "step")
            .ok()
            .and_then(|v| v["model"]["status"][field].as_u64())
            .unwrap_or(0)
    };
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let limit = Instant::now() + Duration::from_secs(120);
        while !done() {
            if Instant::now() > limit {
                return Err(format!("load step: {what} not within 120 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    wait("the first replica ready", &|| status("readyReplicas") >= 1)?;
    let url = format!(
        "{}/serve/default/step/predict?x=1&sleep_ms=8000",
        server.url()
    );
    let t = Instant::now();
    let load: Vec<_> = (0..STEP)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || agent().get(&url).call().map(|_| ()))
        })
        .collect();
    wait("the new desired count", &|| status("desiredReplicas") >= 2)?;
    let to_desired = t.elapsed().as_secs_f64();
    wait("a new replica ready", &|| status("readyReplicas") >= 2)?;
    let to_ready = t.elapsed().as_secs_f64();
    for l in load {
        let _ = l.join();
    }
    Ok(json!({
        "inFlightStep": format!("0 -> {STEP} (target 1 per replica, 1 replica)"),
        "toDesiredSeconds": to_desired,
        "toFirstNewReplicaReadySeconds": to_ready,
        "includes": "the router's sample, a control-loop pass (200 ms), the status read; then the replica's and python3's start and its first readiness check",
    }))
}
