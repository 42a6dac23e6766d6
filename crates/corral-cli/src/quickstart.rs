//! `corral quickstart`: starts the embedded cluster in a temporary data directory on a free
//! port, submits the zero-dependency quickstart job (examples/quickstart: 4 workers fit a
//! linear regression data-parallel, Python standard library only), shows its progress,
//! prints the job's final state and the script's result line, and exits 0 only if the job
//! succeeded and the fit was good.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use corral_local::ClusterConfig;
use corral_local::cluster::{JobDetails, JobState};
use corral_server::api_client::{Client, LogRequest};
use corral_server::{Server, ServerOptions};
use indicatif::{ProgressBar, ProgressStyle};

/// The training script, shipped inside the binary so that the quickstart runs anywhere.
pub const TRAIN_PY: &str = include_str!("../../../examples/quickstart/train.py");

#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// Worker replicas.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub workers: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Keep the temporary data directory (store, logs) and print where it is.
    #[arg(long)]
    pub keep: bool,
    /// Python interpreter the replicas run.
    #[arg(long, default_value = "python3")]
    pub python: String,
}

/// The job the quickstart submits.
pub fn job_yaml(workers: u32, python: &str, working_dir: &Path) -> String {
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    format!(
        "apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata:
  name: quickstart
spec:
  framework: pytorch
  replicas:
    worker:
      count: {workers}
      restartPolicy: Never
      resources: {{cpu: 100m, memory: 128Mi}}
      template:
        command: [{python}, train.py]
        workingDir: {dir}
  runPolicy:
    backoffLimit: 0
",
        python = quote(python),
        dir = quote(&working_dir.display().to_string()),
    )
}

fn temp_dir() -> Result<PathBuf, String> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let dir =
        std::env::temp_dir().join(format!("corral-quickstart-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The last `step N/M` the rank-0 log shows, and its `RESULT` line.
pub fn progress_of(log: &str) -> (Option<(u64, u64)>, Option<String>) {
    let mut step = None;
    let mut result = None;
    for line in log.lines() {
        if let Some(rest) = line.split("step ").nth(1)
            && let Some((n, rest)) = rest.split_once('/')
            && let Some(m) = rest.split_whitespace().next()
            && let (Ok(n), Ok(m)) = (n.parse(), m.parse())
        {
            step = Some((n, m));
        }
        if line.starts_with("RESULT ") {
            result = Some(line.to_string());
        }
    }
    (step, result)
}

fn rank0_log(client: &Client) -> String {
    let mut buf = Vec::new();
    let req = LogRequest {
        replica: Some("worker-0".into()),
        ..LogRequest::default()
    };
    match client.logs("default", "quickstart", &req, &mut buf) {
        Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
        Err(_) => String::new(),
    }
}

/// `corral quickstart`
pub fn run_quickstart(args: &QuickstartArgs) -> ExitCode {
    match quickstart(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn quickstart(args: &QuickstartArgs) -> Result<bool, String> {
    let python_ok = std::process::Command::new(&args.python)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !python_ok {
        return Err(format!(
            "the quickstart runs its workers with `{}`, which was not found: install Python 3 \
             (standard library only), or pass --python PATH",
            args.python
        ));
    }
    let dir = temp_dir()?;
    let result = run_in(args, &dir);
    if args.keep {
        eprintln!("Data directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn run_in(args: &QuickstartArgs, dir: &Path) -> Result<bool, String> {
    let work = dir.join("quickstart");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    std::fs::write(work.join("train.py"), TRAIN_PY)
        .map_err(|e| format!("cannot write the training script: {e}"))?;

    let mut options = ServerOptions::new(ClusterConfig::new(dir.join("data")));
    options.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let started = Instant::now();
    let server = Server::start(options)?;
    let client = Client::new(&server.url(), None);
    eprintln!(
        "Corral is up at {} (data in {})",
        server.url(),
        dir.display()
    );

    let submitted = client
        .submit("default", &job_yaml(args.workers, &args.python, &work))
        .map_err(|e| format!("submitting the quickstart job: {e}"))?;
    for s in &submitted {
        eprintln!(
            "Submitted trainingjob/{}: {} workers fit a linear regression data-parallel (pytorch env: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK)",
            s.name, args.workers
        );
    }

    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {elapsed:>4} {msg:<28} [{bar:30}] {pos}/{len} steps",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let details: JobDetails = loop {
        let d = client
            .describe("default", "quickstart")
            .map_err(|e| format!("watching the job: {e}"))?;
        let s = &d.summary;
        let msg = match s.state {
            JobState::Queued => format!(
                "Queued{}",
                d.pending_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            state => format!("{state} {}/{} replicas", s.replicas_ready, s.replicas_total),
        };
        bar.set_message(msg);
        if matches!(
            s.state,
            JobState::Running | JobState::Succeeded | JobState::Failed
        ) {
            let (step, _) = progress_of(&rank0_log(&client));
            if let Some((n, m)) = step {
                bar.set_length(m);
                bar.set_position(n);
            }
        }
        if s.state.is_finished() {
            break d;
        }
        if Instant::now() > deadline {
            bar.abandon();
            eprintln!(
                "The job did not finish within {}s; it is {}.",
                args.timeout, s.state
            );
            eprintln!("{}", crate::remote::describe_text(&d));
            let _ = client.delete("default", "quickstart");
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    bar.finish_and_clear();

    let log = rank0_log(&client);
    let (_, result) = progress_of(&log);
    let s = &details.summary;
    println!(
        "trainingjob/{} {} in {:.1}s: {}, {}",
        s.name,
        s.state,
        started.elapsed().as_secs_f64(),
        crate::output::plural(s.replicas_total, "replica"),
        crate::output::plural(s.restarts, "restart")
    );
    match &result {
        Some(line) => println!("{line}"),
        None => println!("(worker-0 printed no RESULT line)"),
    }
    let ok = s.state == JobState::Succeeded
        && result
            .as_deref()
            .is_some_and(|l| l.starts_with("RESULT ok"));
    if !ok {
        eprintln!("\n{}", crate::remote::describe_text(&details));
        for r in details
            .replicas
            .iter()
            .filter(|r| r.exit_code.is_some_and(|c| c != 0))
        {
            let mut buf = Vec::new();
            let req = LogRequest {
                replica: Some(r.name.clone()),
                ..LogRequest::default()
            };
            if client.logs("default", "quickstart", &req, &mut buf).is_ok() {
                let text = String::from_utf8_lossy(&buf);
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                eprintln!("--- last lines of {} ---", r.name);
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
    server.stop()?;
    Ok(ok)
}
