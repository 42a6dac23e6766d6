//! `corral up`: the whole control plane in one process (store, scheduler loop, local
//! executor, HTTP API, /metrics) until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use std::os::unix::fs::DirBuilderExt;

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
    /// Address to listen on. Listening beyond loopback needs API tokens in the config, and
    /// serves HTTPS (see --tls-cert).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7443")]
    pub listen: SocketAddr,
    /// Certificate (PEM, the chain) to serve HTTPS with; with --tls-key. Without them, a
    /// server listening beyond loopback makes a self-signed one at its first start, kept in
    /// the data directory (tls/), and prints its fingerprint for clients to pin.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP beyond loopback: API tokens then cross the network in the clear.
    /// Only for a network that is itself private and trusted (or a TLS proxy in front).
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    pub allow_plain_http_beyond_loopback: bool,
    /// When the server stops (Ctrl-C, SIGTERM), stop the replicas that still run (SIGTERM,
    /// then SIGKILL after the grace period). Without it they keep running, unwatched, and
    /// the next `corral up` on the same data directory re-adopts them.
    #[arg(long)]
    pub stop_replicas_on_exit: bool,
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
    // As root, tenants' replicas run as users of their own and must pass through the
    // directories above the data directory: root's home is closed to them.
    if running_as_root() {
        return PathBuf::from("/var/lib/corral");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/share/corral"),
        None => PathBuf::from(".corral"),
    }
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The server options `corral up` runs with.
pub fn options(args: &UpArgs) -> Result<ServerOptions, String> {
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    // Never readable by others, even for a moment (the cluster sets its final mode:
    // 0700, or 0711 where tenants pass through; directories made above it stay passable).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(&data_dir)
        .map_err(|e| {
            format!(
                "cannot create the data directory {}: {e}",
                data_dir.display()
            )
        })?;
    let file = match &args.config {
        Some(path) => {
            let file =
                ClusterFileConfig::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let isolated = matches!(
                corral_local::tenancy::isolation_here(&file.settings),
                corral_core::tenancy::Isolation::PerNamespace(_)
            );
            // Every namespace's token is in it: the server's alone.
            if let Some(warning) = corral_local::tenancy::check_config_file(
                path,
                !file.settings.tokens.is_empty(),
                isolated,
            )? {
                eprintln!("warning: {warning}");
            }
            file
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
    // HTTPS with a given pair, or beyond loopback (a self-signed pair unless given); plain
    // HTTP on loopback as always, and beyond it only when asked by name.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(corral_server::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ if args.listen.ip().is_loopback() || args.allow_plain_http_beyond_loopback => None,
        _ => {
            let names = corral_server::tls::names_for(args.listen.ip());
            let (files, made) = corral_server::tls::self_signed(&data_dir, &names)?;
            if made {
                eprintln!(
                    "Made a self-signed TLS certificate for {} in {}",
                    names.join(", "),
                    files.cert.display()
                );
            }
            Some(files)
        }
    };
    let mut cluster = ClusterConfig::new(data_dir);
    cluster.file = file;
    let mut options = ServerOptions::new(cluster);
    options.listen = args.listen;
    options.tls = tls;
    options.tick_interval = std::time::Duration::from_millis(args.tick_ms.clamp(10, 10_000));
    options.stop_replicas_on_exit = args.stop_replicas_on_exit;
    Ok(options)
}

/// `corral up`
pub fn run_up(args: &UpArgs) -> ExitCode {
    crate::programs::limit_malloc_arenas();
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
    // The cgroup mode chosen and whether tenants are walled off, said even when OK.
    let said: Vec<(&str, String)> = ["cgroups", "tenants"]
        .into_iter()
        .filter_map(|area| {
            let f = report.findings.iter().find(|f| f.area == area)?;
            Some((area, f.what.clone()))
        })
        .collect();
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
        for (area, what) in &said {
            eprintln!("  {area}: {what}");
        }
    };
    let mut machine = Some(machine);
    let stop_on_exit = options.stop_replicas_on_exit;
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let fingerprint = match &options.tls {
        Some(files) => match corral_server::tls::fingerprint_of_file(&files.cert) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let plain_beyond_loopback = options.tls.is_none() && !options.listen.ip().is_loopback();
    let result = corral_server::run_until_signal(options, |addr, warnings| {
        if let Some(say) = machine.take() {
            say(warnings);
        }
        eprintln!(
            "Corral is up at {scheme}://{addr} (data in {})",
            data_dir.display()
        );
        eprintln!(
            "  dashboard: {scheme}://{addr}/   (from another machine: docs/dashboard.md, ssh -L)"
        );
        eprintln!(
            "  API: {scheme}://{addr}/api/v1/   OpenAPI: {scheme}://{addr}/openapi.json   metrics: {scheme}://{addr}/metrics"
        );
        if tokens {
            eprintln!("  API tokens are required (--token or CORRAL_TOKEN).");
        }
        if let Some(f) = &fingerprint {
            eprintln!("  TLS certificate SHA-256 fingerprint: {f}");
            eprintln!(
                "  on each client: corral login --server {scheme}://HOST:{} --token TOKEN --fingerprint {f}",
                addr.port()
            );
        } else if addr.port() != corral_server::DEFAULT_PORT || !addr.ip().is_loopback() {
            eprintln!("  export CORRAL_SERVER={scheme}://{addr}");
        }
        if plain_beyond_loopback {
            eprintln!(
                "  warning: plain HTTP beyond loopback (--allow-plain-http-beyond-loopback): \
                 API tokens cross the network in the clear"
            );
        }
        eprintln!(
            "  try: corral submit examples/quickstart/quickstart.yaml --code examples/quickstart && corral logs quickstart -f"
        );
        if stop_on_exit {
            eprintln!(
                "Ctrl-C stops the server and its running replicas (--stop-replicas-on-exit)."
            );
        } else {
            eprintln!(
                "Ctrl-C stops the server; running replicas keep running, unwatched, until the \
                 next `corral up` here re-adopts them (--stop-replicas-on-exit stops them too)."
            );
        }
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
