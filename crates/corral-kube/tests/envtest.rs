//! The operator against a real kube-apiserver and etcd, envtest-style (as controller-runtime's
//! envtest): the binaries come from `KUBEBUILDER_ASSETS` (a directory holding `etcd` and
//! `kube-apiserver`, and optionally `kube-controller-manager` for garbage collection) or
//! from `TEST_ASSET_ETCD`, `TEST_ASSET_KUBE_APISERVER` and
//! `TEST_ASSET_KUBE_CONTROLLER_MANAGER`. Without them the test says it was skipped and why;
//! under `CI=true` (or `CORRAL_REQUIRE_ENVTEST=1`) it fails instead, and then needs
//! kube-controller-manager and `CORRAL_OPERATOR_BIN` too, so CI cannot pass by skipping.
//!
//! The server runs with RBAC and static tokens: an admin (`system:masters`), the operator's
//! ServiceAccount `corral-system/corral-operator` (bound by `deploy/rbac.yaml` and
//! `deploy/kubeflow-rbac.yaml` as applied) and an unprivileged user. The operator's passes run
//! in-process with the ServiceAccount's identity; nodes are Node objects with GPU labels and
//! capacity, and the kubelet is this test (it patches pod status and removes deleted pods).
//!
//! `KUBEFLOW_TRAINING_OPERATOR_CRDS` may name a directory with Kubeflow training operator's
//! own `pytorchjobs.yaml` CRD: the alongside case then runs on it (else on Corral's).
//! `tests/fixtures/real-api/*.json` hold the server's answers on the error paths; each run
//! checks them against the server, and a missing one fails the test. Only
//! `UPDATE_FIXTURES=1` writes them (captures them anew).
//!
//! The leadership case runs two operator processes on one Lease (`CORRAL_OPERATOR_BIN`, else
//! this test binary re-run as `operator_replica`), each with its own token of the
//! ServiceAccount, and reads the server's audit log of their writes (see leadership.rs).
//!
//! The crate root holds the one test and the order of its cases; the harness, the helpers
//! that stand in for nodes, kubelets and users, and the cases by topic are in tests/envtest/
//! (named with `#[path]`: a crate root's `mod` paths start at tests/).

#[path = "envtest/artifact_store.rs"]
mod artifact_store;
#[path = "envtest/defects.rs"]
mod defects;
#[path = "envtest/error_paths.rs"]
mod error_paths;
#[path = "envtest/harness.rs"]
mod harness;
#[path = "envtest/install.rs"]
mod install;
#[path = "envtest/jobs.rs"]
mod jobs;
#[path = "envtest/kserve.rs"]
mod kserve;
#[path = "envtest/kubeflow_jobs.rs"]
mod kubeflow_jobs;
#[path = "envtest/kubelet.rs"]
mod kubelet;
#[path = "envtest/leadership.rs"]
mod leadership;
#[path = "envtest/manifests.rs"]
mod manifests;
#[path = "envtest/operator_binary.rs"]
mod operator_binary;
#[path = "envtest/passes.rs"]
mod passes;
#[path = "envtest/pipelines.rs"]
mod pipelines;
#[path = "envtest/read_api.rs"]
mod read_api;
#[path = "envtest/serving.rs"]
mod serving;
#[path = "envtest/stored_pipelines.rs"]
mod stored_pipelines;
#[path = "envtest/trainingjobs.rs"]
mod trainingjobs;
#[path = "envtest/webhook.rs"]
mod webhook;

use crate::defects::defects_on_the_real_server;
use crate::error_paths::{error_paths, error_paths_before_crds};
use crate::harness::{Env, assets, prerequisite, required};
use crate::install::{crd_output_dry_runs, install};
use crate::jobs::{mpi_hostfile_and_ttl, pytorch_gang, suspend_resume};
use crate::kubeflow_jobs::{kubeflow_alongside, kubeflow_served};
use crate::kubelet::gpu_node;
use crate::leadership::{REPLICA_ARGS_ENV, two_replicas_paused_leader};
use crate::operator_binary::operator_binary;
use crate::passes::operator;
use crate::pipelines::pipeline_runs;
use crate::stored_pipelines::stored_pipeline_runs;
use crate::webhook::admission_webhook;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envtest() {
    let assets = match assets() {
        Ok(a) => a,
        Err(why) => {
            prerequisite(false, &why);
            return;
        }
    };
    // Without it the garbage collector's checks do not run: fine on a laptop, not in CI.
    assert!(
        assets.controller_manager.is_some() || !required(),
        "no kube-controller-manager binary: put it in KUBEBUILDER_ASSETS or set \
         TEST_ASSET_KUBE_CONTROLLER_MANAGER; required under CI=true or CORRAL_REQUIRE_ENVTEST=1"
    );
    let env = match Env::start(&assets, "corral-envtest").await {
        Ok(e) => e,
        Err(why) => panic!("envtest could not start its API server: {why}"),
    };
    eprintln!(
        "envtest: kube-apiserver at {} (garbage collector: {})",
        env.url, env.gc
    );

    error_paths_before_crds(&env).await;
    install(&env).await;
    error_paths(&env).await;
    for n in ["gpu-1", "gpu-2"] {
        gpu_node(&env, n).await;
    }
    let op = operator(&env);
    eprintln!("envtest: crd_output_dry_runs");
    crd_output_dry_runs(&env).await;
    eprintln!("envtest: pytorch_gang");
    pytorch_gang(&env, &op).await;
    eprintln!("envtest: mpi_hostfile_and_ttl");
    mpi_hostfile_and_ttl(&env, &op).await;
    eprintln!("envtest: suspend_resume");
    suspend_resume(&env, &op).await;
    eprintln!("envtest: pipeline_runs");
    pipeline_runs(&env, &op).await;
    eprintln!("envtest: pipeline_with_an_object_store");
    crate::artifact_store::pipeline_with_an_object_store(&env, &op).await;
    eprintln!("envtest: stored_pipeline_runs");
    stored_pipeline_runs(&env, &op).await;
    eprintln!("envtest: kubeflow_served");
    kubeflow_served(&env, &op).await;
    eprintln!("envtest: operator_binary");
    operator_binary(&env).await;
    eprintln!("envtest: kubeflow_alongside");
    kubeflow_alongside(&env, &op).await;
    eprintln!("envtest: defects_on_the_real_server");
    defects_on_the_real_server(&env, &op).await;
    eprintln!("envtest: two_replicas_paused_leader");
    two_replicas_paused_leader(&env).await;
    // Last: while it is registered, invalid jobs in its namespace are refused at create.
    eprintln!("envtest: admission_webhook");
    admission_webhook(&env).await;
}

/// Not a test of its own: with `CORRAL_ENVTEST_OPERATOR_ARGS` set (a JSON list of `corral`
/// arguments, `operator ...`) this process is an operator replica of the leadership case,
/// running `run_operator` as the `corral` binary does; without it, it does nothing.
#[test]
fn operator_replica() {
    #[derive(clap::Parser)]
    struct Corral {
        #[command(subcommand)]
        command: Sub,
    }
    #[derive(clap::Subcommand)]
    enum Sub {
        Operator(corral_kube::OperatorArgs),
    }
    let Some(args) = std::env::var_os(REPLICA_ARGS_ENV) else {
        return;
    };
    let args: Vec<String> =
        serde_json::from_str(&args.to_string_lossy()).expect("the replica's arguments");
    let Sub::Operator(args) =
        <Corral as clap::Parser>::parse_from(std::iter::once("corral".to_string()).chain(args))
            .command;
    corral_kube::run_operator(args).expect("the operator replica");
}
