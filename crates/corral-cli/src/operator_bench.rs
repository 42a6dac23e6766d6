//! `corral bench operator` (JSON): the Kubernetes operator at cluster scale, against a real
//! API server. It starts etcd + kube-apiserver from `KUBEBUILDER_ASSETS` as the envtest
//! suite does ([`corral_kube::testenv`]), installs Corral as deployed, creates fake 8-GPU
//! nodes, runs the operator as its own process (`corral-operator`, with the operator's
//! ServiceAccount token; shipped client limits unless `--api-qps`/`--api-burst`) and a fake
//! kubelet in this process (a bound pod Running at once, Succeeded `--kubelet-secs` later).
//!
//! Then: `--finished` jobs run to completion (history stored); `--probes` single-pod jobs
//! one after another (a new job's create->bound with that history, and the operator's RSS);
//! a burst of `--jobs` TrainingJobs in the mix 60% 1 pod x 1 GPU, 30% 4 pods x 2 GPUs,
//! 10% 8 pods x 8 GPUs (2.6 pods a job) over a few namespaces, measured until every pod is
//! bound and every job has succeeded: jobs/s and pods/s to all bound, create->bound per pod
//! (the bench's create of the job to the kubelet first seeing the pod's node), the
//! operator's writes by verb and resource (the audit log of its user: exact), the API
//! server's requests (all clients), CPU of the operator, kube-apiserver and etcd (/proc),
//! the operator's peak RSS, and whether any pod was lost or bound twice.

mod fake_kubelet;
mod measure;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use clap::Args;
use corral_kube::consts::JOB_NAME_LABEL;
use corral_kube::testenv::{self, Env, OPERATOR_TOKEN};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

use crate::programs;
use crate::remote::Output;
use crate::remote::print::{fail, print_structured};
use fake_kubelet::FakeKubelet;
use measure::{
    apiserver_requests, audit_offset, cpu_secs, memory_mb, operator_counters, operator_writes,
    quantile,
};

#[derive(Args, Debug, Clone)]
pub struct BenchOperatorArgs {
    /// Fake nodes of 8 GPUs each.
    #[arg(long, default_value_t = 200)]
    pub nodes: usize,
    /// TrainingJobs in the burst (60% 1 x 1 GPU, 30% 4 x 2, 10% 8 x 8).
    #[arg(long, default_value_t = 100)]
    pub jobs: usize,
    /// Jobs (the same mix) run to completion before the probes and the burst: the history
    /// the operator has stored beside the new work.
    #[arg(long, default_value_t = 0)]
    pub finished: usize,
    /// Single-pod jobs created one after another, each once the previous is bound: a new
    /// job's create->bound with `--finished` jobs stored.
    #[arg(long, default_value_t = 10)]
    pub probes: usize,
    /// Seconds a pod runs (Running -> Succeeded) on the fake kubelet.
    #[arg(long, default_value_t = 10)]
    pub kubelet_secs: u64,
    /// The operator's `--api-qps` (0: unlimited); default: the operator's shipped value.
    #[arg(long)]
    pub api_qps: Option<f64>,
    /// The operator's `--api-burst`; default: the operator's shipped value.
    #[arg(long)]
    pub api_burst: Option<u32>,
    /// Namespaces the jobs are spread over.
    #[arg(long, default_value_t = 4)]
    pub namespaces: usize,
    /// Seconds each phase may take before the bench reports what it has (lost pods count).
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Run the operator with `--rebuild-each-pass` (its control plane rebuilt from the API
    /// server every pass, as before it was kept): the same work, compared.
    #[arg(long)]
    pub rebuild_each_pass: bool,
    /// The operator's `--pass-budget-ms` (0: passes admit everything that fits); default:
    /// the operator's shipped value.
    #[arg(long)]
    pub pass_budget_ms: Option<u64>,
    /// Copy the logs (kube-apiserver, etcd, audit, operator) into this directory.
    #[arg(long)]
    pub keep_logs: Option<PathBuf>,
}

/// GPUs of every fake node.
const GPUS_PER_NODE: u32 = 8;
/// The mix (pods, GPUs a pod), interleaved so that a few jobs already mix:
/// 60% 1 x 1, 30% 4 x 2, 10% 8 x 8.
const MIX: [(u32, u32); 10] = [
    (1, 1),
    (4, 2),
    (1, 1),
    (1, 1),
    (4, 2),
    (1, 1),
    (8, 8),
    (1, 1),
    (4, 2),
    (1, 1),
];
/// Label on the bench's jobs: which phase created them.
const PHASE_LABEL: &str = "bench.corral.dev/phase";

/// `corral bench operator`: prints JSON.
pub fn run_bench_operator(args: &BenchOperatorArgs) -> ExitCode {
    if args.nodes == 0 || args.namespaces == 0 {
        return fail(&"--nodes and --namespaces must be at least 1");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(&format!("tokio runtime: {e}")),
    };
    match runtime.block_on(bench(args)) {
        Ok(report) => print_structured(&report, Output::Json),
        Err(e) => fail(&e),
    }
}

/// The operator's process; killed when the bench ends.
struct Operator {
    child: Child,
    port: u16,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn bench(args: &BenchOperatorArgs) -> Result<Value, String> {
    let operator_bin = programs::find_operator().ok_or_else(|| {
        format!(
            "the {} program is neither beside corral nor on PATH (`cargo build --release -p corral --bins` builds both)",
            programs::OPERATOR
        )
    })?;
    let mut assets = testenv::assets().map_err(|e| {
        format!("{e} (KUBEBUILDER_ASSETS: see docs/benchmarks.md, `corral bench operator`)")
    })?;
    // No garbage collector: nothing is deleted, and its CPU would count beside the operator's.
    assets.controller_manager = None;
    let env = Env::start(&assets, "corral-bench-operator").await?;
    let result = run(args, &env, &operator_bin).await;
    if let Some(dir) = &args.keep_logs {
        keep_logs(&env.dir, dir)?;
    }
    result
}

fn keep_logs(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("--keep-logs {}: {e}", to.display()))?;
    for name in [
        "kube-apiserver.log",
        "etcd.log",
        "audit.log",
        "operator.log",
    ] {
        let _ = std::fs::copy(from.join(name), to.join(name));
    }
    Ok(())
}

async fn run(args: &BenchOperatorArgs, env: &Env, operator_bin: &Path) -> Result<Value, String> {
    let admin = &env.admin;
    testenv::install_corral(admin).await?;
    let namespaces: Vec<String> = (0..args.namespaces).map(|i| format!("bench-{i}")).collect();
    for ns in &namespaces {
        testenv::namespace(admin, ns).await?;
    }
    futures::stream::iter(0..args.nodes)
        .map(|i| async move {
            testenv::gpu_node(admin, &format!("node-{i:04}"), GPUS_PER_NODE).await
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let kubelet = FakeKubelet::start(admin.clone(), Duration::from_secs(args.kubelet_secs));
    let operator = start_operator(args, env, operator_bin).await?;
    let opid = operator.child.id();
    let timeout = Duration::from_secs(args.timeout_secs);

    // History: jobs run to completion and left stored.
    let t = Instant::now();
    let done = jobs(&namespaces, "done", args.finished);
    create(admin, &done).await?;
    let finished_left = wait_succeeded(admin, &namespaces, "done", done.len(), timeout).await?;
    let finished = json!({"jobs": done.len(), "pods": pods_of(&done),
        "secs": round(secs(t.elapsed()), 2), "not_succeeded": finished_left});

    let probe = probes(args, admin, &namespaces[0], &kubelet, opid, timeout).await?;

    // The burst.
    let audit = env.dir.join("audit.log");
    let before = Snapshot::take(env, &operator, &audit).await?;
    let burst = jobs(&namespaces, "burst", args.jobs);
    let expected = pods_of(&burst);
    let start = Instant::now();
    let created = create(admin, &burst).await?;
    let mut all_bound = None;
    while start.elapsed() < timeout {
        let bound = bound_of(&kubelet, &created);
        if bound.len() >= expected {
            all_bound = bound.iter().map(|(_, at)| *at).max();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = wait_succeeded(
        admin,
        &namespaces,
        "burst",
        burst.len(),
        timeout.saturating_sub(start.elapsed()),
    )
    .await?;
    let all_succeeded = start.elapsed();
    let after = Snapshot::take(env, &operator, &audit).await?;

    let mut latencies: Vec<f64> = bound_of(&kubelet, &created)
        .iter()
        .map(|(job, at)| secs(at.saturating_duration_since(created[job])))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let writes = operator_writes(&audit, before.audit, after.audit)?;
    let write_total: u64 = writes.values().sum();
    let all_bound_secs = all_bound.map(|t| secs(t.saturating_duration_since(start)));
    let per_pod = |x: f64| round(x / expected.max(1) as f64, 2);
    let rate = |n: usize| all_bound_secs.map(|s| round(n as f64 / s.max(1e-9), 1));
    let checks = checks(admin, &namespaces, &kubelet, &burst, left).await?;
    Ok(json!({
        "nodes": args.nodes,
        "gpus_per_node": GPUS_PER_NODE,
        "kubelet_secs": args.kubelet_secs,
        "operator_limits": {
            "api_qps": args.api_qps.map_or(json!("shipped"), |q| json!(q)),
            "api_burst": args.api_burst.map_or(json!("shipped"), |b| json!(b)),
        },
        "control_plane": if args.rebuild_each_pass { "rebuilt each pass" } else { "kept" },
        "pass_budget_ms": args.pass_budget_ms.map_or(json!("shipped"), |ms| json!(ms)),
        "finished": finished,
        "probe": probe,
        "burst": {
            "jobs": burst.len(),
            "pods": expected,
            "namespaces": namespaces.len(),
            "all_bound_secs": all_bound_secs.map(|s| round(s, 2)),
            "jobs_per_sec": rate(burst.len()),
            "pods_per_sec": rate(expected),
            "create_to_bound_p50_secs": quantile(&latencies, 0.5).map(|s| round(s, 3)),
            "create_to_bound_p99_secs": quantile(&latencies, 0.99).map(|s| round(s, 3)),
            "all_succeeded_secs": round(secs(all_succeeded), 2),
            "operator_writes": {
                "total": write_total,
                "per_pod": per_pod(write_total as f64),
                "by_verb_resource": writes,
            },
            "apiserver_requests": (after.requests - before.requests) as u64,
            "apiserver_requests_per_pod": per_pod(after.requests - before.requests),
            "operator_cpu_secs": round(after.operator_cpu - before.operator_cpu, 2),
            "apiserver_cpu_secs": round(after.apiserver_cpu - before.apiserver_cpu, 2),
            "apiserver_cpu_ms_per_bound_pod":
                per_pod(1000.0 * (after.apiserver_cpu - before.apiserver_cpu)),
            "etcd_cpu_secs": round(after.etcd_cpu - before.etcd_cpu, 2),
            "operator_passes": counters_between(&before.counters, &after.counters),
        },
        "operator_rss_mb": memory_mb(opid, "VmRSS").map(|m| round(m, 1)),
        "operator_peak_rss_mb": memory_mb(opid, "VmHWM").map(|m| round(m, 1)),
        "checks": checks,
    }))
}

/// Starts `corral-operator` with the operator's token, and waits until it leads.
async fn start_operator(
    args: &BenchOperatorArgs,
    env: &Env,
    bin: &Path,
) -> Result<Operator, String> {
    let kc = env.dir.join("operator.kubeconfig");
    std::fs::write(&kc, testenv::kubeconfig(&env.url, OPERATOR_TOKEN))
        .map_err(|e| format!("{}: {e}", kc.display()))?;
    let port = testenv::free_port()?;
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--lease-namespace", "corral-system", "--identity", "bench"])
        .env("KUBECONFIG", &kc);
    if let Some(q) = args.api_qps {
        cmd.arg("--api-qps").arg(q.to_string());
    }
    if let Some(b) = args.api_burst {
        cmd.arg("--api-burst").arg(b.to_string());
    }
    if args.rebuild_each_pass {
        cmd.arg("--rebuild-each-pass");
    }
    if let Some(ms) = args.pass_budget_ms {
        cmd.arg("--pass-budget-ms").arg(ms.to_string());
    }
    let log = env.dir.join("operator.log");
    let mut operator = Operator {
        child: testenv::spawn(&mut cmd, &log)?,
        port,
    };
    let url = format!("http://127.0.0.1:{}/metrics", operator.port);
    for _ in 0..240 {
        if let Ok(Some(status)) = operator.child.try_wait() {
            return Err(format!(
                "the operator exited ({status}); the last lines of its log:\n{}",
                testenv::log_tail(&log, 20)
            ));
        }
        let u = url.clone();
        let metrics = tokio::task::spawn_blocking(move || {
            let mut r = ureq::get(&u).call().ok()?;
            r.body_mut().read_to_string().ok()
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
        if metrics.lines().any(|l| l.trim() == "corral_leader 1") {
            return Ok(operator);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!(
        "the operator did not lead within 60 s; the last lines of its log:\n{}",
        testenv::log_tail(&log, 20)
    ))
}

/// A job of the bench: its namespace, name, pods and GPUs a pod.
#[derive(Clone, Debug)]
struct BenchJob {
    ns: String,
    name: String,
    phase: &'static str,
    pods: u32,
    gpus: u32,
}

impl BenchJob {
    fn key(&self) -> String {
        format!("{}/{}", self.ns, self.name)
    }

    fn manifest(&self) -> Value {
        let replica = |count: u32| {
            json!({"count": count, "resources": {"cpu": "1", "memory": "1Gi", "gpu": self.gpus},
                   "template": {"image": "busybox:1.36", "command": ["sh", "-c", "true"]}})
        };
        let mut replicas = json!({"master": replica(1)});
        if self.pods > 1 {
            replicas["worker"] = replica(self.pods - 1);
        }
        json!({
            "apiVersion": "corral.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": self.name, "namespace": self.ns,
                         "labels": {PHASE_LABEL: self.phase}},
            "spec": {"framework": "pytorch", "replicas": replicas},
        })
    }
}

/// `n` jobs of the mix (pods, GPUs a pod), round-robin over the namespaces.
fn jobs(namespaces: &[String], phase: &'static str, n: usize) -> Vec<BenchJob> {
    (0..n)
        .map(|i| {
            let (pods, gpus) = MIX[i % MIX.len()];
            BenchJob {
                ns: namespaces[i % namespaces.len()].clone(),
                name: format!("{phase}-{i}"),
                phase,
                pods,
                gpus,
            }
        })
        .collect()
}

fn pods_of(jobs: &[BenchJob]) -> usize {
    jobs.iter().map(|j| j.pods as usize).sum()
}

fn training_jobs() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("corral.dev", "v1alpha1", "TrainingJob"),
        "trainingjobs",
    )
}

/// Creates the jobs, 16 calls in flight; each job's create time (before its call).
async fn create(admin: &Client, jobs: &[BenchJob]) -> Result<BTreeMap<String, Instant>, String> {
    futures::stream::iter(jobs)
        .map(|job| async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(admin.clone(), &job.ns, &training_jobs());
            let object: DynamicObject = serde_json::from_value(job.manifest())
                .map_err(|e| format!("job {}: {e}", job.key()))?;
            let at = Instant::now();
            api.create(&PostParams::default(), &object)
                .await
                .map_err(|e| format!("create job {}: {e}", job.key()))?;
            Ok::<_, String>((job.key(), at))
        })
        .buffer_unordered(16)
        .try_collect()
        .await
}

/// The pods the kubelet saw bound for these jobs: (job, when).
fn bound_of(kubelet: &FakeKubelet, jobs: &BTreeMap<String, Instant>) -> Vec<(String, Instant)> {
    kubelet.bound_for(jobs.keys())
}

/// Waits until the `n` jobs of `phase` have succeeded or `timeout` passed; those that have
/// not, by name.
async fn wait_succeeded(
    admin: &Client,
    namespaces: &[String],
    phase: &str,
    n: usize,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let start = Instant::now();
    let lp = ListParams::default().labels(&format!("{PHASE_LABEL}={phase}"));
    loop {
        let mut pending = Vec::new();
        let mut seen = 0;
        for ns in namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &training_jobs());
            let list = api
                .list(&lp)
                .await
                .map_err(|e| format!("list jobs in {ns}: {e}"))?;
            for job in list.items {
                seen += 1;
                let done = job.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
                    });
                if !done {
                    pending.push(format!("{ns}/{}", job.metadata.name.unwrap_or_default()));
                }
            }
        }
        if (pending.is_empty() && seen >= n) || start.elapsed() >= timeout {
            return Ok(pending);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Single-pod jobs one after another: create->bound of each (ms), and the operator's RSS.
async fn probes(
    args: &BenchOperatorArgs,
    admin: &Client,
    ns: &str,
    kubelet: &FakeKubelet,
    opid: u32,
    timeout: Duration,
) -> Result<Value, String> {
    let mut ms = Vec::new();
    for i in 0..args.probes {
        let job = BenchJob {
            ns: ns.to_string(),
            name: format!("probe-{i}"),
            phase: "probe",
            pods: 1,
            gpus: 1,
        };
        let created = create(admin, std::slice::from_ref(&job)).await?;
        loop {
            if let Some((_, at)) = bound_of(kubelet, &created).first() {
                ms.push(1000.0 * secs(at.saturating_duration_since(created[&job.key()])));
                break;
            }
            if created[&job.key()].elapsed() > timeout {
                return Err(format!("probe job {} not bound in {timeout:?}", job.key()));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let rss = memory_mb(opid, "VmRSS").map(|m| round(m, 1));
    // Done before the burst, so that the burst's writes are its own.
    let not_succeeded =
        wait_succeeded(admin, &[ns.to_string()], "probe", args.probes, timeout).await?;
    ms.sort_by(f64::total_cmp);
    Ok(json!({
        "jobs": args.probes,
        "finished_jobs_stored": args.finished,
        "create_to_bound_p50_ms": quantile(&ms, 0.5).map(|m| round(m, 1)),
        "create_to_bound_max_ms": ms.last().map(|m| round(*m, 1)),
        "operator_rss_mb": rss,
        "not_succeeded": not_succeeded,
    }))
}

/// Counters read before and after the burst.
struct Snapshot {
    audit: u64,
    requests: f64,
    operator_cpu: f64,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    /// The operator's passes and rebuilds so far ([`operator_counters`]).
    counters: BTreeMap<String, f64>,
}

impl Snapshot {
    async fn take(env: &Env, operator: &Operator, audit: &Path) -> Result<Snapshot, String> {
        let cpu = |pid: Option<u32>| pid.and_then(cpu_secs).unwrap_or(0.0);
        let port = operator.port;
        let counters = tokio::task::spawn_blocking(move || operator_counters(port))
            .await
            .unwrap_or_default();
        Ok(Snapshot {
            audit: audit_offset(audit),
            requests: apiserver_requests(&env.admin).await?,
            operator_cpu: cpu(Some(operator.child.id())),
            apiserver_cpu: cpu(env.apiserver_pid()),
            etcd_cpu: cpu(env.etcd_pid()),
            counters,
        })
    }
}

/// The operator's passes during the burst: how many, their mean seconds (plan and writes),
/// their plans' mean seconds, and how many rebuilt the control plane, by why.
fn counters_between(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Value {
    let delta =
        |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
    let passes = delta("passes");
    let rebuilds: BTreeMap<String, u64> = after
        .keys()
        .filter_map(|k| {
            let reason = k.strip_prefix("rebuilds{")?.strip_suffix('}')?;
            Some((reason.to_string(), delta(k).max(0.0) as u64))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    json!({
        "passes": passes as u64,
        "mean_pass_secs": (passes > 0.0).then(|| round(delta("pass_secs") / passes, 4)),
        "mean_plan_secs": (passes > 0.0).then(|| round(delta("plan_secs") / passes, 4)),
        "passes_over_1s": (passes - delta("passes_within_1s")).max(0.0) as u64,
        "passes_over_2s": (passes - delta("passes_within_2s")).max(0.0) as u64,
        "rebuilds": rebuilds,
    })
}

/// Lost and duplicated: every burst job's pods bound exactly once (by the kubelet's
/// count of distinct pods, a pod made again under its name counting twice), no job with
/// more pods stored than its replicas, every job succeeded.
async fn checks(
    admin: &Client,
    namespaces: &[String],
    kubelet: &FakeKubelet,
    burst: &[BenchJob],
    not_succeeded: Vec<String>,
) -> Result<Value, String> {
    let mut bound: BTreeMap<String, usize> = BTreeMap::new();
    let keys: Vec<String> = burst.iter().map(BenchJob::key).collect();
    for (job, _) in kubelet.bound_for(&keys) {
        *bound.entry(job).or_insert(0) += 1;
    }
    let mut stored: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ns in namespaces {
        let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
        let pods = api
            .list(&ListParams::default().labels(JOB_NAME_LABEL))
            .await
            .map_err(|e| format!("list pods in {ns}: {e}"))?;
        for p in pods.items {
            let job = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(JOB_NAME_LABEL))
                .cloned()
                .unwrap_or_default();
            stored
                .entry(format!("{ns}/{job}"))
                .or_default()
                .insert(p.metadata.uid.unwrap_or_default());
        }
    }
    let (mut lost, mut duplicated, mut over) = (0, 0, Vec::new());
    for job in burst {
        let want = job.pods as usize;
        let got = bound.get(&job.key()).copied().unwrap_or(0);
        lost += want.saturating_sub(got);
        duplicated += got.saturating_sub(want);
        if stored.get(&job.key()).map_or(0, BTreeSet::len) > want {
            over.push(job.key());
        }
    }
    let errors = kubelet.errors();
    let ok = lost == 0 && duplicated == 0 && over.is_empty() && not_succeeded.is_empty();
    Ok(json!({
        "ok": ok,
        "pods_lost": lost,
        "pods_duplicated": duplicated,
        "jobs_over_replicas": over,
        "jobs_not_succeeded": not_succeeded,
        "kubelet_errors": errors.len(),
        "kubelet_first_errors": errors.iter().take(5).collect::<Vec<_>>(),
    }))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}
