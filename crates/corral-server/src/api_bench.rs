//! `corral bench api`: the embedded cluster's speed and memory on this machine, as JSON.
//!
//! Starts the real server as a child process (`corral up` on a temporary data directory, a
//! free loopback port and a fake node of 8 GPUs), so that its memory is measured alone,
//! and measures through the same client the CLI uses:
//! - `idle_rss_mb`: the server's resident memory once it has opened, before any job;
//!   `standby_shims`: the shims it keeps started ahead of time, and their memory;
//! - `startup`: submit -> every replica running, per job (8 `sleep` replicas, one job at a
//!   time, 50 jobs: the p50 of 20 moved by up to 20% between two runs of the same idle
//!   server on a 2-core VM), on the idle server and again once `history` finished jobs
//!   are stored. The second time, a fresh idle server started beside it is measured in
//!   alternation, a job on each in turn (150 each), and the ratio is taken against it:
//!   measured minutes apart, two idle figures of the same server differed by up to 10%,
//!   more than the history's cost (the first idle figure's ratio is printed too). One
//!   start varies from 3 to 11 ms here, so the ratio comes with its 90% bootstrap
//!   interval: with 50 jobs each, it moved by +-15% between runs;
//! - `throughput`: 500 one-GPU, one-CPU `sleep 0.1` jobs submitted in one request on the 8 GPUs:
//!   jobs finished per second, beside the ideal (8 / 0.1 s = 80/s), and how long the
//!   request that accepted the 500 took;
//! - `history`: finished one-replica jobs run to completion (500 at a time) and kept,
//!   then the server's memory;
//! - `list`: one small namespace while the others hold the history (must not depend on
//!   it), and one namespace of `list_jobs` jobs;
//! - `submit`: sustained submissions at a target rate from several client threads
//!   (suspended jobs, so that no process starts), then a list that checks none was lost.
//!
//! Each figure has its target beside it (`targets`), checked against this run.
//!
//! The data directory is under `TMPDIR`. On ext4 without a journal (this project's VMs),
//! creating a file scans past every inode deleted in the last minute or more (the kernel's
//! `recently_deleted`); right after a run removed its 100,000 files, the next run's starts
//! measured 2-4 times slower (startup p50 25-45 ms against 10-14 ms). Run it on a file
//! system left alone for some minutes, or with `TMPDIR` on tmpfs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use corral_local::cluster::JobState;
use serde_json::{Value, json};

use crate::api_client::{Client, ClientError};

/// GPUs of the fake node the server is given.
const GPUS: u32 = 8;
/// Jobs of the throughput measurement, and how long each sleeps.
const THROUGHPUT_JOBS: usize = 500;
const THROUGHPUT_SLEEP_S: f64 = 0.1;
/// The CPU each throughput job asks for: a whole core, as a training replica would. At
/// 10m (1 ms per 100 ms CFS period) the job's own `exec` of `sleep`, about 3 ms of CPU on
/// a small VM, is throttled for two or three periods, and the figure would measure the
/// job's CPU limit, not how fast the cluster turns a GPU over.
const THROUGHPUT_CPU: &str = "1";
/// Jobs in the small namespace listed while the history lives elsewhere.
const SMALL_NAMESPACE_JOBS: usize = 10;

/// What to measure.
#[derive(Clone, Debug)]
pub struct ApiBenchOptions {
    /// The `corral` program that serves (`corral up`).
    pub server_program: PathBuf,
    /// Jobs for each submit -> running measurement.
    pub startup_jobs: usize,
    /// Jobs on each of the two servers measured in alternation (with history, idle
    /// alongside): the ratio of two p50s needs more samples than one p50.
    pub ratio_pairs: usize,
    /// Replicas per startup job.
    pub startup_replicas: u32,
    /// Whether to run the 500-job throughput measurement.
    pub throughput: bool,
    /// Target submissions per second.
    pub rate: u64,
    /// How long to sustain it.
    pub duration: Duration,
    /// Client threads submitting.
    pub clients: usize,
    /// Jobs of the namespace whose `list` is timed.
    pub list_jobs: usize,
    /// One-replica jobs run to completion and kept before the second startup measurement
    /// and the memory with history.
    pub history_jobs: usize,
}

impl ApiBenchOptions {
    /// The measurement the targets are set for.
    pub fn new(server_program: PathBuf) -> Self {
        ApiBenchOptions {
            server_program,
            startup_jobs: 50,
            ratio_pairs: 150,
            startup_replicas: 8,
            throughput: true,
            rate: 6000,
            duration: Duration::from_secs(5),
            clients: 8,
            list_jobs: 10_000,
            history_jobs: 20_000,
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// How far the ratio of two samples' p50s can be trusted: its 5th and 95th percentiles
/// over resamplings of both (bootstrap, 2,000 rounds, a fixed seed so that a run's
/// interval can be recomputed). `a` and `b` are sorted.
fn p50_ratio_interval(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(18);
    let mut resample = |from: &[f64]| -> f64 {
        let mut r: Vec<f64> = (0..from.len())
            .map(|_| from[rng.usize(..from.len())])
            .collect();
        r.sort_by(f64::total_cmp);
        percentile(&r, 50.0)
    };
    let mut ratios: Vec<f64> = (0..2000)
        .filter_map(|_| {
            let (pa, pb) = (resample(a), resample(b));
            (pb > 0.0).then(|| pa / pb)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    Some((
        round3(percentile(&ratios, 5.0)),
        round3(percentile(&ratios, 95.0)),
    ))
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A field of `/proc/<pid>/<file>` in KiB (0 where there is none).
fn proc_kb(pid: u32, file: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// KiB to MiB, one decimal.
fn mb(kb: f64) -> f64 {
    (kb / 1024.0 * 10.0).round() / 10.0
}

/// Resident memory of a process, in MiB (Linux; 0 elsewhere).
pub fn rss_mb_of(pid: u32) -> f64 {
    mb(proc_kb(pid, "status", "VmRSS:"))
}

/// What the resident memory is made of: the process's own memory (anonymous) and the
/// pages of its program and libraries it maps (file). The file part depends on the page
/// cache: a program just written (a fresh build) sits there in large folios, which the
/// kernel maps whole, and reads about 2 MB higher than the same program read from disk.
fn rss_parts_of(pid: u32) -> Value {
    json!({
        "anon_mb": mb(proc_kb(pid, "status", "RssAnon:")),
        "file_mb": mb(proc_kb(pid, "status", "RssFile:")),
    })
}

/// The server's standby shims (`corral-shim --standby`, children blocked on a pipe): how
/// many, and their memory beside the server's (resident, and proportional: shared pages
/// divided among the processes that map them).
fn standby_shims_of(server: u32) -> Value {
    let standby = corral_local::executor::standby::STANDBY_ARG.as_bytes();
    let pids: Vec<u32> = corral_local::executor::procfs::all()
        .into_iter()
        .filter(|p| p.ppid == server)
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == standby))
        })
        .map(|p| p.pid)
        .collect();
    json!({
        "count": pids.len(),
        "rss_mb": mb(pids.iter().map(|p| proc_kb(*p, "status", "VmRSS:")).sum()),
        "pss_mb": mb(pids.iter().map(|p| proc_kb(*p, "smaps_rollup", "Pss:")).sum()),
    })
}

fn job(name: &str, replicas: u32, gpus: u32, command: &str, suspend: bool) -> String {
    job_with_cpu(name, replicas, gpus, "10m", command, suspend)
}

fn job_with_cpu(
    name: &str,
    replicas: u32,
    gpus: u32,
    cpu: &str,
    command: &str,
    suspend: bool,
) -> String {
    let suspend = if suspend {
        "\n  runPolicy: {suspend: true}"
    } else {
        ""
    };
    format!(
        "apiVersion: corral.dev/v1alpha1\nkind: TrainingJob\nmetadata: {{name: {name}}}\nspec:\n  framework: pytorch\n  replicas:\n    worker:\n      count: {replicas}\n      restartPolicy: Never\n      resources: {{gpu: {gpus}, cpu: {cpu}, memory: 16Mi}}\n      template: {{command: {command}}}{suspend}\n"
    )
}

fn parked(name: &str) -> String {
    job(name, 1, 0, "[sleep, \"1\"]", true)
}

/// The server under test: `corral up` as a child process.
struct ServerProcess {
    child: Child,
    client: Client,
}

impl ServerProcess {
    fn start(program: &Path, dir: &Path) -> Result<ServerProcess, String> {
        let config = dir.join("corral.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: corral.dev/v1alpha1\nkind: CorralConfig\nnode: {{gpus: {GPUS}, gpuType: FAKE-GPU, cpu: \"64\", memory: 256Gi}}\n"
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        // A free port: bound, read and released (the server binds it a moment later).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let log = std::fs::File::create(dir.join("server.log"))
            .map_err(|e| format!("cannot create the server log: {e}"))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("cannot open the server log: {e}"))?;
        let child = Command::new(program)
            .arg("up")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| format!("cannot start {} up: {e}", program.display()))?;
        let mut server = ServerProcess {
            child,
            client: Client::new(&format!("127.0.0.1:{port}"), None),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.client.healthy() {
            if let Ok(Some(status)) = server.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                return Err(format!("the server exited ({status}): {log}"));
            }
            if Instant::now() > deadline {
                return Err("the server did not answer within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn rss_mb(&self) -> f64 {
        rss_mb_of(self.child.id())
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s.
    fn stop(mut self) {
        if let Ok(pid) = i32::try_from(self.child.id())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the benchmark; the JSON it returns is what `corral bench api` prints.
pub fn api_bench(options: &ApiBenchOptions) -> Result<Value, String> {
    let dir = std::env::temp_dir().join(format!(
        "corral-bench-api-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_millisecond()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let server = ServerProcess::start(&options.server_program, &dir);
    let result = match server {
        Ok(server) => {
            let result = run(options, &server, &dir);
            server.stop();
            result
        }
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn err(e: ClientError) -> String {
    e.to_string()
}

/// Waits until every job of a namespace has finished; fails on one that did not succeed.
fn wait_all_succeeded(client: &Client, namespace: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let listed = client.list(Some(namespace)).map_err(err)?;
        if listed.iter().all(|j| j.state.is_finished()) {
            return match listed.iter().find(|j| j.state != JobState::Succeeded) {
                Some(j) => Err(format!("job {namespace}/{} ended {}", j.name, j.state)),
                None => Ok(()),
            };
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the jobs of {namespace} did not finish within {} s",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Submit -> every replica running, per job, one job at a time (each deleted after).
#[derive(Default)]
struct Startup {
    /// Submit -> every replica running, sorted.
    all_running: Vec<f64>,
    /// The submit request alone, sorted: the part the store's size could touch.
    submit: Vec<f64>,
}

impl Startup {
    fn sorted(mut self) -> Startup {
        self.all_running.sort_by(f64::total_cmp);
        self.submit.sort_by(f64::total_cmp);
        self
    }
}

fn startup(client: &Client, o: &ApiBenchOptions, namespace: &str) -> Result<Startup, String> {
    let mut s = Startup::default();
    for i in 0..o.startup_jobs {
        startup_sample(client, o, namespace, i, &mut s)?;
    }
    Ok(s.sorted())
}

/// The same measurement on two servers at once, a sample on each in turn (the order
/// swapped every pair): on a shared VM the speed of the machine drifts over a run by more
/// than the difference measured, and alternating puts both under the same drift.
fn startup_alternating(
    a: &Client,
    b: &Client,
    o: &ApiBenchOptions,
    namespace: &str,
) -> Result<(Startup, Startup), String> {
    let (mut sa, mut sb) = (Startup::default(), Startup::default());
    for i in 0..o.ratio_pairs {
        if i % 2 == 0 {
            startup_sample(a, o, namespace, i, &mut sa)?;
            startup_sample(b, o, namespace, i, &mut sb)?;
        } else {
            startup_sample(b, o, namespace, i, &mut sb)?;
            startup_sample(a, o, namespace, i, &mut sa)?;
        }
    }
    Ok((sa.sorted(), sb.sorted()))
}

/// One job: submitted, polled until every replica runs, deleted and waited for.
fn startup_sample(
    client: &Client,
    o: &ApiBenchOptions,
    namespace: &str,
    i: usize,
    out: &mut Startup,
) -> Result<(), String> {
    let name = format!("startup-{i}");
    let t0 = Instant::now();
    client
        .submit(
            namespace,
            &job(&name, o.startup_replicas, 0, "[sleep, \"120\"]", false),
        )
        .map_err(err)?;
    out.submit.push(ms(t0.elapsed()));
    let deadline = t0 + Duration::from_secs(60);
    loop {
        // The namespace's list (one row, from the server's cache), not `describe`,
        // which reads the store: polled every millisecond, the observer must not take
        // the CPU the start it measures needs.
        let listed = client.list(Some(namespace)).map_err(err)?;
        let Some(s) = listed.iter().find(|j| j.name == name) else {
            return Err(format!(
                "startup job {name} is not listed after its submission"
            ));
        };
        if s.state == JobState::Running && s.replicas_ready == s.replicas_total {
            out.all_running.push(ms(t0.elapsed()));
            break;
        }
        if s.state.is_finished() || Instant::now() > deadline {
            return Err(format!(
                "startup job {name} did not reach Running with every replica (it is {}, {} of {} replicas ready)",
                s.state, s.replicas_ready, s.replicas_total
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    client.delete(namespace, &name).map_err(err)?;
    // The next sample starts on an idle server again: this job's eight replicas
    // stopped, their shims gone and their directories removed, not torn down while
    // the next job starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client.list(Some(namespace)).map_err(err)?.is_empty() {
        if Instant::now() > deadline {
            return Err(format!(
                "the job {namespace}/{name} was not removed within 60 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}

fn startup_json(o: &ApiBenchOptions, s: &Startup) -> Value {
    let samples = &s.all_running;
    json!({
        "jobs": samples.len(),
        "replicas_per_job": o.startup_replicas,
        "submit_to_all_running_p50_ms": percentile(samples, 50.0),
        "submit_to_all_running_p95_ms": percentile(samples, 95.0),
        "submit_to_all_running_max_ms": samples.last().copied().unwrap_or(0.0),
        "submit_request_p50_ms": percentile(&s.submit, 50.0),
    })
}

/// Submits documents in requests of `batch` jobs.
fn fill(
    client: &Client,
    namespace: &str,
    count: usize,
    batch: usize,
    make: impl Fn(usize) -> String,
) -> Result<(), String> {
    let mut done = 0;
    while done < count {
        let n = (count - done).min(batch);
        let text: Vec<String> = (done..done + n).map(&make).collect();
        client.submit(namespace, &text.join("---\n")).map_err(err)?;
        done += n;
    }
    Ok(())
}

/// Times `list` of one namespace a few times, parsed into rows as the CLI does; returns
/// the sorted times and the count.
fn time_list(client: &Client, namespace: &str) -> Result<(Vec<f64>, usize), String> {
    let mut times = Vec::new();
    let mut listed = 0;
    for _ in 0..7 {
        let t0 = Instant::now();
        listed = client.list(Some(namespace)).map_err(err)?.len();
        times.push(ms(t0.elapsed()));
    }
    times.sort_by(f64::total_cmp);
    Ok((times, listed))
}

/// Times the same list up to its last byte, unparsed: the server's share.
fn time_list_response(client: &Client, namespace: &str) -> Result<Vec<f64>, String> {
    let mut times = Vec::new();
    for _ in 0..7 {
        let t0 = Instant::now();
        client.list_text(namespace).map_err(err)?;
        times.push(ms(t0.elapsed()));
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn run(o: &ApiBenchOptions, server: &ServerProcess, dir: &Path) -> Result<Value, String> {
    let client = &server.client;
    // Let the first passes run (inventory, recovery) before measuring.
    std::thread::sleep(Duration::from_millis(500));
    let idle_rss_mb = server.rss_mb();
    let idle_rss_parts = rss_parts_of(server.child.id());
    let standby_shims = standby_shims_of(server.child.id());

    // 1. submit -> all replicas running, on the idle server.
    let startup_idle = startup(client, o, "startup-idle")?;

    // 2. throughput: 500 one-GPU sleep 0.1 jobs, one request, on 8 GPUs.
    let throughput = if o.throughput {
        let text: Vec<String> = (0..THROUGHPUT_JOBS)
            .map(|i| {
                job_with_cpu(
                    &format!("t-{i}"),
                    1,
                    1,
                    THROUGHPUT_CPU,
                    "[sleep, \"0.1\"]",
                    false,
                )
            })
            .collect();
        let t0 = Instant::now();
        client
            .submit("throughput", &text.join("---\n"))
            .map_err(err)?;
        let accepted = t0.elapsed();
        wait_all_succeeded(client, "throughput", Duration::from_secs(120))?;
        let elapsed = t0.elapsed().as_secs_f64();
        let ideal = f64::from(GPUS) / THROUGHPUT_SLEEP_S;
        Some(json!({
            "jobs": THROUGHPUT_JOBS,
            "gpus": GPUS,
            "sleep_s": THROUGHPUT_SLEEP_S,
            "cpu_per_job": THROUGHPUT_CPU,
            "batch_submit_ms": ms(accepted),
            "elapsed_s": round3(elapsed),
            "jobs_per_second": round3(THROUGHPUT_JOBS as f64 / elapsed),
            "ideal_jobs_per_second": ideal,
        }))
    } else {
        None
    };

    // 3. history: finished one-replica jobs, kept; run 500 at a time (a namespace each),
    // as a busy cluster runs them, so that what is measured after is what they leave.
    let history_started = Instant::now();
    let mut done = 0;
    while done < o.history_jobs {
        let n = (o.history_jobs - done).min(500);
        let namespace = format!("history-{}", done / 500);
        fill(client, &namespace, n, 500, |i| {
            job(&format!("h-{i}"), 1, 0, "[\"true\"]", false)
        })?;
        wait_all_succeeded(client, &namespace, Duration::from_secs(120))?;
        done += n;
    }
    let history_s = history_started.elapsed().as_secs_f64();
    // A few passes with nothing to do, so the memory is what the history keeps.
    std::thread::sleep(Duration::from_millis(1000));
    let history_rss_mb = server.rss_mb();

    // 4. submit -> running again, with the history stored, in alternation with a second
    // server started now, idle and empty: the ratio of the two is the history's cost.
    let reference_dir = dir.join("reference");
    std::fs::create_dir_all(&reference_dir)
        .map_err(|e| format!("cannot create {}: {e}", reference_dir.display()))?;
    let reference = ServerProcess::start(&o.server_program, &reference_dir)?;
    std::thread::sleep(Duration::from_millis(500));
    let alternated = startup_alternating(client, &reference.client, o, "startup-history");
    reference.stop();
    let (startup_history, startup_reference) = alternated?;

    // 5. list of a small namespace, with the history in the others.
    fill(client, "small", SMALL_NAMESPACE_JOBS, 500, |i| {
        parked(&format!("s-{i}"))
    })?;
    let (small_ms, small_listed) = time_list(client, "small")?;

    // 6. sustained submissions.
    let total = (o.rate as f64 * o.duration.as_secs_f64()).round() as u64;
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut threads = Vec::new();
    for _ in 0..o.clients.max(1) {
        let next = Arc::clone(&next);
        let client = client.clone();
        let rate = o.rate.max(1) as f64;
        threads.push(std::thread::spawn(move || {
            let mut latencies = Vec::new();
            let mut errors = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let t0 = Instant::now();
                match client.submit("load", &parked(&format!("load-{i}"))) {
                    Ok(_) => latencies.push(ms(t0.elapsed())),
                    Err(e) => errors.push(e.to_string()),
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for t in threads {
        let (l, e) = t
            .join()
            .map_err(|_| "a client thread panicked".to_string())?;
        latencies.extend(l);
        errors.extend(e);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let accepted = latencies.len();
    let stored = client.list(Some("load")).map_err(err)?.len();
    errors.sort();
    errors.dedup();

    // 7. list of one namespace of `list_jobs` jobs.
    fill(client, "list", o.list_jobs, 500, |i| {
        parked(&format!("l-{i}"))
    })?;
    let (list_ms, listed) = time_list(client, "list")?;
    let list_response_ms = time_list_response(client, "list")?;
    let rss_after_mb = server.rss_mb();
    let live_jobs = small_listed + stored + listed;

    let metric = |name: &str| -> Option<f64> {
        let text = client.metrics().ok()?;
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    let tick_ms = metric("corral_control_loop_tick_last_seconds").map(|s| (s * 1e6).round() / 1e3);
    let ticks = metric("corral_control_loop_ticks_total");

    let startup_idle_p50 = percentile(&startup_idle.all_running, 50.0);
    let startup_history_p50 = percentile(&startup_history.all_running, 50.0);
    let startup_reference_p50 = percentile(&startup_reference.all_running, 50.0);
    let ratio = |of: f64, to: f64| if to > 0.0 { round3(of / to) } else { 0.0 };
    let history_ratio = ratio(startup_history_p50, startup_reference_p50);
    let submitted_per_s = accepted as f64 / elapsed.max(1e-9);
    let jobs_per_s = throughput
        .as_ref()
        .and_then(|t| t.get("jobs_per_second"))
        .and_then(Value::as_f64);
    let full =
        o.history_jobs >= 20_000 && o.startup_replicas >= 8 && !startup_idle.all_running.is_empty();
    Ok(json!({
        "benchmark": "api",
        "server": o.server_program.display().to_string(),
        "idle_rss_mb": idle_rss_mb,
        "idle_rss_parts": idle_rss_parts,
        "standby_shims": standby_shims,
        "startup_idle": startup_json(o, &startup_idle),
        "throughput": throughput,
        "history": {
            "jobs": o.history_jobs,
            "seconds": round3(history_s),
            "rss_mb": history_rss_mb,
        },
        "startup_with_history": startup_json(o, &startup_history),
        // An idle, empty server measured in alternation with the one above.
        "startup_idle_alongside": startup_json(o, &startup_reference),
        // with_history / idle_alongside: the target's ratio, and the 90% interval of
        // that ratio over resamplings of both (how much of it is this run's noise).
        "startup_history_ratio": history_ratio,
        "startup_history_ratio_90_percent_interval":
            p50_ratio_interval(&startup_history.all_running, &startup_reference.all_running)
                .map(|(lo, hi)| [lo, hi]),
        // with_history / the first idle measurement, minutes earlier (drift included).
        "startup_history_ratio_to_first_idle": ratio(startup_history_p50, startup_idle_p50),
        "list_small_namespace": {
            "jobs": small_listed,
            "jobs_elsewhere": o.history_jobs + THROUGHPUT_JOBS,
            "p50_ms": percentile(&small_ms, 50.0),
        },
        "submit": {
            "target_per_second": o.rate,
            "clients": o.clients,
            "attempted": total,
            "accepted": accepted,
            "failed": total as usize - accepted,
            "stored": stored,
            "lost": accepted.saturating_sub(stored),
            "achieved_per_second": submitted_per_s.round(),
            "elapsed_s": round3(elapsed),
            "latency_p50_ms": percentile(&latencies, 50.0),
            "latency_p99_ms": percentile(&latencies, 99.0),
            "errors": errors.into_iter().take(5).collect::<Vec<_>>(),
        },
        "list": {
            "jobs": listed,
            "p50_ms": percentile(&list_ms, 50.0),
            "min_ms": list_ms.first().copied().unwrap_or(0.0),
            // Up to the response's last byte, not parsed: the server's share of p50_ms.
            "response_p50_ms": percentile(&list_response_ms, 50.0),
        },
        "rss_after_mb": rss_after_mb,
        // What a live (suspended) job costs: the growth since the history was measured,
        // over the jobs submitted since, all still held by the control plane.
        "live_jobs": {
            "count": live_jobs,
            "rss_kb_per_job": if live_jobs > 0 {
                round3((rss_after_mb - history_rss_mb).max(0.0) * 1024.0 / live_jobs as f64)
            } else {
                0.0
            },
        },
        "control_loop": {"last_tick_ms": tick_ms, "ticks": ticks},
        // The targets, checked against this run (`null`: this run was too small to say).
        "targets": {
            "throughput_at_least_70_jobs_per_s": jobs_per_s.map(|j| j >= 70.0),
            "startup_p50_at_most_10ms_idle": full.then_some(startup_idle_p50 <= 10.0),
            "startup_with_20000_finished_within_20_percent":
                full.then_some(history_ratio <= 1.2),
            "list_small_namespace_at_most_2ms":
                full.then_some(percentile(&small_ms, 50.0) <= 2.0),
            "list_10000_at_most_20ms": (listed >= 10_000)
                .then_some(percentile(&list_ms, 50.0) <= 20.0),
            "idle_rss_at_most_15mb": idle_rss_mb <= 15.0,
            "rss_with_20000_finished_at_most_60mb": full.then_some(history_rss_mb <= 60.0),
            "submissions_5000_per_s_8_clients_nothing_lost": (o.clients >= 8)
                .then_some(submitted_per_s >= 5000.0 && accepted == stored && accepted as u64 == total),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(from: f64, n: usize) -> Vec<f64> {
        (0..n).map(|i| from + i as f64 * 0.05).collect()
    }

    #[test]
    fn the_ratio_interval_holds_the_true_ratio_and_narrows_with_samples() {
        let a = spread(3.0, 150);
        let doubled: Vec<f64> = a.iter().map(|v| v * 2.0).collect();
        let Some((lo, hi)) = p50_ratio_interval(&doubled, &a) else {
            panic!("two samples give an interval");
        };
        assert!(lo <= 2.0 && 2.0 <= hi, "[{lo}, {hi}] holds 2");
        let Some((lo, hi)) = p50_ratio_interval(&a, &a) else {
            panic!("two samples give an interval");
        };
        assert!(lo < 1.0 && 1.0 < hi, "[{lo}, {hi}] holds 1");
        // A quarter of the samples over the same range: a wider interval.
        let few = spread(3.0, 38)
            .iter()
            .map(|v| 3.0 + (v - 3.0) * 4.0)
            .collect::<Vec<_>>();
        let Some((flo, fhi)) = p50_ratio_interval(&few, &few) else {
            panic!("two samples give an interval");
        };
        assert!(
            fhi - flo > hi - lo,
            "[{flo}, {fhi}] wider than [{lo}, {hi}]"
        );
        assert_eq!(p50_ratio_interval(&[], &a), None);
    }
}
