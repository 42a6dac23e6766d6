//! Installing Corral as deployed (CRDs, RBAC, the Kubeflow kinds) and the server's
//! acceptance of `corral crd` output.

use std::path::PathBuf;

use corral_kube::kubeflow;
use serde_json::{Value, json};

use crate::harness::{Env, fixture, raw, repo_root};
use crate::manifests::{apply_all, apply_file, apply_one, namespace, served};

pub(crate) async fn install(env: &Env) {
    namespace(env, "corral-system").await;
    apply_file(&env.admin, &repo_root().join("deploy/crds.yaml")).await;
    apply_file(&env.admin, &repo_root().join("deploy/rbac.yaml")).await;
    for plural in ["trainingjobs", "queues", "nodepools"] {
        served(&env.admin, "corral.dev", "v1alpha1", plural).await;
    }
    // Kubeflow's kinds as Corral serves them, and the RBAC of the integration; the
    // training operator's own PyTorchJob CRD when given (the alongside case runs on it).
    let real = std::env::var_os("KUBEFLOW_TRAINING_OPERATOR_CRDS").map(PathBuf::from);
    let text = std::fs::read_to_string(repo_root().join("deploy/kubeflow-crds.yaml"))
        .expect("deploy/kubeflow-crds.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("yaml");
    let docs = docs
        .into_iter()
        .filter(|d| !d.is_null())
        .filter(|d| real.is_none() || d["metadata"]["name"] != json!("pytorchjobs.kubeflow.org"))
        .collect();
    apply_all(&env.admin, docs).await;
    if let Some(dir) = &real {
        apply_file(&env.admin, &dir.join("pytorchjobs.yaml")).await;
        eprintln!("envtest: PyTorchJob CRD of Kubeflow's training operator installed");
    }
    apply_file(&env.admin, &repo_root().join("deploy/kubeflow-rbac.yaml")).await;
    // KServe's InferenceService as Corral serves it (`--kserve`), and its RBAC.
    apply_file(&env.admin, &repo_root().join("deploy/kserve-crds.yaml")).await;
    apply_file(&env.admin, &repo_root().join("deploy/kserve-rbac.yaml")).await;
    // A kind the group does not serve (an operator newer than its CRDs). kube-apiserver
    // v1.36.2 answers it, as a group that is not there at all, with the text `404 page not
    // found`, not a Status (see the fixture).
    let (code, body) = raw(
        &env.admin,
        "GET",
        "/apis/corral.dev/v1alpha1/namespaces/default/nosuchkinds",
        None,
    )
    .await
    .expect("call");
    assert_eq!(code, 404, "{body}");
    fixture("crd-kind-missing-404", code, &body);
    for k in &kubeflow::KINDS {
        served(&env.admin, kubeflow::GROUP, k.version, k.plural).await;
    }
    use corral_kube::kserve;
    served(&env.admin, kserve::GROUP, kserve::VERSION, kserve::PLURAL).await;
}

/// `corral crd` output is accepted by the server as is (server-side dry run).
pub(crate) async fn crd_output_dry_runs(env: &Env) {
    for crd in corral_api::crd::all_crds()
        .into_iter()
        .chain(kubeflow::crds::all_crds())
        .chain([corral_kube::kserve::crds::crd()])
    {
        apply_one(&env.admin, &crd, true)
            .await
            .unwrap_or_else(|e| panic!("dry run of {}: {e}", crd["metadata"]["name"]));
    }
}
