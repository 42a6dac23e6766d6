//! `corral exec JOB REPLICA -- CMD...` for people (kubectl's habit), and `corral rsh HOST
//! CMD...`, the MPI launcher's rsh agent: mpirun runs it as it would run ssh, and it runs
//! the command (`orted`) inside the worker replica named HOST, through the same API.

use std::ffi::OsString;
use std::io::Read;
use std::process::ExitCode;

use clap::Args;
use corral_server::api_client::{Client, ExecCall};

use super::common_args::{ConnArgs, NamespaceArgs};
use super::print::fail;

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The job.
    #[arg(value_name = "JOB", add = super::completion::job_names())]
    pub job: String,
    /// The replica: `<role>-<index>` (e.g. `worker-1`) or its full name (`mnist-worker-1`).
    #[arg(value_name = "REPLICA")]
    pub replica: String,
    /// The command and its arguments, after `--`.
    #[arg(value_name = "COMMAND", required = true, last = true)]
    pub command: Vec<String>,
    /// Pass standard input to the command (read to its end first); without it the
    /// command reads nothing.
    #[arg(short = 'i', long)]
    pub stdin: bool,
    #[command(flatten)]
    pub namespace: NamespaceArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Exits with the command's own status, as kubectl exec and ssh do.
pub fn run_exec(args: &ExecArgs) -> ExitCode {
    let client = args.conn.client();
    let stdin = if args.stdin {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            return fail(&format!("cannot read standard input (-i): {e}"));
        }
        Some(text)
    } else {
        None
    };
    let namespace = args.namespace.resolve(&client);
    let call = ExecCall {
        namespace: &namespace,
        job: &args.job,
        replica: &args.replica,
        command: &args.command,
        stdin,
    };
    run(&client, &call)
}

fn run(client: &Client, call: &ExecCall<'_>) -> ExitCode {
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match client.exec(call, &mut out, &mut err) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(255)),
        Err(e) => fail(&e),
    }
}

/// `corral rsh HOST COMMAND...` (`OMPI_MCA_plm_rsh_agent`): as ssh, it joins the command's
/// words with spaces and has `/bin/sh -c` run them inside replica HOST of its own job
/// (`CORRAL_NAMESPACE`, `CORRAL_JOB`), calling `CORRAL_SERVER` with `CORRAL_TOKEN`, which
/// the embedded cluster gives every MPI launcher. Parsed by hand: mpirun's words (`-mca`)
/// are not this program's options. Exits 255 when it cannot run the command, as ssh does.
pub fn run_rsh(args: impl Iterator<Item = OsString>) -> i32 {
    let words: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let Some((host, command)) = words.split_first() else {
        eprintln!("corral rsh: usage: corral rsh HOST COMMAND... (mpirun's rsh agent)");
        return 255;
    };
    if command.is_empty() {
        eprintln!("corral rsh: no command for {host}; an interactive shell is not supported");
        return 255;
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(server), Some(namespace), Some(job)) = (
        var("CORRAL_SERVER"),
        var("CORRAL_NAMESPACE"),
        var("CORRAL_JOB"),
    ) else {
        eprintln!(
            "corral rsh: CORRAL_SERVER, CORRAL_NAMESPACE and CORRAL_JOB must be set: the \
             embedded cluster sets them in an MPI launcher"
        );
        return 255;
    };
    // mpirun may name the host with the job's domain (keep_fqdn_hostnames): the replica is
    // the first label.
    let replica = host.split('.').next().unwrap_or(host);
    // An HTTPS API is pinned by the fingerprint the cluster gave the launcher.
    let trust = var("CORRAL_FINGERPRINT")
        .map(corral_server::api_client::Trust::Fingerprint)
        .unwrap_or_default();
    let client = match Client::with_trust(&server, var("CORRAL_TOKEN").as_deref(), &trust) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("corral rsh: {e}");
            return 255;
        }
    };
    let argv = vec!["/bin/sh".to_string(), "-c".to_string(), command.join(" ")];
    let call = ExecCall {
        namespace: &namespace,
        job: &job,
        replica,
        command: &argv,
        stdin: None,
    };
    // A worker may still be starting (building its Python environment) when the launcher
    // runs mpirun: wait for it, as mpi-operator's ssh retries (ConnectionAttempts).
    let wait = var("CORRAL_RSH_WAIT_SECONDS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(RSH_WAIT_SECONDS);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait);
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    loop {
        match client.exec(&call, &mut out, &mut err) {
            Ok(code) => return code,
            // 409: the replica does not run yet (or prepares its command); a refused
            // connection: the server restarts. Anything else will not change by waiting.
            Err(e)
                if (e.status() == Some(409)
                    || matches!(e, corral_server::api_client::ClientError::Connect { .. }))
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            Err(e) => {
                eprintln!("corral rsh: cannot run the command in {replica}: {e}");
                return 255;
            }
        }
    }
}

/// How long `corral rsh` waits for a worker that does not run yet (CORRAL_RSH_WAIT_SECONDS).
const RSH_WAIT_SECONDS: u64 = 120;
