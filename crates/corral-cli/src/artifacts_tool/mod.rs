//! `corral artifacts`: what the Kubernetes operator runs in the pods it makes around a
//! pipeline's steps, whose artifacts are on a volume only pods mount: make a step's output
//! directories before it starts, and report hashes and texts of artifacts back through the
//! pod's termination message (`corral_api::artifacts_report`). Hidden: not for people.

pub mod store;

use std::path::PathBuf;
use std::process::ExitCode;

use corral_api::artifacts_report::ArtifactsReport;
use corral_kube::pipelines::ARTIFACTS_MOUNT;

use store::ArtifactStore;

#[derive(Clone, Debug, clap::Subcommand)]
pub enum ArtifactsCommand {
    /// Make each output directory, writable by the step; with `--store`, empty each output
    /// in the store and fetch each `--input` into the volume first.
    Prepare {
        #[command(flatten)]
        store: StoreArgs,
        /// An artifact the step reads (with `--store`).
        #[arg(long = "input", value_name = "PATH")]
        inputs: Vec<PathBuf>,
        dirs: Vec<PathBuf>,
    },
    /// Wait for SIGTERM (the kubelet's, once the step's containers ended), then upload
    /// each output directory to the store.
    Upload {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Report each path's content hash.
    Hash {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, default_value = "/dev/termination-log")]
        message_file: PathBuf,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Report each path's text, as a condition reads it.
    Read {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, default_value = "/dev/termination-log")]
        message_file: PathBuf,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

/// Where the artifacts are when they are not on the volume (the operator's
/// `--artifact-store`, with the namespace's root), and where the volume is.
#[derive(Clone, Debug, clap::Args)]
pub struct StoreArgs {
    /// The namespace's root in the object store (s3://BUCKET/PREFIX/NAMESPACE); credentials
    /// from the AWS_* variables.
    #[arg(long)]
    pub store: Option<String>,
    /// Where the pod's artifact volume is mounted (the paths named are under
    /// /corral/artifacts whatever this is).
    #[arg(long, default_value = ARTIFACTS_MOUNT)]
    pub volume: PathBuf,
}

impl StoreArgs {
    fn open(&self) -> Option<Result<ArtifactStore, String>> {
        let url = self.store.as_deref()?;
        // The store's HTTPS client takes the process's crypto provider (ring, as the
        // rest of Corral); installed once, a second install is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Some(ArtifactStore::open(url, &self.volume))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

/// Runs `work` on the store named by `args`.
fn with_store<T>(
    args: &StoreArgs,
    work: impl AsyncFnOnce(ArtifactStore) -> Result<T, String>,
) -> Result<T, String> {
    let store = match args.open() {
        Some(s) => s?,
        None => return Err("--store is required".into()),
    };
    runtime()?.block_on(work(store))
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {what}: {e}");
    ExitCode::FAILURE
}

pub fn run(what: &ArtifactsCommand) -> ExitCode {
    let (report, file) = match what {
        ArtifactsCommand::Prepare {
            store,
            inputs,
            dirs,
        } => {
            if store.store.is_none() {
                if !inputs.is_empty() {
                    return fail("--input", "only with --store (a claim has them already)");
                }
                return match corral_local::artifacts::prepare_for_pod(dirs) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail("making the output directories", e),
                };
            }
            return match with_store(store, async |s| s.prepare(inputs, dirs).await) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail("preparing the artifacts", e),
            };
        }
        ArtifactsCommand::Upload { store, dirs } => {
            return match upload_on_term(store, dirs) {
                Ok(n) => {
                    println!("uploaded {n} files of {}", list(dirs));
                    ExitCode::SUCCESS
                }
                Err(e) => fail("uploading the outputs", e),
            };
        }
        ArtifactsCommand::Hash {
            store,
            message_file,
            paths,
        } => {
            let report = match store.store {
                Some(_) => with_store(store, async |s| s.report(true, paths).await),
                None => corral_local::artifacts::report_hashes(paths)
                    .map_err(|e| format!("hashing {e}")),
            };
            (report, message_file)
        }
        ArtifactsCommand::Read {
            store,
            message_file,
            paths,
        } => {
            let report = match store.store {
                Some(_) => with_store(store, async |s| s.report(false, paths).await),
                None => corral_local::artifacts::report_texts(paths),
            };
            (report, message_file)
        }
    };
    let message = report.and_then(|r: ArtifactsReport| r.to_message());
    match message {
        Ok(m) => {
            println!("{m}");
            if let Err(e) = std::fs::write(file, &m) {
                eprintln!("error: writing {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The operator shows the failed pod's message: say why there.
            let _ = std::fs::write(file, &e);
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sidecar's life: nothing until the kubelet stops it (its step's containers have
/// ended), then the upload; its exit says whether it finished.
fn upload_on_term(args: &StoreArgs, dirs: &[PathBuf]) -> Result<usize, String> {
    with_store(args, async |s| {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        eprintln!(
            "corral artifacts: waiting for the step to end to upload {}",
            list(dirs)
        );
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        s.upload(dirs).await
    })
}
