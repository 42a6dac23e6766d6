//! `corral up`: the whole control plane in one process (store, scheduler loop, local
//! executor, HTTP API, /metrics) until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use corral_local::{ClusterConfig, ClusterFileConfig};
use corral_server::ServerOptions;

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the store, logs and working files live (default: $CORRAL_DATA_DIR, else
    /// $XDG_DATA_HOME/corral, else ~/.local/share/corral).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Cluster configuration: NodePools, Queues, JobPriorityClasses and one CorralConfig
    /// (tokens, ports, node overrides), in YAML or JSON.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on. Listening beyond loopback needs API tokens in the config.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7443")]
    pub listen: SocketAddr,
    /// Control-loop period in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200, hide = true)]
    pub tick_ms: u64,
}

/// The default data directory.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CORRAL_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("corral");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/share/corral"),
        None => PathBuf::from(".corral"),
    }
}

/// The server options `corral up` runs with.
pub fn options(args: &UpArgs) -> Result<ServerOptions, String> {
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    std::fs::create_dir_all(&data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            data_dir.display()
        )
    })?;
    let file = match &args.config {
        Some(path) => {
            ClusterFileConfig::load(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => ClusterFileConfig::default(),
    };
    if !args.listen.ip().is_loopback() && file.settings.tokens.is_empty() {
        return Err(format!(
            "refusing to listen on {} without API tokens: anyone who can reach it could run \
             commands as you. Add tokens to the config (kind: CorralConfig, tokens: [{{token: \
             ..., namespace: ...}}]) or listen on 127.0.0.1",
            args.listen
        ));
    }
    let mut cluster = ClusterConfig::new(data_dir);
    cluster.file = file;
    let mut options = ServerOptions::new(cluster);
    options.listen = args.listen;
    options.tick_interval = std::time::Duration::from_millis(args.tick_ms.clamp(10, 10_000));
    Ok(options)
}

/// At most two malloc arenas for the server's threads. glibc gives threads that allocate
/// at the same time arenas of their own (up to 8 per core) and gives little of their freed
/// memory back: after 20,000 jobs had run, `corral bench api` measured the server at
/// 50-65 MB with the default and 44-48 MB with two, at the same submission rate.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets one of the allocator's tunables; called before the server's threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// `corral up`
pub fn run_up(args: &UpArgs) -> ExitCode {
    limit_malloc_arenas();
    let options = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let data_dir = options.cluster.data_dir.clone();
    let tokens = !options.cluster.file.settings.tokens.is_empty();
    // What `corral doctor` says, in one line, and which cgroup mode was chosen and why.
    let report = corral_local::doctor::examine(&data_dir, &options.cluster.file.settings);
    let cgroups = report
        .findings
        .iter()
        .find(|f| f.area == "cgroups")
        .map(|cg| cg.what.clone());
    // Printed once the server has said its own warnings too, so that the count is all of
    // them and a warning both make (NVML's absence) is printed once.
    let machine = move |server_warnings: &[String]| {
        let mut all = report.warnings();
        for w in server_warnings {
            if !report
                .findings
                .iter()
                .any(|f| w.contains(&f.what) || f.what.contains(w.as_str()))
            {
                all.push(w.clone());
            }
        }
        let tail = match all.len() {
            0 => "all OK".to_string(),
            1 => "1 warning:".to_string(),
            n => format!("{n} warnings:"),
        };
        eprintln!("{}; {tail}", report.one_line());
        for w in &all {
            eprintln!("  warning: {w}");
        }
        if let Some(cg) = &cgroups {
            eprintln!("  cgroups: {cg}");
        }
    };
    let mut machine = Some(machine);
    let result = corral_server::run_until_signal(options, |addr, warnings| {
        if let Some(say) = machine.take() {
            say(warnings);
        }
        eprintln!(
            "Corral is up at http://{addr} (data in {})",
            data_dir.display()
        );
        eprintln!(
            "  dashboard: http://{addr}/   (from another machine: docs/dashboard.md, ssh -L)"
        );
        eprintln!(
            "  API: http://{addr}/api/v1/   OpenAPI: http://{addr}/openapi.json   metrics: http://{addr}/metrics"
        );
        if tokens {
            eprintln!("  API tokens are required (--token or CORRAL_TOKEN).");
        }
        if addr.port() != corral_server::DEFAULT_PORT || !addr.ip().is_loopback() {
            eprintln!("  export CORRAL_SERVER=http://{addr}");
        }
        eprintln!(
            "  try: corral submit examples/quickstart/quickstart.yaml && corral logs quickstart -f"
        );
        eprintln!("Ctrl-C stops the server.");
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(say) = machine.take() {
                say(&[]);
            }
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
